"""While loops whose body holds collective-permutes and all-gathers, run by one native
function (xladist/compiler/native/collectives.py PermuteStep, AllGatherStep) over real MPI.

Each program runs natively and with the native path switched off (the Python executor);
the results must be the same bits, and numpy's answer computed from every rank's inputs.
Passes at any world size (run with -n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

from tests.mpi.native_loops.helpers import both_paths, loop_module

pytestmark = pytest.mark.mpi


def _pairs(pairs) -> str:
    return "{" + ",".join(f"{{{s},{t}}}" for s, t in pairs) + "}"


def permute_module(pairs, count: int) -> str:
    """x <- permute(x) + x (exact in f32 for small integers; NaNs and -0.0 pass through)."""
    t = f"f32[{count}]"
    steps = (f"  y = {t} collective-permute(c0), source_target_pairs={_pairs(pairs)}\n"
             f"  s = {t} add(y, c0)\n")
    return loop_module("native_permute", [t], steps, ["s"])


def permute_reference(xs, pairs, trips):
    x = xs.copy()
    with np.errstate(all="ignore"):
        for _ in range(trips):
            y = np.zeros_like(x)
            for s, t in pairs:
                y[t] = x[s]
            x = y + x
    return x


def gather_module(n: int, shape: tuple, dim: int) -> str:
    """acc <- acc + all-gather(x) along dim; x <- x + 1."""
    t = "f32[" + ",".join(map(str, shape)) + "]"
    out = list(shape)
    out[dim] *= n
    g = "f32[" + ",".join(map(str, out)) + "]"
    steps = (f"  g = {g} all-gather(c0), dimensions={{{dim}}}, replica_groups={{}}\n"
             f"  acc = {g} add(c1, g)\n"
             f"  onef = f32[] constant(1)\n"
             f"  ones = {t} broadcast(onef), dimensions={{}}\n"
             f"  x1 = {t} add(c0, ones)\n")
    return loop_module("native_gather", [t, g], steps, ["x1", "acc"])


def gather_reference(xs, dim, trips):
    acc = np.zeros(np.concatenate(list(xs), axis=dim).shape, np.float32)
    with np.errstate(all="ignore"):
        for t in range(trips):
            acc = acc + np.concatenate([x + np.float32(t) for x in xs], axis=dim)
    return acc


def _input(rank, shape):
    rng = np.random.default_rng([5, rank])
    pool = np.array([np.nan, -np.nan, 0.0, -0.0, 1e-40, np.inf, 1.0, -3.5, 256.0], np.float32)
    return pool[rng.integers(0, len(pool), int(np.prod(shape)))].reshape(shape)


def _both(module, xs, trips, monkeypatch, want_calls, what):
    n = MPI.COMM_WORLD.Get_size()
    return both_paths(module, [xs, np.full(n, trips, np.int32)], monkeypatch, want_calls, what)


@pytest.mark.parametrize("which", ["ring", "partial", "self"])
def test_native_permute_loop_matches_python_path_and_numpy(monkeypatch, which):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    # partial: rank 0 sends to 1 only (everyone else receives nothing: zeros, even rank 0
    # which sends); self: every rank keeps its own (a self pair) except 0 <-> 1 swap.
    pairs = {"ring": [(r, (r + 1) % n) for r in range(n)],
             "partial": [(0, 1)],
             "self": [(0, 1), (1, 0)] + [(r, r) for r in range(2, n)]}[which]
    for count in (3, 70_001):
        xs = np.stack([_input(r, (count,)) for r in range(n)])
        for trips in (0, 1, 3):
            what = f"{which} x{count} trips={trips} n={n}"
            got = _both(permute_module(pairs, count), xs, trips, monkeypatch,
                        [["collective-permute"]], what)
            np.testing.assert_array_equal(got, permute_reference(xs, pairs, trips)[me],
                                          err_msg=what)


@pytest.mark.parametrize("shape,dim,native", [((5,), 0, True), ((1, 3), 1, True),
                                              ((2, 3), 1, "callback")],
                         ids=["leading", "after-ones", "minor-called-back"])
def test_native_all_gather_loop_matches_python_path_and_numpy(monkeypatch, shape, dim, native):
    """Along the leading non-trivial dimension the loop runs natively; along another one
    (a strided result) it is called back in Python (native/callback.py), same results."""
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    module = gather_module(n, shape, dim)
    xs = np.stack([_input(r, shape) for r in range(n)])
    for trips in (0, 1, 3):
        what = f"{shape} dim={dim} trips={trips} n={n}"
        kind = "callback" if native == "callback" else "all-gather"
        got = _both(module, xs, trips, monkeypatch, [[kind]], what)
        np.testing.assert_array_equal(got, gather_reference(xs, dim, trips), err_msg=what)
        assert len(set(world.allgather(got.tobytes()))) == 1, what
    del me
