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
        check_target_cpu(cpu)
        return Target(llvm.get_process_triple(), cpu, "")
    return Target(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                  llvm.get_host_cpu_features().flatten())


def check_target_cpu(cpu: str, *, here: bool = True) -> None:
    """XLADIST_TARGET_CPU `cpu`: one LLVM knows (InputError), and -- `here` -- one whose
    code this host runs (cpu_probe). A launcher whose ranks run on other hosts checks the
    name alone: each rank checks its own host."""
    init_llvm()
    check_cpu(llvm.get_process_triple(), cpu, "XLADIST_TARGET_CPU")
    if here:
        from . import cpu_probe  # (and subprocess: only where a CPU is named)
        cpu_probe.check_runs_here(cpu, "XLADIST_TARGET_CPU")


def check_cpu(triple: str, cpu: str, what: str) -> None:
    """InputError naming `what` unless LLVM knows `cpu` for `triple`. LLVM only warns on
    stderr about an unknown one and goes on with no features, and then aborts the whole
    process in code generation ("LLVM ERROR: 64-bit code requested on a subtarget that
    doesn't support it!"): so the warning is the test."""
    if not _known_cpu(triple, cpu):
        from ..errors import InputError
        examples = CPU_EXAMPLES.get(triple.split("-", 1)[0])
        raise InputError(f"{what} {cpu!r} is not a CPU LLVM knows for {triple} ("
                         + (f"for example {examples}; " if examples else "")
                         + f"`llc -mtriple={triple} -mcpu=help` lists them)")


# CPU names LLVM knows, per architecture of a triple: the examples of check_cpu's refusal
# (before, x86 names were offered for an aarch64 or riscv64 --triple too).
CPU_EXAMPLES = {"x86_64": "x86-64, x86-64-v3, haswell, znver3",
                "aarch64": "generic, neoverse-n1, neoverse-v1, apple-m1",
                "arm64": "generic, apple-m1, neoverse-n1",
                "riscv64": "generic-rv64, sifive-u74"}


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
    machine = Target(triple, cpu).machine()
    module = llvm.parse_assembly(_PROBE)
    module.triple = triple
    asm = machine.emit_assembly(module)
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
