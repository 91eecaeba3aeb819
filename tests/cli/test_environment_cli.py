"""XLADIST_* variables with values they do not take: one line naming the variable, exit 2,
before any rank starts (xladist/environment.py)."""

from __future__ import annotations

import pytest

from tests.cli_util import ROOT, xladist_cli
from xladist import environment
from xladist.errors import InputError
from xladist.runtime import launcher

CASE = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"


# Before: XLADIST_THREADS=abc and XLADIST_HEARTBEAT_TIMEOUT=abc were ignored (the run went
# ahead, exit 0); XLADIST_VECTOR_WIDTH=abc printed a compile thread's traceback and
# "rank 0: internal error: ValueError"; XLADIST_COORD_PORT=abc the CLI's own traceback.
@pytest.mark.parametrize("name, value, what", [
    ("XLADIST_THREADS", "abc", "a whole number of threads >= 1"),
    ("XLADIST_VECTOR_WIDTH", "abc", "a vector width in bits"),
    ("XLADIST_COORD_PORT", "abc", "a TCP port number"),
    ("XLADIST_HEARTBEAT_TIMEOUT", "abc", "a number of seconds >= 0"),
])
def test_run_refuses_a_bad_variable_before_launch(name, value, what):
    proc = xladist_cli("run", CASE / "module.hlo", "-n", 4, "--backend", "interpreter",
                       "--inputs", CASE / "inputs.npz", "-q", **{name: value})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"xladist run: error: environment variable {name}='{value}': "
                           f"expected {what}")


@pytest.mark.parametrize("name, value", [
    ("XLADIST_THREADS", "0"), ("XLADIST_COMPILE_JOBS", "1.5"), ("XLADIST_VECTOR_WIDTH", "-8"),
    ("XLADIST_COLLECTIVE_TIMEOUT", "nan"), ("XLADIST_REGISTER_TIMEOUT", "-1"),
    ("XLADIST_COORD_PORT", "65536"),
])
def test_every_launch_checks_the_variables(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(InputError, match=f"environment variable {name}='{value}'"):
        environment.check()
    # every launch (run, demo, bench, a Cluster's ranks) builds the ranks' environment here
    with pytest.raises(InputError, match=f"environment variable {name}="):
        launcher.rank_environment()


def test_good_values_and_defaults(monkeypatch):
    monkeypatch.setenv("XLADIST_COLLECTIVE_TIMEOUT", " 2.5 ")
    monkeypatch.setenv("XLADIST_COORD_PORT", "0")
    monkeypatch.delenv("XLADIST_THREADS", raising=False)
    assert environment.setting("XLADIST_COLLECTIVE_TIMEOUT", 300.0) == 2.5
    assert environment.setting("XLADIST_COORD_PORT", 7) == 0
    assert environment.setting("XLADIST_THREADS", None) is None
    environment.check()
