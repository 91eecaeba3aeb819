"""Jobs over several (simulated) hosts: nothing may need a disk two hosts share.

Every test runs real ranks on made-up nodes (tests/simhosts.py: Hydra's fork launcher, one
proxy per node name, nodes other than the launching one with a private /tmp and their own
host name). The module, inputs, outputs, traces and feed files live in the test's folder
under the launching host's /tmp, which the other node cannot see: they must travel over
the coordination service. Results are checked against numpy on every rank's inputs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli.test_channels_cli import DATA, HOST_LOOP, write_inputs
from tests.cli.test_feeds_cli import check_outfeed, expected_accs, loop_text, read_outfeed
from tests.cli_util import cli_env, gone, marked, xladist_cli
from tests.feeds_fns import item
from tests.paths import ROOT

SLACK = 90.0  # job start-up on a loaded 2-core machine, on top of the deadline
pytestmark = pytest.mark.slow  # every test starts ranks (docs/testing.md)


def _loop(tmp_path, steps) -> tuple[Path, Path]:
    """data_dependent_loop.hlo on len(steps) partitions, device d looping steps[d] times."""
    n = len(steps)
    module = tmp_path / f"loop{n}.hlo"
    module.write_text((DATA / "data_dependent_loop.hlo").read_text().replace(
        "num_partitions=2", f"num_partitions={n}"))
    x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
    inputs = write_inputs(tmp_path / f"in{n}.npz", module, n,
                          {0: x, 1: np.array(steps, np.int32)})
    return module, inputs


def _run(sim, *args, timeout=SLACK, cwd=None, **env):
    return xladist_cli("run", *args, "--hostfile", sim.hostfile, "--mpiexec", sim.mpiexec,
                       timeout=timeout, cwd=cwd or sim.where, XLADIST_PROGRESS="off", **env)


# ---- where the ranks start -----------------------------------------------------------------

@pytest.mark.timeout(600)
def test_ranks_start_in_the_launching_folder_where_their_host_has_it(tmp_path, simhosts,
                                                                      monkeypatch):
    """A launch from a folder only the launching host has (the test's, in its /tmp: a
    login node's local disk). mpiexec's proxies change to mpiexec's folder, and MPICH's
    stops on a host that lacks it (`unable to change wdir to ...`, as simhosts emulates);
    before, nodeB's ranks never started and nodeA's waited in MPI's start-up: `xladist run
    --hostfile` from there waited, silent (until XLADIST_REGISTER_TIMEOUT). Now the ranks
    start in / and enter the launching folder where their host has it."""
    from xladist.runtime import launcher
    sim = simhosts()
    monkeypatch.chdir(tmp_path)
    say = "import os; os.write(1, f\"{os.environ['PMI_RANK']} {os.getcwd()}\\n\".encode())"
    proc = launcher.launch(4, ["-c", say], hostfile=str(sim.hostfile), mpiexec=str(sim.mpiexec),
                           capture=True, timeout=60)  # (one write a line: ranks share the pipe)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split("\n"))[1:] == [f"0 {tmp_path}", f"1 {tmp_path}", "2 /",
                                                   "3 /"], proc.stdout


@pytest.mark.timeout(600)
def test_a_demo_trace_named_relative_to_the_launching_folder(tmp_path, simhosts):
    """`xladist demo --hostfile H --trace t.json`: the ranks re-run the demo, and rank 0
    writes the trace. Ranks on other hosts start in / (mpiexec's folder may not exist
    there): before, rank 0 wrote `t.json` into / of its host and printed `timeline:
    t.json`. Now the name is the launching folder's: written there when rank 0's host has
    it; else rescued on rank 0's host, saying so (exit 1), with no `timeline:` line for a
    file that is not there."""
    out = lambda proc: proc.stdout + proc.stderr  # noqa: E731
    sim = simhosts(launch="nodeC", tag=f"{os.getpid()}-{tmp_path.name}-c")  # on no node
    proc = xladist_cli("demo", "-n", 4, "--steps", 2, "-q", "--hostfile", sim.hostfile,
                       "--mpiexec", sim.mpiexec, "--trace", "t.json", cwd=tmp_path,
                       timeout=SLACK)
    assert proc.returncode == 1, out(proc)  # (as for any result not written where asked)
    assert re.search(rf"cannot write --trace {re.escape(str(tmp_path / 't.json'))}: No such "
                     r"file or directory; saved it as /tmp/xladist-rescued-\w+/t.json \(on "
                     r"nodeA\) instead", proc.stderr), out(proc)
    assert "timeline:" not in proc.stdout, out(proc)
    stray = Path("/t.json")  # where rank 0 wrote it before (removed when the test fails)
    assert not stray.exists(), stray.unlink()
    assert list(sim.private_tmp("nodeA").glob("xladist-rescued-*/t.json"))
    sim = simhosts()  # rank 0 on nodeA, the launching host
    proc = xladist_cli("demo", "-n", 4, "--steps", 2, "-q", "--hostfile", sim.hostfile,
                       "--mpiexec", sim.mpiexec, "--trace", "t.json", cwd=tmp_path,
                       timeout=SLACK)
    assert proc.returncode == 0, out(proc)
    assert f"timeline: {tmp_path / 't.json'} " in proc.stdout, out(proc)
    # Each host runs 2 of the 4 ranks: before, the summary said "(4 ranks share N cores"
    # of the launching host's cores.
    assert "4 ranks share" not in proc.stdout, out(proc)
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert not Path("/t.json").exists()


# ---- one true report per job -----------------------------------------------------------------

@pytest.mark.timeout(600)
def test_hang_across_hosts_gives_one_report_with_every_rank_true_position(tmp_path, simhosts):
    """Ranks 1 (nodeA) and 2 (nodeB) wait in the same all-reduce; 0 and 3 finished. Every
    rank's true position, on both hosts, in exactly one report -- twice in the same folder
    (nothing is left behind that could spoil the next job)."""
    sim = simhosts()
    module, inputs = _loop(tmp_path, [2, 3, 3, 2])
    for attempt in range(2):
        t0 = time.monotonic()
        proc = _run(sim, module, "-n", 4, "--inputs", inputs, "--no-check", "--timeout", 4)
        elapsed = time.monotonic() - t0
        err = proc.stderr
        assert proc.returncode == 1, err
        assert err.count("Where every rank is:") == 1, err
        for r, node in ((1, "nodeA"), (2, "nodeB")):
            assert re.search(rf"rank {r} \(replica 0, partition {r}\) on {node}: psum \(line "
                             r"17\) over devices \[0, 1, 2, 3\] \(iteration 3 of data_loop\), "
                             r"waiting \d+\.\d s", err), err
        for r, node in ((0, "nodeA"), (3, "nodeB")):
            assert f"rank {r} (replica 0, partition {r}) on {node}: finished its program" \
                in err, err
        assert ("psum (line 17) over devices [0, 1, 2, 3] (iteration 3 of data_loop): ranks "
                "1, 2 wait there; ranks 0, 3 never arrived") in err, err
        assert "no news" not in err and "BAD TERMINATION" not in err, err
        assert elapsed < 4 + SLACK, f"attempt {attempt}: {elapsed:.1f} s"
    # Nothing of the job is left on the other node's disk.
    assert not list(sim.private_tmp("nodeB").glob("xladist-*")), \
        list(sim.private_tmp("nodeB").iterdir())


# ---- results land where the user asked, on the launching host --------------------------------

@pytest.mark.timeout(600)
def test_outputs_trace_and_outfeed_land_on_the_launching_host(tmp_path, simhosts):
    """Rank 0 runs on nodeB, which cannot see the launching host's /tmp: the module, the
    inputs and the infeed files come from there, and the outputs, the trace and every
    rank's outfeed go there."""
    sim = simhosts(nodes=[("nodeB", 2), ("nodeA", 2)], launch="nodeA")
    n, steps = 4, 3
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(n, steps))
    from xladist.runtime.feeds.npz import write_items
    for r in range(n):
        write_items(str(tmp_path / "feeds" / f"rank{r}.npz"), [item(r, k) for k in range(steps)])
    out, trace = tmp_path / "out.npz", tmp_path / "trace.json"
    proc = _run(sim, module, "-n", n, "--infeed", tmp_path / "feeds" / "rank{rank}.npz",
                "--outfeed", tmp_path / "got" / "rank{rank}.npz", "--outputs", out,
                "--trace", trace, "--timeout", 60)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as z:
        np.testing.assert_allclose(z["out0"], np.stack([expected_accs(n, steps)[-1]] * n),
                                   rtol=1e-6)
    for r in range(n):
        check_outfeed(read_outfeed(tmp_path / "got" / f"rank{r}.npz"), n, steps)
    doc = json.loads(trace.read_text())
    assert {e["pid"] for e in doc["traceEvents"] if e.get("ph") == "X"} == set(range(n))
    assert not list(sim.private_tmp("nodeB").rglob("*.npz"))


@pytest.mark.timeout(600)
def test_per_device_input_and_output_files(tmp_path, simhosts):
    """`--inputs in.{device}.npz` / `--outputs out.{device}.npz`: one file per device."""
    sim = simhosts()
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"
    with np.load(case / "inputs.npz") as z:
        for d in range(4):
            np.savez(tmp_path / f"in.{d}.npz", **{k: z[k][d] for k in z.files})
    proc = _run(sim, case / "module.hlo", "-n", 4, "--inputs", tmp_path / "in.{device}.npz",
                "--outputs", tmp_path / "out.{device}.npz")
    assert proc.returncode == 0, proc.stderr
    with np.load(case / "expected.npz") as want:
        for d in range(4):
            with np.load(tmp_path / f"out.{d}.npz") as got:
                np.testing.assert_allclose(got["out0"], want["out0"][d], rtol=1e-5)


@pytest.mark.timeout(600)
def test_a_failed_runs_trace_names_the_ranks_that_saved_their_events(tmp_path, simhosts):
    sim = simhosts()
    module, inputs = _loop(tmp_path, [2, 3, 3, 2])
    trace = tmp_path / "trace.json"
    proc = _run(sim, module, "-n", 4, "--inputs", inputs, "--no-check", "--timeout", 4,
                "--trace", trace)
    assert proc.returncode == 1, proc.stderr
    assert f"wrote the failed run's partial trace to {trace}" in proc.stderr
    note = json.loads(trace.read_text())["otherData"]["note"]
    assert note.startswith("partial: the run failed; ranks "), note
    # The ranks still waiting when the service ended the job saved their events, on both
    # hosts (nodeB's rank 2 included: its events travelled, no part file stayed behind).
    assert re.search(r"ranks [0-9, ]*1, 2[0-9, ]* saved their events", note), note
    assert not list(sim.private_tmp("nodeB").rglob("*.part"))


# ---- a rank that dies or stops --------------------------------------------------------------

def _marked(marker: str):
    """(pid, ppid, exe, cmdline, environ) of every process carrying the test's marker: the
    launcher, mpiexec, the simulated hosts' proxies and wrappers, the ranks and their
    helpers."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            if marker.encode() not in env:
                continue
            cmd = (d / "cmdline").read_bytes()
            exe = os.readlink(d / "exe")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        yield int(d.name), ppid, exe, cmd, env


def _rank_pids(marker: str) -> dict[int, int]:
    """Rank -> pid of the rank's own Python process. Not the node wrapper's shell (or a
    subshell it forks, whose command line still names rank_main: until it execs the rank,
    the pid is not the rank's), not a child the rank starts."""
    python = os.path.realpath(sys.executable)
    found = {}
    for pid, ppid, exe, cmd, env in _marked(marker):
        if b"rank_main" in cmd and os.path.realpath(exe) == python:
            for kv in env:
                if kv.startswith(b"PMI_RANK="):
                    found.setdefault(int(kv[9:]), []).append((pid, ppid))
    pids = {}
    for rank, procs in found.items():
        mine = {pid for pid, _ in procs}
        pids[rank] = next((pid for pid, ppid in procs if ppid not in mine), procs[0][0])
    return pids


def _start(sim, tmp_path, module, inputs, timeout, **env):
    marker = f"XLADIST_TEST_MARKER={tmp_path.name}-{os.getpid()}"
    cmd = [sys.executable, "-m", "xladist", "run", str(module), "-n", "4", "--inputs",
           str(inputs), "--no-check", "--timeout", str(timeout), "--hostfile",
           str(sim.hostfile), "--mpiexec", str(sim.mpiexec)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=cli_env(
        XLADIST_PROGRESS="off", XLADIST_TEST_MARKER=marker.split("=", 1)[1], **env),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    proc.marker = marker
    return proc, marker


def _wait_for_ranks(marker, n, proc, seconds=90.0) -> dict[int, int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None:
        pids = _rank_pids(marker)
        if len(pids) == n:
            return pids
        time.sleep(0.2)
    raise AssertionError(f"the ranks did not start: {_rank_pids(marker)}")


def _kill_job(proc) -> None:
    """Everything the job started, on every simulated host: the simulated hosts' proxies
    and ranks are not in the launcher's process group, so a test that gives up must not
    leave them to the next test."""
    for _ in range(3):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        left = marked(proc.marker)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not left:
            return
        time.sleep(0.2)


def _left_after_the_job(marker, seconds=10.0) -> dict[int, int]:
    """The ranks still alive `seconds` after the launcher ended: a killed process can still
    be listed while the kernel tears it down, so allow a moment, not a leak."""
    end = time.monotonic() + seconds
    while (left := _rank_pids(marker)) and time.monotonic() < end:
        time.sleep(0.2)
    return left


def _finish(proc, seconds):
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        _kill_job(proc)
        out, err = proc.communicate()
        pytest.fail(f"the job did not end within {seconds} s:\n{err}")


@pytest.mark.timeout(600)
def test_a_killed_rank_is_named_with_its_signal_host_and_position(tmp_path, simhosts):
    """SIGKILL (what the out-of-memory killer sends) to rank 2 on nodeB while it waits in
    the all-reduce: the job ends within seconds, naming the device, host, pid, signal and
    where the rank was -- not MPICH's banner. (Ranks 0 and 3 are stopped, not finished, to
    hold the others in the all-reduce: a wait for ranks whose programs finished is a hang
    the service reports within seconds, before any kill.)"""
    sim = simhosts()
    module, inputs = _loop(tmp_path, [10 ** 8] * 4)  # all-reduces for minutes
    proc, marker = _start(sim, tmp_path, module, inputs, timeout=120)
    pids = _wait_for_ranks(marker, 4, proc)
    time.sleep(8.0)  # every rank is in the loop
    for r in (0, 3):
        os.kill(pids[r], signal.SIGSTOP)
    time.sleep(4.0)  # rank 2 waits in an all-reduce for them (and has said so)
    if proc.poll() is not None or _rank_pids(marker).get(2) != pids[2]:
        pytest.fail(f"the job ended before the kill:\n{_finish(proc, 10)[1]}")
    os.kill(pids[2], signal.SIGKILL)
    t0 = time.monotonic()
    _out, err = _finish(proc, 60)
    ended = time.monotonic() - t0
    assert proc.returncode != 0, err
    assert ended < 15, f"the job took {ended:.1f} s to end after the kill:\n{err}"
    assert (f"rank 2 (device 2, replica 0, partition 2) on nodeB, pid {pids[2]}, was killed "
            "by signal 9 (SIGKILL: often the out-of-memory killer") in err, err
    assert re.search(r"Its last position: psum \(line 17\) over devices \[0, 1, 2, 3\] "
                     r"\(iteration \d+ of data_loop\)", err), err
    assert "BAD TERMINATION" not in err and "[proxy" not in err, err
    assert _left_after_the_job(marker) == {}


@pytest.mark.timeout(600)
def test_a_stopped_rank_is_named_and_the_job_ends(tmp_path, simhosts):
    """SIGSTOP to rank 3 (nodeB): it stops heartbeating; the service names it and ends the
    job, the stopped process included."""
    sim = simhosts()
    module, inputs = _loop(tmp_path, [10 ** 8] * 4)  # all-reduces for minutes
    proc, marker = _start(sim, tmp_path, module, inputs, timeout=120,
                          XLADIST_HEARTBEAT_TIMEOUT="4")
    pids = _wait_for_ranks(marker, 4, proc)
    time.sleep(12.0)  # the job runs: every rank is in the loop (waiting: no deadline soon)
    os.kill(pids[3], signal.SIGSTOP)
    try:
        _out, err = _finish(proc, 60)
    finally:
        try:
            os.kill(pids[3], signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode != 0, err
    assert re.search(rf"rank 3 \(device 3, replica 0, partition 3\) on nodeB, pid {pids[3]}, "
                     r"stopped sending heartbeats \d+ s ago", err), err
    assert _left_after_the_job(marker) == {}


@pytest.mark.timeout(600)
def test_a_host_whose_ranks_never_start_ends_the_job_saying_so(tmp_path, simhosts):
    """nodeB cannot be reached: its ranks never start, so nodeA's ranks wait in MPI's
    start-up for them and no rank ever connects to the coordination service. Before, the
    service's deadline for ranks to connect counted only once some rank had connected: the
    launch waited, silent, until killed. Now it ends after XLADIST_REGISTER_TIMEOUT with a
    message, and nothing of the job is left on either node."""
    sim = simhosts(down=["nodeB"])
    module, inputs = _loop(tmp_path, [2, 2, 2, 2])
    proc, marker = _start(sim, tmp_path, module, inputs, timeout=60,
                          XLADIST_REGISTER_TIMEOUT="4")
    t0 = time.monotonic()
    _out, err = _finish(proc, 90)
    ended = time.monotonic() - t0
    assert proc.returncode == 1, err
    assert ended < 4 + 30, f"the job took {ended:.1f} s to end:\n{err}"
    assert "xladist: none of the 4 ranks connected to the coordination service at " in err, err
    assert "within 4 s (XLADIST_REGISTER_TIMEOUT)" in err, err
    assert gone(marker, 10) == [], "processes of the job left running"


@pytest.mark.timeout(600)
def test_a_service_name_the_ranks_hosts_cannot_resolve_is_said_by_each_rank_at_once(
        tmp_path, simhosts):
    """The launching host's name as the ranks must reach it does not resolve on their hosts
    (here: XLADIST_COORD_HOST naming no host). Before, every rank retried the lookup for
    60 s, then printed `internal error: ServiceError` and a Python traceback. Now each rank
    says, at once, what it cannot reach from which host."""
    sim = simhosts()
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"
    t0 = time.monotonic()
    proc = _run(sim, case / "module.hlo", "-n", 4, "--inputs", case / "inputs.npz",
                XLADIST_COORD_HOST="nosuchhost.invalid")
    assert proc.returncode == 1, proc.stderr
    assert time.monotonic() - t0 < 40, proc.stderr
    for r, node in ((0, "nodeA"), (2, "nodeB")):
        assert re.search(rf"xladist run: error: rank {r}: cannot reach the coordination service "
                         rf"at nosuchhost\.invalid:\d+ from {node} \(", proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr


# ---- xladist.run across hosts --------------------------------------------------------------

@pytest.mark.timeout(600)
@pytest.mark.parametrize("where", ["hosts", "hostfile"])
def test_xladist_run_across_hosts_with_callbacks(tmp_path, simhosts, where):
    """The module (a file in the launching host's /tmp), the inputs (this process's arrays)
    and the host-transfer callbacks reach ranks on nodeB; their results come back."""
    import xladist
    sim = simhosts(nodes=[("nodeA", 1), ("nodeB", 1)])
    module = tmp_path / "host_loop.hlo"
    module.write_text(HOST_LOOP)
    x = np.array([[1, 2, 3], [10, 20, 30]], np.float32)
    items = {r: [np.full(3, 100 * r + k, np.float32) for k in range(3)] for r in range(2)}
    sent: dict[int, list] = {0: [], 1: []}

    def host_recv(rank, channel):
        return items[rank][len(sent[rank])]

    def host_send(rank, channel, value):
        sent[rank].append(np.array(value))

    place = {"hosts": ["nodeA:1", "nodeB:1"]} if where == "hosts" else \
        {"hostfile": str(sim.hostfile)}
    outs = xladist.run(str(module), [x], n=2, timeout=60, host_send=host_send,
                       host_recv=host_recv, mpiexec=str(sim.mpiexec), **place)
    for r in range(2):
        partial = x[r] + np.cumsum(items[r], axis=0)
        np.testing.assert_array_equal(np.stack(sent[r]), partial)
        np.testing.assert_array_equal(outs[r][0], partial[-1])


@pytest.mark.timeout(600)
def test_xladist_run_feeds_callbacks_across_hosts(tmp_path, simhosts):
    import xladist
    sim = simhosts()
    n, steps = 4, 3
    got: dict[int, list] = {r: [] for r in range(n)}
    outs = xladist.run(loop_text(n, steps), n=n, timeout=60, mpiexec=str(sim.mpiexec),
                       hostfile=str(sim.hostfile),
                       infeed=lambda r, replica, partition: [item(r, k) for k in range(steps)],
                       outfeed=lambda r, replica, partition, it: got[r].append(it))
    for r in range(n):
        check_outfeed([(int(i), acc) for i, acc in got[r]], n, steps)
        np.testing.assert_allclose(outs[r][0], expected_accs(n, steps)[-1], rtol=1e-6)


# ---- one compile, one set of bits -------------------------------------------------------------

MIXED = """HloModule mixed, replica_count=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (x: f32[65536]) -> f32[65536] {
  %x = f32[65536]{0} parameter(0)
  %p = f32[65536]{0} all-reduce(%x), replica_groups={}, to_apply=%add
  %t = f32[65536]{0} tanh(%p)
  ROOT %e = f32[65536]{0} exponential(%t)
}
"""


def _mixed(tmp_path, run, **env):
    module = tmp_path / "mixed.hlo"
    module.write_text(MIXED)
    inputs = tmp_path / "mixed_in.npz"
    np.savez(inputs, arg0=np.random.default_rng(0).standard_normal((4, 65536))
             .astype(np.float32))
    out = tmp_path / f"mixed_out_{len(list(tmp_path.glob('mixed_out_*')))}.npz"
    proc = run(module, "-n", 4, "--inputs", inputs, "--outputs", out, **env)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as z:
        return z["out0"].view(np.uint32)


@pytest.mark.timeout(600)
def test_mixed_cpus_give_every_replica_the_same_bits(tmp_path, simhosts):
    """nodeB emulates an older CPU (x86-64-v2: no FMA, no AVX). Code compiled for the two
    CPUs differs in its last bits (shown on one host below); the job compiles once, for the
    CPU every host runs, so every replica of exp(tanh(psum(x))) holds the same bits."""
    from xladist.runtime.hostinfo import target_info
    sim = simhosts(cpus={"nodeB": "x86-64-v2"})
    bits = _mixed(tmp_path, lambda *a, **e: _run(sim, *a, **e))
    for r in range(1, 4):
        assert np.array_equal(bits[r], bits[0]), \
            f"replica {r}: {(bits[r] != bits[0]).sum()} of {bits.shape[1]} elements differ"
    one_host = lambda *a, **e: xladist_cli("run", *a, timeout=SLACK, **e)  # noqa: E731
    v2 = _mixed(tmp_path, one_host, XLADIST_TARGET_CPU="x86-64-v2")
    np.testing.assert_array_equal(bits, v2)  # what every host runs: x86-64-v2's code
    if (target_info()["level"] or 0) >= 3:   # this host's own code differs (FMA): the test
        own = _mixed(tmp_path, one_host)     # really mixes two CPUs
        assert not np.array_equal(own[0], v2[0])


@pytest.mark.timeout(600)
def test_a_cpu_the_launching_host_cannot_run_is_checked_on_the_ranks_hosts(tmp_path,
                                                                           simhosts):
    """XLADIST_TARGET_CPU names the compute nodes' CPU, which a login node need not run:
    with a hostfile the launcher checks only the name, and each rank whether its own host
    runs it. Emulated here by a launcher whose XLADIST_TARGET_CPU (bdver2: AMD's XOP) this
    host cannot run, and nodes that set their own (x86-64-v2), or inherit it. Before, the
    launch was refused on the launching host (exit 2); a rank that then refused said it
    once per rank, after a line blaming ssh."""
    import llvmlite.binding as llvm
    if llvm.get_host_cpu_features().get("xop", False):
        pytest.skip("this host runs bdver2's code")
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"
    out = tmp_path / "out.npz"
    sim = simhosts(cpus={"nodeA": "x86-64-v2", "nodeB": "x86-64-v2"})
    proc = _run(sim, case / "module.hlo", "-n", 4, "--inputs", case / "inputs.npz",
                "--outputs", out, XLADIST_TARGET_CPU="bdver2")
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as got, np.load(case / "expected.npz") as want:
        np.testing.assert_allclose(got["out0"], want["out0"], rtol=1e-6)
    # The same from Python, hosts= instead of a hostfile: before, xladist.run and every
    # call of a Cluster checked the CPU on the launching host (only a hostfile counted).
    import xladist
    with np.load(case / "inputs.npz") as z:
        x = z["arg0"]
    os.environ["XLADIST_TARGET_CPU"] = "bdver2"
    try:
        hosts = ["nodeA:2", "nodeB:2"]
        outs = xladist.run(str(case / "module.hlo"), [x], n=4, hosts=hosts,
                           mpiexec=str(sim.mpiexec), timeout=60)
        with xladist.Cluster(n=4, hosts=hosts, mpiexec=str(sim.mpiexec), timeout=60) as c:
            kept = c.run(str(case / "module.hlo"), [x])
    finally:
        del os.environ["XLADIST_TARGET_CPU"]
    with np.load(case / "expected.npz") as want:
        for d in range(4):
            np.testing.assert_allclose(outs[d][0], want["out0"][d], rtol=1e-6)
            np.testing.assert_allclose(kept[d][0], want["out0"][d], rtol=1e-6)
    sim = simhosts(cpus={"nodeA": "x86-64-v2"})  # nodeB's ranks inherit bdver2
    proc = _run(sim, case / "module.hlo", "-n", 4, "--inputs", case / "inputs.npz",
                XLADIST_TARGET_CPU="bdver2")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("xladist: rank 2 on nodeB: XLADIST_TARGET_CPU 'bdver2' names a "
                           "CPU whose code this host cannot run") and \
        line.endswith("; refused on nodeB (ranks 2, 3)"), line


@pytest.mark.timeout(600)
def test_a_xlx_made_for_the_compute_nodes_runs_from_a_launcher_that_cannot_run_it(tmp_path,
                                                                               simhosts):
    """`xladist compile` on a compute node (x86-64-v2, emulated on both nodes), then `xladist
    run step.xlx --hostfile` from a login node with another CPU (this host's own). Before,
    the launching process refused the file for its own CPU -- as it once refused
    XLADIST_TARGET_CPU -- though no rank runs there; `xladist.run` and `Cluster.run` with
    hosts= did the same. Now the launcher checks the file and its versions, and each rank
    its own host's CPU: a file for the login node's CPU is refused by the ranks, naming the
    file as given and their host."""
    import xladist
    from xladist.runtime.hostinfo import target_info
    if target_info()["cpu"] == "x86-64-v2":
        pytest.skip("this host's own CPU is x86-64-v2: nothing differs")
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"
    with np.load(case / "expected.npz") as z:
        want = z["out0"]
    with np.load(case / "inputs.npz") as z:
        x = z["arg0"]
    v2, own = tmp_path / "v2.xlx", tmp_path / "own.xlx"
    for path, env in ((v2, {"XLADIST_TARGET_CPU": "x86-64-v2"}), (own, {})):
        made = xladist_cli("compile", case / "module.hlo", "-o", path, **env)
        assert made.returncode == 0, made.stderr
    sim = simhosts(cpus={"nodeA": "x86-64-v2", "nodeB": "x86-64-v2"})
    out = tmp_path / "out.npz"
    proc = _run(sim, v2, "-n", 4, "--inputs", case / "inputs.npz", "--outputs", out)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as got:
        np.testing.assert_allclose(got["out0"], want, rtol=1e-6)
    hosts = ["nodeA:2", "nodeB:2"]
    outs = xladist.run(str(v2), [x], n=4, hosts=hosts, mpiexec=str(sim.mpiexec), timeout=60)
    with xladist.Cluster(n=4, hosts=hosts, mpiexec=str(sim.mpiexec), timeout=60) as c:
        kept = c.run(str(v2), [x])
    for d in range(4):
        np.testing.assert_allclose(outs[d][0], want[d], rtol=1e-6)
        np.testing.assert_allclose(kept[d][0], want[d], rtol=1e-6)
    proc = _run(sim, own, "-n", 4, "--inputs", case / "inputs.npz")
    assert proc.returncode == 2, proc.stderr
    assert re.search(rf"rank \d: {re.escape(str(own))} was compiled for another machine or "
                     r"xladist and is not run \(recompile it on node[AB] with `xladist "
                     r"compile`\): CPU: file '[^']+', on node[AB] 'x86-64-v2'", proc.stderr), \
        proc.stderr
    assert "/tmp/tmp" not in proc.stderr, proc.stderr  # the rank's copy is not named


# ---- the network path --------------------------------------------------------------------

@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", ["psum_basic_mesh4", "all_to_all_basic_mesh4",
                                  "mesh2d_psum_gather_mesh2x2"])
def test_collectives_over_the_network_path(tmp_path, simhosts, case):
    """No shared memory between any two ranks (MPIR_CVAR_NOLOCAL), TCP only (UCX_TLS)."""
    folder = ROOT / "tests" / "data" / "corpus" / "jax" / case
    if not folder.is_dir():
        pytest.skip(f"no corpus case {case}")
    sim = simhosts()
    out = tmp_path / "out.npz"
    proc = _run(sim, folder / "module.hlo", "-n", 4, "--inputs", folder / "inputs.npz",
                "--outputs", out, MPIR_CVAR_NOLOCAL="1", UCX_TLS="tcp,self")
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as got, np.load(folder / "expected.npz") as want:
        for k in want.files:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


@pytest.mark.timeout(600)
def test_a_bare_mpiexec_launch_is_served_by_rank_0(tmp_path, simhosts):
    """`mpiexec -n 4 xladist run ...` without the launching `xladist run`: rank 0 (nodeA,
    which sees the files) reads them and hosts the service; nodeB's ranks get the module
    and their inputs from it, and rank 0 writes the outputs."""
    sim = simhosts()
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"
    import shutil
    for name in ("module.hlo", "inputs.npz"):
        shutil.copy(case / name, tmp_path / name)
    out = tmp_path / "out.npz"
    # (from a folder every host has: a bare mpiexec starts every rank in its own folder)
    proc = subprocess.run(
        [str(sim.mpiexec), "-f", str(sim.hostfile), "-n", "4", sys.executable, "-m", "xladist",
         "run", str(tmp_path / "module.hlo"), "--inputs", str(tmp_path / "inputs.npz"),
         "--outputs", str(out), "-q"],
        cwd=ROOT, env=cli_env(XLADIST_PROGRESS="off"), capture_output=True, text=True,
        timeout=SLACK)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as got, np.load(case / "expected.npz") as want:
        np.testing.assert_allclose(got["out0"], want["out0"], rtol=1e-5)


@pytest.mark.timeout(600)
def test_a_bare_mpiexec_launch_whose_rank_0_fails_at_start_ends_on_every_host(tmp_path,
                                                                              simhosts):
    """`mpiexec -f hosts -n 4 xladist run missing.hlo`: rank 0 fails before the service is up
    (a mistyped path). Before, it exited non-zero, which MPICH's proxy on its own host takes
    as the end of the job there only: nodeB's ranks waited in MPI for rank 0 for ever, and
    mpiexec with them. Now the job ends on both hosts within seconds, saying why (exit 2)."""
    sim = simhosts()
    marker = f"{tmp_path.name}-{os.getpid()}-bare"
    proc = subprocess.Popen(
        [str(sim.mpiexec), "-f", str(sim.hostfile), "-n", "4", sys.executable, "-m", "xladist",
         "run", str(tmp_path / "missing.hlo"), "-q"],
        cwd=ROOT, env=cli_env(XLADIST_PROGRESS="off", XLADIST_TEST_MARKER=marker),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    proc.marker = f"XLADIST_TEST_MARKER={marker}"
    t0 = time.monotonic()
    out, err = _finish(proc, SLACK)
    assert proc.returncode == 2, err
    # (said once, in the launching process's words: every rank learns of the refusal)
    assert err.count(f"MODULE {tmp_path / 'missing.hlo'}: does not exist") == 1, err
    assert "BAD TERMINATION" not in err, err
    assert time.monotonic() - t0 < SLACK
    assert gone(proc.marker, 10) == [], "processes of the job left running"


@pytest.mark.timeout(600)
def test_xladist_run_in_an_mpi_job_whose_module_only_some_hosts_have(tmp_path, simhosts):
    """`mpiexec -f hosts -n 4 python -c '... xladist.run(PATH, ...)'` where PATH is on
    nodeA's /tmp only: nodeB's ranks raise at once (the file does not exist there). Before,
    they did so before MPI started, and nodeA's ranks waited in MPI_Init, which has no
    deadline, for ever. Now MPI starts first and nodeA's ranks give up after `timeout`."""
    sim = simhosts()
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"
    module = tmp_path / "module.hlo"
    module.write_text((case / "module.hlo").read_text())
    script = (f"import numpy as np, xladist\nx = np.load({str(case / 'inputs.npz')!r})['arg0']\n"
              f"xladist.run({str(module)!r}, [x], n=4, timeout=10)\n")
    marker = f"{tmp_path.name}-{os.getpid()}-api"
    proc = subprocess.Popen(
        [str(sim.mpiexec), "-f", str(sim.hostfile), "-n", "4", sys.executable, "-c", script],
        cwd=ROOT, env=cli_env(XLADIST_PROGRESS="off", XLADIST_TEST_MARKER=marker),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    proc.marker = f"XLADIST_TEST_MARKER={marker}"
    out, err = _finish(proc, 10 + SLACK)
    assert proc.returncode != 0, err
    assert f"module file {module}: does not exist" in err, err
    assert re.search(r"rank [01]: timed out after 10\.0 s", err), err
    assert gone(proc.marker, 10) == [], "processes of the job left running"


@pytest.mark.timeout(600)
def test_an_infeed_fn_module_only_the_launching_folder_holds_is_named_with_the_host(
        tmp_path, simhosts):
    """`--infeed-fn feedmod:feed` from a folder only the launching host has: the launcher
    imports it from there, nodeB's ranks cannot. Before, nodeB's rank said only `cannot
    import feedmod: No module named 'feedmod'` of a module the user sees next to them. Now
    it names its host, the folder it lacks and what to do."""
    sim = simhosts()
    name = f"feedmod_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(
        "from tests.feeds_fns import steps as feed\n")  # (tests/ is on the shared disk)
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(4, 3))
    proc = _run(sim, module, "-n", 4, "--infeed-fn", f"{name}:feed", "--timeout", 30,
                cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert re.search(rf"rank [23] .*cannot import {name} on nodeB, which has no "
                     rf"{re.escape(str(tmp_path))} \(the launching folder", proc.stderr), \
        proc.stderr


@pytest.mark.timeout(600)
def test_a_bare_mpiexec_launch_refused_by_a_ranks_host_says_so_once(tmp_path, simhosts):
    """`mpiexec -f hosts -n 4 xladist run ...` where nodeB's XLADIST_TARGET_CPU (bdver2) is
    one its CPU cannot run: rank 0's service refuses the job for all. Before, every rank
    printed it, under its own name: four lines `xladist run: error: rank 3: xladist: rank 2
    on nodeB: ...` (exit 1). Now the service says it once, exit 2, as `xladist run
    --hostfile` does."""
    import llvmlite.binding as llvm
    if llvm.get_host_cpu_features().get("xop", False):
        pytest.skip("this host runs bdver2's code")
    sim = simhosts(cpus={"nodeB": "bdver2"})
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"
    marker = f"{tmp_path.name}-{os.getpid()}-refused"
    proc = subprocess.Popen(
        [str(sim.mpiexec), "-f", str(sim.hostfile), "-n", "4", sys.executable, "-m", "xladist",
         "run", str(case / "module.hlo"), "--inputs", str(case / "inputs.npz"), "-q"],
        cwd=ROOT, env=cli_env(XLADIST_PROGRESS="off", XLADIST_TEST_MARKER=marker),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    proc.marker = f"XLADIST_TEST_MARKER={marker}"
    out, err = _finish(proc, SLACK)
    assert proc.returncode == 2, err
    said = [line for line in err.splitlines() if "XLADIST_TARGET_CPU 'bdver2'" in line]
    assert len(said) == 1 and said[0].startswith("xladist: rank 2 on nodeB: ") and \
        said[0].endswith("; refused on nodeB (ranks 2, 3)"), err
    assert gone(proc.marker, 10) == [], "processes of the job left running"
