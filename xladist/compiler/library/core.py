"""Library thunks: operations where a library is the right tool, as XLA:CPU
calls Eigen/oneDNN. Each is an explicit thunk kind registered by opcode in
LIBRARY_THUNKS — never a silent fallback.

  dot                 numpy matmul (BLAS), written straight into the result buffer
  ragged-dot          one dot per group slice (dot.py)
  scaled-dot          block-dequantized operands, then the dot (dot.py)
  convolution         im2col (sliding windows) + BLAS tensordot, any dim_labels,
                      padding, dilation, reversal, feature/batch groups
  fft                 semantics/fft.py (numpy.fft in double precision, rounded once)
  cholesky            semantics/linalg.py (LAPACK potrf per matrix)
  triangular-solve    semantics/linalg.py (BLAS trsm per matrix)
  topk                semantics/order.py's total order, or the interpreter's rule with
                      the comparator
  rng                 numpy Generator (uniform / normal)
  batch-norm-*        semantics/batchnorm.py (f32 at least, rounded once)
  bitcast-convert     width-changing reinterpretation (a byte copy)
  get-dimension-size  the static dimension
  copy-start          a copy (copy-done then aliases the copy)
  custom-call         the target's function from the user registry
                      (xladist.semantics.custom_calls.register_custom_call), as
                      XLA:CPU calls registered custom-call handlers; CustomCallThunk

fn(instr, args, outs): args are the operands' logical arrays; outs the logical
views of the result leaves, written in place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from ...errors import XlaDistError
from .. import conv_kernel
from ..blas_blocks import by_blocks, matmul_into
from ..codegen.constants import logical_view
from ..thunks import LibraryThunk, address
from ...semantics.batchnorm import batch_norm_grad, batch_norm_inference, batch_norm_training
from ...semantics.custom_calls import lookup, target_raised, target_returned
from ...semantics.dtypes import (bitcast_convert, product_operand_dtype, product_value,
                                 store_as)
from ...semantics.fft import fft
from ...semantics.linalg import cholesky, triangular_solve
from ...semantics.order import top_k_total_order
from ...semantics.rng import rng_values

LIBRARY_THUNKS: dict[str, Callable] = {}


def library(*opcodes):
    def wrap(fn):
        for op in opcodes:
            LIBRARY_THUNKS[op] = fn
        return fn
    return wrap


def _compute_dtype(dtype) -> np.dtype:
    """BLAS-friendly dtype: narrow floats compute in f32 (a table lookup: every dot and
    convolution asks, and the dtype's name costs ~1 us each time)."""
    got = _COMPUTE.get(dtype)
    if got is None:
        got = _COMPUTE[dtype] = _compute_dtype_of(np.dtype(dtype))
    return got


_COMPUTE: dict = {}


def _compute_dtype_of(dtype: np.dtype) -> np.dtype:
    if dtype.kind == "f" and dtype.itemsize < 4 or dtype.name == "bfloat16" \
            or dtype.name.startswith(("float8", "float4")):
        return np.dtype(np.float32)  # one rounding at the end, as the interpreter
    if dtype.name in ("int4", "int2", "uint4", "uint2"):
        return np.dtype(np.int64)  # the store wraps, as XLA's integer accumulation
    if dtype == np.bool_:
        return np.dtype(np.int32)
    return dtype


def _product_dtypes(lhs, rhs, out) -> tuple[np.dtype, np.dtype]:
    """(operand type, compute type) of a dot or convolution: its operands are converted
    to the first (XLA's OperandUpcaster: semantics.dtypes.product_operand_dtype, the
    interpreter's rule too) and multiplied in the second."""
    op = product_operand_dtype(lhs, rhs, out)
    return op, _compute_dtype(op)


def _as_operand(x: np.ndarray, op: np.dtype, ct: np.dtype) -> np.ndarray:
    """x rounded to the product's operand type where the compute type is another (f16
    operands of a bf16 product are bf16 values computed in f32); callers then convert
    to the compute type."""
    return x.astype(op) if x.dtype != op and op != ct else x


def _store(out: np.ndarray, value) -> None:
    """value rounded to out's type as a convert rounds (store_as), written into it."""
    np.copyto(out, store_as(value, out.dtype), casting="unsafe")


@library("dot")
def _dot(instr, args, outs):
    """DotGeneral: batch dims first, then lhs free dims, then rhs free dims."""
    dot_into(outs[0], *args, *_dot_attrs(instr))


def _dot_attrs(instr) -> tuple:
    """(lhs batch, lhs contracting, rhs batch, rhs contracting) dims of a dot, as tuples."""
    a = instr.attrs
    return tuple(tuple(a.get(k, ()) or ()) for k in (
        "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims"))


def _sizes(lhs, rhs, lb, lf, lc, rf) -> tuple[int, int, int, int]:
    """(batch, m, k, n) of a DotGeneral: the products of its batch, free and contracting
    dims."""
    def size(x, dims):
        return int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    return size(lhs, lb), size(lhs, lf), size(lhs, lc), size(rhs, rf)


@functools.lru_cache(maxsize=1024)
def _dot_dims(lnd: int, rnd: int, lb: tuple, lc: tuple, rb: tuple, rc: tuple):
    """For operands of lnd and rnd dims: the free dims of each side, whether it is a plain
    matrix product (no batch, one contraction, at most one free dim a side), and the
    transposes that put each operand in (batch, free, contracting) / (batch,
    contracting, free) order (None where it is in that order already)."""
    lf = tuple(d for d in range(lnd) if d not in lb and d not in lc)
    rf = tuple(d for d in range(rnd) if d not in rb and d not in rc)
    plain = not lb and len(lf) <= 1 and len(lc) == 1 and len(rf) <= 1

    def order(perm):
        return None if perm == tuple(range(len(perm))) else perm
    return lf, rf, plain, order(lb + lf + lc), order(rb + rc + rf)


def dot_into(out, lhs, rhs, lb, lc, rb, rc) -> None:
    """DotGeneral of lhs and rhs written into the array (or view) `out`."""
    lb, lc, rb, rc = tuple(lb), tuple(lc), tuple(rb), tuple(rc)
    ops = blas_operands(out, lhs, rhs, lb, lc, rb, rc)
    if ops is not None:
        matmul_into(*ops[:3])
        return
    lf, rf, _plain, lperm, rperm = _dot_dims(lhs.ndim, rhs.ndim, lb, lc, rb, rc)
    op, ct = _product_dtypes(lhs.dtype, rhs.dtype, out.dtype)
    lhs, rhs = _as_operand(lhs, op, ct), _as_operand(rhs, op, ct)
    lt = (lhs if lperm is None else lhs.transpose(lperm)).astype(ct, copy=False)
    rt = (rhs if rperm is None else rhs.transpose(rperm)).astype(ct, copy=False)
    bsz, m, k, n = _sizes(lhs, rhs, lb, lf, lc, rf)
    tmp = np.empty((bsz, m, n), ct)
    matmul_into(lt.reshape(bsz, m, k), rt.reshape(bsz, k, n), tmp)
    _store(out, product_value(tmp.reshape(out.shape), op, out.dtype))


def blas_operands(out, lhs, rhs, lb: tuple, lc: tuple, rb: tuple, rc: tuple,
                  convert: bool = True):
    """(a, b, o, swapped): the arrays matmul_into(a, b, o) takes for this DotGeneral when
    BLAS can write the result where it is -- the operands as (possibly transposed)
    views, or converted to the compute type when `convert` (else None for them) -- and
    whether a comes from rhs and b from lhs (a transposed result); else None (dot_into
    computes into a temporary and stores)."""
    lf, rf, plain, lperm, rperm = _dot_dims(lhs.ndim, rhs.ndim, lb, lc, rb, rc)
    op, ct = _product_dtypes(lhs.dtype, rhs.dtype, out.dtype)
    if out.dtype != ct or not convert and (lhs.dtype != ct or rhs.dtype != ct):
        return None
    lhs, rhs = _as_operand(lhs, op, ct), _as_operand(rhs, op, ct)
    lt = lhs if lperm is None else lhs.transpose(lperm)
    rt = rhs if rperm is None else rhs.transpose(rperm)
    if lt.dtype != ct:
        lt = lt.astype(ct)
    if rt.dtype != ct:
        rt = rt.astype(ct)
    if plain:
        # Plain matrix product: hand BLAS the (possibly transposed) views directly;
        # numpy passes the transposition flags instead of copying.
        # Sizes written out: reshape(-1, 0) cannot tell the -1 of an empty contraction.
        k = lhs.shape[lc[0]]
        lm = lt.reshape(lhs.shape[lf[0]] if lf else 1, k)
        rm = rt.reshape(k, rhs.shape[rf[0]] if rf else 1)
        o2 = out.reshape(lm.shape[0], rm.shape[1])
        if o2.flags.c_contiguous:
            return lm, rm, o2, False
        if o2.T.flags.c_contiguous:  # a transposed result layout: (A B)^T = B^T A^T
            return rm.T, lm.T, o2.T, True
    if not out.flags.c_contiguous:
        return None
    bsz, m, k, n = _sizes(lhs, rhs, lb, lf, lc, rf)
    # BLAS writes straight into the result buffer (the operands' reshapes may copy).
    return lt.reshape(bsz, m, k), rt.reshape(bsz, k, n), out.reshape(bsz, m, n), False


class DotThunk(LibraryThunk):
    """A dot. Its first run finds the arrays BLAS reads and writes (blas_operands) and,
    when each is a view of its slot's buffer, keeps where in the buffer it lies (offset,
    dims, strides: fixed by the shapes and layouts); later runs make those three views
    straight from the buffers, without the logical views, transposes and reshapes that
    lead to them (with matmul_into's early exit for small products, a third of an 8x8
    dot's call: 18.5 -> 12.3 us)."""

    def __init__(self, instr, operand_slots, out_slots):
        super().__init__(instr, _dot, "dot", operand_slots, out_slots)
        self._dims = _dot_attrs(instr)
        # [(slot id, dtype, dims, offset, strides)] x 3 once found; None: not looked for
        # yet; False: the general path (an operand or the result without one buffer).
        ones = len(self._arrays) == 2 and None not in self._arrays and \
            self.out_slots[0] is not None
        self._views = None if ones else False

    def run(self, frame) -> None:
        views = self._views
        if not views:
            if views is None:
                self._first(frame)
            else:
                super().run(frame)
            return
        bufs = frame.bufs
        a, b, o = (np.ndarray(dims, dtype, bufs[sid], offset, strides)
                   for sid, dtype, dims, offset, strides in views)
        try:
            with np.errstate(all="ignore"):
                matmul_into(a, b, o)
        except XlaDistError:
            raise
        except ValueError as e:
            raise self.fail(f"library call {self.name} failed: {e}") from e

    def _first(self, frame) -> None:
        (ls, lid), (rs, rid) = self._arrays
        out_slot = self.out_slots[0]
        bufs = frame.bufs
        lhs, rhs = logical_view(ls, bufs[lid]), logical_view(rs, bufs[rid])
        out = frame.view(out_slot)
        ops = blas_operands(out, lhs, rhs, *self._dims, convert=False)
        self._views = False
        if ops is not None:
            # Each array in its own operand's buffer: the two operands may be one buffer
            # in this run (f(x, x)) and two in the next.
            a, b, o, swapped = ops
            views = [_placed(a, bufs, rid if swapped else lid),
                     _placed(b, bufs, lid if swapped else rid), _placed(o, bufs, out_slot.id)]
            if all(v is not None for v in views):
                self._views = views
        super().run(frame)


def _placed(x: np.ndarray, bufs: list, sid: int):
    """(sid, dtype, dims, byte offset, strides) of `x` inside the buffer of slot `sid`, or
    None when it is not a view of it (a reshape copied)."""
    buf = bufs[sid]
    lo, x_at = address(buf), address(x)
    if x.size == 0 or not lo <= x_at < lo + buf.nbytes:
        return None
    return sid, x.dtype, x.shape, x_at - lo, x.strides


def _dilate(x, axis, factor):
    if factor == 1 or x.shape[axis] == 0:
        return x
    shape = list(x.shape)
    shape[axis] = (shape[axis] - 1) * factor + 1
    out = np.zeros(shape, x.dtype)
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(None, None, factor)
    out[tuple(idx)] = x
    return out


def _pad_axis(x, axis, lo, hi):
    if lo < 0:
        x = np.take(x, range(-lo, x.shape[axis]), axis=axis)
        lo = 0
    if hi < 0:
        x = np.take(x, range(x.shape[axis] + hi), axis=axis)
        hi = 0
    if lo or hi:
        width = [(0, 0)] * x.ndim
        width[axis] = (lo, hi)
        x = np.pad(x, width)
    return x


# Up to this many kernel taps a convolution is a sum of one matmul per tap (shifted
# input views, channels last): no im2col buffer of taps x the input. Measured on the
# 3x3 conv of benchmarks/compute.py (8x56x56x64 -> 64), one thread: 1.45x less CPU time
# (60 vs 89 ms; wall 1.6-1.9x on a loaded host) than im2col +
# tensordot, which copies the input 9 times before its one matmul. With stride 1 each
# tap is one contiguous matmul over the flattened padded grid (_flat_shifted): one
# thread, interleaved, load ~2.5: 30 ms vs 47 ms for the per-row shifted views.
_SHIFTED_MAX_TAPS = 64


def _channels_last_padded(lhs, dn, window, ct):
    """The input as [N, spatial..., C] in the compute type, base-dilated and padded
    (negative padding crops) with one strided copy into a zeroed array: np.pad on the
    transposed [N, C, spatial...] view, axis by axis, was a third of the benchmark
    conv's time."""
    src = lhs.transpose([dn.input_batch, *dn.input_spatial, dn.input_feature])
    shape, dst, sel = [src.shape[0]], [slice(None)], [slice(None)]
    empty = False
    for i, n in enumerate(src.shape[1:-1]):
        wd = window.dims[i] if window is not None else None
        b, lo, hi = (wd.base_dilation, wd.padding_low, wd.padding_high) if wd else (1, 0, 0)
        full = max(lo + ((n - 1) * b + 1 if n else 0) + hi, 0)
        j0 = (-lo + b - 1) // b if lo < 0 else 0  # input j lands at lo + j * b
        j1 = min(n, (full - 1 - lo) // b + 1) if full - 1 - lo >= 0 else 0
        empty = empty or j1 <= j0
        shape.append(full)
        dst.append(slice(lo + j0 * b, lo + (j1 - 1) * b + 1, b))
        sel.append(slice(j0, j1))
    shape.append(src.shape[-1])
    if empty or any(d.step != 1 for d in dst[1:]):
        xl = np.zeros(shape, ct)
    else:  # zero only the padding: zeroing all of it first cost ~0.3 ms of the 8x56x56x64
        xl = np.empty(shape, ct)
        for i, d in enumerate(dst[1:], 1):
            lead = (slice(None),) * i
            xl[lead + (slice(0, d.start),)] = 0
            xl[lead + (slice(d.stop, None),)] = 0
    if not empty:
        xl[tuple(dst)] = src[tuple(sel)]
    return xl


def _shifted_matmuls(xl, w, ksz, strides, out_sp):
    """[N, spatial..., C] (padded, dilated) * [O, C, k...] -> [N, O, out...], as
    sum over taps t of xl[:, shifted by t, :] @ w[:, :, t].T."""
    nsp = len(ksz)
    taps = list(np.ndindex(*ksz))
    wt = [np.ascontiguousarray(w[(slice(None), slice(None), *tap)].T) for tap in taps]
    work = int(np.prod(out_sp)) * w.shape[0] * w.shape[1] * len(taps)
    if nsp and all(s == 1 for s in strides):
        return _flat_shifted(xl, wt, taps, out_sp, work)
    acc = np.zeros((xl.shape[0], *out_sp, w.shape[0]), xl.dtype)
    sls = [tuple(slice(t, t + (n - 1) * s + 1, s) for t, n, s in zip(tap, out_sp, strides))
           for tap in taps]

    def images(lo, hi):  # every image is independent: fixed blocks of them on the pool
        a = acc[lo:hi]
        for sl, wk in zip(sls, wt):
            a += xl[(slice(lo, hi), *sl)] @ wk

    by_blocks(images, xl.shape[0], work)
    return np.moveaxis(acc, -1, 1) if nsp else acc


_FLAT_CHUNK = 512  # rows: 2 x 512 x 64 f32 = 256 KiB


def _flat_shifted(xl, wt, taps, out_sp, work):
    """Stride 1: every tap is ONE contiguous matmul. With the padded spatial dims S
    flattened into P rows per image, output position p reads input row p + offset(tap)
    for every tap, so out_flat[q] = sum_t x_flat[q + off_t] @ w_t over q in [0, L),
    computed on the whole padded grid and then cut to out_sp (the grid's extra rows,
    ~7% for 56x56 padded by 1, are discarded). A shifted 4-D view instead makes numpy
    run one small matmul per image row (448 matmuls of 56x64x64 per tap on the
    benchmark's 8x56x56x64 conv)."""
    n, sp, c = xl.shape[0], xl.shape[1:-1], xl.shape[-1]
    o = wt[0].shape[1]
    pitch = [int(np.prod(sp[k + 1:])) for k in range(len(sp))]  # row-major strides
    p = int(np.prod(sp))
    offs = [sum(t * st for t, st in zip(tap, pitch)) for tap in taps]
    last = sum((m - 1) * st for m, st in zip(out_sp, pitch)) + 1  # rows one image needs
    flat = xl.reshape(n * p, c)
    grid = np.zeros((n, *sp, o), xl.dtype)
    gflat = grid.reshape(n * p, o)

    def rows(lo, hi):  # output rows [lo, hi) of the flattened grid
        tmp = np.empty((min(_FLAT_CHUNK, hi - lo), o), xl.dtype)
        # Chunks of rows: every tap's product and their sum stay in the L2 cache.
        for r0 in range(lo, hi, _FLAT_CHUNK):
            r1 = min(r0 + _FLAT_CHUNK, hi)
            acc, t = gflat[r0:r1], tmp[:r1 - r0]
            for off, wk in zip(offs, wt):
                np.matmul(flat[r0 + off:r1 + off], wk, out=t)
                acc += t

    # Rows are independent: fixed blocks of them (not whole images, which as blocks are
    # too coarse to share among threads) on the pool.
    by_blocks(rows, (n - 1) * p + last, work // max(1, int(np.prod(out_sp))))
    return np.moveaxis(grid[(slice(None), *(slice(0, m) for m in out_sp))], -1, 1)


@library("convolution")
def _convolution(instr, args, outs):
    lhs, rhs = args
    out = outs[0]
    a = instr.attrs
    dn = a["dim_labels"]
    nsp = len(dn.input_spatial)
    window = a.get("window")
    groups = int(a.get("feature_group_count", 1) or 1)
    bgroups = int(a.get("batch_group_count", 1) or 1)
    op, ct = _product_dtypes(lhs.dtype, rhs.dtype, out.dtype)
    lhs, rhs = _as_operand(lhs, op, ct), _as_operand(rhs, op, ct)
    w = rhs.transpose([dn.kernel_output_feature, dn.kernel_input_feature,
                       *dn.kernel_spatial]).astype(ct)
    strides = []
    for i in range(nsp):
        wd = window.dims[i] if window is not None else None
        if wd is None:
            strides.append(1)
            continue
        if wd.window_reversal:
            w = np.flip(w, axis=2 + i)
        w = _dilate(w, 2 + i, wd.window_dilation)
        strides.append(wd.stride)
    ksz = w.shape[2:]
    xl = None
    if groups == bgroups == 1 and int(np.prod(ksz)) <= _SHIFTED_MAX_TAPS:
        xl = _channels_last_padded(lhs, dn, window, ct)
        sp = xl.shape[1:-1]
        nb, cin = xl.shape[0], xl.shape[-1]
    else:
        x = lhs.transpose([dn.input_batch, dn.input_feature, *dn.input_spatial]).astype(ct)
        for i in range(nsp):
            wd = window.dims[i] if window is not None else None
            if wd is not None:
                x = _dilate(x, 2 + i, wd.base_dilation)
                x = _pad_axis(x, 2 + i, wd.padding_low, wd.padding_high)
        sp = x.shape[2:]
        nb, cin = x.shape[0], x.shape[1]
    out_sp = [max((sp[i] - ksz[i]) // strides[i] + 1, 0) for i in range(nsp)]
    o = w.shape[0]
    result = np.zeros((nb // bgroups, o) + tuple(out_sp), ct)
    if not (all(s > 0 for s in out_sp) and result.size):
        pass  # an empty result, or no window fits: zeros
    elif xl is not None and conv_kernel.applies(ct, groups, bgroups, strides, nsp, o):
        # Channels-last f32 output: the kernel writes it in place (no copy of the result).
        into = out if (out.dtype == np.float32 and out.flags.c_contiguous and
                       out.shape == (nb, *out_sp, o) and dn.output_batch == 0 and
                       list(dn.output_spatial) == list(range(1, nsp + 1))) else None
        got = conv_kernel.conv_lines(xl, w, out_sp, by_blocks, into)
        if into is not None:
            return
        result = np.moveaxis(got, -1, 1)
    elif xl is not None:
        result = _shifted_matmuls(xl, w, ksz, strides, out_sp)
    else:
        patches = np.lib.stride_tricks.sliding_window_view(x, ksz, axis=tuple(range(2, 2 + nsp)))
        sl = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
        patches = patches[sl]  # [N, C, out..., k...]
        sp_axes = tuple(range(2 + nsp, 2 + 2 * nsp))
        # Each group's sum is added to the zeroed result, as the interpreter sums from +0:
        # np.tensordot of a one-element contraction is the bare product (np.dot skips BLAS),
        # so a padded tap's 0 * -1 gave -0 where the interpreter and XLA:CPU give +0.
        if bgroups > 1:
            nb_g, o_g = nb // bgroups, o // bgroups
            for g in range(bgroups):
                p = patches[g * nb_g:(g + 1) * nb_g]
                wg = w[g * o_g:(g + 1) * o_g]
                r = np.tensordot(p, wg, axes=((1,) + sp_axes, (1,) + tuple(range(2, 2 + nsp))))
                result[:, g * o_g:(g + 1) * o_g] += np.moveaxis(r, -1, 1)
        else:
            cg, og = cin // groups, o // groups
            for g in range(groups):
                p = patches[:, g * cg:(g + 1) * cg]
                wg = w[g * og:(g + 1) * og]
                r = np.tensordot(p, wg, axes=((1,) + sp_axes, (1,) + tuple(range(2, 2 + nsp))))
                result[:, g * og:(g + 1) * og] += np.moveaxis(r, -1, 1)
    # Canonical [N, O, spatial...] -> the output's dimension numbering.
    perm = [0] * (2 + nsp)
    perm[dn.output_batch] = 0
    perm[dn.output_feature] = 1
    for i, d in enumerate(dn.output_spatial):
        perm[d] = 2 + i
    _store(out, product_value(result.transpose(perm), op, out.dtype))


@library("fft")
def _fft(instr, args, outs):
    _store(outs[0], fft(args[0], instr.attrs["fft_type"], instr.attrs["fft_length"],
                        outs[0].dtype))


@library("cholesky")
def _cholesky(instr, args, outs):
    _store(outs[0], cholesky(args[0], bool(instr.attrs.get("lower", False))))


@library("triangular-solve")
def _triangular_solve(instr, args, outs):
    at = instr.attrs
    _store(outs[0], triangular_solve(
        args[0], args[1], left_side=bool(at.get("left_side", False)),
        lower=bool(at.get("lower", False)), unit_diagonal=bool(at.get("unit_diagonal", False)),
        transpose_a=str(at.get("transpose_a", "NO_TRANSPOSE")).upper()))


@library("topk")
def _topk(instr, args, outs):
    if instr.attrs.get("to_apply") is None:  # XLA's total order (semantics/order.py)
        values, order = top_k_total_order(args[0], int(instr.attrs["k"]),
                                          bool(instr.attrs.get("largest", True)))
    else:  # the comparator's order: the interpreter's rule calls it on whole arrays
        from ...interpreter.evaluator import Evaluator
        from ...interpreter.registry import EVAL_RULES
        values, order = EVAL_RULES["topk"](instr, [args[0]], Evaluator(None))
    _store(outs[0], values)
    _store(outs[1], order)


_RNG = None  # made at the first rng op: numpy.random is not imported before


@library("rng")
def _rng(instr, args, outs):
    global _RNG
    if _RNG is None:
        _RNG = np.random.default_rng()
    _store(outs[0], rng_values(str(instr.attrs["distribution"]).lower(), _RNG, args[0],
                               args[1], outs[0].shape, outs[0].dtype))


@library("bitcast-convert")
def _bitcast_convert(instr, args, outs):
    _store(outs[0], bitcast_convert(args[0], outs[0].dtype).reshape(outs[0].shape))


@library("get-dimension-size")
def _get_dimension_size(instr, args, outs):
    outs[0][...] = instr.operands[0].shape.dims[instr.attrs["dimensions"][0]]


@library("copy-start")
def _copy_start(instr, args, outs):
    for o in outs:
        if o is not None and o.shape == args[0].shape:
            _store(o, args[0])


def _bn_attrs(instr):
    return float(instr.attrs["epsilon"]), int(instr.attrs["feature_index"])


@library("batch-norm-training")
def _bn_training(instr, args, outs):
    for o, v in zip(outs, batch_norm_training(*args, *_bn_attrs(instr))):
        _store(o, v)


@library("batch-norm-inference")
def _bn_inference(instr, args, outs):
    _store(outs[0], batch_norm_inference(*args, *_bn_attrs(instr)))


@library("batch-norm-grad")
def _bn_grad(instr, args, outs):
    for o, v in zip(outs, batch_norm_grad(*args, *_bn_attrs(instr))):
        _store(o, v)


@library("custom-call")
def _custom_call(instr, args, outs):  # the table's entry; CustomCallThunk does the work
    raise AssertionError("custom-call runs through CustomCallThunk")


def custom_call_target(instr, original=None):
    """The target of a custom-call and its registered function, or UnsupportedError (at
    compile time, before anything runs) naming the target and the instruction."""
    return instr.attrs.get("custom_call_target"), lookup(instr, original)


class CustomCallThunk(LibraryThunk):
    """A custom-call: `fn(instr, args) -> value of instr.shape` from the registry that the
    interpreter uses too, called on the operands' logical arrays; the value is checked
    against the result shape and copied into the result buffers."""

    kind = "custom-call"

    def __init__(self, instr, original, operand_slots, out_slots):
        self.target, fn = custom_call_target(instr, original)
        super().__init__(instr, fn, f"custom-call {self.target}", operand_slots, out_slots)
        self.orig = original

    def describe(self) -> str:
        return f"target {self.target!r} (xladist.semantics.custom_calls)"

    def run(self, frame) -> None:
        from ..thunks import _value
        args = [_value(frame, op.shape, slots)
                for op, slots in zip(self.instr.operands, self.operand_slots)]
        try:
            with np.errstate(all="ignore"):
                value = self.fn(self.orig, args)
        except XlaDistError:
            raise
        except Exception as e:
            raise self.fail(target_raised(self.target, e)) from e
        leaves: list = []
        if not _leaves(self.instr.shape, value, leaves):
            raise self.fail(target_returned(self.target, type(value).__name__,
                                            self.instr.shape.to_text()))
        for slot, (shape, v) in zip(self.out_slots, leaves):
            if slot is None or not shape.is_array:
                continue
            v = np.asarray(v)
            if v.shape != tuple(shape.dims):
                raise self.fail(target_returned(self.target, f"dims {list(v.shape)}",
                                                shape.to_text()))
            if v.dtype != shape.dtype:  # never converted silently (the interpreter neither)
                raise self.fail(target_returned(self.target, f"element type {v.dtype}",
                                                shape.to_text()))
            _store(frame.view(slot), v)


def _leaves(shape, value, out) -> bool:
    """Flatten `value` along `shape` into out; False when its tuple structure differs."""
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
            return False
        return all(_leaves(s, v, out) for s, v in zip(shape.tuple_shapes, value))
    out.append((shape, value))
    return True


# Opcodes that the cpu backend does not run, with the reason `xladist ops` shows.
UNSUPPORTED = {
    # hlo.dynamic_padder rewrites these away in xladist.compile(), before any backend runs
    "dynamic-reshape": "run through hlo.dynamic_padder (xladist.compile applies it)",
    "set-dimension-size": "run through hlo.dynamic_padder (xladist.compile applies it)",
    "shuffle": "shuffle has no defined semantics in XLA's operation semantics",
    "scan": "scan is lowered to while loops by XLA before it reaches a backend",
    "collective-reduce": "collective-reduce has no published semantics in XLA's operation "
                         "semantics",
}
