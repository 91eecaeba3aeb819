"""Device-independent facts of a module, computed once per check: groups, signatures,
channel peers (read through xladist/hlo/collective_groups.py, as the runtime reads them)."""

from __future__ import annotations

import re

from xladist.hlo.collective_groups import (
    DeviceAssignment,
    GroupError,
    PAIRS_ATTR,
    SendRecvStreams,
    collective_permute_pairs,
    collective_terms,
    instruction_device_groups,
    required_send_recv_pairs,
)
from xladist.errors import InputError
from xladist.hlo.ir import Instruction, Module

from .events import Signature, where

__all__ = ["ModuleFacts", "known_trip_count"]


def _leaf_shapes(instrs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    types, dims = [], []
    for op in instrs:
        for _, leaf in op.shape.leaves():
            types.append(leaf.element_type.name)
            dims.append("[" + ",".join(map(str, leaf.dims)) + "]")
    return tuple(types), tuple(dims)


def _attr_key(value):
    """A dict key equal for equal group or pair attributes.  An iota form is its few numbers
    (the expansion follows from them); else the value itself, hashed in C: repr() of 16,384
    explicit groups per instruction cost more than the rest of the check."""
    iota = getattr(value, "iota", None)
    if iota is not None and getattr(value, "mesh", None) is None:
        return ("iota", iota)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


_TRIP_RE = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')


class ModuleFacts:
    """Device-independent facts, computed once per check: groups, signatures, channel peers."""

    def __init__(self, module: Module, da: DeviceAssignment):
        self.module = module
        self.da = da
        self.R, self.P = da.replica_count, da.num_partitions
        self._groups: dict[Instruction, tuple[dict[int, tuple[int, ...]], Signature]] = {}
        self._peers: dict[Instruction, tuple[dict[int, int], dict[int, int]]] = {}
        self._expanded: dict[tuple, tuple] = {}  # group/pair attributes -> their expansion
        # Which send pairs with which recv: the runtime's rule (collective_groups.py).
        self.streams = SendRecvStreams(module)

    def _bad(self, instr: Instruction, message: str) -> InputError:
        comp = instr.parent.name if instr.parent else "?"
        return InputError(f"computation {comp}, instruction {where(instr)}: {message}")

    def collective(self, instr: Instruction, op: Instruction | None = None):
        """(device -> its group, Signature) of a collective; `op` is the wrapped op if any."""
        hit = self._groups.get(instr)
        if hit is not None:
            return hit
        op = op or instr
        kind = op.opcode.removesuffix("-start")
        has_channel = op.attrs.get("channel_id") is not None
        # Instructions with the same group attributes share one expansion: at thousands of
        # devices, expanding each instruction's groups again would cost more than the check.
        a = op.attrs
        same = (kind, has_channel, a.get("use_global_device_ids"),
                _attr_key(a.get("replica_groups")), _attr_key(a.get("source_target_pairs")))
        shared = self._expanded.get(same)
        if shared is None:
            try:
                groups = instruction_device_groups(kind, op.attrs, self.da)
                pairs = None
                if kind == "collective-permute":
                    raw = op.attrs.get("source_target_pairs", ())
                    pairs = tuple(collective_permute_pairs(raw, has_channel, self.R, self.P,
                                                           self.da))
            except GroupError as e:
                raise self._bad(instr, str(e)) from None
            groups_t = tuple(tuple(g) for g in groups)
            member = {d: g for g in groups_t for d in g}
            shared = self._expanded[same] = (groups_t, member, pairs)
        groups_t, member, pairs = shared
        operands = op.operands
        types, shapes = _leaf_shapes(operands)
        form, reducer, dimensions = collective_terms(op)
        sig = Signature(form, groups_t, types, shapes, reducer, dimensions, pairs)
        self._groups[instr] = (member, sig)
        return member, sig

    def peers(self, instr: Instruction) -> tuple[dict[int, int], dict[int, int]]:
        """(source device -> target, target device -> source) of a send/recv's channel."""
        hit = self._peers.get(instr)
        if hit is not None:
            return hit
        same = (instr.opcode, instr.frontend_attributes.get(PAIRS_ATTR))
        hit = self._expanded.get(same)
        if hit is None:
            try:
                pairs = required_send_recv_pairs(instr, self.R, self.P, self.da)
            except GroupError as e:
                raise self._bad(instr, str(e)) from None
            hit = self._expanded[same] = ({s: t for s, t in pairs}, {t: s for s, t in pairs})
        self._peers[instr] = hit
        return hit


def known_trip_count(instr: Instruction) -> int | None:
    """The `known_trip_count` XLA's loop analysis stored in a while's backend_config."""
    m = _TRIP_RE.search(instr.backend_config or "")
    return int(m.group(1)) if m else None

