"""sort and topk against numpy's stable sorts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.interpreter.support import S, StandInEvaluator, comparator, instr, run, shape_of
from xladist.builder import XlaBuilder
from xladist.hlo.shape import Shape
from xladist.semantics.order import total_order_key
from xladist.interpreter.sort import sort_along
from tests.optional import need_jax


def _sort(operands, dim, comp):
    shapes = [shape_of(o) for o in operands]
    out = Shape.tuple_of(shapes) if len(operands) > 1 else shapes[0]
    return instr("sort", out, shapes, dimensions=(dim,), is_stable=True, to_apply=comp)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 33, 100])
@pytest.mark.parametrize("dim", [0, 1])
def test_sort_ascending_matches_numpy(n, dim):
    x = np.random.RandomState(n).randint(-5, 5, size=(n, 4) if dim == 0 else (4, n))
    x = x.astype(np.int32)
    got = run(_sort([x], dim, comparator("LT", ["s32"])), x)
    np.testing.assert_array_equal(got, np.sort(x, axis=dim, kind="stable"))


def test_sort_descending_comparator():
    x = np.random.RandomState(1).randn(3, 20).astype(np.float32)
    got = run(_sort([x], 1, comparator("GT", ["f32"])), x)
    np.testing.assert_array_equal(got, -np.sort(-x, axis=1))


def test_multi_operand_sort_is_stable_argsort():
    keys = np.random.RandomState(2).randint(0, 4, size=(2, 50)).astype(np.int32)
    iota = np.broadcast_to(np.arange(50, dtype=np.int32), keys.shape).copy()
    k, i = run(_sort([keys, iota], 1, comparator("LT", ["s32", "s32"], key=0)), keys, iota)
    np.testing.assert_array_equal(i, np.argsort(keys, axis=1, kind="stable"))
    np.testing.assert_array_equal(k, np.sort(keys, axis=1))


def test_sort_by_second_operand_carries_the_first():
    vals = np.array([10.0, 20.0, 30.0, 40.0], np.float32)
    keys = np.array([3, 1, 2, 0], np.int32)
    v, k = run(_sort([vals, keys], 0, comparator("LT", ["f32", "s32"], key=1)), vals, keys)
    np.testing.assert_array_equal(v, [40, 20, 30, 10])
    np.testing.assert_array_equal(k, [0, 1, 2, 3])


def test_total_order_comparator_orders_nan_and_signed_zero():
    x = np.array([np.nan, 1.0, -0.0, -np.inf, 0.0, -np.nan, np.inf, -1.0], np.float32)
    got = run(_sort([x], 0, comparator("LT", ["f32"], total_order=True)), x)
    bits = got.view(np.uint32)
    expected = np.array([-np.nan, -np.inf, -1.0, -0.0, 0.0, 1.0, np.inf, np.nan], np.float32)
    np.testing.assert_array_equal(bits, expected.view(np.uint32))


def test_sort_3d_middle_dimension():
    x = np.random.RandomState(3).randn(2, 9, 3)
    got = run(_sort([x], 1, comparator("LT", ["f64"])), x)
    np.testing.assert_array_equal(got, np.sort(x, axis=1))


def test_inconsistent_comparator_falls_back_and_stays_a_permutation():
    # LE is not a strict weak order; the result must still be a permutation, sorted.
    x = np.random.RandomState(4).randint(0, 3, size=40).astype(np.int32)
    got = run(_sort([x], 0, comparator("LE", ["s32"])), x)
    np.testing.assert_array_equal(np.sort(got), np.sort(x))
    assert (np.diff(got) >= 0).all()


def test_vectorized_merge_uses_few_comparator_calls():
    x = np.random.RandomState(5).randn(8, 256)
    ev = StandInEvaluator()
    sort_along([x], 1, lambda a, b: ev.call_vectorized(comparator("LT", ["f64"]),
                                                       [a[0], b[0]]))
    assert ev.calls <= 8 * 9 // 2 + 8  # sum over levels of log2(width)+1


def test_total_order_key_bf16():
    import ml_dtypes
    x = np.array([1.0, -2.0, 0.5, -0.0, 0.0], ml_dtypes.bfloat16)
    order = np.argsort(total_order_key(x), kind="stable")
    np.testing.assert_array_equal(order, [1, 3, 4, 2, 0])


# ---- topk ------------------------------------------------------------------------------

def _topk(x, k, largest=True, comp=None):
    out = Shape.tuple_of([S(shape_of(x).element_type.name, *x.shape[:-1], k),
                          S("s32", *x.shape[:-1], k)])
    attrs = {"k": k, "largest": largest}
    if comp is not None:
        attrs["to_apply"] = comp
    return instr("topk", out, [shape_of(x)], **attrs)


def test_topk_largest_with_ties_by_lower_index():
    x = np.array([[1, 5, 3, 5, 2, 5], [0, -1, 0, 4, 4, 1]], np.int32)
    v, i = run(_topk(x, 4), x)
    np.testing.assert_array_equal(v, [[5, 5, 5, 3], [4, 4, 1, 0]])
    np.testing.assert_array_equal(i, [[1, 3, 5, 2], [3, 4, 5, 0]])
    assert i.dtype == np.int32


def test_topk_smallest():
    x = np.array([3.0, 1.0, 2.0, 1.0], np.float32)
    v, i = run(_topk(x, 2, largest=False), x)
    np.testing.assert_array_equal(v, [1, 1])
    np.testing.assert_array_equal(i, [1, 3])


def test_topk_float_total_order_puts_nan_first():
    x = np.array([1.0, np.nan, 3.0, -np.inf], np.float32)
    v, i = run(_topk(x, 3), x)
    np.testing.assert_array_equal(i, [1, 2, 0])
    np.testing.assert_array_equal(v[1:], [3.0, 1.0])
    assert np.isnan(v[0])


def test_topk_with_comparator():
    x = np.random.RandomState(6).randn(3, 10).astype(np.float32)
    v, i = run(_topk(x, 3, comp=comparator("GT", ["f32"])), x)
    ref = np.argsort(-x, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(i, ref)
    np.testing.assert_array_equal(v, np.take_along_axis(x, ref, axis=1))


def test_topk_matches_jax():
    jax = need_jax()
    x = np.random.RandomState(7).randint(0, 5, size=(4, 12)).astype(np.float32)
    jv, ji = jax.lax.top_k(x, 5)
    v, i = run(_topk(x, 5), x)
    np.testing.assert_array_equal(v, np.asarray(jv))
    np.testing.assert_array_equal(i, np.asarray(ji))


def test_comparator_with_unused_parameters_in_any_order():
    # jax's argsort comparator declares parameters out of order and ignores some.
    b = XlaBuilder("argsort_cmp")
    ps = [b.parameter(n, S("s32"), name=f"p{n}") for n in (2, 3, 0, 1)]
    comp = b.build_computation(b.instruction("compare", [ps[2], ps[3]], direction="LT"))
    assert [i.parameter_number for i in comp.instructions[:4]] == [2, 3, 0, 1]
    keys = np.array([[5, 3, 9, 3]], np.int32)
    iota = np.array([[0, 1, 2, 3]], np.int32)
    _, idx = run(_sort([keys, iota], 1, comp), keys, iota)
    np.testing.assert_array_equal(idx, [[1, 3, 0, 2]])


@pytest.mark.parametrize("shape,dim", [((0, 25), 0), ((3, 0), 1), ((0,), 0), ((2, 0, 3), 1)])
def test_sort_along_an_empty_dimension_is_empty(shape, dim):
    # Found by a random-program sweep: an empty sorted dimension raised "cannot reshape
    # array of size 0 into shape (0)" (an internal interpreter error); XLA returns the
    # empty operands.
    keys = np.zeros(shape, np.int32)
    vals = np.ones(shape, np.float32)
    k, v = run(_sort([keys, vals], dim, comparator("LT", ["s32", "f32"], key=0)), keys, vals)
    assert k.shape == shape and k.dtype == np.int32
    assert v.shape == shape and v.dtype == np.float32
