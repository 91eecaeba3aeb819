"""Control-flow thunks: while and conditional over nested compiled computations.

Nested computations take and return flat leaf lists (thunks.CompiledComputation),
so loop state moves between iterations without copies: a body's results become
the next iteration's parameters. A body is compiled with its parameters donated
(inplace.py): the leaves it updates in place (`body.used`) must be owned by the
loop, so the loop takes or copies their initial values once and, when the body
hands back an array it does not own (`body.sources`), copies it before the next
iteration.

Loops that communicate keep the watchdog's loop stack exactly as the interpreter
does under the MPI runtime (xladist/runtime/watchdog.py `loop_tracking_rules`): enter the
loop, bump the iteration before each condition evaluation, exit; so a hang report
says "iteration k of while.N" with either backend. The stack lives in
xladist.collectives.deadline, which the runtime has loaded whenever a watchdog runs: the
compiler only looks it up in sys.modules (no import, no cost without MPI). A loop that
runs natively (native/loop.py) keeps the same stack entry through the watchdog's
begin_native: the driver itself counts the iterations in memory the daemon reads.
"""

from __future__ import annotations

import sys
from time import perf_counter_ns

import numpy as np

from ..analysis.schedule import computation_communicates
from .codegen.constants import logical_view, to_physical
from .inplace import FRESH
from .simplify import layouts_differ
from .thunks import Thunk, leaf_values


def leaf_shapes(shape):
    return [s for _, s in shape.leaves()]


class Relayout:
    """Converts leaves between two layouts of the same logical shapes (HLO that
    has not been through layout assignment may disagree across a call boundary;
    XLA would insert copies there). Identity when every layout agrees."""

    def __init__(self, src, dst):
        self.pairs = [(i, a, b) for i, (a, b) in enumerate(zip(src, dst))
                      if layouts_differ(a, b)]

    def __call__(self, leaves):
        if not self.pairs:
            return leaves
        leaves = list(leaves)
        for i, a, b in self.pairs:
            leaves[i] = to_physical(b, logical_view(a, leaves[i])).reshape(-1).view(np.uint8)
        return leaves


def _loop_stack():
    """xladist.collectives.deadline.watchdog when the runtime has loaded it, else None."""
    mod = sys.modules.get("xladist.collectives.deadline")
    return getattr(mod, "watchdog", None)


class WhileThunk(Thunk):
    kind = "control"

    def __init__(self, instr, cond, body, in_slots, out_slots, original=None, takes=None):
        super().__init__()
        self.instr = instr
        # The user's while (flatten clones it, prefixing names inside inlined calls).
        self.orig = original if original is not None else instr
        a = self.orig.attrs
        self.tracked = computation_communicates(a["condition"]) or \
            computation_communicates(a["body"])
        # The body's ROOT: the Tracer counts iterations by it, as with the interpreter.
        self.body_root = a["body"].root
        self.cond, self.body = cond, body
        self.in_slots, self.out_slots = in_slots, out_slots
        self.reads = [s for s in in_slots if s is not None]
        self.writes = [s for s in out_slots if s is not None]
        init = leaf_shapes(instr.operands[0].shape)
        body_out = body.root_shapes
        self.init_to_state = Relayout(init, body.param_shapes)
        self.state_to_cond = Relayout(body.param_shapes, cond.param_shapes)
        self.result_to_state = Relayout(body_out, body.param_shapes)
        self.state_to_out = Relayout(body.param_shapes, leaf_shapes(instr.shape))
        # Ownership of the leaves the body updates in place: initial values the
        # enclosing computation gives away are taken, the others copied once.
        self.used = sorted(body.used)
        takes = takes or [False] * len(in_slots)
        self.copy_in = [k for k in self.used if not takes[k]]
        self.taken = [k for k in self.used if takes[k]]
        src = body.sources
        # Steady: the body hands every used leaf back owned (a fresh buffer or the
        # same parameter leaf), so no iteration needs a copy.
        self.steady = all(src[k] == FRESH or src[k] == k for k in self.used)
        self.native = None  # a NativeLoop (native/loop.py) when the loop may run natively

    def _initial(self, frame) -> list:
        state = self.init_to_state(leaf_values(frame, self.in_slots))
        for k in self.copy_in:
            if state[k] is not None:
                state[k] = state[k].copy()
        return state

    def _settle(self, state, owned: set) -> set:
        """After a body run: which leaves the loop owns; used leaves it does not own
        (a constant, an alias the body returned) are copied."""
        nxt = {r for r, s in enumerate(self.body.sources)
               if s == FRESH or (s is not None and s in owned)}
        for k in self.used:
            if k not in nxt and state[k] is not None:
                state[k] = state[k].copy()
                nxt.add(k)
        return nxt

    def run(self, frame) -> None:
        state = self._initial(frame)
        rs = frame.rs
        wd = _loop_stack() if self.tracked else None
        native = self.native
        bound = None
        if native is not None and rs.tracer is None and native.collectives:
            # All-reduces run natively when the device resolves every one to an MPI call.
            bound = native.bind_device(rs.device)
        if bound is not None or (native is not None and wd is None and rs.tracer is None
                                 and not native.collectives):
            state = native.run(state, set(self.used), bound, wd, rs=rs)
        elif wd is None and rs.tracer is None and self.steady:
            cond, body = self.cond, self.body
            to_cond, back = self.state_to_cond, self.result_to_state
            while cond.run(to_cond(state), rs)[0][0]:
                state = back(body.run(state, rs))
        else:
            state = self._run_observed(state, rs, wd)
        state = self.state_to_out(state)
        for s, v in zip(self.out_slots, state):
            if s is not None:
                frame.set(s, v)

    def _run_observed(self, state, rs, wd):
        """The loop with the watchdog's iteration context and/or the timeline: one slice
        per iteration named after the body's ROOT (the Tracer counts iterations by it)."""
        cond, body = self.cond, self.body
        to_cond, back = self.state_to_cond, self.result_to_state
        tracer = rs.tracer
        owned = None if self.steady else set(self.used)
        entry = wd.enter_loop(self.orig.name) if wd is not None else None
        try:
            while True:
                if entry is not None:
                    entry[1] += 1  # the condition before body k belongs to iteration k
                if not cond.run(to_cond(state), rs)[0][0]:
                    return state
                if tracer is None:
                    state = back(body.run(state, rs))
                else:
                    t0 = perf_counter_ns()
                    state = back(body.run(state, rs))
                    tracer.instruction(self.body_root, t0, perf_counter_ns())
                if owned is not None:
                    owned = self._settle(state, owned)
        finally:
            if entry is not None:
                wd.exit_loop()

    def identity_relayouts(self) -> bool:
        """Whether the state goes to the condition and comes back from the body as is."""
        return not (self.state_to_cond.pairs or self.result_to_state.pairs)

    def describe(self) -> str:
        text = f"while cond={self.cond.name} body={self.body.name}"
        if self.native is not None:
            text += f" (native loop {self.native.describe()})"
        if self.used:
            text += (f"; carry leaves {self.used} updated in place (taken {self.taken}, "
                     f"copied once {self.copy_in}"
                     + ("" if self.steady else ", re-copied when the body returns an alias")
                     + ")")
        return text


class ConditionalThunk(Thunk):
    kind = "control"

    def __init__(self, instr, branches, index_slot, operand_slots, out_slots):
        super().__init__()
        self.instr = instr
        self.branches = branches
        self.index_slot = index_slot
        self.operand_slots = operand_slots
        self.out_slots = out_slots
        self.is_pred = instr.operands[0].shape.element_type.name == "pred"
        self.reads = [index_slot] + [s for ops in operand_slots for s in ops if s is not None]
        self.writes = [s for s in out_slots if s is not None]
        self.into = [Relayout(leaf_shapes(op.shape), b.param_shapes)
                     for op, b in zip(instr.operands[1:], branches)]
        self.out_of = [Relayout(b.root_shapes, leaf_shapes(instr.shape)) for b in branches]

    def run(self, frame) -> None:
        raw = frame.bufs[self.index_slot.id]
        n = len(self.branches)
        if self.is_pred:
            k = 0 if raw[0] else 1
        else:
            i = int(raw.view(np.int32)[0])
            k = i if 0 <= i < n else n - 1  # out of range selects the last branch
        args = self.into[k](leaf_values(frame, self.operand_slots[k]))
        result = self.out_of[k](self.branches[k].run(args, frame.rs))
        for s, v in zip(self.out_slots, result):
            if s is not None:
                frame.set(s, v)

    def describe(self) -> str:
        return "conditional " + " | ".join(b.name for b in self.branches)


class AsyncStartThunk(Thunk):
    """Generic async-start: runs the wrapped computation synchronously. Its value
    is ((operands), result, context): operands pass through, the context is 0;
    async-update and async-done are aliases of it (buffers.py)."""

    kind = "control"

    def __init__(self, instr, comp, operand_slots, out_slots):
        super().__init__()
        self.instr = instr
        self.comp = comp
        self.operand_slots = [s for ops in operand_slots for s in ops]
        self.out_slots = out_slots
        self.n_result = len(comp.root_slots)
        self.reads = [s for s in self.operand_slots if s is not None]
        self.writes = [s for s in out_slots if s is not None]
        # ((operands), result, context) in the layouts the start declares, as the callee
        # takes and gives them (XLA's layout assignment makes them agree).
        operands = [s for o in instr.operands for s in leaf_shapes(o.shape)]
        self.into = Relayout(operands, comp.param_shapes)
        self.passed = Relayout(operands, leaf_shapes(instr.shape.tuple_shapes[0]))
        self.out_of = Relayout(comp.root_shapes, leaf_shapes(instr.shape.tuple_shapes[1]))

    def run(self, frame) -> None:
        args = leaf_values(frame, self.operand_slots)
        result = self.out_of(self.comp.run(self.into(args), frame.rs))
        n = len(self.operand_slots)
        values = list(self.passed(args)) + list(result)
        for i, s in enumerate(self.out_slots):
            if s is None:
                continue
            v = values[i] if i < n + self.n_result else None
            frame.set(s, v if v is not None else np.zeros(s.nbytes, np.uint8))

    def describe(self) -> str:
        return f"async {self.comp.name}"
