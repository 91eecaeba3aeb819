"""ragged-dot and scaled-dot as library thunks: slices and dequantized operands handed to
the dot thunk's BLAS path (library.dot_into), as XLA rewrites both into plain dots before
codegen (RaggedDotRewriter, ScaledDotRewriter).

  ragged-dot   one BLAS dot per group on the group's slice of the ragged dimension
               (operation semantics RaggedDot, three modes by where lhs_ragged_dims points):
               a lhs free dim: rows of group i use rhs[i] (rhs_group_dims), rows outside
                 every group are 0;
               a contracting dim: result[i] contracts only group i's slice;
               a batch dim: the plain dot of every batch (XLA's RaggedDotRewriter
                 leaves group_sizes unused there).
               Groups are [start_i, start_i + size_i) with start_i the running sum, clipped
               to the dimension; a later group overwrites an overlap (negative sizes).
  scaled-dot   lhs, rhs, lhs_scale, rhs_scale: each side times its scale, the scale repeated
               over contiguous blocks of every dimension it is smaller in, rounded once to
               the dequantization type (semantics/dequantize.py, as the interpreter), then
               DotGeneral into the result type.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...semantics.dequantize import dequantize
from .core import dot_into, library


def _dims(instr, key) -> tuple:
    return tuple(instr.attrs.get(key, ()) or ())


def _dot_dims(instr):
    return (_dims(instr, "lhs_batch_dims"), _dims(instr, "lhs_contracting_dims"),
            _dims(instr, "rhs_batch_dims"), _dims(instr, "rhs_contracting_dims"))


def _at(ndim: int, axis: int, index) -> tuple:
    """An index tuple selecting `index` (an int or a slice) along `axis`."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


def _group_ranges(instr, group_sizes, extent: int):
    sizes = np.asarray(group_sizes)
    if sizes.ndim != 1:
        raise UnsupportedError(f"instruction `{instr.name}` (ragged-dot): group_sizes of shape "
                               f"{list(sizes.shape)} is not supported (only [groups])")
    ends = np.cumsum(sizes.astype(np.int64))
    starts = ends - sizes.astype(np.int64)
    return [(int(np.clip(s, 0, extent)), int(np.clip(e, 0, extent)))
            for s, e in zip(starts, ends)]


@library("ragged-dot")
def _ragged_dot(instr, args, outs):
    lhs, rhs, group_sizes = args
    out = outs[0]
    lb, lc, rb, rc = _dot_dims(instr)
    (rd,) = _dims(instr, "lhs_ragged_dims")
    ranges = _group_ranges(instr, group_sizes, lhs.shape[rd])
    out[...] = 0  # rows (mode 1) or groups (mode 2) that no group covers stay 0
    if rd in lc:  # ragged contracting: result[i] = dot over group i's slice of K
        rk = rc[lc.index(rd)]
        for i, (s, e) in enumerate(ranges):
            if s < e:
                dot_into(out[i], lhs[_at(lhs.ndim, rd, slice(s, e))],
                         rhs[_at(rhs.ndim, rk, slice(s, e))], lb, lc, rb, rc)
        return
    if rd in lb:  # ragged batch: XLA's RaggedDotRewriter emits the plain dot
        dot_into(out, lhs, rhs, lb, lc, rb, rc)
        return
    # Ragged free dim: group i's rows against rhs[i], rhs's group dim dropped.
    (g,) = _dims(instr, "rhs_group_dims")

    def drop(ds):
        return tuple(d - (d > g) for d in ds)

    lhs_free = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    axis = len(lb) + lhs_free.index(rd)
    for i, (s, e) in enumerate(ranges):
        if s < e:
            dot_into(out[_at(out.ndim, axis, slice(s, e))], lhs[_at(lhs.ndim, rd, slice(s, e))],
                     rhs[_at(rhs.ndim, g, i)], lb, lc, drop(rb), drop(rc))


@library("scaled-dot")
def _scaled_dot(instr, args, outs):
    lhs, rhs, lhs_scale, rhs_scale = (np.asarray(a) for a in args)
    dot_into(outs[0], dequantize(lhs, lhs_scale), dequantize(rhs, rhs_scale),
             *_dot_dims(instr))
