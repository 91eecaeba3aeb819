"""Per-device communication traces: what one device does that another device must answer.

`trace_device` walks the module's schedule as one device would run it: while loops are
unrolled (trip count from `known_trip_count` in backend_config, else by folding the condition
over the loop state), conditionals follow the branch their folded index picks, calls, fusions
and async wrappers are entered.  The result is the ordered list of `Event`s the device issues:

sync, start, done, send, recv, send-done and recv-done (events.py says what each waits for).

Ends of a channel that no source-target pair names complete at once and produce no event
(docs/reference/collective-semantics.md 21a).  A loop or branch whose control cannot be
folded, and that contains communication, stops the trace there: the device's later
behaviour is unproven.

Rules are registered by opcode in TRACE_RULES; only instructions that communicate are visited.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from xladist.hlo.async_groups import group_start, transfer_group
from xladist.hlo.ir import Computation, Instruction

from ..schedule import communicates, computation_communicates
from .budget import OverBudget
from .events import DeviceTrace, Event, Handle, where
from .report import DATA, LONG_LOOP, UNMODELLED, UNPAIRED_DONE
from .facts import ModuleFacts, known_trip_count
from .fold import SAME_ON_EVERY_MEMBER, Folder, Frame, Unknown, pick_branch
from .induction import (
    INDUCTION_ITERATIONS,
    body_period,
    closed_form_trip_count,
    control_slice,
    kept,
    most_trips,
    slice_key,
)

__all__ = [
    "DEFAULT_MAX_UNROLL",
    "TRACE_RULES",
    "UNROLL_BELOW",
    "trace_device",
]

DEFAULT_MAX_UNROLL = 100_000
# Loops of at most this many iterations are traced in full even when induction applies.
UNROLL_BELOW = 16


class _Unproven(Exception):
    """A trace stops: `reason` for its line of the report, `cause` (report.DATA, ...) for
    the report's first line."""

    def __init__(self, instr: Instruction, reason: str, ctx: tuple[str, ...],
                 cause: str = DATA):
        super().__init__(reason)
        self.instr, self.reason, self.ctx, self.cause = instr, reason, ctx, cause


TraceRule = Callable[["_Tracer", Instruction, Frame, tuple], None]
TRACE_RULES: dict[str, TraceRule] = {}


def _rule(*opcodes: str):
    def wrap(fn):
        for op in opcodes:
            TRACE_RULES[op] = fn
        return fn
    return wrap


def _needs_values(comp: Computation, seen=None) -> bool:
    """Whether tracing `comp` may fold values: it holds a communicating while/conditional."""
    seen = set() if seen is None else seen
    if comp in seen:
        return False
    seen.add(comp)
    for i in comp.instructions:
        if not communicates(i):
            continue
        if i.opcode in ("while", "conditional"):
            return True
        if any(_needs_values(c, seen) for c in i.called_computations()):
            return True
    return False



def _is_collective(instr: Instruction) -> bool:
    return instr.family in ("collective", "collective_async", "p2p")


def _unmodelled(instr: Instruction) -> str:
    """Why the check stops at a communicating instruction it has no rule for: a collective
    of its own (collective-reduce, whose semantics XLA has not published) or an op whose
    called computations communicate."""
    if _is_collective(instr):
        return f"{instr.opcode} is a collective the check does not model"
    names = ", ".join(c.name for c in instr.called_computations())
    return f"{instr.opcode} runs {names}, which communicates, and the check cannot tell how often"

class _Tracer:
    def __init__(self, facts: ModuleFacts, schedule, trace: DeviceTrace, max_unroll: int,
                 choose=None, induction: bool = True, deadline: float | None = None,
                 symbolic: bool = False, ids=None):
        self.facts = facts
        self.schedule = schedule
        self.trace = trace
        self.device = trace.device
        self.folder = Folder(None if symbolic else trace.replica,
                             None if symbolic else trace.partition,
                             self.uniform_key if choose is not None else None, ids)
        # classes.py: the class of devices this trace stands for; it raises Split where the
        # members would take different paths (a decision, a group or channel end).
        self.ids = ids
        self.max_unroll = max_unroll
        # (key, number of branches) -> the branch every device with that key takes, for a
        # conditional whose index is unknown but keyed (check.py enumerates the choices).
        self.choose = choose
        # symmetry.py: a symbolic trace records every communicating instruction it reaches
        # (trace.steps), whether or not the traced device takes part in it.
        self.steps = [] if symbolic and ids is None else None
        trace.steps = self.steps
        # Collectives (sync and start events) issued per device group so far: the position
        # matching.py pairs each by, which names an all-reduce's run in uniform_key.
        self.issued: dict[tuple[int, ...], int] = {}
        self.looping = 0  # depth of loops traced by induction around the current event
        self.induction = induction
        self.deadline = deadline
        self.assume = True   # take known_trip_count where a condition cannot be folded
        # (id of the caller's frame, async-start) -> [(send/recv, Handle)] of a send/recv
        # group started there and not yet done.
        self.groups: dict = {}

    def tick(self, instr: Instruction, ctx) -> None:
        """Stop with OverBudget once the check's deadline has passed (called per iteration)."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise OverBudget(self.device, where(instr, ctx))

    def uniform_key(self, instr: Instruction, issued: bool = False):
        """All members of a synchronous all-reduce's (or all-gather's) group get the same
        result: its key is this device's group and its position among the collectives the
        device issues on it (`issued`: it was just issued; else it is still ahead).  matching.py
        pairs the k-th collective of every member of a group (or reports a mismatch), so
        equal keys hold one value -- the instruction and its run count would not: members
        reaching one all-reduce as different collectives of the group (a branch issued
        another one before it on some) pair it with different partners."""
        member, _ = self.facts.collective(instr)
        group = member.get(self.device)
        if group is None:
            return None
        if self.ids is not None and not self.ids.same_group(member):
            return None  # each group may see another value: control on it is unproven here
        return ("all-reduce" if issued else "all-reduce ahead", group,
                self.issued.get(group, 0))

    def step(self, kind: str, instr: Instruction, link: int | None = None) -> int | None:
        """Record a reached instruction in a symbolic trace; its index there."""
        if self.steps is None:
            return None
        self.steps.append((kind, instr, link))
        return len(self.steps) - 1

    def handle(self, instr: Instruction, frame: Frame, ctx, op: str) -> Handle:
        """The Handle a done's operand evaluates to (through tuples, calls and loop state,
        as the runtime's handle travels); a done whose start cannot be told is unproven."""
        h = self.folder.eval(instr.operands[0], frame) if instr.operands else None
        if not isinstance(h, Handle) or h.op != op:
            raise _Unproven(instr, f"the check cannot tell which {op} it completes (its "
                            "operand is not the value of one)", ctx, UNPAIRED_DONE)
        return h

    def emit(self, kind: str, instr: Instruction, ctx) -> Event:
        ev = Event(kind, instr, self.device, ctx)
        ev.index = len(self.trace.events)
        ev.looped = self.looping > 0
        self.trace.events.append(ev)
        return ev

    def emit_collective(self, kind: str, instr: Instruction, ctx, group, sig) -> Event:
        """A sync or start event on `group`: matching.py's k-th collective of the group."""
        ev = self.emit(kind, instr, ctx)
        ev.sig, ev.group = sig, group
        self.issued[group] = self.issued.get(group, 0) + 1
        return ev

    def walk(self, comp: Computation, frame: Frame, ctx: tuple) -> None:
        for instr in self.schedule[comp]:
            if not communicates(instr):
                continue
            rule = TRACE_RULES.get(instr.opcode)
            if rule is None:
                raise _Unproven(instr, _unmodelled(instr), ctx,
                                UNMODELLED if _is_collective(instr) else DATA)
            rule(self, instr, frame, ctx)

    def lazy_operands(self, instr: Instruction, frame: Frame, operands=None) -> list:
        folder = self.folder
        return [lambda op=op: folder.eval(op, frame)
                for op in (instr.operands if operands is None else operands)]


@_rule("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
       "collective-broadcast", "collective-permute")
def _sync(t: _Tracer, instr, frame, ctx, op=None):
    member, sig = t.facts.collective(instr, op)
    if t.ids is not None:
        t.ids.present(member)
    t.step("sync", instr)
    group = member.get(t.device)
    if group is None:
        return  # collective-broadcast: a device in no group gets zeros at once (C.15)
    t.emit_collective("sync", instr, ctx, group, sig)
    if instr.opcode in SAME_ON_EVERY_MEMBER and t.folder.uniform_key is not None:
        # Its value is keyed by this run, now: folded later (a branch on the result of a
        # call that ran it, after a second call ran it again) it is still this run's.
        frame.memo[instr] = Unknown(instr, f"{instr.opcode} is computed from data at run time",
                                    t.uniform_key(instr, issued=True))


@_rule("all-reduce-start", "all-gather-start", "collective-permute-start")
def _start(t: _Tracer, instr, frame, ctx):
    member, sig = t.facts.collective(instr)
    if t.ids is not None:
        t.ids.present(member)
    step = t.step("start", instr)
    group = member.get(t.device)
    ev = None
    if group is not None:
        ev = t.emit_collective("start", instr, ctx, group, sig)
    frame.memo[instr] = Handle("start", ev, step)


@_rule("all-reduce-done", "all-gather-done", "collective-permute-done")
def _done(t: _Tracer, instr, frame, ctx):
    h = t.handle(instr, frame, ctx, "start")
    t.step("done", instr, h.step)
    if h.event is None:
        return
    ev = t.emit("done", instr, ctx)
    ev.sig, ev.group, ev.link = h.event.sig, h.event.group, h.event


@_rule("async-start")
def _async_start(t: _Tracer, instr, frame, ctx):
    """Both backends run a generic async-start's wrapped computation at the start
    (interpreter/control.py, compiler/control.py AsyncStartThunk), so a wrapped collective
    blocks there, as a synchronous one; anything else that communicates runs as if called
    here.  (Sound for a runtime that did overlap it too: blocking earlier only delays.)
    An async group of sends and recvs (xladist/hlo/async_groups.py) issues them all here;
    its async-done completes them."""
    wrapped = instr.attrs["calls"]
    root = wrapped.root
    if root is not None and root.family == "collective" and all(
            i is root or i.opcode == "parameter" for i in wrapped.instructions):
        _sync(t, instr, frame, ctx, op=root)
        return
    group = transfer_group(instr)
    inner = Frame(wrapped, t.lazy_operands(instr, frame))
    t.walk(wrapped, inner, ctx)
    if group:   # host transfers wait for no device: not walked, nothing to wait for
        t.groups[(id(frame), instr)] = [(op, inner.memo[op]) for _, op in group
                                        if op in inner.memo]


@_rule("async-update")
def _async_update(t: _Tracer, instr, frame, ctx):
    return None   # the work happened at the async-start


@_rule("async-done")
def _async_done(t: _Tracer, instr, frame, ctx):
    """A send/recv group's done waits for each of its transfers, as a send-done / recv-done
    would (in the wrapped root's order: every transfer was issued at the start, so the order
    of the waits does not change whether they all complete)."""
    start = group_start(instr)
    for op, h in t.groups.pop((id(frame), start), ()):
        _finish(t, instr, h, op.opcode + "-done", ctx)


@_rule("send", "recv")
def _issue(t: _Tracer, instr, frame, ctx):
    to_target, to_source = t.facts.peers(instr)
    is_send = instr.opcode == "send"
    if t.ids is not None:
        t.ids.present(to_target if is_send else to_source)
    step = t.step(instr.opcode, instr)
    peer = (to_target if is_send else to_source).get(t.device)
    ev = None
    if peer is not None:   # else: an end no pair names completes at once (21a)
        ev = t.emit(instr.opcode, instr, ctx)
        ev.channel = instr.attrs.get("channel_id")
        ev.stream = t.facts.streams.key(instr)
        ev.peer = peer
        data = instr.operands[0].shape if is_send else instr.shape.subshape((0,))
        ev.shape = data.to_text(layout=False)
    frame.memo[instr] = Handle(instr.opcode, ev, step)


@_rule("send-done", "recv-done")
def _complete(t: _Tracer, instr, frame, ctx):
    _finish(t, instr, t.handle(instr, frame, ctx, instr.opcode.removesuffix("-done")),
            instr.opcode, ctx)


def _finish(t: _Tracer, instr, h: Handle, kind: str, ctx):
    """The `kind` (send-done / recv-done) of the transfer `h`, reached at `instr`."""
    t.step(kind, instr, h.step)
    issued = h.event
    if issued is None:
        return
    ev = t.emit(kind, instr, ctx)
    ev.channel, ev.stream, ev.peer, ev.link, ev.shape = (issued.channel, issued.stream,
                                                         issued.peer, issued, issued.shape)


@_rule("call", "fusion")
def _call(t: _Tracer, instr, frame, ctx):
    comp = instr.attrs.get("to_apply") or instr.attrs.get("calls")
    inner = frame.walked[instr] = Frame(comp, t.lazy_operands(instr, frame))
    t.walk(comp, inner, ctx)


@_rule("conditional")
def _conditional(t: _Tracer, instr, frame, ctx):
    index = t.folder.eval(instr.operands[0], frame)
    if t.ids is not None:
        t.ids.settle(index)
    if isinstance(index, Unknown):
        if index.key is None or t.choose is None:
            raise _Unproven(instr, "its branch contains collectives or channels and is chosen "
                            f"by data: the index depends on {index.describe()}", ctx)
        # The same on every device with this key (it comes from all-reduce results): each
        # branch is tried, in a separate run of the whole check.
        branches = instr.attrs.get("branch_computations") or [
            instr.attrs["true_computation"], instr.attrs["false_computation"]]
        at = where(instr, ctx)
        if index.origin is not None:
            note = f"index from {index.origin.name}"
            at = at[:-1] + f", {note})" if at.endswith(")") else f"{at} ({note})"
        k = t.choose(index.key, len(branches), at, t.device)
        comp = branches[k]
    else:
        comp, k = pick_branch(instr, index)
    args = t.lazy_operands(instr, frame, [instr.operands[1 + k]])
    inner = frame.walked[instr] = Frame(comp, args)
    t.walk(comp, inner, ctx + (f"branch {k} of {instr.name}",))


def _plan_by_induction(t: _Tracer, instr, frame, ctx):
    """(iterations to trace, what to record in trace.shortened or None, period) for a loop
    whose events repeat with a period (induction.py); None: unroll it in full.

    The trip count comes from the condition, which the runtime follows: its closed form, or
    a uniform key (all-reduce results).  known_trip_count is not trusted here: where the
    condition gives no count, the loop is unrolled and its condition folded per iteration."""
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    state = t.lazy_operands(instr, frame)[0]()
    # A condition that communicates (`while psum(x) < 6`) issues its events once per
    # iteration and once more at the end: they must not depend on the iteration either.
    reduced = [] if computation_communicates(cond) else None
    if reduced is not None and _needs_values(cond):
        return None
    # All-reduces the body computes the slice from: only in a body that decides nothing,
    # where every member of a group issues the same collectives on it in the same order
    # every iteration, so each one's run is the same instance on every member (a branch
    # before it could pair it with another member's other collective of the group).
    carried = None if _needs_values(body) else []
    indices = control_slice(cond, body, reduced, carried)
    if indices is None:
        return None
    if t.ids is not None and isinstance(state, tuple):
        t.ids.settle(*(state[j] for j in indices if j < len(state)))
    n = closed_form_trip_count(cond, body, state)
    # The period must hold over every iteration the loop may run (its counters must not
    # wrap around on the way): n, or as many as the condition allows when the data decides.
    p = body_period(body, state, _needs_values,
                    n if n is not None else most_trips(cond, body, state))
    if p is None:
        return None
    if n is None:
        key = slice_key(state, indices)
        if reduced or carried:
            # The condition's own all-reduces, and the body's the slice carries: each
            # member of a group gets the same result in every evaluation, whatever it
            # contributes; their groups (and how often this device ran collectives on
            # them: which loop instance) join the key, so devices in different groups
            # choose apart (check.py then proves the loop only if nothing inside it links
            # them).
            keys = tuple(t.uniform_key(ar) for ar in (reduced or []) + (carried or []))
            key = None if key is None or None in keys else key + keys
        go = t.folder.eval(cond.root, Frame(cond, [state]))
        if carried and isinstance(go, np.ndarray) and go.shape == ():
            # The first evaluation folds (the carried value starts as a constant): no
            # iteration if false; else at least one, the rest decided by the all-reduces.
            if not bool(go):
                return 0, None, p
        elif not isinstance(go, Unknown) or go.key is None:
            return None
        if key is None or t.choose is None:
            return None
        # The slice holds all-reduce results and equal constants, and computes only from
        # itself and the condition's all-reduces: every device with this key runs the same
        # number of iterations, whatever it is.  Enumerated like a data-chosen branch: each
        # count below 3p exactly, and the counts from 3p on by their remainder modulo p.
        origin = go.origin if isinstance(go, Unknown) else carried[0]
        at = f"{where(instr, ctx)} (trip count from {origin.name})" if origin else \
            where(instr, ctx)
        options = (INDUCTION_ITERATIONS + 1) * p
        least = 0 if isinstance(go, Unknown) else 1
        k = least + t.choose(("trip", id(instr), key), options - least, at, t.device)
        return k, ("uniform", key, k, p), p
    reps = INDUCTION_ITERATIONS * p
    if n <= max(UNROLL_BELOW, reps):
        return n, None, p  # cheap to trace in full: exact iteration numbers in reports
    return reps + (n - reps) % p, (n, p), p


def _label(instr, k: int, trips: int, record, p: int, what: str = "iteration",
           shown: int | None = None) -> str:
    """Iteration k (1-based) of a loop traced by induction: from iteration 2p + 1 on, one
    traced iteration stands for itself and every p-th one after it.  `what`, `shown`: the
    condition's evaluation `shown` that follows iteration k, which stands for as many."""
    shown = k if shown is None else shown
    if record is None or k <= (INDUCTION_ITERATIONS - 1) * p or (
            record[0] == "uniform" and record[2] < INDUCTION_ITERATIONS * p):
        return f"{what} {shown} of {instr.name}"
    if p == 1:
        return f"from {what} {shown} of {instr.name}"
    return f"{what} {shown} of {instr.name} and every {p}th after it"


@_rule("while")
def _while(t: _Tracer, instr, frame, ctx):
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    folder = t.folder
    cond_comm = computation_communicates(cond)
    plan = _plan_by_induction(t, instr, frame, ctx) if t.induction else None
    if plan is not None:
        trips, record, p = plan
        if record is not None:
            t.trace.shortened.append((id(instr), ctx, record))
            t.looping += 1
        state = t.lazy_operands(instr, frame)[0]
        # Where iteration k's events begin (its condition evaluation first) is marks[k - 1]:
        # the last p iterations traced stand for every later one (steady.py checks them).
        marks = [len(t.trace.events)]
        try:
            # A communicating condition runs before every iteration and once more after
            # the last (its false evaluation): evaluation k + 1 follows iteration k.
            if cond_comm:
                t.walk(cond, Frame(cond, [state]), ctx + (f"condition 1 of {instr.name}",))
            for k in range(trips):
                label = _label(instr, k + 1, trips, record, p)
                t.tick(instr, ctx + (label,))
                bframe = Frame(body, [state])
                t.walk(body, bframe, ctx + (label,))
                marks.append(len(t.trace.events))

                def state(bf=bframe):  # forced only if the body asks for the loop state
                    return folder.eval(body.root, bf)
                if cond_comm:
                    t.walk(cond, Frame(cond, [state]), ctx + (_label(
                        instr, k + 1, trips, record, p, "condition", k + 2),))
        finally:
            if record is not None:
                t.looping -= 1
        if record is not None and (record[0] != "uniform" or trips >= INDUCTION_ITERATIONS * p):
            # How many more times the window runs than traced (None: the data decides).
            extra = None if record[0] == "uniform" else (record[0] - trips) // p
            t.trace.windows.append((instr, ctx, marks[trips - p], marks[trips], p, extra,
                                    marks[0]))
        _loop_value(frame, instr, state, t.lazy_operands(instr, frame)[0](),
                    exact=record is None)
        return
    # Unrolled: the condition decides, as in the runtime.  known_trip_count is taken only
    # where the condition cannot be folded, and then the verdict says it assumed it.
    known = known_trip_count(instr)
    state = init = t.lazy_operands(instr, frame)[0]()
    assumed = False
    k = 0
    while True:
        cframe = Frame(cond, [state])
        if cond_comm:
            t.walk(cond, cframe, ctx + (f"condition {k + 1} of {instr.name}",))
        if assumed:
            go = k < known
        else:
            go = folder.eval(cond.root, cframe)
            if t.ids is not None:
                t.ids.settle(go)
            if isinstance(go, Unknown):
                if known is None or not t.assume:
                    raise _Unproven(instr, "its body contains collectives or channels and its "
                                    f"trip count depends on data: {go.describe()}", ctx)
                t.trace.assumptions.append((instr, ctx, known, go.describe()))
                assumed = True
                go = k < known
        if not bool(go):
            break
        t.tick(instr, ctx + (f"iteration {k + 1} of {instr.name}",))
        if k >= t.max_unroll:
            raise _Unproven(instr, f"runs more than {t.max_unroll} iterations, the most the check "
                            "unrolls", ctx, LONG_LOOP)
        bframe = Frame(body, [state])
        t.walk(body, bframe, ctx + (f"iteration {k + 1} of {instr.name}",))
        state = folder.eval(body.root, bframe)
        k += 1
    _loop_value(frame, instr, state, init, exact=not assumed)


def _loop_value(frame: Frame, instr, state, init, exact: bool) -> None:
    """The loop's value for what follows it, so that nothing folds the loop again (up to
    fold.MAX_FOLD_ITERATIONS iterations of its body: seconds after a long loop).  `exact`:
    every iteration was traced with the runtime's values, and the value is the traced
    final state (the dones after a loop that carries handles find their last send or recv).
    Otherwise (a loop traced by induction or on an assumed count) never a shortened loop's
    values: its handles, the elements its body keeps (their initial values in `init`), and
    Unknown for the rest."""
    value = state() if callable(state) else state
    if not exact:
        lost = Unknown(instr, "the state after a loop the check did not run in full")
        if not isinstance(value, tuple):
            value = lost
        else:
            body = instr.attrs["body"]
            value = tuple(
                v if isinstance(v, Handle) else
                init[j] if isinstance(init, tuple) and j < len(init) and kept(body, j) else lost
                for j, v in enumerate(value))
    frame.memo[instr] = value


def trace_device(facts: ModuleFacts, schedule, device: int, *,
                 max_unroll: int = DEFAULT_MAX_UNROLL, choose=None, induction: bool = True,
                 deadline: float | None = None, symbolic: bool = False,
                 ids=None, assume: bool = True) -> DeviceTrace:
    """The ordered communication events of `device` running the module's entry computation.

    `choose(key, n, where, device)` picks the branch of a conditional whose index is unknown but the
    same on every device with that key; without it such a conditional stops the trace.
    `symbolic`: replica-id and partition-id fold to unknowns, so a trace that completes is
    every device's instruction sequence (symmetry.py); groups and peers are `device`'s.
    `ids` (with symbolic): the class of devices `device` stands for (classes.py).
    `assume`: a loop whose condition cannot be folded runs its known_trip_count (recorded in
    trace.assumptions); else it stops the trace as any data-dependent loop does."""
    replica, partition = facts.da.logical_id(device)
    trace = DeviceTrace(device, replica, partition)
    tracer = _Tracer(facts, schedule, trace, max_unroll, choose, induction, deadline, symbolic,
                     ids)
    tracer.assume = assume
    entry = facts.module.entry
    params = [Unknown(p, "an entry parameter (data)") for p in entry.parameters]
    try:
        tracer.walk(entry, Frame(entry, params), ())
    except _Unproven as u:
        trace.unproven = (u.instr, u.reason, u.ctx, u.cause)
    return trace
