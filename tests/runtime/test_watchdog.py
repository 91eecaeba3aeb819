"""The run-time watchdog: a hang that the check was told to skip ends with a job-wide report.

The data-dependent case of docs/reference/collective-semantics.md G.24 -- a while loop whose trip count comes
from per-rank data, around an all-reduce -- runs with --no-check and a small --timeout: the job
must exit non-zero soon after the deadline, printing where every rank is and naming the ranks
that never arrived.  Unit tests cover the report text, the daemon's publishing and the loop
iteration context.
"""

from __future__ import annotations

import re
from pathlib import Path
import threading
import time

import numpy as np
import pytest

import xladist
from xladist.collectives import deadline
from xladist.runtime import watchdog
from xladist.runtime.api import run
from tests.cli.test_channels_cli import DATA, write_inputs, xladist_cli
from xladist.errors import ExecutionError
from xladist.semantics.single_device import SingleDeviceContext

TIMEOUT = 3.0
# Job start-up (mpiexec, imports) on a loaded 2-core machine, on top of the deadline.
SLACK = 60.0


def _waited(stderr: str) -> float:
    m = re.search(r"waited (\d+\.\d) s \(the deadline, --timeout", stderr)
    assert m, f"no watchdog report in:\n{stderr}"
    return float(m.group(1))


def _data_loop(tmp_path, steps):
    n = len(steps)
    x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
    return write_inputs(tmp_path / "in.npz", DATA / "data_dependent_loop.hlo", n,
                        {0: x, 1: np.array(steps, np.int32)})


@pytest.mark.timeout(300)
@pytest.mark.parametrize("steps,op", [([2, 3], "add"), ([2, 3, 3, 2], "add"),
                                      ([2, 3], "maximum"), ([2, 3], "permute"),
                                      ([2, 3, 3, 2], "gather"), ([2, 3], "dot"),
                                      ([2, 3], "scatter"), ([2, 3, 3, 2], "a2a")],
                         ids=["n2", "n4", "n2-max", "n2-permute", "n4-gather", "n2-dot",
                              "n2-reduce-scatter", "n4-all-to-all"])
@pytest.mark.slow
def test_data_dependent_trip_count_ends_with_a_report(tmp_path, steps, op):
    # The loop runs natively (native/loop.py; with maximum, through a native MPI user op;
    # permute: MPI_Sendrecv; gather: MPI_Allgather; dot: a BLAS call after the all-reduce,
    # compiler/native/blas.py; reduce-scatter: MPI_Reduce_scatter_block; all-to-all:
    # MPI_Alltoall, compiler/native/exchange.py): the report still names the rank, the
    # collective and the iteration.
    n = len(steps)
    text = (DATA / "data_dependent_loop.hlo").read_text().replace(
        "num_partitions=2", f"num_partitions={n}")
    psum = "%psum = f32[4]{0} all-reduce(%v), channel_id=1, replica_groups={}, to_apply=%add"
    assert psum in text
    if op == "permute":  # a ring; the result keeps the name psum (and line 17)
        pairs = ",".join(f"{{{r},{(r + 1) % n}}}" for r in range(n))
        text = text.replace(psum, "%psum = f32[4]{0} collective-permute(%v), channel_id=1, "
                                  f"source_target_pairs={{{pairs}}}")
    elif op == "gather":  # gathered, then the own block sliced back out (same shape)
        text = text.replace(psum, f"%psum = f32[{4 * n}]{{0}} all-gather(%v), channel_id=1, "
                                  "replica_groups={}, dimensions={0}").replace(
            "tuple(%i.1, %n, %psum)", "tuple(%i.1, %n, %own)").replace(
            "%one = s32[] constant(1)",  # after line 17, which the report names
            "%one = s32[] constant(1)\n  %own = f32[4]{0} slice(%psum), slice={[0:4]}")
    elif op == "dot":  # psum as a 2 x 2 matrix times itself, after line 17
        text = text.replace("tuple(%i.1, %n, %psum)", "tuple(%i.1, %n, %dv)").replace(
            "%one = s32[] constant(1)",
            "%one = s32[] constant(1)\n  %m = f32[2,2]{1,0} reshape(%psum)\n"
            "  %d = f32[2,2]{1,0} dot(%m, %m), lhs_contracting_dims={1}, "
            "rhs_contracting_dims={0}\n  %dv = f32[4]{0} reshape(%d)")
    elif op == "scatter":  # each rank's half, then twice over (same shape; n = 2)
        text = text.replace(psum, "%psum = f32[2]{0} reduce-scatter(%v), channel_id=1, "
                                  "replica_groups={}, dimensions={0}, to_apply=%add").replace(
            "tuple(%i.1, %n, %psum)", "tuple(%i.1, %n, %own)").replace(
            "%one = s32[] constant(1)",
            "%one = s32[] constant(1)\n  %own = f32[4]{0} concatenate(%psum, %psum), "
            "dimensions={0}")
    elif op == "a2a":
        text = text.replace(psum, "%psum = f32[4]{0} all-to-all(%v), channel_id=1, "
                                  "replica_groups={}, dimensions={0}")
    else:
        text = text.replace("ROOT %sum = f32[] add(%a, %b)", f"ROOT %sum = f32[] {op}(%a, %b)")
    module = tmp_path / "loop.hlo"
    module.write_text(text)
    inputs = _data_loop(tmp_path, steps)
    t0 = time.monotonic()
    proc = xladist_cli("run", module, "-n", n, "--inputs", inputs, "-q", "--no-check",
                       "--timeout", TIMEOUT, timeout=TIMEOUT + SLACK)
    elapsed = time.monotonic() - t0
    err = proc.stderr
    assert proc.returncode != 0, err
    assert elapsed < TIMEOUT + SLACK
    # The deadline fired at the deadline, not later.
    assert TIMEOUT <= _waited(err) < TIMEOUT + 2.0, err
    long = [r for r in range(n) if steps[r] == 3]
    short = [r for r in range(n) if steps[r] == 2]
    for r in long:
        assert re.search(rf"rank {r} \(replica 0, partition {r}\): psum \(line 17\) over "
                         rf"devices \[{', '.join(map(str, range(n)))}\] \(iteration 3 of "
                         r"data_loop\), waiting \d+\.\d s", err), err
    for r in short:
        # Their outputs went to the launching process: nothing waits for the others.
        assert f"rank {r} (replica 0, partition {r}): finished its program" in err, err
    who = ("rank " if len(long) == 1 else "ranks ") + ", ".join(map(str, long))
    absent = ("rank " if len(short) == 1 else "ranks ") + ", ".join(map(str, short))
    assert (f"psum (line 17) over devices [{', '.join(map(str, range(n)))}] (iteration 3 of "
            f"data_loop): {who} wait{'s' if len(long) == 1 else ''} there; {absent} never "
            "arrived") in err, err
    assert err.count("Where every rank is:") == 1  # one report, not one per rank


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_data_dependent_channel_loop_ends_with_a_report(tmp_path):
    # Send/recv on a ring inside the loop (all on line 17), run natively by
    # compiler/native/channels.py (MPI_Irecv / MPI_Issend, MPI_Wait): rank 1's third recv-done
    # never completes, and the report names the rank, the done, the peer and the iteration.
    text = (DATA / "data_dependent_loop.hlo").read_text()
    psum = "%psum = f32[4]{0} all-reduce(%v), channel_id=1, replica_groups={}, to_apply=%add"
    attr = 'frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,0}}"}'
    text = text.replace(psum, (
        "%tok = token[] after-all() "
        f"%r = (f32[4]{{0}}, u32[], token[]) recv(%tok), channel_id=1, {attr} "
        f"%sn = (f32[4]{{0}}, u32[], token[]) send(%v, %tok), channel_id=1, {attr} "
        "%rd = (f32[4]{0}, token[]) recv-done(%r), channel_id=1 "
        "%sd = token[] send-done(%sn), channel_id=1 "
        "%psum = f32[4]{0} get-tuple-element(%rd), index=0"))
    module = tmp_path / "loop.hlo"
    module.write_text(text)
    inputs = _data_loop(tmp_path, [2, 3])
    proc = xladist_cli("run", module, "-n", 2, "--inputs", inputs, "-q", "--no-check",
                       "--timeout", TIMEOUT, timeout=TIMEOUT + SLACK)
    err = proc.stderr
    assert proc.returncode != 0, err
    assert TIMEOUT <= _waited(err) < TIMEOUT + 2.0, err
    assert re.search(r"rank 1 \(replica 0, partition 1\): rd \(line 17\) on channel 1 from "
                     r"device 0 \(iteration 3 of data_loop\), waiting \d+\.\d s", err), err


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_timed_out_job_still_writes_its_trace(tmp_path):
    # The trace is what a user opens to see who held the others back: a deadline abort must
    # not lose it.  Both ranks wait when the deadline passes, so both timelines are saved.
    import json
    module = DATA / "data_dependent_loop.hlo"
    inputs = _data_loop(tmp_path, [2, 3])
    trace = tmp_path / "trace.json"
    proc = xladist_cli("run", module, "-n", 2, "--inputs", inputs, "-q", "--no-check",
                       "--timeout", TIMEOUT, "--trace", trace, timeout=TIMEOUT + SLACK)
    assert proc.returncode != 0, proc.stderr
    assert "Where every rank is:" in proc.stderr
    assert f"wrote the failed run's partial trace to {trace}" in proc.stderr
    doc = json.loads(trace.read_text())
    assert "partial" in doc["otherData"]["note"]
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert {e["pid"] for e in slices} == {0, 1}
    # Rank 1 finished two iterations' all-reduces before the hang; rank 0 both of its own.
    for rank in (0, 1):
        assert sum(1 for e in slices if e["pid"] == rank and e.get("cat") == "collective") >= 2
    assert list(tmp_path.glob("trace.json.rank*.part")) == []


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_python_api_raises_with_the_report(tmp_path):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    t0 = time.monotonic()
    with pytest.raises(ExecutionError) as info:
        run(DATA / "data_dependent_loop.hlo", [x, np.array([1, 2], np.int32)], n=2,
            check=False, timeout=TIMEOUT, job_timeout=TIMEOUT + SLACK)
    assert time.monotonic() - t0 < TIMEOUT + SLACK
    text = str(info.value)
    assert "(iteration 2 of data_loop): rank 1 waits there; rank 0 never arrived" in text
    # The setting the caller gave (before: `--timeout 3`, an option it never saw).
    assert f"(the deadline, timeout={TIMEOUT:g}) in psum" in text, text


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_hang_after_a_proof_ends_with_a_checker_defect_line(tmp_path, monkeypatch):
    """Issue 25 item 4: when the deadlock check had proven a program that then hangs, the
    report's last line says the check was wrong and where the module was saved. A real hang
    (the data-dependent loop), with the check's verdict made "proven" (the check itself is
    not what is tested here: xladist/runtime/precheck.py `proven`)."""
    import tempfile

    from xladist.runtime import precheck
    monkeypatch.setattr(precheck, "proven", lambda report: True)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with pytest.raises(ExecutionError) as info:
        run(DATA / "data_dependent_loop.hlo", [x, np.array([1, 2], np.int32)], n=2,
            timeout=TIMEOUT, job_timeout=TIMEOUT + SLACK)
    text = str(info.value)
    assert "(iteration 2 of data_loop): rank 1 waits there; rank 0 never arrived" in text
    line = text.strip().splitlines()[-1]
    assert line.startswith("xladist: the deadlock check had proven this program "
                           "deadlock-free, so this hang is a defect of the checker: the "
                           "module is saved as "), text
    saved = Path(line.split("saved as ")[1].split(";")[0])
    assert saved.parent == tmp_path
    assert "HloModule data_dependent_loop" in saved.read_text()
    # Without the proof, no such line.
    monkeypatch.setattr(precheck, "proven", lambda report: False)
    with pytest.raises(ExecutionError) as info:
        run(DATA / "data_dependent_loop.hlo", [x, np.array([1, 2], np.int32)], n=2,
            timeout=TIMEOUT, job_timeout=TIMEOUT + SLACK)
    assert "defect of the checker" not in str(info.value)


def test_check_refuses_it_unless_told_not_to():
    # The same program through xladist.run: the check warns (cannot prove) but does not refuse;
    # strict=True refuses before any rank starts.
    from xladist.errors import DeadlockError
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(DeadlockError, match="unproven"):
        run(DATA / "data_dependent_loop.hlo", [x, np.array([1, 2], np.int32)], n=2,
            strict=True)


# ---- the report text -----------------------------------------------------------------------------

def _rec(rank, state, **kw):
    rec = {"rank": rank, "device": rank, "replica": 0, "partition": rank, "state": state,
           "finished": False, "loops": [], "updated": time.time(), "world_size": 4}
    rec.update(kw)
    return rec


def test_report_names_every_rank_and_who_never_arrived():
    now = time.time()
    positions = {
        0: _rec(0, "waiting", what="all-reduce.7 (line 9) over devices [0, 1, 2, 3]",
                where="group [0, 1, 2, 3]", members=[0, 1, 2, 3], p2p=False,
                since=now - 12.0, loops=[["while.2", 5]]),
        1: _rec(1, "waiting", what="all-reduce.7 (line 9) over devices [0, 1, 2, 3]",
                where="group [0, 1, 2, 3]", members=[0, 1, 2, 3], p2p=False,
                since=now - 11.5, loops=[["while.2", 5]]),
        2: _rec(2, "computing", updated=now - 10.0),
        # rank 3 never published anything
    }
    text = watchdog.format_report(positions, 0, 12.0)
    assert text.startswith("xladist: rank 0 (replica 0, partition 0) waited 12.0 s")
    assert ("rank 0 (replica 0, partition 0): all-reduce.7 (line 9) over devices "
            "[0, 1, 2, 3] (iteration 5 of while.2), waiting 12.0 s") in text
    assert "waiting 11.5 s" in text
    assert "rank 2 (replica 0, partition 2): computing, not waiting for another rank " \
           "(last heard 10.0 s ago)" in text
    assert "rank 3: no news" in text
    assert ("all-reduce.7 (line 9) over devices [0, 1, 2, 3] (iteration 5 of while.2): "
            "ranks 0, 1 wait there; ranks 2, 3 never arrived") in text


def test_report_channel_wait_and_finished_rank():
    now = time.time()
    positions = {
        0: _rec(0, "waiting", what="send-done.lonely (line 10)", where="channel 3 to device 1",
                members=[0, 1], p2p=True, since=now - 3.0, world_size=2),
        1: _rec(1, "finished", finished=True, world_size=2),
    }
    text = watchdog.format_report(positions, 0, 3.0)
    assert "rank 0 (replica 0, partition 0): send-done.lonely (line 10) on channel 3 to " \
           "device 1, waiting 3.0 s" in text
    assert "rank 1 (replica 0, partition 1): finished its program" in text
    assert "rank 0 waits for rank 1, which never arrived at the other end" in text
    assert "rank 2" not in text and "rank 3" not in text  # only the ranks of the job



def test_report_names_the_error_of_a_rank_whose_run_raised():
    """A rank whose run raised to a caller that went on (a script under mpiexec): its
    record says so, with the instruction and message, not "computing"."""
    from types import SimpleNamespace
    now = time.time()
    error = ExecutionError("infeed exhausted on rank 1 at i (item 0)", rank=1, replica=0,
                           partition=1, instruction="i (line 11)")
    failed = watchdog.record(SimpleNamespace(rank=1, device=1, replica=0, partition=1),
                             {"state": "failed", "error": watchdog.failure(error)})
    positions = {0: _rec(0, "waiting", what="r (line 13)", where="group [0, 1]",
                         members=[0, 1], p2p=False, since=now - 3.0, world_size=2),
                 1: failed}
    text = watchdog.format_report(positions, 0, 3.0)
    assert ("rank 1 (replica 0, partition 1): failed: i (line 11): infeed exhausted on rank 1 "
            "at i (item 0); its caller went on") in text, text
    assert "r (line 13) over group [0, 1]: rank 0 waits there; rank 1 never arrived" in text
    assert "computing" not in text


def test_a_rank_whose_program_has_not_begun_is_reported_starting_with_its_step():
    """`xladist run -n 4 --timeout 0.001`: the ranks between two waits of their start-up
    (reading the module, making communicators, compiling) were listed as `computing, not
    waiting for another rank`, their program not begun. A rank's start-up step
    (Client.starting) is now in its record -- its answer to the service's `where` and
    anything it publishes -- until its program begins (mark)."""
    from xladist.runtime.service.client import Client
    client = Client("127.0.0.1:1", "", 2, 4)  # never started: no connection is made

    def said(rec):  # as the service keeps it: with the rank's own fields (RankState.who)
        return watchdog.describe_position(dict(rec, rank=2), 2, time.time())
    assert "computing" in said(client._where())
    client.starting("compiling the module (cpu backend)")
    for rec in (client._where(), client._record(deadline.watchdog.position(None))):
        assert said(rec) == \
            "rank 2: starting: compiling the module (cpu backend) (its program has not begun)"
    text = watchdog.format_report({2: dict(client._where(), rank=2)}, 2, 0.001, world_size=4)
    assert "computing" not in text, text
    client.mark("computing", tell=False)  # its program began
    assert said(client._where()) == "rank 2: computing, not waiting for another rank"


def test_a_cluster_rank_loading_a_module_is_reported_starting_not_computing(monkeypatch):
    """A cluster's rank given a load order was 'computing' (the service marks it so when it
    sends the order, and the rank's own answer said so) while it placed its device, made
    its communicators and compiled. Now its answer names the load, until the load ends
    (also when it fails)."""
    from types import SimpleNamespace

    from xladist.runtime import cluster_rank
    from xladist.runtime.service.client import Client
    client = Client("127.0.0.1:1", "", 1, 2)  # never started: sends nothing

    def said():
        return watchdog.describe_position(dict(client._where(), rank=1), 1, time.time())
    seen = []

    def load(client_, comm):
        seen.append(said())
        if len(seen) == 2:
            raise RuntimeError("the load failed")
        return object()
    monkeypatch.setattr(cluster_rank, "_load", load)
    comm = SimpleNamespace(Get_rank=lambda: 1)
    for handle in (1, 2):
        cluster_rank._obey(client, comm, {"call": handle, "handle": handle, "load": True},
                           None, {})
        assert said() == "rank 1: computing, not waiting for another rank"  # load over
    assert seen == ["rank 1: starting: loading the module (placing its device, making its "
                    "communicators, compiling) (its program has not begun)"] * 2


# ---- the daemon publishes long waits and their end, off the hot path --------------------------

class _Monitor:
    def __init__(self):
        self.positions = []
        self.event = threading.Event()

    def publish(self, pos):
        self.positions.append(dict(pos))
        self.event.set()

    def fire(self, pos, timeout):  # pragma: no cover - the deadline is long here
        raise AssertionError("deadline fired")


@pytest.mark.slow
def test_daemon_publishes_a_long_wait_and_its_end():
    wd = deadline.Watchdog(timeout_s=30.0)
    mon = _Monitor()
    wd.set_monitor(mon)
    entry = wd.enter_loop("while.9")
    entry[1] = 4
    token = wd.begin("all-reduce.3 (line 5)", "group [0, 1]")
    assert mon.event.wait(deadline.PUBLISH_AFTER_S + 2.0), "the long wait was never published"
    wd.end(token)
    wd.exit_loop()
    waiting = mon.positions[0]
    assert waiting["state"] == "waiting" and waiting["what"] == "all-reduce.3 (line 5)"
    assert waiting["loops"] == [["while.9", 4]]
    assert waiting["elapsed"] >= deadline.PUBLISH_AFTER_S - 0.05
    end = time.monotonic() + deadline.REFRESH_S + 2.0
    while time.monotonic() < end and mon.positions[-1]["state"] != "computing":
        time.sleep(0.1)
    assert mon.positions[-1]["state"] == "computing"


def test_native_loop_bracket_reports_the_wait_cell_and_iteration():
    """A native while loop (compiler/native/loop.py) is one bracket: the daemon reads the
    iteration and the wait cell the loop writes, and reports a long wait in it like any other;
    the wait is timed from when the daemon first saw that cell value."""
    import ctypes

    from xladist.compiler.native import collectives as nc
    wd = deadline.Watchdog(timeout_s=30.0)
    mon = _Monitor()
    wd.set_monitor(mon)
    cells = (ctypes.c_int64 * nc.N_CELLS)()
    token = wd.begin_native("while.4", cells, {2: ("all-reduce.8 (line 3)", "group [0, 1]")})
    cells[nc.CELL_ITERATION] = 7
    cells[nc.CELL_WAIT] = 5 * nc.WAIT_STEPS + 2 + 1  # the 5th call, in step 2
    assert mon.event.wait(deadline.PUBLISH_AFTER_S + 2.0), "the long wait was never published"
    waiting = mon.positions[0]
    assert waiting["state"] == "waiting" and waiting["what"] == "all-reduce.8 (line 3)"
    assert waiting["loops"] == [["while.4", 7]]
    assert "all-reduce.8 (line 3) over group [0, 1] (iteration 7 of while.4)" in \
        wd.describe_current()
    cells[nc.CELL_WAIT] = 5 * nc.WAIT_STEPS  # the call returned: computing
    end = time.monotonic() + deadline.REFRESH_S + 2.0
    while time.monotonic() < end and mon.positions[-1]["state"] != "computing":
        time.sleep(0.1)
    assert mon.positions[-1] == {"state": "computing", "loops": [["while.4", 7]]}
    wd.end_native(token)
    assert wd.current is None and wd.loops == []


def test_short_waits_are_never_published():
    wd = deadline.Watchdog(timeout_s=30.0)
    mon = _Monitor()
    wd.set_monitor(mon)
    for _ in range(1000):
        wd.end(wd.begin("all-reduce.1", None))
    time.sleep(0.3)
    assert mon.positions == []


# ---- loop iteration context in the interpreter -----------------------------------------------

NESTED = """\
HloModule nested, num_partitions=1

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%inner_body (p: (s32[], f32[2])) -> (s32[], f32[2]) {
  %p = (s32[], f32[2]{0}) parameter(0)
  %j = s32[] get-tuple-element(%p), index=0
  %v = f32[2]{0} get-tuple-element(%p), index=1
  %r = f32[2]{0} all-reduce(%v), channel_id=1, replica_groups={}, to_apply=%add
  %one = s32[] constant(1)
  %j.1 = s32[] add(%j, %one)
  ROOT %t = (s32[], f32[2]{0}) tuple(%j.1, %r)
}

%inner_cond (q: (s32[], f32[2])) -> pred[] {
  %q = (s32[], f32[2]{0}) parameter(0)
  %jj = s32[] get-tuple-element(%q), index=0
  %two = s32[] constant(2)
  ROOT %lt = pred[] compare(%jj, %two), direction=LT
}

%quiet_body (w: (s32[], f32[2])) -> (s32[], f32[2]) {
  %w = (s32[], f32[2]{0}) parameter(0)
  %k = s32[] get-tuple-element(%w), index=0
  %u = f32[2]{0} get-tuple-element(%w), index=1
  %one.q = s32[] constant(1)
  %k.1 = s32[] add(%k, %one.q)
  ROOT %tq = (s32[], f32[2]{0}) tuple(%k.1, %u)
}

%outer_body (o: (s32[], f32[2])) -> (s32[], f32[2]) {
  %o = (s32[], f32[2]{0}) parameter(0)
  %i = s32[] get-tuple-element(%o), index=0
  %x = f32[2]{0} get-tuple-element(%o), index=1
  %zero = s32[] constant(0)
  %init = (s32[], f32[2]{0}) tuple(%zero, %x)
  %quiet = (s32[], f32[2]{0}) while(%init), condition=%inner_cond, body=%quiet_body
  %inner = (s32[], f32[2]{0}) while(%init), condition=%inner_cond, body=%inner_body
  %y = f32[2]{0} get-tuple-element(%inner), index=1
  %one.o = s32[] constant(1)
  %i.1 = s32[] add(%i, %one.o)
  ROOT %out = (s32[], f32[2]{0}) tuple(%i.1, %y)
}

%outer_cond (c: (s32[], f32[2])) -> pred[] {
  %c = (s32[], f32[2]{0}) parameter(0)
  %ii = s32[] get-tuple-element(%c), index=0
  %three = s32[] constant(3)
  ROOT %lt.o = pred[] compare(%ii, %three), direction=LT
}

ENTRY %main (x0: f32[2]) -> f32[2] {
  %x0 = f32[2]{0} parameter(0)
  %z = s32[] constant(0)
  %s0 = (s32[], f32[2]{0}) tuple(%z, %x0)
  %loop = (s32[], f32[2]{0}) while(%s0), condition=%outer_cond, body=%outer_body
  ROOT %res = f32[2]{0} get-tuple-element(%loop), index=1
}
"""


class _Contexts(SingleDeviceContext):
    def __init__(self):
        super().__init__()
        self.seen = []

    def collective(self, instr, args, reducer=None):
        self.seen.append(deadline.watchdog.loop_context())
        return super().collective(instr, args, reducer)


def test_loop_rules_record_iterations_of_communicating_loops_only():
    module = xladist.parse_hlo(NESTED)
    device = _Contexts()
    exe = xladist.compile(module, backend="interpreter", device=device,
                          rules=watchdog.loop_tracking_rules())
    out = exe(np.array([1.5, -2.0], np.float32))
    np.testing.assert_array_equal(out[0], [1.5, -2.0])  # all-reduce over one device
    assert device.seen == [f"iteration {i} of loop, iteration {j} of inner"
                           for i in (1, 2, 3) for j in (1, 2)]
    assert deadline.watchdog.loops == []  # every loop popped its entry


def test_the_progress_line_reads_a_native_loops_wait(monkeypatch):
    # Before: rank 0's progress thread unpacked the native loop's bracket as a tuple and died
    # with "TypeError: cannot unpack non-iterable _NativeWaits object" (a traceback on the
    # job's stderr) once a native loop waited 2 s: seen with a stopped peer.
    from xladist.runtime import progress
    wd = deadline.Watchdog(timeout_s=0)
    monkeypatch.setattr(deadline, "watchdog", wd)
    cells = np.zeros(2, np.int64)
    token = wd.begin_native("loop", cells, {0: ("psum (line 7)", "devices [0, 1]")})
    try:
        assert progress._long_wait() is None  # computing
        cells[1] = 1  # waiting at step 1
        assert wd.waiting_now()[0] == "psum (line 7)"
        monkeypatch.setattr(progress, "LONG_WAIT_S", 0.0)
        assert progress._long_wait().startswith("waiting 0 s in psum (line 7)")
    finally:
        wd.end_native(token)


# Every rank of a script under mpiexec calls xladist.run; rank 1's infeed runs dry before the
# all-reduce, and the script goes on after the error (as `pytest.raises` would), so rank 0
# waits there until the deadline.
FAILS_ON_RANK_1 = '''
import numpy as np
import xladist
from mpi4py import MPI

T = """HloModule dry, replica_count=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}

ENTRY e {
  t0 = token[] after-all()
  i = (f32[2], token[]) infeed(t0)
  d = f32[2] get-tuple-element(i), index=0
  ROOT r = f32[2] all-reduce(d), replica_groups={}, to_apply=add
}
"""
items = lambda rank, replica, partition: [] if rank == 1 else [np.ones(2, np.float32)]
try:
    xladist.run(T, n=2, infeed=items, timeout=%r, backend="interpreter")
except xladist.ExecutionError as e:
    print("caught on rank", MPI.COMM_WORLD.rank, flush=True)
'''


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_rank_that_raised_to_its_script_is_reported_failed_not_computing(tmp_path):
    """Under `mpiexec -n 2 python script.py`, a rank whose run raised (its caller went on)
    is named in the hang report with its error, not as "computing" (what its last news said)."""
    import subprocess
    import sys

    from xladist.runtime.launcher import find_mpiexec
    from tests.cli_util import ROOT, cli_env
    script = tmp_path / "script.py"
    script.write_text(FAILS_ON_RANK_1 % TIMEOUT)
    proc = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, str(script)], cwd=ROOT,
                          env=cli_env(), capture_output=True, text=True, timeout=SLACK * 2)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    report = proc.stderr[proc.stderr.index("Where every rank is:"):]
    assert "rank 0 (replica 0, partition 0): r (line 13) over devices [0, 1]" in report, report
    assert ("rank 1 (replica 1, partition 0): failed: i (line 11): infeed exhausted on "
            "rank 1 at i (item 0)") in report, report
    assert "computing" not in report, report


_ALL_REDUCE = """HloModule ar, replica_count=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main () -> f32[4] {
  %c = f32[4]{0} constant({1, 2, 3, 4})
  ROOT %r = f32[4]{0} all-reduce(%c), replica_groups={}, to_apply=%add
}
"""


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_deadline_passed_while_the_ranks_start_is_one_report(tmp_path):
    """--timeout far below the ranks' start: the deadline passes in a wait of the start-up
    (the job and inputs from the service, the split of the node's ranks) on several ranks
    at once. Before: a line from each of them, `rank 2: timed out ... set
    XLADIST_COLLECTIVE_TIMEOUT to change it` (naming a variable where the user gave
    --timeout); now the job's one report of where every rank is."""
    path = tmp_path / "ar.hlo"
    path.write_text(_ALL_REDUCE)
    for _ in range(3):   # (1 ms is short enough to pass in the start-up every time seen)
        proc = xladist_cli("run", path, "-n", 4, "--timeout", "0.001", timeout=120)
        if proc.returncode != 0:
            break
    assert proc.returncode == 1, proc.stdout
    assert not re.search(r"^rank \d+: timed out", proc.stderr, re.M), proc.stderr
    assert proc.stderr.startswith("xladist: rank ") and proc.stderr.count("Where every rank is:") \
        == 1 and "--timeout 0.001" in proc.stderr, proc.stderr
    # (the wait the deadline passed in, even when it ended before the service asked)
    assert " in a wait. " not in proc.stderr.splitlines()[0], proc.stderr
    assert "Traceback" not in proc.stderr
