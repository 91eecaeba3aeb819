"""While loops whose body holds reduce-scatters and all-to-alls, run by one native function
(xladist/compiler/native/exchange.py: MPI_Reduce_scatter_block, MPI_Alltoall) over real MPI.

Each program runs natively and on the Python executor; the results must be the same bits,
and numpy's answer from every rank's inputs. Forms the driver does not take (a split
dimension after a non-trivial one, a reducer MPI has no builtin for) keep the Python path
with the same results. Passes at any world size (run with -n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

from tests.mpi.native_loops.helpers import both_paths, loop_module

pytestmark = pytest.mark.mpi


def _shape(dt, dims) -> str:
    return f"{dt}[" + ",".join(map(str, dims)) + "]"


def rs_module(dt: str, op: str, shape: tuple, dim: int, n: int) -> str:
    """acc <- acc + reduce-scatter(x); x <- x + x (k times; x handed on, acc gathers)."""
    out = list(shape)
    out[dim] //= n
    t, g = _shape(dt, shape), _shape(dt, out)
    steps = (f"  y = {g} reduce-scatter(c0), dimensions={{{dim}}}, replica_groups={{}}, "
             f"to_apply=red\n  acc = {g} add(c1, y)\n  x1 = {t} add(c0, c0)\n")
    return loop_module("exchange", [t, g], steps, ["x1", "acc"], dt, op)


def a2a_module(dt: str, shape: tuple, dim: int) -> str:
    """x <- all-to-all(x) + 1 (a carry swapped with its result buffer every iteration)."""
    t = _shape(dt, shape)
    steps = (f"  y = {t} all-to-all(c0), dimensions={{{dim}}}, replica_groups={{}}\n"
             f"  onec = {dt}[] constant(1)\n  ones = {t} broadcast(onec), dimensions={{}}\n"
             f"  x1 = {t} add(y, ones)\n")
    return loop_module("exchange", [t], steps, ["x1"], dt)


def rs_reference(xs, op, dim, trips, me):
    n = len(xs)
    fn = {"add": np.add, "maximum": np.maximum}[op]
    x = xs.copy()
    part = x.shape[dim + 1] // n
    acc = np.zeros(np.take(x[0], range(part), axis=dim).shape, x.dtype)
    for _ in range(trips):
        total = x[0]
        for r in range(1, n):
            total = fn(total, x[r])
        acc = acc + np.take(total, range(me * part, (me + 1) * part), axis=dim)
        x = x + x
    return acc


def a2a_reference(xs, dim, trips, me):
    n = len(xs)
    x = xs.copy()
    for _ in range(trips):
        parts = [np.split(x[r], n, axis=dim) for r in range(n)]
        x = np.stack([np.concatenate([parts[s][r] for s in range(n)], axis=dim)
                      for r in range(n)]) + 1
    return x[me]


# A form the driver does not take at compile time runs as a callback (native/callback.py);
# one the device cannot call natively keeps its step, called back at run time.
_KIND = {"callback": "callback"}


def _both(module, xs, trips, monkeypatch, want_calls, what):
    n = MPI.COMM_WORLD.Get_size()
    return both_paths(module, [xs, np.full(n, trips, np.int32)], monkeypatch, want_calls, what)


@pytest.mark.parametrize("dt,op,shape,dim,native", [
    ("f32", "add", ("4n", 3), 0, True),
    ("s32", "maximum", (1, "2n"), 1, True),
    ("f32", "add", (2, "2n"), 1, "callback"),    # parts are strided: called back in Python
    ("f32", "maximum", ("2n",), 0, "fallback"),  # NaN-propagating max: no MPI builtin, so
                                                 # the step is called back at run time
], ids=["sum-leading", "s32-max-after-ones", "minor-called-back", "fmax-called-back"])
def test_native_reduce_scatter_loop_matches_python_path_and_numpy(monkeypatch, dt, op, shape,
                                                                  dim, native):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    shape = tuple(int(s[:-1]) * n if isinstance(s, str) else s for s in shape)
    np_t = {"f32": np.float32, "s32": np.int32}[dt]
    rng = np.random.default_rng(3)
    xs = rng.integers(-8, 9, (n, *shape)).astype(np_t)  # small integers: any order, exact
    module = rs_module(dt, op, shape, dim, n)
    for trips in (0, 1, 3):
        what = f"{dt} {op} {shape} dim={dim} trips={trips} n={n}"
        got = _both(module, xs, trips, monkeypatch, [[_KIND.get(native, "reduce-scatter")]],
                    what)
        np.testing.assert_array_equal(got, rs_reference(xs, op, dim, trips, me), err_msg=what)


@pytest.mark.parametrize("shape,dim,native", [(("2n", 3), 0, True), ((1, "n"), 1, True),
                                              ((3, "n"), 1, "callback")],
                         ids=["leading", "after-ones", "minor-called-back"])
def test_native_all_to_all_loop_matches_python_path_and_numpy(monkeypatch, shape, dim, native):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    shape = tuple(int(s[:-1] or 1) * n if isinstance(s, str) else s for s in shape)
    xs = np.stack([np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * (r + 1)
                   for r in range(n)])
    xs[0].flat[0] = np.nan
    module = a2a_module("f32", shape, dim)
    for trips in (0, 1, 3):
        what = f"{shape} dim={dim} trips={trips} n={n}"
        got = _both(module, xs, trips, monkeypatch, [[_KIND.get(native, "all-to-all")]], what)
        np.testing.assert_array_equal(got, a2a_reference(xs, dim, trips, me), err_msg=what)
