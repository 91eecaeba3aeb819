"""The Communicator interface every collective family runs over, and its buffer pool.

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

The implementations: :class:`~xladist.collectives.mpi_communicator.MpiCommunicator` (every
blocking call and every ``wait()`` under the process deadline,
:mod:`xladist.collectives.deadline`) and
:class:`~xladist.collectives.in_process.InProcessCommunicator` (ranks as threads in one
process, for fast unit tests). :mod:`xladist.collectives.communicator_cache` builds one
sub-communicator per distinct device group.
"""

from __future__ import annotations

import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["DONE", "CollectiveError", "Communicator", "Request"]


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
