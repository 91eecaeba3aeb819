"""Reduce-scatter and all-to-all steps of a native while loop (native/loop.py), in the
pattern of native/collectives.py's all-gather step: one MPI call through a function pointer
and handles in the loop's table, inside the deadline's wait-cell bracket.

  ReduceScatterStep  MPI_Reduce_scatter_block(send, recv, count, datatype, op, comm): a
                     reduce-scatter of one array along a dimension with only ones before
                     it, default layouts (the parts are then contiguous: the Python path
                     calls the same function on the operand as is); the device resolves it
                     only for a builtin MPI op (`native_reduce_scatter`,
                     xladist/collectives/native_exchange.py), else the loop keeps the Python path.
  AllToAllStep       MPI_Alltoall on bytes: the array form along such a dimension
                     (`native_all_to_all`).

Registering them in native.collectives.STEPS makes them eligible wherever that table is
read (native.collectives.eligible, native.loop._step).
"""

from __future__ import annotations

from llvmlite import ir

from ..codegen.types import I32, I64, PTR
from .collectives import STEPS, AllGatherStep, _bracketed, _BytesStep, _one_array

# MPI_Reduce_scatter_block(send, recv, recvcount, datatype, op, comm)
MPI_REDUCE_SCATTER_BLOCK = ir.FunctionType(I32, [PTR, PTR, I32, I64, I64, I64])


def _split_ok(thunk, same_shape: bool) -> bool:
    """One array, split along `dimensions={d}` with only ones before d, default layouts,
    one element type (and the same shape for all-to-all)."""
    src, dst = thunk.instr.operands[0].shape, thunk.instr.shape
    dims = thunk.instr.attrs.get("dimensions")
    if not dims or len(dims) != 1 or src.element_type != dst.element_type \
            or not (src.has_default_layout() and dst.has_default_layout()):
        return False
    if same_shape and tuple(src.dims) != tuple(dst.dims):
        return False
    dim = int(dims[0])
    return 0 <= dim < len(src.dims) and all(d == 1 for d in src.dims[:dim])


class ReduceScatterStep(_BytesStep):
    kind = "reduce-scatter"
    bind = "native_reduce_scatter"
    # Table entries: fn, send, recv, count (result elements), datatype, op, comm.
    FIELDS = ("count", "datatype", "op", "comm")
    N_ENTRIES = 3 + len(FIELDS)

    @staticmethod
    def eligible(thunk) -> bool:
        return _one_array(thunk, "reduce-scatter") and _split_ok(thunk, same_shape=False)

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        fn = entry(0, MPI_REDUCE_SCATTER_BLOCK.as_pointer())
        send, recv = entry(1, PTR), entry(2, PTR)
        count, dt, op, comm = (entry(k, I64) for k in (3, 4, 5, 6))
        _bracketed(b, cells, progress, index, fail,
                   lambda: b.call(fn, [send, recv, b.trunc(count, I32), dt, op, comm]))


class AllToAllStep(AllGatherStep):
    """MPI_Alltoall has MPI_Allgather's signature: (send, count, type, recv, count, type,
    comm), count = the bytes for each member."""

    kind = "all-to-all"
    bind = "native_all_to_all"

    @staticmethod
    def eligible(thunk) -> bool:
        return _one_array(thunk, "all-to-all") and _split_ok(thunk, same_shape=True)


STEPS.update({s.kind: s for s in (ReduceScatterStep, AllToAllStep)})
