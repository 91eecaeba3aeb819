"""The static cross-device check: prove, before any rank blocks, that a module cannot hang.

`check_module(module, num_devices)` is the driver.  It first tries the shortcuts (one trace
for all devices, symmetry.py; one per class of devices, classes.py); otherwise it traces every
device's schedule (trace.py), then

(a) matches collectives and (b) channels across devices (matching.py),
(c) runs all devices jointly until every device finishes or none can move (simulate.py),
    then reports each cycle of waits as a `deadlock` (cycles.py).

Control that depends on data around communication stops a device's trace and is `unproven`:
a warning, an error with strict=True.  Except a conditional whose index comes from all-reduce
results (the same on every member of the group, e.g. `lax.cond(psum(x) > 0, ...)`): the check
runs once per combination of its branches (choices.py), devices sharing the index taking the
same one, and a problem that only some combinations have is a warning naming them (the data
decides).  Problems and their text live in report.py.
"""

from __future__ import annotations

import time

from xladist.environment import check_count
from xladist.errors import InputError
from xladist.hlo.collective_groups import DeviceAssignment, GroupError, run_device_counts
from xladist.hlo.ir import Module

from ..schedule import schedule_module
from .budget import OverBudget
from .choices import MAX_BRANCH_RUNS, Choices
from .classes import by_classes
from .cycles import report_cycles
from .events import where
from .facts import ModuleFacts
from .induction import INDUCTION_ITERATIONS
from .matching import match_channels, match_collectives
from .report import (
    BRANCH_RUNS,
    DRIFT,
    Problem,
    Report,
    device_list,
    event_ref,
    leaves_early,
    may_pass,
)
from .simulate import simulate
from .steady import entered_apart, out_of_step, unequal_totals
from .symmetry import LazyTraces, event_counts, symmetric_trace
from .trace import DEFAULT_MAX_UNROLL, trace_device

__all__ = ["DEFAULT_BUDGET", "Problem", "Report", "check_module", "resolve_devices"]

# Seconds the check may take before it says "cannot prove within the budget" (--check-budget).
DEFAULT_BUDGET = 10.0


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
    if num_devices is not None:
        num_devices = check_count(num_devices, "num_devices")
    # The runtime's rule: the header's counts, the rest from the device total.
    return DeviceAssignment.default(*run_device_counts(module, num_devices))




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
                                  deadline=deadline, choose=Choices())
        except OverBudget:
            one = None  # the per-device path says where the budget ran out
        if one is not None:
            report = Report(module.name, da, [], [one], time.perf_counter() - t0,
                            strict=strict)
            report.events = event_counts(facts, one)
            report.traces = LazyTraces(da.devices, lambda d: trace_device(
                facts, schedule, d, max_unroll=max_unroll, choose=Choices(), induction=True))
            report.symmetric = True
            return report
        try:
            classes = by_classes(facts, schedule, max_unroll=max_unroll, deadline=deadline,
                                 choices=Choices(), max_runs=MAX_BRANCH_RUNS)
        except (OverBudget, InputError):
            classes = None  # as above; invalid input is reported as the per-device path words it
        if classes is not None:
            return _class_report(module, da, facts, schedule, classes, max_unroll, strict,
                                 time.perf_counter() - t0)
    choices = Choices()
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
            choices = Choices()
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
                severity="error" if strict else "warning",
                cause=BRANCH_RUNS)], None))
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
        facts, schedule, d, max_unroll=max_unroll, choose=Choices(), induction=True))
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




def _over_budget(e: OverBudget, budget: float, strict: bool) -> Problem:
    return Problem(
        "unproven", f"cannot prove within the budget of {budget:g} s: the check was "
        f"{e.doing} (--check-budget raises it)", [] if e.device is None else [e.device], [],
        severity="error" if strict else "warning", budget=True)


def _check_once(facts, schedule, da, strict, max_unroll, choices, induction=False,
                deadline=None):
    """Trace every device under `choices`, then match and simulate: (traces, problems);
    (None, None) when devices traced loops by induction differently (then unroll).

    Where a trace assumed a loop's known_trip_count, what it found holds only if the
    assumption does: the devices are traced again with such loops stopping the trace (as
    data-dependent loops do), and only the problems found then are certain; the others
    become warnings "if the assumed trip counts hold"."""
    traces, problems = _trace_and_match(facts, schedule, da, strict, max_unroll, choices,
                                        induction, deadline, assume=True)
    if traces is None or not any(tr.assumptions for tr in traces):
        return traces, problems
    _, sure = _trace_and_match(facts, schedule, da, strict, max_unroll, choices, induction,
                               deadline, assume=False)
    certain = {(p.kind, p.message) for p in sure or () if p.kind != "unproven"}
    for p in problems:
        if p.kind != "unproven" and (p.kind, p.message) not in certain:
            p.detail.append("(found assuming the known_trip_counts above; if they do not "
                            "hold, the data decides)")
            if not strict:
                p.severity = "warning"
    return traces, problems


def _trace_and_match(facts, schedule, da, strict, max_unroll, choices, induction, deadline,
                     assume):
    traces = []
    for d in da.devices:
        # Loops check the deadline per iteration; straight-line code per device.
        if deadline is not None and time.perf_counter() > deadline:
            raise OverBudget(d, f"the start of its trace ({len(traces)} of "
                             f"{len(da.devices)} devices traced)")
        traces.append(trace_device(facts, schedule, d, max_unroll=max_unroll, choose=choices,
                                   induction=induction, deadline=deadline, assume=assume))
    if induction and len({tuple(tr.shortened) for tr in traces}) > 1 and not _apart(traces):
        return None, None
    problems: list[Problem] = []
    drift = out_of_step(traces) if induction else []
    if drift:
        # The traced iterations do not stand for later ones (steady.py): a loop of known
        # trip count is unrolled, or judged by its totals when that is long; one whose count
        # the data decides (this run: that count or more) cannot be followed.
        known = [d for d in drift if (id(d[0]), d[1]) not in _uniform(traces)]
        if known:
            refused = _by_totals(traces, known)
            return (None, None) if refused is None else (traces, refused)
        problems += _unfollowed(traces, drift, strict)
        # The later counts stay unproven; this count (the traced iterations are the run's
        # when it has as many) is checked as any other: a problem before the loop or in
        # it is the run's.
    for tr in traces:
        if tr.unproven is not None:
            instr, reason, ctx, cause = tr.unproven
            problems.append(Problem(
                "unproven", f"cannot prove device {tr.device} past "
                f"{instr.opcode} {where(instr, ctx)}: {reason}",
                [tr.device], [event_ref(None, instr, ctx)],
                severity="error" if strict else "warning", cause=cause))
        for instr, ctx, count, why in tr.assumptions:
            problems.append(Problem(
                "unproven", f"assuming {where(instr, ctx)} runs {count} "
                f"time{'s' if count != 1 else ''} on device {tr.device} (its "
                f"known_trip_count): the check cannot fold its condition ({why}), and the "
                "runtime follows the condition",
                [tr.device], [event_ref(None, instr, ctx)],
                severity="error" if strict else "warning", assumption=True))
    _merge_unproven(problems)
    match_collectives(traces, problems, deadline)
    match_channels(traces, problems, deadline)
    late = entered_apart(traces) if induction and not drift else []
    if late:
        # In step, but entered too many iterations apart (steady.py): as above, a known
        # trip count is unrolled, a count from data cannot be followed from 3p on.
        if any((id(instr), ctx) not in _uniform(traces) for instr, ctx, _ in late):
            return None, None
        problems += _unfollowed(traces, late, strict)
    stuck = simulate(traces, deadline)
    report_cycles(stuck, traces, problems)
    return traces, problems


def _by_totals(traces, known) -> list[Problem] | None:
    """The refusal of a run whose devices fall out of step in a loop of known trip count
    (`known`: out_of_step's) when it is long and a member issues more on a link over the
    run than its partner (steady.unequal_totals); None: unroll."""
    apart = None if _short(traces) else unequal_totals(traces)
    if apart is None:
        return None
    devices, why, ev = apart
    instr, ctx, how = known[0]
    return [may_pass(Problem(
        "unmatched", f"the devices fall out of step in {where(instr, ctx)} ({how}), "
        f"and {why}", devices, [event_ref(ev)]), leaves_early(ev.sig))]


# A loop whose devices fall out of step is unrolled when it has at most this many more
# iterations to run; a longer one is judged by its totals (steady.unequal_totals).
DRIFT_UNROLL = 1000


def _uniform(traces) -> set[tuple]:
    """(while's id, ctx) of the loops whose trip count the data decides (a uniform key)."""
    return {(loop, ctx) for tr in traces for loop, ctx, record in tr.shortened
            if record[0] == "uniform"}


def _unfollowed(traces, loops, strict: bool) -> list[Problem]:
    """'cannot prove' for each (while, ctx, why) whose trip count the data decides and
    whose traced iterations do not stand for the later ones (steady.py)."""
    problems = []
    for instr, ctx, why in loops:
        windows = [(tr.device, w[4]) for tr in traces for w in tr.windows
                   if w[0] is instr and w[1] == ctx]
        problems.append(Problem(
            "unproven", f"cannot prove {where(instr, ctx)} when it runs "
            f"{windows[0][1] * INDUCTION_ITERATIONS} or more iterations: the devices fall "
            f"out of step in it ({why}), so later iterations pair collectives or "
            "transfers of different iterations, which the check does not follow when "
            "the data decides the trip count", sorted({d for d, _ in windows}),
            [event_ref(None, instr, ctx)], severity="error" if strict else "warning",
            cause=DRIFT))
    return problems


def _short(traces) -> bool:
    return all(w[5] is None or w[5] * w[4] <= DRIFT_UNROLL for tr in traces for w in tr.windows)


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
                                          f"devices {device_list(p.devices)} ", 1)
    problems[:] = out

