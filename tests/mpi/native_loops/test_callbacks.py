"""While loops holding thunks the native driver cannot run itself (an infeed, an outfeed, a
tuple all-reduce) next to kernels and a native all-reduce: the driver calls those back in
Python (xladist/compiler/native/callback.py) and runs the rest natively, over real MPI.

The loop runs natively with callbacks and on the Python executor (XLADIST_NATIVE_COLLECTIVES
off); the results, and every outfeed item, must be the same bits and numpy's answer from every
rank's items. An infeed that runs dry inside the native loop raises the Python path's error
(rank, instruction, message), never a crash or a hang. Passes at any world size.
"""

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from tests.mpi.native_loops.helpers import count_native_runs
from xladist.errors import ExecutionError

pytestmark = pytest.mark.mpi

C = 5
MODULE = f"""HloModule native_callbacks
sum {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
cond {{
  p = (s32[], s32[], token[], f32[{C}]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, k), direction=LT
}}
body {{
  p = (s32[], s32[], token[], f32[{C}]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  tok = token[] get-tuple-element(p), index=2
  acc = f32[{C}] get-tuple-element(p), index=3
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  feed = (f32[{C}], token[]) infeed(tok)
  x = f32[{C}] get-tuple-element(feed), index=0
  t1 = token[] get-tuple-element(feed), index=1
  twof = f32[] constant(2)
  two = f32[{C}] broadcast(twof), dimensions={{}}
  y = f32[{C}] multiply(x, two)
  ar = (f32[{C}], f32[{C}]) all-reduce(y, x), replica_groups={{}}, to_apply=sum
  a0 = f32[{C}] get-tuple-element(ar), index=0
  a1 = f32[{C}] get-tuple-element(ar), index=1
  m = f32[{C}] all-reduce(acc), replica_groups={{}}, to_apply=sum
  s0 = f32[{C}] add(a0, a1)
  acc1 = f32[{C}] add(s0, m)
  o = token[] outfeed(acc1, t1), outfeed_shape=f32[{C}]
  ROOT r = (s32[], s32[], token[], f32[{C}]) tuple(i1, k, o, acc1)
}}
ENTRY e {{
  k = s32[] parameter(0)
  zero = s32[] constant(0)
  fz = f32[] constant(0)
  a = f32[{C}] broadcast(fz), dimensions={{}}
  t0 = token[] after-all()
  init = (s32[], s32[], token[], f32[{C}]) tuple(zero, k, t0, a)
  w = (s32[], s32[], token[], f32[{C}]) while(init), condition=cond, body=body
  ROOT out = f32[{C}] get-tuple-element(w), index=3
}}
"""
CALLED = ["callback", "callback", "all-reduce", "callback"]  # infeed, tuple all-reduce, outfeed


def items(rank: int, trips: int) -> list:
    """Small integers (exact in f32 whatever the order of the sums), different per rank."""
    rng = np.random.default_rng([7, rank])
    return [rng.integers(-8, 9, C).astype(np.float32) for _ in range(trips)]


def run_loop(trips: int, supplied: int, native: bool, monkeypatch):
    """(this rank's result, its outfeed items, the steps of each loop run natively)."""
    n = MPI.COMM_WORLD.Get_size()
    got = []
    calls = count_native_runs(monkeypatch, native)
    try:
        outs = xladist.run(xladist.parse_hlo(MODULE), [np.full(n, trips, np.int32)], n=n,
                           check=False, verify=False, timeout=60,
                           infeed=lambda rank, replica, partition: items(rank, supplied),
                           outfeed=lambda rank, replica, partition, x: got.append(x))
    finally:
        monkeypatch.undo()
    return np.asarray(outs[MPI.COMM_WORLD.Get_rank()][0]), got, calls


def reference(n: int, trips: int) -> list:
    """The accumulator after each iteration (what every rank outfeeds)."""
    all_items = [items(r, trips) for r in range(n)]
    acc, seen = np.zeros(C, np.float32), []
    for t in range(trips):
        total = sum(all_items[r][t] for r in range(n))
        acc = 2 * total + total + n * acc
        seen.append(acc)
    return seen


@pytest.mark.parametrize("trips", [0, 1, 4])
def test_loop_with_callbacks_matches_python_path_and_numpy(monkeypatch, trips):
    n = MPI.COMM_WORLD.Get_size()
    native, native_items, calls = run_loop(trips, trips, True, monkeypatch)
    python, python_items, py_calls = run_loop(trips, trips, False, monkeypatch)
    assert calls == [CALLED] and py_calls == []
    assert native.tobytes() == python.tobytes()
    assert [a.tobytes() for a in native_items] == [a.tobytes() for a in python_items]
    want = reference(n, trips)
    np.testing.assert_array_equal(native, want[-1] if want else np.zeros(C, np.float32))
    assert len(native_items) == trips
    for got, w in zip(native_items, want):
        np.testing.assert_array_equal(got, w)


def test_infeed_running_dry_inside_the_native_loop_is_the_python_paths_error(monkeypatch):
    errors = []
    for native in (True, False):
        with pytest.raises(ExecutionError) as e:
            run_loop(4, 2, native, monkeypatch)  # two items for four iterations
        errors.append(e.value)
    MPI.COMM_WORLD.Barrier()
    native, python = errors
    assert str(native) == str(python), (str(native), str(python))
    assert native.rank == MPI.COMM_WORLD.Get_rank() and native.instruction == python.instruction
    assert "infeed exhausted" in str(native) and "feed" in str(native.instruction)


def test_the_demos_training_loop_runs_natively_with_the_python_paths_bits(monkeypatch):
    """`xladist demo`'s module (xladist/examples/train_mlp.py): infeed, dots, kernels, a tuple
    all-reduce, outfeed per step; parameters and every loss bit-identical on both paths."""
    from xladist.examples import train_mlp
    n, me = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
    cfg = train_mlp.Config(replicas=n, steps=6)
    module = train_mlp.build_module(cfg)
    params, batches = train_mlp.make_data(cfg)
    results = []
    for native in (True, False):
        losses = []
        calls = count_native_runs(monkeypatch, native)
        try:
            outs = xladist.run(module, [np.stack([p] * n) for p in params], n=n, check=False,
                               timeout=60, infeed=lambda r, replica, partition: batches[r],
                               outfeed=lambda r, replica, partition, x, seen=losses:
                               seen.append(x))
        finally:
            monkeypatch.undo()
        results.append(([np.asarray(o).tobytes() for o in outs[me]],
                        [np.asarray(x).tobytes() for x in losses], calls))
    (native_out, native_losses, calls), (python_out, python_losses, py_calls) = results
    assert len(calls) == 1 and calls[0] is not None and "callback" in calls[0], calls
    assert py_calls == []
    assert native_out == python_out and native_losses == python_losses
    assert len(native_losses) == cfg.steps
