"""Group modes and replica-group validity of HLO collectives, as the verifier reads them.

Pure Python over the IR's attribute values (no numpy, no MPI), so the verifier, the static
deadlock check and the MPI layer can agree on one reading of collective-semantics.md A.1-A.6
and B.8-B.9:

* `group_mode(opcode, channel_id, use_global_device_ids)` - which kind of ids replica_groups
  holds (A.1, A.2);
* `id_count(mode, R, P)` - how many ids that kind has (B.9);
* `group_ids(replica_groups, mode, R, P)` - explicit or iota groups as lists of ids, `{}`
  expanded to one group of every id (A.5);
* `check_groups(...)` / `check_source_target_pairs(...)` - the verifier's rules, raising
  GroupError with a message that names the op, the groups and the offending id;
* `group_size(...)` / `device_group_size(...)` - the uniform size of the id groups and of the
  device groups they stand for, used for all-gather, reduce-scatter and all-to-all shapes.

Mapping ids to devices (device assignment, member order per mode) lives in collectives/groups.py;
this module stays inside xladist.hlo because imports only point down.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from .attrs import ReplicaGroups


class GroupError(ValueError):
    """Replica groups or source-target pairs that cannot describe a valid collective."""


class GroupMode(enum.Enum):
    """How the ids in replica_groups are read (collective-semantics.md A.1-A.3)."""

    CROSS_REPLICA = "CrossReplica"
    CROSS_PARTITION = "CrossPartition"
    CROSS_REPLICA_AND_PARTITION = "CrossReplicaAndPartition"
    FLATTENED_ID = "FlattenedID"

    def __str__(self) -> str:
        return self.value


# Ops that carry a real boolean use_global_device_ids (default false); every other collective
# passes "no flag", so a channel_id alone makes it CrossPartition (A.2).
_HAS_GLOBAL_IDS_FLAG = frozenset({
    "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
})

_ID_NAME = {
    GroupMode.CROSS_REPLICA: "replica id",
    GroupMode.CROSS_PARTITION: "partition id",
    GroupMode.CROSS_REPLICA_AND_PARTITION: "replica id",
    GroupMode.FLATTENED_ID: "flattened id",
}


def has_global_ids_flag(opcode: str) -> bool:
    return opcode in _HAS_GLOBAL_IDS_FLAG


def group_mode(opcode: str, channel_id: int | None,
               use_global_device_ids: bool | None = None) -> GroupMode:
    """The group mode of a collective from its attributes (A.1, A.2).

    Raises GroupError for use_global_device_ids=true without a channel_id, which XLA rejects.
    """
    flag = bool(use_global_device_ids) if has_global_ids_flag(opcode) else None
    if channel_id is None:
        if flag:
            raise GroupError(
                f"{opcode}: use_global_device_ids=true requires a channel_id; without a channel "
                "the ids in replica_groups are replica ids")
        return GroupMode.CROSS_REPLICA
    if flag is None:
        return GroupMode.CROSS_PARTITION
    return GroupMode.FLATTENED_ID if flag else GroupMode.CROSS_REPLICA_AND_PARTITION


def id_count(mode: GroupMode, replica_count: int, num_partitions: int) -> int:
    """How many distinct ids replica_groups range over in this mode (B.9)."""
    if mode is GroupMode.CROSS_PARTITION:
        return num_partitions
    if mode is GroupMode.FLATTENED_ID:
        return replica_count * num_partitions
    return replica_count


def id_name(mode: GroupMode) -> str:
    return _ID_NAME[mode]


def explicit_groups(replica_groups) -> list[list[int]]:
    """The groups as written: a ReplicaGroups value (explicit or iota) or nested sequences."""
    if replica_groups is None:
        return []
    if isinstance(replica_groups, ReplicaGroups):
        return [list(g) for g in replica_groups.groups]
    return [list(g) for g in replica_groups]


def format_groups(groups: Sequence[Sequence[int]]) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def group_ids(replica_groups, mode: GroupMode, replica_count: int,
              num_partitions: int) -> list[list[int]]:
    """The groups as id lists; `{}` becomes one group of every id of the mode (A.5).

    FlattenedID with `{}` is an error (it names no devices).
    """
    groups = explicit_groups(replica_groups)
    if groups:
        return groups
    if mode is GroupMode.FLATTENED_ID:
        raise GroupError("replica_groups={} is invalid with use_global_device_ids=true "
                         "(FlattenedID mode): the groups must list flattened ids explicitly")
    return [list(range(id_count(mode, replica_count, num_partitions)))]


def check_groups(opcode: str, replica_groups, mode: GroupMode, replica_count: int,
                 num_partitions: int, *, require_cover: bool = True) -> list[list[int]]:
    """Validate replica_groups for one collective (A.5, B.9); returns the id lists.

    No empty group in a non-empty list; ids in range; no id twice; the union covers every id
    (skipped when there is a single id, as XLA does, and when `require_cover` is false for
    collective-broadcast); equal group sizes except for all-reduce.
    """
    n = id_count(mode, replica_count, num_partitions)
    groups = explicit_groups(replica_groups)
    what = _ID_NAME[mode]
    where = (f"{opcode} replica_groups={format_groups(groups)} ({mode}: {n} {what}s for "
             f"replica_count={replica_count}, num_partitions={num_partitions})")
    if not groups:
        return group_ids(groups, mode, replica_count, num_partitions)
    seen: dict[int, int] = {}
    for gi, group in enumerate(groups):
        if not group:
            raise GroupError(f"{where}: group {gi} is empty")
        for i in group:
            if not 0 <= i < n:
                raise GroupError(f"{where}: {what} {i} is out of range [0, {n})")
            if i in seen:
                raise GroupError(f"{where}: {what} {i} appears twice (groups {seen[i]} and {gi})")
            seen[i] = gi
    if require_cover and n != 1 and len(seen) != n:
        missing = sorted(set(range(n)) - set(seen))
        raise GroupError(f"{where}: every {what} in 0..{n - 1} must appear in exactly one "
                         f"group; missing {missing}")
    if not opcode.startswith("all-reduce"):
        sizes = [len(g) for g in groups]
        if len(set(sizes)) > 1:
            raise GroupError(f"{where}: all groups must have the same size for {opcode} "
                             f"(sizes {sizes}); only all-reduce allows groups of different sizes")
    return groups


def group_size(replica_groups, mode: GroupMode, replica_count: int,
               num_partitions: int) -> int | None:
    """The size of every group, or None when the groups have different sizes."""
    groups = group_ids(replica_groups, mode, replica_count, num_partitions)
    sizes = {len(g) for g in groups}
    return sizes.pop() if len(sizes) == 1 else None


def device_group_size(replica_groups, mode: GroupMode, replica_count: int,
                      num_partitions: int) -> int | None:
    """Devices per group: the id-group size, times num_partitions in CrossReplicaAndPartition
    mode (each replica id stands for all partitions of that replica, A.3)."""
    size = group_size(replica_groups, mode, replica_count, num_partitions)
    if size is not None and mode is GroupMode.CROSS_REPLICA_AND_PARTITION:
        size *= num_partitions
    return size


def check_source_target_pairs(opcode: str, pairs: Sequence[Sequence[int]], has_channel: bool,
                              replica_count: int, num_partitions: int, *,
                              max_uses: int = 1) -> list[tuple[int, int]]:
    """Validate collective-permute pairs (C.14): ids in range, each source and target unique.

    Ids are replica ids without a channel, partition ids with one. The in-place form with
    slice_sizes lets an id appear up to once per slice (`max_uses`).
    """
    n = num_partitions if has_channel else replica_count
    what = "partition id" if has_channel else "replica id"
    shown = format_groups(pairs)
    where = (f"{opcode} source_target_pairs={shown} ({n} {what}s: "
             f"{'channel_id set' if has_channel else 'no channel_id'})")
    out: list[tuple[int, int]] = []
    uses_s: dict[int, int] = {}
    uses_t: dict[int, int] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise GroupError(f"{where}: {list(pair)} is not a {{source,target}} pair")
        s, t = int(pair[0]), int(pair[1])
        for i in (s, t):
            if not 0 <= i < n:
                raise GroupError(f"{where}: {what} {i} is out of range [0, {n})")
        uses_s[s] = uses_s.get(s, 0) + 1
        uses_t[t] = uses_t.get(t, 0) + 1
        if uses_s[s] > max_uses:
            raise GroupError(f"{where}: source {s} appears more than once")
        if uses_t[t] > max_uses:
            raise GroupError(f"{where}: target {t} appears more than once")
        out.append((s, t))
    return out
