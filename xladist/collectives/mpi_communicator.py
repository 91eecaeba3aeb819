"""The Communicator over MPI (mpi4py): every blocking call and every ``wait()`` runs under
the process deadline (:mod:`xladist.collectives.deadline`), so a member that never arrives
ends in a report naming rank and instruction instead of a hang. Reductions with a Reducer
(no MPI builtin op) run as the MPI user-defined op of :mod:`xladist.collectives.user_op`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import deadline as _deadline
from .communicator import DONE, Communicator, Request
from .user_op import raise_pending as _raise_pending
from .user_op import user_op as _user_op

__all__ = ["MpiCommunicator"]

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
