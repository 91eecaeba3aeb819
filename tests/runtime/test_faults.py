"""Faults end the whole job, non-zero, promptly, saying where: never an orphaned or hung rank.

* a rank that raises mid-program (a custom call that fails on one rank) aborts every rank at
  once with its error, while the others wait in the collective that follows;
* a collective that one rank never reaches, and a channel whose other end is never posted,
  run with --no-check, end at --timeout with the watchdog's report naming the ranks that
  never arrived.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from xladist.runtime import launcher
from tests.cli.test_channels_cli import DATA, write_inputs, xladist_cli

TIMEOUT = 3.0
SLACK = 60.0  # job start-up on a loaded 2-core machine

FAULTY = """\
HloModule faulty, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %sensor = f32[4]{0} custom-call(%x), custom_call_target="test.fail_on_rank1"
  ROOT %psum = f32[4]{0} all-reduce(%sensor), channel_id=1, replica_groups={}, to_apply=%add
}
"""

# Each rank registers the target, then runs the CLI as a rank of the job mpiexec started.
SCRIPT = """\
import sys

from mpi4py import MPI

from xladist.semantics.custom_calls import register_custom_call
from tests.paths import ROOT


def fail_on_rank1(instr, args):
    if MPI.COMM_WORLD.Get_rank() == 1:
        raise ValueError("sensor 3 reads NaN on purpose")
    return args[0]


register_custom_call("test.fail_on_rank1", fail_on_rank1)
from xladist.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(300)
def test_rank_raising_mid_program_aborts_the_job_at_once(tmp_path):
    module = tmp_path / "faulty.hlo"
    module.write_text(FAULTY)
    script = tmp_path / "rank.py"
    script.write_text(SCRIPT)
    inputs = write_inputs(tmp_path / "in.npz", module, 2)
    deadline = 60.0  # far beyond the abort: the job must not wait for it
    t0 = time.monotonic()
    proc = launcher.launch(2, [str(script), "run", str(module), "-n", "2", "--inputs",
                               str(inputs), "-q", "--timeout", str(deadline)],
                           capture=True, timeout=deadline + SLACK)
    elapsed = time.monotonic() - t0
    err = launcher.clean_stderr(proc.stderr)
    assert proc.returncode != 0, err
    assert elapsed < deadline, f"the job waited for the deadline ({elapsed:.1f} s):\n{err}"
    assert "rank 1 (replica 0, partition 1)" in err
    assert "sensor" in err and "custom-call" in err
    assert "sensor 3 reads NaN on purpose" in err
    assert "Where every rank is" not in err  # ended by the error, not by a deadline


def _no_check_run(tmp_path, name):
    inputs = write_inputs(tmp_path / "in.npz", DATA / name, 2,
                          {0: np.ones((2, 4), np.float32)})
    t0 = time.monotonic()
    proc = xladist_cli("run", DATA / name, "-n", 2, "--inputs", inputs, "-q", "--no-check",
                       "--timeout", TIMEOUT, timeout=TIMEOUT + SLACK)
    return proc, time.monotonic() - t0


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_collective_one_rank_never_reaches(tmp_path):
    proc, elapsed = _no_check_run(tmp_path, "allreduce_some_branch.hlo")
    err = proc.stderr
    assert proc.returncode != 0, err
    assert elapsed < TIMEOUT + SLACK
    assert "waited 3." in err and "(the deadline, --timeout 3)" in err
    assert ("rank 0 (replica 0, partition 0): psum.only_some (line 14) over devices [0, 1], "
            "waiting") in err, err
    assert "psum.only_some (line 14) over devices [0, 1]: rank 0 waits there; rank 1 never " \
           "arrived" in err, err


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_channel_end_never_posted(tmp_path):
    proc, elapsed = _no_check_run(tmp_path, "send_without_recv.hlo")
    err = proc.stderr
    assert proc.returncode != 0, err
    assert elapsed < TIMEOUT + SLACK
    # Channels are unbuffered: the send-done waits for a recv that device 1 never posts.
    assert ("rank 0 (replica 0, partition 0): send-done.lonely (line 10) on channel 3 to "
            "device 1, waiting") in err, err
    assert "rank 0 waits for rank 1, which never arrived at the other end of the channel" \
        in err, err


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_failing_host_callback_ends_the_job_naming_rank_and_channel():
    from xladist.runtime.api import run
    from tests.cli.test_channels_cli import HOST_LOOP
    from xladist.errors import ExecutionError

    def host_recv(rank, channel):
        if rank == 1:
            raise KeyError(f"no data for rank {rank}")
        return np.zeros(3, np.float32)

    t0 = time.monotonic()
    with pytest.raises(ExecutionError) as info:
        run(HOST_LOOP, [np.zeros((2, 3), np.float32)], n=2, host_recv=host_recv,
            host_send=lambda rank, channel, array: None, timeout=60, job_timeout=60 + SLACK)
    assert time.monotonic() - t0 < 60  # the error ended it, not the deadline
    text = str(info.value)
    assert "rank 1 (replica 0, partition 1)" in text
    assert "recv-done" in text and "host_recv callback failed on channel 7" in text
    assert "no data for rank 1" in text
