"""Why devices stay blocked after the joint simulation: each cycle of waits, named device by
device, and the devices blocked behind it."""

from __future__ import annotations

from .events import DeviceTrace, Event
from .report import Problem, device_list, event_ref, group_text

__all__ = ["report_cycles"]


def _waits_for(ev: Event) -> list[int]:
    if ev.kind == "sync":
        return [m for m in ev.inst.group if m not in ev.inst.arrived]
    if ev.kind == "done":
        return [m for m in ev.link.inst.group if m not in ev.link.inst.issued]
    return [ev.peer]


def _why(ev: Event, other: int, stuck: dict[int, Event]) -> str:
    if ev.kind in ("send-done", "recv-done"):
        want = "recv" if ev.kind == "send-done" else "send"
        return f"to issue its {want} on channel {ev.channel}"
    return f"to reach {ev.instr.opcode} on group {group_text(ev.group)}"


def report_cycles(stuck: dict[int, Event], traces: list[DeviceTrace],
            problems: list[Problem]) -> None:
    truncated = {tr.device for tr in traces if tr.unproven is not None}

    def matched(ev: Event) -> bool:
        if ev.kind == "sync":
            return ev.inst is not None
        if ev.kind == "done":
            return ev.link.inst is not None
        return ev.link.partner is not None

    succ: dict[int, int] = {}
    for d, ev in stuck.items():
        if not matched(ev):
            continue  # already reported as unmatched
        nxt = [m for m in _waits_for(ev) if m in stuck and m not in truncated]
        if nxt:
            succ[d] = min(nxt)
    reported: set[frozenset] = set()
    in_cycle: dict[int, Problem] = {}
    for start in sorted(succ):
        path, seen = [], {}
        d = start
        while d in succ and d not in seen:
            seen[d] = len(path)
            path.append(d)
            d = succ[d]
        if d not in seen:
            continue
        cycle = path[seen[d]:]
        key = frozenset(cycle)
        if key in reported:
            continue
        reported.add(key)
        # Rotate so the smallest device speaks first: stable text for the same cycle.
        r = cycle.index(min(cycle))
        cycle = cycle[r:] + cycle[:r]
        lines = []
        for j, dev in enumerate(cycle):
            ev, nxt = stuck[dev], cycle[(j + 1) % len(cycle)]
            head = f"device {dev}" if j == 0 else "which"
            tail = "," if j + 1 < len(cycle) else ": none of them can proceed."
            lines.append(f"{head} waits at {ev.where()} for device {nxt} "
                         f"{_why(ev, nxt, stuck)}{tail}")
        p = Problem("deadlock",
                    f"devices {device_list(cycle)} wait for each other in a cycle",
                    list(cycle), [event_ref(stuck[dev]) for dev in cycle], detail=lines)
        problems.append(p)
        for dev in cycle:
            in_cycle[dev] = p
    # Devices blocked behind a cycle: name them under it so nobody is left unexplained.
    for d in sorted(succ):
        if d in in_cycle:
            continue
        chain, x = [], d
        while x in succ and x not in in_cycle and x not in chain:
            chain.append(x)
            x = succ[x]
        if x in in_cycle:
            p = in_cycle[x]
            ev = stuck[d]
            p.detail.append(f"(device {d} is blocked behind them at {ev.where()}, waiting for "
                            f"device {succ[d]})")
            p.devices.append(d)
            in_cycle[d] = p
