"""xladist/testing/clusters.py (the suite's persistent clusters, tests/cluster_fixture.py):
they give what `xladist.run` gives, and a call that ends its cluster does not end the next
test's."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.runtime.cluster import ClusterEnded
from tests.cli.test_channels_cli import DATA
from xladist.testing.clusters import Clusters
from tests.runtime.test_cluster import ALL_REDUCE, _expected, _inputs


def test_what_a_cluster_does_not_take_is_refused_before_any_rank_starts():
    pool = Clusters()
    with pytest.raises(TypeError, match=r"\['host_send', 'trace'\].*call xladist.run"):
        pool.run(ALL_REDUCE, None, n=2, trace="t.json", host_send=print)
    assert pool.live == {} and pool.started == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_the_same_outputs_as_xladist_run_bit_for_bit(cluster_run, backend):
    x, w = _inputs(5)
    got = cluster_run(ALL_REDUCE, [x, w], n=2, backend=backend, timeout=60)
    one_shot = xladist.run(ALL_REDUCE, [x, w], n=2, backend=backend, timeout=60)
    want = _expected(x, w)
    for d in range(2):
        for g, o, ref in zip(got[d], one_shot[d], want[d]):
            assert g.dtype == o.dtype and g.shape == o.shape
            assert g.tobytes() == o.tobytes()
            np.testing.assert_allclose(g, ref, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_call_that_ends_its_cluster_leaves_the_next_a_fresh_one():
    pool = Clusters()
    try:
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        loop = DATA / "data_dependent_loop.hlo"
        got = pool.run(loop, [x, np.array([2, 2], np.int32)], n=2, check=False, timeout=3.0)
        np.testing.assert_allclose(got[0][0], x.sum(axis=0) * 2)
        first = pool.live[2]
        with pytest.raises(ClusterEnded, match="never arrived"):  # device 1 loops once more
            pool.run(loop, [x, np.array([1, 2], np.int32)], n=2, check=False, timeout=3.0)
        assert not first.usable
        x2, w = _inputs(3)
        got = pool.run(ALL_REDUCE, [x2, w], n=2)
        assert pool.live[2] is not first and pool.started == 2, pool.why
        assert pool.why[1][1].startswith("the last one ended (its 2-rank job ended during a "
                                         "call of data_dependent_loop"), pool.why
        for g, ref in zip(got, _expected(x2, w)):
            for a, b in zip(g, ref):
                np.testing.assert_allclose(a, b, rtol=1e-6)
    finally:
        pool.close()
    assert not pool.live
