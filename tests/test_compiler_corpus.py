"""The single-device corpus on the cpu backend, side by side with the interpreter.

Each case of tests/data/corpus/single is compiled with `backend="cpu"` and run on its
inputs; every output must match XLA:CPU's recorded result (expected.npz) *and* the
interpreter's result within the case's tolerances (integers and preds exact). The
multi-device corpus runs the cpu backend over MPI in tests/test_corpus_jax.py.
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


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kcache"))


def _tolerances(meta, key):
    override = meta.get("out_tol", {}).get(key)
    if isinstance(override, dict):
        return override.get("rtol", meta["rtol"]), override.get("atol", meta["atol"])
    if isinstance(override, (list, tuple)):
        return float(override[0]), float(override[1])
    return meta["rtol"], meta["atol"]


def _comparable(a):
    if a.dtype.name in ("bfloat16", "float16"):
        return a.astype(np.float32)
    return a


def _assert_close(got, want, rtol, atol, what):
    got, want = _comparable(np.asarray(got)), _comparable(np.asarray(want))
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if got.dtype.kind in "fc":
        ok = np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
        if not ok:
            err = np.nanmax(np.abs(got - want))
            pytest.fail(f"{what}: max abs error {err} (rtol={rtol}, atol={atol})")
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("case", CASES)
def test_cpu_matches_expected_and_interpreter(case):
    folder = CORPUS / case
    meta = json.loads((folder / "case.json").read_text())
    module = xladist.load_hlo(folder / "module.hlo")
    cpu = xladist.compile(module, backend="cpu")
    interp = xladist.compile(module, backend="interpreter")
    with np.load(folder / "inputs.npz") as npz:
        inputs = [npz[f"arg{p.parameter_number}"] for p in module.entry.parameters]
    with np.load(folder / "expected.npz") as npz:
        expected = {k: npz[k] for k in npz.files}
    got = cpu(*inputs)
    ref = interp(*inputs)
    leaves = [s for _, s in module.entry.root.shape.leaves() if s.is_array]
    assert len(got) == len(ref) == meta["num_outputs"]
    for i, (g, r, shape) in enumerate(zip(got, ref, leaves)):
        rtol, atol = _tolerances(meta, f"out{i}")
        want = decode(expected[f"out{i}"], shape)
        _assert_close(g, want, rtol, atol, f"{case} out{i} (cpu vs XLA)")
        _assert_close(g, r, rtol, atol, f"{case} out{i} (cpu vs interpreter)")


def test_second_compile_hits_the_cache():
    folder = CORPUS / "reduce_basic"
    module = xladist.load_hlo(folder / "module.hlo")
    first = xladist.compile(module, backend="cpu")
    again = xladist.compile(xladist.load_hlo(folder / "module.hlo"), backend="cpu")
    assert again.program.cached
    with np.load(folder / "inputs.npz") as npz:
        inputs = [npz[f"arg{p.parameter_number}"] for p in module.entry.parameters]
    for a, b in zip(first(*inputs), again(*inputs)):
        np.testing.assert_array_equal(a, b)
