"""Sends and recvs grouped in one async computation (xladist/hlo/async_groups.py), run for real:
`mpiexec -n N python -m pytest --with-mpi tests/mpi/test_async_p2p_groups.py`, N = 2 and 4
(tests/test_mpi_suites.py). Every rank runs `xladist.run` on tests/data/deadlock/async_group_*
on both backends and checks every device's results against numpy on all devices' inputs.
"""

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from xladist.runtime.api import run

DATA = Path(__file__).resolve().parent.parent / "data" / "deadlock"
N = MPI.COMM_WORLD.Get_size()
TIMEOUT = 60.0
BACKENDS = ("interpreter", "cpu")


def _program(name: str) -> str:
    path = DATA / f"{name}.n{N}.hlo"
    if not path.exists():
        pytest.skip(f"{path.name} is not written for {N} devices")
    return path.read_text()


def _inputs() -> np.ndarray:
    """Distinct small integers per device (exact in f32)."""
    rng = np.random.default_rng(7)
    return (rng.integers(-8, 9, size=(N, 4)) + 100 * np.arange(1, N + 1)[:, None]).astype(
        np.float32)


def _assert_all(got, want):
    assert len(got) == len(want) == N
    for d, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w), f"device {d}: {len(g)} results, expected {len(w)}"
        for i, (a, b) in enumerate(zip(g, w)):
            np.testing.assert_array_equal(a, b, err_msg=f"device {d}, result {i}")


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_exchange(backend):
    x = _inputs()
    got = run(_program("async_group_exchange"), [x], n=N, backend=backend, timeout=TIMEOUT)
    zeros = np.zeros(4, np.float32)
    # Forward {d, d+1}: device d gets x[d-1] (device 0 nothing); backward {N-1, 0}: device 0
    # gets 2 x[N-1].
    want = [[x[d - 1] if d else zeros, 2 * x[N - 1] if d == 0 else zeros] for d in range(N)]
    _assert_all(got, want)


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_ring_in_a_loop(backend):
    x = _inputs()
    got = run(_program("async_group_loop"), [x], n=N, backend=backend, timeout=TIMEOUT)
    # Each of 3 iterations rotates v by one device; acc sums the rotated values.
    rotated = [np.roll(x, k, axis=0) for k in (1, 2, 3)]
    want = [[rotated[-1][d], sum(r[d] for r in rotated)] for d in range(N)]
    _assert_all(got, want)


@pytest.mark.mpi
@pytest.mark.parametrize("backend", BACKENDS)
def test_group_with_a_host_send(backend):
    """A host send in the group hands this rank's data to the host; the exchange next to it
    swaps the two devices' inputs."""
    if N != 2:
        pytest.skip("async_group_with_host_send.hlo is written for 2 devices")
    me = MPI.COMM_WORLD.Get_rank()
    sent = []
    x = _inputs()
    got = run((DATA / "async_group_with_host_send.hlo").read_text(), [x], n=N,
              backend=backend, timeout=TIMEOUT,
              host_send=lambda rank, channel, array: sent.append((rank, channel, array)))
    _assert_all(got, [[x[1]], [x[0]]])
    assert [(r, c) for r, c, _ in sent] == [(me, 7)]
    np.testing.assert_array_equal(sent[0][2], x[me])
