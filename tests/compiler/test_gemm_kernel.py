"""The LLVM GEMM kernel (xladist/compiler/gemm_kernel.py, the kernel benchmarks/gemm_kernels.py
measures) against numpy in float64 and against exact integer products: odd sizes around
the micro-tile and the cache blocks, strided and transposed operands, f32 and f64, and the
empty edges."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from xladist.compiler import gemm_kernel as gk

pytestmark = pytest.mark.skipif(not gk.available(), reason="no FMA vectors on this target")
LANES = gk.vector_lanes() or 8  # (the module is skipped without them; it must still load)

# Blocks small enough that a few dozen rows cross every one of them: MC = 2 MR,
# KC = 5 (so k = 7 is one block and a tail of 2), NC = 2 NR of f32 (4 of f64 on AVX2).
SMALL = gk.Params(mr=6, nv=2, mc=12, kc=5, nc=4 * LANES)
# KC = 19: whole panels of A pack in MR x VW blocks plus a tail of columns (VW = 8 or
# 16 f32, 4 or 8 f64); with the 4 x 3-vector micro-tile, the other shape tuned.
SMALL_VEC = replace(SMALL, kc=19)
FOUR_BY_3 = replace(SMALL, mr=4, nv=3, mc=8, kc=19, nc=6 * 8 * (LANES // 8))
BLOCKS = pytest.mark.parametrize("params", [SMALL, SMALL_VEC, FOUR_BY_3],
                                 ids=["kc5", "kc19", "4x3v"])


def bound(a, b, eps):
    """Elementwise error allowed: eps times k times sum |a||b| (the classic bound of a
    sum of k products, in the kernel's precision)."""
    k = a.shape[1]
    return eps * max(k, 1) * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))


def check(a, b, params=gk.DEFAULT, out=None):
    got = gk.matmul(a, b, out=out, params=params)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == ref.shape and got.dtype == a.dtype
    eps = np.finfo(a.dtype).eps
    err = np.abs(got.astype(np.float64) - ref)
    assert np.all(err <= bound(a, b, eps) + 1e-30), f"max error {err.max()}"
    return got


SIZES = [(1, 1, 1), (1, 7, 1), (7, 1, 33), (7, 33, 100), (33, 100, 7), (100, 257, 33),
         (257, 33, 100), (6, 16, 16), (5, 17, 15), (13, 513, 31)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", SIZES)
def test_matches_float64_reference(m, k, n, dtype):
    rng = np.random.default_rng(m * 10007 + k * 101 + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    check(a, b)


@BLOCKS
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (11, 7, 40), (25, 23, 33), (12, 10, 64),
                                   (37, 47, 70), (24, 40, 48)])
def test_small_blocks_cross_every_block_edge(m, k, n, dtype, params):
    # Several KC blocks (C accumulated into after the first), MC and NC blocks with
    # tails, zero-padded panels.
    rng = np.random.default_rng(m + 31 * k + 977 * n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    check(a, b, params)


@pytest.mark.parametrize("params", [gk.DEFAULT, SMALL, SMALL_VEC, FOUR_BY_3],
                         ids=["default", "kc5", "kc19", "4x3v"])
def test_integer_products_are_exact(params):
    # Small integers: every partial sum is an integer below 2^24, exact in f32 in any
    # order, so the kernel must give exactly the integer product.
    rng = np.random.default_rng(3)
    a = rng.integers(-8, 9, (45, 71))
    b = rng.integers(-8, 9, (71, 53))
    got = gk.matmul(a.astype(np.float32), b.astype(np.float32), params=params)
    np.testing.assert_array_equal(got, (a @ b).astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_and_strided_operands(dtype):
    # The gradient products read transposes (X^T @ dY, dY @ W^T) and slices in place.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 29)).astype(dtype)
    dy = rng.standard_normal((40, 35)).astype(dtype)
    w = rng.standard_normal((35, 29)).astype(dtype)
    check(x.T, dy)                  # rows of A strided, columns contiguous down
    check(dy, w)                    # plain
    check(x, w.T)                   # B transposed: rsb = 1
    for params in (SMALL, SMALL_VEC, FOUR_BY_3):
        check(x.T, dy, params)
        check(x, w.T, params)
    big = rng.standard_normal((90, 80)).astype(dtype)
    check(big[::2, 1::3], big[3:30, ::2])   # both strided both ways
    check(np.asfortranarray(x), np.asfortranarray(w.T))


def test_out_is_overwritten_not_accumulated():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((9, 300)).astype(np.float32)   # K over one KC block
    b = rng.standard_normal((300, 20)).astype(np.float32)
    out = np.full((9, 20), 1e6, np.float32)
    got = check(a, b, out=out)
    assert got is out


def test_empty_dimensions():
    a = np.ones((3, 0), np.float32)
    b = np.ones((0, 4), np.float32)
    out = np.full((3, 4), np.nan, np.float32)
    np.testing.assert_array_equal(gk.matmul(a, b, out=out), np.zeros((3, 4), np.float32))
    assert gk.matmul(np.ones((0, 5), np.float32), np.ones((5, 2), np.float32)).shape == (0, 2)
    assert gk.matmul(np.ones((2, 5), np.float32), np.ones((5, 0), np.float32)).shape == (2, 0)


def test_rejects_mixed_types_and_shapes():
    with pytest.raises(TypeError):
        gk.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float64))
    with pytest.raises(ValueError):
        gk.matmul(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))


def test_micro_kernel_is_fma_at_the_host_width():
    vw = gk.vector_lanes(np.float32)
    assert vw in (8, 16)
    text = gk.ir_text(np.float32)
    assert f"@llvm.fma.v{vw}f32" in text and " fast " not in text  # no reassociation flags
    assert f"@llvm.fma.v{vw // 2}f64" in gk.ir_text(np.float64)


@pytest.mark.parametrize("dtype,lanes", [(np.float32, 8), (np.float32, 16),
                                         (np.float64, 4), (np.float64, 8)])
def test_the_default_blocks_build_at_every_vector_width(dtype, lanes):
    """NC is fitted to NR = 2 vectors: 4080 was a multiple of AVX2's 16 f32 columns but not
    of AVX-512's 32, and every f32 kernel on an AVX-512 host failed with "NC must be a
    multiple of NR"."""
    text = gk.ir_text(dtype, gk.DEFAULT, vw=lanes)
    nc = gk.fitted(gk.DEFAULT, lanes).nc
    assert nc % (gk.DEFAULT.nv * lanes) == 0 and 4096 - 64 <= nc <= gk.DEFAULT.nc
    assert f"add i64 %jc, {nc}" in text


# ---- the cut of K (Params.kround) and the blocks of a product ----------------------------

def test_k_blocks_cut_as_openblas_does():
    """KC while 2 KC are left; then the rest whole, or halved up to a multiple of KROUND."""
    p = gk.Params(kc=448, kround=16)
    assert gk.k_blocks(300, p) == [(0, 300)]
    assert gk.k_blocks(448, p) == [(0, 448)]
    assert gk.k_blocks(700, p) == [(0, 352), (352, 700)]
    assert gk.k_blocks(1024, p) == [(0, 448), (448, 736), (736, 1024)]
    assert gk.k_blocks(5000, p)[-3:] == [(3584, 4032), (4032, 4480), (4480, 4752),
                                         (4752, 5000)][-3:]
    assert gk.k_blocks(0, p) == []
    with pytest.raises(ValueError, match="multiple of KROUND"):
        gk.Params(kc=100, kround=16)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,kc,kround", [(7, 5, 1), (23, 5, 1), (23, 6, 3), (61, 8, 4),
                                         (40, 16, 8)])
def test_each_k_block_is_summed_alone_then_added_in_order(dtype, k, kc, kround):
    """The kernel's sums follow k_blocks: its result is, bit for bit, the products of
    the K blocks (each one block of the kernel) added to C one after the other."""
    rng = np.random.default_rng(k * kc)
    a = rng.standard_normal((29, k)).astype(dtype)
    b = rng.standard_normal((k, 37)).astype(dtype)
    params = replace(SMALL, kc=kc, kround=kround)
    one = replace(SMALL, kc=1 << 12)
    want = None
    for lo, hi in gk.k_blocks(k, params):
        part = gk.matmul(a[:, lo:hi], b[lo:hi], None, one)
        want = part if want is None else want + part
    got = gk.matmul(a, b, None, params)
    assert got.tobytes() == want.tobytes()
    # and not just any cut: summed in other blocks, the last bits move
    other = gk.matmul(a, b, None, replace(SMALL, kc=k + 3))
    assert other.tobytes() != got.tobytes() or len(gk.k_blocks(k, params)) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("trans", ["NN", "TN", "NT"])
def test_blocks_of_a_product_give_the_bits_of_one_call(dtype, axis, trans, monkeypatch):
    """product_blocks's blocks (rows: B packed once for all of them, in pieces; columns:
    A the same) give the bits of one matmul of the whole product, for odd sizes around the
    micro-tile and the cache blocks, transposed operands, and out a slice of columns; and
    blocks that pack their own (beyond PACKED_MAX_BYTES) alike."""
    rng = np.random.default_rng(3)
    m, k, n = 41, 23, 9 * gk.vector_lanes(dtype) + 5  # 5 panels, 3 column blocks (NC)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    if trans[0] == "T":
        a = np.asfortranarray(a)
    if trans[1] == "T":
        b = np.asfortranarray(b)
    params = replace(SMALL, kc=6, kround=3)
    want = gk.matmul(a, b, None, params)
    np.testing.assert_allclose(want, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    wide = np.full((m, n + 9), np.nan, dtype)
    out = wide[:, 4:4 + n]
    units = m if axis == 0 else n
    cuts = [(0, 7), (7, 20), (20, units)]
    assert units > 20
    for limit in (gk.PACKED_MAX_BYTES, 0):
        monkeypatch.setattr(gk, "PACKED_MAX_BYTES", limit)
        out[...] = np.nan
        work = gk.product_blocks(a, b, out, axis, params)
        assert (work.pack is not None) == (limit > 0)
        if work.pack is not None:  # B's (A's) panels in pieces, last first
            # (5 panels of NR = 2 VW columns; 6 for f64 on AVX2, whose NR is 8; A: 41
            # rows in MR-row panels, across two MC row blocks)
            panels = -(-n // (params.nv * gk.vector_lanes(dtype))) if axis == 0 else \
                -(-m // params.mr)
            assert work.panels == panels >= 5
            for lo, hi in [(4, panels), (1, 4), (0, 1)]:
                work.pack(None, lo, hi)
        for lo, hi in reversed(cuts):
            work.compute(None, lo, hi)
        assert out.tobytes() == want.tobytes(), limit
        assert np.isnan(wide[:, :4]).all() and np.isnan(wide[:, 4 + n:]).all()


@pytest.mark.parametrize("m, n, threads", [(1024, 1024, 2), (1024, 1024, 1), (520, 300, 2),
                                           (300, 260, 4), (5, 7, 2), (64, 65536, 3),
                                           (100001, 64, 2)])
def test_thread_blocks_give_each_thread_one_block_of_whole_tiles(m, n, threads):
    """The kernel's own blocks on `threads` threads (what the product's way runs): at
    most BLOCKS_PER_THREAD per thread (one block on one thread), covering the result's
    wider side exactly once, each of whole NR-column panels (columns) or MR-row tiles
    (rows) but the last."""
    axis, blocks = gk.thread_blocks(m, n, threads, np.float32)
    units, unit = (n, gk.DEFAULT.nv * gk.vector_lanes(np.float32)) if n >= m else \
        (m, gk.DEFAULT.mr)
    most = threads * gk.BLOCKS_PER_THREAD if threads > 1 else 1
    assert axis == (1 if n >= m else 0) and len(blocks) <= most
    assert blocks[0][0] == 0 and blocks[-1][1] == units
    assert all(hi == lo2 for (_, hi), (lo2, _) in zip(blocks, blocks[1:]))
    assert all((hi - lo) % unit == 0 for lo, hi in blocks[:-1])


def test_a_threads_packing_buffers_are_sized_for_each_vector_width():
    """Kernels for two vector widths in one process (a test under another target; a
    named CPU after the host's kernel) pack panels of other widths: B's buffer of 16-lane
    panels (NC fitted to 4064 f32 columns) is 16 columns short for 8-lane ones (4080),
    and handing it over let the kernel write past its end."""
    def needed(vw):
        fit = gk.fitted(gk.DEFAULT, vw)
        nr = fit.nv * vw
        return -(-fit.nc // nr) * nr * fit.kc * 4
    for vw in (16, 8, 16):
        a, b, _, _ = gk._packing_buffers(np.dtype(np.float32), gk.DEFAULT, vw)
        assert b.nbytes >= needed(vw), vw
