"""A launcher that starts no rank is a failed run, said as such (found by using the CLI as
a new user, cli41).

Before: `xladist run m.hlo -n 2 --inputs in.npz --outputs out.npz --mpiexec X`, where X
exited 0 without starting anything (a wrapper script, a launcher that is not MPI's), exited
0 with nothing printed and no out.npz; with an X that failed silently (`/bin/false`) it
exited 1 with nothing printed. `xladist demo` the same.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.cli_util import PSUM_MODULE
from xladist.cli import main


def _launcher(tmp_path, status: int):
    path = tmp_path / f"launcher{status}.sh"
    path.write_text(f"#!/bin/sh\nexit {status}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("status", [0, 1])
def test_run_whose_launcher_starts_no_rank_fails_naming_it(tmp_path, capsys, status):
    module = tmp_path / "psum.hlo"
    module.write_text(PSUM_MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    launcher = _launcher(tmp_path, status)
    out = tmp_path / "out.npz"
    code = main(["run", str(module), "-n", "2", "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(out), "--mpiexec", str(launcher), "-q"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err == (f"xladist run: {launcher} exited with status {status}, but ranks 0, 1 of 2 "
                   f"never started, so the job did not run. Is it an MPI launcher that takes "
                   f"`-n N PROGRAM` (--mpiexec)?\n")
    assert not out.exists()


def test_demo_whose_launcher_starts_no_rank_fails_naming_it(tmp_path, capsys):
    launcher = _launcher(tmp_path, 0)
    assert main(["demo", "-n", "2", "--mpiexec", str(launcher), "-q"]) == 1
    assert capsys.readouterr().err.startswith(
        f"xladist demo: {launcher} exited with status 0, but ranks 0, 1 of 2 never started")


@pytest.mark.parametrize("status", [0, 3])
def test_conformance_whose_launcher_starts_no_rank_fails_once_naming_it(tmp_path, capsys,
                                                                       status):
    """Before: every selected case was an ERROR 'the job exited with 0 before this case
    ran:' with nothing after it, one per case of the run."""
    launcher = _launcher(tmp_path, status)
    code = main(["conformance", "-n", "2", "--mpiexec", str(launcher), "--select",
                 "*/all-gather/*s8*scalar*"])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    assert captured.err.endswith(
        f"xladist conformance: error: {launcher} exited with status {status}, but ranks 0, 1 "
        f"of 2 never started, so the job did not run. Is it an MPI launcher that takes "
        f"`-n N PROGRAM` (--mpiexec)?\n"), captured.err
    assert "ERROR" not in captured.out


@pytest.mark.parametrize("mode", [[], ["--in-loop"]])
def test_bench_whose_launcher_starts_no_rank_fails_naming_it(tmp_path, capsys, mode):
    """Before: `xladist bench collectives --mpiexec X` with an X that ran nothing printed
    nothing and exited 0 (the table's ranks never reached the job's service)."""
    launcher = _launcher(tmp_path, 0)
    code = main(["bench", "collectives", *mode, "-n", "2", "--sizes", "8", "--iters", "2",
                 "--repeats", "1", "--mpiexec", str(launcher)])
    assert code == 1
    assert capsys.readouterr().err.startswith(
        f"xladist bench: {launcher} exited with status 0, but ranks 0, 1 of 2 never started")


def test_the_python_api_whose_launcher_starts_no_rank_says_so(tmp_path):
    """Before: xladist.run said 'the 2-rank job failed (exit 0)' and xladist.Cluster 'its
    2-rank job ended while starting (exit 0)', nothing more."""
    import xladist
    from xladist.errors import ExecutionError
    from xladist.runtime.cluster import ClusterEnded
    module = tmp_path / "psum.hlo"
    module.write_text(PSUM_MODULE)
    launcher = _launcher(tmp_path, 0)
    said = (f"{launcher} exited with status 0, but ranks 0, 1 of 2 never started, so the "
            f"job did not run. Is it an MPI launcher that takes `-n N PROGRAM` (mpiexec=)?")
    with pytest.raises(ExecutionError) as e:
        xladist.run(module, [np.ones((2, 4), np.float32)], n=2, mpiexec=str(launcher))
    assert said in str(e.value)
    with pytest.raises(ClusterEnded) as e:
        with xladist.Cluster(2, mpiexec=str(launcher)) as cluster:
            cluster.run(module, [np.ones((2, 4), np.float32)])
    assert said in str(e.value)
