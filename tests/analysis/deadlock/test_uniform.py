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
# Every case is proven, except where the data really decides: a switch whose third branch
# permutes across both rows while each row picks its branch from its own psum (a real hang if
# the rows disagree). (loops_collectives_mesh2's `while pmax(max|x|) > 0.3` was "unproven"
# until the check read an all-reduce in a loop's condition as uniform.)
EXPECTED_WARNINGS = {
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


# ---- loops whose condition all-reduces: `while psum(i) < 6` ----------------------------------
# jax's usual convergence loop under shard_map, `lax.while_loop(lambda c: lax.psum(c[1], "d")
# < 6, step, (a, 0))`, puts the collective in the condition (found by the JAX mesh sweep:
# every run warned "unproven"). Each member of the all-reduce's group gets the same result in
# every evaluation, whatever it contributes, so the group runs the same number of iterations;
# the check enumerates it as it does a uniform trip count (trace.py _plan_by_induction).
# Here each device steps its counter by its own data `k`: psum(i) after t iterations is t
# times the group's sum of k, so the trip count is data, uniform per group of the condition.
JAX_LOOPS = TESTS / "data" / "deadlock" / "jax_while_psum_cond"

CLOOP = """HloModule m, num_partitions=4

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
  %ck = s32[] get-tuple-element(%c), index=2
  COND_OP
  %v = s32[] COND_VALUE
  %lim = s32[] constant(6)
  ROOT %lt = pred[] compare(%v, %lim), direction=LT
}

%body (b: (f32[4], s32[], s32[])) -> (f32[4], s32[], s32[]) {
  %b = (f32[4]{0}, s32[], s32[]) parameter(0)
  %x = f32[4]{0} get-tuple-element(%b), index=0
  %i = s32[] get-tuple-element(%b), index=1
  %k = s32[] get-tuple-element(%b), index=2
  %y = f32[4]{0} BODY_OP
  %i1 = s32[] add(%i, %k)
  ROOT %t = (f32[4]{0}, s32[], s32[]) tuple(%y, %i1, %k)
}

ENTRY %e (x0: f32[4], k: s32[]) -> f32[4] {
  %x0 = f32[4]{0} parameter(0)
  %k = s32[] parameter(1)
  %z = s32[] constant(0)
  %t0 = (f32[4]{0}, s32[], s32[]) tuple(%x0, %z, %k)
  %w = (f32[4]{0}, s32[], s32[]) while(%t0), condition=%cond, body=%body
  %r = f32[4]{0} get-tuple-element(%w), index=0
  ROOT %all = f32[4]{0} all-reduce(%r), channel_id=4, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
}
"""

COLS = "{{0,2},{1,3}}"
_PSUM = ("%ps = s32[] all-reduce(%ci), channel_id=1, replica_groups=GROUPS, "
         "use_global_device_ids=true, to_apply=%addi")
_RING = '_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3},{3,0}}"'
_RECV = "\n  ".join([
    "%tok = token[] after-all()",
    f"%rv = (s32[], u32[], token[]) recv(%tok), channel_id=5, frontend_attributes={{{_RING}}}",
    f"%sn = (s32[], u32[], token[]) send(%ci, %tok), channel_id=5, frontend_attributes={{{_RING}}}",
    "%rd = (s32[], token[]) recv-done(%rv), channel_id=5",
    "%sd = token[] send-done(%sn), channel_id=5",
    "%ps = s32[] get-tuple-element(%rd), index=0"])


def cloop(cond_groups=ALL, body_groups=ALL, value="copy(%ps)", cond_op=_PSUM, n=4,
          step="%k"):
    """`step`: what the body adds to the counter (the device's data k, or a constant)."""
    text = (CLOOP.replace("COND_OP", cond_op.replace("GROUPS", cond_groups))
            .replace("%i1 = s32[] add(%i, %k)", f"%one = s32[] constant(1)\n  "
                     f"%i1 = s32[] add(%i, {step})")
            .replace("COND_VALUE", value)
            .replace("BODY_OP", _ROW_AR.replace("GROUPS", body_groups)))
    if n == 2:
        text = (text.replace("num_partitions=4", "num_partitions=2")
                .replace("{{0,1,2,3}}", "{{0,1}}").replace(_RING, _RING.replace(
                    "{{0,1},{1,2},{2,3},{3,0}}", "{{0,1},{1,0}}")))
    m = xladist.parse_hlo(text)
    xladist.verify(m)
    return m


def _not_proven(report):
    """Never "proven": unproven (a warning) or a problem the data may decide."""
    kinds = {p.kind for p in report.problems}
    assert report.problems and kinds <= {"unproven", "unmatched", "mismatch", "deadlock"}, \
        report.to_text()
    assert not report.ok or kinds == {"unproven"} or all(
        p.severity == "warning" for p in report.problems), report.to_text()


@pytest.mark.parametrize("name, n", [("m2_f32", 2), ("m4_s32", 4)])
def test_jax_while_with_psum_in_its_condition_is_proven(name, n):
    module = xladist.load_hlo(JAX_LOOPS / f"{name}.hlo")
    report = check_module(module, n, strict=True)
    assert report.ok and report.problems == [], report.to_text()
    # The per-device path proves it too (no class shortcut), and the unrolling reference,
    # which cannot enumerate a trip count, does not.
    assert check_module(module, n, symmetry=False, strict=True).problems == []
    slow = check_module(module, n, engine="unroll")
    assert [p.kind for p in slow.problems] == ["unproven"], slow.to_text()


@pytest.mark.parametrize("cond_groups, body_groups", [
    (ALL, ALL), (ALL, ROWS), (ALL, COLS),
    # rows may run different counts; nothing in the loop links two rows
    (ROWS, ROWS), (ROWS, "{{0},{1},{2},{3}}")])
def test_condition_psum_uniform_over_the_body_groups_is_proven(cond_groups, body_groups):
    report = check_module(cloop(cond_groups, body_groups), 4, strict=True)
    assert report.ok and report.problems == [], report.to_text()


@pytest.mark.parametrize("cond_groups, body_groups", [
    # the rows' trip counts may differ and the body's all-reduce spans both rows: row 1
    # leaves the loop while row 0 waits in it (test_cond_loops_run.py runs it: a hang)
    (ROWS, ALL), (ROWS, COLS), (COLS, ROWS),
    # every device on its own: nothing keeps them together
    ("{{0},{1},{2},{3}}", ALL)])
def test_condition_psum_over_groups_the_body_crosses_is_not_proven(cond_groups, body_groups):
    _not_proven(check_module(cloop(cond_groups, body_groups), 4))
    assert not check_module(cloop(cond_groups, body_groups), 4, strict=True).ok


@pytest.mark.parametrize("value", [
    # the uniform sum plus a per-device value: partition-id, the device's own counter (it
    # steps by the device's data), the device's data itself
    "add(%ps, %pid)", "add(%ps, %ci)", "add(%ps, %ck)", "copy(%ci)"])
def test_condition_mixing_psum_with_a_device_value_is_not_proven(value):
    op = _PSUM + "\n  %pidu = u32[] partition-id()\n  %pid = s32[] convert(%pidu)"
    _not_proven(check_module(cloop(value=value, cond_op=op), 4))


@pytest.mark.parametrize("cond_op", [
    # what a neighbour holds is not what this device holds: no group decides together
    "%ps = s32[] collective-permute(%ci), channel_id=1, "
    "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}",
    _RECV,
    # an all-reduce-start/done pair is not read as uniform (only a synchronous all-reduce)
    "%st = s32[] all-reduce-start(%ci), channel_id=1, replica_groups={{0,1,2,3}}, "
    "use_global_device_ids=true, to_apply=%addi\n  %ps = s32[] all-reduce-done(%st)"])
def test_condition_reading_a_permute_or_a_channel_is_not_proven(cond_op):
    _not_proven(check_module(cloop(cond_op=cond_op), 4))


def test_condition_psum_plus_a_counter_is_proven():
    # `psum(k) + i < 6` with i stepping by 1 from 0: the counter is the same on every
    # device (a constant stepped by a constant), the psum uniform; and with i stepping by
    # the device's own k, not.
    op = _PSUM.replace("(%ci)", "(%ck)")
    m = cloop(value="add(%ps, %ci)", cond_op=op, step="%one")
    assert check_module(m, 4, strict=True).problems == [], check_module(m, 4).to_text()
    _not_proven(check_module(cloop(value="add(%ps, %ci)", cond_op=op), 4))


def test_every_evaluation_of_the_condition_is_traced():
    """Trip count t: the condition's all-reduce runs t + 1 times (its last evaluation is
    false), interleaved with t bodies; from 3 on one traced iteration stands for the rest."""
    from xladist.analysis.deadlock.facts import ModuleFacts
    from xladist.analysis.deadlock.check import resolve_devices
    from xladist.analysis.deadlock.trace import trace_device
    from xladist.analysis.schedule import schedule_module
    m = cloop()
    facts = ModuleFacts(m, resolve_devices(m, 4))
    for chosen, labels in [
            (0, ["condition 1"]),
            (2, ["condition 1", "iteration 1", "condition 2", "iteration 2", "condition 3"]),
            (3, ["condition 1", "iteration 1", "condition 2", "iteration 2", "condition 3",
                 "from iteration 3", "from condition 4"])]:
        tr = trace_device(facts, schedule_module(m), 1,
                          choose=lambda key, n, where, d, k=chosen: k)
        assert tr.unproven is None
        got = [(ev.instr.name, ev.ctx[-1].removesuffix(" of w") if ev.ctx else None)
               for ev in tr.events]
        want = [("ps" if "condition" in lab else "y", lab) for lab in labels] + [("all", None)]
        assert [g[1] for g in got[:-1]] == labels and got[-1][0] == "all", got
        assert [g[0] for g in got[:-1]] == [w[0] for w in want[:-1]], got
        assert tr.shortened and tr.shortened[0][2][0] == "uniform"


# A variadic all-reduce: its two results are each uniform over the group, but they are two
# values. Device 0 sends when the first is 1, device 1 receives when the second is 1.
TWO_RESULTS = """HloModule two_results, replica_count=2

%add (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %s = s32[] add(%a, %b)
}

%send (p: f32[2]) -> f32[2] {
  %p = f32[2] parameter(0)
  %tok = token[] after-all()
  %snd = (f32[2], u32[], token[]) send(%p, %tok), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1}}"}
  %sd = token[] send-done(%snd), channel_id=1
  ROOT %cp = f32[2] copy(%p)
}

%recv (p: f32[2]) -> f32[2] {
  %p = f32[2] parameter(0)
  %tok = token[] after-all()
  %rcv = (f32[2], u32[], token[]) recv(%tok), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1}}"}
  %rd = (f32[2], token[]) recv-done(%rcv), channel_id=1
  ROOT %v = f32[2] get-tuple-element(%rd), index=0
}

%no (q: f32[2]) -> f32[2] {
  %q = f32[2] parameter(0)
  ROOT %cp = f32[2] copy(%q)
}

ENTRY %main (x: f32[2], a: s32[], b: s32[]) -> f32[2] {
  %x = f32[2] parameter(0)
  %a = s32[] parameter(1)
  %b = s32[] parameter(2)
  %ar = (s32[], s32[]) all-reduce(%a, %b), replica_groups={}, to_apply=%add
  %sa = s32[] get-tuple-element(%ar), index=0
  %sb = s32[] get-tuple-element(%ar), index=1
  %s1 = f32[2] conditional(%sa, %x, %x), branch_computations={%no, %send}
  ROOT %s2 = f32[2] conditional(%sb, %s1, %s1), branch_computations={%no, %recv}
}
"""


def test_elements_of_a_variadic_all_reduce_decide_apart():
    """psum(a) = 1 and psum(b) = 0 leaves device 0's send unanswered (a real hang under
    mpiexec); each element of the tuple is a value of its own, not one shared choice."""
    m = xladist.parse_hlo(TWO_RESULTS)
    xladist.verify(m)
    report = check_module(m, 2)
    assert report.verdict != "proven", report.to_text()
    assert any("the data decides" in " ".join(p.detail) for p in report.problems), \
        report.to_text()
    assert not check_module(m, 2, strict=True).ok


# One all-reduce in a called computation, called twice: two runs, two values. The
# branches on both results are decided after both calls.
TWO_RUNS = TWO_RESULTS.replace("""  %ar = (s32[], s32[]) all-reduce(%a, %b), replica_groups={}, to_apply=%add
  %sa = s32[] get-tuple-element(%ar), index=0
  %sb = s32[] get-tuple-element(%ar), index=1""", """  %sa = s32[] call(%a), to_apply=%psum
  %sb = s32[] call(%b), to_apply=%psum""").replace("""%send (p""", """%psum (v: s32[]) -> s32[] {
  %v = s32[] parameter(0)
  ROOT %ar = s32[] all-reduce(%v), replica_groups={}, to_apply=%add
}

%send (p""")


def test_two_runs_of_one_all_reduce_decide_apart():
    """psum(a) = 1 and psum(b) = 0: device 0's send is unanswered (a real hang under
    mpiexec). Before, both results were keyed by how often the all-reduce had run when
    the branch was folded (twice for both), so only equal branches were tried."""
    m = xladist.parse_hlo(TWO_RUNS)
    xladist.verify(m)
    report = check_module(m, 2)
    assert report.verdict != "proven", report.to_text()
    assert any("the data decides" in " ".join(p.detail) for p in report.problems), \
        report.to_text()
    assert not check_module(m, 2, strict=True).ok


# Replica 0 all-reduces z before calling %F, replica 1 after: %F's all-reduce is the 2nd
# collective on {0,1} of replica 0 and the 1st of replica 1, so it pairs with z's, and
# replica 0 gets x0 + z1, replica 1 z0 + x1. The branch on it may go apart.
APART = """HloModule apart, replica_count=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%F (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %r = f32[] all-reduce(%x), replica_groups={{0,1}}, to_apply=%add
}

%z_first (p: (f32[], f32[])) -> (f32[], f32[]) {
  %p = (f32[], f32[]) parameter(0)
  %x = f32[] get-tuple-element(%p), index=0
  %z = f32[] get-tuple-element(%p), index=1
  %o = f32[] all-reduce(%z), replica_groups={{0,1}}, to_apply=%add
  %zero = f32[] constant(0)
  %o0 = f32[] multiply(%o, %zero)
  %x2 = f32[] add(%x, %o0)
  %f = f32[] call(%x2), to_apply=%F
  ROOT %t = (f32[], f32[]) tuple(%f, %o)
}

%z_last (p: (f32[], f32[])) -> (f32[], f32[]) {
  %p = (f32[], f32[]) parameter(0)
  %x = f32[] get-tuple-element(%p), index=0
  %z = f32[] get-tuple-element(%p), index=1
  %f = f32[] call(%x), to_apply=%F
  %zero = f32[] constant(0)
  %f0 = f32[] multiply(%f, %zero)
  %z2 = f32[] add(%z, %f0)
  %o = f32[] all-reduce(%z2), replica_groups={{0,1}}, to_apply=%add
  ROOT %t = (f32[], f32[]) tuple(%f, %o)
}

%yes (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  ROOT %r = f32[] all-reduce(%a), replica_groups={{0,1}}, to_apply=%add
}

%no (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  ROOT %r = f32[] copy(%a)
}

ENTRY %main (x: f32[], z: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %z = f32[] parameter(1)
  %t = (f32[], f32[]) tuple(%x, %z)
  %rid = u32[] replica-id()
  %zero = u32[] constant(0)
  %is0 = pred[] compare(%rid, %zero), direction=EQ
  %c = (f32[], f32[]) conditional(%is0, %t, %t), true_computation=%z_first, false_computation=%z_last
  %f = f32[] get-tuple-element(%c), index=0
  %fz = f32[] constant(0)
  %pos = pred[] compare(%f, %fz), direction=GT
  ROOT %out = f32[] conditional(%pos, %f, %f), true_computation=%yes, false_computation=%no
}
"""


def test_one_all_reduce_reached_as_different_collectives_of_its_group_decides_apart():
    """x = (1, 0), z = (-5, 0): replica 0 gets 1 and all-reduces again, replica 1 gets -5
    and never comes (a real hang: test_soundness_runs.py). Before, the result was keyed by
    the instruction and its run count, equal on both, so only equal branches were tried
    and the module was proven (by classes, by every device and by unrolling alike)."""
    m = xladist.parse_hlo(APART)
    xladist.verify(m)
    for report in (check_module(m, 2), check_module(m, 2, engine="unroll", budget=None)):
        assert report.verdict != "proven", report.to_text()
        assert any("the data decides" in " ".join(p.detail) for p in report.problems), \
            report.to_text()
    assert not check_module(m, 2, strict=True).ok
