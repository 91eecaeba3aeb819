"""Issue 30 items 6-8 run for real on N ranks, both backends, numbers checked (on the session's
persistent cluster, tests/cluster_fixture.py: the same results as `xladist run -n N`).

6  the sends of a transfer on one channel_id, its recvs on another (XLA's pipeliner): they pair
   by peers and program order (xladist/hlo/collective_groups.py SendRecvStreams), in the
   runtime's MPI tags and in the deadlock check alike;
7  a scheduled module whose second transfer's recv sits inside the first one's span runs as
   written (the scheduler checks a given order against its dependencies only);
8  a pipelined loop without channel ids whose forward send comes before its recv: no channel
   chain is imposed where XLA imposes none, so the explicit control-predecessors hold.

The programs (tests/data/deadlock/pairing/) have the shapes of XLA's
collective_pipeline_parallelism_test.cc (SendRecvLoop, PartiallyPipelinedAsyncSendRecvLoop,
NaiveBFSMb5Cr2Replica4SendRecvPartiallyPipelined) and collective_ops_test.cc
(SendRecv_TwoConcurrentChains), written for xladist; the expected values are computed here
from what each device holds, independently of xladist.
"""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from tests.paths import ROOT
from xladist.analysis.deadlock import check_module

DATA = ROOT / "tests" / "data" / "deadlock" / "pairing"


def _filled(n):
    """Device d holds f32[2,2] filled with d + 1 (the XLA tests' inputs)."""
    return np.stack([np.full((2, 2), d + 1, np.float32) for d in range(n)])


def _chain_of_steps(x, steps):
    """Data moved `steps` times along 0 -> 1 -> ... -> n-1; device 0 receives zeros."""
    for _ in range(steps):
        x = np.concatenate([np.zeros_like(x[:1]), x[:-1]])
    return x


def _pipeline(n=4, iterations=3):
    """pipelined_no_channel_ids.hlo: out_d = out_{d-1} + x_d every iteration, acc sums it;
    device 0's backward recv holds device 3's last out."""
    x = np.stack([np.array([d + 1, 10 * (d + 1)], np.float32) for d in range(n)])
    prefix = np.cumsum(x, axis=0)
    back = np.zeros_like(x)
    back[0] = prefix[-1]
    return {"arg0": x}, [iterations * prefix, back]


def _two_chains():
    data = np.array([[1, 1], [2, 2]], np.uint32)     # device d sends d + 1
    got = np.stack([data[1], data[0]])              # 0 receives from 1, 1 from 0
    return {}, [got + 1]


CASES = {
    # name: (devices, inputs, expected results, issue 30 item)
    "send_recv_loop_split_channels": (4, {"arg0": _filled(4)}, [_chain_of_steps(_filled(4), 3)],
                                      6),
    "pipelined_send_recv_loop_split_channels": (4, {"arg0": _filled(4)},
                                                [_chain_of_steps(_filled(4), 3)], 6),
    "two_concurrent_chains": (2, *_two_chains(), 7),
    "pipelined_no_channel_ids": (4, *_pipeline(), 8),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_check_proves_it(name):
    n = CASES[name][0]
    module = xladist.load_hlo(DATA / f"{name}.hlo")
    xladist.verify(module)
    report = check_module(module, n, budget=None)
    assert report.ok and not report.problems, report.to_text()
    unrolled = check_module(module, n, budget=None, engine="unroll", symmetry=False)
    assert unrolled.ok and not unrolled.problems, unrolled.to_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_it_runs_with_the_expected_values(name, backend, cluster_run):
    n, inputs, expected, _ = CASES[name]
    outs = cluster_run(DATA / f"{name}.hlo", [inputs[k] for k in sorted(inputs)], n=n,
                       backend=backend, timeout=60)
    assert all(len(o) == len(expected) for o in outs)
    for k, want in enumerate(expected):
        np.testing.assert_array_equal(np.stack([outs[d][k] for d in range(n)]), want)
