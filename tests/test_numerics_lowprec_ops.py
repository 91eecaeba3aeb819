"""stochastic-convert, scaled-dot and ragged-dot on both backends, each against an
independent reference written here from the documented algorithm (XLA's
StochasticConvertDecomposer, ScaledDotRewriter and the RaggedDot operation semantics),
plus jax where jax can produce the op (importorskip)."""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import xladist
from xladist.errors import UnsupportedError, XlaDistError
from xladist.compiler.program import CpuProgram

BF16 = np.dtype(ml_dtypes.bfloat16)
F8E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kcache"))


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
          "f32": (np.float32, "u32", np.uint32), "f64": (np.float64, "u64", np.uint64)}
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
                                   ("f64", "s64"), ("f64", "s16")])
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


@pytest.mark.parametrize("rt", ["u16", "s32"])
def test_stochastic_convert_random_bits_must_be_unsigned_of_the_operand_width(rt):
    with pytest.raises(XlaDistError, match="random bits must be unsigned"):
        xladist.compile(xladist.parse_hlo(sc_module("f32", rt, "s32", 4)), backend="cpu")
