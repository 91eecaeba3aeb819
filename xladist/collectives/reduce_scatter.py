"""reduce-scatter (docs/reference/collective-semantics.md C.12): all-reduce, then member i keeps part i.

Same outline as :mod:`xladist.collectives.all_reduce`.  The operand's ``dim`` must be divisible by the
group size n; the result's ``dim`` is that divided by n.  Builtin reductions run as one
MPI_Reduce_scatter_block.  A reducer with a compiled kernel takes the native call of
:mod:`xladist.collectives.ordered` (MPI_Alltoallv + the left fold with the kernel, no Python
between them).  Every other reducer takes an all-to-all of the n parts followed by
a left fold in rank order (:func:`reduction.fold`, which runs the cpu backend's compiled
kernel on whole parts when the Reducer carries one): each member folds only its own part, in
a fixed order, so the result is the interpreter's left fold bit for bit for any ``fn`` at
any group size, and it moves no more data than MPI's own algorithm.  An MPI user-defined op
is not used here: declared non-commutative (as bit-identity needs), it makes MPICH pick a
reduce-scatter about 2x slower than with MPI_MAX.
"""

from __future__ import annotations

import numpy as np

from ._common import Pending, bind_into_result, contiguous, normalize_dim, split_dim, to_block_major
from .all_reduce import _plan
from .communicator import Communicator
from .ordered import bind as _ordered
from .reduction import SUM, Reducer, fold

__all__ = ["reduce_scatter", "reduce_scatter_start"]


def _check(x: np.ndarray, dim: int, n: int) -> tuple[int, tuple[int, ...]]:
    dim = normalize_dim("reduce-scatter", x, dim)
    if x.shape[dim] % n:
        raise ValueError(f"reduce-scatter: dimension {dim} of the operand (shape {x.shape}) is "
                         f"{x.shape[dim]}, not divisible by the group size {n}")
    shape = list(x.shape)
    shape[dim] //= n
    return dim, tuple(shape)


def _prepare(comm: Communicator, x, dim: int):
    """(operand, dim, n, result, local): ``local`` when no message is needed (one member or
    an empty operand), in which case ``result`` already holds the answer.  Shared by the
    blocking and the started form, which differ only in their MPI calls and staging."""
    x = np.asarray(x)
    n = comm.size
    dim, out_shape = _check(x, dim, n)
    out = comm.result(out_shape, x.dtype, like=x)
    local = n == 1 or x.size == 0
    if local and out.size:
        np.copyto(out, x)
    return x, dim, n, out, local


def _stage(comm: Communicator, x: np.ndarray, dim: int, n: int, reuse: bool) -> np.ndarray:
    """The operand laid out [part, ...], each part contiguous (x itself when it already is)."""
    if split_dim(x.shape, dim)[0] == 1:
        return contiguous(x)
    # A started call's staging outlives the call: from the result pool, held by the
    # request until wait, instead of the shared scratch.
    dst = (comm.scratch("send", x.nbytes).view(x.dtype) if reuse
           else comm.result((x.size,), x.dtype, like=x))
    return to_block_major(x, dim, n, dst)


def reduce_scatter(comm: Communicator, x, reducer: Reducer = SUM, dim: int = 0, *,
                   label: str | None = None):
    """Reduce ``x`` over ``comm`` and return this member's part along ``dim`` (fresh array).

    A list/tuple ``x`` is the variadic form: each operand is reduce-scattered on its own.
    """
    if type(x) is np.ndarray and x.flags.c_contiguous:
        fast = comm.bound(("reduce-scatter", x.shape, x.dtype, dim, reducer),
                          lambda: _fast(comm, x, reducer, dim))
        if fast is not None:
            return fast(x, label)
    if type(x) is list or type(x) is tuple:
        return [reduce_scatter(comm, xi, reducer, dim, label=label) for xi in x]
    x, dim, n, out, local = _prepare(comm, x, dim)
    if local:
        return out
    label = label or "reduce-scatter"
    send = _stage(comm, x, dim, n, reuse=True)
    plan = _plan(reducer, x.dtype, n)
    if plan is None or type(plan[0]) is not str:
        call = _ordered(comm, reducer, x.dtype, x.size, False)
        if call is not None:
            call(send, out, label)
            return out
        recv = comm.scratch("recv", x.nbytes).view(x.dtype)
        comm.alltoall(send, recv, label)
        return fold(reducer, recv.reshape(n, -1), out=out)
    op, wire, _ = plan  # each result element lives on one rank: no NaN canonicalization
    if wire != x.dtype:
        comm.reduce_scatter_block(send.view(wire), out.view(wire), op, label)
    else:
        comm.reduce_scatter_block(send, out, op, label)
    return out


def _fast(comm: Communicator, x: np.ndarray, reducer: Reducer, dim: int):
    """``f(x, label)``: :func:`reduce_scatter` of a C-contiguous array of ``x``'s shape and
    dtype when its parts are already contiguous (nothing but ones before ``dim``) and the
    reduction is one call -- MPI_Reduce_scatter_block with a builtin op, or the ordered
    native call -- straight into the recycled result; else None (the general path)."""
    try:
        dim, out_shape = _check(x, dim, comm.size)
    except ValueError:
        return None  # the general path reports it
    n = comm.size
    if n == 1 or x.size == 0 or split_dim(x.shape, dim)[0] != 1:
        return None
    dtype = x.dtype
    plan = _plan(reducer, dtype, n)
    if plan is None or type(plan[0]) is not str:
        call = _ordered(comm, reducer, dtype, x.size, False)  # call(send, out, label)
        if call is None:
            return None
    else:
        op, wire, _ = plan
        rsb = comm.reduce_scatter_block
        if wire != dtype:
            def call(x, out, label):
                rsb(x.view(wire), out.view(wire), op, label)
        else:
            def call(x, out, label):
                rsb(x, out, op, label)
    return bind_into_result(comm, out_shape, dtype, call, "reduce-scatter")


def reduce_scatter_start(comm: Communicator, x, reducer: Reducer = SUM, dim: int = 0, *,
                         label: str | None = None) -> Pending:
    """Start a reduce-scatter; ``.wait()`` returns what :func:`reduce_scatter` would."""
    if type(x) is list or type(x) is tuple:
        parts = [reduce_scatter_start(comm, xi, reducer, dim, label=label) for xi in x]
        return Pending((), lambda: [p.wait() for p in parts])
    x, dim, n, out, local = _prepare(comm, x, dim)
    if local:
        return Pending.ready(out)
    label = label or "reduce-scatter"
    send = _stage(comm, x, dim, n, reuse=False)
    plan = _plan(reducer, x.dtype, n)
    if plan is None or type(plan[0]) is not str:
        recv = comm.result((x.size,), x.dtype, like=send)  # apart from what MPI reads
        req = comm.ialltoall(send, recv, label)
        return Pending((req,), lambda: fold(reducer, recv.reshape(n, -1), out=out))
    op, wire, _ = plan  # each result element lives on one rank: no NaN canonicalization
    if wire != x.dtype:
        req = comm.ireduce_scatter_block(send.view(wire), out.view(wire), op, label)
    else:
        req = comm.ireduce_scatter_block(send, out, op, label)
    return Pending((req,), lambda: out)
