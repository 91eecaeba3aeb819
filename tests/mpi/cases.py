"""Shared test cases for the collectives: deterministic inputs and numpy references.

Every rank can build every other rank's input from (seed, device, shape, dtype), so expected
results are computed locally from ALL members' inputs, at any world size.  Used by the MPI
tests (tests/mpi) and by the in-process twin tests (tests/collectives/test_collectives_inprocess.py).

Float inputs are small integers, so sums (and most products) are exact in every order and the
builtin MPI path can be compared exactly; the generic path folds left in rank order, which is
what :func:`reference` does too, so it also compares exactly.
"""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np

import xladist.collectives as C
from xladist.collectives.reduction import Reducer

DTYPES = {
    "bool": np.dtype(np.bool_),
    "s8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "s32": np.dtype(np.int32),
    "s64": np.dtype(np.int64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64),
}


def _noncommutative(a, b):
    # 2a + b: neither commutative nor associative, so any deviation from the documented
    # left-fold-in-rank-order shows up.
    return a + a + b


def _select_larger_magnitude(a, b):
    # A select-based reducer (as an HLO `select(compare(abs a, abs b, GE), a, b)` would be):
    # ties go to the left operand, which makes it order-sensitive.
    return np.where(np.abs(a) >= np.abs(b), a, b)


NONCOMMUTATIVE = Reducer(None, _noncommutative, "2a+b")
SELECT = Reducer(None, _select_larger_magnitude, "select-larger-magnitude")


def reducers_for(dtype: np.dtype) -> list[Reducer]:
    if dtype == np.bool_:
        return [C.AND, C.OR, C.XOR, C.MIN, C.MAX, C.SUM]
    if dtype.kind in "iu":
        return [C.SUM, C.PROD, C.MIN, C.MAX, C.AND, C.OR, C.XOR, NONCOMMUTATIVE]
    if dtype.kind == "c":
        return [C.SUM, C.PROD, NONCOMMUTATIVE]
    return [C.SUM, C.PROD, C.MIN, C.MAX, NONCOMMUTATIVE, SELECT]


def make_input(seed: int, device: int, shape, dtype: np.dtype) -> np.ndarray:
    """Deterministic operand of ``device``: small integers (exact sums in every dtype)."""
    rng = np.random.default_rng([seed, device, zlib.crc32(repr((tuple(shape), str(dtype))).encode())])
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind == "u":
        return rng.integers(0, 5, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.integers(-3, 4, shape) + 1j * rng.integers(-3, 4, shape)).astype(dtype)
    return rng.integers(-3, 4, shape).astype(dtype)


def fold(reducer: Reducer, xs: list[np.ndarray]) -> np.ndarray:
    acc = xs[0]
    with np.errstate(all="ignore"):
        for x in xs[1:]:
            acc = reducer.fn(acc, x)
    return np.asarray(acc).astype(xs[0].dtype)


def reference(op: str, xs: list, pos: int, *, reducer=None, dim=0, pairs=None):
    """Expected result at group position ``pos``; ``xs`` are the members' operands in group
    order (for tuple all-to-all, each member's list of operands)."""
    n = len(xs)
    if op == "all-reduce":
        return fold(reducer, xs)
    if op == "all-gather":
        return np.concatenate(xs, axis=dim)
    if op == "reduce-scatter":
        return np.split(fold(reducer, xs), n, axis=dim)[pos]
    if op == "all-to-all":
        return np.concatenate([np.split(x, n, axis=dim)[pos] for x in xs], axis=dim)
    if op == "all-to-all-tuple":
        return [xs[i][pos] for i in range(n)]
    if op == "collective-permute":
        _, recv_from = C.permute.peers(pairs, pos)
        return np.zeros_like(xs[pos]) if recv_from is None else xs[recv_from]
    if op == "collective-broadcast":
        return xs[0]
    raise ValueError(op)


def run(op: str, comm, x, *, sync: bool, reducer=None, dim=0, pairs=None, label=None):
    """Call the collective under test, blocking or as start + wait."""
    if op == "all-reduce":
        f, args = C.all_reduce, (x, reducer)
    elif op == "all-gather":
        f, args = C.all_gather, (x, dim)
    elif op == "reduce-scatter":
        f, args = C.reduce_scatter, (x, reducer, dim)
    elif op in ("all-to-all", "all-to-all-tuple"):
        f, args = C.all_to_all, (x, dim)
    elif op == "collective-permute":
        send_to, recv_from = C.permute.peers(pairs, comm.rank)
        f, args = C.collective_permute, (x, send_to, recv_from)
    elif op == "collective-broadcast":
        f, args = C.collective_broadcast, (x,)
    else:
        raise ValueError(op)
    if sync:
        return f(comm, *args, label=label)
    start = getattr(C, f.__name__ + "_start")
    return start(comm, *args, label=label).wait()


def shapes_for(op: str, n: int) -> list[tuple[tuple[int, ...], int]]:
    """(operand shape, dim) cases: scalar, zero-size, 2-D along each dim."""
    if op in ("all-reduce", "collective-permute", "collective-broadcast"):
        return [((), 0), ((0, 3), 0), ((3, 5), 0), ((5,), 0)]
    if op == "all-gather":
        return [((0, 3), 0), ((2, 3), 0), ((2, 3), 1), ((3, 1, 2), 1)]
    # split ops: the split dimension must be divisible by n
    return [((0, n), 1), ((2 * n, 3), 0), ((3, 2 * n), 1), ((2, n, 2), 1)]


def permute_pairs(n: int) -> list[tuple[int, int]]:
    """A shift without wrap-around (rank 0 receives zeros), plus a self pair for n == 1."""
    if n == 1:
        return [(0, 0)]
    return [(i, i + 1) for i in range(n - 1)]


def assert_same(got, want, what: str):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{what}[{i}]")
        return
    assert isinstance(got, np.ndarray), f"{what}: got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if got.dtype.kind == "f" or got.dtype in (DTYPES["bf16"],):
        ok = np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True)
    else:
        ok = np.array_equal(got, want)
    assert ok, f"{what}: wrong values\n got {got!r}\nwant {want!r}"
