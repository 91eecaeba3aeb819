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
    import collectives as C

    n = cache.world.size
    me = cache.device
    comm = cache.find([[1, 0]] if n > 1 else [[0]])
    x = make_input(SEED, me, (3, 2), DTYPES["f32"])
    got = C.collective_broadcast(comm, x)
    root = 1 if n > 1 else 0
    want = make_input(SEED, root, (3, 2), DTYPES["f32"]) if me <= 1 else np.zeros_like(x)
    np.testing.assert_array_equal(got, want)


def test_float_min_nan_and_signed_zero_identical_everywhere(cache):
    import collectives as C

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


def test_large_generic_and_builtin_all_reduce_bit_identical(cache):
    import ml_dtypes

    import collectives as C

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
