"""Channels over MPI, inside an MPI job: `mpiexec -n N python -m pytest --with-mpi tests/mpi`.

Every rank runs `xladist.run` in place on the hand-written programs of tests/data/deadlock/
(the valid ones for this world size) and checks every device's result against a numpy
reference computed from ALL devices' inputs.  Runs at N = 2 and 4 (tests/test_mpi_suites.py).
"""

from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from xladist.runtime.api import run

DATA = Path(__file__).resolve().parent.parent / "data" / "deadlock"
N = MPI.COMM_WORLD.Get_size()
TIMEOUT = 60.0


def _inputs(n: int, size: int, seed: int = 0) -> np.ndarray:
    """Distinct small integers per device (exact in f32 whatever the summation order)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-8, 9, size=(n, size)) + 100 * np.arange(n)[:, None]
    return x.astype(np.float32)


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _sized(name: str) -> str:
    """The file written for this world size (`name.n2.hlo` / `name.n4.hlo`)."""
    path = DATA / f"{name}.n{N}.hlo"
    if not path.exists():
        pytest.skip(f"{path.name} is not written for {N} devices")
    return path.read_text()


def _assert_all(got, want):
    assert len(got) == len(want)
    for d, (g, w) in enumerate(zip(got, want)):
        assert len(g) == len(w), f"device {d}: {len(g)} results, expected {len(w)}"
        for i, (a, b) in enumerate(zip(g, w)):
            np.testing.assert_array_equal(a, b, err_msg=f"device {d}, result {i}")


@pytest.mark.mpi
def test_ring_send_recv():
    x = _inputs(N, 4)
    got = run(_sized("ring_send_recv"), [x], n=N, timeout=TIMEOUT)
    # Device d receives from device d-1 (pairs {d, d+1 mod N}).
    _assert_all(got, [[x[(d - 1) % N]] for d in range(N)])


@pytest.mark.mpi
def test_bidirectional_exchange():
    x = _inputs(N, 8, seed=1)
    got = run(_sized("bidirectional_exchange"), [x], n=N, timeout=TIMEOUT)
    zeros = np.zeros(8, np.float32)
    want = []
    for d in range(N):
        # Channel 1 carries even -> odd, channel 2 odd -> even; an end no pair names gets zeros.
        from_even = x[d - 1] if d % 2 else zeros
        from_odd = zeros if d % 2 else x[d + 1]
        want.append([from_even, from_odd])
    _assert_all(got, want)


def _pipeline_reference(bias: np.ndarray, micro_batches: int = 4) -> np.ndarray:
    carry = np.zeros_like(bias)
    acc = np.zeros_like(bias)
    for _ in range(micro_batches):
        # Stage p gets what stage p-1 computed in the previous iteration; stage 0 gets zeros.
        activation = np.concatenate([np.zeros_like(bias[:1]), carry[:-1]])
        carry = activation + bias
        acc += carry
    return acc


@pytest.mark.mpi
def test_pipeline_inside_while_loop():
    bias = _inputs(N, 4, seed=2)
    got = run(_sized("pipeline_while"), [bias], n=N, timeout=TIMEOUT)
    want = _pipeline_reference(bias)
    _assert_all(got, [[want[d]] for d in range(N)])


@pytest.mark.mpi
@pytest.mark.parametrize("iterations", [2, 3])
def test_pipelined_ring_handles_travel_through_loop_state(iterations):
    # The dones of a transfer run one iteration after its recv/send: the MPI requests travel
    # in the while state. One transfer before the loop, one per iteration: iterations + 1 hops.
    text = _sized("pipelined_ring").replace("%three = s32[] constant(3)",
                                            f"%three = s32[] constant({iterations})")
    x = _inputs(N, 4, seed=3)
    got = run(text, [x], n=N, timeout=TIMEOUT)
    hops = iterations + 1
    _assert_all(got, [[x[(d - hops) % N]] for d in range(N)])


@pytest.mark.mpi
def test_async_collectives_overlapping_compute():
    text = _text("async_overlap.hlo").replace("num_partitions=2", f"num_partitions={N}")
    x = _inputs(N, 8, seed=4)
    y = np.stack([np.eye(8, dtype=np.float32) * (d + 1) for d in range(N)])
    got = run(text, [x, y], n=N, timeout=TIMEOUT)
    total = x.sum(axis=0)
    _assert_all(got, [[N * total, y[d] @ y[d], total] for d in range(N)])


HOST_IO = """\
HloModule host_io, num_partitions={n}

ENTRY %main (x: f32[3]) -> f32[3] {{
  %x = f32[3]{{0}} parameter(0)
  %t0 = token[] after-all()
  %recv = (f32[3]{{0}}, u32[], token[]) recv(%t0), channel_id=5, is_host_transfer=true
  %recv-done = (f32[3]{{0}}, token[]) recv-done(%recv), channel_id=5, is_host_transfer=true
  %data = f32[3]{{0}} get-tuple-element(%recv-done), index=0
  %t1 = token[] get-tuple-element(%recv-done), index=1
  %sum = f32[3]{{0}} add(%x, %data)
  %send = (f32[3]{{0}}, u32[], token[]) send(%sum, %t1), channel_id=6, is_host_transfer=true
  %send-done = token[] send-done(%send), channel_id=6, is_host_transfer=true
  ROOT %out = f32[3]{{0}} multiply(%sum, %sum)
}}
"""


@pytest.mark.mpi
def test_host_transfers_call_the_callbacks():
    me = MPI.COMM_WORLD.Get_rank()
    sent = []

    def host_recv(rank, channel):
        return np.full(3, 1000 * rank + channel, np.float32)

    def host_send(rank, channel, array):
        sent.append((rank, channel, array))

    x = _inputs(N, 3, seed=5)
    got = run(HOST_IO.format(n=N), [x], n=N, timeout=TIMEOUT, host_send=host_send,
              host_recv=host_recv)
    sums = [x[d] + np.float32(1000 * d + 5) for d in range(N)]
    _assert_all(got, [[s * s] for s in sums])
    # In an MPI job the callbacks run in each rank's own process.
    assert [(r, c) for r, c, _ in sent] == [(me, 6)]
    np.testing.assert_array_equal(sent[0][2], sums[me])
