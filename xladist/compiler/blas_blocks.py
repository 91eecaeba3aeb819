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

OpenBLAS's own threading is still the fastest way for a large product at times: right
after numpy's matmul in the same process its threads are awake, spinning, for ~0.1 s
(THREAD_TIMEOUT), and take a core's share from the pool's helper; handing them the
product instead matches numpy's time. So a large 2-D product has three ways -- its blocks
on the pool, its blocks on the caller alone, one call on OpenBLAS's threads (WHOLE) --
and its call site measures which is fastest now (parallel.run_blocks, choice.py). A
fourth way, SHARED, runs that one call's jobs on the pool (blas_pool.py): OpenBLAS's
partition without its workers' spin. Both are offered only where a check shows they give
the blocks' bits (_threads_agree), so the results stay those of the blocks on every
thread count; and WHOLE, where OpenBLAS's workers spin after each call (every process but
a rank), only while this process's other pools are awake already (WHOLE_MAX_TIMEOUT
below). A fifth, KERNEL, computes the blocks with xladist's LLVM GEMM (gemm_kernel.py)
cut as OpenBLAS cuts them, so with OpenBLAS's bits where its check shows it (below), and
on one thread too.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import replace

import numpy as np

from . import blas_pool, choice, conv_kernel, gemm_kernel
from .parallel import (
    BLAS_THREADS,
    UNTIMED,
    exclusive_blas,
    openblas_threads,
    others_in_flight,
    pool_busy,
    regime,
    run_blocks,
    thread_count,
)

# Multiply-adds per block: ~0.2-0.4 ms on one core, so the pool's hand-off (~15-50 us)
# is small, and a block a descheduled helper holds costs the caller little.
BLOCK_MACS = 1 << 24
# Every block of rows packs the whole other operand again. One thread, blocks run in
# turn against one call (interleaved, load ~7): 512^3 in blocks of 64 rows 2.1x, 128
# rows 1.09-1.46x, 256 rows 1.03x; 256x512x1024 in 128 / 256 columns 1.10x / 1.05x;
# 1024^3 in 256 rows 0.74x (the blocks fit the cache better). A multiple of 16.
MIN_ROWS = 256
# From this many multiply-adds a 2-D product also offers one call on OpenBLAS's own
# threads (choice.WHOLE) when that gives the blocks' bits (_threads_agree).
WHOLE_MIN_MACS = BLOCK_MACS
# The ways that need a bits check (WHOLE, SHARED: _threads_agree) are offered up to
# this many multiply-adds and this much memory for the check (both operands and two
# results, random): it runs the product twice -- its blocks on one thread, the threaded
# call -- once per shape, in the site's first calls: 1024^3 f32 ~35 ms and 16 MiB; 8192^3
# would stall a first step for ~20 s and take 1 GiB.
CHECK_MAX_MACS = 1 << 32
CHECK_MAX_BYTES = 256 << 20


def _checkable(m: int, n: int, k: int, itemsize: int) -> bool:
    """Whether a bits check of an m x k by k x n product is cheap enough to run."""
    return m * n * k <= CHECK_MAX_MACS and \
        (m * k + k * n + 2 * m * n) * itemsize <= CHECK_MAX_BYTES


# Where OpenBLAS's workers sleep right after a call -- OPENBLAS_THREAD_TIMEOUT (read when
# OpenBLAS loads; 2^N cycles of spinning, default N=28, ~0.1 s) at most WHOLE_MAX_TIMEOUT,
# as ranks get it (runtime/launcher.py) -- it is offered in every regime. Elsewhere (a
# plain process: a notebook, xladist.jax beside jax and numpy) they spin ~0.1 s after
# each call, taking CPU the measured wall time does not show: woken by us on a quiet
# machine they slowed whatever ran next (matmul 1024 took 37 ms on WHOLE against 21 ms
# on the pool, the transformer step 77 ms CPU per step against 63 ms, and a jax call
# between our steps 2x) -- so there it is offered only in the OWN_POOLS regime, where
# this process's other pools (numpy's OpenBLAS, XLA's) are awake already: splitting
# around them on the pool, matmul 1024 took 1.6-2.1x numpy's time; handing the product
# to OpenBLAS's awake threads, numpy's (compute.py --company, "after numpy+jax").
# The regime is read as a call starts (parallel._foreign_runnable): OpenBLAS's workers
# still spinning after our own WHOLE call count as awake pools, so a site that chose
# WHOLE keeps them awake while its calls come less than ~0.1 s apart.
WHOLE_MAX_TIMEOUT = 8


def _workers_sleep() -> bool:
    try:
        return int(os.environ.get("OPENBLAS_THREAD_TIMEOUT", "")) <= WHOLE_MAX_TIMEOUT
    except ValueError:
        return False


# OpenBLAS's split on the pool (SHARED) is not offered under other processes' load (the
# OTHERS regime), in any process: its jobs wait for each other's packed slices by spinning
# inside OpenBLAS, so a job whose thread a neighbour's process holds off its core keeps
# the other spinning. The MLP step under two busy processes, each way forced (median of
# 25, four runs, stop 40): the pool's blocks 12.1-15.7 ms, SHARED 13.2-19.3 ms; offered
# there, the measured choice took it for a third of the products (noise makes a slow way
# look fast now and then) and the step ran 15.8-17.2 ms against 10.7-17.8 ms without it
# (compute.py --company, six runs each), the transformer step 81-105 ms (70-80 ms CPU)
# against 85-90 ms (63-66 ms CPU).
def product_regimes(workers_sleep: bool) -> dict:
    """choice.Site's `only` for a product's ways: the regimes SHARED and WHOLE are
    offered in (WHOLE in every regime where OpenBLAS's workers sleep after a call)."""
    only = {choice.SHARED: (choice.IDLE, choice.OWN_POOLS)}
    if not workers_sleep:
        only[choice.WHOLE] = (choice.OWN_POOLS,)
    return only


_PRODUCT_REGIMES = product_regimes(_workers_sleep())
_BLAS_TYPES = {np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)}


def _blocks(units: int, work_per_unit: int, min_units: int = 1):
    per = max(min_units, -(-BLOCK_MACS // max(1, work_per_unit)))
    if per >= units:
        return None
    return [(b, min(b + per, units)) for b in range(0, units, per)]


@functools.lru_cache(maxsize=1024)
def gemm_split(m: int, n: int, k: int):
    """(axis, blocks) of an m x k by k x n product: axis 0 splits the rows of the
    result, 1 its columns; None: one call. (Cached: every large product asks, on every
    call; the blocks are not to be changed.)"""
    axis = 0 if m >= n else 1
    units, other = (m, n) if axis == 0 else (n, m)
    return None if (b := _blocks(units, other * k, MIN_ROWS)) is None else (axis, b)


# ---- the measured way of each product (choice.py) ------------------------------------
# Keyed by everything the way's speed and bits depend on: the shapes, the operands'
# orders, the thread count, and for a 2-D product whether it may take a checked way. At
# most MAX_SITES, the least recently used dropped first: a program with ever new shapes
# (dynamic ones, a serving loop over request sizes) must not grow them without bound; a
# dropped shape that comes back measures its ways again.
MAX_SITES = 4096
_sites: dict[tuple, choice.Site] = {}
_agree: dict[tuple, bool] = {}


_sites_lock = threading.Lock()  # executions in two threads of one process (rare)


def _bound(table: dict) -> None:
    """Room for one more entry in `table` (under _sites_lock): the oldest go first."""
    while len(table) >= MAX_SITES:
        del table[next(iter(table))]


def _site(key: tuple, ways, name) -> choice.Site:
    """The site of `key`, made with `ways` and name() (a function: the name is only
    formatted for a new site) the first time."""
    with _sites_lock:
        site = _sites.pop(key, None)
        if site is None:
            site = choice.Site(ways, name(), _PRODUCT_REGIMES)
            _bound(_sites)
        _sites[key] = site  # the most recently used last
        return site


def _order(x: np.ndarray) -> str | None:
    """"N" for a row-major matrix BLAS reads in place, "T" for a column-major one, None
    for other strides (numpy copies those first)."""
    it = x.itemsize
    (s0, s1), (r, c) = x.strides, x.shape
    if s1 == it and s0 >= c * it:
        return "N"
    if s0 == it and s1 >= r * it:
        return "T"
    return None


def _threads_agree(a: np.ndarray, b: np.ndarray, threads: int) -> bool | None:
    """Whether one call of this product on `threads` OpenBLAS threads gives the bits of
    its blocks (matmul_into's ALONE and POOL ways), checked once per shape, orders and
    thread count on random operands of the same shapes and orders. OpenBLAS's threads
    partition the product their own way, and for some shapes that changes the order of
    the sums: f32 37x2000x900 and 700x700x3000 on 2 threads differ from one thread in
    the last bits (OpenBLAS 0.3.31, Haswell kernel), while 1024^3 and 512^3 agree. The
    summation order follows from the shapes and thread count alone, and random values
    show any difference in it in nearly every element. None: not known yet (another
    execution is in flight, so the threaded call cannot run)."""
    key = (a.dtype.char, a.shape, b.shape, _order(a), _order(b), threads)
    if key not in _agree and others_in_flight():  # the threaded call could not run
        return None  # (not even the operands are made)
    return _agrees(key, a, b, gemm_split(a.shape[0], b.shape[1], a.shape[1]),
                   lambda ra, rb, got: _threaded(ra, rb, got, threads))


def _agrees(key: tuple, a: np.ndarray, b: np.ndarray, split, other) -> bool | None:
    """Whether other(ra, rb, got) -- another way's product of random operands like a
    and b (_check_arrays) into got, False when it cannot run now -- gives the bits of the
    product's fixed blocks `split` on one thread: checked once per `key`, the answer kept.
    False, not kept, where there is no memory for the check (the way is then dropped: left
    offered, the site would pick it to warm it, and try again, on every call); None, not
    kept, when `other` could not run (asked again at the way's next pick). The other way
    runs first, so that it costs no blocks' product when it cannot."""
    known = _agree.get(key)
    if known is not None:
        return known
    arrays = _check_arrays(a, b)
    if arrays is None:
        return False
    _checks_run.n += 1  # its call is no sample (_untimed)
    ra, rb, want, got = arrays
    if not other(ra, rb, got):
        return None
    with openblas_threads(BLAS_THREADS):
        _gemm_blocks(ra, rb, want, split)
    return _learned(key, _same_bits(want, got))


class _Checks(threading.local):
    n = 0  # the bits checks this thread has run (_agrees)


_checks_run = _Checks()


def _untimed(checks_before: int, ran: bool):
    """What a way's call returns to run_blocks: parallel.UNTIMED where it ran a bits check
    of its product (this thread's count moved since `checks_before`), else `ran`."""
    return UNTIMED if ran and _checks_run.n != checks_before else ran


def _check_arrays(a: np.ndarray, b: np.ndarray):
    """A bits check's arrays: random operands like a and b (dtype, dims, order), with
    sums that underflow at the corners of every block (_signed_zeros), and two results
    of their product's dims; None when there is no memory for them (the check is
    optional: the product then runs its fixed blocks, and nothing is learned)."""
    rng = np.random.default_rng(0)
    try:
        want = np.empty((a.shape[0], b.shape[1]), a.dtype)
        ra, rb = _random_like(a, rng), _random_like(b, rng)
    except MemoryError:
        return None
    _signed_zeros(ra, rb)
    return ra, rb, want, np.empty_like(want)


def _signed_zeros(a: np.ndarray, b: np.ndarray) -> None:
    """Products that underflow to -0 in the check's operands, summed at the four corners
    of each of the product's fixed blocks: random values never show a signed zero, and
    OpenBLAS's paths give different ones for such a sum -- its level-3 driver adds the
    sums to C zeroed first (+0, as the LLVM GEMM and OpenBLAS's threads), its small-
    matrix kernels (SkylakeX: at most 10^6 multiply-adds, e.g. the last block of 8 rows
    of 520x300x300) store them as they are (-0, but +0 in the last n % 16 columns). The
    rest of the rows and columns so scaled still sum values of random signs."""
    (m, k), n = a.shape, b.shape[1]
    split = gemm_split(m, n, k)
    tiny = float(np.finfo(a.dtype).smallest_subnormal) ** 0.5 / 2  # tiny * tiny -> -0
    rows, cols = {0, m - 1}, {0, n - 1}
    for lo, hi in split[1] if split else ():
        (rows if split[0] == 0 else cols).update((lo, hi - 1))
    a[sorted(rows), :] = -tiny
    b[:, sorted(cols)] = tiny


def _learned(key: tuple, agree):
    """A check's answer, kept (bounded as the sites are)."""
    with _sites_lock:
        _bound(_agree)
        _agree[key] = agree
    return agree


def _random_like(x: np.ndarray, rng) -> np.ndarray:
    """Random values in [-0.5, 0.5) of x's dtype, dims and order (a bits check's
    operand), made in place: no more memory than the operand's (CHECK_MAX_BYTES)."""
    shape = x.shape[::-1] if _order(x) == "T" else x.shape
    v = np.empty(shape, x.dtype)
    parts = v.reshape(-1).view(x.dtype.char.lower())  # a complex one's real, imaginary
    rng.random(out=parts, dtype=parts.dtype)
    parts -= 0.5
    return v.T if _order(x) == "T" else v


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether a check's two results hold the same bits, compared a slice at a time: no
    copy of them (CHECK_MAX_BYTES)."""
    xb, yb = x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8)
    step = 1 << 18
    return all(np.array_equal(xb[i:i + step], yb[i:i + step])
               for i in range(0, xb.size, step))


def _threaded(a, b, out, threads: int, server: bool = False) -> bool:
    """out = a @ b as one OpenBLAS call cut for `threads` threads: its jobs on the pool
    (blas_pool.py) unless `server` or it is not available, else on OpenBLAS's own
    threads. False (nothing ran) while another execution is in flight. The cut depends on
    the shapes and `threads` alone, so both give the same bits."""
    with exclusive_blas(threads) as alone:
        if not alone:
            return False
        if server or not blas_pool.available():
            np.matmul(a, b, out=out)
            return True
        with blas_pool.on_pool(threads) as complete:
            np.matmul(a, b, out=out)
        if not complete():  # a job could not be started: the product another way
            np.matmul(a, b, out=out)
        return True


def _gemm_blocks(a, b, out, split) -> None:
    """The blocks of a 2-D product in turn on this thread."""
    if split is None:
        np.matmul(a, b, out=out)
        return
    for lo, hi in split[1]:
        if split[0] == 0:
            np.matmul(a[lo:hi], b, out=out[lo:hi])
        else:
            np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])


# ---- the LLVM GEMM as a way (choice.KERNEL) ---------------------------------------------
# One core of the development host (AMD EPYC znver4, AVX-512; benchmarks/gemm_kernels.py,
# stop 43): f32 1024^3 in 19.9 ms, OpenBLAS's SkylakeX kernel 21.7 ms, XLA:CPU 20.4 ms.
# The kernel cuts K as OpenBLAS's level-3 driver does (gemm_kernel.Params.kround); with
# OpenBLAS's block size and unroll for the dtype (GEMM_Q, GEMM_UNROLL_M: they differ by
# CPU kernel and version, so they are found by a probe, _openblas_cut) each element is
# summed in OpenBLAS's order, and its blocks give the bits of OpenBLAS's. It is offered
# for a product, as OpenBLAS's threads are, only where a check on random operands of its
# shapes and orders shows it does (_kernel_agrees).
_CUT_Q = (448, 384, 256, 320, 512, 640, 192, 224, 288, 352, 416, 480, 576, 768, 128, 96,
          64, 1024)
_CUT_U = (16, 8, 4, 32, 2, 1, 24, 12, 6)
_CUT_K = (4099, 1000, 2999)  # probe depths: a long cut, and two where the tail halves
_cuts: dict = {}
_KERNEL_TYPES = {np.dtype(np.float32), np.dtype(np.float64)}
# The way is offered from a process's KERNEL_AFTER-th product that could take it on:
# building the kernel costs ~0.9 s of CPU per dtype where the host's kernel cache does
# not hold it yet (~25 ms with the probe where it does) and each shape's check two
# products, which a process with a few large products (a test, one `xladist run` of a
# module) never wins back, while a training loop reaches it within its first steps (and
# compute.py's --warm 15 rounds within their first half). The build runs on a thread of
# its own (gemm_kernel.built): the products go on without the way meanwhile, and no
# step waits for the compile. Sites made before the way is ready take it on then
# (choice.Site.offer).
KERNEL_AFTER = 8
_kernel_asked = [0]


def _kernel_due() -> bool:
    """Whether the LLVM GEMM may be offered now (KERNEL_AFTER); counts the asking."""
    if _kernel_asked[0] >= KERNEL_AFTER:
        return True
    _kernel_asked[0] += 1
    return False


def _openblas_cut(dtype: np.dtype, wait: bool = True):
    """gemm_kernel.Params whose cut of K is this process's OpenBLAS's for `dtype` (64 x K
    by K x 64 products, K in _CUT_K, give OpenBLAS's bits on one thread), found once per
    process; None when no candidate does, or the kernel cannot be built here (the way is
    then not offered). Not `wait`: None also while the kernel is still being built
    (gemm_kernel.built), and the probe (~10 ms, on the caller: it calls OpenBLAS, whose
    thread count is the process's) runs at the first ask after."""
    if dtype in _cuts:
        return _cuts[dtype]
    if not gemm_kernel.available():
        found = None
    elif (ready := wait or gemm_kernel.built(dtype)) is False:
        return None  # (building: asked again by a later product)
    else:
        try:  # (ready None: the build failed)
            found = _probe_cut(dtype) if ready else None
        except Exception:  # noqa: BLE001 -- no kernel: the product keeps its other ways
            found = None
    with _sites_lock:
        _cuts[dtype] = found
    return found


def _probe_cut(dtype: np.dtype):
    rng = np.random.default_rng(1)
    probes = []
    for k in _CUT_K:
        a, b = rng.random((64, k), dtype) - 0.5, rng.random((k, 64), dtype) - 0.5
        with openblas_threads(BLAS_THREADS):
            probes.append((a, b, a @ b))
    tried = set()
    for q, u in ((q, u) for q in _CUT_Q for u in _CUT_U if q % u == 0):
        params = replace(gemm_kernel.DEFAULT, kc=q, kround=u)
        cuts = tuple(tuple(gemm_kernel.k_blocks(k, params)) for k in _CUT_K)
        if cuts in tried:  # (another Q and unroll cutting the probes alike)
            continue
        tried.add(cuts)
        if all(_same_bits(gemm_kernel.matmul(a, b, None, params), want)
               for a, b, want in probes):
            return params
    return None


def llvm_gemm_info() -> dict:
    """Per dtype (f32, f64) the cut of K the LLVM GEMM takes to give this OpenBLAS's
    bits, {"q", "unroll"}, or None where it is not offered (xladist explain)."""
    out = {}
    for dtype in sorted(_KERNEL_TYPES, key=lambda d: d.itemsize):
        params = _openblas_cut(dtype)
        out[dtype.name] = None if params is None else \
            {"q": params.kc, "unroll": params.kround}
    return out


def _kernel_agrees(a: np.ndarray, b: np.ndarray, split, params, orders=None,
                   blocks=None) -> bool:
    """Whether the LLVM GEMM's `blocks` of this product (gemm_kernel.thread_blocks; by
    default its OpenBLAS blocks `split`) give the bits of its OpenBLAS blocks (_agrees),
    checked once per shape, orders and blocks (`orders`: _order of a and b, when the
    caller has them); False where there is no memory for the check."""
    cut = split or (0, [(0, a.shape[0])])
    mine = blocks or cut
    key = ("kernel", a.dtype.char, a.shape, b.shape) + \
        (orders or (_order(a), _order(b))) + (mine[0], tuple(mine[1]))

    def kernel(ra, rb, got) -> bool:
        work = gemm_kernel.product_blocks(ra, rb, got, mine[0], params)
        if work.pack is not None:
            work.pack(None, 0, work.panels)
        for lo, hi in mine[1]:
            work.compute(None, lo, hi)
        return True
    return bool(_agrees(key, a, b, cut, kernel))


def _run_kernel(work, blocks, threads: int) -> None:
    """A product's LLVM GEMM blocks (gemm_kernel.product_blocks) on the pool: B's
    panels packed first (PACK_PIECES), then the blocks. (Packing inside the blocks'
    hand-off instead -- the first threads to reach a block claim the pieces, the others
    wait for the last -- was slower, not faster: matmul 1024 f32, 2 threads, 61 rounds
    beside other work, minimum / 10th percentile, columns 10.50 / 10.64 ms as here
    against 10.81 / 10.97, rows 10.69 / 10.99 against 11.03 / 11.24 (stop 51). Here the
    packing's hand-off wakes the helper early, and it is awake when the blocks come.)"""
    if work.pack is not None:
        pieces = 1 if regime() == choice.OTHERS else min(work.panels, PACK_PIECES)
        per = -(-work.panels // pieces)
        run_blocks(work.pack, None, [(lo, min(lo + per, work.panels))
                                     for lo in range(0, work.panels, per)],
                   None, None, threads)
    run_blocks(work.compute, None, blocks, None, None, threads)


# (The LLVM GEMM's blocks are its own: gemm_kernel.thread_blocks. Where they are rows,)
# B's packing (~3% of a product's CPU for 1024^3) is shared out among the threads in this
# many pieces -- except under other processes' load, where it stays on the caller: the
# hand-off wakes a helper that must win a core from a busy neighbour for a short phase.
# matmul 1024, the way forced, interleaved medians of 21, two runs each (stop 43): quiet,
# on the pool 10.87 / 11.29 ms, on the caller 11.13 / 11.63 ms; beside one busy process
# per core, on the pool 23.82 / 23.37 ms, on the caller 22.75 / 22.49 ms.
PACK_PIECES = 4


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b, 2-D or batched 3-D, out C-contiguous; a large product runs in fixed
    blocks on the pool or the caller, or (2-D) as one call on OpenBLAS's threads or their
    split on the pool, as its site measured fastest (choice.py); every way gives the same
    bits."""
    if a.dtype not in _BLAS_TYPES or out.size == 0 or a.ndim == 2 and \
            a.shape[0] * a.shape[1] * b.shape[1] < min(BLOCK_MACS, WHOLE_MIN_MACS):
        # (a 2-D product under BLOCK_MACS is one block: gemm_split gives None)
        np.matmul(a, b, out=out)
        return
    threads = thread_count()
    if a.ndim == 3:
        bsz, m, k = a.shape
        blocks = _blocks(bsz, m * k * b.shape[2]) if bsz > 1 else None
        if blocks is None:
            if bsz == 1:
                matmul_into(a[0], b[0], out[0])
            else:
                np.matmul(a, b, out=out)
            return
        site = _site(("batched", a.dtype.char, a.shape, b.shape, threads),
                     (choice.POOL, choice.ALONE),
                     lambda: f"dot {bsz}x{m}x{k}x{b.shape[2]} {a.dtype}")
        run_blocks(lambda _, lo, hi: np.matmul(a[lo:hi], b[lo:hi], out=out[lo:hi]),
                   None, blocks, site, n=threads)
        return
    (m, k), n = a.shape, b.shape[1]
    split = gemm_split(m, n, k)
    whole = {}
    order_a, order_b = _order(a), _order(b)
    # numpy takes syrk for a product of a matrix with its own transpose (other sums): no
    # way that calls it on the whole operands is offered then; nor any checked way where
    # the check would cost too much.
    apart = not np.may_share_memory(a, b) and _checkable(m, n, k, a.itemsize)
    # (the checked ways call BLAS, or read the operands, in place)
    checked = apart and m * n * k >= WHOLE_MIN_MACS and order_a and order_b
    cut = split or (0, [(0, m)])  # the fixed blocks: one where the product is not split
    if checked and threads > 1:
        def threaded(way: int):
            def call():
                # Checked when first picked, not before: the check costs the product
                # twice (where blas_pool is not available, it wakes OpenBLAS's threads).
                checks = _checks_run.n
                agree = _threads_agree(a, b, threads)
                if not agree:
                    if agree is False:  # (None: not known yet)
                        site.drop(choice.WHOLE)
                        site.drop(choice.SHARED)
                    return False
                before, busy = blas_pool.counts["calls"], blas_pool.counts["busy"]
                ran = _threaded(a, b, out, threads, server=way == choice.WHOLE)
                if ran and way == choice.SHARED and blas_pool.counts["calls"] == before \
                        and blas_pool.counts["busy"] == busy:
                    # The callback was not reached: the OpenBLAS numpy calls has none
                    # (another loaded one had), or it ran this shape on one thread.
                    site.drop(choice.SHARED)
                return _untimed(checks, ran)
            return call
        whole = {choice.WHOLE: threaded(choice.WHOLE)}
        if blas_pool.available():
            whole[choice.SHARED] = threaded(choice.SHARED)
    # (the kernel reads strides in whole elements: a byte-strided view, which no compiled
    # program makes, is left to numpy)
    if checked and a.dtype in _KERNEL_TYPES and \
            not (a.strides[0] | b.strides[0]) % a.itemsize and \
            _kernel_due() and (params := _openblas_cut(a.dtype, wait=False)) is not None:
        def kernel():
            checks = _checks_run.n
            mine = gemm_kernel.thread_blocks(m, n, threads, a.dtype, params)
            if not _kernel_agrees(a, b, cut, params, (order_a, order_b), mine):
                site.drop(choice.KERNEL)
                return False
            if threads > 1 and len(mine[1]) > 1 and pool_busy():
                # another thread's call holds the pool: the blocks would run on the caller
                # alone and be timed as this way; the product's blocks instead, no sample
                return False
            _run_kernel(gemm_kernel.product_blocks(a, b, out, mine[0], params), mine[1],
                        threads)
            return _untimed(checks, True)
        whole[choice.KERNEL] = kernel
    if split is None and not whole:
        np.matmul(a, b, out=out)
        return
    if split is None:
        block = lambda _, lo, hi: np.matmul(a, b, out=out)  # noqa: E731
    elif split[0] == 0:
        block = lambda _, lo, hi: np.matmul(a[lo:hi], b, out=out[lo:hi])  # noqa: E731
    else:
        block = lambda _, lo, hi: np.matmul(a, b[:, lo:hi], out=out[:, lo:hi])  # noqa: E731
    ways = (choice.POOL, choice.ALONE) if len(cut[1]) > 1 and threads > 1 else \
        (choice.ALONE,)
    # (apart in the key: a product of overlapping operands offers fewer ways, and on a
    # site of the others its blocks would be timed as the ways it does not run)
    site = _site(("gemm", a.dtype.char, m, n, k, order_a, order_b, threads, apart),
                 ways + tuple(whole), lambda: f"dot {m}x{k}x{n} {a.dtype}")
    if choice.KERNEL in whole:
        site.offer(choice.KERNEL)  # (made before the way was due; not where it was dropped)
    whole = {w: call for w, call in whole.items() if w in site.ways}
    run_blocks(block, None, cut[1], site, whole, threads)


def by_blocks(fn, units: int, work_per_unit: int) -> None:
    """fn(lo, hi) over fixed blocks of `units` independent units (a convolution's
    images or output rows), on the pool or the caller as measured, when there is enough
    work."""
    blocks = _blocks(units, work_per_unit) if units > 1 else None
    if blocks is None:
        fn(0, units)
        return
    site = _site(("blocks", units, work_per_unit, thread_count()),
                 (choice.POOL, choice.ALONE), lambda: f"blocks {units}x{work_per_unit}")
    run_blocks(lambda _, lo, hi: fn(lo, hi), None, blocks, site)


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
