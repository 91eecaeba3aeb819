"""MPI's C interface for native code: what a compiled while loop needs to call MPI_Allreduce,
MPI_Sendrecv (collective-permute) and MPI_Allgather itself (xladist/compiler/native/collectives.py), and MPI ops whose function is native.

Everything comes from the MPI library mpi4py loaded: ``dlsym`` on mpi4py's extension module
searches its dependencies, so ``MPI_Allreduce`` and ``MPI_Op_create`` are that library's, the
one whose communicators, datatypes and ops ``MPI._handleof`` hands out.  Resolved once per
process; the ops and datatypes made here are process-wide and never freed, like the row
datatypes in mpi_communicator.py (a program has a handful of reducers).

A native op runs a compiled reducer's MPI_User_function (``<kernel>_mpi``: the kernel on the
two whole buffers, no Python), declared non-commutative exactly like user_op.py's Python op,
so MPICH combines in rank order and every member gets the same bits (user_op.py explains when
that equals the left fold).  Its datatype is the element's width in bytes, so MPI never splits
an element and the function's ``*len`` counts elements.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

__all__ = [
    "NativeAllGather",
    "NativeAllReduce",
    "NativeOrderedAllReduce",
    "NativePermute",
    "available",
    "element_type",
    "function_address",
    "handle",
    "in_place_address",
    "native_op",
]

_LIB = None
_OPS: dict[int, int] = {}        # MPI_User_function address -> MPI_Op handle
_TYPES: dict[int, object] = {}   # element bytes -> committed contiguous datatype


class _NativeCall:
    """What every native call descriptor shares: ``call`` names the MPI function in errors."""

    call = "MPI call"

    @staticmethod
    def error_text(code: int) -> str:
        from mpi4py import MPI
        try:
            return f"{MPI.Get_error_string(int(code))} (MPI error {code})"
        except Exception:  # noqa: BLE001 -- an unknown code still gets reported
            return f"MPI error {code}"


@dataclass(frozen=True)
class NativeAllReduce(_NativeCall):
    """One all-reduce as native code calls it (native/collectives.py's `native_all_reduce`
    protocol): ``fn(send, recv, count, datatype, op, comm)`` after which NaN results are made
    canonical when ``canonicalize``; ``label`` and ``where`` are what the deadline reports."""

    call = "MPI_Allreduce"
    fn: int
    count: int
    datatype: int
    op: int
    comm: int
    canonicalize: bool
    label: str
    where: object
    in_place: int = 0  # MPI_IN_PLACE as a pointer value (in_place_address())


@dataclass(frozen=True)
class NativeOrderedAllReduce(NativeAllReduce):
    """An all-reduce a native loop runs through xladist/collectives/ordered.py's native function
    (the order-preserving reduce-scatter + all-gather): ``ordered_fn(ordered_table)`` after
    the driver wrote the send and result addresses into the table; ``keep`` holds the
    table and the call's own scratch buffer for as long as the loop may run it."""

    call = "the ordered all-reduce (MPI_Alltoallv, MPI_Allgather)"
    ordered_fn: int = 0
    ordered_table: int = 0
    keep: object = None


@dataclass(frozen=True)
class NativePermute(_NativeCall):
    """One collective-permute as native code calls it (native/collectives.py PermuteStep):
    ``MPI_Sendrecv(send, count, datatype, dest, 0, recv, count, datatype, source, 0, comm,
    status)`` with MPI_PROC_NULL for a missing peer; ``zero``: this rank receives from nobody,
    so its result is cleared to zeros first."""

    call = "MPI_Sendrecv"
    fn: int
    count: int
    datatype: int
    dest: int
    source: int
    comm: int
    status: int      # address of ``status_buffer`` (MPI_STATUS_IGNORE differs by library)
    zero: bool
    label: str
    where: object
    status_buffer: object = None


@dataclass(frozen=True)
class NativeAllGather(_NativeCall):
    """One all-gather as native code calls it (native/collectives.py AllGatherStep):
    ``MPI_Allgather(send, count, datatype, recv, count, datatype, comm)``."""

    call = "MPI_Allgather"
    fn: int
    count: int
    datatype: int
    comm: int
    label: str
    where: object


def _lib():
    global _LIB
    if _LIB is None:
        from mpi4py import MPI
        _LIB = ctypes.CDLL(MPI.__file__, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    return _LIB


def available() -> bool:
    """Whether native code can take MPI's handles as 64-bit integer arguments (int or
    pointer handles: native/collectives.py) and find the library's functions."""
    from mpi4py import MPI
    if any(MPI._sizeof(t) not in (4, 8) for t in (MPI.Comm, MPI.Op, MPI.Datatype)):
        return False
    try:
        function_address("MPI_Allreduce")
    except (OSError, AttributeError):
        return False
    return True


def function_address(name: str) -> int:
    return ctypes.cast(getattr(_lib(), name), ctypes.c_void_p).value


def in_place_address() -> int:
    """MPI_IN_PLACE as the pointer native code passes (mpi4py knows the library's value)."""
    from mpi4py import MPI
    return int(MPI.IN_PLACE) & 0xFFFFFFFFFFFFFFFF


def handle(obj) -> int:
    """An mpi4py object's C handle as an unsigned 64-bit table entry."""
    from mpi4py import MPI
    return MPI._handleof(obj) & 0xFFFFFFFFFFFFFFFF


def native_op(user_function: int) -> int:
    """The (non-commutative) MPI_Op whose function is the native ``user_function``."""
    op = _OPS.get(user_function)
    if op is None:
        from mpi4py import MPI
        create = _lib().MPI_Op_create
        create.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        create.restype = ctypes.c_int
        out = (ctypes.c_int32 if MPI._sizeof(MPI.Op) == 4 else ctypes.c_uint64)()
        rc = create(user_function, 0, ctypes.byref(out))
        if rc != 0:
            raise ValueError(f"MPI_Op_create failed: {NativeAllReduce.error_text(rc)}")
        op = _OPS[user_function] = out.value & 0xFFFFFFFFFFFFFFFF
    return op


def element_type(itemsize: int) -> int:
    """The handle of a committed contiguous datatype of ``itemsize`` bytes."""
    dt = _TYPES.get(itemsize)
    if dt is None:
        from mpi4py import MPI
        dt = _TYPES[itemsize] = MPI.BYTE.Create_contiguous(itemsize).Commit()
    return handle(dt)
