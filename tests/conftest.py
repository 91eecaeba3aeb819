"""Fixtures shared by every test file."""

import pytest

from tests.simhosts import simhosts  # noqa: F401 -- the fixture of simulated hosts


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # Compiled kernels go to this test session's own cache, never the user's ~/.cache/xladist
    # (shared by the tests of one session, so repeated modules still hit it).
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kcache"))
