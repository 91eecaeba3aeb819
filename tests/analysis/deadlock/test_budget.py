"""The check's time budget holds in every phase, not only while tracing.

Tracing a device looks at the clock per loop iteration; matching the devices' collectives
and channels and the joint simulation look at it every few thousand steps (check.py
_CLOCK_EVERY). Here tracing is made to end just past the deadline (its own clock checks
switched off), so the first phase that can notice is the one under test; the step count
between clock checks is set to 1 so a tiny module suffices.
"""

from __future__ import annotations

import time

import pytest

import xladist
from xladist.analysis.deadlock import budget as budget_mod
from xladist.analysis.deadlock import check as check_mod
from xladist.analysis.deadlock import check_module
from xladist.analysis.deadlock.report import Problem

PAIRS = "_xla_send_recv_source_target_pairs"
RING = "{{0,1},{1,2},{2,3},{3,0}}"
MODULE = f"""HloModule budget, replica_count=4

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %main (p: f32[4]) -> f32[4] {{
  %p = f32[4]{{0}} parameter(0)
  %ar = f32[4]{{0}} all-reduce(%p), replica_groups={{}}, to_apply=%add
  %t = token[] after-all()
  %r = (f32[4]{{0}}, u32[], token[]) recv(%t), channel_id=1, frontend_attributes={{{PAIRS}="{RING}"}}
  %s = (f32[4]{{0}}, u32[], token[]) send(%ar, %t), channel_id=1, frontend_attributes={{{PAIRS}="{RING}"}}
  %rd = (f32[4]{{0}}, token[]) recv-done(%r), channel_id=1
  %sd = token[] send-done(%s), channel_id=1
  ROOT %out = f32[4]{{0}} get-tuple-element(%rd), index=0
}}
"""
BUDGET = 0.05


@pytest.fixture
def slow_last_trace(monkeypatch):
    """Tracing ignores the deadline and the last device's trace ends past it."""
    real = check_mod.trace_device
    count = {"n": 0}

    def traced(facts, schedule, d, **kw):
        kw["deadline"] = None
        tr = real(facts, schedule, d, **kw)
        count["n"] += 1
        if count["n"] % len(facts.da.devices) == 0:
            time.sleep(BUDGET * 2)
        return tr
    monkeypatch.setattr(check_mod, "trace_device", traced)
    monkeypatch.setattr(budget_mod, "CLOCK_EVERY", 1)
    return monkeypatch


def _check(**kw):
    return check_module(xladist.parse_hlo(MODULE), budget=BUDGET, symmetry=False, **kw)


def test_the_module_is_proven_without_the_budget():
    report = check_module(xladist.parse_hlo(MODULE), budget=None, symmetry=False)
    assert report.ok and not report.problems, report.to_text()


def test_matching_collectives_stops_on_the_budget(slow_last_trace):
    report = _check()
    (p,) = report.problems
    assert p.kind == "unproven" and p.severity == "warning"
    assert "cannot prove within the budget of 0.05 s: the check was matching collectives: " \
           "collective #1 of device group {0,1,2,3}" in p.message, p.message
    head = report.to_text().splitlines()[0]
    assert "budget ran out" in head and "depends on data" not in head, head
    assert not _check(strict=True).ok


def test_matching_channels_stops_on_the_budget(slow_last_trace):
    slow_last_trace.setattr(check_mod, "match_collectives", lambda t, p, d=None: None)
    (p,) = _check().problems
    assert "the check was matching channel 1 from device " in p.message, p.message


def test_simulation_stops_on_the_budget(slow_last_trace):
    slow_last_trace.setattr(check_mod, "match_collectives", lambda t, p, d=None: None)
    slow_last_trace.setattr(check_mod, "match_channels", lambda t, p, d=None: None)
    slow_last_trace.setattr(budget_mod, "CLOCK_EVERY", 16)   # the simulation checks every 1/16
    (p,) = _check().problems
    assert "the check was simulating all devices together (device 0 at event 1 of" \
           in p.message, p.message


def test_the_header_names_why_parts_are_unproven():
    module = xladist.parse_hlo(MODULE)
    report = check_module(module, budget=None, symmetry=False)
    data = Problem("unproven", "cannot prove device 0 past ...", [0], [], severity="warning")
    budget = Problem("unproven", "cannot prove within the budget ...", [], [],
                     severity="warning", budget=True)
    for problems, why in (([data], "(control depends on data)"),
                          ([budget], "(the check's time budget ran out)"),
                          ([data, budget], "(control depends on data; the check's time budget "
                                           "ran out)")):
        report.problems = problems
        assert report.to_text().splitlines()[0].endswith(why), report.to_text()
