"""tools/xla_hlo_sweep.py: modules found in C++ raw strings, templates recognized, counts."""

from __future__ import annotations

import importlib.util
import json

from tests.paths import ROOT

_spec = importlib.util.spec_from_file_location("xla_hlo_sweep", ROOT / "tools" / "xla_hlo_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)

SOURCE = r'''
TEST_F(T, Good) {
  const char* kModule = R"(
HloModule good
ENTRY e {
  %forty_two = f32[] constant(42)
  ROOT r = f32[] negate(%forty_two)
})";
}
TEST_F(T, Bad) {
  const char* kModule = R"hlo(
HloModule bad
ENTRY e { ROOT r = f32[] negate(undefined) }
)hlo";
}
TEST_F(T, Templated) {
  auto text = absl::StrFormat(R"(HloModule t
ENTRY e { ROOT p = %s[] parameter(0) })", "f32");
  auto other = R"(HloModule t2
ENTRY e { ROOT p = SHAPE parameter(0) })";
}
const char* kNotHlo = R"(just a string)";
'''


def test_sweep_finds_parses_and_reports(tmp_path, capsys):
    path = tmp_path / "example_test.cc"
    path.write_text(SOURCE)
    found = list(sweep.modules_in(path))
    assert [(line, templated) for line, _, templated in found] == [
        (3, False), (11, False), (17, True), (19, True)]
    assert sweep.main([str(tmp_path), "--json"]) == 1
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["status"] for r in records] == ["ok", "failed", "templated", "templated"]
    assert "undefined" in records[1]["error"] and records[1]["line"] == 11


JOINED = r'''
const char* const kPrelude = R"(
HloModule p

Add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
)";
TEST_F(T, Joined) {
  const std::string text = absl::StrCat(kPrelude, R"(
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=Add
})");
}
TEST_F(T, EnumWords) {
  const char* kModule = R"(
HloModule CRS
ENTRY CRS {
  a = s8[2,3] parameter(0)
  b = s8[3,4] parameter(1)
  ROOT d = s32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},
    operand_precision={PACKED_NIBBLE,PACKED_NIBBLE}
})";
}
'''


def test_prelude_joined_and_enum_words_not_placeholders(tmp_path, capsys):
    """A literal StrCat-joined to a named prelude is parsed with it (the prelude alone is not a
    module); an attribute's enum value in capitals (PACKED_NIBBLE) and a capitalized name the
    module defines (`HloModule CRS`, `ENTRY CRS`) are not placeholders."""
    path = tmp_path / "joined_test.cc"
    path.write_text(JOINED)
    found = list(sweep.modules_in(path))
    assert [(line, templated) for line, _, templated in found] == [(12, False), (20, False)]
    assert "Add {" in found[0][1] and "ENTRY e" in found[0][1]
    assert sweep.main([str(path), "--per-file"]) == 0
    out = capsys.readouterr().out
    assert "joined_test.cc: 2 ok, 0 refused, 0 templated" in out
