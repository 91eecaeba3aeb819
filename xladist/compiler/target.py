"""What code is generated for: the LLVM target (triple, CPU, features) of the host or of the
CPU named by `XLADIST_TARGET_CPU`, and the vector width the vectorizers may use. Every part
of it is in the kernel cache's key (`target_description`).

A job on several hosts compiles once, for a target every host runs (xladist/runtime/
hostinfo.py decides it from what the ranks report): `XLADIST_JOB_TARGET` ("cpu;features;
vector width", set by the runtime for the ranks and around the launcher's compile) then
overrides both, so every replica runs the same object code and computes the same bits."""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from functools import lru_cache

import llvmlite.binding as llvm

from ..environment import setting, target_cpu


@lru_cache(maxsize=1)
def init_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@dataclass(frozen=True)
class Target:
    """What code is generated for: LLVM triple, CPU name and feature string ("" = the
    CPU's own defaults)."""

    triple: str
    cpu: str
    features: str = ""

    def machine(self):
        """A fresh target machine (MCJIT takes ownership of the one it is given, so
        each engine gets its own)."""
        init_llvm()
        if self.triple != llvm.get_process_triple():
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features,
                                            opt=3, codemodel="jitdefault")


JOB_TARGET_ENV = "XLADIST_JOB_TARGET"


# A thread's own job target, over XLADIST_JOB_TARGET (job_target_for).
_thread = threading.local()


@contextlib.contextmanager
def job_target_for(text: str | None):
    """This thread compiles for `text` (job_target_text's form; None: this host's own
    target) inside the block, whatever XLADIST_JOB_TARGET says. The launching process
    compiles for a job's target in a background thread (runtime/compile_once.py) while
    its other threads -- a user's own compiles, another cluster's -- keep theirs. Setting
    the process's environment instead reached every thread at once, and two such blocks
    in two threads restored each other's value: a job target was left in the environment
    (a kept test cluster then saw its environment change and started again)."""
    old = getattr(_thread, "text", None)
    _thread.text = "" if text is None else text
    try:
        yield
    finally:
        _thread.text = old


def in_callers_target(fn):
    """fn as a callable that runs under the calling thread's job target (job_target_for),
    for another thread to run: a thread's own target is not inherited."""
    text = getattr(_thread, "text", None)
    if text is None:
        return fn

    def run():
        with job_target_for(text or None):
            return fn()
    return run


def _job_target() -> tuple[str, str, int | None] | None:
    """(cpu, features, vector width) of this thread's job target (job_target_for) or of
    XLADIST_JOB_TARGET, or None."""
    raw = getattr(_thread, "text", None)
    if raw is None:
        raw = os.environ.get(JOB_TARGET_ENV, "")
    raw = raw.strip()
    if not raw:
        return None
    cpu, features, width = (raw.split(";") + ["", ""])[:3]
    return cpu, features, int(width) if width else None


def job_target_text(cpu: str, features: str, width: int | None) -> str:
    """The XLADIST_JOB_TARGET value for a target (the inverse of `_job_target`)."""
    return f"{cpu};{features};{'' if width is None else width}"


def own_target() -> tuple[Target, int | None]:
    """This machine's target and vector width as the user set it up (the host, or
    XLADIST_TARGET_CPU), ignoring a job's choice: what a rank reports to the service."""
    init_llvm()
    with job_target_for(None):
        return host_target(), vector_width()


def host_target() -> Target:
    """The host, or the CPU named by `XLADIST_TARGET_CPU` (e.g. `x86-64` for the baseline
    every x86-64 runs, `haswell`): code for a subset of the host's features runs here,
    which is how the tests reproduce other users' machines. A job's XLADIST_JOB_TARGET
    comes first."""
    init_llvm()
    job = _job_target()
    if job is not None:
        return Target(llvm.get_process_triple(), job[0], job[1])
    cpu = target_cpu()
    if cpu is not None:
        check_cpu(llvm.get_process_triple(), cpu, "XLADIST_TARGET_CPU")
        check_runs_here(cpu, "XLADIST_TARGET_CPU")
        return Target(llvm.get_process_triple(), cpu, "")
    return Target(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                  llvm.get_host_cpu_features().flatten())


def check_cpu(triple: str, cpu: str, what: str) -> None:
    """InputError naming `what` unless LLVM knows `cpu` for `triple`. LLVM only warns on
    stderr about an unknown one and goes on with no features, and then aborts the whole
    process in code generation ("LLVM ERROR: 64-bit code requested on a subtarget that
    doesn't support it!"): so the warning is the test."""
    if not _known_cpu(triple, cpu):
        from ..errors import InputError
        raise InputError(f"{what} {cpu!r} is not a CPU LLVM knows for {triple} (for "
                         f"example x86-64, x86-64-v3, haswell, znver3; `llc -mcpu=help` "
                         f"lists them)")


def check_runs_here(cpu: str, what: str) -> None:
    """InputError naming `what` when this host cannot run code for `cpu` (a named CPU with
    instructions this one lacks: sapphirerapids on a Zen 4, bdver2's XOP anywhere else).
    Its kernels died by SIGILL at their first call, in every rank of the host."""
    if not _runs_here(llvm.get_process_triple(), cpu):
        from ..errors import InputError
        raise InputError(f"{what} {cpu!r} names a CPU whose code this host cannot run (a "
                         f"probe compiled for it stopped with an illegal instruction here, "
                         f"a {llvm.get_host_cpu_name()}); name one whose instructions this "
                         f"host has (x86-64, x86-64-v2, x86-64-v3, ... or `host`)")


# The probe: vector and scalar operations whose instructions LLVM picks by the CPU's
# features (FMA3 or FMA4, AVX to AVX-512 BW, XOP rotates, F16C or AVX512-FP16 half
# conversions, POPCNT/LZCNT/BMI), run in a child process that a SIGILL ends alone. It
# covers the instruction families xladist's kernels use, not every one a CPU has.
_PROBE_RUN = r"""
define i64 @probe(ptr %p) {
  %f = load <16 x float>, ptr %p, align 1
  %g = call <16 x float> @llvm.fma.v16f32(<16 x float> %f, <16 x float> %f, <16 x float> %f)
  %s = call <16 x float> @llvm.sqrt.v16f32(<16 x float> %g)
  store <16 x float> %s, ptr %p, align 1
  %dp = getelementptr i8, ptr %p, i64 64
  %d = load <8 x double>, ptr %dp, align 1
  %e = call <8 x double> @llvm.fma.v8f64(<8 x double> %d, <8 x double> %d, <8 x double> %d)
  store <8 x double> %e, ptr %dp, align 1
  %ip = getelementptr i8, ptr %p, i64 128
  %i = load <8 x i64>, ptr %ip, align 1
  %j = mul <8 x i64> %i, %i
  %k = call <8 x i64> @llvm.fshl.v8i64(<8 x i64> %j, <8 x i64> %j, <8 x i64> <i64 7, i64 7, i64 7, i64 7, i64 7, i64 7, i64 7, i64 7>)
  store <8 x i64> %k, ptr %ip, align 1
  %wp = getelementptr i8, ptr %p, i64 192
  %w = load <32 x i16>, ptr %wp, align 1
  %x = mul <32 x i16> %w, %w
  %y = call <32 x i16> @llvm.smax.v32i16(<32 x i16> %x, <32 x i16> %w)
  store <32 x i16> %y, ptr %wp, align 1
  %bp = getelementptr i8, ptr %p, i64 256
  %b = load <64 x i8>, ptr %bp, align 1
  %c = add <64 x i8> %b, %b
  %cc = call <64 x i8> @llvm.ctpop.v64i8(<64 x i8> %c)
  store <64 x i8> %cc, ptr %bp, align 1
  %hp = getelementptr i8, ptr %p, i64 320
  %h = fptrunc <16 x float> %s to <16 x half>
  store <16 x half> %h, ptr %hp, align 1
  %hh = load <8 x half>, ptr %hp, align 1
  %he = fpext <8 x half> %hh to <8 x float>
  %hep = getelementptr i8, ptr %p, i64 384
  store <8 x float> %he, ptr %hep, align 1
  %qp = getelementptr i8, ptr %p, i64 448
  %q = load i64, ptr %qp, align 1
  %q1 = call i64 @llvm.ctpop.i64(i64 %q)
  %q2 = call i64 @llvm.ctlz.i64(i64 %q, i1 false)
  %q3 = call i64 @llvm.cttz.i64(i64 %q, i1 false)
  %q4 = lshr i64 %q, 5
  %q5 = and i64 %q4, 255
  %q6 = call i64 @llvm.fshl.i64(i64 %q, i64 %q, i64 13)
  %t1 = add i64 %q1, %q2
  %t2 = add i64 %t1, %q3
  %t3 = add i64 %t2, %q5
  %t4 = add i64 %t3, %q6
  ret i64 %t4
}
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
declare <16 x float> @llvm.sqrt.v16f32(<16 x float>)
declare <8 x double> @llvm.fma.v8f64(<8 x double>, <8 x double>, <8 x double>)
declare <8 x i64> @llvm.fshl.v8i64(<8 x i64>, <8 x i64>, <8 x i64>)
declare <32 x i16> @llvm.smax.v32i16(<32 x i16>, <32 x i16>)
declare <64 x i8> @llvm.ctpop.v64i8(<64 x i8>)
declare i64 @llvm.ctpop.i64(i64)
declare i64 @llvm.ctlz.i64(i64, i1)
declare i64 @llvm.cttz.i64(i64, i1)
declare i64 @llvm.fshl.i64(i64, i64, i64)
"""
# The child imports llvmlite alone (~0.2 s). A CPU without F16C converts halves by calls:
# any address does for them, the probe's values are never looked at.
_PROBE_CHILD = """
import ctypes, sys
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
stub = ctypes.CFUNCTYPE(None)(lambda: None)
for name in ("__truncsfhf2", "__extendhfsf2", "__truncdfhf2", "__gnu_f2h_ieee",
             "__gnu_h2f_ieee", "fmaf", "fma", "sqrtf", "sqrt"):
    llvm.add_symbol(name, ctypes.cast(stub, ctypes.c_void_p).value)
module = llvm.parse_assembly(sys.stdin.read())
machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
    cpu=sys.argv[1], features="", opt=2, codemodel="jitdefault")
engine = llvm.create_mcjit_compiler(module, machine)
engine.finalize_object()
probe = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(engine.get_function_address("probe"))
memory = ctypes.create_string_buffer(1024)
probe(ctypes.addressof(memory))
print("ran")
"""


@lru_cache(maxsize=None)
def _runs_here(triple: str, cpu: str) -> bool:
    """Whether the probe compiled for `cpu` runs on this host; the verdict is kept in the
    kernel cache under the host's CPU, features and LLVM (a cache shared by hosts holds
    each host's own), so a process pays the child (~0.3 s) once per host. A child that
    fails otherwise (not a SIGILL) says nothing, and the CPU is taken."""
    import hashlib
    import signal
    import subprocess
    import sys

    from . import kernel_cache
    if triple != llvm.get_process_triple():
        return True  # (code for another machine, not run here)
    init_llvm()
    key = hashlib.sha256("|".join(["runs here", llvm.get_host_cpu_name(),
                                   llvm.get_host_cpu_features().flatten(), cpu,
                                   repr(llvm.llvm_version_info), _PROBE_RUN]).encode()
                         ).hexdigest()
    with kernel_cache.local_only():
        known = kernel_cache.load(key)
    if known in (b"yes", b"no"):
        return known == b"yes"
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE_CHILD, cpu], input=_PROBE_RUN,
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return True
    if done.returncode == -signal.SIGILL:
        verdict = False
    elif done.returncode == 0 and done.stdout.strip() == "ran":
        verdict = True
    else:
        return True
    kernel_cache.store(key, b"yes" if verdict else b"no")
    return verdict


@lru_cache(maxsize=None)
def _known_cpu(triple: str, cpu: str) -> bool:
    import sys
    import tempfile
    init_llvm()
    target = llvm.Target.from_triple(triple)
    sys.stderr.flush()
    with tempfile.TemporaryFile() as caught:
        saved = os.dup(2)
        os.dup2(caught.fileno(), 2)  # LLVM writes its warning to the fd, not to sys.stderr
        try:
            target.create_target_machine(cpu=cpu, features="")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        lines = caught.read().decode(errors="replace").splitlines(keepends=True)
    unknown = "is not a recognized processor for this target"
    others = [line for line in lines if unknown not in line]
    if others:  # another thread's output in that instant: passed on
        sys.stderr.write("".join(others))
    return len(others) == len(lines)


def target_machine():
    return host_target().machine()


def target_description() -> str:
    """Triple, CPU and feature string: what the cached code depends on."""
    t = host_target()
    return "|".join([t.triple, t.cpu, t.features, llvm.llvm_version_info.__repr__(),
                     f"vector-width={vector_width()}"])


def vector_width() -> int | None:
    """The vector width (bits) the vectorizers may use, when it differs from LLVM's choice.

    LLVM tunes AVX-512 hosts (Ice Lake and later) to prefer 256-bit vectors, fearing the
    clock drop of 512-bit instructions on older parts. Our kernels are short, hot loops of
    exp/tanh polynomials where full-width vectors measured ~1.35x faster on the development
    host (softmax 1024x4096: 5.3 -> 3.9 ms) and never slower, so AVX-512 hosts get 512.
    `XLADIST_VECTOR_WIDTH` (bits) overrides it; it is part of the cache key.
    """
    job = _job_target()
    if job is not None:  # the job's choice, already made from every host's own setting
        return job[2]
    env = setting("XLADIST_VECTOR_WIDTH")
    if env is not None:
        return env
    if target_cpu() is not None:
        return None  # a named CPU gets LLVM's own tuning for it
    return 512 if _host_has_avx512() else None


def kernel_vector_bytes() -> int | None:
    """Bytes of the vectors the hand-written kernels (gemm_kernel.py, conv_kernel.py) are
    written for on the target: 64 with AVX-512 where the vector width allows 512 bits, 32
    with AVX and FMA, None without FMA (they are not for it). One rule for both kernels.
    Kept per setting of the target: the kernels ask on every call, and reading the host's
    features takes ~0.25 ms in llvmlite, behind its one lock (which a kernel compiling on
    another thread holds for up to a second)."""
    key = (getattr(_thread, "text", None), os.environ.get(JOB_TARGET_ENV),
           os.environ.get("XLADIST_TARGET_CPU"), os.environ.get("XLADIST_VECTOR_WIDTH"))
    got = _vector_bytes.get(key, -1)
    if got == -1:
        got = _vector_bytes[key] = _kernel_vector_bytes()
    return got


_vector_bytes: dict = {}


def _kernel_vector_bytes() -> int | None:
    feats = target_features()
    if "+fma" not in feats:
        return None
    if "+avx512f" in feats and (vector_width() or 512) >= 512:
        return 64
    return 32 if "+avx" in feats else None


def target_features() -> frozenset[str]:
    """The target's features ("+fma", ...): the host's or the job's list, or, for a CPU
    named by XLADIST_TARGET_CPU (whose feature string is empty: the CPU's defaults), the
    ones LLVM's code for that CPU shows (_cpu_features)."""
    t = host_target()
    if t.features:
        return frozenset(f for f in t.features.split(",") if f.startswith("+"))
    return _cpu_features(t.triple, t.cpu)


# An FMA of 16 floats: LLVM emits one vfmadd on zmm registers for an AVX-512 CPU, two on
# ymm for an AVX2 one, and a libm call or separate multiplies and adds without FMA.
_PROBE = """define void @probe(ptr %p) {
  %a = load <16 x float>, ptr %p
  %r = call <16 x float> @llvm.fma.v16f32(<16 x float> %a, <16 x float> %a, <16 x float> %a)
  store <16 x float> %r, ptr %p
  ret void
}
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
"""


@lru_cache(maxsize=None)
def _cpu_features(triple: str, cpu: str) -> frozenset[str]:
    """The vector features the kernels ask about for a named CPU, read off the assembly
    LLVM emits for it (llvmlite has no list of a named CPU's features): a named CPU
    reproduces another machine in the tests, and the kernels must then be built for that
    machine, not left out."""
    init_llvm()
    if triple != llvm.get_process_triple():
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
    module = llvm.parse_assembly(_PROBE)
    module.triple = triple
    asm = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features="").emit_assembly(module)
    found = set()
    if "vfmadd" in asm:
        found.add("+fma")
    if "%ymm" in asm or "%zmm" in asm:
        found.add("+avx")
    if "%zmm" in asm:
        found.add("+avx512f")
    return frozenset(found)


@lru_cache(maxsize=1)
def _host_has_avx512() -> bool:
    init_llvm()
    return llvm.get_host_cpu_features().get("avx512f", False)
