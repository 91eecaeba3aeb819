"""The bounded-dynamic-shape corpus (tests/data/corpus/dynamic, made by
tools/gen_dynamic_corpus.py): hand-written programs with set-dimension-size,
get-dimension-size, dynamic-reshape, run by both backends for every recorded size tuple
(including 0 and the full bound) against XLA:CPU's results, cut to their dynamic sizes."""

from __future__ import annotations

import numpy as np
import pytest

import xladist

from . import corpus_util as cu

CORPUS = cu.CORPUS / "dynamic"
CASES = [p.name for p in cu.case_folders("dynamic")]


def test_the_corpus_is_present():
    assert len(CASES) == 22


def _runs(folder):
    meta = cu.meta(folder)
    with np.load(folder / "inputs.npz") as i, np.load(folder / "expected.npz") as e:
        for r in range(meta["runs"]):
            args = [i[f"run{r}_arg{k}"] for k in range(len([x for x in i.files
                                                              if x.startswith(f"run{r}_")]))]
            outs = [e[f"run{r}_out{k}"] for k in range(meta["num_outputs"])]
            yield meta["sizes"][r], args, outs


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("case", CASES)
def test_dynamic_case(case, backend):
    folder = CORPUS / case
    meta = cu.meta(folder)
    exe = xladist.compile(xladist.load_hlo(folder / "module.hlo"), backend=backend)
    runs = list(_runs(folder))
    assert any(0 in sizes for sizes, _, _ in runs) or case == "mean_variance"
    for sizes, args, expected in runs:
        got = exe(*args)
        assert len(got) == len(expected)
        for k, (g, w) in enumerate(zip(got, expected)):
            cu.assert_output(g, w, meta, f"out{k}", f"{case} sizes={sizes} out{k} ({backend})")
