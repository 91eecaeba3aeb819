"""Collective group modes, replica groups and device assignments: the one implementation.

Pure Python over the IR's attribute values (no numpy, no MPI), so the verifier, the static
deadlock check and the MPI layer read docs/reference/collective-semantics.md A (group modes, device identity),
B (replica-group syntax and validity) and C.14 (permute pairs) the same way. It lives in
xladist.hlo because imports only point down; xladist/hlo/collective_groups.py re-exports it.

* `group_mode(opcode, channel_id, use_global_device_ids)` - which kind of ids replica_groups
  holds, from an instruction's attributes (A.1, A.2); `group_mode_from_flags(has_channel,
  flag)` is the same table for callers that have already decided whether the op has a flag;
* `id_count(mode, R, P)` - how many ids that kind has (B.9);
* `iota_replica_groups(G, S, dims, perm)` - the iota form `[G,S]<=[dims]T(perm)` (B.8);
* `group_ids(replica_groups, mode, R, P)` - explicit or iota groups as lists of ids, `{}`
  expanded to one group of every id (A.5);
* `check_groups(...)` / `check_source_target_pairs(...)` - the verifier's rules, raising
  GroupError with a message that names the op, the groups and the offending id;
* `group_size(...)` / `device_group_size(...)` - the uniform size of the id groups and of the
  device groups they stand for, used for all-gather, reduce-scatter and all-to-all shapes;
* `run_device_counts(module, num_devices, ...)` - the (replica_count, num_partitions) a run
  uses: what the header declares, the rest from the run (docs/xla-compatibility.md); the
  verifier, the static check and the runtime all take it from here;
* `DeviceAssignment` - the `[replica][partition] -> device id` table (A.7);
* `device_groups(...)` / `groups_for_device(...)` - ids to ordered device groups per mode
  (A.3, A.6), `collective_permute_pairs(...)` / `permute_device_groups(...)` for permutes;
* `instruction_device_groups(opcode, attrs, da)` - all of the above for one instruction;
* `send_recv_pairs(instr, R, P, da)` / `required_send_recv_pairs(...)` - a device-to-device
  send/recv's peers from its `_xla_send_recv_source_target_pairs` attribute (`parse_pairs`
  reads the text), for the runtime's channels, the interpreter and the static check;
* `SendRecvStreams(module)` - which send pairs with which recv (by channel where both ends
  share one, else by peers and program order, as XLA), for the runtime, the scheduler and
  the static check.

Vocabulary: *replica_groups* is what the instruction carries (ids whose meaning depends on the
mode; `{}` means one group of everything); a *device group* is an ordered list of global
device ids, a member's position being its collective rank (H.31); the *device assignment*
default is `device = partition * R + replica`, which is *not* the flattened id `r * P + p`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence

from ..environment import check_count
from ..errors import InputError, as_given

__all__ = [
    "DeviceAssignment",
    "GroupError",
    "GroupMode",
    "as_assignment",
    "check_groups",
    "check_replica_groups",
    "check_source_target_pairs",
    "collective_permute_pairs",
    "collective_terms",
    "config_counts",
    "device_group_size",
    "device_groups",
    "explicit_groups",
    "format_groups",
    "group_ids",
    "group_mode",
    "group_mode_from_flags",
    "group_size",
    "groups_for_device",
    "has_global_ids_flag",
    "id_count",
    "id_name",
    "instruction_device_groups",
    "iota_replica_groups",
    "mesh_axes_replica_groups",
    "PAIRS_ATTR",
    "PEER_ORDER",
    "SendRecvStreams",
    "parse_pairs",
    "permute_device_groups",
    "required_send_recv_pairs",
    "run_device_counts",
    "send_recv_pairs",
]


class GroupError(ValueError):
    """Replica groups, pairs or a device assignment that cannot describe a valid collective."""


class GroupMode(enum.Enum):
    """How the ids in replica_groups are read (docs/reference/collective-semantics.md A.1-A.3)."""

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


# ---- A.1 / A.2 group mode ----------------------------------------------------------------------

def group_mode_from_flags(has_channel: bool, use_global_device_ids: bool | None, *,
                          op: str | None = None) -> GroupMode:
    """The group mode from (channel_id present?, use_global_device_ids) (A.1).

    ``use_global_device_ids`` is ``None`` for ops that have no such flag (all-to-all,
    collective-permute, collective-broadcast); all-reduce, all-gather and reduce-scatter always
    have one (default ``False``), so pass ``False`` for them when the flag is not printed.
    Raises GroupError for the flag without a channel_id, which XLA rejects.
    """
    if not has_channel:
        if use_global_device_ids:
            raise GroupError(
                (f"{op}: " if op else "")
                + "use_global_device_ids=true requires a channel_id: without a channel the ids "
                "in replica_groups are replica ids, so global device ids cannot be used "
                "(XLA rejects this combination as InvalidArgument)")
        return GroupMode.CROSS_REPLICA
    if use_global_device_ids is None:
        return GroupMode.CROSS_PARTITION
    return GroupMode.FLATTENED_ID if use_global_device_ids else \
        GroupMode.CROSS_REPLICA_AND_PARTITION


def group_mode(opcode: str, channel_id: int | None,
               use_global_device_ids: bool | None = None) -> GroupMode:
    """The group mode of a collective from its attributes (A.1, A.2)."""
    flag = bool(use_global_device_ids) if has_global_ids_flag(opcode) else None
    return group_mode_from_flags(channel_id is not None, flag, op=opcode)


def id_count(mode: GroupMode, replica_count: int, num_partitions: int) -> int:
    """How many distinct ids replica_groups range over in this mode (B.9)."""
    if mode is GroupMode.CROSS_PARTITION:
        return num_partitions
    if mode is GroupMode.FLATTENED_ID:
        return replica_count * num_partitions
    return replica_count


def id_name(mode: GroupMode) -> str:
    return _ID_NAME[mode]


# ---- B.8 replica-group syntax ------------------------------------------------------------------

def iota_replica_groups(num_groups: int, group_size: int, dims: Sequence[int] | None = None,
                        perm: Sequence[int] | None = None) -> list[list[int]]:
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
            f"iota replica groups [{num_groups},{group_size}]<={dims}: "
            f"[{num_groups},{group_size}] does not hold the {count} ids of <={dims} (the iota "
            f"has {count} ids but {num_groups} groups of {group_size} need {total})")
    perm = list(range(len(dims))) if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(len(dims))):
        raise GroupError(
            f"iota replica groups [{num_groups},{group_size}]<={dims}T({perm}): T(...) must be a "
            f"permutation of 0..{len(dims) - 1}")
    # Row-major strides of the untransposed array; walking the transposed shape in row-major
    # order and summing index*stride yields the iota value at that position.
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    flat: list[int] = [0]
    for extent, stride in zip([dims[p] for p in perm], [strides[p] for p in perm]):
        flat = [base + i * stride for base in flat for i in range(extent)]
    if count == 0:
        flat = []
    return [flat[g * group_size:(g + 1) * group_size] for g in range(num_groups)]


def mesh_axes_replica_groups(axis_sizes: Sequence[int], device_ids: Sequence[int] | None,
                             axes: Sequence[tuple[int, tuple[int, int] | None]]
                             ) -> list[list[int]]:
    """Expand XLA's mesh-axes form ``mesh['a'=2,'b'=4], device_ids=(...) {'b','a':(1)2}``.

    Shardy-partitioned modules print replica groups as the mesh axes a collective runs over.
    `axis_sizes` are the mesh's axes, `device_ids` its ids in row-major mesh order (None: iota),
    `axes` the grouped axes as (mesh axis index, (pre_size, size) for a sub-axis or None).

    As XLA's MeshAxesReplicaGroupList does: every mesh axis with a sub-axis is split into
    [pre_size, size, rest] (several sub-axes of one axis into the product of their pieces,
    padding between them), the grouped pieces are moved last - in mesh-axis order, and within
    one axis in the order written - and the transposed id array is cut into groups of the
    product of the grouped sizes. A group's order is therefore row-major over those pieces.

    >>> mesh_axes_replica_groups([2, 4], None, [(1, None)])
    [[0, 1, 2, 3], [4, 5, 6, 7]]
    >>> mesh_axes_replica_groups([4, 2], [0, 4, 1, 5, 2, 6, 3, 7], [(0, (2, 2))])
    [[0, 1], [4, 5], [2, 3], [6, 7]]
    """
    sizes = [int(n) for n in axis_sizes]
    total = 1
    for n in sizes:
        total *= n
    where = f"mesh{sizes} axes {list(axes)}"
    ids = list(range(total)) if device_ids is None else [int(d) for d in device_ids]
    if len(ids) != total or sorted(ids) != list(range(total)):
        raise GroupError(f"{where}: device_ids {ids} must be a permutation of 0..{total - 1}")
    by_axis: dict[int, list[tuple[int, int, int]]] = {}  # axis -> [(pre, size, order)]
    for order, (axis, sub) in enumerate(axes):
        if not 0 <= axis < len(sizes):
            raise GroupError(f"{where}: axis index {axis} is not an axis of the mesh")
        pre, size = (1, sizes[axis]) if sub is None else (int(sub[0]), int(sub[1]))
        if pre < 1 or size < 1 or sizes[axis] % (pre * size):
            raise GroupError(f"{where}: sub-axis ({pre}){size} does not divide the mesh axis "
                             f"of size {sizes[axis]}")
        by_axis.setdefault(axis, []).append((pre, size, order))
    # Reshape each mesh axis into pieces; remember which piece each grouped axis is.
    pieces: list[int] = []
    grouped: list[int] = []
    for axis, n in enumerate(sizes):
        refs = sorted(by_axis.get(axis, []))
        if not refs:
            pieces.append(n)
            continue
        mine: dict[int, int] = {}   # written order -> piece index
        done = 1
        for pre, size, order in refs:
            if pre % done:
                raise GroupError(f"{where}: sub-axes of mesh axis {axis} overlap")
            if pre != done:
                pieces.append(pre // done)
                done = pre
            mine[order] = len(pieces)
            pieces.append(size)
            done *= size
        if done > n or n % done:
            raise GroupError(f"{where}: sub-axes of mesh axis {axis} exceed its size {n}")
        if done != n:
            pieces.append(n // done)
        grouped += [mine[o] for o in sorted(mine)]
    group_size = 1
    for g in grouped:
        group_size *= pieces[g]
    if group_size < 1 or total % group_size:
        raise GroupError(f"{where}: the grouped axes do not divide the mesh")
    # Row-major strides of the pieces; walk the transposed order (others, then grouped).
    strides = [1] * len(pieces)
    for i in range(len(pieces) - 2, -1, -1):
        strides[i] = strides[i + 1] * pieces[i + 1]
    order = [i for i in range(len(pieces)) if i not in grouped] + grouped
    flat: list[int] = [0]
    for i in order:
        flat = [base + k * strides[i] for base in flat for k in range(pieces[i])]
    out = [ids[f] for f in flat]
    return [out[g:g + group_size] for g in range(0, total, group_size)]


def explicit_groups(replica_groups) -> list[list[int]]:
    """The groups as written: a ReplicaGroups value (explicit or iota, read through its
    ``groups``), nested sequences, or None for none."""
    if replica_groups is None:
        return []
    return [list(g) for g in getattr(replica_groups, "groups", replica_groups)]


def format_groups(groups: Sequence[Sequence[int]]) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


# ---- A.5 / B.9 validity ------------------------------------------------------------------------

def group_ids(replica_groups, mode: GroupMode, replica_count: int,
              num_partitions: int, *, op: str | None = None) -> list[list[int]]:
    """The groups as id lists; `{}` becomes one group of every id of the mode (A.5).

    FlattenedID with `{}` is an error (it names no devices).
    """
    groups = explicit_groups(replica_groups)
    if groups:
        return groups
    if mode is GroupMode.FLATTENED_ID:
        raise GroupError((f"{op}: " if op else "")
                         + "replica_groups={} is invalid with use_global_device_ids=true "
                         "(FlattenedID mode): replica_groups must be explicit, listing flattened "
                         "ids; an empty list does not name any devices")
    return [list(range(id_count(mode, replica_count, num_partitions)))]


def check_groups(opcode: str, replica_groups, mode: GroupMode, replica_count: int,
                 num_partitions: int, *, require_cover: bool = True) -> list[list[int]]:
    """Validate replica_groups for one collective (A.5, B.9); returns the id lists.

    No empty group in a non-empty list; integer ids in range; no id twice; the union covers
    every id (skipped when there is a single id, as XLA does, and when `require_cover` is false
    for collective-broadcast, where a device in no group gets zeros); equal group sizes except
    for all-reduce; FlattenedID needs explicit groups.

    Ids are range-checked even where XLA's verifier skips the count check, because expanding an
    out-of-range id would otherwise index past the device assignment.
    """
    n = id_count(mode, replica_count, num_partitions)
    groups = explicit_groups(replica_groups)
    what = _ID_NAME[mode]
    where = (f"{opcode} replica_groups={format_groups(groups)} ({mode}: {n} {what}s for "
             f"replica_count={replica_count}, num_partitions={num_partitions})")
    if not groups:
        return group_ids(groups, mode, replica_count, num_partitions, op=opcode)
    seen: dict[int, int] = {}
    for gi, group in enumerate(groups):
        if not group:
            raise GroupError(f"{where}: group {gi} is empty")
        for i in group:
            if not isinstance(i, int) or isinstance(i, bool):
                raise GroupError(f"{where}: {i!r} is not an integer id")
            if not 0 <= i < n:
                raise GroupError(f"{where}: {what} {i} is out of range [0, {n})")
            if i in seen:
                twice = f"in group {gi}" if seen[i] == gi else f"(groups {seen[i]} and {gi})"
                raise GroupError(f"{where}: {what} {i} appears twice {twice}")
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


def check_replica_groups(replica_groups, mode: GroupMode, replica_count: int,
                         num_partitions: int, *, op: str = "all-reduce",
                         require_cover: bool = True) -> None:
    """`check_groups` with the op as a keyword (the MPI layer's older spelling)."""
    check_groups(op, replica_groups, mode, replica_count, num_partitions,
                 require_cover=require_cover)


def group_size(replica_groups, mode: GroupMode, replica_count: int,
               num_partitions: int) -> int | None:
    """The size of every id group, or None when the groups have different sizes."""
    groups = group_ids(replica_groups, mode, replica_count, num_partitions)
    sizes = {len(g) for g in groups}
    return sizes.pop() if len(sizes) == 1 else None


def device_group_size(replica_groups, mode: GroupMode, replica_count: int,
                      num_partitions: int) -> int | None:
    """Devices per group: the id-group size, times num_partitions in CrossReplicaAndPartition
    mode (each replica id stands for all partitions of that replica, A.3) - also for `{}`,
    whose single group holds every replica id."""
    size = group_size(replica_groups, mode, replica_count, num_partitions)
    if size is not None and mode is GroupMode.CROSS_REPLICA_AND_PARTITION:
        size *= num_partitions
    return size


def check_source_target_pairs(opcode: str, pairs: Sequence[Sequence[int]], has_channel: bool,
                              replica_count: int, num_partitions: int, *,
                              max_uses: int = 1, why: str | None = None
                              ) -> list[tuple[int, int]]:
    """Validate collective-permute pairs (C.14): ids in range, each source and target unique.

    Ids are replica ids without a channel, partition ids with one (`why` replaces the
    "channel_id set" / "no channel_id" explanation for callers such as send/recv that choose
    the kind of id otherwise). The in-place form with slice_sizes lets an id appear up to once
    per slice (`max_uses`).
    """
    n = num_partitions if has_channel else replica_count
    what = "partition id" if has_channel else "replica id"
    if why is None:
        why = "channel_id set" if has_channel else "no channel_id"

    def where() -> str:  # only for errors: formatting thousands of pairs costs more than checking
        return f"{opcode} source_target_pairs={format_groups(pairs)} ({n} {what}s: {why})"
    out: list[tuple[int, int]] = []
    uses_s: dict[int, int] = {}
    uses_t: dict[int, int] = {}
    for pair in pairs:
        if len(pair) != 2:
            raise GroupError(f"{where()}: {list(pair)} is not a {{source,target}} pair")
        s, t = int(pair[0]), int(pair[1])
        for i in (s, t):
            if not 0 <= i < n:
                raise GroupError(f"{where()}: {what} {i} is out of range [0, {n})")
        uses_s[s] = uses_s.get(s, 0) + 1
        uses_t[t] = uses_t.get(t, 0) + 1
        if uses_s[s] > max_uses:
            raise GroupError(f"{where()}: source {s} appears more than once")
        if uses_t[t] > max_uses:
            raise GroupError(f"{where()}: target {t} appears more than once")
        out.append((s, t))
    return out


# ---- the run's device counts (docs/xla-compatibility.md) ------------------------------------

COUNT_NAMES = ("replica_count", "num_partitions")


def declared_counts(module) -> dict[str, int]:
    """The counts the module itself fixes: those its header wrote (the parser records them in
    `module.declared_counts`, even `num_partitions=1`) and any set to a value other than 1."""
    named = getattr(module, "declared_counts", frozenset())
    return {k: getattr(module, k) for k in COUNT_NAMES if k in named or getattr(module, k) != 1}


def config_counts(module, replica_count: int, num_partitions: int) -> tuple[int, int]:
    """XLA's counts for `module` under a configuration of `replica_count` x `num_partitions`:
    each count the header declares replaces the configuration's (HloModule's config is
    overridden by the text). A device context's counts are such a configuration; the
    runtime's always agree with the header (run_device_counts made them), a stand-in context
    for one device (1 x 1) does not override what the module says."""
    header = declared_counts(module)
    return (header.get("replica_count", replica_count),
            header.get("num_partitions", num_partitions))


def run_device_counts(module, num_devices: int | None = None, *,
                      replica_count: int | None = None,
                      num_partitions: int | None = None,
                      setting: str = "-n") -> tuple[int, int]:
    """(replica_count, num_partitions) for running `module` on `num_devices` devices.

    XLA reads both counts from the run's HloModuleConfig, and a count written in the module
    header replaces the config's. xladist's run gives the device total (`-n N`) and, optionally,
    either count (`--replica-count`, `--num-partitions`). So: a count the header declares is
    fixed (a run option that disagrees is an error); a count given by the run comes next; a
    count left open is `num_devices` divided by the other, which must divide it; with neither
    fixed, the N devices are N replicas (XLA's tests' GetModuleConfigForTest(replica_count=N)).
    Without `num_devices` (one module compiled on its own) open counts are 1.

    Raises InputError naming the module, the counts and the device total, and telling the
    reader which device total to give as they give it (`setting`: `-n` of the commands,
    `n=` of xladist.run and xladist.Cluster; errors.as_given).
    """
    header = declared_counts(module)
    given = {"replica_count": replica_count, "num_partitions": num_partitions}
    counts: dict[str, int | None] = {}
    for key in COUNT_NAMES:
        value = given[key]
        if value is not None:
            value = check_count(value, key)
        if key in header and value is not None and value != header[key]:
            raise InputError(f"module {module.name} declares {key}={header[key]}; the run asks "
                             f"for {key}={value}")
        counts[key] = header.get(key, value)
    r, p = counts["replica_count"], counts["num_partitions"]
    if num_devices is None:
        return r or 1, p or 1
    n = num_devices
    fixed = ", ".join(f"{k}={v}" for k, v in counts.items() if v is not None)
    if r is None and p is None:
        return n, 1
    if r is None or p is None:
        known = p if r is None else r
        if n % known:
            other = "replica_count" if r is None else "num_partitions"
            raise InputError(f"module {module.name} has {fixed}, which does not divide the "
                             f"{n} devices of the run; run it with {as_given(setting, known)} "
                             f"(or a multiple of {known} devices: {other} is the rest)")
        return (n // known, p) if r is None else (r, n // known)
    if r * p != n:
        ran = getattr(module, "counts_from_run", frozenset())
        from_run = [f"{k}={counts[k]}" for k in COUNT_NAMES if k not in header or k in ran]
        if from_run:  # say which count the module declares and which the run asked for
            declared = [f"{k}={header[k]}" for k in COUNT_NAMES if k in header and k not in ran]
            asked = " and ".join(from_run)
            what = (f"module {module.name} declares {' and '.join(declared)} and the run asks "
                    f"for {asked}: " if declared else
                    f"the run asks for {asked} for module {module.name}: ")
        else:
            what = f"module {module.name} is built for "
        raise InputError(f"{what}replica_count={r} x num_partitions={p} = {r * p} devices; "
                         f"run it with {as_given(setting, r * p)}, not {as_given(setting, n)}")
    return r, p


# ---- A.7 device assignment ---------------------------------------------------------------------

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
                    "the table must be rectangular [replica][partition]")
        logical: dict[int, tuple[int, int]] = {}
        for r, row in enumerate(rows):
            for p, dev in enumerate(row):
                if dev in logical:
                    r0, p0 = logical[dev]
                    raise GroupError(
                        f"device {dev} is listed twice in the device assignment: at "
                        f"(replica {r0}, partition {p0}) and (replica {r}, partition {p})")
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
                f"replica_count={replica_count} and num_partitions={num_partitions} must be >= 1")
        return cls([[p * replica_count + r for p in range(num_partitions)]
                    for r in range(replica_count)])

    def __call__(self, replica: int, partition: int) -> int:
        if not (0 <= replica < self.replica_count and 0 <= partition < self.num_partitions):
            raise GroupError(
                f"(replica {replica}, partition {partition}) is outside the device assignment "
                f"of {self.replica_count} replicas x {self.num_partitions} partitions")
        return self._table[replica][partition]

    def logical_id(self, device: int) -> tuple[int, int]:
        """``(replica, partition)`` of a device id."""
        try:
            return self._logical[device]
        except KeyError:
            raise GroupError(f"device {device} is not in the device assignment (devices: "
                             f"{sorted(self._logical)})") from None

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


def as_assignment(replica_count: int, num_partitions: int,
                  device_assignment=None) -> DeviceAssignment:
    """The module's device assignment: XLA's default when None, a table converted, and a
    GroupError when its size is not replica_count x num_partitions."""
    if device_assignment is None:
        return DeviceAssignment.default(replica_count, num_partitions)
    da = (device_assignment if isinstance(device_assignment, DeviceAssignment)
          else DeviceAssignment(device_assignment))
    if (da.replica_count, da.num_partitions) != (replica_count, num_partitions):
        raise GroupError(
            f"device assignment is {da.replica_count} replicas x {da.num_partitions} partitions "
            f"but the module has replica_count={replica_count}, num_partitions={num_partitions}")
    return da


# ---- A.3 / A.6 ids -> device groups ------------------------------------------------------------

def device_groups(replica_groups, mode: GroupMode, replica_count: int, num_partitions: int,
                  device_assignment: DeviceAssignment | Sequence[Sequence[int]] | None = None,
                  *, op: str = "all-reduce", require_cover: bool = True) -> list[list[int]]:
    """Expand replica_groups into ordered device groups (A.3, A.5), validating first.

    Order of the returned list follows XLA's GetParticipatingDevicesGroups: for CrossReplica,
    for each replica group, one device group per partition; for CrossPartition, for each group,
    one per replica.  Member order inside a CrossReplicaAndPartition group is replica-major
    (``for r in group: for p in 0..P-1``) -- XLA's order, not the StableHLO spec's (A.4).
    """
    da = as_assignment(replica_count, num_partitions, device_assignment)
    R, P = replica_count, num_partitions
    ids = check_groups(op, replica_groups, mode, R, P, require_cover=require_cover)
    if mode is GroupMode.CROSS_REPLICA:
        return [[da(r, p) for r in g] for g in ids for p in range(P)]
    if mode is GroupMode.CROSS_PARTITION:
        return [[da(r, p) for p in g] for g in ids for r in range(R)]
    if mode is GroupMode.CROSS_REPLICA_AND_PARTITION:
        return [[da(r, p) for r in g for p in range(P)] for g in ids]
    return [[da(f // P, f % P) for f in g] for g in ids]


def groups_for_device(device: int, replica_groups, mode: GroupMode, replica_count: int,
                      num_partitions: int,
                      device_assignment: DeviceAssignment | Sequence[Sequence[int]] | None = None,
                      *, op: str = "all-reduce",
                      require_cover: bool = True) -> tuple[list[int], int] | None:
    """The device group containing ``device`` and the device's position (collective rank) in it.

    Raises GroupError if the device is not in the device assignment, or (A.6) if it is in no
    group -- unless ``require_cover`` is false (collective-broadcast), in which case ``None`` is
    returned and the caller produces zeros.
    """
    da = as_assignment(replica_count, num_partitions, device_assignment)
    replica, partition = da.logical_id(device)
    shown = format_groups(explicit_groups(replica_groups))
    found: tuple[list[int], int] | None = None
    for group in device_groups(replica_groups, mode, replica_count, num_partitions, da,
                               op=op, require_cover=require_cover):
        if device in group:
            if found is not None or group.count(device) > 1:
                raise GroupError(
                    f"{op}: device {device} (replica {replica}, partition {partition}) appears "
                    f"twice in replica_groups={shown} ({mode})")
            found = (group, group.index(device))
    if found is None and require_cover:
        raise GroupError(
            f"{op}: device {device} (replica {replica}, partition {partition}) doesn't appear in "
            f"replica_groups={shown} ({mode}); every executing device must be in exactly one "
            "group")
    return found


def collective_permute_pairs(
    source_target_pairs: Sequence[Sequence[int]],
    has_channel: bool,
    replica_count: int,
    num_partitions: int,
    device_assignment: DeviceAssignment | Sequence[Sequence[int]] | None = None,
    *,
    op: str = "collective-permute",
    why: str | None = None,
) -> list[tuple[int, int]]:
    """Expand collective-permute source_target_pairs into (source device, target device) pairs.

    Without a channel the ids are replica ids and the pairs apply inside every partition; with a
    channel they are partition ids and apply inside every replica (C.14).  Self pairs are kept
    (they are a local copy).  Every source and every target may appear at most once.
    """
    da = as_assignment(replica_count, num_partitions, device_assignment)
    R, P = replica_count, num_partitions
    pairs = check_source_target_pairs(op, source_target_pairs, has_channel, R, P, why=why)
    if has_channel:
        return [(da(r, s), da(r, t)) for r in range(R) for s, t in pairs]
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


def instruction_device_groups(opcode: str, attrs: Mapping, device_assignment: DeviceAssignment
                              ) -> list[list[int]]:
    """The device groups of one collective instruction from its attributes (A.1-A.6, C.14).

    `opcode` is the synchronous opcode (a `-start` suffix is ignored). collective-permute gives
    the groups its pairs apply in; collective-broadcast does not need every device covered
    (C.15). Raises GroupError naming the op for invalid groups.
    """
    op = opcode.removesuffix("-start")
    da = device_assignment
    R, P = da.replica_count, da.num_partitions
    has_channel = attrs.get("channel_id") is not None
    if op == "collective-permute":
        return permute_device_groups(has_channel, R, P, da)
    mode = group_mode(op, attrs.get("channel_id"), attrs.get("use_global_device_ids"))
    return device_groups(attrs.get("replica_groups"), mode, R, P, da, op=op,
                         require_cover=op != "collective-broadcast")


def collective_terms(op) -> tuple[str, str | None, tuple | None]:
    """What the members of one collective must agree on besides its groups and its operands'
    types and dimensions (docs/reference/collective-semantics.md 21b): its form, its reducer
    and its dimensions. The deadlock check compares them before a run
    (analysis/deadlock/facts.py), a run it did not prove at each call
    (runtime/signatures.py): one rule for both.

    The form keeps a -start suffix: MPI never matches a nonblocking collective with a
    blocking one, so a member starting what another runs synchronously is a mismatch. A
    reducer is named by its root op when that combines the two parameters (two computations
    that each add agree whatever their names), else by its computation's name."""
    kind = op.opcode.removesuffix("-start")
    form = op.opcode if op.opcode.endswith("-start") else kind
    comp = op.attrs.get("to_apply")
    reducer = None
    if comp is not None:
        root = comp.root
        if root is not None and len(root.operands) == 2 and all(
                o.opcode == "parameter" for o in root.operands):
            reducer = f"{root.opcode} ({root.shape.to_text(layout=False)})"
        else:
            reducer = f"computation {comp.name}"
    dims = tuple(op.attrs["dimensions"]) if "dimensions" in op.attrs else None
    return form, reducer, dims


# Device-to-device send/recv peers (docs/reference/collective-semantics.md D.18-21b): the runtime's channels,
# the interpreter and the static check all read them here.

PAIRS_ATTR = "_xla_send_recv_source_target_pairs"
_PAIR_RE = re.compile(r"\{\s*(-?\d+)\s*,\s*(-?\d+)\s*\}")


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """``"{{0,1},{1,2}}"`` -> ``[(0, 1), (1, 2)]``."""
    return [(int(a), int(b)) for a, b in _PAIR_RE.findall(text)]


def send_recv_pairs(instr, replica_count: int, num_partitions: int,
                    device_assignment=None) -> list[tuple[int, int]] | None:
    """(source device, target device) pairs of a device-to-device send/recv, or None when the
    instruction has no ``_xla_send_recv_source_target_pairs`` attribute.

    The ids are partition ids inside each replica (like a collective-permute with a channel);
    a module with one partition and several replicas names replica ids instead.  Raises
    GroupError for ids out of range or listed twice.
    """
    text = instr.frontend_attributes.get(PAIRS_ATTR)
    if text is None:
        return None
    by_partition = num_partitions > 1 or replica_count == 1
    why = ("a module with several partitions names partition ids" if num_partitions > 1
           else "one replica" if replica_count == 1
           else "a module with one partition names replica ids")
    return collective_permute_pairs(parse_pairs(text), by_partition, replica_count,
                                    num_partitions, device_assignment, op=instr.opcode, why=why)


def required_send_recv_pairs(instr, replica_count: int, num_partitions: int,
                             device_assignment=None) -> list[tuple[int, int]]:
    """:func:`send_recv_pairs` for a device-to-device send/recv that must name its peers:
    raises GroupError (prefixed with the attribute's name) for invalid pairs and for a missing
    attribute.  The runtime and the static check both read a channel's peers through this."""
    try:
        pairs = send_recv_pairs(instr, replica_count, num_partitions, device_assignment)
    except GroupError as e:
        raise GroupError(f"{PAIRS_ATTR}: {e}") from None
    if pairs is None:
        raise GroupError(f"a device-to-device {instr.opcode} needs the frontend attribute "
                         f'{PAIRS_ATTR}="{{{{source,target}},...}}" to name its peers; '
                         "without it no device can be matched with it")
    return pairs


# Which send pairs with which recv (docs/reference/collective-semantics.md D.19-21): the runtime's
# tags, the scheduler's channel chains and the static check's matching all ask this one class.

class _PeerOrder:
    """The stream of the sends and recvs whose channel id has no end of the other kind."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PEER_ORDER"


PEER_ORDER = _PeerOrder()


class SendRecvStreams:
    """The pairing rule of device-to-device send and recv in one module.

    A send and a recv pair when they are in the same stream and name each other's devices:
    in a stream, the k-th send from device s to device t pairs with the k-th recv at t from
    s, in each device's program order. An instruction's stream (`key`) is

    * its channel_id, when the module holds both a device-to-device send and a
      device-to-device recv with that channel_id (no channel_id counts as one value): the
      written semantics, where a channel handle names the transfer (D.19a);
    * otherwise `PEER_ORDER`, one stream for every such one-ended send and recv: XLA pairs
      device-to-device send/recv by their `_xla_send_recv_source_target_pairs` peers and
      program order whatever their channel ids, and its pipeliner writes the sends of one
      transfer on one channel and the recvs on another.

    `tag(instr)` numbers the streams the same way on every rank (PEER_ORDER 0, then the
    shared channel ids in increasing order, no channel_id first): the MPI tag of the
    transfer, so that two streams never take each other's messages. Host transfers
    (is_host_transfer=true) pair with the host, not here.
    """

    __slots__ = ("channels", "_tags")

    def __init__(self, module):
        sends: set = set()
        recvs: set = set()
        for instr in module.all_instructions():
            if instr.opcode in ("send", "recv") and not instr.attrs.get("is_host_transfer",
                                                                        False):
                (sends if instr.opcode == "send" else recvs).add(instr.attrs.get("channel_id"))
        self.channels = frozenset(sends & recvs)
        order = sorted(self.channels, key=lambda c: (c is not None, c or 0))
        self._tags = {c: k + 1 for k, c in enumerate(order)}
        self._tags[PEER_ORDER] = 0

    def key(self, instr):
        """The stream of a device-to-device send or recv: its channel_id, or PEER_ORDER."""
        channel = instr.attrs.get("channel_id")
        return channel if channel in self.channels else PEER_ORDER

    def tag(self, instr) -> int:
        return self._tags[self.key(instr)]

    @staticmethod
    def describe(key, channel=None) -> str:
        """`channel 3`, or for PEER_ORDER the end's own channel and how it pairs."""
        if key is not PEER_ORDER:
            return "no channel_id" if key is None else f"channel {key}"
        own = "no channel_id" if channel is None else f"channel {channel}"
        return (f"{own} (which has no end of the other kind: paired by peers and program "
                "order with the other such ends)")
