"""A signal that ends a launching process leaves nothing of its job behind, whenever it
arrives: mpiexec, its ranks and the compile helpers (xladist/compiler/compile_pool.py) go
with it. Processes are found by a marker in their environment, which every one of them
inherits; each test polls for them to go, with a deadline, instead of sleeping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli_util import gone, marked
from tests.paths import ROOT


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _env(marker: str, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), XLADIST_PROGRESS="off",
                XLADIST_TEST_MARKER=marker, **extra)


# The launcher gets SIGTERM at the worst moment: mpiexec exists but subprocess.Popen has not
# returned it yet (the test of the whole CLI, test_launch.py, hits this window now and then
# when a compile helper is the third marked process it waits for).
_SIGTERM_IN_POPEN = """
import os, signal, subprocess, sys
from xladist.runtime import launcher
real = subprocess.Popen._execute_child
def late(self, *args, **kwargs):
    real(self, *args, **kwargs)
    if os.path.basename(self.args[0]).startswith("mpiexec"):
        os.kill(os.getpid(), signal.SIGTERM)
subprocess.Popen._execute_child = late
launcher.launch(2, ["-c", "import time; time.sleep(120)"], capture=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sigterm_while_mpiexec_starts_leaves_no_rank(tmp_path):
    marker = f"sigterm-popen-{tmp_path.name}-{os.getpid()}"
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_IN_POPEN], cwd=ROOT,
                          env=_env(marker), capture_output=True, text=True, timeout=60)
    left = gone(marker, 20)
    _kill(left)
    assert left == [], f"still running after the launcher ended: {left}"
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr


@pytest.mark.timeout(60)
def test_a_rank_whose_launcher_is_gone_gives_up_at_once():
    # A launcher killed (SIGKILL) while its ranks start: their connection is refused. The
    # service listened before any rank learnt its address, so a refusal means it is gone;
    # before, a rank retried for CONNECT_TIMEOUT_S (60 s) and mpiexec lived on meanwhile.
    import socket

    from xladist.runtime.service.client import Client, ServiceError
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed below: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ServiceError, match="cannot reach the coordination service"):
        Client(f"127.0.0.1:{port}", "token", 0, 2).start()
    assert time.monotonic() - t0 < 10


def _helper_started(marker: str) -> bool:
    for pid in marked(marker):
        try:
            if b"llvm_worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_launcher_ended_while_it_compiles_leaves_nothing(tmp_path, sig):
    # The whole path: a cold kernel cache, a module of many compile units, `xladist run -n 2`
    # ended as soon as its compile helper runs (the launcher compiles for the ranks, which
    # are starting). SIGKILL: nothing runs in the launcher; its helper sees its pipe end,
    # the ranks their connection refused or lost.
    import numpy as np

    from xladist.hlo.parser import parse_file
    module = ROOT / "benchmarks" / "transformer_step.hlo"
    params = parse_file(str(module), "MODULE").entry.parameters
    np.savez(tmp_path / "in.npz", **{f"arg{i}": np.zeros((2, *p.shape.dims), p.shape.dtype)
                                     for i, p in enumerate(params)})
    marker = f"cold-{sig.name}-{tmp_path.name}-{os.getpid()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "xladist", "run", str(module), "-n", "2", "--no-check",
         "--inputs", str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz")],
        cwd=tmp_path, env=_env(marker, XLADIST_CACHE_DIR=str(tmp_path / "cache"),
                               XLADIST_COMPILE_JOBS="2"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 120
        while not _helper_started(marker) and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert proc.poll() is None and _helper_started(marker), "no compile helper started"
        proc.send_signal(sig)
        proc.communicate(timeout=60)
        left = gone(marker, 10)
        _kill(left)
        assert left == [], f"still running 10 s after the launcher ended: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == (128 + sig if sig != signal.SIGKILL else -sig)


# ---- MPICH's topology files -------------------------------------------------------------
# Each host's hydra proxy writes the node's topology for its ranks' MPICH to
# /tmp/hydra_hwloc_xmlfile_XXXXXX (hard-coded: not TMPDIR) and removes it when it ends --
# but not after MPI_Abort: every failed run left one 5.5 KiB file per host in /tmp (2634 on
# this machine from test runs when it was found).
_FEED_WITHOUT_SOURCE = """HloModule starved, replica_count=2

ENTRY main {
  tok = token[] after-all()
  feed = (f32[4], token[]) infeed(tok)
  ROOT x = f32[4] get-tuple-element(feed), index=0
}
"""


def _topology_files() -> set[str]:
    import glob
    return set(glob.glob("/tmp/hydra_hwloc_xmlfile_*"))


def _proxies() -> set[int]:
    """The hydra proxies running on this machine now."""
    found = set()
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "comm").read_bytes().strip() == b"hydra_pmi_proxy":
                found.add(int(d.name))
        except OSError:
            continue
    return found


def test_across_hosts_a_failing_rank_exits_only_when_the_service_ends_every_rank(monkeypatch):
    """Under hydra a failing rank exits (its proxy then ends this host's ranks and removes
    its topology file). With ranks on other hosts (another proxy), that ends them only when
    the job's service carries the failure and ends every rank; a failure it never heard of
    (a bare `mpiexec -f hosts` whose rank 0 fails before the service is up) left them
    waiting in MPI for ever, so there MPI_Abort. Before, a rank exited in every case (the
    hang), or -- after that fix alone -- aborted across hosts even when the service ended
    the job, leaving a topology file on every host per failed run."""
    from xladist.collectives import deadline
    monkeypatch.setattr(deadline, "_under_hydra", lambda: True)
    monkeypatch.setenv("PMI_SIZE", "4")
    monkeypatch.setenv("MPI_LOCALNRANKS", "2")  # 2 of the 4 ranks on this host
    assert not deadline._exit_ends_job(False)
    assert deadline._exit_ends_job(True)
    monkeypatch.setenv("MPI_LOCALNRANKS", "4")  # every rank here
    assert deadline._exit_ends_job(False)
    monkeypatch.setattr(deadline, "_under_hydra", lambda: False)  # srun, Open MPI
    assert not deadline._exit_ends_job(True)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["a rank's error", "a hang"])
def test_a_failed_job_leaves_no_file_of_mpich_in_tmp(tmp_path, how):
    from tests.cli.test_channels_cli import write_inputs
    from tests.cli_util import xladist_cli
    from tests.paths import ROOT as root
    if how == "a rank's error":
        module = tmp_path / "starved.hlo"
        module.write_text(_FEED_WITHOUT_SOURCE)
        args = [module, "-n", 2]
        said = "infeed needs an infeed source"
    else:  # rank 0 ends its loop after 2 trips, rank 1 waits in its third psum
        module = root / "tests" / "data" / "deadlock" / "data_dependent_loop.hlo"
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        inputs = write_inputs(tmp_path / "in.npz", module, 2, {0: x, 1: np.array([2, 3], np.int32)})
        args = [module, "-n", 2, "--inputs", inputs, "--no-check", "--timeout", 3]
        said = "never arrived"
    import threading
    marker = f"xladist-topology-test-{os.getpid()}-{time.monotonic_ns()}"
    seen: set[int] = set()  # every proxy that ran meanwhile: ours carry the marker
    ours: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            now = _proxies() - seen
            seen.update(now)
            ours.update(p for p in now if p in set(marked(marker)))
    before = _topology_files()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        proc = xladist_cli("run", *args, "-q", timeout=120, XLADIST_PROGRESS="off",
                           XLADIST_TEST_MARKER=marker)
    finally:
        done.set()
        watcher.join()
    assert proc.returncode == 1 and said in proc.stderr, proc.stderr
    # A file still there is this job's, or another job's on this machine (a test of
    # another checkout): one that runs on removes its file when it ends.
    deadline = time.monotonic() + 30
    while (left := _topology_files() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left and seen - ours:
        pytest.skip(f"other MPI jobs ran on this machine meanwhile (proxies "
                    f"{sorted(seen - ours)}): {sorted(left)} may be theirs")
    assert not left, left


# SIGTERM to `xladist run` after its job's temporary folder exists and before mpiexec starts
# (while it sets up the compile for the ranks): no rank ever starts here.
_SIGTERM_IN_SETUP = """
import os, signal, sys
from xladist.runtime import compile_once
real = compile_once.CodeStore.__init__
def stopped(self, *args, **kwargs):
    real(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
compile_once.CodeStore.__init__ = stopped
from xladist.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(60)
def test_sigterm_before_mpiexec_starts_leaves_no_temporary_folder(tmp_path):
    # Before: SIGTERM's default action ended `xladist run` on the spot there, and its
    # xladist-outputs-* folder stayed in TMPDIR (`timeout 1.5 xladist run ... --outputs`).
    from tests.cli.test_channels_cli import write_inputs
    module = ROOT / "tests" / "data" / "deadlock" / "data_dependent_loop.hlo"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inputs = write_inputs(tmp_path / "in.npz", module, 2, {0: x, 1: np.array([1, 1], np.int32)})
    (tmp_path / "tmp").mkdir()
    marker = f"sigterm-setup-{tmp_path.name}-{os.getpid()}"
    proc = subprocess.run(
        [sys.executable, "-c", _SIGTERM_IN_SETUP, "run", str(module), "-n", "2",
         "--inputs", str(inputs), "--outputs", str(tmp_path / "out.npz")],
        cwd=tmp_path, env=_env(marker, TMPDIR=str(tmp_path / "tmp")),
        capture_output=True, text=True, timeout=50)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, proc.stderr)
    assert sorted(os.listdir(tmp_path / "tmp")) == []
    assert not (tmp_path / "out.npz").exists()
    _kill(gone(marker, 10))


# SIGTERM to `xladist run --batch` while its cluster's ranks run a line.
_SIGTERM_IN_BATCH = """
import os, signal, sys
from xladist.runtime import cluster
real = cluster._Calls.wait
def stopped(self, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    return real(self, *args, **kwargs)
cluster._Calls.wait = stopped
from xladist.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sigterm_during_a_batch_stops_its_ranks_and_leaves_no_temporary_folder(tmp_path):
    # Before: SIGTERM's default action ended `xladist run --batch` at once, leaving the
    # running line's xladist-outputs-* folder in TMPDIR and the cluster's ranks to find
    # their service gone (`timeout 3 xladist run --batch runs.txt -n 2`).
    from tests.cli.test_channels_cli import write_inputs
    module = ROOT / "tests" / "data" / "deadlock" / "data_dependent_loop.hlo"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inputs = write_inputs(tmp_path / "in.npz", module, 2, {0: x, 1: np.array([1, 1], np.int32)})
    (tmp_path / "runs.txt").write_text(f"{module} --inputs {inputs}\n" * 3)
    (tmp_path / "tmp").mkdir()
    marker = f"sigterm-batch-{tmp_path.name}-{os.getpid()}"
    proc = subprocess.run(
        [sys.executable, "-c", _SIGTERM_IN_BATCH, "run", "--batch", "runs.txt", "-n", "2"],
        cwd=tmp_path, env=_env(marker, TMPDIR=str(tmp_path / "tmp")),
        capture_output=True, text=True, timeout=80)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, proc.stderr)
    left = gone(marker, 20)
    _kill(left)
    assert left == [], f"still running after the batch ended: {left}"
    assert sorted(os.listdir(tmp_path / "tmp")) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_interrupted_run_leaves_no_temporary_folder(tmp_path):
    # `xladist run --outputs --trace` keeps the ranks' outputs and trace events in folders
    # of TMPDIR until it writes them; Ctrl-C during the run left both there (an empty
    # xladist-outputs-* and xladist-trace-* per interrupted run of a shell loop).
    from tests.cli.test_channels_cli import write_inputs
    module = ROOT / "tests" / "data" / "deadlock" / "data_dependent_loop.hlo"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inputs = write_inputs(tmp_path / "in.npz", module, 2, {0: x, 1: np.array([2, 3], np.int32)})
    (tmp_path / "tmp").mkdir()
    marker = f"interrupted-{tmp_path.name}-{os.getpid()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "xladist", "run", str(module), "-n", "2", "--no-check",
         "--timeout", "60", "--inputs", str(inputs), "--outputs", str(tmp_path / "out.npz"),
         "--trace", str(tmp_path / "trace.json")],
        cwd=tmp_path, env=_env(marker, TMPDIR=str(tmp_path / "tmp")),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60  # the ranks hang in their third psum until interrupted
        while len(marked(marker)) < 3 and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1]
        assert sorted(os.listdir(tmp_path / "tmp")), "the run keeps no temporary folder"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "interrupted" in err, err
    assert sorted(os.listdir(tmp_path / "tmp")) == []
    _kill(gone(marker, 10))
