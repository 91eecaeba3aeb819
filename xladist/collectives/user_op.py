"""MPI user-defined operations that run a Reducer's ``fn`` on whole buffers.

A reducer MPI has no builtin for (HLO float maximum/minimum, which propagate NaN; bf16/f16/f8
sums; complex; select-based or any other computation) becomes an ``MPI.Op.Create`` operation,
so MPI's own algorithms move the data and the callback only combines two whole buffers with
one vectorized call: the reducer's compiled kernel (``Reducer.into``, from the cpu backend),
else its numpy ufunc, else ``fn``.  That is as fast
as the builtin op from 64 KiB up (see ``xladist bench collectives --reducer``).  A reducer
with a native MPI_User_function (``Reducer.native``: the cpu backend's compiled kernel,
xladist/compiler/native/collectives.py) gets an op of its own made from it
(native_ops.py), declared non-commutative the same way: same order, same kernel, same bits,
and no Python inside MPI at all.

Order and bit-identity.  Every op is declared **non-commutative** (``commute=False``): MPICH
then combines in rank order, ``inout = fn(in_from_lower_ranks, inout)``, with one combining
tree that every member either computes identically or receives, so all members get the same
bits even for reducers that are not bitwise commutative (maximum of -0.0 and +0.0, NaN
payloads).  The tree is not the left fold of :func:`xladist.collectives.reduction.fold` unless the
reducer is associative or the group has two members; :func:`xladist.collectives.reduction.user_op_ok`
therefore sends non-associative reducers (float sums in any precision MPI lacks, custom
computations) over groups of three or more down the generic path, which folds left in rank
order exactly like the interpreter.

Buffers travel as an MPI datatype of the element's width (so MPI never splits an element),
one datatype per live (reducer, dtype), which tells the single callback what to compute.  An exception in ``fn`` cannot
propagate through MPI's C stack: it is kept and re-raised by :func:`raise_pending` once the
MPI call returns.
"""

from __future__ import annotations

import weakref

import numpy as np

__all__ = ["raise_pending", "user_op"]

# mpi4py allows only a few user-defined ops per process, while a program may have any number of
# reducers.  So there is ONE op, and the reducer travels in the datatype: every live (reducer,
# dtype) gets its own committed datatype of the element's width, which MPI hands back to the
# callback; the callback looks the reducer up by the datatype's handle.  Nothing here keeps a
# reducer alive: every program (each cluster call loads one) builds its own reducers, whose fn
# and into reach the whole program, so the tables hold the reducer weakly, and when it goes its
# datatypes go back to a pool of their width for the next reducer (no MPI call from a garbage
# collection, which may run inside an MPI callback or after MPI_Finalize).  The datatypes in
# use are the reducers alive at once, not every reducer the process ever saw.
_OP = None
_BY_TYPE: dict[int, tuple] = {}   # datatype handle -> (weakref to the reducer, dtype)
_TYPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # reducer -> {dtype: datatype}
_FREE: dict[int, list] = {}       # itemsize -> committed datatypes no live reducer uses
_errors: list[BaseException] = []


def _combine(inbuf, inoutbuf, datatype):
    try:
        ref, dtype = _BY_TYPE[datatype.py2f()]
        reducer = ref()
        if reducer is None:  # cannot happen while a call runs: its caller holds the reducer
            raise RuntimeError("the all-reduce's reducer was freed during the call")
        fn, into = reducer.fn, reducer.into
        a = np.frombuffer(inbuf, dtype)
        b = np.frombuffer(inoutbuf, dtype)
        with np.errstate(all="ignore"):
            if into is not None:
                into(a, b, b)
            elif isinstance(fn, np.ufunc):
                fn(a, b, out=b, casting="unsafe")
            else:
                np.copyto(b, fn(a, b), casting="unsafe")
    except BaseException as e:  # noqa: BLE001 -- re-raised after the MPI call returns
        _errors.append(e)


def _release(types: dict) -> None:
    """A reducer went: its datatypes return to the pool (dict and list operations only)."""
    for dtype, dt in types.items():
        _BY_TYPE.pop(dt.py2f(), None)
        _FREE.setdefault(dtype.itemsize, []).append(dt)


def user_op(MPI, reducer, dtype: np.dtype):
    """``(op, datatype)`` computing ``reducer.fn`` on elements of ``dtype`` inside MPI: the
    reducer's native MPI_User_function when it has one (native_ops.py: same order, same
    kernel, no Python per combining step), else the one Python op."""
    global _OP
    if reducer.native:
        return _native(MPI, reducer.native, dtype)
    types = _TYPES.get(reducer)
    if types is None:
        types = _TYPES[reducer] = {}
        # The dict, not the reducer: the finalizer must not keep it alive.
        weakref.finalize(reducer, _release, types)
    dt = types.get(dtype)
    if dt is None:
        if _OP is None:
            _OP = MPI.Op.Create(_combine, commute=False)
        free = _FREE.get(dtype.itemsize)
        dt = free.pop() if free else MPI.BYTE.Create_contiguous(dtype.itemsize).Commit()
        _BY_TYPE[dt.py2f()] = (weakref.ref(reducer), dtype)
        types[dtype] = dt
    return _OP, dt


_NATIVE: dict[tuple, tuple] = {}  # (function address, itemsize) -> (op, datatype)


def _native(MPI, function: int, dtype: np.dtype):
    key = (function, dtype.itemsize)
    pair = _NATIVE.get(key)
    if pair is None:
        from . import native_ops
        # Views of handles native_ops made and keeps for the whole process.
        pair = _NATIVE[key] = (MPI.Op.fromhandle(native_ops.native_op(function)),
                               MPI.Datatype.fromhandle(native_ops.element_type(dtype.itemsize)))
    return pair


def raise_pending(label: str) -> None:
    """Re-raise an error a reducer callback hit during the last MPI call, if any."""
    if _errors:
        e = _errors[0]
        _errors.clear()
        raise ValueError(f"{label}: the reducer failed inside MPI: {type(e).__name__}: {e}") from e
