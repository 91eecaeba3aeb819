"""Matching: which events of different devices are the same collective or transfer.

(a) collectives: on every device group, the k-th collective each member issues must be the
    same collective (kind, groups, element types, shapes, reducer, dimensions, pairs) --
    else a `mismatch`; one that some members never reach is `unmatched`;
(b) channels: on every (stream, source device, target device), the k-th send pairs with the
    k-th recv; a send whose recv is never issued (or the reverse) is `unmatched`
    (docs/reference/collective-semantics.md 21a: unbuffered channels make it a hang).  A
    stream is the runtime's pairing rule (xladist/hlo/collective_groups.py SendRecvStreams):
    a channel whose sends and recvs both exist, else the one-ended ends paired by peers and
    order.

Matched events are linked (`Event.inst` for collectives, `Event.partner` for transfers); the
joint simulation (simulate.py) runs on those links.
"""

from __future__ import annotations

from xladist.hlo.collective_groups import PEER_ORDER, SendRecvStreams

from . import budget
from .budget import over_deadline
from .events import DeviceTrace, Event
from .report import (
    REFERENCE,
    Problem,
    device_list,
    event_ref,
    group_text,
    leaves_early,
    may_pass,
    mismatch_problem,
    side_by_side,
)

__all__ = ["match_channels", "match_collectives"]


class _Instance:
    """One collective as all members of a group run it together."""

    __slots__ = ("arrived", "group")

    def __init__(self, group):
        self.group = group
        self.arrived: set[int] = set()   # members that reached it (a sync) or started it



def match_collectives(traces: list[DeviceTrace], problems: list[Problem],
                       deadline: float | None = None) -> None:
    """(a): pair the k-th collective of each member per device group; record problems."""
    lists: dict[tuple[int, ...], dict[int, list[Event]]] = {}
    for tr in traces:
        for ev in tr.events:
            if ev.kind in ("sync", "start"):
                lists.setdefault(ev.group, {}).setdefault(tr.device, []).append(ev)
    truncated = {tr.device for tr in traces if tr.unproven is not None}
    seen_mismatch: set = set()
    steps = 0
    for g, (group, per_dev) in enumerate(lists.items()):
        seqs = [per_dev.get(d, []) for d in group]
        longest = max(len(s) for s in seqs)
        reported_mismatch = False
        for k in range(longest):
            steps += len(group)
            if steps >= budget.CLOCK_EVERY:
                steps = 0
                over_deadline(deadline, lambda: (
                    f"matching collectives: collective #{k + 1} of device group "
                    f"{group_text(group)} ({g + 1} of {len(lists)} groups)"))
            present = [(d, s[k]) for d, s in zip(group, seqs) if k < len(s)]
            inst = _Instance(group) if len(present) == len(group) else None
            ref = present[0][1]
            for d, ev in present:
                ev.inst = inst
                field = ref.sig.first_difference(ev.sig)
                if field and not reported_mismatch:
                    key = (ref.instr, ev.instr, field)
                    if key not in seen_mismatch:
                        seen_mismatch.add(key)
                        problems.append(mismatch_problem(ref, ev, field, k, group))
                    reported_mismatch = True
            if inst is None:
                missing = [d for d in group if d not in {p[0] for p in present}]
                if all(d in truncated for d in missing):
                    continue  # they may still get there; their trace is unproven
                devices = [d for d, _ in present]
                problems.append(may_pass(Problem(
                    "unmatched",
                    f"{ref.instr.opcode} {ref.where()} is reached by device"
                    f"{'s' if len(devices) > 1 else ''} {device_list(devices)} but never by device"
                    f"{'s' if len(missing) > 1 else ''} {device_list(missing)} of its group "
                    f"{group_text(group)}; the devices that reach it wait forever",
                    devices + missing, [event_ref(ev) for _, ev in present],
                    detail=[f"device {d} reaches it as its collective #{k + 1} on this group"
                            for d, _ in present] +
                           [f"device {d} issues only {len(s)} collective(s) on this group"
                            for d, s in zip(group, seqs) if d in missing]),
                    leaves_early(ref.sig)))
                break


def match_channels(traces: list[DeviceTrace], problems: list[Problem],
                   deadline: float | None = None) -> None:
    """(b): the k-th send on (stream, src, dst) pairs with the k-th recv on it (a stream is a
    channel, or the one-ended sends and recvs paired by peers and order: SendRecvStreams)."""
    sends: dict[tuple, list[Event]] = {}
    recvs: dict[tuple, list[Event]] = {}
    for tr in traces:
        for ev in tr.events:
            if ev.kind == "send":
                sends.setdefault((ev.stream, ev.device, ev.peer), []).append(ev)
            elif ev.kind == "recv":
                recvs.setdefault((ev.stream, ev.peer, ev.device), []).append(ev)
    truncated = {tr.device for tr in traces if tr.unproven is not None}
    keys = list(dict.fromkeys(list(sends) + list(recvs)))
    steps = 0
    for n, key in enumerate(keys):
        stream, src, dst = key
        ss, rs = sends.get(key, []), recvs.get(key, [])
        steps += len(ss) + 1
        if steps >= budget.CLOCK_EVERY:
            steps = 0
            over_deadline(deadline, lambda: (
                f"matching {_stream(stream)} from device {src} to device {dst} "
                f"({n + 1} of {len(keys)} sender/receiver pairs)"))
        for s, r in zip(ss, rs):
            s.partner, r.partner = r, s
            if s.shape != r.shape:
                problems.append(Problem(
                    "mismatch",
                    f"{_stream(stream, s.channel)}: device {src} sends {s.shape} at {s.where()} "
                    f"but device {dst} receives {r.shape} at {r.where()}",
                    [src, dst], [event_ref(s), event_ref(r)],
                    detail=side_by_side((f"device {src}", f"device {dst}"),
                                         [("instruction", s.where(), r.where()),
                                          ("shape", s.shape, r.shape)], differs="shape")))
        if len(ss) > len(rs) and dst not in truncated:
            problems.append(_unmatched_end(ss[len(rs)], stream, dst, len(ss), len(rs)))
        elif len(rs) > len(ss) and src not in truncated:
            problems.append(_unmatched_end(rs[len(ss)], stream, src, len(rs), len(ss)))


def _unmatched_end(ev, stream, other: int, mine: int, theirs: int) -> Problem:
    """A send (recv) of `ev.device` that device `other` never answers: `mine` ends on this
    side, `theirs` on the other."""
    d = ev.device
    send = ev.kind == "send"
    verb, peer_op = ("sends to", "recv") if send else ("receives from", "send")
    after = ("channels are unbuffered, so the send never completes" if send
             else "the recv-done waits forever")
    return Problem(
        "unmatched",
        f"device {d} {verb} device {other} on {_stream(stream, ev.channel)} at {ev.where()}, "
        f"but device {other} never issues a matching {peer_op}; {after}",
        [d, other], [event_ref(ev)],
        detail=[f"device {d} issues {mine} {ev.kind}(s) {'to' if send else 'from'} device "
                f"{other} on {_stream(stream)}; device {other} issues {theirs} {peer_op}(s) "
                f"{'from' if send else 'to'} device {d}", f"({_pairing_rule(stream)})"])


def _stream(stream, channel=None) -> str:
    """`channel 3`; for the one-ended ends, how they pair (SendRecvStreams.describe)."""
    if stream is PEER_ORDER and channel is None:
        return "the one-ended sends and recvs (paired by peers and program order)"
    return SendRecvStreams.describe(stream, channel)


def _pairing_rule(stream) -> str:
    """The rule that paired (or failed to pair) a transfer, for unmatched ends."""
    if stream is PEER_ORDER:
        return ("sends and recvs whose channel id has no end of the other kind pair by peers "
                f"and program order, as XLA pairs them ({REFERENCE} D.19a)")
    return ("a channel id carried by both sends and recvs pairs its own ends only, in program "
            f"order ({REFERENCE} D.19a); XLA, which pairs by peers and order alone, may "
            "pair them otherwise")
