"""What the deadlock check tells a person (text) and a program (JSON).

A Report holds Problems; each names its kind (deadlock | mismatch | unmatched | unproven),
the devices involved, the instructions with line numbers and the context (loop iteration,
branch) in which each device reached them, and detail lines:

  deadlock   the cycle, one line per device:
               device 1 waits at recv-done.3 (line 42) for device 2 to issue its send ...,
               which waits at ... for device 1: none of them can proceed.
  mismatch   the two devices' instructions side by side, the differing field marked
  unmatched  the devices that reach a collective or channel end and those that never do
  unproven   where control depends on data around communication, or the check assumed a
             loop's known_trip_count (warning unless strict)

A problem that a run under MPI may still get through -- because xladist's MPI runtime lets a
member of some collectives leave before the others arrive, which the op semantics do not
promise -- says so (`Problem.relies_on`, a detail line naming the rule).

`Report.verdict` is the outcome in one word: "proven", "assuming" (proven if the loops'
known_trip_counts hold), "not proven" (parts depend on data, or the budget ran out) or
"refused" (problems found); `Report.summary()` is the same as data for a job spec.
"""

from __future__ import annotations

import json

__all__ = ["REFERENCE", "Problem", "Report", "device_list", "event_ref", "group_text",
           "leaves_early", "may_pass", "mismatch_problem", "side_by_side"]


def device_list(devices) -> str:
    return ", ".join(str(d) for d in devices)


def group_text(group) -> str:
    return "{" + ",".join(map(str, group)) + "}"


# Where problems' messages point for the op semantics they rest on.
REFERENCE = "docs/reference/collective-semantics.md"


def leaves_early(sig) -> str | None:
    """Why a run under xladist's MPI runtime may get past this collective without every member
    having arrived -- behaviour the op semantics do not promise (REFERENCE G.24-25: every
    member meets every collective of its group) -- or None."""
    if sig is None:
        return None
    kind = sig.kind.removesuffix("-start")
    if kind == "collective-permute":
        return ("the MPI runtime moves a collective-permute only between each source and its "
                "target, so a member with no pair, or whose partner is there, may leave before "
                "the rest of the group arrives; XLA's rendezvous waits for every participant "
                f"({REFERENCE} G.24-25)")
    if kind == "collective-broadcast":
        return ("the root of a collective-broadcast may leave MPI_Bcast before the other "
                "members arrive (an eager send); the op semantics have every member meet "
                f"({REFERENCE} G.24-25)")
    if sig.shapes and all("0" in s.strip("[]").split(",") for s in sig.shapes):
        return ("a collective of zero elements moves nothing, so the MPI runtime passes it at "
                f"once; the op semantics still have every member meet ({REFERENCE} G.24)")
    return None


def may_pass(problem, rule: str | None):
    """Attach `rule` (leaves_early) to a problem: a fair alarm, named."""
    if rule is not None:
        problem.relies_on = rule
        problem.detail.append(f"(a run under MPI may still get through: {rule})")
    return problem


def event_ref(ev, instr=None, ctx=()) -> dict:
    """The JSON-able description of where a device is: instruction, line, computation, context."""
    if ev is not None:
        instr, ctx = ev.instr, ev.ctx
    ref = {"name": instr.name, "opcode": instr.opcode, "line": instr.line,
           "computation": instr.parent.name if instr.parent is not None else None,
           "context": list(ctx)}
    if ev is not None:
        ref["device"] = ev.device
    return ref


# What a report's first line says stopped an unproven trace (Problem.cause).
DATA = "control depends on data"
UNMODELLED = "a collective the check does not model"
LONG_LOOP = "a loop longer than the check unrolls"
UNPAIRED_DONE = "an async done the check cannot pair with its start"
BRANCH_RUNS = "too many combinations of branches"
DRIFT = "devices fall out of step in a loop"


class Problem:
    """One reason the module may hang or desynchronize."""

    KINDS = ("deadlock", "mismatch", "unmatched", "unproven")

    def __init__(self, kind: str, message: str, devices, instructions, *, detail=None,
                 severity: str = "error", field: str | None = None, budget: bool = False,
                 assumption: bool = False, relies_on: str | None = None,
                 cause: str | None = None):
        assert kind in self.KINDS, kind
        self.kind = kind
        self.message = message
        self.devices = list(devices)
        self.instructions = list(instructions)
        self.detail = list(detail or [])
        self.severity = severity
        self.field = field  # mismatch: the first field the devices disagree on
        self.budget = budget  # unproven because the check's time budget ran out
        self.assumption = assumption  # unproven: a known_trip_count the check assumed
        # What a run under MPI might get through by although the op semantics do not
        # promise it (a collective member leaving early): a fair alarm, named.
        self.relies_on = relies_on
        # unproven: what the report's first line says stopped it (trace.py's DATA, ...)
        self.cause = cause

    def to_text(self) -> str:
        label = self.kind if self.severity == "error" else f"{self.kind} (warning)"
        lines = [f"{label}: {self.message}"]
        lines.extend("  " + d for d in self.detail)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "severity": self.severity, "message": self.message,
             "devices": self.devices, "instructions": self.instructions, "detail": self.detail}
        if self.field is not None:
            d["field"] = self.field
        if self.assumption:
            d["assumption"] = True
        if self.relies_on is not None:
            d["relies_on"] = self.relies_on
        return d

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<Problem {self.kind} devices={self.devices}: {self.message}>"


def side_by_side(heads, rows, differs=None) -> list[str]:
    """Rows of (field, left, right) as aligned columns; the differing field is marked."""
    w0 = max(len("field"), *(len(r[0]) for r in rows))
    w1 = max(len(heads[0]), *(len(str(r[1])) for r in rows))
    out = [f"{'field':<{w0}}  {heads[0]:<{w1}}  {heads[1]}"]
    for name, a, b in rows:
        mark = "   <-- differs" if name == differs else ""
        out.append(f"{name:<{w0}}  {a!s:<{w1}}  {b}{mark}")
    return out


def mismatch_problem(ref, ev, field: str, k: int, group) -> Problem:
    """Two devices issue different collectives as their k-th one on `group`."""
    rows = [("instruction", ref.where(), ev.where())]
    for f in ref.sig.FIELDS:
        a, b = ref.sig.show(f), ev.sig.show(f)
        if f == field or a != "-" or b != "-":
            rows.append((f, a, b))
    g = "{" + ",".join(map(str, group)) + "}"
    nth = k + 1
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(nth if nth < 20 else nth % 10, "th")
    msg = (f"devices {ref.device} and {ev.device} disagree on their {nth}{suffix} collective on "
           f"group {g}: they differ in {field} ({ref.sig.show(field)} vs {ev.sig.show(field)})")
    return may_pass(
        Problem("mismatch", msg, [ref.device, ev.device], [event_ref(ref), event_ref(ev)],
                detail=side_by_side((f"device {ref.device}", f"device {ev.device}"), rows, field),
                field=field),
        "one collective issued with different kinds, shapes or reducers is undefined in XLA "
        f"({REFERENCE} 21b); under MPI the run may hang, fail or finish with meaningless "
        "numbers")


class Report:
    """The outcome of `check_module`: ok, problems, to_text(), to_json(), exit_code."""

    def __init__(self, module_name: str, da, problems, traces, seconds: float, *,
                 strict: bool = False):
        self.module_name = module_name
        self.device_assignment = da
        self.num_devices = da.replica_count * da.num_partitions
        self.problems: list[Problem] = list(problems)
        self.strict = strict
        self.seconds = seconds
        self.events = {tr.device: len(tr.events) for tr in traces}
        self.traces = traces
        self.symmetric = False  # proven by one trace for all devices (symmetry.py)
        self.classes: int | None = None  # proven by this many class traces (classes.py)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity != "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        """The CLI convention: 0 proven (warnings allowed unless strict), 1 problem found."""
        return 0 if self.ok else 1

    def of_kind(self, kind: str) -> list[Problem]:
        return [p for p in self.problems if p.kind == kind]

    def _devices_text(self) -> str:
        da = self.device_assignment
        return (f"{self.num_devices} device{'s' if self.num_devices != 1 else ''} "
                f"({da.replica_count} replica{'s' if da.replica_count != 1 else ''} x "
                f"{da.num_partitions} partition{'s' if da.num_partitions != 1 else ''})")

    @property
    def assumptions(self) -> list[str]:
        """What a proof assumed (loops' known_trip_counts the check could not verify)."""
        return [p.message for p in self.problems if p.assumption]

    @property
    def verdict(self) -> str:
        """"proven", "assuming" (proven if the assumptions hold), "not proven" or "refused"."""
        if not self.ok:
            return "refused"
        if not self.problems:
            return "proven"
        if all(p.assumption for p in self.problems):
            return "assuming"
        return "not proven"

    def summary(self) -> dict:
        """The verdict as data: {"verdict", "assumptions", "reasons"} (reasons: the
        messages of what kept it from "proven")."""
        return {"verdict": self.verdict, "assumptions": self.assumptions,
                "reasons": [p.message for p in self.problems if not p.assumption]}

    def to_text(self) -> str:
        total = sum(self.events.values())
        head = f"deadlock check of {self.module_name} on {self._devices_text()}: "
        if not self.problems:
            head += f"proven deadlock-free ({total} communication events simulated)"
            return head
        if self.verdict == "assuming":
            head += (f"deadlock-free assuming {len(self.problems)} loop trip count(s) "
                     "(known_trip_count) the check could not verify; not proven")
        elif self.ok:
            why = sorted({"the check's time budget ran out" if p.budget
                          else "a known_trip_count was assumed" if p.assumption
                          else p.cause or DATA for p in self.warnings})
            head += (f"no deadlock found, but {len(self.warnings)} part(s) could not be proven "
                     f"({'; '.join(why)})")
        else:
            head += f"{len(self.errors)} problem(s) found"
        return "\n".join([head] + [p.to_text() for p in self.problems])

    def to_dict(self) -> dict:
        da = self.device_assignment
        return {"module": self.module_name, "ok": self.ok, "strict": self.strict,
                "num_devices": self.num_devices, "replica_count": da.replica_count,
                "num_partitions": da.num_partitions, "device_assignment": da.table(),
                "events_per_device": {str(d): n for d, n in self.events.items()},
                "seconds": round(self.seconds, 6), "verdict": self.verdict,
                "problems": [p.to_dict() for p in self.problems]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"<Report {self.module_name}: ok={self.ok}, {len(self.problems)} problem(s)>"
