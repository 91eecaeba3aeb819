"""A module is verified once, by the process that launches the ranks, before any rank
starts: an invalid module is refused without a launch (not by every rank after one), and a
valid one runs with the ranks skipping their own look (runtime/api.verify_once)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import xladist
from xladist.errors import VerifierError
from xladist.runtime.launcher import find_mpiexec
from tests.cli_util import ROOT, cli_env, probe_mpiexec, xladist_cli

BAD = """HloModule bad, replica_count=2

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[8] parameter(1)
  ROOT z = f32[4] add(x, y)
}
"""
GOOD = BAD.replace("f32[8]", "f32[4]")


def test_the_cli_refuses_an_invalid_module_before_starting_any_rank(tmp_path):
    probe, calls = probe_mpiexec(tmp_path)
    (tmp_path / "bad.hlo").write_text(BAD)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32),
             arg1=np.ones((2, 8), np.float32))
    proc = xladist_cli("run", tmp_path / "bad.hlo", "-n", "2", "--inputs", tmp_path / "in.npz",
                       "--mpiexec", probe, "--no-check")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("xladist run: error: computation main, instruction `%z = "
                                  "f32[4]{0} add(%x, %y)` (line 6): add: lhs and rhs must have "
                                  "the same dimensions"), proc.stderr
    assert "rank" not in proc.stderr and "Traceback" not in proc.stderr
    assert not calls.exists()


def test_xladist_run_refuses_an_invalid_module_before_starting_any_rank(tmp_path):
    probe, calls = probe_mpiexec(tmp_path)
    with pytest.raises(VerifierError, match=r"instruction `%z = .*add: lhs and rhs must have"):
        xladist.run(xladist.parse_hlo(BAD), [[np.ones(4, np.float32), np.ones(8, np.float32)]] * 2,
                    n=2, mpiexec=str(probe), check=False)
    assert not calls.exists()


@pytest.mark.slow
def test_a_verified_module_runs_on_ranks_that_skip_their_own_look():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = xladist.run(xladist.parse_hlo(GOOD), [[x[d], x[d] * 2] for d in range(2)], n=2,
                      timeout=60)
    for d in range(2):
        assert np.array_equal(out[d][0], x[d] * 3)


BAD_PAIRS = """HloModule bad_pairs, replica_count=2

ENTRY main {
  x = f32[4] parameter(0)
  ROOT r = f32[4] collective-permute(x), source_target_pairs={{0,1},{0,0}}
}
"""


@pytest.mark.slow
def test_a_bare_mpiexec_job_refuses_an_invalid_module_as_the_verifier_does(tmp_path):
    """`mpiexec -n 2 xladist run` (rank 0 hosts the job): the verifier's message, naming the
    instruction as written, not the deadlock check's look at the same groups (which named
    only `r`, as an InputError)."""
    (tmp_path / "bad.hlo").write_text(BAD_PAIRS)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    cmd = [find_mpiexec(), "-n", "2", sys.executable, "-m", "xladist", "run",
           str(tmp_path / "bad.hlo"), "--inputs", str(tmp_path / "in.npz"), "-q"]
    proc = subprocess.run(cmd, cwd=ROOT, env=cli_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0, proc.stderr
    # (said once, in the launching process's words: every rank learns of the refusal)
    assert proc.stderr.count(
        "xladist run: error: computation main, instruction `%r = f32[4]{0} "
        "collective-permute(%x), source_target_pairs={{0,1},{0,0}}` (line 5): "
        "collective-permute source_target_pairs={{0,1},{0,0}} (2 replica ids: no "
        "channel_id): source 0 appears more than once") == 1, proc.stderr
