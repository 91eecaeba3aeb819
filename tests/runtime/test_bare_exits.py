"""How a job started by a bare `mpiexec -n N xladist run ...` ends when it fails: the exit
code docs/errors.md gives (every run the same, never MPICH's 9 for the ranks its proxies
killed), the reason said once, no BAD TERMINATION banner, no traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.cli_util import ROOT, cli_env

CB_BAD = """HloModule cb_bad, replica_count=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(p), replica_groups={}, to_apply=add
}
"""


def bare(tmp_path, n: int, *args) -> subprocess.CompletedProcess:
    from xladist.collectives.mpiexec import find_mpiexec
    cmd = [find_mpiexec(), "-n", str(n), sys.executable, "-m", "xladist", "run", *map(str, args)]
    return subprocess.run(cmd, cwd=tmp_path, env=cli_env(XLADIST_PROGRESS="off"),
                          capture_output=True, text=True, timeout=120)


def assert_said_once(proc, code: int, text: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert out.count(text) == 1, out
    assert "BAD TERMINATION" not in out and "Traceback" not in out, out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_bare_launch_refused_before_it_runs_exits_2_saying_so_once(tmp_path):
    """Rank 0 refuses the job (its --inputs file is missing) while ranks 1-3 wait for it:
    before, rank 0 exited alone, hydra's proxy killed the waiting ranks and mpiexec exited
    9 with its banner (3 runs of 3), now every rank ends with the error's code, 2."""
    (tmp_path / "cb_bad.hlo").write_text(CB_BAD)
    for _ in range(2):
        proc = bare(tmp_path, 4, "cb_bad.hlo", "--inputs", "nonexist.npz")
        assert_said_once(proc, 2, "--inputs nonexist.npz: does not exist")
    np.savez(tmp_path / "in.npz", arg0=np.zeros((4, 3), np.float32))  # f32[4] expected
    proc = bare(tmp_path, 4, "cb_bad.hlo", "--inputs", "in.npz")
    assert_said_once(proc, 2, "error:")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_bare_launch_with_the_wrong_n_says_so_once(tmp_path):
    """-n that does not match the MPI job: one line (before: one per rank)."""
    (tmp_path / "cb_bad.hlo").write_text(CB_BAD)
    proc = bare(tmp_path, 2, "cb_bad.hlo", "-n", "3")
    assert_said_once(proc, 2, "-n 3 does not match the MPI job's 2 ranks")


FEED_TWICE = """HloModule feed_twice, replica_count=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  tok = token[] after-all()
  f1 = (f32[4], token[]) infeed(tok)
  x1 = f32[4] get-tuple-element(f1), index=0
  t1 = token[] get-tuple-element(f1), index=1
  r1 = f32[4] all-reduce(x1), replica_groups={}, to_apply=add
  f2 = (f32[4], token[]) infeed(t1)
  x2 = f32[4] get-tuple-element(f2), index=0
  s = f32[4] add(r1, x2)
  ROOT r2 = f32[4] all-reduce(s), replica_groups={}, to_apply=add
}
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_rank_failing_mid_run_of_a_bare_launch_exits_1_every_time(tmp_path):
    """Rank 2's infeed runs dry at its second item while ranks 0, 1, 3 wait in the second
    all-reduce: the job ends with 1 (docs/errors.md, runtime) and the error once. Before, the
    failing rank exited as soon as the service had its words and the others when told: 2 runs
    in 5 ended with mpiexec's 9 and its banner (hydra killed the ranks not gone yet)."""
    (tmp_path / "m.hlo").write_text(FEED_TWICE)
    for r in range(4):
        items = 1 if r == 2 else 2
        np.savez(tmp_path / f"feed{r}.npz",
                 **{f"item{k}": np.ones(4, np.float32) for k in range(items)})
    for _ in range(6):
        proc = bare(tmp_path, 4, "m.hlo", "--infeed", "feed{rank}.npz", "-q")
        assert_said_once(proc, 1, "infeed exhausted on rank 2 at f2 (item 1)")
        assert "lost the coordination service" not in proc.stderr, proc.stderr


HANGS_ON_RANK_1 = '''
import numpy as np
import xladist
m = xladist.load_hlo(%r)
steps = np.array([2, 3], np.int32)  # rank 1 waits in a third psum rank 0 never makes
xladist.run(m, [np.ones((2, 4), np.float32), steps], n=2, timeout=3, check=False,
            backend="interpreter")
'''


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_hang_in_a_script_under_mpiexec_is_one_report(tmp_path):
    """`mpiexec -n 2 python script.py` whose rank 1 waits in a psum rank 0 (its program
    finished) never makes: the job's one report, naming both. Before, rank 0's wait for the
    outputs had no monitor and printed its own `timed out ... exchanging outputs` line too."""
    from xladist.collectives.mpiexec import find_mpiexec
    module = ROOT / "tests" / "data" / "deadlock" / "data_dependent_loop.hlo"
    script = tmp_path / "script.py"
    script.write_text(HANGS_ON_RANK_1 % str(module))
    proc = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, str(script)],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert out.count("Where every rank is:") == 1 and "timed out" not in out, out
    assert ("rank 1 (replica 0, partition 1): psum (line 17) over devices [0, 1] "
            "(iteration 3 of data_loop)") in out, out
    assert "exchanging outputs over all ranks: rank 0 waits there; rank 1 never arrived" \
        in out, out


def test_ctrl_c_on_a_rank_is_interrupted_130_not_an_internal_error():
    """Ctrl-C to a bare `mpiexec -n 2 xladist run` reaches a rank waiting in Python (rank 0
    waiting for the others' outputs) as KeyboardInterrupt: the job ends with 130 and
    `rank 0: interrupted`, as `xladist run` does. Before, `internal error:
    KeyboardInterrupt` with a traceback, exit 1. (A rank blocked in MPI does not see it
    before its wait ends: the report's "defects found".)"""
    from xladist.runtime.rank import failure_text
    assert failure_text(KeyboardInterrupt(), 0) == ("rank 0: interrupted", 130)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_wait_for_a_finished_rank_is_reported_long_before_the_deadline(tmp_path):
    """`xladist run -n 2 --timeout 60`: rank 0 ends its loop after 2 trips (its program
    finishes), rank 1 waits in a third psum. Reported within seconds (before: after the
    60 s deadline), naming rank 0's end."""
    import time

    from tests.cli_util import xladist_cli
    module = ROOT / "tests" / "data" / "deadlock" / "data_dependent_loop.hlo"
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32),
             arg1=np.array([2, 3], np.int32))
    t0 = time.monotonic()
    proc = xladist_cli("run", module, "-n", 2, "--inputs", tmp_path / "in.npz", "--no-check",
                       "--timeout", 60, "-q", timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    assert ("rank 1 (replica 0, partition 1) has waited" in proc.stderr and
            "for rank 0, whose program has finished: the wait cannot end" in proc.stderr and
            "rank 0 (replica 0, partition 0): finished its program" in proc.stderr), proc.stderr
    assert elapsed < 40, (elapsed, proc.stderr)


ENDS_STAGGERED = '''
import threading, time
from mpi4py import MPI
from xladist.collectives import deadline
rank = MPI.COMM_WORLD.Get_rank()

def end():  # rank 1 first, the others 150 ms later: as a job ending on a loaded host
    time.sleep(1.0 if rank == 1 else 1.15)
    deadline.ranks_exit_together()  # as `xladist run` under a bare mpiexec
    deadline.everyone_goes()  # as every rank's client does when the service ends the job
    deadline.abort_job("rank 1 ends the job" if rank == 1 else "", 2, with_rank=False)
threading.Thread(target=end, daemon=True).start()
if rank == 1:
    time.sleep(10)
MPI.COMM_WORLD.Barrier()  # the others wait in MPI
'''


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ranks_ending_a_job_a_moment_apart_exit_with_its_code(tmp_path):
    """deadline.abort_job on every rank, rank 1 150 ms before the others: mpiexec exits with
    their code (2). Before, hydra's proxy took rank 1's exit for a crash and killed the
    others, and mpiexec exited 9 with its banner (2 runs in 4)."""
    from xladist.collectives.mpiexec import find_mpiexec
    script = tmp_path / "end.py"
    script.write_text(ENDS_STAGGERED)
    for _ in range(4):
        proc = subprocess.run([find_mpiexec(), "-n", "4", sys.executable, str(script)],
                              cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                              timeout=120)
        assert_said_once(proc, 2, "rank 1 ends the job")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_hang_after_rank_0_finished_a_bare_launch_is_one_report(tmp_path):
    """`mpiexec -n 2 xladist run ... --timeout 3`: rank 0's loop ends after 2 trips, rank 1
    waits in a third psum. One report, exit 1. Before, rank 0 (its goodbye said, waiting
    for the outputs without the service as monitor) printed `rank 0: timed out ... waiting
    for every rank's outputs` and exited, and rank 1 said it lost the coordination
    service."""
    module = ROOT / "tests" / "data" / "deadlock" / "data_dependent_loop.hlo"
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32),
             arg1=np.array([2, 3], np.int32))
    proc = bare(tmp_path, 2, module, "--inputs", "in.npz", "--no-check", "--timeout", 3, "-q")
    assert_said_once(proc, 1, "Where every rank is:")
    assert "timed out" not in proc.stderr and "lost the coordination" not in proc.stderr, \
        proc.stderr
    assert ("rank 1 (replica 0, partition 1): psum (line 17) over devices [0, 1] "
            "(iteration 3 of data_loop)") in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ctrl_c_ends_a_bare_launch_whose_ranks_wait_in_mpi(tmp_path):
    """SIGINT to mpiexec (Ctrl-C) while both ranks wait in recv-done for each other: the
    job ends within seconds with 130 and one `interrupted`. Before, Python's handler never
    ran in ranks blocked in MPI: nothing happened until the 60 s deadline's report, exit 1."""
    import signal
    import time

    from xladist.collectives.mpiexec import find_mpiexec
    module = ROOT / "tests" / "data" / "deadlock" / "recv_done_first.hlo"
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    proc = subprocess.Popen(
        [find_mpiexec(), "-n", "2", sys.executable, "-m", "xladist", "run", str(module),
         "--inputs", "in.npz", "--no-check", "--timeout", "60", "-q"], cwd=tmp_path,
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # the ranks wait by then
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert err.count("interrupted") == 1 and "Traceback" not in err, err
    assert "Where every rank is" not in err and time.monotonic() - t0 < 20, err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_ends_a_bare_launch_with_143_and_one_line(tmp_path):
    """SIGTERM to mpiexec (a batch system's time limit, `timeout`) while both ranks wait in
    recv-done: 143 (128 + 15, as `xladist run`), `rank 0: terminated (SIGTERM)` once, no
    banner. Before, the forwarded SIGTERM killed the ranks: MPICH's BAD TERMINATION banner,
    exit 15."""
    import signal
    import time

    from xladist.collectives.mpiexec import find_mpiexec
    module = ROOT / "tests" / "data" / "deadlock" / "recv_done_first.hlo"
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    proc = subprocess.Popen(
        [find_mpiexec(), "-n", "2", sys.executable, "-m", "xladist", "run", str(module),
         "--inputs", "in.npz", "--no-check", "--timeout", "60", "-q"], cwd=tmp_path,
        env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # the ranks wait by then
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert_said_once(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 143,
                     "rank 0: terminated (SIGTERM)")
