"""The deadlock check against an independent reference, on generated multi-device programs.

tests/analysis/deadlock/programs.py generates programs (send/recv with agreeing,
disagreeing, partial and one-sided pairs on one, two or no channel ids; collectives with
partial groups and broadcast roots; branches and trip counts on ids, data and all-reduces of
data -- over every device or over groups of devices, each group deciding alone, with the
items inside kept within the deciding groups or crossing them; async starts and dones;
recv-first and send-first splits over called computations; pipelined loops; 2-5 devices in
replica, partition and mixed modes; some scheduled as written).
tests/analysis/deadlock/reference.py runs each device in full with the interpreter and
decides from explicit per-device event lists, sharing no code with the check but the
runtime's own readings of groups, pairs and order.

On every example, with the check's default engines and again with loops shortened by
induction from 3 iterations on (UNROLL_BELOW = 0):

* "proven" means the reference finds nothing (zero false proofs);
* a problem the check reports as certain (an error) is one the reference finds, of the same
  kind, and the reference finds no kind the check did not report at all (data-decided
  problems are warnings: the reference sees one value of the data);
* when the reference finds nothing, the check reports no error (zero false alarms: both read
  the op semantics, where every member meets every collective and channels are unbuffered).

XLADIST_SOUNDNESS_EXAMPLES raises the number of examples (default 300); the tally (pytest
-s) counts the verdicts and the examples decided by groups of devices of each kind.
"""

from __future__ import annotations

import collections
import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings

import xladist
from xladist.analysis.deadlock import check_module
from xladist.analysis.deadlock import trace as trace_mod
from xladist.analysis.schedule import ScheduleError, schedule_module
from xladist.hlo.collective_groups import DeviceAssignment

from .programs import programs
from .reference import reference_check

EXAMPLES = int(os.environ.get("XLADIST_SOUNDNESS_EXAMPLES", "300"))
TALLY: collections.Counter = collections.Counter()
DECIDED: collections.Counter = collections.Counter()   # examples per Program.decided


def inputs_of(da, ms):
    """Each device's (x, m): x does not matter to control, m may."""
    return {d: [np.zeros(2, np.float32), np.int32(ms[i])] for i, d in enumerate(da.devices)}


def compare(report, ref: set[str], text: str) -> None:
    """The assertions of the module docstring for one check of one program."""
    proven = report.ok and not report.problems
    errors = {p.kind for p in report.errors}
    seen = {p.kind for p in report.problems if p.kind != "unproven"}
    # Parts not proven (data, an assumed known_trip_count): the reference may see more there.
    truncated = any(p.kind == "unproven" for p in report.problems)
    assert not (proven and ref), f"false proof: the reference finds {sorted(ref)}\n{text}"
    assert ref or not errors, f"false alarm:\n{report.to_text()}\n{text}"
    if errors:
        assert errors <= ref, (f"the check reports {sorted(errors)}, the reference "
                               f"{sorted(ref)}\n{report.to_text()}\n{text}")
    if not truncated:
        assert ref <= seen, (f"the reference finds {sorted(ref - seen)} the check does not "
                             f"report\n{report.to_text()}\n{text}")
    TALLY[f"{report.verdict}, reference {'finds ' + '+'.join(sorted(ref)) if ref else 'ok'}"] \
        += 1


def agree(program) -> None:
    """The check, by default and with loops shortened by induction, against the reference."""
    text, R, P, ms, decided = program
    module = xladist.parse_hlo(text)
    xladist.verify(module)
    try:
        schedule_module(module)
    except ScheduleError:
        reject()   # no order exists (a chain's send needs its own recv-done): exit 2 for both
    da = DeviceAssignment.default(R, P)
    ref = reference_check(module, da, inputs_of(da, ms))
    report = check_module(module, budget=None)
    compare(report, ref, text)
    with mock.patch.object(trace_mod, "UNROLL_BELOW", 0):
        compare(check_module(module, budget=None), ref, text)
    if decided:
        DECIDED[f"{decided}: {report.verdict}, reference "
                f"{'finds ' + '+'.join(sorted(ref)) if ref else 'ok'}"] += 1
        DECIDED[decided] += 1


SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.timeout(120 + 2 * EXAMPLES)
@SETTINGS
@given(programs())
def test_the_check_agrees_with_the_reference(program):
    agree(program)


@pytest.mark.timeout(120 + 2 * EXAMPLES)
@SETTINGS
@given(programs(decided_by_groups=True))
def test_the_check_agrees_with_the_reference_where_groups_of_devices_decide(program):
    """`lax.cond(psum(x, 'row') > 0, ...)`: each group decides alone; items within the
    deciding groups complete, items crossing them may hang where the groups decide apart."""
    agree(program)


def teardown_module(module):
    """The tally of verdicts (pytest -s shows it): each example counts twice, once per
    configuration."""
    for what, count in sorted(TALLY.items()):
        print(f"{count:6d}  {what}")
    for what, count in sorted(DECIDED.items()):
        print(f"{count:6d}  examples decided by groups of devices, items {what}")


def test_the_generator_writes_items_decided_by_groups_both_within_and_crossing():
    """Both kinds of program decided by an all-reduce over groups of devices come up in a
    sample of programs(decided_by_groups=True): items kept within the deciding groups, and
    items crossing them (a hang where the groups decide apart)."""
    seen: collections.Counter = collections.Counter()

    @settings(max_examples=100, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(programs(decided_by_groups=True))
    def draw(program):
        seen[program.decided] += 1

    draw()
    # (A module with none at all is rare: the one filled branch holds only empty branches.)
    assert seen["within"] >= 20 and seen["crossing"] >= 20 and seen[""] <= 10, seen
