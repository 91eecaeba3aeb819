"""Fixtures shared by every test file."""

import os
from pathlib import Path

import pytest

from tests.simhosts import simhosts  # noqa: F401 -- the fixture of simulated hosts
from tests.cluster_fixture import clusters, cluster_run  # noqa: F401 -- persistent clusters

# xladist's pytest plugin (xladist/testing/plugin.py). An installed xladist registers it
# under the pytest11 entry point with this name, so it loads once; an editable install made
# before the entry point existed does not register it.
pytest_plugins = ["xladist.testing.plugin"]

# jax (optional: tests/optional.py) fixes its number of CPU devices when its backend starts.
# The tests that run jax meshes need up to 8, and whichever test happens to start jax first
# must not decide the count for the rest of the session: before this, tests/jax/ failed
# ("jax already started its CPU backend with 1") whenever an earlier test had run jax.
_DEVICE_FLAG = "--xla_force_host_platform_device_count"
if _DEVICE_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICE_FLAG}=8".strip()

# tests/mpi/ is the tier that runs under mpiexec (tests/test_mpi_suites.py starts every file
# of it with --with-mpi, at -n 2 and -n 4). A plain run would only collect it to skip each
# test ("need --with-mpi"), 190 skips that said nothing; it is left out unless --with-mpi is
# given or a path inside it is named on the command line.
_MPI_TIER = Path(__file__).resolve().parent / "mpi"


def pytest_ignore_collect(collection_path, config):
    if Path(collection_path) != _MPI_TIER or config.getoption("with_mpi", False):
        return None
    named = any(Path(a.split("::")[0]).resolve().is_relative_to(_MPI_TIER) for a in config.args)
    return None if named else True


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # Compiled kernels go to this test session's own cache, never the user's ~/.cache/xladist
    # (shared by the tests of one session, so repeated modules still hit it).
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kcache"))
