"""The joint simulation: every device runs until all finish or none can move.

A collective blocks until all members arrive, an async done until all members issued the
start, a recv-done until the peer issued the send, a send-done until the peer issued the
recv.  Waits are only ever released, so the devices still blocked at the end are blocked for
good; cycles.py explains them.
"""

from __future__ import annotations

from collections import deque

from . import budget
from .budget import over_deadline
from .events import DeviceTrace, Event

__all__ = ["simulate"]


def _blocked(ev: Event) -> bool:
    """Whether the device at `ev` must wait (issuing effects are applied by the caller)."""
    k = ev.kind
    if k == "sync":
        return ev.inst is None or len(ev.inst.arrived) < len(ev.inst.group)
    if k == "done":
        inst = ev.link.inst
        return inst is None or len(inst.issued) < len(inst.group)
    if k in ("send-done", "recv-done"):
        partner = ev.link.partner
        return partner is None or not partner.issued
    return False


def _wait_key(ev: Event):
    if ev.kind == "sync":
        return ev.inst
    if ev.kind == "done":
        return ev.link.inst
    return ev.link.partner


def simulate(traces: list[DeviceTrace], deadline: float | None = None) -> dict[int, Event]:
    """(c): run every device until all finish or none can move; the events devices stop at."""
    pos = {tr.device: 0 for tr in traces}
    by_dev = {tr.device: tr.events for tr in traces}
    waiters: dict[int, list[int]] = {}
    runnable = deque(pos)
    queued = set(pos)

    def wake(key) -> None:
        for d in waiters.pop(id(key), ()):
            if d not in queued:
                queued.add(d)
                runnable.append(d)

    total = sum(map(len, by_dev.values()))
    steps = 0
    while runnable:
        d = runnable.popleft()
        queued.discard(d)
        events = by_dev[d]
        i = pos[d]
        steps += 1
        if steps >= budget.CLOCK_EVERY // 16:   # each turn runs a device up to its next wait
            steps = 0
            over_deadline(deadline, lambda: (
                f"simulating all devices together (device {d} at event {i + 1} of "
                f"{len(events)}; {sum(pos.values()):,} of {total:,} events run)"))
        while i < len(events):
            ev = events[i]
            k = ev.kind
            if k == "sync" and ev.inst is not None and d not in ev.inst.arrived:
                ev.inst.arrived.add(d)
                if len(ev.inst.arrived) == len(ev.inst.group):
                    wake(ev.inst)
            if _blocked(ev):
                key = _wait_key(ev)
                if key is not None:
                    waiters.setdefault(id(key), []).append(d)
                break
            if k == "start" and ev.inst is not None:
                ev.inst.issued.add(d)
                if len(ev.inst.issued) == len(ev.inst.group):
                    wake(ev.inst)
            elif k in ("send", "recv"):
                ev.issued = True
                wake(ev)
            i += 1
        pos[d] = i
    return {d: by_dev[d][i] for d, i in pos.items() if i < len(by_dev[d])}
