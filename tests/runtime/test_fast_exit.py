"""runtime/fast_exit.exit_now: a finished process ends without the interpreter's teardown,
but only after what a normal exit does that matters -- non-daemon threads, atexit handlers,
MPI_Finalize, buffered output -- and with the code it was given."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import ROOT

_PROCESS = """
import atexit, sys, threading, time
from pathlib import Path
out = Path(sys.argv[1])
def late():
    time.sleep(0.3)
    (out / "thread").write_text("done")
threading.Thread(target=late).start()
atexit.register(lambda: (out / "atexit").write_text("ran"))
sys.stdout.write("buffered, no newline")
from xladist.runtime.fast_exit import exit_now
exit_now(3)
"""


def test_exit_now_finishes_threads_atexit_and_output_first(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _PROCESS, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered, no newline"
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"


_RANK = """
import sys
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
print(f"rank {MPI.COMM_WORLD.Get_rank()} done", end="")
from xladist.runtime.fast_exit import exit_now
exit_now(0, finalize_mpi=True)
"""


@pytest.mark.slow
def test_ranks_that_exit_now_end_the_mpi_job_cleanly():
    from xladist.runtime.launcher import find_mpiexec, rank_environment
    proc = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-c", _RANK], cwd=ROOT,
                          env=rank_environment(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.replace("done", "done\n").split("\n")[:2]) == \
        ["rank 0 done", "rank 1 done"]
    assert "BAD TERMINATION" not in proc.stdout + proc.stderr
