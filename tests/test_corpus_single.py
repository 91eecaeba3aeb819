"""The single-device corpus (tests/data/corpus/single): JAX-made modules run by the
interpreter backend against XLA:CPU's recorded outputs.

Each case: parse module.hlo, `xladist.compile(module, backend="interpreter")` (which also
verifies), run on inputs.npz, compare with expected.npz: integers and preds bit-exact,
floats with np.allclose under case.json's rtol/atol (per-output `out_tol` overrides),
bf16 compared after decoding the uint16 bit patterns.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import xladist
from xladist.io import decode

CORPUS = Path(__file__).parent / "data" / "corpus" / "single"
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "module.hlo").exists())


def tolerances(meta: dict, key: str) -> tuple[float, float]:
    override = meta.get("out_tol", {}).get(key)
    if isinstance(override, dict):
        return override.get("rtol", meta["rtol"]), override.get("atol", meta["atol"])
    if isinstance(override, (list, tuple)):
        return tuple(override)
    return meta["rtol"], meta["atol"]


def as_comparable(a: np.ndarray) -> np.ndarray:
    """bf16 -> f32 (exact), other narrow floats likewise; everything else as is."""
    if a.dtype.name in ("bfloat16", "float16") or a.dtype.name.startswith("float8"):
        return a.astype(np.float32)
    return a


def test_the_corpus_is_present():
    assert len(CASES) == 20


@pytest.mark.parametrize("case", CASES)
def test_corpus_case(case):
    folder = CORPUS / case
    meta = json.loads((folder / "case.json").read_text())
    module = xladist.load_hlo(folder / "module.hlo")
    exe = xladist.compile(module, backend="interpreter")
    with np.load(folder / "inputs.npz") as npz:
        inputs = [npz[f"arg{p.parameter_number}"] for p in module.entry.parameters]
    outputs = exe(*inputs)  # bf16 parameters take the uint16 bits as stored
    with np.load(folder / "expected.npz") as npz:
        expected = {k: npz[k] for k in npz.files}
    assert len(outputs) == len(expected) == meta["num_outputs"]
    leaves = [s for _, s in module.entry.root.shape.leaves()]
    for i, (got, shape) in enumerate(zip(outputs, leaves)):
        key = f"out{i}"
        want = decode(expected[key], shape)
        assert got.dtype == want.dtype, f"{case} {key}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{case} {key}: dims {got.shape} != {want.shape}"
        if shape.element_type.is_floating_or_complex:
            rtol, atol = tolerances(meta, key)
            np.testing.assert_allclose(as_comparable(got), as_comparable(want), rtol=rtol,
                                       atol=atol, equal_nan=True, err_msg=f"{case} {key}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{case} {key}")
