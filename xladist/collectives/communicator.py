"""One interface over which the collective families run, with an MPI and an in-process twin.

Shaped like XLA's CPU ``Communicator`` (in-process / gloo / MPI implementations) and mpi4jax:
the collective modules (``all_reduce.py`` ...) deal with HLO semantics -- dimensions, tuples,
dtypes, reducers -- and call the small set of buffer primitives below, which only move bytes
or apply an MPI reduction.

Buffer conventions for every primitive:

* ``send``/``recv`` are C-contiguous numpy arrays; data-movement primitives (allgather,
  alltoall, permute, bcast) treat them as raw bytes, so any dtype (bf16, f8, bool) works;
* reductions (allreduce, reduce_scatter_block) take a dtype MPI knows natively and an op name
  from :func:`xladist.collectives.reduction.builtin_op`, or any dtype and a Reducer, which runs as an
  MPI user-defined op (xladist/collectives/user_op.py);
* ``alltoallv`` moves whole rows of ``row_bytes`` bytes: its counts and displacements are row
  numbers (one contiguous MPI datatype per row size), so they stay small integers for any buffer
  size;
* the ``i*`` variants return a :class:`Request` whose ``wait()`` completes the operation; the
  buffers must stay untouched until then (the request keeps them alive);
* every member of the communicator calls every primitive in the same order (collective-permute
  included: members that neither send nor receive still call ``permute`` with ``None``s).

:class:`MpiCommunicator` puts every blocking call and every ``wait()`` under the process
deadline (:mod:`xladist.collectives.deadline`).  :class:`InProcessCommunicator` runs ranks as threads in
one process for fast unit tests; its waits raise :class:`CollectiveError` on timeout or when
members disagree on which collective comes next.

:class:`CommunicatorCache` builds one sub-communicator per distinct device group, by
``split`` over the world communicator, and maps device ids to world ranks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from . import deadline as _deadline
from xladist.hlo.collective_groups import GroupError
from .user_op import raise_pending as _raise_pending
from .user_op import user_op as _user_op

__all__ = [
    "CollectiveError",
    "Communicator",
    "CommunicatorCache",
    "InProcessCommunicator",
    "MpiCommunicator",
    "Request",
    "in_process_world",
    "run_in_threads",
]


# Result arrays at least this large are recycled (see Communicator.result): from here a
# recycled buffer costs less than np.empty (measured 0.18 against 0.30 us at 32 KiB), and
# the reduce-scatter of a 64 KiB operand over up to 4 members has its result recycled too.
REUSE_MIN_BYTES = 1 << 14
REUSE_RESULTS = os.environ.get("XLADIST_REUSE_RESULTS", "1") != "0"
# Distinct (shape, dtype) keys kept, and buffers per key: two, because a consumer usually
# still holds the previous result while it asks for the next one (the executor replaces
# an instruction's value only once the collective returned; a loop carries last
# iteration's value), so a single buffer would be busy on every call and each call would
# allocate -- and, for large arrays, fault in -- a fresh one.
_POOL_ENTRIES = 8
_PER_KEY = 2
# Bound fast paths kept per communicator (Communicator.bound): one per distinct call shape.
_BOUND_ENTRIES = 64
# Results from this size are placed (Communicator.placed): they start PLACE_APART bytes past
# their operand's page offset. MPI copies the operand and other members' data into the
# result through page-aligned shared-memory cells; a destination at the same page offset as
# its source stalls the copy on false store-to-load dependencies (4K aliasing). Measured,
# 2-rank MPI_Allgather, send buffer at page offset 0, receive buffer at 0 / 2048: 1 MiB
# 104 / 82 us, 4 MiB 358 / 212 us (16 MiB, memory-bound: no difference); with the send buffer
# at 2048 the receive buffer at 2048 was the slow one. Below 512 KiB the ~2 us spent
# reading the operand's address would cost more than the placement saves.
PLACE_MIN_BYTES = 1 << 19
PLACE_APART = 2048
_PAGE = 4096


class CollectiveError(RuntimeError):
    """A collective could not run: misuse, mismatch between members, or a timeout."""


def _bytes(a: np.ndarray) -> np.ndarray:
    """Flat uint8 view of a C-contiguous array (works for 0-d and extension dtypes)."""
    return a.reshape(-1).view(np.uint8)


class Request(ABC):
    """A started operation; ``wait()`` blocks until it is complete."""

    @abstractmethod
    def wait(self) -> None: ...


class _Done(Request):
    def wait(self) -> None:
        return None


DONE = _Done()


class Communicator(ABC):
    """An ordered group of ranks.  ``rank`` is this member's position in ``devices``."""

    rank: int
    size: int
    devices: list[int] | None

    def __init__(self, rank: int, size: int, devices: Sequence[int] | None):
        self.rank = rank
        self.size = size
        self.devices = list(devices) if devices is not None else None
        self._scratch: dict[str, np.ndarray] = {}
        self._results: dict[tuple, list[np.ndarray]] = {}
        # key -> [raw uint8 buffers with a page of slack], [their addresses] (placed()).
        self._placed: dict[tuple, tuple[list[np.ndarray], list[int]]] = {}
        # (family, shape, dtype, ...) -> f(x, label) of that call with every decision made
        # (collective modules' fast paths; see bound()).
        self._bound: dict[tuple, Callable] = {}

    def __str__(self) -> str:
        if self.devices is not None:
            return f"group {self.devices}"
        return f"communicator of {self.size} ranks"

    def scratch(self, slot: str, nbytes: int) -> np.ndarray:
        """A reusable uint8 buffer of at least ``nbytes`` for staging in blocking calls.

        Reusing staging memory avoids page-faulting fresh pages on every large message, which
        costs more than the copy itself.  Only for data that is dead once the call returns.
        """
        buf = self._scratch.get(slot)
        if buf is None or buf.nbytes < nbytes:
            buf = np.empty(max(nbytes, 64), np.uint8)
            self._scratch[slot] = buf
        return buf[:nbytes]

    def result(self, shape: tuple[int, ...], dtype: np.dtype, like=None) -> np.ndarray:
        """A result array nobody else references: recycled if large and free, else new.
        From PLACE_MIN_BYTES it is placed (:meth:`placed`) relative to ``like``, the
        operand whose bytes MPI copies into it (None: at page offset PLACE_APART).

        MPI into a buffer whose pages are already mapped is faster than into a fresh
        allocation (page faults cost more than the copy), so the last large results of each
        (shape, dtype) -- two: see _PER_KEY -- are kept and handed out again once the caller
        has dropped every reference to them (including views and buffer exports, which hold
        a reference).  Callers therefore see fresh arrays; code that keeps only a raw pointer
        to a result must keep the array alive too.  XLADIST_REUSE_RESULTS=0 turns recycling
        off.
        """
        dtype = np.dtype(dtype)
        size = 1
        for d in shape:
            size *= d
        nbytes = size * dtype.itemsize
        if nbytes < REUSE_MIN_BYTES or not REUSE_RESULTS:
            return np.empty(shape, dtype)
        if nbytes >= PLACE_MIN_BYTES:
            near = None if like is None else np.asarray(like).ctypes.data
            return self.placed((shape, dtype), nbytes, near)
        return self.recycled((shape, dtype))

    def placed(self, key: tuple, nbytes: int, near: int | None) -> np.ndarray:
        """:meth:`recycled` for a result of ``nbytes`` >= PLACE_MIN_BYTES: the array starts
        PLACE_APART bytes (rounded down to 64) past the page offset of address ``near`` (the
        operand's), or at page offset PLACE_APART when None (see PLACE_MIN_BYTES). It is a
        view of a pooled buffer with a page of slack, free again once every view of it is
        dropped."""
        entry = self._placed.get(key)
        if entry is None:
            if len(self._placed) >= _POOL_ENTRIES:
                self._placed.pop(next(iter(self._placed)))
            entry = self._placed[key] = ([], [])
        raws, addrs = entry
        for i in range(len(raws)):
            # References: the list and getrefcount's argument -> 2: no view is alive.
            if sys.getrefcount(raws[i]) == 2:
                raw, addr = raws[i], addrs[i]
                break
        else:
            if len(raws) >= _PER_KEY:
                raws.pop(0)  # all busy (kept longer than one call): the oldest leaves
                addrs.pop(0)
            raw = np.empty(nbytes + _PAGE, np.uint8)
            addr = raw.ctypes.data
            raws.append(raw)
            addrs.append(addr)
        want = (((near or 0) & ~63) + PLACE_APART) % _PAGE
        return np.ndarray(key[0], key[1], raw, (want - addr) % _PAGE)

    def recycled(self, key: tuple) -> np.ndarray:
        """:meth:`result` of ``key`` = (shape, dtype) for a large result (callers that decided
        the size test once, like the bound fast paths)."""
        bufs = self._results.get(key)
        if bufs is not None:
            for arr in bufs:
                # References: the list, `arr`, getrefcount's argument -> 3: nobody else.
                if sys.getrefcount(arr) == 3:
                    return arr
        return self._grow(key, bufs)

    def _grow(self, key: tuple, bufs: list | None) -> np.ndarray:
        arr = np.empty(*key)
        pool = self._results
        if bufs is None:
            if len(pool) >= _POOL_ENTRIES:
                pool.pop(next(iter(pool)))
            bufs = pool[key] = []
        elif len(bufs) >= _PER_KEY:
            bufs.pop(0)  # all busy (kept longer than one call): the oldest leaves the pool
        bufs.append(arr)
        return arr

    def bound(self, key: tuple, make: Callable[[], Callable | None]) -> Callable | None:
        """The fast path stored under ``key`` (made by ``make()`` on first use; None when
        the call shape has none).  The collective modules key it by everything their
        decisions depend on, so a repeated call skips straight to its MPI call."""
        try:
            return self._bound[key]
        except KeyError:
            pass
        if len(self._bound) >= _BOUND_ENTRIES:
            self._bound.clear()
        fn = self._bound[key] = make()
        return fn

    # -- primitives ------------------------------------------------------------------------
    @abstractmethod
    def iallreduce(self, send: np.ndarray, recv: np.ndarray, op: str, label=None) -> Request:
        ...

    @abstractmethod
    def iallgather(self, send: np.ndarray, recv: np.ndarray, label=None) -> Request: ...

    @abstractmethod
    def ialltoall(self, send: np.ndarray, recv: np.ndarray, label=None) -> Request: ...

    @abstractmethod
    def ialltoallv(self, send: np.ndarray, send_counts: Sequence[int],
                   send_displs: Sequence[int], recv: np.ndarray, recv_counts: Sequence[int],
                   recv_displs: Sequence[int], row_bytes: int, label=None) -> Request:
        """Member j gets ``send_counts[j]`` rows from row ``send_displs[j]`` of ``send``; what
        member i sends lands at row ``recv_displs[i]`` of ``recv`` (``recv_counts[i]`` rows, which
        must equal what i sends).  Rows are ``row_bytes`` bytes; ``row_bytes`` > 0."""

    @abstractmethod
    def ireduce_scatter_block(self, send: np.ndarray, recv: np.ndarray, op: str,
                              label=None) -> Request: ...

    @abstractmethod
    def ipermute(self, send: np.ndarray, recv: np.ndarray, dest: int | None,
                 source: int | None, label=None) -> Request:
        """Send ``send`` to ``dest`` and receive ``recv`` from ``source`` (either may be None)."""

    @abstractmethod
    def ibcast(self, buf: np.ndarray, root: int, label=None) -> Request: ...

    @abstractmethod
    def split(self, color: int | None, key: int,
              devices: Sequence[int] | None = None) -> Communicator | None:
        """Collective over this communicator; members with equal color form a new one, ordered
        by key.  ``color=None`` opts out (returns None)."""

    # Blocking forms; implementations override them where a blocking call is cheaper.
    def allreduce(self, send, recv, op, label=None) -> None:
        self.iallreduce(send, recv, op, label).wait()

    def allgather(self, send, recv, label=None) -> None:
        self.iallgather(send, recv, label).wait()

    def alltoall(self, send, recv, label=None) -> None:
        self.ialltoall(send, recv, label).wait()

    def alltoallv(self, send, send_counts, send_displs, recv, recv_counts, recv_displs,
                  row_bytes, label=None) -> None:
        self.ialltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs,
                        row_bytes, label).wait()

    def reduce_scatter_block(self, send, recv, op, label=None) -> None:
        self.ireduce_scatter_block(send, recv, op, label).wait()

    def permute(self, send, recv, dest, source, label=None) -> None:
        self.ipermute(send, recv, dest, source, label).wait()

    def bcast(self, buf, root, label=None) -> None:
        self.ibcast(buf, root, label).wait()

    @abstractmethod
    def barrier(self, label=None) -> None: ...


# ================================================================================================
# MPI
# ================================================================================================

_MPI = None
_MPI_OPS: dict[str, object] = {}
_BYTE = None


def _mpi():
    global _MPI, _BYTE
    if _MPI is None:
        from mpi4py import MPI

        _MPI = MPI
        # Data moves as [array, MPI.BYTE]: works for every dtype (bf16, f8, 0-d) without
        # making view objects, which cost several us per large call in mpi4py/MPICH here.
        _BYTE = MPI.BYTE
        _MPI_OPS.update(sum=MPI.SUM, prod=MPI.PROD, min=MPI.MIN, max=MPI.MAX,
                        band=MPI.BAND, bor=MPI.BOR, bxor=MPI.BXOR)
    return _MPI


# row size in bytes -> committed contiguous MPI datatype; process-wide, like MPI datatypes, and
# never freed: a program has a handful of distinct row sizes.
_ROW_TYPES: dict[int, object] = {}


def _row_type(row_bytes: int):
    t = _ROW_TYPES.get(row_bytes)
    if t is None:
        t = _ROW_TYPES[row_bytes] = _BYTE.Create_contiguous(row_bytes).Commit()
    return t


class _MpiRequest(Request):
    __slots__ = ("comm", "keep", "label", "reqs")

    def __init__(self, reqs, label, comm, keep):
        self.reqs = reqs
        self.label = label
        self.comm = comm
        self.keep = keep  # buffers must outlive the MPI request

    def wait(self) -> None:
        reqs = self.reqs
        if reqs is None:
            return
        wd = _deadline.watchdog
        token = wd.begin(self.label, self.comm)
        try:
            if len(reqs) == 1:
                reqs[0].Wait()
            else:
                _MPI.Request.Waitall(reqs)
        finally:
            wd.end(token)
        self.reqs = None
        self.keep = None


class _MpiUserRequest(_MpiRequest):
    """A reduction with a user-defined op: its callback's error surfaces at wait()."""

    __slots__ = ()

    def wait(self) -> None:
        label = self.label
        super().wait()
        _raise_pending(label)


class MpiCommunicator(Communicator):
    """A Communicator over an mpi4py intracommunicator."""

    def __init__(self, comm=None, devices: Sequence[int] | None = None):
        MPI = _mpi()
        comm = MPI.COMM_WORLD if comm is None else comm
        super().__init__(comm.Get_rank(), comm.Get_size(), devices)
        self.comm = comm
        self._wd = _deadline.watchdog
        self._ordered: dict = {}  # xladist/collectives/ordered.py: native calls made once per shape

    # Each blocking call is bracketed by watchdog begin/end: two attribute stores, no syscall.
    def _reduce(self, call, send, recv, op, label):
        """A blocking MPI reduction with a builtin op name or a Reducer (user-defined op)."""
        token = self._wd.begin(label, self)
        try:
            if type(op) is str:
                call(send, recv, _MPI_OPS[op])
            else:
                mop, dt = _user_op(_MPI, op, send.dtype)
                call([send, dt], [recv, dt], mop)
                _raise_pending(label)
        finally:
            self._wd.end(token)

    def bound_allreduce(self, op, dtype: np.dtype, label: str):
        """``f(send, recv)``: MPI_Allreduce of two flat contiguous buffers of the same bytes
        (any view, e.g. uint8) as ``dtype`` elements, with everything but the call decided
        now -- for all-reduces repeated in loops (xladist/runtime/mpi_context.py); None when MPI has
        no predefined datatype for ``dtype``. The wait keeps its deadline: the same watchdog
        begin/end as every blocking call."""
        MPI = _mpi()
        if type(op) is str:
            # The predefined datatype: builtin ops refuse a derived (dup'ed) one.
            mop, dt, check = _MPI_OPS[op], MPI._typedict.get(np.dtype(dtype).char), None
            if dt is None:
                return None
        else:
            (mop, dt), check = _user_op(MPI, op, np.dtype(dtype)), _raise_pending
        call, wd = self.comm.Allreduce, self._wd

        def allreduce(send, recv):
            token = wd.begin(label, self)
            try:
                call([send, dt], [recv, dt], mop)
                if check is not None:
                    check(label)
            finally:
                wd.end(token)
        return allreduce

    def native_allreduce(self, op, dtype: np.dtype, nbytes: int, label: str,
                         user_function: int | None, canonicalize: bool):
        """The MPI_Allreduce of ``nbytes`` as ``dtype`` elements as native code calls it
        (xladist/collectives/native_ops.py); None where native code cannot make the call: a
        Reducer without a native MPI_User_function, no predefined datatype, too many
        elements for a C int, or handles native code cannot pass."""
        from . import native_ops
        MPI = _mpi()
        if not native_ops.available():
            return None
        dtype = np.dtype(dtype)
        if type(op) is str:
            dt = MPI._typedict.get(dtype.char)
            if dt is None:
                return None
            mop, dt = native_ops.handle(_MPI_OPS[op]), native_ops.handle(dt)
        elif user_function:
            mop, dt = native_ops.native_op(user_function), native_ops.element_type(dtype.itemsize)
        else:
            return None
        count = nbytes // dtype.itemsize
        if count >= 1 << 31:
            return None
        return native_ops.NativeAllReduce(native_ops.function_address("MPI_Allreduce"), count,
                                          dt, mop, native_ops.handle(self.comm),
                                          canonicalize, label, self,
                                          native_ops.in_place_address())

    def native_permute(self, dest: int | None, source: int | None, nbytes: int, label: str):
        """The Sendrecv of ``permute`` (``nbytes`` each way) as native code calls it
        (xladist/collectives/native_ops.py NativePermute); None where native code cannot make it."""
        import ctypes

        from . import native_ops
        MPI = _mpi()
        if not native_ops.available() or nbytes >= 1 << 31:
            return None
        status = ctypes.create_string_buffer(max(MPI._sizeof(MPI.Status), 64))
        null = MPI.PROC_NULL
        return native_ops.NativePermute(
            native_ops.function_address("MPI_Sendrecv"), nbytes, native_ops.handle(_BYTE),
            (null if dest is None else dest) & 0xFFFFFFFFFFFFFFFF,
            (null if source is None else source) & 0xFFFFFFFFFFFFFFFF,
            native_ops.handle(self.comm), ctypes.addressof(status), source is None, label,
            self, status)

    def native_allgather(self, nbytes: int, label: str):
        """The Allgather of ``allgather`` (``nbytes`` from each member) as native code calls
        it (xladist/collectives/native_ops.py NativeAllGather); None where native code cannot."""
        from . import native_ops
        _mpi()
        if not native_ops.available() or nbytes * self.size >= 1 << 31:
            return None
        return native_ops.NativeAllGather(native_ops.function_address("MPI_Allgather"),
                                          nbytes, native_ops.handle(_BYTE),
                                          native_ops.handle(self.comm), label, self)

    def _ireduce(self, call, send, recv, op, label):
        if type(op) is str:
            return _MpiRequest([call(send, recv, _MPI_OPS[op])], label, self, (send, recv))
        mop, dt = _user_op(_MPI, op, send.dtype)
        return _MpiUserRequest([call([send, dt], [recv, dt], mop)], label, self, (send, recv))

    def allreduce(self, send, recv, op, label=None):
        self._reduce(self.comm.Allreduce, send, recv, op, label or "all-reduce")

    def iallreduce(self, send, recv, op, label=None):
        return self._ireduce(self.comm.Iallreduce, send, recv, op, label or "all-reduce")

    def allgather(self, send, recv, label=None):
        token = self._wd.begin(label or "all-gather", self)
        try:
            self.comm.Allgather([send, _BYTE], [recv, _BYTE])
        finally:
            self._wd.end(token)

    def iallgather(self, send, recv, label=None):
        s, r = [send, _BYTE], [recv, _BYTE]
        return _MpiRequest([self.comm.Iallgather(s, r)], label or "all-gather", self, (s, r))

    def alltoall(self, send, recv, label=None):
        token = self._wd.begin(label or "all-to-all", self)
        try:
            self.comm.Alltoall([send, _BYTE], [recv, _BYTE])
        finally:
            self._wd.end(token)

    def ialltoall(self, send, recv, label=None):
        s, r = [send, _BYTE], [recv, _BYTE]
        return _MpiRequest([self.comm.Ialltoall(s, r)], label or "all-to-all", self, (s, r))

    def _vspec(self, buf, counts, displs, row_bytes):
        return [buf, (list(map(int, counts)), list(map(int, displs))), _row_type(row_bytes)]

    def alltoallv(self, send, send_counts, send_displs, recv, recv_counts, recv_displs,
                  row_bytes, label=None):
        s = self._vspec(send, send_counts, send_displs, row_bytes)
        r = self._vspec(recv, recv_counts, recv_displs, row_bytes)
        token = self._wd.begin(label or "all-to-all-v", self)
        try:
            self.comm.Alltoallv(s, r)
        finally:
            self._wd.end(token)

    def ialltoallv(self, send, send_counts, send_displs, recv, recv_counts, recv_displs,
                   row_bytes, label=None):
        s = self._vspec(send, send_counts, send_displs, row_bytes)
        r = self._vspec(recv, recv_counts, recv_displs, row_bytes)
        return _MpiRequest([self.comm.Ialltoallv(s, r)], label or "all-to-all-v", self, (s, r))

    def reduce_scatter_block(self, send, recv, op, label=None):
        self._reduce(self.comm.Reduce_scatter_block, send, recv, op, label or "reduce-scatter")

    def ireduce_scatter_block(self, send, recv, op, label=None):
        return self._ireduce(self.comm.Ireduce_scatter_block, send, recv, op,
                             label or "reduce-scatter")

    def permute(self, send, recv, dest, source, label=None):
        MPI = _MPI
        token = self._wd.begin(label or "collective-permute", self)
        try:
            # PROC_NULL turns the missing half into a no-op, so one call covers every case.
            self.comm.Sendrecv([send, _BYTE], MPI.PROC_NULL if dest is None else dest, 0,
                               [recv, _BYTE], MPI.PROC_NULL if source is None else source, 0)
        finally:
            self._wd.end(token)

    def ipermute(self, send, recv, dest, source, label=None):
        reqs = []
        s, r = [send, _BYTE], [recv, _BYTE]
        if source is not None:
            reqs.append(self.comm.Irecv(r, source, 0))
        if dest is not None:
            reqs.append(self.comm.Isend(s, dest, 0))
        if not reqs:
            return DONE
        return _MpiRequest(reqs, label or "collective-permute", self, (s, r))

    def bcast(self, buf, root, label=None):
        token = self._wd.begin(label or "collective-broadcast", self)
        try:
            self.comm.Bcast([buf, _BYTE], root)
        finally:
            self._wd.end(token)

    def ibcast(self, buf, root, label=None):
        b = [buf, _BYTE]
        return _MpiRequest([self.comm.Ibcast(b, root)], label or "collective-broadcast", self,
                           (b,))

    def barrier(self, label=None):
        token = self._wd.begin(label or "barrier", self)
        try:
            self.comm.Barrier()
        finally:
            self._wd.end(token)

    def split(self, color, key, devices=None):
        MPI = _MPI
        token = self._wd.begin("communicator split", self)
        try:
            sub = self.comm.Split(MPI.UNDEFINED if color is None else color, key)
        finally:
            self._wd.end(token)
        if sub == MPI.COMM_NULL:
            return None
        return MpiCommunicator(sub, devices)

    def free(self) -> None:
        """Release the MPI communicator (not for COMM_WORLD / COMM_SELF)."""
        MPI = _MPI
        if self.comm not in (MPI.COMM_WORLD, MPI.COMM_SELF) and self.comm != MPI.COMM_NULL:
            self.comm.Free()


# ================================================================================================
# In-process twin: ranks are threads
# ================================================================================================

_NP_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
           "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def _np_op(op):
    """A builtin op name's ufunc, or a Reducer's ``fn`` cast back to the operand dtype (the
    user-op path: left fold in rank order, which is what MPI's tree computes there)."""
    if type(op) is str:
        return _NP_OPS[op]
    fn = op.fn

    def combine(a, b):
        with np.errstate(all="ignore"):
            return np.asarray(fn(a, b)).astype(a.dtype, copy=False)

    return combine


class _Slot:
    __slots__ = ("arrived", "done", "error", "ops", "payloads", "readers", "result")

    def __init__(self, size: int):
        self.payloads = [None] * size
        self.ops: list[str | None] = [None] * size
        self.arrived = 0
        self.done = False
        self.result = None
        self.error: str | None = None
        self.readers = 0


class _Rendezvous:
    """Shared by the N members of one in-process communicator.  The k-th call of every member
    meets in slot k; the last to arrive combines the payloads once, under the lock, so every
    member reads the same result object."""

    def __init__(self, size: int):
        self.size = size
        self.cond = threading.Condition()
        self.slots: dict[int, _Slot] = {}


class _InProcRequest(Request):
    __slots__ = ("_result", "comm", "extract", "label", "seq", "slot")

    def __init__(self, comm, seq, slot, label, extract):
        self.comm, self.seq, self.slot, self.label, self.extract = comm, seq, slot, label, extract

    def wait(self):
        if self.slot is None:
            return self._result
        result = self.comm._wait(self.seq, self.slot, self.label)
        self.slot = None
        out = self.extract(result)
        self._result = out
        return out


class InProcessCommunicator(Communicator):
    """Threads-as-ranks twin of MpiCommunicator (see :func:`in_process_world`)."""

    def __init__(self, rendezvous: _Rendezvous, rank: int, devices=None, timeout_s=None):
        super().__init__(rank, rendezvous.size, devices)
        self._rv = rendezvous
        self._seq = 0
        self.timeout_s = (_deadline.watchdog.timeout_s or 60.0) if timeout_s is None \
            else timeout_s

    def _post(self, op: str, label, payload, combine: Callable, extract: Callable) -> Request:
        rv = self._rv
        seq = self._seq
        self._seq += 1
        with rv.cond:
            slot = rv.slots.get(seq)
            if slot is None:
                slot = rv.slots[seq] = _Slot(rv.size)
            slot.payloads[self.rank] = payload
            slot.ops[self.rank] = op
            slot.arrived += 1
            if slot.arrived == rv.size:
                if len(set(slot.ops)) > 1:
                    runs = ", ".join(f"rank {r} runs {o}" for r, o in enumerate(slot.ops))
                    slot.error = f"members disagree on collective #{seq} of {self}: {runs}"
                else:
                    try:
                        slot.result = combine(slot.payloads)
                    except Exception as e:  # noqa: BLE001 -- reported to every member, not only the combiner
                        slot.error = f"{op} failed while combining: {type(e).__name__}: {e}"
                slot.done = True
                rv.cond.notify_all()
        return _InProcRequest(self, seq, slot, label or op, extract)

    def _wait(self, seq: int, slot: _Slot, label: str):
        rv = self._rv
        end = time.monotonic() + self.timeout_s
        with rv.cond:
            while not slot.done:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    missing = [r for r, o in enumerate(slot.ops) if o is None]
                    raise CollectiveError(
                        f"rank {self.rank}: timed out after {self.timeout_s:g} s waiting in "
                        f"{label} over {self}; ranks {missing} never arrived")
                rv.cond.wait(remaining)
            slot.readers += 1
            if slot.readers == rv.size:
                del rv.slots[seq]
        if slot.error:
            raise CollectiveError(f"rank {self.rank}: {slot.error}")
        return slot.result

    # -- primitives ------------------------------------------------------------------------
    def iallreduce(self, send, recv, op, label=None):
        ufunc = _np_op(op)

        def combine(ps):
            acc = ps[0]
            for p in ps[1:]:
                acc = ufunc(acc, p)
            return acc

        return self._post("all-reduce", label, send.copy(), combine,
                          lambda res: np.copyto(recv, res))

    def iallgather(self, send, recv, label=None):
        return self._post("all-gather", label, _bytes(send).copy(), list,
                          lambda ps: np.copyto(_bytes(recv), np.concatenate(ps)))

    def ialltoall(self, send, recv, label=None):
        n, me = self.size, self.rank

        def extract(ps):
            out = _bytes(recv).reshape(n, -1)
            for i, p in enumerate(ps):
                out[i] = p.reshape(n, -1)[me]

        return self._post("all-to-all", label, _bytes(send).copy(), list, extract)

    def ialltoallv(self, send, send_counts, send_displs, recv, recv_counts, recv_displs,
                   row_bytes, label=None):
        me = self.rank
        rb = int(row_bytes)
        src = _bytes(send)
        # What this member sends to each peer, as separate byte strings (copies: the caller may
        # reuse its buffer as soon as the request completes).
        payload = [src[int(d) * rb:(int(d) + int(c)) * rb].copy()
                   for c, d in zip(send_counts, send_displs)]

        def extract(ps):
            dst = _bytes(recv)
            for i, chunks in enumerate(ps):
                data = chunks[me]
                if data.size != int(recv_counts[i]) * rb:
                    raise CollectiveError(
                        f"rank {me}: all-to-all-v over {self}: expected {int(recv_counts[i])} "
                        f"rows from rank {i}, but it sends {data.size // rb}")
                start = int(recv_displs[i]) * rb
                dst[start:start + data.size] = data

        return self._post("all-to-all-v", label, payload, list, extract)

    def ireduce_scatter_block(self, send, recv, op, label=None):
        ufunc = _np_op(op)
        n, me = self.size, self.rank

        def combine(ps):
            acc = ps[0]
            for p in ps[1:]:
                acc = ufunc(acc, p)
            return acc.reshape(n, -1)

        return self._post("reduce-scatter", label, send.reshape(-1).copy(), combine,
                          lambda res: np.copyto(recv.reshape(-1), res[me]))

    def ipermute(self, send, recv, dest, source, label=None):
        me = self.rank

        def extract(ps):
            if source is None:
                return
            data, their_dest = ps[source]
            if their_dest != me:
                raise CollectiveError(
                    f"rank {me}: collective-permute over {self}: expected data from rank "
                    f"{source}, but it sends to {their_dest}")
            np.copyto(_bytes(recv), data)

        payload = (_bytes(send).copy() if dest is not None else None, dest)
        return self._post("collective-permute", label, payload, list, extract)

    def ibcast(self, buf, root, label=None):
        me = self.rank
        payload = _bytes(buf).copy() if me == root else None

        def extract(ps):
            if me != root:
                np.copyto(_bytes(buf), ps[root])

        return self._post("collective-broadcast", label, payload, list, extract)

    def barrier(self, label=None):
        self._post("barrier", label, None, lambda ps: None, lambda r: None).wait()

    def split(self, color, key, devices=None):
        timeout = self.timeout_s

        def combine(ps):
            members: dict[int, list[tuple[int, int]]] = {}
            for r, (c, k) in enumerate(ps):
                if c is not None:
                    members.setdefault(c, []).append((k, r))
            return {c: (_Rendezvous(len(m)), [r for _, r in sorted(m)])
                    for c, m in members.items()}

        def extract(groups):
            if color is None:
                return None
            rv, ranks = groups[color]
            return InProcessCommunicator(rv, ranks.index(self.rank), devices, timeout)

        return self._post("split", None, (color, key), combine, extract).wait()


def in_process_world(n: int, timeout_s: float | None = None) -> list[InProcessCommunicator]:
    """N communicators sharing one rendezvous: hand ``comms[i]`` to the thread playing rank i."""
    rv = _Rendezvous(n)
    return [InProcessCommunicator(rv, r, list(range(n)), timeout_s) for r in range(n)]


def run_in_threads(n: int, fn: Callable[[InProcessCommunicator], object],
                   timeout_s: float = 30.0) -> list:
    """Run ``fn(comm)`` on n threads over an in-process world; return the per-rank results.

    The first exception raised by any rank is re-raised here (after all threads finish).
    """
    comms = in_process_world(n, timeout_s)
    results: list = [None] * n
    errors: list = [None] * n

    def body(r):
        try:
            results[r] = fn(comms[r])
        except BaseException as e:  # noqa: BLE001 -- re-raised in the caller
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5)
    for r, e in enumerate(errors):
        if e is not None:
            raise e
    if any(t.is_alive() for t in threads):
        raise CollectiveError(f"in-process ranks still running after {timeout_s + 5:g} s")
    return results


# ================================================================================================
# Sub-communicator cache
# ================================================================================================

class CommunicatorCache:
    """One communicator per distinct ordered device group, created collectively by ``prepare``.

    ``world`` is the communicator over all ranks (an MpiCommunicator over a duplicate of
    COMM_WORLD by default, so our traffic never matches user messages on COMM_WORLD).
    ``device_to_rank`` maps global device ids to world ranks; by default rank = device id.
    """

    def __init__(self, world: Communicator | None = None,
                 device_to_rank: Mapping[int, int] | Sequence[int] | None = None):
        if world is None:
            MPI = _mpi()
            world = MpiCommunicator(MPI.COMM_WORLD.Dup())
        self.world = world
        if device_to_rank is None:
            rank_of = {d: d for d in range(world.size)}
        elif isinstance(device_to_rank, Mapping):
            rank_of = {int(d): int(r) for d, r in device_to_rank.items()}
        else:
            rank_of = {d: int(r) for d, r in enumerate(device_to_rank)}
        device_of: dict[int, int] = {}
        for d, r in rank_of.items():
            if not 0 <= r < world.size:
                raise GroupError(f"device {d} maps to rank {r}, but the world has "
                                 f"{world.size} ranks")
            if r in device_of:
                raise GroupError(f"devices {device_of[r]} and {d} both map to rank {r}; "
                                 "xladist runs one device per rank")
            device_of[r] = d
        self._rank_of = rank_of
        self._device_of = device_of
        # group tuple -> communicator, or None when this rank is not a member.
        self._comms: dict[tuple[int, ...], Communicator | None] = {}
        self.world.devices = [device_of.get(r) for r in range(world.size)]

    @property
    def device(self) -> int | None:
        """The device this rank plays (None if the mapping leaves this rank out)."""
        return self._device_of.get(self.world.rank)

    def rank_of(self, device: int) -> int:
        try:
            return self._rank_of[device]
        except KeyError:
            raise GroupError(f"device {device} is not mapped to any rank (known devices: "
                             f"{sorted(self._rank_of)})") from None

    def device_of(self, rank: int) -> int:
        try:
            return self._device_of[rank]
        except KeyError:
            raise GroupError(f"rank {rank} plays no device") from None

    def prepare(self, groupings: Sequence[Sequence[Sequence[int]]]) -> None:
        """Create the communicators of every device group, collectively over the world.

        ``groupings`` is a list of groupings, each the device groups of one collective (the
        output of :func:`xladist.hlo.collective_groups.device_groups`).  Every rank must pass the same list
        in the same order: each grouping that still has an uncached group costs one Split,
        with color = group index and key = position in the group, so the sub-communicator's
        rank order is the group's member order.
        """
        me = self.device
        for gi, grouping in enumerate(groupings):
            groups = [tuple(int(d) for d in g) for g in grouping]
            seen: dict[int, int] = {}
            for i, g in enumerate(groups):
                for d in g:
                    self.rank_of(d)
                    if d in seen:
                        raise GroupError(f"grouping #{gi} {[list(x) for x in groups]}: device "
                                         f"{d} is in groups {seen[d]} and {i}")
                    seen[d] = i
            new = list(dict.fromkeys(g for g in groups if g not in self._comms))
            if not new:
                continue  # same decision on every rank: the caches evolve identically
            color, key = None, 0
            for i, g in enumerate(new):
                if me in g:
                    color, key = i, g.index(me)
            comm = self.world.split(color, key, list(new[color]) if color is not None else None)
            for i, g in enumerate(new):
                self._comms[g] = comm if i == color else None

    def get(self, group: Sequence[int]) -> Communicator:
        """The communicator of a prepared group this rank belongs to."""
        key = tuple(int(d) for d in group)
        try:
            comm = self._comms[key]
        except KeyError:
            raise CollectiveError(
                f"no communicator for device group {list(key)}: call prepare() with every "
                "group the program uses, on all ranks, before running collectives") from None
        if comm is None:
            raise CollectiveError(f"device {self.device} (rank {self.world.rank}) is not a "
                                  f"member of device group {list(key)}")
        return comm

    def find(self, grouping: Sequence[Sequence[int]]) -> Communicator | None:
        """The communicator of the group in ``grouping`` that contains this rank's device, or
        None if it is in none of them (collective-broadcast then yields zeros)."""
        me = self.device
        for g in grouping:
            if me in g:
                return self.get(g)
        return None

    def free(self) -> None:
        """Release every sub-communicator and the world duplicate (every rank calls it, after
        the program's last collective). MPICH has about 2,000 context ids per process, so a
        process that runs many programs (xladist.run in a loop under MPI) must give them back.
        """
        comms = {id(c): c for c in self._comms.values() if c is not None}
        comms[id(self.world)] = self.world
        self._comms.clear()
        for comm in comms.values():
            if hasattr(comm, "free"):  # the in-process twin has nothing to release
                comm.free()

    def __len__(self) -> int:
        return len(self._comms)
