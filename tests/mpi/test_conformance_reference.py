"""The conformance suite's own reference, pinned to worked examples of docs/reference/collective-semantics.md.

No MPI needed (these run in the plain pytest run and on every rank under mpiexec): if the
reference in conformance_helpers.py drifted, the conformance suite would check the runtime
against the wrong answer.
"""

import numpy as np
import pytest

import xladist
from tests.mpi import test_conformance as suite
from tests.mpi.conformance_helpers import (
    CP,
    CR,
    CRP,
    FID,
    expand,
    fold,
    iota_groups,
    make_input,
    permute_sources,
)
from xladist.hlo.verifier import verify_module


@pytest.mark.parametrize("spec,groups", [
    ((2, 2, (4,), None), [[0, 1], [2, 3]]),                         # [2,2]<=[4]
    ((2, 2, (2, 2), (1, 0)), [[0, 2], [1, 3]]),                     # [2,2]<=[2,2]T(1,0)
    ((4, 2, (2, 4), (1, 0)), [[0, 4], [1, 5], [2, 6], [3, 7]]),     # [4,2]<=[2,4]T(1,0)
])
def test_iota_groups_match_the_documented_examples(spec, groups):
    assert iota_groups(*spec) == groups


def test_group_modes_on_two_replicas_by_two_partitions():
    # device = partition * R + replica: (r0,p0)=0, (r1,p0)=1, (r0,p1)=2, (r1,p1)=3
    assert expand(CR, [[0, 1]], 2, 2) == [[0, 1], [2, 3]]
    assert expand(CP, [[0, 1]], 2, 2) == [[0, 2], [1, 3]]
    # XLA's replica-major order, not StableHLO's partition-major one (A.4)
    assert expand(CRP, [[0, 1]], 2, 2) == [[0, 2, 1, 3]]
    assert expand(FID, [[0, 3], [1, 2]], 2, 2) == [[0, 3], [2, 1]]
    assert expand(CR, [], 2, 2) == [[0, 1], [2, 3]]  # empty = all replicas, per partition
    assert expand(CRP, [], 2, 2) == [[0, 2, 1, 3]]


def test_permute_pairs_apply_per_replica_or_partition():
    # with a channel, ids are partition ids and the pair applies in every replica
    assert permute_sources([(0, 1)], True, 2, 2) == {2: 0, 3: 1}
    # without, ids are replica ids and the pair applies in every partition
    assert permute_sources([(0, 1)], False, 2, 2) == {1: 0, 3: 2}


def test_fold_wraps_integers_and_uses_the_select_reducer():
    xs = [np.array([100, -3], np.int8), np.array([100, 2], np.int8)]
    assert fold("add", "s8", xs).tolist() == [-56, -1]
    assert fold("sel", "s8", xs).tolist() == [100, 2]
    assert fold("sel", "pred", [np.array([False, True]), np.array([True, False])]).tolist() \
        == [True, True]


def test_inputs_are_deterministic_and_differ_between_devices():
    a = make_input(1, 0, 5, (3, 4), "bf16")
    assert np.array_equal(a, make_input(1, 0, 5, (3, 4), "bf16"))
    assert not np.array_equal(a, make_input(1, 1, 5, (3, 4), "bf16"))


@pytest.mark.parametrize("n", [2, 4])
def test_every_program_of_the_suite_parses_and_verifies(n):
    """The suite's HLO text is valid at both world sizes, whatever size runs this test."""
    for k, (R, P) in enumerate(suite.configs_for(n)):
        for op in suite.OPS:
            prog = suite.build(op, R, P, full=k == 0)
            verify_module(xladist.parse_hlo(prog.text()))
            assert prog.num_leaves >= len(prog.checks) >= 40
