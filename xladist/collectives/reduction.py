"""Reducers: what an all-reduce / reduce-scatter combines with, and how it maps onto MPI.

A :class:`Reducer` is ``(kind, fn)``: ``kind`` names a recognized reduction ('sum', 'prod',
'min', 'max', 'and', 'or', 'xor') or is ``None`` for an arbitrary computation; ``fn(a, b)`` is the
numpy element-wise meaning, always authoritative.  The runtime builds one from the HLO
``to_apply`` computation (docs/reference/collective-semantics.md C.10: a root that is a binary op of
(param0, param1)).

Three paths:

* **builtin** -- :func:`builtin_op` maps (kind, dtype) to an MPI builtin op when the MPI op
  computes exactly ``fn`` on that dtype.  Integers and bool are exact in any order.  Float and
  complex sum/prod are NOT bit-identical on all members as MPI builtins: MPICH's all-reduce
  algorithms give every rank the same bracketing (recursive doubling: both partners combine
  the same two partial results; reduce-scatter + all-gather, ring, reduce + bcast: each
  element's result is computed on one rank and copied), but with a commutative op each rank
  passes its own partial as the other operand, and x86 returns the *first* operand's NaN, so
  a NaN result may differ in sign/payload between ranks (seen at n=8).  Non-NaN IEEE add and
  multiply are commutative bit for bit, so only NaNs can differ: after the builtin
  all-reduce of a :func:`nan_canonical` reducer, :func:`canonicalize_nan` turns every NaN
  result into the one canonical quiet NaN.  It first looks for a NaN with one vectorized
  ``min`` over the result (which propagates NaN) and rewrites only if it finds one: one
  read of the result, ~5-7% of a 2-rank MPI_SUM from 1 MiB, more at 64 KiB (README,
  Collectives).  It does not depend on which algorithm MPICH picks.  Measured alternative,
  rejected: a commutative MPI user op canonicalizing inside MPI costs a Python callback per
  combining step (8 B: 8x raw; 1-16 MiB: 1.2-1.5x, ``xladist bench collectives --reducer
  sum``).  Reduce-scatter needs neither: each of its result elements lives on
  one rank only.  A float sum/product that carries the cpu backend's compiled kernel does
  not take the builtin from ordered.FLOAT_FROM bytes: the **ordered** path below runs it,
  canonicalizing each member's folded chunk inside the native call before the all-gather.
* **user op** -- :func:`user_op_ok`: any other reducer runs as an MPI user-defined operation
  whose callback applies ``fn`` to whole buffers (xladist/collectives/user_op.py), so MPI's own
  algorithms do the rest at builtin speed.  Used where MPI's combining tree gives exactly the
  left fold below: for reducers whose result does not depend on the bracketing (min/max/and/
  or/xor and integer arithmetic: :func:`order_free`) at any group size, and for every reducer
  over two members (one combination, ``fn(rank0, rank1)``).  All-reduce only: reduce-scatter
  folds each member's own part after an all-to-all (xladist/collectives/reduce_scatter.py), faster
  than MPICH's non-commutative reduce-scatter and the left fold at any group size.
* **ordered** -- a reducer without a builtin that carries the cpu backend's compiled kernel
  (``Reducer.kernel``) runs xladist/collectives/ordered.py instead of the user op (from 192 KiB) and
  of the generic path (always): the generic path's data flow as one native call.  So does a
  compiled float/complex sum or product from ordered.FLOAT_FROM bytes, instead of the
  builtin + canonicalize_nan (faster here; the left fold, NaNs canonical).
* **generic** -- everything else (non-associative reducers -- bf16/f16 sums, custom
  computations -- over three or more members): bf16/f16/f8 (MPI has no such types), float min/max (MPI_MIN
  is ``a < b ? a : b``, which drops NaNs and depends on argument order for -0.0/+0.0, whereas
  HLO minimum propagates NaN), complex min/max (MPI has none), and any custom reducer.  The
  collective moves bytes with MPI and applies ``fn`` in numpy with :func:`fold`, a left fold in
  group-rank order; each element is folded on exactly one rank and then distributed, so every
  participant gets bit-identical results even for a non-commutative ``fn``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from xladist.semantics.order import maximum, minimum

__all__ = [
    "AND",
    "KINDS",
    "MAX",
    "MIN",
    "OR",
    "PROD",
    "SUM",
    "XOR",
    "Reducer",
    "builtin_op",
    "canonicalize_nan",
    "fold",
    "nan_canonical",
    "order_free",
    "reducer_for_kind",
    "standard",
    "user_op_ok",
]

KINDS = ("sum", "prod", "min", "max", "and", "or", "xor")


@dataclass(frozen=True, eq=False)
class Reducer:
    """A binary element-wise reduction: ``kind`` (or None) and its numpy meaning ``fn(a, b)``.

    ``fn`` receives two arrays of the operand dtype (``a`` from the lower group rank) and returns
    an array of the same shape; the result is cast back to the operand dtype.  Reducers compare
    by identity, so build them once (e.g. per HLO computation) and reuse them.
    """

    kind: str | None
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray]
    name: str = field(default="")
    # Optional faster form of ``fn`` on whole C-contiguous buffers, same bits:
    # ``into(a, b, out)`` writes fn(a, b) to ``out`` (which may be ``a`` or ``b``).  The cpu
    # backend passes its compiled reducer kernel here; MPI user-defined ops (user_op.py) and
    # fold call it.
    into: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = field(default=None)
    # Optional address of a native MPI_User_function computing ``into``'s bits on whole
    # buffers (a compiled reducer's ``<kernel>_mpi``, xladist/compiler/native/collectives.py):
    # user_op.py then registers it as the MPI op, and no Python runs inside MPI.
    native: int | None = field(default=None)
    # Optional address of the compiled map kernel itself, `void k(ptr argv, i64 n)` with
    # argv = out, a, b (the bits of ``into``): the order-preserving reduce-scatter
    # (+ all-gather) of ordered.py folds with it natively.
    kernel: int | None = field(default=None)

    def __post_init__(self):
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"unknown reduction kind {self.kind!r}; expected one of {KINDS} "
                             "or None for a custom reducer")
        if not callable(self.fn):
            raise TypeError(f"Reducer.fn must be callable, got {self.fn!r}")

    def __str__(self) -> str:
        return self.name or self.kind or getattr(self.fn, "__name__", "custom")


SUM = Reducer("sum", np.add, "sum")
PROD = Reducer("prod", np.multiply, "prod")
# HLO minimum/maximum (semantics/order.py): on floats NaN wins as the canonical quiet NaN and
# -0 < +0, so the result does not depend on the operand order; np.minimum keeps the NaN's
# payload and returns its second operand for -0 vs +0.
MIN = Reducer("min", minimum, "min")
MAX = Reducer("max", maximum, "max")
# Bitwise ufuncs are also the logical ops on bool arrays.
AND = Reducer("and", np.bitwise_and, "and")
OR = Reducer("or", np.bitwise_or, "or")
XOR = Reducer("xor", np.bitwise_xor, "xor")

_BY_KIND = {r.kind: r for r in (SUM, PROD, MIN, MAX, AND, OR, XOR)}


def reducer_for_kind(kind: str) -> Reducer:
    """The standard Reducer of a kind name."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"unknown reduction kind {kind!r}; expected one of {KINDS}") from None


# Dtypes MPI moves and reduces natively (numpy char -> same width MPI type via mpi4py).
_INT_CHARS = set(np.typecodes["AllInteger"])
_FLOAT_CHARS = {"f", "d"}
_COMPLEX_CHARS = {"F", "D"}

# Which of our kinds MPI computes exactly, per dtype class.  Float min/max are left out on
# purpose (NaN and signed-zero semantics differ from HLO's minimum/maximum, see module doc).
_INT_OPS = {"sum": "sum", "prod": "prod", "min": "min", "max": "max",
            "and": "band", "or": "bor", "xor": "bxor"}
_FLOAT_OPS = {"sum": "sum", "prod": "prod"}
# Bool travels as uint8 0/1: and/min -> BAND, or/max -> BOR, xor -> BXOR are exact there.
# (XLA itself matches and/or on PRED as MIN/MAX, C.10.)  sum/prod on bool go generic so that
# whatever ``fn`` means for PRED is what happens.
_BOOL_OPS = {"and": "band", "min": "band", "or": "bor", "max": "bor", "xor": "bxor"}


_STANDARD_FNS = {
    "sum": (np.add,),
    "prod": (np.multiply,),
    "min": (minimum, np.minimum),
    "max": (maximum, np.maximum),
    "and": (np.bitwise_and, np.logical_and),
    "or": (np.bitwise_or, np.logical_or),
    "xor": (np.bitwise_xor, np.logical_xor),
}


def standard(reducer: Reducer) -> bool:
    """Whether ``fn`` is numpy's (or semantics/order.py's) function of the reducer's kind: only
    then may MPI's own operation of that kind stand in for it. What MPI can do with a reducer
    depends on nothing else of it than its kind, this and the dtype."""
    kind = reducer.kind
    return kind is not None and reducer.fn in _STANDARD_FNS[kind]


def builtin_op(reducer: Reducer, dtype: np.dtype) -> tuple[str, np.dtype] | None:
    """``(mpi_op_name, wire_dtype)`` if MPI can do this reduction exactly, else None (generic).

    ``mpi_op_name`` is one of 'sum', 'prod', 'min', 'max', 'band', 'bor', 'bxor'; ``wire_dtype``
    is the dtype to view the buffers as (bool travels as uint8).  A Reducer whose ``fn`` is not
    the standard ufunc of its kind always takes the generic path: ``fn`` is the truth.
    """
    kind = reducer.kind
    if not standard(reducer):
        return None
    dtype = np.dtype(dtype)
    ch = dtype.char
    known = ch == "?" or ch in _INT_CHARS or ch in _FLOAT_CHARS or ch in _COMPLEX_CHARS
    if not known or dtype != np.dtype(ch):
        return None  # extension dtype (ml_dtypes bf16/f8), float16, or non-native byte order
    if ch == "?":
        op = _BOOL_OPS.get(kind)
        return (op, np.dtype(np.uint8)) if op else None
    if ch in _INT_CHARS:
        return (_INT_OPS[kind], dtype)
    if ch in _FLOAT_CHARS or ch in _COMPLEX_CHARS:
        op = _FLOAT_OPS.get(kind)
        return (op, dtype) if op else None
    return None  # float16, longdouble, bf16/f8 (ml_dtypes), object, ...


# Kinds whose standard fn selects or combines bits so that any bracketing of a rank-ordered
# reduction gives the same bits: selections (min/max keep one of their operands, ties and NaNs
# resolved by position, which a rank-ordered tree preserves) and bitwise ops.
_ORDER_FREE_KINDS = {"min", "max", "and", "or", "xor"}


def order_free(reducer: Reducer, dtype: np.dtype) -> bool:
    """True if every bracketing of the rank-ordered reduction gives bit-identical results."""
    kind = reducer.kind
    if not standard(reducer):
        return False
    return kind in _ORDER_FREE_KINDS or np.dtype(dtype).kind in "biu"


def nan_canonical(reducer: Reducer, dtype: np.dtype) -> bool:
    """True for a builtin float/complex sum or product, whose all-reduce must canonicalize NaN
    results to be bit-identical on every member (module doc)."""
    dtype = np.dtype(dtype)
    return dtype.kind in "fc" and builtin_op(reducer, dtype) is not None


def canonicalize_nan(out: np.ndarray) -> np.ndarray:
    """Replace every NaN (per component for complex) of a C-contiguous ``out`` in place by the
    canonical quiet NaN, so all members hold the same bits (module doc); returns ``out``."""
    v = out.reshape(-1).view(out.real.dtype) if out.dtype.kind == "c" else out
    if out.size and math.isnan(np.minimum.reduce(v, axis=None)):
        np.copyto(v, v.dtype.type(np.nan), where=np.isnan(v))
    return out


def user_op_ok(reducer: Reducer, dtype: np.dtype, group_size: int) -> bool:
    """Whether the reduction may run as an MPI user-defined op (see the module doc): MPI's
    tree then computes exactly the left fold in rank order that the generic path does."""
    return group_size <= 2 or order_free(reducer, dtype)


def fold(reducer: Reducer, blocks: np.ndarray | Sequence[np.ndarray],
         out: np.ndarray | None = None) -> np.ndarray:
    """Left fold ``fn(...fn(fn(b0, b1), b2)..., b_{N-1})`` over the leading axis, in order.

    The fixed order is what makes the generic path deterministic: the caller folds each element
    on exactly one rank.  The result has the dtype of the blocks; it is written to ``out`` if
    given.
    """
    n = len(blocks)
    if n == 0:
        raise ValueError("fold needs at least one block")
    dtype = blocks[0].dtype
    into = reducer.into
    if (into is not None and n > 1 and isinstance(blocks, np.ndarray)
            and blocks.flags.c_contiguous):
        # The compiled kernel on whole blocks, accumulating in place (it reads element i
        # before writing it): same order, same bits, no temporaries.
        flat = blocks.reshape(n, -1)
        acc = (out.reshape(-1) if out is not None and out.flags.c_contiguous
               and out.dtype == dtype and out.size == flat.shape[1]
               else np.empty(flat.shape[1], dtype))
        with np.errstate(all="ignore"):
            into(flat[0], flat[1], acc)
            for i in range(2, n):
                into(acc, flat[i], acc)
        if out is not None and not np.shares_memory(acc, out):
            np.copyto(out, acc.reshape(out.shape), casting="unsafe")
            return out
        return out if out is not None else acc.reshape(blocks.shape[1:])
    acc = blocks[0]
    fn = reducer.fn
    # A generic reducer applied to padding (see all_reduce's generic path) may divide by zero
    # or overflow; those lanes are discarded, so silence numpy's warnings for them.
    with np.errstate(all="ignore"):
        for i in range(1, n):
            acc = fn(acc, blocks[i])
    acc = np.asarray(acc)
    if acc.dtype != dtype:
        acc = acc.astype(dtype)
    if out is not None:
        np.copyto(out, acc.reshape(out.shape), casting="unsafe")
        return out
    if n == 1:
        acc = acc.copy()
    return acc
