"""xladist.hlo.collective_groups: group modes, iota groups, expansion per mode, validity errors."""

import numpy as np
import pytest

from xladist.hlo.collective_groups import (
    DeviceAssignment,
    GroupError,
    GroupMode,
    check_replica_groups,
    collective_permute_pairs,
    device_groups,
    group_mode_from_flags,
    groups_for_device,
    iota_replica_groups,
    permute_device_groups,
)

CR = GroupMode.CROSS_REPLICA
CP = GroupMode.CROSS_PARTITION
CRP = GroupMode.CROSS_REPLICA_AND_PARTITION
FID = GroupMode.FLATTENED_ID


# --- A.1 / A.2 mode selection -----------------------------------------------------------------

@pytest.mark.parametrize(
    "has_channel, flag, mode",
    [
        (False, None, CR),
        (False, False, CR),
        (True, None, CP),
        (True, False, CRP),
        (True, True, FID),
    ],
)
def test_group_mode_table(has_channel, flag, mode):
    assert group_mode_from_flags(has_channel, flag) is mode


def test_group_mode_flag_without_channel_is_an_error():
    with pytest.raises(GroupError, match="requires a channel_id"):
        group_mode_from_flags(False, True)


# --- B.8 iota groups ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    "g, s, dims, perm, expected",
    [
        (2, 2, [4], None, [[0, 1], [2, 3]]),
        (2, 2, [2, 2], [1, 0], [[0, 2], [1, 3]]),
        (4, 2, [2, 4], [1, 0], [[0, 4], [1, 5], [2, 6], [3, 7]]),
        (1, 8, None, None, [list(range(8))]),
        (2, 4, [2, 2, 2], [2, 1, 0], [[0, 4, 2, 6], [1, 5, 3, 7]]),
        (4, 2, [2, 2, 2], [0, 2, 1], [[0, 2], [1, 3], [4, 6], [5, 7]]),
    ],
)
def test_iota_worked_examples(g, s, dims, perm, expected):
    assert iota_replica_groups(g, s, dims, perm) == expected


def test_iota_matches_numpy_transpose():
    dims, perm = [2, 3, 4], [1, 2, 0]
    want = np.arange(24).reshape(dims).transpose(perm).reshape(6, 4).tolist()
    assert iota_replica_groups(6, 4, dims, perm) == want


@pytest.mark.parametrize(
    "args, match",
    [
        ((2, 2, [3]), "iota has 3 ids"),
        ((2, 2, [2, 2], [0, 0]), "must be a permutation"),
        ((2, 2, [2, 2], [0, 1, 2]), "must be a permutation"),
    ],
)
def test_iota_errors(args, match):
    with pytest.raises(GroupError, match=match):
        iota_replica_groups(*args)


# --- A.7 device assignment ----------------------------------------------------------------------

def test_default_assignment_is_partition_major():
    da = DeviceAssignment.default(2, 3)
    assert da.table() == [[0, 2, 4], [1, 3, 5]]
    assert da(1, 2) == 5
    assert da.logical_id(3) == (1, 1)


def test_assignment_errors():
    with pytest.raises(GroupError, match="listed twice"):
        DeviceAssignment([[0, 1], [1, 2]])
    with pytest.raises(GroupError, match="rectangular"):
        DeviceAssignment([[0, 1], [2]])
    with pytest.raises(GroupError, match="not in the device assignment"):
        DeviceAssignment.default(2, 2).logical_id(7)


# --- A.3 / A.5 expansion per mode ----------------------------------------------------------------
# R=2 replicas, P=2 partitions, default assignment: da(r, p) = 2p + r.

def test_cross_replica_copies_groups_per_partition():
    assert device_groups([[0, 1]], CR, 2, 2) == [[0, 1], [2, 3]]
    assert device_groups([], CR, 2, 2) == [[0, 1], [2, 3]]
    assert device_groups([[1, 0]], CR, 2, 1) == [[1, 0]]


def test_cross_partition_copies_groups_per_replica():
    assert device_groups([[0, 1]], CP, 2, 2) == [[0, 2], [1, 3]]
    assert device_groups([], CP, 2, 2) == [[0, 2], [1, 3]]
    assert device_groups([[0], [1]], CP, 2, 2) == [[0], [1], [2], [3]]


def test_cross_replica_and_partition_is_replica_major():
    # A.4: XLA gives [(r0,p0),(r0,p1),(r1,p0),(r1,p1)]; StableHLO's spec text would give
    # [(r0,p0),(r1,p0),(r0,p1),(r1,p1)].  We follow XLA.
    da = DeviceAssignment.default(2, 2)
    groups = device_groups([[0, 1]], CRP, 2, 2, da)
    assert groups == [[da(0, 0), da(0, 1), da(1, 0), da(1, 1)]] == [[0, 2, 1, 3]]
    stablehlo_order = [da(0, 0), da(1, 0), da(0, 1), da(1, 1)]
    assert groups[0] != stablehlo_order
    assert device_groups([], CRP, 2, 2) == [[0, 2, 1, 3]]
    assert device_groups([[0], [1]], CRP, 2, 2) == [[0, 2], [1, 3]]


def test_flattened_id_uses_r_times_p_plus_p():
    # flattened f = r*P + p; with the default assignment device = p*R + r -> not the identity.
    assert device_groups([[0, 1, 2, 3]], FID, 2, 2) == [[0, 2, 1, 3]]
    assert device_groups([[0, 2], [1, 3]], FID, 2, 2) == [[0, 1], [2, 3]]


def test_custom_device_assignment():
    da = [[3, 1], [0, 2]]
    assert device_groups([], CR, 2, 2, da) == [[3, 0], [1, 2]]
    assert device_groups([], CP, 2, 2, da) == [[3, 1], [0, 2]]
    assert device_groups([], CRP, 2, 2, da) == [[3, 1, 0, 2]]
    assert device_groups([[3, 2, 1, 0]], FID, 2, 2, da) == [[2, 0, 1, 3]]


def test_groups_for_device_returns_group_and_position():
    assert groups_for_device(3, [[0, 1]], CRP, 2, 2) == ([0, 2, 1, 3], 3)
    assert groups_for_device(1, [[0, 1]], CRP, 2, 2) == ([0, 2, 1, 3], 2)
    assert groups_for_device(1, [[1, 0]], CR, 2, 2) == ([1, 0], 0)
    assert groups_for_device(2, [], CP, 2, 2) == ([0, 2], 1)


def test_broadcast_groups_need_not_cover():
    assert device_groups([[1, 0]], CR, 3, 1, op="collective-broadcast",
                         require_cover=False) == [[1, 0]]
    assert groups_for_device(2, [[1, 0]], CR, 3, 1, op="collective-broadcast",
                             require_cover=False) is None


# --- A.6 / B.9 errors -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    "groups, mode, R, P, op, match",
    [
        ([], FID, 2, 2, "all-reduce", "must be explicit"),
        ([[0, 1], []], CR, 2, 1, "all-reduce", "group 1 is empty"),
        ([[0, 1], [1]], CR, 2, 1, "all-reduce", "replica id 1 appears twice"),
        ([[0, 0, 1]], CR, 2, 1, "all-reduce", r"replica id 0 appears twice in group 0$"),
        ([[0, 1]], CR, 4, 1, "all-reduce", r"missing \[2, 3\]"),
        ([[0, 4]], CR, 4, 1, "all-reduce", r"out of range \[0, 4\)"),
        ([[0, 1], [2]], CR, 3, 1, "all-gather", "same size"),
        ([[0, 1, 2]], CP, 1, 2, "all-gather", r"partition id 2 is out of range \[0, 2\)"),
        ([[0, 1, 2]], FID, 2, 2, "reduce-scatter", r"missing \[3\]"),
    ],
)
def test_replica_group_errors(groups, mode, R, P, op, match):
    with pytest.raises(GroupError, match=match):
        check_replica_groups(groups, mode, R, P, op=op)


def test_all_reduce_allows_ragged_groups():
    assert device_groups([[0, 1, 2], [3]], CR, 4, 1) == [[0, 1, 2], [3]]


def test_count_check_skipped_when_only_one_id():
    # XLA skips the "union is 0..n-1" check when n == 1.
    check_replica_groups([[0]], CR, 1, 4, op="all-gather")


def test_error_message_names_op_and_groups():
    with pytest.raises(GroupError) as info:
        check_replica_groups([[0, 1]], CR, 4, 1, op="all-gather")
    msg = str(info.value)
    assert "all-gather" in msg and "{{0,1}}" in msg and "CrossReplica" in msg


def test_device_missing_from_groups():
    # With validation on, a device outside every group is caught as a coverage error.
    with pytest.raises(GroupError, match=r"missing \[2\]"):
        groups_for_device(2, [[1, 0]], CR, 3, 1)
    with pytest.raises(GroupError, match="not in the device assignment"):
        groups_for_device(9, [], CR, 2, 2)


def test_mismatched_assignment_shape():
    with pytest.raises(GroupError, match="replica_count=2, num_partitions=2"):
        device_groups([], CR, 2, 2, [[0, 1, 2, 3]])


# --- collective-permute --------------------------------------------------------------------------

def test_permute_pairs_cross_replica_apply_per_partition():
    pairs = collective_permute_pairs([[0, 1], [1, 0]], False, 2, 2)
    assert pairs == [(0, 1), (1, 0), (2, 3), (3, 2)]


def test_permute_pairs_cross_partition_apply_per_replica():
    pairs = collective_permute_pairs([[0, 1]], True, 2, 2)
    assert pairs == [(0, 2), (1, 3)]


def test_permute_self_pair_kept():
    assert collective_permute_pairs([[0, 0]], False, 1, 1) == [(0, 0)]


@pytest.mark.parametrize(
    "pairs, ch, match",
    [
        ([[0, 1], [0, 2]], False, "source 0 appears more than once"),
        ([[0, 1], [2, 1]], False, "target 1 appears more than once"),
        ([[0, 3]], False, r"replica id 3 is out of range \[0, 3\)"),
        ([[0, 1]], True, r"partition id 1 is out of range \[0, 1\)"),
    ],
)
def test_permute_pair_errors(pairs, ch, match):
    with pytest.raises(GroupError, match=match):
        collective_permute_pairs(pairs, ch, 3, 1)


def test_permute_device_groups_positions_equal_ids():
    da = DeviceAssignment.default(2, 2)
    assert permute_device_groups(False, 2, 2, da) == [[0, 1], [2, 3]]
    assert permute_device_groups(True, 2, 2, da) == [[0, 2], [1, 3]]


# --- one instruction's groups (the runtime's and the static check's entry point) ----------------

def test_instruction_device_groups_reads_mode_from_attributes():
    from xladist.hlo.attrs import ReplicaGroups

    from xladist.hlo.collective_groups import instruction_device_groups

    da = DeviceAssignment.default(2, 2)
    everyone = ReplicaGroups(())
    # channel_id on all-gather without the flag: CrossReplicaAndPartition, replica-major (A.3/A.4).
    attrs = {"channel_id": 1, "replica_groups": everyone}
    assert instruction_device_groups("all-gather", attrs, da) == [[0, 2, 1, 3]]
    assert instruction_device_groups("all-gather-start", attrs, da) == [[0, 2, 1, 3]]
    # all-to-all has no flag: a channel_id makes it CrossPartition (A.2).
    assert instruction_device_groups("all-to-all", attrs, da) == [[0, 2], [1, 3]]
    assert instruction_device_groups("all-reduce", {"replica_groups": everyone}, da) == \
        [[0, 1], [2, 3]]
    assert instruction_device_groups("collective-permute", {"channel_id": 1}, da) == \
        [[0, 2], [1, 3]]
    # collective-broadcast need not cover every id (C.15); all-reduce must (A.6).
    part = {"replica_groups": ReplicaGroups(((1,),))}
    assert instruction_device_groups("collective-broadcast", part, da) == [[1], [3]]
    with pytest.raises(GroupError, match=r"all-reduce replica_groups=\{\{1\}\}.*missing \[0\]"):
        instruction_device_groups("all-reduce", part, da)
    with pytest.raises(GroupError, match="^all-gather: use_global_device_ids=true requires"):
        instruction_device_groups("all-gather", {"use_global_device_ids": True}, da)


def test_error_messages_name_the_module_sizes_and_the_op():
    with pytest.raises(GroupError) as info:
        device_groups([[0, 1]], CR, 4, 1, op="all-gather")
    assert "replica_count=4, num_partitions=1" in str(info.value)
    with pytest.raises(GroupError, match=r"^collective-permute source_target_pairs=\{\{0,3\}\} "
                                         r"\(3 replica ids: no channel_id\)"):
        collective_permute_pairs([[0, 3]], False, 3, 1)


# --- the run's device counts: the header fixes what it declares, the run fills the rest --------

def _header(text: str):
    from xladist import parse_hlo
    return parse_hlo(f"HloModule m{text}\nENTRY e {{ ROOT p = f32[] parameter(0) }}\n")


@pytest.mark.parametrize("header, n, given, counts", [
    ("", 4, {}, (4, 1)),                               # nothing declared: n replicas
    (", num_partitions=1", 2, {}, (2, 1)),             # XLA's ragged tests: P=1 from the text
    (", replica_count=1", 2, {}, (1, 2)),
    (", num_partitions=4", 8, {}, (2, 4)),
    (", replica_count=2, num_partitions=2", 4, {}, (2, 2)),
    ("", 4, {"num_partitions": 4}, (1, 4)),            # the run's --num-partitions
    ("", 4, {"replica_count": 2}, (2, 2)),
    (", num_partitions=2", 4, {"replica_count": 2}, (2, 2)),
    ("", None, {}, (1, 1)),                            # compiled alone: one device
    (", replica_count=3", None, {}, (3, 1)),
])
def test_run_device_counts(header, n, given, counts):
    from xladist.hlo.collective_groups import run_device_counts
    assert run_device_counts(_header(header), n, **given) == counts


@pytest.mark.parametrize("header, n, given, message", [
    (", num_partitions=4", 6, {}, "num_partitions=4, which does not divide the 6 devices"),
    (", replica_count=2, num_partitions=2", 8, {}, "= 4 devices; run it with -n 4, not -n 8"),
    (", num_partitions=2", 4, {"num_partitions": 4},
     "declares num_partitions=2; the run asks for num_partitions=4"),
    ("", 4, {"replica_count": 0}, "replica_count must be a whole number >= 1"),
    ("", 4, {"replica_count": 3, "num_partitions": 2}, "= 6 devices; run it with -n 6, not -n 4"),
])
def test_run_device_counts_refused(header, n, given, message):
    from xladist.errors import InputError
    from xladist.hlo.collective_groups import run_device_counts
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_device_counts(_header(header), n, **given)


@pytest.mark.parametrize("header, config, counts", [
    ("", (2, 3), (2, 3)),                              # the header says nothing: the config's
    (", num_partitions=2", (1, 1), (1, 2)),            # a one-device stand-in context
    (", replica_count=1", (2, 1), (1, 1)),             # written, even as 1, replaces the config
    (", replica_count=2, num_partitions=4", (8, 1), (2, 4)),
])
def test_config_counts_header_replaces_the_config(header, config, counts):
    from xladist.hlo.collective_groups import config_counts
    assert config_counts(_header(header), *config) == counts


def test_the_verifier_runtime_and_static_check_share_the_counts():
    """One rule: the verifier, the runtime's placement and the deadlock check read a module
    without counts at -n 2 as 2 replicas, and a header with only num_partitions=1 too."""
    from xladist.analysis.deadlock.check import resolve_devices
    from xladist.hlo.verifier import verify_module
    from xladist.runtime.device import device_counts
    for header in ("", ", num_partitions=1"):
        m = _header(header)
        report = verify_module(m, num_devices=2)
        da = resolve_devices(m, 2)
        assert ((report.replica_count, report.num_partitions) == device_counts(m, 2)
                == (da.replica_count, da.num_partitions) == (2, 1))
