"""precheck.verdict: the deadlock check's conclusion as data for the job (the coordination
service's `checked`, whose "proven" makes a hang report call the hang a checker defect).

"proven", "assuming" (a loop's known_trip_count the check could not verify against its
condition, which the runtime follows), "not proven" (data), "refused" (problems) and
"nothing to check" (no communication), each on a small program whose verdict follows from
the rules in xladist/analysis/deadlock (docs/deadlock-check.md).
"""

from __future__ import annotations

import pytest

import xladist
from xladist.errors import DeadlockError
from xladist.runtime.precheck import precheck, verdict

HEAD = """HloModule m, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (p: (s32[], f32[4], s32[])) -> pred[] {
  %p = (s32[], f32[4]{0}, s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] get-tuple-element(%p), index=2
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (p: (s32[], f32[4], s32[])) -> (s32[], f32[4], s32[]) {
  %p = (s32[], f32[4]{0}, s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %n = s32[] get-tuple-element(%p), index=2
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %y = f32[4]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%add
  ROOT %t = (s32[], f32[4]{0}, s32[]) tuple(%i1, %y, %n)
}
"""


def _loop(bound: str, attrs: str = "") -> xladist.hlo.ir.Module:
    """The loop around an all-reduce, its trip count `bound` (an entry instruction)."""
    return xladist.parse_hlo(HEAD + f"""
ENTRY %main (x: f32[4], m: s32[]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %m = s32[] parameter(1)
  %three = s32[] constant(3)
  %zero = s32[] constant(0)
  %t0 = (s32[], f32[4]{{0}}, s32[]) tuple(%zero, %x, {bound})
  %w = (s32[], f32[4]{{0}}, s32[]) while(%t0), condition=%cond, body=%body{attrs}
  ROOT %out = f32[4]{{0}} get-tuple-element(%w), index=1
}}
""")


def test_proven():
    module = _loop("%three")
    assert verdict(precheck(module, 2), module, "xladist check m.hlo -n 2") == {
        "verdict": "proven", "assumptions": [], "reasons": [], "proven": True,
        "module": module, "how": "xladist check m.hlo -n 2"}


def test_a_proven_verdict_prints_the_module_only_for_a_hang_report(monkeypatch, tmp_path):
    # Before: verdict printed the whole module at every proven launch, for a report only a
    # hang after a proof makes (a module with a 10^6-element literal: seconds to print).
    from xladist.hlo import printer
    from xladist.runtime.service.report import proven_line
    module = _loop("%three")
    want = module.to_text()
    printed = []
    real = printer.print_module
    monkeypatch.setattr(printer, "print_module",
                        lambda *a, **k: printed.append(1) or real(*a, **k))
    v = verdict(precheck(module, 2), module, "xladist check m.hlo -n 2")
    assert printed == []
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    line = proven_line(v)
    saved = line.split("the module is saved as ")[1].split(";")[0]
    assert open(saved).read() == want


def test_a_false_known_trip_count_is_not_trusted():
    # The condition says 3; the runtime follows it, and so does the check.
    report = precheck(_loop("%three", ', backend_config={"known_trip_count":{"n":"7"}}'), 2)
    assert verdict(report)["verdict"] == "proven"
    assert report.events == {0: 3, 1: 3}


def test_a_known_trip_count_the_condition_cannot_confirm_is_an_assumption():
    warnings = []
    report = precheck(_loop("%m", ', backend_config={"known_trip_count":{"n":"2"}}'), 2,
                      warn=warnings.append)
    v = verdict(report, _loop("%m"))
    # Not proven: a hang here is not the checker's defect, and no module is kept for one.
    assert v["verdict"] == "assuming" and v["reasons"] == [] and not v["proven"]
    assert v["module"] is None
    (text,) = v["assumptions"]
    assert text.startswith("assuming w (line") and "runs 2 times on devices 0, 1" in text
    assert "known_trip_count" in text and "the runtime follows the condition" in text
    assert "not proven" in report.to_text().splitlines()[0]
    assert warnings and "cannot prove" in warnings[0]
    with pytest.raises(DeadlockError):   # --strict refuses what is only assumed
        precheck(_loop("%m", ', backend_config={"known_trip_count":{"n":"2"}}'), 2,
                 strict=True)


def test_not_proven_when_data_decides():
    v = verdict(precheck(_loop("%m"), 2, warn=lambda text: None))
    assert v["verdict"] == "not proven" and v["assumptions"] == []
    assert "trip count depends on data" in v["reasons"][0]


def test_refused_carries_its_verdict():
    # partition-id + 1 iterations: device 1 waits in a second all-reduce nobody joins.
    module = xladist.parse_hlo(HEAD + """
ENTRY %main (x: f32[4], m: s32[]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %pid = u32[] partition-id()
  %p = s32[] convert(%pid)
  %one = s32[] constant(1)
  %n = s32[] add(%p, %one)
  %zero = s32[] constant(0)
  %t0 = (s32[], f32[4]{0}, s32[]) tuple(%zero, %x, %n)
  %w = (s32[], f32[4]{0}, s32[]) while(%t0), condition=%cond, body=%body
  ROOT %out = f32[4]{0} get-tuple-element(%w), index=1
}
""")
    with pytest.raises(DeadlockError) as err:
        precheck(module, 2)
    v = verdict(err.value.report)
    assert v["verdict"] == "refused" and "never by device 0" in v["reasons"][0]


def test_nothing_to_check():
    module = xladist.parse_hlo("HloModule m\n\nENTRY %main (x: f32[4]) -> f32[4] {\n"
                               "  ROOT %x = f32[4]{0} parameter(0)\n}\n")
    assert precheck(module, 2) is None
    assert verdict(None, module)["verdict"] == "nothing to check"
    assert not verdict(None, module)["proven"]
