"""Vectorizable transcendental functions written in LLVM IR.

Each function takes scalar f32 or f64 registers and is branch-free (selects
only), so LLVM's loop vectorizer turns it into SIMD code; a libm call per element
would be 10-60x slower. Algorithms: Cody-Waite range reduction + polynomials
(fdlibm / Cephes style). f32 functions that are not speed-critical are computed
in f64 and rounded once, which makes them accurate to < 1 ulp; exp, log, tanh,
logistic and erf have dedicated f32 kernels because the benchmarks live on them.

Accuracy (tested against numpy in tests/compiler/test_codegen_math.py): f32 <= 4 ulp,
f64 <= ~4 ulp except pow, whose relative error is |y log m| * 2**-53 with m = x's mantissa
in [0.71, 1.41] (18 ulp at most over random bit patterns; ~1e-13 for x near 1 with a huge y). sin/cos/tan reduce by
Cody-Waite below 2**19 and by Payne-Hanek (pio2_reduce.py) above, so they hold for
every finite argument. Branch-free code is what vectorizes, and running both reductions
for every element made f32 sin ~3x and f64 sin ~5-10x slower than Cody-Waite alone. So a
kernel is emitted twice (kernels.emit_kernel): its fast version, emitted under
`fast_trig()`, reduces by Cody-Waite only and sets a flag when an argument reaches
2**19; when the flag is set at the end, the kernel (or its block) runs again as the
accurate version, which has both reductions. Outside such a kernel (reducer and map
kernels, native loop drivers) the accurate code is emitted.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from llvmlite import ir

from . import intrinsics as intr
from .pio2_reduce import TABLE_MIN_EXP, pio2_times, reduce_pio2
from .types import F32, F64, I1, I32, I64


def _c(t, v) -> ir.Constant:
    return ir.Constant(t, v)


def _poly(b, x, coeffs):
    """Horner: coeffs[0] + x*(coeffs[1] + x*(...)), fused multiply-adds."""
    t = x.type
    acc = _c(t, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = intr.fmuladd(b, acc, x, _c(t, c))
    return acc


def _is_nan(b, x):
    return b.fcmp_unordered("uno", x, x)


def _int_type(t):
    return I32 if t == F32 else I64


def _widen(b, x):
    return b.fpext(x, F64) if x.type == F32 else x


def _narrow_like(b, y, like):
    return b.fptrunc(y, F32) if like.type == F32 else y


def _via_f64(fn):
    """Lift an f64 implementation to f32 (compute in f64, round once)."""
    def wrapped(b, *args):
        if args[0].type == F32:
            return b.fptrunc(fn(b, *[b.fpext(a, F64) for a in args]), F32)
        return fn(b, *args)
    wrapped.__name__ = fn.__name__
    return wrapped


# ---- 2^n scaling ------------------------------------------------------------

def _pow2(b, n_int, t):
    """2^n as a float for n within the normal exponent range (no checks)."""
    it = _int_type(t)
    bias, mant = (127, 23) if t == F32 else (1023, 52)
    e = b.add(n_int, _c(it, bias))
    return b.bitcast(b.shl(e, _c(it, mant)), t)


def _ldexp(b, x, n_int, t):
    """x * 2^n for n in the range exp() produces, split in two steps to reach
    subnormal and overflow results without intermediate overflow."""
    it = _int_type(t)
    half = b.ashr(n_int, _c(it, 1))
    rest = b.sub(n_int, half)
    return b.fmul(b.fmul(x, _pow2(b, half, t)), _pow2(b, rest, t))


# ---- exp / expm1 ------------------------------------------------------------

_EXP_F32 = [1.0, 1.0, 0.5, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040]
_EXP_F64 = [1.0 / math.factorial(k) for k in range(14)]
_LN2_HI = {F32: 0.693145751953125, F64: 6.93147180369123816490e-01}
_LN2_LO = {F32: 1.428606765330187045e-06, F64: 1.90821492927058770002e-10}
_EXP_LIMITS = {F32: (-104.0, 89.0), F64: (-746.0, 710.0)}


def exp(b, x, x_lo=None):
    """e^x; x_lo: a low part, e^(x + x_lo) for an x carried in two doubles (pow)."""
    t = x.type
    it = _int_type(t)
    lo, hi = _EXP_LIMITS[t]
    xc = intr.minnum(b, intr.maxnum(b, x, _c(t, lo)), _c(t, hi))
    n = intr.rint(b, b.fmul(xc, _c(t, 1.4426950408889634)))
    r = intr.fmuladd(b, n, _c(t, -_LN2_HI[t]), xc)
    r = intr.fmuladd(b, n, _c(t, -_LN2_LO[t]), r)
    if x_lo is not None:
        r = b.fadd(r, x_lo)
    p = _poly(b, r, _EXP_F32 if t == F32 else _EXP_F64)
    y = _ldexp(b, p, b.fptosi(n, it), t)
    return b.select(_is_nan(b, x), x, y)


def expm1(b, x):
    """Kahan's expm1: (u-1)*x/log(u) with u = exp(x), exact near 0."""
    u = exp(b, x)
    um1 = b.fsub(u, _c(x.type, 1.0))
    lu = log(b, u)
    y = b.fdiv(b.fmul(um1, x), lu)
    y = b.select(b.fcmp_ordered("==", um1, _c(x.type, -1.0)), um1, y)
    y = b.select(b.fcmp_ordered("==", u, _c(x.type, 1.0)), x, y)
    # Past x = 40, u - 1 rounds to u in f32 and f64 (e^40 > 2**53) and needs no correction,
    # while (u-1)*x overflows from x ~ 84 in f32 (~703 in f64), below exp's own overflow
    # (88.72, 709.78): expm1(88) was inf. Also u = inf: there the quotient is inf/inf.
    y = b.select(b.fcmp_ordered(">", x, _c(x.type, 40.0)), um1, y)
    return b.select(_is_nan(b, x), x, y)


# ---- log / log1p ------------------------------------------------------------

def log(b, x):
    return _log_special(b, x, _log_combine(b, *_log_parts(b, x)))


def _log_combine(b, ef, lp):
    t = ef.type
    return intr.fmuladd(b, ef, _c(t, _LN2_HI[t]), intr.fmuladd(b, ef, _c(t, _LN2_LO[t]), lp))


def _log_parts(b, x):
    """(e, log m) with x = 2^e * m, m in [sqrt(1/2), sqrt(2)), for finite x > 0."""
    t = x.type
    it = _int_type(t)
    mant_bits, bias = (23, 127) if t == F32 else (52, 1023)
    tiny = _c(t, 2.0 ** (-126 if t == F32 else -1022))
    # Scale subnormals into the normal range first.
    sub = b.fcmp_ordered("<", x, tiny)
    xs = b.select(sub, b.fmul(x, _c(t, 2.0 ** mant_bits)), x)
    e_adj = b.select(sub, _c(it, mant_bits), _c(it, 0))
    bits = b.bitcast(xs, it)
    mant_mask = (1 << mant_bits) - 1
    e = b.sub(b.lshr(bits, _c(it, mant_bits)), _c(it, bias))
    m = b.bitcast(b.or_(b.and_(bits, _c(it, mant_mask)), _c(it, bias << mant_bits)), t)
    # m in [1, 2): bring it into [sqrt(1/2), sqrt(2)).
    big = b.fcmp_ordered(">", m, _c(t, math.sqrt(2.0)))
    m = b.select(big, b.fmul(m, _c(t, 0.5)), m)
    e = b.add(b.sub(e, e_adj), b.zext(big, it))
    f = b.fsub(m, _c(t, 1.0))
    return b.sitofp(e, t), _log1p_small(b, f)


def _log_special(b, x, y):
    """log's special values over y: 0 -> -inf, negative -> nan, +inf -> inf, nan -> nan."""
    t = x.type
    y = b.select(b.fcmp_ordered("==", x, _c(t, 0.0)), _c(t, -math.inf), y)
    y = b.select(b.fcmp_ordered("<", x, _c(t, 0.0)), _c(t, math.nan), y)
    y = b.select(b.fcmp_ordered("==", x, _c(t, math.inf)), x, y)
    return b.select(_is_nan(b, x), x, y)


def _log1p_small(b, f):
    """log(1+f) for f in [sqrt(1/2)-1, sqrt(2)-1] via 2*atanh(f/(2+f))."""
    t = f.type
    s = b.fdiv(f, b.fadd(_c(t, 2.0), f))
    z = b.fmul(s, s)
    terms = 5 if t == F32 else 11
    coeffs = [2.0 / (2 * k + 1) for k in range(terms)]
    return b.fmul(s, _poly(b, z, coeffs))


def log1p(b, x):
    """log(u) corrected by the rounding error of u = 1 + x (Goldberg's trick)."""
    t = x.type
    u = b.fadd(_c(t, 1.0), x)
    lu = log(b, u)
    um1 = b.fsub(u, _c(t, 1.0))
    corr = b.fdiv(b.fsub(x, um1), u)
    y = b.fadd(lu, corr)
    y = b.select(b.fcmp_ordered("==", um1, _c(t, 0.0)), x, y)
    y = b.select(b.fcmp_ordered("==", u, _c(t, math.inf)), u, y)
    return b.select(b.fcmp_ordered("<=", u, _c(t, 0.0)), lu, y)


# ---- hyperbolic ---------------------------------------------------------------

# Eigen's rational tanh for f32 (the one XLA:CPU uses), accurate to a few ulp.
_TANH_P = [4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
           5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
           -2.76076847742355e-16]
_TANH_Q = [4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
           1.19825839466702e-06]


def tanh(b, x):
    t = x.type
    if t == F32:
        # Past the clamp tanh is +-1 in f32 (XLA:CPU's clamp for fused multiply-adds). The
        # rational at a clamp is 1 only for one evaluation order: _poly's fmuladd fuses or
        # not by target, and at Eigen's unfused clamp (7.9053) the fused form gave
        # 0.99999976 for every larger |x|, inf included. So the saturation is a select, and
        # |y| <= 1 is enforced for the unfused form, which exceeds 1 just below the clamp.
        clamp = 7.99881172180175781
        ax = intr.fabs(b, x)
        xc = intr.minnum(b, intr.maxnum(b, x, _c(t, -clamp)), _c(t, clamp))
        z = b.fmul(xc, xc)
        p = b.fmul(xc, _poly(b, z, _TANH_P))
        q = _poly(b, z, _TANH_Q)
        y = intr.minnum(b, intr.maxnum(b, b.fdiv(p, q), _c(t, -1.0)), _c(t, 1.0))
        y = b.select(b.fcmp_ordered(">=", ax, _c(t, clamp)), intr.copysign(b, _c(t, 1.0), x), y)
        small = b.fcmp_ordered("<", ax, _c(t, 0.0004))
        y = b.select(small, x, y)
        return b.select(_is_nan(b, x), x, y)
    # f64: tanh|x| = -m / (2 + m) with m = expm1(-2|x|): no cancellation anywhere.
    ax = intr.fabs(b, x)
    m = expm1(b, b.fmul(ax, _c(t, -2.0)))
    y = b.fdiv(b.fneg(m), b.fadd(_c(t, 2.0), m))
    y = b.select(b.fcmp_ordered(">", ax, _c(t, 40.0)), _c(t, 1.0), y)
    return intr.copysign(b, y, x)


def logistic(b, x):
    t = x.type
    e = exp(b, b.fneg(x))
    return b.fdiv(_c(t, 1.0), b.fadd(_c(t, 1.0), e))


def _half_exp(b, ax):
    """exp(ax) / 2 without overflowing early: (exp(ax/2) / 2) * exp(ax/2); both
    halvings are exact, unlike exp(ax - ln 2) whose argument rounds."""
    e = exp(b, b.fmul(ax, _c(ax.type, 0.5)))
    return b.fmul(b.fmul(e, _c(ax.type, 0.5)), e)


@_via_f64
def sinh(b, x):
    t = x.type
    ax = intr.fabs(b, x)
    u = expm1(b, ax)
    small = b.fmul(_c(t, 0.5), b.fadd(u, b.fdiv(u, b.fadd(u, _c(t, 1.0)))))
    large = _half_exp(b, ax)
    y = b.select(b.fcmp_ordered("<", ax, _c(t, 22.0)), small, large)
    return intr.copysign(b, y, x)


@_via_f64
def cosh(b, x):
    t = x.type
    ax = intr.fabs(b, x)
    e = exp(b, ax)
    small = b.fmul(_c(t, 0.5), b.fadd(e, b.fdiv(_c(t, 1.0), e)))
    large = _half_exp(b, ax)
    return b.select(b.fcmp_ordered("<", ax, _c(t, 22.0)), small, large)


@_via_f64
def asinh(b, x):
    t = x.type
    ax = intr.fabs(b, x)
    z = b.fmul(ax, ax)
    mid = log1p(b, b.fadd(ax, b.fdiv(z, b.fadd(_c(t, 1.0), intr.sqrt(b, b.fadd(_c(t, 1.0), z))))))
    big = b.fadd(log(b, ax), _c(t, math.log(2.0)))
    y = b.select(b.fcmp_ordered(">", ax, _c(t, 2.0 ** 28)), big, mid)
    return intr.copysign(b, y, x)


@_via_f64
def acosh(b, x):
    t = x.type
    tm1 = b.fsub(x, _c(t, 1.0))
    mid = log1p(b, b.fadd(tm1, intr.sqrt(b, b.fadd(b.fmul(_c(t, 2.0), tm1), b.fmul(tm1, tm1)))))
    big = b.fadd(log(b, x), _c(t, math.log(2.0)))
    y = b.select(b.fcmp_ordered(">", x, _c(t, 2.0 ** 28)), big, mid)
    return b.select(b.fcmp_unordered("<", x, _c(t, 1.0)), _c(t, math.nan), y)


@_via_f64
def atanh(b, x):
    t = x.type
    ax = intr.fabs(b, x)
    y = b.fmul(_c(t, 0.5), log1p(b, b.fdiv(b.fmul(_c(t, 2.0), ax), b.fsub(_c(t, 1.0), ax))))
    y = b.select(b.fcmp_ordered(">", ax, _c(t, 1.0)), _c(t, math.nan), y)
    return intr.copysign(b, y, x)


# ---- trigonometric ------------------------------------------------------------

@dataclass
class FastTrig:
    """While a kernel's fast version is emitted: the function being emitted and its
    "an argument needed Payne-Hanek" flag (an i1 alloca: SROA makes it an or-reduction
    the loop vectorizer keeps), and each function whose code sets its flag -> that flag."""

    fn: ir.Function | None = None
    flag: ir.AllocaInstr | None = None
    flagged: dict = field(default_factory=dict)


_FAST_TRIG: ContextVar[FastTrig | None] = ContextVar("fast_trig", default=None)


@contextmanager
def fast_trig():
    """Emit sin/cos/tan of the functions begun inside (begin_fast_function) with
    Cody-Waite only, flagging huge arguments; yields the FastTrig state."""
    state = FastTrig()
    token = _FAST_TRIG.set(state)
    try:
        yield state
    finally:
        _FAST_TRIG.reset(token)


def begin_fast_function(b: ir.IRBuilder) -> None:
    """Called in a kernel function's entry block: under fast_trig(), its flag."""
    state = _FAST_TRIG.get()
    if state is not None:
        state.fn, state.flag = b.function, b.alloca(I1, name="huge_trig_arg")
        b.store(_c(I1, 0), state.flag)


def _flag_huge(b, large) -> bool:
    """Under fast_trig() in the flagged function: or `large` into its flag, True."""
    state = _FAST_TRIG.get()
    if state is None or state.fn is not b.function:
        return False
    b.store(b.or_(b.load(state.flag, typ=I1), large), state.flag)
    state.flagged[state.fn] = state.flag
    return True


_S = [-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
      2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10]
_C = [4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
      -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11]
_PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21)


def _sincos64(b, x, narrow: bool = False):
    """(sin x, cos x) for f64 x: reduce by pi/2 (Cody-Waite, 3 parts, or Payne-Hanek for
    huge x; narrow: x is an f32 widened), fdlibm kernels."""
    t = F64
    k = intr.rint(b, b.fmul(x, _c(t, 2.0 / math.pi)))
    r = x
    for part in _PIO2:
        r = intr.fmuladd(b, k, _c(t, -part), r)
    # From 2**19 on, k*part is no longer exact: Payne-Hanek (pio2_reduce.py) instead,
    # or, in a kernel's fast version, a flag that makes the accurate version run.
    ax = intr.fabs(b, x)
    large = b.fcmp_ordered(">=", ax, _c(t, 2.0 ** TABLE_MIN_EXP))
    if not _flag_huge(b, large):
        kb, fb = reduce_pio2(b, ax, narrow)
        rb = pio2_times(b, fb)
        neg = b.fcmp_ordered("<", x, _c(t, 0.0))
        k = b.select(large, b.select(neg, b.fneg(kb), kb), k)
        r = b.select(large, b.select(neg, b.fneg(rb), rb), r)
    z = b.fmul(r, r)
    s = intr.fmuladd(b, b.fmul(z, r), _poly(b, z, _S), r)
    c = b.fadd(b.fsub(_c(t, 1.0), b.fmul(_c(t, 0.5), z)), b.fmul(b.fmul(z, z), _poly(b, z, _C)))
    q = b.and_(b.fptosi(k, I64), _c(I64, 3))
    swap = b.icmp_unsigned("==", b.and_(q, _c(I64, 1)), _c(I64, 1))
    sin_v = b.select(swap, c, s)
    cos_v = b.select(swap, s, c)
    sin_neg = b.icmp_unsigned(">=", q, _c(I64, 2))
    cos_neg = b.or_(b.icmp_unsigned("==", q, _c(I64, 1)), b.icmp_unsigned("==", q, _c(I64, 2)))
    sin_v = b.select(sin_neg, b.fneg(sin_v), sin_v)
    cos_v = b.select(cos_neg, b.fneg(cos_v), cos_v)
    # Infinities reduce to nan (k*part overflows), as sin(inf) must.
    bad = b.fcmp_unordered("uno", b.fsub(x, x), _c(t, 0.0))
    nan = _c(t, math.nan)
    return b.select(bad, nan, sin_v), b.select(bad, nan, cos_v)


def _via_f64_trig(fn):
    """_via_f64 for sin/cos/tan, telling the reduction when the argument was an f32."""
    def wrapped(b, x):
        if x.type == F32:
            return b.fptrunc(fn(b, b.fpext(x, F64), narrow=True), F32)
        return fn(b, x)
    wrapped.__name__ = fn.__name__
    return wrapped


@_via_f64_trig
def sin(b, x, narrow=False):
    s, _ = _sincos64(b, x, narrow)
    # Keep the sign of zero: sin(-0) = -0.
    return b.select(b.fcmp_ordered("==", x, _c(F64, 0.0)), x, s)


@_via_f64_trig
def cos(b, x, narrow=False):
    return _sincos64(b, x, narrow)[1]


@_via_f64_trig
def tan(b, x, narrow=False):
    s, c = _sincos64(b, x, narrow)
    return b.select(b.fcmp_ordered("==", x, _c(F64, 0.0)), x, b.fdiv(s, c))


_TAN_PI_8 = math.tan(math.pi / 8)


def _atan_unit(b, x):
    """atan for 0 <= x <= 1 (f64)."""
    t = F64
    red = b.fcmp_ordered(">", x, _c(t, _TAN_PI_8))
    xr = b.select(red, b.fdiv(b.fsub(x, _c(t, 1.0)), b.fadd(x, _c(t, 1.0))), x)
    z = b.fmul(xr, xr)
    coeffs = [(-1.0) ** k / (2 * k + 1) for k in range(23)]
    a = b.fmul(xr, _poly(b, z, coeffs))
    return b.select(red, b.fadd(_c(t, math.pi / 4), a), a)


@_via_f64
def atan2(b, y, x):
    t = F64
    ax, ay = intr.fabs(b, x), intr.fabs(b, y)
    mx, mn = intr.maxnum(b, ax, ay), intr.minnum(b, ax, ay)
    ratio = b.fdiv(mn, mx)
    both_zero = b.fcmp_ordered("==", mx, _c(t, 0.0))
    both_inf = b.fcmp_ordered("==", mn, _c(t, math.inf))
    ratio = b.select(both_zero, _c(t, 0.0), b.select(both_inf, _c(t, 1.0), ratio))
    a = _atan_unit(b, ratio)
    a = b.select(b.fcmp_ordered(">", ay, ax), b.fsub(_c(t, math.pi / 2), a), a)
    x_neg = b.icmp_signed("<", b.bitcast(x, I64), _c(I64, 0))
    a = b.select(x_neg, b.fsub(_c(t, math.pi), a), a)
    a = intr.copysign(b, a, y)
    any_nan = b.or_(_is_nan(b, x), _is_nan(b, y))
    return b.select(any_nan, b.fadd(x, y), a)


@_via_f64
def atan(b, x):
    return atan2(b, x, _c(F64, 1.0))


@_via_f64
def asin(b, x):
    t = F64
    root = intr.sqrt(b, b.fmul(b.fsub(_c(t, 1.0), x), b.fadd(_c(t, 1.0), x)))
    return atan2(b, x, root)


@_via_f64
def acos(b, x):
    t = F64
    root = intr.sqrt(b, b.fmul(b.fsub(_c(t, 1.0), x), b.fadd(_c(t, 1.0), x)))
    return atan2(b, root, x)


# ---- erf, cbrt, pow -----------------------------------------------------------

# Eigen's rational erf for f32 on [-4, 4] (XLA:CPU's f32 erf).
_ERF_P = [-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04,
          -5.69250639462346e-05, -2.10102402082508e-06, 2.77068142495902e-08,
          -2.72614225801306e-10]
_ERF_Q = [-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03,
          -2.13374055278905e-04, -1.45660718464996e-05]


def erf(b, x):
    t = x.type
    if t == F32:
        xc = intr.minnum(b, intr.maxnum(b, x, _c(t, -4.0)), _c(t, 4.0))
        z = b.fmul(xc, xc)
        y = b.fdiv(b.fmul(xc, _poly(b, z, _ERF_P)), _poly(b, z, _ERF_Q))
        # The rational passes 1 by an ulp between ~3.7 and the clamp (erf(-3.9999) gave
        # -1.0000001); erf is bounded, and 1 - erf(x) must not go negative.
        y = intr.minnum(b, intr.maxnum(b, y, _c(t, -1.0)), _c(t, 1.0))
        # Below 2**-116, x * P(z) is subnormal or near it (P(0) ~ 2**-6) and the quotient
        # lost up to 36 ulp of a normal result (erf(1.1754944e-38) = 1.3264002e-38 for
        # 1.3264034e-38); there erf(x) is 2x/sqrt(pi) to within far less than an ulp.
        tiny = b.fcmp_ordered("<", intr.fabs(b, x), _c(t, 2.0 ** -116))
        y = b.select(tiny, b.fmul(x, _c(t, 2.0 / math.sqrt(math.pi))), y)
        return b.select(_is_nan(b, x), x, y)
    # f64 keeps libm's erf: no vector implementation of double precision yet.
    return intr.libm(b, "erf", [x])


@_via_f64
def cbrt(b, x):
    t = F64
    ax0 = intr.fabs(b, x)
    # A subnormal a is scaled by 2**162 first (exactly; the root by 2**54): unscaled, the
    # Newton step's y^3 - a is itself subnormal and lost up to 170 ulp (cbrt(3.07e-312)).
    sub = b.fcmp_ordered("<", ax0, _c(t, 2.0 ** -1022))
    ax = b.select(sub, b.fmul(ax0, _c(t, 2.0 ** 162)), ax0)
    y = exp(b, b.fmul(log(b, ax), _c(t, 1.0 / 3.0)))
    # One Newton step fixes the last bits: y -= (y^3 - a) / (3 y^2).
    y2 = b.fmul(y, y)
    y = b.fsub(y, b.fdiv(b.fsub(b.fmul(y2, y), ax), b.fmul(_c(t, 3.0), y2)))
    y = b.select(sub, b.fmul(y, _c(t, 2.0 ** -54)), y)
    ax = ax0
    special = b.or_(b.fcmp_ordered("==", ax, _c(t, 0.0)),
                    b.fcmp_unordered("uno", b.fsub(ax, ax), _c(t, 0.0)))
    y = b.select(special, ax, y)
    return intr.copysign(b, y, x)


def _y_log(b, y, ax):
    """y * log(ax) as (hi, lo) for f64. Rounded to one double, its absolute error |y log ax|
    * 2**-53 is the relative error of pow, and moved pow(2, 1024) and pow(0.5, -1024) below
    the overflow to 1.7976931348622732e308 (pow(max, 1) too). Here the e*ln2 part of log
    (ln2_hi has 32 bits: e*ln2_hi is exact) is multiplied exactly (fma), so only the
    log(m) part, |log m| <= 0.35, carries a rounding: exact for powers of two."""
    t = F64
    ef, lp = _log_parts(b, ax)
    whole = b.fmul(y, _log_special(b, ax, _log_combine(b, ef, lp)))
    big = b.fmul(ef, _c(t, _LN2_HI[t]))
    small = intr.fmuladd(b, ef, _c(t, _LN2_LO[t]), lp)
    th = b.fmul(y, big)
    th_lo = intr.intrinsic(b, "fma", [y, big, b.fneg(th)])
    ts = b.fmul(y, small)
    hi = b.fadd(th, ts)
    # Two-sum: th + ts = hi + err exactly.
    bv = b.fsub(hi, th)
    err = b.fadd(b.fsub(th, b.fsub(hi, bv)), b.fsub(ts, bv))
    lo = b.fadd(err, th_lo)
    # Zero, inf and nan bases, non-finite y or y*log beyond any finite pow keep the plain
    # product (its special values are pow's); there lo is meaningless.
    regular = b.and_(b.fcmp_ordered("<", intr.fabs(b, lo), _c(t, 1.0)),
                     b.and_(b.fcmp_ordered("<", intr.fabs(b, hi), _c(t, 2000.0)),
                            b.fcmp_ordered("<", intr.fabs(b, y), _c(t, math.inf))))
    regular = b.and_(regular, b.and_(b.fcmp_ordered(">", ax, _c(t, 0.0)),
                                     b.fcmp_ordered("<", ax, _c(t, math.inf))))
    return b.select(regular, hi, whole), b.select(regular, lo, _c(t, 0.0))


def _is_integer(b, y):
    return b.fcmp_ordered("==", intr.intrinsic(b, "floor", [y]), y)


def _is_odd_integer(b, y):
    half = b.fmul(y, _c(y.type, 0.5))
    return b.and_(_is_integer(b, y), b.fcmp_ordered("!=", intr.intrinsic(b, "floor", [half]),
                                                    half))


def pow(b, x, y):
    """C99 pow semantics (what XLA and numpy implement), as exp(y * log|x|). f32 runs in
    f64, where the plain product's ~1e-13 is far below an f32 ulp: it skips _y_log (25%)."""
    if x.type == F32:
        return b.fptrunc(_pow64(b, b.fpext(x, F64), b.fpext(y, F64), False), F32)
    return _pow64(b, x, y, True)


# f64 integer powers of integers are exact by repeated multiplication while every
# product used stays below 2**53: exp(y * log|x|) is off by an ulp or more there
# (pow(-20, 3) gave -7999.999999999999, 176 of 738 such results were inexact), where
# XLA:CPU gives the exact value. Exponents below 2**_INT_BITS. Cost: f64 pow 4.1 -> 5.0
# ns per element on one thread (2M elements). f32 pow (computed in f64) does without:
# its integer results below 2**24 round to the exact value anyway, and the path cost it
# 30% for the few halfway results above (4 of 738; XLA:CPU misrounds 2).
_INT_BITS = 6


def _int_power(b, ax, y):
    """(|x| ** |y| by binary exponentiation over the low _INT_BITS bits of |y|, whether
    |y| is below 2**_INT_BITS)."""
    t = ax.type
    ay = intr.fabs(b, y)
    small = b.fcmp_ordered("<", ay, _c(t, float(1 << _INT_BITS)))
    n = b.fptosi(b.select(small, ay, _c(t, 0.0)), I64)
    r, p = _c(t, 1.0), ax
    for k in range(_INT_BITS):
        bit = b.icmp_unsigned("!=", b.and_(n, _c(I64, 1 << k)), _c(I64, 0))
        r = b.select(bit, b.fmul(r, p), r)
        if k + 1 < _INT_BITS:
            p = b.fmul(p, p)
    return r, small


def _pow64(b, x, y, exact_exponent):
    t = F64
    ax = intr.fabs(b, x)
    if exact_exponent:
        mag = exp(b, *_y_log(b, y, ax))
    else:
        mag = exp(b, b.fmul(y, log(b, ax)))
    if exact_exponent:  # f64 (f32's results are rounded from these f64 ones anyway)
        whole, small = _int_power(b, ax, y)
        exact = b.and_(b.and_(small, _is_integer(b, y)),
                       b.and_(_is_integer(b, ax),
                              b.fcmp_ordered("<", whole, _c(t, 2.0 ** 53))))
        whole = b.select(b.fcmp_ordered("<", y, _c(t, 0.0)), b.fdiv(_c(t, 1.0), whole),
                         whole)
        mag = b.select(exact, whole, mag)
    odd = _is_odd_integer(b, y)
    x_neg = b.icmp_signed("<", b.bitcast(x, I64), _c(I64, 0))
    mag = b.select(b.and_(x_neg, odd), b.fneg(mag), mag)
    # Negative finite base with a non-integer exponent has no real value (-inf to a
    # non-integer power is +inf or +0, as for +inf: exp(y * log inf) already gives that).
    nan_case = b.and_(b.and_(b.fcmp_ordered("<", x, _c(t, 0.0)),
                             b.fcmp_ordered("!=", x, _c(t, -math.inf))),
                      b.and_(b.fcmp_ordered("!=", intr.fabs(b, y), _c(t, math.inf)),
                             b.not_(_is_integer(b, y))))
    r = b.select(nan_case, _c(t, math.nan), mag)
    # |x| == 1 with y = +-inf gives 1 (log 1 * inf would be nan).
    r = b.select(b.and_(b.fcmp_ordered("==", ax, _c(t, 1.0)),
                        b.fcmp_ordered("==", intr.fabs(b, y), _c(t, math.inf))), _c(t, 1.0), r)
    one = _c(t, 1.0)
    r = b.select(b.fcmp_ordered("==", x, one), one, r)
    r = b.select(b.fcmp_ordered("==", y, _c(t, 0.0)), one, r)
    return r


def sqrt(b, x):
    return intr.sqrt(b, x)


def rsqrt(b, x):
    return b.fdiv(_c(x.type, 1.0), intr.sqrt(b, x))


# name -> (function, arity); the elemental emitter looks float ops up here.
FLOAT_FUNCTIONS = {
    "exponential": exp, "exponential-minus-one": expm1, "log": log, "log-plus-one": log1p,
    "tanh": tanh, "logistic": logistic, "sine": sin, "cosine": cos, "tan": tan,
    "erf": erf, "cbrt": cbrt, "sqrt": sqrt, "rsqrt": rsqrt, "atan": atan,
    "acos": acos, "asin": asin, "acosh": acosh, "asinh": asinh, "atanh": atanh,
    "cosh": cosh, "sinh": sinh,
}
FLOAT_BINARY_FUNCTIONS = {"power": pow, "atan2": atan2}
