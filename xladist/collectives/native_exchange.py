"""Reduce-scatter and all-to-all as native code calls them (compiler/native/exchange.py: a
while loop's driver), like native_ops.py does for all-reduce, permute and all-gather.

Both serve only the forms whose Python path is one MPI call on the operand's own bytes:
  * reduce-scatter with a builtin MPI op (all_reduce._plan gives an op name) along a
    dimension with only ones before it: reduce_scatter.py calls MPI_Reduce_scatter_block on
    the operand as is (no staging), with the wire dtype's predefined datatype;
  * the array form of all-to-all along such a dimension: all_to_all.py calls MPI_Alltoall on
    bytes.
The descriptors carry the function's address in the MPI library mpi4py loaded and the
handles (native_ops.py explains both); None where native code cannot make the call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import native_ops
from .all_reduce import _plan
from .communicator import Communicator
from .reduction import Reducer


@dataclass(frozen=True)
class NativeReduceScatter(native_ops._NativeCall):
    """``MPI_Reduce_scatter_block(send, recv, count, datatype, op, comm)``; ``count``: the
    result's elements of ``datatype``."""

    call = "MPI_Reduce_scatter_block"
    fn: int
    count: int
    datatype: int
    op: int
    comm: int
    label: str
    where: object


@dataclass(frozen=True)
class NativeAllToAll(native_ops.NativeAllGather):
    """``MPI_Alltoall(send, count, datatype, recv, count, datatype, comm)`` on bytes (the
    fields of MPI_Allgather's descriptor); ``count``: the bytes each member sends to each
    other."""

    call = "MPI_Alltoall"


def _ops() -> dict:
    from . import mpi_communicator
    mpi_communicator._mpi()
    return mpi_communicator._MPI_OPS


def _mpi_comm(comm: Communicator):
    """The mpi4py communicator under ``comm``, or None (not MPI, or handles native code
    cannot pass)."""
    mpi = getattr(comm, "comm", None)
    if mpi is None or not hasattr(comm, "native_allgather") or not native_ops.available():
        return None
    return mpi


def reduce_scatter_native(comm: Communicator, reducer: Reducer, dtype, out_nbytes: int,
                          label: str):
    """reduce_scatter.py's MPI_Reduce_scatter_block for a builtin op, or None (a reducer MPI
    has no builtin for takes the all-to-all and fold in Python)."""
    from mpi4py import MPI
    mpi = _mpi_comm(comm)
    dtype = np.dtype(dtype)
    plan = _plan(reducer, dtype, comm.size)
    if mpi is None or plan is None or type(plan[0]) is not str:
        return None
    op, wire, _canon = plan  # each result element lives on one rank: no NaN rule
    wire = np.dtype(wire)
    dt = MPI._typedict.get(wire.char)
    count = out_nbytes // wire.itemsize
    if dt is None or count >= 1 << 31:
        return None
    mop = _ops().get(op)  # the communicator's own table (what its Python path calls)
    if mop is None:
        return None
    return NativeReduceScatter(native_ops.function_address("MPI_Reduce_scatter_block"), count,
                               native_ops.handle(dt), native_ops.handle(mop),
                               native_ops.handle(mpi), label, comm)


def all_to_all_native(comm: Communicator, nbytes: int, label: str):
    """all_to_all.py's MPI_Alltoall of an ``nbytes`` operand (array form), or None."""
    from mpi4py import MPI
    mpi = _mpi_comm(comm)
    if mpi is None or nbytes % comm.size or nbytes >= 1 << 31:
        return None
    return NativeAllToAll(native_ops.function_address("MPI_Alltoall"), nbytes // comm.size,
                          native_ops.handle(MPI.BYTE), native_ops.handle(mpi), label, comm)
