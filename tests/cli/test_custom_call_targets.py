"""A custom-call whose target nobody registered: `xladist check` refuses it as `xladist run`
refuses it (semantics/custom_calls.check_registered, the backends' own message), and
`xladist run` does so before starting any rank. A target the process registered passes.
(Registration made by the ranks' own script under a bare mpiexec: tests/runtime/test_faults.py.)"""

from __future__ import annotations

import json

import numpy as np

from xladist.cli.check import check_file
from xladist.semantics.custom_calls import CUSTOM_CALLS, register_custom_call
from tests.cli_util import probe_mpiexec, xladist_cli

MODULE = """HloModule m

ENTRY e {
  p = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(p), custom_call_target="NoSuchTarget"
}
"""


def _run_error(tmp_path) -> str:
    """What a one-device `xladist run` says of the module, without `xladist run: error: `:
    the reference (in a fresh process, whose registry has no other test's targets; the
    backend said the same as it compiled before the run checked first)."""
    np.savez(tmp_path / "in1.npz", arg0=np.ones(4, np.float32))
    proc = xladist_cli("run", tmp_path / "cc.hlo", "--inputs", tmp_path / "in1.npz")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    prefix = "xladist run: error: "
    assert proc.stderr.startswith(prefix), proc.stderr
    return proc.stderr[len(prefix):].strip()


def test_check_refuses_an_unregistered_target_as_the_run_does(tmp_path):
    (tmp_path / "cc.hlo").write_text(MODULE)
    proc = xladist_cli("check", tmp_path / "cc.hlo")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip() == f"xladist check: error: {_run_error(tmp_path)}"
    assert "custom-call target 'NoSuchTarget' is not registered" in proc.stderr
    js = xladist_cli("check", tmp_path / "cc.hlo", "--json")
    assert js.returncode == 2
    result = json.loads(js.stdout)
    assert result["verified"] is False and result["error_type"] == "UnsupportedError"


def test_run_refuses_an_unregistered_target_before_starting_any_rank(tmp_path):
    probe, calls = probe_mpiexec(tmp_path)
    (tmp_path / "cc.hlo").write_text(MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    proc = xladist_cli("run", tmp_path / "cc.hlo", "-n", "2", "--inputs", tmp_path / "in.npz",
                       "--mpiexec", probe)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"xladist run: error: {_run_error(tmp_path)}"
    assert not calls.exists()


def test_a_target_this_process_registered_passes_the_check(tmp_path):
    (tmp_path / "cc.hlo").write_text(MODULE)
    assert "NoSuchTarget" not in CUSTOM_CALLS
    register_custom_call("NoSuchTarget", lambda instr, args: args[0])
    try:
        result = check_file(str(tmp_path / "cc.hlo"))
    finally:
        del CUSTOM_CALLS["NoSuchTarget"]
    assert result["verified"] is True
