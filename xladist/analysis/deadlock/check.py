"""The static cross-device check: prove, before any rank blocks, that a module cannot hang.

`check_module(module, num_devices)` traces every device's schedule (trace.py), then:

(a) matches collectives: on every device group, the k-th collective each member issues must be
    the same collective (kind, groups, element types, shapes, reducer, dimensions, pairs) --
    else a `mismatch`; one that some members never reach is `unmatched`;
(b) matches channels: on every (channel, source device, target device), the k-th send pairs
    with the k-th recv; a send whose recv is never issued (or the reverse) is `unmatched`
    (docs/reference/collective-semantics.md 21a: unbuffered channels make it a hang);
(c) runs all devices jointly -- a collective blocks until all members arrive, an async done
    until all members issued the start, a recv-done until the peer issued the send, a
    send-done until the peer issued the recv -- until every device finishes or none can move,
    then reports each cycle of waits as a `deadlock`.

Control that depends on data around communication stops a device's trace and is `unproven`:
a warning, an error with strict=True.  Except a conditional whose index comes from all-reduce
results (the same on every member of the group, e.g. `lax.cond(psum(x) > 0, ...)`): the check
runs once per combination of its branches, devices sharing the index taking the same one, and
a problem that only some combinations have is a warning naming them (the data decides).
Problems and their text live in report.py.
"""

from __future__ import annotations

import time
from collections import deque

from xladist.hlo.collective_groups import DeviceAssignment, GroupError, run_device_counts
from xladist.errors import InputError
from xladist.hlo.ir import Module

from .report import Problem, Report, event_ref, mismatch_problem, side_by_side
from .classes import by_classes
from .symmetry import LazyTraces, symmetric_trace
from ..schedule import schedule_module
from .trace import (
    DEFAULT_MAX_UNROLL,
    DeviceTrace,
    Event,
    ModuleFacts,
    OverBudget,
    trace_device,
    where,
)

__all__ = ["DEFAULT_BUDGET", "Problem", "Report", "check_module", "resolve_devices"]

# Seconds the check may take before it says "cannot prove within the budget" (--check-budget).
DEFAULT_BUDGET = 10.0


class _Instance:
    """One collective as all members of a group run it together."""

    __slots__ = ("arrived", "group", "issued")

    def __init__(self, group):
        self.group = group
        self.arrived: set[int] = set()
        self.issued: set[int] = set()


def resolve_devices(module: Module, num_devices: int | None,
                    device_assignment=None) -> DeviceAssignment:
    """The device assignment the check simulates.

    The same rule as the verifier and the runtime (collective_groups.run_device_counts): the
    header's counts, the rest from `num_devices` (a module declaring neither runs as
    `num_devices` replicas).  A `device_assignment` table ([replica][partition] -> device)
    overrides the header, which is how one program is checked at several partition counts.
    """
    if device_assignment is not None:
        try:
            da = (device_assignment if isinstance(device_assignment, DeviceAssignment)
                  else DeviceAssignment(device_assignment))
        except GroupError as e:
            raise InputError(str(e)) from None
        n = da.replica_count * da.num_partitions
        if num_devices is not None and num_devices != n:
            raise InputError(f"the device assignment holds {n} devices but {num_devices} were "
                             "asked for")
        return da
    if num_devices is not None and num_devices < 1:
        raise InputError(f"the number of devices must be at least 1, not {num_devices}")
    # The runtime's rule: the header's counts, the rest from the device total.
    return DeviceAssignment.default(*run_device_counts(module, num_devices))


# The matching and simulation loops look at the clock every this many steps: a million
# events take seconds at 1,024 devices, and perf_counter per step would cost ~10% of that.
_CLOCK_EVERY = 4096


def _over_deadline(deadline: float | None, doing) -> None:
    """Raise OverBudget when `deadline` has passed; `doing()` builds the description."""
    if deadline is not None and time.perf_counter() > deadline:
        raise OverBudget(None, "", doing())


def _match_collectives(traces: list[DeviceTrace], problems: list[Problem],
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
            if steps >= _CLOCK_EVERY:
                steps = 0
                _over_deadline(deadline, lambda: (
                    f"matching collectives: collective #{k + 1} of device group "
                    f"{_group(group)} ({g + 1} of {len(lists)} groups)"))
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
                problems.append(Problem(
                    "unmatched",
                    f"{ref.instr.opcode} {ref.where()} is reached by device"
                    f"{'s' if len(devices) > 1 else ''} {_list(devices)} but never by device"
                    f"{'s' if len(missing) > 1 else ''} {_list(missing)} of its group "
                    f"{_group(group)}; the devices that reach it wait forever",
                    devices + missing, [event_ref(ev) for _, ev in present],
                    detail=[f"device {d} reaches it as its collective #{k + 1} on this group"
                            for d, _ in present] +
                           [f"device {d} issues only {len(s)} collective(s) on this group"
                            for d, s in zip(group, seqs) if d in missing]))
                break


def _match_channels(traces: list[DeviceTrace], problems: list[Problem],
                    deadline: float | None = None) -> None:
    """(b): the k-th send on (channel, src, dst) pairs with the k-th recv on it."""
    sends: dict[tuple, list[Event]] = {}
    recvs: dict[tuple, list[Event]] = {}
    for tr in traces:
        for ev in tr.events:
            if ev.kind == "send":
                sends.setdefault((ev.channel, ev.device, ev.peer), []).append(ev)
            elif ev.kind == "recv":
                recvs.setdefault((ev.channel, ev.peer, ev.device), []).append(ev)
    truncated = {tr.device for tr in traces if tr.unproven is not None}
    keys = list(dict.fromkeys(list(sends) + list(recvs)))
    steps = 0
    for n, key in enumerate(keys):
        channel, src, dst = key
        ss, rs = sends.get(key, []), recvs.get(key, [])
        steps += len(ss) + 1
        if steps >= _CLOCK_EVERY:
            steps = 0
            _over_deadline(deadline, lambda: (
                f"matching channel {channel} from device {src} to device {dst} "
                f"({n + 1} of {len(keys)} sender/receiver pairs)"))
        for s, r in zip(ss, rs):
            s.partner, r.partner = r, s
            if s.shape != r.shape:
                problems.append(Problem(
                    "mismatch",
                    f"channel {channel}: device {src} sends {s.shape} at {s.where()} but device "
                    f"{dst} receives {r.shape} at {r.where()}",
                    [src, dst], [event_ref(s), event_ref(r)],
                    detail=side_by_side((f"device {src}", f"device {dst}"),
                                         [("instruction", s.where(), r.where()),
                                          ("shape", s.shape, r.shape)], differs="shape")))
        if len(ss) > len(rs) and dst not in truncated:
            s = ss[len(rs)]
            problems.append(Problem(
                "unmatched",
                f"device {src} sends to device {dst} on channel {channel} at {s.where()}, but "
                f"device {dst} never issues a matching recv; channels are unbuffered, so the "
                "send never completes",
                [src, dst], [event_ref(s)],
                detail=[f"device {src} issues {len(ss)} send(s) to device {dst} on channel "
                        f"{channel}; device {dst} issues {len(rs)} recv(s) from device {src}"]))
        elif len(rs) > len(ss) and src not in truncated:
            r = rs[len(ss)]
            problems.append(Problem(
                "unmatched",
                f"device {dst} receives from device {src} on channel {channel} at {r.where()}, "
                f"but device {src} never issues a matching send; the recv-done waits forever",
                [dst, src], [event_ref(r)],
                detail=[f"device {dst} issues {len(rs)} recv(s) from device {src} on channel "
                        f"{channel}; device {src} issues {len(ss)} send(s) to device {dst}"]))


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


def _simulate(traces: list[DeviceTrace], deadline: float | None = None) -> dict[int, Event]:
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
        if steps >= _CLOCK_EVERY // 16:   # each turn runs a device up to its next wait
            steps = 0
            _over_deadline(deadline, lambda: (
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
    return f"to reach {ev.instr.opcode} on group {_group(ev.group)}"


def _cycles(stuck: dict[int, Event], traces: list[DeviceTrace],
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
                    f"devices {_list(cycle)} wait for each other in a cycle",
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


def _list(devices) -> str:
    return ", ".join(str(d) for d in devices)


def _group(group) -> str:
    return "{" + ",".join(map(str, group)) + "}"


def check_module(module: Module, num_devices: int | None = None, *, device_assignment=None,
                 strict: bool = False, schedule=None,
                 max_unroll: int = DEFAULT_MAX_UNROLL, budget: float | None = DEFAULT_BUDGET,
                 engine: str = "induction", symmetry: bool = True) -> Report:
    """Prove that `module` cannot hang or desynchronize on `num_devices` devices.

    Arguments:
      module: a parsed (and preferably verified) HLO module.
      num_devices: devices to simulate (default: replica_count * num_partitions); see
        `resolve_devices` for how it scales a module's header.
      device_assignment: a `[replica][partition] -> device` table (default: partition * R +
        replica, docs/reference/collective-semantics.md A.7).
      strict: make "cannot prove" (control depending on data around communication) an error.
      schedule: the per-computation order to check (default: `schedule_module(module)`, the
        order the executor runs).
      max_unroll: the most iterations of one loop the check unrolls.
      budget: seconds the check may take (None: no limit); past it the check stops and says
        "cannot prove within the budget" (a warning, an error with strict), naming where.
      engine: "induction" (default) traces loops whose communication does not depend on the
        iteration a constant number of times (induction.py); "unroll" unrolls every
        iteration, the reference the property tests compare against.
      symmetry: with engine="induction", first try tracing once for all devices with the ids
        unknown (symmetry.py), then once per class of devices that take the same path
        (classes.py); where neither is sure, every device is traced.

    `report.symmetric` tells whether the one symbolic trace proved the module, and
    `report.classes` how many class traces did (classes.py), when that path proved it.

    Returns a Report; `report.ok` is True when the module is proven to finish on every device.
    Raises InputError / ScheduleError (exit code 2) for modules that are not valid input.
    """
    t0 = time.perf_counter()
    if module.entry is None:
        raise InputError(f"module {module.name} has no entry computation")
    da = resolve_devices(module, num_devices, device_assignment)
    if schedule is None:
        schedule = schedule_module(module)
    if engine not in ("induction", "unroll"):
        raise InputError(f"unknown deadlock check engine {engine!r} (induction or unroll)")
    facts = ModuleFacts(module, da)
    deadline = None if budget is None else t0 + budget
    induction = engine == "induction"
    if induction and symmetry:
        try:
            one = symmetric_trace(facts, schedule, max_unroll=max_unroll, induction=True,
                                  deadline=deadline, choose=_Choices())
        except OverBudget:
            one = None  # the per-device path says where the budget ran out
        if one is not None:
            report = Report(module.name, da, [], [one], time.perf_counter() - t0,
                            strict=strict)
            report.events = dict.fromkeys(da.devices, len(one.events))
            report.traces = LazyTraces(da.devices, lambda d: trace_device(
                facts, schedule, d, max_unroll=max_unroll, choose=_Choices(), induction=True))
            report.symmetric = True
            return report
        try:
            classes = by_classes(facts, schedule, max_unroll=max_unroll, deadline=deadline,
                                 choices=_Choices(), max_runs=MAX_BRANCH_RUNS)
        except (OverBudget, InputError):
            classes = None  # as above; invalid input is reported as the per-device path words it
        if classes is not None:
            return _class_report(module, da, facts, schedule, classes, max_unroll, strict,
                                 time.perf_counter() - t0)
    choices = _Choices()
    runs: list[tuple[list[Problem], str | None]] = []
    first = None
    while True:
        try:
            traces, found = _check_once(facts, schedule, da, strict, max_unroll, choices,
                                        induction, deadline)
        except OverBudget as e:
            traces, found = [], [_over_budget(e, budget, strict)]
            first = first or traces
            runs.append((found, None))
            break
        if traces is None:
            # Devices shortened different loops or trip counts: induction does not apply to
            # this program as a whole; the reference unrolling decides (within the budget).
            induction = False
            choices = _Choices()
            runs, first = [], None
            continue
        first = first or traces
        runs.append((found, "; ".join(choices.describe()) if choices.made else None))
        if not choices.advance():
            break
        if choices.runs >= MAX_BRANCH_RUNS:
            runs.append(([Problem(
                "unproven", f"more than {MAX_BRANCH_RUNS} combinations of branches chosen by "
                "all-reduce results; the others are not checked", [], [],
                severity="error" if strict else "warning")], None))
            break
    return Report(module.name, da, _merge_runs(runs, strict), first,
                  time.perf_counter() - t0, strict=strict)


def _class_report(module, da, facts, schedule, classes, max_unroll, strict, seconds) -> Report:
    """The report of a module proven by classes of devices (classes.py): no problems, each
    device's event count its class's, its own trace built only when asked for."""
    report = Report(module.name, da, [], [tr for _, tr in classes], seconds, strict=strict)
    count = {}
    for members, tr in classes:
        count.update(dict.fromkeys(members.tolist(), len(tr.events)))
    report.events = {d: count[d] for d in da.devices}
    report.traces = LazyTraces(da.devices, lambda d: trace_device(
        facts, schedule, d, max_unroll=max_unroll, choose=_Choices(), induction=True))
    report.classes = len(classes)
    return report


def _merge_runs(runs, strict: bool) -> list[Problem]:
    """The problems of all runs, once each. One found in some combinations of data-chosen
    branches only may not happen (the data decides): a warning, unless strict."""
    def ident(p):
        return p.kind, p.message

    def kind_on(p):  # the same kind of problem on the same devices, wherever it shows
        return p.kind, tuple(sorted(set(p.devices)))
    everywhere = set.intersection(*({kind_on(p) for p in found} for found, _ in runs))
    problems: list[Problem] = []
    seen = set()
    for found, when in runs:
        for p in found:
            if ident(p) in seen:
                continue
            seen.add(ident(p))
            if when is not None and kind_on(p) not in everywhere:
                p.detail.append(f"(only when {when}; the data decides)")
                if not strict:
                    p.severity = "warning"
            problems.append(p)
    return problems


# Runs of the whole check over combinations of data-chosen (but uniform) branches.
MAX_BRANCH_RUNS = 64


class _Choices:
    """The branches conditionals with unknown-but-keyed indices take in one run, enumerated
    depth first over the order the keys were met (a later key may exist only for some
    earlier choices): every device meeting a key takes the same branch."""

    def __init__(self):
        self.fixed: dict = {}
        self.made: dict = {}        # key -> [branch, branches, where, devices]
        self.order: list = []
        self.runs = 0

    def __call__(self, key, n: int, where: str, device: int) -> int:
        if key not in self.made:
            self.made[key] = [self.fixed.get(key, 0), n, where, []]
            self.order.append(key)
        self.made[key][3].append(device)
        return self.made[key][0]

    def describe(self) -> list[str]:
        out = []
        for key in self.order:
            k, n, w, ds = self.made[key]
            on = f"on device{'s' if len(ds) > 1 else ''} {', '.join(map(str, ds))}"
            if key[0] == "trip":  # a loop's uniform trip count (trace.py)
                runs = f"{k} or more" if k == n - 1 else str(k)
                out.append(f"{w} runs {runs} iteration{'' if k == 1 else 's'} {on}")
            else:
                out.append(f"{w} takes branch {k} {on}")
        return out

    def advance(self) -> bool:
        """The next combination, or False when all were run."""
        self.runs += 1
        for i in range(len(self.order) - 1, -1, -1):
            k, n = self.made[self.order[i]][:2]
            if k + 1 < n:
                self.fixed = {key: self.made[key][0] for key in self.order[:i]}
                self.fixed[self.order[i]] = k + 1
                self.made, self.order = {}, []
                return True
        return False


def _over_budget(e: OverBudget, budget: float, strict: bool) -> Problem:
    return Problem(
        "unproven", f"cannot prove within the budget of {budget:g} s: the check was "
        f"{e.doing} (--check-budget raises it)", [] if e.device is None else [e.device], [],
        severity="error" if strict else "warning", budget=True)


def _check_once(facts, schedule, da, strict, max_unroll, choices, induction=False,
                deadline=None):
    """Trace every device under `choices`, then match and simulate: (traces, problems);
    (None, None) when devices traced loops by induction differently (then unroll)."""
    traces = []
    for d in da.devices:
        # Loops check the deadline per iteration; straight-line code per device.
        if deadline is not None and time.perf_counter() > deadline:
            raise OverBudget(d, f"the start of its trace ({len(traces)} of "
                             f"{len(da.devices)} devices traced)")
        traces.append(trace_device(facts, schedule, d, max_unroll=max_unroll, choose=choices,
                                   induction=induction, deadline=deadline))
    if induction and len({tuple(tr.shortened) for tr in traces}) > 1 and not _apart(traces):
        return None, None
    problems: list[Problem] = []
    for tr in traces:
        if tr.unproven is not None:
            instr, reason, ctx = tr.unproven
            problems.append(Problem(
                "unproven", f"cannot prove device {tr.device} past "
                f"{instr.opcode} {where(instr, ctx)}: {reason}",
                [tr.device], [event_ref(None, instr, ctx)],
                severity="error" if strict else "warning"))
    _merge_unproven(problems)
    _match_collectives(traces, problems, deadline)
    _match_channels(traces, problems, deadline)
    stuck = _simulate(traces, deadline)
    _cycles(stuck, traces, problems)
    return traces, problems


def _apart(traces) -> bool:
    """Whether devices that traced their loops by induction differently (other loops, other
    trip counts: a trip count uniform only within each group of an all-reduce, say per mesh
    row) never meet inside such a loop: every collective and channel event there links
    only devices with the same shortened loops. Each set of such devices then repeats the
    same per-iteration sequences the same number of times among itself, so induction's
    argument (induction.py) holds set by set, and the events outside the loops do not
    depend on the counts. Otherwise check.py unrolls (None from _check_once)."""
    sig = {tr.device: tuple(tr.shortened) for tr in traces}
    for tr in traces:
        mine = sig[tr.device]
        for ev in tr.events:
            if not ev.looped:
                continue
            others = (ev.peer,) if ev.peer is not None else ev.group
            if not others or any(sig.get(d) != mine for d in others):
                return False
    return True


def _merge_unproven(problems: list[Problem]) -> None:
    """One unproven problem per instruction and reason, listing all devices it applies to."""
    merged: dict[tuple, Problem] = {}
    out = []
    for p in problems:
        if p.kind != "unproven":
            out.append(p)
            continue
        key = (p.instructions[0]["name"], p.message.split(": ", 1)[-1])
        if key in merged:
            merged[key].devices.extend(p.devices)
            continue
        merged[key] = p
        out.append(p)
    for p in merged.values():
        if len(p.devices) > 1:
            p.message = p.message.replace(f"device {p.devices[0]} ",
                                          f"devices {_list(p.devices)} ", 1)
    problems[:] = out
