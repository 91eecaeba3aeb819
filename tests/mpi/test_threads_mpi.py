"""Compute threads inside an MPI job: the ranks on one node share its cores (found with
MPI_COMM_TYPE_SHARED), and a kernel split into blocks gives every rank the same bytes
whatever its thread count (and, for float sums, whatever CPU its code was built for).
Passes at any world size (run with -n 2 and -n 4)."""

import platform

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from xladist.runtime.rank import _share_cores
from xladist.compiler import parallel

pytestmark = pytest.mark.mpi

TEXT = """HloModule m
ENTRY main {
  a = f32[600,700] parameter(0)
  b = f32[600,700] parameter(1)
  m = f32[600,700] multiply(a, b)
  ROOT t = f32[600,700] tanh(m)
}
"""


def test_ranks_share_the_node_cores(monkeypatch):
    monkeypatch.delenv("XLADIST_THREADS", raising=False)
    comm = MPI.COMM_WORLD
    try:
        _share_cores(comm)  # every rank of this job runs on this one host
        expected = max(1, parallel.available_cores() // comm.Get_size())
        assert parallel.thread_count() == expected
        # BLAS runs on one thread; the pool splits large calls (blas_blocks.py).
        assert all(b["threads"] == parallel.BLAS_THREADS == 1 for b in parallel.blas_info())
    finally:
        parallel.set_local_ranks(1)


def test_every_thread_count_gives_every_rank_the_same_bytes():
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(7)  # same inputs on every rank
    a, b = (rng.standard_normal((600, 700)).astype(np.float32) for _ in range(2))
    exe = xladist.compile(xladist.parse_hlo(TEXT), backend="cpu")
    assert exe.program.builder.kernel_thunks[0].blocks is not None
    try:
        parallel.set_threads(1 + comm.Get_rank() * 3)  # 1, 4, 7, 10 threads
        out = np.asarray(exe(a, b)[0])
    finally:
        parallel.set_threads(None)
    digests = comm.allgather(out.tobytes())
    assert all(d == digests[0] for d in digests)
    np.testing.assert_allclose(out, np.tanh(a * b), rtol=2e-6, atol=2e-6)


SUMS = """HloModule m
add { x = f32[] parameter(0)
 y = f32[] parameter(1)
 ROOT s = f32[] add(x, y) }
ENTRY main {
  a = f32[2053,517] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[2053] reduce(a, z), dimensions={1}, to_apply=add
}
"""


def test_float_sums_give_every_rank_the_same_bytes_whatever_its_cpu_and_threads(monkeypatch):
    # Float sums have one order (codegen/lanes.py): each rank builds its code for another
    # CPU (SSE2, AVX2, the host's) and runs it on another number of threads.
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    monkeypatch.setenv("XLADIST_CACHE_DIR", "off")
    cpu = ["x86-64", "haswell", ""][rank % 3] if platform.machine() in ("x86_64", "AMD64") else ""
    monkeypatch.setenv("XLADIST_TARGET_CPU", cpu)
    a = np.random.default_rng(8).standard_normal((2053, 517)).astype(np.float32)
    exe = xladist.compile(xladist.parse_hlo(SUMS), backend="cpu")
    assert exe.program.builder.kernel_thunks[0].blocks is not None
    try:
        parallel.set_threads(1 + rank * 3)
        out = np.asarray(exe(a)[0])
    finally:
        parallel.set_threads(None)
    digests = comm.allgather(out.tobytes())
    assert all(d == digests[0] for d in digests)
    np.testing.assert_allclose(out, a.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-4)
