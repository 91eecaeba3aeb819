"""Custom-call targets registered in the launching process reach the ranks xladist starts
(xladist/runtime/forwarded_calls.py): a function the ranks can import is forwarded by module
and qualified name and registered there before the module loads; one they cannot import (a
lambda, a function of a script's __main__) is refused before any rank starts, saying what to
do; a target still unknown on a rank says what was forwarded."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import xladist
from xladist.errors import UnsupportedError
from xladist.semantics import custom_calls
from xladist.semantics.custom_calls import CUSTOM_CALLS, register_custom_call
from tests import custom_call_fns
from tests.cli_util import cli_env, probe_mpiexec
from tests.paths import ROOT

# The custom-call's result summed over both devices: the ranks must run the target.
MODULE = """HloModule forwarded, replica_count=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  p = f32[4] parameter(0)
  c = f32[4] custom-call(p), custom_call_target="test.forwarded"
  ROOT r = f32[4] all-reduce(c), replica_groups={{0,1}}, to_apply=add
}
"""


@pytest.fixture
def registered():
    """register(fn): `fn` as target test.forwarded in this process, for this test only."""
    def register(fn):
        register_custom_call("test.forwarded", fn)
    yield register
    CUSTOM_CALLS.pop("test.forwarded", None)


def _inputs():
    return np.arange(8, dtype=np.float32).reshape(2, 4) - 3.5


def _expected(fn_of_rows):
    x = _inputs()
    total = fn_of_rows(x[0]) + fn_of_rows(x[1])
    return [total, total]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_run_on_two_ranks_forwards_a_target_registered_here(registered, backend):
    registered(custom_call_fns.affine)
    out = xladist.run(MODULE, [_inputs()], n=2, backend=backend, timeout=60, job_timeout=240)
    for got, want in zip(out, _expected(lambda x: 2 * x + 1)):
        np.testing.assert_array_equal(got[0], want)


@pytest.mark.timeout(300)
def test_a_cluster_forwards_a_method_of_a_top_level_class(registered, cluster_run):
    registered(custom_call_fns.Targets.negate)
    out = cluster_run(MODULE, [_inputs()], n=2, timeout=60)
    for got, want in zip(out, _expected(np.negative)):
        np.testing.assert_array_equal(got[0], want)


def test_a_lambda_is_refused_before_any_rank_starts(registered, tmp_path):
    probe, calls = probe_mpiexec(tmp_path)
    registered(lambda instr, args: args[0])
    with pytest.raises(UnsupportedError) as e:
        xladist.run(MODULE, [_inputs()], n=2, mpiexec=str(probe))
    text = str(e.value)
    assert "custom-call target 'test.forwarded'" in text and "it is a lambda" in text
    assert "top level of a module the ranks can import" in text and "mpiexec" in text
    assert not calls.exists()


def test_a_target_registered_nowhere_is_refused_before_any_rank_starts(tmp_path):
    probe, calls = probe_mpiexec(tmp_path)
    assert "test.forwarded" not in CUSTOM_CALLS
    with pytest.raises(UnsupportedError) as e:
        xladist.run(MODULE, [_inputs()], n=2, mpiexec=str(probe))
    assert "custom-call target 'test.forwarded' is not registered" in str(e.value)
    assert "in the process that calls xladist.run" in str(e.value)
    assert not calls.exists()


SCRIPT = """\
import sys

import numpy as np

import xladist
from xladist.semantics.custom_calls import register_custom_call
{imports}

register_custom_call("test.forwarded", {fn})
try:
    out = xladist.run(sys.argv[1], [np.arange(8, dtype=np.float32).reshape(2, 4) - 3.5],
                      n=2, timeout=60, job_timeout=240, mpiexec=sys.argv[2] or None)
except xladist.XlaDistError as e:
    print(type(e).__name__, e)
    sys.exit(2)
print(" ".join(str(v) for v in out[1][0]))
"""


def _script(tmp_path, imports: str, fn: str, mpiexec: str = ""):
    """`python script.py` in a fresh process, started from another folder than the script's
    (the ranks' own folder then does not hold it)."""
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    (folder / "forwarded.hlo").write_text(MODULE)
    (folder / "script.py").write_text(SCRIPT.format(imports=imports, fn=fn))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, str(folder / "script.py"),
                           str(folder / "forwarded.hlo"), mpiexec], cwd=elsewhere,
                          env=cli_env(), capture_output=True, text=True, timeout=280)


def test_a_function_of_the_scripts_main_is_refused_before_any_rank_starts(tmp_path):
    """The ranks run `python -m xladist.runtime.rank_main`: their __main__ is not the script."""
    probe, calls = probe_mpiexec(tmp_path)
    proc = _script(tmp_path, "\n\ndef twice(instr, args):\n    return args[0] * 2\n",
                   "twice", str(probe))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout.startswith("UnsupportedError custom-call target 'test.forwarded' is "
                                  "registered in this process to __main__.twice"), proc.stdout
    assert "defined in __main__" in proc.stdout and "mpiexec -n N python" in proc.stdout
    assert not calls.exists()


@pytest.mark.timeout(300)
def test_a_module_beside_the_script_reaches_the_ranks(tmp_path):
    """A module imported from the script's folder (sys.path[0] of `python script.py`, not of
    the ranks started from another folder) is found there: its folder travels too."""
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "my_targets.py").write_text(
        "def thrice(instr, args):\n    return args[0] * 3\n")
    proc = _script(tmp_path, "from my_targets import thrice", "thrice")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = _expected(lambda x: 3 * x)[1]
    assert proc.stdout.split() == [str(v) for v in want], proc.stdout


PLUGIN = """\
from xladist.semantics.custom_calls import register_custom_call


def _scaled(k):
    def scaled(instr, args):
        return args[0] * k
    return scaled


register_custom_call("test.forwarded", _scaled(3))  # a closure: not importable by name
from xladist.interpreter.executable import InterpreterExecutable as Executable  # noqa: E402
"""


@pytest.fixture
def cc_plugin(tmp_path, monkeypatch, registered):
    """An installed backend package (its dist-info on sys.path and on the ranks' PYTHONPATH)
    that registers target test.forwarded as it loads."""
    import os

    from xladist import backends
    folder = tmp_path / "site"
    (folder / "xladist_cc_plugin-0.1.dist-info").mkdir(parents=True)
    (folder / "xladist_cc_plugin.py").write_text(PLUGIN)
    (folder / "xladist_cc_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: xladist-cc-plugin\nVersion: 0.1\n")
    (folder / "xladist_cc_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[xladist.backends]\nccplugin = xladist_cc_plugin:Executable\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(folder)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    monkeypatch.setattr(backends, "BACKENDS", dict(backends.BACKENDS))
    monkeypatch.setattr(backends, "PLUGIN_CALLS", dict(backends.PLUGIN_CALLS))
    yield
    sys.modules.pop("xladist_cc_plugin", None)


@pytest.mark.timeout(300)
def test_a_target_the_runs_backend_plugin_registers_is_not_forwarded(cc_plugin):
    """The ranks load the run's backend plugin too, so its targets need nothing (here a
    closure, which could not be forwarded); the same target with another backend is
    refused before any rank starts."""
    from xladist.hlo.parser import parse_module
    from xladist.runtime.forwarded_calls import references
    out = xladist.run(MODULE, [_inputs()], n=2, backend="ccplugin", timeout=60,
                      job_timeout=240)
    for got, want in zip(out, _expected(lambda x: 3 * x)):
        np.testing.assert_array_equal(got[0], want)
    with pytest.raises(UnsupportedError, match="defined inside a function"):
        references(parse_module(MODULE), "interpreter")


def test_a_rank_names_what_was_forwarded_for_a_target_still_unknown(monkeypatch):
    """What a rank started by a launcher says (custom_calls.FORWARDED set by
    forwarded_calls.register) of a target neither built in nor forwarded."""
    from xladist.hlo.parser import parse_module
    from xladist.runtime.forwarded_calls import register
    monkeypatch.setattr(custom_calls, "FORWARDED", None)
    monkeypatch.setitem(CUSTOM_CALLS, "test.other", custom_call_fns.affine)  # restored after
    register({"test.other": {"function": "tests.custom_call_fns:affine", "path": str(ROOT)}})
    instr = next(i for i in parse_module(MODULE).all_instructions() if i.opcode == "custom-call")
    text = custom_calls.why_unregistered(instr)
    assert "'test.forwarded' is not registered on this rank" in text
    assert "forwarded: 'test.other' as tests.custom_call_fns:affine" in text
    assert "launching process" in text
