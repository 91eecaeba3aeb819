"""Issue 25's table: programs the check used to prove that hang (or fail) when run.

Each program (tests/data/deadlock/issue25/) says in its header what happens when it runs;
device 0 takes no part in the channel or collective at fault, which is what the symmetric
trace used to miss. Every one is now refused with the problem its header names, by the
default check and with the shortcuts off, and a loop's known_trip_count is no longer taken
over its condition (the runtime follows the condition).
"""

from __future__ import annotations

import pytest

import xladist
from xladist.analysis.deadlock import check_module
from tests.paths import TESTS

DATA = TESTS / "data" / "deadlock" / "issue25"

EXPECTED = {
    # program: the kinds of problem it has
    "disagreeing_pairs.n2": {"unmatched"},
    "disagreeing_pairs.n3": {"unmatched"},
    "disagreeing_pairs.n4": {"unmatched"},
    "disagreeing_pairs.r2p2": {"unmatched"},
    "send_nobody_receives": {"unmatched"},
    "recv_nobody_sends": {"unmatched"},
    "recv_done_first_split": {"deadlock"},
    "cycle_through_all_reduce": {"deadlock"},
    "cycle_through_broadcast": {"deadlock"},
    "ring_then_extra_send": {"unmatched"},
    "ring_then_extra_recv": {"unmatched"},
    "shape_mismatch": {"mismatch"},
    "trusted_trip_count": {"unmatched"},
}


def test_every_program_of_the_table_is_here():
    assert {p.stem for p in DATA.glob("*.hlo")} == set(EXPECTED)


@pytest.mark.parametrize("symmetry", [True, False], ids=["default", "per-device"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_refused(name, symmetry):
    module = xladist.load_hlo(DATA / f"{name}.hlo")
    xladist.verify(module)
    report = check_module(module, budget=None, symmetry=symmetry)
    assert not report.ok and report.verdict == "refused", report.to_text()
    assert {p.kind for p in report.errors} == EXPECTED[name], report.to_text()


def test_a_cycle_through_a_broadcast_names_the_rule_a_run_could_pass_by():
    """A collective-broadcast's root may leave MPI_Bcast early; the op semantics have every
    member meet. The problem says so (here the root is the device stuck in its recv-done,
    so the run really hangs: tests/analysis/deadlock/test_soundness_runs.py runs such
    programs)."""
    report = check_module(xladist.load_hlo(DATA / "cycle_through_broadcast.hlo"), budget=None)
    (p,) = report.errors
    assert "collective-broadcast" in p.relies_on and "G.24" in p.relies_on
    assert "a run under MPI may still get through" in p.to_text()
    (q,) = check_module(xladist.load_hlo(DATA / "cycle_through_all_reduce.hlo"),
                        budget=None).errors
    assert q.relies_on is None   # an all-reduce waits for every member under MPI too
