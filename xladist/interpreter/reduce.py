"""reduce, reduce-window, select-and-scatter and map (operation semantics of each).

The called computation is applied to whole arrays with `ev.call_vectorized`, so
the number of calls grows with the reduction's depth, not with the element count:
log2 of the reduced size for an associative reducer's tree, the reduced size for a
left fold (`ev.fold_vectorized`, whose rows after the first skip the per-call checks).

Reduction order (XLA leaves it unspecified; ours is deterministic):
- reduce: when the reducer is one associative, commutative binary op on its two
  parameters (add, multiply, maximum, minimum, and, or, xor) -- the reducers XLA:CPU
  vectorizes in its own order -- the reduced elements of each output element, in
  row-major order of the reduced dims, are combined as a balanced pairwise tree
  (neighbours (0,1), (2,3), ... then the partial results again, an odd last one
  carried up); then the init value is combined in front: f(init, tree). The tree
  keeps float error small and needs log2(n) calls. Any other reducer (variadic ones,
  and those that are not associative, where the order changes the answer) is a left
  fold from the init in row-major order of the reduced dims: acc = f(acc, x), XLA's
  evaluator's and XLA:CPU's loop order. An empty reduction gives the init.
- reduce-window: per window, acc = init, then acc = f(acc, x) for the window
  elements in row-major window order, skipping positions that fall into padding or
  base-dilation holes (so they act as the init value) -- XLA's evaluator order.
- select-and-scatter: per window (row-major over the source), the selected element
  is the first valid one, replaced by each later element e for which
  select(selected, e) is false; source values are then combined into the output
  with `scatter`, in row-major source order for positions chosen more than once.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from .convolution import dilate_and_pad
from .registry import register


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _apply(ev, comp, arrays, dtypes):
    """ev.call_vectorized with the results cast to the expected dtypes, as a tuple."""
    arrays = list(arrays)
    shape = np.shape(arrays[0]) if arrays else ()
    out = _as_tuple(ev.call_vectorized(comp, arrays))
    # A computation may return a constant: broadcast so results line up with inputs.
    return tuple(np.array(np.broadcast_to(np.asarray(o).astype(dt, copy=False), shape))
                 for o, dt in zip(out, dtypes))


# Reducers whose order XLA leaves free (XLA:CPU vectorizes exactly these): a tree is exact
# for the integer and min/max ones and within rounding for float add/multiply.
_ASSOCIATIVE = frozenset({"add", "multiply", "maximum", "minimum", "and", "or", "xor"})


def _is_associative_binary(comp, n_operands: int) -> bool:
    """Whether `comp` is a single associative, commutative op of its two parameters."""
    root = comp.root
    if n_operands != 1 or root is None or root.opcode not in _ASSOCIATIVE:
        return False
    ops = root.operands
    return (len(ops) == 2 and all(o.opcode == "parameter" for o in ops)
            and {o.parameter_number for o in ops} == {0, 1})


def reduce_arrays(ev, comp, operands, inits, dims) -> tuple:
    """Variadic reduce of same-shaped `operands` over `dims`; returns a tuple of arrays
    (the order of the combinations: the module docstring)."""
    dims = sorted({int(d) for d in dims})
    shape = operands[0].shape
    keep = [d for d in range(len(shape)) if d not in dims]
    out_shape = tuple(shape[d] for d in keep)
    dtypes = [np.asarray(i).dtype for i in inits]
    n_red = int(np.prod([shape[d] for d in dims], dtype=np.int64))
    n_out = int(np.prod(out_shape, dtype=np.int64))
    init_b = [np.broadcast_to(np.asarray(i), out_shape).copy() for i in inits]
    if n_red == 0 or n_out == 0:
        return tuple(init_b)
    # Rows = reduced elements (row-major over the reduced dims), columns = outputs.
    level = [np.asarray(op).transpose(dims + keep).reshape(n_red, n_out).astype(dt, copy=False)
             for op, dt in zip(operands, dtypes)]
    if not _is_associative_binary(comp, len(operands)):
        acc = [np.array(b.reshape(n_out)) for b in init_b]
        if n_red:
            acc = list(_apply(ev, comp, acc + [a[0] for a in level], dtypes))
            acc = ev.fold_vectorized(comp, acc, ([a[r] for a in level]
                                                 for r in range(1, n_red)))
            acc = [np.asarray(a).astype(dt, copy=False) for a, dt in zip(acc, dtypes)]
        return tuple(a.reshape(out_shape) for a in acc)
    while level[0].shape[0] > 1:
        m = level[0].shape[0]
        even = m - (m % 2)
        lhs = [a[0:even:2] for a in level]
        rhs = [a[1:even:2] for a in level]
        combined = _apply(ev, comp, lhs + rhs, dtypes)
        if m % 2:
            combined = tuple(np.concatenate([c, a[even:]]) for c, a in zip(combined, level))
        level = list(combined)
    total = [a[0].reshape(out_shape) for a in level]
    return _apply(ev, comp, init_b + total, dtypes)


@register("reduce")
def _eval_reduce(instr, args, ev):
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    dims = instr.attrs.get("dimensions", ())
    for d in dims:
        if not 0 <= d < np.ndim(operands[0]):
            raise UnsupportedError(f"{instr.name}: reduce dimension {d} is out of range "
                                   f"for operand shape {np.shape(operands[0])}")
    out = reduce_arrays(ev, instr.attrs["to_apply"], operands, inits, dims)
    return out if instr.shape.is_tuple else out[0]


# ---- windows ----------------------------------------------------------------------

def _window_params(window, rank):
    """Per dim (size, stride, lo, hi, base_dil, win_dil); absent window = size 1."""
    dims = window.dims if window is not None else ()
    out = []
    for i in range(rank):
        w = dims[i] if i < len(dims) else None
        out.append((w.size, w.stride, w.padding_low, w.padding_high, w.base_dilation,
                    w.window_dilation) if w else (1, 1, 0, 0, 1, 1))
    return out


def _windowed_views(x, params, fill):
    """For each window position (row-major), the strided view of the padded/dilated
    array `x` it touches: returns (positions, views, out_shape)."""
    padded = dilate_and_pad(x, range(x.ndim), [p[4] for p in params], [p[2] for p in params],
                            [p[3] for p in params], fill=fill)
    out_shape = []
    for i, (size, stride, *_r, wdil) in enumerate(params):
        span = (size - 1) * wdil + 1
        n = padded.shape[i]
        out_shape.append((n - span) // stride + 1 if size > 0 and span <= n else 0)
    views = []
    positions = list(np.ndindex(*[p[0] for p in params]))
    for pos in positions:
        idx = []
        for i, (size, stride, *_r, wdil) in enumerate(params):
            start = pos[i] * wdil
            idx.append(slice(start, start + (out_shape[i] - 1) * stride + 1, stride)
                       if out_shape[i] else slice(0, 0))
        views.append(padded[tuple(idx)])
    return positions, views, tuple(out_shape)


def _valid_mask(shape, params):
    """True where the padded/dilated array holds a real operand element."""
    return _windowed_views(np.ones(shape, bool), params, fill=False)


@register("reduce-window")
def _eval_reduce_window(instr, args, ev):
    n = len(args) // 2
    operands, inits = args[:n], args[n:]
    comp = instr.attrs["to_apply"]
    params = _window_params(instr.attrs.get("window"), np.ndim(operands[0]))
    dtypes = [np.asarray(i).dtype for i in inits]
    _, valid, out_shape = _valid_mask(np.shape(operands[0]), params)
    views = [_windowed_views(np.asarray(op), params, fill=np.zeros((), op.dtype))[1]
             for op in operands]
    acc = [np.broadcast_to(np.asarray(i), out_shape).copy() for i in inits]
    for k, mask in enumerate(valid):
        if not mask.any():
            continue
        new = _apply(ev, comp, acc + [v[k] for v in views], dtypes)
        acc = [np.where(mask, nv, a) for nv, a in zip(new, acc)]
    return tuple(acc) if instr.shape.is_tuple else acc[0]


def _combine_at(ev, comp, out, flat_targets, values, dtype):
    """out.flat[t] = comp(out.flat[t], v) for each (t, v) in order; repeated targets
    are applied in rounds so each round touches a target at most once."""
    order = np.argsort(flat_targets, kind="stable")
    t_sorted = flat_targets[order]
    first = np.r_[True, t_sorted[1:] != t_sorted[:-1]] if len(t_sorted) else np.zeros(0, bool)
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(t_sorted)), 0))
    rank = np.empty(len(t_sorted), np.int64)
    rank[order] = np.arange(len(t_sorted)) - group_start
    flat = out.reshape(-1)
    for r in range(int(rank.max()) + 1 if len(rank) else 0):
        sel = rank == r
        t = flat_targets[sel]
        (res,) = _apply(ev, comp, [flat[t], values[sel]], [dtype])
        flat[t] = res
    return flat.reshape(out.shape)


@register("select-and-scatter")
def _eval_select_and_scatter(instr, args, ev):
    operand, source, init = (np.asarray(a) for a in args)
    params = _window_params(instr.attrs.get("window"), operand.ndim)
    select, scatter = instr.attrs["select"], instr.attrs["scatter"]
    _, valid, out_shape = _valid_mask(operand.shape, params)
    if tuple(out_shape) != source.shape:
        raise UnsupportedError(f"{instr.name}: select-and-scatter source has shape "
                               f"{source.shape}, but the window over {operand.shape} gives "
                               f"{tuple(out_shape)}")
    _, vals = _windowed_views(operand, params, fill=np.zeros((), operand.dtype))[:2]
    flat_ids = np.arange(operand.size, dtype=np.int64).reshape(operand.shape)
    _, ids = _windowed_views(flat_ids, params, fill=np.int64(-1))[:2]
    have = np.zeros(out_shape, bool)
    best = np.zeros(out_shape, operand.dtype)
    best_id = np.full(out_shape, -1, np.int64)
    for k, mask in enumerate(valid):
        if not mask.any():
            continue
        (keep,) = _apply(ev, select, [best, vals[k]], [np.bool_])
        take = mask & (~have | ~keep)
        best = np.where(take, vals[k], best)
        best_id = np.where(take, ids[k], best_id)
        have |= mask
    out = np.broadcast_to(init.astype(operand.dtype), operand.shape).copy()
    chosen = best_id.reshape(-1) >= 0
    return _combine_at(ev, scatter, out, best_id.reshape(-1)[chosen],
                       source.reshape(-1)[chosen], operand.dtype)


@register("map")
def _eval_map(instr, args, ev):
    comp = instr.attrs["to_apply"]
    arrays = [np.asarray(a) for a in args]
    shape = tuple(instr.shape.dims)
    arrays = [np.broadcast_to(a, shape) for a in arrays]
    (out,) = _apply(ev, comp, arrays, [instr.shape.dtype])
    return np.broadcast_to(out, shape).copy()
