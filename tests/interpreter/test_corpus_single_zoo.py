"""The single-device zoo (tests/data/corpus/single_zoo, made by tools/gen_zoo_single.py):
small real JAX programs run on both backends, from both the portable module (module.hlo)
and the module XLA:CPU optimized (module.optimized.hlo), against XLA:CPU's recorded outputs.

Comparison as for every corpus case (tests/corpus_util.py): integers and preds exact, floats
and complex with allclose under case.json's tolerances (per-output `out_tol` overrides).
"""

from __future__ import annotations

import pytest

import xladist
from xladist.io import decode

from tests import corpus_util as cu

CORPUS = cu.CORPUS / "single_zoo"
CASES = [p.name for p in cu.case_folders("single_zoo")]
MODULES = ["module.hlo", "module.optimized.hlo"]
BACKENDS = ["interpreter", "cpu"]


def test_the_zoo_is_present_and_small():
    assert len(CASES) >= 40
    for case in CASES:
        folder = CORPUS / case
        size = sum(f.stat().st_size for f in folder.iterdir())
        assert size < 100_000, f"{case}: {size} bytes"
        assert {f.name for f in folder.iterdir()} == {
            "case.json", "inputs.npz", "expected.npz", *MODULES}, case


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("module_file", MODULES, ids=["portable", "optimized"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow
def test_zoo_case(case, module_file, backend):
    folder = CORPUS / case
    meta = cu.meta(folder)
    module = xladist.load_hlo(folder / module_file)
    exe = xladist.compile(module, backend=backend)
    outputs = exe(*cu.inputs(folder, module))
    expected = cu.expected(folder)
    leaves = [s for _, s in module.entry.root.shape.leaves() if s.is_array]
    assert len(outputs) == len(expected) == meta["num_outputs"]
    for i, (got, shape) in enumerate(zip(outputs, leaves)):
        key = f"out{i}"
        cu.assert_output(got, decode(expected[key], shape), meta, key,
                         f"{case} {module_file} {backend} {key}")
