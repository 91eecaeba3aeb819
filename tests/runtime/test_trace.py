"""`--trace`: a Chrome/Perfetto timeline with one track per rank (xladist/runtime/trace.py).

End-to-end runs of corpus cases check that the file is valid Trace Event Format JSON with
one named process per rank, and that every collective execution appears on every rank
with its bytes and device group. How many times each collective runs is counted
independently: the same module runs on one device through a counting DeviceContext.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from xladist.runtime import progress
from xladist.runtime.trace import TracedDevice, Tracer, format_summary, merge_partials
from xladist import compile as compile_module
from xladist import load_hlo, parse_hlo
from xladist.semantics.single_device import SingleDeviceContext
from tests.paths import ROOT

CORPUS = ROOT / "tests" / "data" / "corpus" / "jax"
COLLECTIVES = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "collective-permute", "collective-broadcast"}


def _xladist(*args, timeout=150):
    env = dict(os.environ, PYTHONPATH=str(ROOT), XLADIST_PROGRESS="off")
    return subprocess.run([sys.executable, "-m", "xladist", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


class _Counting(SingleDeviceContext):
    """Counts collective executions by instruction name (the independent reference).

    Collectives give zeros of their result shape: in these cases no control flow depends
    on a collective's value, so the counts are those of the real run.
    """

    def __init__(self):
        super().__init__()
        self.seen = Counter()

    def collective(self, instr, args, reducer=None):
        from xladist.semantics.values import zeros_value
        self.seen[instr.name] += 1
        return zeros_value(instr.shape)


def _single_device_counts(case: Path) -> Counter:
    module = load_hlo(case / "module.hlo")
    inputs = np.load(case / "inputs.npz")
    args = [inputs[f"arg{i}"][0] for i in range(len(module.entry.parameters))]
    ctx = _Counting()
    compile_module(module, device=ctx)(*args)
    return ctx.seen


def _operand_bytes(instr) -> int:
    return sum(int(np.prod(o.shape.dims, dtype=np.int64)) * np.dtype(o.shape.dtype).itemsize
               for o in instr.operands)


@pytest.mark.parametrize("case,n", [("while_loop_psum_mesh4", 4),
                                    ("psum_scatter_basic_mesh4", 4),
                                    ("elementwise_reduce_mesh2", 2)])
@pytest.mark.slow
def test_trace_has_a_track_per_rank_and_every_collective(tmp_path, case, n):
    d = CORPUS / case
    trace = tmp_path / "trace.json"
    # Per-instruction slices are the interpreter's (the cpu backend's per-thunk slices are
    # tested in tests/compiler/test_runtime.py).
    proc = _xladist("run", str(d / "module.hlo"), "-n", str(n), "--inputs",
                    str(d / "inputs.npz"), "--outputs", str(tmp_path / "o.npz"),
                    "--trace", str(trace), "--backend", "interpreter")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {r: f"rank {r} (replica 0, partition {r})" for r in range(n)}
    threads = {e["pid"] for e in events if e["name"] == "thread_name"}
    assert threads == set(range(n))
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in complete} == set(range(n))
    for e in complete:
        assert e["ts"] >= 0 and e["dur"] >= 0 and e["tid"] == 0, e

    module = load_hlo(d / "module.hlo")
    by_name = {i.name: i for i in module.all_instructions()}
    expected = _single_device_counts(d)
    for r in range(n):
        mine = [e for e in complete if e["pid"] == r and e["cat"] == "collective"]
        assert Counter(e["name"] for e in mine) == expected, f"rank {r}"
        for e in mine:
            instr = by_name[e["name"]]
            assert e["args"]["opcode"] == instr.opcode
            assert e["args"]["bytes"] == _operand_bytes(instr)
            assert e["args"]["group"] == list(range(n))
        # Every instruction of the entry computation ran once, inside the execute span.
        run = [e for e in complete if e["pid"] == r and e["name"] == "execute"]
        assert len(run) == 1
        start, end = run[0]["ts"], run[0]["ts"] + run[0]["dur"]
        entry = Counter(e["name"] for e in complete if e["pid"] == r
                        and e["cat"] == "instruction"
                        and e["args"]["computation"] == module.entry.name)
        assert entry == Counter(i.name for i in module.entry.instructions)
        inner = [e for e in complete if e["pid"] == r and e["cat"] != "run"]
        assert all(start - 1 <= e["ts"] and e["ts"] + e["dur"] <= end + 1 for e in inner)
    assert sum(expected.values()) > 0


FAILS_AFTER_ALL_REDUCE = """
HloModule fails_after_all_reduce, replica_count=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[4] parameter(0)
  s = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=add
  t = token[] after-all()
  f = ((f32[4]), token[]) infeed(t)
  d = (f32[4]) get-tuple-element(f), index=0
  y = f32[4] get-tuple-element(d), index=0
  ROOT r = f32[4] add(s, y)
}
"""


@pytest.mark.slow
def test_failed_run_leaves_a_partial_trace(tmp_path):
    hlo = tmp_path / "m.hlo"
    hlo.write_text(FAILS_AFTER_ALL_REDUCE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    trace = tmp_path / "trace.json"
    proc = _xladist("run", str(hlo), "-n", "2", "--inputs", str(tmp_path / "in.npz"),
                    "--trace", str(trace), "--timeout", "30")
    assert proc.returncode != 0
    assert "infeed" in proc.stderr
    doc = json.loads(trace.read_text())
    assert "partial" in doc["otherData"]["note"]
    ranks = {e["pid"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert ranks and ranks <= {0, 1}
    reduces = [e for e in doc["traceEvents"] if e.get("cat") == "collective"]
    assert {e["pid"] for e in reduces} == ranks and all(e["name"] == "s" for e in reduces)
    assert not list(tmp_path.glob("trace.json.rank*.part"))


def test_merge_partials_without_parts(tmp_path):
    assert merge_partials(str(tmp_path / "t.json")) is False
    assert not (tmp_path / "t.json").exists()


def test_service_keeps_events_whose_temporary_file_cannot_be_written(tmp_path):
    # Before: Traces.receive let the OSError of its temporary file out, in the service's
    # thread of the rank that sent the events, where an OSError means the connection
    # ended: the rank was reported "ended without a word: killed by a signal" and its
    # events were lost.
    import shutil

    from xladist.runtime.service.outputs import Traces
    traces = Traces(2, str(tmp_path / "t.json"))
    traces.receive(0, json.dumps([{"name": "a", "pid": 0}]).encode(), False)
    tmp = traces.tmp
    shutil.rmtree(tmp)
    tmp.write_text("not a folder any more")  # (as a full disk, for the next file)
    try:
        traces.receive(1, json.dumps([{"name": "b", "pid": 1}]).encode(), False)
        traces.receive(0, json.dumps([{"name": "c", "pid": 0}]).encode(), True)
        assert traces.finish(failed=False) is None
    finally:
        tmp.unlink(missing_ok=True)
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["traceEvents"] == [{"name": "c", "pid": 0}, {"name": "b", "pid": 1}]



def test_service_keeps_events_in_memory_when_no_temporary_folder_can_be_made(
        tmp_path, monkeypatch):
    # Before: Traces' tempfile.mkdtemp let its OSError out (this process's temp folder
    # removed, or full): `xladist run --trace` ended in a Python traceback before any rank
    # started, xladist.run(trace=) raised FileNotFoundError. Now the events stay in memory.
    import tempfile

    from xladist.runtime.service.outputs import Traces
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    traces = Traces(2, str(tmp_path / "t.json"))
    traces.receive(1, json.dumps([{"name": "b", "pid": 1}]).encode(), False)
    traces.receive(0, json.dumps([{"name": "a", "pid": 0}]).encode(), False)
    assert traces.finish(failed=False) is None
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["traceEvents"] == [{"name": "a", "pid": 0}, {"name": "b", "pid": 1}]


# ---- in-process: the tracer hooks on one device -----------------------------------------
LOOP = """
HloModule loop

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[8] all-reduce(x), replica_groups={}, to_apply=add
  ROOT t = (s32[], f32[8]) tuple(j, y)
}

ENTRY main {
  x = f32[8] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, x)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  v = f32[8] get-tuple-element(w), index=1
  z = f32[] constant(0)
  ROOT r = f32[] reduce(v, z), dimensions={0}, to_apply=add
}
"""


def _traced_run(record=True):
    module = parse_hlo(LOOP)
    tracer = Tracer(0, record=record)
    tracer.watch(module)
    exe = compile_module(module, backend="interpreter",
                         device=TracedDevice(SingleDeviceContext(), tracer))
    with tracer.execute():
        out = exe(np.arange(8, dtype=np.float32))
    return module, tracer, out


def test_tracer_counts_iterations_and_instructions():
    _, tracer, out = _traced_run()
    assert float(out[0]) == 28.0
    assert tracer.iterations == 5
    names = Counter(ev[0] for ev in tracer.events if ev[1] == "instruction")
    # body: 7 instructions x 5 iterations; cond: 4 x 6 evaluations; entry: 7, once each.
    # The reducer `add` runs inside call_vectorized: part of its caller's slice, untraced.
    assert names["j"] == 5 and names["lt"] == 6 and names["w"] == 1 and names["r"] == 1
    assert sum(names.values()) == 7 * 5 + 4 * 6 + 7
    assert tracer.wait_calls["collective"] == 5
    s = tracer.summary()
    assert s["iterations"] == 5 and s["wall_s"] > 0
    assert 0 <= s["compute_s"] <= s["wall_s"]
    events = tracer.trace_events()
    assert {e["ph"] for e in events} == {"M", "X"}
    json.dumps(events)


def test_counters_only_tracer_stores_no_slices_and_skips_instructions():
    _, tracer, _ = _traced_run(record=False)
    assert tracer.events == []
    assert tracer.iterations == 0  # no per-instruction hook at all: nothing counted there
    assert tracer.wait_calls["collective"] == 5 and tracer.summary()["wall_s"] > 0


def test_untraced_evaluator_has_no_tracer():
    from xladist.interpreter import Evaluator
    assert Evaluator(parse_hlo(LOOP)).tracer is None


def test_event_cap_counts_dropped_slices():
    module = parse_hlo(LOOP)
    tracer = Tracer(0, max_events=10)
    exe = compile_module(module, backend="interpreter",
                         device=TracedDevice(SingleDeviceContext(), tracer))
    exe(np.zeros(8, np.float32))
    kept = sum(ev[1] == "instruction" for ev in tracer.events)
    assert kept <= 10 and tracer.dropped == 7 * 5 + 4 * 6 + 7 - kept
    assert tracer.wait_calls["collective"] == 5  # waits are always counted
    assert any("dropped" in e["name"] for e in tracer.trace_events())


def test_event_cap_bounds_wait_slices_too():
    """Wait slices are capped as instruction slices are (each kind at max_events): a long
    loop with a collective per step kept one slice per step before, ~300 bytes each on every
    rank and in the launching process (10^6 steps: ~300 MB). The totals still count every
    wait, and the trace says how many slices it left out."""
    module = parse_hlo(LOOP)
    tracer = Tracer(0, max_events=3)
    exe = compile_module(module, backend="interpreter",
                         device=TracedDevice(SingleDeviceContext(), tracer))
    exe(np.zeros(8, np.float32))
    waits = [ev for ev in tracer.events if ev[1] == "collective"]
    instructions = [ev for ev in tracer.events if ev[1] == "instruction"]
    assert len(waits) == 3 and tracer.dropped_waits == 2
    assert len(instructions) == 3  # the waits kept take no instruction slice's place
    assert tracer.wait_calls["collective"] == 5 and tracer.summary()["calls"]["collective"] == 5
    marks = [e["name"] for e in tracer.trace_events() if e.get("ph") == "i"]
    assert "2 wait slices dropped (over 3)" in marks


def test_format_summary_splits_wall_time():
    t = Tracer(3)
    t.run_ns = 2_000_000_000
    t.wait_ns["collective"] = 500_000_000
    t.wait_ns["infeed"] = 250_000_000
    text = format_summary([t.summary()], steps=10)
    assert text.splitlines()[0] == "10 steps in 2.00 s: 200.0 ms per step"
    row = text.splitlines()[-1].split()
    assert row[:3] == ["3", "2.00", "s"]
    assert row[3:6] == ["1.25", "s", "62%"] and row[6:9] == ["0.50", "s", "25%"]


# ---- progress line -----------------------------------------------------------------------
class _FakeTracer:
    iterations = 0
    outfeed_items = 0
    trip_count = 100


def _show(how, seconds=0.35):
    tr = _FakeTracer()
    out = io.StringIO()
    p = progress.Progress(tr, how, stream=out, interval=0.02, delay=0.0)
    with p:
        for i in range(5):
            tr.iterations = i + 1
            tr.outfeed_items = i + 1
            time.sleep(seconds / 5)
    return out.getvalue()


def test_progress_tty_redraws_in_place_and_erases():
    text = _show("tty")
    assert text.startswith("\r") and "\n" not in text
    assert "step 5/100" in text and "outfeed 5" in text
    assert text.endswith("\r")  # the line is erased at the end
    assert text.rstrip("\r").rsplit("\r", 1)[-1].strip() == ""


def test_progress_log_writes_lines():
    text = _show("log")
    lines = text.splitlines()
    assert lines and "\r" not in text
    assert all(ln.startswith("xladist run: ") for ln in lines)
    assert "step 5/100" in lines[-1]


def test_progress_off_prints_nothing_and_starts_no_thread():
    before = threading.active_count()
    assert _show("off") == ""
    assert threading.active_count() == before


def test_progress_mode(monkeypatch):
    monkeypatch.setenv(progress.ENV, "log")
    assert progress.mode() == "log"
    assert progress.mode(quiet=True) == "off"
    monkeypatch.delenv(progress.ENV)
    assert progress.mode(stream=io.StringIO()) == "log"  # not a terminal


def test_progress_names_a_long_wait_of_rank_0():
    from xladist.collectives import deadline
    p = progress.Progress(_FakeTracer(), "tty", stream=io.StringIO())
    token = deadline.watchdog.begin("all-reduce.3 (line 4)", "devices [0, 1]")
    try:
        assert "waiting" not in p.status()  # a short wait is not worth a mention
        what, where, _ = deadline.watchdog.current
        deadline.watchdog.current = (what, where, time.monotonic() - 5)
        assert p.status().endswith("| waiting 5 s in all-reduce.3 (line 4)")
    finally:
        deadline.watchdog.end(token)
    assert "waiting" not in p.status()


def test_progress_shows_the_step_of_a_native_loop(monkeypatch):
    """Before: a cpu native while loop's progress line had no step: its loop entry (the
    iteration its driver writes to a cell each iteration, deadline.begin_native) could be
    unpacked but not indexed, and the line's `loops[0][1]` fell back to no step."""
    import ctypes

    from xladist.collectives import deadline
    from xladist.compiler.native.collectives import CELL_ITERATION, N_CELLS
    wd = deadline.Watchdog(timeout_s=0)  # no daemon thread
    monkeypatch.setattr(deadline, "watchdog", wd)
    p = progress.Progress(_FakeTracer(), "log", stream=io.StringIO())
    cells = (ctypes.c_int64 * N_CELLS)()
    token = wd.begin_native("while.7", cells, {})
    try:
        cells[CELL_ITERATION] = 37
        assert "| step 37/100 (" in p.status()
        cells[CELL_ITERATION] = 38  # read live, as the driver writes it
        assert "| step 38/100 (" in p.status()
        assert wd.loop_context() == "iteration 38 of while.7"
    finally:
        wd.end_native(token)
    assert "step" not in p.status()


LONG_NATIVE_LOOP = """HloModule long_native_loop, replica_count=2
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
cond {
  p = (s32[], f32[1]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(4000000)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[1]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[1] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  r = f32[1] all-reduce(x), replica_groups={}, to_apply=add
  ROOT t = (s32[], f32[1]) tuple(i2, r)
}
ENTRY main {
  x = f32[1] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[1]) tuple(z, x)
  w = (s32[], f32[1]) while(t), condition=cond, body=body
  ROOT o = f32[1] get-tuple-element(w), index=1
}
"""


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_native_loops_progress_line_counts_its_steps(tmp_path):
    """The whole way: `xladist run` of a 2-rank loop of all-reduces that the cpu backend
    runs as one native driver (4e6 iterations, seconds), with the progress line as on
    a terminal; before, it showed the time alone."""
    module = tmp_path / "loop.hlo"
    module.write_text(LONG_NATIVE_LOOP)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.ones((2, 1), np.float32))
    env = dict(os.environ, PYTHONPATH=str(ROOT), XLADIST_PROGRESS="tty")
    proc = subprocess.run([sys.executable, "-m", "xladist", "run", str(module), "-n", "2",
                           "--inputs", str(inputs), "--outputs", str(tmp_path / "o.npz")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    steps = [int(m) for m in re.findall(r"xladist run: [\d.]+ s \| step (\d+) ", proc.stderr)]
    assert steps, proc.stderr  # the line was drawn (the loop runs for seconds) with steps
    assert steps == sorted(steps) and 0 < steps[-1] <= 4000000
    with np.load(tmp_path / "o.npz") as z:  # x <- x + x on 2 devices, 4e6 times: inf
        assert np.isinf(z["out0"]).all()


@pytest.mark.slow
def test_python_api_writes_a_trace(tmp_path):
    import xladist
    d = CORPUS / "psum_basic_mesh4"
    trace = tmp_path / "api.json"
    outs = xladist.run(d / "module.hlo", d / "inputs.npz", n=4, trace=str(trace),
                       job_timeout=120)
    expected = np.load(d / "expected.npz")["out0"]
    np.testing.assert_allclose(np.stack([o[0] for o in outs]), expected, rtol=1e-5)
    events = json.loads(trace.read_text())["traceEvents"]
    reduces = [e for e in events if e.get("cat") == "collective"]
    assert sorted(e["pid"] for e in reduces) == [0, 1, 2, 3]
    assert all(e["args"]["bytes"] == 40 for e in reduces)  # f32[10] on each device


NATIVE_LOOP = """HloModule native_psum_loop, replica_count=2
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%cond (c: (s32[], f32[256])) -> pred[] {
  %c = (s32[], f32[256]{0}) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(20000)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%body (s: (s32[], f32[256])) -> (s32[], f32[256]) {
  %s = (s32[], f32[256]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[256]{0} get-tuple-element(%s), index=1
  %p = f32[256]{0} all-reduce(%x), replica_groups={}, to_apply=%add
  %h = f32[] constant(0.5)
  %hb = f32[256]{0} broadcast(%h), dimensions={}
  %y = f32[256]{0} multiply(%p, %hb)
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[256]{0}) tuple(%i1, %y)
}
ENTRY %main (x0: f32[256]) -> f32[256] {
  %x0 = f32[256]{0} parameter(0)
  %z = s32[] constant(0)
  %init = (s32[], f32[256]{0}) tuple(%z, %x0)
  %w = (s32[], f32[256]{0}) while(%init), condition=%cond, body=%body
  ROOT %r = f32[256]{0} get-tuple-element(%w), index=1
}
"""


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_stats_count_the_waits_inside_native_loops(tmp_path):
    """A compiled while loop makes its MPI calls from native code (compiler/native/loop.py),
    out of TracedDevice's sight: the driver times them itself, and --stats counts them as
    collective wait (it said 0% for every rank before)."""
    module = tmp_path / "loop.hlo"
    module.write_text(NATIVE_LOOP)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.ones((2, 256), np.float32))
    proc = _xladist("run", str(module), "-n", "2", "--inputs", str(inputs), "--outputs",
                    str(tmp_path / "out.npz"), "--stats")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stderr.splitlines()
            if line.split()[:1] in (["0"], ["1"])]
    assert len(rows) == 2, proc.stderr
    for row in rows:  # rank, wall, s, compute, s, %, collective, s, %, ...
        assert float(row[6]) > 0.0, proc.stderr
    with np.load(tmp_path / "out.npz") as z:  # x <- (x + x) / 2 keeps ones
        np.testing.assert_array_equal(z["out0"], np.ones((2, 256), np.float32))


KNOWN_TRIPS = """HloModule loop

%cond (s: (s32[], f32[2])) -> pred[] {
  %s = (s32[], f32[2]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (s: (s32[], f32[2])) -> (s32[], f32[2]) {
  %s = (s32[], f32[2]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[2] get-tuple-element(%s), index=1
  %one = s32[] constant(1)
  %j = s32[] add(%i, %one)
  %y = f32[2] add(%x, %x)
  ROOT %t = (s32[], f32[2]) tuple(%j, %y)
}

ENTRY %main (x: f32[2]) -> (s32[], f32[2]) {
  %x = f32[2] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[2]) tuple(%zero, %x)
  ROOT %w = (s32[], f32[2]) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
}
"""


# Before: watch() imported the deadlock analysis (35-75 ms) to read the loop's
# known_trip_count. Only rank 0 has a tracer when nothing is traced (its progress line), and
# it watched after setting up its device, so every rank waited that long for rank 0 at its
# first collective. The count is now worked out when the progress line first asks.
def test_watching_a_module_leaves_the_trip_count_for_later():
    code = f"""
import sys
from xladist import parse_hlo
from xladist.runtime.trace import Tracer
module = parse_hlo({KNOWN_TRIPS!r})
t = Tracer(0, record=False)
t.watch(module)
print("xladist.analysis.deadlock" in sys.modules)
print(t.trip_count)
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "5"]
