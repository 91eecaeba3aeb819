"""XLADIST_* variables with values they do not take: one line naming the variable, exit 2,
before any rank starts (xladist/environment.py)."""

from __future__ import annotations

import platform

import pytest

from tests.cli_util import ROOT, xladist_cli
from xladist import environment
from xladist.errors import InputError
from xladist.runtime import launcher

CASE = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"


# Before: XLADIST_THREADS=abc and XLADIST_HEARTBEAT_TIMEOUT=abc were ignored (the run went
# ahead, exit 0); XLADIST_VECTOR_WIDTH=abc printed a compile thread's traceback and
# "rank 0: internal error: ValueError"; XLADIST_COORD_PORT=abc the CLI's own traceback.
@pytest.mark.parametrize("name, value, what", [
    ("XLADIST_THREADS", "abc", "a whole number of threads >= 1"),
    ("XLADIST_VECTOR_WIDTH", "abc", "a vector width in bits"),
    ("XLADIST_COORD_PORT", "abc", "a TCP port number"),
    ("XLADIST_HEARTBEAT_TIMEOUT", "abc", "a number of seconds >= 0"),
])
def test_run_refuses_a_bad_variable_before_launch(name, value, what):
    proc = xladist_cli("run", CASE / "module.hlo", "-n", 4, "--backend", "interpreter",
                       "--inputs", CASE / "inputs.npz", "-q", **{name: value})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"xladist run: error: environment variable {name}='{value}': "
                           f"expected {what}")


@pytest.mark.parametrize("name, value", [
    ("XLADIST_THREADS", "0"), ("XLADIST_COMPILE_JOBS", "1.5"), ("XLADIST_VECTOR_WIDTH", "-8"),
    ("XLADIST_COLLECTIVE_TIMEOUT", "nan"), ("XLADIST_REGISTER_TIMEOUT", "-1"),
    ("XLADIST_COORD_PORT", "65536"),
])
def test_every_launch_checks_the_variables(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(InputError, match=f"environment variable {name}='{value}'"):
        environment.check()
    # every launch (run, demo, bench, a Cluster's ranks) builds the ranks' environment here
    with pytest.raises(InputError, match=f"environment variable {name}="):
        launcher.rank_environment()


def test_good_values_and_defaults(monkeypatch):
    monkeypatch.setenv("XLADIST_COLLECTIVE_TIMEOUT", " 2.5 ")
    monkeypatch.setenv("XLADIST_COORD_PORT", "0")
    monkeypatch.delenv("XLADIST_THREADS", raising=False)
    assert environment.setting("XLADIST_COLLECTIVE_TIMEOUT", 300.0) == 2.5
    assert environment.setting("XLADIST_COORD_PORT", 7) == 0
    assert environment.setting("XLADIST_THREADS", None) is None
    environment.check()


# Before: LLVM warned "'bogus9' is not a recognized processor for this target" once per
# target machine, then aborted the process: "LLVM ERROR: 64-bit code requested on a
# subtarget that doesn't support it!" (exit 1, no word from xladist).
def test_an_unknown_target_cpu_is_named():
    proc = xladist_cli("run", CASE / "module.hlo", "-n", 4, "--inputs", CASE / "inputs.npz",
                       "-q", XLADIST_TARGET_CPU="bogus9")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("xladist run: error: XLADIST_TARGET_CPU 'bogus9' is not a CPU "
                           "LLVM knows for ")


# Before: a CPU LLVM knows but this host cannot run (bdver2's XOP rotates on anything but
# AMD's Bulldozer family) compiled, and its first kernel killed each rank by SIGILL.
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU names")
def test_a_target_cpu_this_host_cannot_run_is_named(tmp_path):
    import llvmlite.binding as llvm
    if llvm.get_host_cpu_features().get("xop", False):
        pytest.skip("this host runs bdver2's code")
    proc = xladist_cli("run", CASE / "module.hlo", "-n", 4, "--inputs", CASE / "inputs.npz",
                       "-q", XLADIST_TARGET_CPU="bdver2", XLADIST_CACHE_DIR=str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("xladist run: error: XLADIST_TARGET_CPU 'bdver2' names a CPU "
                           "whose code this host cannot run"), line


def test_aot_refuses_an_unknown_target_cpu(tmp_path):
    proc = xladist_cli("aot", ROOT / "benchmarks" / "mlp_train_step.hlo", "--name", "step",
                       "-o", tmp_path, "--target-cpu", "bogus9")
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("xladist aot: error: --target-cpu 'bogus9' is not a CPU LLVM knows")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("triple", ["aarch64-unknown-linux-gnu", "riscv64-unknown-linux-gnu"])
def test_an_unknown_cpu_for_another_triple_is_offered_that_architectures_names(triple):
    # Before: `--target-cpu x86-64 --triple aarch64-...` was refused "(for example x86-64,
    # x86-64-v3, haswell, znver3 ...)": the very name refused, and CPUs of another ISA.
    from xladist.compiler.aot.program import target_machine
    from xladist.compiler.target import _known_cpu
    with pytest.raises(InputError) as info:
        target_machine("x86-64", triple)
    offered = str(info.value).split("for example ")[1].split(";")[0].split(", ")
    assert "x86-64" not in offered and all(_known_cpu(triple, cpu) for cpu in offered)
    assert f"-mtriple={triple}" in str(info.value)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 CPU names")
def test_known_cpus_pass(monkeypatch):
    from xladist.compiler.target import check_cpu, host_target
    import llvmlite.binding as llvm
    for cpu in ("x86-64", "x86-64-v3", "haswell"):
        check_cpu(llvm.get_process_triple(), cpu, "test")
    monkeypatch.setenv("XLADIST_TARGET_CPU", "x86-64-v3")
    assert host_target().cpu == "x86-64-v3"
    launcher.check_environment()
    monkeypatch.setenv("XLADIST_TARGET_CPU", "nosuchcpu")
    with pytest.raises(InputError, match="XLADIST_TARGET_CPU 'nosuchcpu' is not a CPU"):
        launcher.rank_environment()


ADD = """HloModule add

ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] add(p, p)
}
"""


# Before: XLADIST_CACHE_DIR naming a file gave the right result (exit 0) and a
# KernelCacheWarning "kernel cache entry FILE/8c/....o cannot be read ([Errno 20] Not a
# directory ...)" for every kernel, from every process.
def test_a_cache_dir_that_is_a_file_is_one_error_before_launch(tmp_path):
    import numpy as np
    (tmp_path / "add.hlo").write_text(ADD)
    np.savez(tmp_path / "in.npz", arg0=np.ones(4, np.float32))
    cache = tmp_path / "cache"
    cache.write_text("")
    proc = xladist_cli("run", tmp_path / "add.hlo", "--inputs", tmp_path / "in.npz",
                       XLADIST_CACHE_DIR=str(cache))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == (f"xladist run: error: environment variable XLADIST_CACHE_DIR="
                           f"'{cache}': {cache} is a file, not a directory; name a directory "
                           f"(created when missing) or set XLADIST_CACHE_DIR=off to run "
                           f"without the kernel cache\n")


def test_the_cache_dir_must_be_able_to_be_a_directory(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path / "file" / "sub"))
    with pytest.raises(InputError, match=r"XLADIST_CACHE_DIR=.*file, a part of it, is a file"):
        environment.check()
    with pytest.raises(InputError, match="XLADIST_CACHE_DIR="):
        launcher.rank_environment()
    for fine in (tmp_path / "new" / "sub", tmp_path, "off", ""):
        monkeypatch.setenv("XLADIST_CACHE_DIR", str(fine))
        environment.check()
    assert not (tmp_path / "new").exists()  # checked, not created
