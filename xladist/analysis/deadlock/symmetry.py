"""Devices by symmetry: check an SPMD program once for all devices, when that is sound.

An SPMD program runs the same instructions on every device; the ids (replica-id,
partition-id) usually feed only data and, through the instructions' attributes, the choice
of groups and peers.  `symmetric_trace` traces the module once with both ids unknown
(fold.py folds them to an Unknown without key).  If that trace completes -- no conditional,
loop or trip count depended on an id, nor on data -- every device issues exactly this
sequence of instructions.  Then, without simulating each device:

- collectives: if each collective's groups partition all devices, every member of a group
  meets the same instructions on that group in the same order, so the k-th collective of
  every member is the same instruction: the same kind, groups, shapes and reducer (no
  mismatch, nothing unmatched), and running all devices in lock step never waits for a
  collective that some member reaches later (no cycle);
- channels: if every send and recv on a channel names the same source-target pairs and they
  form a permutation of all devices (each device sends to one and receives from one), the
  k-th send of device s on the channel pairs with the k-th recv on it of its target, which is
  the k-th recv of the same trace.  Counts and shapes must agree, and each send-done (recv-
  done) must come after its partner recv (send) in the trace, so lock step never waits for a
  later event.

Lock step then finishes on every device, and since waits only ever get released, so does
the joint simulation the per-device path runs (check.py): the verdict is "proven", with the
same events per device.  Whenever one of these conditions fails, or the trace needed a
choice (branches picked by all-reduce results, which differ between groups), this module
answers None and check.py traces every device separately: correct, only slower.  It never
reports a problem itself, so every report's text is the per-device path's.
"""

from __future__ import annotations

from .events import DeviceTrace
from .facts import ModuleFacts
from .trace import trace_device

__all__ = ["symmetric_trace"]


def symmetric_trace(facts: ModuleFacts, schedule, *, max_unroll: int, induction: bool,
                    deadline: float | None, choose) -> DeviceTrace | None:
    """The one trace every device runs, proven free of mismatches and waits as the module
    docstring says; None when the program is not symmetric enough (check every device)."""
    devices = facts.da.devices
    trace = trace_device(facts, schedule, devices[0], max_unroll=max_unroll, choose=choose,
                         induction=induction, deadline=deadline, symbolic=True)
    if trace.unproven is not None or choose.made:
        return None
    n = len(devices)
    sends: dict = {}
    recvs: dict = {}
    pairs: dict = {}          # channel -> the source->target map all its ends must name
    partitions: set[int] = set()   # id() of instructions whose groups were checked
    for ev in trace.events:
        k = ev.kind
        if k in ("sync", "start"):
            if id(ev.instr) in partitions:
                continue
            member, sig = facts.collective(ev.instr)
            if len(member) != n or sum(len(g) for g in sig.groups) != n:
                return None  # some device in no group, or in two: not one partition
            partitions.add(id(ev.instr))
        elif k in ("send", "recv"):
            to_target, to_source = facts.peers(ev.instr)
            if len(to_target) != n or len(to_source) != n:
                return None  # not a permutation of all devices
            known = pairs.setdefault(ev.stream, to_target)
            if known is not to_target and known != to_target:
                return None
            (sends if k == "send" else recvs).setdefault(ev.stream, []).append(ev)
    for channel in set(sends) | set(recvs):
        ss, rs = sends.get(channel, []), recvs.get(channel, [])
        if len(ss) != len(rs) or any(s.shape != r.shape for s, r in zip(ss, rs)):
            return None  # the per-device path names the unmatched or mismatched end
        for s, r in zip(ss, rs):
            s.partner, r.partner = r, s
    for ev in trace.events:
        if ev.kind in ("send-done", "recv-done"):
            partner = ev.link.partner
            if partner is None or partner.index > ev.index:
                return None  # it would wait for a later event: maybe a cycle
    return trace


class LazyTraces:
    """`report.traces` of a module proven by symmetry: device i's own trace (its ids, its
    groups and peers), traced only when asked for, so checking 16,384 devices does not
    build 16,384 traces nobody reads."""

    def __init__(self, devices, trace_one):
        self._devices = list(devices)
        self._trace_one = trace_one
        self._done: dict[int, DeviceTrace] = {}

    def __len__(self) -> int:
        return len(self._devices)

    def __getitem__(self, i: int) -> DeviceTrace:
        d = self._devices[i]
        if d not in self._done:
            self._done[d] = self._trace_one(d)
        return self._done[d]

    def __iter__(self):
        return (self[i] for i in range(len(self)))
