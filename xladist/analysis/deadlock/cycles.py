"""Why devices stay blocked after the joint simulation: each cycle of waits, named device by
device, and the devices blocked behind it."""

from __future__ import annotations

from .events import DeviceTrace, Event
from .report import Problem, device_list, event_ref, group_text, leaves_early, may_pass

__all__ = ["report_cycles"]


def _waits_for(ev: Event) -> list[int]:
    if ev.kind == "sync":
        return [m for m in ev.inst.group if m not in ev.inst.arrived]
    if ev.kind == "done":
        return [m for m in ev.link.inst.group if m not in ev.link.inst.arrived]
    return [ev.peer]


def _why(ev: Event, other: int, stuck: dict[int, Event]) -> str:
    if ev.kind in ("send-done", "recv-done"):
        # The peer's end, not this one: one-ended sends and recvs pair by peers and program
        # order across channels (matching.py), so a recv on channel 1 may wait for a send on
        # channel 2. Only matched ends reach here (report_cycles), so the partner is known.
        want = "recv" if ev.kind == "send-done" else "send"
        theirs = ev.link.partner
        on = "with no channel_id" if theirs.channel is None else f"on channel {theirs.channel}"
        return f"to issue its {want} {on}"
    what = ev.instr.opcode
    if what == "async-start":   # both backends run the wrapped collective at the start
        what = f"async-start (its {ev.sig.kind} runs at the start)"
    return f"to reach {what} on group {group_text(ev.group)}"


def report_cycles(stuck: dict[int, Event], traces: list[DeviceTrace],
                  problems: list[Problem]) -> None:
    """A `deadlock` problem per cycle of waits among the stuck devices (one per strongly
    connected part of the wait graph), the devices blocked behind it named under it.  Devices
    stuck at an unmatched event were reported as such; devices whose trace stopped (data)
    wait for nothing we know."""
    truncated = {tr.device for tr in traces if tr.unproven is not None}
    # The wait graph: a device waits for a peer (a channel end) or for an instance (a
    # collective), which waits for every member that has not arrived; instances are nodes
    # of their own so that a group of n waiting members costs n edges, not n * n.
    adj: dict = {}
    blockers: dict = {}
    for d, ev in stuck.items():
        if not _matched(ev):
            continue  # already reported as unmatched
        if ev.kind in ("sync", "done"):
            inst = ev.inst if ev.kind == "sync" else ev.link.inst
            key = ("i", id(inst))
            if key not in blockers:
                blockers[key] = [m for m in _waits_for(ev) if m in stuck and m not in truncated]
            adj[d] = [key]
        elif ev.peer in stuck and ev.peer not in truncated:
            adj[d] = [ev.peer]
    adj.update(blockers)
    in_cycle: dict[int, Problem] = {}
    for part in _strong_parts(adj):
        cycle = _one_cycle(part, adj)
        if not cycle:
            continue
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
        sigs = [stuck[dev].sig for dev in cycle if stuck[dev].kind in ("sync", "done")]
        may_pass(p, next((r for r in map(leaves_early, sigs) if r is not None), None))
        problems.append(p)
        for dev in part:
            if isinstance(dev, int):
                in_cycle[dev] = p
        for dev in part:
            if isinstance(dev, int) and dev not in cycle:
                _behind(p, dev, stuck, adj, part)
    # Devices blocked behind a cycle: name them under it so nobody is left unexplained.
    waiting = sorted(d for d in adj if isinstance(d, int) and d not in in_cycle)
    changed = True
    while changed:
        changed = False
        for d in waiting:
            if d in in_cycle:
                continue
            hop = next((m for m in _next_devices(d, adj) if m in in_cycle), None)
            if hop is not None:
                p = in_cycle[hop]
                p.detail.append(f"(device {d} is blocked behind them at {stuck[d].where()}, "
                                f"waiting for device {hop})")
                p.devices.append(d)
                in_cycle[d] = p
                changed = True


def _matched(ev: Event) -> bool:
    if ev.kind == "sync":
        return ev.inst is not None
    if ev.kind == "done":
        return ev.link.inst is not None
    return ev.link.partner is not None


def _next_devices(d, adj) -> list[int]:
    """The devices `d` waits for directly (through its instance, if a collective)."""
    out = []
    for n in adj.get(d, ()):
        out.extend(adj.get(n, ()) if not isinstance(n, int) else [n])
    return out


def _behind(p: Problem, dev: int, stuck, adj, part) -> None:
    hop = min(m for m in _next_devices(dev, adj) if m in part)
    p.detail.append(f"(device {dev} is blocked behind them at {stuck[dev].where()}, waiting "
                    f"for device {hop})")
    p.devices.append(dev)


def _strong_parts(adj: dict) -> list[list]:
    """The strongly connected parts of the graph with a cycle (Tarjan, iteratively), in order
    of their smallest device."""
    index: dict = {}
    low: dict = {}
    on: set = set()
    stack: list = []
    parts: list[list] = []
    for root in sorted((n for n in adj if isinstance(n, int))):
        if root in index:
            continue
        work = [(root, iter(adj.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(adj.get(nxt, ()))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    part.append(x)
                    if x == node:
                        break
                if sum(isinstance(x, int) for x in part) > 1:
                    parts.append(part)
    return sorted(parts, key=lambda part: min(x for x in part if isinstance(x, int)))


def _one_cycle(part: list, adj: dict) -> list[int]:
    """A cycle of devices inside one strongly connected part, its smallest device first."""
    inside = set(part)
    d = min(x for x in part if isinstance(x, int))
    path: list[int] = []
    seen: dict[int, int] = {}
    while d not in seen:
        seen[d] = len(path)
        path.append(d)
        d = min(m for m in _next_devices(d, adj) if m in inside)
    cycle = path[seen[d]:]
    r = cycle.index(min(cycle))
    return cycle[r:] + cycle[:r]
