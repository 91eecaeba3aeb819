"""maximum / minimum / clamp and max / min reductions: the cpu backend gives the
interpreter's bits (semantics/order.py: a NaN operand gives the canonical quiet NaN, and
+0 > -0) whatever the NaN operands' signs and payloads, in elementwise code and in every
form of reduction codegen emits (a row in lanes, a column chain, a reduction fused into
its consumer, a reduce-window). Before, llvm.maximum's NaN came out with either sign:
max(NaN, -NaN) was -NaN on cpu and +NaN on the interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import xladist

TYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
         "bf16": ml_dtypes.bfloat16}


def _specials(dtype) -> np.ndarray:
    """NaNs of both signs, with and without a payload, signed zeros and infinities."""
    bits = {np.float32: [0x7FC00000, 0xFFC00000, 0x7FC00123, 0xFFA00001],
            np.float64: [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000123,
                         0xFFF4000000000001]}
    if dtype in bits:
        u = np.uint32 if dtype == np.float32 else np.uint64
        nans = np.array(bits[dtype], u).view(dtype)
    elif dtype == np.float16:
        nans = np.array([0x7E00, 0xFE00, 0x7E01, 0xFD01], np.uint16).view(dtype)
    else:  # bfloat16
        nans = np.array([0x7FC0, 0xFFC0, 0x7FC1, 0xFFA1], np.uint16).view(dtype)
    with np.errstate(invalid="ignore"):
        assert np.isnan(nans.astype(np.float32)).all()
    others = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf], np.float32).astype(dtype)
    return np.concatenate([nans, others])


def _run(text: str, backend: str, *args):
    return xladist.compile(xladist.parse_hlo(text), backend=backend)(*args)


def _same_bits_and_canonical(text, *args):
    want = _run(text, "interpreter", *args)
    got = _run(text, "cpu", *args)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        bad = np.nonzero(np.asarray(g).view(f"u{g.itemsize}").ravel()
                         != np.asarray(w).view(f"u{w.itemsize}").ravel())[0]
        assert bad.size == 0, f"{bad.size} elements differ, first at {bad[0]}: " \
                              f"cpu {g.ravel()[bad[0]]!r} interpreter {w.ravel()[bad[0]]!r}"
        nan = np.isnan(g.astype(np.float64))
        canonical = np.array(np.nan, g.dtype).view(f"u{g.itemsize}")
        assert (g.view(f"u{g.itemsize}")[nan] == canonical).all()
    return got


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("op", ["maximum", "minimum", "clamp"])
def test_elementwise(t, op):
    s = _specials(TYPES[t])
    x, y = np.repeat(s, s.size), np.tile(s, s.size)
    n = x.size
    body = f"ROOT z = {t}[{n}] {op}(x, y)" if op != "clamp" else \
        f"h = {t}[] constant(0.5)\n  hb = {t}[{n}] broadcast(h), dimensions={{}}\n" \
        f"  ROOT z = {t}[{n}] clamp(x, y, hb)"
    text = f"""HloModule m
ENTRY main {{
  x = {t}[{n}] parameter(0)
  y = {t}[{n}] parameter(1)
  {body}
}}
"""
    got = _same_bits_and_canonical(text, x, y)[0]
    assert np.isnan(got.astype(np.float64)).sum() > 0


def _matrix(dtype, rows, cols, seed):
    """Random values with specials scattered in: some rows and columns get a NaN of
    either sign, others only zeros of both signs."""
    rng = np.random.default_rng(seed)
    m = (rng.random((rows, cols)) - 0.5).astype(dtype)
    s = _specials(dtype)
    for _ in range(rows * cols // 40):
        m[rng.integers(rows), rng.integers(cols)] = s[rng.integers(s.size)]
    m[1, :] = np.array(-0.0, dtype)
    m[2, :] = np.array(0.0, dtype)
    return m


@pytest.mark.parametrize("t", ["f32", "f64", "bf16"])
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_reductions(t, op):
    init = "-inf" if op == "maximum" else "inf"
    x = _matrix(TYPES[t], 40, 70, seed=hash((t, op)) % 1000)
    text = f"""HloModule m
r {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT c = {t}[] {op}(a, b)
}}
ENTRY main {{
  x = {t}[40,70] parameter(0)
  i = {t}[] constant({init})
  rows = {t}[40] reduce(x, i), dimensions={{1}}, to_apply=r
  cols = {t}[70] reduce(x, i), dimensions={{0}}, to_apply=r
  all = {t}[] reduce(x, i), dimensions={{0,1}}, to_apply=r
  e = {t}[40,70] negate(x)
  fused = {t}[40] reduce(e, i), dimensions={{1}}, to_apply=r
  rb = {t}[40,70] broadcast(fused), dimensions={{0}}
  use = {t}[40,70] {op}(rb, x)
  w = {t}[20,35] reduce-window(x, i), window={{size=2x2 stride=2x2}}, to_apply=r
  ROOT t = ({t}[40], {t}[70], {t}[], {t}[40,70], {t}[20,35]) tuple(rows, cols, all, use, w)
}}
"""
    got = _same_bits_and_canonical(text, x)
    assert np.isnan(got[0].astype(np.float64)).any() and \
        not np.isnan(got[0].astype(np.float64)).all()
