"""Loops by induction with a communicating loop inside the body (a scan inside a
fori_loop): the inner loop issues the same events every outer iteration when its own body
decides nothing and its trip count comes from values that repeat (constants, device ids,
loop-invariant state, `counter % m`). Such an outer loop is traced a few times, not
n times; the verdict must be full unrolling's (engine="unroll", the reference)."""

from __future__ import annotations

import time
from unittest import mock

import pytest

import xladist
from xladist.analysis.deadlock import check_module
from xladist.analysis.deadlock import trace as trace_mod

# The inner loop's bound, computed in the outer body from %bi (the outer counter), %bk (an
# outer state element the body keeps) and the replica id.
BOUNDS = {
    "const": "%ib = s32[] constant(2)",
    "invariant": "%ib = s32[] add(%bk, %one)",
    "replica": "%rid = u32[] replica-id()\n  %rc = s32[] convert(%rid)\n"
               "  %ib = s32[] add(%rc, %one)",
    "parity": "%two = s32[] constant(2)\n  %rm = s32[] remainder(%bi, %two)\n"
              "  %ib = s32[] add(%rm, %one)",
    "counter": "%ib = s32[] add(%bi, %one)",   # triangular: grows, so it is unrolled
}


def nested(n: int, bound: str, replicas: int = 2) -> str:
    return f"""HloModule nested, replica_count={replicas}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%icond (cs: (s32[], f32[2], s32[])) -> pred[] {{
  %cs = (s32[], f32[2], s32[]) parameter(0)
  %ci = s32[] get-tuple-element(%cs), index=0
  %cb = s32[] get-tuple-element(%cs), index=2
  ROOT %lt = pred[] compare(%ci, %cb), direction=LT
}}

%ibody (bs: (s32[], f32[2], s32[])) -> (s32[], f32[2], s32[]) {{
  %bs = (s32[], f32[2], s32[]) parameter(0)
  %bi = s32[] get-tuple-element(%bs), index=0
  %bx = f32[2] get-tuple-element(%bs), index=1
  %bb = s32[] get-tuple-element(%bs), index=2
  %one = s32[] constant(1)
  %ni = s32[] add(%bi, %one)
  %ar = f32[2] all-reduce(%bx), replica_groups={{}}, to_apply=%add
  ROOT %bt = (s32[], f32[2], s32[]) tuple(%ni, %ar, %bb)
}}

%ocond (cs: (s32[], f32[2], s32[])) -> pred[] {{
  %cs = (s32[], f32[2], s32[]) parameter(0)
  %ci = s32[] get-tuple-element(%cs), index=0
  %cb = s32[] constant({n})
  ROOT %lt = pred[] compare(%ci, %cb), direction=LT
}}

%obody (bs: (s32[], f32[2], s32[])) -> (s32[], f32[2], s32[]) {{
  %bs = (s32[], f32[2], s32[]) parameter(0)
  %bi = s32[] get-tuple-element(%bs), index=0
  %bx = f32[2] get-tuple-element(%bs), index=1
  %bk = s32[] get-tuple-element(%bs), index=2
  %one = s32[] constant(1)
  %ni = s32[] add(%bi, %one)
  %zero = s32[] constant(0)
  {BOUNDS[bound]}
  %t = (s32[], f32[2], s32[]) tuple(%zero, %bx, %ib)
  %w = (s32[], f32[2], s32[]) while(%t), condition=%icond, body=%ibody
  %wx = f32[2] get-tuple-element(%w), index=1
  ROOT %bt = (s32[], f32[2], s32[]) tuple(%ni, %wx, %bk)
}}

ENTRY %main (x: f32[2]) -> f32[2] {{
  %x = f32[2] parameter(0)
  %zero = s32[] constant(0)
  %k = s32[] constant(1)
  %t = (s32[], f32[2], s32[]) tuple(%zero, %x, %k)
  %w = (s32[], f32[2], s32[]) while(%t), condition=%ocond, body=%obody
  ROOT %o = f32[2] get-tuple-element(%w), index=1
}}
"""


def _verdict(report):
    return report.ok, sorted((p.kind, p.severity) for p in report.problems)


@pytest.mark.parametrize("bound", sorted(BOUNDS))
@pytest.mark.parametrize("n", [0, 1, 2, 4, 7, 10])
def test_nested_loops_by_induction_give_the_verdict_of_full_unrolling(bound, n):
    module = xladist.parse_hlo(nested(n, bound))
    xladist.verify(module)
    with mock.patch.object(trace_mod, "UNROLL_BELOW", 0):
        for symmetry in (True, False):
            fast = check_module(module, budget=None, symmetry=symmetry)
            slow = check_module(module, budget=None, engine="unroll")
            assert _verdict(fast) == _verdict(slow), (bound, n, fast.to_text(),
                                                      slow.to_text())


@pytest.mark.parametrize("bound, proven", [("const", True), ("invariant", True),
                                           ("parity", True), ("replica", False)])
def test_a_million_outer_iterations_are_checked_at_once(bound, proven):
    """Before: every outer iteration was traced; 10^5 of them ran out of the 10 s budget
    ("cannot prove within the budget"). Replica 1 runs the inner all-reduce twice per outer
    iteration and replica 0 once: refused."""
    module = xladist.parse_hlo(nested(1_000_000, bound))
    t = time.process_time()
    report = check_module(module, 2)
    assert time.process_time() - t < 2.0, report.to_text()
    assert (report.verdict == "proven") == proven, report.to_text()
    if not proven:
        assert not report.ok and not any(p.budget for p in report.problems), report.to_text()
