"""Whether this host runs the code of a CPU named by XLADIST_TARGET_CPU (target.py):
a probe of the instruction families xladist's kernels use, compiled for that CPU, run in
a child process that an illegal instruction ends alone. A named CPU with instructions
this host lacks (sapphirerapids on a Zen 4, bdver2's XOP anywhere else) killed every
rank by SIGILL at its first kernel; now it is refused before any rank starts."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
from functools import lru_cache

import llvmlite.binding as llvm

from ..errors import InputError
from . import kernel_cache


def check_runs_here(cpu: str, what: str) -> None:
    """InputError naming `what` when this host cannot run code for `cpu` (a named CPU with
    instructions this one lacks: sapphirerapids on a Zen 4, bdver2's XOP anywhere else).
    Its kernels died by SIGILL at their first call, in every rank of the host."""
    if not _runs_here(llvm.get_process_triple(), cpu):
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
    if triple != llvm.get_process_triple():
        return True  # (code for another machine, not run here)
    llvm.initialize_native_target()
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
