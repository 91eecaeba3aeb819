"""Element-wise operations on scalar registers: one emitter per opcode.

SCALAR_RULES[opcode](b, instr, values) -> value, where values are the operands'
compute-type registers (types.py) and instr gives the HLO element types.
Families are registered together from tables (float math from mathlib, integer
and float arithmetic from small dicts). Semantics follow XLA's operation
semantics: integer division by zero gives -1 (unsigned: all ones) and the
remainder the dividend; INT_MIN / -1 = INT_MIN; shifts by >= bit width give 0
(arithmetic: the sign); max/min propagate NaN; float->int converts saturate, NaN -> 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from ...errors import UnsupportedError
from ...hlo.shape import PrimitiveType
from . import intrinsics as intr
from ...semantics import complex_xla as cx, integer_power
from ...semantics.dtypes import E8M0_F64_LOWEST, reduces_in_f16
from . import lowbits, mathlib
from .types import (
    C64,
    C128,
    F32,
    F64,
    I1,
    compute_type,
    float_type_of_complex,
    is_narrow_float,
    round_to_storage,
)

SCALAR_RULES: dict[str, Callable] = {}


def _register(*names):
    def wrap(fn):
        for n in names:
            SCALAR_RULES[n] = fn
        return fn
    return wrap


def _etype(instr) -> PrimitiveType:
    return instr.shape.element_type


def _otype(instr, i=0) -> PrimitiveType:
    return instr.operands[i].shape.element_type


def _c(t, v):
    return ir.Constant(t, v)


def _finish(b, instr, v):
    """Round f16/bf16 results to storage precision (ops compute in f32)."""
    t = _etype(instr)
    return round_to_storage(b, t, v) if is_narrow_float(t) else v


def _int_bits(instr, i=None) -> int:
    """The HLO bit width of an integer result (or operand i): sub-byte integers sit
    in i8 registers, and shifts, clz and mulhi must see their real width."""
    t = _etype(instr) if i is None else _otype(instr, i)
    return lowbits.SUB_BYTE_INTS.get(t.name) or compute_type(t).width


def _unsupported(instr, what):
    raise UnsupportedError(f"instruction `{instr.name}` ({instr.opcode}): {what} is not "
                           "compiled by the cpu backend")


# ---- complex helpers ----------------------------------------------------------

def _re(b, z):
    return b.extract_value(z, 0)


def _im(b, z):
    return b.extract_value(z, 1)


def _cplx(b, re, im):
    t = C64 if re.type == F32 else C128
    z = b.insert_value(ir.Constant(t, ir.Undefined), re, 0)
    return b.insert_value(z, im, 1)


# ---- XLA's complex functions (semantics/complex_xla.py, shared with the interpreter) -----

class LlvmOps:
    """complex_xla's real-operation interface on LLVM registers of one float type."""

    def __init__(self, b, t):
        self.b, self.t = b, t
        self.bits = 32 if t == F32 else 64

    def c(self, v):
        return _c(self.t, v)

    def add(self, x, y):
        return self.b.fadd(x, y)

    def sub(self, x, y):
        return self.b.fsub(x, y)

    def mul(self, x, y):
        return self.b.fmul(x, y)

    def div(self, x, y):
        return self.b.fdiv(x, y)

    def neg(self, x):
        return self.b.fneg(x)

    def abs(self, x):
        return intr.fabs(self.b, x)

    def sqrt(self, x):
        return intr.sqrt(self.b, x)

    def exp(self, x):
        return _f("exponential")(self.b, x)

    def expm1(self, x):
        return _f("exponential-minus-one")(self.b, x)

    def log(self, x):
        return _f("log")(self.b, x)

    def log1p(self, x):
        return _f("log-plus-one")(self.b, x)

    def sin(self, x):
        return _f("sine")(self.b, x)

    def cos(self, x):
        return _f("cosine")(self.b, x)

    def pow(self, x, y):
        return mathlib.pow(self.b, x, y)

    def atan2(self, y, x):
        return mathlib.atan2(self.b, y, x)

    def copysign(self, mag, sign):
        return intr.copysign(self.b, mag, sign)

    def and_(self, x, y):
        return self.b.and_(x, y)

    def or_(self, x, y):
        return self.b.or_(x, y)

    def not_(self, x):
        return self.b.not_(x)

    def eq(self, x, y):
        return self.b.fcmp_ordered("==", x, y)

    def lt(self, x, y):
        return self.b.fcmp_ordered("<", x, y)

    def gt(self, x, y):
        return self.b.fcmp_ordered(">", x, y)

    def ge(self, x, y):
        return self.b.fcmp_ordered(">=", x, y)

    def le(self, x, y):
        return self.b.fcmp_ordered("<=", x, y)

    def isnan(self, x):
        return self.b.fcmp_unordered("uno", x, x)

    def select(self, cond, x, y):
        return self.b.select(cond, x, y)

    def max(self, x, y):
        return _float_max_min(self.b, True, x, y)

    def min(self, x, y):
        return _float_max_min(self.b, False, x, y)


class LlvmIntOps:
    """semantics/integer_power's interface on LLVM registers of one integer type, whose
    HLO width may be less than the register's (sub-byte types sit in i8 registers, bits
    above their width undefined): only the low `width` bits are read."""

    def __init__(self, b, t, width):
        self.b, self.t, self.width = b, t, width

    def c(self, v):
        return _c(self.t, v)

    def mul(self, x, y):
        return self.b.mul(x, y)

    def select(self, cond, x, y):
        return self.b.select(cond, x, y)

    def eq(self, x, y):
        diff = self.b.xor(x, y)
        if self.width < self.t.width:
            diff = self.b.and_(diff, _c(self.t, (1 << self.width) - 1))
        return self.b.icmp_unsigned("==", diff, _c(self.t, 0))

    def bit(self, y, i):
        if i >= self.width:
            return _c(I1, 0)
        return self.b.trunc(self.b.lshr(y, _c(self.t, i)), I1) if i else self.b.trunc(y, I1)

    def is_negative(self, y):
        return self.bit(y, self.width - 1)


def _xla_unary(b, op, z):
    re, im = _re(b, z), _im(b, z)
    return _cplx(b, *cx.UNARY[op](LlvmOps(b, re.type), re, im))


def _xla_binary(b, op, x, y):
    a = _re(b, x)
    return _cplx(b, *cx.BINARY[op](LlvmOps(b, a.type), a, _im(b, x), _re(b, y), _im(b, y)))


def _xla_abs(b, z):
    re = _re(b, z)
    return cx.abs_(LlvmOps(b, re.type), re, _im(b, z))


# ---- arithmetic ---------------------------------------------------------------

_FLOAT_BIN = {"add": "fadd", "subtract": "fsub", "multiply": "fmul", "divide": "fdiv",
              "remainder": "frem"}
_INT_BIN = {"add": "add", "subtract": "sub", "multiply": "mul"}


@_register("add", "subtract", "multiply")
def _arith(b, instr, v):
    t = _etype(instr)
    x, y = v
    if t.is_complex:
        if instr.opcode == "multiply":
            return _xla_binary(b, "multiply", x, y)
        op = getattr(b, _FLOAT_BIN[instr.opcode])
        return _cplx(b, op(_re(b, x), _re(b, y)), op(_im(b, x), _im(b, y)))
    if t.is_float:
        return _finish(b, instr, getattr(b, _FLOAT_BIN[instr.opcode])(x, y))
    if t.name == "pred":
        return {"add": b.or_, "subtract": b.xor, "multiply": b.and_}[instr.opcode](x, y)
    return getattr(b, _INT_BIN[instr.opcode])(x, y)


@_register("divide", "remainder")
def _div_rem(b, instr, v):
    t = _etype(instr)
    x, y = v
    div = instr.opcode == "divide"
    if t.is_complex:
        if not div:
            _unsupported(instr, "complex remainder")
        return _xla_binary(b, "divide", x, y)
    if t.is_float:
        return _finish(b, instr, b.fdiv(x, y) if div else b.frem(x, y))
    it = x.type
    zero, one = _c(it, 0), _c(it, 1)
    y_zero = b.icmp_unsigned("==", y, zero)
    if t.kind == "uint" or t.name == "pred":
        safe_y = b.select(y_zero, one, y)
        q = b.udiv(x, safe_y) if div else b.urem(x, safe_y)
        return b.select(y_zero, _c(it, -1) if div else x, q)
    # Signed: guard /0 and INT_MIN / -1 (both trap on x86).
    int_min = _c(it, -(1 << (it.width - 1)))
    overflow = b.and_(b.icmp_signed("==", x, int_min), b.icmp_signed("==", y, _c(it, -1)))
    bad = b.or_(y_zero, overflow)
    safe_y = b.select(bad, one, y)
    q = b.sdiv(x, safe_y) if div else b.srem(x, safe_y)
    if div:
        return b.select(y_zero, _c(it, -1), b.select(overflow, int_min, q))
    return b.select(y_zero, x, b.select(overflow, zero, q))


def _float_max_min(b, is_max: bool, x, y):
    """XLA maximum / minimum of floats as semantics/order.py's float_max / float_min
    (the interpreter's): +0 > -0, and a NaN operand gives the canonical quiet NaN.
    llvm.maximum alone returns a NaN whose sign and payload vary (max(NaN, -NaN) gave -NaN
    on x86), so the two backends differed in the bits; canonical_nan keeps it one rule.
    A reduction's chain may take llvm.maximum alone for its steps and canonical_nan once
    at its end (codegen/lanes.py raw_step): a NaN stays a NaN through every step."""
    return canonical_nan((intr.maximum if is_max else intr.minimum)(b, x, y), b)


def canonical_nan(v, b):
    """v, but the canonical quiet NaN for any NaN (scalar or lane-wise)."""
    return b.select(b.fcmp_unordered("uno", v, v), _c(v.type, math.nan), v)


@_register("maximum", "minimum")
def _max_min(b, instr, v):
    t = _etype(instr)
    x, y = v
    is_max = instr.opcode == "maximum"
    if t.is_float:
        return _float_max_min(b, is_max, x, y)
    if t.is_complex:
        return _xla_binary(b, instr.opcode, x, y)
    signed = t.kind == "sint"
    op = (">" if is_max else "<")
    cmp = b.icmp_signed(op, x, y) if signed else b.icmp_unsigned(op, x, y)
    return b.select(cmp, x, y)


@_register("power")
def _power(b, instr, v):
    t = _etype(instr)
    x, y = v
    if t.is_float:
        return _finish(b, instr, mathlib.pow(b, x, y))
    if t.is_complex:
        return _xla_binary(b, "power", x, y)
    return integer_power.power(LlvmIntOps(b, x.type, _int_bits(instr)), x, y)


@_register("atan2")
def _atan2(b, instr, v):
    if not _etype(instr).is_float:
        _unsupported(instr, f"atan2 of {_etype(instr)}")
    return _finish(b, instr, mathlib.atan2(b, v[0], v[1]))


@_register("and", "or", "xor")
def _bitwise(b, instr, v):
    return {"and": b.and_, "or": b.or_, "xor": b.xor}[instr.opcode](v[0], v[1])


@_register("not")
def _not(b, instr, v):
    return b.not_(v[0])


@_register("shift-left", "shift-right-logical", "shift-right-arithmetic")
def _shift(b, instr, v):
    x, y = v
    it = x.type
    width = _int_bits(instr)
    if width < it.width:  # sub-byte: shift the value's own bits (lowbits.py)
        y = b.and_(y, _c(it, (1 << width) - 1))
        if instr.opcode == "shift-right-logical":
            x = b.and_(x, _c(it, (1 << width) - 1))
        elif instr.opcode == "shift-right-arithmetic":
            x = lowbits.wrap_int(b, "s" + _etype(instr).name[1:], x)
    too_big = b.icmp_unsigned(">=", y, _c(it, width))
    safe = b.select(too_big, _c(it, 0), y)
    if instr.opcode == "shift-left":
        return b.select(too_big, _c(it, 0), b.shl(x, safe))
    if instr.opcode == "shift-right-logical":
        return b.select(too_big, _c(it, 0), b.lshr(x, safe))
    fill = b.ashr(x, _c(it, it.width - 1))
    return b.select(too_big, fill, b.ashr(x, safe))


@_register("mulhi")
def _mulhi(b, instr, v):
    x, y = v
    it = x.type
    wide = ir.IntType(it.width * 2)
    ext = b.sext if _etype(instr).kind == "sint" else b.zext
    p = b.mul(ext(x, wide), ext(y, wide))
    return b.trunc(b.lshr(p, _c(wide, _int_bits(instr))), it)


@_register("complex")
def _complex(b, instr, v):
    return _cplx(b, v[0], v[1])


@_register("real", "imag")
def _real_imag(b, instr, v):
    if not _otype(instr).is_complex:
        return v[0] if instr.opcode == "real" else _c(v[0].type, 0.0)
    return (_re if instr.opcode == "real" else _im)(b, v[0])


# ---- unary --------------------------------------------------------------------

@_register("negate")
def _negate(b, instr, v):
    t = _etype(instr)
    x = v[0]
    if t.is_complex:
        return _cplx(b, b.fneg(_re(b, x)), b.fneg(_im(b, x)))
    return b.fneg(x) if t.is_float else b.neg(x)


@_register("abs")
def _abs(b, instr, v):
    t = _otype(instr)
    x = v[0]
    if t.is_complex:
        return _xla_abs(b, x)
    if t.is_float:
        return intr.fabs(b, x)
    if t.kind == "uint":
        return x
    return b.select(b.icmp_signed("<", x, _c(x.type, 0)), b.neg(x), x)


@_register("sign")
def _sign(b, instr, v):
    t = _etype(instr)
    x = v[0]
    if t.is_float:
        one = _c(x.type, 1.0)
        s = b.select(b.fcmp_ordered(">", x, _c(x.type, 0.0)), one,
                     b.select(b.fcmp_ordered("<", x, _c(x.type, 0.0)), b.fneg(one), x))
        return s
    if t.is_complex:
        return _xla_unary(b, "sign", x)
    it = x.type
    if t.kind == "uint":
        return b.zext(b.icmp_unsigned("!=", x, _c(it, 0)), it)
    pos = b.zext(b.icmp_signed(">", x, _c(it, 0)), it)
    neg = b.zext(b.icmp_signed("<", x, _c(it, 0)), it)
    return b.sub(pos, neg)


_ROUNDING = {"ceil": "ceil", "floor": "floor", "round-nearest-afz": "round",
             "round-nearest-even": "roundeven"}


@_register(*_ROUNDING)
def _round(b, instr, v):
    if not _etype(instr).is_float:
        return v[0]
    return _finish(b, instr, intr.intrinsic(b, _ROUNDING[instr.opcode], [v[0]]))


@_register("is-finite")
def _is_finite(b, instr, v):
    x = v[0]
    return b.fcmp_ordered("<", intr.fabs(b, x), _c(x.type, math.inf))


def _own_bits(b, instr, x):
    """x with the bits above a sub-byte type's width cleared."""
    width = _int_bits(instr)
    return x if width == x.type.width else b.and_(x, _c(x.type, (1 << width) - 1))


@_register("popcnt")
def _popcnt(b, instr, v):
    return intr.intrinsic(b, "ctpop", [_own_bits(b, instr, v[0])])


@_register("count-leading-zeros")
def _clz(b, instr, v):
    x = _own_bits(b, instr, v[0])
    n = intr.intrinsic(b, "ctlz", [x, _c(I1, 0)])
    return b.sub(n, _c(x.type, x.type.width - _int_bits(instr)))


@_register("copy")
def _copy(b, instr, v):
    return v[0]


def _complex_unary(b, instr, x):
    op = instr.opcode
    if op in cx.UNARY:
        return _xla_unary(b, op, x)
    if op in ("sinh", "cosh"):
        # XLA:CPU rejects complex sinh/cosh (jax lowers them to exp etc.); kept as the
        # interpreter computes them (numpy): sinh(a+ib) = sinh a cos b + i cosh a sin b, ...
        return _COMPLEX_HYPERBOLIC[op](b, _re(b, x), _im(b, x))
    _unsupported(instr, f"complex {op}")


def _f(name):
    return mathlib.FLOAT_FUNCTIONS[name]


def _csinh(b, a, y):
    return _cplx(b, b.fmul(_f("sinh")(b, a), _f("cosine")(b, y)),
                 b.fmul(_f("cosh")(b, a), _f("sine")(b, y)))


def _ccosh(b, a, y):
    return _cplx(b, b.fmul(_f("cosh")(b, a), _f("cosine")(b, y)),
                 b.fmul(_f("sinh")(b, a), _f("sine")(b, y)))


_COMPLEX_HYPERBOLIC = {"sinh": _csinh, "cosh": _ccosh}


@_register(*mathlib.FLOAT_FUNCTIONS)
def _float_fn(b, instr, v):
    t = _etype(instr)
    if t.is_complex:
        return _complex_unary(b, instr, v[0])
    if not t.is_float:
        _unsupported(instr, f"{instr.opcode} of {t}")
    return _finish(b, instr, mathlib.FLOAT_FUNCTIONS[instr.opcode](b, v[0]))


# ---- compare, select, clamp ---------------------------------------------------

_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def compare_values(b, t: PrimitiveType, direction: str, x, y, cmp_type: str | None = None):
    """XLA compare: ordered for floats except NE; TOTALORDER via integer keys."""
    op = _CMP[direction]
    if t.is_complex:
        eq = b.and_(b.fcmp_ordered("==", _re(b, x), _re(b, y)),
                    b.fcmp_ordered("==", _im(b, x), _im(b, y)))
        return eq if direction == "EQ" else b.not_(eq)
    if t.is_float:
        if cmp_type == "TOTALORDER":
            return b.icmp_signed(op, _total_order_key(b, t, x), _total_order_key(b, t, y))
        if direction == "NE":
            return b.fcmp_unordered("!=", x, y)
        return b.fcmp_ordered(op, x, y)
    if t.kind == "sint":
        return b.icmp_signed(op, x, y)
    return b.icmp_unsigned(op, x, y)


def _total_order_key(b, t, x):
    # Order -nan < -inf < ... < -0 < +0 < ... < inf < nan by flipping the
    # magnitude bits of negative numbers (sign-magnitude -> two's complement).
    if t.name in lowbits.SMALL_FLOATS:
        # Keys from the storage pattern, as the interpreter orders them (fnuz NaN
        # 0x80 is -NaN, the lowest; f8e8m0fnu has no sign bit).
        return lowbits.total_order_key(b, lowbits.SMALL_FLOATS[t.name], x)
    ft = x.type
    it = ir.IntType(64 if ft == F64 else 32)
    if t.name in ("f16", "bf16"):
        # Compare at storage precision: f32 keys order exactly like 16-bit ones.
        pass
    bits = b.bitcast(x, it)
    mask = b.lshr(b.ashr(bits, _c(it, it.width - 1)), _c(it, 1))
    return b.xor(bits, mask)


@_register("compare")
def _compare(b, instr, v):
    return compare_values(b, _otype(instr), instr.attrs["direction"], v[0], v[1],
                          instr.attrs.get("type"))


@_register("select")
def _select(b, instr, v):
    return b.select(v[0], v[1], v[2])


@_register("clamp")
def _clamp(b, instr, v):
    lo, x, hi = v
    t = _etype(instr)
    if t.is_float:
        # min(max(x, lo), hi) with the rule once: a NaN stays a NaN through both ops
        return canonical_nan(intr.minimum(b, intr.maximum(b, x, lo), hi), b)
    signed = t.kind == "sint"
    gt = (lambda a, c: b.icmp_signed(">", a, c)) if signed else \
        (lambda a, c: b.icmp_unsigned(">", a, c))
    x = b.select(gt(lo, x), lo, x)
    return b.select(gt(x, hi), hi, x)


# ---- conversions --------------------------------------------------------------

def convert_value(b, src: PrimitiveType, dst: PrimitiveType, x):
    """XLA convert: ints wrap, float->int saturates (NaN -> 0), x->pred is x != 0."""
    if src == dst:
        return x  # the interpreter returns the array as it is (NaN payloads included)
    st, dt = compute_type(src), compute_type(dst)
    if src.is_complex:
        if dst.is_complex:
            ft = float_type_of_complex(dst)
            re, im = _re(b, x), _im(b, x)
            conv = (lambda z: b.fpext(z, ft)) if ft == F64 and re.type == F32 else \
                (lambda z: b.fptrunc(z, ft)) if ft == F32 and re.type == F64 else (lambda z: z)
            return _cplx(b, conv(re), conv(im))
        x = _re(b, x)
        src = {"c64": _PT_F32, "c128": _PT_F64}[src.name]
        st = x.type
    if dst.is_complex:
        ft = float_type_of_complex(dst)
        re = convert_value(b, src, _PT_F32 if ft == F32 else _PT_F64, x)
        return _cplx(b, re, _c(ft, 0.0))
    if dst.name == "pred":
        if src.is_float:
            return b.fcmp_unordered("!=", x, _c(st, 0.0))
        if src.name == "pred":
            return x
        return b.icmp_unsigned("!=", x, _c(st, 0))
    if src.name == "pred":
        return b.uitofp(x, dt) if dst.is_float else b.zext(x, dt)
    if src.is_float and dst.is_float:
        if src.name in lowbits.SMALL_FLOATS:
            x = lowbits.canonical_nan(b, lowbits.SMALL_FLOATS[src.name], x)
        if st == dt:
            v = x
        elif dt == F64:
            v = b.fpext(x, dt)
        elif dst.name == "f16":
            # One rounding f64 -> f16, as numpy does (not through f32).
            return b.fpext(b.fptrunc(x, ir.HalfType()), dt)
        elif st == F64 and dst.name in lowbits.SMALL_FLOATS:
            # f64 -> f8/f4: rounded once, as XLA does (semantics/dtypes.store_as)
            v = f64_to_f32_odd(b, x)
            if dst.name == "f8e8m0fnu":
                below = b.fcmp_ordered("<", x, _c(F64, E8M0_F64_LOWEST))
                v = b.select(below, _c(F32, math.nan), v)
        else:
            # f64 -> bf16 goes through f32, as XLA's and ml_dtypes' do.
            v = b.fptrunc(x, dt)
        return round_to_storage(b, dst, v) if is_narrow_float(dst) else v
    if src.is_float:
        name = "fptosi.sat" if dst.kind == "sint" else "fptoui.sat"
        if dst.name in lowbits.SUB_BYTE_INTS:  # saturate to the type's own range
            narrow = ir.IntType(lowbits.SUB_BYTE_INTS[dst.name])
            v = intr.intrinsic(b, name, [x], narrow, narrow, st)
            return b.sext(v, dt) if dst.kind == "sint" else b.zext(v, dt)
        return intr.intrinsic(b, name, [x], dt, dt, st)
    if dst.is_float:
        v = b.sitofp(x, dt) if src.kind == "sint" else b.uitofp(x, dt)
        return round_to_storage(b, dst, v) if is_narrow_float(dst) else v
    if st.width == dt.width:
        return x
    if st.width > dt.width:
        return b.trunc(x, dt)
    return b.sext(x, dt) if src.kind == "sint" else b.zext(x, dt)


def f64_to_f32_odd(b, x):
    """An f64 register rounded to f32 by round-to-odd (semantics/dtypes.f64_to_f32_odd,
    where the why is): toward zero, the last bit set when any bit was lost."""
    from .types import I32
    y = b.fptrunc(x, F32)
    back = b.fpext(y, F64)
    inexact = b.fcmp_ordered("!=", back, x)  # (false for NaN; infinities are exact)
    # rounded up in magnitude: above x where x > 0, below it where x < 0
    away = b.and_(inexact, b.xor(b.fcmp_ordered(">", back, x),
                                 b.fcmp_ordered("<", x, _c(F64, 0.0))))
    bits = b.bitcast(y, I32)
    bits = b.select(away, b.sub(bits, _c(I32, 1)), bits)
    bits = b.or_(bits, b.zext(inexact, I32))
    return b.bitcast(bits, F32)


from ...hlo.shape import PRIMITIVE_TYPES as _PT

_PT_F32, _PT_F64 = _PT["f32"], _PT["f64"]


@_register("convert")
def _convert(b, instr, v):
    return convert_value(b, _otype(instr), _etype(instr), v[0])


def bitcast_value(b, src: PrimitiveType, dst: PrimitiveType, x):
    """Same-width bit reinterpretation between compute-type registers."""
    from .types import I16, I32, I64, bf16_bits_of, bf16_to_f32
    if src.bits != dst.bits:
        raise UnsupportedError(f"bitcast-convert {src}->{dst} changes the element width")

    def to_bits(t, v):
        if t.name == "pred":
            return b.zext(v, ir.IntType(8))
        if t.name in lowbits.SMALL_FLOATS:
            return lowbits.encode(b, lowbits.SMALL_FLOATS[t.name], v, keep_payload=True)
        if t.name in lowbits.SUB_BYTE_INTS:
            return lowbits.int_storage(b, t.name, v)
        if t.name == "bf16":
            return bf16_bits_of(b, v)
        if t.name == "f16":
            return b.bitcast(b.fptrunc(v, ir.HalfType()), I16)
        if t.is_float:
            return b.bitcast(v, {32: I32, 64: I64}[t.bits])
        if t.is_complex:
            raise UnsupportedError("bitcast-convert of complex values is not compiled")
        return v

    def from_bits(t, v):
        if t.name == "pred":
            return b.icmp_unsigned("!=", v, _c(v.type, 0))
        if t.name in lowbits.SMALL_FLOATS:
            return lowbits.decode(b, lowbits.SMALL_FLOATS[t.name], v)
        if t.name in lowbits.SUB_BYTE_INTS:
            return lowbits.wrap_int(b, t.name, v)
        if t.name == "bf16":
            return bf16_to_f32(b, v)
        if t.name == "f16":
            return b.fpext(b.bitcast(v, ir.HalfType()), F32)
        if t.is_float:
            return b.bitcast(v, compute_type(t))
        if t.is_complex:
            raise UnsupportedError("bitcast-convert of complex values is not compiled")
        return v

    return from_bits(dst, to_bits(src, x))


@_register("bitcast-convert")
def _bitcast_convert(b, instr, v):
    return bitcast_value(b, _otype(instr), _etype(instr), v[0])


@_register("reduce-precision")
def _reduce_precision(b, instr, v):
    """Round the mantissa to `mantissa_bits` (nearest even) and clamp the exponent
    range to `exponent_bits`, as XLA's reduce-precision does."""
    t = _etype(instr)
    x = v[0]
    if not t.is_float:
        _unsupported(instr, f"reduce-precision of {t}")
    ft = x.type
    from .types import HALF, I32, I64
    it = I64 if ft == F64 else I32
    src_mant, src_exp = (52, 11) if ft == F64 else (23, 8)
    mbits = instr.attrs["mantissa_bits"]
    ebits = instr.attrs["exponent_bits"]
    # f16 works on its own bits, as XLA does: in the f32 register its subnormals are
    # normal numbers below 2^-14, which a 5-bit exponent clamp would flush to zero.
    # (bf16 shares f32's exponent: its f32 bits give the same answer.) The f8 types XLA
    # computes in f16 do too (dtypes.reduces_in_f16; f16 holds their values exactly).
    half = t.name == "f16" or reduces_in_f16(t.dtype)
    if half:
        it, src_mant, src_exp = ir.IntType(16), 10, 5
        bits = b.bitcast(b.fptrunc(x, HALF), it)
    else:
        bits = b.bitcast(x, it)
    if mbits < src_mant:
        drop = src_mant - mbits
        last = b.and_(b.lshr(bits, _c(it, drop)), _c(it, 1))
        bias = b.add(_c(it, (1 << (drop - 1)) - 1), last)
        bits = b.and_(b.add(bits, bias), _c(it, ~((1 << drop) - 1)))
    if ebits < src_exp:
        sign = b.and_(bits, _c(it, 1 << (it.width - 1)))
        mag = b.and_(bits, _c(it, (1 << (it.width - 1)) - 1))
        src_bias = (1 << (src_exp - 1)) - 1
        dst_bias = (1 << (ebits - 1)) - 1
        max_exp = src_bias + dst_bias
        min_exp = src_bias - dst_bias
        exp_field = b.lshr(mag, _c(it, src_mant))
        overflow = b.icmp_unsigned(">", exp_field, _c(it, max_exp))
        underflow = b.icmp_unsigned("<=", exp_field, _c(it, min_exp))
        inf_bits = _c(it, ((1 << src_exp) - 1) << src_mant)
        mag = b.select(overflow, inf_bits, b.select(underflow, _c(it, 0), mag))
        bits = b.or_(sign, mag)
    y = b.fpext(b.bitcast(bits, HALF), ft) if half else b.bitcast(bits, ft)
    y = b.select(b.fcmp_unordered("uno", x, x), x, y)
    return _finish(b, instr, y)


# stochastic-convert lives in its own module (its XLA semantics need a page of comments).
from .stochastic import emit_stochastic_convert  # noqa: E402

SCALAR_RULES["stochastic-convert"] = emit_stochastic_convert
