"""The test suite's one optional dependency: jax (the ``jax`` extra, not installed in CI).

Tests that compare with jax skip without it and the skip reason says why. Nothing else may
be skipped for a failed import: numpy, scipy, ml_dtypes, mpi4py, llvmlite and xladist's own
modules are hard dependencies, so a broken import must fail the run, not hide in the skips.
"""

from __future__ import annotations

import importlib.util

import pytest

JAX_MISSING = ("jax is optional and not installed (the 'jax' extra: pip install -e '.[jax]'; "
               "CI does not install it)")
HAVE_JAX = importlib.util.find_spec("jax") is not None


def need_jax(module: str = "jax"):
    """``module`` (jax or one of its submodules), or skip this test saying jax is missing."""
    return pytest.importorskip(module, reason=JAX_MISSING)
