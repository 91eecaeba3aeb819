"""The native loop's escape hatch: a thunk the driver cannot run itself (an infeed or outfeed,
a tuple all-reduce, the generic fold, a convolution, a custom call, ...) is called back in
Python, alone, while the rest of the iteration stays native (native/loop.py).

The driver calls `i64 callback(i64 step, i64 half)` through a pointer in its table (a ctypes
CFUNCTYPE the loop keeps alive); the loop runs that step's thunk on a Frame whose buffers
are the driver's own for that table half (thunks.py CompiledComputation.frame: carry leaves,
the arena, the loop's fixed result buffers), so the thunk reads what the kernels wrote and
its results land where the next kernels read them. A thunk that hands back a new array
(device thunks do: `frame.set`) has it copied into the fixed buffer, which the driver's
addresses name. Per call this costs the ctypes transition and the thunk itself, not the
Python executor's binding of every buffer of both computations.

An exception inside the callback never crosses the C frames: the callback keeps it, returns
1, the driver stops with CELL_FAILED = step, and the loop raises it located as the Python
executor would (thunks.py thunk_error: same rank, instruction and message).

Not called back: async starts and dones (their handle lives in the identity of a buffer
across iterations: devices.py) and control thunks (nested loops and conditionals); such a
loop keeps the Python path.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from ..codegen.ir_array import c64
from ..codegen.types import I64
from ..devices import _DONES, _STARTS
from .collectives import CELL_FAILED

CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
CALLBACK_IR = ir.FunctionType(I64, [I64, I64])
_KINDS = ("device", "library", "custom-call")


class _Bound:
    """What a callback step resolves to on any device (no MPI call, no wait-cell place)."""


BOUND = _Bound()


class CallbackStep:
    kind = "callback"
    # Table entries: the loop's callback, the table half (0 or 1).
    N_ENTRIES = 2

    def __init__(self, thunk):
        self.thunk = thunk
        self.instr = getattr(thunk, "orig", None) or thunk.instr
        self.reads = {s.id for s in thunk.reads if s is not None}
        self.writes = [s for s in thunk.writes if s is not None]

    @staticmethod
    def eligible(thunk) -> bool:
        instr = getattr(thunk, "instr", None)
        return thunk.kind in _KINDS and instr is not None and \
            instr.opcode not in _STARTS and instr.opcode not in _DONES

    def resolve(self, device):
        return BOUND

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        emit_call(b, entry, 0, cells, index, fail)

    def run(self, frame) -> None:
        """The thunk on the driver's buffers; new result arrays copied into them."""
        bufs = frame.bufs
        before = [bufs[s.id] for s in self.writes]
        self.thunk.run(frame)
        for s, fixed in zip(self.writes, before):
            new = bufs[s.id]
            if new is not fixed:
                if s.nbytes:
                    fixed[:s.nbytes] = np.asarray(new).reshape(-1).view(np.uint8)[:s.nbytes]
                bufs[s.id] = fixed


def emit_call(b: ir.IRBuilder, entry, at: int, cells, index: int, fail) -> None:
    """`callback(index, half)` from table entries at, at + 1; a non-zero return goes to
    `fail` after CELL_FAILED = index."""
    fn = entry(at, CALLBACK_IR.as_pointer())
    rc = b.call(fn, [c64(index), entry(at + 1, I64)])
    ok = b.function.append_basic_block(f"cb{index}.ok")
    bad = b.function.append_basic_block(f"cb{index}.failed")
    b.cbranch(b.icmp_signed("==", rc, c64(0)), ok, bad)
    b.position_at_end(bad)
    b.store(c64(index), b.gep(cells, [c64(CELL_FAILED)], inbounds=True, source_etype=I64))
    fail(b, rc)
    b.position_at_end(ok)


def falls_back(step) -> bool:
    """Whether a step the driver runs itself (a collective, a dot) is called back instead
    when the device cannot resolve it at run time (the generic fold, no BLAS found, ...): it
    then has two more table entries, the callback (0: run natively) and the table half.
    Channels do not: their handle lives in a buffer's identity across the start and done."""
    return step.kind not in ("kernel", "callback", "send", "recv", "send-done", "recv-done")


def describe(steps) -> str:
    """`; callbacks: infeed.24, outfeed.65` for `xladist explain` (empty without any)."""
    names = [s.instr.name for s in steps if s.kind == "callback"]
    return f"; callbacks: {', '.join(names)}" if names else ""

