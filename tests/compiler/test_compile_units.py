"""A program compiled as units (compiler/units.py), in helper processes (compile_pool.py),
with the cheaper pipeline where its IR allows it, computes what one LLVM module of the
same IR compiled with the exact pipeline computes (how every program was compiled before
units existed; since float reductions fix their own order, codegen/lanes.py, the IR is
not the one of those days: the reference here is today's IR through the old compile).

The reference is built here from the same kernels: `CpuProgram.llvm_ir()` (the whole
program as one module) through `jit.compile_ir` (O3 with loop unrolling). Two checks:
  * compiled with the exact pipeline, every function of every unit is the reference's
    machine code byte for byte (LLVM optimizes functions one by one);
  * compiled as `xladist.compile` does (helpers on, mixed pipelines), the corpus cases'
    outputs are bit-identical to the reference program's on their recorded inputs (units
    without fast-math flags get no loop unrolling, which must change no result bit);
  * no unit carries fast-math flags, so only libm calls (and fmuladd on a CPU without
    FMA) keep a unit on the exact pipeline.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import xladist
from xladist.compiler import compile_pool, elf, jit
from xladist.compiler.program import CpuExecutable, CpuProgram
from xladist.compiler.target import Target, host_target
from xladist.compiler.units import program_units

from tests import corpus_util as cu

# Reductions (float sums in lanes), transcendentals, training steps, native loops, f16/bf16/f8.
# The first two run in the fast tier, the others are slow (seconds each: docs/testing.md).
CASES = ["mlp_adam_step", "reduce_fold_order", "attention_adam_step", "convnet_sgd_step",
         "nn_functions", "transcendental_edges", "scan_grad_rnn", "nested_control",
         "narrow_floats", "complex_arith", "float_bits_edges", "special_igamma"]
ZOO = cu.CORPUS / "single_zoo"


def _cases(names):
    return [n if i < 2 else pytest.param(n, marks=pytest.mark.slow)
            for i, n in enumerate(names)]


@pytest.fixture
def parallel(monkeypatch):
    """Two processes (the helper started and ready), helpers for any number of units, no
    kernel cache."""
    monkeypatch.setenv(compile_pool.ENV, "2")
    monkeypatch.setattr(compile_pool, "MIN_UNITS", 1)
    monkeypatch.setenv("XLADIST_CACHE_DIR", "off")
    assert compile_pool.start_helpers(1, wait=60) == 1


def _module(case: str):
    return xladist.load_hlo(ZOO / case / "module.optimized.hlo")


@pytest.mark.parametrize("case", _cases(CASES[:7]))
def test_units_hold_the_machine_code_of_one_module(case):
    prog = CpuProgram(_module(case), compile_code=False)
    whole = elf.function_bytes(jit.compile_ir(prog.llvm_ir()))
    units = program_units(prog.builder)
    blob = jit.compile_units(units, exact=True)
    seen = {}
    for obj in jit.unpack_objects(blob):
        seen.update(elf.function_bytes(obj))
    kernels = {k.name for k in prog.builder.kernels}
    assert kernels <= set(seen)
    assert set(seen) <= set(whole)
    for name, code in seen.items():
        assert code == whole[name], f"{case}: {name} compiled alone differs"


def _outputs(exe, args) -> list[bytes]:
    return [np.ascontiguousarray(np.asarray(v)).tobytes() for v in exe(*args)]


@pytest.mark.parametrize("case", _cases(CASES))
def test_results_are_bitwise_those_of_one_module(case, parallel):
    module = _module(case)
    args = cu.inputs(ZOO / case, module)
    new = xladist.compile(module)
    stats = new.program.compile_stats
    assert stats["units"] >= 1 and stats["processes"] == 2, stats
    prog = CpuProgram(module, compile_code=False)
    old = CpuExecutable(module, code=jit.compile_ir(prog.llvm_ir()),
                        fingerprint=prog.fingerprint)
    assert _outputs(new, args) == _outputs(old, args)


@pytest.mark.parametrize("case", _cases(CASES[:3]))
def test_no_unit_keeps_the_exact_pipeline_for_fast_math(case):
    prog = CpuProgram(_module(case), compile_code=False)
    units = program_units(prog.builder)
    flagged = [u.name for u in units if compile_pool._FAST_MATH.search(u.text())]
    assert not flagged
    # The training steps' reductions (bias gradients, softmax sums) take the fast pipeline.
    assert not all(compile_pool.pipeline_exact(u.text(), host_target()) for u in units)


def test_helpers_make_the_objects_this_process_makes(parallel, monkeypatch):
    prog = CpuProgram(_module("mlp_adam_step"), compile_code=False)
    stats: dict = {}
    both = jit.compile_units(program_units(prog.builder), stats=stats)
    assert stats["helpers"] >= 1 and stats["processes"] == 2, stats
    monkeypatch.setenv(compile_pool.ENV, "1")
    alone: dict = {}
    assert jit.compile_units(program_units(prog.builder), stats=alone) == both
    assert alone["helpers"] == 0 and alone["processes"] == 1


def test_a_helper_that_died_idle_is_replaced(parallel):
    (helper,) = compile_pool._helpers(1, 1)
    os.kill(helper.proc.pid, signal.SIGKILL)
    helper.proc.wait()
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    text = ("HloModule m\nENTRY e {\n x = f32[64] parameter(0)\n t = f32[64] tanh(x)\n"
            " e = f32[64] exponential(t)\n ROOT r = f32[64] sine(e)\n}\n")
    got = xladist.compile(xladist.parse_hlo(text))(x)[0]
    np.testing.assert_allclose(got, np.sin(np.exp(np.tanh(x))), rtol=2e-6)


def test_ctrl_c_at_the_terminal_leaves_a_helper_to_the_process_that_started_it(parallel):
    (helper,) = compile_pool._helpers(1, 1)
    os.kill(helper.proc.pid, signal.SIGINT)  # what the terminal sends the process group
    time.sleep(0.5)
    assert helper.proc.poll() is None
    prog = CpuProgram(_module("mlp_adam_step"), compile_code=False)
    stats: dict = {}
    jit.compile_units(program_units(prog.builder), stats=stats)
    assert stats["helpers"] >= 1 and compile_pool._helpers(1, 1) == [helper]


def test_llvm_errors_name_the_unit_whichever_process_had_it(parallel):
    target = host_target()
    good = str(CpuProgram(xladist.parse_hlo(
        "HloModule m\nENTRY e {\n x = f32[8] parameter(0)\n ROOT n = f32[8] negate(x)\n}\n"),
        compile_code=False).llvm_ir())
    jobs = [compile_pool.Job(f"unit{i}", good, False) for i in range(6)]
    jobs[3] = compile_pool.Job("the broken unit", "define void @f( {", False)
    for _ in range(3):  # the broken one lands on either process
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError, match="the broken unit"):
            compile_pool.compile_jobs(jobs, target)
        assert time.perf_counter() - t0 < 60


def test_which_units_keep_the_exact_pipeline():
    fma = Target("x86_64-unknown-linux-gnu", "znver3", "+avx2,+fma")
    no_fma = Target("x86_64-unknown-linux-gnu", "x86-64", "")
    plain = "define void @k(ptr %p) {\n  %x = fadd float 1.0, 2.0\n  ret void\n}\n"
    assert not compile_pool.pipeline_exact(plain, fma)
    assert compile_pool.pipeline_exact(plain.replace("fadd", "fadd reassoc nsz"), fma)
    assert compile_pool.pipeline_exact(plain + "declare float @erff(float)\n", fma)
    assert not compile_pool.pipeline_exact(
        plain + "declare float @llvm.fabs.f32(float)\n", fma)
    fmuladd = plain + "declare float @llvm.fmuladd.f32(float, float, float)\n"
    assert not compile_pool.pipeline_exact(fmuladd, fma)
    assert compile_pool.pipeline_exact(fmuladd, no_fma)


def test_code_blobs_round_trip_and_damage_is_refused():
    objs = [b"\x7fELF one", b"\x7fELF two", b""]
    blob = jit.pack_objects(objs)
    assert jit.unpack_objects(blob) == objs
    assert jit.unpack_objects(b"\x7fELF single") == [b"\x7fELF single"]
    for bad in (blob[:-1], blob + b"x", b"random bytes", blob[:10]):
        with pytest.raises(ValueError):
            jit.unpack_objects(bad)
