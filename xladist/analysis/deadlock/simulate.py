"""The joint simulation: every unit (a device, or a class of devices) runs until all finish or
none can move.  One simulation, two users: the per-device path (`simulate`, on matched
events) and the class path (classes.py, on class traces).

A unit's trace is compiled into steps.  A step raises some counters by one when the unit
reaches it and may go on once each of its waits `(counter, value)` holds a counter at that
value or more.  For devices: a collective blocks until all members arrive (the instance's
counter, which a sync reached or a start issued raises, reaches the group size), an async
done likewise, a recv-done until the peer issued the send, a send-done until the peer
issued the recv.
Counters only grow, so waits are only ever released: the units still blocked at the end are
blocked for good (cycles.py explains them), and the order units are run in does not change
where they stop.
"""

from __future__ import annotations

from collections import deque

from . import budget
from .budget import over_deadline
from .events import DeviceTrace, Event

__all__ = ["NEVER", "run", "simulate"]

# A counter no step raises: the wait of an event that was never matched.
NEVER = object()


def run(steps: list[list[tuple]], deadline: float | None = None, doing=None) -> list[int]:
    """Run every unit's steps `(raises, waits)` until all finish or none can move (module
    docstring); the position each unit stopped at (its step count when it finished).
    `doing(unit, position, steps run, steps in all)` describes the state for OverBudget."""
    count: dict = {}
    get = count.get
    pos = [0] * len(steps)
    raised = [-1] * len(steps)   # the last step whose counters a unit has raised
    waiters: dict = {}           # counter -> value -> units waiting for it to get there
    runnable = deque(range(len(steps)))
    queued = set(runnable)
    total = sum(map(len, steps))
    turns = 0
    while runnable:
        u = runnable.popleft()
        queued.discard(u)
        seq, i = steps[u], pos[u]
        turns += 1
        if turns >= budget.CLOCK_EVERY // 16:   # each turn runs a unit up to its next wait
            turns = 0
            over_deadline(deadline, lambda: doing(u, i, sum(pos), total))
        n = len(seq)
        while i < n:
            raises, waits = seq[i]
            if raised[u] < i:
                raised[u] = i
                for key in raises:
                    value = count[key] = get(key, 0) + 1
                    pending = waiters.get(key)
                    if pending is not None and value in pending:
                        for w in pending.pop(value):
                            if w not in queued:
                                queued.add(w)
                                runnable.append(w)
            blocked = None
            for key, value in waits:
                if get(key, 0) < value:
                    blocked = key, value
                    break
            if blocked is not None:
                waiters.setdefault(blocked[0], {}).setdefault(blocked[1], []).append(u)
                break
            i += 1
        pos[u] = i
    return pos


def _steps(events: list[Event]) -> list[tuple]:
    """A device's matched events as steps: an instance counts its members' arrivals (sync)
    or starts (start, waited on by done); a send or recv raises its own counter once."""
    out = []
    append = out.append
    never = ((), ((NEVER, 1),))
    for ev in events:
        k = ev.kind
        if k == "sync":
            inst = ev.inst
            append(never if inst is None else ((inst,), ((inst, len(inst.group)),)))
        elif k == "start":
            append(((ev.inst,), ()) if ev.inst is not None else ((), ()))
        elif k == "done":
            inst = ev.link.inst
            append(never if inst is None else ((), ((inst, len(inst.group)),)))
        elif k == "send" or k == "recv":
            append(((ev,), ()))
        else:   # send-done / recv-done: the partner recv / send must have been issued
            partner = ev.link.partner
            append(never if partner is None else ((), ((partner, 1),)))
    return out


def simulate(traces: list[DeviceTrace], deadline: float | None = None) -> dict[int, Event]:
    """(c): run every device until all finish or none can move; the events devices stop at.
    Instances and transfers record who arrived and what was issued, for cycles.py."""
    by_dev = [tr.events for tr in traces]
    pos = run([_steps(events) for events in by_dev], deadline, lambda u, i, done, total: (
        f"simulating all devices together (device {traces[u].device} at event {i + 1} of "
        f"{len(by_dev[u])}; {done:,} of {total:,} events run)"))
    for events, i in zip(by_dev, pos):
        for ev in events[:i + 1]:   # the events passed, and the one stopped at (arrived)
            if ev.inst is not None and ev.kind in ("sync", "start"):
                ev.inst.arrived.add(ev.device)
            elif ev.kind in ("send", "recv"):
                ev.issued = True
    return {tr.device: events[i] for tr, events, i in zip(traces, by_dev, pos)
            if i < len(events)}
