"""Resources that must not grow with the number of compiles in one process: a user's test
suite or notebook compiles thousands of small modules (found by measuring RSS over 2,000
compiles of distinct shapes, docs/compile.md)."""

from __future__ import annotations

import gc

import llvmlite.binding as llvm
import pytest

from xladist.compiler import llvm_worker
from xladist.compiler.target import host_target

_IR = """
define void @k(i8* %p) {
entry:
  %a = bitcast i8* %p to [{n} x float]*
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  %q = getelementptr [{n} x float], [{n} x float]* %a, i64 0, i64 %i
  %v = load float, float* %q
  %w = fmul float %v, 2.0
  store float %w, float* %q
  %j = add i64 %i, 1
  %c = icmp ult i64 %j, {n}
  br i1 %c, label %loop, label %exit
exit:
  ret void
}
"""


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def test_optimize_frees_its_module_pass_manager(monkeypatch):
    """llvmlite's ModulePassManager never frees itself (its __del__ reaches ObjectRef's empty
    `_dispose`); llvm_worker.optimize must: every pass manager it builds is closed when it
    returns."""
    built = []
    real = llvm.PassBuilder.getModulePassManager

    def spy(self):
        mpm = real(self)
        built.append(mpm)
        return mpm

    monkeypatch.setattr(llvm.PassBuilder, "getModulePassManager", spy)
    t = host_target()
    tm = llvm_worker.target_machine(t.triple, t.cpu, t.features)
    for exact in (True, False):
        llvm_worker.optimize(_IR.replace("{n}", "7"), tm, t.triple, exact)
    assert len(built) == 2
    assert all(mpm.closed for mpm in built)


def test_compile_unit_builds_one_pass_builder_per_target_and_pipeline(monkeypatch):
    """llvmlite's PassBuilder keeps ~1.7 KB of native memory after it is freed: one per
    compiled unit grew a process by ~8 KB for every small module it compiled (~10 KB a
    compile over 1,200 distinct modules of a dot, a loop and a reduce). compile_unit makes
    one per target and pipeline, whatever the number of units."""
    built = []
    real = llvm.create_pass_builder

    def spy(tm, pto):
        built.append(pto.loop_unrolling)
        return real(tm, pto)

    monkeypatch.setattr(llvm, "create_pass_builder", spy)
    t = host_target()
    for n in range(1, 41):
        for exact in (True, False):
            obj = llvm_worker.compile_unit(_IR.replace("{n}", str(n)), t.triple, t.cpu,
                                           t.features, exact=exact)
            assert obj
    assert len(built) <= 2, f"{len(built)} pass builders for 80 units"


def test_a_kept_pass_builder_emits_the_bits_a_fresh_one_does():
    """The pass builder compile_unit keeps gives every unit the object code a fresh
    target machine and pass builder give it (the pipelines are built anew for each unit)."""
    t = host_target()
    for n in (3, 8, 17, 64, 3):
        text = _IR.replace("{n}", str(n))
        for exact in (True, False):
            kept = llvm_worker.compile_unit(text, t.triple, t.cpu, t.features, exact=exact)
            tm = llvm_worker.target_machine(t.triple, t.cpu, t.features)
            fresh = tm.emit_object(llvm_worker.optimize(text, tm, t.triple, exact))
            assert kept == fresh, (n, exact)


def test_compile_unit_parses_each_unit_in_a_context_it_frees(monkeypatch):
    """LLVM keeps every type and constant of a context until the context is freed: units
    parsed into llvmlite's global context left ~1.3-2 KB each for good (distinct shapes).
    Every unit gets a context of its own, freed once its object is out."""
    made, parsed = [], []
    real_create, real_parse = llvm.create_context, llvm.parse_assembly

    def create():
        made.append(real_create())
        return made[-1]

    def parse(text, context=None):
        parsed.append(context)
        return real_parse(text, context)

    monkeypatch.setattr(llvm, "create_context", create)
    monkeypatch.setattr(llvm, "parse_assembly", parse)
    t = host_target()
    for n in range(1, 21):
        assert llvm_worker.compile_unit(_IR.replace("{n}", str(n)), t.triple, t.cpu,
                                        t.features, exact=False)
    assert len(parsed) == 20
    assert all(c is not None and not isinstance(c, llvm.context.GlobalContextRef)
               for c in parsed), "a unit parsed into the global context"
    assert len({id(c) for c in parsed}) == 20 and all(c.closed for c in made)


@pytest.mark.slow
def test_compiling_many_units_keeps_memory_flat():
    """RSS over 400 compiled units of distinct shapes. Before: ~70 KB of native memory per
    unit (28 MB here; 150 MB for 2,000 small modules through xladist.compile), then ~1.5 KB
    (llvmlite's PassBuilder keeps a little: one per unit), now ~0.1 KB (one pass builder per
    target and pipeline). The bound is generous for a shared machine."""
    t = host_target()
    for n in range(1, 51):  # LLVM's one-time allocations
        llvm_worker.compile_unit(_IR.replace("{n}", str(n)), t.triple, t.cpu, t.features,
                                 exact=False)
    gc.collect()
    before = _rss_kib()
    for n in range(51, 451):
        llvm_worker.compile_unit(_IR.replace("{n}", str(n)), t.triple, t.cpu, t.features,
                                 exact=False)
    gc.collect()
    grown = _rss_kib() - before
    assert grown < 8 * 1024, f"RSS grew {grown} KiB over 400 compiled units"
