"""stochastic-convert, scaled-dot and ragged-dot on both backends, each against an
independent reference written here from the documented algorithm (XLA's
StochasticConvertDecomposer, ScaledDotRewriter and the RaggedDot operation semantics),
plus jax where jax can produce the op (skipped without jax: tests/optional.py)."""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import xladist
from xladist.compiler.program import CpuProgram
from xladist.errors import UnsupportedError, XlaDistError
from tests.optional import need_jax

BF16 = np.dtype(ml_dtypes.bfloat16)
F8E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


def run_both(text, *args):
    """(interpreter result, cpu result) of a one-result module."""
    module = xladist.parse_hlo(text)
    out = []
    for backend in ("interpreter", "cpu"):
        r = xladist.compile(module, backend=backend)(*args)
        out.append(np.asarray(r[0] if isinstance(r, (list, tuple)) else r))
    return out


# ---- stochastic-convert ----------------------------------------------------------------

def ref_stochastic(x, r, random_bits: int, result_bits: int) -> int:
    """One element, in exact rational arithmetic: NaN -> 0; x <= INT_MIN / x >= INT_MAX
    saturate; otherwise |x| = t + f rounds up iff r < floor(f * 2**random_bits), and the
    sign is applied afterwards."""
    x = float(x)
    lo, hi = -(2 ** (result_bits - 1)), 2 ** (result_bits - 1) - 1
    if math.isnan(x):
        return 0
    if x <= lo:
        return lo
    if x >= hi:
        return hi
    a = Fraction(abs(x))
    t = math.floor(a)
    fixed = math.floor((a - t) * 2 ** random_bits)
    v = t + (1 if int(r) < fixed else 0)
    return -v if x < 0 else v


def sc_module(ft, rt, dt, n):
    return f"""HloModule sc
ENTRY main {{
  x = {ft}[{n}] parameter(0)
  r = {rt}[{n}] parameter(1)
  ROOT s = {dt}[{n}] stochastic-convert(x, r)
}}
"""


FLOATS = {"f16": (np.float16, "u16", np.uint16), "bf16": (BF16, "u16", np.uint16),
          "f32": (np.float32, "u32", np.uint32), "f64": (np.float64, "u64", np.uint64),
          "f8e4m3fn": (F8E4M3, "u8", np.uint8),
          "f8e5m2": (np.dtype(ml_dtypes.float8_e5m2), "u8", np.uint8)}
SINTS = {"s8": 8, "s16": 16, "s32": 32, "s64": 64}


def _edge_values(fdt, rdt, nbits):
    """Edge cases with the random bits that decide them."""
    top = np.iinfo(rdt).max
    half = (top >> 1) + 1  # 0.5 as fixed point
    lo, hi = -(2 ** (nbits - 1)), 2 ** (nbits - 1) - 1
    cases = [
        (np.nan, 0), (np.inf, 0), (-np.inf, top), (0.0, 0), (-0.0, 0),
        (3.0, 0), (-3.0, 0),                       # no fraction: never rounds, even r = 0
        (2.5, half - 1), (2.5, half), (-2.5, half - 1), (-2.5, half),  # the threshold
        (0.75, 0), (0.75, top), (-0.75, 0), (-0.75, top),
        (hi + 0.5 if nbits <= 16 else float(hi), 0), (float(lo), top),
        (lo + 0.5 if nbits <= 16 else float(lo) * 2, 0),
        (1e30 if fdt != np.float16 else 60000.0, 0), (-1e30 if fdt != np.float16 else -6e4, 0),
    ]
    with np.errstate(over="ignore"):
        x = np.array([c[0] for c in cases], np.float64).astype(fdt)
    r = np.array([c[1] for c in cases], np.uint64).astype(rdt)
    return x, r


@pytest.mark.parametrize("ft,dt", [("f32", "s32"), ("f32", "s8"), ("bf16", "s8"),
                                   ("bf16", "s64"), ("f16", "s16"), ("f16", "s32"),
                                   ("f64", "s64"), ("f64", "s16"), ("f8e4m3fn", "s8"),
                                   ("f8e5m2", "s16")])
def test_stochastic_convert_matches_reference_bit_for_bit(ft, dt):
    fdt, rt, rdt = FLOATS[ft]
    nbits, rbits = SINTS[dt], np.dtype(rdt).itemsize * 8
    rng = np.random.default_rng(zlib.crc32(f"{ft}{dt}".encode()))
    n = 300
    with np.errstate(over="ignore"):
        x = (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 12, n)).astype(fdt)
    r = rng.integers(0, np.iinfo(rdt).max, n, dtype=rdt, endpoint=True)
    ex, er = _edge_values(fdt, rdt, nbits)
    x, r = np.concatenate([ex, x]), np.concatenate([er, r])
    interp, cpu = run_both(sc_module(ft, rt, dt, x.size), x, r)
    want = np.array([ref_stochastic(a, b, rbits, nbits) for a, b in zip(x, r)], np.int64)
    np.testing.assert_array_equal(interp.astype(np.int64), want)
    assert cpu.dtype == interp.dtype == np.dtype(f"int{nbits}")
    np.testing.assert_array_equal(cpu, interp)


def test_stochastic_convert_rounds_up_with_the_probability_of_the_fraction():
    # Every u16 bit pattern once: 2.296875 (exact in bf16) rounds up for exactly
    # 0.296875 * 2**16 = 19456 of them.
    r = np.arange(2 ** 16, dtype=np.uint64).astype(np.uint16)
    x = np.full(r.size, 2.296875, BF16)
    assert float(x[0]) == 2.296875
    interp, cpu = run_both(sc_module("bf16", "u16", "s32", r.size), x, r)
    for got in (interp, cpu):
        assert set(np.unique(got).tolist()) == {2, 3}
        assert int((got == 3).sum()) == 19456
        np.testing.assert_array_equal(got == 3, r < 19456)


def test_stochastic_convert_fraction_below_the_random_resolution_never_rounds_up():
    # 2**-20 in bf16: its fraction is below 2**-16, the fixed-point value is 0.
    # 2**-14 is 4 / 2**16: random bits 3 round it up, 4 do not.
    x = np.array([2.0 ** -20, -(2.0 ** -20), 2.0 ** -14, 2.0 ** -14], BF16)
    r = np.array([0, 0, 3, 4], np.uint16)
    interp, cpu = run_both(sc_module("bf16", "u16", "s8", 4), x, r)
    np.testing.assert_array_equal(interp, [0, 0, 1, 0])
    np.testing.assert_array_equal(cpu, interp)


def test_stochastic_convert_fuses_with_its_producers():
    text = """HloModule f
ENTRY main {
  a = f32[64] parameter(0)
  b = f32[64] parameter(1)
  r = u32[64] parameter(2)
  m = f32[64] multiply(a, b)
  ROOT s = s32[64] stochastic-convert(m, r)
}
"""
    ts = CpuProgram(xladist.parse_hlo(text)).entry.thunks
    assert [t.kind for t in ts] == ["kernel"]
    assert {i.name for i in ts[0].spec.fused} >= {"m", "s"}
    a = np.linspace(-3, 3, 64, dtype=np.float32)
    b = np.full(64, 1.3, np.float32)
    r = np.random.default_rng(1).integers(0, 2**32, 64, dtype=np.uint32)
    interp, cpu = run_both(text, a, b, r)
    want = [ref_stochastic(v, w, 32, 32) for v, w in zip(a * b, r)]
    np.testing.assert_array_equal(interp, want)
    np.testing.assert_array_equal(cpu, interp)


@pytest.mark.parametrize("dt", ["u32", "f16"])
def test_stochastic_convert_to_a_non_signed_type_is_refused_by_both_backends(dt):
    text = sc_module("f32", "u32", dt, 4)
    x, r = np.zeros(4, np.float32), np.zeros(4, np.uint32)
    with pytest.raises(UnsupportedError, match="only to signed integer"):
        xladist.compile(xladist.parse_hlo(text), backend="cpu")(x, r)
    with pytest.raises(XlaDistError, match="only to signed integer"):
        xladist.compile(xladist.parse_hlo(text), backend="interpreter")(x, r)


@pytest.mark.parametrize("ft,rt", [("f8e4m3", "u8"), ("f4e2m1fn", "u4")])
def test_stochastic_convert_from_a_float_that_cannot_hold_2_to_the_bits_is_refused(ft, rt):
    # XLA multiplies the fraction by 2**bits in the operand type: 256 overflows f8e4m3
    # (max 240) and 16 overflows f4e2m1fn (max 6), so the decomposition is meaningless.
    text = sc_module(ft, rt, "s8", 2)
    for backend in ("interpreter", "cpu"):
        with pytest.raises(UnsupportedError, match="overflows"):
            exe = xladist.compile(xladist.parse_hlo(text), backend=backend)
            exe(np.zeros(2, getattr(ml_dtypes, {"f8e4m3": "float8_e4m3",
                                               "f4e2m1fn": "float4_e2m1fn"}[ft])),
                np.zeros(2, ml_dtypes.uint4 if rt == "u4" else np.uint8))


@pytest.mark.parametrize("rt", ["u16", "s32"])
def test_stochastic_convert_random_bits_must_be_unsigned_of_the_operand_width(rt):
    with pytest.raises(XlaDistError, match="random bits must be unsigned"):
        xladist.compile(xladist.parse_hlo(sc_module("f32", rt, "s32", 4)), backend="cpu")


# ---- scaled-dot ------------------------------------------------------------------------

def ref_dequantize(x, scale, dtype):
    """x times the scale element covering it (element i of a dimension of size n is in
    block i // (n // scale_n)), the exact product rounded once to `dtype`."""
    idx = np.indices(x.shape)
    covering = tuple(idx[d] // (x.shape[d] // scale.shape[d]) for d in range(x.ndim))
    exact = x.astype(np.float64) * scale[covering].astype(np.float64)
    return exact.astype(dtype)


def sd_module(lt, ls, rt, rs, out, dims):
    return f"""HloModule sd
ENTRY main {{
  a = {lt} parameter(0)
  b = {rt} parameter(1)
  sa = {ls} parameter(2)
  sb = {rs} parameter(3)
  ROOT d = {out} scaled-dot(a, b, sa, sb), {dims}
}}
"""


def _pow2(rng, shape, dtype, lo=-4, hi=4):
    return (2.0 ** rng.integers(lo, hi, shape)).astype(dtype)


def test_scaled_dot_mx_fp8_blocks_of_32_along_the_contracting_dim():
    rng = np.random.default_rng(7)
    lhs = rng.standard_normal((4, 64)).astype(F8E4M3)
    rhs = rng.standard_normal((3, 64)).astype(F8E4M3)
    ls, rs = _pow2(rng, (4, 2), E8M0), _pow2(rng, (3, 2), E8M0)
    text = sd_module("f8e4m3fn[4,64]", "f8e8m0fnu[4,2]", "f8e4m3fn[3,64]", "f8e8m0fnu[3,2]",
                     "f32[4,3]", "lhs_contracting_dims={1}, rhs_contracting_dims={1}")
    interp, cpu = run_both(text, lhs, rhs, ls, rs)
    want = ref_dequantize(lhs, ls, BF16).astype(np.float64) @ \
        ref_dequantize(rhs, rs, BF16).astype(np.float64).T
    assert interp.dtype == cpu.dtype == np.float32
    np.testing.assert_allclose(interp, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cpu, interp, rtol=1e-6, atol=1e-6)


def test_scaled_dot_batched_with_bf16_result_and_rhs_contracting_first():
    rng = np.random.default_rng(8)
    f8e5m2 = np.dtype(ml_dtypes.float8_e5m2)
    lhs = rng.integers(-3, 4, (2, 4, 64)).astype(f8e5m2)
    rhs = rng.integers(-3, 4, (2, 64, 3)).astype(f8e5m2)
    ls, rs = _pow2(rng, (2, 4, 2), E8M0, -2, 2), _pow2(rng, (2, 2, 3), E8M0, -2, 2)
    text = sd_module("f8e5m2[2,4,64]", "f8e8m0fnu[2,4,2]", "f8e5m2[2,64,3]",
                     "f8e8m0fnu[2,2,3]", "bf16[2,4,3]",
                     "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                     "rhs_contracting_dims={1}")
    interp, cpu = run_both(text, lhs, rhs, ls, rs)
    want = np.einsum("bmk,bkn->bmn", ref_dequantize(lhs, ls, BF16).astype(np.float64),
                     ref_dequantize(rhs, rs, BF16).astype(np.float64)).astype(BF16)
    assert interp.dtype == cpu.dtype == BF16
    np.testing.assert_array_equal(interp, want)  # small integers times powers of two: exact
    np.testing.assert_array_equal(cpu, interp)


def test_scaled_dot_rounds_the_dequantized_operand_to_its_type():
    # bf16 x bf16 dequantizes in bf16: 3 * (1 + 2**-7) = 3.0234375 is a tie between
    # 3.015625 and 3.03125 and rounds to even, 3.03125.
    lhs = np.array([[1.0078125, 1.0078125]], BF16)
    rhs = np.array([[1.0], [0.0]], BF16)
    ls, rs = np.array([[3.0]], BF16), np.array([[1.0], [1.0]], BF16)
    text = sd_module("bf16[1,2]", "bf16[1,1]", "bf16[2,1]", "bf16[2,1]", "f32[1,1]",
                     "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    interp, cpu = run_both(text, lhs, rhs, ls, rs)
    assert float(interp[0, 0]) == float(cpu[0, 0]) == 3.03125
    # f32 data with a bf16 scale dequantizes in f32 (the wider type): no bf16 rounding.
    x = np.array([[1 + 2.0 ** -20, 0.0]], np.float32)
    text = sd_module("f32[1,2]", "bf16[1,1]", "bf16[2,1]", "bf16[2,1]", "f32[1,1]",
                     "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    interp, cpu = run_both(text, x, rhs, ls, rs)
    assert float(interp[0, 0]) == float(cpu[0, 0]) == 3 + 3 * 2.0 ** -20


def test_scaled_dot_scale_blocks_may_cover_free_dimensions_too():
    rng = np.random.default_rng(9)
    lhs = rng.integers(-4, 5, (4, 8)).astype(np.float32)
    rhs = rng.integers(-4, 5, (8, 3)).astype(np.float32)
    ls = _pow2(rng, (2, 4), np.float32)       # blocks of 2 rows x 2 columns
    rs = _pow2(rng, (8, 3), np.float32)       # one scale per element
    text = sd_module("f32[4,8]", "f32[2,4]", "f32[8,3]", "f32[8,3]", "f32[4,3]",
                     "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    interp, cpu = run_both(text, lhs, rhs, ls, rs)
    want = ref_dequantize(lhs, ls, np.float32).astype(np.float64) @ \
        ref_dequantize(rhs, rs, np.float32).astype(np.float64)
    np.testing.assert_array_equal(interp, want.astype(np.float32))
    np.testing.assert_array_equal(cpu, interp)


@pytest.mark.parametrize("ls,match", [
    ("f32[]", "must have the rank"),
    ("f32[4]", "must have the rank"),
    ("f32[4,3]", "is not a multiple"),
    ("s32[4,2]", "must be floating-point"),
])
def test_scaled_dot_malformed_scales_are_rejected_by_the_verifier(ls, match):
    text = sd_module("f32[4,8]", ls, "f32[8,3]", "f32[8,3]", "f32[4,3]",
                     "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    with pytest.raises(XlaDistError, match=match):
        xladist.compile(xladist.parse_hlo(text), backend="interpreter")


def test_scaled_dot_matches_jax_lax_scaled_dot():
    jax = need_jax()
    if not hasattr(jax.lax, "scaled_dot"):
        pytest.skip("this jax has no lax.scaled_dot")
    rng = np.random.default_rng(10)
    lhs = rng.standard_normal((4, 64)).astype(F8E4M3)
    rhs = rng.standard_normal((64, 3)).astype(F8E4M3)
    ls, rs = _pow2(rng, (4, 2), E8M0), _pow2(rng, (2, 3), E8M0)
    want = np.asarray(jax.lax.scaled_dot(lhs, rhs, lhs_scale=ls, rhs_scale=rs,
                                         preferred_element_type=np.float32))
    text = sd_module("f8e4m3fn[4,64]", "f8e8m0fnu[4,2]", "f8e4m3fn[64,3]", "f8e8m0fnu[2,3]",
                     "f32[4,3]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    for got in run_both(text, lhs, rhs, ls, rs):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---- ragged-dot ------------------------------------------------------------------------

def _ranges(sizes, extent):
    start = 0
    for s in sizes:
        yield max(0, min(start, extent)), max(0, min(start + int(s), extent))
        start += int(s)


def ref_ragged(case, lhs, rhs, sizes):
    """Group by group with explicit slices, in f64 (the RaggedDot semantics per mode)."""
    lhs, rhs = lhs.astype(np.float64), rhs.astype(np.float64)
    kind = case["kind"]
    if kind == "rows":  # lhs [m, k], rhs [g, k, n]
        out = np.zeros((lhs.shape[0], rhs.shape[2]))
        for i, (s, e) in enumerate(_ranges(sizes, lhs.shape[0])):
            out[s:e] = lhs[s:e] @ rhs[i]
    elif kind == "rows_batched":  # lhs [b, m, k], rhs [b, g, k, n]
        out = np.zeros((lhs.shape[0], lhs.shape[1], rhs.shape[3]))
        for i, (s, e) in enumerate(_ranges(sizes, lhs.shape[1])):
            out[:, s:e] = np.einsum("bmk,bkn->bmn", lhs[:, s:e], rhs[:, i])
    elif kind == "rows_transposed":  # lhs [k, m], rhs [n, k, g]
        out = np.zeros((lhs.shape[1], rhs.shape[0]))
        for i, (s, e) in enumerate(_ranges(sizes, lhs.shape[1])):
            out[s:e] = lhs[:, s:e].T @ rhs[:, :, i].T
    elif kind == "contracting":  # lhs [m, k], rhs [k, n] -> [g, m, n]
        out = np.zeros((len(sizes), lhs.shape[0], rhs.shape[1]))
        for i, (s, e) in enumerate(_ranges(sizes, lhs.shape[1])):
            out[i] = lhs[:, s:e] @ rhs[s:e]
    else:  # batch: lhs [b, m, k], rhs [b, k, n]; XLA emits the plain dot (sizes unused)
        out = np.einsum("bmk,bkn->bmn", lhs, rhs)
    return out


def _case(kind, lhs, rhs, sizes, out, dims, jax_dims, ragged, group):
    return {"kind": kind, "lhs": lhs, "rhs": rhs, "sizes": sizes, "out": out, "dims": dims,
            "jax": jax_dims, "ragged": ragged, "group": group}


RAGGED = {
    "rows": _case("rows", (7, 4), (3, 4, 5), [2, 0, 4], (7, 5),
                  "lhs_contracting_dims={1}, rhs_contracting_dims={1}, "
                  "lhs_ragged_dims={0}, rhs_group_dims={0}",
                  (((1,), (1,)), ((), ())), [0], [0]),
    "rows_batched": _case("rows_batched", (2, 6, 3), (2, 2, 3, 4), [4, 2], (2, 6, 4),
                          "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                          "rhs_contracting_dims={2}, lhs_ragged_dims={1}, rhs_group_dims={1}",
                          (((2,), (2,)), ((0,), (0,))), [1], [1]),
    "rows_transposed": _case("rows_transposed", (3, 5), (2, 3, 2), [1, 3], (5, 2),
                             "lhs_contracting_dims={0}, rhs_contracting_dims={1}, "
                             "lhs_ragged_dims={1}, rhs_group_dims={2}",
                             (((0,), (1,)), ((), ())), [1], [2]),
    "contracting": _case("contracting", (3, 6), (6, 2), [1, 3, 1], (3, 3, 2),
                         "lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                         "lhs_ragged_dims={1}",
                         (((1,), (0,)), ((), ())), [1], []),
    "batch": _case("batch", (4, 2, 3), (4, 3, 2), [1, 2], (4, 2, 2),
                   "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                   "rhs_contracting_dims={1}, lhs_ragged_dims={0}",
                   (((2,), (1,)), ((0,), (0,))), [0], []),
}


def rd_module(case, ft="f32", out_t="f32"):
    shp = ",".join
    return f"""HloModule rd
ENTRY main {{
  a = {ft}[{shp(map(str, case["lhs"]))}] parameter(0)
  b = {ft}[{shp(map(str, case["rhs"]))}] parameter(1)
  g = s32[{len(case["sizes"])}] parameter(2)
  ROOT d = {out_t}[{shp(map(str, case["out"]))}] ragged-dot(a, b, g), {case["dims"]}
}}
"""


def _ragged_inputs(case, dtype, seed):
    rng = np.random.default_rng(seed)
    lhs = rng.integers(-4, 5, case["lhs"]).astype(dtype)
    rhs = rng.integers(-4, 5, case["rhs"]).astype(dtype)
    return lhs, rhs, np.array(case["sizes"], np.int32)


@pytest.mark.parametrize("name", sorted(RAGGED))
def test_ragged_dot_cpu_matches_interpreter_and_reference(name):
    case = RAGGED[name]
    lhs, rhs, sizes = _ragged_inputs(case, np.float32, len(name))
    interp, cpu = run_both(rd_module(case), lhs, rhs, sizes)
    want = ref_ragged(case, lhs, rhs, sizes).astype(np.float32)  # small integers: exact
    np.testing.assert_array_equal(interp, want)
    np.testing.assert_array_equal(cpu, want)


@pytest.mark.parametrize("sizes", [[0, 0, 0], [7, 0, 0], [3, 9, 1], [0, 2, 5]])
def test_ragged_dot_groups_past_the_end_or_empty(sizes):
    case = dict(RAGGED["rows"], sizes=sizes)
    lhs, rhs, g = _ragged_inputs(case, np.float32, 3)
    interp, cpu = run_both(rd_module(case), lhs, rhs, g)
    np.testing.assert_array_equal(interp, ref_ragged(case, lhs, rhs, g))
    np.testing.assert_array_equal(cpu, interp)


def test_ragged_dot_bf16_operands_f32_result():
    case = RAGGED["rows_batched"]
    rng = np.random.default_rng(11)
    lhs = rng.standard_normal(case["lhs"]).astype(BF16)
    rhs = rng.standard_normal(case["rhs"]).astype(BF16)
    sizes = np.array(case["sizes"], np.int32)
    interp, cpu = run_both(rd_module(case, "bf16", "f32"), lhs, rhs, sizes)
    want = ref_ragged(case, lhs, rhs, sizes)
    assert cpu.dtype == np.float32
    np.testing.assert_allclose(interp, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(cpu, interp, rtol=1e-6, atol=1e-6)


def test_ragged_dot_is_a_library_thunk():
    ts = CpuProgram(xladist.parse_hlo(rd_module(RAGGED["rows"]))).entry.thunks
    assert [t.kind for t in ts] == ["library"]


@pytest.mark.parametrize("name", sorted(RAGGED))
def test_ragged_dot_matches_jax(name):
    jax = need_jax()
    case = RAGGED[name]
    lhs, rhs, sizes = _ragged_inputs(case, np.float32, len(name) + 1)
    dn = jax.lax.RaggedDotDimensionNumbers(case["jax"], case["ragged"], case["group"])
    want = np.asarray(jax.lax.ragged_dot_general(lhs, rhs, sizes, dn, precision="highest"))
    for got in run_both(rd_module(case), lhs, rhs, sizes):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name,layout", [("rows", "{0,1}"), ("contracting", "{0,2,1}")])
def test_ragged_dot_into_a_non_default_result_layout(name, layout):
    case = RAGGED[name]
    text = rd_module(case).replace(f"{','.join(map(str, case['out']))}] ragged-dot",
                                   f"{','.join(map(str, case['out']))}]{layout} ragged-dot")
    assert layout in text
    lhs, rhs, sizes = _ragged_inputs(case, np.float32, 5)
    interp, cpu = run_both(text, lhs, rhs, sizes)
    want = ref_ragged(case, lhs, rhs, sizes)
    np.testing.assert_array_equal(interp, want)
    np.testing.assert_array_equal(cpu, want)
