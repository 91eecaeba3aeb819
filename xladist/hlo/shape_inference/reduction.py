"""Shape rules of ops that apply a called scalar computation (operation semantics: Reduce,
ReduceWindow, SelectAndScatter, Map, Sort, TopK)."""

from __future__ import annotations

from ..shape import Shape
from .base import (PRED, S32, ShapeError, attr, check_dim_list, check_reducer,
                                   expect_array, expect_count, fmt, fmt_all, fmt_dims, make,
                                   program_shape, signature, tuple_or_single,
                                   window_output_dims)


def _split_inputs_inits(shapes, what):
    if not shapes or len(shapes) % 2:
        raise ShapeError(f"{what} takes N arrays then N init values (an even, non-zero count), "
                         f"got {len(shapes)} ({fmt_all(shapes)})")
    n = len(shapes) // 2
    inputs, inits = shapes[:n], shapes[n:]
    for x in inputs:
        expect_array(x, "input")
        if x.dims != inputs[0].dims:
            raise ShapeError(f"all inputs must have the same dimensions, got {fmt_all(inputs)}")
    return inputs, inits


def reduce(op, shapes, attrs, declared):
    """Reduced dimensions disappear; the element types are the reducer's result types."""
    inputs, inits = _split_inputs_inits(shapes, "reduce")
    x = inputs[0]
    dims = tuple(attr(attrs, "dimensions"))
    check_dim_list(dims, x.rank, "dimensions", x)
    accs = check_reducer(attrs.get("to_apply"), "to_apply", list(inits),
                         [s.element_type for s in inputs])
    keep = [i for i in range(x.rank) if i not in dims]
    out = [make(a.element_type, [x.dims[i] for i in keep], [x.dynamic[i] for i in keep])
           for a in accs]
    return tuple_or_single(out)


def reduce_window(op, shapes, attrs, declared):
    inputs, inits = _split_inputs_inits(shapes, "reduce-window")
    x = inputs[0]
    window = attrs.get("window")
    if window is None and x.rank:
        raise ShapeError(f"missing window= for operand {fmt(x)} of rank {x.rank}")
    check_reducer(attrs.get("to_apply"), "to_apply", list(inits),
                  [s.element_type for s in inputs])
    out_dims = window_output_dims(x.dims, window, "reduce-window", x)
    # A windowed dynamic dimension stays dynamic (XLA's dynamic dimension inference).
    return tuple_or_single([make(init.element_type, out_dims, x.dynamic) for init in inits])


def select_and_scatter(op, shapes, attrs, declared):
    """Result = operand shape; source must have the shape of the windowed operand."""
    expect_count(shapes, 3)
    x, source, init = shapes
    expect_array(x, "operand")
    expect_array(source, "source")
    window = attrs.get("window")
    if window is None and x.rank:
        raise ShapeError(f"missing window= for operand {fmt(x)} of rank {x.rank}")
    sel = attrs.get("select")
    params, result = program_shape(sel, "select")
    scalar = make(x.element_type, ())
    if (len(params) != 2 or not all(p.compatible(scalar) for p in params)
            or not result.compatible(make(PRED, ()))):
        raise ShapeError(f"select={signature(sel)} must be ({fmt(scalar)}, {fmt(scalar)}) -> "
                         "pred[]")
    check_reducer(attrs.get("scatter"), "scatter", [init], [source.element_type])
    out_dims = window_output_dims(x.dims, window, "select-and-scatter", x)
    if source.dims != out_dims or source.element_type != x.element_type:
        raise ShapeError(f"source {fmt(source)} must have the windowed operand's shape "
                         f"{fmt(make(x.element_type, out_dims))} (operand {fmt(x)}, window "
                         f"{window.to_text() if window else '{}'})")
    return make(x.element_type, x.dims)


def map_(op, shapes, attrs, declared):
    if not shapes:
        raise ShapeError("expects at least one operand")
    for s in shapes:
        expect_array(s, "operand")
        if s.dims != shapes[0].dims:
            raise ShapeError(f"all operands must have the same dimensions, got {fmt_all(shapes)}")
    x = shapes[0]
    dims = attrs.get("dimensions")
    if dims is not None and tuple(dims) != tuple(range(x.rank)):
        raise ShapeError(f"dimensions={fmt_dims(dims)} must be all dimensions in order "
                         f"{fmt_dims(range(x.rank))} for {fmt(x)}")
    comp = attrs.get("to_apply")
    params, result = program_shape(comp, "to_apply")
    if len(params) != len(shapes):
        raise ShapeError(f"to_apply={signature(comp)} takes {len(params)} parameters for "
                         f"{len(shapes)} operands")
    for i, (p, s) in enumerate(zip(params, shapes)):
        if not (p.is_array and p.rank == 0 and p.element_type == s.element_type):
            raise ShapeError(f"to_apply={signature(comp)}: parameter {i} must be "
                             f"{s.element_type}[] for operand {fmt(s)}")
    if not (result.is_array and result.rank == 0):
        raise ShapeError(f"to_apply={signature(comp)} must return a scalar")
    return make(result.element_type, x.dims)


def sort(op, shapes, attrs, declared):
    """N same-dimension operands sorted together by a (2N scalars) -> pred[] comparator."""
    if not shapes:
        raise ShapeError("expects at least one operand")
    for s in shapes:
        expect_array(s, "operand")
        if s.dims != shapes[0].dims:
            raise ShapeError(f"keys and values must have the same dimensions, got "
                             f"{fmt_all(shapes)}")
    x = shapes[0]
    dims = tuple(attr(attrs, "dimensions"))
    if len(dims) != 1:
        raise ShapeError(f"dimensions={fmt_dims(dims)} must name exactly one dimension")
    check_dim_list(dims, x.rank, "dimensions", x)
    comp = attrs.get("to_apply")
    params, result = program_shape(comp, "to_apply")
    want = [make(s.element_type, ()) for s in shapes for _ in (0, 1)]
    if len(params) != len(want) or not all(p.compatible(w) for p, w in zip(params, want)):
        raise ShapeError(f"comparator to_apply={signature(comp)} must take "
                         f"({fmt_all(want)}): two scalars per operand")
    if not result.compatible(make(PRED, ())):
        raise ShapeError(f"comparator to_apply={signature(comp)} must return pred[]")
    return tuple_or_single([make(s.element_type, s.dims, s.dynamic) for s in shapes])


def topk(op, shapes, attrs, declared):
    """(values, s32 indices) of the k largest (or smallest) along the last dimension."""
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    k = attr(attrs, "k")
    if x.rank < 1:
        raise ShapeError(f"operand must have rank >= 1, got {fmt(x)}")
    if not 0 <= k <= x.dims[-1]:
        raise ShapeError(f"k={k} must be in [0, {x.dims[-1]}] for {fmt(x)}")
    dims = x.dims[:-1] + (k,)
    return Shape.tuple_of([make(x.element_type, dims), make(S32, dims)])


RULES = {
    "reduce": reduce,
    "reduce-window": reduce_window,
    "select-and-scatter": select_and_scatter,
    "map": map_,
    "sort": sort,
    "topk": topk,
}
