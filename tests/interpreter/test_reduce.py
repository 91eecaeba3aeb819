"""reduce, reduce-window, select-and-scatter and map against numpy / naive loops."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tests.interpreter.support import (
    S,
    StandInEvaluator,
    argmax_reducer,
    binary,
    comparator,
    instr,
    run,
    shape_of,
)
from xladist.hlo.attrs import Window, WindowDim
from xladist.hlo.shape import Shape
from tests.optional import need_jax


def _reduce(x, init, dims, comp, out_type):
    keep = [d for d in range(x.ndim) if d not in dims]
    out = S(out_type, *[x.shape[d] for d in keep])
    ins = instr("reduce", out, [shape_of(x), S(out_type)], dimensions=tuple(dims),
                to_apply=comp)
    return ins


@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (0, 2), (0, 1, 2), ()])
def test_reduce_add_matches_numpy(dims):
    x = np.random.RandomState(0).randn(3, 5, 4)
    ins = _reduce(x, 0.0, dims, binary("add", "f64"), "f64")
    got = run(ins, x, np.float64(0))
    np.testing.assert_allclose(got, x.sum(axis=dims) if dims else x, rtol=1e-12)


def test_reduce_applies_init_once():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    ins = _reduce(x, 100, (1,), binary("add", "s32"), "s32")
    np.testing.assert_array_equal(run(ins, x, np.int32(100)), x.sum(axis=1) + 100)


def test_reduce_max_integer_and_empty():
    x = np.array([[3, -7, 5], [-1, -2, -3]], np.int32)
    ins = _reduce(x, 0, (1,), binary("maximum", "s32"), "s32")
    np.testing.assert_array_equal(run(ins, x, np.int32(np.iinfo(np.int32).min)), [5, -1])
    empty = np.zeros((2, 0), np.float32)
    ins = _reduce(empty, 0, (1,), binary("maximum", "f32"), "f32")
    np.testing.assert_array_equal(run(ins, empty, np.float32(-np.inf)), [-np.inf, -np.inf])


def test_reduce_uses_logarithmic_number_of_calls():
    x = np.ones((1000, 3), np.float32)
    ev = StandInEvaluator()
    got = run(_reduce(x, 0, (0,), binary("add", "f32"), "f32"), x, np.float32(0), ev=ev)
    np.testing.assert_array_equal(got, [1000, 1000, 1000])
    assert ev.calls <= math.ceil(math.log2(1000)) + 1


def test_variadic_reduce_argmax_lowest_index_on_ties():
    x = np.array([[1.0, 5.0, 5.0, 2.0], [7.0, 0.0, 7.0, 7.0], [-1.0, -3.0, -2.0, -1.0]],
                 np.float32)
    idx = np.broadcast_to(np.arange(4, dtype=np.int32), x.shape).copy()
    out = Shape.tuple_of([S("f32", 3), S("s32", 3)])
    ins = instr("reduce", out, [S("f32", 3, 4), S("s32", 3, 4), S("f32"), S("s32")],
                dimensions=(1,), to_apply=argmax_reducer("f32"))
    vals, arg = run(ins, x, idx, np.float32(-np.inf), np.int32(0))
    np.testing.assert_array_equal(vals, x.max(axis=1))
    np.testing.assert_array_equal(arg, np.argmax(x, axis=1))  # numpy: first occurrence
    assert arg.dtype == np.int32


# ---- reduce-window ------------------------------------------------------------------------

def naive_reduce_window(x, init, fn, wdims):
    """Per output position: init folded with every window element that is a real
    operand element (padding and base-dilation holes are skipped)."""
    out_shape = []
    for i, w in enumerate(wdims):
        padded = (x.shape[i] - 1) * w.base_dilation + 1 + w.padding_low + w.padding_high \
            if x.shape[i] else w.padding_low + w.padding_high
        span = (w.size - 1) * w.window_dilation + 1
        out_shape.append(max(0, (padded - span) // w.stride + 1) if padded >= span else 0)
    out = np.empty(out_shape, x.dtype)
    for o in itertools.product(*[range(n) for n in out_shape]):
        acc = init
        for k in itertools.product(*[range(w.size) for w in wdims]):
            src = []
            for i, w in enumerate(wdims):
                p = o[i] * w.stride + k[i] * w.window_dilation - w.padding_low
                if p % w.base_dilation or not 0 <= p // w.base_dilation < x.shape[i]:
                    break
                src.append(p // w.base_dilation)
            else:
                acc = fn(acc, x[tuple(src)])
        out[o] = acc
    return out


RW_CASES = [
    ("pool2x2", [{"size": 2, "stride": 2}, {"size": 2, "stride": 2}]),
    ("same_pad", [{"size": 3, "padding_low": 1, "padding_high": 1},
                  {"size": 3, "padding_low": 1, "padding_high": 1}]),
    ("dilations", [{"size": 2, "base_dilation": 2, "padding_low": 1},
                   {"size": 2, "window_dilation": 2, "stride": 2}]),
    ("negative_pad", [{"size": 2, "padding_low": -1}, {"size": 1, "padding_high": -2}]),
    ("cumsum_like", [{"size": 5, "padding_low": 4}, {"size": 1}]),
]


@pytest.mark.parametrize("name,wd", RW_CASES, ids=[c[0] for c in RW_CASES])
@pytest.mark.parametrize("op", ["add", "maximum"])
def test_reduce_window_matches_naive(name, wd, op):
    x = np.random.RandomState(1).randn(5, 6).astype(np.float32)
    window = Window(tuple(WindowDim(**d) for d in wd))
    init = np.float32(0 if op == "add" else -np.inf)
    fn = np.add if op == "add" else np.maximum
    ref = naive_reduce_window(x, init, fn, window.dims)
    ins = instr("reduce-window", shape_of(ref), [shape_of(x), S("f32")], window=window,
                to_apply=binary(op, "f32"))
    got = run(ins, x, init)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_reduce_window_init_not_added_for_padding():
    # With a non-identity init the skip-padding rule is visible: each window sees init
    # once plus its real elements.
    x = np.array([1, 2, 3], np.int32)
    window = Window((WindowDim(size=3, padding_low=1, padding_high=1),))
    ins = instr("reduce-window", S("s32", 3), [S("s32", 3), S("s32")], window=window,
                to_apply=binary("add", "s32"))
    np.testing.assert_array_equal(run(ins, x, np.int32(10)), [13, 16, 15])


def test_variadic_reduce_window_argmax():
    x = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.float32)
    idx = np.arange(8, dtype=np.int32)
    window = Window((WindowDim(size=3, stride=2),))
    out = Shape.tuple_of([S("f32", 3), S("s32", 3)])
    ins = instr("reduce-window", out, [S("f32", 8), S("s32", 8), S("f32"), S("s32")],
                window=window, to_apply=argmax_reducer("f32"))
    vals, arg = run(ins, x, idx, np.float32(-np.inf), np.int32(-1))
    np.testing.assert_array_equal(vals, [4, 5, 9])
    np.testing.assert_array_equal(arg, [2, 4, 5])


# ---- select-and-scatter ---------------------------------------------------------------

def naive_select_and_scatter(operand, source, init, wdims, ge=True):
    out = np.full(operand.shape, init, operand.dtype)
    for o in itertools.product(*[range(n) for n in source.shape]):
        best = None
        for k in itertools.product(*[range(w.size) for w in wdims]):
            src = tuple(o[i] * w.stride + k[i] - w.padding_low for i, w in enumerate(wdims))
            if not all(0 <= s < n for s, n in zip(src, operand.shape)):
                continue
            v = operand[src]
            if best is None or not (operand[best] >= v if ge else operand[best] <= v):
                best = src
        if best is not None:
            out[best] += source[o]
    return out


SAS_CASES = [
    ("maxpool_grad", (4, 6), [{"size": 2, "stride": 2}, {"size": 3, "stride": 3}]),
    ("overlapping", (5, 5), [{"size": 3, "stride": 1}, {"size": 2, "stride": 1}]),
    ("padded", (4, 5), [{"size": 3, "stride": 2, "padding_low": 1, "padding_high": 1},
                        {"size": 3, "stride": 2, "padding_low": 1, "padding_high": 1}]),
]


@pytest.mark.parametrize("name,shape,wd", SAS_CASES, ids=[c[0] for c in SAS_CASES])
def test_select_and_scatter_matches_naive(name, shape, wd):
    rng = np.random.RandomState(2)
    operand = rng.randint(0, 4, size=shape).astype(np.float32)  # many ties
    window = Window(tuple(WindowDim(**d) for d in wd))
    src_shape = tuple(naive_reduce_window(operand, np.float32(0), np.add, window.dims).shape)
    source = rng.randint(1, 10, size=src_shape).astype(np.float32)
    ref = naive_select_and_scatter(operand, source, np.float32(0), window.dims)
    ins = instr("select-and-scatter", shape_of(operand),
                [shape_of(operand), shape_of(source), S("f32")], window=window,
                select=comparator("GE", ["f32"]), scatter=binary("add", "f32"))
    np.testing.assert_array_equal(run(ins, operand, source, np.float32(0)), ref)


def test_select_and_scatter_matches_jax_maxpool_gradient():
    jax = need_jax()
    x = np.random.RandomState(3).randn(6, 8).astype(np.float32)

    def pool(v):
        return jax.lax.reduce_window(v, -np.inf, jax.lax.max, (2, 2), (2, 2), "VALID")
    g = np.random.RandomState(4).randn(3, 4).astype(np.float32)
    ref = np.asarray(jax.vjp(pool, x)[1](g)[0])
    window = Window((WindowDim(size=2, stride=2), WindowDim(size=2, stride=2)))
    ins = instr("select-and-scatter", S("f32", 6, 8), [S("f32", 6, 8), S("f32", 3, 4), S("f32")],
                window=window, select=comparator("GE", ["f32"]), scatter=binary("add", "f32"))
    np.testing.assert_allclose(run(ins, x, g, np.float32(0)), ref, rtol=1e-6)


# ---- map ------------------------------------------------------------------------------

def test_map_applies_elementwise():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 2, np.float32)
    ins = instr("map", S("f32", 2, 3), [S("f32", 2, 3), S("f32", 2, 3)], dimensions=(0, 1),
                to_apply=binary("multiply", "f32"))
    np.testing.assert_array_equal(run(ins, a, b), a * 2)
