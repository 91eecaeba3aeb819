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
while and its context), on one device's events; `out_of_step` compares them across
devices, `rates` gives them to classes.py for classes of devices.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from .events import DeviceTrace

__all__ = ["out_of_step", "rates", "unequal_totals"]


def rates(trace: DeviceTrace, key_of) -> dict[tuple, tuple[object, Counter]]:
    """(while's id, ctx) -> (the while, Counter of key_of(event) over its window, per
    iteration as Fractions); key_of(event) is None for events that issue nothing."""
    out = {}
    for instr, ctx, start, end, p, _ in trace.windows:
        count = Counter()
        for ev in trace.events[start:end]:
            key = key_of(ev)
            if key is not None:
                count[key] += Fraction(1, p)
        out[(id(instr), ctx)] = (instr, count)
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
    found = {}
    for dev, loops in per_dev.items():
        for loop, (instr, count) in loops.items():
            if loop in found:
                continue
            for key, mine in count.items():
                why = _compare(per_dev, dev, loop, key, mine)
                if why is not None:
                    found[loop] = (instr, loop[1], why)
                    break
    return list(found.values())


def _compare(per_dev, dev: int, loop, key, mine: Fraction) -> str | None:
    """Why device `dev`'s rate `mine` on link `key` differs from its partners', or None."""
    def rate(d, k):
        entry = per_dev.get(d, {}).get(loop)
        return entry[1].get(k, 0) if entry is not None else 0

    if key[0] == "collective":
        for d in key[1]:
            theirs = rate(d, key)
            if theirs != mine:
                return (f"per iteration device {dev} issues {_n(mine)} collective(s) on group "
                        f"{{{','.join(map(str, key[1]))}}} and device {d} {_n(theirs)}")
        return None
    _, stream, src, dst = key
    other = ("recv" if key[0] == "send" else "send", stream, src, dst)
    peer = dst if key[0] == "send" else src
    theirs = rate(peer, other)
    if theirs == mine:
        return None
    sends, recvs = (mine, theirs) if key[0] == "send" else (theirs, mine)
    return (f"per iteration device {src} issues {_n(sends)} send(s) to device {dst} and "
            f"device {dst} {_n(recvs)} recv(s) from it")


def _n(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


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
        for _, _, start, end, _, extra in tr.windows:
            for ev in tr.events[start:end]:
                key = _issues(ev)
                if key is not None:
                    count[key] += extra
        totals[tr.device] = count
    for dev, count in totals.items():
        for key, mine in count.items():
            if key[0] == "collective":
                for d in key[1]:
                    theirs = totals.get(d, Counter())[key]
                    if theirs != mine:
                        return [dev, d], (
                            f"over the run device {dev} issues {mine} collective(s) on group "
                            f"{{{','.join(map(str, key[1]))}}} and device {d} {theirs}; the "
                            "device that issues more waits forever for its last ones"), first[key]
                continue
            _, stream, src, dst = key
            peer = dst if key[0] == "send" else src
            theirs = totals.get(peer, Counter())[("recv" if key[0] == "send" else "send",
                                                  stream, src, dst)]
            if theirs != mine:
                sends, recvs = (mine, theirs) if key[0] == "send" else (theirs, mine)
                return [src, dst], (
                    f"over the run device {src} issues {sends} send(s) to device {dst} and "
                    f"device {dst} {recvs} recv(s) from it; the unanswered ones wait forever"), \
                    first[key]
    return None
