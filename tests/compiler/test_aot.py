"""Ahead-of-time compilation (xladist/compiler/aot/, `xladist aot`): the object file and
header are linked with examples/aot/main.c by the system C compiler, run on random inputs,
and compared with the reference interpreter. What the AOT path cannot compile must be
refused with an UnsupportedError naming the instruction."""

from __future__ import annotations

import shutil
import sys
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import xladist
from tests.compiler.test_distinct import layers_hlo
from xladist.compiler.aot import AotProgram
from xladist.compiler.codegen.constants import logical_view, to_physical
from xladist.errors import InputError, UnsupportedError
from tests.paths import ROOT

MAIN_C = ROOT / "examples" / "aot" / "main.c"
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")

ADD = """
add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}
"""

# The loop of the two scan modules below: row i of the carry set to i, six times.
_SCAN_LOOP = """cond {
  s = (s32[], f32[6,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[6,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  acc = f32[6,3] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  f = f32[] convert(i)
  row = f32[1,3] broadcast(f), dimensions={}
  z = s32[] constant(0)
  u = f32[6,3] dynamic-update-slice(acc, row, i, z)
  ROOT t = (s32[], f32[6,3]) tuple(i1, u)
}
"""

MODULES = {
    "elementwise_reduce_tuple": "HloModule m\n" + ADD + """
ENTRY main {
  x = f32[5,7] parameter(0)
  y = f32[5,7] parameter(1)
  e = f32[5,7] exponential(x)
  a = f32[5,7] multiply(e, y)
  t = f32[7,5] transpose(a), dimensions={1,0}
  c = f32[] constant(0)
  r = f32[5] reduce(a, c), dimensions={1}, to_apply=add
  ROOT out = (f32[7,5], f32[5], f32[5,7]) tuple(t, r, x)
}
""",
    "while_loop": "HloModule m\n" + ADD + """
cond {
  s = (s32[], f32[4,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[4,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[4,3] get-tuple-element(s), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  h = f32[] constant(0.5)
  hb = f32[4,3] broadcast(h), dimensions={}
  v1 = f32[4,3] multiply(v, hb)
  v2 = f32[4,3] tanh(v1)
  w = f32[4,3] add(v2, v)
  ROOT t = (s32[], f32[4,3]) tuple(i1, w)
}

ENTRY main {
  x = f32[4,3] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[4,3]) tuple(z, x)
  loop = (s32[], f32[4,3]) while(init), condition=cond, body=body
  v = f32[4,3] get-tuple-element(loop), index=1
  c = f32[] constant(0)
  ROOT r = f32[4] reduce(v, c), dimensions={1}, to_apply=add
}
""",
    "scan_in_place": """HloModule m

""" + _SCAN_LOOP + """
ENTRY main {
  x = f32[6,3] parameter(0)
  z = s32[] constant(0)
  init = (s32[], f32[6,3]) tuple(z, x)
  loop = (s32[], f32[6,3]) while(init), condition=cond, body=body
  ROOT v = f32[6,3] get-tuple-element(loop), index=1
}
""",
    # lax.scan's usual form: the carry the body updates in place starts as a computed
    # array, which the loop takes without a copy (inplace.py marks its buffer "out").
    # Before, `xladist aot` died with a KeyError (a traceback): that buffer had no address.
    "scan_computed_init": """HloModule m

""" + _SCAN_LOOP + """
ENTRY main {
  x = f32[6,3] parameter(0)
  e = f32[6,3] exponential(x)
  z = s32[] constant(0)
  init = (s32[], f32[6,3]) tuple(z, e)
  loop = (s32[], f32[6,3]) while(init), condition=cond, body=body
  ROOT v = f32[6,3] get-tuple-element(loop), index=1
}
""",
    "conditional_index": """HloModule m

b0 {
  p = f32[8] parameter(0)
  ROOT r = f32[8] negate(p)
}

b1 {
  p = f32[8] parameter(0)
  ROOT r = f32[8] exponential(p)
}

b2 {
  p = f32[8] parameter(0)
  ROOT r = f32[8] multiply(p, p)
}

ENTRY main {
  k = s32[] parameter(0)
  x = f32[8] parameter(1)
  ROOT c = f32[8] conditional(k, x, x, x), branch_computations={b0, b1, b2}
}
""",
    "conditional_pred": """HloModule m

t {
  p = (f32[3], s32[3]) parameter(0)
  a = f32[3] get-tuple-element(p), index=0
  ROOT r = f32[3] sine(a)
}

f {
  p = (f32[3], s32[3]) parameter(0)
  b = s32[3] get-tuple-element(p), index=1
  ROOT r = f32[3] convert(b)
}

ENTRY main {
  c = pred[] parameter(0)
  a = f32[3] parameter(1)
  b = s32[3] parameter(2)
  tp = (f32[3], s32[3]) tuple(a, b)
  ROOT r = f32[3] conditional(c, tp, tp), true_computation=t, false_computation=f
}
""",
    "dot_batched_layouts": """HloModule m

ENTRY main {
  a = f32[2,3,4]{0,2,1} parameter(0)
  b = f32[2,5,4] parameter(1)
  d = f32[2,3,5]{1,2,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  m = f32[3,6] parameter(2)
  n = f32[6,2] parameter(3)
  e = f32[3,2] dot(m, n), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  i = s32[4] parameter(4)
  j = s32[4] parameter(5)
  k = s32[] dot(i, j), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (f32[2,3,5]{1,2,0}, f32[3,2], s32[]) tuple(d, e, k)
}
""",
}
MODULES["convolutions"] = """HloModule m

ENTRY main {
  x = f32[2,5,6,4] parameter(0)
  k = f32[3,2,4,6] parameter(1)
  a = f32[2,3,2,6] convolution(x, k), window={size=3x2 stride=2x3 pad=1_1x0_1 rhs_dilate=1x2}, dim_labels=b01f_01io->b01f
  y = f32[2,4,5,5] parameter(2)
  w = f32[6,2,3,3] parameter(3)
  g = f32[2,6,9,5] convolution(y, w), window={size=3x3 pad=1_1x1_1 lhs_dilate=2x1 rhs_reversal=1x0}, dim_labels=bf01_oi01->bf01, feature_group_count=2
  z = f32[4,3,7] parameter(4)
  v = f32[3,3,4] parameter(5)
  h = f32[4,5,2] convolution(z, v), window={size=3 pad=-1_1}, dim_labels=bf0_i0o->f0b, batch_group_count=2
  ROOT t = (f32[2,3,2,6], f32[2,6,9,5], f32[4,5,2]) tuple(a, g, h)
}
"""
# A while loop in a while body, its counter starting at a constant 0 whose buffer has the
# number of the outer condition's constant 3 in another computation. Before, constants were
# cached by that per-computation number: the inner loop started at 3, and the result was
# x + 9 instead of x + 18 (x + 10 instead of x + 12 for two outer steps).
MODULES["nested_while_constants"] = """HloModule m

c0 {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  ROOT lt = pred[] compare(i, s32[] constant(4)), direction=LT
}

b0 {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[3] get-tuple-element(p), index=1
  fb = f32[3] broadcast(f32[] convert(i)), dimensions={}
  ROOT t = (s32[], f32[3]) tuple(s32[] add(i, s32[] constant(1)), f32[3] add(v, fb))
}

c1 {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  ROOT lt = pred[] compare(i, s32[] constant(3)), direction=LT
}

b1 {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[3] get-tuple-element(p), index=1
  z = s32[] constant(0)
  inner = (s32[], f32[3]) while((s32[], f32[3]) tuple(z, v)), condition=c0, body=b0
  w = f32[3] get-tuple-element(inner), index=1
  ROOT t = (s32[], f32[3]) tuple(s32[] add(i, s32[] constant(1)), w)
}

ENTRY main {
  x = f32[3] parameter(0)
  z = s32[] constant(0)
  l = (s32[], f32[3]) while((s32[], f32[3]) tuple(z, x)), condition=c1, body=b1
  ROOT r = f32[3] get-tuple-element(l), index=1
}
"""
# Empty contractions: the result is zeros (before: both refused, "an empty contracting
# dimension" / "empty kernel or features not divisible into groups", the generated loops
# running their body at least once). A dot over K = 0, a batched one, a convolution over
# no input features and one whose input is empty but for its padding.
MODULES["empty_contractions"] = """HloModule m

ENTRY main {
  a = f32[3,0] parameter(0)
  b = f32[0,2] parameter(1)
  d = f32[3,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  i = s64[2,4,0]{1,2,0} parameter(2)
  j = s64[2,0,3] parameter(3)
  k = s64[2,4,3]{0,1,2} dot(i, j), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  x = f64[2,5,0] parameter(4)
  w = f64[3,0,4] parameter(5)
  c = f64[2,3,4] convolution(x, w), window={size=3}, dim_labels=b0f_0io->b0f
  y = s32[1,0,2] parameter(6)
  v = s32[3,2,2] parameter(7)
  e = s32[1,2,2] convolution(y, v), window={size=3 pad=2_2}, dim_labels=b0f_0io->b0f
  ROOT t = (f32[3,2], s64[2,4,3]{0,1,2}, f64[2,3,4], s32[1,2,2]) tuple(d, k, c, e)
}
"""
MODULES["mlp_train_step"] = (ROOT / "benchmarks" / "mlp_train_step.hlo").read_text()
# Four layers whose kernels repeat but for the third's scale: the driver calls the first
# layer's kernel for the second and fourth (codegen/kernels/distinct.py), its own for the third.
MODULES["repeated_layers"] = layers_hlo([1.0, 1.0, 0.5, 1.0]).replace("HloModule layers",
                                                                       "HloModule m")


def _random(shape, rng):
    dt = np.dtype(shape.dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape.dims).astype(np.bool_)
    if dt.kind in "iu":
        return rng.integers(-3, 4, shape.dims).astype(dt)
    return rng.standard_normal(shape.dims).astype(dt)


def _build_and_run(module, name, tmp_path, args, target_cpu=None, extra_c=()):
    """The C program linked with NAME.o (and extra C sources), run on args; returns its
    results."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    prog = AotProgram(module, name)
    (tmp_path / f"{name}.o").write_bytes(prog.compile(target_cpu=target_cpu))
    (tmp_path / f"{name}.h").write_text(prog.header())
    exe = tmp_path / "main"
    subprocess.run([CC, "-O1", "-std=c11", f"-DAOT_NAME={name}", f'-DAOT_HEADER="{name}.h"',
                    f"-I{tmp_path}", str(MAIN_C), *map(str, extra_c), str(tmp_path / f"{name}.o"),
                    "-lm", "-o",
                    str(exe)], check=True, timeout=120)
    data = tmp_path / "data"
    data.mkdir()
    for i, a in enumerate(args):
        # The C API takes each buffer in its layout's physical order.
        (data / f"arg{i}.bin").write_bytes(to_physical(prog.args[i].shape, a).tobytes())
    subprocess.run([str(exe), str(data)], check=True, timeout=60, capture_output=True)
    return [logical_view(r.shape, np.frombuffer((data / f"result{j}.bin").read_bytes(), np.uint8))
            for j, r in enumerate(prog.results)]


def assert_bit_exact(got, expected) -> None:
    assert len(got) == len(expected)
    for j, (g, e) in enumerate(zip(got, expected)):
        e = np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape, j
        assert g.tobytes() == e.tobytes(), (j, g, e)


needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc, gcc, clang) on PATH")


@needs_cc
@pytest.mark.parametrize("case", sorted(MODULES))
@pytest.mark.slow
def test_aot_matches_interpreter(case, tmp_path):
    module = xladist.parse_hlo(MODULES[case])
    rng = np.random.default_rng(len(case))
    params = module.entry.parameters
    for trial in range(2):
        args = [_random(p.shape, rng) for p in params]
        if case == "conditional_index":  # every branch, and out of range (the last one)
            args[0] = np.int32([0, 7][trial] if trial else 1)
        if case == "conditional_pred":
            args[0] = np.bool_(trial == 0)
        expected = xladist.compile(module, backend="interpreter")(*args)
        got = _build_and_run(xladist.parse_hlo(MODULES[case]), "m", tmp_path / str(trial), args)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)


# JAX's text for `lax.cond(i % 2 == 0, lambda: w - 0.05 * g, lambda: w - 0.02 * jnp.sign(g))`
# after `jax.grad`: the gradient reaches the branches in the transpose's layout {0,1}, the
# branches take {1,0} (found by the real-model sweep: early-stopping training loop).
COND_OF_TRANSPOSED = """
HloModule m
b0 {
  p = (f32[3,2]{1,0}, f32[3,2]{1,0}) parameter(0)
  g = f32[3,2]{1,0} get-tuple-element(p), index=0
  w = f32[3,2]{1,0} get-tuple-element(p), index=1
  ROOT d = f32[3,2]{1,0} subtract(w, g)
}
b1 {
  p = (f32[3,2]{1,0}, f32[3,2]{1,0}) parameter(0)
  g = f32[3,2]{1,0} get-tuple-element(p), index=0
  w = f32[3,2]{1,0} get-tuple-element(p), index=1
  ROOT s = f32[3,2]{1,0} add(w, g)
}
ENTRY e {
  i = s32[] parameter(0)
  gt = f32[2,3]{1,0} parameter(1)
  w = f32[3,2]{1,0} parameter(2)
  g = f32[3,2]{0,1} transpose(gt), dimensions={1,0}
  t0 = (f32[3,2]{0,1}, f32[3,2]{1,0}) tuple(g, w)
  t1 = (f32[3,2]{0,1}, f32[3,2]{1,0}) tuple(g, w)
  ROOT c = f32[3,2]{1,0} conditional(i, t0, t1), branch_computations={b0, b1}
}
"""


@needs_cc
@pytest.mark.parametrize("index", [0, 1])
def test_conditional_operand_in_another_layout_compiles(index, tmp_path):
    """Was refused ("a branch takes or returns another layout"); the operand is now
    copied into the branch's layout before the call, as XLA's layout assignment does."""
    gt = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.float32([[10, 20], [30, 40], [50, 60]])
    got = _build_and_run(xladist.parse_hlo(COND_OF_TRANSPOSED), "m", tmp_path,
                         [np.int32(index), gt, w])
    np.testing.assert_array_equal(got[0], w - gt.T if index == 0 else w + gt.T)


# `lax.cond(p, lambda: x.T @ y, lambda: (y.T @ x).T)` in JAX's text: one branch's root is a
# transpose in layout {0,1}, the other's a {1,0} value (found by the real-model sweep).
COND_RESULT_IN_ANOTHER_LAYOUT = """
HloModule m
b0 {
  p = f32[2,3]{1,0} parameter(0)
  ROOT t = f32[3,2]{0,1} transpose(p), dimensions={1,0}
}
b1 {
  p = f32[2,3]{1,0} parameter(0)
  t = f32[3,2]{1,0} transpose(p), dimensions={1,0}
  ROOT n = f32[3,2]{1,0} negate(t)
}
ENTRY e {
  i = s32[] parameter(0)
  x = f32[2,3]{1,0} parameter(1)
  ROOT c = f32[3,2]{1,0} conditional(i, x, x), branch_computations={b0, b1}
}
"""


@needs_cc
@pytest.mark.parametrize("index", [0, 1])
def test_conditional_result_in_another_layout_compiles(index, tmp_path):
    """Was refused ("a branch takes or returns another layout"); the branch's result is
    now relaid into the conditional's layout by the driver."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = _build_and_run(xladist.parse_hlo(COND_RESULT_IN_ANOTHER_LAYOUT), "m", tmp_path,
                         [np.int32(index), x])
    np.testing.assert_array_equal(got[0], x.T if index == 0 else -x.T)


# rng-bit-generator: every algorithm, on shapes that exercise each branch of the layout
# (odd and even split dimensions, scalars, 8/16/32/64-bit elements, a column-major
# result), 2- and 3-word states, and a counter that carries into the high word.
RNG_RESULTS = ["u32[5,3]", "u32[]", "u32[3,5,3]", "u32[6,4]{0,1}", "u8[9]", "s16[2,3]",
               "u64[7]", "u64[2,3]", "s64[]"]


def _rng_module(alg: str, words: int) -> str:
    lines = [f"  r{i} = (u64[{words}], {t}) rng-bit-generator(s), algorithm={alg}\n"
             f"  b{i} = {t} get-tuple-element(r{i}), index=1"
             for i, t in enumerate(RNG_RESULTS)]
    leaves = ", ".join(f"b{i}" for i in range(len(RNG_RESULTS)))
    types = ", ".join(RNG_RESULTS)
    return (f"HloModule m\nENTRY main {{\n  s = u64[{words}] parameter(0)\n" + "\n".join(lines)
            + f"\n  n = u64[{words}] get-tuple-element(r0), index=0"
            + f"\n  ROOT t = (u64[{words}], {types}) tuple(n, {leaves})\n}}\n")


RNG_LOOP = """HloModule m
cond {
  s = (s32[], u64[2], u32[3,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], u64[2], u32[3,3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  st = u64[2] get-tuple-element(s), index=1
  acc = u32[3,3] get-tuple-element(s), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  r = (u64[2], u32[3,3]) rng-bit-generator(st), algorithm=rng_three_fry
  st1 = u64[2] get-tuple-element(r), index=0
  bits = u32[3,3] get-tuple-element(r), index=1
  x = u32[3,3] xor(acc, bits)
  ROOT t = (s32[], u64[2], u32[3,3]) tuple(i1, st1, x)
}

ENTRY main {
  s = u64[2] parameter(0)
  z = s32[] constant(0)
  a = u32[3,3] constant({{0,0,0},{0,0,0},{0,0,0}})
  init = (s32[], u64[2], u32[3,3]) tuple(z, s, a)
  ROOT loop = (s32[], u64[2], u32[3,3]) while(init), condition=cond, body=body
}
"""


@needs_cc
@pytest.mark.parametrize("alg,words", [("rng_three_fry", 2), ("rng_philox", 3),
                                       ("rng_philox", 2), ("rng_default", 3), ("loop", 2)])
@pytest.mark.slow
def test_aot_rng_bit_exact(alg, words, tmp_path):
    text = RNG_LOOP if alg == "loop" else _rng_module(alg, words)
    # The key's words differ; the counter is 2^64 - 2, so Philox's u128 counter carries.
    state = np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFFE, 0x5][:words], np.uint64)
    expected = xladist.compile(xladist.parse_hlo(text), backend="interpreter")(state)
    got = _build_and_run(xladist.parse_hlo(text), "m", tmp_path, [state])
    assert_bit_exact(got, expected)


HALF = """HloModule m
add_h {
  p = f16[] parameter(0)
  q = f16[] parameter(1)
  ROOT s = f16[] add(p, q)
}

max_b {
  p = bf16[] parameter(0)
  q = bf16[] parameter(1)
  ROOT s = bf16[] maximum(p, q)
}

ENTRY main {
  x = f16[6,5] parameter(0)
  y = f16[6,5] parameter(1)
  d = f64[6,5] parameter(2)
  b = bf16[6,5] parameter(3)
  f = f32[6,5] parameter(4)
  m = f16[6,5] multiply(x, y)
  ay = f16[6,5] abs(y)
  s = f16[6,5] sqrt(ay)
  a = f16[6,5] add(m, s)
  dh = f16[6,5] convert(d)
  fh = f16[6,5] convert(f)
  hf = f32[6,5] convert(a)
  hd = f64[6,5] convert(y)
  bb = bf16[6,5] multiply(b, b)
  bs = bf16[6,5] subtract(bb, b)
  fb = bf16[6,5] convert(f)
  db = bf16[6,5] convert(d)
  bf = f32[6,5] convert(bs)
  bd = f64[6,5] convert(b)
  hb = bf16[6,5] convert(y)
  bh = f16[6,5] convert(b)
  z = f16[] constant(0)
  r = f16[6] reduce(x, z), dimensions={1}, to_apply=add_h
  ninf = bf16[] constant(-inf)
  rb = bf16[5] reduce(bs, ninf), dimensions={0}, to_apply=max_b
  ROOT t = (f16[6,5], f16[6,5], f32[6,5], f64[6,5], bf16[6,5], bf16[6,5], bf16[6,5], f32[6,5], f64[6,5], bf16[6,5], f16[6,5], f16[6], bf16[5]) tuple(dh, fh, hf, hd, bs, fb, db, bf, bd, hb, bh, r, rb)
}
"""


def _half_inputs(rng):
    """Values that reach every branch of the conversions: normal, subnormal and
    overflowing in f16, exact ties, infinities; x in quarters, so its row sums are exact
    in any order."""
    x = (rng.integers(-32, 33, (6, 5)) / 4).astype(np.float16)
    y = (rng.standard_normal((6, 5)) * 4).astype(np.float16)
    d = rng.standard_normal((6, 5)) * np.float64(10.0) ** rng.integers(-9, 6, (6, 5))
    d.flat[:4] = [np.inf, -np.inf, 65520.0, 1 + 2.0 ** -11]  # f16 overflow, tie to even
    d.flat[4:6] = [2.0 ** -25, 3 * 2.0 ** -26]                # f16's smallest subnormals
    b = (rng.standard_normal((6, 5)) * 3).astype(ml_dtypes.bfloat16)
    f = (rng.standard_normal((6, 5)) * np.float32(10.0) ** rng.integers(-8, 6, (6, 5))
         ).astype(np.float32)
    f.flat[:2] = [1 + 2.0 ** -8, 1 + 3 * 2.0 ** -11]  # ties for bf16 and f16
    return [x, y, d, b, f]


@needs_cc
@pytest.mark.parametrize("cpu", [None, "x86-64"])
def test_aot_f16_bf16_bit_exact(cpu, tmp_path):
    """f16/bf16 arithmetic, conversions to and from f32/f64 and reductions, bit for bit;
    on a baseline x86-64 (no F16C) every f16 conversion is a call into the builtins
    linked into the object."""
    if cpu is not None and not llvm_host_is_x86():
        pytest.skip("the baseline CPU case is for x86-64 hosts")
    args = _half_inputs(np.random.default_rng(16))
    expected = xladist.compile(xladist.parse_hlo(HALF), backend="interpreter")(*args)
    # The user's program defines the helpers too (wrongly): the object's own are internal,
    # so the link neither clashes nor binds the object's calls to these.
    clash = tmp_path / "clash.c"
    clash.write_text("unsigned short __truncdfhf2(double x) { (void)x; return 0; }\n"
                     "unsigned short __truncsfhf2(float x) { (void)x; return 0; }\n"
                     "float __extendhfsf2(unsigned short x) { (void)x; return 0; }\n")
    got = _build_and_run(xladist.parse_hlo(HALF), "m", tmp_path / "run", args,
                         target_cpu=cpu, extra_c=[clash])
    assert_bit_exact(got, expected)


def llvm_host_is_x86() -> bool:
    import platform
    return platform.machine() in ("x86_64", "AMD64")


SUMS = """HloModule m
add { x = f32[] parameter(0)
 y = f32[] parameter(1)
 ROOT s = f32[] add(x, y) }
add64 { x = f64[] parameter(0)
 y = f64[] parameter(1)
 ROOT s = f64[] add(x, y) }
ENTRY main {
  a = f32[9,517] parameter(0)
  d = f64[5,40] parameter(1)
  z = f32[] constant(0)
  z64 = f64[] constant(0)
  rows = f32[9] reduce(a, z), dimensions={1}, to_apply=add
  sq = f32[9,517] multiply(a, a)
  s = f32[9] reduce(sq, z), dimensions={1}, to_apply=add
  sb = f32[9,517] broadcast(s), dimensions={0}
  scaled = f32[9,517] divide(a, sb)
  all = f32[] reduce(a, z), dimensions={0,1}, to_apply=add
  r64 = f64[5] reduce(d, z64), dimensions={1}, to_apply=add64
  ROOT t = (f32[9], f32[9,517], f32[], f64[5]) tuple(rows, scaled, all, r64)
}
"""


@needs_cc
def test_aot_float_sums_are_the_jits_bits(tmp_path, monkeypatch):
    """Float sums fix their own order (codegen/lanes.py), and AOT picks the LLVM pipeline
    by the rule the jit's units follow (compile_pool.pipeline_exact): the same bits, and
    no loop unrolling for these sums."""
    from xladist.compiler import llvm_worker
    module = xladist.parse_hlo(SUMS)
    rng = np.random.default_rng(5)
    args = [_random(p.shape, rng) for p in module.entry.parameters]
    expected = xladist.compile(module, backend="cpu")(*args)
    chosen = []
    optimize = llvm_worker.optimize
    monkeypatch.setattr(llvm_worker, "optimize", lambda text, tm, triple, exact=True: (
        chosen.append(exact), optimize(text, tm, triple, exact))[1])
    assert_bit_exact(_build_and_run(xladist.parse_hlo(SUMS), "m", tmp_path, args), expected)
    assert chosen == [False]


@needs_cc
@pytest.mark.slow
def test_header_of_a_module_without_arguments_or_results_is_iso_c_and_cpp(tmp_path):
    # Before, `extern const size_t m_arg_bytes[m_NUM_ARGS];` with m_NUM_ARGS 0: a zero-size
    # array, which ISO C and C++ forbid ("ISO C forbids zero-size array 'm_arg_bytes'",
    # an error under -pedantic-errors). A module with no parameters (all constants) and one
    # whose root is the empty tuple.
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    main = tmp_path / "main.c"
    main.write_text('#include <stdio.h>\n#include <stdlib.h>\n#include "m.h"\n'
                    'int main(void) {\n'
                    '  void *results[m_NUM_RESULTS + 1];\n  static float out[2];\n'
                    '  void *temp = aligned_alloc(64, (m_temp_bytes() / 64 + 1) * 64);\n'
                    '  results[0] = out;\n  if (m_run(NULL, results, temp)) return 1;\n'
                    '  printf("%d %d %g %g\\n", m_NUM_ARGS, m_NUM_RESULTS, out[0], out[1]);\n'
                    '  return 0;\n}\n')
    roots = [("f32[2] constant({1.5, -2})", "0 1 1.5 -2"), ("() tuple()", "0 0 0 0")]
    for case, (root, expected) in enumerate(roots):
        d = tmp_path / str(case)
        d.mkdir()
        prog = AotProgram(xladist.parse_hlo(f"HloModule m\nENTRY main {{\n  ROOT r = {root}\n}}\n"),
                          "m")
        (d / "m.o").write_bytes(prog.compile())
        (d / "m.h").write_text(prog.header())
        compilers = [(CC, "-std=c11")] + ([(cxx, "-std=c++17")] if cxx else [])
        for compiler, std in compilers:
            exe = d / f"main_{Path(compiler).name}"
            subprocess.run([compiler, std, "-Wall", "-pedantic-errors", "-x",
                            "c" if compiler == CC else "c++", f"-I{d}", str(main), "-x", "none",
                            str(d / "m.o"), "-o", str(exe)], check=True, timeout=120)
            out = subprocess.run([str(exe)], check=True, timeout=60, capture_output=True,
                                 text=True).stdout
            assert out.split() == expected.split(), (root, compiler, out)


TWO_APIS_C = r"""#include <stdio.h>
#include "step.h"
#include "STEP.h"
int main(void) {
  static float x[3] = {1.5f, -2.0f, 0.25f}, neg[3];
  static int k[3] = {1, -7, 40}, twice[3];
  static char temp1[4096] __attribute__((aligned(64))), temp2[4096] __attribute__((aligned(64)));
  const void *a1[] = {x};
  void *r1[] = {neg};
  const void *a2[] = {k};
  void *r2[] = {twice};
  if (step_temp_bytes() > sizeof temp1 || STEP_temp_bytes() > sizeof temp2) return 2;
  if (step_run(a1, r1, temp1) || STEP_run(a2, r2, temp2)) return 1;
  printf("%d %d %g %g %g %d %d %d\n", step_NUM_ARGS, STEP_NUM_RESULTS, neg[0], neg[1], neg[2],
         twice[0], twice[1], twice[2]);
  return 0;
}
"""


@needs_cc
@pytest.mark.slow
@needs_cc
def test_sub_byte_integers_are_one_per_byte_in_the_low_bits_as_the_header_says(tmp_path):
    """The header did not say how s4/u4 elements are stored (C has no such type). They are
    one per byte in the low bits (ml_dtypes' int4/uint4 in memory): the high bits of an
    argument are ignored, a result's are 0. Checked on raw bytes against values worked out
    by hand (s4: two's complement in 4 bits), and the header now says so."""
    module = xladist.parse_hlo("""HloModule s4m
ENTRY main {
  p = s4[4] parameter(0)
  q = u4[3] parameter(1)
  c = s32[4] convert(p)
  n = s4[4] negate(p)
  d = s32[3] convert(q)
  ROOT t = (s32[4], s4[4], s32[3]) tuple(c, n, d)
}
""")
    prog = AotProgram(module, "s4m")
    header = prog.header()
    assert ("/* s4/u4 elements: one per byte, in its low bits (two's complement for the "
            "signed ones)") in header, header
    assert "the high bits are ignored in args and written as 0 in results. */" in header
    assert "one per byte" not in AotProgram(xladist.parse_hlo(MODULES["while_loop"]),
                                            "f").header()
    (tmp_path / "s4m.o").write_bytes(prog.compile())
    (tmp_path / "s4m.h").write_text(header)
    exe, data = tmp_path / "main", tmp_path / "data"
    subprocess.run([CC, "-O1", "-std=c11", "-DAOT_NAME=s4m", '-DAOT_HEADER="s4m.h"',
                    f"-I{tmp_path}", str(MAIN_C), str(tmp_path / "s4m.o"), "-lm", "-o",
                    str(exe)], check=True, timeout=120)
    data.mkdir()
    (data / "arg0.bin").write_bytes(bytes([0x07, 0xF9, 0x03, 0x0E]))  # 7, -7, 3, -2
    (data / "arg1.bin").write_bytes(bytes([0x01, 0xF2, 0x0F]))        # 1, 2, 15
    subprocess.run([str(exe), str(data)], check=True, timeout=60, capture_output=True)
    result = [(data / f"result{j}.bin").read_bytes() for j in range(3)]
    assert np.frombuffer(result[0], "<i4").tolist() == [7, -7, 3, -2]
    assert result[1] == bytes([0x09, 0x07, 0x0D, 0x02])  # -7, 7, -3, 2 in the low nibble
    assert np.frombuffer(result[2], "<i4").tolist() == [1, 2, 15]


def test_two_objects_whose_names_differ_in_case_link_into_one_program(tmp_path):
    # Before, both headers had the guard STEP_H: the second #include was empty and
    # STEP_run undeclared. Both objects carry the same internal builtins (no clash).
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    for name, root in (("step", "f32[3] negate(p)"), ("STEP", "s32[3] add(p, p)")):
        ty = root.split()[0]
        prog = AotProgram(xladist.parse_hlo(f"HloModule m\nENTRY main {{\n  p = {ty} "
                                            f"parameter(0)\n  ROOT r = {root}\n}}\n"), name)
        (tmp_path / f"{name}.o").write_bytes(prog.compile())
        (tmp_path / f"{name}.h").write_text(prog.header())
    (tmp_path / "main.c").write_text(TWO_APIS_C)
    expected = [1, 1, *-np.float32([1.5, -2.0, 0.25]), *2 * np.int32([1, -7, 40])]
    for compiler, lang, std in [(CC, "c", "-std=c99")] + ([(cxx, "c++", "-std=c++11")] if cxx
                                                          else []):
        exe = tmp_path / f"main_{lang}"
        subprocess.run([compiler, std, "-Wall", "-Wextra", "-Werror", "-x", lang,
                        f"-I{tmp_path}", str(tmp_path / "main.c"), "-x", "none",
                        str(tmp_path / "step.o"), str(tmp_path / "STEP.o"), "-o", str(exe)],
                       check=True, timeout=120)
        out = subprocess.run([str(exe)], check=True, timeout=60, capture_output=True,
                             text=True).stdout
        assert [float(v) for v in out.split()] == [float(v) for v in expected], (lang, out)


@pytest.mark.slow
def test_object_needs_only_libc_and_libm(tmp_path):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm on PATH to list the object's undefined symbols")
    cases = {**MODULES, "rng": _rng_module("rng_three_fry", 2),
             "rng_philox": _rng_module("rng_philox", 3), "half": HALF}
    for (case, text), cpu in [*((c, None) for c in cases.items()), (("half", HALF), "x86-64")]:
        obj = tmp_path / f"{case}.o"
        obj.write_bytes(AotProgram(xladist.parse_hlo(text), "m").compile(target_cpu=cpu))
        out = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True,
                             check=True).stdout.split()
        undefined = {s for s in out if s != "U"}
        assert undefined <= {"memcpy", "memset", "memmove", "expf", "logf", "powf", "sinf",
                             "cosf", "tanhf", "exp", "log", "fmodf", "fmod"}, (case, undefined)
        defined = subprocess.run([nm, "-g", "--defined-only", str(obj)], capture_output=True,
                                 text=True, check=True).stdout.split()[2::3]
        assert sorted(defined) == ["m_arg_bytes", "m_result_bytes", "m_run", "m_temp_bytes"]


REFUSED = {
    "all-reduce": ("HloModule m\n" + ADD + """
ENTRY main {
  x = f32[4] parameter(0)
  ROOT s = f32[4] all-reduce(x), to_apply=add
}
""", "`s` (all-reduce)", "multi-device runtime"),
    "custom-call": ("""HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="TopK"
}
""", "`c` (custom-call)", "host callbacks"),
    "rng-bit-generator-state": ("""HloModule m
ENTRY main {
  s = u64[1] parameter(0)
  ROOT r = (u64[1], u32[4]) rng-bit-generator(s), algorithm=rng_philox
}
""", "`r` (rng-bit-generator)", "u64[N] with N >= 2"),
}
# Dynamic shapes at the C API's edge: a dense buffer carries no size. Before, a dynamic
# parameter compiled without a word (f32[<=4] read as 4 elements, its size nowhere), and
# set-dimension-size was refused with advice for the Python API ("run through
# hlo.dynamic_padder (xladist.compile applies it)").
REFUSED["dynamic_parameter"] = ("""HloModule m
ENTRY main {
  x = f32[<=4] parameter(0)
  ROOT r = f32[<=4] negate(x)
}
""", "instruction x (parameter)", "dynamic entry parameters are not supported")
REFUSED["dynamic_result"] = ("""HloModule m
ENTRY main {
  x = f32[4] parameter(0)
  n = s32[] parameter(1)
  y = f32[<=4] set-dimension-size(x, n), dimensions={0}
  ROOT r = f32[<=4] negate(y)
}
""", "the result r: f32[<=4]", "carry no sizes")
# The library ops with no generated code: each refusal says what it runs as.
for _op, _body, _why in [
        ("fft", "c64[8] parameter(0)\n  ROOT r = c64[8] fft(x), fft_type=FFT, fft_length={8}",
         "numpy.fft"),
        ("cholesky", "f32[3,3] parameter(0)\n  ROOT r = f32[3,3] cholesky(x), lower=true",
         "numpy.linalg"),
        ("topk", "f32[8] parameter(0)\n  ROOT r = (f32[2], s32[2]) topk(x), k=2, largest=true",
         "numpy argsort"),
        ("rng", "f32[] parameter(0)\n  ROOT r = f32[4] rng(x, x), distribution=rng_uniform",
         "rng-bit-generator compiles")]:
    REFUSED[_op] = (f"HloModule m\nENTRY main {{\n  x = {_body}\n}}\n", f"`r` ({_op})", _why)



@needs_cc
@pytest.mark.slow
def test_dynamic_shapes_inside_are_padded_as_xladist_compile_does(tmp_path):
    # The sum of the first n elements: set-dimension-size inside, static result.
    text = """HloModule m
add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}
ENTRY main {
  x = f32[5] parameter(0)
  n = s32[] parameter(1)
  y = f32[<=5] set-dimension-size(x, n), dimensions={0}
  ROOT r = f32[] reduce(y, f32[] constant(0)), dimensions={0}, to_apply=add
}
"""
    x = np.float32([1, 2, 4, 8, 16])
    for n in (0, 2, 5):
        (got,) = _build_and_run(xladist.parse_hlo(text), "m", tmp_path / str(n), [x, np.int32(n)])
        assert got == np.float32(x[:n].sum()), (n, got)

@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_with_the_instruction(case):
    text, named, why = REFUSED[case]
    with pytest.raises(UnsupportedError) as e:
        AotProgram(xladist.parse_hlo(text), "m").compile()
    assert named in str(e.value) and why in str(e.value), str(e.value)


@pytest.mark.parametrize("export", ["run", "temp_bytes"])
def test_name_whose_export_is_a_kernels_name_is_refused(export):
    # The cpu backend names a kernel c<computation>_<id>_<instruction>: here c0_2_<export>.
    # Before, `--name c0_2` died with llvmlite's DuplicatedNameError (a traceback).
    text = (f"HloModule m\nENTRY e {{\n  a = f32[3] parameter(0)\n  b = f32[3] parameter(1)\n"
            f"  ROOT {export} = f32[3] add(a, b)\n}}\n")
    with pytest.raises(InputError, match=f"c0_2_{export} would have the name of a function "
                                         f"in the object \\(the kernel of `{export}`\\)"):
        AotProgram(xladist.parse_hlo(text), "c0_2").compile()


@pytest.mark.parametrize("triple", ["i686-unknown-linux-gnu", "armv7-unknown-linux-gnueabihf",
                                    "x86_64-unknown-linux-gnux32"])
def test_32_bit_targets_are_refused(triple):
    # The header declares `extern const size_t m_arg_bytes[]` and `size_t m_temp_bytes()`;
    # on these targets size_t is 4 bytes. Before, the object defined them as 8-byte
    # integers (m_arg_bytes[1] read as the high half of m_arg_bytes[0], 0), silently.
    with pytest.raises(UnsupportedError, match="32-bit target"):
        AotProgram(xladist.parse_hlo(MODULES["elementwise_reduce_tuple"]), "m").compile(
            triple=triple)


@pytest.mark.parametrize("triple", ["powerpc64le-unknown-linux-gnu", "s390x-unknown-linux-gnu"])
def test_other_architectures_are_refused_not_aborted(triple, tmp_path):
    """Before, LLVM ended `xladist aot` with SIGABRT (exit 134, "Cannot select:
    fp_to_bf16" in the object's bf16 helpers) for these triples, whatever the module: now
    an error naming the architectures it makes objects for, exit 2."""
    hlo = tmp_path / "m.hlo"
    hlo.write_text(MODULES["elementwise_reduce_tuple"])
    done = subprocess.run([sys.executable, "-m", "xladist", "aot", str(hlo), "--name", "m",
                           "-o", str(tmp_path / "out"), "--triple", triple],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert "x86_64, aarch64, arm64, riscv64 only" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("triple", ["aarch64-unknown-linux-gnu", "riscv64-unknown-linux-gnu",
                                    "arm64-apple-macosx14.0.0", "x86_64-pc-windows-msvc"])
def test_objects_for_the_other_architectures_are_made(triple):
    obj = AotProgram(xladist.parse_hlo(MODULES["elementwise_reduce_tuple"]), "m").compile(
        triple=triple)
    assert len(obj) > 0


@needs_cc
@pytest.mark.slow
def test_example_makefile_builds_and_runs(tmp_path):
    import os
    import sys
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make on PATH")
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=str(ROOT))
    proc = subprocess.run([make, "-C", str(ROOT / "examples" / "aot"), "run",
                           f"BUILD={tmp_path / 'build'}", f"PYTHON={sys.executable}",
                           f"XLADIST={sys.executable} -m xladist", f"CC={CC}"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 results match the interpreter" in proc.stdout


@needs_cc
@pytest.mark.slow
def test_example_makefile_builds_each_names_own_program(tmp_path):
    """examples/aot/Makefile linked every NAME into one build/main: after `make run
    NAME=other`, `make run` (softmax_scan, whose object was older than that program) did
    not relink and ran other's program on softmax_scan's inputs. Each NAME now has its own
    program; every run's results are checked against the interpreter (make_inputs.py)."""
    import os
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make on PATH")
    example = tmp_path / "aot"
    shutil.copytree(ROOT / "examples" / "aot", example,
                    ignore=shutil.ignore_patterns("build"))
    (example / "other.hlo").write_text(MODULES["elementwise_reduce_tuple"])
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=str(ROOT))
    for name, results in (("softmax_scan", 2), ("other", 3), ("softmax_scan", 2)):
        proc = subprocess.run([make, "-C", str(example), "run", f"NAME={name}",
                               f"PYTHON={sys.executable}", f"XLADIST={sys.executable} -m xladist",
                               f"CC={CC}"], capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, (name, proc.stdout + proc.stderr)
        assert f"{results} results match the interpreter" in proc.stdout, (name, proc.stdout)


def test_example_inputs_and_check_follow_the_headers_layouts(tmp_path):
    """examples/aot/make_inputs.py writes and reads the raw bytes main.c passes, in the
    layouts NAME.h lists: a column-major f32[2,3]{0,1} parameter is written transposed, and
    results in that layout are read so. Before, it wrote and read row-major bytes whatever
    the layout, so `make run` reported a correct object's result as differing."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_inputs",
                                                  ROOT / "examples" / "aot" / "make_inputs.py")
    make_inputs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_inputs)
    hlo = tmp_path / "m.hlo"
    hlo.write_text("""HloModule m
ENTRY main {
  a = f32[2,3]{0,1} parameter(0)
  n = f32[2,3]{0,1} negate(a)
  ROOT t = (f32[2,3]{0,1}, f32[2,3]{1,0}) tuple(n, a)
}""")
    data = tmp_path / "data"
    assert make_inputs.main(str(hlo), str(data)) == 0
    a = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)  # its inputs
    assert (data / "arg0.bin").read_bytes() == a.T.tobytes()  # column-major
    (data / "result0.bin").write_bytes((-a).T.tobytes())     # what the object writes
    (data / "result1.bin").write_bytes(a.tobytes())
    assert make_inputs.main(str(hlo), str(data), check=True) == 0
    (data / "result0.bin").write_bytes((-a).tobytes())       # row-major: wrong
    assert make_inputs.main(str(hlo), str(data), check=True) == 1


THREADS_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "m.h"
/* Four threads run the same inputs with their own temp buffers, many times; every result
   must equal a first, single-threaded run (the header promises reentrancy). */
static const void *args[m_NUM_ARGS];
static void *expected[m_NUM_RESULTS];
static void *buf(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64 + 64); }
static void *worker(void *arg) {
  void *res[m_NUM_RESULTS];
  for (int j = 0; j < m_NUM_RESULTS; j++) res[j] = buf(m_result_bytes[j]);
  void *temp = buf(m_temp_bytes());
  for (int it = 0; it < 20; it++) {
    if (m_run(args, res, temp)) return (void *)1;
    for (int j = 0; j < m_NUM_RESULTS; j++)
      if (memcmp(res[j], expected[j], m_result_bytes[j])) return (void *)1;
  }
  return NULL;
}
int main(void) {
  srand(1);
  for (int i = 0; i < m_NUM_ARGS; i++) {
    unsigned char *a = buf(m_arg_bytes[i]);
    float *f = (float *)a;
    for (size_t k = 0; k < m_arg_bytes[i] / 4; k++) f[k] = (float)(rand() % 200 - 100) / 50.0f;
    args[i] = a;
  }
  for (int j = 0; j < m_NUM_RESULTS; j++) expected[j] = buf(m_result_bytes[j]);
  if (m_run(args, expected, buf(m_temp_bytes()))) return 1;
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
  int bad = 0;
  for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); bad |= r != NULL; }
  puts(bad ? "MISMATCH" : "OK");
  return bad;
}
"""


@needs_cc
def test_concurrent_calls_with_distinct_temps(tmp_path):
    prog = AotProgram(xladist.parse_hlo(MODULES["while_loop"]), "m")
    (tmp_path / "m.o").write_bytes(prog.compile())
    (tmp_path / "m.h").write_text(prog.header())
    (tmp_path / "threads.c").write_text(THREADS_C)
    exe = tmp_path / "threads"
    subprocess.run([CC, "-O1", "-std=c11", f"-I{tmp_path}", str(tmp_path / "threads.c"),
                    str(tmp_path / "m.o"), "-lm", "-lpthread", "-o", str(exe)], check=True,
                   timeout=120)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr


def test_repeated_kernels_are_emitted_once():
    prog = AotProgram(xladist.parse_hlo(MODULES["repeated_layers"]), "m")
    prog.llvm_module()
    kernel = {k.root.name: k.name for k in prog.pb.kernels}
    assert prog.same_as[kernel["t1"]] == prog.same_as[kernel["t3"]] == kernel["t0"]
    assert kernel["t2"] not in prog.same_as
