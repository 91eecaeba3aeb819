"""The data-parallel MLP step loop (xladist/examples/train_mlp.py build_step_loop: dots,
kernels and one all-reduce per gradient) runs as one native driver over real MPI: its dots
are numpy's BLAS calls made natively (compiler/native/blas.py). Natively and on the Python
executor the trained parameters must be the same bits, the same on every rank, and close to
numpy's float64 SGD. Passes at any world size (-n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

from tests.mpi.native_loops.helpers import run_counted
from xladist.examples import train_mlp

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("steps", [0, 1, 7])
def test_mlp_step_loop_runs_natively_with_the_python_paths_bits(monkeypatch, steps):
    world = MPI.COMM_WORLD
    n = world.Get_size()
    cfg = train_mlp.Config(replicas=n, steps=1)
    module = train_mlp.build_step_loop(cfg)
    params, batches = train_mlp.make_data(cfg)
    xs = np.stack([batches[r][0][0] for r in range(n)])
    ys = np.stack([batches[r][0][1] for r in range(n)])
    args = [np.stack([p] * n) for p in params] + [xs, ys, np.full(n, steps, np.int32)]
    native, calls = run_counted(module, args, True, monkeypatch)
    python, py_calls = run_counted(module, args, False, monkeypatch)
    assert [sorted(set(c)) for c in calls] == [["all-reduce", "dot"]], calls
    assert py_calls == []
    for a, b in zip(native, python):
        assert a.tobytes() == b.tobytes(), "native and Python paths differ in bits"
    assert len(set(world.allgather(b"".join(a.tobytes() for a in native)))) == 1
    _, want = train_mlp.reference(params, [[batches[r][0]] * steps for r in range(n)],
                                  cfg.lr)
    for a, w in zip(native, want if steps else params):
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-5)
