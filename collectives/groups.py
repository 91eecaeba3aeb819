"""Collective group modes and replica groups -> ordered lists of participating devices.

Pure Python (no numpy, no MPI) so the verifier, the static deadlock check and the runtime can all
share it.  Implements collective-semantics.md section A (group modes, device identity) and B
(replica-group syntax and validity).

Vocabulary used throughout:

* *replica_groups* -- what the HLO instruction carries: a list of lists of ints whose meaning
  (replica ids, partition ids or flattened ids) depends on the mode; ``[]`` means "one group of
  everything".
* *device group* -- an ordered list of global device ids.  The position of a device in its group
  is its collective rank: it decides which block an all-gather / all-to-all / reduce-scatter
  member contributes or keeps (section H.31).
* *device assignment* -- a 2-D table ``[replica][partition] -> device id`` (section A.7).  The
  default is ``device = partition * R + replica``, which is *not* the flattened id ``r * P + p``.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

__all__ = [
    "DeviceAssignment",
    "GroupError",
    "GroupMode",
    "check_replica_groups",
    "collective_permute_pairs",
    "device_groups",
    "group_mode",
    "groups_for_device",
    "iota_replica_groups",
    "permute_device_groups",
]


class GroupError(ValueError):
    """Replica groups, pairs or a device assignment that cannot describe a valid collective."""


class GroupMode(enum.Enum):
    """How the ids in replica_groups are read (collective-semantics.md A.1-A.3)."""

    CROSS_REPLICA = "CrossReplica"
    CROSS_PARTITION = "CrossPartition"
    CROSS_REPLICA_AND_PARTITION = "CrossReplicaAndPartition"
    FLATTENED_ID = "FlattenedID"

    def __str__(self) -> str:
        return self.value


def group_mode(has_channel: bool, use_global_device_ids: bool | None) -> GroupMode:
    """The group mode of a collective (A.1, A.2).

    ``use_global_device_ids`` is ``None`` for ops that have no such flag (all-to-all,
    collective-permute, collective-broadcast); all-reduce, all-gather and reduce-scatter always
    have one (default ``False``), so pass ``False`` for them when the flag is not printed.
    """
    if not has_channel:
        if use_global_device_ids:
            raise GroupError(
                "use_global_device_ids=true requires a channel_id: without a channel the ids in "
                "replica_groups are replica ids, so global device ids cannot be used "
                "(XLA rejects this combination as InvalidArgument)"
            )
        return GroupMode.CROSS_REPLICA
    if use_global_device_ids is None:
        return GroupMode.CROSS_PARTITION
    if not use_global_device_ids:
        return GroupMode.CROSS_REPLICA_AND_PARTITION
    return GroupMode.FLATTENED_ID


def iota_replica_groups(
    num_groups: int,
    group_size: int,
    dims: Sequence[int] | None = None,
    perm: Sequence[int] | None = None,
) -> list[list[int]]:
    """Expand the iota form ``[G,S]<=[d1,...,dk]T(perm)`` into explicit groups (B.8).

    Build ``iota(prod(dims))``, reshape to ``dims``, transpose by ``perm``, flatten, and cut into
    ``num_groups`` consecutive groups of ``group_size``.  ``dims`` defaults to ``[G*S]``.

    >>> iota_replica_groups(4, 2, [2, 4], [1, 0])
    [[0, 4], [1, 5], [2, 6], [3, 7]]
    """
    total = num_groups * group_size
    dims = [total] if dims is None else [int(d) for d in dims]
    if num_groups < 0 or group_size < 0 or any(d < 0 for d in dims):
        raise GroupError(f"iota replica groups [{num_groups},{group_size}]<={dims}: negative size")
    count = 1
    for d in dims:
        count *= d
    if count != total:
        raise GroupError(
            f"iota replica groups [{num_groups},{group_size}]<={dims}: the iota has {count} ids "
            f"but {num_groups} groups of {group_size} need {total}"
        )
    perm = list(range(len(dims))) if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(len(dims))):
        raise GroupError(
            f"iota replica groups [{num_groups},{group_size}]<={dims}T({perm}): T(...) must be a "
            f"permutation of 0..{len(dims) - 1}"
        )
    # Row-major strides of the untransposed array; walking the transposed shape in row-major
    # order and summing index*stride yields the iota value at that position.
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    tdims = [dims[p] for p in perm]
    tstrides = [strides[p] for p in perm]
    flat: list[int] = [0]
    for extent, stride in zip(tdims, tstrides):
        flat = [base + i * stride for base in flat for i in range(extent)]
    if count == 0:
        flat = []
    return [flat[g * group_size:(g + 1) * group_size] for g in range(num_groups)]


class DeviceAssignment:
    """A ``[replica][partition] -> device id`` table with reverse lookup (A.7)."""

    __slots__ = ("_logical", "_table", "num_partitions", "replica_count")

    def __init__(self, table: Sequence[Sequence[int]]):
        rows = [[int(d) for d in row] for row in table]
        if not rows or not rows[0]:
            raise GroupError("a device assignment needs at least one replica and one partition")
        width = len(rows[0])
        for r, row in enumerate(rows):
            if len(row) != width:
                raise GroupError(
                    f"device assignment row {r} has {len(row)} partitions, row 0 has {width}: "
                    "the table must be rectangular [replica][partition]"
                )
        logical: dict[int, tuple[int, int]] = {}
        for r, row in enumerate(rows):
            for p, dev in enumerate(row):
                if dev in logical:
                    r0, p0 = logical[dev]
                    raise GroupError(
                        f"device {dev} is listed twice in the device assignment: at "
                        f"(replica {r0}, partition {p0}) and (replica {r}, partition {p})"
                    )
                logical[dev] = (r, p)
        self.replica_count = len(rows)
        self.num_partitions = width
        self._table = rows
        self._logical = logical

    @classmethod
    def default(cls, replica_count: int, num_partitions: int) -> DeviceAssignment:
        """XLA's default placer: ``device = partition * R + replica`` (partition-major)."""
        if replica_count < 1 or num_partitions < 1:
            raise GroupError(
                f"replica_count={replica_count} and num_partitions={num_partitions} must be >= 1"
            )
        return cls([[p * replica_count + r for p in range(num_partitions)]
                    for r in range(replica_count)])

    def __call__(self, replica: int, partition: int) -> int:
        if not (0 <= replica < self.replica_count and 0 <= partition < self.num_partitions):
            raise GroupError(
                f"(replica {replica}, partition {partition}) is outside the device assignment "
                f"of {self.replica_count} replicas x {self.num_partitions} partitions"
            )
        return self._table[replica][partition]

    def logical_id(self, device: int) -> tuple[int, int]:
        """``(replica, partition)`` of a device id."""
        try:
            return self._logical[device]
        except KeyError:
            raise GroupError(
                f"device {device} is not in the device assignment (devices: "
                f"{sorted(self._logical)})"
            ) from None

    @property
    def devices(self) -> list[int]:
        return sorted(self._logical)

    def table(self) -> list[list[int]]:
        return [list(row) for row in self._table]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceAssignment) and self._table == other._table

    def __hash__(self) -> int:
        return hash(tuple(map(tuple, self._table)))

    def __repr__(self) -> str:
        return f"DeviceAssignment({self._table})"


def _as_assignment(
    replica_count: int, num_partitions: int, device_assignment
) -> DeviceAssignment:
    if device_assignment is None:
        return DeviceAssignment.default(replica_count, num_partitions)
    da = (device_assignment if isinstance(device_assignment, DeviceAssignment)
          else DeviceAssignment(device_assignment))
    if (da.replica_count, da.num_partitions) != (replica_count, num_partitions):
        raise GroupError(
            f"device assignment is {da.replica_count} replicas x {da.num_partitions} partitions "
            f"but the module has replica_count={replica_count}, num_partitions={num_partitions}"
        )
    return da


def _id_count(mode: GroupMode, replica_count: int, num_partitions: int) -> int:
    """How many distinct ids replica_groups range over in this mode (B.9)."""
    if mode is GroupMode.CROSS_PARTITION:
        return num_partitions
    if mode is GroupMode.FLATTENED_ID:
        return replica_count * num_partitions
    return replica_count


_ID_NAME = {
    GroupMode.CROSS_REPLICA: "replica id",
    GroupMode.CROSS_PARTITION: "partition id",
    GroupMode.CROSS_REPLICA_AND_PARTITION: "replica id",
    GroupMode.FLATTENED_ID: "flattened id",
}


def _fmt(groups: Sequence[Sequence[int]]) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def check_replica_groups(
    replica_groups: Sequence[Sequence[int]],
    mode: GroupMode,
    replica_count: int,
    num_partitions: int,
    *,
    op: str = "all-reduce",
    require_cover: bool = True,
) -> None:
    """The verifier's replica-group rules (B.9, A.5), raising GroupError.

    * no empty group inside a non-empty list, no id twice;
    * the union is exactly ``0..n-1`` (n per mode), skipped when n == 1 as XLA does, and skipped
      when ``require_cover`` is false (collective-broadcast: a device in no group gets zeros);
    * equal group sizes for every op except all-reduce;
    * FlattenedID needs explicit groups.

    Ids are range-checked even where XLA's verifier skips the count check, because expanding an
    out-of-range id would otherwise index past the device assignment.
    """
    n = _id_count(mode, replica_count, num_partitions)
    what = _ID_NAME[mode]
    where = f"{op} replica_groups={_fmt(replica_groups)} ({mode}, {n} {what}s)"
    if not replica_groups:
        if mode is GroupMode.FLATTENED_ID:
            raise GroupError(
                f"{op}: replica_groups must be explicit when use_global_device_ids=true "
                "(FlattenedID mode); an empty list does not name any devices"
            )
        return
    seen: dict[int, int] = {}
    for gi, group in enumerate(replica_groups):
        if len(group) == 0:
            raise GroupError(f"{where}: group {gi} is empty")
        for i in group:
            if not isinstance(i, int) or isinstance(i, bool):
                raise GroupError(f"{where}: {i!r} is not an integer id")
            if not 0 <= i < n:
                raise GroupError(f"{where}: {what} {i} is out of range [0, {n})")
            if i in seen:
                raise GroupError(
                    f"{where}: {what} {i} appears twice (groups {seen[i]} and {gi})"
                )
            seen[i] = gi
    if require_cover and n != 1 and len(seen) != n:
        missing = sorted(set(range(n)) - set(seen))
        raise GroupError(
            f"{where}: every {what} in 0..{n - 1} must appear exactly once; missing {missing}"
        )
    if op != "all-reduce":
        sizes = {len(g) for g in replica_groups}
        if len(sizes) > 1:
            raise GroupError(
                f"{where}: all groups must have the same size for {op} "
                f"(sizes {[len(g) for g in replica_groups]}); only all-reduce allows ragged groups"
            )


def device_groups(
    replica_groups: Sequence[Sequence[int]],
    mode: GroupMode,
    replica_count: int,
    num_partitions: int,
    device_assignment: DeviceAssignment | Sequence[Sequence[int]] | None = None,
    *,
    op: str = "all-reduce",
    require_cover: bool = True,
) -> list[list[int]]:
    """Expand replica_groups into ordered device groups (A.3, A.5), validating first.

    Order of the returned list follows XLA's GetParticipatingDevicesGroups: for CrossReplica,
    for each replica group, one device group per partition; for CrossPartition, for each group,
    one per replica.  Member order inside a CrossReplicaAndPartition group is replica-major
    (``for r in group: for p in 0..P-1``) -- XLA's order, not the StableHLO spec's (A.4).
    """
    da = _as_assignment(replica_count, num_partitions, device_assignment)
    check_replica_groups(replica_groups, mode, replica_count, num_partitions,
                         op=op, require_cover=require_cover)
    R, P = replica_count, num_partitions
    if not replica_groups:
        replica_groups = [list(range(_id_count(mode, R, P)))]
    out: list[list[int]] = []
    if mode is GroupMode.CROSS_REPLICA:
        for g in replica_groups:
            for p in range(P):
                out.append([da(r, p) for r in g])
    elif mode is GroupMode.CROSS_PARTITION:
        for g in replica_groups:
            for r in range(R):
                out.append([da(r, p) for p in g])
    elif mode is GroupMode.CROSS_REPLICA_AND_PARTITION:
        for g in replica_groups:
            out.append([da(r, p) for r in g for p in range(P)])
    else:
        for g in replica_groups:
            out.append([da(f // P, f % P) for f in g])
    return out


def groups_for_device(
    device: int,
    replica_groups: Sequence[Sequence[int]],
    mode: GroupMode,
    replica_count: int,
    num_partitions: int,
    device_assignment: DeviceAssignment | Sequence[Sequence[int]] | None = None,
    *,
    op: str = "all-reduce",
    require_cover: bool = True,
) -> tuple[list[int], int] | None:
    """The device group containing ``device`` and the device's position (collective rank) in it.

    Raises GroupError if the device is not in the device assignment, or (A.6) if it is in no
    group -- unless ``require_cover`` is false (collective-broadcast), in which case ``None`` is
    returned and the caller produces zeros.
    """
    da = _as_assignment(replica_count, num_partitions, device_assignment)
    replica, partition = da.logical_id(device)
    found: tuple[list[int], int] | None = None
    for group in device_groups(replica_groups, mode, replica_count, num_partitions, da,
                               op=op, require_cover=require_cover):
        if device in group:
            if found is not None or group.count(device) > 1:
                raise GroupError(
                    f"{op}: device {device} (replica {replica}, partition {partition}) appears "
                    f"twice in replica_groups={_fmt(replica_groups)} ({mode})"
                )
            found = (group, group.index(device))
    if found is None and require_cover:
        raise GroupError(
            f"{op}: device {device} (replica {replica}, partition {partition}) doesn't appear in "
            f"replica_groups={_fmt(replica_groups)} ({mode}); every executing device must be in "
            "exactly one group"
        )
    return found


def _check_pairs(pairs: Sequence[Sequence[int]], n: int, what: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    sources: set[int] = set()
    targets: set[int] = set()
    shown = _fmt(pairs)
    for pair in pairs:
        if len(pair) != 2:
            raise GroupError(f"source_target_pairs={shown}: {list(pair)} is not a (source, target)")
        s, t = int(pair[0]), int(pair[1])
        for i in (s, t):
            if not 0 <= i < n:
                raise GroupError(
                    f"source_target_pairs={shown}: {what} {i} is out of range [0, {n})"
                )
        if s in sources:
            raise GroupError(f"source_target_pairs={shown}: source {s} appears more than once")
        if t in targets:
            raise GroupError(f"source_target_pairs={shown}: target {t} appears more than once")
        sources.add(s)
        targets.add(t)
        out.append((s, t))
    return out


def collective_permute_pairs(
    source_target_pairs: Sequence[Sequence[int]],
    has_channel: bool,
    replica_count: int,
    num_partitions: int,
    device_assignment: DeviceAssignment | Sequence[Sequence[int]] | None = None,
) -> list[tuple[int, int]]:
    """Expand collective-permute source_target_pairs into (source device, target device) pairs.

    Without a channel the ids are replica ids and the pairs apply inside every partition; with a
    channel they are partition ids and apply inside every replica (C.14).  Self pairs are kept
    (they are a local copy).  Every source and every target may appear at most once.
    """
    da = _as_assignment(replica_count, num_partitions, device_assignment)
    R, P = replica_count, num_partitions
    if has_channel:
        pairs = _check_pairs(source_target_pairs, P, "partition id")
        return [(da(r, s), da(r, t)) for r in range(R) for s, t in pairs]
    pairs = _check_pairs(source_target_pairs, R, "replica id")
    return [(da(s, p), da(t, p)) for p in range(P) for s, t in pairs]


def permute_device_groups(
    has_channel: bool,
    replica_count: int,
    num_partitions: int,
    device_assignment: DeviceAssignment | Sequence[Sequence[int]] | None = None,
) -> list[list[int]]:
    """The device groups inside which a collective-permute's pairs apply.

    One group per partition (members ordered by replica id) without a channel, one per replica
    (ordered by partition id) with a channel.  A member's position equals the id used in
    source_target_pairs, so a communicator built for such a group can take the pairs as ranks.
    """
    mode = GroupMode.CROSS_PARTITION if has_channel else GroupMode.CROSS_REPLICA
    return device_groups([], mode, replica_count, num_partitions, device_assignment,
                         op="collective-permute")
