"""sort and topk (operation semantics: Sort, TopK).

sort: the comparator receives 2N scalars (lhs_0, rhs_0, lhs_1, rhs_1, ...) and
returns true when lhs orders strictly before rhs. All operands are permuted
together along `dimensions={d}`. We always sort stably (a stable order is a valid
result of an unstable sort).

Algorithm: a bottom-up merge sort of index permutations, vectorized over every row
and every element at once. Merging two sorted runs needs, for each element, the
number of elements of the partner run that go before it -- a binary search, done
for all elements together with one comparator call per search step. That is
O(log^2 n) calls of `ev.call_vectorized` in total. A comparator that is not a
strict weak order can make ranks collide; then we fall back to Python's stable
sort with the comparator called per pair (slow but always defined).
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import UnsupportedError
from ..semantics.order import top_k_total_order
from .registry import register


def _merge_level(keys, perm, w, less):
    """One bottom-up merge level: runs of width w in `perm` (R, n) become runs of 2w."""
    R, n = perm.shape
    p = np.arange(n)
    run = p // w
    own_start = run * w
    is_left = run % 2 == 0
    pair_start = (p // (2 * w)) * (2 * w)
    partner_start = np.where(is_left, own_start + w, own_start - w)
    partner_len = np.clip(np.minimum(n, partner_start + w) - partner_start, 0, w)
    lo = np.zeros((R, n), np.int64)
    hi = np.broadcast_to(partner_len, (R, n)).astype(np.int64)
    rows = np.arange(R)[:, None]
    me = [k[rows, perm] for k in keys]
    for _ in range(int(np.ceil(np.log2(w + 1)))):
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        cand_pos = np.clip(partner_start + mid, 0, n - 1)
        cand = [k[rows, perm[rows, cand_pos]] for k in keys]
        # Left elements count partner (right) elements strictly before them:
        # less(cand, me). Right elements count partner (left) elements not after them:
        # not less(me, cand). One comparator call serves both.
        a = [np.where(is_left, c, m) for c, m in zip(cand, me)]
        b = [np.where(is_left, m, c) for c, m in zip(cand, me)]
        c = np.asarray(less(a, b), bool)
        pred = np.where(is_left, c, ~c)
        lo = np.where(active & pred, mid + 1, lo)
        hi = np.where(active & ~pred, mid, hi)
    new_pos = pair_start + (p - own_start) + lo
    out = np.full_like(perm, -1)
    out[rows, new_pos] = perm
    if (out < 0).any():
        return None
    return out


def sort_permutation(keys, less) -> np.ndarray:
    """Stable sorting permutation of each row of the (R, n) arrays `keys`, ordered by
    `less(a_list, b_list) -> bool array` (vectorized strict weak order)."""
    R, n = keys[0].shape
    perm = np.broadcast_to(np.arange(n), (R, n)).copy()
    w = 1
    while w < n:
        merged = _merge_level(keys, perm, w, less)
        if merged is None:
            return _python_sort(keys, less)
        perm = merged
        w *= 2
    return perm


def _python_sort(keys, less) -> np.ndarray:
    R, n = keys[0].shape
    perm = np.empty((R, n), np.int64)
    for r in range(R):
        def cmp(i, j, r=r):
            a = [k[r, i:i + 1] for k in keys]
            b = [k[r, j:j + 1] for k in keys]
            if bool(np.asarray(less(a, b)).reshape(-1)[0]):
                return -1
            if bool(np.asarray(less(b, a)).reshape(-1)[0]):
                return 1
            return 0
        perm[r] = sorted(range(n), key=functools.cmp_to_key(cmp))
    return perm


def comparator_less(ev, comp, n_operands):
    """less(a_list, b_list) calling the HLO comparator with interleaved parameters."""
    def less(a, b):
        args = []
        for i in range(n_operands):
            args += [a[i], b[i]]
        out = ev.call_vectorized(comp, args)
        return np.broadcast_to(np.asarray(out, bool), np.shape(a[0]))
    return less


def sort_along(operands, dim, less) -> list[np.ndarray]:
    """Sort all operands together along `dim` by `less` over their values."""
    operands = [np.asarray(o) for o in operands]
    moved = [np.moveaxis(o, dim, -1) for o in operands]
    shape = moved[0].shape
    n = shape[-1] if shape else 1
    if moved[0].size == 0 or n <= 1:  # (an empty sorted dim cannot be reshaped to rows)
        return operands
    rows = [m.reshape(-1, n) for m in moved]
    perm = sort_permutation(rows, less)
    r = np.arange(rows[0].shape[0])[:, None]
    return [np.moveaxis(x[r, perm].reshape(shape), -1, dim) for x in rows]


@register("sort")
def _eval_sort(instr, args, ev):
    dims = instr.attrs.get("dimensions", (0,))
    dim = int(dims[0]) if dims else 0
    rank = np.ndim(args[0])
    if rank and not 0 <= dim < rank:
        raise UnsupportedError(f"{instr.name}: sort dimension {dim} is out of range for "
                               f"operand shape {np.shape(args[0])}")
    less = comparator_less(ev, instr.attrs["to_apply"], len(args))
    out = sort_along(args, dim, less) if rank else [np.asarray(a) for a in args]
    return tuple(out) if instr.shape.is_tuple else out[0]


@register("topk")
def _eval_topk(instr, args, ev):
    x = np.asarray(args[0])
    k = int(instr.attrs["k"])
    if x.ndim == 0 or k > x.shape[-1]:
        raise UnsupportedError(f"{instr.name}: topk k={k} needs an operand whose last "
                               f"dimension holds at least k elements, got {x.shape}")
    comp = instr.attrs.get("to_apply")
    iota = np.broadcast_to(np.arange(x.shape[-1], dtype=np.int32), x.shape)
    if comp is not None:
        less = comparator_less(ev, comp, 1)
        values, idx = sort_along([x, iota], x.ndim - 1, lambda a, b: less(a[:1], b[:1]))
    else:
        return top_k_total_order(x, k, bool(instr.attrs.get("largest", True)))
    return (np.ascontiguousarray(values[..., :k]),
            np.ascontiguousarray(idx[..., :k]).astype(np.int32))
