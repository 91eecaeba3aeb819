"""The single-device corpus (tests/data/corpus/single): JAX-made modules run by the
interpreter backend against XLA:CPU's recorded outputs.

Each case: parse module.hlo, `xladist.compile(module, backend="interpreter")` (which also
verifies), run on inputs.npz, compare with expected.npz: integers and preds bit-exact,
floats with np.allclose under case.json's rtol/atol (per-output `out_tol` overrides),
bf16 compared after decoding the uint16 bit patterns.
"""

from __future__ import annotations

import pytest

import xladist
from xladist.io import decode

from tests import corpus_util as cu

CASES = [p.name for p in cu.case_folders("single")]
CORPUS = cu.CORPUS / "single"


def test_the_corpus_is_present():
    assert len(CASES) == 20


@pytest.mark.parametrize("case", CASES)
def test_corpus_case(case):
    folder = CORPUS / case
    meta = cu.meta(folder)
    module = xladist.load_hlo(folder / "module.hlo")
    exe = xladist.compile(module, backend="interpreter")
    outputs = exe(*cu.inputs(folder, module))  # bf16 parameters take the uint16 bits as stored
    expected = cu.expected(folder)
    assert len(outputs) == len(expected) == meta["num_outputs"]
    leaves = [s for _, s in module.entry.root.shape.leaves()]
    for i, (got, shape) in enumerate(zip(outputs, leaves)):
        key = f"out{i}"
        cu.assert_output(got, decode(expected[key], shape), meta, key, f"{case} {key}")
