"""`xladist bench collectives --in-loop` (xladist/bench/in_loop.py): the loop runs through the
real runtime under mpiexec and its results are checked against numpy (#wrong column)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from tests.paths import ROOT as ROOT_PATH

ROOT = str(ROOT_PATH)
UNDER_MPI = any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_SIZE"))


def test_loop_module_runs_k_all_reduces_in_the_interpreter():
    import xladist
    from xladist.bench.in_loop import loop_module

    module = xladist.parse_hlo(loop_module(3, "max"))
    exe = xladist.compile(module, backend="interpreter")
    x = np.array([1.0, -2.0, 5.0], np.float32)
    # One device: an all-reduce is the identity, the loop returns x after k trips.
    np.testing.assert_array_equal(exe(x, np.int32(4))[0], x)


@pytest.mark.skipif(UNDER_MPI, reason="launches its own mpiexec")
@pytest.mark.slow
def test_in_loop_bench_under_mpiexec():
    proc = subprocess.run(
        [sys.executable, "-m", "xladist", "bench", "collectives", "-n", "2", "--in-loop",
         "--sizes", "8,4K", "--iters", "3", "--repeats", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()
            if line.strip() and not line.startswith("#")]
    assert [(r[0], r[1]) for r in rows] == [("sum", "8"), ("sum", "4K"), ("max", "8"),
                                            ("max", "4K")]
    assert all(r[-1] == "0" for r in rows)  # #wrong


def test_in_loop_bench_refuses_bad_options():
    from xladist.bench.in_loop import main

    assert main(["--in-loop", "--reducer", "min"]) == 2
    assert main(["--in-loop", "--iters", "1"]) == 2


def test_vs_jax_distributed_says_so_and_exits_0_without_jax(tmp_path):
    # A `jax` that fails to import stands in for jax not being installed.
    (tmp_path / "jax.py").write_text("raise ImportError('no jax here')\n")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks",
                                                        "vs_jax_distributed.py")],
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "jax is not installed" in proc.stdout
