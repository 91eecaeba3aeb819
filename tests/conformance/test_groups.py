"""The suite's own group rules (xladist/conformance/groups.py), pinned to worked examples of
docs/reference/collective-semantics.md: if they drifted, the kit would check backends against
the wrong answer."""

import numpy as np
import pytest

from xladist.conformance.groups import (CP, CR, CRP, FID, default_assignment, expand,
                                        iota_groups, mode_of, pair_sources)
from xladist.conformance.values import fold


@pytest.mark.parametrize("spec,groups", [
    ((2, 2, (4,), None), [[0, 1], [2, 3]]),                         # [2,2]<=[4]
    ((2, 2, (2, 2), (1, 0)), [[0, 2], [1, 3]]),                     # [2,2]<=[2,2]T(1,0)
    ((4, 2, (2, 4), (1, 0)), [[0, 4], [1, 5], [2, 6], [3, 7]]),     # [4,2]<=[2,4]T(1,0)
])
def test_iota_groups_match_the_documented_examples(spec, groups):
    assert iota_groups(*spec) == groups


def test_group_modes_on_two_replicas_by_two_partitions():
    # device = partition * R + replica: (r0,p0)=0, (r1,p0)=1, (r0,p1)=2, (r1,p1)=3
    da = default_assignment(2, 2)
    assert da == [[0, 2], [1, 3]]
    assert expand(CR, [[0, 1]], da) == [[0, 1], [2, 3]]
    assert expand(CP, [[0, 1]], da) == [[0, 2], [1, 3]]
    # XLA's replica-major order, not StableHLO's partition-major one (A.4)
    assert expand(CRP, [[0, 1]], da) == [[0, 2, 1, 3]]
    assert expand(FID, [[0, 3], [1, 2]], da) == [[0, 3], [2, 1]]
    assert expand(CR, [], da) == [[0, 1], [2, 3]]  # empty = all replicas, per partition
    assert expand(CRP, [], da) == [[0, 2, 1, 3]]
    with pytest.raises(ValueError, match="flattened-id"):
        expand(FID, [], da)
    with pytest.raises(ValueError, match="every cross_replica id"):
        expand(CR, [[0]], da)
    assert expand(CR, [[1]], da, cover=False) == [[1], [3]]  # collective-broadcast (C.15)


def test_a_device_assignment_moves_every_member():
    da = [[3, 1], [2, 0]]  # (r0,p0)=3, (r0,p1)=1, (r1,p0)=2, (r1,p1)=0
    assert expand(CR, [[1, 0]], da) == [[2, 3], [0, 1]]
    assert expand(FID, [[0, 1, 2, 3]], da) == [[3, 1, 2, 0]]  # f = r * P + p


@pytest.mark.parametrize("channel,flag,has_flag,mode", [
    (False, None, True, CR), (True, None, True, CRP), (True, False, True, CRP),
    (True, True, True, FID), (False, None, False, CR), (True, None, False, CP)])
def test_modes_follow_the_channel_and_the_flag(channel, flag, has_flag, mode):
    assert mode_of(channel, flag, has_flag) == mode


def test_permute_pairs_apply_per_replica_or_partition():
    da = default_assignment(2, 2)
    # with a channel, ids are partition ids and the pair applies in every replica
    assert pair_sources([(0, 1)], True, da) == {2: 0, 3: 1}
    # without, ids are replica ids and the pair applies in every partition
    assert pair_sources([(0, 1)], False, da) == {1: 0, 3: 2}


def test_fold_wraps_integers_and_uses_the_select_reducer():
    xs = [np.array([100, -3], np.int8), np.array([100, 2], np.int8)]
    assert fold("add", "s8", xs).tolist() == [-56, -1]
    assert fold("sel", "s8", xs).tolist() == [100, 2]
    assert fold("sel", "pred", [np.array([False, True]), np.array([True, False])]).tolist() \
        == [True, True]
