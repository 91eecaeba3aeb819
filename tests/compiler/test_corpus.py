"""The single-device corpus on the cpu backend, side by side with the interpreter.

Each case of tests/data/corpus/single is compiled with `backend="cpu"` and run on its
inputs; every output must match XLA:CPU's recorded result (expected.npz) *and* the
interpreter's result within the case's tolerances (integers and preds exact). The
multi-device corpus runs the cpu backend over MPI in tests/jax/test_corpus_jax.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.io import decode

from tests import corpus_util as cu

CORPUS = cu.CORPUS / "single"
CASES = [p.name for p in cu.case_folders("single")]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow
def test_cpu_matches_expected_and_interpreter(case):
    folder = CORPUS / case
    meta = cu.meta(folder)
    module = xladist.load_hlo(folder / "module.hlo")
    cpu = xladist.compile(module, backend="cpu")
    interp = xladist.compile(module, backend="interpreter")
    inputs = cu.inputs(folder, module)
    expected = cu.expected(folder)
    got = cpu(*inputs)
    ref = interp(*inputs)
    leaves = [s for _, s in module.entry.root.shape.leaves() if s.is_array]
    assert len(got) == len(ref) == meta["num_outputs"]
    for i, (g, r, shape) in enumerate(zip(got, ref, leaves)):
        key = f"out{i}"
        want = decode(expected[key], shape)
        cu.assert_output(g, want, meta, key, f"{case} {key} (cpu vs XLA)")
        cu.assert_output(g, r, meta, key, f"{case} {key} (cpu vs interpreter)")


def test_second_compile_hits_the_cache():
    folder = CORPUS / "reduce_basic"
    module = xladist.load_hlo(folder / "module.hlo")
    first = xladist.compile(module, backend="cpu")
    again = xladist.compile(xladist.load_hlo(folder / "module.hlo"), backend="cpu")
    assert again.program.cached
    inputs = cu.inputs(folder, module)
    for a, b in zip(first(*inputs), again(*inputs)):
        np.testing.assert_array_equal(a, b)
