"""Fixtures for tests run as ``mpiexec -n N python -m pytest --with-mpi tests/mpi``.

Every rank runs the same tests in the same order, so session fixtures that call collectives
(communicator creation) are created in lockstep.  A short collective deadline turns a test
that desynchronizes the ranks into a prompt job abort naming the stuck collective, instead of
a hang.
"""

import os

import pytest

from xladist.collectives import deadline

deadline.configure(float(os.environ.get("XLADIST_TEST_COLLECTIVE_TIMEOUT", "60")))


def group_sets(n: int) -> dict[str, list[list[int]]]:
    """Named groupings of devices 0..n-1 used across the MPI tests."""
    pairs = [[d + 1, d] for d in range(0, n - 1, 2)] + ([[n - 1]] if n % 2 else [])
    return {
        "all": [list(range(n))],
        "reversed": [list(range(n))[::-1]],
        "pairs": pairs,
        "singletons": [[d] for d in range(n)],
    }


@pytest.fixture(scope="session")
def cache():
    from xladist.collectives import CommunicatorCache

    c = CommunicatorCache()
    n = c.world.size
    sets = group_sets(n)
    c.prepare(list(sets.values()) + [[[1, 0]] if n > 1 else [[0]]])
    return c
