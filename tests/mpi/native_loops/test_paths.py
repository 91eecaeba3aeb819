"""While loops whose body holds kernels and all-reduces, run by one native function
(xladist/compiler/native/loop.py, native/collectives.py) over real MPI.

Each program runs twice in the same world: natively and with the native path switched off
(the Python executor, whose collectives the other MPI suites check). The results must be
the same bits, the same bits on every rank, and the values of numpy's left fold over every
rank's inputs; inputs mix NaNs of two signs, signed zeros, subnormals, infinities and bf16
rounding ties. Passes at any world size (run with -n 2 and -n 4).
"""

import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI

import xladist
from xladist.collectives import reduction
from xladist.compiler.native import loop as native_loop

pytestmark = pytest.mark.mpi

HLO_TYPES = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16}
OPS = {"sum": ("add", np.add), "max": ("maximum", np.maximum)}


def loop_module(dt: str, red: str, count: int, twice: bool) -> str:
    """k iterations of x <- all-reduce(x) (twice: x <- all-reduce(-all-reduce(x)))."""
    op = OPS[red][0]
    t = f"{dt}[{count}]"
    state = f"(s32[], s32[], {t})"
    steps = f"  r = {t} all-reduce(x), replica_groups={{}}, to_apply=red\n"
    if twice:
        steps += (f"  m = {t} negate(r)\n"
                  f"  r2 = {t} all-reduce(m), replica_groups={{}}, to_apply=red\n")
    last = "r2" if twice else "r"
    return f"""HloModule native_loop_{dt}_{red}
red {{
  a = {dt}[] parameter(0)
  b = {dt}[] parameter(1)
  ROOT c = {dt}[] {op}(a, b)
}}
cond {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, k), direction=LT
}}
body {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  x = {t} get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
{steps}  ROOT t = {state} tuple(i1, k, {last})
}}
ENTRY e {{
  x = {t} parameter(0)
  k = s32[] parameter(1)
  zero = s32[] constant(0)
  init = {state} tuple(zero, k, x)
  w = {state} while(init), condition=cond, body=body
  ROOT out = {t} get-tuple-element(w), index=2
}}
"""


def special_input(rank: int, count: int, dtype) -> np.ndarray:
    """Values whose sums are exact in any order (so MPI's tree and the fold agree), NaNs of
    two signs, signed zeros, subnormals, infinities, bf16 ties; different on every rank."""
    rng = np.random.default_rng([11, rank])
    # A subnormal of the dtype: sums of a few stay exact in any order (5e-324 next to 1e-40
    # in f64 would not: 5e-324 + 1e-40 - 1e-40 depends on the bracketing).
    tiny = 5e-324 if np.dtype(dtype) == np.float64 else 1e-40
    pool = np.array([np.nan, -np.nan, 0.0, -0.0, tiny, -tiny, np.inf, -np.inf,
                     1.0, 1.0078125, 0.00390625, 256.0, -3.5], np.float64)
    return pool[rng.integers(0, len(pool), count)].astype(dtype)


def reference(xs: np.ndarray, red: str, trips: int, twice: bool, me: int) -> np.ndarray:
    fn = reduction.Reducer(red, OPS[red][1])
    x = xs
    with np.errstate(all="ignore"):
        for _ in range(trips):
            r = reduction.fold(fn, list(x))
            if twice:
                r = reduction.fold(fn, [-r] * len(x))
            x = np.stack([r] * len(x))
    return x[me]


def _run(module, xs, trips, native: bool, monkeypatch):
    n = MPI.COMM_WORLD.Get_size()
    calls = []
    run = native_loop.NativeLoop.run

    def counted(self, state, owned, bound=None, wd=None, rs=None):
        calls.append((bound is not None, sorted(self.in_place)))
        return run(self, state, owned, bound, wd, rs)

    monkeypatch.setattr(native_loop, "COLLECTIVES", native)
    monkeypatch.setattr(native_loop.NativeLoop, "run", counted)
    try:
        outs = xladist.run(module, [xs, np.full(n, trips, np.int32)], n=n, check=False,
                           verify=False)
    finally:
        monkeypatch.undo()
    return outs, calls


@pytest.mark.parametrize("twice", [False, True], ids=["one", "two"])
@pytest.mark.parametrize("dt,red", [("f32", "sum"), ("f64", "sum"), ("f32", "max"),
                                    ("bf16", "sum"), ("bf16", "max")])
def test_native_loop_matches_python_path_and_numpy(monkeypatch, dt, red, twice):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    dtype = np.dtype(HLO_TYPES[dt])
    # Native whatever the reducer: one MPI call when MPI has the op, a user op whose tree is
    # the left fold, or (the compiled kernel at hand) the ordered reduce-scatter +
    # all-gather (xladist/collectives/ordered.py: from 192 KiB, and for a bf16 sum over 3+ members).
    for count in (3, 70_001):  # an odd small one; 64 KiB+ (MPI's large-message algorithms)
        module = xladist.parse_hlo(loop_module(dt, red, count, twice))
        xs = np.stack([special_input(r, count, dtype) for r in range(n)])
        for trips in (0, 1, 3):
            what = f"{dt} {red} x{count} trips={trips} twice={twice} n={n}"
            native, calls = _run(module, xs, trips, True, monkeypatch)
            python, py_calls = _run(module, xs, trips, False, monkeypatch)
            # x' = all-reduce(x) reduces in place (MPI_IN_PLACE); the second form swaps.
            want_calls = [(True, [] if twice else [2])]
            assert calls == want_calls, f"{what}: native path {calls}"
            assert py_calls == [], what
            got = np.asarray(native[me][0])
            everyone = world.allgather(got.tobytes())
            assert trips == 0 or len(set(everyone)) == 1, f"{what}: members differ in bits"
            assert got.tobytes() == np.asarray(python[me][0]).tobytes(), \
                f"{what}: native and Python paths differ in bits"
            want = reference(xs, red, trips, twice, me)
            np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64),
                                          err_msg=what)
            if red == "sum" and dt in ("f32", "f64") and trips:
                nan = np.isnan(got)
                canonical = np.full(int(nan.sum()), np.nan, dtype)
                assert got[nan].tobytes() == canonical.tobytes(), f"{what}: NaN not canonical"


def test_loop_with_a_non_associative_reducer_over_3_members_runs_ordered(monkeypatch):
    """A bf16 sum over 3+ members is one MPI call nowhere (its tree would not be the left
    fold): the loop runs it natively through the ordered reduce-scatter + all-gather, in
    place, with the Python path's bits."""
    import importlib
    all_reduce = importlib.import_module("xladist.collectives.all_reduce")  # the module
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    if n < 3:
        pytest.skip("over two members every reducer is one MPI call")
    module = xladist.parse_hlo(loop_module("bf16", "sum", 5, False))
    xs = np.stack([special_input(r, 5, ml_dtypes.bfloat16) for r in range(n)])
    made = []
    real = all_reduce._ordered_native

    def ordered(*args):
        made.append(args[-1])
        return real(*args)

    monkeypatch.setattr(native_loop, "COLLECTIVES", True)
    monkeypatch.setattr(all_reduce, "_ordered_native", ordered)
    native, calls = _run(module, xs, 2, True, monkeypatch)
    assert made and calls == [(True, [2])], (made, calls)
    python, _ = _run(module, xs, 2, False, monkeypatch)
    assert np.asarray(native[me][0]).tobytes() == np.asarray(python[me][0]).tobytes()
    np.testing.assert_array_equal(np.asarray(native[me][0]).astype(np.float64),
                                  reference(xs, "sum", 2, False, me).astype(np.float64))


@pytest.mark.parametrize("name", ["max", "bf16-sum", "custom"])
def test_native_user_function_matches_the_python_callback_bit_for_bit(name):
    """A compiled reducer's MPI_User_function (native/collectives.py, registered by
    xladist/collectives/native_ops.py) against user_op.py's Python callback running the same kernel:
    the same bits, on every member, where the user op runs (user_op_ok), sync and async."""
    import dataclasses

    import xladist.collectives as C
    from xladist.bench.collectives import _reducers
    from xladist.collectives import CommunicatorCache

    world = MPI.COMM_WORLD
    n = world.Get_size()
    dtype, red, _, _ = _reducers()[name]
    assert red.native, "the compiled reducer has no native MPI function"
    if not reduction.user_op_ok(red, dtype, n):
        pytest.skip(f"{name} over {n} members folds generically")
    # Without the kernel's address, so that no size takes the ordered path instead.
    red = dataclasses.replace(red, kernel=None)
    python = dataclasses.replace(red, native=None)
    cache = CommunicatorCache()
    cache.prepare([[list(range(n))]])
    comm = cache.get(list(range(n)))
    for count in (70_001, 7):
        x = special_input(world.Get_rank(), count, dtype)
        for sync in (True, False):
            got, want = ((C.all_reduce(comm, x, r) if sync
                          else C.all_reduce_start(comm, x, r).wait()) for r in (red, python))
            what = f"{name} x{count} n={n} sync={sync}"
            assert got.tobytes() == want.tobytes(), f"{what}: native and Python ops differ"
            assert len(set(world.allgather(got.tobytes()))) == 1, f"{what}: members differ"
    cache.free()
