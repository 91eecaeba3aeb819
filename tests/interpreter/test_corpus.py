"""The numerics families against XLA:CPU's own outputs: the single-device corpus cases
whose modules exercise them, run through the parser and the reference Evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from tests import corpus_util as cu
from xladist.hlo import parser
from xladist.interpreter import Evaluator

CORPUS = cu.CORPUS / "single"
CASES = ["conv2d_variants", "dot_general_f32", "fft_complex", "gather_indexing", "reduce_basic",
         "reduce_window_pooling", "rng_bit_generator_algorithms", "scatter_updates",
         "sort_variants"]


def _leaves(value):
    if isinstance(value, tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield np.asarray(value)


@pytest.mark.parametrize("name", CASES)
def test_corpus_case_matches_xla(name):
    case = CORPUS / name
    meta = cu.meta(case)
    assert not any(a.get("encoding") for a in meta["arrays"].values())  # no bf16 here
    module = parser.parse_module((case / "module.hlo").read_text())
    inputs = np.load(case / "inputs.npz")
    expected = np.load(case / "expected.npz")
    args = [inputs[f"arg{i}"] for i in range(meta["num_inputs"])]
    outs = list(_leaves(Evaluator(module).run(args)))
    assert len(outs) == meta["num_outputs"]
    for i, got in enumerate(outs):
        cu.assert_output(got, expected[f"out{i}"], meta, f"out{i}", f"{name} out{i}")
