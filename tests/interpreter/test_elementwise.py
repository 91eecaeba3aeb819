"""Element-wise ops of the interpreter against independent references.

References: Python integers (exact two's-complement arithmetic), numpy float64 rounded
to the target type, and hand-recorded XLA:CPU results for the corner cases XLA defines
(elemental_ir_emitter.cc; recorded by running the same ops through XLA:CPU 0.10).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tests.interpreter.ir import bits, op1
from xladist.errors import UnsupportedError

INT_TYPES = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
             "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}
BF16 = ml_dtypes.bfloat16
nan, inf = np.nan, np.inf


def wrap(v: int, dtype) -> int:
    """A Python int reduced to the two's-complement range of dtype."""
    info = np.iinfo(dtype)
    n = info.bits
    v &= (1 << n) - 1
    if info.min < 0 and v >= 1 << (n - 1):
        v -= 1 << n
    return v


def sample_ints(dtype, n=40, seed=0):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    edge = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
    if info.min < 0:
        edge += [-1, -2]
    rand = [int(x) for x in rng.integers(info.min, info.max, size=n - len(edge), dtype=dtype,
                                         endpoint=True)]
    return np.array(edge + rand, dtype=dtype)


def hlo(dtype) -> str:
    return {v: k for k, v in INT_TYPES.items()}[dtype]


# ---- integer arithmetic ------------------------------------------------------------------
@pytest.mark.parametrize("ty", INT_TYPES)
@pytest.mark.parametrize("opcode,fn", [("add", lambda a, b: a + b),
                                       ("subtract", lambda a, b: a - b),
                                       ("multiply", lambda a, b: a * b)])
def test_integer_arithmetic_wraps(ty, opcode, fn):
    dt = INT_TYPES[ty]
    a, b = sample_ints(dt, seed=1), sample_ints(dt, seed=2)[::-1].copy()
    got = op1(opcode, f"{ty}[{a.size}]", a, b)
    want = [wrap(fn(int(x), int(y)), dt) for x, y in zip(a, b)]
    assert got.dtype == dt and got.tolist() == want


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("ty", INT_TYPES)
def test_integer_divide_and_remainder_match_c_with_xla_corner_cases(ty):
    dt = INT_TYPES[ty]
    a = sample_ints(dt, seed=3)
    b = sample_ints(dt, seed=4)
    b[:6] = 0  # x / 0 and x % 0
    lo = np.iinfo(dt).min
    if lo < 0:
        a[6], b[6] = lo, -1  # INT_MIN / -1
    q = op1("divide", f"{ty}[{a.size}]", a, b)
    r = op1("remainder", f"{ty}[{a.size}]", a, b)
    for x, y, gq, gr in zip(a.tolist(), b.tolist(), q.tolist(), r.tolist()):
        if y == 0:
            assert gq == wrap(-1, dt) and gr == x  # all bits set; remainder is x
        elif x == lo and y == -1 and lo < 0:
            assert gq == lo and gr == 0
        else:
            assert gq == _trunc_div(x, y) and gr == x - _trunc_div(x, y) * y


def test_divide_remainder_recorded_from_xla_cpu():
    a = np.array([7, -7, 7, -7, -2**31, -2**31, 5, 0], np.int32)
    b = np.array([2, 2, -2, -2, -1, 0, 0, 0], np.int32)
    assert op1("divide", "s32[8]", a, b).tolist() == [3, -3, -3, 3, -2**31, -1, -1, -1]
    assert op1("remainder", "s32[8]", a, b).tolist() == [1, -1, 1, -1, 0, -2**31, 5, 0]
    au = np.array([7, 5, 0, 2**32 - 1], np.uint32)
    bu = np.array([2, 0, 0, 2], np.uint32)
    assert op1("divide", "u32[4]", au, bu).tolist() == [3, 2**32 - 1, 2**32 - 1, 2**31 - 1]
    assert op1("remainder", "u32[4]", au, bu).tolist() == [1, 5, 0, 1]


@pytest.mark.parametrize("ty", INT_TYPES)
def test_shifts_saturate_outside_the_bit_width(ty):
    dt = INT_TYPES[ty]
    n = np.iinfo(dt).bits
    signed = np.iinfo(dt).min < 0
    a = sample_ints(dt, n=12, seed=5)
    amounts = [0, 1, n - 1, n, n + 1, 3, 2 * n, 7, n // 2, 1, 0, n - 2]
    b = np.array([wrap(s, dt) for s in amounts], dt)
    if signed:
        b[-1] = -1  # a negative amount reads as a huge unsigned one: out of range
        amounts[-1] = 1 << n
    shl = op1("shift-left", f"{ty}[12]", a, b).tolist()
    srl = op1("shift-right-logical", f"{ty}[12]", a, b).tolist()
    sra = op1("shift-right-arithmetic", f"{ty}[12]", a, b).tolist()
    for x, s, gl, grl, gra in zip(a.tolist(), amounts, shl, srl, sra):
        ux = x & ((1 << n) - 1)
        sx = wrap(x, getattr(np, f"int{n}"))
        if s >= n:
            assert gl == 0 and grl == 0
            assert gra == wrap(-1 if sx < 0 else 0, dt)
        else:
            assert gl == wrap(x << s, dt)
            assert grl == wrap(ux >> s, dt)
            assert gra == wrap(sx >> s, dt)


def test_shifts_recorded_from_xla_cpu():
    a = np.array([1, -8, -1, 5, 2**31 - 1, -2**31, 7, -7], np.int32)
    s = np.array([31, 32, 33, -1, 1, 31, 0, 100], np.int32)
    assert op1("shift-left", "s32[8]", a, s).tolist() == [-2**31, 0, 0, 0, -2, 0, 7, 0]
    assert op1("shift-right-arithmetic", "s32[8]", a, s).tolist() == \
        [0, -1, -1, 0, 2**30 - 1, -1, 7, -1]
    assert op1("shift-right-logical", "s32[8]", a, s).tolist() == \
        [0, 0, 0, 0, 2**30 - 1, 1, 7, 0]


def test_integer_power_matches_xla_cpu():
    # Recorded from XLA:CPU: the exponent's bits above 2^5 are ignored (3^64 == 1), and a
    # negative exponent gives 1 for base 1, +-1 for base -1, 0 otherwise.
    b = np.array([-1, 1, 2, 0, 3, -2, 3, 3], np.int32)
    e = np.array([-1, -1, -1, -1, 64, -3, 65, 31], np.int32)
    assert op1("power", "s32[8]", b, e).tolist() == [-1, 1, 0, 0, 1, 0, 3, 1264544299]
    b = np.array([-1, -1, -1, 1, -2, 5], np.int32)
    e = np.array([-2, -3, 0, -5, -1, 0], np.int32)
    assert op1("power", "s32[6]", b, e).tolist() == [1, -1, 1, 1, 0, 1]
    b = np.array([1, 2, 3, 3, 2, 2**32 - 1, 2**32 - 1], np.uint32)
    e = np.array([2**31, 2**31, 64, 65, 2**32 - 1, 2**31 + 1, 2**31], np.uint32)
    assert op1("power", "u32[7]", b, e).tolist() == [1, 0, 1, 3, 0, 2**32 - 1, 1]
    assert op1("power", "s8[3]", np.array([3, 3, 3], np.int8),
               np.array([5, 6, 7], np.int8)).tolist() == [-13, -39, -117]


@pytest.mark.parametrize("ty", INT_TYPES)
def test_popcnt_and_count_leading_zeros(ty):
    dt = INT_TYPES[ty]
    n = np.iinfo(dt).bits
    a = sample_ints(dt, seed=6)
    pop = op1("popcnt", f"{ty}[{a.size}]", a).tolist()
    clz = op1("count-leading-zeros", f"{ty}[{a.size}]", a).tolist()
    for x, p, c in zip(a.tolist(), pop, clz):
        u = x & ((1 << n) - 1)
        assert p == u.bit_count()
        assert c == n - u.bit_length()


@pytest.mark.parametrize("ty", INT_TYPES)
def test_mulhi(ty):
    dt = INT_TYPES[ty]
    n = np.iinfo(dt).bits
    a, b = sample_ints(dt, seed=7), sample_ints(dt, seed=8)
    got = op1("mulhi", f"{ty}[{a.size}]", a, b).tolist()
    assert got == [wrap((x * y) >> n, dt) for x, y in zip(a.tolist(), b.tolist())]


def test_abs_negate_sign_of_integers_wrap():
    x = np.array([-2**31, -3, 0, 5], np.int32)
    assert op1("abs", "s32[4]", x).tolist() == [-2**31, 3, 0, 5]
    assert op1("negate", "s32[4]", x).tolist() == [-2**31, 3, 0, -5]
    assert op1("sign", "s32[4]", x).tolist() == [-1, -1, 0, 1]
    u = np.array([0, 1, 200], np.uint8)
    assert op1("negate", "u8[3]", u).tolist() == [0, 255, 56]
    # shape inference refuses sign of unsigned types; the rule itself still answers
    assert op1("sign", "u8[3]", u, raw=True).tolist() == [0, 1, 1]
    assert op1("not", "u8[3]", u).tolist() == [255, 254, 55]


@pytest.mark.parametrize("ty", ["s32", "u16"])
def test_integer_max_min_and_bitwise(ty):
    dt = INT_TYPES[ty]
    a, b = sample_ints(dt, seed=9), sample_ints(dt, seed=10)
    A, B = a.tolist(), b.tolist()
    assert op1("maximum", f"{ty}[{a.size}]", a, b).tolist() == [max(x, y) for x, y in zip(A, B)]
    assert op1("minimum", f"{ty}[{a.size}]", a, b).tolist() == [min(x, y) for x, y in zip(A, B)]
    assert op1("and", f"{ty}[{a.size}]", a, b).tolist() == [x & y for x, y in zip(A, B)]
    assert op1("or", f"{ty}[{a.size}]", a, b).tolist() == [x | y for x, y in zip(A, B)]
    assert op1("xor", f"{ty}[{a.size}]", a, b).tolist() == [x ^ y for x, y in zip(A, B)]


def test_pred_arithmetic_is_logical():
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    assert op1("add", "pred[4]", a, b).tolist() == [False, True, True, True]
    assert op1("multiply", "pred[4]", a, b).tolist() == [False, False, False, True]
    assert op1("maximum", "pred[4]", a, b).tolist() == [False, True, True, True]
    assert op1("minimum", "pred[4]", a, b).tolist() == [False, False, False, True]
    assert op1("xor", "pred[4]", a, b).tolist() == [False, True, True, False]
    assert op1("not", "pred[4]", a).tolist() == [True, True, False, False]


# ---- floats ------------------------------------------------------------------------------
def test_float_max_min_propagate_nan_and_order_signed_zeros():
    # Recorded from XLA:CPU: max(-0, +0) = max(+0, -0) = +0 and min gives -0 both ways;
    # NaN on either side gives NaN.
    x = np.array([-0.0, 0.0, nan, 1.0, nan, 2.0], np.float32)
    y = np.array([0.0, -0.0, 1.0, nan, -nan, 1.0], np.float32)
    mx = op1("maximum", "f32[6]", x, y)
    mn = op1("minimum", "f32[6]", x, y)
    assert np.signbit(mx[:2]).tolist() == [False, False]
    assert np.signbit(mn[:2]).tolist() == [True, True]
    assert np.isnan(mx[2:5]).all() and np.isnan(mn[2:5]).all()
    assert mx[5] == 2.0 and mn[5] == 1.0


def test_float_sign_keeps_negative_zero_and_nan():
    x = np.array([-0.0, 0.0, nan, -nan, -3.0, inf, 2.5e-30], np.float32)
    got = op1("sign", "f32[7]", x)
    assert np.signbit(got).tolist() == [True, False, False, True, True, False, False]
    assert np.isnan(got[2:4]).all()
    assert got[[0, 1, 4, 5, 6]].tolist() == [0.0, 0.0, -1.0, 1.0, 1.0]


def test_rounding_recorded_from_xla_cpu():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.3, 8388609.0], np.float32)
    afz = op1("round-nearest-afz", "f32[8]", x)
    assert afz.tolist() == [1, 2, 3, -1, -3, 0, 0, 8388609.0]
    assert np.signbit(afz).tolist() == [False, False, False, True, True, False, True, False]
    even = op1("round-nearest-even", "f32[8]", x)
    assert even.tolist() == [0, 2, 2, -0.0, -2, 0, -0.0, 8388609.0]
    assert np.signbit(even)[[3, 6]].all()
    special = np.array([inf, -inf, nan], np.float32)
    got = op1("round-nearest-afz", "f32[3]", special)
    assert got[0] == inf and got[1] == -inf and np.isnan(got[2])


def test_float_remainder_is_fmod():
    f = np.array([5.5, -5.5, 5.5, -0.0, 1.0, inf, 3.0, 0.0], np.float32)
    g = np.array([2.0, 2.0, -2.0, 1.0, 0.0, 2.0, inf, -1.0], np.float32)
    got = op1("remainder", "f32[8]", f, g)
    assert got[[0, 1, 2, 3, 6, 7]].tolist() == [1.5, -1.5, 1.5, 0.0, 3.0, 0.0]
    assert np.signbit(got[3]) and np.isnan(got[4]) and np.isnan(got[5])


UNARY_F64 = {
    "exponential": np.exp, "exponential-minus-one": np.expm1, "log": np.log,
    "log-plus-one": np.log1p, "sine": np.sin, "cosine": np.cos, "tan": np.tan,
    "tanh": np.tanh, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt,
    "logistic": lambda x: 1 / (1 + np.exp(-x)), "erf": np.vectorize(math.erf),
    "atan": np.arctan, "asinh": np.arcsinh, "sinh": np.sinh, "cosh": np.cosh,
    "abs": np.abs, "negate": np.negative, "floor": np.floor, "ceil": np.ceil,
}
FLOATS = {"f16": np.float16, "bf16": BF16, "f32": np.float32, "f64": np.float64}


@pytest.mark.parametrize("ty", FLOATS)
@pytest.mark.parametrize("opcode", UNARY_F64)
def test_float_unary_against_float64(ty, opcode):
    dt = FLOATS[ty]
    x = np.linspace(0.05, 3.0, 13).astype(dt)
    got = op1(opcode, f"{ty}[13]", x)
    assert got.dtype == np.dtype(dt)
    want = UNARY_F64[opcode](x.astype(np.float64))
    # One rounding to the type (plus the f32 intermediate for narrow types).
    eps = float(ml_dtypes.finfo(dt).eps)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2 * eps, atol=2 * eps)


def test_narrow_float_binary_rounds_once_from_f32():
    # bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7; round-to-even gives 1.
    one = np.array([1.0, 1.0], BF16)
    small = np.array([2.0**-8, 3 * 2.0**-9], BF16)
    got = op1("add", "bf16[2]", one, small)
    assert got.astype(np.float32).tolist() == [1.0, 1.0 + 2.0**-7]
    h = op1("multiply", "f16[1]", np.array([300.0], np.float16), np.array([300.0], np.float16))
    assert np.isinf(h[0])  # overflow of the f16 result, not of the f32 computation


def test_float_special_ops():
    x = np.array([1.0, -inf, nan, inf, -0.0], np.float32)
    assert op1("is-finite", "pred[5]", x).tolist() == [True, False, False, False, True]
    a = np.array([1.0, -1.0, 0.0, -0.0], np.float64)
    b = np.array([1.0, 1.0, -1.0, -1.0], np.float64)
    np.testing.assert_array_equal(op1("atan2", "f64[4]", a, b), np.arctan2(a, b))
    p = op1("power", "f32[4]", np.array([-8.0, 2.0, nan, 0.0], np.float32),
            np.array([1 / 3, 10.0, 0.0, -1.0], np.float32))
    assert np.isnan(p[0]) and p[1] == 1024.0 and p[2] == 1.0 and p[3] == inf



@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("ty,dt", [("f32", np.float32), ("f64", np.float64), ("f16", np.float16)])
def test_power_of_a_broadcast_half_is_pow_not_sqrt(backend, ty, dt):
    """`x ** 0.5` in jax is power(x, broadcast(0.5)). numpy takes a stride-0 exponent of 0.5
    as sqrt, so the interpreter gave sqrt(-inf) = NaN and sqrt(-0) = -0; IEEE 754 pow (C99
    F.9.4.4, XLA:CPU) gives +inf and +0 (found by the numerics sweep: jnp.power(x, 0.5))."""
    import xladist
    text = (f"HloModule m\nENTRY e {{\n x = {ty}[6] parameter(0)\n c = {ty}[] constant(0.5)\n"
            f" h = {ty}[6] broadcast(c), dimensions={{}}\n ROOT p = {ty}[6] power(x, h)\n}}\n")
    x = np.array([-inf, -0.0, 0.0, -4.0, 2.25, inf], dt)
    (got,) = xladist.compile(xladist.parse_hlo(text), backend=backend)(x)
    want = np.array([inf, 0.0, 0.0, nan, 1.5, inf], dt)
    assert np.isnan(got[3]), got  # pow(-4, 0.5); the sign of that NaN is not compared
    keep = [0, 1, 2, 4, 5]
    assert bits(got[keep]).tolist() == bits(want[keep]).tolist(), got

def test_complex_ops():
    z = np.array([3 + 4j, -1 - 1j, 0j], np.complex64)
    assert op1("abs", "f32[3]", z).tolist() == [5.0, pytest.approx(math.sqrt(2)), 0.0]
    assert op1("real", "f32[3]", z).tolist() == [3.0, -1.0, 0.0]
    assert op1("imag", "f32[3]", z).tolist() == [4.0, -1.0, 0.0]
    s = op1("sign", "c64[3]", z)
    np.testing.assert_allclose(s, [0.6 + 0.8j, (-1 - 1j) / math.sqrt(2), 0], rtol=1e-6)
    np.testing.assert_allclose(op1("exponential", "c64[3]", z), np.exp(z.astype(np.complex128)),
                               rtol=1e-6)
    c = op1("complex", "c64[2]", np.array([1.0, inf], np.float32),
            np.array([inf, 2.0], np.float32))
    assert c.dtype == np.complex64
    assert c.real.tolist() == [1.0, inf] and c.imag.tolist() == [inf, 2.0]


def test_undefined_type_is_unsupported_naming_the_op():
    with pytest.raises(UnsupportedError, match=r"ceil is not defined for element type s32"):
        op1("ceil", "s32[2]", np.array([1, 2], np.int32), raw=True)
    with pytest.raises(UnsupportedError, match=r"shift-left is not defined for element type f32"):
        op1("shift-left", "f32[1]", np.ones(1, np.float32), np.ones(1, np.float32), raw=True)


# ---- compare, select, clamp --------------------------------------------------------------
def test_compare_float_and_totalorder_recorded_from_xla_cpu():
    f = np.array([-0.0, 0.0, -0.0, nan, 1.0, -inf], np.float32)
    g = np.array([-0.0, -0.0, 0.0, 0.0, nan, -inf], np.float32)
    expected = {  # direction: (TOTALORDER, FLOAT)
        "EQ": ([1, 0, 0, 0, 0, 1], [1, 1, 1, 0, 0, 1]),
        "NE": ([0, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0]),
        "LT": ([0, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 0]),
        "LE": ([1, 0, 1, 0, 1, 1], [1, 1, 1, 0, 0, 1]),
        "GT": ([0, 1, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0]),
        "GE": ([1, 1, 0, 1, 0, 1], [1, 1, 1, 0, 0, 1]),
    }
    for d, (total, flt) in expected.items():
        assert op1("compare", "pred[6]", f, g, direction=d, type="TOTALORDER").astype(
            int).tolist() == total, d
        assert op1("compare", "pred[6]", f, g, direction=d).astype(int).tolist() == flt, d


def test_totalorder_sorts_like_the_documented_chain():
    chain = np.array([-nan, -inf, -1.0, -0.0, 0.0, 1.0, inf, nan], np.float32)
    a = np.repeat(chain, 8)
    b = np.tile(chain, 8)
    lt = op1("compare", "pred[64]", a, b, direction="LT", type="TOTALORDER").reshape(8, 8)
    assert (lt == np.triu(np.ones((8, 8), bool), 1)).all()
    bf = chain.astype(BF16)
    lt16 = op1("compare", "pred[64]", np.repeat(bf, 8), np.tile(bf, 8), direction="LT",
               type="TOTALORDER").reshape(8, 8)
    assert (lt16 == lt).all()


def test_compare_integer_signedness():
    a = np.array([2**32 - 1, 1], np.uint32)
    b = np.array([1, 2], np.uint32)
    assert op1("compare", "pred[2]", a, b, direction="GT").tolist() == [True, False]
    assert op1("compare", "pred[2]", a, b, direction="GT", type="UNSIGNED").tolist() == \
        [True, False]
    s = np.array([-1, 1], np.int32)
    assert op1("compare", "pred[2]", s, np.array([1, 2], np.int32), direction="GT",
               type="SIGNED").tolist() == [False, False]
    # Reading the bits with the other signedness is not a comparison XLA has: its verifier
    # refuses type=SIGNED on u32 ("Expected comparison type UNSIGNED"), and so do we.
    with pytest.raises(ValueError, match="type=SIGNED does not compare u32"):
        op1("compare", "pred[2]", a, b, direction="GT", type="SIGNED")


def test_select_and_clamp():
    p = np.array([True, False, True])
    assert op1("select", "s32[3]", p, np.array([1, 2, 3], np.int32),
               np.array([4, 5, 6], np.int32)).tolist() == [1, 5, 3]
    lo, hi = np.array(0.0, np.float32), np.array(1.0, np.float32)
    x = np.array([-1.0, 0.5, 2.0, nan], np.float32)
    got = op1("clamp", "f32[4]", lo, x, hi)
    assert got[:3].tolist() == [0.0, 0.5, 1.0] and np.isnan(got[3])
    xi = np.array([-5, 3, 300], np.int32)
    assert op1("clamp", "s32[3]", np.array(0, np.int32), xi,
               np.array(255, np.int32)).tolist() == [0, 3, 255]
    # A clamp whose bits are unsigned compares as unsigned.
    u = np.array([1, 2**32 - 1], np.uint32)
    assert op1("clamp", "u32[2]", np.array(2, np.uint32), u,
               np.array(10, np.uint32)).tolist() == [2, 10]


def test_results_keep_exact_bits():
    got = op1("negate", "f32[2]", np.array([0.0, -0.0], np.float32))
    assert bits(got).tolist() == [0x80000000, 0]


def test_f8_arithmetic_rounds_once_to_the_f8_type():
    e4 = ml_dtypes.float8_e4m3fn
    # e4m3fn has 3 mantissa bits: 1 + 1/16 is a tie between 1 and 1.125 -> even (1).
    got = op1("add", "f8e4m3fn[3]", np.array([1.0, 1.0, 448.0], e4),
              np.array([0.0625, 0.1875, 64.0], e4))
    assert got.dtype == np.dtype(e4)
    assert got[:2].astype(np.float32).tolist() == [1.0, 1.25]
    assert np.isnan(got[2].astype(np.float32))  # 512 overflows e4m3fn, which has no inf
    e5 = ml_dtypes.float8_e5m2
    got = op1("multiply", "f8e5m2[2]", np.array([3.0, 40000.0], e5), np.array([5.0, 4.0], e5))
    assert got.astype(np.float32).tolist() == [16.0, np.inf]  # 15 -> 16 (2 mantissa bits)
    assert op1("sqrt", "f8e5m2[1]", np.array([16.0], e5)).astype(np.float32).tolist() == [4.0]


# (lhs, rhs, maximum, minimum) as XLA:CPU computes them (jax 0.10.2, tools/xla_cpu.py):
# the operand whose real part wins (>= for maximum, <= for minimum) is taken whole; a
# tie keeps the left, a NaN real part on either side gives the right operand.
_COMPLEX_MAX_MIN = [
    (1 + 2j, 1 + 3j, 1 + 2j, 1 + 2j),
    (1 + 2j, 2 + 0j, 2 + 0j, 1 + 2j),
    (1 + 2j, complex(nan, 0), complex(nan, 0), complex(nan, 0)),
    (complex(nan, 0), 1 + 2j, 1 + 2j, 1 + 2j),
    (complex(0, nan), complex(-0.0, 1), complex(0, nan), complex(0, nan)),
    (1 + 2j, complex(0, nan), 1 + 2j, complex(0, nan)),
    (complex(-0.0, 1), 1j, complex(-0.0, 1), complex(-0.0, 1)),
    (complex(inf, 0), 1 + 2j, complex(inf, 0), 1 + 2j),
    (complex(0, nan), complex(nan, 0), complex(nan, 0), complex(nan, 0)),
]


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("ct,dt", [("c64", np.complex64), ("c128", np.complex128)])
def test_complex_maximum_and_minimum_recorded_from_xla_cpu(backend, ct, dt):
    """Both backends refused complex maximum/minimum, which XLA:CPU runs (found by the
    builder sweep: b.max of two c64 values)."""
    import xladist
    a = np.array([r[0] for r in _COMPLEX_MAX_MIN], dt)
    b = np.array([r[1] for r in _COMPLEX_MAX_MIN], dt)
    n = len(a)
    text = (f"HloModule m\nENTRY e {{\n a = {ct}[{n}] parameter(0)\n b = {ct}[{n}] parameter(1)"
            f"\n x = {ct}[{n}] maximum(a, b)\n y = {ct}[{n}] minimum(a, b)\n"
            f" ROOT t = ({ct}[{n}], {ct}[{n}]) tuple(x, y)\n}}\n")
    got_max, got_min = xladist.compile(xladist.parse_hlo(text), backend=backend)(a, b)
    for got, col in ((got_max, 2), (got_min, 3)):
        want = np.array([r[col] for r in _COMPLEX_MAX_MIN], dt)
        assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes(), (got, want)
