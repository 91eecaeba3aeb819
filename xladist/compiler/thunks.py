"""Thunks and the per-computation runtime: what a compiled computation runs.

A CompiledComputation owns an ordered thunk list, its buffer assignment and its
arena. Values cross computation boundaries as flat lists of leaves (one
contiguous uint8 array per array leaf in its physical layout, None for tokens).
Thunk kinds: kernel (a native function called with raw buffer pointers),
library (numpy/scipy on views of the buffers), custom-call (a target of the
user registry xladist.semantics.custom_calls), control (while, conditional over
nested CompiledComputations) and device (the DeviceContext interface the
interpreter also uses, so the MPI runtime plugs into both backends).

One RunState travels through every nested computation of one execution: the
DeviceContext, the handles of async starts still in flight (they may cross
computation boundaries inside while-loop state) and the timeline hook.
"""

from __future__ import annotations

import ctypes
import sys
from time import perf_counter_ns

import numpy as np

from ..errors import ExecutionError, XlaDistError, out_of_memory
from ..hlo.ir import Instruction
from .buffers import Assignment, Slot
from .codegen.constants import logical_view, to_physical
from .codegen.kernels import RANGE_SUFFIX
from .codegen.split import blocks_of, split_of
from .choice import ALONE, POOL, Site
from .parallel import RANGE_TYPE, describe_split, run_blocks


def address(a: np.ndarray) -> int:
    # c_char.from_buffer is ~3x cheaper than __array_interface__ (which builds a
    # dict): it matters in while loops, where every iteration binds its buffers.
    try:
        return ctypes.addressof(_CHAR.from_buffer(a))
    except (TypeError, ValueError):  # read-only or empty
        return a.__array_interface__["data"][0]


_CHAR = ctypes.c_char


def physical_leaf(shape, value) -> np.ndarray:
    """An interpreter value (logical numpy array) as a flat uint8 physical buffer."""
    phys = to_physical(shape, value)
    return phys.reshape(-1).view(np.uint8)


class RunState:
    """What one execution of a program shares across its nested computations.

    `pending`: async starts in flight, keyed by the identity of their key leaf's
    buffer (devices.py), so a done finds its start through tuples, while-loop state
    and conditionals. `tracer`: xladist/runtime/trace.py's Tracer when the device carries one
    that records slices (the interpreter's hook), else None: then the thunk loop
    reads no clock. `rng_state`: the counter of rng-get-and-update-state.
    """

    __slots__ = ("device", "pending", "rng_state", "tracer")

    def __init__(self, device):
        self.device = device
        self.pending: dict[int, tuple] = {}
        self.tracer = getattr(device, "tracer", None)
        # rng-get-and-update-state's counter: per run, from 0, as the interpreter's.
        self.rng_state = 0


class Frame:
    """One run of one computation: the buffer of every slot and its address."""

    __slots__ = ("addrs", "bufs", "comp", "device", "need", "pending", "rs")

    def __init__(self, comp, bufs, addrs, rs: RunState, need=None):
        self.comp = comp
        self.bufs = bufs
        self.addrs = addrs
        self.rs = rs
        self.device = rs.device
        self.pending = rs.pending
        # Slot ids whose address a kernel reads (None: all). An address costs ~1 us; a
        # while loop's body would otherwise take several per iteration for nothing.
        self.need = need

    def set(self, slot: Slot, array: np.ndarray) -> None:
        self.bufs[slot.id] = array
        need = self.need
        if need is None or slot.id in need:
            self.addrs[slot.id] = address(array)

    def view(self, slot: Slot | None):
        """The logical array of a slot (None for tokens)."""
        if slot is None:
            return None
        return logical_view(slot.shape, self.bufs[slot.id])


class Thunk:
    kind = "?"
    instr: Instruction | None = None
    _slice = None

    def __init__(self):
        self.reads: list[Slot] = []
        self.writes: list[Slot] = []

    @property
    def trace_slice(self) -> TraceSlice:
        """What the timeline shows for this thunk (built on first traced run)."""
        if self._slice is None:
            self._slice = TraceSlice(self)
        return self._slice

    def run(self, frame: Frame) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        return self.kind

    def fail(self, message: str) -> ExecutionError:
        what = None
        if self.instr is not None:
            # The user's instruction, not flatten's copy (whose name may carry a prefix).
            i = getattr(self.instr.parent, "original_of", {}).get(self.instr, self.instr)
            what = f"{i.name} = {i.opcode} ({i.shape.to_text()})"
        return ExecutionError(message, instruction=what)


class TraceSlice:
    """A thunk as the Tracer's `instruction` argument: `name` (kind and the fused
    instructions), `opcode` and `parent` (the user's computation)."""

    __slots__ = ("name", "opcode", "parent")

    def __init__(self, thunk: Thunk):
        instr = thunk.instr
        orig = getattr(instr.parent, "original_of", {}).get(instr, instr) if instr else None
        self.opcode = orig.opcode if orig is not None else thunk.kind
        # The computation the thunk runs in (flatten's copy has the user's name; the
        # instruction itself may come from an inlined fusion or call).
        self.parent = instr.parent if instr is not None else None
        spec = getattr(thunk, "spec", None)
        if spec is not None:
            names = [i.name for i in spec.fused if i.opcode not in ("parameter", "constant")]
            shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
            self.name = f"kernel {spec.root.name} [{shown}]"
        else:
            what = orig.name if orig is not None else "?"
            self.name = what if thunk.kind in ("device", "control") else f"{thunk.kind} {what}"


class KernelThunk(Thunk):
    kind = "kernel"

    def __init__(self, spec, slots: list[Slot], reads, writes):
        super().__init__()
        self.spec = spec
        self.instr = spec.root
        self.slots = slots
        self.reads, self.writes = reads, writes
        self.fn = None
        # Fixed blocks of the outer dimension when the kernel is split (parallel.py).
        self.split = split_of(spec)
        self.blocks = blocks_of(self.split) if self.split is not None else None
        # Pool or caller alone, as measured (choice.py): made on the first split call.
        self.site = None
        self.range_fn = None
        self.argv = (ctypes.c_uint64 * max(len(slots), 1))()
        self.argv_addr = ctypes.addressof(self.argv)
        self.ids = [s.id for s in slots]

    def bind(self, code) -> None:
        self.fn = code.kernel(self.spec.name)
        if self.blocks is not None:
            self.range_fn = RANGE_TYPE(code.address(self.spec.name + RANGE_SUFFIX))

    def run(self, frame: Frame) -> None:
        argv = self.argv
        addrs = frame.addrs
        for i, s in enumerate(self.ids):
            argv[i] = addrs[s]
        if self.blocks is None:
            self.fn(self.argv_addr)
        else:
            if self.site is None:
                self.site = Site((POOL, ALONE), f"kernel {self.spec.name}")
            run_blocks(self.range_fn, self.argv_addr, self.blocks, self.site)

    def split_text(self) -> str:
        return describe_split(self.split)

    def describe(self) -> str:
        fused = [i.name for i in self.spec.fused if i is not self.spec.root]
        where = " in place" if self.spec.inplace else ""
        return f"kernel {self.spec.name} [{self.spec.kind}]{where} fuses {len(fused)}: " + \
            ", ".join(fused[:12]) + (" ..." if len(fused) > 12 else "")


class LibraryThunk(Thunk):
    """fn(instr, args, outs): args are the operands' logical arrays (tuples for
    tuple operands), outs the logical views of the result leaves to fill."""

    kind = "library"

    def __init__(self, instr, fn, name, operand_slots, out_slots):
        super().__init__()
        self.instr = instr
        self.fn = fn
        self.name = name
        self.operand_slots = operand_slots
        self.out_slots = out_slots
        self.reads = [s for slots in operand_slots for s in slots if s is not None]
        self.writes = [s for s in out_slots if s is not None]
        # Per operand: (shape, slot id) of an array operand, whose value is one view;
        # None for tuples and tokens (_value builds those).
        self._arrays = [(op.shape, slots[0].id) if op.shape.is_array and slots and
                        slots[0] is not None else None
                        for op, slots in zip(instr.operands, operand_slots)]

    def run(self, frame: Frame) -> None:
        bufs = frame.bufs
        args = [logical_view(a[0], bufs[a[1]]) if a is not None else
                _value(frame, op.shape, slots)
                for a, op, slots in zip(self._arrays, self.instr.operands,
                                        self.operand_slots)]
        outs = [frame.view(s) for s in self.out_slots]
        try:
            with np.errstate(all="ignore"):
                self.fn(self.instr, args, outs)
        except XlaDistError:
            raise
        except (ValueError, np.linalg.LinAlgError) as e:
            raise self.fail(f"library call {self.name} failed: {e}") from e

    def describe(self) -> str:
        return f"library {self.name}"


def _located(e: ExecutionError, thunk, device) -> ExecutionError:
    """Fill in the rank (replica, partition) and instruction, as the interpreter does."""
    if e.instruction is None and thunk is not None and thunk.instr is not None:
        e.instruction = thunk.fail("").instruction
    if e.rank is None and device is not None:
        e.rank = getattr(device, "rank", None)
        e.replica = getattr(device, "replica_id", None)
        e.partition = getattr(device, "partition_id", None)
    e.args = (e._format(),)
    return e


def thunk_error(e: Exception, thunk, device) -> Exception:
    """What running `thunk` raises for `e`: an ExecutionError located (rank, instruction),
    another xladist error as is, any other exception as an internal error naming the
    instruction (CompiledComputation.run; native loops' callbacks, native/callback.py)."""
    if isinstance(e, ExecutionError):
        return _located(e, thunk, device)
    if isinstance(e, XlaDistError):
        return e
    if isinstance(e, MemoryError):
        return _located(out_of_memory(e), thunk, device)
    err = thunk.fail(f"internal cpu backend error: {type(e).__name__}: {e}")
    return _located(err, thunk, device)


def _value(frame: Frame, shape, slots: list):
    """Interpreter-style value of an operand from its leaf slots."""
    return _build_value(frame, shape, iter(slots))


def _build_value(frame, s, it):
    if s.is_tuple:
        return tuple(_build_value(frame, t, it) for t in s.tuple_shapes)
    slot = next(it)
    if slot is None:
        from ..semantics.values import TOKEN
        return TOKEN
    # The reading instruction's shape describes the bytes: an aliasing
    # transpose/reshape shares its operand's slot with other dims.
    return logical_view(s, frame.bufs[slot.id])


def leaf_values(frame: Frame, slots) -> list:
    return [frame.bufs[s.id] if s is not None else None for s in slots]


class CompiledComputation:
    """A computation's thunks, slots and arena; `run(leaves)` -> result leaves."""

    def __init__(self, name: str, asg: Assignment, thunks: list[Thunk], param_slots,
                 root_slots, param_shapes=(), root_shapes=()):
        self.name = name
        self.param_shapes = list(param_shapes)  # flat leaf shapes (layouts of the bytes)
        self.root_shapes = list(root_shapes)
        self.asg = asg
        self.thunks = thunks
        self.param_slots = param_slots      # flat, in parameter-then-leaf order
        self.root_slots = root_slots        # flat result leaves
        # In-place facts for callers that donate the parameters (inplace.py): the
        # parameter leaves this computation writes or gives away, and per result
        # leaf where its array comes from (FRESH, a parameter leaf, None).
        self.used: frozenset = frozenset()
        self.sources: list = [None] * len(root_slots)
        self._arena = None
        self._template = None

    def _prepare(self):
        n = len(self.asg.slots)
        self._arena = np.empty(max(self.asg.arena_size, 64), dtype=np.uint8)
        bufs: list = [None] * n
        addrs = [0] * n
        base = address(self._arena)
        self._arena_range = (base, base + self._arena.nbytes)
        self._out_slots = []
        for s in self.asg.slots:
            if s.kind == "temp":
                if s.offset < 0:
                    bufs[s.id] = np.empty(s.nbytes, dtype=np.uint8)
                else:
                    bufs[s.id] = self._arena[s.offset:s.offset + s.nbytes]
                addrs[s.id] = address(bufs[s.id])
            elif s.kind == "const":
                data = s.data if s.data is not None else np.zeros(s.nbytes, np.uint8)
                bufs[s.id] = data
                addrs[s.id] = address(data)
            elif s.kind == "out":
                self._out_slots.append(s)
        self._template = (bufs, addrs)
        # Only kernels read addresses (KernelThunk.ids); other thunks read frame.bufs.
        self._need = frozenset(i for t in self.thunks for i in getattr(t, "ids", ()))
        self._param_addr = [(k, s.id) for k, s in enumerate(self.param_slots)
                            if s is not None and s.id in self._need]
        self._out_pool = {}
        self._param_ids = [s.id if s is not None else None for s in self.param_slots]
        self._root_ids = [s.id if s is not None else None for s in self.root_slots]
        self._root_dyn = [k for k, s in enumerate(self.root_slots)
                          if s is not None and s.kind == "dyn"]

    def addresses(self, leaves: list, outs: dict) -> list:
        """The address of every slot for a run on `leaves` with result buffers `outs`
        (slot id -> array), without running: native loops (native/loop.py) bind
        their kernels once for the whole loop."""
        if self._template is None:
            self._prepare()
        addrs = list(self._template[1])
        for sid, value in zip(self._param_ids, leaves):
            if sid is not None and value is not None:
                addrs[sid] = address(value)
        for sid, a in outs.items():
            addrs[sid] = address(a)
        return addrs

    def frame(self, leaves: list, outs: dict, addrs: list, rs: RunState) -> Frame:
        """A Frame on the buffers `addresses(leaves, outs)` named (this computation's arena,
        `leaves`, `outs`), for a native loop's callback (native/callback.py); it computes
        no addresses (the driver's stay fixed)."""
        if self._template is None:
            self._prepare()
        bufs = list(self._template[0])
        for sid, value in zip(self._param_ids, leaves):
            if sid is not None and value is not None:
                bufs[sid] = value
        for sid, a in outs.items():
            bufs[sid] = a
        return Frame(self, bufs, addrs, rs, frozenset())

    def run(self, leaves: list, rs: RunState, copy_arena: bool = True) -> list:
        """Result leaves of one run; copy_arena=False when the caller copies every
        result that is not a fresh buffer anyway (the executable's entry)."""
        if self._template is None:
            try:
                self._prepare()
            except MemoryError as e:
                raise _located(out_of_memory(e, f"the buffers of computation {self.name}"),
                               None, rs.device) from None
        bufs, addrs = self._template
        bufs, addrs = list(bufs), list(addrs)
        need = self._need
        frame = Frame(self, bufs, addrs, rs, need)
        for sid, value in zip(self._param_ids, leaves):
            if sid is not None and value is not None:
                bufs[sid] = value
        for k, sid in self._param_addr:
            value = leaves[k]
            if value is not None:
                addrs[sid] = address(value)
        pool = self._out_pool
        for s in self._out_slots:
            a = pool.get(s.id)
            # Reuse last run's result buffer when nobody holds it any more (the
            # pool's reference, the local `a` and getrefcount's argument): fresh
            # large buffers cost a page fault per 4 KiB on first touch.
            if a is None or sys.getrefcount(a) > 3:
                try:
                    a = np.empty(s.nbytes, dtype=np.uint8)
                except MemoryError as e:
                    what = f"the result {s.name} ({s.shape.to_text(layout=False)})"
                    raise _located(out_of_memory(e, what), None, rs.device) from None
                pool[s.id] = a
            bufs[s.id] = a
            if s.id in need:
                addrs[s.id] = address(a)
        tracer = rs.tracer
        t = None
        try:
            if tracer is None:
                for t in self.thunks:
                    t.run(frame)
            else:
                for t in self.thunks:
                    t0 = perf_counter_ns()
                    t.run(frame)
                    tracer.instruction(t.trace_slice, t0, perf_counter_ns())
        except Exception as e:  # noqa: BLE001 -- a bug in a thunk: say which instruction
            raise thunk_error(e, t, rs.device) from (None if isinstance(e, XlaDistError)
                                                     else e)
        out = [bufs[sid] if sid is not None else None for sid in self._root_ids]
        if copy_arena and self._root_dyn:
            lo, hi = self._arena_range
            for k in self._root_dyn:
                v = out[k]
                # A result that passed through from this arena (via a nested
                # computation) must not be overwritten by the next run.
                if v.nbytes and lo <= address(v) < hi:
                    out[k] = v.copy()
        return out
