"""BLAS calls (dot, convolution) split into fixed blocks on the compute pool.

OpenBLAS's own threads wait for work by spinning and yielding: on a busy machine they
burn the cores the others need and wait for descheduled partners. On the shared 2-core
development host (load ~1.5-2 from other sessions) a 256x1024x128 matmul took a median
15.8 ms with OpenBLAS on 2 threads against 2.0 ms on one. So xladist runs OpenBLAS on
one thread (parallel.sync_blas) and splits a large product itself: the rows of the
result (its columns when it is wider than tall; batches of a batched product; images or
output rows of a convolution) in fixed blocks, each block one single-threaded BLAS call, run by
parallel.run_blocks (blocks claimed by whoever comes, blocking waits). numpy releases
the GIL inside the BLAS call, so the blocks run in parallel.

Blocks depend only on the shapes, never on the thread count, so 1, 2 or 16 threads
make the same BLAS calls on the same blocks and give bit-identical results.
"""

from __future__ import annotations

import numpy as np

from . import conv_kernel
from .parallel import HEAVY, run_blocks

# Multiply-adds per block: ~0.2-0.4 ms on one core, so the pool's hand-off (~15-50 us)
# is small, and a block a descheduled helper holds costs the caller little.
BLOCK_MACS = 1 << 24
# Every block of rows packs the whole other operand again. One thread, blocks run in
# turn against one call (interleaved, load ~7): 512^3 in blocks of 64 rows 2.1x, 128
# rows 1.09-1.46x, 256 rows 1.03x; 256x512x1024 in 128 / 256 columns 1.10x / 1.05x;
# 1024^3 in 256 rows 0.74x (the blocks fit the cache better). A multiple of 16.
MIN_ROWS = 256
_BLAS_TYPES = {np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)}


def _blocks(units: int, work_per_unit: int, min_units: int = 1):
    per = max(min_units, -(-BLOCK_MACS // max(1, work_per_unit)))
    if per >= units:
        return None
    return [(b, min(b + per, units)) for b in range(0, units, per)]


def _heavy(macs: int) -> bool:
    return macs >= HEAVY * BLOCK_MACS


def gemm_split(m: int, n: int, k: int):
    """(axis, blocks) of an m x k by k x n product: axis 0 splits the rows of the
    result, 1 its columns; None: one call."""
    axis = 0 if m >= n else 1
    units, other = (m, n) if axis == 0 else (n, m)
    return None if (b := _blocks(units, other * k, MIN_ROWS)) is None else (axis, b)


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b, 2-D or batched 3-D, out C-contiguous; split on the pool when large."""
    if a.dtype not in _BLAS_TYPES or out.size == 0:
        np.matmul(a, b, out=out)
        return
    if a.ndim == 3:
        bsz, m, k = a.shape
        blocks = _blocks(bsz, m * k * b.shape[2]) if bsz > 1 else None
        if blocks is None:
            if bsz == 1:
                matmul_into(a[0], b[0], out[0])
            else:
                np.matmul(a, b, out=out)
            return
        run_blocks(lambda _, lo, hi: np.matmul(a[lo:hi], b[lo:hi], out=out[lo:hi]),
                   None, blocks, _heavy(bsz * m * k * b.shape[2]))
        return
    split = gemm_split(a.shape[0], b.shape[1], a.shape[1])
    heavy = _heavy(a.shape[0] * a.shape[1] * b.shape[1])
    if split is None:
        np.matmul(a, b, out=out)
    elif split[0] == 0:
        run_blocks(lambda _, lo, hi: np.matmul(a[lo:hi], b, out=out[lo:hi]), None,
                   split[1], heavy)
    else:
        run_blocks(lambda _, lo, hi: np.matmul(a, b[:, lo:hi], out=out[:, lo:hi]),
                   None, split[1], heavy)


def by_blocks(fn, units: int, work_per_unit: int) -> None:
    """fn(lo, hi) over fixed blocks of `units` independent units (a convolution's
    images or output rows), on the pool when there is enough work."""
    blocks = _blocks(units, work_per_unit) if units > 1 else None
    if blocks is None:
        fn(0, units)
    else:
        run_blocks(lambda _, lo, hi: fn(lo, hi), None, blocks,
                   _heavy(units * work_per_unit))


def describe_dot(m: int, n: int, k: int, threads: int) -> str:
    split = gemm_split(m, n, k)
    if split is None:
        return "one thread: one BLAS call"
    axis, blocks = split
    what = "rows" if axis == 0 else "columns"
    return (f"{min(threads, len(blocks))} threads: {len(blocks)} blocks of "
            f"{blocks[0][1] - blocks[0][0]} {what}, one single-threaded BLAS call each")


def split_text(instr, threads: int) -> str | None:
    """What `xladist explain` prints for a dot's or convolution's split, else None."""
    def size(shape, dims):
        return int(np.prod([shape.dims[d] for d in dims], dtype=np.int64))
    if instr.opcode == "dot":
        a, (lhs, rhs) = instr.attrs, (o.shape for o in instr.operands)
        lb, lc = a.get("lhs_batch_dims", ()) or (), a.get("lhs_contracting_dims", ()) or ()
        rb, rc = a.get("rhs_batch_dims", ()) or (), a.get("rhs_contracting_dims", ()) or ()
        bsz, k = size(lhs, lb), size(lhs, lc)
        m = size(lhs, [d for d in range(len(lhs.dims)) if d not in lb and d not in lc])
        n = size(rhs, [d for d in range(len(rhs.dims)) if d not in rb and d not in rc])
        if bsz > 1 and (blocks := _blocks(bsz, m * n * k)) is not None:
            return (f"{min(threads, len(blocks))} threads: {len(blocks)} blocks of "
                    f"{blocks[0][1] - blocks[0][0]} batches, one BLAS call each")
        return describe_dot(m, n, k, threads) if bsz == 1 else "one thread: one BLAS call"
    if instr.opcode == "convolution" and (direct := conv_kernel.lines_of(instr)):
        lines, per_line = direct
        blocks = _blocks(lines, per_line) if lines > 1 else None
        if blocks is None:
            return "one thread: direct kernel (conv_kernel.py), one call"
        return (f"{min(threads, len(blocks))} threads: {len(blocks)} blocks of "
                f"{blocks[0][1] - blocks[0][0]} output lines, direct kernel (conv_kernel.py)")
    if instr.opcode == "convolution":
        dn = instr.attrs["dim_labels"]
        macs = instr.shape.size * instr.operands[0].shape.dims[dn.input_feature] * \
            size(instr.operands[1].shape, dn.kernel_spatial)
        blocks = -(-macs // BLOCK_MACS)
        if blocks < 2:
            return "one thread: BLAS calls on the whole batch"
        return (f"{min(threads, blocks)} threads: ~{blocks} blocks of output rows (or "
                f"images) of ~{BLOCK_MACS >> 20} M multiply-adds, single-threaded BLAS calls")
    return None
