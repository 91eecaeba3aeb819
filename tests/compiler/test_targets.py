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
from xladist.compiler import conv_kernel, elf, gemm_kernel, jit, runtime_symbols, target
from xladist.compiler.codegen.lowbits import SMALL_FLOATS, SUB_BYTE_INTS
from xladist.compiler.program import CpuProgram
from xladist.errors import UnsupportedError

from tests.compiler.test_lowbits import assert_same, dtype

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
@pytest.mark.slow
def test_every_external_call_is_on_the_allowlist(module_irs, triple, cpu, record_property):
    try:
        target.Target(triple, cpu).machine()
    except RuntimeError:
        pytest.skip(f"this llvmlite build has no {triple} target")
    allowed = runtime_symbols.allowlist()
    found = {}
    for name, text in module_irs.items():
        obj = jit.compile_ir(text, target.Target(triple, cpu))  # raises on a stray symbol
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
@pytest.mark.slow
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
                # Every argument counts for sine/cosine/tan (Payne-Hanek past 2**19); the
                # other transcendental functions are compared where |x| < 1e4.
                ok = np.abs(args[0].astype(np.float64)) < 1e4
                if op in ("sine", "cosine", "tan"):
                    ok = np.ones_like(ok)
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


# ---- the builtins themselves, over many bit patterns -----------------------------------

_CALLERS = {  # builtin -> (IR source type, IR destination type, ctypes src, ctypes dst)
    "__truncdfhf2": ("double", "half", "c_double", "c_uint16"),
    "__truncsfhf2": ("float", "half", "c_float", "c_uint16"),
    "__extendhfsf2": ("half", "float", "c_uint16", "c_float"),
    "__extendhfdf2": ("half", "double", "c_uint16", "c_double"),
    "__truncsfbf2": ("float", "bfloat", "c_float", "c_uint16"),
    "__truncdfbf2": ("double", "bfloat", "c_double", "c_uint16"),
    "__extendbfsf2": ("bfloat", "float", "c_uint16", "c_float"),
}


def _caller(name: str):
    """A function calling the builtin through LLVM's own ABI for its float types, with
    16-bit types passed as integers so ctypes can call it."""
    import ctypes
    st, dt, cs, cd = _CALLERS[name]
    arg = f"bitcast i16 %x to {st}" if cs == "c_uint16" else None
    body = [f"declare {dt} @{name}({st})",
            f"define {'i16' if cd == 'c_uint16' else dt} @call({'i16' if arg else st} %x) {{"]
    body.append(f"  %a = {arg}" if arg else f"  %a = fadd {st} %x, 0.0")
    body.append(f"  %r = call {dt} @{name}({st} %a)")
    if cd == "c_uint16":
        body += ["  %b = bitcast half %r to i16".replace("half", dt), "  ret i16 %b", "}"]
    else:
        body += [f"  ret {dt} %r", "}"]
    if not arg:  # fadd 0.0 would turn -0.0 into +0.0: pass the argument straight on
        body[2] = f"  %a = bitcast {st} %x to {st}"
    obj = jit.compile_ir("\n".join(body) + "\n", target.Target(X86, "x86-64"))
    code = jit.LoadedCode(obj)
    return ctypes.CFUNCTYPE(getattr(ctypes, cd), getattr(ctypes, cs))(code.address("call")), code


def _wide_values(bits: int, n: int = 20000) -> np.ndarray:
    rng = np.random.default_rng(bits)
    u = np.uint64 if bits == 64 else np.uint32
    raw = rng.integers(0, np.iinfo(u).max, n, dtype=u, endpoint=True)
    f = np.float64 if bits == 64 else np.float32
    # plus values on and next to every f16/bf16 rounding boundary and the subnormal range
    near = np.concatenate([np.arange(-2100, 2100, 0.5 ** 3), np.arange(65400, 65600, 0.5 ** 4),
                           2.0 ** np.arange(-30, 17)])
    near = near.astype(f)
    return np.concatenate([raw.view(f), near, np.nextafter(near, f(np.inf)),
                           np.nextafter(near, f(-np.inf)), np.array([0, -0.0], f)])


@pytest.mark.skipif(llvm.get_process_triple() != X86, reason="calls x86-64 code")
@pytest.mark.parametrize("name", sorted(_CALLERS))
def test_builtin_conversions_round_like_numpy_and_ml_dtypes(name):
    fn, _code = _caller(name)
    st, dt = _CALLERS[name][:2]
    target = {"half": np.float16, "bfloat": ml_dtypes.bfloat16, "float": np.float32,
              "double": np.float64}
    if st in ("half", "bfloat"):
        x = np.arange(1 << 16, dtype=np.uint16)
        got = np.array([fn(int(v)) for v in x], dtype=target[dt])
        want = x.view(target[st]).astype(target[dt])
    else:
        x = _wide_values(64 if st == "double" else 32)
        got = np.array([fn(float(v)) for v in x], dtype=np.uint16).view(target[dt])
        with np.errstate(all="ignore"):
            if st == "double" and dt == "bfloat":
                # ml_dtypes rounds f64 through f32; exact reference: the f32 cast with
                # round-to-odd keeps one rounding (f32 has > 2 x 8 + 2 mantissa bits)
                f32 = x.astype(np.float32)
                back = f32.astype(np.float64)
                odd = (back != x) & np.isfinite(f32) & ((f32.view(np.uint32) & 1) == 0)
                fix = np.where(np.abs(back) < np.abs(x), 1, -1).astype(np.int64)
                # (sign-magnitude bits: +1 moves away from zero whatever the sign)
                bitsf = f32.view(np.uint32).astype(np.int64) + np.where(odd, fix, 0)
                want = bitsf.astype(np.uint32).view(np.float32).astype(target[dt])
            else:
                want = x.astype(target[dt])
    nan = np.isnan(want.astype(np.float64))
    assert (np.isnan(got.astype(np.float64)) == nan).all()
    gb = got.view(np.uint16 if got.itemsize == 2 else
                  {4: np.uint32, 8: np.uint64}[got.itemsize])
    wb = want.view(gb.dtype)
    bad = np.nonzero((gb != wb) & ~nan)[0]
    assert bad.size == 0, (name, x[bad[:5]], gb[bad[:5]], wb[bad[:5]])


@pytest.mark.parametrize("width", ["512", "256"])
def test_every_kind_of_ir_text_compiles_at_an_explicit_vector_width(width, monkeypatch):
    """The "prefer-vector-width" attribute goes before the brace that opens a body, wherever
    that brace stands: llvmlite's own line, the end of a hand-written `define` line
    (conv_kernel's blocks: on an AVX-512 host they once got the attribute after the brace
    and failed to parse), or a parameter list over several lines (conv_lines). Forced by
    XLADIST_VECTOR_WIDTH, so a host without AVX-512 takes the AVX-512 host's path."""
    from llvmlite import ir as llir

    from xladist.compiler import conv_kernel, jit
    from xladist.compiler.codegen import builtins

    monkeypatch.setenv("XLADIST_VECTOR_WIDTH", width)
    m = llir.Module(name="m")
    f = llir.Function(m, llir.FunctionType(llir.IntType(32), [llir.IntType(32)]), name="f")
    b = llir.IRBuilder(f.append_basic_block("entry"))
    b.ret(b.add(f.args[0], f.args[0]))
    texts = {"llvmlite": str(m), "conv_kernel": conv_kernel.ir_text(16),
             "builtins": builtins.runtime_ir()}
    for name, text in texts.items():
        marked = jit._with_vector_width(text)
        assert marked.count(f'"prefer-vector-width"="{width}"') == text.count("\ndefine ") + \
            text.startswith("define "), name
        assert jit.compile_ir(text), name


@pytest.mark.parametrize("cpu, vector_bytes", [("x86-64", None), ("x86-64-v3", 32),
                                               ("haswell", 32), ("skylake-avx512", 64)])
def test_the_hand_written_kernels_are_built_for_a_named_cpu(cpu, vector_bytes, monkeypatch):
    """A CPU named by XLADIST_TARGET_CPU (how the tests reproduce other machines) has no
    feature string: its vector features are read off LLVM's code for it, so the LLVM GEMM
    and the convolution kernel are built for that machine. They were left out on every
    named CPU (and the GEMM's tests crashed loading under one)."""
    monkeypatch.setenv("XLADIST_TARGET_CPU", cpu)
    assert target.kernel_vector_bytes() == vector_bytes
    assert gemm_kernel.vector_bytes() == vector_bytes
    assert conv_kernel.vector_floats() == (vector_bytes and vector_bytes // 4)
    if vector_bytes is None or not _host_can_run(cpu):
        return
    for name in ("_loaded", "_asked"):  # (built for this CPU, not the host's kernel again)
        monkeypatch.setattr(gemm_kernel, name, {})
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((70, 300)), rng.standard_normal((300, 50))
    for t in (np.float32, np.float64):
        got = gemm_kernel.matmul(a.astype(t), b.astype(t))
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
        assert gemm_kernel.kernel(t)[1] == vector_bytes // np.dtype(t).itemsize


def test_a_build_on_another_thread_compiles_for_the_callers_job_target():
    """A thread's own job target (job_target_for: the launcher compiles for a job in a
    background thread) is not inherited by threads it starts; in_callers_target carries
    it to the thread that builds the LLVM GEMM in the background."""
    import threading
    seen = {}

    def on_thread(name, fn):
        t = threading.Thread(target=lambda: seen.__setitem__(name, fn()))
        t.start()
        t.join(30)
    with target.job_target_for("x86-64-v2;+sse4.2,+popcnt;128"):
        here = target.host_target()
        on_thread("carried", target.in_callers_target(target.host_target))
        on_thread("plain", target.host_target)
    assert here.cpu == "x86-64-v2" and seen["carried"] == here
    assert seen["plain"] == target.host_target() != here  # (the process's own target)
