"""Every collective x dtype x shape x sync/async x grouping over real MPI.

Expected values come from tests/mpi/cases.py, computed from every member's deterministic input;
results that must agree across members (all-reduce, all-gather, broadcast) are also compared
byte for byte across ranks.  Passes at any world size (run with -n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

from tests.mpi.cases import (
    DTYPES,
    assert_same,
    make_input,
    permute_pairs,
    reducers_for,
    reference,
    run,
    shapes_for,
)
from tests.mpi.conftest import group_sets

pytestmark = pytest.mark.mpi

OPS = ["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "all-to-all-tuple",
       "collective-permute", "collective-broadcast"]
GROUPINGS = ["all", "reversed", "pairs", "singletons"]
SEED = 99
SHARED = ("all-reduce", "all-gather", "collective-broadcast")


def _inputs(op, n, shape, dtype, device):
    if op == "all-to-all-tuple":
        return [make_input(SEED, device * 64 + j, shape, dtype) for j in range(n)]
    return make_input(SEED, device, shape, dtype)


def _views(op, x):
    # all-reduce and permute also get non-contiguous operands (a reversed last axis).
    if op in ("all-reduce", "collective-permute") and isinstance(x, np.ndarray) and x.ndim >= 2:
        return x[:, ::-1]
    return x


def _run_cases(cache, op, grouping, dtype_names):
    world = MPI.COMM_WORLD
    me = cache.device
    group = next(g for g in group_sets(world.size)[grouping] if me in g)
    comm = cache.get(group)
    n, pos = len(group), group.index(me)
    assert comm.rank == pos and comm.size == n
    checks, shared = [], []
    # Run every collective first and compare afterwards, so that one wrong result cannot make
    # this rank skip collectives the other ranks are still waiting in.
    for dt in dtype_names:
        dtype = DTYPES[dt]
        reducers = reducers_for(dtype) if op in ("all-reduce", "reduce-scatter") else [None]
        for shape, dim in shapes_for(op, n):
            for sync in (True, False):
                for red in reducers:
                    pairs = permute_pairs(n)
                    x = _views(op, _inputs(op, n, shape, dtype, me))
                    got = run(op, comm, x, sync=sync, reducer=red, dim=dim, pairs=pairs,
                              label=f"{op}.{dt}")
                    xs = [_views(op, _inputs(op, n, shape, dtype, d)) for d in group]
                    want = reference(op, xs, pos, reducer=red, dim=dim, pairs=pairs)
                    what = (f"device {me} (pos {pos} of {group}) {op} {dt}{list(shape)} "
                            f"dim={dim} {'sync' if sync else 'async'} reducer={red}")
                    checks.append((got, want, what))
                    if op in SHARED:
                        shared.append(got.tobytes())
    # Bit-identity across members of each group.
    everyone = world.allgather((tuple(group), shared))
    for g, theirs in everyone:
        if g == tuple(group):
            assert theirs == shared, f"device {me}: results differ in bits from a member of {g}"
    for got, want, what in checks:
        assert_same(got, want, what)


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("op", OPS)
def test_collective(cache, op, grouping):
    _run_cases(cache, op, grouping, list(DTYPES))


def test_broadcast_device_outside_group_gets_zeros(cache):
    import xladist.collectives as C

    n = cache.world.size
    me = cache.device
    comm = cache.find([[1, 0]] if n > 1 else [[0]])
    x = make_input(SEED, me, (3, 2), DTYPES["f32"])
    got = C.collective_broadcast(comm, x)
    root = 1 if n > 1 else 0
    want = make_input(SEED, root, (3, 2), DTYPES["f32"]) if me <= 1 else np.zeros_like(x)
    np.testing.assert_array_equal(got, want)


def test_float_min_nan_and_signed_zero_identical_everywhere(cache):
    import xladist.collectives as C

    comm = cache.get(list(range(cache.world.size)))
    x = np.array([1.0, 0.0, 5.0, np.nan], np.float32)
    if comm.rank % 2:
        x[:3] = [np.nan, -0.0, 4.0]
        x[3] = np.float32(np.nan) * -1  # a different NaN bit pattern
    got = C.all_reduce(comm, x, C.MIN)
    everyone = MPI.COMM_WORLD.allgather(got.tobytes())
    assert len(set(everyone)) == 1
    if comm.size > 1:
        assert np.isnan(got[0]) and got[2] == 4.0


@pytest.mark.parametrize("dtype_name", ["f32", "f64", "bf16", "f16"])
def test_float_min_max_follow_hlo_signed_zero_and_nan(cache, dtype_name):
    """C.MIN / C.MAX are HLO minimum / maximum (the interpreter's elementwise rule): -0 < +0
    whichever member holds which, and a NaN result is the canonical quiet NaN. They used to be
    np.minimum / np.maximum, which return their second operand for -0 vs +0 and keep a NaN's
    payload: the interpreter backend's pmin of {-0.0 on device 0, +0.0 on device 1} gave +0.0
    where the cpu backend (compiled reducer) and XLA give -0.0."""
    import ml_dtypes

    import xladist.collectives as C
    from xladist.semantics.order import float_max, float_min

    dtype = ml_dtypes.bfloat16 if dtype_name == "bf16" else DTYPES[dtype_name]
    comm = cache.get(list(range(cache.world.size)))
    n = comm.size

    def member(r):
        # lane 0: -0 on member 0 only; lane 1: +0 on member 0 only; lane 2: a NaN with a
        # payload and its sign flipped on odd members; lane 3: plain numbers.
        x = np.array([0.0, -0.0, 1.0, float(r)], np.float64).astype(dtype)
        if r == 0:
            x[0], x[1] = -0.0, 0.0
        if r == n - 1:
            bits = x.view(np.uint16 if x.dtype.itemsize == 2 else
                          np.uint32 if x.dtype.itemsize == 4 else np.uint64)
            payload = np.array(np.nan, dtype).view(bits.dtype) | 1
            bits[2] = payload | (np.array(-0.0, dtype).view(bits.dtype) if r % 2 else 0)
        return x

    xs = [member(r) for r in range(n)]
    for red, rule in ((C.MIN, float_min), (C.MAX, float_max)):
        want = xs[0]
        for x in xs[1:]:
            want = rule(want, x)
        got = C.all_reduce(comm, xs[comm.rank], red)
        what = f"{dtype_name} {red} n={n}"
        assert got.tobytes() == np.asarray(want, dtype).tobytes(), (what, got, want)
        everyone = MPI.COMM_WORLD.allgather(got.tobytes())
        assert len(set(everyone)) == 1, f"{what}: members differ in bits"
        if n > 1:
            assert np.signbit(got[0]) == (red is C.MIN) and np.signbit(got[1]) == (red is C.MIN)
            nan = np.array(np.nan, dtype)
            assert got[2:3].tobytes() == nan.reshape(1).tobytes(), f"{what}: NaN not canonical"


@pytest.mark.parametrize("dtype_name", ["f32", "f64", "c64"])
def test_builtin_float_sum_prod_nan_bits_identical_everywhere(cache, dtype_name):
    """MPI_SUM/MPI_PROD hand operands to the combine in a rank-dependent order and x86 keeps
    the first operand's NaN: without reduction.canonicalize_nan, NaNs of a different sign on
    every rank come out different per member (seen at n=8, recursive doubling)."""
    import xladist.collectives as C

    comm = cache.get(list(range(cache.world.size)))
    dtype = DTYPES[dtype_name]
    real = np.dtype(dtype.char.lower())
    for count in (7, 70_001):
        bits = np.full(count * (2 if dtype.kind == "c" else 1), np.nan, real)
        if comm.rank % 2:
            bits = -bits
        bits[1::3] = 2.0  # NaN mixed with numbers, per component for complex
        x = bits.view(dtype)
        for red in (C.SUM, C.PROD):
            for sync in (True, False):
                got = (C.all_reduce(comm, x, red) if sync
                       else C.all_reduce_start(comm, x, red).wait())
                everyone = MPI.COMM_WORLD.allgather(got.tobytes())
                what = f"{dtype_name} x{count} {red} {'sync' if sync else 'async'} n={comm.size}"
                assert len(set(everyone)) == 1, f"{what}: members differ in bits"
                flat = got.view(real)
                nan = np.isnan(flat)
                assert nan.any(), what
                canonical = np.full(int(nan.sum()), np.nan, real)
                assert flat[nan].tobytes() == canonical.tobytes(), f"{what}: NaN not canonical"


def test_large_generic_and_builtin_all_reduce_bit_identical(cache):
    import ml_dtypes

    import xladist.collectives as C

    comm = cache.get(list(range(cache.world.size)))
    base = np.random.default_rng(comm.rank).standard_normal(300_001)  # odd: padded blocks
    for dtype in (np.float32, np.float64, ml_dtypes.bfloat16, np.float16):
        x = base.astype(dtype)
        got = C.all_reduce(comm, x, C.SUM)
        everyone = MPI.COMM_WORLD.allgather(got.tobytes())
        assert len(set(everyone)) == 1, f"{np.dtype(dtype)} sum differs across ranks"
        want = sum(np.random.default_rng(r).standard_normal(300_001) for r in range(comm.size))
        np.testing.assert_allclose(got.astype(np.float64), want,
                                   rtol=0.05 if np.dtype(dtype).itemsize == 2 else 1e-5,
                                   atol=0.1 if np.dtype(dtype).itemsize == 2 else 1e-5)


def _special_input(rank: int, count: int, dtype) -> np.ndarray:
    """NaNs (two bit patterns), signed zeros, subnormals, infinities and bf16 rounding ties,
    placed differently on every rank so that order and tie-breaking show."""
    rng = np.random.default_rng([7, rank])
    pool = np.array([np.nan, -np.nan, 0.0, -0.0, 1e-40, -1e-40, 5e-324, np.inf, -np.inf,
                     1.0, 1.0078125, 0.00390625, 256.0, 1.0, -3.5], np.float64)
    return pool[rng.integers(0, len(pool), count)].astype(dtype)


@pytest.mark.parametrize("dtype_name", ["f32", "f64", "bf16", "f16", "c64"])
def test_user_op_reductions_match_left_fold_bit_for_bit(cache, monkeypatch, dtype_name):
    """Reducers without an MPI builtin run as MPI user-defined ops (xladist/collectives/user_op.py).
    Over 2 members every reducer does; over more, those whose bracketing cannot matter
    (min/max) do, and the rest fold generically.  Either way: bit-identical on all members and
    equal to the interpreter's left fold in rank order, NaN payloads and -0.0 included."""
    import xladist.collectives as C
    from xladist.collectives import reduction
    from tests.mpi.cases import NONCOMMUTATIVE, SELECT

    comm = cache.get(list(range(cache.world.size)))
    n = comm.size
    dtype = DTYPES[dtype_name]
    reducers = [C.SUM, C.PROD, NONCOMMUTATIVE] + ([] if dtype.kind == "c"
                                                  else [C.MAX, C.MIN, SELECT])
    # 64 KiB+ operands (vector loops, MPI's large-message algorithms) and an odd small one.
    for count in (70_001, 7):
        xs = [_special_input(r, count, dtype) for r in range(n)]
        for red in reducers:
            builtin = reduction.builtin_op(red, dtype) is not None
            user = not builtin and reduction.user_op_ok(red, dtype, n)
            # Prove which path runs: the generic path's all-to-all must not be reached.
            if user:
                monkeypatch.setattr(type(comm), "alltoall", _forbidden)
                monkeypatch.setattr(type(comm), "ialltoall", _forbidden)
            for sync in (True, False):
                got = (C.all_reduce(comm, xs[comm.rank], red) if sync
                       else C.all_reduce_start(comm, xs[comm.rank], red).wait())
                everyone = MPI.COMM_WORLD.allgather(got.tobytes())
                what = f"{dtype_name} x{count} {red} {'sync' if sync else 'async'} n={n}"
                assert len(set(everyone)) == 1, f"{what}: members differ in bits"
                want = reduction.fold(red, xs)
                if builtin:
                    # MPI_SUM/PROD's own tree: over 3+ members, specials (0 * inf after an
                    # underflow) may differ from the fold's order; that path is not this test's.
                    if n == 2:
                        _assert_values_equal(got, want, what)
                elif user:
                    assert got.tobytes() == want.tobytes(), f"{what}: not the left fold"
                else:
                    # The generic path folds blocks of 1/n of the operand: numpy's loops may pick
                    # a different NaN payload at another offset, so only values are compared.
                    _assert_values_equal(got, want, what)
            monkeypatch.undo()


def _assert_values_equal(got, want, what):
    wide = np.complex128 if got.dtype.kind == "c" else np.float64  # numpy's NaN-aware compare
    np.testing.assert_array_equal(got.astype(wide), want.astype(wide), err_msg=what)


def _forbidden(*args, **kwargs):
    raise AssertionError("the generic path ran where the user-defined op should have")


def test_user_op_reduce_scatter_matches_left_fold(cache):
    import xladist.collectives as C
    from xladist.collectives import reduction
    from tests.mpi.cases import NONCOMMUTATIVE

    comm = cache.get(list(range(cache.world.size)))
    n = comm.size
    dtype = DTYPES["bf16"]
    xs = [_special_input(r, 4096 * n, dtype) for r in range(n)]
    for red in (C.MAX, C.SUM, NONCOMMUTATIVE):
        got = C.reduce_scatter(comm, xs[comm.rank], red)
        want = np.split(reduction.fold(red, xs), n)[comm.rank]
        assert got.tobytes() == want.tobytes(), f"bf16 reduce-scatter {red} n={n}"


@pytest.mark.parametrize("name", ["max", "bf16-sum", "custom"])
def test_reduce_scatter_compiled_fold_matches_left_fold(cache, monkeypatch, name):
    """Non-builtin reducers reduce-scatter as all-to-all + a left fold in rank order that runs
    the cpu backend's compiled kernel on whole parts (reduction.fold with Reducer.into): the
    interpreter's left fold bit for bit at any group size, non-associative reducers too."""
    import xladist.collectives as C
    from xladist.collectives import reduction
    from xladist.bench.collectives import _reducers

    comm = cache.get(list(range(cache.world.size)))
    n = comm.size
    dtype, red, _, _ = _reducers()[name]

    def kernel_fn(a, b):
        out = np.empty_like(a)
        red.into(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
        return out

    # The reference folds element-wise with the same kernel, as fn (NaN payloads are the
    # kernel's choice, which numpy's maximum need not share), and with numpy for values.
    plain = reduction.Reducer(None, kernel_fn, red.name)
    calls = []

    def into(a, b, out):
        calls.append(a.size)
        red.into(a, b, out)

    counted = reduction.Reducer(red.kind, red.fn, red.name, into)
    xs = [_special_input(r, 4096 * n, dtype) for r in range(n)]
    monkeypatch.setattr(type(comm), "reduce_scatter_block", _forbidden)
    monkeypatch.setattr(type(comm), "ireduce_scatter_block", _forbidden)
    want = np.split(reduction.fold(plain, xs), n)[comm.rank]
    for sync in (True, False):
        calls.clear()
        got = (C.reduce_scatter(comm, xs[comm.rank], counted) if sync
               else C.reduce_scatter_start(comm, xs[comm.rank], counted).wait())
        assert got.tobytes() == want.tobytes(), f"{name} reduce-scatter n={n} sync={sync}"
        values = np.split(reduction.fold(reduction.Reducer(None, red.fn), xs), n)[comm.rank]
        _assert_values_equal(got, values, f"{name} reduce-scatter values n={n}")
        assert calls == [4096] * (n - 1), "the compiled kernel must fold whole parts"


def test_user_op_keeps_no_reducer_alive(cache):
    """Each program builds its own reducers, whose fn and into reach the whole program (a
    cluster's ranks load one per call). The user op's tables held every (reducer, dtype) and
    its fn for the process's life: a rank kept every program it ever ran (~50 KB per cluster
    call with a custom reducer). Now a reducer that goes takes nothing with it, its datatype
    serves the next reducer, and results stay the left fold, bit-identical on every member."""
    import gc
    import weakref

    import xladist.collectives as C
    from xladist.collectives import reduction, user_op
    from xladist.collectives.communicator import _BOUND_ENTRIES
    from xladist.semantics.order import maximum

    comm = cache.get(list(range(cache.world.size)))
    n = comm.size
    kept = reduction.Reducer("max", maximum, "kept max")  # alive throughout: still right
    refs, before = [], len(user_op._BY_TYPE)  # other tests' reducers live on (tests/mpi/cases.py)
    for i in range(300):
        payload = np.full(1000, i)  # what a program's reducer reaches

        def sub(a, b, payload=payload):
            return a - b + payload[:0].sum().astype(a.dtype)

        # max over any group (order-free), a custom non-associative reducer over two members
        red = (reduction.Reducer("max", maximum, f"max {i}") if n > 2 or i % 2
               else reduction.Reducer(None, sub, f"sub {i}"))
        dtype = np.dtype([np.float32, np.float64, DTYPES["bf16"]][i % 3])
        assert reduction.builtin_op(red, dtype) is None and reduction.user_op_ok(red, dtype, n)
        xs = [make_input(SEED, 7 * i + r, (5,), dtype) for r in range(n)]
        for r_, sync in ((red, i % 2 == 0), (kept, True)):
            got = (C.all_reduce(comm, xs[comm.rank], r_) if sync
                   else C.all_reduce_start(comm, xs[comm.rank], r_).wait())
            assert got.tobytes() == reduction.fold(r_, xs).tobytes(), f"{r_} {dtype} n={n}"
            assert len(set(MPI.COMM_WORLD.allgather(got.tobytes()))) == 1
        refs.append((weakref.ref(red), weakref.ref(payload)))
        del red, sub, payload
    gc.collect()
    # The communicator's bounded table of bound calls (communicator.py) keeps the latest few.
    alive = sum(r() is not None or p() is not None for r, p in refs)
    assert alive <= _BOUND_ENTRIES, f"{alive} of 300 reducers (or what their fn reaches) alive"
    # the datatypes in use: the live reducers', not one per reducer ever seen
    assert len(user_op._BY_TYPE) - before <= _BOUND_ENTRIES + 3, len(user_op._BY_TYPE) - before


def test_user_op_error_is_raised_not_swallowed(cache):
    import xladist.collectives as C
    from xladist.collectives.reduction import Reducer

    comm = cache.get(list(range(cache.world.size)))
    if comm.size != 2:
        pytest.skip("the user-op path for a custom reducer needs exactly two members")

    def broken(a, b):
        raise ZeroDivisionError("boom")

    x = np.ones(16, np.float32)
    # The error surfaces on every rank whose callback ran (MPI decides which ones combine).
    raised = False
    try:
        C.all_reduce(comm, x, Reducer(None, broken, "broken"))
    except ValueError as e:
        assert "reducer failed inside MPI" in str(e) and "boom" in str(e)
        raised = True
    assert any(MPI.COMM_WORLD.allgather(raised))
