"""Control on a value every device holds alike because a collective over all of them
computed it, in jax's two usual forms (both ran correctly but were "cannot prove"):

* `lax.while_loop(lambda c: c[1] > tol, ...)` whose body computes `pmax(max|dx|)` and
  carries it to the condition: every member of the pmax's group gets the same result, so
  the group runs the same number of iterations (the condition's first evaluation reads the
  initial value, equal on every device);
* `lax.switch(all_gather(k)[0] % 3, ...)`: an all-gather's result is every member's operand
  in group order, the same on every member.

Near misses stay unproven: the collective over a subgroup with the loop or branch then
meeting the other subgroups (a real hang when their data differ), a carried value mixed
with the device's own id, and a body whose branch may put the carried all-reduce at another
position of its group's order on different devices (then members pair it with other
collectives and receive different values). The real runs (slow) are the judge: proven
programs complete with jax's or a numpy model's results on both backends, the near miss
hangs.
"""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.analysis.deadlock import check_module
from tests.cli_util import xladist_cli
from tests.paths import TESTS

JAX = TESTS / "data" / "deadlock" / "jax_uniform"   # written by its make.py
ALL, ROWS = "{{0,1,2,3}}", "{{0,1},{2,3}}"
TIMEOUT = 4

CARRIED = """HloModule carried, num_partitions=4

%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] maximum(%a, %b)
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%pmax (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  %d = f32[] add(%p, %p)
  ROOT %q = f32[] all-reduce(%d), channel_id=3, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%max
}

%same (p: f32[]) -> f32[] {
  ROOT %p = f32[] parameter(0)
}

%cond (s: (f32[4], f32[])) -> pred[] {
  %s = (f32[4], f32[]) parameter(0)
  %r = f32[] get-tuple-element(%s), index=1
  %tol = f32[] constant(0.3)
  ROOT %gt = pred[] compare(%r, %tol), direction=GT
}

%body (s: (f32[4], f32[])) -> (f32[4], f32[]) {
  %s = (f32[4], f32[]) parameter(0)
  %x = f32[4] get-tuple-element(%s), index=0
  %h = f32[] constant(0.5)
  %hb = f32[4] broadcast(%h), dimensions={}
  %y = f32[4] multiply(%x, %hb)
  %a = f32[4] abs(%y)
  %ninf = f32[] constant(-inf)
  %m = f32[] reduce(%a, %ninf), dimensions={0}, to_apply=%max
  BEFORE
  %r = f32[] all-reduce(%m0), channel_id=1, replica_groups=GROUPS, use_global_device_ids=true, to_apply=%max
  %v = f32[] CARRY
  BODY_OP
  ROOT %n = (f32[4], f32[]) tuple(%y2, %v)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %one = f32[] constant(1)
  %t = (f32[4], f32[]) tuple(%x, %one)
  %w = (f32[4], f32[]) while(%t), condition=%cond, body=%body
  ROOT %o = f32[4] get-tuple-element(%w), index=0
}
"""
COPY = "%y2 = f32[4] copy(%y)"
PMAX = ("%y2 = f32[4] all-reduce(%y), channel_id=2, replica_groups={{0,1,2,3}}, "
        "use_global_device_ids=true, to_apply=%max")
PID = "%pid = u32[] partition-id()\n  %pf = f32[] convert(%pid)\n  "
# Partitions 0 and 1 issue a pmax (of 2m) over every device before %r, 2 and 3 after it: as
# many collectives on the group per iteration, but %r pairs with the other pmax across them,
# so the halves receive different maxima and may stop apart.
SKEW = ("%pid = u32[] partition-id()\n  %two = u32[] constant(2)\n"
        "  %lo = pred[] compare(%pid, %two), direction=LT\n"
        "  %k0 = f32[] conditional(%lo, %m, %m), true_computation=%pmax, "
        "false_computation=%same\n  %m0 = f32[] copy(%m)")
AFTER = ("%hi = pred[] not(%lo)\n  %k1 = f32[] conditional(%hi, %m, %m), "
         "true_computation=%pmax, false_computation=%same\n"
         "  %k = f32[] add(%k0, %k1)\n  %z0 = f32[] constant(0)\n"
         "  %kz = f32[] multiply(%k, %z0)\n  %kb = f32[4] broadcast(%kz), dimensions={}\n"
         "  %y2 = f32[4] add(%y, %kb)")


def carried(groups=ALL, body_op=COPY, carry="copy(%r)", before="%m0 = f32[] copy(%m)"):
    return (CARRIED.replace("GROUPS", groups).replace("BODY_OP", body_op)
            .replace("CARRY", carry).replace("BEFORE", before))


def test_a_loop_on_a_pmax_its_body_carries_is_proven():
    for text in (carried(), carried(body_op=PMAX), carried(ROWS)):
        report = check_module(xladist.parse_hlo(text), budget=None)
        assert report.verdict == "proven", report.to_text()
    report = check_module(xladist.load_hlo(JAX / "conv.hlo"), 4, budget=None)
    assert report.verdict == "proven", report.to_text()


@pytest.mark.parametrize("text", [
    carried(ROWS, PMAX),                                  # rows may stop apart, then meet
    carried(carry="add(%r, %pf)", before=PID + "%m0 = f32[] copy(%m)"),   # the device's own
    carried(before=SKEW, body_op=AFTER),                  # %r meets another pmax
], ids=["subgroup-then-all", "mixed-with-partition-id", "paired-with-another-pmax"])
def test_near_misses_of_a_carried_pmax_are_not_proven(text):
    report = check_module(xladist.parse_hlo(text), budget=None)
    assert report.verdict != "proven", report.to_text()


def _halvings(x: np.ndarray) -> np.ndarray:
    """CARRIED's result (numpy model from the op semantics): every device halves its x
    until the max of |x| over every device is at most 0.3 (at least once: the carried value
    starts at 1)."""
    t = 1
    while np.abs(x).max() / 2 ** t > 0.3:
        t += 1
    return (x / 2 ** t).astype(np.float32)


def _hangs(tmp, text: str, x: np.ndarray) -> str:
    path = tmp / "module.hlo"
    path.write_text(text)
    np.savez(tmp / "in.npz", arg0=x)
    proc = xladist_cli("run", path, "-n", 4, "--no-check", "--timeout", TIMEOUT, "-q",
                       "--inputs", tmp / "in.npz", timeout=240)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


APART = np.array([[4] * 4, [4] * 4, [0.5] * 4, [0.5] * 4], np.float32)   # the rows differ


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_proven_carried_pmax_loops_complete_with_the_models_and_jax_results(cluster_run):
    x = np.arange(16, dtype=np.float32).reshape(4, 4) / 4
    for backend in ("interpreter", "cpu"):
        for text in (carried(), carried(body_op=PMAX)):
            outs = cluster_run(text, [x], n=4, backend=backend, timeout=TIMEOUT)
            want = _halvings(x)
            if "%y2 = f32[4] all-reduce" in text:
                want = np.broadcast_to(want.max(axis=0), want.shape)
            np.testing.assert_allclose(np.stack([o[0] for o in outs]), want, rtol=1e-6)
        module = xladist.load_hlo(JAX / "conv.hlo")
        assert check_module(module, 4, strict=True).problems == []
        outs = cluster_run(module.to_text(), [np.load(JAX / "conv.inputs.npz")["arg0"]], n=4,
                           backend=backend, timeout=TIMEOUT)
        np.testing.assert_allclose(np.stack([o[0] for o in outs]),
                                   np.load(JAX / "conv.expected.npz")["out0"], rtol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("text", [carried(ROWS, PMAX), carried(before=SKEW, body_op=AFTER)],
                         ids=["subgroup-then-all", "paired-with-another-pmax"])
def test_near_misses_of_a_carried_pmax_really_hang(tmp_path, text):
    """The rows' maxima differ: one half stops while the other waits for it."""
    assert "never arrived" in _hangs(tmp_path, text, APART)


SWITCH = """HloModule switch, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%psum (p: f32[4]) -> f32[4] {
  %p = f32[4] parameter(0)
  ROOT %r = f32[4] all-reduce(%p), channel_id=2, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%add
}

%twice (p: f32[4]) -> f32[4] {
  %p = f32[4] parameter(0)
  ROOT %r = f32[4] add(%p, %p)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %zero = f32[] constant(0)
  %s = f32[] reduce(%x, %zero), dimensions={0}, to_apply=%add
  %si = s32[] convert(%s)
  %v = s32[1] reshape(%si)
  %g = s32[SIZE] all-gather(%v), channel_id=1, replica_groups=GROUPS, dimensions={0}, use_global_device_ids=true
  %g0 = s32[1] slice(%g), slice={[0:1]}
  %i = s32[] reshape(%g0)
  %two = s32[] constant(2)
  %idx = s32[] remainder(%i, %two)
  ROOT %o = f32[4] conditional(%idx, %x, %x), branch_computations={%psum, %twice}
}
"""


def switch(groups=ALL):
    return SWITCH.replace("GROUPS", groups).replace("SIZE", "4" if groups == ALL else "2")


def test_a_switch_on_an_all_gather_over_every_device_is_proven():
    report = check_module(xladist.parse_hlo(switch()), budget=None)
    assert report.verdict == "proven", report.to_text()
    report = check_module(xladist.load_hlo(JAX / "switch.hlo"), 4, budget=None)
    assert report.verdict == "proven", report.to_text()


@pytest.mark.parametrize("groups", [ROWS, "{{0,2},{1,3}}"])
def test_a_switch_on_an_all_gather_over_a_subgroup_is_not_proven(groups):
    """Each subgroup picks its branch from its own first element: where they differ, the
    subgroup that took the psum over every device waits for the other."""
    report = check_module(xladist.parse_hlo(switch(groups)), budget=None)
    assert report.verdict != "proven", report.to_text()
    assert {p.kind for p in report.problems} == {"unmatched"}, report.to_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_switch_on_an_all_gather_completes_with_the_models_and_jax_results(cluster_run):
    # Device 0's sum decides for all: 6 (even: the psum) and 5 (odd: twice its own x).
    for first in (6.0, 5.0):
        x = np.ones((4, 4), np.float32)
        x[0] = first / 4
        want = (np.broadcast_to(x.sum(axis=0), x.shape) if first % 2 == 0 else 2 * x)
        for backend in ("interpreter", "cpu"):
            outs = cluster_run(switch(), [x], n=4, backend=backend, timeout=TIMEOUT)
            np.testing.assert_allclose(np.stack([o[0] for o in outs]), want, rtol=1e-6)
    module = xladist.load_hlo(JAX / "switch.hlo")
    for backend in ("interpreter", "cpu"):
        outs = cluster_run(module.to_text(), [np.load(JAX / "switch.inputs.npz")["arg0"]],
                           n=4, backend=backend, timeout=TIMEOUT)
        np.testing.assert_allclose(np.stack([o[0] for o in outs]),
                                   np.load(JAX / "switch.expected.npz")["out0"], rtol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_switch_on_an_all_gather_over_rows_really_hangs(tmp_path):
    """Row {0,1} reads device 0's sum (4: the psum), row {2,3} device 2's (1: twice x)."""
    x = np.ones((4, 4), np.float32) / 4
    x[0] = 1
    assert "never arrived" in _hangs(tmp_path, switch(ROWS), x)
