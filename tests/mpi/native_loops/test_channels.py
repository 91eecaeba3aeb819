"""While loops whose body holds send/recv channels, run by one native function
(xladist/compiler/native/channels.py: MPI_Issend / MPI_Irecv, MPI_Wait) over real MPI.

Each program runs natively and on the Python executor (p2p.py); the results must be the
same bits, and numpy's answer from every rank's inputs (NaNs of both signs, -0.0,
subnormals travel as bytes). A device no pair names sends to nobody and receives zeros; a
recv expecting more bytes than its peer sends fails with the same error on both paths.
Passes at any world size (run with -n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from tests.mpi.native_loops.helpers import both_paths, loop_module, run_counted
from xladist.errors import ExecutionError

pytestmark = pytest.mark.mpi

STEPS = ["recv", "send", "recv-done", "send-done"]


def _pairs(pairs) -> str:
    return "{" + ",".join(f"{{{s},{t}}}" for s, t in pairs) + "}"


def channel_module(n: int, pairs, count: int, recv_count: int | None = None,
                   scale: bool = False) -> str:
    """x <- recv(channel 1) + x, sending x (scale: sending x * 2, a value computed in the
    body) to the pair's target; a partitioned module of n devices."""
    t, rt = f"f32[{count}]", f"f32[{recv_count or count}]"
    attr = f'frontend_attributes={{_xla_send_recv_source_target_pairs="{_pairs(pairs)}"}}'
    data = "c0"
    steps = "  tok = token[] after-all()\n"
    if scale:
        steps += f"  twof = f32[] constant(2)\n  two = {t} broadcast(twof), dimensions={{}}\n" \
                 f"  d = {t} multiply(c0, two)\n"
        data = "d"
    steps += (f"  r = ({rt}, u32[], token[]) recv(tok), channel_id=1, {attr}\n"
              f"  s = ({t}, u32[], token[]) send({data}, tok), channel_id=1, {attr}\n"
              f"  rd = ({rt}, token[]) recv-done(r), channel_id=1\n"
              f"  sd = token[] send-done(s), channel_id=1\n"
              f"  y = {rt} get-tuple-element(rd), index=0\n")
    if recv_count is None:
        steps += f"  z = {t} add(y, c0)\n"
    else:
        steps += f"  z = {t} slice(y), slice={{[0:{count}]}}\n"
    text = loop_module("native_channels", [t], steps, ["z"])
    return text.replace("HloModule native_channels", f"HloModule native_channels, "
                                                     f"num_partitions={n}", 1)


def channel_reference(xs, pairs, trips, scale=False):
    x = xs.copy()
    with np.errstate(all="ignore"):
        for _ in range(trips):
            y = np.zeros_like(x)
            for s, t in pairs:
                y[t] = x[s] * np.float32(2) if scale else x[s]
            x = y + x
    return x


def _inputs(n: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(5)
    pool = np.array([np.nan, -np.nan, 0.0, -0.0, 1e-40, -1e-40, np.inf, 1.0, -3.5, 256.0],
                    np.float32)
    return pool[rng.integers(0, len(pool), (n, count))]


@pytest.mark.parametrize("shape,scale", [("ring", False), ("ring", True), ("first-pair", False)],
                         ids=["ring", "ring-computed-data", "one-pair-rest-zeros"])
@pytest.mark.parametrize("count", [2, 1000])
def test_native_channel_loop_matches_python_path_and_numpy(monkeypatch, shape, scale, count):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    pairs = [(r, (r + 1) % n) for r in range(n)] if shape == "ring" else [(0, 1)]
    xs = _inputs(n, count)
    module = channel_module(n, pairs, count, scale=scale)
    for trips in (0, 1, 3):
        what = f"{shape} scale={scale} count={count} trips={trips} n={n}"
        got = both_paths(module, [xs, np.full(n, trips, np.int32)], monkeypatch, [STEPS],
                         what)
        want = channel_reference(xs, pairs, trips, scale)[me]
        np.testing.assert_array_equal(got, want, err_msg=what)


def test_native_channel_size_mismatch_is_the_python_paths_error(monkeypatch):
    # Every device sends f32[2] and expects f32[3]: recv-done reports the peer's 8 bytes.
    world = MPI.COMM_WORLD
    n = world.Get_size()
    pairs = [(r, (r + 1) % n) for r in range(n)]
    module = xladist.parse_hlo(channel_module(n, pairs, 2, recv_count=3))
    args = [_inputs(n, 2), np.full(n, 2, np.int32)]
    errors = []
    for native in (True, False):
        with pytest.raises(ExecutionError) as e:
            run_counted(module, args, native, monkeypatch)
        errors.append(e.value)
    world.Barrier()
    native, python = (str(e) for e in errors)
    want = f"device {(world.Get_rank() - 1) % n} sent 8 bytes on channel 1, but this recv " \
           "expects f32[3] (12 bytes): the two ends disagree on the shape"
    assert want in native and want in python, (native, python)
    assert "iteration 1 of" in native
    assert "rd (line" in native and "rd (line" in python
