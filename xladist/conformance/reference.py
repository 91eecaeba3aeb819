"""The reference: every device of a module run by the interpreter in one process.

`reference_run(module, inputs, n)` runs each device's program with the interpreter (the
numpy rules, xladist's executable specification of every opcode) in its own thread, and
gives the interpreter a DeviceContext (`_Device`) that meets the other devices in memory:
collectives, channels and feeds are evaluated here, from ALL members' values, with the rules
of docs/reference/collective-semantics.md as groups.py reads them -- not through xladist's
group code, communicators or MPI, which are what the kit checks. Reductions fold left in
group order with the collective's own to_apply (the interpreter's Reducer), so the reference
has one answer where XLA leaves the order open; the suite's inputs are chosen so that every
order gives it (values.py), and checks.py accepts any NaN where it is NaN.

Matching: the k-th collective a device issues on a device group meets the k-th of every
other member on that group (a member that issues another opcode there is an error); the k-th
send from s to t on a channel meets the k-th recv at t from s. Sends do not wait (a program
that completes with unbuffered channels completes with buffered ones, with the same values).
Every wait has a deadline, and the first device to fail stops the others.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from xladist.errors import ExecutionError, InputError, UnsupportedError
from xladist.semantics.values import zeros_value

from .groups import (default_assignment, expand, iota_groups, logical_ids, member_of, mode_of,
                     pair_sources, send_recv_by_partition)

FLAG_OPS = ("all-reduce", "all-gather", "reduce-scatter")
PAIRS_ATTR = "_xla_send_recv_source_target_pairs"


class _Stop(Exception):
    """Another device failed: this one stops waiting."""


class _World:
    """What the devices of one reference run share."""

    def __init__(self, R: int, P: int, da, infeeds, timeout: float):
        self.R, self.P, self.da = R, P, da
        self.ids = logical_ids(da)
        self.n = R * P
        self.cv = threading.Condition()
        self.slots: dict = {}
        self.infeeds = [list(x) for x in infeeds] if infeeds is not None else None
        self.outfeeds: list[list] = [[] for _ in range(self.n)]
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.failed: str | None = None

    def wait_for(self, ready, what: str):
        """Block (under cv) until ready() is true; raise on another device's failure or when
        the run's deadline passes."""
        while not ready():
            if self.failed is not None:
                raise _Stop(self.failed)
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise ExecutionError(f"reference run: still waiting after {self.timeout:g} s "
                                     f"for {what} (does the program deadlock?)")
            self.cv.wait(min(left, 1.0))

    def fail(self, text: str) -> None:
        with self.cv:
            if self.failed is None:
                self.failed = text
            self.cv.notify_all()


class _Slot:
    __slots__ = ("values", "opcodes", "results", "error")

    def __init__(self):
        self.values: dict[int, tuple] = {}
        self.opcodes: dict[int, str] = {}
        self.results: dict | None = None
        self.error: str | None = None


def _replica_groups(rg) -> list[list[int]]:
    if rg is None:
        return []
    if rg.iota is not None:  # expanded here from the iota form itself (B.8)
        G, S, dims, perm = rg.iota
        return iota_groups(G, S, dims, perm)
    return [list(g) for g in rg.groups]


def _result_shape(instr):
    if instr.opcode in ("all-gather-start", "collective-permute-start"):
        return instr.shape.tuple_shapes[1]
    return instr.shape


class _Device:
    """The DeviceContext of one device in a reference run (semantics/device.py's contract)."""

    def __init__(self, world: _World, device: int):
        self.world, self.device = world, device
        self.rank = device
        self.replica_id, self.partition_id = world.ids[device]
        self.replica_count, self.num_partitions = world.R, world.P
        self.counts: dict = {}

    # ---- collectives ----------------------------------------------------------------------
    def _groups(self, instr, op: str) -> list[list[int]]:
        w, attrs = self.world, instr.attrs
        has_channel = attrs.get("channel_id") is not None
        if op == "collective-permute":
            if attrs.get("slice_sizes"):
                raise UnsupportedError("reference: the in-place collective-permute "
                                       "(slice_sizes) is not modelled")
            return expand(mode_of(has_channel, None, False), [], w.da)
        mode = mode_of(has_channel, attrs.get("use_global_device_ids"), op in FLAG_OPS)
        return expand(mode, _replica_groups(attrs.get("replica_groups")), w.da,
                      cover=op != "collective-broadcast")

    def collective_start(self, instr, args, reducer=None):
        op = instr.opcode.removesuffix("-start")
        groups = self._groups(instr, op)
        found = member_of(self.device, groups)
        if found is None:  # only collective-broadcast may leave devices out: zeros (C.15)
            return ("value", zeros_value(_result_shape(instr)))
        group, _ = found
        key = ("collective", tuple(group))
        k = self.counts.get(key, 0)
        self.counts[key] = k + 1
        w = self.world
        with w.cv:
            slot = w.slots.setdefault((key, k), _Slot())
            slot.values[self.device] = list(args)
            slot.opcodes[self.device] = op
            if len(slot.values) == len(group):
                try:
                    # this thread's own reducer: the evaluators are not shared across threads
                    slot.results = _evaluate(op, group, slot, instr, reducer)
                except Exception as e:  # noqa: BLE001 - every member reports it
                    slot.error = f"{type(e).__name__}: {e}"
                w.cv.notify_all()
        return ("slot", slot, group, instr)

    def collective_done(self, instr, handle):
        if handle[0] == "value":
            return handle[1]
        _, slot, group, start = handle
        w = self.world
        with w.cv:
            w.wait_for(lambda: slot.results is not None or slot.error is not None,
                       f"{start.name} on devices {group} (device {self.device} arrived; "
                       f"waiting for {sorted(set(group) - set(slot.values))})")
        if slot.error is not None:
            raise ExecutionError(f"reference: {start.name}: {slot.error}")
        return slot.results[self.device]

    def collective(self, instr, args, reducer=None):
        return self.collective_done(instr, self.collective_start(instr, args, reducer))

    # ---- channels (D.18-21a) ----------------------------------------------------------------
    def _peers(self, instr) -> dict[int, int]:
        """target -> source devices of a device-to-device send/recv."""
        if instr.attrs.get("is_host_transfer"):
            raise UnsupportedError(f"reference: {instr.name} is a host transfer; the "
                                   "reference runs devices only")
        text = instr.frontend_attributes.get(PAIRS_ATTR)
        if text is None:
            raise InputError(f"{instr.name}: a device-to-device {instr.opcode} needs "
                             f"{PAIRS_ATTR} to name its peers")
        import re
        pairs = [(int(a), int(b)) for a, b in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", text)]
        w = self.world
        return pair_sources(pairs, send_recv_by_partition(w.R, w.P), w.da)

    def send(self, instr, data):
        targets = [t for t, s in self._peers(instr).items() if s == self.device]
        if not targets:  # a send no pair sources completes at once
            return None
        (target,) = targets
        key = ("channel", instr.attrs.get("channel_id"), self.device, target)
        k = self.counts.get(("send", key), 0)  # apart from recvs: a self pair has both
        self.counts[("send", key)] = k + 1
        w = self.world
        with w.cv:
            slot = w.slots.setdefault((key, k), _Slot())
            slot.results = {target: data}
            w.cv.notify_all()
        return None

    def send_done(self, instr, handle):
        return None

    def recv(self, instr):
        source = self._peers(instr).get(self.device)
        if source is None:  # a recv no pair targets yields zeros
            return None
        key = ("channel", instr.attrs.get("channel_id"), source, self.device)
        k = self.counts.get(("recv", key), 0)
        self.counts[("recv", key)] = k + 1
        with self.world.cv:
            return self.world.slots.setdefault((key, k), _Slot()), source, instr

    def recv_done(self, instr, handle):
        if handle is None:
            return zeros_value(instr.shape.tuple_shapes[0])
        slot, source, recv = handle
        w = self.world
        with w.cv:
            w.wait_for(lambda: slot.results is not None,
                       f"{recv.name} on device {self.device}: the send from device {source}")
        return slot.results[self.device]

    # ---- feeds (E.21, E.22) -------------------------------------------------------------------
    def infeed(self, instr):
        shape = instr.shape.tuple_shapes[0]
        if shape.is_tuple and not shape.tuple_shapes:
            return ()  # an empty-tuple infeed takes no item (E.22a)
        items = self.world.infeeds[self.device] if self.world.infeeds is not None else []
        if not items:
            raise ExecutionError(f"reference: {instr.name} on device {self.device}: the "
                                 "infeed has no more items")
        return items.pop(0)

    def outfeed(self, instr, data):
        self.world.outfeeds[self.device].append(data)


def _evaluate(op: str, group: list[int], slot: _Slot, instr, reducer) -> dict:
    """Every member's result of one collective, from all members' operands (C.10-C.16);
    `instr` and `reducer` are the last member's to arrive."""
    ops = {slot.opcodes[d] for d in group}
    if len(ops) > 1:
        raise ExecutionError(f"devices {group} issue different collectives on one group: "
                             + ", ".join(f"device {d}: {slot.opcodes[d]}" for d in group))
    shape = _result_shape(instr)
    args = [slot.values[d] for d in group]  # member order
    g = len(group)

    def pack(arrays):
        return tuple(arrays) if shape.is_tuple else arrays[0]

    def typed(arrays):
        leaves = shape.tuple_shapes if shape.is_tuple else [shape]
        return [np.asarray(a).astype(s.dtype, copy=False) for a, s in zip(arrays, leaves)]

    out = {}
    if op == "all-reduce" or op == "reduce-scatter":
        folded = []
        for k in range(len(args[0])):
            acc = args[0][k]
            for member in args[1:]:
                acc = reducer(acc, member[k])
            folded.append(np.asarray(acc))
        for pos, d in enumerate(group):
            if op == "all-reduce":
                out[d] = pack(typed(folded))
            else:
                dim = instr.attrs["dimensions"][0]
                out[d] = pack(typed([np.split(a, g, axis=dim)[pos] for a in folded]))
    elif op == "all-gather":
        dim = instr.attrs["dimensions"][0]
        gathered = [np.concatenate([a[k] for a in args], axis=dim) for k in range(len(args[0]))]
        for d in group:
            out[d] = pack(typed(gathered))
    elif op == "all-to-all":
        dims = instr.attrs.get("dimensions")
        for pos, d in enumerate(group):
            if dims:  # array form: block `pos` of every member, concatenated in member order
                out[d] = np.concatenate([np.split(a[0], g, axis=dims[0])[pos] for a in args],
                                        axis=dims[0])
            else:  # tuple form: element j is what member j sent to us
                out[d] = tuple(a[pos] for a in args)
    elif op == "collective-broadcast":
        for d in group:
            out[d] = pack(typed(args[0]))
    elif op == "collective-permute":
        # a member's position in its group is the id the pairs name (C.14)
        sources = {t: s for s, t in instr.attrs["source_target_pairs"]}
        for pos, d in enumerate(group):
            src = sources.get(pos)
            if src is None:
                    out[d] = zeros_value(shape)
            else:
                out[d] = pack(typed(args[src]))
    elif op == "ragged-all-to-all":
        for pos, d in enumerate(group):
            result = np.array(args[pos][1], copy=True)
            for i, member in enumerate(args):
                x, _, in_off, send, out_off, _ = member
                k = send.size // g  # updates per peer
                for u in range(k):
                    e = pos * k + u
                    rows = int(send.reshape(-1)[e])
                    start = int(in_off.reshape(-1)[e])
                    at = int(out_off.reshape(-1)[e])
                    result[at:at + rows] = x[start:start + rows]
            out[d] = result
    else:
        raise UnsupportedError(f"reference: {op} is not modelled")
    return out


def device_counts(module, n: int) -> tuple[int, int]:
    """(replica_count, num_partitions): a module declaring neither runs as n replicas."""
    R, P = module.replica_count, module.num_partitions
    if R * P == 1:
        return n, 1
    if R * P != n:
        raise InputError(f"module {module.name} is written for {R * P} devices, not {n}")
    return R, P


def reference_run(module, inputs, n: int, *, device_assignment=None, infeed=None,
                  timeout: float = 60.0):
    """Run `module` on n devices in this process (module doc).

    inputs[d]: device d's arguments; infeed[d]: its infeed items (arrays or tuples of arrays).
    Returns (outputs, outfeeds): outputs[d] is device d's flattened result leaves (as
    `xladist.run` gives them), outfeeds[d] the values it outfed, in order."""
    from xladist.backends import compile as compile_module
    from xladist.hlo.parser import parse_module
    if isinstance(module, str):
        module = parse_module(module)
    R, P = device_counts(module, n)
    da = [list(r) for r in device_assignment] if device_assignment is not None \
        else default_assignment(R, P)
    world = _World(R, P, da, infeed, timeout)
    devices = [_Device(world, d) for d in range(n)]
    first = compile_module(module, backend="interpreter", device=devices[0])
    exes = [first] + [type(first)(first.module, device=dev) for dev in devices[1:]]
    for exe in exes[1:]:
        exe.dynamic_results = first.dynamic_results
    outputs: list = [None] * n
    errors: dict[int, BaseException] = {}

    def run(d: int) -> None:
        try:
            outputs[d] = exes[d](*inputs[d])
        except _Stop:
            pass
        except BaseException as e:  # noqa: BLE001 - reported below, the others stop
            errors[d] = e
            world.fail(f"device {d} failed: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(d,), daemon=True,
                                name=f"xladist-reference-{d}") for d in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        d = min(errors)
        e = errors[d]
        if isinstance(e, (UnsupportedError, InputError)):
            raise type(e)(f"reference run, device {d}: {e}") from e
        raise ExecutionError(f"reference run, device {d}: {type(e).__name__}: {e}") from e
    return outputs, world.outfeeds
