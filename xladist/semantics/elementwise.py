"""Element-wise unary and binary ops (operation semantics: element-wise unary/binary
functions), with XLA:CPU's defined corner cases.

The interpreter registers these rules (interpreter/elementwise.py); the deadlock check folds control
values with the same ones (analysis/deadlock/fold.py), so it decides branches and trip
counts as the run does.

One table per arity: `UNARY[opcode][kind]` and `BINARY[opcode][kind]` give the numpy
function for an operand kind (pred, sint, uint, float, complex; dtypes.kind_of). One rule
per arity looks the function up, so a missing entry is an UnsupportedError that names
the op and the element type, never a wrong answer.

Numerics:
- floats narrower than f32 (f16, bf16, f8*) are computed in f32 and rounded back once,
  as XLA's CPU backend does; results are cast to the instruction's element type;
- integer arithmetic wraps (two's complement);
- x / 0 is -1 (all bits set) and x % 0 is x; INT_MIN / -1 is INT_MIN, INT_MIN % -1 is 0
  (elemental_ir_emitter.cc EmitIntegerDivide/EmitIntegerRemainder);
- a shift by an amount >= the bit width (read as unsigned) gives 0, or the sign fill for
  shift-right-arithmetic;
- maximum/minimum propagate NaN (as a canonical quiet NaN) and order -0 < +0;
- integer power: exponentiation by squaring over the low 6 bits of the exponent
  (x^64 == 1), and for a negative exponent 1 if x == 1, +-1 if x == -1 (by parity), else
  0 -- semantics/integer_power.py, which the cpu backend emits too;
- sign keeps -0 and NaN; round-nearest-afz rounds halves away from zero;
- complex exp, log, log1p, expm1, sqrt, rsqrt, sin, cos, tan, tanh, sign, abs, multiply,
  divide and power follow XLA:CPU's formulas step by step (semantics/complex_xla.py, the cpu
  backend runs the same code on registers), special values included.
All functions work on arrays of any shape (call_vectorized relies on it) and never
reference the instruction's dims.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..hlo.ir import describe
from .dtypes import (
    as_signed,
    as_unsigned,
    bits_of,
    compute_dtype,
    int_limits,
    kind_of,
    store_as,
    upcast,
)
from . import complex_xla, integer_power
from .order import float_max, float_min

_xla = complex_xla.unary  # XLA:CPU's complex formulas, shared with the cpu backend


# ---- float helpers ------------------------------------------------------------------
def _float_sign(x):
    # copysign(x != 0, x) keeps -0; NaN passes through with its sign.
    r = np.copysign((x != 0).astype(x.dtype), x)
    return np.where(np.isnan(x), x, r)


def _round_afz(x):
    t = np.trunc(x)
    step = (np.abs(x - t) >= 0.5).astype(x.dtype)  # False for inf/NaN (x - t is NaN)
    return t + np.copysign(step, x)


def _rsqrt(x):
    return 1 / np.sqrt(x)


def _logistic(x):
    import scipy.special  # lazily: importing scipy costs ~0.8 s per rank
    return scipy.special.expit(x)


def _erf(x):
    import scipy.special  # lazily, as above
    return scipy.special.erf(x)


def _complex_logistic(z):
    return 1 / (1 + np.exp(-z))


# ---- integer helpers ----------------------------------------------------------------
def _popcnt(x):
    return np.bitwise_count(as_unsigned(x))


def _clz(x):
    u = as_unsigned(x).astype(np.uint64)
    length = np.zeros(u.shape, np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        big = u >= np.uint64(1 << s)
        length += np.where(big, s, 0)
        u = np.where(big, u >> np.uint64(s), u)
    length += (u > 0)
    return bits_of(x.dtype) - length


def _int_sign(x):
    return np.sign(x)


def _uint_sign(x):
    return (x != 0)


def _identity(x):
    return x


def _imag_of_real(x):
    return np.zeros_like(x)


# Unary ops by operand kind. Results are cast to the instruction's element type, so
# abs of c64 (f32), is-finite (pred) and real/imag need no special casing here.
_F = "float"
_C = "complex"
_S = "sint"
_U = "uint"
_P = "pred"


def _fc(float_fn, complex_fn=None):
    """Transcendental defined for floats (and complex when numpy's branch cuts match)."""
    row = {_F: float_fn}
    if complex_fn is not None:
        row[_C] = complex_fn
    return row


UNARY: dict[str, dict[str, callable]] = {
    "abs": {_F: np.abs, _C: complex_xla.complex_abs, _S: np.abs, _U: _identity},
    "negate": {_F: np.negative, _C: np.negative, _S: np.negative, _U: np.negative},
    "sign": {_F: _float_sign, _C: _xla("sign"), _S: _int_sign, _U: _uint_sign},
    "not": {_P: np.logical_not, _S: np.invert, _U: np.invert},
    "popcnt": {_S: _popcnt, _U: _popcnt},
    "count-leading-zeros": {_S: _clz, _U: _clz},
    "ceil": {_F: np.ceil},
    "floor": {_F: np.floor},
    "round-nearest-afz": {_F: _round_afz},
    "round-nearest-even": {_F: np.rint},
    "is-finite": {_F: np.isfinite},
    "real": {_F: _identity, _C: np.real},
    "imag": {_F: _imag_of_real, _C: np.imag},
    "sqrt": _fc(np.sqrt, _xla("sqrt")),
    "rsqrt": _fc(_rsqrt, _xla("rsqrt")),
    "cbrt": _fc(np.cbrt),
    "exponential": _fc(np.exp, _xla("exponential")),
    "exponential-minus-one": _fc(np.expm1, _xla("exponential-minus-one")),
    "log": _fc(np.log, _xla("log")),
    "log-plus-one": _fc(np.log1p, _xla("log-plus-one")),
    "logistic": _fc(_logistic, _complex_logistic),
    "sine": _fc(np.sin, _xla("sine")),
    "cosine": _fc(np.cos, _xla("cosine")),
    "tan": _fc(np.tan, _xla("tan")),
    "tanh": _fc(np.tanh, _xla("tanh")),
    "erf": _fc(_erf),
    "acos": _fc(np.arccos, np.arccos),
    "acosh": _fc(np.arccosh, np.arccosh),
    "asin": _fc(np.arcsin, np.arcsin),
    "asinh": _fc(np.arcsinh, np.arcsinh),
    "atan": _fc(np.arctan, np.arctan),
    "atanh": _fc(np.arctanh, np.arctanh),
    "cosh": _fc(np.cosh, np.cosh),
    "sinh": _fc(np.sinh, np.sinh),
}


def _lookup(table, instr, dtype):
    kind = kind_of(dtype)
    fn = table[instr.opcode].get(kind)
    if fn is None:
        raise UnsupportedError(f"{describe(instr)}: {instr.opcode} is not defined for element "
                               f"type {instr.operands[0].shape.element_type} (XLA accepts it "
                               f"for: {', '.join(sorted(table[instr.opcode]))})")
    return fn


def unary_rule(instr, args, ev):
    x = args[0]
    fn = _lookup(UNARY, instr, x.dtype)
    return store_as(fn(upcast(x)), instr.shape.dtype)


# ---- binary -------------------------------------------------------------------------
def _int_divide(a, b):
    dt = a.dtype
    zero = b == 0
    if kind_of(dt) == "uint":
        q = a // np.where(zero, np.ones_like(b), b)
        return np.where(zero, np.array(int_limits(dt)[1], dt), q)
    lo, _ = int_limits(dt)
    ovf = (a == lo) & (b == -1)
    safe = np.where(zero | ovf, np.ones_like(b), b)
    q = a // safe
    # numpy floors; XLA (like C) truncates toward zero.
    q = q + ((q * safe != a) & ((a < 0) != (safe < 0))).astype(dt)
    q = np.where(ovf, np.array(lo, dt), q)
    return np.where(zero, np.array(-1, dt), q)


def _int_remainder(a, b):
    dt = a.dtype
    zero = b == 0
    if kind_of(dt) == "uint":
        r = a % np.where(zero, np.ones_like(b), b)
        return np.where(zero, a, r)
    lo, _ = int_limits(dt)
    ovf = (a == lo) & (b == -1)
    safe = np.where(zero | ovf, np.ones_like(b), b)
    r = np.fmod(a, safe)  # C remainder: sign of the dividend
    r = np.where(ovf, np.zeros_like(a), r)
    return np.where(zero, a, r)


def _shift_amount(a, b):
    n = bits_of(a.dtype)
    ub = as_unsigned(np.asarray(b))
    in_range = ub < n
    return in_range, np.where(in_range, ub, 0).astype(a.dtype)


def _shift_left(a, b):
    ok, s = _shift_amount(a, b)
    return np.where(ok, np.left_shift(a, s), np.zeros_like(a))


def _shift_right_logical(a, b):
    ok, s = _shift_amount(a, b)
    ua = as_unsigned(np.asarray(a))
    r = np.right_shift(ua, s.astype(ua.dtype)).view(a.dtype)
    return np.where(ok, r, np.zeros_like(a))


def _shift_right_arithmetic(a, b):
    ok, s = _shift_amount(a, b)
    sa = as_signed(np.asarray(a))
    r = np.right_shift(sa, s.astype(sa.dtype))
    fill = np.where(sa < 0, np.array(-1, sa.dtype), np.zeros_like(sa))
    r = np.where(ok, r, fill)
    # astype wraps like view, and stores sub-byte types canonically (high bits zero).
    return r.astype(a.dtype) if bits_of(a.dtype) < 8 else r.view(a.dtype)


def _umulhi64(a, b):
    m = np.uint64(0xFFFFFFFF)
    s = np.uint64(32)
    a_lo, a_hi, b_lo, b_hi = a & m, a >> s, b & m, b >> s
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (ll >> s) + (lh & m) + (hl & m)
    return hh + (lh >> s) + (hl >> s) + (mid >> s)


def _mulhi(a, b):
    dt = a.dtype
    n = bits_of(dt)
    signed = kind_of(dt) == "sint"
    if n < 64:
        wide = np.int64 if signed else np.uint64
        p = a.astype(wide) * b.astype(wide)
        return (p >> np.array(n, wide)).astype(dt)
    ua, ub = as_unsigned(np.asarray(a)), as_unsigned(np.asarray(b))
    hi = _umulhi64(ua, ub)
    if signed:  # signed high half from the unsigned one: subtract b if a<0, a if b<0
        hi = hi - np.where(a < 0, ub, np.uint64(0)) - np.where(b < 0, ua, np.uint64(0))
    return np.asarray(hi).view(dt)


def _float_power(x, y):
    # numpy computes x ** 0.5 as sqrt(x) when the exponent array is a scalar or a broadcast
    # (stride 0, as a broadcast instruction's value is): sqrt(-inf) = NaN and sqrt(-0) = -0
    # where pow(-inf, 0.5) = +inf and pow(-0, 0.5) = +0 (IEEE 754 and XLA:CPU).
    r = np.power(x, y)
    half = y == 0.5
    r = np.where(half & (x == -np.inf), np.inf, r)
    return np.where(half & (x == 0), 0, r).astype(r.dtype, copy=False)


def _complex(a, b):
    a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.shape, np.complex64 if a.dtype == np.float32 else np.complex128)
    out.real = a
    out.imag = b
    return out


def _int_max(a, b):
    return np.maximum(a, b)


def _int_min(a, b):
    return np.minimum(a, b)


BINARY: dict[str, dict[str, callable]] = {
    # pred arithmetic behaves like int8(x) OP int8(y) != 0 (EmitPredBinaryOp).
    "add": {_F: np.add, _C: np.add, _S: np.add, _U: np.add, _P: np.logical_or},
    "subtract": {_F: np.subtract, _C: np.subtract, _S: np.subtract, _U: np.subtract},
    "multiply": {_F: np.multiply, _C: complex_xla.binary("multiply"), _S: np.multiply,
                 _U: np.multiply, _P: np.logical_and},
    "divide": {_F: np.divide, _C: complex_xla.binary("divide"), _S: _int_divide, _U: _int_divide},
    "remainder": {_F: np.fmod, _S: _int_remainder, _U: _int_remainder},
    "power": {_F: _float_power, _C: complex_xla.binary("power"), _S: integer_power.power_array,
              _U: integer_power.power_array},
    "maximum": {_F: float_max, _C: complex_xla.binary("maximum"), _S: _int_max, _U: _int_max,
                _P: np.logical_or},
    "minimum": {_F: float_min, _C: complex_xla.binary("minimum"), _S: _int_min, _U: _int_min,
                _P: np.logical_and},
    "and": {_P: np.logical_and, _S: np.bitwise_and, _U: np.bitwise_and},
    "or": {_P: np.logical_or, _S: np.bitwise_or, _U: np.bitwise_or},
    "xor": {_P: np.logical_xor, _S: np.bitwise_xor, _U: np.bitwise_xor},
    "shift-left": {_S: _shift_left, _U: _shift_left},
    "shift-right-logical": {_S: _shift_right_logical, _U: _shift_right_logical},
    "shift-right-arithmetic": {_S: _shift_right_arithmetic, _U: _shift_right_arithmetic},
    "atan2": {_F: np.arctan2},
    "complex": {_F: _complex},
    "mulhi": {_S: _mulhi, _U: _mulhi},
}


def binary_rule(instr, args, ev):
    a, b = args
    fn = _lookup(BINARY, instr, a.dtype)
    if compute_dtype(a.dtype) != a.dtype:
        a, b = upcast(a), upcast(b)
    return store_as(fn(a, b), instr.shape.dtype)
