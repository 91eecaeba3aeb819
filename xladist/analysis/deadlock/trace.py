"""Per-device communication traces: what one device does that another device must answer.

`trace_device` walks the module's schedule as one device would run it: while loops are
unrolled (trip count from `known_trip_count` in backend_config, else by folding the condition
over the loop state), conditionals follow the branch their folded index picks, calls, fusions
and async wrappers are entered.  The result is the ordered list of `Event`s the device issues:

  sync       a synchronous collective: blocks until every member of its group arrives
  start      an async collective's start: issues it, never blocks
  done       an async collective's done: blocks until every member has issued the start
  send/recv  issue a transfer on a channel to/from one peer, never block
  send-done  blocks until the peer has issued the matching recv (channels are unbuffered)
  recv-done  blocks until the peer has issued the matching send

Ends of a channel that no source-target pair names complete at once and produce no event
(docs/reference/collective-semantics.md 21a).  A loop or branch whose control cannot be folded, and that
contains communication, stops the trace there: the device's later behaviour is unproven.

Rules are registered by opcode in TRACE_RULES; only instructions that communicate are visited.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable

from xladist.hlo.collective_groups import (
    DeviceAssignment,
    GroupError,
    collective_permute_pairs,
    instruction_device_groups,
)
from xladist.hlo.collective_groups import PAIRS_ATTR, required_send_recv_pairs
from xladist.errors import InputError
from xladist.hlo.ir import Computation, Instruction, Module

from ..schedule import communicates, computation_communicates
from .fold import Folder, Frame, Unknown, pick_branch
from .induction import (
    INDUCTION_ITERATIONS,
    body_period,
    closed_form_trip_count,
    control_slice,
    slice_key,
)

__all__ = [
    "PAIRS_ATTR",
    "TRACE_RULES",
    "DeviceTrace",
    "Event",
    "OverBudget",
    "ModuleFacts",
    "Signature",
    "trace_device",
    "where",
]

DEFAULT_MAX_UNROLL = 100_000
# Loops of at most this many iterations are traced in full even when induction applies.
UNROLL_BELOW = 16


def where(instr: Instruction, ctx: tuple[str, ...] = ()) -> str:
    """`name (line N, iteration 2 of while.3)` for messages."""
    parts = [f"line {instr.line}"] if instr.line else []
    parts.extend(ctx)
    return f"{instr.name} ({', '.join(parts)})" if parts else instr.name


class Signature:
    """What all members of one collective must agree on (docs/reference/collective-semantics.md G.24-25, 21b)."""

    FIELDS = ("kind", "groups", "types", "shapes", "reducer", "dimensions", "pairs")
    __slots__ = FIELDS

    def __init__(self, kind, groups, types, shapes, reducer, dimensions, pairs):
        self.kind = kind
        self.groups = groups
        self.types = types
        self.shapes = shapes
        self.reducer = reducer
        self.dimensions = dimensions
        self.pairs = pairs

    def first_difference(self, other: Signature) -> str | None:
        if self is other:
            return None
        for f in self.FIELDS:
            if getattr(self, f) != getattr(other, f):
                return f
        return None

    def show(self, field: str) -> str:
        v = getattr(self, field)
        if v is None:
            return "-"
        if field == "groups":
            return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in v) + "}"
        if field == "pairs":
            return "{" + ",".join(f"{{{s},{t}}}" for s, t in v) + "}"
        if isinstance(v, tuple):
            return ", ".join(map(str, v)) if v else "()"
        return str(v)


class Event:
    __slots__ = (
        "channel",
        "ctx",
        "device",
        "group",
        "index",
        "inst",
        "instr",
        "issued",
        "kind",
        "link",
        "looped",
        "partner",
        "peer",
        "shape",
        "sig",
    )

    def __init__(self, kind: str, instr: Instruction, device: int, ctx: tuple[str, ...]):
        self.kind = kind
        self.instr = instr
        self.device = device
        self.ctx = ctx
        self.sig: Signature | None = None
        self.group: tuple[int, ...] = ()
        self.channel = None
        self.peer: int | None = None
        self.shape: str | None = None
        self.link: Event | None = None      # done -> its start / send / recv
        self.inst = None                    # the matched collective instance
        self.partner: Event | None = None   # send <-> matched recv
        self.issued = False
        self.index = 0                      # position in the device's trace
        self.looped = False                 # inside a loop traced by induction (check.py)

    def where(self) -> str:
        return where(self.instr, self.ctx)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.instr.name} on device {self.device}>"


class DeviceTrace:
    def __init__(self, device: int, replica: int, partition: int):
        self.device = device
        self.replica = replica
        self.partition = partition
        self.events: list[Event] = []
        # (instruction, reason, ctx) where the trace stopped because control depends on data.
        self.unproven: tuple[Instruction, str, tuple[str, ...]] | None = None
        # Loops traced by induction (induction.py): (while, ctx, trip count or trip key).
        self.shortened: list[tuple] = []


def _reducer(comp: Computation | None) -> str | None:
    """A comparable name for a reducer: the root op when it combines the two parameters."""
    if comp is None:
        return None
    root = comp.root
    if root is not None and len(root.operands) == 2 and all(
            o.opcode == "parameter" for o in root.operands):
        return f"{root.opcode} ({root.shape.to_text(layout=False)})"
    return f"computation {comp.name}"


def _leaf_shapes(instrs) -> tuple[tuple[str, ...], tuple[str, ...]]:
    types, dims = [], []
    for op in instrs:
        for _, leaf in op.shape.leaves():
            types.append(leaf.element_type.name)
            dims.append("[" + ",".join(map(str, leaf.dims)) + "]")
    return tuple(types), tuple(dims)


def _attr_key(value):
    """A dict key equal for equal group or pair attributes.  An iota form is its few numbers
    (the expansion follows from them); else the value itself, hashed in C: repr() of 16,384
    explicit groups per instruction cost more than the rest of the check."""
    iota = getattr(value, "iota", None)
    if iota is not None and getattr(value, "mesh", None) is None:
        return ("iota", iota)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


_TRIP_RE = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')

class ModuleFacts:
    """Device-independent facts, computed once per check: groups, signatures, channel peers."""

    def __init__(self, module: Module, da: DeviceAssignment):
        self.module = module
        self.da = da
        self.R, self.P = da.replica_count, da.num_partitions
        self._groups: dict[Instruction, tuple[dict[int, tuple[int, ...]], Signature]] = {}
        self._peers: dict[Instruction, tuple[dict[int, int], dict[int, int]]] = {}
        self._expanded: dict[tuple, tuple] = {}  # group/pair attributes -> their expansion

    def _bad(self, instr: Instruction, message: str) -> InputError:
        comp = instr.parent.name if instr.parent else "?"
        return InputError(f"computation {comp}, instruction {where(instr)}: {message}")

    def collective(self, instr: Instruction, op: Instruction | None = None):
        """(device -> its group, Signature) of a collective; `op` is the wrapped op if any."""
        hit = self._groups.get(instr)
        if hit is not None:
            return hit
        op = op or instr
        kind = op.opcode.removesuffix("-start")
        has_channel = op.attrs.get("channel_id") is not None
        # Instructions with the same group attributes share one expansion: at thousands of
        # devices, expanding each instruction's groups again would cost more than the check.
        a = op.attrs
        same = (kind, has_channel, a.get("use_global_device_ids"),
                _attr_key(a.get("replica_groups")), _attr_key(a.get("source_target_pairs")))
        shared = self._expanded.get(same)
        if shared is None:
            try:
                groups = instruction_device_groups(kind, op.attrs, self.da)
                pairs = None
                if kind == "collective-permute":
                    raw = op.attrs.get("source_target_pairs", ())
                    pairs = tuple(collective_permute_pairs(raw, has_channel, self.R, self.P,
                                                           self.da))
            except GroupError as e:
                raise self._bad(instr, str(e)) from None
            groups_t = tuple(tuple(g) for g in groups)
            member = {d: g for g in groups_t for d in g}
            shared = self._expanded[same] = (groups_t, member, pairs)
        groups_t, member, pairs = shared
        operands = op.operands
        types, shapes = _leaf_shapes(operands)
        sig = Signature(kind, groups_t, types, shapes, _reducer(op.attrs.get("to_apply")),
                        tuple(op.attrs["dimensions"]) if "dimensions" in op.attrs else None,
                        pairs)
        self._groups[instr] = (member, sig)
        return member, sig

    def peers(self, instr: Instruction) -> tuple[dict[int, int], dict[int, int]]:
        """(source device -> target, target device -> source) of a send/recv's channel."""
        hit = self._peers.get(instr)
        if hit is not None:
            return hit
        same = (instr.opcode, instr.frontend_attributes.get(PAIRS_ATTR))
        hit = self._expanded.get(same)
        if hit is None:
            try:
                pairs = required_send_recv_pairs(instr, self.R, self.P, self.da)
            except GroupError as e:
                raise self._bad(instr, str(e)) from None
            hit = self._expanded[same] = ({s: t for s, t in pairs}, {t: s for s, t in pairs})
        self._peers[instr] = hit
        return hit


class OverBudget(Exception):
    """The check's time budget ran out; `doing` says what the check was working on
    ("tracing device 3 at while.2 ...", "matching collectives ..."), `device` the device
    it was on, if one."""

    def __init__(self, device: int | None, where: str, doing: str | None = None):
        super().__init__(where)
        self.device, self.where = device, where
        self.doing = doing or f"tracing device {device} at {where}"


class _Unproven(Exception):
    def __init__(self, instr: Instruction, reason: str, ctx: tuple[str, ...]):
        super().__init__(reason)
        self.instr, self.reason, self.ctx = instr, reason, ctx


TraceRule = Callable[["_Tracer", Instruction, Frame, tuple], None]
TRACE_RULES: dict[str, TraceRule] = {}


def _rule(*opcodes: str):
    def wrap(fn):
        for op in opcodes:
            TRACE_RULES[op] = fn
        return fn
    return wrap


def known_trip_count(instr: Instruction) -> int | None:
    """The `known_trip_count` XLA's loop analysis stored in a while's backend_config."""
    m = _TRIP_RE.search(instr.backend_config or "")
    return int(m.group(1)) if m else None


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
        self.channels: dict[tuple, deque] = {}
        self.pending_async: dict[Instruction, Event | None] = {}
        self.runs: dict[Instruction, int] = {}  # events per instruction, for uniform_key
        self.looping = 0  # depth of loops traced by induction around the current event
        self.induction = induction
        self.deadline = deadline

    def tick(self, instr: Instruction, ctx) -> None:
        """Stop with OverBudget once the check's deadline has passed (called per iteration)."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise OverBudget(self.device, where(instr, ctx))

    def uniform_key(self, instr: Instruction):
        """All members of a synchronous all-reduce's group get the same result: its key is
        the op, this device's group and how many times this device has run the op."""
        member, _ = self.facts.collective(instr)
        group = member.get(self.device)
        if group is None:
            return None
        if self.ids is not None and not self.ids.same_group(member):
            return None  # each group may see another value: control on it is unproven here
        runs = self.runs.get(instr, 0)
        return ("all-reduce", id(instr), group, runs)

    def emit(self, kind: str, instr: Instruction, ctx) -> Event:
        ev = Event(kind, instr, self.device, ctx)
        ev.index = len(self.trace.events)
        ev.looped = self.looping > 0
        self.trace.events.append(ev)
        self.runs[instr] = self.runs.get(instr, 0) + 1
        return ev

    def walk(self, comp: Computation, frame: Frame, ctx: tuple) -> None:
        for instr in self.schedule[comp]:
            if not communicates(instr):
                continue
            rule = TRACE_RULES.get(instr.opcode)
            if rule is None:
                names = ", ".join(c.name for c in instr.called_computations())
                raise _Unproven(instr, f"{instr.opcode} runs {names}, which communicates, and the "
                                "check cannot tell how often", ctx)
            rule(self, instr, frame, ctx)

    def lazy_operands(self, instr: Instruction, frame: Frame, operands=None) -> list:
        folder = self.folder
        return [lambda op=op: folder.eval(op, frame)
                for op in (instr.operands if operands is None else operands)]


@_rule("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
       "collective-broadcast", "collective-permute")
def _sync(t: _Tracer, instr, frame, ctx):
    member, sig = t.facts.collective(instr)
    if t.ids is not None:
        t.ids.present(member)
    group = member.get(t.device)
    if group is None:
        return  # collective-broadcast: a device in no group gets zeros at once (C.15)
    ev = t.emit("sync", instr, ctx)
    ev.sig, ev.group = sig, group


@_rule("all-reduce-start", "all-gather-start", "collective-permute-start")
def _start(t: _Tracer, instr, frame, ctx, op=None):
    member, sig = t.facts.collective(instr, op)
    if t.ids is not None:
        t.ids.present(member)
    group = member.get(t.device)
    ev = None
    if group is not None:
        ev = t.emit("start", instr, ctx)
        ev.sig, ev.group = sig, group
    t.pending_async[instr] = ev


@_rule("all-reduce-done", "all-gather-done", "collective-permute-done", "async-done")
def _done(t: _Tracer, instr, frame, ctx):
    start = instr.operands[0] if instr.operands else None
    while start is not None and start.opcode == "async-update":
        start = start.operands[0] if start.operands else None
    if start is None or start not in t.pending_async:
        return  # a start we did not trace as a collective (e.g. a synchronously walked wrapper)
    ev_start = t.pending_async.pop(start)
    if ev_start is None:
        return
    ev = t.emit("done", instr, ctx)
    ev.sig, ev.group, ev.link = ev_start.sig, ev_start.group, ev_start


@_rule("async-start")
def _async_start(t: _Tracer, instr, frame, ctx):
    wrapped = instr.attrs["calls"]
    root = wrapped.root
    if root is not None and root.family == "collective" and all(
            i is root or i.opcode == "parameter" for i in wrapped.instructions):
        _start(t, instr, frame, ctx, op=root)
    else:
        # Anything else that communicates runs in the wrapper as if it were called here.
        t.walk(wrapped, Frame(wrapped, t.lazy_operands(instr, frame)), ctx)


@_rule("async-update")
def _async_update(t: _Tracer, instr, frame, ctx):
    return None


def _channel_queue(t: _Tracer, instr: Instruction, op: str) -> deque:
    return t.channels.setdefault((instr.attrs.get("channel_id"), op), deque())


@_rule("send", "recv")
def _issue(t: _Tracer, instr, frame, ctx):
    to_target, to_source = t.facts.peers(instr)
    is_send = instr.opcode == "send"
    if t.ids is not None:
        t.ids.present(to_target if is_send else to_source)
    peer = (to_target if is_send else to_source).get(t.device)
    queue = _channel_queue(t, instr, instr.opcode)
    if peer is None:
        queue.append(None)  # an end no pair names completes at once (21a)
        return
    ev = t.emit(instr.opcode, instr, ctx)
    ev.channel = instr.attrs.get("channel_id")
    ev.peer = peer
    data = instr.operands[0].shape if is_send else instr.shape.subshape((0,))
    ev.shape = data.to_text(layout=False)
    queue.append(ev)


@_rule("send-done", "recv-done")
def _complete(t: _Tracer, instr, frame, ctx):
    op = instr.opcode.removesuffix("-done")
    queue = _channel_queue(t, instr, op)
    if not queue:
        raise t.facts._bad(instr, f"device {t.device} reaches this {instr.opcode} on channel "
                           f"{instr.attrs.get('channel_id')} with no {op} issued before it")
    issued = queue.popleft()
    if issued is None:
        return
    ev = t.emit(instr.opcode, instr, ctx)
    ev.channel, ev.peer, ev.link, ev.shape = issued.channel, issued.peer, issued, issued.shape


@_rule("call", "fusion")
def _call(t: _Tracer, instr, frame, ctx):
    comp = instr.attrs.get("to_apply") or instr.attrs.get("calls")
    t.walk(comp, Frame(comp, t.lazy_operands(instr, frame)), ctx)


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
    t.walk(comp, Frame(comp, args), ctx + (f"branch {k} of {instr.name}",))


def _plan_by_induction(t: _Tracer, instr, frame, ctx):
    """(iterations to trace, what to record in trace.shortened or None, period) for a loop
    whose events repeat with a period (induction.py); None: unroll it in full."""
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    n = known_trip_count(instr)
    state = t.lazy_operands(instr, frame)[0]() if n is None or _needs_values(body) else None
    p = body_period(body, state, _needs_values)
    if p is None:
        return None
    if n is None:
        indices = control_slice(cond, body)
        if indices is None:
            return None
        if t.ids is not None and isinstance(state, tuple):
            t.ids.settle(*(state[j] for j in indices if j < len(state)))
        n = closed_form_trip_count(cond, body, state)
        if n is None:
            key = slice_key(state, indices)
            go = t.folder.eval(cond.root, Frame(cond, [state]))
            if key is None or t.choose is None or not isinstance(go, Unknown) or go.key is None:
                return None
            # The slice holds all-reduce results and equal constants, and computes only from
            # itself: every device with this key runs the same number of iterations, whatever
            # it is.  Enumerated like a data-chosen branch: each count below 3p exactly, and
            # the counts from 3p on by their remainder modulo p.
            at = f"{where(instr, ctx)} (trip count from {go.origin.name})" if go.origin else \
                where(instr, ctx)
            options = (INDUCTION_ITERATIONS + 1) * p
            k = t.choose(("trip", id(instr), key), options, at, t.device)
            return k, ("uniform", key, k, p), p
    reps = INDUCTION_ITERATIONS * p
    if n <= max(UNROLL_BELOW, reps):
        return n, None, p  # cheap to trace in full: exact iteration numbers in reports
    return reps + (n - reps) % p, (n, p), p


def _label(instr, k: int, trips: int, record, p: int) -> str:
    """Iteration k (1-based) of a loop traced by induction: from iteration 2p + 1 on, one
    traced iteration stands for itself and every p-th one after it."""
    if record is None or k <= (INDUCTION_ITERATIONS - 1) * p or (
            record[0] == "uniform" and record[2] < INDUCTION_ITERATIONS * p):
        return f"iteration {k} of {instr.name}"
    if p == 1:
        return f"from iteration {k} of {instr.name}"
    return f"iteration {k} of {instr.name} and every {p}th after it"


@_rule("while")
def _while(t: _Tracer, instr, frame, ctx):
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    folder = t.folder
    cond_comm = computation_communicates(cond)
    plan = _plan_by_induction(t, instr, frame, ctx) if t.induction and not cond_comm else None
    if plan is not None:
        trips, record, p = plan
        if record is not None:
            t.trace.shortened.append((id(instr), ctx, record))
            t.looping += 1
        state = t.lazy_operands(instr, frame)[0]
        try:
            for k in range(trips):
                label = _label(instr, k + 1, trips, record, p)
                t.tick(instr, ctx + (label,))
                bframe = Frame(body, [state])
                t.walk(body, bframe, ctx + (label,))

                def state(bf=bframe):  # forced only if the body asks for the loop state
                    return folder.eval(body.root, bf)
        finally:
            if record is not None:
                t.looping -= 1
        return
    n = known_trip_count(instr)
    eager = n is None or cond_comm or _needs_values(body)
    state = t.lazy_operands(instr, frame)[0]
    if eager:
        state = state()
    k = 0
    while True:
        if n is None or cond_comm:
            cframe = Frame(cond, [state])
            if cond_comm:
                t.walk(cond, cframe, ctx + (f"condition {k + 1} of {instr.name}",))
            if n is None:
                go = folder.eval(cond.root, cframe)
                if t.ids is not None:
                    t.ids.settle(go)
                if isinstance(go, Unknown):
                    raise _Unproven(instr, "its body contains collectives or channels and its "
                                    f"trip count depends on data: {go.describe()}", ctx)
                if not bool(go):
                    break
        if n is not None and k >= n:
            break
        t.tick(instr, ctx + (f"iteration {k + 1} of {instr.name}",))
        if k >= t.max_unroll:
            raise _Unproven(instr, f"runs more than {t.max_unroll} iterations, the most the check "
                            "unrolls", ctx)
        bframe = Frame(body, [state])
        t.walk(body, bframe, ctx + (f"iteration {k + 1} of {instr.name}",))
        if eager:
            state = folder.eval(body.root, bframe)
        else:
            def state(bf=bframe):  # forced only if something later asks for the loop state
                return folder.eval(body.root, bf)
        k += 1


def trace_device(facts: ModuleFacts, schedule, device: int, *,
                 max_unroll: int = DEFAULT_MAX_UNROLL, choose=None, induction: bool = True,
                 deadline: float | None = None, symbolic: bool = False,
                 ids=None) -> DeviceTrace:
    """The ordered communication events of `device` running the module's entry computation.

    `choose(key, n, where, device)` picks the branch of a conditional whose index is unknown but the
    same on every device with that key; without it such a conditional stops the trace.
    `symbolic`: replica-id and partition-id fold to unknowns, so a trace that completes is
    every device's instruction sequence (symmetry.py); groups and peers are `device`'s.
    `ids` (with symbolic): the class of devices `device` stands for (classes.py)."""
    replica, partition = facts.da.logical_id(device)
    trace = DeviceTrace(device, replica, partition)
    tracer = _Tracer(facts, schedule, trace, max_unroll, choose, induction, deadline, symbolic,
                     ids)
    entry = facts.module.entry
    params = [Unknown(p, "an entry parameter (data)") for p in entry.parameters]
    try:
        tracer.walk(entry, Frame(entry, params), ())
    except _Unproven as u:
        trace.unproven = (u.instr, u.reason, u.ctx)
    return trace
