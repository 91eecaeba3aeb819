"""The zoo's numeric cases (tools/gen_zoo_single.py): integers, converts, complex, narrow and
x64 floats, layouts, padding, transcendental and special functions, float bits, rounding,
searching, windowed and variadic reductions, and transformations (vmap, nested control
flow, autodiff, mixed-precision dots, library-level jnp)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from zoo_cases import BF16, case, ints, normal, uniform, with_edges

# ---- integers -------------------------------------------------------------------------------

@case("integer bit ops: shifts by amounts past the width and negative (s32, u32, s8, u8), "
      "population_count, clz, bitwise not/and/or/xor, jnp.left_shift of uint8.",
      lambda rng: [ints(rng, (8,), -1000, 1000), np.array([0, 1, 5, 31, 32, 33, -1, 100],
                                                          np.int32),
                   rng.integers(0, 2**32, (8,), dtype=np.uint64).astype(np.uint32),
                   ints(rng, (8,), -128, 128, np.int8), ints(rng, (8,), 0, 256, np.uint8)],
      rtol=0.0, atol=0.0)
def int_bit_ops(a, s, u, b, c):
    su = s.astype(jnp.uint32)
    return (lax.shift_left(a, s), lax.shift_right_arithmetic(a, s),
            lax.shift_right_logical(a, s), lax.shift_left(u, su),
            lax.shift_right_logical(u, su), lax.shift_right_arithmetic(b, s.astype(jnp.int8)),
            lax.shift_left(c, (s % 10).astype(jnp.uint8)), lax.population_count(a),
            lax.population_count(u), lax.clz(a), lax.clz(u), lax.clz(b), ~a, a & s ^ (a | 7),
            ~c, lax.population_count(b))


@case("integer division and remainder with negatives: lax.div/lax.rem (truncating), "
      "jnp.floor_divide/jnp.mod (flooring), divide by zero and INT_MIN / -1 on s32, s8, s16, "
      "u32.",
      lambda rng: [np.array([7, -7, 7, -7, 0, -2**31, 5, -2**31], np.int32),
                   np.array([2, 2, -2, -2, 3, -1, 0, 1], np.int32),
                   ints(rng, (6,), -128, 128, np.int8), np.array([3, -3, 1, -1, 7, -128],
                                                                 np.int8),
                   ints(rng, (6,), -30000, 30000, np.int16),
                   np.array([7, 1, 4294967295, 0, 10, 3], np.uint32)],
      rtol=0.0, atol=0.0)
def int_div_rem_negative(a, b, c, d, e, u):
    safe = jnp.where(b == 0, 1, b)
    return (lax.div(a, b), lax.rem(a, b), jnp.floor_divide(a, safe), jnp.mod(a, safe),
            lax.div(c, d), lax.rem(c, d), jnp.floor_divide(e, 7), jnp.mod(e, -7),
            lax.div(u, jnp.uint32(3)), lax.rem(u, jnp.uint32(4)), lax.div(u, u),
            jnp.remainder(c, d), a // jnp.int32(-3))


@case("saturating and wrapping converts: f32 (NaN, inf, out of range) to s8/u8/s32/u32/s16, "
      "s32 to s8/u8 (wraps), f32 to f16 overflow, f32 to bf16 rounding, u32 to f32, "
      "bool to f32, clip-then-cast as jnp does.",
      lambda rng: [np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 300.7, -300.7, 2.5, -2.5,
                             -0.0, 127.5, 255.9, 65504.0, 70000.0, -1.5, 0.49999997],
                            np.float32),
                   np.array([300, -300, 127, 128, -129, 255, 256, 2**31 - 1], np.int32),
                   np.array([0, 1, 2**31, 2**32 - 1, 16777217, 3], np.uint32)],
      rtol=0.0, atol=0.0)
def saturating_converts(f, i, u):
    return (f.astype(jnp.int8), f.astype(jnp.uint8), f.astype(jnp.int32),
            f.astype(jnp.uint32), f.astype(jnp.int16), i.astype(jnp.int8), i.astype(jnp.uint8),
            f.astype(jnp.float16), f.astype(jnp.bfloat16), u.astype(jnp.float32),
            (f > 0).astype(jnp.float32), u.astype(jnp.int32), i.astype(jnp.uint32),
            jnp.clip(f, -128, 127).astype(jnp.int8), lax.convert_element_type(f, jnp.bool_))


@case("int8/uint8/int16/uint32/bool arithmetic: wrapping add/mul/neg/abs (INT_MIN), "
      "min/max, sign, integer_pow, sum/prod/max reductions, any/all, count_nonzero, bool "
      "xor/not.",
      lambda rng: [ints(rng, (4, 6), -128, 128, np.int8), ints(rng, (4, 6), 0, 256, np.uint8),
                   rng.integers(0, 2**32, (4, 6), dtype=np.uint64).astype(np.uint32),
                   rng.random((4, 6)) > 0.4, ints(rng, (6,), -2**15, 2**15, np.int16)],
      rtol=0.0, atol=0.0)
def small_int_bool(a, b, u, m, s):
    return (a + a, a * jnp.int8(3), -a, jnp.abs(a), jnp.sign(a), b * b, b - jnp.uint8(200),
            u * u, u + jnp.uint32(4000000000), jnp.maximum(u, u[::-1]), lax.integer_pow(a, 3),
            jnp.sum(a, axis=1, dtype=jnp.int8), jnp.prod(b, axis=0, dtype=jnp.uint8),
            jnp.max(u, axis=1), jnp.any(m, axis=0), jnp.all(m, axis=1), jnp.count_nonzero(m),
            m ^ m[::-1], ~m, jnp.abs(s), s * s, jnp.sum(u, axis=0))


# ---- floating point: precision, complex, edge values ----------------------------------------

@case("complex64: mul/div/abs/exp/log/sqrt/conj/real/imag/angle, tanh/sin, complex power "
      "(complex exponents), complex dot and einsum, sum/prod reductions.",
      lambda rng: [normal(rng, (2, 4)), normal(rng, (2, 4)), normal(rng, (4, 3)),
                   normal(rng, (4, 3))],
      rtol=1e-5, atol=1e-5)
def complex_arith(ar, ai, br, bi):
    a = lax.complex(ar, ai)
    b = lax.complex(br, bi)
    return (a * a, a / (a + 2.0), jnp.abs(a), jnp.exp(a), jnp.log(a), jnp.sqrt(a),
            jnp.conj(a), jnp.real(a) + jnp.imag(a), jnp.angle(a), a @ b,
            jnp.einsum("ij,jk->ik", jnp.conj(a), b), jnp.sum(a, axis=1), jnp.prod(a, axis=0),
            jnp.tanh(a), a ** 2, jnp.sin(a), a ** (0.5 + 1j), jnp.power(a, b[:2, :1]))


@case("f16 and bf16 arithmetic: add/mul/div/exp/log/tanh/sqrt in the narrow type, sum and "
      "max reductions (XLA accumulates in f32 for bf16), dot, converts between them, "
      "overflow to inf in f16.",
      lambda rng: [normal(rng, (3, 5)).astype(np.float16), normal(rng, (3, 5)).astype(BF16),
                   normal(rng, (5, 2)).astype(np.float16)],
      rtol=1e-2, atol=1e-2)
def narrow_floats(h, b, hw):
    return (h * h + h, h / (jnp.abs(h) + 1), jnp.exp(h), jnp.tanh(b), jnp.sqrt(jnp.abs(b)),
            jnp.log(jnp.abs(h) + 1), jnp.sum(h, axis=1), jnp.max(b, axis=0), jnp.sum(b),
            h @ hw, b.astype(jnp.float16), h.astype(jnp.bfloat16), h * jnp.float16(30000.0),
            jnp.mean(b, axis=1), b * b - b)


@case("x64 mode: f64 math (exp/log/sin/erf/pow), f64 reductions and dot, int64/uint64 "
      "arithmetic, division and shifts, complex128, f64 <-> s64 converts.",
      lambda rng: [normal(rng, (3, 4), np.float64), ints(rng, (6,), -2**40, 2**40, np.int64),
                   rng.integers(0, 2**63, (6,), dtype=np.uint64), normal(rng, (4, 2),
                                                                          np.float64)],
      rtol=1e-12, atol=1e-12, x64=True)
def x64_types(d, i, u, w):
    z = lax.complex(d, d[::-1])
    return (jnp.exp(d), jnp.log(jnp.abs(d)), jnp.sin(d) ** 2, jax.scipy.special.erf(d),
            jnp.power(jnp.abs(d), 1.5), jnp.sum(d, axis=0), d @ w, i * i, i // 7, i % 7,
            i << 3, i >> 5, u * u, u >> 60, u // jnp.uint64(12345), z * z, jnp.abs(z),
            d.astype(jnp.int64), i.astype(jnp.float64), jnp.cumsum(i))


@case("reductions of transposed / permuted operands (non-default layouts after XLA's layout "
      "assignment): sum over transposed axes, mean of a 3-axis permutation, max over "
      "multiple axes with keepdims, var, a reduce of a broadcast.",
      lambda rng: [normal(rng, (3, 4, 5)), normal(rng, (6, 4))], rtol=1e-5, atol=1e-5)
def transposed_reductions(x, y):
    t = jnp.transpose(x, (2, 0, 1))
    return (jnp.sum(t, axis=1), jnp.mean(jnp.transpose(x, (1, 2, 0)), axis=(0, 2)),
            jnp.max(t, axis=(0, 2), keepdims=True), jnp.var(y.T, axis=1),
            jnp.sum(y.T @ y, axis=0), jnp.sum(jnp.broadcast_to(y[:, None], (6, 3, 4)), axis=0),
            t * 2.0, jnp.min(y.T.reshape(2, 12), axis=1))


@case("lax.pad with negative low/high (cropping), interior padding, both at once, on f32 "
      "and int32; jnp.pad modes constant/edge/reflect/wrap.",
      lambda rng: [normal(rng, (4, 5)), ints(rng, (6,), -9, 9)], rtol=0.0, atol=0.0)
def pad_negative_interior(x, i):
    return (lax.pad(x, 0.5, ((-1, 2, 0), (1, -2, 0))), lax.pad(x, -1.0, ((1, 1, 2), (0, 0, 1))),
            lax.pad(x, 0.0, ((-2, -1, 1), (2, -3, 2))), lax.pad(i, 7, ((-1, -1, 3),)),
            jnp.pad(x, ((1, 2), (2, 0)), mode="edge"), jnp.pad(x, 2, mode="reflect"),
            jnp.pad(i, (3, 2), mode="wrap"), jnp.pad(x, 1, constant_values=9.0))


@case("reverse along several axes, clamp with array and scalar bounds (incl. NaN), select "
      "with broadcast predicates, iota/broadcasted_iota of several types, jnp.tri/triu, "
      "jnp.roll, concatenate, expand_dims, jnp.flip.",
      lambda rng: [with_edges(normal(rng, (4, 5)), (np.nan, -0.0)), ints(rng, (4, 5), -9, 9)],
      rtol=0.0, atol=0.0)
def shaping_select_misc(x, i):
    return (lax.rev(x, (0, 1)), jnp.flip(i, 1), lax.clamp(-0.5, x, 0.5),
            lax.clamp(jnp.broadcast_to(x[0], x.shape), x, x + 1.0), jnp.clip(i, -3, 3),
            lax.select(x > 0, x, jnp.zeros_like(x)), jnp.where(i[:, :1] > 0, x, -x),
            lax.broadcasted_iota(jnp.uint8, (3, 4), 1), lax.iota(jnp.float32, 5),
            lax.broadcasted_iota(jnp.int32, (2, 3, 2), 2), jnp.triu(x), jnp.tri(3, 4, -1),
            jnp.roll(i, 2, axis=1), jnp.concatenate([x, x[:, :2] * 2], axis=1),
            jnp.expand_dims(i[0], 0), x.T.reshape(-1))


@case("transcendental edge cases: atan2 of signed zeros and infinities, expm1/log1p near 0, "
      "erf_inv, lgamma, digamma (incl. poles), erfc, is_finite, sinh/cosh/asinh/acosh/atanh, "
      "tan, acos/asin/atan, logistic, pow with special bases.",
      lambda rng: [np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 0.0, -0.0], np.float32),
                   np.array([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, -0.0, -1.0], np.float32),
                   with_edges(uniform(rng, (8,), -0.9, 0.9), (1e-7, -1e-7, 1.0, -1.0)),
                   with_edges(uniform(rng, (8,), 0.1, 8.0), (0.0, -1.0, -2.5, 1.0, 2.0))],
      rtol=1e-5, atol=1e-5,
      out_tol={"out5": [1e-4, 1e-4], "out6": [1e-4, 1e-4], "out16": [1e-4, 1e-4]})
def transcendental_edges(y, x, s, g):
    inside = jnp.clip(s, -0.999, 0.999)
    return (jnp.arctan2(y, x), jnp.arctan2(x, y), jnp.expm1(s), jnp.log1p(s),
            lax.erf_inv(inside), lax.lgamma(g), lax.digamma(g), lax.erfc(s),
            jnp.isfinite(y / x), jnp.sinh(s), jnp.cosh(s), jnp.arcsinh(s), jnp.arccosh(g + 1),
            jnp.arctanh(inside), jnp.tan(s), jnp.arccos(inside), jax.scipy.special.xlogy(g, g),
            jnp.arcsin(inside), jnp.arctan(g), jax.nn.sigmoid(s * 20), jnp.power(x, y),
            jnp.power(g, -1.5))


@case("the regularized incomplete gamma function (igamma): XLA lowers it to a long chain of "
      "elementwise ops with a while-free series/continued fraction.",
      lambda rng: [uniform(rng, (6,), 0.5, 5.0), uniform(rng, (6,), 0.1, 6.0)],
      rtol=1e-4, atol=1e-5)
def special_igamma(a, x):
    return jax.scipy.special.gammainc(a, x)


@case("the regularized incomplete beta function (betainc, a continued fraction in HLO).",
      lambda rng: [uniform(rng, (6,), 0.5, 5.0), uniform(rng, (6,), 0.5, 6.0),
                   uniform(rng, (6,), 0.05, 0.95)],
      rtol=1e-4, atol=1e-5)
def special_betainc(a, b, p):
    return jax.scipy.special.betainc(a, b, p)


@case("special functions as elementwise chains: bessel_i0e/i1e, gammaln, ndtri, logit, "
      "entr.",
      lambda rng: [uniform(rng, (6,), 0.5, 5.0), uniform(rng, (6,), 0.1, 6.0),
                   uniform(rng, (6,), 0.05, 0.95)],
      rtol=1e-4, atol=1e-5)
def special_series(a, x, p):
    sp = jax.scipy.special
    return (sp.i0e(x), sp.i1e(x), sp.gammaln(a * 3), sp.ndtri(p), sp.logit(p), sp.entr(p))


@case("zeta and polygamma (Hurwitz zeta series as elementwise HLO).",
      lambda rng: [uniform(rng, (6,), 0.5, 5.0), uniform(rng, (6,), 0.1, 6.0)],
      rtol=1e-4, atol=1e-5)
def special_zeta(a, x):
    return jax.scipy.special.zeta(a + 1.5, x), jax.scipy.special.polygamma(1, x)


@case("float edges: nextafter (toward +-inf, NaN, equal), reduce_precision to bf16/f16 "
      "formats, bitcast_convert_type f32<->s32/u32, f32 -> u8[4] and u16[2] -> f32, f16 <-> "
      "s16, copysign, frexp/ldexp, signbit, nan_to_num, fmax/fmin with NaN.",
      lambda rng: [with_edges(normal(rng, (8,)), (np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0)),
                   with_edges(normal(rng, (8,)), (1.0, 2.0, np.nan, 1.0, -1.0, 1.0)),
                   normal(rng, (4,)).astype(np.float16),
                   np.array([[0x3F80, 0x0000], [0xC000, 0x1234]], np.uint16)],
      rtol=0.0, atol=0.0)
def float_bits_edges(x, y, h, u16):
    return (jnp.nextafter(x, y), lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7),
            lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
            lax.bitcast_convert_type(x, jnp.int32), lax.bitcast_convert_type(x, jnp.uint32),
            lax.bitcast_convert_type(x, jnp.uint8), lax.bitcast_convert_type(u16, jnp.float32),
            lax.bitcast_convert_type(h, jnp.int16), jnp.copysign(jnp.abs(y), x),
            *jnp.frexp(y), jnp.ldexp(y, jnp.array([1, -2, 3, 0, 5, -1, 2, 100], jnp.int32)),
            jnp.signbit(x), jnp.nan_to_num(x), jnp.fmax(x, y), jnp.fmin(x, y),
            jnp.maximum(x, y), jnp.minimum(x, y))


@case("rounding: lax.round AWAY_FROM_ZERO and TO_NEAREST_EVEN, jnp.round with decimals, "
      "floor/ceil/trunc/rint on halves, -0, NaN, inf and large values, f32 and bf16.",
      lambda rng: [np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.0, np.nan, np.inf, -np.inf,
                             1e9 + 0.5, 8388609.0, 0.49999997, -3.7, 3.7, 123.456], np.float32),
                   (normal(rng, (6,)) * 10).astype(BF16)],
      # jnp.round(x, 2) divides by 100; XLA:CPU's optimized module multiplies by 0.01 instead,
      # one ulp away from the unoptimized module's exact division.
      rtol=0.0, atol=0.0, out_tol={"out2": [2e-7, 0.0]})
def rounding(x, b):
    return (lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
            lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), jnp.round(x, 2), jnp.floor(x),
            jnp.ceil(x), jnp.trunc(x), jnp.rint(x), jnp.floor(b), jnp.round(b),
            jnp.sign(x), jnp.abs(x), -x)


@case("comparisons and min/max with NaN and signed zeros, jnp.isclose, equality of -0 and 0, "
      "total-order sort keys through lax.sort, jnp.nanmax/nanmin/nansum/nanmean.",
      lambda rng: [with_edges(normal(rng, (3, 5)), (np.nan, -0.0, 0.0, np.inf, np.nan)),
                   with_edges(normal(rng, (3, 5)), (1.0, 0.0, -0.0, np.inf, np.nan))],
      rtol=1e-6, atol=1e-6)
def nan_signed_zero(x, y):
    return (x == y, x < y, x != y, jnp.isclose(x, y), jnp.maximum(x, y), jnp.minimum(x, y),
            jnp.nanmax(x, axis=1), jnp.nanmin(x, axis=0), jnp.nansum(x, axis=1),
            jnp.nanmean(x), jnp.isnan(x), jnp.max(x, axis=1), jnp.min(y, axis=0))


# ---- searching and set-like ops -------------------------------------------------------------

@case("jnp.searchsorted left (scan: a while loop) and right (sort method), unique and nonzero "
      "with a static size (sort + cumsum + scatter), bincount with length.",
      lambda rng: [np.sort(normal(rng, (8,))), normal(rng, (5,)), ints(rng, (10,), 0, 5),
                   normal(rng, (12,))],
      rtol=1e-6, atol=1e-6)
def search_unique(sorted_a, v, i, h):
    return (jnp.searchsorted(sorted_a, v), jnp.searchsorted(sorted_a, v, side="right",
                                                            method="sort"),
            jnp.unique(i, size=6, fill_value=-1), jnp.nonzero(i > 2, size=10, fill_value=99)[0],
            jnp.bincount(i, length=6), jnp.sum(h > 0))


@case("polynomials and linear-algebra-lite without LAPACK: jnp.polyval, outer/kron, "
      "jnp.linalg.norm (fro, 1, inf, 2-norm of vectors), jnp.trace, jnp.diag, matrix_power, "
      "cross, vdot, tensordot.",
      lambda rng: [normal(rng, (3, 3)), normal(rng, (4,)), normal(rng, (3,)), normal(rng,
                                                                                    (2, 3, 4))],
      rtol=1e-5, atol=1e-5)
def linalg_lite(a, p, v, t):
    return (jnp.polyval(p, a), jnp.kron(a[:2, :2], a), jnp.linalg.norm(a),
            jnp.linalg.norm(a, ord=1), jnp.linalg.norm(a, ord=jnp.inf), jnp.linalg.norm(v),
            jnp.trace(a), jnp.diag(v), jnp.linalg.matrix_power(a, 3), jnp.cross(v, a[0]),
            jnp.vdot(v, v), jnp.tensordot(t, a, axes=([1], [0])), jnp.diagonal(t, 0, 1, 2))


@case("reduce_window as a generic windowed fold: a 1-D moving sum with stride 3 and padding, "
      "2-D max over (2,3) windows with window dilation, a variadic reduce_window (max value "
      "with its index), prod windows on int32.",
      lambda rng: [normal(rng, (11,)), normal(rng, (5, 7)), ints(rng, (6,), 1, 4)],
      rtol=1e-5, atol=1e-5)
def reduce_window_generic(s, m, i):
    mov = lax.reduce_window(s, 0.0, lax.add, (4,), (3,), ((2, 1),))
    dil = lax.reduce_window(m, -jnp.inf, lax.max, (2, 3), (1, 2), "VALID",
                            window_dilation=(2, 1))
    idx = lax.broadcasted_iota(jnp.int32, m.shape, 1)

    def argmax_fold(a, b):
        (av, ai), (bv, bi) = a, b
        pick = (av > bv) | ((av == bv) & (ai < bi))
        return jnp.where(pick, av, bv), jnp.where(pick, ai, bi)

    v, where = lax.reduce_window((m, idx), (-jnp.inf, 0), argmax_fold, (1, 3), (1, 1), "SAME")
    prod = lax.reduce_window(i, 1, lax.mul, (3,), (1,), "VALID")
    return mov, dil, v, where, prod


@case("variadic and multi-axis reductions: lax.reduce with two operands (sum and max in one), "
      "jnp.sum with a custom dtype, logical reductions along axis 0, min over all, "
      "reductions of empty dims (keepdims and an axis of size 0).",
      lambda rng: [normal(rng, (4, 5)), ints(rng, (4, 5), -50, 50), np.zeros((0, 3),
                                                                             np.float32)],
      rtol=1e-5, atol=1e-5)
def reduce_variadic(x, i, e):
    s, m = lax.reduce((x, i), (0.0, jnp.int32(-2**31)),
                      lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1])), (1,))
    return (s, m, jnp.sum(i, axis=0, dtype=jnp.float32), jnp.min(x), jnp.prod(x, axis=1),
            jnp.sum(e, axis=0), jnp.max(e, axis=0, initial=-1.0), jnp.mean(x, axis=(0, 1)),
            jnp.std(x, axis=0, ddof=1))


@case("reducers whose order changes the answer, where XLA folds left from the init in "
      "row-major order: a variadic (f32 a + 2b, s32 xor) reduce, a first-index argmin with "
      "<=, and a non-commutative s32 `a * 2 + b` over a row and over two axes.",
      lambda rng: [normal(rng, (4, 5)), ints(rng, (4, 5), -5, 5), ints(rng, (2, 3, 4), -3, 3)],
      rtol=1e-5, atol=1e-5)
def reduce_fold_order(x, i, t):
    s, c = lax.reduce((x, i), (jnp.float32(0), jnp.int32(0)),
                      lambda a, b: (a[0] + b[0] * 2, a[1] ^ b[1]), (0,))
    m, mi = lax.reduce((x, lax.broadcasted_iota(jnp.int32, x.shape, 1)),
                       (jnp.float32(jnp.inf), jnp.int32(0)),
                       lambda a, b: (jnp.minimum(a[0], b[0]), jnp.where(a[0] <= b[0], a[1], b[1])),
                       (1,))
    digits = lax.reduce(i, jnp.int32(1), lambda a, b: a * 2 + b, (1,))
    two_axes = lax.reduce(t, jnp.int32(0), lambda a, b: a * 3 - b, (0, 2))
    return s, c, m, mi, digits, two_axes


# ---- batch 2: transformations and library-level functions ----------------------------------

@case("vmap of indexing: per-row gather x[i], per-row .at[i].add and dynamic_update_slice "
      "(scatter/gather with operand_batching_dims), vmap of a dynamic_slice with per-row "
      "starts, vmap of jnp.take_along_axis.",
      lambda rng: [normal(rng, (4, 6)), np.array([0, 5, 2, 9], np.int32), normal(rng, (4, 2)),
                   ints(rng, (4, 3), 0, 6)],
      rtol=1e-6, atol=1e-6)
def vmap_indexing(x, i, u, j):
    row_get = jax.vmap(lambda r, k: r[k])(x, i)
    row_add = jax.vmap(lambda r, k, v: r.at[k].add(v[0]))(x, i, u)
    row_dus = jax.vmap(lambda r, k, v: lax.dynamic_update_slice(r, v, (k,)))(x, i, u)
    row_ds = jax.vmap(lambda r, k: lax.dynamic_slice(r, (k,), (3,)))(x, i)
    return row_get, row_add, row_dus, row_ds, jax.vmap(lambda r, k: r[k])(x, j)


@case("nested control flow: a fori_loop inside a scan, a cond inside a while_loop whose exit "
      "depends on the cond's result, a switch inside a fori_loop, a scan carrying an int8 "
      "and a bool.",
      lambda rng: [normal(rng, (4, 3)), np.int32(5)], rtol=1e-5, atol=1e-5)
def nested_control(xs, n):
    def outer(c, x):
        inner = lax.fori_loop(0, 3, lambda i, a: a * 0.5 + x * i, c)
        return inner, inner.sum()

    c, sums = lax.scan(outer, jnp.zeros(3), xs)

    def wbody(s):
        v, k = s
        v = lax.cond(k % 2 == 0, lambda t: t + 1.0, lambda t: t * 1.5, v)
        return v, k + 1

    v, k = lax.while_loop(lambda s: (s[0] < 20.0) & (s[1] < n * 4), wbody, (jnp.float32(1), 0))
    sw = lax.fori_loop(0, 6, lambda i, a: lax.switch(i % 3, [lambda t: t + 1, lambda t: t * 2,
                                                             lambda t: t - 3], a), 1)
    (b8, flag), bs = lax.scan(lambda cr, x: ((cr[0] + jnp.int8(100), ~cr[1]), cr[0]),
                              (jnp.int8(0), False), None, length=4)
    return c, sums, v, k, sw, b8, flag, bs


@case("gradients through remat (jax.checkpoint), lax.optimization_barrier, stop_gradient, a "
      "custom_vjp (clipped gradient) and jax.hessian of a small function.",
      lambda rng: [normal(rng, (3, 4)), normal(rng, (3,))], rtol=1e-5, atol=1e-5)
def autodiff_extras(x, v):
    @jax.custom_vjp
    def clip_grad(t):
        return t

    clip_grad.defvjp(lambda t: (t, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))

    def f(y):
        z = jax.checkpoint(lambda w: jnp.sin(w) * w)(y)
        z = lax.optimization_barrier(z)
        return jnp.sum(clip_grad(z) ** 2 + lax.stop_gradient(z) * y)

    hess = jax.hessian(lambda w: jnp.sum(jnp.tanh(w) ** 3))(v)
    return jax.grad(f)(x), hess, lax.optimization_barrier((x * 2, v))[1]


@case("mixed-precision dots: int8 x int8 -> int32 (preferred_element_type), bf16 x bf16 -> "
      "f32, f16 matmul, u8 x s32 promotion, a batched int dot_general with two contracting "
      "dims.",
      lambda rng: [ints(rng, (3, 8), -128, 128, np.int8), ints(rng, (8, 4), -128, 128, np.int8),
                   normal(rng, (3, 5)).astype(BF16), normal(rng, (5, 2)).astype(BF16),
                   normal(rng, (4, 4)).astype(np.float16), ints(rng, (2, 3, 2, 2), -9, 9)],
      rtol=1e-2, atol=1e-2)
def mixed_precision_dots(a, b, p, q, h, t):
    return (lax.dot(a, b, preferred_element_type=jnp.int32),
            lax.dot(p, q, preferred_element_type=jnp.float32), p @ q, h @ h,
            lax.dot_general(t, t, (((2, 3), (2, 3)), ((0,), (0,)))),
            jnp.einsum("ij,jk->ik", a, b, preferred_element_type=jnp.int16))


@case("library-level jnp: convolve/correlate (full, same, valid), interp, median and "
      "quantile (sort), jax.image.resize bilinear and nearest, associative_scan, meshgrid and "
      "ravel_multi_index.",
      lambda rng: [normal(rng, (9,)), normal(rng, (3,)), normal(rng, (3, 4)),
                   np.sort(uniform(rng, (5,), 0, 10)), uniform(rng, (4,), -1, 11)],
      rtol=1e-5, atol=1e-5)
def jnp_library(s, k, img, xp, xq):
    fp = jnp.sin(xp)
    return (jnp.convolve(s, k), jnp.convolve(s, k, mode="same"),
            jnp.correlate(s, k, mode="valid"), jnp.interp(xq, xp, fp), jnp.median(img, axis=1),
            jnp.quantile(s, jnp.array([0.1, 0.5, 0.9])),
            jax.image.resize(img, (5, 7), "bilinear"), jax.image.resize(img, (6, 2), "nearest"),
            lax.associative_scan(jnp.add, s), lax.associative_scan(jnp.maximum, s[::-1]),
            jnp.ravel_multi_index(jnp.meshgrid(jnp.arange(2), jnp.arange(3)), (2, 3),
                                  mode="clip"))


@case("strided and reversed slicing (x[::2, ::-1], x[1::3]), jnp.tile, jnp.repeat with "
      "array repeats and total_repeat_length, broadcast_to with size-1 expansion, "
      "squeeze/expand, split, stack, jnp.select and lax.select_n with an int index.",
      lambda rng: [normal(rng, (6, 5)), np.array([1, 0, 3], np.int32), ints(rng, (6, 5), 0, 3)],
      rtol=0.0, atol=0.0)
def slicing_tiling(x, r, w):
    a, b = jnp.split(x, [2], axis=0)
    return (x[::2, ::-1], x[1::3], x[::-2, 1:4:2], jnp.tile(x[:2, :2], (2, 3)),
            jnp.repeat(x[:3, 0], r, total_repeat_length=5), jnp.repeat(x[:2], 2, axis=1),
            jnp.broadcast_to(x[:1, :, None], (3, 5, 2)), jnp.squeeze(x[None, :, 1:2]),
            a, jnp.stack([b[:, 0], b[:, -1]], axis=1),
            jnp.select([w == 0, w == 1], [x, -x], 7.0), lax.select_n(w, x, x * 2, x * 3))


@case("more jax.random: categorical (argmax of gumbel noise over logits) and choice without "
      "replacement (a sort of random keys).",
      lambda rng: [np.array([3, 11], np.uint32), normal(rng, (2, 4))],
      rtol=1e-5, atol=1e-5)
def random_samplers(kd, logits):
    k1, k2 = jax.random.split(jax.random.wrap_key_data(kd))
    return (jax.random.categorical(k1, logits, axis=-1),
            jax.random.choice(k2, 8, (4,), replace=False))


@case("elementwise library: logaddexp/logaddexp2, hypot, sinc, deg2rad, heaviside, "
      "float_power, exp2/log2/log10, cbrt, reciprocal, square, sign of ints, gcd/lcm, "
      "isin, bitwise reductions (reduce_or/and/xor of uint32).",
      lambda rng: [normal(rng, (8,)) * 3, with_edges(normal(rng, (8,)), (0.0, -0.0, 1.0)),
                   ints(rng, (8,), -40, 40),
                   rng.integers(0, 2**32, (3, 5), dtype=np.uint64).astype(np.uint32)],
      rtol=1e-5, atol=1e-6)
def elementwise_library(a, b, i, u):
    return (jnp.logaddexp(a, b), jnp.logaddexp2(a, b), jnp.hypot(a, b), jnp.sinc(a),
            jnp.deg2rad(a), jnp.heaviside(b, 0.5), jnp.float_power(jnp.abs(a), b),
            jnp.exp2(b), jnp.log2(jnp.abs(a)), jnp.log10(jnp.abs(a)), jnp.cbrt(a),
            jnp.reciprocal(a), jnp.square(i), jnp.sign(i), jnp.gcd(i, 12), jnp.lcm(i, 6),
            jnp.isin(i, jnp.array([1, -3, 7])),
            lax.reduce(u, jnp.uint32(0), lax.bitwise_or, (1,)),
            lax.reduce(u, jnp.uint32(0xFFFFFFFF), lax.bitwise_and, (0,)),
            lax.reduce(u, jnp.uint32(0), lax.bitwise_xor, (0, 1)))


@case("x64 mode integer and float corners: uint64 shifts/div past 2**63, int64 "
      "min/-1, f64 nextafter and frexp, s64 argsort, cumsum of uint32 wrapping, "
      "jax.random bits as uint64, f64 fft.",
      lambda rng: [np.array([2**63 + 5, 2**64 - 1, 0, 12345678901234567], np.uint64),
                   np.array([-2**63, -1, 2**62, -7], np.int64), normal(rng, (4,), np.float64),
                   np.array([4000000000, 300000000, 1, 2], np.uint32),
                   np.array([0, 7], np.uint32)],
      rtol=1e-12, atol=1e-12, x64=True)
def x64_corners(u, i, d, w, kd):
    key = jax.random.wrap_key_data(kd)
    return (u >> jnp.uint64(3), u // jnp.uint64(7), u % jnp.uint64(1000), lax.div(i, jnp.int64(
        -1)), lax.rem(i, jnp.int64(-1)), jnp.nextafter(d, jnp.inf), *jnp.frexp(d),
        jnp.argsort(i), jnp.cumsum(w, dtype=jnp.uint32), jax.random.bits(key, (3,), jnp.uint64),
        jnp.fft.fft(d), u.astype(jnp.float64), d.astype(jnp.uint64))


@case("scatter variants through lax.scatter directly: update_window_dims with inserted dims, "
      "scatter of whole rows with unique_indices/indices_are_sorted, scatter-apply with a "
      "custom combiner (x * 2 + u), and FILL_OR_DROP / CLIP modes.",
      lambda rng: [normal(rng, (5, 4)), np.array([[3], [0], [4]], np.int32),
                   normal(rng, (3, 4)), np.array([[1, 1], [6, 0], [2, 3]], np.int32),
                   normal(rng, (3, 2, 2))],
      rtol=1e-6, atol=1e-6)
def scatter_lax_direct(x, rows, upd, starts, win):
    rdn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                      scatter_dims_to_operand_dims=(0,))
    wdn = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                      scatter_dims_to_operand_dims=(0, 1))
    return (lax.scatter(x, rows, upd, rdn, indices_are_sorted=False, unique_indices=True),
            lax.scatter_add(x, rows, upd, rdn, indices_are_sorted=True),
            lax.scatter_apply(x, rows, lambda t: t * 2 + 1, rdn, update_shape=(3, 4)),
            lax.scatter(x, starts, win, wdn, mode=lax.GatherScatterMode.FILL_OR_DROP),
            lax.scatter_max(x, starts, win, wdn, mode=lax.GatherScatterMode.CLIP))
