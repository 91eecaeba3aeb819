"""The deadlock check against the independent reference on loop-heavy programs
(tests/analysis/deadlock/loop_programs.py): channels and collectives entering loops at an
offset, periods against id offsets, nested loops with per-device trip counts, branches on
all-reduces and all-gathers, pmax carried to a condition, async collectives spanning loops,
partitions x replicas with channel_id all-reduces across partitions.

The same assertions as test_soundness.py (`compare`: no false proof, no false alarm, certain
problems are real), on two inputs per program, with the default engines and with loops
shortened by induction from 3 iterations on. XLADIST_SOUNDNESS_EXAMPLES / 5 programs
(default 60), seeds 0.. (the same every run).
"""

from __future__ import annotations

import os
from unittest import mock

import pytest

import xladist
from xladist.analysis.deadlock import check_module
from xladist.analysis.deadlock import trace as trace_mod
from xladist.analysis.schedule import ScheduleError, schedule_module
from xladist.hlo.collective_groups import DeviceAssignment

from .loop_programs import program
from .reference import reference_check
from .test_soundness import compare, inputs_of

PROGRAMS = max(60, int(os.environ.get("XLADIST_SOUNDNESS_EXAMPLES", "0")) // 5)


@pytest.mark.timeout(60 + 3 * PROGRAMS)
def test_the_check_agrees_with_the_reference_on_loop_programs():
    for seed in range(PROGRAMS):
        text, R, P, mss = program(seed)
        module = xladist.parse_hlo(text)
        xladist.verify(module)
        try:
            schedule_module(module)
        except ScheduleError:
            continue   # no order exists: exit 2 for both
        da = DeviceAssignment.default(R, P)
        reports = [check_module(module, budget=None)]
        with mock.patch.object(trace_mod, "UNROLL_BELOW", 0):
            reports.append(check_module(module, budget=None))
        for ms in mss:
            ref = reference_check(module, da, inputs_of(da, ms))
            for report in reports:
                compare(report, ref, f"seed {seed}, m = {ms}\n{text}")
