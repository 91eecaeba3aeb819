"""Control-flow thunks: while and conditional over nested compiled computations.

Nested computations take and return flat leaf lists (thunks.CompiledComputation),
so loop state moves between iterations without copies: a body's results become
the next iteration's parameters.
"""

from __future__ import annotations

import numpy as np

from .thunks import Thunk, leaf_values


class WhileThunk(Thunk):
    kind = "control"

    def __init__(self, instr, cond, body, in_slots, out_slots):
        super().__init__()
        self.instr = instr
        self.cond, self.body = cond, body
        self.in_slots, self.out_slots = in_slots, out_slots
        self.reads = [s for s in in_slots if s is not None]
        self.writes = [s for s in out_slots if s is not None]

    def run(self, frame) -> None:
        state = leaf_values(frame, self.in_slots)
        device = frame.device
        cond, body = self.cond, self.body
        while cond.run(state, device)[0][0]:
            state = body.run(state, device)
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

    def run(self, frame) -> None:
        raw = frame.bufs[self.index_slot.id]
        n = len(self.branches)
        if self.is_pred:
            k = 0 if raw[0] else 1
        else:
            i = int(raw.view(np.int32)[0])
            k = i if 0 <= i < n else n - 1  # out of range selects the last branch
        result = self.branches[k].run(leaf_values(frame, self.operand_slots[k]), frame.device)
        for s, v in zip(self.out_slots, result):
            if s is not None:
                frame.set(s, v)

    def describe(self) -> str:
        return "conditional " + " | ".join(b.name for b in self.branches)
