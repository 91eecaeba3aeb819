"""Repeated kernels are compiled once (codegen/kernels/distinct.py).

A module whose layers repeat gets one function per distinct kernel and aliases for the
repeats; a kernel that differs in anything the emitters see (a constant, a shape, sin's
accurate rerun) keeps its own code. Results are checked against numpy in float64, so an
alias that stood for a kernel that is not the same fails on the numbers, not only on the
IR's shape.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import xladist
from xladist.compiler.program import CpuProgram


def layers_hlo(scales, n=8, k=16):
    """Dense layers t_i = tanh((t_{i-1} @ w + b) * scale_i)."""
    lines = ["HloModule layers", "ENTRY e {",
             f"  x = f32[{n},{k}] parameter(0)", f"  w = f32[{k},{k}] parameter(1)",
             f"  b = f32[{k}] parameter(2)",
             f"  bb = f32[{n},{k}] broadcast(b), dimensions={{1}}"]
    prev = "x"
    for i, scale in enumerate(scales):
        lines += [(f"  d{i} = f32[{n},{k}] dot({prev}, w), lhs_contracting_dims={{1}}, "
                   "rhs_contracting_dims={0}"),
                  f"  a{i} = f32[{n},{k}] add(d{i}, bb)",
                  f"  c{i} = f32[] constant({scale})",
                  f"  cb{i} = f32[{n},{k}] broadcast(c{i}), dimensions={{}}",
                  f"  m{i} = f32[{n},{k}] multiply(a{i}, cb{i})",
                  f"  t{i} = f32[{n},{k}] tanh(m{i})"]
        prev = f"t{i}"
    lines += [f"  ROOT r = f32[{n},{k}] copy({prev})", "}"]
    return "\n".join(lines) + "\n"


def reference(scales, x, w, b):
    t = x.astype(np.float64)
    for s in scales:
        # The kernels compute in f32 between the dots: round where they do.
        t = np.tanh(((t.astype(np.float32) @ w).astype(np.float32) + b) * np.float32(s))
    return t


def inputs(n=8, k=16, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, k)).astype(np.float32),
            (rng.standard_normal((k, k)) * 0.3).astype(np.float32),
            rng.standard_normal(k).astype(np.float32))


def run(text, *args):
    (out,) = xladist.compile(xladist.parse_hlo(text))(*args)
    return np.asarray(out)


def defined_and_aliased(text):
    prog = CpuProgram(xladist.parse_hlo(text), compile_code=False)
    ir_text = prog.llvm_ir()
    defined = set(re.findall(r'^define [^@]*@"?([\w.]+)"?\(', ir_text, re.MULTILINE))
    aliased = dict(re.findall(r'^@"([\w.]+)" = alias [^@]*@"([\w.]+)"', ir_text, re.MULTILINE))
    return prog, defined, aliased


def kernel_of(prog, root):
    return next(k.name for k in prog.builder.kernels if k.root.name == root)


def test_repeated_layers_compile_one_kernel_and_alias_the_rest():
    scales = [1.0, 1.0, 1.0, 1.0]
    prog, defined, aliased = defined_and_aliased(layers_hlo(scales))
    names = [kernel_of(prog, f"t{i}") for i in range(4)]
    assert names[0] in defined
    for name in names[1:]:
        assert name not in defined and aliased[name] == names[0]
    x, w, b = inputs()
    got = run(layers_hlo(scales), x, w, b)
    np.testing.assert_allclose(got, reference(scales, x, w, b),
                               rtol=2e-5, atol=2e-6)


def test_a_kernel_that_differs_in_a_constant_keeps_its_own_code():
    scales = [1.0, 1.0, 0.5, 1.0]
    prog, defined, aliased = defined_and_aliased(layers_hlo(scales))
    names = [kernel_of(prog, f"t{i}") for i in range(4)]
    assert names[2] in defined and names[2] not in aliased
    assert aliased[names[1]] == names[0] and aliased[names[3]] == names[0]
    x, w, b = inputs(seed=1)
    got = run(layers_hlo(scales), x, w, b)
    np.testing.assert_allclose(got, reference(scales, x, w, b),
                               rtol=2e-5, atol=2e-6)


def test_a_kernel_of_other_shape_keeps_its_own_code():
    text = """HloModule shapes
ENTRY e {
  x = f32[8,16] parameter(0)
  w = f32[16,16] parameter(1)
  x4 = f32[4,16] slice(x), slice={[0:4], [0:16]}
  d8 = f32[8,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t8 = f32[8,16] tanh(d8)
  d4 = f32[4,16] dot(x4, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t4 = f32[4,16] tanh(d4)
  d8b = f32[8,16] dot(t8, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t8b = f32[8,16] tanh(d8b)
  ROOT r = (f32[8,16], f32[4,16], f32[8,16]) tuple(t8, t4, t8b)
}
"""
    prog, defined, aliased = defined_and_aliased(text)
    k8, k4, k8b = (kernel_of(prog, r) for r in ("t8", "t4", "t8b"))
    assert {k8, k4} <= defined and aliased[k8b] == k8 and k4 not in aliased
    x, w, _ = inputs(seed=5)
    t8, t4, t8b = (np.asarray(v) for v in xladist.compile(xladist.parse_hlo(text))(x, w))
    np.testing.assert_allclose(t8, np.tanh(x @ w), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(t4, np.tanh(x[:4] @ w), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(t8b, np.tanh(t8 @ w), rtol=2e-5, atol=2e-6)


def test_repeated_sine_kernels_share_the_fast_and_the_accurate_version():
    # Three sin kernels of the same shape, arguments ~1e7: far above 2**19, where only the
    # accurate (Payne-Hanek) version called from the fast one gets them right.
    text = """HloModule sines
ENTRY e {
  c = f32[] constant(1e7)
  cb = f32[64] broadcast(c), dimensions={}
""" + "".join(f"""  x{j} = f32[64] parameter({j})
  m{j} = f32[64] multiply(x{j}, cb)
  s{j} = f32[64] sine(m{j})
  n{j} = f32[64] negate(s{j})
""" for j in range(3)) + """  ROOT t = (f32[64], f32[64], f32[64]) tuple(n0, n1, n2)
}
"""
    prog, defined, aliased = defined_and_aliased(text)
    names = [kernel_of(prog, f"n{j}") for j in range(3)]
    assert names[0] in defined and aliased[names[1]] == aliased[names[2]] == names[0]
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    got = xladist.compile(xladist.parse_hlo(text))(*x)
    for j in range(3):
        arg = (x[j] * np.float32(1e7)).astype(np.float64)
        np.testing.assert_allclose(np.asarray(got[j]), -np.sin(arg), rtol=1e-5, atol=1e-6)


def test_aliases_survive_the_kernel_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path))
    text = layers_hlo([1.0, 1.0, 1.0])
    x, w, b = inputs(seed=3)
    first = xladist.compile(xladist.parse_hlo(text))
    second = xladist.compile(xladist.parse_hlo(text))
    assert not first.program.cached and second.program.cached
    np.testing.assert_array_equal(np.asarray(first(x, w, b)[0]),
                                  np.asarray(second(x, w, b)[0]))


@pytest.mark.parametrize("trips", [3])
def test_kernels_a_native_loop_calls_keep_their_names(trips):
    body_layers = "\n".join(
        f"  d{i} = f32[4,4] dot({'v' if i == 0 else f't{i - 1}'}, w), "
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        f"  t{i} = f32[4,4] tanh(d{i})" for i in range(2))
    text = f"""HloModule loop
cond {{
  p = (s32[], f32[4,4], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant({trips})
  ROOT lt = pred[] compare(i, n), direction=LT
}}
body {{
  p = (s32[], f32[4,4], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[4,4] get-tuple-element(p), index=1
  w = f32[4,4] get-tuple-element(p), index=2
{body_layers}
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT r = (s32[], f32[4,4], f32[4,4]) tuple(i1, t1, w)
}}
ENTRY e {{
  v0 = f32[4,4] parameter(0)
  w0 = f32[4,4] parameter(1)
  z = s32[] constant(0)
  d = f32[4,4] dot(v0, w0), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  t = f32[4,4] tanh(d)
  init = (s32[], f32[4,4], f32[4,4]) tuple(z, t, w0)
  loop = (s32[], f32[4,4], f32[4,4]) while(init), condition=cond, body=body
  ROOT out = f32[4,4] get-tuple-element(loop), index=1
}}
"""
    rng = np.random.default_rng(4)
    v, w = (rng.standard_normal((4, 4)) * 0.5).astype(np.float32), \
        (rng.standard_normal((4, 4)) * 0.5).astype(np.float32)
    got = run(text, v, w)
    want = np.tanh((v @ w).astype(np.float32))
    for _ in range(2 * trips):
        want = np.tanh((want.astype(np.float32) @ w).astype(np.float32))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def _normalized_ir(spec) -> str:
    from llvmlite import ir

    from xladist.compiler.codegen.kernels import emit_kernel
    module = ir.Module(name="k")
    emit_kernel(module, spec)
    # The kernel's own name, and constants' globals (named after their instruction).
    text = str(module).replace(spec.name, "KERNEL")
    return re.sub(r'@"?const\.[^"\s(]*"?', "@CONST", text)


def _corpus_modules():
    from tests import corpus_util as cu
    for folder in cu.case_folders("single", "single_zoo", "jax", "jax_extra"):
        for name in ("module.hlo", "module.optimized.hlo"):
            if (folder / name).exists():
                yield f"{folder.parent.name}/{folder.name}/{name}", folder / name


@pytest.mark.slow  # every corpus module planned and its repeats emitted: ~15 s
def test_kernels_with_one_structural_key_emit_the_same_ir():
    """The structural key (computed from the HLO, before codegen) is what makes a repeat an
    alias: on every corpus module, kernels sharing a key emit the same LLVM IR up to their
    names -- the key leaves out nothing the emitters read."""
    from xladist.compiler.codegen.kernels.distinct import kernel_keys
    checked = repeats = 0
    for what, path in _corpus_modules():
        try:
            prog = CpuProgram(xladist.load_hlo(path), compile_code=False)
        except xladist.UnsupportedError:
            continue  # the cpu backend refuses the module (its own tests say why)
        groups: dict[str, list] = {}
        for spec, key in zip(prog.builder.kernels, kernel_keys(prog.builder.kernels)):
            groups.setdefault(key, []).append(spec)
        for specs in groups.values():
            if len(specs) > 1:
                first = _normalized_ir(specs[0])
                for other in specs[1:]:
                    assert _normalized_ir(other) == first, \
                        f"{what}: {other.name} shares {specs[0].name}'s key, not its IR"
                    repeats += 1
        checked += 1
    assert checked >= 100 and repeats >= 50, (checked, repeats)
