"""The deadlock check on hand-written HLO programs (tests/data/deadlock) and on the JAX corpus.

Each invalid program's header comment says what the check must report; the expectations below
were worked out by hand from the channel and ordering rules (docs/reference/collective-semantics.md 21a, G).
"""

from __future__ import annotations

import json

import pytest

import xladist
from xladist.hlo.collective_groups import DeviceAssignment
from xladist.analysis.deadlock import check_module
from tests.paths import TESTS

DATA = TESTS / "data" / "deadlock"
CORPUS = TESTS / "data" / "corpus" / "jax"


def load(name: str, n: int | None = None):
    """A program; `name.nN.hlo` when its peers depend on the device count."""
    path = DATA / f"{name}.n{n}.hlo"
    if not path.exists():
        path = DATA / f"{name}.hlo"
    module = xladist.load_hlo(path)
    xladist.verify(module)
    return module


def check(name: str, n: int | None = None, **kw):
    module = load(name, n)
    if n is not None:
        # The same program at n partitions, whatever its header says.
        kw.setdefault("device_assignment", DeviceAssignment.default(1, n))
    return check_module(module, **kw)


# ---- valid programs pass at 2 and 4 devices ---------------------------------------------------

VALID = ["ring_send_recv", "bidirectional_exchange", "pipeline_while", "pipelined_ring",
         "async_overlap"]


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", VALID)
def test_valid_program_is_proven(name, n):
    report = check(name, n)
    assert report.ok and report.problems == [], report.to_text()
    assert report.exit_code == 0
    assert report.num_devices == n
    assert "proven deadlock-free" in report.to_text()


@pytest.mark.parametrize("n", [2, 4])
def test_pipeline_unrolls_four_micro_batches(n):
    report = check("pipeline_while", n)
    # Per iteration: first stage sends only (2 events), last receives only (2), middle both (4).
    expected = {d: 4 * (2 if d in (0, n - 1) else 4) for d in range(n)}
    assert report.events == expected
    first = report.traces[1].events[0]
    assert first.kind == "recv" and first.ctx == ("iteration 1 of loop",)
    assert report.traces[1].events[-1].ctx == ("iteration 4 of loop",)


def test_async_overlap_traces_starts_and_dones_in_schedule_order():
    """all-reduce-start/-done are a start and a done; a generic async-start wrapping an
    all-reduce is a synchronous collective at the start: both backends run the wrapped
    computation there (interpreter/control.py, compiler/control.py AsyncStartThunk)."""
    report = check("async_overlap", 4)
    kinds = [(e.kind, e.instr.name) for e in report.traces[2].events]
    assert kinds == [("start", "all-reduce-start.1"), ("sync", "async-start.1"),
                     ("done", "all-reduce-done.1"), ("sync", "sum")]


# ---- invalid programs -------------------------------------------------------------------------

def test_both_devices_wait_on_recv_done_before_sending():
    report = check("recv_done_first")
    assert not report.ok and report.exit_code == 1
    (p,) = report.problems
    assert p.kind == "deadlock" and p.devices == [0, 1]
    assert [(i["device"], i["name"], i["line"]) for i in p.instructions] == [
        (0, "recv-done.a", 12), (1, "recv-done.b", 23)]
    assert p.detail == [
        "device 0 waits at recv-done.a (line 12, branch 0 of run_stage) for device 1 to issue "
        "its send on channel 1,",
        "which waits at recv-done.b (line 23, branch 1 of run_stage) for device 0 to issue its "
        "send on channel 2: none of them can proceed."]


# Before: "... for device 1 to issue its send on channel 1," -- the waiting recv's channel;
# the send it pairs with (by peers and program order) is on channel 2.
def test_a_cycle_through_one_ended_channels_names_the_sends_channel():
    report = check("one_ended_recv_first")
    (p,) = report.problems
    assert p.kind == "deadlock" and p.devices == [0, 1]
    assert p.detail == [
        "device 0 waits at recv-done (line 12) for device 1 to issue its send on channel 2,",
        "which waits at recv-done (line 12) for device 0 to issue its send on channel 2: none "
        "of them can proceed."]


@pytest.mark.parametrize("n", [3, 4])
def test_three_device_cyclic_wait(n):
    report = check("cyclic_wait_3", n)
    (p,) = report.problems
    assert p.kind == "deadlock"
    # 0 waits for 2 (channel 10), 2 for 1 (channel 12), 1 for 0 (channel 11).
    assert p.devices == [0, 2, 1]
    assert [i["name"] for i in p.instructions] == ["recv-done.0", "recv-done.2", "recv-done.1"]
    text = report.to_text()
    assert "device 0 waits at recv-done.0 (line 11" in text
    assert "which waits at recv-done.2 (line 33, branch 2 of run_stage) for device 1" in text
    if n == 4:  # device 3 runs the last branch but is no peer: it finishes
        assert report.events[3] == 0


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_in_different_orders_via_partition_conditional(n):
    report = check("collectives_out_of_order", n)
    mismatches = report.of_kind("mismatch")
    assert mismatches and all(p.field == "kind" for p in mismatches)
    p = mismatches[0]
    assert p.devices == [0, 1]
    assert [i["name"] for i in p.instructions] == ["reduce.first", "exchange.first"]
    assert "their 1st collective" in p.message
    row = next(line for line in p.detail if line.startswith("kind"))
    assert "all-reduce" in row and "all-to-all" in row and row.endswith("<-- differs")


@pytest.mark.parametrize("n", [2, 4])
def test_all_reduce_in_a_branch_only_some_devices_take(n):
    report = check("allreduce_some_branch", n)
    (p,) = report.problems
    assert p.kind == "unmatched"
    assert p.devices == list(range(n))  # device 0 reaches it, then the ones that never do
    assert [i["name"] for i in p.instructions] == ["psum.only_some"]
    missing = ", ".join(str(d) for d in range(1, n))
    assert f"is reached by device 0 but never by device{'s' if n > 2 else ''} {missing}" \
        in p.message


def test_partition_dependent_trip_count_around_all_reduce():
    report = check("partition_trip_count", 4)
    assert report.events == {0: 1, 1: 2, 2: 3, 3: 4}
    (p,) = report.problems
    assert p.kind == "unmatched"
    assert p.instructions[0]["name"] == "psum.in_loop"
    assert p.instructions[0]["context"] == ["iteration 2 of loop"]
    assert p.devices == [1, 2, 3, 0]
    assert "never by device 0" in p.message


def test_mismatched_shapes_in_one_collective():
    report = check("mismatched_shapes")
    (p,) = report.problems
    assert p.kind == "mismatch" and p.field == "shapes"
    assert [(i["device"], i["name"]) for i in p.instructions] == [(0, "psum.small"),
                                                                 (1, "psum.big")]
    row = next(line for line in p.detail if line.startswith("shapes"))
    assert row.split() == ["shapes", "[4]", "[8]", "<--", "differs"]


def test_send_without_recv():
    report = check("send_without_recv")
    (p,) = report.problems
    assert p.kind == "unmatched" and p.devices == [0, 1]
    assert p.instructions[0]["name"] == "send.lonely" and p.instructions[0]["line"] == 9
    assert "never issues a matching recv" in p.message


def test_data_dependent_loop_is_unproven_warning_or_strict_error():
    report = check("data_dependent_loop")
    (p,) = report.problems
    assert p.kind == "unproven" and p.severity == "warning"
    assert report.ok and report.exit_code == 0
    assert p.instructions[0]["name"] == "data_loop"
    assert "steps (line 32): an entry parameter" in p.message
    strict = check("data_dependent_loop", strict=True)
    assert not strict.ok and strict.exit_code == 1


def test_report_json_has_the_same_problems():
    report = check("recv_done_first")
    data = json.loads(report.to_json())
    assert data["ok"] is False and data["num_devices"] == 2
    (p,) = data["problems"]
    assert p["kind"] == "deadlock" and p["devices"] == [0, 1]
    assert [i["name"] for i in p["instructions"]] == ["recv-done.a", "recv-done.b"]


def test_recv_done_before_send_on_one_channel_in_a_scheduled_module_is_refused():
    """A given schedule is run as written (XLA does): its recv-done before its send, on both
    devices of a ring, is a cycle the check reports (not an order the scheduler refuses)."""
    text = (DATA / "ring_send_recv.n2.hlo").read_text()
    text = text.replace("HloModule ring_send_recv,", "HloModule ring_send_recv, is_scheduled=true,")
    lines = text.splitlines()
    i_send = next(i for i, s in enumerate(lines) if "%send.1 =" in s)
    i_rd = next(i for i, s in enumerate(lines) if "%recv-done.1 =" in s)
    lines[i_send], lines[i_rd] = lines[i_rd], lines[i_send]
    module = xladist.parse_hlo("\n".join(lines))
    report = check_module(module)
    (p,) = report.problems
    assert p.kind == "deadlock" and p.devices == [0, 1], report.to_text()
    assert "recv-done.1" in report.to_text() and "channel 1" in report.to_text()


# ---- the JAX corpus ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_corpus_module_is_proven(case):
    module = xladist.load_hlo(CORPUS / case / "module.hlo")
    meta = json.loads((CORPUS / case / "case.json").read_text())
    report = check_module(module, meta["num_devices"])
    assert report.ok and report.problems == [], report.to_text()
    collectives = sum(report.events.values())
    assert collectives >= meta["num_devices"]  # every device issues at least one collective


def test_corpus_while_loop_unrolls_by_known_trip_count_or_by_folding():
    path = CORPUS / "while_loop_psum_mesh4" / "module.hlo"
    report = check_module(xladist.load_hlo(path), 4)
    assert report.events == {0: 4, 1: 4, 2: 4, 3: 4}
    # Without XLA's known_trip_count the condition (a fusion comparing i < 4) is folded.
    text = path.read_text().replace('"known_trip_count":{"n":"4"}', '"x":{}')
    assert "known_trip_count" not in text
    report = check_module(xladist.parse_hlo(text), 4)
    assert report.events == {0: 4, 1: 4, 2: 4, 3: 4}
    assert [e.ctx for e in report.traces[0].events][-1] == ("iteration 4 of while.9",)


# ---- the CLI: exit codes 0 proven, 1 problem found, 2 invalid input ---------------------------

@pytest.mark.parametrize("args,code", [
    (["ring_send_recv.n4.hlo"], 0),
    (["recv_done_first.hlo"], 1),
    (["send_without_recv.hlo", "--json"], 1),
    (["data_dependent_loop.hlo"], 0),
    (["data_dependent_loop.hlo", "--strict"], 1),
    (["ring_send_recv.n4.hlo", "-n", "3"], 2),
])
def test_cli_exit_codes(args, code, capsys):
    from xladist.cli import main
    assert main(["check", str(DATA / args[0]), *args[1:]]) == code
    out = capsys.readouterr()
    if args[0] == "recv_done_first.hlo":
        assert "device 0 waits at recv-done.a (line 12" in out.out
    if "--json" in args:
        data = json.loads(out.out)
        assert data["deadlock_check"]["report"]["problems"][0]["kind"] == "unmatched"
