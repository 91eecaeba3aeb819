"""Devices by symmetry: check an SPMD program once for all devices, when that is sound.

An SPMD program runs the same instructions on every device; the ids (replica-id,
partition-id) usually feed only data and, through the instructions' attributes, the choice
of groups and peers.  `symmetric_trace` traces the module once with both ids unknown
(fold.py folds them to an Unknown without key).  If that trace completes -- no conditional,
loop or trip count depended on an id, nor on data, nor on an assumed known_trip_count --
every device reaches exactly the instructions the trace records in `trace.steps`, in that
order, whether or not it takes part in each.  The conditions below are checked on those
steps, each instruction's groups and pairs as ALL devices see them (not the traced
device's events: a device takes no part in a transfer or collective that does not name it,
and what it does not do must still be checked):

- collectives: nothing more.  Each instruction's groups are valid (facts.py expands them as
  the runtime does: a device in one group at most).  A member of group g takes part in an
  instruction exactly when g is one of its groups, so all members of g meet the same
  instructions on g in the same order: no mismatch, nothing unmatched, whatever the other
  instructions' partitions (partial collective-broadcast groups included);
- channels, per pairing stream (SendRecvStreams: a channel, or the one-ended ends paired by
  peers and order): every send and recv of the stream names the same source-target map M.
  Then device s's k-th send of the stream goes to M[s] and is the stream's k-th send step,
  and M[s]'s k-th recv is the stream's k-th recv step: counts and shapes must agree step by
  step, and each send-done (recv-done) must come after its partner recv (send) step.

Lock step then finishes on every device: when all devices stand at step i, a collective has
every member there, a done's start and a transfer's partner were passed, and a device that
takes no part moves on.  Since waits are only ever released, the joint simulation the
per-device path runs (check.py) finishes too: the verdict is "proven", with the same events
per device.  Whenever a condition fails, or the trace needed a choice (branches picked by
all-reduce results, which differ between groups), this module answers None and check.py
goes on to classes.py, then to every device separately: correct, only slower.  It never
reports a problem itself, so every report's text is the per-device path's.
"""

from __future__ import annotations

from .events import DeviceTrace
from .facts import ModuleFacts
from .trace import trace_device

__all__ = ["LazyTraces", "event_counts", "symmetric_trace"]


def symmetric_trace(facts: ModuleFacts, schedule, *, max_unroll: int, induction: bool,
                    deadline: float | None, choose) -> DeviceTrace | None:
    """The one trace every device runs, proven free of mismatches and waits as the module
    docstring says; None when the program is not symmetric enough (check every device)."""
    devices = facts.da.devices
    trace = trace_device(facts, schedule, devices[0], max_unroll=max_unroll, choose=choose,
                         induction=induction, deadline=deadline, symbolic=True)
    if trace.unproven is not None or choose.made or trace.assumptions:
        return None
    maps: dict = {}       # stream -> the source->target map all its ends must name
    ends: dict = {}       # (stream, "send"/"recv") -> steps, in order
    for i, (kind, instr, _) in enumerate(trace.steps):
        if kind not in ("send", "recv"):
            continue
        to_target = facts.peers(instr)[0]
        stream = facts.streams.key(instr)
        known = maps.setdefault(stream, to_target)
        if known is not to_target and known != to_target:
            return None   # ends of one stream name different pairs: check every device
        ends.setdefault((stream, kind), []).append(i)
    partner: dict[int, int] = {}
    for stream, to_target in maps.items():
        if not to_target:
            continue      # no device takes part in this stream
        ss, rs = ends.get((stream, "send"), []), ends.get((stream, "recv"), [])
        if len(ss) != len(rs):
            return None   # the per-device path names the unmatched end
        for s, r in zip(ss, rs):
            if _shape(trace.steps[s][1]) != _shape(trace.steps[r][1]):
                return None
            partner[s], partner[r] = r, s
    for i, (kind, _, link) in enumerate(trace.steps):
        if kind in ("send-done", "recv-done") and facts.peers(trace.steps[link][1])[0]:
            if partner.get(link, i + 1) > i:
                return None   # it would wait for a later step: maybe a cycle
    return trace


def event_counts(facts: ModuleFacts, trace: DeviceTrace) -> dict[int, int]:
    """Each device's number of events in a symmetric trace: the steps whose group or peer
    map names it (counted per distinct map, not per device and step)."""
    steps = trace.steps
    per_map: dict[int, int] = {}
    maps: dict[int, dict] = {}
    for kind, instr, link in steps:
        op = instr if link is None else steps[link][1]
        if kind in ("sync", "start", "done"):
            m = facts.collective(op)[0]
        else:
            m = facts.peers(op)[0 if kind.startswith("send") else 1]
        per_map[id(m)] = per_map.get(id(m), 0) + 1
        maps[id(m)] = m
    counts = dict.fromkeys(facts.da.devices, 0)
    for key, c in per_map.items():
        for d in maps[key]:
            counts[d] += c
    return counts


def _shape(instr) -> str:
    data = instr.operands[0].shape if instr.opcode == "send" else instr.shape.subshape((0,))
    return data.to_text(layout=False)


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
