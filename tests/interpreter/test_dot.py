"""dot and ragged-dot against naive loops / numpy einsum / jax."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from tests.interpreter.support import S, instr, run, shape_of
from xladist.interpreter.dot import dot_general, ragged_dot
from tests.optional import need_jax

BF16 = np.dtype(ml_dtypes.bfloat16)


def naive_dot(lhs, rhs, lc, rc, lb, rb, acc_dtype):
    """Element-by-element DotGeneral straight from the operation semantics."""
    lf = [d for d in range(lhs.ndim) if d not in lc + lb]
    rf = [d for d in range(rhs.ndim) if d not in rc + rb]
    out_dims = [lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lf] + \
        [rhs.shape[d] for d in rf]
    out = np.zeros(out_dims, acc_dtype)
    for o in itertools.product(*[range(n) for n in out_dims]):
        b, m, n = o[:len(lb)], o[len(lb):len(lb) + len(lf)], o[len(lb) + len(lf):]
        acc = acc_dtype.type(0)
        for k in itertools.product(*[range(lhs.shape[d]) for d in lc]):
            li, ri = [0] * lhs.ndim, [0] * rhs.ndim
            for d, v in zip(lb, b):
                li[d] = v
            for d, v in zip(rb, b):
                ri[d] = v
            for d, v in zip(lf, m):
                li[d] = v
            for d, v in zip(rf, n):
                ri[d] = v
            for d, v in zip(lc, k):
                li[d] = v
            for d, v in zip(rc, k):
                ri[d] = v
            acc = acc + acc_dtype.type(lhs[tuple(li)]) * acc_dtype.type(rhs[tuple(ri)])
        out[o] = acc
    return out


DIMS = [
    # lhs shape, rhs shape, lc, rc, lb, rb
    ((3, 4), (4, 5), (1,), (0,), (), ()),                 # matmul
    ((4,), (4,), (0,), (0,), (), ()),                     # vector . vector -> scalar
    ((2, 3, 4), (2, 4, 5), (2,), (1,), (0,), (0,)),       # batch matmul
    ((4, 2, 3), (3, 5, 2), (2,), (0,), (1,), (2,)),       # batch dims not leading
    ((2, 3, 4, 5), (5, 4, 6), (2, 3), (1, 0), (), ()),    # two contracting dims, reordered
    ((3, 2), (2, 4), (), (), (), ()),                     # outer product
    ((3, 0), (0, 2), (1,), (0,), (), ()),                 # empty contraction -> zeros
]


@pytest.mark.parametrize("case", DIMS, ids=[f"{a}x{b}" for a, b, *_ in DIMS])
def test_dot_general_matches_naive_loops(case):
    ls, rs_, lc, rc, lb, rb = case
    rng = np.random.RandomState(0)
    lhs = rng.randn(*ls)
    rhs = rng.randn(*rs_)
    ref = naive_dot(lhs, rhs, list(lc), list(rc), list(lb), list(rb), np.dtype(np.float64))
    out_shape = shape_of(ref)
    ins = instr("dot", out_shape, [shape_of(lhs), shape_of(rhs)], lhs_contracting_dims=lc,
                rhs_contracting_dims=rc, lhs_batch_dims=lb, rhs_batch_dims=rb)
    got = run(ins, lhs, rhs)
    assert got.shape == ref.shape and got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_s8_times_s8_gives_s32_without_overflow():
    lhs = np.full((2, 64), 127, np.int8)
    rhs = np.full((64, 3), -128, np.int8)
    ins = instr("dot", S("s32", 2, 3), [S("s8", 2, 64), S("s8", 64, 3)],
                lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    got = run(ins, lhs, rhs)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.full((2, 3), 127 * -128 * 64, np.int32))


def test_integer_dot_wraps_in_result_width():
    lhs = np.array([[2**30, 2**30, 2**30, 2**30]], np.int32)
    rhs = np.array([[3], [1], [1], [1]], np.int32)
    got = dot_general(lhs, rhs, (1,), (0,), result_dtype=np.int32)
    expected = np.int64(2**30 * 6)  # 6 * 2**30 mod 2**32, as a signed 32-bit value
    assert got[0, 0] == np.int32(((expected + 2**31) % 2**32) - 2**31)
    u = dot_general(np.array([2**31, 2**31], np.uint32), np.array([1, 1], np.uint32), (0,), (0,),
                    result_dtype=np.uint32)
    assert u == 0


def test_bf16_accumulates_in_f32_and_rounds_once():
    # 1 + 256 * 2**-8: in bf16 every partial sum 1 + k/256 rounds back to 1 (8-bit
    # mantissa), so a bf16 accumulator gives 1.0; f32 accumulation gives exactly 2.0.
    lhs = np.array([[1.0] + [2.0**-8] * 256], BF16)
    rhs = np.ones((257, 1), BF16)
    got = dot_general(lhs, rhs, (1,), (0,), result_dtype=BF16)
    assert got.dtype == BF16 and float(got[0, 0]) == 2.0


def test_bf16_operands_with_f32_result():
    rng = np.random.RandomState(1)
    lhs = rng.randn(4, 8).astype(BF16)
    rhs = rng.randn(8, 3).astype(BF16)
    ins = instr("dot", S("f32", 4, 3), [S("bf16", 4, 8), S("bf16", 8, 3)],
                lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    got = run(ins, lhs, rhs)
    assert got.dtype == np.float32
    ref = lhs.astype(np.float64) @ rhs.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_pred_dot_is_or_of_and():
    lhs = np.array([[True, False], [False, False]])
    rhs = np.array([[True], [True]])
    got = dot_general(lhs, rhs, (1,), (0,), result_dtype=np.bool_)
    np.testing.assert_array_equal(got, [[True], [False]])


def test_complex_dot():
    rng = np.random.RandomState(2)
    lhs = (rng.randn(3, 4) + 1j * rng.randn(3, 4)).astype(np.complex64)
    rhs = (rng.randn(4, 2) + 1j * rng.randn(4, 2)).astype(np.complex64)
    got = dot_general(lhs, rhs, (1,), (0,), result_dtype=np.complex64)
    np.testing.assert_allclose(got, lhs.astype(np.complex128) @ rhs, rtol=1e-5)


# ---- ragged-dot -------------------------------------------------------------------------

def test_ragged_dot_mode1_rows_use_their_group():
    rng = np.random.RandomState(3)
    lhs = rng.randn(7, 4)
    rhs = rng.randn(3, 4, 5)
    sizes = np.array([2, 0, 4], np.int32)  # rows 0-1 group 0, rows 2-5 group 2, row 6 none
    ins = instr("ragged-dot", S("f64", 7, 5), [S("f64", 7, 4), S("f64", 3, 4, 5), S("s32", 3)],
                lhs_contracting_dims=(1,), rhs_contracting_dims=(1,), lhs_ragged_dims=(0,),
                rhs_group_dims=(0,))
    got = run(ins, lhs, rhs, sizes)
    ref = np.zeros((7, 5))
    ref[0:2] = lhs[0:2] @ rhs[0]
    ref[2:6] = lhs[2:6] @ rhs[2]
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_ragged_dot_mode2_contracting_groups():
    rng = np.random.RandomState(4)
    lhs = rng.randn(3, 6)
    rhs = rng.randn(6, 2)
    sizes = np.array([1, 3, 2])
    got = ragged_dot(lhs, rhs, sizes, (1,), (0,), (), (), 1, None, np.float64)
    ref = np.stack([lhs[:, 0:1] @ rhs[0:1], lhs[:, 1:4] @ rhs[1:4], lhs[:, 4:6] @ rhs[4:6]])
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_ragged_dot_matches_jax():
    jax = need_jax()
    rng = np.random.RandomState(5)
    lhs = rng.randn(9, 4).astype(np.float32)
    rhs = rng.randn(3, 4, 2).astype(np.float32)
    sizes = np.array([3, 3, 2], np.int32)
    ref = np.asarray(jax.lax.ragged_dot(lhs, rhs, sizes, precision="highest"))
    got = ragged_dot(lhs, rhs, sizes, (1,), (1,), (), (), 0, 0, np.float32)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_a_dot_algorithm_is_carried_and_not_applied_as_on_xla_cpu():
    """algorithm= names an input precision that XLA:CPU does not apply (jax 0.10.2 gives
    the f32 product for dot_bf16_bf16_f32): 1 + 2**-12, exact in f32, stays so under every
    algorithm, on both backends."""
    import xladist
    lhs = np.array([[1.0 + 2.0**-12]], np.float32)
    rhs = np.array([[1.0]], np.float32)
    for alg in ("dot_f32_f32_f32", "dot_bf16_bf16_f32", "dot_tf32_tf32_f32",
                "dot_f16_f16_f32", "dot_bf16_bf16_f32_x6"):
        ins = instr("dot", S("f32", 1, 1), [S("f32", 1, 1), S("f32", 1, 1)],
                    lhs_contracting_dims=(1,), rhs_contracting_dims=(0,), algorithm=alg)
        assert float(run(ins, lhs, rhs)[0, 0]) == 1.0 + 2.0**-12, alg
        module = xladist.parse_hlo(
            "HloModule m\nENTRY e {\n a = f32[1,1] parameter(0)\n b = f32[1,1] parameter(1)\n"
            " ROOT d = f32[1,1] dot(a, b), lhs_contracting_dims={1}, "
            f"rhs_contracting_dims={{0}}, algorithm={alg}\n}}\n")
        got = xladist.compile(module, backend="cpu")(lhs, rhs)[0]
        assert float(got[0, 0]) == 1.0 + 2.0**-12, alg


# (operand type, result type, lhs values, want): lhs . [1, 1, 1] as XLA:CPU (jax 0.10.2)
# computes it. A result less precise than the operands is computed at the operands'
# precision and rounded once; f16 -> bf16 rounds the operands to bf16 first (bf16 has the
# range, so XLA's OperandUpcaster converts to it: 1 + 2^-9 becomes 1).
_NARROWER_RESULTS = [
    ("f64", "f32", np.array([1 + 2**-30, -1, 0]), 2.0**-30),
    ("f64", "bf16", np.array([1 + 2**-30, -1, 0]), 2.0**-30),
    ("f32", "bf16", np.array([1 + 2**-20, -1, 0], np.float32), 2.0**-20),
    ("f32", "f16", np.array([1 + 2**-20, -1, 0], np.float32), 2.0**-20),
    ("c128", "c64", np.array([1 + 2**-30, -1, 0], np.complex128), 2.0**-30),
    ("f16", "bf16", np.array([1 + 2**-9, -1, 0], np.float16), 0.0),
]


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("op", ["dot", "convolution"])
@pytest.mark.parametrize("operand,result,lhs,want", _NARROWER_RESULTS,
                         ids=[f"{a}-{b}" for a, b, *_ in _NARROWER_RESULTS])
def test_a_result_narrower_than_the_operands_rounds_once(backend, op, operand, result, lhs,
                                                         want):
    """f32 x f32 -> bf16 (a dot whose HLO result type is narrower than its operands): the
    interpreter rounded the operands to bf16 before multiplying (0 here, where XLA:CPU
    gives 2^-20), and both backends rounded f64 operands of an f32 or bf16 result to f32
    (0 where XLA gives 2^-30); the cpu backend also multiplied f16 operands of a bf16
    result unrounded (2^-9 where XLA gives 0). Found by the structural-op sweep."""
    import xladist
    if op == "dot":
        body = (f"x = {operand}[1,3] parameter(0)\n  y = {operand}[3,1] parameter(1)\n"
                f"  ROOT d = {result}[1,1] dot(x, y), lhs_contracting_dims={{1}}, "
                f"rhs_contracting_dims={{0}}")
        shapes = (1, 3), (3, 1)
    else:
        body = (f"x = {operand}[1,3,1] parameter(0)\n  w = {operand}[3,1,1] parameter(1)\n"
                f"  ROOT c = {result}[1,1,1] convolution(x, w), window={{size=3}}, "
                f"dim_labels=b0f_0io->b0f")
        shapes = (1, 3, 1), (3, 1, 1)
    exe = xladist.compile(xladist.parse_hlo(f"HloModule m\nENTRY main {{\n  {body}\n}}\n"),
                          backend=backend)
    (got,) = exe(lhs.reshape(shapes[0]), np.ones(shapes[1], lhs.dtype))
    assert complex(got.reshape(())) == want


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_pred_operands_of_an_integer_result_are_counted(backend):
    """pred x pred -> u8 converts the operands to u8 (pred is 1 bit, less precise than
    any integer), so the product counts the true pairs: XLA:CPU gives 3 for three."""
    import xladist
    text = """HloModule m
ENTRY main {
  x = pred[1,3] parameter(0)
  y = pred[3,1] parameter(1)
  ROOT d = u8[1,1] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    exe = xladist.compile(xladist.parse_hlo(text), backend=backend)
    (got,) = exe(np.ones((1, 3), bool), np.ones((3, 1), bool))
    assert got.dtype == np.uint8 and got.tolist() == [[3]]


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("op", ["dot", "convolution"])
def test_a_product_in_a_more_precise_operand_type_rounds_to_it_first(backend, op):
    """f8e5m2 x f8e5m2 -> f8e4m3fn: XLA computes the product as an f8e5m2 value and then
    converts it, so a sum of -1.875 (exact in e4m3fn) becomes e5m2's -2 (1.875 is halfway
    between e5m2's 1.75 and 2; ties to even) and stays -2: XLA:CPU (jax 0.10.2) gives -2,
    both backends gave -1.875. Found by the structural-op sweep."""
    import xladist
    if op == "dot":
        body = ("x = f8e5m2[1,2] parameter(0)\n  y = f8e5m2[2,1] parameter(1)\n"
                "  ROOT d = f8e4m3fn[1,1] dot(x, y), lhs_contracting_dims={1}, "
                "rhs_contracting_dims={0}")
        shapes = (1, 2), (2, 1)
    else:
        body = ("x = f8e5m2[1,2,1] parameter(0)\n  w = f8e5m2[2,1,1] parameter(1)\n"
                "  ROOT c = f8e4m3fn[1,1,1] convolution(x, w), window={size=2}, "
                "dim_labels=b0f_0io->b0f")
        shapes = (1, 2, 1), (2, 1, 1)
    exe = xladist.compile(xladist.parse_hlo(f"HloModule m\nENTRY main {{\n  {body}\n}}\n"),
                          backend=backend)
    e5m2 = ml_dtypes.float8_e5m2
    (got,) = exe(np.array([-1.5, -0.375], e5m2).reshape(shapes[0]),
                 np.ones(shapes[1], e5m2))
    assert got.dtype == ml_dtypes.float8_e4m3fn and float(got.reshape(())) == -2.0


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_an_f64_product_with_an_f8_result_rounds_once_recorded_from_xla_cpu(backend):
    """An f64 dot into an f8 result is its f64 sum converted once (XLA:CPU, jax 0.10.2).
    Both backends stored the sum with ml_dtypes' cast, which goes through f32: a sum just
    off an f8 midpoint became the midpoint (f8e8m0fnu 1.4999999999991 gave 2, XLA 1)."""
    import xladist
    sums = [1.5 - 2**-40, 1.75 - 2**-40, 432 - 2**-30]
    xla = {"f8e4m3fn": [60, 62, 125], "f8e8m0fnu": [127, 128, 136], "f8e5m2": [62, 63, 95]}
    x = np.array([[s, 1.0, -1.0] for s in sums])
    for t, want in xla.items():
        text = (f"HloModule m\nENTRY main {{\n  x = f64[3,3] parameter(0)\n  y = f64[3,1] "
                f"parameter(1)\n  ROOT d = {t}[3,1] dot(x, y), lhs_contracting_dims={{1}}, "
                f"rhs_contracting_dims={{0}}\n}}\n")
        (got,) = xladist.compile(xladist.parse_hlo(text), backend=backend)(x, np.ones((3, 1)))
        assert got.reshape(-1).view(np.uint8).tolist() == want, t
