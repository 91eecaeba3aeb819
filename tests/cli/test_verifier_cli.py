"""`xladist check`: output, exit codes (0 ok, 1 problem, 2 invalid input), --json, --strict and
the deadlock-check hook."""

from __future__ import annotations

import json
import os


from xladist.analysis import deadlock
from xladist.cli import main
from tests.paths import TESTS

CORPUS = str(TESTS / "data" / "corpus")
PSUM = os.path.join(CORPUS, "jax", "psum_basic_mesh4", "module.hlo")

ELIDED = """HloModule elided, entry_computation_layout={()->f32[20]{0}}

ENTRY %main () -> f32[20] {
  ROOT %c = f32[20]{0} constant({...})
}
"""

BAD_GROUPS = """HloModule bad, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  ROOT %ar = f32[4]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1,2}}, use_global_device_ids=true, to_apply=%add
}
"""


def _write(tmp_path, text, name="m.hlo"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_ok_output_and_exit_code(capsys):
    assert main(["check", PSUM, "--no-deadlock-check"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK: jit_psum_basic — 2 computations, 5 instructions, verified")
    assert "deadlock check: skipped" in out


def test_verifier_error_exits_2_without_traceback(tmp_path, capsys):
    path = _write(tmp_path, BAD_GROUPS)
    assert main(["check", path]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "flattened id 2 is out of range [0, 2)" in err and "%ar" in err


def test_json_output_for_valid_and_invalid(tmp_path, capsys):
    assert main(["check", PSUM, "--json", "--no-deadlock-check"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["verified"] and result["num_devices"] == 4 and result["has_collectives"]
    assert main(["check", _write(tmp_path, BAD_GROUPS), "--json"]) == 2
    result = json.loads(capsys.readouterr().out)
    assert result["verified"] is False and result["error_type"] == "VerifierError"


def test_strict_turns_warnings_into_problems(tmp_path, capsys):
    path = _write(tmp_path, ELIDED)
    assert main(["check", path]) == 0
    assert "cannot execute" in capsys.readouterr().err
    assert main(["check", path, "--strict"]) == 1
    assert capsys.readouterr().out.startswith("FAIL: elided")


# A partitioned module whose header declares no counts: its permute names partition 1.
PERMUTE = """HloModule permute

ENTRY main {
  x = f32[4]{0} parameter(0)
  ROOT p = f32[4]{0} collective-permute(x), channel_id=1, source_target_pairs={{0,1},{1,0}}
}
"""


def test_device_count_option(capsys, tmp_path):
    unopt = os.path.join(CORPUS, "jax", "psum_basic_mesh4", "module.unoptimized.hlo")
    # jax's text before partitioning: refused as `xladist run` refuses it, whatever the counts
    # (before, check verified it with -n 4 and said OK of a module no rank can run).
    assert main(["check", unopt, "-n", "4", "--no-deadlock-check"]) == 2
    assert "the module is not partitioned" in capsys.readouterr().err
    assert main(["check", PSUM, "-n", "3"]) == 2
    assert "num_partitions=4, which does not divide the 3 devices" in capsys.readouterr().err
    # The run's counts where the header has none, as `xladist run` takes them.
    permute = tmp_path / "permute.hlo"
    permute.write_text(PERMUTE)
    assert main(["check", str(permute), "-n", "2", "--no-deadlock-check"]) == 2
    assert "--num-partitions" in capsys.readouterr().err
    assert main(["check", str(permute), "-n", "2", "--num-partitions", "2",
                 "--no-deadlock-check"]) == 0


class _FakeReport:
    def __init__(self, ok):
        self.ok = ok
        self.errors = [] if ok else ["device 0 waits in all-reduce %ar; device 1 never joins"]
        self.warnings = []

    def __str__(self):
        return "deadlock check of m: " + ("proven" if self.ok else "1 problem(s) found")


def test_deadlock_problem_exits_1(monkeypatch, capsys):
    calls = []

    def fake_check(module, num_devices, strict=False, budget=None):
        calls.append((module.name, num_devices, strict))
        return _FakeReport(ok=False)

    monkeypatch.setattr(deadlock, "check_module", fake_check)
    assert main(["check", PSUM]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL: jit_psum_basic") and "device 1 never joins" in out
    assert calls == [("jit_psum_basic", 4, False)]


def test_unreadable_file_is_invalid_input(capsys):
    assert main(["check", "/no/such/module.hlo"]) == 2
    assert "FILE /no/such/module.hlo: does not exist" in capsys.readouterr().err
