"""One persistent `xladist.Cluster` per rank count for the whole test session.

Tests that check a module's RESULTS on N ranks call `cluster_run(module, inputs, n=N, ...)`
instead of `xladist.run(...)`: the same arguments and the same result, bit for bit
(docs/cluster.md), without paying an `mpiexec` start and N interpreters per case (about 1 s
idle, 3-5 s under load). Tests of the launcher, the CLI, exit codes, failures and hangs keep
their own launches: those are what they test, and `xladist.run` itself stays tested by them.

Independence: every call loads its module, runs it and releases it (`keep=0`), so nothing a
test compiled or planned is left on the ranks for the next one; the backend, timeout and
checks are per call. A call that ended its cluster (a hang, a dead rank, an interrupted call)
leaves `usable` False, and the next test that needs N ranks gets a fresh cluster. Clusters
are closed when the session ends (and at interpreter exit, xladist.Cluster's own atexit).
"""

from __future__ import annotations

import pytest

# What Cluster.run takes of xladist.run's keyword arguments; the rest (feeds, host
# transfers, traces, hosts, job_timeout) are not offered by a cluster: such a test calls
# xladist.run itself.
_TAKEN = {"backend", "timeout", "device_assignment", "verify", "check", "strict"}


class Clusters:
    """Live clusters by rank count, started on first use and again after one ended."""

    def __init__(self):
        self.live: dict[int, object] = {}
        self.started = 0  # how many clusters this session started (for the record)

    def get(self, n: int):
        import xladist
        cluster = self.live.get(n)
        if cluster is not None and cluster.usable:
            return cluster
        if cluster is not None:
            cluster.close()
        cluster = xladist.Cluster(n=n, keep=0).start()
        self.live[n] = cluster
        self.started += 1
        return cluster

    def run(self, module, inputs=None, n: int = 1, **options):
        """xladist.run(module, inputs, n=n, **options) on this session's n-rank cluster."""
        other = set(options) - _TAKEN
        if other:
            raise TypeError(f"cluster_run does not take {sorted(other)} (a cluster's calls "
                            "have no feeds, host transfers or traces): call xladist.run")
        return self.get(n).run(module, inputs, **options)

    def close(self) -> None:
        for cluster in self.live.values():
            cluster.close()
        self.live.clear()


@pytest.fixture(scope="session")
def clusters():
    pool = Clusters()
    yield pool
    pool.close()


@pytest.fixture
def cluster_run(clusters):
    """`cluster_run(module, inputs, n=N, backend=..., timeout=...)`: Clusters.run."""
    return clusters.run
