"""Running `python -m xladist ...` from a test, as a user would start it.

One helper for every test that drives the CLI in a subprocess: this checkout first on
PYTHONPATH (`runtime` and `collectives` are also PyPI names), one BLAS/OpenMP thread per
process (4+ ranks share 2 cores), no XLADIST_CHECKED inherited from an enclosing job, and a
hard timeout after which the whole process group (mpiexec and its ranks) is killed and the
test fails naming the command and what it printed - never an orphaned rank.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A two-device module, one parameter f32[4], all-reduced across the replicas: the CLI tests'
# smallest real job.
PSUM_MODULE = """HloModule psum, replica_count=2

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(x), replica_groups={}, to_apply=sum
}
"""


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI job started by a test; `extra` variables override."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("XLADIST_CHECKED", None)
    env.update(extra)
    return env


def xladist_cli(*args, timeout: float = 120, cwd: Path | str = ROOT,
            **env: str) -> subprocess.CompletedProcess:
    """`python -m xladist ARGS` (each arg str()-ed) with output captured as text; `env` adds
    environment variables (e.g. XLADIST_PROGRESS="off")."""
    cmd = [sys.executable, "-m", "xladist", *map(str, args)]
    proc = subprocess.Popen(cmd, cwd=cwd, env=cli_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} did not finish in {timeout}s:\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def marked(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (a launcher hands its environment to
    mpiexec, its proxies, every rank and the compile helpers)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def gone(marker: str, deadline_s: float) -> list[int]:
    """The marked processes still running after up to `deadline_s` seconds ([]: none)."""
    end = time.monotonic() + deadline_s
    while (left := marked(marker)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def probe_mpiexec(tmp_path: Path) -> tuple[Path, Path]:
    """An mpiexec (for --mpiexec) that only notes it was started, in the second path, and
    fails: a test that no launch got that far asserts the note does not exist."""
    calls = tmp_path / "mpiexec.calls"
    probe = tmp_path / "mpiexec"
    probe.write_text(f"#!{sys.executable}\nopen({str(calls)!r}, 'a').write('called\\n')\n"
                     "raise SystemExit(3)\n")
    probe.chmod(0o755)
    return probe, calls
