"""Control-flow thunks: while and conditional over nested compiled computations.

Nested computations take and return flat leaf lists (thunks.CompiledComputation),
so loop state moves between iterations without copies: a body's results become
the next iteration's parameters.
"""

from __future__ import annotations

import numpy as np

from .codegen.constants import logical_view, to_physical
from .thunks import Thunk, leaf_values


def leaf_shapes(shape):
    return [s for _, s in shape.leaves()]


class Relayout:
    """Converts leaves between two layouts of the same logical shapes (HLO that
    has not been through layout assignment may disagree across a call boundary;
    XLA would insert copies there). Identity when every layout agrees."""

    def __init__(self, src, dst):
        self.pairs = [(i, a, b) for i, (a, b) in enumerate(zip(src, dst))
                      if a.is_array and b.is_array and a.rank > 1
                      and tuple(a.minor_to_major()) != tuple(b.minor_to_major())]

    def __call__(self, leaves):
        if not self.pairs:
            return leaves
        leaves = list(leaves)
        for i, a, b in self.pairs:
            leaves[i] = to_physical(b, logical_view(a, leaves[i])).reshape(-1).view(np.uint8)
        return leaves


class WhileThunk(Thunk):
    kind = "control"

    def __init__(self, instr, cond, body, in_slots, out_slots):
        super().__init__()
        self.instr = instr
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

    def run(self, frame) -> None:
        state = self.init_to_state(leaf_values(frame, self.in_slots))
        device = frame.device
        cond, body = self.cond, self.body
        to_cond, back = self.state_to_cond, self.result_to_state
        while cond.run(to_cond(state), device)[0][0]:
            state = back(body.run(state, device))
        state = self.state_to_out(state)
        for s, v in zip(self.out_slots, state):
            if s is not None:
                frame.set(s, v)

    def describe(self) -> str:
        return f"while cond={self.cond.name} body={self.body.name}"


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
        result = self.out_of[k](self.branches[k].run(args, frame.device))
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

    def run(self, frame) -> None:
        args = leaf_values(frame, self.operand_slots)
        result = self.comp.run(args, frame.device)
        n = len(self.operand_slots)
        values = list(args) + list(result)
        for i, s in enumerate(self.out_slots):
            if s is None:
                continue
            v = values[i] if i < n + self.n_result else None
            frame.set(s, v if v is not None else np.zeros(s.nbytes, np.uint8))

    def describe(self) -> str:
        return f"async {self.comp.name}"
