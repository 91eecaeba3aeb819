"""A module is verified once, by the process that launches the ranks, before any rank
starts: an invalid module is refused without a launch (not by every rank after one), and a
valid one runs with the ranks skipping their own look (runtime/api.verify_once)."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.errors import VerifierError
from tests.cli_util import probe_mpiexec, xladist_cli

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
