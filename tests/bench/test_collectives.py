"""`xladist bench collectives` (xladist/bench/collectives.py, harness.py): the size syntax,
and the table run for real under the mpiexec it starts itself, its #wrong column checked."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.paths import ROOT

UNDER_MPI = any(v in os.environ for v in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE"))
needs_mpiexec = pytest.mark.skipif(UNDER_MPI or shutil.which("mpiexec") is None,
                                   reason="starts its own mpiexec")


def test_bench_parse_size():
    from xladist.bench.harness import parse_size

    assert [parse_size(s) for s in ("8", "32K", "1M", "64MiB", "2kb")] == \
        [8, 32768, 1 << 20, 64 << 20, 2048]
    with pytest.raises(Exception, match="not a size"):
        parse_size("lots")


@needs_mpiexec
def test_bench_relaunches_itself_under_mpiexec():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "xladist.bench.collectives", "-n", "2", "--sizes", "8,4K",
         "--iters", "3", "--repeats", "1", "--ops", "all-reduce,all-to-all"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip().endswith(
        tuple("0123456789")) and not line.startswith("#")]
    assert len(rows) == 4
    assert all(row[7] == "0" for row in rows)  # #wrong column


@needs_mpiexec
def test_bench_aa_times_raw_against_itself():
    """--aa adds raw2/raw (the raw call on a second set of buffers) to every row and
    states its spread: the noise floor a row's ratio is read against."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "xladist.bench.collectives", "-n", "2", "--sizes", "8,64K",
         "--iters", "3", "--repeats", "2", "--ops", "collective-permute", "--aa"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "raw2/raw" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip().endswith(
        tuple("0123456789")) and not line.startswith("#")]
    assert len(rows) == 2 and all(len(row) == 15 and float(row[14]) > 0 for row in rows)
    assert "# raw against itself on other buffers (raw2/raw, from 64 KiB): " in proc.stdout
