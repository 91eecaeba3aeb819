"""all-to-all (docs/reference/collective-semantics.md C.13), array form and tuple form.

Same outline as :mod:`xladist.collectives.all_reduce`.

* Array form ``all_to_all(comm, x, dim)``: ``x`` is split into n blocks along ``dim``, block j
  goes to member j, and the blocks received are concatenated along ``dim`` in sender order;
  the result has ``x``'s shape.
* Tuple form ``all_to_all(comm, [x_0, ..., x_{n-1}])``: ``x_j`` goes to member j; the result
  is a list whose element i is what member i sent to us.  All operands must share one shape
  and dtype (what member i sends us has the shape of its operand for our index, which must
  equal the shape of our result element i).

Both run as a single MPI_Alltoall over a [member, ...] layout; the tuple results are views of
one fresh buffer (disjoint, so writing one never changes another).
"""

from __future__ import annotations

import numpy as np

from ._common import Pending, contiguous, from_block_major, normalize_dim, split_dim, to_block_major
from .communicator import Communicator

__all__ = ["all_to_all", "all_to_all_start"]


def _check_array(x: np.ndarray, dim: int, n: int) -> int:
    dim = normalize_dim("all-to-all", x, dim)
    if x.shape[dim] % n:
        raise ValueError(f"all-to-all: dimension {dim} of the operand (shape {x.shape}) is "
                         f"{x.shape[dim]}, not divisible by the group size {n}")
    return dim


def _check_tuple(xs, n: int) -> list[np.ndarray]:
    xs = [np.asarray(a) for a in xs]
    if len(xs) != n:
        raise ValueError(f"all-to-all: the tuple form needs one operand per group member "
                         f"({n}), got {len(xs)}")
    shapes = {(a.shape, a.dtype) for a in xs}
    if len(shapes) > 1:
        raise ValueError("all-to-all: tuple operands must share one shape and dtype, got "
                         + ", ".join(f"{a.dtype}{list(a.shape)}" for a in xs))
    return xs


def all_to_all(comm: Communicator, x, dim: int | None = 0, *, label: str | None = None):
    """Array form (``x`` an array, split/concat along ``dim``) or tuple form (``x`` a list of
    ``comm.size`` arrays; ``dim`` ignored).  Returns fresh array(s)."""
    n = comm.size
    label = label or "all-to-all"
    if type(x) is list or type(x) is tuple:
        xs = _check_tuple(x, n)
        if n == 1:
            return [xs[0].copy()]
        shape, dtype = xs[0].shape, xs[0].dtype
        recv = comm.result((n, *shape), dtype, like=xs[0])
        if xs[0].size == 0:
            return list(recv)
        send = comm.scratch("send", recv.nbytes).view(dtype).reshape(recv.shape)
        for j, a in enumerate(xs):
            send[j] = a
        comm.alltoall(send, recv, label)
        return list(recv)
    x = np.asarray(x)
    dim = _check_array(x, dim, n)
    out = comm.result(x.shape, x.dtype, like=x)
    if n == 1 or x.size == 0:
        np.copyto(out, x)
        return out
    if split_dim(x.shape, dim)[0] == 1:
        comm.alltoall(contiguous(x), out, label)
        return out
    send = to_block_major(x, dim, n, comm.scratch("send", x.nbytes).view(x.dtype))
    recv = comm.scratch("recv", x.nbytes).view(x.dtype)
    comm.alltoall(send, recv, label)
    return from_block_major(recv, out, dim, n)


def all_to_all_start(comm: Communicator, x, dim: int | None = 0, *,
                     label: str | None = None) -> Pending:
    """Start an all-to-all; ``.wait()`` returns what :func:`all_to_all` would."""
    n = comm.size
    label = label or "all-to-all"
    if type(x) is list or type(x) is tuple:
        xs = _check_tuple(x, n)
        if n == 1:
            return Pending.ready([xs[0].copy()])
        recv = comm.result((n, *xs[0].shape), xs[0].dtype, like=xs[0])
        if xs[0].size == 0:
            return Pending.ready(list(recv))
        send = np.stack(xs)
        req = comm.ialltoall(send, recv, label)
        return Pending((req,), lambda: list(recv))
    x = np.asarray(x)
    dim = _check_array(x, dim, n)
    out = comm.result(x.shape, x.dtype, like=x)
    if n == 1 or x.size == 0:
        np.copyto(out, x)
        return Pending.ready(out)
    if split_dim(x.shape, dim)[0] == 1:
        return Pending((comm.ialltoall(contiguous(x), out, label),), lambda: out)
    # Staging from the communicator's pool: the request holds both until wait.
    send = to_block_major(x, dim, n, comm.result((x.size,), x.dtype, like=x))
    recv = comm.result((x.size,), x.dtype, like=send)  # apart from what MPI reads
    req = comm.ialltoall(send, recv, label)
    return Pending((req,), lambda: from_block_major(recv, out, dim, n))
