"""Collectives inside native while loops, and compiled reducers as MPI user functions.

Steps (one class per opcode, STEPS): all-reduce (MPI_Allreduce, described below),
collective-permute (PermuteStep: MPI_Sendrecv, device method `native_collective_permute`)
and all-gather along a dimension with only ones before it in the default layout
(AllGatherStep: MPI_Allgather, `native_all_gather`); each is a function pointer and handles
in the loop's table, so the object gains no undefined symbol, and each call keeps the wait
bracket below.

A native loop (native/loop.py) may run all-reduce device thunks itself: its driver calls
MPI_Allreduce through a function pointer that the runtime puts in the loop's table, with
the communicator, datatype and op handles the runtime resolved once per loop run (the
compiler cannot link against MPI: compiled objects only name allowlisted symbols,
runtime_symbols.py). The device describes each all-reduce with `native_all_reduce(instr,
reducer)` (xladist/runtime/mpi_context.py), an object with

  fn          address of MPI_Allreduce in the libmpi mpi4py loaded
  count       elements of `datatype` in the buffer (fits a C int)
  datatype, op, comm   MPI handles as integers
  canonicalize  whether NaN results must become the canonical quiet NaN (a builtin
              float sum/prod: xladist/collectives/reduction.py canonicalize_nan)
  in_place    MPI_IN_PLACE's value, the send buffer of an all-reduce in place
  label, where  what the deadline reports for a wait in this call
  error_text(code)  MPI's message for a failing return code

or None when the device cannot run it natively (then the loop keeps the Python path).

Handles travel as 64-bit integer arguments: right for pointer handles (Open MPI), and for
MPICH's `int` handles on x86-64 SysV and AArch64, where an int argument is the low half of
its 64-bit argument register.

An all-reduce whose descriptor carries `ordered_fn` (native_ops.NativeOrderedAllReduce:
a reducer without a builtin, from xladist/collectives/ordered.py's size on) calls that function
instead: the order-preserving reduce-scatter + all-gather of native/ordered.py, after
writing this iteration's send and result addresses into its table (in place: both the
carry); the branch is taken at run time on the table entry.

Reducers MPI has no builtin for become MPI user-defined operations whose function is
native: `<reducer kernel>_mpi(in, inout, len, datatype)` calls the compiled reducer
kernel on the two whole buffers, `inout = f(in, inout)` (in comes from the lower ranks;
user_op.py explains why the op is non-commutative and when that is bit-identical on every
member). The runtime registers it with MPI_Op_create (xladist/collectives/native_ops.py).

Deadlines: before each call the driver stores `progress | (step + 1)` into the loop's
wait cell and `progress` after it (progress counts the calls, in units of WAIT_STEPS), so
the deadline daemon (xladist/collectives/deadline.py `begin_native`) sees which all-reduce the
loop waits in and whether it has moved since it last looked.
"""

from __future__ import annotations

from llvmlite import ir
from llvmlite.ir import instructions

from ..codegen.ir_array import c64
from ..codegen.loops import for_range
from ..codegen.types import I1, I8, I32, I64, PTR, VOID
from .ordered import T_OUT, T_SEND

# Cells the driver writes (an int64 array whose address is the first table entry):
# the iteration, the wait cell, bodies run, the failed step; the nanoseconds spent in MPI
# calls (for `--stats`), the address of clock_gettime (the runtime fills it in) and a
# timespec it writes into.
CELL_ITERATION, CELL_WAIT, CELL_BODIES, CELL_FAILED, CELL_WAIT_NS, CELL_CLOCK = range(6)
CELL_TIMESPEC = 6  # two cells: seconds, nanoseconds
N_CELLS = 8
CLOCK_MONOTONIC = 1
CLOCK_GETTIME = ir.FunctionType(I32, [I32, PTR])
# The wait cell's low bits hold the step waited in (+1); the rest counts calls.
WAIT_STEPS = 1 << 16

# Element type -> (component bits, canonical quiet NaN bits) for canonicalize_nan's rule.
_CANONICAL_NAN = {"f32": (32, 0x7FC00000), "c64": (32, 0x7FC00000),
                  "f64": (64, 0x7FF8000000000000), "c128": (64, 0x7FF8000000000000)}

MPI_ALLREDUCE = ir.FunctionType(I32, [PTR, PTR, I32, I64, I64, I64])
# native/ordered.py's function and the table entries a loop writes per call.
ORDERED_FUNCTION = ir.FunctionType(I32, [PTR])
ORDERED_SEND, ORDERED_OUT = T_SEND, T_OUT
MPI_USER_FUNCTION = ir.FunctionType(VOID, [PTR, PTR, PTR, PTR])
# MPI_Sendrecv(send, count, type, dest, tag, recv, count, type, source, tag, comm, status)
MPI_SENDRECV = ir.FunctionType(I32, [PTR, I32, I64, I32, I32, PTR, I32, I64, I32, I32, I64,
                                     PTR])
# MPI_Allgather(send, count, type, recv, count, type, comm)
MPI_ALLGATHER = ir.FunctionType(I32, [PTR, I32, I64, PTR, I32, I64, I64])


def store_monotonic(b: ir.IRBuilder, value, ptr) -> None:
    """An atomic (monotonic) i64 store: another thread (the deadline daemon) reads the cell,
    and the optimizer must neither drop nor hoist it. (IRBuilder.store_atomic wants a typed
    pointer; our pointers are opaque.)"""
    b._insert(instructions.StoreAtomicInstr(b.block, value, ptr, "monotonic", 8))


def user_function_name(kernel_name: str) -> str:
    return kernel_name + "_mpi"


def emit_user_function(module: ir.Module, kernel_name: str) -> None:
    """`void <kernel>_mpi(ptr in, ptr inout, ptr len, ptr datatype)`: the MPI_User_function
    of a reducer kernel (codegen/kernels/core.py emit_map_kernel, `void k(ptr argv, i64 n)` with
    argv = out, a, b). The datatype is one element wide, so *len counts elements."""
    fn = ir.Function(module, MPI_USER_FUNCTION, name=user_function_name(kernel_name))
    fn.attributes.add("nounwind")
    src, inout, length, _dt = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    argv = b.alloca(ir.ArrayType(PTR, 3))
    for i, p in enumerate((inout, src, inout)):
        b.store(p, b.gep(argv, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True))
    n = b.sext(b.load(length, typ=I32), I64)
    b.call(module.get_global(kernel_name), [argv, n])
    b.ret_void()


def _now_ns(b: ir.IRBuilder, cells):
    """CLOCK_MONOTONIC in nanoseconds, through the clock_gettime whose address the runtime
    left in CELL_CLOCK (the vDSO's: tens of nanoseconds, against microseconds of MPI)."""
    def cell(k):
        return b.gep(cells, [c64(k)], inbounds=True, source_etype=I64)
    fn = b.load(cell(CELL_CLOCK), typ=CLOCK_GETTIME.as_pointer())
    b.call(fn, [ir.Constant(I32, CLOCK_MONOTONIC), cell(CELL_TIMESPEC)])
    sec = b.load(cell(CELL_TIMESPEC), typ=I64)
    return b.add(b.mul(sec, c64(1_000_000_000)), b.load(cell(CELL_TIMESPEC + 1), typ=I64))


def _bracketed(b: ir.IRBuilder, cells, progress, index: int, fail, call) -> None:
    """``call()`` (an MPI call returning its i32 code) with its wait-cell bracket and its
    time added to CELL_WAIT_NS; a failing return code goes to ``fail(b, code)`` after
    CELL_FAILED = index."""
    wait = b.gep(cells, [c64(CELL_WAIT)], inbounds=True, source_etype=I64)
    waited = b.gep(cells, [c64(CELL_WAIT_NS)], inbounds=True, source_etype=I64)
    done = b.add(b.load(progress, typ=I64), c64(WAIT_STEPS))
    b.store(done, progress)
    store_monotonic(b, b.add(done, c64(index + 1)), wait)
    t0 = _now_ns(b, cells)
    rc = call()
    b.store(b.add(b.load(waited, typ=I64), b.sub(_now_ns(b, cells), t0)), waited)
    store_monotonic(b, done, wait)
    ok = b.function.append_basic_block(f"ok{index}")
    bad = b.function.append_basic_block(f"failed{index}")
    b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), ok, bad)
    b.position_at_end(bad)
    b.store(c64(index), b.gep(cells, [c64(CELL_FAILED)], inbounds=True, source_etype=I64))
    fail(b, b.zext(rc, I64))
    b.position_at_end(ok)


def _one_array(thunk, opcode: str) -> bool:
    """A device thunk of `opcode` on one static, non-empty array with one array result."""
    if thunk.kind != "device" or thunk.instr.opcode != opcode:
        return False
    if len(thunk.operand_slots) != 1 or len(thunk.operand_slots[0]) != 1 \
            or len(thunk.out_slots) != 1 or len(thunk.instr.operands) != 1:
        return False
    src, dst = thunk.instr.operands[0].shape, thunk.instr.shape
    return (src.is_array and dst.is_array and not any(src.dynamic)
            and not any(dst.dynamic) and src.size > 0 and dst.size > 0
            and thunk.operand_slots[0][0] is not None and thunk.out_slots[0] is not None)


class CollectiveStep:
    """One all-reduce device thunk that a native loop driver runs through MPI_Allreduce."""

    kind = "all-reduce"
    bind = "native_all_reduce"  # the device's method that resolves it (native/loop.py)
    # Table entries: fn, send, recv, count, datatype, op, comm, canonicalize flag, then the
    # ordered all-reduce's function and table (0, 0 unless the runtime chose it).
    N_ENTRIES = 10

    def __init__(self, thunk):
        self.thunk = thunk
        self.instr = thunk.orig
        self.src = thunk.operand_slots[0][0]
        self.dst = thunk.out_slots[0]
        shape = thunk.instr.shape
        self.canon = _CANONICAL_NAN.get(shape.element_type.name)
        self.components = shape.nbytes * 8 // self.canon[0] if self.canon else 0
        # Reduce into the operand's own buffer (native/loop.py decides; MPI_IN_PLACE).
        self.in_place = False

    @staticmethod
    def eligible(thunk) -> bool:
        """An all-reduce of one static, non-empty array whose operand and result share a
        layout (the runtime's bound_collective rule)."""
        return _one_array(thunk, "all-reduce") and \
            thunk.instr.operands[0].shape.to_text() == thunk.instr.shape.to_text()

    def entries(self, addrs, bound) -> list[int]:
        send = bound.in_place if self.in_place else addrs[self.src.id]
        return [bound.fn, send, addrs[self.dst.id], bound.count, bound.datatype,
                bound.op, bound.comm, int(bool(bound.canonicalize)),
                getattr(bound, "ordered_fn", 0), getattr(bound, "ordered_table", 0)]

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        """The call with its wait-cell bracket; `entry(k, type)` loads this step's table
        entry k. A failing return code goes to `fail(b, code)` after CELL_FAILED = index."""
        recv = entry(2, PTR)
        ordered_fn = entry(8, I64)
        via_ordered = b.function.append_basic_block(f"ordered{index}")
        via_mpi = b.function.append_basic_block(f"allreduce{index}")
        after = b.function.append_basic_block(f"allreduce{index}.done")
        b.cbranch(b.icmp_unsigned("!=", ordered_fn, c64(0)), via_ordered, via_mpi)
        # The order-preserving reduce-scatter + all-gather (xladist/collectives/ordered.py): the
        # buffers of this iteration go into its table, then one call; in place it reads
        # and writes the carry itself.
        b.position_at_end(via_ordered)
        table = entry(9, PTR)
        send = recv if self.in_place else entry(1, PTR)
        for k, ptr in ((ORDERED_SEND, send), (ORDERED_OUT, recv)):
            b.store(b.ptrtoint(ptr, I64), b.gep(table, [c64(k)], source_etype=I64))
        driver = b.inttoptr(ordered_fn, ORDERED_FUNCTION.as_pointer())
        _bracketed(b, cells, progress, index, fail, lambda: b.call(driver, [table]))
        b.branch(after)
        b.position_at_end(via_mpi)
        fn = entry(0, MPI_ALLREDUCE.as_pointer())
        send = entry(1, PTR)
        count, dt, op, comm = (entry(k, I64) for k in (3, 4, 5, 6))
        _bracketed(b, cells, progress, index, fail,
                   lambda: b.call(fn, [send, recv, b.trunc(count, I32), dt, op, comm]))
        if self.canon:
            self._emit_canonicalize(b, recv, entry(7, I64), index)
        b.branch(after)
        b.position_at_end(after)

    def _emit_canonicalize(self, b, buf, flag, index) -> None:
        """If the runtime asks for it: find a NaN with one vectorizable pass, and only then
        rewrite every NaN to the canonical one (canonicalize_nan's rule, natively)."""
        bits, nan = self.canon
        it, ft = ir.IntType(bits), (ir.FloatType() if bits == 32 else ir.DoubleType())
        fn = b.function
        scan = fn.append_basic_block(f"canon{index}")
        rewrite = fn.append_basic_block(f"canon{index}.rewrite")
        after = fn.append_basic_block(f"canon{index}.done")
        b.cbranch(b.icmp_unsigned("!=", flag, c64(0)), scan, after)
        b.position_at_end(scan)
        with for_range(b, c64(self.components), name=f"scan{index}",
                       carried=[ir.Constant(I1, 0)]) as loop:
            x = b.load(b.gep(buf, [loop.iv], source_etype=ft), typ=ft)
            loop.update([b.or_(loop.phis[0], b.fcmp_unordered("uno", x, x))])
        found = loop.results[0]
        b.cbranch(found, rewrite, after)
        b.position_at_end(rewrite)
        with for_range(b, c64(self.components), name=f"fix{index}") as loop:
            p = b.gep(buf, [loop.iv], source_etype=it)
            x = b.load(p, typ=it)
            isnan = b.fcmp_unordered("uno", b.bitcast(x, ft), b.bitcast(x, ft))
            b.store(b.select(isnan, ir.Constant(it, nan), x), p)
        b.branch(after)
        b.position_at_end(after)


class _BytesStep:
    """A collective step moving one array's bytes: table entries fn, send, recv, then the
    descriptor's FIELDS in order (xladist/collectives/native_ops.py)."""

    in_place = False
    FIELDS: tuple[str, ...] = ()

    def __init__(self, thunk):
        self.thunk = thunk
        self.instr = thunk.orig
        self.src = thunk.operand_slots[0][0]
        self.dst = thunk.out_slots[0]

    def entries(self, addrs, bound) -> list[int]:
        return [bound.fn, addrs[self.src.id], addrs[self.dst.id]] + \
            [int(getattr(bound, f)) for f in self.FIELDS]


class PermuteStep(_BytesStep):
    """One collective-permute of one array, run through MPI_Sendrecv on bytes; the device
    resolves this rank's peers once per loop run (`native_collective_permute`, MPI_PROC_NULL
    for a missing one). A rank that receives from nobody gets zeros, as on the Python path:
    the driver clears the result first when the runtime's flag says so (the result buffer
    may hold an older carry: native/loop.py swaps buffers)."""

    kind = "collective-permute"
    bind = "native_collective_permute"
    # Table entries: fn, send, recv, count (bytes), datatype (MPI_BYTE), dest, source, comm,
    # status buffer, zero flag.
    FIELDS = ("count", "datatype", "dest", "source", "comm", "status", "zero")
    N_ENTRIES = 3 + len(FIELDS)

    def __init__(self, thunk):
        super().__init__(thunk)
        self.nbytes = thunk.instr.shape.nbytes

    @staticmethod
    def eligible(thunk) -> bool:
        return _one_array(thunk, "collective-permute") and \
            thunk.instr.operands[0].shape.to_text() == thunk.instr.shape.to_text()

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        fn = entry(0, MPI_SENDRECV.as_pointer())
        send, recv = entry(1, PTR), entry(2, PTR)
        count, dt, dest, source, comm = (entry(k, I64) for k in (3, 4, 5, 6, 7))
        status, zero = entry(8, PTR), entry(9, I64)
        clear = b.function.append_basic_block(f"zero{index}")
        after = b.function.append_basic_block(f"zero{index}.done")
        b.cbranch(b.icmp_unsigned("!=", zero, c64(0)), clear, after)
        b.position_at_end(clear)
        with for_range(b, c64(self.nbytes), name=f"clear{index}") as loop:
            b.store(ir.Constant(I8, 0), b.gep(recv, [loop.iv], source_etype=I8))
        b.branch(after)
        b.position_at_end(after)
        n, tag = b.trunc(count, I32), ir.Constant(I32, 0)
        _bracketed(b, cells, progress, index, fail, lambda: b.call(
            fn, [send, n, dt, b.trunc(dest, I32), tag, recv, n, dt, b.trunc(source, I32),
                 tag, comm, status]))


class AllGatherStep(_BytesStep):
    """One all-gather of one array along its leading non-trivial dimension in the default
    layout, where the result is the members' operands one after the other: one
    MPI_Allgather on bytes (any other all-gather keeps the Python path)."""

    kind = "all-gather"
    bind = "native_all_gather"
    # Table entries: fn, send, recv, count (bytes per member), datatype (MPI_BYTE), comm.
    FIELDS = ("count", "datatype", "comm")
    N_ENTRIES = 3 + len(FIELDS)

    @staticmethod
    def eligible(thunk) -> bool:
        if not _one_array(thunk, "all-gather"):
            return False
        src, dst = thunk.instr.operands[0].shape, thunk.instr.shape
        dims = thunk.instr.attrs.get("dimensions")
        if not dims or len(dims) != 1 or src.element_type != dst.element_type \
                or not (src.has_default_layout() and dst.has_default_layout()):
            return False
        dim = int(dims[0])
        return 0 <= dim < len(src.dims) and all(d == 1 for d in src.dims[:dim])

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        fn = entry(0, MPI_ALLGATHER.as_pointer())
        send, recv = entry(1, PTR), entry(2, PTR)
        count, dt, comm = (entry(k, I64) for k in (3, 4, 5))
        n = b.trunc(count, I32)
        _bracketed(b, cells, progress, index, fail,
                   lambda: b.call(fn, [send, n, dt, recv, n, dt, comm]))


# A run the deadlock check did not prove has each collective step's members compare what
# they issue before the call (runtime/signatures.py NativeAgreement; the Python path's
# exchange, byte for byte): its table entries, after the step's own (and its callback's),
# are fn (0: no exchange), mine, theirs, rows, count, datatype, comm, dest, source, status.
AGREE_ENTRIES = 10
# What the driver returns when they differ: never an MPI error code (those are > 0).
DISAGREE = -21


def emit_agreement(b: ir.IRBuilder, entry, cells, progress, index: int, fail,
                   pairwise: bool) -> None:
    """The exchange before step `index` when its fn entry is non-zero: MPI_Allgather of
    each member's `count` bytes (a group), or MPI_Sendrecv with a collective-permute's
    peers (`pairwise`; a missing source leaves `theirs` as the runtime filled it: mine);
    then each of the `rows` rows of `theirs` must start with mine's 16-byte digest, else
    the driver returns DISAGREE after CELL_FAILED = index."""
    fn = entry(0, I64)
    go = b.function.append_basic_block(f"agree{index}")
    after = b.function.append_basic_block(f"agree{index}.done")
    b.cbranch(b.icmp_unsigned("!=", fn, c64(0)), go, after)
    b.position_at_end(go)
    mine, theirs = entry(1, PTR), entry(2, PTR)
    rows, count = entry(3, I64), entry(4, I64)
    dt, comm = entry(5, I64), entry(6, I64)
    n = b.trunc(count, I32)
    if pairwise:
        call = b.inttoptr(fn, MPI_SENDRECV.as_pointer())
        dest, source, status = entry(7, I64), entry(8, I64), entry(9, PTR)
        tag = ir.Constant(I32, 0)
        _bracketed(b, cells, progress, index, fail, lambda: b.call(
            call, [mine, n, dt, b.trunc(dest, I32), tag, theirs, n, dt,
                   b.trunc(source, I32), tag, comm, status]))
    else:
        call = b.inttoptr(fn, MPI_ALLGATHER.as_pointer())
        _bracketed(b, cells, progress, index, fail,
                   lambda: b.call(call, [mine, n, dt, theirs, n, dt, comm]))
    m0 = b.load(mine, typ=I64)
    m1 = b.load(b.gep(mine, [c64(1)], source_etype=I64), typ=I64)
    with for_range(b, rows, name=f"agree{index}.row", carried=[ir.Constant(I1, 0)]) as loop:
        row = b.gep(theirs, [b.mul(loop.iv, count)], source_etype=I8)
        r0 = b.load(row, typ=I64)
        r1 = b.load(b.gep(row, [c64(1)], source_etype=I64), typ=I64)
        loop.update([b.or_(loop.phis[0], b.or_(b.icmp_unsigned("!=", r0, m0),
                                                 b.icmp_unsigned("!=", r1, m1)))])
    bad = b.function.append_basic_block(f"agree{index}.apart")
    b.cbranch(loop.results[0], bad, after)
    b.position_at_end(bad)
    b.store(c64(index), b.gep(cells, [c64(CELL_FAILED)], inbounds=True, source_etype=I64))
    fail(b, c64(DISAGREE))
    b.position_at_end(after)


# The collectives a native loop runs, by opcode (native/loop.py picks the step).
STEPS = {s.kind: s for s in (CollectiveStep, PermuteStep, AllGatherStep)}


def eligible(thunk) -> bool:
    step = STEPS.get(thunk.instr.opcode) if thunk.kind == "device" else None
    return step is not None and step.eligible(thunk)
