"""A custom-call whose target nobody registered: `xladist check` warns with the message
`xladist run` refuses it with (semantics/custom_calls.check_registered, the backends' own
message), and `xladist run` refuses it before starting any rank. A target the process registered passes.
(Registration made by the ranks' own script under a bare mpiexec: tests/runtime/test_faults.py.)"""

from __future__ import annotations

import json

import numpy as np

from xladist.cli.check import check_file
from xladist.semantics.custom_calls import CUSTOM_CALLS, register_custom_call
from tests.cli_util import probe_mpiexec, xladist_cli

MODULE = """HloModule m

ENTRY e {
  p = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(p), custom_call_target="NoSuchTarget"
}
"""


def _run_error(tmp_path) -> str:
    """What a one-device `xladist run` says of the module, without `xladist run: error: `:
    the reference (in a fresh process, whose registry has no other test's targets; the
    backend said the same as it compiled before the run checked first)."""
    np.savez(tmp_path / "in1.npz", arg0=np.ones(4, np.float32))
    proc = xladist_cli("run", tmp_path / "cc.hlo", "--inputs", tmp_path / "in1.npz")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    prefix = "xladist run: error: "
    assert proc.stderr.startswith(prefix), proc.stderr
    return proc.stderr[len(prefix):].strip()


def test_check_warns_of_an_unregistered_target_with_the_runs_message(tmp_path):
    """The module is valid HLO (an unoptimized JAX dump carries the partitioner's own
    targets), so `check` verifies it and warns -- exit 0, 1 under --strict -- with the
    message `xladist run` refuses it with."""
    (tmp_path / "cc.hlo").write_text(MODULE)
    proc = xladist_cli("check", tmp_path / "cc.hlo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("OK: m")
    assert proc.stderr.strip() == \
        f"warning: xladist run refuses this module: {_run_error(tmp_path)}"
    assert "custom-call target 'NoSuchTarget' is not registered" in proc.stderr
    assert xladist_cli("check", tmp_path / "cc.hlo", "--strict").returncode == 1
    js = xladist_cli("check", tmp_path / "cc.hlo", "--json")
    assert js.returncode == 0
    result = json.loads(js.stdout)
    assert result["verified"] is True
    assert any("'NoSuchTarget' is not registered" in w for w in result["warnings"])


def test_run_refuses_an_unregistered_target_before_starting_any_rank(tmp_path):
    probe, calls = probe_mpiexec(tmp_path)
    (tmp_path / "cc.hlo").write_text(MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    proc = xladist_cli("run", tmp_path / "cc.hlo", "-n", "2", "--inputs", tmp_path / "in.npz",
                       "--mpiexec", probe)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"xladist run: error: {_run_error(tmp_path)}"
    assert not calls.exists()


def test_a_target_this_process_registered_passes_the_check(tmp_path):
    (tmp_path / "cc.hlo").write_text(MODULE)
    assert "NoSuchTarget" not in CUSTOM_CALLS
    register_custom_call("NoSuchTarget", lambda instr, args: args[0])
    try:
        result = check_file(str(tmp_path / "cc.hlo"))
    finally:
        del CUSTOM_CALLS["NoSuchTarget"]
    assert result["verified"] is True and result["warnings"] == []


def test_the_refusal_names_the_documented_function_and_a_short_list(tmp_path):
    """The message tells the reader to call the registration function the docs name
    (docs/running.md: xladist.interpreter.register_custom_call, which exists), and lists the
    known targets readably: jax's 60 LAPACK targets as one pattern, not each by name."""
    import xladist.interpreter
    from tests.paths import ROOT
    (tmp_path / "cc.hlo").write_text(MODULE)
    msg = _run_error(tmp_path)
    documented = "xladist.interpreter.register_custom_call"
    assert documented in (ROOT / "docs" / "running.md").read_text()
    assert callable(xladist.interpreter.register_custom_call)
    assert f"register one with {documented}:" in msg, msg
    known = msg.split("(known: ", 1)[1].split(")", 1)[0]
    assert "lapack_spotrf_ffi" not in known and "lapack_<s|d|c|z><routine>_ffi" in known, known
    assert "TopK" in known and "Sharding" in known
    assert len(msg) < 1000, msg


# jax's text of jax.shard_map(lambda a: lax.ppermute(a, "d", [(0, 1), (1, 0)]),
# in_specs=P("d"), out_specs=P("d")) on 2 devices, before partitioning: the boundary changes
# the shape, and the permute names partition 1.
UNPARTITIONED = """HloModule jit_f, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

body.1 {
  a.1 = f32[4]{0} parameter(0)
  ROOT ppermute.1 = f32[4]{0} collective-permute(a.1), channel_id=1, source_target_pairs={{0,1},{1,0}}
}

ENTRY main.3 {
  x.1 = f32[8]{0} parameter(0)
  shard_map.5 = f32[4]{0} custom-call(x.1), custom_call_target="xla.sdy.GlobalToLocalShape", custom_call_has_side_effect=true
  shard_map.6 = f32[4]{0} call(shard_map.5), to_apply=body.1
  ROOT shard_map.7 = f32[8]{0} custom-call(shard_map.6), custom_call_target="xla.sdy.LocalToGlobalShape", custom_call_has_side_effect=true
}
"""


def _says_unpartitioned(message: str) -> None:
    assert "custom-call shard_map.5 (xla.sdy.GlobalToLocalShape)" in message, message
    assert "changes the shape f32[8]{0} -> f32[4]{0}" in message, message
    assert "not partitioned" in message and ".compile().as_text()" in message, message
    assert "--num-partitions" not in message, message


def test_run_refuses_a_module_before_partitioning_before_any_rank_starts(tmp_path):
    """A shard_map over several devices in jax's text before partitioning was first refused
    by the verifier asking for --num-partitions (its permute names partition 1); given it,
    every rank started and failed at the boundary. Now `xladist run` and `xladist.run`
    refuse it once, before the verifier and any launch, saying what to run instead."""
    import pytest

    import xladist
    from xladist.errors import UnsupportedError
    probe, calls = probe_mpiexec(tmp_path)
    (tmp_path / "sm.hlo").write_text(UNPARTITIONED)
    x = np.arange(8, dtype=np.float32)
    np.savez(tmp_path / "in.npz", arg0=np.stack([x, x]))
    for extra in ([], ["--num-partitions", "2"]):
        proc = xladist_cli("run", tmp_path / "sm.hlo", "-n", "2", "--inputs", tmp_path / "in.npz",
                           "--mpiexec", probe, *extra)
        assert proc.returncode == 2, proc.stderr
        _says_unpartitioned(proc.stderr)
    with pytest.raises(UnsupportedError) as e:
        xladist.run(xladist.parse_hlo(UNPARTITIONED), [np.stack([x, x])], n=2, mpiexec=str(probe))
    _says_unpartitioned(str(e.value))
    assert not calls.exists()


def test_every_entry_that_verifies_refuses_a_module_before_partitioning_as_run_does(tmp_path):
    """`xladist check` on jax's text before partitioning verified it first, and the verifier
    (the permute names partition 1) asked for --num-partitions; given it, check said OK
    (proven deadlock-free) of a module `xladist run` refuses. `explain`, `aot`, `compile`,
    xladist.verify and xladist.compile asked for the same counts, which they cannot even
    take. Now each refuses it in `xladist run`'s words, before the verifier (exit 2)."""
    import pytest

    import xladist
    from xladist.errors import UnsupportedError
    (tmp_path / "sm.hlo").write_text(UNPARTITIONED)
    for cmd in (["check"], ["check", "-n", "2", "--num-partitions", "2"], ["explain"],
                ["aot", "-o", tmp_path / "aot", "--name", "f"],
                ["compile", "-o", tmp_path / "sm.xlx"]):
        proc = xladist_cli(cmd[0], tmp_path / "sm.hlo", *cmd[1:])
        assert proc.returncode == 2, (cmd, proc.stdout, proc.stderr)
        assert proc.stdout == "", (cmd, proc.stdout)
        _says_unpartitioned(proc.stderr)
    js = xladist_cli("check", tmp_path / "sm.hlo", "--json")
    assert js.returncode == 2 and json.loads(js.stdout)["error_type"] == "UnsupportedError"
    _says_unpartitioned(json.loads(js.stdout)["error"])
    module = xladist.parse_hlo(UNPARTITIONED)
    for call in (xladist.verify, xladist.compile):
        with pytest.raises(UnsupportedError) as e:
            call(module)
        _says_unpartitioned(str(e.value))
