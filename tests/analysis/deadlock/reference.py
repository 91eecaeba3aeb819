"""A reference deadlock checker, independent of xladist/analysis/deadlock: the oracle the
soundness tests compare the fast check with.

It shares no tracing code with the fast check. Every device runs the module in full with the
real interpreter (every iteration of every loop, every branch the real values pick), in the
order the runtime runs (xladist.analysis.schedule), on a DeviceContext that never blocks and
records what the device does that another device must answer. Groups and peers come from the
runtime's own readings (xladist/hlo/collective_groups.py: instruction_device_groups,
required_send_recv_pairs, SendRecvStreams). Then, on those explicit per-device event lists:

* collectives meet per device group: the k-th collective of every member on a group is one
  instance; members that disagree on it are a `mismatch`, a group whose members issue
  different numbers of collectives is `unmatched`;
* transfers pair per (stream, source, target), the k-th send with the k-th recv; different
  shapes are a `mismatch`, different counts `unmatched`;
* a joint simulation moves every device while its next event can happen (a collective once
  every member arrived, a done once every member started, a send-done once the peer posted the
  recv, a recv-done once the peer posted the send, unbuffered channels as
  docs/reference/collective-semantics.md 21a says); devices left waiting on each other in a
  cycle are a `deadlock`.

Values: the devices run at once (a thread each), and a collective pairs as MPI pairs it: the
k-th collective a device issues on its group meets the k-th of every other member, whatever
instruction each of them issues there. A device waits at a collective (at the done of a
start) until every member has issued its k-th, and takes the result from what each member
actually contributed: an all-reduce reduces the members' operands in group order, an
all-gather concatenates them; other collectives and received data give zeros (control that
depends on them is not generated, tests/analysis/deadlock/programs.py). When every running
device waits on an instance some member never issues, those waits end with zeros: the
event lists then hold the problem, which the analysis below names. So the reference does
not assume that members issue the same instruction (a value keyed by instruction would
miss two devices reducing different instructions at the same position: see
test_reference.py).
"""

from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np

from xladist.analysis.schedule import schedule_module
from xladist.hlo.collective_groups import (
    SendRecvStreams,
    collective_permute_pairs,
    instruction_device_groups,
    required_send_recv_pairs,
)
from xladist.interpreter.evaluator import Evaluator
from xladist.semantics.device import DeviceContext
from xladist.semantics.values import zeros_value

__all__ = ["reference_check"]


class _Recorder(DeviceContext):
    """One device's run: its events, in order. An event is a dict with `kind` and what its
    matching needs; handles returned to the interpreter are event indices."""

    def __init__(self, module, da, device, streams, meeting):
        self.da, self.device, self.streams, self.meeting = da, device, streams, meeting
        self.issued: dict[tuple, int] = defaultdict(int)   # group -> collectives issued
        self.replica_id, self.partition_id = da.logical_id(device)
        self.replica_count, self.num_partitions = da.replica_count, da.num_partitions
        self.events: list[dict] = []

    def _add(self, **event) -> int:
        self.events.append(event)
        return len(self.events) - 1

    def _group(self, op):
        """(this device's group, the collective's signature), or (None, None) when the device
        takes no part (a collective-broadcast device in no group)."""
        base = op.opcode.removesuffix("-start")
        groups = [tuple(g) for g in instruction_device_groups(base, op.attrs, self.da)]
        mine = next((g for g in groups if self.device in g), None)
        pairs = None
        if base == "collective-permute":
            has_channel = op.attrs.get("channel_id") is not None
            pairs = tuple(collective_permute_pairs(op.attrs.get("source_target_pairs", ()),
                                                   has_channel, self.da.replica_count,
                                                   self.da.num_partitions, self.da))
        reducer = op.attrs.get("to_apply")
        sig = (op.opcode, tuple(groups),   # a -start never meets a blocking collective in MPI
               tuple(o.shape.to_text(layout=False) for o in op.operands),
               None if reducer is None else reducer.root.opcode,
               tuple(op.attrs.get("dimensions", ()) or ()), pairs)
        return mine, sig

    def _issue(self, instr, args, reducer, kind) -> tuple | None:
        """Record the device's next collective on its group and contribute its operands;
        the handle to wait on, or None when the device takes no part."""
        group, sig = self._group(instr)
        if group is None:
            return None
        index = self._add(kind=kind, instr=instr, group=group, sig=sig)
        k = self.issued[group]
        self.issued[group] += 1
        self.meeting.contribute((group, k), self.device, sig, args)
        return index, (group, k), instr, reducer

    def _result(self, handle, instr):
        """The collective's value from what every member contributed (zeros when some
        member never issues it, or members disagree on it)."""
        shape = instr.shape if not instr.opcode.endswith("-start") else (
            instr.shape if instr.opcode == "all-reduce-start" else instr.shape.tuple_shapes[1])
        if handle is None:
            return zeros_value(shape)
        _, key, _, reducer = handle
        met = self.meeting.wait(self.device, key)
        if met is None or len({sig for sig, _ in met}) > 1 or len(met[0][1]) != 1:
            return zeros_value(shape)
        values = [np.asarray(args[0]) for _, args in met]
        base = instr.opcode.removesuffix("-start")
        if base == "all-reduce" and reducer is not None:
            out = values[0]
            for v in values[1:]:
                out = reducer(out, v)
            return np.asarray(out).astype(shape.dtype)
        if base == "all-gather":
            dim = (instr.attrs.get("dimensions") or (0,))[0]
            return np.concatenate(values, axis=dim).astype(shape.dtype)
        return zeros_value(shape)

    def collective(self, instr, args, reducer=None):
        return self._result(self._issue(instr, args, reducer, "sync"), instr)

    def collective_start(self, instr, args, reducer=None):
        return self._issue(instr, args, reducer, "start"), instr

    def collective_done(self, instr, handle):
        handle, start = handle
        if handle is not None:
            self._add(kind="done", instr=instr, start=handle[0])
        return self._result(handle, start)

    def _transfer(self, instr, kind):
        pairs = required_send_recv_pairs(instr, self.da.replica_count,
                                         self.da.num_partitions, self.da)
        mine = next((t if kind == "send" else s for s, t in pairs
                     if (s if kind == "send" else t) == self.device), None)
        if mine is None:
            return None   # no pair names this end: done at once (21a)
        shape = instr.operands[0].shape if kind == "send" else instr.shape.tuple_shapes[0]
        return self._add(kind=kind, instr=instr, stream=self.streams.key(instr), peer=mine,
                         shape=shape.to_text(layout=False))

    def send(self, instr, data):
        return self._transfer(instr, "send")

    def recv(self, instr):
        index = self._transfer(instr, "recv")
        return ("zeros", instr) if index is None else index

    def send_done(self, instr, handle):
        if handle is not None:
            self._add(kind="send-done", instr=instr, op=handle)

    def recv_done(self, instr, handle):
        # `instr` is the recv-done, or the async-done of a send/recv group (shape: the
        # group's), so the data shape comes from the recv, which the event holds.
        if isinstance(handle, tuple):   # an end no pair names: zeros at once (21a)
            return zeros_value(handle[1].shape.tuple_shapes[0])
        self._add(kind="recv-done", instr=instr, op=handle)
        return zeros_value(self.events[handle]["instr"].shape.tuple_shapes[0])


class _Meeting:
    """Where the devices' collectives meet: instance (group, k) -> device -> (signature,
    operands). A wait ends when every member has contributed, or when every device still
    running waits and no wait can end (those instances are `broken`: zeros, at once for a
    member arriving later)."""

    def __init__(self, n: int):
        self.n, self.running = n, n
        self.waiting: dict = {}          # device -> the instance it waits on now
        self.met: dict[tuple, dict] = defaultdict(dict)
        self.broken: set = set()
        self.cv = threading.Condition()

    def contribute(self, key, device, sig, args) -> None:
        with self.cv:
            self.met[key][device] = (sig, list(args))
            self.cv.notify_all()

    def _complete(self, key) -> bool:
        return len(self.met[key]) == len(key[0])

    def wait(self, device, key):
        """The members' (signature, operands) in group order, or None (broken)."""
        with self.cv:
            self.waiting[device] = key
            while not self._complete(key) and key not in self.broken:
                self._release_if_stuck()
                if not self._complete(key) and key not in self.broken:
                    self.cv.wait()
            del self.waiting[device]
            if key in self.broken and not self._complete(key):
                return None
            return [self.met[key][m] for m in key[0]]

    def _release_if_stuck(self) -> None:
        """Every running device waits, on an instance some member never issues: end them."""
        keys = set(self.waiting.values())
        if len(self.waiting) == self.running and not any(map(self._complete, keys)):
            self.broken |= keys
            self.cv.notify_all()

    def finish(self) -> None:
        with self.cv:
            self.running -= 1
            self._release_if_stuck()


def record(module, da, inputs) -> dict[int, list[dict]]:
    """Every device's events: device -> list (inputs: device -> its argument values). The
    devices run at once, each in a thread, meeting at their collectives."""
    schedule = schedule_module(module)
    streams = SendRecvStreams(module)
    meeting = _Meeting(len(da.devices))
    recs = {d: _Recorder(module, da, d, streams, meeting) for d in da.devices}
    errors: list[BaseException] = []

    def run(d):
        try:
            Evaluator(module, recs[d], schedule=schedule).run(inputs[d])
        except BaseException as e:   # re-raised below, in the caller's thread
            errors.append(e)
        finally:
            meeting.finish()

    threads = [threading.Thread(target=run, args=(d,), daemon=True) for d in da.devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return {d: rec.events for d, rec in recs.items()}


def _index(events):
    """The k-th collective of each member per group, the k-th send/recv per channel key."""
    on_group = defaultdict(lambda: defaultdict(list))    # group -> device -> event indices
    sends = defaultdict(list)                            # (stream, src, dst) -> (dev, index)
    recvs = defaultdict(list)
    for d, evs in events.items():
        for i, e in enumerate(evs):
            if e["kind"] in ("sync", "start"):
                on_group[e["group"]][d].append(i)
            elif e["kind"] == "send":
                sends[(e["stream"], d, e["peer"])].append(i)
            elif e["kind"] == "recv":
                recvs[(e["stream"], e["peer"], d)].append(i)
    return on_group, sends, recvs


def reference_check(module, da, inputs) -> set[str]:
    """The kinds of problem the module has on these inputs (empty: it finishes on every
    device): a subset of {"mismatch", "unmatched", "deadlock"}."""
    events = record(module, da, inputs)
    on_group, sends, recvs = _index(events)
    found: set[str] = set()
    # Who meets whom: (device, event index) -> the other ends it waits for.
    meets: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for group, per_dev in on_group.items():
        counts = {len(per_dev.get(m, [])) for m in group}
        if len(counts) > 1:
            found.add("unmatched")
        for k in range(max(counts)):
            ends = [(m, per_dev[m][k]) for m in group if k < len(per_dev.get(m, []))]
            if len({events[m][i]["sig"] for m, i in ends}) > 1:
                found.add("mismatch")   # among the members that reach it
            if len(ends) < len(group):
                break   # what follows on this group pairs nothing certain
            for end in ends:
                meets[end] = ends
    for key in set(sends) | set(recvs):
        _, src, dst = key
        ss, rs = sends.get(key, []), recvs.get(key, [])
        if len(ss) != len(rs):
            found.add("unmatched")
        for s, r in zip(ss, rs):
            if events[src][s]["shape"] != events[dst][r]["shape"]:
                found.add("mismatch")
            meets[(src, s)] = [(dst, r)]
            meets[(dst, r)] = [(src, s)]

    pos = {d: 0 for d in events}

    def waits_for(d, e):
        """The (device, event) that must have been reached first; None: nothing; a list
        containing None: something that never comes (an unmatched end)."""
        kind = e["kind"]
        if kind == "sync":
            return meets.get((d, pos[d]), [None])
        if kind == "done":   # every member must have reached its end of the instance
            return meets.get((d, e["start"]), [None])
        if kind in ("send-done", "recv-done"):
            other = meets.get((d, e["op"]))
            return [None] if other is None else [(other[0][0], other[0][1] + 1)]
        return []

    moved = True
    while moved:
        moved = False
        for d, evs in events.items():
            while pos[d] < len(evs):
                need = waits_for(d, evs[pos[d]])
                if any(n is None or pos[n[0]] < n[1] for n in need):
                    break
                pos[d] += 1
                moved = True
    stuck = {d: evs[pos[d]] for d, evs in events.items() if pos[d] < len(evs)}
    # A cycle of devices each waiting (at a matched event) for another stuck one.
    succ = {}
    for d, e in stuck.items():
        need = waits_for(d, e)
        if any(n is None for n in need):
            continue
        blockers = sorted({m for m, i in need if m in stuck and pos[m] < i})
        if blockers:
            succ[d] = blockers
    if _has_cycle(succ):
        found.add("deadlock")
    return found


def _has_cycle(succ: dict[int, list[int]]) -> bool:
    state: dict[int, int] = {}   # 1: on the path, 2: done

    def visit(d) -> bool:
        state[d] = 1
        for m in succ.get(d, ()):
            if state.get(m) == 1 or (m not in state and visit(m)):
                return True
        state[d] = 2
        return False
    return any(d not in state and visit(d) for d in succ)
