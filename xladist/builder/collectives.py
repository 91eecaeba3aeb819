"""Collectives (synchronous and async start/done), device ids.

Group mode follows XLA: no channel_id = cross-replica; a channel_id makes all-reduce /
all-gather / reduce-scatter cross-replica-and-partition (or flattened ids with
use_global_device_ids) and the others cross-partition (reference:
docs/reference/collective-semantics.md section A). Result shapes that depend on the group size
(all-gather, reduce-scatter) need it from the replica groups or `shard_count`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ..hlo.attrs import ReplicaGroups
from ..hlo.shape import Shape
from .core import BuilderError, XlaOp


def replica_groups(groups) -> ReplicaGroups:
    """ReplicaGroups from None/[] (everyone), a list of id lists, or a ReplicaGroups."""
    if isinstance(groups, ReplicaGroups):
        return groups
    if groups is None:
        return ReplicaGroups(())
    return ReplicaGroups(tuple(tuple(int(i) for i in g) for g in groups))


def _group_size(groups: ReplicaGroups, shard_count, what: str, attrs: dict) -> int:
    if shard_count is not None:
        if groups.groups and any(len(g) != shard_count for g in groups.groups):
            raise BuilderError(f"{what}: shard_count={shard_count} but the replica groups "
                               f"{groups.to_text()} have other sizes")
        return int(shard_count)
    if not groups.groups:
        raise BuilderError(f"{what}: with replica_groups={{}} (all devices) the group size is "
                           "only known at run time; pass shard_count=<devices per group>")
    if attrs.get("channel_id") is not None and not attrs.get("use_global_device_ids"):
        # Cross-replica-and-partition: each group spans every partition of its replicas,
        # and the partition count is only known when the module is built.
        raise BuilderError(f"{what}: with a channel_id and no use_global_device_ids the groups "
                           f"{groups.to_text()} name replicas and span every partition; pass "
                           "shard_count=<replicas per group x num_partitions>")
    sizes = {len(g) for g in groups.groups}
    if len(sizes) != 1:
        raise BuilderError(f"{what}: replica groups {groups.to_text()} differ in size")
    return sizes.pop()


def _as_list(operands) -> list[XlaOp]:
    return list(operands) if isinstance(operands, (list, tuple)) else [operands]


def _one_or_tuple(shapes: list[Shape]) -> Shape:
    return shapes[0] if len(shapes) == 1 else Shape.tuple_of(shapes)


class CollectiveMixin:
    def _common(self, groups, channel_id, use_global_device_ids=None) -> dict:
        attrs = {"channel_id": int(channel_id) if channel_id is not None else None,
                 "replica_groups": replica_groups(groups)}
        if use_global_device_ids:
            if channel_id is None:
                raise BuilderError("use_global_device_ids=True needs a channel_id (XLA rejects "
                                   "it for cross-replica collectives)")
            if not attrs["replica_groups"].groups:
                raise BuilderError("use_global_device_ids=True needs explicit replica_groups of "
                                   "flattened ids (replica * num_partitions + partition); "
                                   "XLA rejects replica_groups={} in that mode")
            attrs["use_global_device_ids"] = True
        return attrs

    # ---- all-reduce -----------------------------------------------------------
    def all_reduce(self, operand, computation="add", replica_groups=None,
                   channel_id: int | None = None, use_global_device_ids: bool = False,
                   _opcode: str = "all-reduce") -> XlaOp:
        """Reduce across the group with `computation` ('add', 'max', ... or a scalar binary
        Computation/callable); a list of operands gives a variadic (tuple) all-reduce."""
        ops = self._operands(operand, _opcode)
        attrs = self._common(replica_groups, channel_id, use_global_device_ids)
        attrs["to_apply"] = self._reducer(computation, [ops[0].element_type], "reducer",
                                          op=_opcode)
        return self._add(_opcode, ops, attrs,
                         declared=_one_or_tuple([o.shape for o in ops]))

    def all_reduce_start(self, operand, computation="add", replica_groups=None,
                         channel_id: int | None = None,
                         use_global_device_ids: bool = False) -> XlaOp:
        return self.all_reduce(operand, computation, replica_groups, channel_id,
                               use_global_device_ids, _opcode="all-reduce-start")

    # ---- all-gather / reduce-scatter -------------------------------------------
    def _gathered(self, ops, dimension, size, grow: bool, opcode: str):
        out = []
        for o in ops:
            dims = list(o.dims)
            if not 0 <= dimension < len(dims):
                raise BuilderError(f"{opcode} in computation {self.name}: dimension "
                                   f"{dimension} is out of range for "
                                   f"{o.shape.to_text(layout=False)}")
            if not grow and dims[dimension] % size:
                raise BuilderError(f"{opcode} in computation {self.name}: dimension "
                                   f"{dimension} of "
                                   f"{o.shape.to_text(layout=False)} does not split into "
                                   f"{size} equal parts")
            dims[dimension] = dims[dimension] * size if grow else dims[dimension] // size
            out.append(Shape.array(o.element_type, dims))
        return out

    def all_gather(self, operand, dimension: int, shard_count: int | None = None,
                   replica_groups=None, channel_id: int | None = None,
                   use_global_device_ids: bool = False, _opcode: str = "all-gather") -> XlaOp:
        """Concatenate every group member's operand along `dimension`, in group order."""
        ops = self._operands(operand, _opcode)
        attrs = self._common(replica_groups, channel_id, use_global_device_ids)
        size = _group_size(attrs["replica_groups"], shard_count, _opcode, attrs)
        attrs["dimensions"] = (int(dimension),)
        results = self._gathered(ops, int(dimension), size, grow=True, opcode=_opcode)
        if _opcode == "all-gather-start":
            declared = Shape.tuple_of([_one_or_tuple([o.shape for o in ops]),
                                       _one_or_tuple(results)])
        else:
            declared = _one_or_tuple(results)
        # all-gather prints dimensions before use_global_device_ids; dict order is cosmetic.
        return self._add(_opcode, ops, attrs, declared=declared)

    def all_gather_start(self, operand, dimension: int, shard_count: int | None = None,
                         replica_groups=None, channel_id: int | None = None,
                         use_global_device_ids: bool = False) -> XlaOp:
        """Async all-gather; the start's shape is (operand, result)."""
        return self.all_gather(operand, dimension, shard_count, replica_groups, channel_id,
                               use_global_device_ids, _opcode="all-gather-start")

    def reduce_scatter(self, operand, computation="add", dimension: int = 0,
                       shard_count: int | None = None, replica_groups=None,
                       channel_id: int | None = None,
                       use_global_device_ids: bool = False) -> XlaOp:
        """All-reduce, then member i keeps part i of the result split along `dimension`."""
        ops = self._operands(operand, "reduce-scatter")
        attrs = self._common(replica_groups, channel_id, use_global_device_ids)
        size = _group_size(attrs["replica_groups"], shard_count, "reduce-scatter", attrs)
        attrs["dimensions"] = (int(dimension),)
        attrs["to_apply"] = self._reducer(computation, [ops[0].element_type], "reducer",
                                          op="reduce-scatter")
        results = self._gathered(ops, int(dimension), size, grow=False,
                                 opcode="reduce-scatter")
        return self._add("reduce-scatter", ops, attrs, declared=_one_or_tuple(results))

    # ---- all-to-all / permute / broadcast ----------------------------------------
    def all_to_all(self, operand, dimension: int | None = None, replica_groups=None,
                   channel_id: int | None = None) -> XlaOp:
        """Array form (one operand, `dimension` split and concatenated) or tuple form
        (a list of N operands, one per group member, dimension None)."""
        ops = self._operands(operand, "all-to-all")
        attrs = self._common(replica_groups, channel_id)
        if dimension is not None:
            if len(ops) != 1:
                raise BuilderError("all_to_all with a dimension takes one operand; pass "
                                   "dimension=None for the tuple form")
            attrs["dimensions"] = (int(dimension),)
        declared = _one_or_tuple([o.shape for o in ops]) if dimension is not None \
            else Shape.tuple_of([o.shape for o in ops])
        return self._add("all-to-all", ops, attrs, declared=declared)

    def collective_permute(self, operand: XlaOp, source_target_pairs,
                           channel_id: int | None = None,
                           _opcode: str = "collective-permute") -> XlaOp:
        """Device t receives the operand of device s for every (s, t); others get zeros."""
        operand = self._operand(operand, _opcode)
        pairs = tuple((int(s), int(t)) for s, t in source_target_pairs)
        attrs = {"channel_id": int(channel_id) if channel_id is not None else None,
                 "source_target_pairs": pairs}
        if _opcode == "collective-permute-start":
            u32 = Shape.scalar("u32")
            declared = Shape.tuple_of([operand.shape, operand.shape, u32, u32])
        else:
            declared = operand.shape
        return self._add(_opcode, [operand], attrs, declared=declared)

    def collective_permute_start(self, operand: XlaOp, source_target_pairs,
                                 channel_id: int | None = None) -> XlaOp:
        """Async collective-permute; the start's shape is (in, out, u32[], u32[])."""
        return self.collective_permute(operand, source_target_pairs, channel_id,
                                       _opcode="collective-permute-start")

    def collective_broadcast(self, operand: XlaOp, replica_groups=None,
                             channel_id: int | None = None) -> XlaOp:
        """Every group member receives the operand of the group's first member."""
        operand = self._operand(operand, "collective-broadcast")
        return self._add("collective-broadcast", [operand],
                         self._common(replica_groups, channel_id), declared=operand.shape)

    # ---- generic async ------------------------------------------------------------
    def async_start(self, fn, operands: Sequence[XlaOp], name: str = "async_wrapped") -> XlaOp:
        """Wrap one op in an async pair: `fn(sb, *params)` builds it in a sub-computation
        (e.g. `lambda sb, x: sb.all_to_all(x, 0)`); the start's shape is
        ((operand shapes), result). Printed in XLA's sugared form (`all-to-all-start`)."""
        operands = self._operands(list(operands), "async-start")
        comp = self._computation(fn, [o.shape for o in operands], name, op="async-start")
        body = [i for i in comp.instructions if i.opcode != "parameter"]
        comp.is_async_wrapper = len(body) == 1
        declared = Shape.tuple_of([Shape.tuple_of([o.shape for o in operands]),
                                   comp.root.shape])
        return self._add("async-start", operands, {"calls": comp}, declared=declared)

    def all_to_all_start(self, operand, dimension: int | None = None, replica_groups=None,
                         channel_id: int | None = None) -> XlaOp:
        ops = _as_list(operand)
        return self.async_start(
            lambda sb, *xs: sb.all_to_all(list(xs) if dimension is None else xs[0], dimension,
                                          replica_groups, channel_id), ops, "all_to_all")

    def reduce_scatter_start(self, operand, computation="add", dimension: int = 0,
                             shard_count: int | None = None, replica_groups=None,
                             channel_id: int | None = None,
                             use_global_device_ids: bool = False) -> XlaOp:
        ops = _as_list(operand)
        return self.async_start(
            lambda sb, *xs: sb.reduce_scatter(list(xs), computation, dimension, shard_count,
                                              replica_groups, channel_id,
                                              use_global_device_ids), ops, "reduce_scatter")

    _DONE: ClassVar[dict[str, str]] = {"all-reduce-start": "all-reduce-done", "all-gather-start": "all-gather-done",
             "collective-permute-start": "collective-permute-done",
             "copy-start": "copy-done", "async-start": "async-done"}

    def async_done(self, start: XlaOp) -> XlaOp:
        """The `-done` of any async start (all-reduce/all-gather/collective-permute/async)."""
        start = self._operand(start, "async-done")
        opcode = self._DONE.get(start.instruction.opcode)
        if opcode is None:
            raise BuilderError(f"async_done: {start.name} ({start.instruction.opcode}) is not "
                               f"an async start; expected one of {sorted(self._DONE)}")
        s = start.shape
        if opcode == "all-reduce-done":
            result, attrs = s, None
        elif opcode == "async-done":
            result, attrs = s.tuple_shapes[1], {"calls": start.instruction.attrs["calls"]}
        else:
            result, attrs = s.tuple_shapes[1], None
        return self._add(opcode, [start], attrs, declared=result)

    all_reduce_done = all_gather_done = collective_permute_done = async_done

    # ---- ids --------------------------------------------------------------------------
    def replica_id(self) -> XlaOp:
        """This device's replica id (u32[])."""
        return self._add("replica-id", [])

    def partition_id(self) -> XlaOp:
        """This device's partition id (u32[])."""
        return self._add("partition-id", [])
