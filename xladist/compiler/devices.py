"""Device thunks: collectives, channels, feeds and ids through the DeviceContext.

The DeviceContext (xladist/semantics/device.py) is the one interface both
backends call, so the MPI runtime serves compiled programs unchanged. Values
handed to it are the interpreter's: logical numpy arrays (views of our
buffers), tuples, TOKEN. Async starts keep their handle in the RunState until the
matching done runs, wherever the start's value travelled (see "async pairs").
Reducers are compiled element-wise kernels (CompiledReducer).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from ..errors import ExecutionError, UnsupportedError
from .native.collectives import user_function_name
from .thunks import Thunk, _value, address, physical_leaf

MAP_KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)


class CompiledReducer:
    """A to_apply computation as a binary function on arrays (compiled map kernel).
    `.computation` lets a runtime map it onto an MPI builtin op instead."""

    def __init__(self, computation, kernel_name: str):
        self.computation = computation
        self.kernel_name = kernel_name
        params = computation.parameters
        self.in_dtype = params[0].shape.dtype
        root = computation.root
        self.out_dtype = root.shape.dtype if root.shape.is_array else self.in_dtype
        self.fn = None
        self.mpi_function = None
        self.kernel_address = None

    def bind(self, code) -> None:
        self.kernel_address = code.address(self.kernel_name)
        self.fn = MAP_KERNEL_TYPE(self.kernel_address)
        self._code = code  # the machine code must outlive every holder of this reducer
        # `void f(in, inout, len, datatype)`: the kernel as an MPI_User_function, which a
        # runtime may register with MPI_Op_create (native/collectives.py). Absent from
        # object code stored by an older xladist: then MPI ops call the kernel from Python.
        try:
            self.mpi_function = code.address(user_function_name(self.kernel_name))
        except KeyError:
            self.mpi_function = None

    def __call__(self, a, b):
        shape = np.broadcast_shapes(np.shape(a), np.shape(b))
        a = np.ascontiguousarray(np.broadcast_to(np.asarray(a, self.in_dtype), shape))
        b = np.ascontiguousarray(np.broadcast_to(np.asarray(b, self.in_dtype), shape))
        out = np.empty(shape, self.out_dtype)
        argv = (ctypes.c_uint64 * 3)(address(out), address(a), address(b))
        self.fn(ctypes.addressof(argv), out.size)
        return out

    def combine_into(self, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
        """``out = self(a, b)`` without allocating, for flat C-contiguous arrays of the
        kernel's dtypes (``out`` may be ``b``: the kernel reads element i before writing it).
        False, with nothing written, when the arrays do not fit the kernel."""
        if not (a.dtype == b.dtype == self.in_dtype and out.dtype == self.out_dtype
                and a.size == b.size == out.size and a.flags.c_contiguous
                and b.flags.c_contiguous and out.flags.c_contiguous):
            return False
        argv = (ctypes.c_uint64 * 3)(address(out), address(a), address(b))
        self.fn(ctypes.addressof(argv), out.size)
        return True

    def __repr__(self) -> str:
        return f"CompiledReducer({self.computation.name})"


class DeviceThunk(Thunk):
    kind = "device"

    def __init__(self, instr, operand_slots, out_slots, reducer=None, original=None):
        super().__init__()
        self.instr = instr
        self.orig = original if original is not None else instr
        self.operand_slots = operand_slots
        self.out_slots = out_slots
        self.reducer = reducer
        self.reads = [s for slots in operand_slots for s in slots if s is not None]
        self.writes = [s for s in out_slots if s is not None]
        self.runner = DEVICE_RUNNERS[instr.opcode]
        self.key = _async_key(instr)
        self.bound = None  # (device, bound call or None, operand slot id): _collective

    def args(self, frame) -> list:
        return [_value(frame, op.shape, slots)
                for op, slots in zip(self.instr.operands, self.operand_slots)]

    def write(self, frame, shape, value, slots=None) -> None:
        """Store an interpreter value into the result leaves (flat, depth first)."""
        slots = self.out_slots if slots is None else slots
        leaves = []
        _walk(shape, value, leaves)
        for slot, (s, v) in zip(slots, leaves):
            if slot is not None and s.is_array:
                frame.set(slot, physical_leaf(slot.shape, np.asarray(v)))

    def zeros(self, frame, slots) -> None:
        for s in slots:
            if s is not None:
                frame.set(s, np.zeros(s.nbytes, np.uint8))

    def run(self, frame) -> None:
        self.runner(self, frame)

    def describe(self) -> str:
        return f"device {self.instr.opcode}"


# Async starts and dones whose handle travels in a key leaf (_key_leaf).
_STARTS = {"all-reduce-start", "all-gather-start", "collective-permute-start", "send", "recv"}
_DONES = {"all-reduce-done", "all-gather-done", "collective-permute-done", "send-done",
          "recv-done"}


def _async_key(instr):
    """The key leaf's index in a start's result (or a done's operand), else None."""
    if instr.opcode in _STARTS:
        start_op, shape = instr.opcode, instr.shape
    elif instr.opcode in _DONES:
        start_op = instr.opcode.replace("-done", "-start") if not instr.opcode.startswith(
            ("send", "recv")) else instr.opcode[:-5]
        shape = instr.operands[0].shape
    else:
        return None
    if start_op in ("all-gather-start", "collective-permute-start", "send"):
        # Skip the operand part (the start's first tuple element: send's data).
        return _key_leaf(start_op, shape, sum(1 for _ in shape.tuple_shapes[0].leaves()))
    return _key_leaf(start_op, shape)


def _walk(shape, value, out):
    if shape.is_tuple:
        for s, v in zip(shape.tuple_shapes, value):
            _walk(s, v, out)
    else:
        out.append((shape, value))


DEVICE_RUNNERS: dict[str, Callable] = {}


def _runner(*opcodes):
    def wrap(fn):
        for op in opcodes:
            DEVICE_RUNNERS[op] = fn
        return fn
    return wrap


@_runner("replica-id", "partition-id")
def _ids(t, frame):
    v = frame.device.replica_id if t.instr.opcode == "replica-id" else frame.device.partition_id
    frame.set(t.out_slots[0], np.array([v], np.uint32).view(np.uint8))


@_runner("rng-get-and-update-state")
def _rng_state(t, frame):
    # The interpreter's rule (interpreter/rng.py): return [counter, 0], advance by delta.
    rs = frame.rs
    lo = rs.rng_state
    rs.rng_state = (lo + int(t.instr.attrs.get("delta", 0))) & 0xFFFFFFFFFFFFFFFF
    frame.set(t.out_slots[0], np.array([lo, 0], np.uint64).view(np.uint8))


@_runner("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
         "collective-broadcast", "ragged-all-to-all")
def _collective(t, frame):
    bound = t.bound
    if bound is None or bound[0] is not frame.device:
        # The device may bind this collective once (MpiDeviceContext.bound_collective:
        # f(operand bytes) -> result bytes); else every run goes through `collective`.
        bind = getattr(frame.device, "bound_collective", None)
        fn = bind(t.orig, t.reducer) if bind is not None and len(t.out_slots) == 1 and \
            len(t.operand_slots) == 1 and len(t.operand_slots[0]) == 1 else None
        bound = t.bound = (frame.device, fn, t.operand_slots[0][0].id if fn else None)
    if bound[1] is not None:
        frame.set(t.out_slots[0], bound[1](frame.bufs[bound[2]]))
        return
    result = frame.device.collective(t.orig, t.args(frame), t.reducer)
    t.write(frame, t.instr.shape, result)


# ---- async pairs -------------------------------------------------------------------------
# A start's handle is kept in the RunState under the identity of one leaf buffer of its
# result that the start allocates itself (the "key leaf"). Tuples, get-tuple-element,
# while-loop state and conditionals pass leaf buffers on without copying, so the done
# finds its start through the same leaf of its operand wherever the value travelled: a
# pipelined send/recv started in one iteration completes in the next (the interpreter's
# Pending values in tuples). The entry keeps the buffer alive, so its id stays unique.

def _key_leaf(opcode: str, start_shape, n_operand_leaves: int = 0) -> int:
    """Index of the key leaf among the flat leaves of a start's result shape."""
    leaves = [s for _, s in start_shape.leaves()]
    first = {"all-reduce-start": 0, "recv": 0}.get(opcode, n_operand_leaves)
    for i in range(first, len(leaves)):
        if leaves[i].is_array:
            return i
    raise UnsupportedError(f"`{opcode}` with result {start_shape.to_text()} has no array "
                           "leaf to carry its handle")


def _fresh(frame, slot):
    """A new zero buffer for `slot` (a start's result part, or its key leaf)."""
    a = np.zeros(max(slot.nbytes, 1), np.uint8)[:slot.nbytes]
    frame.set(slot, a)
    return a


def _keep(t, frame, handle) -> None:
    key = t.out_slots[t.key]
    buf = frame.bufs[key.id]
    frame.pending[id(buf)] = (buf, handle)


def _take_pending(t, frame):
    slot = t.operand_slots[0][t.key]
    buf = frame.bufs[slot.id] if slot is not None else None
    entry = frame.pending.pop(id(buf), None) if buf is not None else None
    if entry is None or entry[0] is not buf:
        raise ExecutionError(
            f"{t.instr.opcode} `{t.orig.name}`: its operand is not the result of a start that "
            "is still in flight (already completed, or not produced by a start of this run)",
            instruction=t.orig.name)
    return entry[1]


@_runner("all-reduce-start")
def _all_reduce_start(t, frame):
    handle = frame.device.collective_start(t.orig, t.args(frame), t.reducer)
    for s in t.out_slots:
        if s is not None:
            _fresh(frame, s)
    _keep(t, frame, handle)


@_runner("all-gather-start", "collective-permute-start")
def _two_slot_start(t, frame):
    handle = frame.device.collective_start(t.orig, t.args(frame), t.reducer)
    # (operands, result, contexts...): the operand part is the operands themselves.
    n_operand_leaves = sum(len(s) for s in t.operand_slots)
    for slot, src in zip(t.out_slots[:n_operand_leaves],
                         [s for ss in t.operand_slots for s in ss]):
        if slot is not None and src is not None:
            frame.set(slot, frame.bufs[src.id])
    for s in t.out_slots[n_operand_leaves:]:
        if s is not None:
            _fresh(frame, s)
    _keep(t, frame, handle)


@_runner("all-reduce-done", "all-gather-done", "collective-permute-done")
def _done(t, frame):
    result = frame.device.collective_done(t.orig, _take_pending(t, frame))
    t.write(frame, t.instr.shape, result)


@_runner("send")
def _send(t, frame):
    data = t.args(frame)[0]
    handle = frame.device.send(t.orig, data)
    n = len(t.operand_slots[0])
    for slot, src in zip(t.out_slots[:n], t.operand_slots[0]):
        if slot is not None and src is not None:
            frame.set(slot, frame.bufs[src.id])
    for s in t.out_slots[n:]:
        if s is not None:
            _fresh(frame, s)
    _keep(t, frame, handle)


@_runner("send-done")
def _send_done(t, frame):
    frame.device.send_done(t.orig, _take_pending(t, frame))


@_runner("recv")
def _recv(t, frame):
    handle = frame.device.recv(t.orig)
    for s in t.out_slots:
        if s is not None:
            _fresh(frame, s)
    _keep(t, frame, handle)


@_runner("recv-done")
def _recv_done(t, frame):
    data = frame.device.recv_done(t.orig, _take_pending(t, frame))
    t.write(frame, t.instr.shape.tuple_shapes[0], data,
            t.out_slots[:len(t.out_slots) - 1])


@_runner("infeed")
def _infeed(t, frame):
    data = frame.device.infeed(t.orig)
    t.write(frame, t.instr.shape.tuple_shapes[0], data, t.out_slots[:len(t.out_slots) - 1])


@_runner("outfeed")
def _outfeed(t, frame):
    frame.device.outfeed(t.orig, t.args(frame)[0])
