"""gather and scatter (operation semantics: Gather, Scatter), all dimension numbers.

Common terms: the "batch" positions of `start_indices` are all its dims except
index_vector_dim (index_vector_dim == rank means a trailing vector of size 1).
For each batch position the operand start index is built from the index vector
via start_index_map / scatter_dims_to_operand_dims, and operand batching dims take
the batch position's coordinate along the paired indices batching dim.

Out-of-bounds (XLA's rules):
- gather clamps each start index into [0, operand_dim - slice_size], so the slice
  always lies inside the operand;
- scatter skips an update window entirely when any part of it would fall outside
  the operand (no clamping).
Scatter applies `to_apply(current..., update...)` element by element in row-major
order of the updates; positions hit more than once see the updates in that order.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from .registry import register


def _batch_view(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """start_indices with the index vector moved last: shape batch_dims + (n,)."""
    indices = np.asarray(indices)
    if index_vector_dim == indices.ndim:
        indices = indices[..., None]
    if indices.dtype == np.uint64:
        # u64 indices beyond int64 are far out of range, not negative: saturate them.
        indices = np.minimum(indices, np.uint64(np.iinfo(np.int64).max))
    return np.moveaxis(indices, index_vector_dim, -1).astype(np.int64)


def _starts(idx, operand_rank, index_map, operand_batching, indices_batching,
            index_vector_dim):
    """Per operand dim, the start index for every batch position (shape: batch dims)."""
    batch_shape = idx.shape[:-1]
    starts = [np.zeros(batch_shape, np.int64) for _ in range(operand_rank)]
    for k, d in enumerate(index_map):
        starts[d] = idx[..., k]
    for od, sd in zip(operand_batching, indices_batching):
        axis = sd - (1 if sd > index_vector_dim else 0)  # position among the batch dims
        shape = [1] * len(batch_shape)
        shape[axis] = batch_shape[axis]
        starts[od] = np.broadcast_to(np.arange(batch_shape[axis]).reshape(shape), batch_shape)
    return starts


def gather(operand, start_indices, *, offset_dims, collapsed_slice_dims, start_index_map,
           index_vector_dim, slice_sizes, operand_batching_dims=(),
           start_indices_batching_dims=()) -> np.ndarray:
    operand = np.asarray(operand)
    idx = _batch_view(start_indices, index_vector_dim)
    batch_shape = idx.shape[:-1]
    rank = operand.ndim
    starts = _starts(idx, rank, start_index_map, operand_batching_dims,
                     start_indices_batching_dims, index_vector_dim)
    window_dims = [d for d in range(rank)
                   if d not in collapsed_slice_dims and d not in operand_batching_dims]
    out_rank = len(batch_shape) + len(offset_dims)
    batch_axes = [a for a in range(out_rank) if a not in offset_dims]
    full_idx = []
    for d in range(rank):
        s = np.clip(starts[d], 0, operand.shape[d] - slice_sizes[d])
        shape = [1] * out_rank
        for a, n in zip(batch_axes, batch_shape):
            shape[a] = n
        term = s.reshape(shape)
        if d in window_dims:
            axis = offset_dims[window_dims.index(d)]
            oshape = [1] * out_rank
            oshape[axis] = slice_sizes[d]
            term = term + np.arange(slice_sizes[d]).reshape(oshape)
        full_idx.append(term)
    # Output dims of size 0 (empty batch or empty slice) broadcast oddly; shape by hand.
    shape = [1] * out_rank
    for a, n in zip(batch_axes, batch_shape):
        shape[a] = n
    for j, d in enumerate(window_dims):
        shape[offset_dims[j]] = slice_sizes[d]
    if 0 in shape:
        return np.zeros(shape, operand.dtype)
    if not full_idx:
        # A rank-0 operand: every batch position gathers the one element.
        return np.broadcast_to(operand, shape).copy()
    out_shape = np.broadcast_shapes(*[t.shape for t in full_idx])
    return operand[tuple(np.broadcast_to(t, out_shape) for t in full_idx)].reshape(shape)


@register("gather")
def _eval_gather(instr, args, ev):
    a = instr.attrs
    out = gather(args[0], args[1], offset_dims=tuple(a["offset_dims"]),
                 collapsed_slice_dims=tuple(a.get("collapsed_slice_dims", ())),
                 start_index_map=tuple(a["start_index_map"]),
                 index_vector_dim=int(a["index_vector_dim"]),
                 slice_sizes=tuple(a["slice_sizes"]),
                 operand_batching_dims=tuple(a.get("operand_batching_dims", ()) or ()),
                 start_indices_batching_dims=tuple(a.get("start_indices_batching_dims", ())
                                                   or ()))
    if out.shape != tuple(instr.shape.dims):
        raise UnsupportedError(f"{instr.name}: gather computes shape {out.shape} but the "
                               f"instruction declares {instr.shape}")
    return out


def scatter_targets(operand_shape, indices, updates_shape, *, update_window_dims,
                    inserted_window_dims, scatter_dims_to_operand_dims, index_vector_dim,
                    input_batching_dims=(), scatter_indices_batching_dims=()):
    """Flat operand index of every update element (row-major over the updates), and a
    mask of the elements whose whole window lies inside the operand."""
    rank = len(operand_shape)
    idx = _batch_view(indices, index_vector_dim)
    batch_shape = idx.shape[:-1]
    starts = _starts(idx, rank, scatter_dims_to_operand_dims, input_batching_dims,
                     scatter_indices_batching_dims, index_vector_dim)
    window_dims = [d for d in range(rank)
                   if d not in inserted_window_dims and d not in input_batching_dims]
    up_rank = len(updates_shape)
    scatter_axes = [a for a in range(up_rank) if a not in update_window_dims]
    in_bounds = np.ones(batch_shape, bool)
    flat = np.zeros([1] * up_rank, np.int64)
    stride = 1
    for d in reversed(range(rank)):
        s = starts[d]
        size = updates_shape[update_window_dims[window_dims.index(d)]] \
            if d in window_dims else 1
        in_bounds &= (s >= 0) & (s <= operand_shape[d] - size)  # s + size may overflow
        shape = [1] * up_rank
        for a, n in zip(scatter_axes, batch_shape):
            shape[a] = n
        term = s.reshape(shape)
        if d in window_dims:
            axis = update_window_dims[window_dims.index(d)]
            oshape = [1] * up_rank
            oshape[axis] = updates_shape[axis]
            term = term + np.arange(updates_shape[axis]).reshape(oshape)
        flat = flat + term * stride
        stride *= operand_shape[d]
    shape = [1] * up_rank
    for a, n in zip(scatter_axes, batch_shape):
        shape[a] = n
    ok = np.broadcast_to(in_bounds.reshape(shape), updates_shape)
    return np.broadcast_to(flat, updates_shape).reshape(-1), ok.reshape(-1)


def scatter(ev, comp, operands, indices, updates, **dnums) -> tuple:
    operands = [np.array(o) for o in operands]
    updates = [np.asarray(u) for u in updates]
    targets, ok = scatter_targets(operands[0].shape, indices, updates[0].shape, **dnums)
    targets = targets[ok]
    vals = [u.reshape(-1)[ok] for u in updates]
    dtypes = [o.dtype for o in operands]
    flats = [o.reshape(-1) for o in operands]
    if targets.size == 0:
        return tuple(operands)
    # Rounds: the r-th update (in row-major order) of each target goes in round r,
    # so a vectorized round never writes a target twice.
    order = np.argsort(targets, kind="stable")
    ts = targets[order]
    first = np.r_[True, ts[1:] != ts[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(ts)), 0))
    rank = np.empty(len(ts), np.int64)
    rank[order] = np.arange(len(ts)) - group_start
    for r in range(int(rank.max()) + 1):
        sel = rank == r
        t = targets[sel]
        res = ev.call_vectorized(comp, [f[t] for f in flats] + [v[sel] for v in vals])
        res = res if isinstance(res, (tuple, list)) else (res,)
        for f, x, dt in zip(flats, res, dtypes):
            f[t] = np.broadcast_to(np.asarray(x).astype(dt, copy=False), t.shape)
    return tuple(f.reshape(o.shape) for f, o in zip(flats, operands))


@register("scatter")
def _eval_scatter(instr, args, ev):
    n = (len(args) - 1) // 2
    operands, indices, updates = args[:n], args[n], args[n + 1:]
    a = instr.attrs
    out = scatter(ev, a["to_apply"], operands, indices, updates,
                  update_window_dims=tuple(a["update_window_dims"]),
                  inserted_window_dims=tuple(a.get("inserted_window_dims", ())),
                  scatter_dims_to_operand_dims=tuple(a["scatter_dims_to_operand_dims"]),
                  index_vector_dim=int(a["index_vector_dim"]),
                  input_batching_dims=tuple(a.get("input_batching_dims", ()) or ()),
                  scatter_indices_batching_dims=tuple(
                      a.get("scatter_indices_batching_dims", ()) or ()))
    return out if instr.shape.is_tuple else out[0]
