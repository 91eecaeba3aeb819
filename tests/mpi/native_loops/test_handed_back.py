"""While loops whose body hands a carry leaf back unchanged while a collective reads it and
hands its own result to the loop (`(x, y) <- (x, collective(x))`): inplace.py gives such a
leaf its source (the parameter leaf) when the body never writes it, so the loop runs natively
(native/loop.py). Each program runs natively and on the Python executor; the results must be
the same bits, on every rank, and numpy's. Passes at any world size (-n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from tests.mpi.native_loops.helpers import loop_module, run_counted

pytestmark = pytest.mark.mpi

STEPS = {
    "all-reduce": "all-reduce(c0), replica_groups={}, to_apply=red",
    "collective-permute": "collective-permute(c0), source_target_pairs={PAIRS}",
    "all-gather": "all-gather(c0), dimensions={0}, replica_groups={}",
}


def module(kind: str, n: int, count: int) -> str:
    """k iterations of (x, y) <- (x, collective(x)); the loop returns (x, y)."""
    t = f"f32[{count}]"
    g = f"f32[{count * n}]" if kind == "all-gather" else t
    pairs = "{" + ",".join(f"{{{r},{(r + 1) % n}}}" for r in range(n)) + "}"
    op = STEPS[kind].replace("{PAIRS}", pairs)
    return loop_module("handed_back", [t, g], f"  y = {g} {op}\n", ["c0", "y"], op="add",
                       all_out=True)


def reference(kind: str, xs: np.ndarray, trips: int, me: int):
    n = len(xs)
    y = np.zeros(xs.shape[1] * (n if kind == "all-gather" else 1), np.float32)
    if trips:
        y = {"all-reduce": lambda: np.sum(xs, axis=0, dtype=np.float32),
             "collective-permute": lambda: xs[(me - 1) % n],
             "all-gather": lambda: xs.reshape(-1)}[kind]()
    return xs[me], y


@pytest.mark.parametrize("kind", list(STEPS))
def test_leaf_handed_back_next_to_a_collective_runs_natively(monkeypatch, kind):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    # Small integers: every sum order gives the same bits.
    xs = np.stack([np.arange(5, dtype=np.float32) * (r + 1) - 2 for r in range(n)])
    text = module(kind, n, 5)
    program = xladist.compiler.program.CpuProgram(xladist.parse_hlo(text))
    assert "native loop" in str(program.explain()), "the loop is not native"
    for trips in (0, 1, 4):
        what = f"{kind} trips={trips} n={n}"
        args = [xs, np.full(n, trips, np.int32)]
        got, calls = run_counted(text, args, True, monkeypatch)
        python, py_calls = run_counted(text, args, False, monkeypatch)
        assert calls == [[kind]], f"{what}: native path {calls}"
        assert py_calls == [], what
        for a, b, want in zip(got, python, reference(kind, xs, trips, me)):
            assert a.tobytes() == b.tobytes(), f"{what}: native and Python paths differ"
            np.testing.assert_array_equal(a, want, err_msg=what)
