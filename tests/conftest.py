"""Fixtures shared by every test file."""

import os

import pytest

# jax (optional: tests/optional.py) fixes its number of CPU devices when its backend starts.
# The tests that run jax meshes need up to 8, and whichever test happens to start jax first
# must not decide the count for the rest of the session: before this, tests/jax/ failed
# ("jax already started its CPU backend with 1") whenever an earlier test had run jax.
_DEVICE_FLAG = "--xla_force_host_platform_device_count"
if _DEVICE_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICE_FLAG}=8".strip()


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # Compiled kernels go to this test session's own cache, never the user's ~/.cache/xladist
    # (shared by the tests of one session, so repeated modules still hit it).
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kcache"))
