"""The deadlock check on conditionals whose index is data, but the same data on every device
that decides together: it comes from an all-reduce (every member of its group receives the
same result), e.g. `lax.cond(psum(x) > 0, ...)` or a switch on `psum(k) % 3`.

Such a branch is not "unproven": the check runs once per combination of branches (devices that
share the all-reduce group take the same one) and proves every combination. A problem seen only
in some combinations depends on the data: a warning naming the combination (an error with
strict=True). The expectations below are worked out by hand from the groups.
"""

from __future__ import annotations

import json

import pytest

import xladist
from xladist.analysis.deadlock import check_module
from tests.paths import TESTS

EXTRA = TESTS / "data" / "corpus" / "jax_extra"

HEAD = """HloModule m, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%exchange (g0: f32[4]) -> f32[4] {
  %g0 = f32[4]{0} parameter(0)
  ROOT %a2a = f32[4]{0} all-to-all(%g0), channel_id=2, replica_groups=GROUPS, dimensions={0}
}

%reduce (r0: f32[4]) -> f32[4] {
  %r0 = f32[4]{0} parameter(0)
  ROOT %ar = f32[4]{0} all-reduce(%r0), channel_id=3, replica_groups=GROUPS, use_global_device_ids=true, to_apply=%add
}

%nothing (n0: f32[4]) -> f32[4] {
  ROOT %n0 = f32[4]{0} parameter(0)
}

%addi (i: s32[], j: s32[]) -> s32[] {
  %i = s32[] parameter(0)
  %j = s32[] parameter(1)
  ROOT %s = s32[] add(%i, %j)
}
"""

ROWS = "{{0,1},{2,3}}"
ALL = "{{0,1,2,3}}"


def module(entry: str, pred_groups: str, branch_groups: str):
    text = HEAD.replace("GROUPS", branch_groups) + entry.replace("PRED_GROUPS", pred_groups)
    m = xladist.parse_hlo(text)
    xladist.verify(m)
    return m


# pred = psum(s) > 0 over PRED_GROUPS; an all-to-all in one branch, a reduce in the other.
COND = """
ENTRY %main (x: f32[4], s: f32[]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %s = f32[] parameter(1)
  %ps = f32[] all-reduce(%s), channel_id=1, replica_groups=PRED_GROUPS, use_global_device_ids=true, to_apply=%add
  %zero = f32[] constant(0)
  %pred = pred[] compare(%ps, %zero), direction=GT
  ROOT %c = f32[4]{0} conditional(%pred, %x, %x), true_computation=%exchange, false_computation=%reduce
}
"""


@pytest.mark.parametrize("pred_groups, branch_groups", [(ALL, ALL), (ROWS, ROWS), (ALL, ROWS)])
def test_uniform_predicate_is_proven(pred_groups, branch_groups):
    # Every device that shares a branch collective's group shares the predicate's group (or a
    # larger one), so each combination of branches matches.
    report = check_module(module(COND, pred_groups, branch_groups), 4)
    assert report.problems == [], report.to_text()
    assert report.ok
    assert report.events == {d: 2 for d in range(4)}  # the psum and one branch collective


def test_rows_choosing_apart_cannot_share_a_group():
    # The predicate is per row, but the branch collectives span all four devices: when the
    # rows disagree, row 0's all-to-all meets row 1's reduce. The data decides: a warning.
    report = check_module(module(COND, ROWS, ALL), 4)
    assert report.ok, report.to_text()
    assert report.problems and all(p.severity == "warning" for p in report.problems)
    text = report.to_text()
    assert "mismatch" in text and "the data decides" in text
    assert "takes branch 0 on devices 0, 1" in text and "takes branch 1 on devices 2, 3" in text
    strict = check_module(module(COND, ROWS, ALL), 4, strict=True)
    assert not strict.ok and strict.exit_code == 1


def test_device_dependent_predicate_stays_unproven_or_checked_per_device():
    # psum(s) + partition-id: the known part differs per device, so each device decides alone;
    # with a whole-mesh collective in the branches some combinations mismatch (warnings).
    entry = COND.replace(
        "%pred = pred[] compare(%ps, %zero), direction=GT",
        "%pid = u32[] partition-id()\n  %fp = f32[] convert(%pid)\n"
        "  %sum = f32[] add(%ps, %fp)\n  %pred = pred[] compare(%sum, %zero), direction=GT")
    report = check_module(module(entry, ALL, ALL), 4)
    assert report.ok and report.problems
    assert all(p.severity == "warning" for p in report.problems)
    assert "takes branch 0 on device 0;" in report.to_text()


def test_problem_in_every_combination_stays_an_error():
    # Besides the uniform conditional, device 0 alone runs an all-reduce over everybody
    # (a known partition-id branch): unmatched whatever the data.
    entry = COND.replace(
        "  ROOT %c = f32[4]{0} conditional(%pred, %x, %x), true_computation=%exchange, "
        "false_computation=%reduce",
        "  %c = f32[4]{0} conditional(%pred, %x, %x), true_computation=%exchange, "
        "false_computation=%reduce\n"
        "  %pid = u32[] partition-id()\n  %zu = u32[] constant(0)\n"
        "  %first = pred[] compare(%pid, %zu), direction=EQ\n"
        "  ROOT %d = f32[4]{0} conditional(%first, %c, %c), true_computation=%reduce, "
        "false_computation=%nothing")
    report = check_module(module(entry, ALL, ALL), 4)
    assert not report.ok
    errors = report.errors
    assert len(errors) == 1 and errors[0].kind == "unmatched"
    assert "the data decides" not in errors[0].to_text()


def test_switch_index_from_a_row_psum_modulo_and_a_row_index_by_shift():
    # The shape of jax's `lax.switch(psum(k, 'c') % 3, ...)` after XLA: remainder, select and
    # clamp of the all-reduce; and `lax.axis_index('r')` as partition-id >> 1 (a logical
    # shift the folder must compute) choosing a branch with row-local collectives.
    entry = """
ENTRY %main (x: f32[4], k: s32[]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %k = s32[] parameter(1)
  %pid = u32[] partition-id()
  %one = u32[] constant(1)
  %row = u32[] shift-right-logical(%pid, %one)
  %rowi = s32[] convert(%row)
  %a = f32[4]{0} conditional(%rowi, %x, %x), branch_computations={%exchange, %reduce}
  %ks = s32[] all-reduce(%k), channel_id=1, replica_groups=PRED_GROUPS, use_global_device_ids=true, to_apply=%addi
  %three = s32[] constant(3)
  %rem = s32[] remainder(%ks, %three)
  %z = s32[] constant(0)
  %neg = pred[] compare(%rem, %z), direction=LT
  %fix = s32[] add(%rem, %three)
  %idx0 = s32[] select(%neg, %fix, %rem)
  %two = s32[] constant(2)
  %idx = s32[] clamp(%z, %idx0, %two)
  ROOT %b = f32[4]{0} conditional(%idx, %a, %a, %a), branch_computations={%exchange, %reduce, %nothing}
}
"""
    report = check_module(module(entry, ROWS, ROWS), 4)
    assert report.problems == [], report.to_text()
    # rows take the shifted row index as branch: row 0 exchanges, row 1 reduces; then the
    # switch (3 branches per row, 9 combinations) issues 0 or 1 more collective.
    assert set(report.events.values()) <= {2, 3}


# ---- loops whose trip count is uniform per group ----------------------------------------------
LOOP = """HloModule m, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%addi (i: s32[], j: s32[]) -> s32[] {
  %i = s32[] parameter(0)
  %j = s32[] parameter(1)
  ROOT %s = s32[] add(%i, %j)
}

%cond (c: (f32[4], s32[], s32[])) -> pred[] {
  %c = (f32[4]{0}, s32[], s32[]) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=1
  %cn = s32[] get-tuple-element(%c), index=2
  ROOT %lt = pred[] compare(%ci, %cn), direction=LT
}

%body (b: (f32[4], s32[], s32[])) -> (f32[4], s32[], s32[]) {
  %b = (f32[4]{0}, s32[], s32[]) parameter(0)
  %x = f32[4]{0} get-tuple-element(%b), index=0
  %i = s32[] get-tuple-element(%b), index=1
  %n = s32[] get-tuple-element(%b), index=2
  %y = f32[4]{0} BODY_OP
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  ROOT %t = (f32[4]{0}, s32[], s32[]) tuple(%y, %i1, %n)
}

ENTRY %e (x0: f32[4], k: s32[]) -> f32[4] {
  %x0 = f32[4]{0} parameter(0)
  %k = s32[] parameter(1)
  %n0 = s32[] all-reduce(%k), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%addi
  %z = s32[] constant(0)
  %t0 = (f32[4]{0}, s32[], s32[]) tuple(%x0, %z, %n0)
  %w = (f32[4]{0}, s32[], s32[]) while(%t0), condition=%cond, body=%body
  %r = f32[4]{0} get-tuple-element(%w), index=0
  ROOT %all = f32[4]{0} all-reduce(%r), channel_id=4, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
}
"""

_ROW_AR = ("all-reduce(%x), channel_id=2, replica_groups=GROUPS, use_global_device_ids=true, "
           "to_apply=%add")


@pytest.mark.parametrize("body_op, proven", [
    # every exchange in the loop stays inside a row, whose devices share the trip count
    (_ROW_AR.replace("GROUPS", "{{0,1},{2,3}}"), True),
    (_ROW_AR.replace("GROUPS", "{{0},{1},{2},{3}}"), True),
    # the loop's exchanges cross rows whose trip counts may differ: a real hang when they do
    (_ROW_AR.replace("GROUPS", "{{0,1,2,3}}"), False),
    (_ROW_AR.replace("GROUPS", "{{0,2},{1,3}}"), False),
    ("collective-permute(%x), channel_id=2, source_target_pairs={{0,2},{2,0},{1,3},{3,1}}",
     False),
    # The check matches a collective-permute as one instance over its whole group (every
    # partition of the replica), so even pairs inside the rows link them here: unproven
    # (a warning), as before; never a false problem.
    ("collective-permute(%x), channel_id=2, source_target_pairs={{0,1},{1,0},{2,3},{3,2}}",
     False),
])
def test_a_trip_count_uniform_per_row_is_proven_when_the_loop_stays_in_rows(body_op, proven):
    """`while i < psum_row(k)`: devices of a row run the same number of iterations, rows
    may run different numbers. Proven exactly when nothing inside the loop links two rows
    (each row then repeats its own per-iteration sequence); else unproven, never proven."""
    m = xladist.parse_hlo(LOOP.replace("BODY_OP", body_op))
    xladist.verify(m)
    report = check_module(m, 4)
    kinds = {p.kind for p in report.problems}
    if proven:
        assert report.problems == [], report.to_text()
    else:
        assert report.problems and kinds <= {"unproven", "unmatched", "mismatch", "deadlock"}, \
            report.to_text()
        assert not report.ok or kinds == {"unproven"}, report.to_text()


# ---- the jax_extra corpus ---------------------------------------------------------------------
# Every case is proven, except where the data really decides: a while loop whose trip count is
# a pmax (unbounded, not enumerable), and a switch whose third branch permutes across both rows
# while each row picks its branch from its own psum (a real hang if the rows disagree).
EXPECTED_WARNINGS = {
    "loops_collectives_mesh2": {"unproven"},
    "cond_switch_collectives_mesh2x2": {"unmatched"},
}


@pytest.mark.parametrize("case", sorted(p.name for p in EXTRA.iterdir()
                                        if (p / "module.hlo").exists()))
def test_jax_extra_corpus(case):
    module = xladist.load_hlo(EXTRA / case / "module.hlo")
    n = json.loads((EXTRA / case / "case.json").read_text())["num_devices"]
    report = check_module(module, n)
    assert report.ok, report.to_text()
    assert {p.kind for p in report.problems} == EXPECTED_WARNINGS.get(case, set()), \
        report.to_text()
