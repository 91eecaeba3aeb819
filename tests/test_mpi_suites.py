"""Runs the MPI conformance suites under real `mpiexec -n 2` and `-n 4`.

The files in tests/mpi/ are collected by the plain pytest run too, where pytest-mpi
skips them; here each world size runs them for real, with a hard timeout so that a
hang fails fast instead of stalling CI. One job per file and size, with the file's name in
the test id, so `-k ragged` runs tests/mpi/test_ragged_all_to_all.py alone (subfolders included:
`-k native_loops` runs tests/mpi/native_loops/).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MPI_DIR = ROOT / "tests" / "mpi"

# Each case is a whole mpiexec job running a file of tests/mpi/ (seconds to a minute).
pytestmark = pytest.mark.slow


def _mpiexec() -> str:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent) + os.pathsep
                       + os.environ.get("PATH", ""))
    if exe is None:
        pytest.fail("mpiexec not found: the `mpich` wheel should provide it next to python")
    return exe


FILES = sorted(MPI_DIR.rglob("test_*.py"))
# Ids name the file under tests/mpi/ (e.g. native_loops/test_paths), so -k selects one.
IDS = [str(p.relative_to(MPI_DIR).with_suffix("")) for p in FILES]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", FILES, ids=IDS)
@pytest.mark.parametrize("nprocs", [2, 4])
def test_mpi_suite(nprocs, path):
    files = [str(path)]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    cmd = [_mpiexec(), "-n", str(nprocs), sys.executable, "-m", "pytest", "--with-mpi",
           "-q", "-x", "-p", "no:cacheprovider", "--timeout=300", *files]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=840)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mpiexec -n {nprocs} suite hung; output so far:\n{e.stdout}\n{e.stderr}")
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-60:])
    print(tail)
    assert proc.returncode == 0, f"mpiexec -n {nprocs} suite failed:\n{tail}"
    # Not vacuous: a suite whose every test skipped (e.g. pytest-mpi inactive) is a failure.
    passed = re.search(r"(\d+) passed", tail)
    assert passed and int(passed.group(1)) > 0, f"no test ran under mpiexec:\n{tail}"
