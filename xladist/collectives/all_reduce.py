"""all-reduce (docs/reference/collective-semantics.md C.10): element-wise reduction over the group.

Outline shared by every family module: ``<op>(comm, x, ...)`` blocks and returns a fresh
result; ``<op>_start(comm, x, ...)`` returns a :class:`~xladist.collectives._common.Pending` whose
``wait()`` returns the same result.  ``x`` may be any-shaped numpy array (non-contiguous views,
scalars, zero-size) or a list/tuple of arrays (variadic form, reduced independently).
``label`` names the instruction for the deadline message ("all-reduce.7").

Builtin reductions run as one MPI_Allreduce, except float/complex sums and products that
carry a compiled kernel: from ordered.FLOAT_FROM bytes they take the ordered path below,
which makes each member's folded chunk's NaNs canonical before the all-gather.  A reducer without a builtin that carries a
compiled kernel (the cpu backend) runs the order-preserving reduce-scatter + all-gather of
:mod:`xladist.collectives.ordered` (one native call) -- from ordered.USER_OP_BELOW bytes where the
user op below also computes the left fold, always where it does not.  Below that, the
reducers :func:`reduction.user_op_ok` admits run as one MPI_Allreduce with an MPI
user-defined op (xladist/collectives/user_op.py) that runs ``fn`` on whole buffers.  The generic path (see :mod:`reduction`) is a
reduce-scatter done as all-to-all + a left fold in rank order, followed by an all-gather: the
same bandwidth as a ring all-reduce, and each element is combined on exactly one rank, so all
members get bit-identical results for any ``fn``.
"""

from __future__ import annotations

import numpy as np

from ._common import Pending, bind_into_result, contiguous
from .communicator import Communicator
from .ordered import bind as _ordered, canon_width, native as _ordered_native, worthwhile
from .reduction import (SUM, Reducer, builtin_op, canonicalize_nan, fold, nan_canonical,
                        standard, user_op_ok)

__all__ = ["all_reduce", "all_reduce_bound", "all_reduce_native", "all_reduce_start"]

# Plans of the standard reducers, keyed by what decides them (reduction.standard): their
# kind, their fn (numpy's, alive for the process), the dtype and the group size. Not by the
# Reducer: each program builds its own, and an entry would keep it alive for the life of
# the process, and through its compiled kernels (`into`, `native`) the program's whole code:
# ~60 KB per program that a cluster's rank (or an MPI job calling xladist.run) loaded and
# freed. A plan whose op is the reducer itself holds _THIS_REDUCER instead.
_PLANS: dict[tuple, tuple | None] = {}
_THIS_REDUCER = object()


def _plan(reducer: Reducer, dtype: np.dtype, size: int):
    """``(op, wire_dtype, canonicalize_nan)`` or None for the generic path; ``op`` is a builtin
    op name or the Reducer itself, which the communicator runs as an MPI user-defined op."""
    if not standard(reducer):  # its own function: MPI runs it as a user op or not at all
        return (reducer, dtype, False) if user_op_ok(reducer, dtype, size) else None
    key = (reducer.kind, reducer.fn, dtype, size > 2)
    try:
        plan = _PLANS[key]
    except KeyError:
        plan = builtin_op(reducer, dtype)
        if plan is not None:
            plan = (*plan, nan_canonical(reducer, dtype))
        elif user_op_ok(reducer, dtype, size):
            plan = (_THIS_REDUCER, dtype, False)
        _PLANS[key] = plan
    if plan is not None and plan[0] is _THIS_REDUCER:
        return (reducer, *plan[1:])
    return plan


def _ordered_path(plan, reducer: Reducer, dtype: np.dtype, nbytes: int) -> int | None:
    """Whether this all-reduce takes the order-preserving reduce-scatter + all-gather of
    ordered.py: None if not, else its CANON entry (0, or the float width whose NaNs the
    native call makes canonical). Reducers without a builtin take it when ``worthwhile``;
    float/complex sums and products with a compiled kernel from ordered.FLOAT_FROM bytes,
    in place of MPI_Allreduce + canonicalize_nan (MPICH's 2-rank float all-reduce is the
    slower data flow here: README, Collectives)."""
    if plan is None or type(plan[0]) is not str:
        return 0 if worthwhile(reducer, nbytes, plan is not None) else None
    if plan[2]:
        return canon_width(reducer, dtype, nbytes) or None
    return None


def all_reduce(comm: Communicator, x, reducer: Reducer = SUM, *, label: str | None = None):
    """Reduce ``x`` element-wise over all members of ``comm`` with ``reducer``.

    Returns a fresh array of ``x``'s shape and dtype (a list for a list/tuple ``x``), identical
    bit for bit on every member.
    """
    if type(x) is np.ndarray and x.flags.c_contiguous:
        fast = comm.bound(("all-reduce", x.shape, x.dtype, reducer),
                          lambda: _fast(comm, x, reducer))
        if fast is not None:
            return fast(x, label)
    if type(x) is list or type(x) is tuple:
        return [all_reduce(comm, xi, reducer, label=label) for xi in x]
    x = np.asarray(x)
    dtype = x.dtype
    out = comm.result(x.shape, dtype, like=x)
    if comm.size == 1 or x.size == 0:
        # Every member has the same static shape, so all of them skip the call together.
        np.copyto(out, x)
        return out
    plan = _plan(reducer, dtype, comm.size)
    canon = _ordered_path(plan, reducer, dtype, x.nbytes)
    if canon is not None:
        call = _ordered(comm, reducer, dtype, x.size, True, canon)
        if call is not None:
            call(contiguous(x), out, label or "all-reduce")
            return out
    if plan is None:
        return _generic(comm, x, reducer, out, label)
    op, wire, canon = plan
    send = contiguous(x)
    if wire is not dtype and wire != dtype:
        send, recv = send.view(wire), out.view(wire)
    else:
        recv = out
    comm.allreduce(send, recv, op, label or "all-reduce")
    if canon:
        canonicalize_nan(out)  # MPI's builtin float sum/prod: NaN bits may differ by rank
    return out


def _fast(comm: Communicator, x: np.ndarray, reducer: Reducer):
    """``f(x, label)``: :func:`all_reduce` of a C-contiguous array of ``x``'s shape and dtype
    with the plan decided now -- the ordered native call or one MPI_Allreduce (then the NaN
    rule) straight into the recycled result; None for the generic path, one member or an
    empty operand (the general path)."""
    dtype, n = x.dtype, comm.size
    if n == 1 or x.size == 0:
        return None
    plan = _plan(reducer, dtype, n)
    canon = _ordered_path(plan, reducer, dtype, x.nbytes)
    call = None
    if canon is not None:
        call = _ordered(comm, reducer, dtype, x.size, True, canon)  # call(send, out, label)
    if call is None:
        if plan is None:
            return None
        op, wire, canon = plan
        allreduce = comm.allreduce
        if wire != dtype:
            def call(x, out, label):
                allreduce(x.view(wire), out.view(wire), op, label)
                if canon:
                    canonicalize_nan(out)
        elif canon:
            def call(x, out, label):
                allreduce(x, out, op, label)
                canonicalize_nan(out)  # MPI's builtin float sum/prod: NaN bits may differ
        else:
            def call(x, out, label):
                allreduce(x, out, op, label)
    return bind_into_result(comm, x.shape, dtype, call, "all-reduce")


def all_reduce_bound(comm: Communicator, reducer: Reducer, dtype, label: str,
                     nbytes: int | None = None):
    """``f(send, recv)`` doing :func:`all_reduce` on flat contiguous byte buffers holding
    ``dtype`` elements, into ``recv``, with the plan decided now; None where only the
    generic path (or no MPI call at all) fits. For collectives repeated in loops; given
    the buffers' ``nbytes``, a reducer without a builtin may bind the order-preserving
    reduce-scatter + all-gather (ordered.py)."""
    dtype = np.dtype(dtype)
    bind = getattr(comm, "bound_allreduce", None)
    plan = _plan(reducer, dtype, comm.size) if comm.size > 1 else None
    canon = _ordered_path(plan, reducer, dtype, nbytes) if nbytes and comm.size > 1 else None
    if canon is not None:
        ordered = _ordered(comm, reducer, dtype, nbytes // dtype.itemsize, True, canon)
        if ordered is not None:
            return lambda send, recv: ordered(send, recv, label)
    if bind is None or plan is None:
        return None
    op, wire, canon = plan
    call = bind(op, wire, label)
    if call is None or not canon:
        return call

    def canonical(send, recv):
        call(send, recv)
        canonicalize_nan(recv.view(dtype))  # as all_reduce: NaN bits may differ by rank
    return canonical


def all_reduce_native(comm: Communicator, reducer: Reducer, dtype, nbytes: int, label: str):
    """:func:`all_reduce` of ``nbytes`` holding ``dtype`` elements as native code runs it
    (xladist/collectives/native_ops.py NativeAllReduce: one MPI_Allreduce, then the NaN rule), with
    the plan decided now; None where that cannot be one MPI call: the generic path, or a
    user op whose reducer has no native MPI_User_function (``Reducer.native``)."""
    dtype = np.dtype(dtype)
    bind = getattr(comm, "native_allreduce", None)
    plan = _plan(reducer, dtype, comm.size)
    canon = _ordered_path(plan, reducer, dtype, nbytes) if comm.size > 1 else None
    if canon is not None:
        ordered = _ordered_native(comm, reducer, dtype, nbytes // dtype.itemsize, label,
                                  canon)
        if ordered is not None:  # the order-preserving reduce-scatter + all-gather
            return ordered
    if bind is None or plan is None:
        return None
    op, wire, canon = plan
    # One member: MPI copies and, as all_reduce, nothing is canonicalized.
    return bind(op, wire, nbytes, label, reducer.native, canon and comm.size > 1)


def all_reduce_start(comm: Communicator, x, reducer: Reducer = SUM, *,
                     label: str | None = None) -> Pending:
    """Start an all-reduce; ``.wait()`` returns what :func:`all_reduce` would."""
    if type(x) is list or type(x) is tuple:
        parts = [all_reduce_start(comm, xi, reducer, label=label) for xi in x]
        return Pending((), lambda: [p.wait() for p in parts])
    x = np.asarray(x)
    out = comm.result(x.shape, x.dtype, like=x)
    if comm.size == 1 or x.size == 0:
        np.copyto(out, x)
        return Pending.ready(out)
    plan = _plan(reducer, x.dtype, comm.size)
    label = label or "all-reduce"
    if plan is None:
        return _generic_start(comm, x, reducer, out, label)
    op, wire, canon = plan
    send = contiguous(x)
    recv = out
    if wire != x.dtype:
        send, recv = send.view(wire), out.view(wire)
    req = comm.iallreduce(send, recv, op, label)
    if canon:
        return Pending((req,), lambda: canonicalize_nan(out))
    return Pending((req,), lambda: out)


def _blocks(count: int, n: int) -> int:
    return -(-count // n)


def _generic(comm: Communicator, x: np.ndarray, reducer: Reducer, out: np.ndarray,
             label) -> np.ndarray:
    n, count, dtype = comm.size, x.size, x.dtype
    blk = _blocks(count, n)
    nbytes = n * blk * dtype.itemsize
    # Pad the flat operand to n equal blocks; padding lanes are folded and then dropped.
    send = comm.scratch("send", nbytes).view(dtype)
    send[:count] = x.reshape(-1)
    send[count:] = np.zeros(1, dtype)
    recv = comm.scratch("recv", nbytes).view(dtype)
    comm.alltoall(send, recv, label or "all-reduce")
    mine = fold(reducer, recv.reshape(n, blk))
    if n * blk == count:
        comm.allgather(mine, out, label or "all-reduce")
        return out
    gathered = comm.result((n * blk,), dtype, like=mine)
    comm.allgather(mine, gathered, label or "all-reduce")
    np.copyto(out.reshape(-1), gathered[:count])
    return out


def _generic_start(comm: Communicator, x: np.ndarray, reducer: Reducer, out: np.ndarray,
                   label: str) -> Pending:
    n, count, dtype = comm.size, x.size, x.dtype
    blk = _blocks(count, n)
    # Staging from the communicator's pool (the request holds it until wait; padding
    # lanes zeroed as in _generic).
    send = comm.result((n * blk,), dtype, like=x)
    send[:count] = x.reshape(-1)
    send[count:] = np.zeros(1, dtype)
    recv = comm.result((n * blk,), dtype, like=send)  # apart from what MPI reads
    req = comm.ialltoall(send, recv, label)

    def finish():
        # Second phase runs inside wait(): fold my block, then share it (blocking, deadline'd).
        mine = fold(reducer, recv.reshape(n, blk))
        gathered = comm.result((n * blk,), dtype, like=mine)
        comm.allgather(mine, gathered, label)
        np.copyto(out.reshape(-1), gathered[:count])
        return out

    return Pending((req,), finish)
