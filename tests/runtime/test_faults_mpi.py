"""Bad input to `xladist run -n N`: refused with exit 2 and a message naming what is wrong,
before any rank starts.

Each case runs the CLI in a subprocess with `--timeout 5` and a hard subprocess timeout, as a
user would. "Before any rank starts" is checked by the shape of the report: ranks prefix
every error with `rank R (replica I, partition J)` and each rank would print it, so a refusal
from the launching process is one message without a rank. (Hangs and mid-program failures
of running ranks are covered by the watchdog tests.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.cli_util import xladist_cli

HARD_TIMEOUT_S = 60

MODULE = """HloModule faults, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4], counts: s32[2,3]) -> (f32[4], s32[2,3]) {
  %x = f32[4]{0} parameter(0)
  %counts = s32[2,3]{1,0} parameter(1)
  %s = f32[4]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%add
  ROOT %t = (f32[4]{0}, s32[2,3]{1,0}) tuple(%s, %counts)
}
"""

GOOD_INPUTS = {"arg0": np.arange(8, dtype=np.float32).reshape(2, 4),
               "arg1": np.arange(12, dtype=np.int32).reshape(2, 2, 3)}


def xladist_run(tmp_path: Path, module_text: str, n: int, inputs: dict | None,
                *extra: str) -> subprocess.CompletedProcess:
    module = tmp_path / "module.hlo"
    module.write_text(module_text)
    cmd = ["run", module, "-n", n, "--timeout", "5", "--outputs", tmp_path / "out.npz", *extra]
    if inputs is not None:
        np.savez(tmp_path / "in.npz", **inputs)
        cmd += ["--inputs", tmp_path / "in.npz"]
    return xladist_cli(*cmd, cwd=tmp_path, timeout=HARD_TIMEOUT_S)


def assert_refused(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 2, one error line from the launcher (no rank ran), naming every fragment."""
    err = proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}, expected 2:\n{err}"
    assert "Traceback" not in err, err
    assert err.count("error:") == 1, f"expected one report, before any rank started:\n{err}"
    assert "rank " not in err, f"a rank started:\n{err}"
    for f in fragments:
        assert f in err, f"{f!r} not in the error:\n{err}"
    return err


@pytest.mark.slow
def test_good_inputs_run(tmp_path):
    """The baseline the refusals below differ from: the same module and inputs work."""
    proc = xladist_run(tmp_path, MODULE, 2, GOOD_INPUTS)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["out0"], np.stack([GOOD_INPUTS["arg0"].sum(0)] * 2))
        np.testing.assert_array_equal(out["out1"], GOOD_INPUTS["arg1"])


@pytest.mark.parametrize("case,inputs,fragments", [
    ("missing", {"arg0": GOOD_INPUTS["arg0"]}, ["arg1", "parameter 1", "counts"]),
    ("extra", {**GOOD_INPUTS, "arg2": np.ones(3)}, ["arg2", "does not take"]),
    ("wrong-dims", {**GOOD_INPUTS, "arg0": np.ones((2, 5), np.float32)},
     ["arg0", "parameter 0", "x: f32[4]", "[2, 4]", "[2, 5]"]),
    ("no-device-axis", {**GOOD_INPUTS, "arg1": np.ones((2, 3), np.int32)},
     ["arg1", "counts", "[2, 2, 3]", "device axis"]),
    ("wrong-type", {**GOOD_INPUTS, "arg0": np.ones((2, 4), np.float64)},
     ["arg0", "x: f32[4]", "float32", "float64"]),
    ("wrong-int-type", {**GOOD_INPUTS, "arg1": np.ones((2, 2, 3), np.int64)},
     ["arg1", "counts", "int32", "int64"]),
])
@pytest.mark.slow
def test_bad_inputs_are_refused_naming_the_parameter(tmp_path, case, inputs, fragments):
    proc = xladist_run(tmp_path, MODULE, 2, inputs)
    assert_refused(proc, *fragments)
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.slow
def test_missing_inputs_file_argument(tmp_path):
    proc = xladist_run(tmp_path, MODULE, 2, None)
    assert_refused(proc, "--inputs", "arg0")


@pytest.mark.parametrize("n", [1, 3])
def test_device_count_must_match_the_module(tmp_path, n):
    inputs = {k: np.repeat(v[:1], n, axis=0) for k, v in GOOD_INPUTS.items()}
    proc = xladist_run(tmp_path, MODULE, n, inputs)
    assert_refused(proc, "2 devices", "num_partitions=2", "-n 2")


def test_partitions_only_header_on_4_devices_is_2_replicas(tmp_path):
    """A header with only num_partitions=2 run with -n 4 is 2 replicas x 2 partitions (the
    header fixes the partitions, the run gives the rest: docs/xla-compatibility.md); this
    module's one flattened-id group {0,1} then leaves devices 2 and 3 out, and the verifier
    says so with the counts it used."""
    inputs = {k: np.repeat(v[:1], 4, axis=0) for k, v in GOOD_INPUTS.items()}
    proc = xladist_run(tmp_path, MODULE, 4, inputs)
    assert_refused(proc, "instruction `%s = f32[4]{0} ", "replica_count=2, num_partitions=2", "missing [2, 3]")


@pytest.mark.slow
def test_partitions_only_header_runs_as_replicas_of_partitions(tmp_path):
    """The same header with groups for 2 x 2 devices runs: flattened ids f = r*2 + p, {0,1}
    and {2,3}; device d holds replica d % 2 of partition d // 2 (XLA's default assignment), so
    the groups are devices {0,2} and {1,3}."""
    text = MODULE.replace("replica_groups={{0,1}}", "replica_groups={{0,1},{2,3}}")
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    counts = np.arange(24, dtype=np.int32).reshape(4, 2, 3)
    proc = xladist_run(tmp_path, text, 4, {"arg0": x, "arg1": counts})
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["out0"], np.stack([x[0] + x[2], x[1] + x[3]] * 2))


def test_device_count_must_match_replicas_times_partitions(tmp_path):
    text = MODULE.replace("num_partitions=2", "replica_count=2, num_partitions=2").replace(
        "replica_groups={{0,1}}", "replica_groups={{0,1,2,3}}")
    proc = xladist_run(tmp_path, text, 2, GOOD_INPUTS)
    assert_refused(proc, "4 devices", "replica_count=2", "-n 4")


# Collectives the verifier refuses (docs/reference/collective-semantics.md B.9, C.14): named instruction.
BAD_COLLECTIVES = {
    "group-misses-a-device": (
        "replica_groups={{0,1}}", "replica_groups={{0}}", ["instruction `%s = f32[4]{0} all-reduce(%x)", "missing [1]"]),
    "device-in-two-groups": (
        "replica_groups={{0,1}}", "replica_groups={{0,1},{1}}",
        ["instruction `%s = f32[4]{0} all-reduce(%x)", "id 1 appears twice"]),
    "id-out-of-range": (
        "replica_groups={{0,1}}", "replica_groups={{0,2}}", ["instruction `%s = f32[4]{0} all-reduce(%x)", "2 is out of range"]),
}


@pytest.mark.parametrize("case", list(BAD_COLLECTIVES))
@pytest.mark.slow
def test_replica_groups_that_do_not_cover_the_devices(tmp_path, case):
    old, new, fragments = BAD_COLLECTIVES[case]
    proc = xladist_run(tmp_path, MODULE.replace(old, new), 2, GOOD_INPUTS)
    assert_refused(proc, new.split("=", 1)[1], *fragments)


@pytest.mark.slow
def test_unequal_all_gather_groups(tmp_path):
    text = MODULE.replace("num_partitions=2", "num_partitions=4").replace(
        "%s = f32[4]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, "
        "use_global_device_ids=true, to_apply=%add",
        "%g = f32[8]{0} all-gather(%x), channel_id=1, replica_groups={{0,1},{2},{3}}, "
        "dimensions={0}, use_global_device_ids=true\n  %s = f32[4]{0} slice(%g), slice={[0:4]}")
    inputs = {k: np.repeat(v[:1], 4, axis=0) for k, v in GOOD_INPUTS.items()}
    proc = xladist_run(tmp_path, text, 4, inputs)
    assert_refused(proc, "instruction `%g = f32[8]{0} all-gather(%x)", "same size", "[2, 1, 1]")


@pytest.mark.parametrize("pairs,dup", [("{{0,1},{1,1}}", "target"),
                                       ("{{0,1},{0,0}}", "source")])
def test_duplicate_permute_targets_or_sources(tmp_path, pairs, dup):
    text = MODULE.replace(
        "%s = f32[4]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, "
        "use_global_device_ids=true, to_apply=%add",
        f"%s = f32[4]{{0}} collective-permute(%x), channel_id=1, source_target_pairs={pairs}")
    proc = xladist_run(tmp_path, text, 2, GOOD_INPUTS)
    assert_refused(proc, "instruction `%s = f32[4]{0} ", f"source_target_pairs={pairs}",
                   f"{dup} {1 if dup == 'target' else 0} appears more than once")


def test_python_api_refuses_bad_inputs_before_spawning():
    """xladist.run from Python: the same refusal, raised in the caller (no job started)."""
    import xladist
    from xladist.errors import InputError
    with pytest.raises(InputError, match=r"argument 0 .*x: f32\[4\].*\[2, 4\].*\[2, 5\]"):
        xladist.run(MODULE, [np.ones((2, 5), np.float32), GOOD_INPUTS["arg1"]], n=2)
    with pytest.raises(InputError, match="run it with n=2"):
        xladist.run(MODULE, [GOOD_INPUTS["arg0"], GOOD_INPUTS["arg1"]], n=3)
