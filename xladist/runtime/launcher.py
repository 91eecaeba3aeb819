"""Starting N ranks: find the `mpiexec` that the `mpich` wheel installed and run it.

`xladist run -n N` outside MPI re-executes itself under `mpiexec -n N`; inside an
mpiexec job (PMI_RANK set) each rank runs directly. The rank environment is tuned
here once, from measured facts on small machines:
- glibc's mmap/trim thresholds raised: MPICH maps and unmaps a 32 MiB scratch
  buffer on every large all-reduce/reduce-scatter; keeping it on the heap made
  those 1.5-2x faster;
- BLAS loads single-threaded: with more ranks than cores, threaded BLAS oversubscribes;
  each rank then sets its BLAS threads to its compute thread count
  (xladist/compiler/parallel.py: its cores shared among the ranks on its node).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from xladist.collectives import deadline
from xladist.collectives.mpiexec import find_mpiexec
from xladist.files import RESCUE_SUBDIR

# Variables that tell a process it was started by an MPI launcher (Hydra/PMI, OpenMPI, Slurm).
_MPI_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")

RANK_ENV_DEFAULTS = {
    "MALLOC_MMAP_THRESHOLD_": "1073741824",
    "MALLOC_TRIM_THRESHOLD_": "1073741824",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # OpenBLAS's workers, after a product a rank ran on them (blas_blocks.py's WHOLE
    # way), sleep at once instead of spinning ~0.1 s on a core the rank's pool (or
    # another rank) computes on: 2^4 cycles, OpenBLAS's minimum, against 2^28.
    "OPENBLAS_THREAD_TIMEOUT": "4",
}


def under_mpi() -> bool:
    """True when this process is one rank of an MPI job."""
    return any(v in os.environ for v in _MPI_ENV)


def mpi_world_size() -> int | None:
    for key in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if key in os.environ:
            return int(os.environ[key])
    return None


def rank_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for k, v in RANK_ENV_DEFAULTS.items():
        env.setdefault(k, v)
    # Ranks must import this checkout's packages even when started from elsewhere.
    root = str(Path(__file__).resolve().parents[2])  # the folder holding xladist/
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def mpiexec_command(n: int, argv: list[str], *, hostfile: str | None = None,
                    mpiexec_args: list[str] | None = None,
                    mpiexec: str | None = None) -> list[str]:
    cmd = [find_mpiexec(mpiexec), "-n", str(n)]
    if hostfile:
        cmd += ["-f", hostfile]
    cmd += list(mpiexec_args or [])
    return cmd + [sys.executable, *argv]


# MPICH's own line after MPI_Abort: our ranks have already said what went wrong.
_MPICH_NOISE = re.compile(r"^(Abort\(\d+\) on node \d+.*MPI_Abort.*|\s*)$")


def clean_stderr(text: str | None) -> str:
    """stderr of a job without MPICH's abort boilerplate."""
    return "\n".join(line for line in (text or "").splitlines()
                     if not _MPICH_NOISE.match(line))


def launch(n: int, argv: list[str], *, hostfile: str | None = None,
           env: dict[str, str] | None = None, timeout: float | None = None,
           capture: bool = False, mpiexec: str | None = None) -> subprocess.CompletedProcess:
    """Run `python argv...` on n ranks and wait; Ctrl-C and timeouts kill the whole job.

    Without `capture`, the ranks' stdout passes straight through and their stderr is
    forwarded line by line minus MPICH's abort boilerplate. The job runs in its own
    process group so that nothing is orphaned when we stop it.
    """
    cmd = mpiexec_command(n, argv, hostfile=hostfile, mpiexec=mpiexec)
    env = rank_environment(env)
    if hostfile is None and "OPENBLAS_CORETYPE" not in env:
        # Only on this host, whose CPU we know: other hosts may lack the instructions.
        from xladist.compiler.parallel import openblas_coretype
        coretype = openblas_coretype()
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
    # The watchdog's job directory (xladist/runtime/watchdog.py): where every rank publishes its
    # position so the first rank whose deadline passes can say where all of them are.
    own_dir = None
    if not env.get(deadline.JOB_DIR_ENV):
        own_dir = tempfile.mkdtemp(prefix="xladist-job-")
        env[deadline.JOB_DIR_ENV] = own_dir
    notes = Path(env[deadline.JOB_DIR_ENV]) / deadline.ABORT_NOTES
    shutil.rmtree(notes, ignore_errors=True)  # a reused job directory: not this job's words
    try:
        return _launch(cmd, env, timeout, capture, notes)
    finally:
        if own_dir is not None:
            _remove_job_dir(Path(own_dir))


def _remove_job_dir(job: Path) -> None:
    """Remove the job directory, except results a rank could not write where asked
    (xladist/files.py saved them in its `rescued` folder and said so)."""
    rescued = job / RESCUE_SUBDIR
    if not rescued.is_dir():
        shutil.rmtree(job, ignore_errors=True)
        return
    for entry in job.iterdir():
        if entry == rescued:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _launch(cmd, env, timeout, capture, notes: Path) -> subprocess.CompletedProcess:
    kwargs = dict(env=env, start_new_session=True)
    if capture:
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    else:
        kwargs.update(stderr=subprocess.PIPE, text=True, bufsize=1)
    with _stop_on_signals():
        proc = subprocess.Popen(cmd, **kwargs)
        try:
            if capture:
                out, err = proc.communicate(timeout=timeout)
            else:
                out, err = None, None
                seen = bytearray()
                pump = threading.Thread(target=_forward_stderr, args=(proc.stderr, seen),
                                        daemon=True)
                pump.start()
                proc.wait(timeout=timeout)
                pump.join(timeout=5)
        except BaseException:
            _kill_group(proc)
            raise
    if proc.returncode != 0:
        # What a rank said before aborting but MPICH's launcher dropped (xladist/collectives/deadline.py).
        shown = err if capture else bytes(seen).decode(errors="replace")
        lost = "".join(f"{text}\n" for text in _abort_notes(notes) if text not in shown)
        if capture:
            err = (err or "") + lost
        elif lost:
            sys.stderr.write(lost)
            sys.stderr.flush()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _abort_notes(notes: Path) -> list[str]:
    """The ranks' abort messages left in the job directory, in rank order."""
    def rank(path: Path) -> int:
        digits = path.stem.removeprefix("rank")
        return int(digits) if digits.isdigit() else -1
    try:
        paths = sorted(notes.glob("rank*.txt"), key=rank)
        return [p.read_text(errors="replace") for p in paths]
    except OSError:
        return []


@contextlib.contextmanager
def _stop_on_signals():
    """SIGTERM / SIGHUP to the launching process (`timeout`, a batch system, a closed
    terminal) stop the job too: the ranks run in their own session and would outlive us."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


# How much forwarded stderr `_forward_stderr` keeps, to tell which abort notes were shown.
_SEEN_BYTES = 1 << 20


def _forward_stderr(stream, seen: bytearray) -> None:
    """Copy the ranks' stderr to ours as it arrives, minus MPICH's abort lines; the last
    `_SEEN_BYTES` of it are kept in `seen`.

    Raw bytes, not text lines: a progress line redrawn with `\r` (xladist/runtime/progress.py) has
    no newline and must pass at once; text mode would also turn each `\r` into a newline.
    """
    fd, out = stream.fileno(), getattr(sys.stderr, "buffer", None) or _TextSink(sys.stderr)
    pending = b""
    while chunk := os.read(fd, 65536):
        seen += chunk
        del seen[:-_SEEN_BYTES]
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not _MPICH_NOISE.match(line.decode(errors="replace")):
                out.write(line + b"\n")
        if pending.startswith(b"\r"):  # an in-place status update: show it now
            out.write(pending)
            pending = b""
        out.flush()
    if pending:
        out.write(pending)
        out.flush()


class _TextSink:
    """Bytes in, text out: for a sys.stderr without a buffer (replaced by a test harness)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data.decode(errors="replace"))

    def flush(self) -> None:
        self.stream.flush()


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue
