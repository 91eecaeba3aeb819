"""Send/recv channels inside a native while loop (native/loop.py): the four device thunks
send, recv, send-done and recv-done become MPI_Issend / MPI_Irecv and MPI_Wait calls through
function pointers in the loop's table (xladist/collectives/native_channels.py describes the calls;
the runtime resolves them once per loop run with `native_channel(start, done)`,
xladist/runtime/mpi_context.py).

Which transfers: a device-to-device send or recv of one non-empty array whose only user is
its done, in the same computation (condition or body), so the request never outlives the
iteration. A pipelined transfer (its done one iteration later, the handle in the loop
state), a host transfer or a tuple of data keeps the whole loop on the Python path.

Buffers. A recv writes straight into its recv-done's result slot: a device result is a buffer
the loop keeps for itself (native/loop.py `_fixed_outs`), read by nothing before the done. A
send reads its operand until send-done returns; when a step between the two may write that
memory (a temp region of the arena reused, a kernel updating in place), the send first copies
the data into a staging buffer of its own (`stage`), as the Python path's request keeps its
array. The send-done counts as reading the operand, so an all-reduce after the send never
reduces into it in place (loop.py `_in_place`).

Waits: the dones' MPI_Wait (and the starts, which do not block) run inside the wait-cell
bracket of native/collectives.py, so a hang is reported with rank, done instruction, peer and
iteration. A recv-done then compares MPI_Get_count with the expected bytes; a mismatch ends
the loop with GOT_FAILED and the Python path's message.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..codegen.ir_array import c64
from ..codegen.loops import for_range
from ..codegen.types import I8, I32, I64, PTR
from ..thunks import KernelThunk
from .collectives import CELL_FAILED, STEPS, _bracketed

# MPI_Issend / MPI_Irecv(buf, count, datatype, peer, tag, comm, request)
MPI_ISTART = ir.FunctionType(I32, [PTR, I32, I64, I32, I32, I64, PTR])
MPI_WAIT = ir.FunctionType(I32, [PTR, PTR])
MPI_GET_COUNT = ir.FunctionType(I32, [PTR, I64, PTR])
GOT_FAILED = -1  # xladist/collectives/native_channels.py: the recv's byte count was wrong

_DONE = {"send": "send-done", "recv": "recv-done"}


def _users(instr) -> list:
    comp = instr.parent
    return [] if comp is None else comp.users().get(instr, [])


def _data_shape(instr):
    return instr.operands[0].shape if instr.opcode == "send" else instr.shape.tuple_shapes[0]


class _ChannelStep:
    """A channel thunk; `partner` is its done (for a start) or its start (for a done)."""

    in_place = False
    start = True

    def __init__(self, thunk):
        self.thunk = thunk
        self.instr = thunk.orig
        self.partner = None
        self.reads: set = set()

    @classmethod
    def eligible(cls, thunk) -> bool:
        if thunk.kind != "device" or thunk.instr.opcode != cls.kind:
            return False
        instr = thunk.instr
        start = instr if cls.start else instr.operands[0]
        if start.opcode not in _DONE or start.attrs.get("is_host_transfer", False):
            return False
        users = _users(start)
        if len(users) != 1 or users[0].opcode != _DONE[start.opcode]:
            return False
        shape = _data_shape(start)
        return shape.is_array and not any(shape.dynamic) and shape.size > 0

    def resolve(self, device):
        start, done = (self, self.partner) if self.start else (self.partner, self)
        native = getattr(device, "native_channel", None)
        pair = native(start.instr, done.instr) if native is not None else None
        return None if pair is None else pair[0 if self.start else 1]


class SendStep(_ChannelStep):
    kind = "send"
    # Table entries: fn, data, count, datatype, dest, tag, comm, request, staging buffer.
    N_ENTRIES = 9

    def __init__(self, thunk):
        super().__init__(thunk)
        self.src = thunk.operand_slots[0][0]
        self.reads = {self.src.id}
        self.stage = None  # a copy of the data the send reads, when it must not read src

    @classmethod
    def eligible(cls, thunk) -> bool:
        return super().eligible(thunk) and len(thunk.operand_slots[0]) == 1 and \
            thunk.operand_slots[0][0] is not None

    def entries(self, addrs, bound) -> list[int]:
        stage = 0 if self.stage is None else self.stage.ctypes.data
        return [bound.fn, addrs[self.src.id], bound.count, bound.datatype, bound.peer,
                bound.tag, bound.comm, bound.request, stage]

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        fn = entry(0, MPI_ISTART.as_pointer())
        data = entry(1, PTR)
        if self.stage is not None:
            to = entry(8, PTR)
            with for_range(b, c64(self.stage.nbytes), name=f"stage{index}") as loop:
                b.store(b.load(b.gep(data, [loop.iv], source_etype=I8), typ=I8),
                        b.gep(to, [loop.iv], source_etype=I8))
            data = to
        _istart(b, entry, cells, progress, index, fail, fn, data)


class RecvStep(_ChannelStep):
    """MPI_Irecv into the recv-done's result slot, cleared to zeros first when nobody sends
    to this device (the Python path's zeros)."""

    kind = "recv"
    # Table entries: fn, result, count, datatype, source, tag, comm, request, zero flag.
    N_ENTRIES = 9

    def entries(self, addrs, bound) -> list[int]:
        return [bound.fn, addrs[self.partner.dst.id], bound.count, bound.datatype,
                bound.peer, bound.tag, bound.comm, bound.request, int(bool(bound.zero))]

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        fn = entry(0, MPI_ISTART.as_pointer())
        data = entry(1, PTR)
        clear = b.function.append_basic_block(f"rzero{index}")
        after = b.function.append_basic_block(f"rzero{index}.done")
        b.cbranch(b.icmp_unsigned("!=", entry(8, I64), c64(0)), clear, after)
        b.position_at_end(clear)
        with for_range(b, c64(self.partner.dst.nbytes), name=f"rclear{index}") as loop:
            b.store(ir.Constant(I8, 0), b.gep(data, [loop.iv], source_etype=I8))
        b.branch(after)
        b.position_at_end(after)
        _istart(b, entry, cells, progress, index, fail, fn, data)


def _istart(b, entry, cells, progress, index, fail, fn, data) -> None:
    count, dt, peer, tag, comm = (entry(k, I64) for k in (2, 3, 4, 5, 6))
    request = entry(7, PTR)
    _bracketed(b, cells, progress, index, fail, lambda: b.call(
        fn, [data, b.trunc(count, I32), dt, b.trunc(peer, I32), b.trunc(tag, I32), comm,
             request]))


class SendDoneStep(_ChannelStep):
    kind = "send-done"
    start = False
    # Table entries: MPI_Wait, request, status.
    N_ENTRIES = 3

    def entries(self, addrs, bound) -> list[int]:
        return [bound.fn, bound.request, bound.status]

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        fn = entry(0, MPI_WAIT.as_pointer())
        request, status = entry(1, PTR), entry(2, PTR)
        _bracketed(b, cells, progress, index, fail, lambda: b.call(fn, [request, status]))


class RecvDoneStep(_ChannelStep):
    kind = "recv-done"
    start = False
    # Table entries: MPI_Wait, request, status, MPI_Get_count, datatype, got, count, check.
    N_ENTRIES = 8

    def __init__(self, thunk):
        super().__init__(thunk)
        self.dst = thunk.out_slots[0]

    @classmethod
    def eligible(cls, thunk) -> bool:
        return super().eligible(thunk) and bool(thunk.out_slots) and \
            thunk.out_slots[0] is not None

    def entries(self, addrs, bound) -> list[int]:
        return [bound.fn, bound.request, bound.status, bound.get_count, bound.datatype,
                bound.got, bound.count, int(bool(bound.check))]

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        fn = entry(0, MPI_WAIT.as_pointer())
        request, status = entry(1, PTR), entry(2, PTR)
        _bracketed(b, cells, progress, index, fail, lambda: b.call(fn, [request, status]))
        check = b.function.append_basic_block(f"rcount{index}")
        bad = b.function.append_basic_block(f"rcount{index}.bad")
        after = b.function.append_basic_block(f"rcount{index}.done")
        b.cbranch(b.icmp_unsigned("!=", entry(7, I64), c64(0)), check, after)
        b.position_at_end(check)
        got = entry(5, PTR)
        get_count = entry(3, MPI_GET_COUNT.as_pointer())
        b.call(get_count, [status, entry(4, I64), got])
        n = b.sext(b.load(got, typ=I32), I64)
        b.cbranch(b.icmp_signed("==", n, entry(6, I64)), after, bad)
        b.position_at_end(bad)
        b.store(c64(index), b.gep(cells, [c64(CELL_FAILED)], inbounds=True, source_etype=I64))
        fail(b, c64(GOT_FAILED))
        b.position_at_end(after)


STEPS.update({s.kind: s for s in (SendStep, RecvStep, SendDoneStep, RecvDoneStep)})


def pair_up(steps) -> bool:
    """Link every channel start with its done among `steps` (a loop's cond + body); stage
    the sends whose data a step in between may overwrite. False when a partner is missing."""
    starts = {id(s.thunk.instr): s for s in steps if isinstance(s, (SendStep, RecvStep))}
    for j, s in enumerate(steps):
        if not isinstance(s, (SendDoneStep, RecvDoneStep)):
            continue
        start = starts.pop(id(s.thunk.instr.operands[0]), None)
        if start is None:
            return False
        s.partner, start.partner = start, s
        if isinstance(start, SendStep):
            s.reads = {start.src.id}
            i = steps.index(start)
            if any(_may_write(w, start.src) for w in steps[i + 1:j]):
                start.stage = np.empty(max(start.src.nbytes, 1), np.uint8)
    return not starts


def _may_write(step, slot) -> bool:
    """Whether `step` may write memory of `slot` (the same slot, an overlapping region of the
    arena; a kernel updating in place writes what it reads)."""
    t = step.thunk
    if type(t) is KernelThunk:
        ids = set(t.ids) if t.spec.inplace else {s.id for s in t.writes if s is not None}
        written = [s for s in t.slots if s.id in ids]
    else:
        written = [s for s in getattr(t, "out_slots", ()) if s is not None]
    for w in written:
        if w.id == slot.id:
            return True
        if w.kind == slot.kind == "temp" and w.offset < slot.offset + max(slot.nbytes, 1) \
                and slot.offset < w.offset + max(w.nbytes, 1):
            return True
    return False


def paired(thunks) -> bool:
    """Whether every channel thunk among `thunks` finds its partner there (loop eligibility)."""
    ids = {id(t.instr) for t in thunks}
    for t in thunks:
        if t.kind == "device" and t.instr.opcode in ("send", "recv", "send-done", "recv-done"):
            others = t.instr.operands[:1] if t.instr.opcode.endswith("-done") \
                else _users(t.instr)
            if len(others) != 1 or id(others[0]) not in ids:
                return False
    return True
