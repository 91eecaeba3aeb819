"""Whether devices stay in step through the loops traced by induction.

Induction (induction.py) traces a few iterations of a loop and lets the last p of them stand
for every later one.  That holds only if the matching pairs the same iterations with each
other in every period: on each device group, every member issues as many collectives per
iteration as every other, and on each channel the sender as many sends to a peer as the
peer recvs from it.  Otherwise the devices fall out of step -- device 0 issues two
all-reduces on {0,1} per iteration and device 1 one, so device 0's iteration k pairs with
device 1's iteration 2k -- and what the traced iterations show (an unmatched end, say) says
nothing of the cycles later iterations form.  check.py then unrolls (a known trip count),
or, when that is long, refuses the module by its totals (`unequal_totals`: a member that
issues more collectives on a group than another waits forever for its last ones), or says
it cannot follow the loop (a trip count from data); classes.py leaves the module to the
per-device path.

The counts are per iteration (over the window's p iterations), per loop instance (the
while, its context and which run of it there), on one device's events; `out_of_step`
compares them across devices, `rates` gives them to classes.py for classes of devices.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from .events import DeviceTrace, where

__all__ = ["entered_apart", "loop_runs", "out_of_step", "rates", "unequal_totals"]


def rates(trace: DeviceTrace, key_of) -> dict[tuple, tuple[object, Counter]]:
    """(while's id, ctx, run) -> (the while, Counter of key_of(event) over its window, per
    iteration as Fractions); key_of(event) is None for events that issue nothing.  `run`
    counts the earlier windows of the same while at the same ctx: a computation called
    twice runs its loop twice at one ctx, and each run must stay in step on its own (one
    run's skew may be another's rebalancing)."""
    out = {}
    for run, (instr, ctx, start, end, p, *_) in loop_runs(trace):
        count = Counter()
        for ev in trace.events[start:end]:
            key = key_of(ev)
            if key is not None:
                count[key] += Fraction(1, p)
        out[run] = (instr, count)
    return out


def _issues(ev):
    """What one device's event issues on a link, as matching.py pairs them: a collective on
    its group, a send or recv on (stream, source, target)."""
    if ev.kind in ("sync", "start"):
        return ("collective", ev.group)
    if ev.kind == "send":
        return ("send", ev.stream, ev.device, ev.peer)
    if ev.kind == "recv":
        return ("recv", ev.stream, ev.peer, ev.device)
    return None


def out_of_step(traces: list[DeviceTrace]) -> list[tuple[object, tuple, str]]:
    """[(while, ctx, why)] for each loop instance in which the devices fall out of step;
    `why` names two devices and what each issues per iteration."""
    per_dev = {tr.device: rates(tr, _issues) for tr in traces if tr.windows}
    loops = {}
    for dev, mine in per_dev.items():
        for loop, (instr, count) in mine.items():
            loops.setdefault(loop, (instr, {}))[1][dev] = count
    found = {}
    for (loop, ctx, _), (instr, counts) in loops.items():
        if (loop, ctx) in found:
            continue   # one report per while and ctx, whichever run fell out of step
        differ = _first_difference(counts)
        if differ is not None:
            found[(loop, ctx)] = (instr, ctx, "per iteration " + _say(*differ))
    return list(found.values())


def entered_apart(traces: list[DeviceTrace]) -> list[tuple[object, tuple, str]]:
    """[(while, ctx, why)] for each loop run whose traced last iterations pair a collective
    or transfer with a partner's event outside the partner's traced last iterations of
    that run (after matching.py linked them): the members entered the loop apart -- replica
    0 issued an all-reduce on {0,1} more before it and replica 1 one more after -- so in the
    run iteration j of one pairs with iteration j + 1 of the other in every iteration,
    while in the trace the last traced ones pair with the code after the loop instead, and
    a cycle those pairs close from some iteration on is missed (classes.py asks the same:
    as many events on each link before the loop)."""
    window, members = {}, {}
    for tr in traces:
        for run, w in loop_runs(tr):
            window[(tr.device, run)] = (w[2], w[3])
        for ev in tr.events:
            if ev.kind in ("sync", "start") and ev.inst is not None:
                members.setdefault(id(ev.inst), []).append(ev)
    found = {}
    for tr in traces:
        for run, (instr, ctx, start, end, *_) in loop_runs(tr):
            if run[:2] in found:
                continue
            for ev in tr.events[start:end]:
                partners = (members.get(id(ev.inst), ()) if ev.kind in ("sync", "start")
                            else (ev.partner,) if ev.kind in ("send", "recv") else ())
                apart = next((pe for pe in partners if pe is not None and not (
                    window.get((pe.device, run), (0, 0))[0] <= pe.index
                    < window.get((pe.device, run), (0, 0))[1])), None)
                if apart is not None:
                    found[run[:2]] = (instr, ctx, (
                        f"device {tr.device}'s {ev.instr.name} in its last traced iterations "
                        f"pairs with device {apart.device}'s {where(apart.instr, apart.ctx)}: "
                        "they enter the loop apart"))
                    break
    return list(found.values())


def loop_runs(trace: DeviceTrace):
    """((while's id, ctx, run), window) for each window, `run` counted as `rates` does."""
    seen = Counter()
    for w in trace.windows:
        loop = (id(w[0]), w[1])
        yield loop + (seen[loop],), w
        seen[loop] += 1


def unequal_totals(traces: list[DeviceTrace]) -> tuple[list[int], str, object] | None:
    """(devices, why, an event on it) for the first link whose members issue different
    numbers of events over the whole run, counting each window as often as it runs; None
    when all agree or when the totals are not known here (a trip count from data, windows
    inside windows, a trace that stopped)."""
    totals, first = {}, {}
    for tr in traces:
        if tr.unproven is not None:
            return None
        spans = sorted((w[2], w[3]) for w in tr.windows)
        if any(b[0] < a[1] for a, b in zip(spans, spans[1:])) or any(
                w[5] is None for w in tr.windows):
            return None
        count = Counter()
        for ev in tr.events:
            key = _issues(ev)
            if key is not None:
                count[key] += 1
                first.setdefault(key, ev)
        for _, _, start, end, _, extra, _ in tr.windows:
            for ev in tr.events[start:end]:
                key = _issues(ev)
                if key is not None:
                    count[key] += extra
        totals[tr.device] = count
    differ = _first_difference(totals)
    if differ is None:
        return None
    dev, key, other, _, _ = differ
    then = ("the device that issues more waits forever for its last ones"
            if key[0] == "collective" else "the unanswered ones wait forever")
    return [dev, other], f"over the run {_say(*differ)}; {then}", first[key]


def _first_difference(counts: dict[int, Counter]):
    """(device, key, partner, its count, the partner's) for the first link on which a
    device and a partner that must match it count differently, or None."""
    for dev, count in counts.items():
        for key, mine in count.items():
            if key[0] == "collective":
                partners = [(d, key) for d in key[1]]
            else:   # a send's recv on its target, a recv's send on its source
                kind, stream, src, dst = key
                partners = [(dst, ("recv", stream, src, dst)) if kind == "send"
                            else (src, ("send", stream, src, dst))]
            for other, theirs_key in partners:
                theirs = counts.get(other, {}).get(theirs_key, 0)
                if theirs != mine:
                    return dev, key, other, mine, theirs
    return None


def _say(dev: int, key, other: int, mine, theirs) -> str:
    if key[0] == "collective":
        return (f"device {dev} issues {_n(mine)} collective(s) on group "
                f"{{{','.join(map(str, key[1]))}}} and device {other} {_n(theirs)}")
    kind, _, src, dst = key
    sends, recvs = (mine, theirs) if kind == "send" else (theirs, mine)
    return (f"device {src} issues {_n(sends)} send(s) to device {dst} and device {dst} "
            f"{_n(recvs)} recv(s) from it")


def _n(x) -> str:
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"
