"""Order-preserving reduce-scatter (+ all-gather) for reducers MPI has no builtin for.

A reducer without an MPI builtin (HLO float maximum, which propagates NaN; bf16/f16 sums;
select-based or any other computation) must give every member the interpreter's left fold
in group-rank order, bit for bit.  As an MPI user op it has to be declared
non-commutative, and MPICH then always runs recursive doubling (every member sends and
combines the whole buffer): 1.3-1.8x MPI_MAX from 4 MiB.  Here xladist splits the work
itself, in one native call (xladist/compiler/native/ordered.py): MPI_Alltoallv sends chunk
j to member j, member r folds the n contributions to its chunk in group order with the
compiled reducer kernel, MPI_Allgather (in place; Allgatherv for an uneven split) hands
every member every chunk.  Same
bytes as MPI's reduce-scatter + all-gather for a builtin op, and the fold is the
interpreter's for ANY reducer at any group size (non-associative ones included), every
element computed on exactly one member.

The split depends only on the element count and the group size: chunk j has
``count // n + (j < count % n)`` elements (uneven splits fine).  Reduce-scatter uses the
same call without the all-gather (its parts are equal by HLO's rule).

Float/complex sums and products carrying a compiled kernel take it too, from FLOAT_FROM
bytes (:func:`canon_width`): faster here than MPICH's MPI_Allreduce + canonicalize_nan, the
native call making the NaNs of each member's folded chunk canonical before the all-gather.

Used when the Reducer carries a compiled kernel (``Reducer.kernel``: the cpu backend) on
an MPI communicator whose handles native code can take; :func:`worthwhile` keeps the
latency-bound small all-reduces on the user op (one MPI call) where that measured faster.
The call is bracketed by the deadline watchdog like every blocking MPI call, and a failing
MPI return code raises :class:`CollectiveError` naming the call.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .communicator import CollectiveError

__all__ = ["OrderedReduce", "bind", "canon_width", "native", "worthwhile"]

# Below this many bytes an all-reduce whose user op computes the fold (user_op_ok) stays on
# it: one MPI call beats two at latency-bound sizes (README, Benchmarks).
USER_OP_BELOW = 192 * 1024
# From this many bytes a float sum/product with a compiled kernel takes this path (its NaNs
# made canonical in the native call) instead of MPI_Allreduce(MPI_SUM/PROD) +
# canonicalize_nan: measured crossover (README, Collectives).
FLOAT_FROM = 64 * 1024

_FN = None


def _driver():
    global _FN
    if _FN is None:
        from xladist.compiler.native import ordered as native_ordered
        _FN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(native_ordered.address())
    return _FN


_CHAR = ctypes.c_char
_SCRATCH = "ordered"  # the communicator's scratch slot for the chunks received
_UNSET = object()


def _address(a: np.ndarray) -> int:
    # c_char.from_buffer is ~3x cheaper than __array_interface__ (xladist/compiler/thunks.py)
    try:
        return ctypes.addressof(_CHAR.from_buffer(a))
    except (TypeError, ValueError):  # read-only or empty
        return a.__array_interface__["data"][0]


def split(count: int, n: int) -> tuple[list[int], list[int]]:
    """(counts, displs) of the n chunks of ``count`` elements: the first ``count % n`` one
    element longer."""
    base, extra = divmod(count, n)
    counts = [base + (j < extra) for j in range(n)]
    displs = [0] * n
    for j in range(1, n):
        displs[j] = displs[j - 1] + counts[j - 1]
    return counts, displs


class OrderedReduce:
    """The native call for one (communicator, kernel, element size, count, gather): the
    table holds everything but the three buffer addresses, set per call."""

    def __init__(self, comm, kernel: int, itemsize: int, count: int, gather: bool,
                 canon: int = 0):
        from xladist.compiler.native import ordered as T

        from . import native_ops
        n, r = comm.size, comm.rank
        counts, displs = split(count, n)
        mine = counts[r]
        self.comm, self.itemsize, self.n, self.mine = comm, itemsize, n, mine
        self.nbytes = count * itemsize
        sendcounts = [0 if j == r else c for j, c in enumerate(counts)]
        recvcounts = [0 if j == r else mine for j in range(n)]
        recvdispls = [(j - (j > r)) * mine for j in range(n)]
        # int32 arrays MPI reads; kept alive with the table.
        self._ints = [np.array(v, np.int32) for v in
                      (sendcounts, displs, recvcounts, recvdispls, counts)]
        t = self.table = np.zeros(T.N_ENTRIES, np.uint64)
        t[T.T_ALLTOALLV] = native_ops.function_address("MPI_Alltoallv")
        t[T.T_ALLGATHER] = native_ops.function_address("MPI_Allgather")
        t[T.T_ALLGATHERV] = native_ops.function_address("MPI_Allgatherv")
        t[T.T_KERNEL] = kernel
        t[T.T_N], t[T.T_RANK] = n, r
        t[T.T_COMM] = native_ops.handle(comm.comm)
        t[T.T_DATATYPE] = native_ops.element_type(itemsize)
        # 1: MPI_Allgather of equal chunks, 2: MPI_Allgatherv (uneven), 0: none.
        t[T.T_ITEMSIZE] = itemsize
        t[T.T_GATHER] = 0 if not gather else 1 if len(set(counts)) == 1 else 2
        (t[T.T_SENDCOUNTS], t[T.T_SENDDISPLS], t[T.T_RECVCOUNTS], t[T.T_RECVDISPLS],
         t[T.T_COUNTS]) = (_address(a) for a in self._ints)
        t[T.T_DISPLS] = t[T.T_SENDDISPLS]
        t[T.T_IN_PLACE] = native_ops.in_place_address()
        t[T.T_CANON] = canon  # float width whose NaNs become canonical (float sum/prod), or 0
        self._table = _address(t)
        self._send, self._out, self._scratch = T.T_SEND, T.T_OUT, T.T_SCRATCH
        self._stage = T.T_STAGE
        self._fn = _driver()
        self._scratch_bytes = max((n - 1) * mine * itemsize, 1)
        self._scratch_buf = _UNSET  # not yet looked up
        self._wd = comm._wd

    def __call__(self, send: np.ndarray, out: np.ndarray, label: str) -> None:
        """Reduce the contiguous ``send`` (count elements) into the contiguous ``out`` (the
        whole result, or this member's part for reduce-scatter)."""
        comm, t = self.comm, self.table
        # ``send`` may be ``out`` itself (the native function reads this member's chunk
        # before its last fold step writes it).
        t[self._send], t[self._out] = _address(send), _address(out)
        # The communicator's scratch (reused by every call, never page-faulted again),
        # looked up again only when another call has replaced it with a larger one.
        if comm._scratch.get(_SCRATCH) is not self._scratch_buf:
            comm.scratch(_SCRATCH, self._scratch_bytes)
            self._scratch_buf = comm._scratch[_SCRATCH]
            t[self._scratch] = _address(self._scratch_buf)
        wd = self._wd
        token = wd.begin(label, comm)
        try:
            rc = self._fn(self._table)
        finally:
            wd.end(token)
        if rc:
            call = ("MPI_Alltoallv", "MPI_Allgather", "MPI_Allgatherv")[int(t[self._stage]) - 1]
            from .native_ops import NativeAllReduce
            raise CollectiveError(f"{label}: {call} failed: {NativeAllReduce.error_text(rc)}")


def worthwhile(reducer, nbytes: int, user_op: bool) -> bool:
    """Whether an all-reduce takes this path: always instead of the Python generic path,
    from USER_OP_BELOW instead of a user op that computes the same fold."""
    return reducer.kernel is not None and (not user_op or nbytes >= USER_OP_BELOW)


def canon_width(reducer, dtype: np.dtype, nbytes: int) -> int:
    """For a float/complex sum or product MPI has a builtin for (``canon``: its NaN results
    must be made canonical), carrying a compiled kernel, from FLOAT_FROM bytes: the float
    width whose NaNs the native call makes canonical, so the all-reduce takes this path
    instead of MPI_Allreduce + canonicalize_nan; else 0."""
    if reducer.kernel is None or nbytes < FLOAT_FROM:
        return 0
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


def bind(comm, reducer, dtype: np.dtype, count: int, gather: bool, canon: int = 0):
    """The :class:`OrderedReduce` of this reduction on ``comm`` (made once, kept on the
    communicator), or None where it cannot run: no compiled kernel, not an MPI
    communicator, handles native code cannot pass, counts that do not fit a C int."""
    kernel = reducer.kernel
    cache = getattr(comm, "_ordered", None)
    if kernel is None or cache is None:
        return None
    key = (kernel, dtype.itemsize, count, gather, canon)
    call = cache.get(key)
    if call is None and key not in cache:
        from . import native_ops
        ok = count < 1 << 31 and native_ops.available()
        call = cache[key] = OrderedReduce(comm, kernel, dtype.itemsize, count, gather,
                                          canon) if ok else None
    return call


def native(comm, reducer, dtype: np.dtype, count: int, label: str, canon: int = 0):
    """The all-reduce as a native while loop runs it (native_ops.NativeOrderedAllReduce:
    the driver calls the native function itself), or None where it cannot run. It gets a
    scratch buffer of its own: the loop keeps the address for all its runs, while the
    communicator's scratch may be replaced by any call in between."""
    from . import native_ops
    if reducer.kernel is None or getattr(comm, "_ordered", None) is None \
            or count >= 1 << 31 or not native_ops.available():
        return None
    from xladist.compiler.native import ordered as T
    call = OrderedReduce(comm, reducer.kernel, dtype.itemsize, count, True, canon)
    scratch = np.empty(call._scratch_bytes, np.uint8)
    call.table[T.T_SCRATCH] = _address(scratch)
    return native_ops.NativeOrderedAllReduce(
        0, count, 0, 0, native_ops.handle(comm.comm), False, label, comm,
        ordered_fn=T.address(), ordered_table=call._table, keep=(call, scratch))
