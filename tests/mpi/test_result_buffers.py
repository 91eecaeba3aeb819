"""What one repeated collective costs in memory once warm, over real MPI (-n 2 and -n 4).

The consumer of a collective usually still holds the previous result when it asks for the
next one (the executor replaces an instruction's value only after the call returns; a loop
carries last iteration's value).  Each call must then still write straight into a recycled
result buffer: no fresh allocation of result size (which, for large arrays, also means
fresh pages to fault in) and no staging copy -- raw mpi4py on preallocated buffers does
neither.  Values are checked against numpy on every member's known input.
"""

import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

import xladist.collectives as C
from xladist.collectives import MpiCommunicator

pytestmark = pytest.mark.mpi

OPS = ["all-gather", "reduce-scatter", "collective-permute", "all-reduce"]


class _Recording(MpiCommunicator):
    """An MPI communicator that remembers the receive buffer of its last primitive call."""

    last_recv = None

    def allgather(self, send, recv, label=None):
        self.last_recv = recv
        super().allgather(send, recv, label)

    def reduce_scatter_block(self, send, recv, op, label=None):
        self.last_recv = recv
        super().reduce_scatter_block(send, recv, op, label)

    def permute(self, send, recv, dest, source, label=None):
        self.last_recv = recv
        super().permute(send, recv, dest, source, label)

    def allreduce(self, send, recv, op, label=None):
        self.last_recv = recv
        super().allreduce(send, recv, op, label)


@pytest.fixture(scope="module")
def comm():
    c = _Recording(MPI.COMM_WORLD.Dup())
    yield c
    c.free()


def _case(comm, op: str, nbytes: int, place=lambda x: x):
    """(call, expected result) of ``op`` on float32 data of ``nbytes`` per member's operand
    (small integers: every sum is exact in any order); ``place(x)`` gives the operand its
    memory."""
    n, r = comm.size, comm.rank
    count = nbytes // 4 // n * n
    base = (np.arange(count) % 7).astype(np.float32)
    if op == "all-gather":
        part = count // n
        x = place(base[:part] + r)
        expected = np.concatenate([base[:part] + i for i in range(n)])
        return (lambda: C.all_gather(comm, x, 0, label="t")), expected
    if op == "reduce-scatter":
        part = count // n
        x = place(base + r)
        total = base * n + n * (n - 1) // 2
        return (lambda: C.reduce_scatter(comm, x, C.SUM, 0, label="t")), \
            total[r * part:(r + 1) * part]
    if op == "collective-permute":
        dest, src = (r + 1) % n, (r - 1) % n
        x = place(base + r)
        return (lambda: C.collective_permute(comm, x, dest, src, label="t")), base + src
    x = place(base + r)
    return (lambda: C.all_reduce(comm, x, C.SUM, label="t")), base * n + n * (n - 1) // 2


@pytest.mark.parametrize("nbytes", [1 << 16, 1 << 20], ids=["64K", "1M"])
@pytest.mark.parametrize("op", OPS)
def test_warm_call_allocates_nothing_while_the_last_result_is_held(comm, op, nbytes):
    call, expected = _case(comm, op, nbytes)
    prev = call()
    prev = call()  # warm: the pool now holds two buffers of the result's shape
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        seen = []
        for _ in range(6):
            out = call()  # `prev` is still referenced here, as by an executor
            seen.append(np.shares_memory(out, prev))
            assert comm.last_recv is out  # MPI wrote straight into the result
            prev = out
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not any(seen), "a result was handed out again while its holder still had it"
    # Raw mpi4py allocates nothing per call; a fresh result (or staging) of expected.nbytes
    # would show up in the peak.
    assert peak - base < expected.nbytes // 4, \
        f"{op}: {peak - base} bytes allocated over 6 warm calls (result {expected.nbytes})"
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(prev, expected)


@pytest.mark.parametrize("shape, dim", [((1 << 14,), 0), ((1, 1 << 14), 1),
                                        ((1, 1, 1 << 12), 2)])
def test_all_gather_writes_straight_into_its_result(comm, shape, dim):
    """Nothing but ones before the gathered dimension: MPI_Allgather's receive buffer is
    the result itself (no staging buffer, no copy), on the first call and once warm."""
    n, r = comm.size, comm.rank
    x = np.full(shape, r, np.float32)
    for _ in range(3):
        out = C.all_gather(comm, x, dim, label="t")
        assert comm.last_recv is out
        expected = np.concatenate([np.full(shape, i, np.float32) for i in range(n)], axis=dim)
        np.testing.assert_array_equal(out, expected)


def _at_page_offset(x: np.ndarray, shift: int) -> np.ndarray:
    """A copy of ``x`` whose data starts at page offset ``shift``."""
    raw = np.empty(x.nbytes + 8192, np.uint8)
    moved = np.ndarray(x.shape, x.dtype, raw, (shift - raw.ctypes.data) % 4096)
    moved[...] = x
    return moved


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shift", [0, 64, 2048, 4032])
def test_large_results_start_half_a_page_from_their_operand(comm, op, shift):
    """From PLACE_MIN_BYTES a result starts PLACE_APART bytes past its operand's page offset
    (MPI copying into a destination at its source's page offset stalls on 4K aliasing),
    wherever the operand lies, and the values are unchanged."""
    from xladist.collectives.communicator import PLACE_APART, PLACE_MIN_BYTES
    call, expected = _case(comm, op, 4 * PLACE_MIN_BYTES,
                           lambda x: _at_page_offset(x, shift))
    for _ in range(3):
        out = call()
        assert (out.ctypes.data - shift) % 4096 == PLACE_APART
        np.testing.assert_array_equal(out, expected)
