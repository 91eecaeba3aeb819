"""The zoo's case table (tools/gen_zoo_single.py): `Case`, the `case` decorator, input helpers,
and the control-flow, selection, indexing, convolution, FFT, linear-algebra, random and
jax.nn cases. The numeric cases are in numeric.py, the training steps in training.py; both
register into CASES when this package is imported (at its end)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import gen_corpus as gc  # sets XLA_FLAGS before jax starts its backend; helpers
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

# numpy dtype name -> HLO element type (gen_corpus's table plus the x64 and unsigned extras)
HLO_TYPES = {**gc._HLO_TYPES, "uint16": "u16", "uint64": "u64", "complex128": "c128"}
BF16 = ml_dtypes.bfloat16
normal, ints = gc.normal, gc.ints


@dataclass
class Case:
    name: str
    description: str
    fn: Callable
    make_inputs: Callable[[np.random.Generator], list[np.ndarray]]
    rtol: float = 1e-5
    atol: float = 1e-6
    out_tol: dict = field(default_factory=dict)
    x64: bool = False


CASES: dict[str, Case] = {}


def case(description: str, make_inputs, **kw):
    def register(fn):
        CASES[fn.__name__] = Case(fn.__name__, description, fn, make_inputs, **kw)
        return fn
    return register


def with_edges(a: np.ndarray, edges=(np.nan, np.inf, -np.inf, -0.0, 0.0)) -> np.ndarray:
    """`a` with its first elements replaced by edge values (NaN, +-inf, -0, 0)."""
    flat = a.reshape(-1).copy()
    flat[:len(edges)] = np.asarray(edges, a.dtype)
    return flat.reshape(a.shape)


def uniform(rng, shape, lo, hi, dtype=np.float32):
    return rng.uniform(lo, hi, shape).astype(dtype)


# ---- control flow ---------------------------------------------------------------------------

@case("lax.scan over 6 steps: a tuple carry (hidden state, running max, int counter) and "
      "two stacked outputs; a reverse scan; scan with xs=None and length=4.",
      lambda rng: [normal(rng, (6, 3)), normal(rng, (3, 3)) * 0.5])
def scan_carry_stacked(xs, w):
    def step(carry, x):
        h, m, n = carry
        h = jnp.tanh(h @ w + x)
        m = jnp.maximum(m, h)
        return (h, m, n + 1), (h.sum(), h * 2.0)

    (h, m, n), (s, hs) = lax.scan(step, (jnp.zeros(3), jnp.full(3, -jnp.inf), 0), xs)
    _, rev = lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(3), xs, reverse=True)
    c4, ys = lax.scan(lambda c, _: (c * 1.5 + 1.0, c), jnp.float32(1.0), None, length=4)
    return h, m, n, s, hs, rev, c4, ys


@case("fori_loop with static bounds (unrolled-able) and with a data-dependent upper bound; "
      "the body indexes the array by the loop counter (dynamic-slice/update).",
      lambda rng: [normal(rng, (5, 4)), np.int32(3)])
def fori_loop_dynamic(x, n):
    def body(i, acc):
        row = lax.dynamic_index_in_dim(x, i, keepdims=False)
        return acc.at[i].set(row.sum() * i)

    a = lax.fori_loop(0, 5, body, jnp.zeros(5))
    b = lax.fori_loop(0, n, lambda i, c: c * 2 + x[i], jnp.zeros(4))
    return a, b


@case("while_loop with a data-dependent exit: Newton iterations for sqrt until converged "
      "(f32 tolerance), a Collatz step count on int32, and a loop carrying a bool.",
      lambda rng: [uniform(rng, (4,), 0.5, 50.0), np.array([6, 7, 27, 1], np.int32)])
def while_data_dependent(a, k):
    def newton(a):
        def cond(s):
            x, it = s
            return (jnp.max(jnp.abs(x * x - a)) > 1e-4 * jnp.max(a)) & (it < 50)
        return lax.while_loop(cond, lambda s: ((s[0] + a / s[0]) / 2, s[1] + 1), (a, 0))

    def collatz(n):
        def body(s):
            n, steps = s
            return jnp.where(n % 2 == 0, n // 2, 3 * n + 1), steps + 1
        return lax.while_loop(lambda s: s[0] != 1, body, (n, 0))[1]

    root, iters = newton(a)
    steps = jax.vmap(collatz)(k)
    flag = lax.while_loop(lambda s: ~s[1], lambda s: (s[0] + 1, s[0] >= 3), (0, False))
    return root, iters, steps, flag[0]


@case("lax.cond on a data predicate with tuple operands, a 4-way lax.switch with an "
      "out-of-range index (clamped), and a vmapped cond (becomes select).",
      lambda rng: [normal(rng, (3, 4)), np.int32(7), normal(rng, (5,))])
def cond_switch(x, k, v):
    a, b = lax.cond(x.sum() > 0, lambda t: (t[0] * 2, t[1] - 1), lambda t: (t[0], t[1] + 1),
                    (x, k))
    branches = [lambda y: y + 1, lambda y: y * y, lambda y: -y, lambda y: jnp.sin(y)]
    s = lax.switch(k, branches, x)
    s2 = lax.switch(k - 9, branches, x)  # negative index clamps to branch 0
    vm = jax.vmap(lambda e: lax.cond(e > 0, jnp.exp, jnp.cos, e))(v)
    return a, b, s, s2, vm


@case("lax.map over rows (a while loop) and an RNN forward plus its gradient through scan "
      "(reverse-mode scan with stacked residuals).",
      lambda rng: [normal(rng, (5, 3)), normal(rng, (3, 3)) * 0.4],
      rtol=1e-4, atol=1e-5)
def scan_grad_rnn(xs, w):
    def loss(w):
        def step(h, x):
            h = jnp.tanh(h @ w + x)
            return h, h
        _, hs = lax.scan(step, jnp.zeros(3), xs)
        return jnp.sum(hs ** 2)

    mapped = lax.map(lambda r: jnp.sort(r)[::-1] * jnp.arange(3.0), xs)
    return mapped, loss(w), jax.grad(loss)(w)


# ---- cumulative ops, sorting, selection -----------------------------------------------------

@case("cumsum/cumprod/cummax/cummin/cumlogsumexp along both axes, reverse, on f32 and int32; "
      "jnp.cumsum of bool (promotes).",
      lambda rng: [normal(rng, (4, 6)), ints(rng, (4, 6), -5, 6)], rtol=1e-5, atol=1e-5)
def cumulative_ops(x, i):
    return (jnp.cumsum(x, axis=1), lax.cumprod(x * 0.5 + 1, axis=0), lax.cummax(x, axis=1),
            lax.cummin(x, axis=0, reverse=True), lax.cumlogsumexp(x, axis=1),
            jnp.cumsum(i, axis=0), lax.cummax(i, axis=1, reverse=True),
            jnp.cumsum(i > 0, axis=1))


@case("multi-operand sorts: lax.sort of 3 operands with num_keys=2, stable argsort "
      "descending with ties, sort of bf16/int8/uint32 keys with NaN and -0 in f32 keys, "
      "jnp.sort along axis 0, lexsort.",
      lambda rng: [with_edges(normal(rng, (12,)), (np.nan, -0.0, 0.0, np.inf, -np.inf)),
                   ints(rng, (12,), 0, 3), normal(rng, (4, 5)).astype(BF16),
                   ints(rng, (10,), -128, 127, np.int8),
                   rng.integers(0, 2**32, (8,), dtype=np.uint64).astype(np.uint32)],
      rtol=0.0, atol=0.0)
def sort_multi_operand(f, k, b, i8, u):
    s = lax.sort((k, f, jnp.arange(12)), num_keys=2)
    desc = jnp.argsort(-k, stable=True)
    return (*s, desc, jnp.sort(b, axis=0), jnp.sort(i8), jnp.argsort(u),
            jnp.lexsort((f, k)), jnp.sort(f))


@case("lax.top_k of f32 rows (with ties) and int32, k=3; jnp.argpartition-free selection of "
      "the 2 smallest by top_k of the negation.",
      lambda rng: [np.round(normal(rng, (3, 7)), 1), ints(rng, (9,), -20, 20)],
      rtol=0.0, atol=0.0)
def top_k_ops(x, i):
    v, idx = lax.top_k(x, 3)
    vi, ii = lax.top_k(i, 4)
    small, sidx = lax.top_k(-x, 2)
    return v, idx, vi, ii, -small, sidx


@case("lax.top_k with NaN (largest in XLA's total order), ties and -inf in f32 rows of 33, "
      "bf16 rows, and k=10 of 50 int32 (the portable module keeps the topk opcode).",
      lambda rng: [with_edges(normal(rng, (4, 33)), (np.nan, 1.0, 1.0, -np.inf, -0.0, 0.0)),
                   normal(rng, (2, 10)).astype(BF16), ints(rng, (50,), -100, 100)],
      rtol=0.0, atol=0.0)
def top_k_nan_total_order(x, b, i):
    v, j = lax.top_k(x, 5)
    vb, jb = lax.top_k(b, 3)
    vi, ji = lax.top_k(i, 10)
    return v, j, vb, jb, vi, ji


@case("argmax/argmin (variadic reduce of value and index) along each axis, with NaN (wins), "
      "ties (first index wins), int32 and bool; jnp.max with initial and where.",
      lambda rng: [with_edges(np.round(normal(rng, (4, 6)), 0), (1.0, np.nan)),
                   ints(rng, (5, 3), -3, 3), rng.random((3, 4)) > 0.5],
      rtol=0.0, atol=0.0)
def argmax_argmin(x, i, b):
    return (jnp.argmax(x, axis=1), jnp.argmin(x, axis=0), jnp.argmax(i, axis=0),
            jnp.argmin(i, axis=1), jnp.argmax(b, axis=1),
            jnp.max(i, axis=1, initial=0, where=i != 2), jnp.nanargmax(x, axis=1))


# ---- indexing: gather, scatter, dynamic slices ----------------------------------------------

@case("jnp.take with modes clip/fill/wrap (out-of-range and negative indices), "
      "take_along_axis, x[idx, :, idx2] advanced indexing, .at[].get(mode='fill').",
      lambda rng: [normal(rng, (5, 4)), np.array([0, 4, -1, 7, -8, 2], np.int32),
                   ints(rng, (5, 2), 0, 4), normal(rng, (3, 4, 5))],
      rtol=0.0, atol=0.0)
def take_modes(x, idx, along, t):
    return (jnp.take(x, idx, axis=0, mode="clip"),
            jnp.take(x, idx, axis=1, mode="fill", fill_value=-1.0),
            jnp.take(x, idx, axis=0, mode="wrap"),
            jnp.take_along_axis(x, along, axis=1),
            t[jnp.array([2, 0]), :, jnp.array([4, 1])],
            x.at[idx].get(mode="fill", fill_value=9.0),
            x[1:4, idx[:2] % 4])


@case("lax.gather with explicit dimension numbers: batched windows (slice_sizes >1), "
      "operand_batching_dims from vmap, and GatherScatterMode CLIP/FILL_OR_DROP.",
      lambda rng: [normal(rng, (6, 5)), np.array([[0, 1], [4, 3], [5, 4], [-1, 0]], np.int32),
                   normal(rng, (3, 6)), np.array([5, 0, 2], np.int32)],
      rtol=0.0, atol=0.0)
def gather_dimension_numbers(x, starts, b, bi):
    dn = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(),
                                    start_index_map=(0, 1))
    clip = lax.gather(x, starts, dn, (2, 2), mode=lax.GatherScatterMode.CLIP)
    fill = lax.gather(x, starts, dn, (2, 2), mode=lax.GatherScatterMode.FILL_OR_DROP,
                      fill_value=0.0)
    batched = jax.vmap(lambda row, j: lax.dynamic_slice(row, (j,), (2,)))(b, bi)
    return clip, fill, batched


@case(".at[].add/.mul/.min/.max/.set with unique and duplicate indices, mode='drop' with "
      "out-of-range indices, 2-D scatter of rows, int32 scatter-add, segment_sum/segment_max.",
      lambda rng: [normal(rng, (6,)), np.array([1, 3, 1, 5, 1], np.int32), normal(rng, (5,)),
                   normal(rng, (4, 3)), ints(rng, (7,), -9, 9),
                   np.array([0, 0, 2, 2, 2, 3, 1], np.int32)],
      rtol=1e-6, atol=1e-6)
def scatter_at_ops(x, idx, u, m, iv, seg):
    uniq = jnp.array([0, 2, 4], jnp.int32)
    return (x.at[uniq].set(u[:3]), x.at[idx].add(u), x.at[idx].mul(u), x.at[idx].min(u),
            x.at[idx].max(u), x.at[jnp.array([1, 9, -1, 6])].set(7.0, mode="drop"),
            m.at[jnp.array([2, 0, 2])].add(jnp.ones((3, 3))), m.at[:, 1].set(0.0),
            iv.at[idx].add(10), jax.ops.segment_sum(iv, seg, num_segments=5),
            jax.ops.segment_max(u.repeat(2)[:7], seg, num_segments=4))


@case("dynamic_slice with in-range, negative and too-large starts (XLA clamps), "
      "dynamic_update_slice likewise, on 3-D f32 and 1-D int8.",
      lambda rng: [normal(rng, (4, 5, 3)), np.array([2, -1, 9], np.int32),
                   normal(rng, (2, 3, 2)), ints(rng, (8,), -100, 100, np.int8)],
      rtol=0.0, atol=0.0)
def dynamic_slice_clamp(x, s, u, b):
    return (lax.dynamic_slice(x, (s[0], s[1], s[2]), (2, 3, 2)),
            lax.dynamic_slice(x, (s[2], s[0], s[1]), (3, 2, 3)),
            lax.dynamic_update_slice(x, u, (s[1], s[2], s[0])),
            lax.dynamic_update_slice(x, u, (s[0], s[0], s[0])),
            lax.dynamic_slice(b, (s[0] + 3,), (4,)),
            lax.dynamic_update_slice(b, b[:3] * 2, (s[2],)))


# ---- dot, convolution, pooling --------------------------------------------------------------

@case("einsum with batch dims ('bij,bjk->bik', attention 'bhqd,bhkd->bhqk'), diag trace "
      "'ii', row dots 'ij,ij->i', outer 'i,j->ij', contraction over two dims, int32 matmul.",
      lambda rng: [normal(rng, (2, 3, 4)), normal(rng, (2, 4, 5)), normal(rng, (2, 2, 3, 4)),
                   normal(rng, (2, 2, 5, 4)), ints(rng, (3, 4), -5, 5),
                   ints(rng, (4, 2), -5, 5)],
      rtol=1e-5, atol=1e-5)
def einsum_batch(a, b, q, k, i, j):
    return (jnp.einsum("bij,bjk->bik", a, b), jnp.einsum("bhqd,bhkd->bhqk", q, k),
            jnp.einsum("ii->", a[0, :, :3]), jnp.einsum("ij,ij->i", a[0], a[1]),
            jnp.einsum("i,j->ij", a[0, 0], b[0, 0]), jnp.einsum("bij,bij->", a, a),
            jnp.einsum("bhqd,bhkd->hqk", q, k), i @ j, jnp.einsum("ij,jk->ki", i, j))


@case("conv_general_dilated NCHW/OIHW with stride 2, rhs dilation 2, explicit asymmetric "
      "padding, lhs dilation (transposed conv), and conv_transpose.",
      lambda rng: [normal(rng, (2, 3, 9, 8)), normal(rng, (4, 3, 3, 3)),
                   normal(rng, (1, 2, 4, 4)), normal(rng, (3, 3, 2, 3))],
      rtol=1e-4, atol=1e-4)
def conv_strided_dilated(x, w, y, wt):
    a = lax.conv_general_dilated(x, w, (2, 2), ((1, 0), (2, 1)))
    b = lax.conv_general_dilated(x, w, (1, 1), "SAME", rhs_dilation=(2, 2))
    c = lax.conv_general_dilated(x, w, (1, 2), ((1, 1), (0, 2)), lhs_dilation=(2, 1))
    t = lax.conv_transpose(y, wt, (2, 2), "SAME", dimension_numbers=("NCHW", "HWIO", "NCHW"))
    return a, b, c, t


@case("NHWC/HWIO convolutions: feature_group_count=2, depthwise (groups = channels), "
      "1-D NWC conv, 3-D NDHWC conv, batch_group_count=2 (a weight gradient).",
      lambda rng: [normal(rng, (2, 6, 6, 4)), normal(rng, (3, 3, 2, 6)),
                   normal(rng, (3, 3, 1, 4)), normal(rng, (2, 7, 3)), normal(rng, (3, 3, 5)),
                   normal(rng, (1, 4, 4, 4, 2)), normal(rng, (2, 2, 2, 2, 3))],
      rtol=1e-4, atol=1e-4)
def conv_nhwc_groups(x, wg, wd, s, ws, v, wv):
    dn = ("NHWC", "HWIO", "NHWC")
    g = lax.conv_general_dilated(x, wg, (1, 1), "SAME", dimension_numbers=dn,
                                 feature_group_count=2)
    d = lax.conv_general_dilated(x, wd, (2, 2), "VALID", dimension_numbers=dn,
                                 feature_group_count=4)
    one = lax.conv_general_dilated(s, ws, (1,), ((2, 0),), dimension_numbers=("NWC", "WIO",
                                                                                "NWC"))
    vol = lax.conv_general_dilated(v, wv, (1, 1, 1), "SAME",
                                   dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
    wgrad = jax.grad(lambda w: jnp.sum(lax.conv_general_dilated(
        x, w, (1, 1), "VALID", dimension_numbers=dn) ** 2))(wg[:, :, :, :4].reshape(3, 3, 2, 4)
                                                           .repeat(2, axis=2))
    return g, d, one, vol, wgrad


@case("pooling by reduce_window: max pool 3x3 stride 2 SAME, avg pool with padding (and the "
      "count of valid cells), min pool with window dilation, and a sum pool with base "
      "dilation; the gradient of max pool (select-and-scatter).",
      lambda rng: [normal(rng, (1, 7, 7, 2)), normal(rng, (6, 5))], rtol=1e-5, atol=1e-5)
def pooling(x, y):
    mx = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    pads = ((0, 0), (1, 1), (1, 1), (0, 0))
    total = lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), pads)
    count = lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), pads)
    mn = lax.reduce_window(y, jnp.inf, lax.min, (2, 2), (1, 1), "VALID",
                           window_dilation=(2, 1))
    based = lax.reduce_window(y, 0.0, lax.add, (2, 2), (1, 1), "VALID", base_dilation=(2, 1))
    grad = jax.grad(lambda v: jnp.sum(lax.reduce_window(v, -jnp.inf, lax.max, (1, 2, 2, 1),
                                                        (1, 2, 2, 1), "VALID") ** 2))(x)
    return mx, total / count, mn, based, grad


# ---- FFT, linear algebra --------------------------------------------------------------------

@case("jnp.fft: fft/ifft (c64), rfft/irfft (odd and even n), fft2 over the last axes, "
      "rfftn/irfftn over 3 axes, fftshift.",
      lambda rng: [normal(rng, (3, 8)), normal(rng, (3, 8)), normal(rng, (7,)),
                   normal(rng, (2, 4, 6))],
      rtol=1e-4, atol=1e-4)
def fft_variants(re, im, odd, cube):
    z = lax.complex(re, im)
    r = jnp.fft.rfftn(cube)
    return (jnp.fft.fft(z), jnp.fft.ifft(z, axis=0), jnp.fft.rfft(odd), jnp.fft.irfft(
        jnp.fft.rfft(odd), n=7), jnp.fft.irfft(z[0, :5]), jnp.fft.fft2(z), r,
        jnp.fft.irfftn(r, s=cube.shape), jnp.fft.fftshift(jnp.fft.fft(re[0])))


@case("lax.linalg.triangular_solve (left/right, lower/upper, transpose_a, unit diagonal), "
      "lowered by jax to the HLO triangular-solve op.",
      lambda rng: [normal(rng, (4, 4)) + 4 * np.eye(4, dtype=np.float32),
                   normal(rng, (4, 3)), normal(rng, (2, 4))],
      rtol=1e-4, atol=1e-4)
def triangular_solve(a, b, c):
    tl = lax.linalg.triangular_solve
    return (tl(a, b, left_side=True, lower=True),
            tl(a, b, left_side=True, lower=False, transpose_a=True),
            tl(a, c, left_side=False, lower=True, unit_diagonal=True),
            tl(a, c, left_side=False, lower=False, conjugate_a=False))


@case("cholesky, qr, eigh and solve: on CPU jax lowers these to LAPACK typed-FFI "
      "custom-calls (lapack_spotrf/sgeqrf/sorgqr/ssyevd/sgetrf/strsm_ffi).",
      lambda rng: [normal(rng, (4, 4)), normal(rng, (4, 2))], rtol=1e-3, atol=1e-3)
def linalg_lapack(a, b):
    spd = a @ a.T + 4 * jnp.eye(4)
    _q, r = jnp.linalg.qr(a)  # q is dead: XLA drops orgqr from the optimized module
    w, _ = jnp.linalg.eigh(spd)
    return jnp.linalg.cholesky(spd), jnp.abs(r), w, jnp.linalg.solve(spd, b)


@case("batched and complex LAPACK custom-calls: svd (full, reduced, values only: gesdd), "
      "batched cholesky of a non-positive-definite matrix (info > 0 -> NaN), "
      "jax.scipy.linalg.lu (getrf pivots -> permutation), complex qr (ungqr) and eigh "
      "(heevd).",
      lambda rng: [normal(rng, (2, 4, 3)), normal(rng, (2, 3, 3)), normal(rng, (3, 3)),
                   normal(rng, (3, 3))],
      rtol=1e-3, atol=1e-4)
def linalg_batched_complex(a, b, zr, zi):
    spd = b @ jnp.swapaxes(b, 1, 2) + 3 * jnp.eye(3)
    spd = spd.at[1].set(-jnp.eye(3))  # not positive definite: NaNs
    z = lax.complex(zr, zi)
    herm = z @ jnp.conj(z.T) + jnp.eye(3)
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    perm, lo, up = jax.scipy.linalg.lu(b[0])
    q, r = jnp.linalg.qr(z)
    w, _ = jnp.linalg.eigh(herm)
    return (s, jnp.abs(u @ (s[..., None] * vt)), jnp.linalg.svd(a, compute_uv=False),
            jnp.linalg.svd(b[0])[1], jnp.linalg.cholesky(spd), perm, lo, up, jnp.abs(r),
            jnp.abs(q @ r), w)


@case("jnp.linalg.eig / eigvals (LAPACK geev: lapack_sgeev_ffi, lapack_cgeev_ffi): a real "
      "matrix with a complex-conjugate pair (packed eigenvectors unpacked), batched real "
      "eigvals, complex eig with left vectors off, and a matrix with an inf (info -4: NaNs).",
      lambda rng: [np.array([[0.0, -2.0, 1.0], [2.0, 0.0, 0.5], [0.0, 0.0, 3.0]], np.float32),
                   normal(rng, (2, 4, 4)), normal(rng, (3, 3)), normal(rng, (3, 3))],
      rtol=1e-4, atol=1e-4)
def linalg_eig(rot, b, zr, zi):
    w, v = jnp.linalg.eig(rot)
    z = lax.complex(zr, zi)
    wz, vz = jnp.linalg.eig(z)
    bad = jnp.linalg.eigvals(b[0].at[1, 2].set(jnp.inf))
    return w, v, jnp.linalg.eigvals(b), wz, vz, bad


@case("the rest of jax's CPU LAPACK custom-calls: jax.scipy.linalg.schur (gees, real and "
      "complex, vectors off), hessenberg with Q (gehrd + orgqr), lax.linalg.tridiagonal "
      "(sytrd lower, hetrd upper, batched), tridiagonal_solve (gtsv, batched), svd with "
      "algorithm=QR (gesvd: full, reduced), qr with pivoting (geqp3) and "
      "lax.linalg.ormqr (ormqr/unmqr, both sides, transposed or not). Factors are unique only "
      "up to signs: the same LAPACK routine on the same input gives the same signs.",
      lambda rng: [normal(rng, (4, 4)), normal(rng, (2, 3, 3)), normal(rng, (3, 3)),
                   normal(rng, (2, 5)), normal(rng, (2, 5, 2)), normal(rng, (4, 3))],
      rtol=1e-3, atol=1e-4)
def linalg_lapack_more(a, b, zi, tri, rhs, m):
    from jax._src.lax.linalg import geqrf
    z = lax.complex(b[0], zi)
    t, q = jax.scipy.linalg.schur(a)
    tz, qz = jax.scipy.linalg.schur(z, output="complex")
    h, hq = jax.scipy.linalg.hessenberg(a, calc_q=True)
    sym = b + jnp.swapaxes(b, 1, 2)
    herm = z + jnp.conj(z.T)
    x = lax.linalg.tridiagonal_solve(tri.at[:, 0].set(0), tri + 4, tri.at[:, -1].set(0), rhs)
    u, s, vt = lax.linalg.svd(m, algorithm=lax.linalg.SvdAlgorithm.QR)
    qp, rp, piv = jax.scipy.linalg.qr(m, pivoting=True)
    hh, tau = geqrf(m)
    ormqr = lax.linalg.ormqr
    return (t, q, tz, qz, lax.linalg.schur(b, compute_schur_vectors=False)[0], h, hq,
            *lax.linalg.tridiagonal(sym, lower=True), *lax.linalg.tridiagonal(herm, lower=False),
            x, u, s, vt, lax.linalg.svd(m.T, full_matrices=False,
                                        algorithm=lax.linalg.SvdAlgorithm.QR)[0],
            qp, rp, piv, ormqr(hh, tau, m, left=True, transpose=True),
            ormqr(hh, tau, m.T, left=False, transpose=False))


# ---- random ---------------------------------------------------------------------------------

@case("jax.random with threefry keys from input key data: split, fold_in "
      "and uniform (threefry2x32 as HLO integer ops).",
      lambda rng: [np.array([0, 42], np.uint32)], rtol=1e-6, atol=1e-6)
def random_threefry(kd):
    key = jax.random.wrap_key_data(kd, impl="threefry2x32")
    k1, k2, k3 = jax.random.split(key, 3)
    return (jax.random.uniform(k1, (3, 4)), jax.random.key_data(jax.random.fold_in(k2, 7)),
            jax.random.key_data(jax.random.split(k3, 2)))


@case("jax.random with rbg and unsafe_rbg keys: the bits come from the HLO "
      "rng-bit-generator op (default algorithm = philox on CPU) and threefry for split.",
      lambda rng: [np.array([1, 2, 3, 4], np.uint32), np.array([9, 8, 7, 6], np.uint32)],
      rtol=1e-6, atol=1e-6)
def random_rbg(kd, ku):
    k = jax.random.wrap_key_data(kd, impl="rbg")
    u = jax.random.wrap_key_data(ku, impl="unsafe_rbg")
    k1, k2 = jax.random.split(k)
    return (jax.random.uniform(k1, (4, 3)), jax.random.bits(u, (5,), jnp.uint32),
            jax.random.key_data(k2))


@case("lax.rng_bit_generator directly: THREE_FRY and PHILOX with u32/u64 keys, u8/u32 "
      "outputs, and the default algorithm.",
      lambda rng: [np.array([5, 6, 7, 8], np.uint32), np.array([1, 2, 3, 4], np.uint32)],
      rtol=0.0, atol=0.0)
def rng_bit_generator_direct(k, p):
    tf = lax.rng_bit_generator(k, (3, 4), algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)
    ph = lax.rng_bit_generator(p, (7,), dtype=jnp.uint8,
                               algorithm=lax.RandomAlgorithm.RNG_PHILOX)
    df = lax.rng_bit_generator(k, (2, 2), dtype=jnp.uint32)
    return (*tf, *ph, *df)


# ---- jax.nn ---------------------------------------------------------------------------------

@case("jax.nn: softmax/log_softmax (with -inf), gelu exact and tanh, silu, softplus, "
      "sigmoid, relu6, elu, logsumexp with where, layer norm, one_hot, standardize.",
      lambda rng: [with_edges(normal(rng, (3, 6)) * 3, (-np.inf,)), normal(rng, (2, 8)) * 3,
                   np.array([0, 3, 5, -1], np.int32)],
      rtol=1e-5, atol=1e-5)
def nn_functions(x, y, labels):
    mu = y.mean(-1, keepdims=True)
    ln = (y - mu) * lax.rsqrt(y.var(-1, keepdims=True) + 1e-5)
    return (jax.nn.softmax(x, axis=-1), jax.nn.log_softmax(x, axis=0),
            jax.nn.gelu(y, approximate=False), jax.nn.gelu(y, approximate=True),
            jax.nn.silu(y), jax.nn.softplus(y), jax.nn.sigmoid(y), jax.nn.relu6(y),
            jax.nn.elu(y), jax.nn.logsumexp(x, axis=1, where=x > -1),
            ln, jax.nn.one_hot(labels, 6), jax.nn.standardize(y, axis=0))


@case("a causal softmax-attention block in bf16 with f32 accumulation "
      "(preferred_element_type), iota masks and a residual.",
      lambda rng: [normal(rng, (6, 8)).astype(BF16), normal(rng, (8, 8)).astype(BF16) * 0.3],
      rtol=2e-2, atol=2e-2)
def attention_bf16(x, w):
    q = jnp.dot(x, w, preferred_element_type=jnp.float32)
    s = (q @ q.T) / jnp.sqrt(8.0)
    mask = jnp.arange(6)[:, None] >= jnp.arange(6)[None, :]
    p = jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1)
    return (p @ q).astype(jnp.bfloat16) + x, p


@case("an MLP training step (value_and_grad, Adam-like update with sqrt and integer step "
      "powers) on f32.",
      lambda rng: [normal(rng, (8, 4)), normal(rng, (8, 2)), normal(rng, (4, 6)) * 0.5,
                   normal(rng, (6, 2)) * 0.5],
      rtol=1e-4, atol=1e-5)
def mlp_adam_step(x, t, w1, w2):
    def loss(p):
        h = jax.nn.gelu(x @ p[0])
        return jnp.mean(optax_like_huber(h @ p[1] - t))

    val, g = jax.value_and_grad(loss)((w1, w2))
    step = 3
    out = []
    for p, gi in zip((w1, w2), g):
        m = 0.1 * gi
        v = 0.001 * gi ** 2
        mhat = m / (1 - 0.9 ** step)
        vhat = v / (1 - 0.999 ** step)
        out.append(p - 1e-2 * mhat / (jnp.sqrt(vhat) + 1e-8))
    return val, *out


def optax_like_huber(d, delta=1.0):
    a = jnp.abs(d)
    return jnp.where(a < delta, 0.5 * d ** 2, delta * (a - 0.5 * delta))


# The other tables register their cases into CASES (they import the helpers above).
from zoo_cases import numeric as _numeric  # noqa: F401
from zoo_cases import training as _training  # noqa: F401
