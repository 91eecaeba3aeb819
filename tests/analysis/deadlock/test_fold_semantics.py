"""The folder decides branches and trip counts with XLA's element-wise semantics, corner
cases included: a value folded otherwise than the run computes it sends the check down
another branch than the device takes, and "proven" then hangs under mpiexec.

The expected values are XLA's documented ones (operation semantics; XLA:CPU's
elemental_ir_emitter), written out by hand."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.analysis.deadlock import check_module
from xladist.analysis.deadlock.fold import Folder, Frame

# (result type, expression over %a and %b, a, b, expected)
CASES = [
    ("s32", "convert(%a)", "f32", "3e9", None, 2**31 - 1),          # saturates
    ("s32", "convert(%a)", "f32", "-inf", None, -2**31),
    ("s32", "convert(%a)", "f32", "nan", None, 0),
    ("u32", "convert(%a)", "f32", "-1", None, 0),
    ("pred", "compare(%a, %b), direction=LT, type=TOTALORDER", "f32", "-0", "0", True),
    ("pred", "compare(%a, %b), direction=EQ, type=TOTALORDER", "f32", "nan", "nan", True),
    ("s32", "divide(%a, %b)", "s32", "1", "-2147483648", 0),          # truncates toward 0
    ("s32", "divide(%a, %b)", "s32", "7", "0", -1),                   # x / 0 is -1
    ("u32", "shift-right-arithmetic(%a, %b)", "u32", "4294967295", "1", 4294967295),
    ("s32", "shift-left(%a, %b)", "s32", "1", "-1", 0),               # amount >= width
    ("s32", "bitcast(%a)", "f32", "1", None, 0x3F800000),              # the bits, not 1
]


@pytest.mark.parametrize("rt, expr, ty, a, b, want", CASES)
def test_folded_value_is_xlas(rt, expr, ty, a, b, want):
    lines = [f"  %a = {ty}[] constant({a})"]
    if b is not None:
        lines.append(f"  %b = {ty}[] constant({b})")
    lines.append(f"  ROOT %r = {rt}[] {expr}")
    m = xladist.parse_hlo("HloModule m\n\nENTRY %e () -> " + f"{rt}[] {{\n"
                          + "\n".join(lines) + "\n}\n")
    got = Folder(0, 0).eval(m.entry.root, Frame(m.entry, []))
    assert isinstance(got, np.ndarray) and got.item() == want, (expr, a, b, got)


HEAD = """HloModule m, replica_count=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%yes (p: f32[2]) -> f32[2] {
  %p = f32[2] parameter(0)
  ROOT %ar = f32[2] all-reduce(%p), replica_groups={}, to_apply=%add
}

%no (q: f32[2]) -> f32[2] {
  %q = f32[2] parameter(0)
  ROOT %cp = f32[2] copy(%q)
}

ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2] parameter(0)
  %r = u32[] replica-id()
  %rf = f32[] convert(%r)
  %one = f32[] constant(1)
PRED
  ROOT %c = f32[2] conditional(%pred, %x, %x), true_computation=%yes, false_computation=%no
}
"""

# Device 1 takes the all-reduce branch, device 0 does not: a real hang (both backends).
PREDS = {
    # 3e9 saturates to INT_MAX > 0 on device 1 (numpy's cast gives INT_MIN)
    "saturating convert": """  %big = f32[] constant(3e9)
  %m = f32[] multiply(%rf, %big)
  %i = s32[] convert(%m)
  %zero = s32[] constant(0)
  %pred = pred[] compare(%i, %zero), direction=GT""",
    # device 0 computes -1 * 0 = -0.0, device 1 0 * 0 = +0.0: equal as floats, not in
    # TOTALORDER, where -0.0 < +0.0
    "totalorder on -0": """  %rm = f32[] subtract(%rf, %one)
  %z = f32[] constant(0)
  %m = f32[] multiply(%rm, %z)
  %pred = pred[] compare(%z, %m), direction=GT, type=TOTALORDER""",
    # a bitcast reads the buffer in its layout: {{0,0},{1,1}} in {1,0} is {{0,1},{0,1}} in
    # {0,1}, so row 0 holds each device's id (a reshape would give 0 on both)
    "bitcast across layouts": """  %t = s32[2,2]{1,0} constant({{0,0},{1,1}})
  %b = s32[2,2]{0,1} bitcast(%t)
  %zu = u32[] constant(0)
  %e = s32[1,1]{1,0} dynamic-slice(%b, %zu, %r), dynamic_slice_sizes={1,1}
  %i = s32[] reshape(%e)
  %zero = s32[] constant(0)
  %pred = pred[] compare(%i, %zero), direction=GT""",
}


@pytest.mark.parametrize("symmetry", [True, False])
@pytest.mark.parametrize("name", sorted(PREDS))
def test_branch_on_a_corner_case_is_refused(name, symmetry):
    m = xladist.parse_hlo(HEAD.replace("PRED", PREDS[name]))
    xladist.verify(m)
    report = check_module(m, 2, symmetry=symmetry)
    assert not report.ok and report.of_kind("unmatched"), report.to_text()
