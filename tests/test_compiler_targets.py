"""Compiled code on every CPU a user may have: each representative module is compiled for
several target CPUs; every undefined symbol of every object must be on the allowlist
(runtime_symbols.py), and the CPUs this host can execute also run it, bit for bit
against the interpreter.

The host (the CI and development machines) may be any x86-64: code for the baseline
`x86-64` and for `x86-64-v2` runs everywhere, which is how the original crash is
reproduced here: without F16C/AVX512-FP16 LLVM lowers f64 -> f16 to `__truncdfhf2`, which
nothing in the process defined before xladist provided it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np
import pytest

import xladist
from xladist.compiler import elf, jit, runtime_symbols
from xladist.compiler.codegen.lowbits import SMALL_FLOATS, SUB_BYTE_INTS
from xladist.compiler.program import CpuProgram
from xladist.errors import UnsupportedError

from .test_compiler_lowbits import assert_same, dtype

FLOAT_TYPES = ["f64", "f32", "f16", "bf16", *sorted(SMALL_FLOATS)]
INT_TYPES = ["s64", "s32", "s16", "s8", "u64", "u32", "u16", "u8", *sorted(SUB_BYTE_INTS)]
ALL_TYPES = ["pred", *FLOAT_TYPES, *INT_TYPES]

X86 = "x86_64-unknown-linux-gnu"
# (triple, cpu): baseline, the common levels, AVX-512 parts with and without FP16/BF16.
TARGETS = [(X86, "x86-64"), (X86, "x86-64-v2"), (X86, "x86-64-v3"), (X86, "haswell"),
           (X86, "skylake-avx512"), (X86, "znver4"), (X86, "sapphirerapids"),
           ("aarch64-unknown-linux-gnu", "generic"), ("aarch64-unknown-linux-gnu",
                                                      "neoverse-v1")]


# Features (beyond the baseline) code for each CPU may use; the host runs it when it has
# them all. (llvmlite does not expose a target machine's resolved feature list.)
_NEEDS = {"x86-64": (), "x86-64-v2": ("sse4.2", "popcnt"),
          "x86-64-v3": ("avx2", "fma", "f16c", "bmi2", "lzcnt", "movbe"),
          "haswell": ("avx2", "fma", "f16c", "bmi2", "lzcnt", "movbe"),
          "skylake-avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
          "znver4": ("avx512f", "avx512bf16", "avx512vl"),
          "sapphirerapids": ("avx512f", "avx512fp16", "avx512bf16", "amx-tile")}


def _host_can_run(cpu: str) -> bool:
    host = llvm.get_host_cpu_features()
    return all(host.get(f, False) for f in _NEEDS[cpu])


def _convert_module(src: str, n: int) -> str:
    """One source type converted to every type (a module per source: LLVM's time grows
    faster than linearly with one kernel's size)."""
    lines = [f" p = {src}[{n}] parameter(0)"]
    lines += [f" c_{dst} = {dst}[{n}] convert(p)" for dst in ALL_TYPES]
    shapes = ", ".join(f"{dst}[{n}]" for dst in ALL_TYPES)
    lines.append(f" ROOT r = ({shapes}) tuple({', '.join('c_' + d for d in ALL_TYPES)})")
    return f"HloModule converts_{src}\nENTRY main {{\n" + "\n".join(lines) + "\n}\n"


_FLOAT_OPS = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
              "atan2", "remainder"]
_FLOAT_UNARY = ["negate", "abs", "sqrt", "rsqrt", "cbrt", "exponential", "log", "log-plus-one",
                "exponential-minus-one", "tanh", "sine", "cosine", "tan", "logistic",
                "floor", "ceil", "round-nearest-even", "round-nearest-afz", "sign", "erf"]
_INT_OPS = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and",
            "or", "xor", "shift-left", "shift-right-logical", "shift-right-arithmetic"]
_INT_UNARY = ["negate", "abs", "popcnt", "count-leading-zeros", "not", "sign"]


def _elementwise_module(t: str, n: int) -> str:
    binary, unary = (_FLOAT_OPS, _FLOAT_UNARY) if t in FLOAT_TYPES else (_INT_OPS, _INT_UNARY)
    if t.startswith("u"):
        unary = [op for op in unary if op not in ("abs", "sign")]  # (not HLO for uN)
    lines = [f" a = {t}[{n}] parameter(0)", f" b = {t}[{n}] parameter(1)"]
    outs = []
    for op in binary:
        lines.append(f" {op.replace('-', '_')}_ = {t}[{n}] {op}(a, b)")
        outs.append(f"{op.replace('-', '_')}_")
    for op in unary:
        lines.append(f" {op.replace('-', '_')}_ = {t}[{n}] {op}(a)")
        outs.append(f"{op.replace('-', '_')}_")
    lines.append(f" lt = pred[{n}] compare(a, b), direction=LT")
    lines.append(f" sel = {t}[{n}] select(lt, a, b)")
    outs += ["lt", "sel"]
    shapes = ", ".join((f"pred[{n}]" if o == "lt" else f"{t}[{n}]") for o in outs)
    lines.append(f" ROOT r = ({shapes}) tuple({', '.join(outs)})")
    return f"HloModule ew_{t}\nENTRY main {{\n" + "\n".join(lines) + "\n}\n"


def _values(t: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = dtype(t)
    if t == "pred":
        return rng.integers(0, 2, n).astype(bool)
    if t in INT_TYPES:
        info = ml_dtypes.iinfo(dt) if t in SUB_BYTE_INTS else np.iinfo(dt)
        v = rng.integers(int(info.min), int(info.max), n, endpoint=True, dtype=np.int64) \
            if t != "u64" else rng.integers(0, 2 ** 63, n, dtype=np.uint64) * 2
        return np.asarray(v).astype(dt)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.5, 0.5, 65504.0,
                        65520.0, 1 + 2 ** -11 + 2 ** -40, 2.0 ** -24, 3.0 * 2 ** -26, 1e-40,
                        -7.25, 448.0, 1e300, 2.0 ** 31, -(2.0 ** 63), 300.0])
    spread = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.concatenate([special, spread])[:n].astype(dt)


N = 20  # > the vector width of any type at 128 bits: vector loop and scalar remainder

# The default run compiles the types whose operations may become library calls (the wide
# floats, 64-bit integers) plus one of each emulated family; XLADIST_TEST_ALL_TARGETS=1
# compiles and runs every type on every CPU (minutes).
FULL = os.environ.get("XLADIST_TEST_ALL_TARGETS", "") not in ("", "0")
SAMPLE = ALL_TYPES if FULL else ["f64", "f32", "f16", "bf16", "f8e4m3fn", "s64", "u64", "s4"]
# Compiling for nine CPUs is the slow part: by default the sources that may need a
# library call (f64/f16 conversions, 64-bit integer division) with 3 elements.
SYMBOL_SAMPLE = ALL_TYPES if FULL else ["f64", "f16", "bf16", "s64"]


def _programs(types=SAMPLE, n=N):
    """(name, HLO text, parameter types) of each representative module."""
    for t in types:
        yield f"convert {t}", _convert_module(t, n), [t]
    for t in types:
        if t != "pred":
            yield f"elementwise {t}", _elementwise_module(t, n), [t, t]


@pytest.fixture(scope="module")
def module_irs():
    """Each representative module's LLVM IR (target-independent text) by name."""
    return {name: CpuProgram(xladist.parse_hlo(text), compile_code=False).llvm_ir()
            for name, text, _ in _programs(SYMBOL_SAMPLE, 3 if not FULL else N)}


@pytest.mark.parametrize("triple,cpu", TARGETS, ids=[c for _, c in TARGETS])
def test_every_external_call_is_on_the_allowlist(module_irs, triple, cpu, record_property):
    try:
        jit.Target(triple, cpu).machine()
    except RuntimeError:
        pytest.skip(f"this llvmlite build has no {triple} target")
    allowed = runtime_symbols.allowlist()
    found = {}
    for name, text in module_irs.items():
        obj = jit.compile_ir(text, jit.Target(triple, cpu))  # raises on a stray symbol
        for sym in elf.undefined_symbols(obj):
            assert sym in allowed, (name, sym)
            found.setdefault(sym, []).append(name)
    record_property("undefined_symbols", sorted(found))
    print(f"\n{triple} {cpu}: " + "; ".join(f"{k} ({', '.join(v)})" for k, v in found.items()))
    if cpu == "x86-64":  # the original crash: no F16C, so f64/f32 -> f16 are libcalls
        assert {"__truncdfhf2", "__truncsfhf2", "__extendhfsf2"} <= set(found)


# The baseline is the CPU of the original crash (no F16C); "host" is this machine.
HOST_CPUS = [cpu for triple, cpu in TARGETS if triple == X86] + ["host"] if FULL else \
    ["x86-64", "host"]
_TOLERANCE = {8: 1e-12, 4: 2e-6}  # itemsize -> relative tolerance of inexact functions


@pytest.mark.parametrize("cpu", HOST_CPUS)
def test_host_executable_targets_equal_the_interpreter(cpu, monkeypatch):
    if cpu != "host" and not _host_can_run(cpu):
        pytest.skip(f"this host lacks features of {cpu}")
    monkeypatch.setenv("XLADIST_TARGET_CPU", cpu)
    for name, text, types in _programs():
        module = xladist.parse_hlo(text)
        args = [_values(t, N, seed=i) for i, t in enumerate(types)]
        with np.errstate(all="ignore"):
            want = xladist.compile(module, backend="interpreter")(*args)
            got = xladist.compile(module, backend="cpu")(*args)
        for k, (g, w) in enumerate(zip(got, want)):
            try:
                assert_same(g, w, nan_sign_free=True)
            except AssertionError as e:
                # Only transcendental results may differ (within the type's tolerance);
                # converts, integer ops, + - * / and compare/select are exact.
                op = module.entry.root.operands[k].opcode
                if name.startswith("convert") or types[0] in INT_TYPES or op in (
                        "add", "subtract", "multiply", "divide", "compare", "select",
                        "negate", "abs", "maximum", "minimum", "floor", "ceil"):
                    raise AssertionError(f"{cpu}: {name}, {op}: {e}") from None
                # (huge arguments of sine/cosine/tan are outside the backend's accuracy
                # contract, target or not)
                ok = np.abs(args[0].astype(np.float64)) < 1e4
                w64 = np.asarray(w).astype(np.float64)[ok]
                tol = _TOLERANCE.get(np.asarray(w).dtype.itemsize, 1e-2)
                np.testing.assert_allclose(np.asarray(g).astype(np.float64)[ok], w64, rtol=tol,
                                           atol=tol * 1e-3, equal_nan=True,
                                           err_msg=f"{cpu}: {name}, {op}")


def test_an_unresolvable_symbol_is_an_unsupported_error_naming_kernel_and_symbol():
    ir_text = textwrap.dedent("""\
        declare double @no_such_function(double)
        define void @"fusion.7"(ptr %p) {
          %x = load double, ptr %p
          %y = call double @no_such_function(double %x)
          store double %y, ptr %p
          ret void
        }
        """)
    with pytest.raises(UnsupportedError, match=r"fusion\.7.*no_such_function"):
        jit.compile_ir(ir_text)


_REPRO = """
import numpy as np, xladist
x = np.array([1 + 2 ** -11 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -40)])
m = xladist.parse_hlo("HloModule m\\nENTRY e {\\n a = f64[2] parameter(0)\\n"
                      " ROOT r = f16[2] convert(a)\\n}\\n")
got = xladist.compile(m, backend="cpu")(x)[0]
assert (got.view(np.uint16) == x.astype(np.float16).view(np.uint16)).all(), got
print("ok")
"""


def test_f64_to_f16_on_a_cpu_without_f16c_runs(tmp_path):
    """The reported crash, in a subprocess (a regression would kill pytest itself)."""
    env = dict(os.environ, XLADIST_TARGET_CPU="x86-64", XLADIST_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", _REPRO], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])
