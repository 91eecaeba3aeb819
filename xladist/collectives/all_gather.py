"""all-gather (docs/reference/collective-semantics.md C.11): concatenate every member's operand along ``dim``.

Same outline as :mod:`xladist.collectives.all_reduce`.  Member i's operand becomes slice i of the
result, so the result's ``dim`` is ``n`` times the operand's.  When ``dim`` is the outermost
non-trivial dimension MPI writes straight into the fresh result; otherwise it gathers into a
reused staging buffer laid out [member, ...] and one strided copy produces the result.

A repeated blocking call of the same shape, dtype and dimension on a C-contiguous array
takes the communicator's bound fast path (:func:`_fast`): the recycled result and one
MPI_Allgather straight into it, with no checks re-run -- the Python around the MPI call is
what separates xladist from raw mpi4py at 64 KiB.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    Pending,
    bind_into_result,
    contiguous,
    from_block_major,
    normalize_dim,
    split_dim,
)
from .communicator import Communicator

__all__ = ["all_gather", "all_gather_native", "all_gather_start"]


def _out_shape(x: np.ndarray, dim: int, n: int) -> tuple[int, ...]:
    shape = list(x.shape)
    shape[dim] *= n
    return tuple(shape)


def _prepare(comm: Communicator, x, dim: int):
    """(operand, dim, n, result, local): ``local`` when no message is needed (one member or
    an empty operand), in which case ``result`` already holds the answer.  Shared by the
    blocking and the started form, which differ only in their MPI calls and staging."""
    x = np.asarray(x)
    dim = normalize_dim("all-gather", x, dim)
    n = comm.size
    out = comm.result(_out_shape(x, dim, n), x.dtype, like=x)
    local = n == 1 or x.size == 0
    if local and out.size:
        np.copyto(out, x)
    return x, dim, n, out, local


def all_gather(comm: Communicator, x, dim: int = 0, *, label: str | None = None):
    """Gather ``x`` from every member of ``comm`` and concatenate along ``dim``.

    ``x`` may be a list/tuple of arrays (variadic all-gather): each is gathered on its own.
    Returns a fresh array (or list) with ``shape[dim] * comm.size``.
    """
    if type(x) is np.ndarray and x.flags.c_contiguous:
        fast = comm.bound(("all-gather", x.shape, x.dtype, dim), lambda: _fast(comm, x, dim))
        if fast is not None:
            return fast(x, label)
    if type(x) is list or type(x) is tuple:
        return [all_gather(comm, xi, dim, label=label) for xi in x]
    x, dim, n, out, local = _prepare(comm, x, dim)
    if local:
        return out
    send = contiguous(x)
    if split_dim(x.shape, dim)[0] == 1:
        comm.allgather(send, out, label or "all-gather")
        return out
    stage = comm.scratch("recv", n * x.nbytes).view(x.dtype)
    comm.allgather(send, stage, label or "all-gather")
    return from_block_major(stage, out, dim, n)


def _fast(comm: Communicator, x: np.ndarray, dim: int):
    """``f(x, label)``: :func:`all_gather` of a C-contiguous array of ``x``'s shape and
    dtype along ``dim`` when it is one MPI call into the result (nothing before ``dim`` but
    ones, more than one member, a non-empty operand); else None (the general path)."""
    if x.ndim == 0 or not -x.ndim <= dim < x.ndim:
        return None  # the general path reports it
    dim %= x.ndim
    n = comm.size
    if n == 1 or x.size == 0 or split_dim(x.shape, dim)[0] != 1:
        return None
    return bind_into_result(comm, _out_shape(x, dim, n), x.dtype, comm.allgather,
                            "all-gather")


def all_gather_start(comm: Communicator, x, dim: int = 0, *,
                     label: str | None = None) -> Pending:
    """Start an all-gather; ``.wait()`` returns what :func:`all_gather` would."""
    if type(x) is list or type(x) is tuple:
        parts = [all_gather_start(comm, xi, dim, label=label) for xi in x]
        return Pending((), lambda: [p.wait() for p in parts])
    x, dim, n, out, local = _prepare(comm, x, dim)
    if local:
        return Pending.ready(out)
    send = contiguous(x)
    label = label or "all-gather"
    if split_dim(x.shape, dim)[0] == 1:
        return Pending((comm.iallgather(send, out, label),), lambda: out)
    stage = comm.result((n * x.size,), x.dtype, like=x)  # the request holds it until wait
    req = comm.iallgather(send, stage, label)
    return Pending((req,), lambda: from_block_major(stage, out, dim, n))


def all_gather_native(comm: Communicator, nbytes: int, label: str):
    """:func:`all_gather` of ``nbytes`` per member along a dimension with nothing but ones
    before it (the members' operands one after another) as native code runs it: one
    MPI_Allgather (xladist/collectives/native_ops.py NativeAllGather), or None where it cannot."""
    bind = getattr(comm, "native_allgather", None)
    return None if bind is None else bind(nbytes, label)
