"""One persistent `xladist.Cluster` per rank count for the whole test session.

Tests that check a module's RESULTS on N ranks call `cluster_run(module, inputs, n=N, ...)`
instead of `xladist.run(...)`: the same arguments and the same result, bit for bit
(docs/cluster.md), without paying an `mpiexec` start and N interpreters per case (about 1 s
idle, 3-5 s under load). Tests of the launcher, the CLI, exit codes, failures and hangs keep
their own launches: those are what they test, and `xladist.run` itself stays tested by them.

The clusters are xladist.testing's (xladist/testing/clusters.py: every call loads and
releases its module; a call that ended its cluster gives the next test a fresh one), the
ones users' suites get through `xladist.testing.run_devices` and the plugin's fixtures.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def clusters():
    from xladist.testing.clusters import shared
    return shared()  # closed at the session's end (the plugin's pytest_unconfigure)


@pytest.fixture
def cluster_run(clusters):
    """`cluster_run(module, inputs, n=N, backend=..., timeout=...)`: Clusters.run."""
    return clusters.run
