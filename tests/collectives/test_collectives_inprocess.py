"""The collective families over the in-process (threads-as-ranks) twin; deadline aborts.

Fast, MPI-free coverage of the semantics; tests/mpi runs the same cases over real MPI.
"""

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import xladist.collectives as C
from xladist.collectives import CollectiveError, CommunicatorCache, in_process_world
from xladist.collectives.reduction import builtin_op, fold
from tests.mpi.cases import (
    DTYPES,
    NONCOMMUTATIVE,
    assert_same,
    make_input,
    permute_pairs,
    reducers_for,
    reference,
    run,
    shapes_for,
)
from tests.paths import ROOT

OPS = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "all-to-all-tuple",
       "collective-permute", "collective-broadcast"]
SEED = 1234


def _inputs(op, n, shape, dtype, device):
    if op == "all-to-all-tuple":
        return [make_input(SEED, device * 64 + j, shape, dtype) for j in range(n)]
    return make_input(SEED, device, shape, dtype)


def _check_all(comm, op, dtype):
    """Run every shape x sync x reducer case of op on this rank; return result bytes."""
    n, me = comm.size, comm.rank
    out = []
    reducers = reducers_for(dtype) if op in ("all-reduce", "reduce-scatter") else [None]
    pairs = permute_pairs(n)
    for shape, dim in shapes_for(op, n):
        for sync in (True, False):
            for red in reducers:
                x = _inputs(op, n, shape, dtype, me)
                if op == "collective-permute" or op == "all-reduce":
                    x = x if x.ndim < 2 else x[:, ::-1]  # non-contiguous operand
                got = run(op, comm, x, sync=sync, reducer=red, dim=dim, pairs=pairs)
                xs = [_inputs(op, n, shape, dtype, r) for r in range(n)]
                if op == "collective-permute" or op == "all-reduce":
                    xs = [a if a.ndim < 2 else a[:, ::-1] for a in xs]
                want = reference(op, xs, me, reducer=red, dim=dim, pairs=pairs)
                assert_same(got, want, f"rank {me}/{n} {op} {dtype} {shape} dim={dim} "
                                       f"sync={sync} reducer={red}")
                if op in ("all-reduce", "all-gather", "collective-broadcast"):
                    out.append(got.tobytes())
    return out


@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [1, 3, 4])
def test_matches_reference(n, op, dt):
    results = C.run_in_threads(n, lambda comm: _check_all(comm, op, DTYPES[dt]))
    # Every member of a reducing/gathering collective holds the same bytes.
    for r in range(1, n):
        assert results[r] == results[0]


def test_generic_fold_order_is_left_to_right_in_rank_order():
    def body(comm):
        x = np.array([comm.rank + 1], np.int64)
        return C.all_reduce(comm, x, NONCOMMUTATIVE)[0]

    # ((1*2 + 2)*2 + 3)*2 + 4 = 26
    assert C.run_in_threads(4, body) == [26] * 4


def test_float_min_propagates_nan():
    def body(comm):
        x = np.array([1.0, -0.0, 2.0], np.float32)
        if comm.rank == 1:
            x[0] = np.nan
        return C.all_reduce(comm, x, C.MIN)

    for got in C.run_in_threads(3, body):
        assert np.isnan(got[0]) and got[2] == 2.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_canonicalize_nan_rewrites_every_nan_component_only(dtype):
    from xladist.collectives.reduction import canonicalize_nan

    real = np.dtype(np.dtype(dtype).char.lower())
    parts = np.array([1.5, -np.nan, -0.0, np.nan, np.inf, 3.0], real)
    parts[3] = np.frombuffer((np.array(np.nan, real).view(
        np.uint32 if real.itemsize == 4 else np.uint64) | 1).tobytes(), real)[0]  # payload
    x = parts.view(dtype).copy()
    assert canonicalize_nan(x) is x
    want = parts.copy()
    want[1] = want[3] = np.nan
    assert x.view(real).tobytes() == want.tobytes()
    clean = np.array([1.0, -0.0, np.inf], real).view(dtype) if real == dtype else None
    if clean is not None:
        assert canonicalize_nan(clean.copy()).tobytes() == clean.tobytes()


def test_builtin_op_table():
    import ml_dtypes

    assert builtin_op(C.SUM, np.float32) == ("sum", np.float32)
    assert builtin_op(C.MIN, np.float32) is None  # NaN semantics differ from MPI_MIN
    assert builtin_op(C.AND, np.bool_) == ("band", np.uint8)
    assert builtin_op(C.SUM, np.bool_) is None
    assert builtin_op(C.MAX, np.complex64) is None
    assert builtin_op(C.SUM, ml_dtypes.bfloat16) is None
    assert builtin_op(C.Reducer("sum", lambda a, b: a - b), np.int32) is None  # fn is truth


def test_fold_casts_back_to_operand_dtype():
    blocks = np.ones((3, 2), np.int8) * 100
    assert fold(C.SUM, blocks).dtype == np.int8


def test_cache_orders_ranks_by_group_position():
    def body(world):
        cache = CommunicatorCache(world)
        n = world.size
        groupings = [[list(range(n))[::-1]], [[d] for d in range(n)], [[0, 1], [2, 3]]]
        cache.prepare(groupings)
        cache.prepare(groupings)  # idempotent: no second split
        rev = cache.get(list(range(n))[::-1])
        pair = cache.find([[0, 1], [2, 3]])
        got = C.all_gather(rev, np.array([world.rank]))
        return rev.rank, got.tolist(), pair.devices, len(cache)

    res = C.run_in_threads(4, body)
    for r, (rank, got, devices, count) in enumerate(res):
        assert rank == 3 - r
        assert got == [3, 2, 1, 0]
        assert devices == ([0, 1] if r < 2 else [2, 3])
        assert count == 1 + 4 + 2


def test_cache_errors():
    world = in_process_world(1)[0]
    cache = CommunicatorCache(world)
    with pytest.raises(CollectiveError, match="call prepare"):
        cache.get([0])
    with pytest.raises(C.GroupError, match="not mapped to any rank"):
        cache.prepare([[[0, 5]]])
    with pytest.raises(C.GroupError, match="is in groups 0 and 1"):
        cache.prepare([[[0], [0]]])
    with pytest.raises(C.GroupError, match="both map to rank 0"):
        CommunicatorCache(world, {0: 0, 1: 0})


def test_desync_is_reported_with_both_ops():
    def body(comm):
        if comm.rank == 0:
            return C.all_reduce(comm, np.ones(2))
        return C.all_gather(comm, np.ones(2))

    with pytest.raises(CollectiveError, match="rank 0 runs all-reduce, rank 1 runs all-gather"):
        C.run_in_threads(2, body)


def test_missing_rank_times_out_with_names():
    def body(comm):
        if comm.rank == 1:
            return None
        return C.all_reduce(comm, np.ones(2), label="all-reduce.7")

    with pytest.raises(CollectiveError, match=r"all-reduce.7 over group \[0, 1\]; ranks \[1\]"):
        C.run_in_threads(2, body, timeout_s=0.5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda c: C.all_gather(c, np.float32(1)), "a scalar has no dimension"),
        (lambda c: C.reduce_scatter(c, np.ones((3,)), C.SUM, 0), "not divisible by the group"),
        (lambda c: C.all_to_all(c, [np.ones(2)]), "one operand per group member"),
        (lambda c: C.all_to_all(c, [np.ones(2), np.ones(3)]), "share one shape"),
        (lambda c: C.collective_permute(c, np.ones(2), 5, None), "is not a rank"),
    ],
)
def test_argument_errors(call, match):
    comm = in_process_world(2)[0]
    with pytest.raises(ValueError, match=match):
        call(comm)


def test_broadcast_outside_any_group_gives_zeros():
    got = C.collective_broadcast(None, np.ones((2, 2), np.float16))
    assert got.dtype == np.float16 and not got.any()


# --- Nothing hangs: real mpiexec in a subprocess ---------------------------------------------------
# (Here rather than in tests/mpi because pytest-mpi skips everything under a folder named "mpi"
# without --with-mpi, and these tests must start their own mpiexec from a plain pytest.)

UNDER_MPI = any(v in os.environ for v in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"))
needs_mpiexec = pytest.mark.skipif(UNDER_MPI or shutil.which("mpiexec") is None,
                                   reason="starts its own mpiexec")


def _run(mode: str, timeout_s: float):
    env = dict(os.environ, XLADIST_COLLECTIVE_TIMEOUT=str(timeout_s),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    proc = subprocess.run(
        ["mpiexec", "-n", "2", sys.executable, "-m", "tests.mpi.deadline_script", mode],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    return proc, time.monotonic() - t0


@needs_mpiexec
@pytest.mark.slow
def test_rank_that_never_joins_aborts_job_after_deadline():
    proc, elapsed = _run("hang", 2)
    assert proc.returncode != 0
    assert "rank 0: timed out after" in proc.stderr
    assert "waiting in all-reduce.7 over group [0, 1]" in proc.stderr
    assert "unreachable" not in proc.stdout
    # Detection happens between T and 1.5 T; allow a few seconds for start-up and teardown.
    assert elapsed < 2 * 1.5 + 8, f"took {elapsed:.1f} s"


@needs_mpiexec
@pytest.mark.slow
def test_rank_that_never_joins_the_native_ordered_reduce_aborts_job_after_deadline():
    # The wait is inside one native call (xladist/collectives/ordered.py): the watchdog still ends it.
    proc, elapsed = _run("hang-ordered", 2)
    assert proc.returncode != 0
    assert "rank 0: timed out after" in proc.stderr
    assert "waiting in all-reduce.9 over group [0, 1]" in proc.stderr
    assert "unreachable" not in proc.stdout
    assert elapsed < 2 * 1.5 + 15, f"took {elapsed:.1f} s"


@needs_mpiexec
def test_rank_that_raises_aborts_job_at_once():
    proc, elapsed = _run("raise", 120)
    assert proc.returncode != 0
    assert "rank 1: ValueError: boom: bad operand on purpose" in proc.stderr
    assert proc.stderr.count("rank 1: ValueError") == 1
    assert elapsed < 30, f"took {elapsed:.1f} s (should not wait for the 120 s deadline)"


def test_large_results_are_recycled_only_when_unreferenced():
    comm = in_process_world(1)[0]
    shape = (1 << 15,)
    a = comm.result(shape, np.float32)
    addr = a.ctypes.data
    del a
    b = comm.result(shape, np.float32)
    assert b.ctypes.data == addr  # dropped by the caller: recycled
    c = comm.result(shape, np.float32)
    assert c.ctypes.data != addr  # b still held: a new array
    view = c[1:]
    del c
    d = comm.result(shape, np.float32)
    assert not np.shares_memory(d, view)  # a view keeps its base in use
    assert comm.result((4,), np.float32) is not comm.result((4,), np.float32)  # small: never


def test_results_ping_pong_while_the_previous_one_is_held():
    # An executor still holds last call's result when it asks for the next: two buffers
    # per shape serve that without allocating (one would be busy on every call).
    import weakref

    comm = in_process_world(1)[0]
    shape = (1 << 15,)
    first = comm.result(shape, np.float32)
    second = comm.result(shape, np.float32)  # `first` held: a second buffer
    pooled = (weakref.ref(first), weakref.ref(second))
    prev = second
    del first, second
    for _ in range(4):
        out = comm.result(shape, np.float32)
        assert out is not prev
        assert any(out is ref() for ref in pooled), "a fresh array, not a pooled one"
        prev = out


def test_recycled_results_do_not_alias_across_calls():
    def body(comm):
        x = np.ones(1 << 15, np.float32) * (comm.rank + 1)
        r1 = C.all_reduce(comm, x)
        r2 = C.all_reduce(comm, x * 2)
        return r1[0], r2[0], np.shares_memory(r1, r2)

    for first, second, shared in C.run_in_threads(2, body):
        assert (first, second, shared) == (3.0, 6.0, False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [2, 3])
def test_all_reduce_keeps_no_reducer_alive(n, dtype):
    """A program's reducers (and, through their compiled kernels, its code) are freed with it.
    all_reduce's plan cache was keyed by the Reducer: every program a cluster's rank loaded
    and freed stayed in memory (~60 KB each, found measuring a rank's RSS over 1,000 calls).
    A standard sum (builtin MPI op, or the user op on bf16) and a custom reducer."""
    import gc
    import weakref

    import ml_dtypes

    import xladist.collectives.reduction as R

    dtype = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)

    class Kernel:  # stands for a compiled reducer: `into` is its bound method
        def into(self, a, b, out):
            np.add(a, b, out=out)

    def custom(a, b):
        return a + b

    refs = []

    def body(comm):
        x = np.arange(6, dtype=dtype) + comm.rank
        got = []
        for fn, kind in ((np.add, "sum"), (custom, None)):
            kernel = Kernel()
            reducer = R.Reducer(kind, fn, "sum", into=kernel.into)
            got.append(C.all_reduce(comm, x, reducer))
            refs.append((weakref.ref(reducer), weakref.ref(kernel)))
        return got

    expected = sum(np.arange(6, dtype=dtype) + r for r in range(n))
    for got in C.run_in_threads(n, body):
        for g in got:
            np.testing.assert_array_equal(g, expected)
    gc.collect()
    alive = [i for i, pair in enumerate(refs) for r in pair if r() is not None]
    assert not alive, f"{len(alive)} reducers or kernels outlived their all-reduce"
