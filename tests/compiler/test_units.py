"""The cpu backend's passes and semantics, each against an independent reference
(numpy, ml_dtypes, hand-computed values from XLA's operation semantics)."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import xladist
from xladist.compiler import coverage
from xladist.compiler.program import CpuProgram
from xladist.hlo.opcodes import OPCODES

ADD = "add { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y) }\n"
IADD = "iadd { x = s32[] parameter(0)\n y = s32[] parameter(1)\n ROOT s = s32[] add(x, y) }\n"
MAX = "max { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] maximum(x, y) }\n"


def run(text, *args):
    return xladist.compile(xladist.parse_hlo(text), backend="cpu")(*args)


def thunks(text):
    return CpuProgram(xladist.parse_hlo(text)).entry.thunks


# ---- fusion planning and buffers ----------------------------------------------------

def test_elementwise_chain_fuses_into_one_kernel():
    ts = thunks("""HloModule m
ENTRY main {
  a = f32[100] parameter(0)
  b = f32[100] parameter(1)
  m = f32[100] multiply(a, b)
  t = f32[100] tanh(m)
  r = f32[10,10] reshape(t)
  ROOT n = f32[10,10] negate(r)
}
""")
    assert [t.kind for t in ts] == ["kernel"]
    assert {i.name for i in ts[0].spec.fused} == {"m", "t", "r", "n"}


def test_expensive_producer_of_a_broadcast_is_materialized():
    ts = thunks("""HloModule m
ENTRY main {
  a = f32[100] parameter(0)
  e = f32[100] exponential(a)
  ROOT b = f32[50,100] broadcast(e), dimensions={1}
}
""")
    assert [t.spec.root.name for t in ts] == ["e", "b"]


def test_reshape_of_parameter_and_tuple_are_aliases_and_dot_is_a_library_call():
    ts = thunks("""HloModule m
ENTRY main {
  a = f32[4,6] parameter(0)
  b = f32[6,3] parameter(1)
  r = f32[24] reshape(a)
  c = f32[4,6] reshape(r)
  d = f32[4,3] dot(c, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[4,3], f32[24]) tuple(d, r)
}
""")
    assert [(t.kind, t.instr.name) for t in ts] == [("library", "d")]


def test_dead_temporaries_share_arena_space():
    text = """HloModule m
ENTRY main {
  a = f32[64,64] parameter(0)
  d1 = f32[64,64] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e1 = f32[64,64] exponential(d1)
  d2 = f32[64,64] dot(e1, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e2 = f32[64,64] exponential(d2)
  d3 = f32[64,64] dot(e2, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT e3 = f32[64,64] tanh(d3)
}
"""
    prog = CpuProgram(xladist.parse_hlo(text))
    temps = [s for s in prog.entry.asg.slots if s.kind == "temp"]
    assert len(temps) == 5
    assert prog.entry.asg.arena_size <= 3 * 64 * 64 * 4  # not 5 buffers
    a = (np.random.default_rng(0).standard_normal((64, 64)) * 0.1).astype(np.float32)
    with np.errstate(over="ignore"):
        want = np.tanh(np.exp(np.exp(a @ a) @ a) @ a)
    np.testing.assert_allclose(run(text, a)[0], want, rtol=1e-4, atol=1e-5)


def test_second_compile_is_a_cache_hit_and_compiles_nothing(monkeypatch):
    from xladist.compiler import jit
    calls = []
    real = jit.compile_units  # a program's code: its compile units (compiler/units.py)
    monkeypatch.setattr(jit, "compile_units",
                        lambda units, **kw: calls.append(1) or real(units, **kw))
    text = "HloModule c\nENTRY e {\n a = f32[7] parameter(0)\n ROOT n = f32[7] negate(a)\n}\n"
    first = CpuProgram(xladist.parse_hlo(text))
    second = CpuProgram(xladist.parse_hlo(text))
    assert (first.cached, second.cached) == (False, True) and len(calls) == 1
    # Another CPU (target description) must not reuse the object code.
    monkeypatch.setattr(jit, "target_description", lambda: "another-cpu")
    third = CpuProgram(xladist.parse_hlo(text))
    assert not third.cached and len(calls) == 2


def test_coverage_lists_every_opcode_with_yes_or_a_reason():
    cov = coverage()
    assert set(cov) == set(OPCODES)
    assert all(v == "yes" or (isinstance(v, str) and len(v) > 10) for v in cov.values())
    for op in ("add", "tanh", "reduce", "dot", "convolution", "sort", "scatter", "gather",
               "while", "conditional", "all-reduce", "rng-bit-generator", "fft"):
        assert cov[op] == "yes", op


# ---- semantics --------------------------------------------------------------------------

def test_integer_division_edge_cases_follow_xla():
    text = """HloModule m
ENTRY main {
  x = s32[5] parameter(0)
  y = s32[5] parameter(1)
  q = s32[5] divide(x, y)
  r = s32[5] remainder(x, y)
  ROOT t = (s32[5], s32[5]) tuple(q, r)
}
"""
    x = np.array([7, -7, 5, -2147483648, 7], np.int32)
    y = np.array([2, 2, 0, -1, -3], np.int32)
    q, r = run(text, x, y)
    np.testing.assert_array_equal(q, [3, -3, -1, -2147483648, -2])  # truncating, x/0 = -1
    np.testing.assert_array_equal(r, [1, -1, 5, 0, 1])              # sign of dividend, x%0 = x


_POW_TYPES = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
              "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


def _xla_integer_power(x: int, e: int, bits: int) -> int:
    """XLA's EmitIntegerPow on bit patterns (Python ints in [0, 2^bits)): squaring over the
    exponent's low 6 bits; an exponent negative as signed gives 1 for base 1, +-1 for base
    -1 (all bits set) by parity, else 0 -- for unsigned types too."""
    mask = (1 << bits) - 1
    if e >> (bits - 1):
        if x == 1:
            return 1
        return (mask if e & 1 else 1) if x == mask else 0
    return pow(x, e & 63, 1 << bits)


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("ty", _POW_TYPES)
def test_integer_power_reads_six_exponent_bits_and_a_signed_exponent(ty, backend):
    """The cpu backend squared over every exponent bit and read unsigned exponents as
    non-negative: 3^65 was 3^65 mod 2^n (XLA: 3), u8 3^255 was 171 (XLA: 0)."""
    dt = _POW_TYPES[ty]
    bits = np.iinfo(dt).bits
    edge = [0, 1, 2, 3, 5, 7, 31, 63, 64, 65, 127, 1 << (bits - 1), (1 << (bits - 1)) + 1,
            (1 << bits) - 1, (1 << bits) - 2, (1 << bits) - 64, (1 << bits) - 7]
    edge = sorted({v & ((1 << bits) - 1) for v in edge})
    x, e = (np.array(v, np.uint64).astype(f"u{bits // 8}").view(dt)
            for v in zip(*[(a, b) for a in edge for b in edge]))
    n = x.size
    text = (f"HloModule m\nENTRY main {{\n  x = {ty}[{n}] parameter(0)\n"
            f"  e = {ty}[{n}] parameter(1)\n  ROOT p = {ty}[{n}] power(x, e)\n}}\n")
    got = xladist.compile(xladist.parse_hlo(text), backend=backend)(x, e)[0]
    u = f"u{bits // 8}"
    want = [_xla_integer_power(int(a), int(b), bits)
            for a, b in zip(x.view(u).tolist(), e.view(u).tolist())]
    bad = [(a, b, g, w) for a, b, g, w in zip(x.tolist(), e.tolist(),
                                               np.asarray(got).view(u).tolist(), want) if g != w]
    assert not bad, bad[:8]


def test_shifts_by_the_bit_width_or_more():
    text = """HloModule m
ENTRY main {
  x = s32[3] parameter(0)
  y = s32[3] parameter(1)
  a = s32[3] shift-left(x, y)
  b = s32[3] shift-right-arithmetic(x, y)
  c = s32[3] shift-right-logical(x, y)
  ROOT t = (s32[3], s32[3], s32[3]) tuple(a, b, c)
}
"""
    a, b, c = run(text, np.array([-8, 8, -8], np.int32), np.array([1, 32, 40], np.int32))
    np.testing.assert_array_equal(a, [-16, 0, 0])
    np.testing.assert_array_equal(b, [-4, 0, -1])
    np.testing.assert_array_equal(c, [2147483644, 0, 0])


def test_float_to_int_convert_saturates_and_maps_nan_to_zero():
    text = """HloModule m
ENTRY main {
  x = f32[6] parameter(0)
  a = s32[6] convert(x)
  b = u8[6] convert(x)
  ROOT t = (s32[6], u8[6]) tuple(a, b)
}
"""
    x = np.array([1.9, -1.9, 3e9, -3e9, np.nan, 300.0], np.float32)
    a, b = run(text, x)
    np.testing.assert_array_equal(a, [1, -1, 2147483647, -2147483648, 0, 300])
    np.testing.assert_array_equal(b, [1, 0, 255, 0, 0, 255])


@pytest.mark.parametrize("t,dt", [("bf16", ml_dtypes.bfloat16), ("f16", np.float16)])
def test_narrow_floats_round_after_every_op(t, dt):
    text = f"""HloModule m
ENTRY main {{
  x = {t}[256] parameter(0)
  y = {t}[256] parameter(1)
  m = {t}[256] multiply(x, y)
  a = {t}[256] add(m, x)
  ROOT d = {t}[256] divide(a, y)
}}
"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(256).astype(dt)
    y = (rng.standard_normal(256) + 3).astype(dt)
    want = ((x * y) + x) / y  # ml_dtypes/numpy round each op to the narrow type
    got = run(text, x, y)[0]
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


_NARROW_FLOATS = {"bf16": ml_dtypes.bfloat16, "f16": np.float16,
                  "f8e4m3fn": ml_dtypes.float8_e4m3fn}


def _add_of(t: str) -> str:
    """The HLO computation `add` of two t scalars."""
    return f"add {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n" \
        f"  ROOT s = {t}[] add(a, b)\n}}"


def _assert_within_3_ulps(got, exact, dt) -> None:
    ulp = 2.0 ** (np.floor(np.log2(exact)) - ml_dtypes.finfo(dt).nmant)
    assert (np.abs(got - exact) <= 3 * ulp).all(), (got, exact, ulp)


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("t", ["bf16", "f16", "f8e4m3fn"])
def test_long_narrow_float_sums_keep_growing(t, backend):
    """A reduce over 1000 (f8: 300) terms in [0.5, 1.5) with the type's own add, every step
    rounded to the type: the cpu backend summed them in one chain, which stops growing
    once the sum's ulp outgrows the terms (bf16: 512 for an exact 1016.9; XLA:CPU, which
    splits the reduction into blocks of 32, gives 1024). Within a few ulps of the exact sum.
    (Column sums: the test below.)"""
    dt = np.dtype(_NARROW_FLOATS[t])
    n = 300 if t.startswith("f8") else 1000
    x = (np.random.default_rng(3).random((2, n)) + 0.5).astype(dt)
    text = f"""HloModule m
{_add_of(t)}
ENTRY main {{
  x = {t}[2,{n}] parameter(0)
  z = {t}[] constant(0)
  ROOT r = {t}[2] reduce(x, z), dimensions={{1}}, to_apply=add
}}
"""
    got = xladist.compile(xladist.parse_hlo(text), backend=backend)(x)[0].astype(np.float64)
    exact = x.astype(np.float64).sum(axis=1)
    _assert_within_3_ulps(got, exact, dt)


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("t", ["bf16", "f16", "f8e4m3fn"])
@pytest.mark.parametrize("case", ["column", "column and row", "column by layout", "split",
                                  "fused"])
def test_narrow_float_column_sums_keep_growing(case, t, backend):
    """Column sums of narrow floats (a reduced dimension outside a kept one) within a few
    ulps of the exact sum: the cpu backend chained each output element over the rows,
    every step rounded to the type, and stalled (bf16[1000,2] over dimension 0 gave
    [512, 512]; XLA:CPU [992, 996], exact [993.5, 995.6]). "split": enough columns for
    the kernel to run in blocks on the pool; "fused": the reduce inside another kernel
    (a convert of it), with an innermost reduced dimension of 5."""
    dt = np.dtype(_NARROW_FLOATS[t])
    n = 300 if t.startswith("f8") else 1000  # (f8e4m3fn: sums under its 448)
    dims, layout, red, axes = {
        "column": ([n, 3], "", "0", (0,)),
        "column and row": ([n // 5, 2, 5], "", "0,2", (0, 2)),
        "column by layout": ([3, n], "{0,1}", "1", (1,)),
        "split": ([n, 700], "", "0", (0,)),
        "fused": ([n // 5, 2, 5], "", "0,2", (0, 2)),
    }[case]
    kept = [d for i, d in enumerate(dims) if i not in axes]
    x = (np.random.default_rng(5).random(dims) + 0.5).astype(dt)
    text = f"""HloModule m
{_add_of(t)}
ENTRY main {{
  x = {t}[{",".join(map(str, dims))}]{layout} parameter(0)
  z = {t}[] constant(0)
  r = {t}[{",".join(map(str, kept))}] reduce(x, z), dimensions={{{red}}}, to_apply=add
  {"ROOT " if case != "fused" else ""}c = {t}[{",".join(map(str, kept))}] copy(r)
  {"ROOT f = f32[2] convert(r)" if case == "fused" else ""}
}}
"""
    got = xladist.compile(xladist.parse_hlo(text), backend=backend)(x)[0].astype(np.float64)
    exact = x.astype(np.float64).sum(axis=axes)
    _assert_within_3_ulps(got, exact, dt)


def test_non_default_layouts_transpose_and_copy():
    text = """HloModule m
ENTRY main {
  x = f32[3,4,5] parameter(0)
  t = f32[5,3,4]{0,2,1} transpose(x), dimensions={2,0,1}
  c = f32[5,3,4]{2,1,0} copy(t)
  e = f32[5,3,4]{2,1,0} exponential(c)
  ROOT r = f32[4,3,5]{0,1,2} transpose(e), dimensions={2,1,0}
}
"""
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5) / 60
    got = run(text, x)[0]
    np.testing.assert_allclose(got, np.exp(x.transpose(2, 0, 1)).transpose(2, 1, 0), rtol=1e-6)


def test_sort_is_stable_and_carries_values():
    text = """HloModule m
cmp { a = f32[] parameter(0)
 b = f32[] parameter(1)
 c = s32[] parameter(2)
 d = s32[] parameter(3)
 ROOT lt = pred[] compare(a, b), direction=LT }
ENTRY main {
  k = f32[3,200] parameter(0)
  v = s32[3,200] parameter(1)
  ROOT s = (f32[3,200], s32[3,200]) sort(k, v), dimensions={1}, is_stable=true, to_apply=cmp
}
"""
    rng = np.random.default_rng(4)
    k = rng.integers(0, 10, (3, 200)).astype(np.float32)
    v = np.tile(np.arange(200, dtype=np.int32), (3, 1))
    ks, vs = run(text, k, v)
    order = np.argsort(k, axis=1, kind="stable")
    np.testing.assert_array_equal(ks, np.take_along_axis(k, order, 1))
    np.testing.assert_array_equal(vs, np.take_along_axis(v, order, 1))


def test_scatter_add_skips_out_of_bounds_windows_and_accumulates_duplicates():
    text = f"""HloModule m
{IADD}
ENTRY main {{
  o = s32[6,2] parameter(0)
  i = s32[4,1] parameter(1)
  u = s32[4,2] parameter(2)
  ROOT s = s32[6,2] scatter(o, i, u), update_window_dims={{1}}, inserted_window_dims={{0}},
      scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=iadd
}}
"""
    o = np.zeros((6, 2), np.int32)
    i = np.array([[1], [1], [6], [-1]], np.int32)
    u = np.array([[1, 2], [10, 20], [100, 100], [1000, 1000]], np.int32)
    want = o.copy()
    want[1] += u[0] + u[1]  # rows 6 and -1 are out of bounds: skipped, not clamped
    np.testing.assert_array_equal(run(text, o, i, u)[0], want)


def test_gather_clamps_start_indices():
    text = """HloModule m
ENTRY main {
  o = f32[5,3] parameter(0)
  i = s32[4] parameter(1)
  ROOT g = f32[4,2,3] gather(o, i), offset_dims={1,2}, collapsed_slice_dims={},
      start_index_map={0}, index_vector_dim=1, slice_sizes={2,3}
}
"""
    o = np.arange(15, dtype=np.float32).reshape(5, 3)
    i = np.array([0, 2, 4, -3], np.int32)
    starts = np.clip(i, 0, 3)
    want = np.stack([o[s:s + 2] for s in starts])
    np.testing.assert_array_equal(run(text, o, i)[0], want)


def test_reduce_window_max_pool_with_padding():
    text = f"""HloModule m
{MAX}
ENTRY main {{
  x = f32[1,5,5,1] parameter(0)
  ninf = f32[] constant(-inf)
  ROOT r = f32[1,3,3,1] reduce-window(x, ninf), window={{size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}}, to_apply=max
}}
"""
    x = np.random.default_rng(5).standard_normal((1, 5, 5, 1)).astype(np.float32)
    p = np.pad(x[0, :, :, 0], 1, constant_values=-np.inf)
    want = np.array([[p[2 * r:2 * r + 3, 2 * c:2 * c + 3].max() for c in range(3)]
                     for r in range(3)], np.float32)
    np.testing.assert_array_equal(run(text, x)[0][0, :, :, 0], want)


def test_select_and_scatter_routes_to_the_window_maximum():
    text = f"""HloModule m
{ADD}
ge {{ a = f32[] parameter(0)
 b = f32[] parameter(1)
 ROOT c = pred[] compare(a, b), direction=GE }}
ENTRY main {{
  x = f32[4,4] parameter(0)
  s = f32[2,2] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[4,4] select-and-scatter(x, s, z), window={{size=2x2 stride=2x2}}, select=ge, scatter=add
}}
"""
    x = np.random.default_rng(6).permutation(16).astype(np.float32).reshape(4, 4)
    s = np.array([[1, 2], [3, 4]], np.float32)
    want = np.zeros((4, 4), np.float32)
    for r in range(2):
        for c in range(2):
            w = x[2 * r:2 * r + 2, 2 * c:2 * c + 2]
            i, j = np.unravel_index(np.argmax(w), (2, 2))
            want[2 * r + i, 2 * c + j] += s[r, c]
    np.testing.assert_array_equal(run(text, x, s)[0], want)


def test_pad_with_interior_and_negative_edges_and_concatenate():
    text = """HloModule m
ENTRY main {
  x = s32[4] parameter(0)
  z = s32[] constant(-1)
  p = s32[8] pad(x, z), padding=2_-1_1
  ROOT c = s32[12] concatenate(p, x), dimensions={0}
}
"""
    x = np.array([1, 2, 3, 4], np.int32)
    np.testing.assert_array_equal(run(text, x)[0],
                                  [-1, -1, 1, -1, 2, -1, 3, -1, 1, 2, 3, 4])


def test_dynamic_slice_clamps_and_dynamic_update_slice():
    text = """HloModule m
ENTRY main {
  x = f32[6] parameter(0)
  i = s32[] parameter(1)
  d = f32[3] dynamic-slice(x, i), dynamic_slice_sizes={3}
  u = f32[6] dynamic-update-slice(x, d, i)
  ROOT t = (f32[3], f32[6]) tuple(d, u)
}
"""
    x = np.arange(6, dtype=np.float32)
    d, u = run(text, x, np.int32(5))
    np.testing.assert_array_equal(d, [3, 4, 5])  # start 5 clamped to 3
    np.testing.assert_array_equal(u, x)


def test_dot_general_with_batch_dims_matches_einsum():
    text = """HloModule m
ENTRY main {
  a = f32[2,3,4] parameter(0)
  b = f32[2,5,4] parameter(1)
  ROOT d = f32[2,3,5] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
}
"""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 3, 4), np.float32), rng.standard_normal((2, 5, 4), np.float32)
    np.testing.assert_allclose(run(text, a, b)[0], np.einsum("bik,bjk->bij", a, b), rtol=1e-5)


def test_grouped_strided_convolution_matches_a_direct_loop():
    text = """HloModule m
ENTRY main {
  x = f32[2,7,7,4] parameter(0)
  w = f32[3,3,2,6] parameter(1)
  ROOT c = f32[2,4,4,6] convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=2
}
"""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 7, 7, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 6)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((2, 4, 4, 6), np.float32)
    for o in range(6):
        g = o // 3
        for i in range(4):
            for j in range(4):
                patch = xp[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3, 2 * g:2 * g + 2]
                want[:, i, j, o] = np.einsum("bhwc,hwc->b", patch, w[:, :, :, o])
    np.testing.assert_allclose(run(text, x, w)[0], want, rtol=1e-4, atol=1e-5)


def test_while_loop_and_conditional():
    text = f"""HloModule m
{IADD}
cond {{ p = (s32[], f32[3]) parameter(0)
 i = s32[] get-tuple-element(p), index=0
 n = s32[] constant(5)
 ROOT lt = pred[] compare(i, n), direction=LT }}
body {{ p = (s32[], f32[3]) parameter(0)
 i = s32[] get-tuple-element(p), index=0
 v = f32[3] get-tuple-element(p), index=1
 one = s32[] constant(1)
 j = s32[] add(i, one)
 two = f32[] constant(2)
 tb = f32[3] broadcast(two), dimensions={{}}
 w = f32[3] multiply(v, tb)
 ROOT t = (s32[], f32[3]) tuple(j, w) }}
neg {{ a = f32[3] parameter(0)
 ROOT n = f32[3] negate(a) }}
ident {{ a = f32[3] parameter(0)
 ROOT c = f32[3] copy(a) }}
ENTRY main {{
  v = f32[3] parameter(0)
  k = s32[] parameter(1)
  z = s32[] constant(0)
  t = (s32[], f32[3]) tuple(z, v)
  w = (s32[], f32[3]) while(t), condition=cond, body=body
  r = f32[3] get-tuple-element(w), index=1
  ROOT c = f32[3] conditional(k, r, r), branch_computations={{neg, ident}}
}}
"""
    v = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(run(text, v, np.int32(0))[0], -32 * v)
    np.testing.assert_array_equal(run(text, v, np.int32(7))[0], 32 * v)  # out of range: last


class _RecordingDevice:
    """A DeviceContext for one device whose all-reduce combines with a fixed peer value."""

    replica_id = partition_id = 0
    replica_count = num_partitions = 1

    def __init__(self, peer):
        self.peer = peer
        self.reducers = []

    def collective(self, instr, args, reducer=None):
        self.reducers.append(reducer)
        return reducer(args[0], self.peer)


def test_collectives_call_the_device_context_with_a_compiled_reducer():
    text = f"""HloModule m
{MAX}
ENTRY main {{
  x = f32[4] parameter(0)
  e = f32[4] exponential(x)
  ROOT r = f32[4] all-reduce(e), replica_groups={{}}, to_apply=max
}}
"""
    peer = np.array([5, 0, 5, -1], np.float32)
    dev = _RecordingDevice(peer)
    exe = xladist.compile(xladist.parse_hlo(text), backend="cpu", device=dev)
    x = np.array([0, 1, 2, 3], np.float32)
    np.testing.assert_allclose(exe(x)[0], np.maximum(np.exp(x), peer), rtol=1e-6)
    assert dev.reducers[0].computation.name == "max"


def test_transpose_of_a_dot_becomes_the_swapped_dot():
    text = """HloModule m
ENTRY main {
  a = f32[8,5] parameter(0)
  b = f32[8,3] parameter(1)
  d = f32[5,3] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  t = f32[3,5]{0,1} transpose(d), dimensions={1,0}
  ROOT n = f32[3,5] negate(t)
}
"""
    ts = thunks(text)
    assert [t.kind for t in ts] == ["library", "kernel"]
    assert ts[0].instr.shape.has_default_layout()
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((8, 5), np.float32), rng.standard_normal((8, 3), np.float32)
    np.testing.assert_allclose(run(text, a, b)[0], -(a.T @ b).T, rtol=1e-5)


# A user that passes the transpose's bytes on under the layout its own shape declares. The
# first is the unoptimized JAX weight gradient returned by value_and_grad: it came back
# transposed (the rewrite gave the transpose row-major bytes under the tuple's {0,1}).
_TRANSPOSE_PASSED_ON = {
    "root tuple": """  ROOT r = (f32[3,5]{0,1}) tuple(t)""",
    "tuple, then read": """  p = (f32[3,5]{0,1}, f32[8,5]) tuple(t, a)
  g = f32[3,5]{0,1} get-tuple-element(p), index=0
  ROOT n = f32[3,5] negate(g)""",
    "call": """  ROOT c = f32[3,5] call(t), to_apply=neg""",
    "bitcast": """  ROOT c = f32[5,3] bitcast(t)""",
}


@pytest.mark.parametrize("user", sorted(_TRANSPOSE_PASSED_ON))
def test_transpose_of_a_dot_keeps_its_layout_for_users_that_pass_bytes_on(user):
    text = f"""HloModule m
neg {{
  x = f32[3,5]{{0,1}} parameter(0)
  ROOT n = f32[3,5] negate(x)
}}
ENTRY main {{
  a = f32[8,5] parameter(0)
  b = f32[8,3] parameter(1)
  d = f32[5,3] dot(a, b), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  t = f32[3,5]{{0,1}} transpose(d), dimensions={{1,0}}
{_TRANSPOSE_PASSED_ON[user]}
}}
"""
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((8, 5), np.float32), rng.standard_normal((8, 3), np.float32)
    want = xladist.compile(xladist.parse_hlo(text), backend="interpreter")(a, b)[0]
    np.testing.assert_allclose(run(text, a, b)[0], want, rtol=1e-5, atol=1e-6)


SOFTMAX = f"""HloModule softmax
{ADD}
{MAX}
ENTRY main {{
  x = f32[16,256] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[16] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = f32[16,256] broadcast(mx), dimensions={{0}}
  d = f32[16,256] subtract(x, mb)
  e = f32[16,256] exponential(d)
  z = f32[] constant(0)
  s = f32[16] reduce(e, z), dimensions={{1}}, to_apply=add
  sb = f32[16,256] broadcast(s), dimensions={{0}}
  ROOT r = f32[16,256] divide(e, sb)
}}
"""


def test_row_reductions_fuse_into_their_broadcast_consumer():
    ts = thunks(SOFTMAX)
    assert len(ts) == 1 and {"mx", "s"} <= {i.name for i in ts[0].spec.fused}
    x = (np.random.default_rng(10).standard_normal((16, 256)) * 5).astype(np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    np.testing.assert_allclose(run(SOFTMAX, x)[0], e / e.sum(1, keepdims=True), rtol=5e-6,
                               atol=1e-9)


def _exp_emissions(text, monkeypatch, row_cache_bytes):
    """How many times codegen emits an exponential for the text's one kernel."""
    from llvmlite import ir

    from xladist.compiler.codegen import elemental
    from xladist.compiler.codegen.kernels import core as kernels
    monkeypatch.setattr(kernels, "ROW_CACHE_BYTES", row_cache_bytes)
    # Planned first: compiling the module emits its kernel too unless the kernel cache
    # already holds it, and only emit_kernel's own emissions are to be counted.
    (t,) = thunks(text)
    calls = []
    rule = elemental.EMIT_RULES["exponential"]
    monkeypatch.setitem(elemental.EMIT_RULES, "exponential",
                        lambda ctx, i, idx: calls.append(i) or rule(ctx, i, idx))
    kernels.emit_kernel(ir.Module("m"), t.spec)
    return len(calls)


def test_softmax_computes_its_exponential_once_per_element(monkeypatch):
    # The sum's loop stores exp(x - max) for the row; the division reads it back.
    # (Codegen also tries a flat loop first, which emits its own.)
    assert _exp_emissions(SOFTMAX, monkeypatch, 64 << 10) < \
        _exp_emissions(SOFTMAX, monkeypatch, 0)


ROW_CACHED = f"""HloModule m
{ADD}
{MAX}
ENTRY main {{
  x = f32[6,{{m}}] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[6] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = f32[6,{{m}}] broadcast(mx), dimensions={{0}}
  d = f32[6,{{m}}] subtract(x, mb)
  e = f32[6,{{m}}] exponential(d)
  t = f32[6,{{m}}] tanh(x)
  et = f32[6,{{m}}] multiply(e, t)
  z = f32[] constant(0)
  s = f32[6] reduce(et, z), dimensions={{1}}, to_apply=add
  sb = f32[6,{{m}}] broadcast(s), dimensions={{0}}
  es = f32[6,{{m}}] divide(e, sb)
  ts = f32[6,{{m}}] multiply(t, sb)
  u = f32[6,{{m}}] add(es, ts)
  rv = f32[6,{{m}}] reverse(u), dimensions={{0}}
  ROOT r = f32[6,{{m}}] add(u, rv)
}}
"""


@pytest.mark.parametrize("m", [7, 1000, 20000])  # 20000 f32: longer than a row cache
@pytest.mark.slow
def test_row_cached_values_match_numpy(m, monkeypatch):
    monkeypatch.setenv("XLADIST_CACHE_DIR", "off")
    text = ROW_CACHED.replace("{m}", str(m))
    x = np.random.default_rng(m).standard_normal((6, m)).astype(np.float32) * 3
    x64 = x.astype(np.float64)
    e, t = np.exp(x64 - x64.max(1, keepdims=True)), np.tanh(x64)
    s = (e * t).sum(1, keepdims=True)
    u = e / s + t * s
    want = u + u[::-1]  # the reverse reads other rows' exp and tanh, not this row's
    got = run(text, x)[0]
    np.testing.assert_allclose(got, want, rtol=2e-4 * np.sqrt(m), atol=1e-5)
    from xladist.compiler.codegen.kernels import core as kernels
    monkeypatch.setattr(kernels, "ROW_CACHE_BYTES", 0)
    # Without the cache: the same bits (the row sums' order is codegen's, lanes.py,
    # whichever loops compute their elements).
    assert np.asarray(run(text, x)[0]).tobytes() == np.asarray(got).tobytes()


def test_a_reduce_broadcast_along_the_minor_dim_stays_a_kernel():
    text = f"""HloModule m
{ADD}
ENTRY main {{
  x = f32[16,256] parameter(0)
  z = f32[] constant(0)
  s = f32[256] reduce(x, z), dimensions={{0}}, to_apply=add
  sb = f32[16,256] broadcast(s), dimensions={{1}}
  ROOT r = f32[16,256] subtract(x, sb)
}}
"""
    ts = thunks(text)
    assert [t.spec.root.name for t in ts] == ["s", "r"]
    x = np.random.default_rng(11).standard_normal((16, 256)).astype(np.float32)
    np.testing.assert_allclose(run(text, x)[0], x - x.sum(0), rtol=1e-5, atol=1e-5)


def test_generic_async_wrapper_and_copy_start_done():
    text = """HloModule m
wrapped { a = f32[4] parameter(0)
 ROOT e = f32[4] exponential(a) }
ENTRY main {
  x = f32[4] parameter(0)
  s = ((f32[4]), f32[4], s32[]) async-start(x), calls=wrapped
  d = f32[4] async-done(s)
  cs = (f32[4], f32[4], u32[]) copy-start(d)
  c = f32[4] copy-done(cs)
  ROOT n = f32[4] negate(c)
}
"""
    x = np.array([0, 1, 2, 3], np.float32)
    np.testing.assert_allclose(run(text, x)[0], -np.exp(x), rtol=1e-6)


def test_result_buffers_are_reused_only_once_the_caller_dropped_them():
    exe = xladist.compile(xladist.parse_hlo("""HloModule m
ENTRY main {
  a = f32[1024] parameter(0)
  ROOT e = f32[1024] exponential(a)
}
"""), backend="cpu")
    x = np.linspace(-1, 1, 1024, dtype=np.float32)

    def addr(v):
        return v.__array_interface__["data"][0]

    (first,) = exe(x)
    kept = first.copy()
    (second,) = exe(x + 1)  # `first` is still held: a new buffer, `first` unchanged
    assert addr(second) != addr(first)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(second, np.exp(x + 1), rtol=1e-6)
    where = addr(second)
    del first, second
    (third,) = exe(x)  # nobody holds the last result: its buffer is written again
    assert addr(third) == where
    np.testing.assert_allclose(third, np.exp(x), rtol=1e-6)


RNG_STATE = """\
HloModule rng_state

%body (s: (s32[], u64[2])) -> (s32[], u64[2]) {
  %s = (s32[], u64[2]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %st = u64[2] rng-get-and-update-state(), delta=5
  %one = s32[] constant(1)
  %i.1 = s32[] add(%i, %one)
  ROOT %t = (s32[], u64[2]) tuple(%i.1, %st)
}

%cond (c: (s32[], u64[2])) -> pred[] {
  %c = (s32[], u64[2]) parameter(0)
  %k = s32[] get-tuple-element(%c), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%k, %three), direction=LT
}

ENTRY %main () -> (u64[2], u64[2], u64[2]) {
  %a = u64[2] rng-get-and-update-state(), delta=4
  %b = u64[2] rng-get-and-update-state(), delta=8
  %zero = s32[] constant(0)
  %init = (s32[], u64[2]) tuple(%zero, %a)
  %loop = (s32[], u64[2]) while(%init), condition=%cond, body=%body
  %last = u64[2] get-tuple-element(%loop), index=1
  ROOT %r = (u64[2], u64[2], u64[2]) tuple(%a, %b, %last)
}
"""


def test_rng_state_counts_per_run_through_loops_like_the_interpreter():
    # The counter starts at 0 in every run and advances by each instruction's delta, in
    # execution order, nested computations included: 0, 4, then 12, 17, 22 in the loop.
    module = xladist.parse_hlo(RNG_STATE)
    cpu = xladist.compile(module, backend="cpu")
    interp = xladist.compile(module, backend="interpreter")
    want = [[0, 0], [4, 0], [22, 0]]
    for _ in range(2):
        got = [np.asarray(v).tolist() for v in cpu()]
        assert got == want
    assert [np.asarray(v).tolist() for v in interp()] == want


@pytest.mark.parametrize("t,dt", [("c64", np.complex64), ("c128", np.complex128)])
def test_complex_rsqrt_compiles_and_matches_numpy(t, dt):
    text = f"HloModule r\nENTRY e {{\n a = {t}[6] parameter(0)\n ROOT r = {t}[6] rsqrt(a)\n}}\n"
    x = np.array([1 + 1j, -4, 2j, -3 - 0.5j, 1e-3 + 7j, 5], dt)
    got = xladist.compile(xladist.parse_hlo(text), backend="cpu")(x)[0]
    np.testing.assert_allclose(got, 1 / np.sqrt(x), rtol=1e-6 if t == "c64" else 1e-14)


_XLA_TABLE = Path(__file__).resolve().parent.parent / "data" / "complex_special_xla.npz"
_XLA = np.load(_XLA_TABLE)
_XLA_META = json.loads(str(_XLA["meta"]))
_XLA_OPS = [op for op in _XLA_META["unary"] + _XLA_META["binary"]
            if f"{op}.c64" in _XLA.files]  # XLA:CPU rejects complex sinh and cosh
_REAL = {"c64": "f32", "c128": "f64"}


def _xla_case(op, t):
    """The HLO module, its arguments and XLA:CPU's result (tools/gen_complex_special.py)."""
    g = _XLA[f"x.{t}"]
    binary = op in _XLA_META["binary"]
    args = [np.repeat(g, g.size), np.tile(g, g.size)] if binary else [g]
    n = args[0].size
    params = "".join(f" p{i} = {t}[{n}] parameter({i})\n" for i in range(len(args)))
    out = (_REAL[t] if op == "abs" else t) + f"[{n}]"
    text = (f"HloModule s\nENTRY e {{\n{params} ROOT r = {out} {op}("
            f"{', '.join(f'p{i}' for i in range(len(args)))})\n}}\n")
    return text, args, _XLA[f"{op}.{t}"]


def _fma_dependent(op, args):
    """Entries whose XLA value depends on XLA:CPU contracting a*b + c into one FMA
    (neither backend fuses): products of 1e30 (exact inside the FMA, rounded or overflowed
    apart) and z / z (the fused b*r - a keeps b*r's rounding error)."""
    if op not in ("multiply", "divide", "power"):
        return np.zeros(args[0].size, bool)
    big = np.zeros(args[0].size, bool)
    for a in args:
        e30 = a.real.dtype.type(1e30)
        big |= (np.abs(a.real) == e30) | (np.abs(a.imag) == e30)
    if op == "divide":
        big |= args[0] == args[1]
    return big


def _matches_xla(got, want, rtol):
    """Per part: NaN where XLA has NaN, the same infinity, the same signed zero (or a
    subnormal of that sign: XLA:CPU flushes denormals), else within rtol."""
    g, w = np.atleast_1d(got), np.atleast_1d(want)
    ok = np.ones(w.shape, bool)
    for u, v in ([(g.real, w.real), (g.imag, w.imag)] if np.iscomplexobj(w) else [(g, w)]):
        sign = np.signbit(u) == np.signbit(v)
        tiny = np.abs(u) < np.finfo(v.dtype).tiny
        exact = np.where(np.isnan(v), np.isnan(u),
                         np.where(v == 0, tiny & sign, np.where(np.isinf(v), (u == v), False)))
        with np.errstate(all="ignore"):
            near = np.isfinite(v) & (v != 0) & (np.abs(u - v) <= rtol * np.abs(v))
        ok &= exact | near
    return ok


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("t", ["c64", "c128"])
@pytest.mark.parametrize("op", _XLA_OPS)
@pytest.mark.slow
def test_complex_special_values_match_the_interpreter_and_xla(op, t, backend):
    """Every complex number with real and imaginary parts in (0, -0, 1, -2.5, 1e30, inf,
    -inf, NaN), and all pairs of them for binary ops: both backends give what XLA:CPU
    gave (jax 0.10.2, tests/data/complex_special_xla.npz) -- NaN parts, infinities and
    signed zeros exactly, finite parts to rounding. The backends used to give numpy's C99
    values (exp(inf + 0i), sin(0 + 1e30 i) = 0 + inf i, ...) where XLA's formulas give
    others (sin(0 + 1e30 i) = nan + inf i). The table once came from XLA compiled with fast
    math (tools/xla_cpu.py without jax's compile options), and both backends copied its
    |1 + nan i| = sqrt 2; XLA as jax runs it gives NaN."""
    text, args, want = _xla_case(op, t)
    got = xladist.compile(xladist.parse_hlo(text), backend=backend)(*args)[0]
    ok = _matches_xla(got, want, 1e-5 if t == "c64" else 1e-12) | _fma_dependent(op, args)
    bad = np.flatnonzero(~ok)
    assert not bad.size, [(tuple(a[k] for a in args), got[k], want[k]) for k in bad[:8]]


def test_composite_call_runs_its_decomposition():
    text = """HloModule comp
my_gelu {
  x = f32[5] parameter(0)
  t = f32[5] tanh(x)
  ROOT m = f32[5] multiply(x, t)
}
ENTRY e {
  a = f32[5] parameter(0)
  ROOT r = f32[5] call(a), to_apply=my_gelu, is_composite=true, frontend_attributes={composite.attributes={},composite.name="my.gelu",composite.version="1"}
}
"""
    x = np.linspace(-2, 2, 5, dtype=np.float32)
    got = xladist.compile(xladist.parse_hlo(text), backend="cpu")(x)[0]
    want = xladist.compile(xladist.parse_hlo(text), backend="interpreter")(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, x * np.tanh(x), rtol=1e-6)


# HLO before layout assignment may declare a tuple element (or a get-tuple-element) in
# another layout than the bytes it passes on; XLA's layout assignment inserts a copy there.
# Found in a Shardy module after XLA's algebraic simplifier: the transpose came back
# transposed on the cpu backend.
_LAYOUT_MISMATCHES = {
    "root tuple element": """  t = f32[3,5]{0,1} transpose(a), dimensions={1,0}
  ROOT r = (f32[3,5]{1,0}, f32[5,3]) tuple(t, a)""",
    "tuple element read back": """  t = f32[3,5]{1,0} transpose(a), dimensions={1,0}
  p = (f32[3,5]{0,1}) tuple(t)
  g = f32[3,5]{0,1} get-tuple-element(p), index=0
  ROOT n = f32[3,5] negate(g)""",
    "get-tuple-element": """  t = f32[3,5]{0,1} transpose(a), dimensions={1,0}
  p = (f32[3,5]{0,1}, f32[5,3]) tuple(t, a)
  ROOT g = f32[3,5]{1,0} get-tuple-element(p), index=0""",
    "get-tuple-element then tuple": """  t = f32[3,5]{0,1} transpose(a), dimensions={1,0}
  p = (f32[3,5]{0,1}) tuple(t)
  g = f32[3,5]{1,0} get-tuple-element(p), index=0
  ROOT r = (f32[3,5]{1,0}) tuple(g)""",
}


@pytest.mark.parametrize("case", sorted(_LAYOUT_MISMATCHES))
def test_tuples_copy_an_element_into_the_layout_they_declare(case):
    text = f"""HloModule m
ENTRY main {{
  a = f32[5,3] parameter(0)
{_LAYOUT_MISMATCHES[case]}
}}
"""
    a = np.arange(15, dtype=np.float32).reshape(5, 3)
    want = xladist.compile(xladist.parse_hlo(text), backend="interpreter")(a)
    got = run(text, a)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# The same rule at every depth of a nested tuple (found by a sweep of random layouts over
# tuple-shaped parameters: the cpu backend returned the element transposed, the
# interpreter right). Expected values from numpy: a (5x3) and its transpose.
_NESTED_LAYOUT_MISMATCHES = {
    "tuple element of a root tuple": ("""  t = f32[3,5]{0,1} transpose(a), dimensions={1,0}
  i = (f32[3,5]{0,1}) tuple(t)
  ROOT r = ((f32[3,5]{1,0}), f32[5,3]) tuple(i, a)""", lambda a: [a.T, a]),
    "tuple-valued get-tuple-element": ("""  t = f32[3,5]{0,1} transpose(a), dimensions={1,0}
  i = (f32[3,5]{0,1}) tuple(t)
  o = ((f32[3,5]{0,1}), f32[5,3]) tuple(i, a)
  g = (f32[3,5]{1,0}) get-tuple-element(o), index=0
  e = f32[3,5]{1,0} get-tuple-element(g), index=0
  ROOT n = f32[3,5] negate(e)""", lambda a: [-a.T]),
    "nested tuple parameter": ("""  p = (f32[5,3]{1,0}, (f32[5,3]{0,1})) parameter(1)
  q = (f32[5,3]{1,0}) get-tuple-element(p), index=1
  e = f32[5,3]{1,0} get-tuple-element(q), index=0
  ROOT s = ((f32[5,3]{1,0}), f32[5,3]) tuple(q, f32[5,3] add(e, a))""", lambda a: [a, a + a]),
}


@pytest.mark.parametrize("case", sorted(_NESTED_LAYOUT_MISMATCHES))
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_nested_tuples_take_the_layouts_they_declare(case, backend):
    body, expected = _NESTED_LAYOUT_MISMATCHES[case]
    text = f"""HloModule m
ENTRY main {{
  a = f32[5,3] parameter(0)
{body}
}}
"""
    a = np.arange(15, dtype=np.float32).reshape(5, 3)
    args = [a, (a, (a,))] if "parameter(1)" in body else [a]
    got = xladist.compile(xladist.parse_hlo(text), backend=backend)(*args)
    want = expected(a)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# An instruction that hands on an operand's bytes (opt-barrier, add-dependency, domain,
# copy-done, async-done) or a called computation's (async-start) may declare another layout
# before layout assignment, which then adds a copy. The cpu backend read the bytes under
# the declared layout: x came back transposed (found by a sweep of random layouts).
_HANDED_ON = {
    "opt-barrier": """  o = s32[2,3]{0,1} opt-barrier(x)""",
    "opt-barrier of a tuple": """  t = (s32[2,3]{1,0}, s32[]) tuple(x, s32[] constant(1))
  b = (s32[2,3]{0,1}, s32[]) opt-barrier(t)
  o = s32[2,3]{0,1} get-tuple-element(b), index=0""",
    "add-dependency": """  tk = token[] after-all()
  o = s32[2,3]{0,1} add-dependency(x, tk)""",
    "domain": """  o = s32[2,3]{0,1} domain(x), domain={kind="sharding", entry={maximal device=0}, exit={maximal device=0}}""",
    "copy-done": """  cs = (s32[2,3]{1,0}, s32[2,3]{1,0}, u32[]) copy-start(x)
  o = s32[2,3]{0,1} copy-done(cs)""",
    "async-done of a callee root in another layout": """  s = ((s32[2,3]{1,0}), s32[2,3]{0,1}, s32[]) async-start(x), calls=f
  o = s32[2,3]{0,1} async-done(s)""",
    "async-start into a callee parameter in another layout": """  s = ((s32[2,3]{1,0}), s32[2,3]{1,0}, s32[]) async-start(x), calls=g
  o = s32[2,3]{1,0} async-done(s)""",
}


@pytest.mark.parametrize("case", sorted(_HANDED_ON))
def test_values_handed_on_take_the_layouts_they_declare(case):
    text = f"""HloModule m
f {{
  p = s32[2,3]{{1,0}} parameter(0)
  ROOT c = s32[2,3]{{1,0}} copy(p)
}}
g {{
  p = s32[2,3]{{0,1}} parameter(0)
  ROOT c = s32[2,3]{{1,0}} copy(p)
}}
ENTRY e {{
  x = s32[2,3]{{1,0}} parameter(0)
{_HANDED_ON[case]}
  ROOT n = s32[2,3]{{1,0}} negate(o)
}}
"""
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    for backend in ("cpu", "interpreter"):
        got = xladist.compile(xladist.parse_hlo(text), backend=backend)(x)
        np.testing.assert_array_equal(got[0], -x, err_msg=backend)


# A pad (or a concatenate) of an empty array emits a branch into its operand that never
# runs; the concatenate of empty operands under it raised a Python IndexError from
# codegen (found by a random-program sweep of shapes with size-0 dimensions).
@pytest.mark.parametrize("dt", ["s32", "pred", "bf16", "c64", "f8e4m3fn", "s4"])
def test_pad_of_a_concatenate_of_empty_arrays(dt):
    text = f"""HloModule m
ENTRY e {{
  p = {dt}[2,0] parameter(0)
  c = {dt}[2,0] concatenate(p, p), dimensions={{1}}
  v = {dt}[] parameter(1)
  ROOT r = {dt}[6,1] pad(c, v), padding=2_0_2x1_0_0
}}
"""
    m = xladist.parse_hlo(text)
    p = m.entry.parameters[0].shape.dtype
    v = np.ones((), p)
    got = xladist.compile(m, backend="cpu")(np.zeros((2, 0), p), v)[0]
    np.testing.assert_array_equal(got, np.ones((6, 1), p))
