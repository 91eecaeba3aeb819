"""The test oracle itself (tests/analysis/deadlock/reference.py): collectives pair per group
by their order of issue on each device, as MPI pairs them, and take their values from what
each member actually contributed -- not from the instruction one device issues."""

from __future__ import annotations

import numpy as np

import xladist
from xladist.analysis.deadlock import check_module
from xladist.hlo.collective_groups import DeviceAssignment

from .reference import record, reference_check

# Replica 0 all-reduces %t (of m) first and %five's constant second; replica 1 the other
# way round. MPI pairs replica 0's %t with replica 1's constant: t is m0 + 5 on replica 0
# and m1 + 5 on replica 1, and the loop that all-reduces t times runs apart when m0 != m1.
# An oracle that values %t as "m reduced over the group" on each device (as if every member
# all-reduced %t there) sees m0 + m1 on both and no problem.
CLASH = """HloModule clash, replica_count=2

%addi (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %s = s32[] add(%a, %b)
}

%none (p: s32[]) -> s32[] {
  ROOT %p = s32[] parameter(0)
}

%five (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %c = s32[] constant(5)
  ROOT %r5 = s32[] all-reduce(%c), replica_groups={{0,1}}, to_apply=%addi
}

%cond (s: (s32[], s32[])) -> pred[] {
  %s = (s32[], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %t = s32[] get-tuple-element(%s), index=1
  ROOT %lt = pred[] compare(%i, %t), direction=LT
}

%body (s: (s32[], s32[])) -> (s32[], s32[]) {
  %s = (s32[], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %t = s32[] get-tuple-element(%s), index=1
  %r = s32[] all-reduce(%i), replica_groups={{0,1}}, to_apply=%addi
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  ROOT %n = (s32[], s32[]) tuple(%i1, %t)
}

ENTRY %main (x: f32[2], m: s32[]) -> (s32[], s32[], s32[]) {
  %x = f32[2] parameter(0)
  %m = s32[] parameter(1)
  %id = u32[] replica-id()
  %zero = u32[] constant(0)
  %first = pred[] compare(%id, %zero), direction=EQ
  %before = s32[] conditional(%first, %m, %m), true_computation=%none, false_computation=%five
  %t = s32[] all-reduce(%m), replica_groups={{0,1}}, to_apply=%addi
  %after = s32[] conditional(%first, %m, %m), true_computation=%five, false_computation=%none
  %z = s32[] constant(0)
  %init = (s32[], s32[]) tuple(%z, %t)
  %w = (s32[], s32[]) while(%init), condition=%cond, body=%body
  %o = s32[] get-tuple-element(%w), index=0
  ROOT %out = (s32[], s32[], s32[]) tuple(%o, %before, %after)
}
"""


def _inputs(da, ms):
    return {d: [np.zeros(2, np.float32), np.int32(m)] for d, m in zip(da.devices, ms)}


def test_collectives_pair_by_order_of_issue_and_take_what_each_member_contributed():
    """m = (0, 1): the loop runs 5 times on replica 0 and 6 times on replica 1 (a real hang:
    test_soundness_runs.py runs it); m = (1, 1): 6 times on both."""
    module = xladist.parse_hlo(CLASH)
    da = DeviceAssignment.default(2, 1)
    events = record(module, da, _inputs(da, [0, 1]))
    loops = {d: sum(e["instr"].name == "r" for e in evs) for d, evs in events.items()}
    assert loops == {0: 5, 1: 6}
    assert reference_check(module, da, _inputs(da, [0, 1])) == {"unmatched"}
    assert reference_check(module, da, _inputs(da, [1, 1])) == set()
    assert check_module(module).verdict != "proven"
