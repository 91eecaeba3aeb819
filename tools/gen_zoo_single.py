"""Generate the single-device "zoo": many small real JAX programs, in the single/ corpus format.

    python tools/gen_zoo_single.py [CASE ...] [--list]

Each case is `jax.jit(f)` of a small program on one CPU device, written to
tests/data/corpus/single_zoo/<case>/ in the format of tests/data/corpus/single/:

- module.hlo: `jax.jit(f).lower(*args).as_text(dialect="hlo")`, the portable unoptimized HLO;
- module.optimized.hlo: `lowered.compile().as_text()`, what XLA:CPU compiled and ran;
- inputs.npz / expected.npz: `arg{i}` / `out{i}` without a device axis (bf16 as uint16 bits);
- case.json: name, description, ops (of module.hlo), optimized_ops, dtypes, rtol, atol,
  out_tol, num_inputs, num_outputs, x64, arrays, custom_call_targets (of either module).

The zoo covers what the 20 hand-picked single/ cases do not: control flow from scan, fori and
while loops, cond/switch, cumulative ops, multi-operand sorts, top_k, argmax, gathers and
scatters in every mode, convolutions, pooling, FFTs, linear algebra, both PRNGs, jax.nn,
integer corner cases, complex, f16/bf16/f64/int8/uint32/bool, non-default layouts, and edge
values (NaN, inf, -0) in the inputs. A case whose module needs a LAPACK custom-call records
its target in case.json; the tests then expect xladist to refuse it by that name.

jax is needed only here: the data is committed. Inputs are drawn from a per-case seed (crc32
of the case name), so re-running reproduces the same files for the same JAX version.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_corpus as gc  # noqa: E402 -- sets XLA_FLAGS before jax starts; shared helpers

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

OUT_DIR = gc.ROOT / "tests" / "data" / "corpus" / "single_zoo"
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
    q, r = jnp.linalg.qr(a)
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


# ---- integers -------------------------------------------------------------------------------

@case("integer bit ops: shifts by amounts past the width and negative (s32, u32, s8, u8), "
      "population_count, clz, bitwise not/and/or/xor, jnp.left_shift of uint8.",
      lambda rng: [ints(rng, (8,), -1000, 1000), np.array([0, 1, 5, 31, 32, 33, -1, 100],
                                                          np.int32),
                   rng.integers(0, 2**32, (8,), dtype=np.uint64).astype(np.uint32),
                   ints(rng, (8,), -128, 128, np.int8), ints(rng, (8,), 0, 256, np.uint8)],
      rtol=0.0, atol=0.0)
def int_bit_ops(a, s, u, b, c):
    su = s.astype(jnp.uint32)
    return (lax.shift_left(a, s), lax.shift_right_arithmetic(a, s),
            lax.shift_right_logical(a, s), lax.shift_left(u, su),
            lax.shift_right_logical(u, su), lax.shift_right_arithmetic(b, s.astype(jnp.int8)),
            lax.shift_left(c, (s % 10).astype(jnp.uint8)), lax.population_count(a),
            lax.population_count(u), lax.clz(a), lax.clz(u), lax.clz(b), ~a, a & s ^ (a | 7),
            ~c, lax.population_count(b))


@case("integer division and remainder with negatives: lax.div/lax.rem (truncating), "
      "jnp.floor_divide/jnp.mod (flooring), divide by zero and INT_MIN / -1 on s32, s8, s16, "
      "u32.",
      lambda rng: [np.array([7, -7, 7, -7, 0, -2**31, 5, -2**31], np.int32),
                   np.array([2, 2, -2, -2, 3, -1, 0, 1], np.int32),
                   ints(rng, (6,), -128, 128, np.int8), np.array([3, -3, 1, -1, 7, -128],
                                                                 np.int8),
                   ints(rng, (6,), -30000, 30000, np.int16),
                   np.array([7, 1, 4294967295, 0, 10, 3], np.uint32)],
      rtol=0.0, atol=0.0)
def int_div_rem_negative(a, b, c, d, e, u):
    safe = jnp.where(b == 0, 1, b)
    return (lax.div(a, b), lax.rem(a, b), jnp.floor_divide(a, safe), jnp.mod(a, safe),
            lax.div(c, d), lax.rem(c, d), jnp.floor_divide(e, 7), jnp.mod(e, -7),
            lax.div(u, jnp.uint32(3)), lax.rem(u, jnp.uint32(4)), lax.div(u, u),
            jnp.remainder(c, d), a // jnp.int32(-3))


@case("saturating and wrapping converts: f32 (NaN, inf, out of range) to s8/u8/s32/u32/s16, "
      "s32 to s8/u8 (wraps), f32 to f16 overflow, f32 to bf16 rounding, u32 to f32, "
      "bool to f32, clip-then-cast as jnp does.",
      lambda rng: [np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 300.7, -300.7, 2.5, -2.5,
                             -0.0, 127.5, 255.9, 65504.0, 70000.0, -1.5, 0.49999997],
                            np.float32),
                   np.array([300, -300, 127, 128, -129, 255, 256, 2**31 - 1], np.int32),
                   np.array([0, 1, 2**31, 2**32 - 1, 16777217, 3], np.uint32)],
      rtol=0.0, atol=0.0)
def saturating_converts(f, i, u):
    return (f.astype(jnp.int8), f.astype(jnp.uint8), f.astype(jnp.int32),
            f.astype(jnp.uint32), f.astype(jnp.int16), i.astype(jnp.int8), i.astype(jnp.uint8),
            f.astype(jnp.float16), f.astype(jnp.bfloat16), u.astype(jnp.float32),
            (f > 0).astype(jnp.float32), u.astype(jnp.int32), i.astype(jnp.uint32),
            jnp.clip(f, -128, 127).astype(jnp.int8), lax.convert_element_type(f, jnp.bool_))


@case("int8/uint8/int16/uint32/bool arithmetic: wrapping add/mul/neg/abs (INT_MIN), "
      "min/max, sign, integer_pow, sum/prod/max reductions, any/all, count_nonzero, bool "
      "xor/not.",
      lambda rng: [ints(rng, (4, 6), -128, 128, np.int8), ints(rng, (4, 6), 0, 256, np.uint8),
                   rng.integers(0, 2**32, (4, 6), dtype=np.uint64).astype(np.uint32),
                   rng.random((4, 6)) > 0.4, ints(rng, (6,), -2**15, 2**15, np.int16)],
      rtol=0.0, atol=0.0)
def small_int_bool(a, b, u, m, s):
    return (a + a, a * jnp.int8(3), -a, jnp.abs(a), jnp.sign(a), b * b, b - jnp.uint8(200),
            u * u, u + jnp.uint32(4000000000), jnp.maximum(u, u[::-1]), lax.integer_pow(a, 3),
            jnp.sum(a, axis=1, dtype=jnp.int8), jnp.prod(b, axis=0, dtype=jnp.uint8),
            jnp.max(u, axis=1), jnp.any(m, axis=0), jnp.all(m, axis=1), jnp.count_nonzero(m),
            m ^ m[::-1], ~m, jnp.abs(s), s * s, jnp.sum(u, axis=0))


# ---- floating point: precision, complex, edge values ----------------------------------------

@case("complex64: mul/div/abs/exp/log/sqrt/conj/real/imag/angle/expm1, complex dot and "
      "einsum, reductions, comparisons of real parts, complex with inf.",
      lambda rng: [normal(rng, (2, 4)), normal(rng, (2, 4)), normal(rng, (4, 3)),
                   normal(rng, (4, 3))],
      rtol=1e-5, atol=1e-5)
def complex_arith(ar, ai, br, bi):
    a = lax.complex(ar, ai)
    b = lax.complex(br, bi)
    return (a * a, a / (a + 2.0), jnp.abs(a), jnp.exp(a), jnp.log(a), jnp.sqrt(a),
            jnp.conj(a), jnp.real(a) + jnp.imag(a), jnp.angle(a), a @ b,
            jnp.einsum("ij,jk->ik", jnp.conj(a), b), jnp.sum(a, axis=1), jnp.prod(a, axis=0),
            jnp.tanh(a), a ** 2, jnp.sin(a))


@case("f16 and bf16 arithmetic: add/mul/div/exp/log/tanh/sqrt in the narrow type, sum and "
      "max reductions (XLA accumulates in f32 for bf16), dot, converts between them, "
      "overflow to inf in f16.",
      lambda rng: [normal(rng, (3, 5)).astype(np.float16), normal(rng, (3, 5)).astype(BF16),
                   normal(rng, (5, 2)).astype(np.float16)],
      rtol=1e-2, atol=1e-2)
def narrow_floats(h, b, hw):
    return (h * h + h, h / (jnp.abs(h) + 1), jnp.exp(h), jnp.tanh(b), jnp.sqrt(jnp.abs(b)),
            jnp.log(jnp.abs(h) + 1), jnp.sum(h, axis=1), jnp.max(b, axis=0), jnp.sum(b),
            h @ hw, b.astype(jnp.float16), h.astype(jnp.bfloat16), h * jnp.float16(30000.0),
            jnp.mean(b, axis=1), b * b - b)


@case("x64 mode: f64 math (exp/log/sin/erf/pow), f64 reductions and dot, int64/uint64 "
      "arithmetic, division and shifts, complex128, f64 <-> s64 converts.",
      lambda rng: [normal(rng, (3, 4), np.float64), ints(rng, (6,), -2**40, 2**40, np.int64),
                   rng.integers(0, 2**63, (6,), dtype=np.uint64), normal(rng, (4, 2),
                                                                          np.float64)],
      rtol=1e-12, atol=1e-12, x64=True)
def x64_types(d, i, u, w):
    z = lax.complex(d, d[::-1])
    return (jnp.exp(d), jnp.log(jnp.abs(d)), jnp.sin(d) ** 2, jax.scipy.special.erf(d),
            jnp.power(jnp.abs(d), 1.5), jnp.sum(d, axis=0), d @ w, i * i, i // 7, i % 7,
            i << 3, i >> 5, u * u, u >> 60, u // jnp.uint64(12345), z * z, jnp.abs(z),
            d.astype(jnp.int64), i.astype(jnp.float64), jnp.cumsum(i))


@case("reductions of transposed / permuted operands (non-default layouts after XLA's layout "
      "assignment): sum over transposed axes, mean of a 3-axis permutation, max over "
      "multiple axes with keepdims, var, a reduce of a broadcast.",
      lambda rng: [normal(rng, (3, 4, 5)), normal(rng, (6, 4))], rtol=1e-5, atol=1e-5)
def transposed_reductions(x, y):
    t = jnp.transpose(x, (2, 0, 1))
    return (jnp.sum(t, axis=1), jnp.mean(jnp.transpose(x, (1, 2, 0)), axis=(0, 2)),
            jnp.max(t, axis=(0, 2), keepdims=True), jnp.var(y.T, axis=1),
            jnp.sum(y.T @ y, axis=0), jnp.sum(jnp.broadcast_to(y[:, None], (6, 3, 4)), axis=0),
            t * 2.0, jnp.min(y.T.reshape(2, 12), axis=1))


@case("lax.pad with negative low/high (cropping), interior padding, both at once, on f32 "
      "and int32; jnp.pad modes constant/edge/reflect/wrap.",
      lambda rng: [normal(rng, (4, 5)), ints(rng, (6,), -9, 9)], rtol=0.0, atol=0.0)
def pad_negative_interior(x, i):
    return (lax.pad(x, 0.5, ((-1, 2, 0), (1, -2, 0))), lax.pad(x, -1.0, ((1, 1, 2), (0, 0, 1))),
            lax.pad(x, 0.0, ((-2, -1, 1), (2, -3, 2))), lax.pad(i, 7, ((-1, -1, 3),)),
            jnp.pad(x, ((1, 2), (2, 0)), mode="edge"), jnp.pad(x, 2, mode="reflect"),
            jnp.pad(i, (3, 2), mode="wrap"), jnp.pad(x, 1, constant_values=9.0))


@case("reverse along several axes, clamp with array and scalar bounds (incl. NaN), select "
      "with broadcast predicates, iota/broadcasted_iota of several types, jnp.tri/triu, "
      "jnp.roll, concatenate, expand_dims, jnp.flip.",
      lambda rng: [with_edges(normal(rng, (4, 5)), (np.nan, -0.0)), ints(rng, (4, 5), -9, 9)],
      rtol=0.0, atol=0.0)
def shaping_select_misc(x, i):
    return (lax.rev(x, (0, 1)), jnp.flip(i, 1), lax.clamp(-0.5, x, 0.5),
            lax.clamp(jnp.broadcast_to(x[0], x.shape), x, x + 1.0), jnp.clip(i, -3, 3),
            lax.select(x > 0, x, jnp.zeros_like(x)), jnp.where(i[:, :1] > 0, x, -x),
            lax.broadcasted_iota(jnp.uint8, (3, 4), 1), lax.iota(jnp.float32, 5),
            lax.broadcasted_iota(jnp.int32, (2, 3, 2), 2), jnp.triu(x), jnp.tri(3, 4, -1),
            jnp.roll(i, 2, axis=1), jnp.concatenate([x, x[:, :2] * 2], axis=1),
            jnp.expand_dims(i[0], 0), x.T.reshape(-1))


@case("transcendental edge cases: atan2 of signed zeros and infinities, expm1/log1p near 0, "
      "erf_inv, lgamma, digamma (incl. poles), erfc, is_finite, sinh/cosh/asinh/acosh/atanh, "
      "tan, acos/asin/atan, logistic, pow with special bases.",
      lambda rng: [np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 0.0, -0.0], np.float32),
                   np.array([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, -0.0, -1.0], np.float32),
                   with_edges(uniform(rng, (8,), -0.9, 0.9), (1e-7, -1e-7, 1.0, -1.0)),
                   with_edges(uniform(rng, (8,), 0.1, 8.0), (0.0, -1.0, -2.5, 1.0, 2.0))],
      rtol=1e-5, atol=1e-5,
      out_tol={"out5": [1e-4, 1e-4], "out6": [1e-4, 1e-4], "out16": [1e-4, 1e-4]})
def transcendental_edges(y, x, s, g):
    inside = jnp.clip(s, -0.999, 0.999)
    return (jnp.arctan2(y, x), jnp.arctan2(x, y), jnp.expm1(s), jnp.log1p(s),
            lax.erf_inv(inside), lax.lgamma(g), lax.digamma(g), lax.erfc(s),
            jnp.isfinite(y / x), jnp.sinh(s), jnp.cosh(s), jnp.arcsinh(s), jnp.arccosh(g + 1),
            jnp.arctanh(inside), jnp.tan(s), jnp.arccos(inside), jax.scipy.special.xlogy(g, g),
            jnp.arcsin(inside), jnp.arctan(g), jax.nn.sigmoid(s * 20), jnp.power(x, y),
            jnp.power(g, -1.5))


@case("the regularized incomplete gamma function (igamma): XLA lowers it to a long chain of "
      "elementwise ops with a while-free series/continued fraction.",
      lambda rng: [uniform(rng, (6,), 0.5, 5.0), uniform(rng, (6,), 0.1, 6.0)],
      rtol=1e-4, atol=1e-5)
def special_igamma(a, x):
    return jax.scipy.special.gammainc(a, x)


@case("the regularized incomplete beta function (betainc, a continued fraction in HLO).",
      lambda rng: [uniform(rng, (6,), 0.5, 5.0), uniform(rng, (6,), 0.5, 6.0),
                   uniform(rng, (6,), 0.05, 0.95)],
      rtol=1e-4, atol=1e-5)
def special_betainc(a, b, p):
    return jax.scipy.special.betainc(a, b, p)


@case("special functions as elementwise chains: bessel_i0e/i1e, gammaln, ndtri, logit, "
      "entr.",
      lambda rng: [uniform(rng, (6,), 0.5, 5.0), uniform(rng, (6,), 0.1, 6.0),
                   uniform(rng, (6,), 0.05, 0.95)],
      rtol=1e-4, atol=1e-5)
def special_series(a, x, p):
    sp = jax.scipy.special
    return (sp.i0e(x), sp.i1e(x), sp.gammaln(a * 3), sp.ndtri(p), sp.logit(p), sp.entr(p))


@case("zeta and polygamma (Hurwitz zeta series as elementwise HLO).",
      lambda rng: [uniform(rng, (6,), 0.5, 5.0), uniform(rng, (6,), 0.1, 6.0)],
      rtol=1e-4, atol=1e-5)
def special_zeta(a, x):
    return jax.scipy.special.zeta(a + 1.5, x), jax.scipy.special.polygamma(1, x)


@case("float edges: nextafter (toward +-inf, NaN, equal), reduce_precision to bf16/f16 "
      "formats, bitcast_convert_type f32<->s32/u32, f32 -> u8[4] and u16[2] -> f32, f16 <-> "
      "s16, copysign, frexp/ldexp, signbit, nan_to_num, fmax/fmin with NaN.",
      lambda rng: [with_edges(normal(rng, (8,)), (np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0)),
                   with_edges(normal(rng, (8,)), (1.0, 2.0, np.nan, 1.0, -1.0, 1.0)),
                   normal(rng, (4,)).astype(np.float16),
                   np.array([[0x3F80, 0x0000], [0xC000, 0x1234]], np.uint16)],
      rtol=0.0, atol=0.0)
def float_bits_edges(x, y, h, u16):
    return (jnp.nextafter(x, y), lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7),
            lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10),
            lax.bitcast_convert_type(x, jnp.int32), lax.bitcast_convert_type(x, jnp.uint32),
            lax.bitcast_convert_type(x, jnp.uint8), lax.bitcast_convert_type(u16, jnp.float32),
            lax.bitcast_convert_type(h, jnp.int16), jnp.copysign(jnp.abs(y), x),
            *jnp.frexp(y), jnp.ldexp(y, jnp.array([1, -2, 3, 0, 5, -1, 2, 100], jnp.int32)),
            jnp.signbit(x), jnp.nan_to_num(x), jnp.fmax(x, y), jnp.fmin(x, y),
            jnp.maximum(x, y), jnp.minimum(x, y))


@case("rounding: lax.round AWAY_FROM_ZERO and TO_NEAREST_EVEN, jnp.round with decimals, "
      "floor/ceil/trunc/rint on halves, -0, NaN, inf and large values, f32 and bf16.",
      lambda rng: [np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, -0.0, np.nan, np.inf, -np.inf,
                             1e9 + 0.5, 8388609.0, 0.49999997, -3.7, 3.7, 123.456], np.float32),
                   (normal(rng, (6,)) * 10).astype(BF16)],
      # jnp.round(x, 2) divides by 100; XLA:CPU's optimized module multiplies by 0.01 instead,
      # one ulp away from the unoptimized module's exact division.
      rtol=0.0, atol=0.0, out_tol={"out2": [2e-7, 0.0]})
def rounding(x, b):
    return (lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
            lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), jnp.round(x, 2), jnp.floor(x),
            jnp.ceil(x), jnp.trunc(x), jnp.rint(x), jnp.floor(b), jnp.round(b),
            jnp.sign(x), jnp.abs(x), -x)


@case("comparisons and min/max with NaN and signed zeros, jnp.isclose, equality of -0 and 0, "
      "total-order sort keys through lax.sort, jnp.nanmax/nanmin/nansum/nanmean.",
      lambda rng: [with_edges(normal(rng, (3, 5)), (np.nan, -0.0, 0.0, np.inf, np.nan)),
                   with_edges(normal(rng, (3, 5)), (1.0, 0.0, -0.0, np.inf, np.nan))],
      rtol=1e-6, atol=1e-6)
def nan_signed_zero(x, y):
    return (x == y, x < y, x != y, jnp.isclose(x, y), jnp.maximum(x, y), jnp.minimum(x, y),
            jnp.nanmax(x, axis=1), jnp.nanmin(x, axis=0), jnp.nansum(x, axis=1),
            jnp.nanmean(x), jnp.isnan(x), jnp.max(x, axis=1), jnp.min(y, axis=0))


# ---- searching and set-like ops -------------------------------------------------------------

@case("jnp.searchsorted left (scan: a while loop) and right (sort method), unique and nonzero "
      "with a static size (sort + cumsum + scatter), bincount with length.",
      lambda rng: [np.sort(normal(rng, (8,))), normal(rng, (5,)), ints(rng, (10,), 0, 5),
                   normal(rng, (12,))],
      rtol=1e-6, atol=1e-6)
def search_unique(sorted_a, v, i, h):
    return (jnp.searchsorted(sorted_a, v), jnp.searchsorted(sorted_a, v, side="right",
                                                            method="sort"),
            jnp.unique(i, size=6, fill_value=-1), jnp.nonzero(i > 2, size=10, fill_value=99)[0],
            jnp.bincount(i, length=6), jnp.sum(h > 0))


@case("polynomials and linear-algebra-lite without LAPACK: jnp.polyval, outer/kron, "
      "jnp.linalg.norm (fro, 1, inf, 2-norm of vectors), jnp.trace, jnp.diag, matrix_power, "
      "cross, vdot, tensordot.",
      lambda rng: [normal(rng, (3, 3)), normal(rng, (4,)), normal(rng, (3,)), normal(rng,
                                                                                    (2, 3, 4))],
      rtol=1e-5, atol=1e-5)
def linalg_lite(a, p, v, t):
    return (jnp.polyval(p, a), jnp.kron(a[:2, :2], a), jnp.linalg.norm(a),
            jnp.linalg.norm(a, ord=1), jnp.linalg.norm(a, ord=jnp.inf), jnp.linalg.norm(v),
            jnp.trace(a), jnp.diag(v), jnp.linalg.matrix_power(a, 3), jnp.cross(v, a[0]),
            jnp.vdot(v, v), jnp.tensordot(t, a, axes=([1], [0])), jnp.diagonal(t, 0, 1, 2))


@case("reduce_window as a generic windowed fold: a 1-D moving sum with stride 3 and padding, "
      "2-D max over (2,3) windows with window dilation, a variadic reduce_window (max value "
      "with its index), prod windows on int32.",
      lambda rng: [normal(rng, (11,)), normal(rng, (5, 7)), ints(rng, (6,), 1, 4)],
      rtol=1e-5, atol=1e-5)
def reduce_window_generic(s, m, i):
    mov = lax.reduce_window(s, 0.0, lax.add, (4,), (3,), ((2, 1),))
    dil = lax.reduce_window(m, -jnp.inf, lax.max, (2, 3), (1, 2), "VALID",
                            window_dilation=(2, 1))
    idx = lax.broadcasted_iota(jnp.int32, m.shape, 1)

    def argmax_fold(a, b):
        (av, ai), (bv, bi) = a, b
        pick = (av > bv) | ((av == bv) & (ai < bi))
        return jnp.where(pick, av, bv), jnp.where(pick, ai, bi)

    v, where = lax.reduce_window((m, idx), (-jnp.inf, 0), argmax_fold, (1, 3), (1, 1), "SAME")
    prod = lax.reduce_window(i, 1, lax.mul, (3,), (1,), "VALID")
    return mov, dil, v, where, prod


@case("variadic and multi-axis reductions: lax.reduce with two operands (sum and max in one), "
      "jnp.sum with a custom dtype, logical reductions along axis 0, min over all, "
      "reductions of empty dims (keepdims and an axis of size 0).",
      lambda rng: [normal(rng, (4, 5)), ints(rng, (4, 5), -50, 50), np.zeros((0, 3),
                                                                             np.float32)],
      rtol=1e-5, atol=1e-5)
def reduce_variadic(x, i, e):
    s, m = lax.reduce((x, i), (0.0, jnp.int32(-2**31)),
                      lambda a, b: (a[0] + b[0], jnp.maximum(a[1], b[1])), (1,))
    return (s, m, jnp.sum(i, axis=0, dtype=jnp.float32), jnp.min(x), jnp.prod(x, axis=1),
            jnp.sum(e, axis=0), jnp.max(e, axis=0, initial=-1.0), jnp.mean(x, axis=(0, 1)),
            jnp.std(x, axis=0, ddof=1))


# ---- batch 2: transformations and library-level functions ----------------------------------

@case("vmap of indexing: per-row gather x[i], per-row .at[i].add and dynamic_update_slice "
      "(scatter/gather with operand_batching_dims), vmap of a dynamic_slice with per-row "
      "starts, vmap of jnp.take_along_axis.",
      lambda rng: [normal(rng, (4, 6)), np.array([0, 5, 2, 9], np.int32), normal(rng, (4, 2)),
                   ints(rng, (4, 3), 0, 6)],
      rtol=1e-6, atol=1e-6)
def vmap_indexing(x, i, u, j):
    row_get = jax.vmap(lambda r, k: r[k])(x, i)
    row_add = jax.vmap(lambda r, k, v: r.at[k].add(v[0]))(x, i, u)
    row_dus = jax.vmap(lambda r, k, v: lax.dynamic_update_slice(r, v, (k,)))(x, i, u)
    row_ds = jax.vmap(lambda r, k: lax.dynamic_slice(r, (k,), (3,)))(x, i)
    return row_get, row_add, row_dus, row_ds, jax.vmap(lambda r, k: r[k])(x, j)


@case("nested control flow: a fori_loop inside a scan, a cond inside a while_loop whose exit "
      "depends on the cond's result, a switch inside a fori_loop, a scan carrying an int8 "
      "and a bool.",
      lambda rng: [normal(rng, (4, 3)), np.int32(5)], rtol=1e-5, atol=1e-5)
def nested_control(xs, n):
    def outer(c, x):
        inner = lax.fori_loop(0, 3, lambda i, a: a * 0.5 + x * i, c)
        return inner, inner.sum()

    c, sums = lax.scan(outer, jnp.zeros(3), xs)

    def wbody(s):
        v, k = s
        v = lax.cond(k % 2 == 0, lambda t: t + 1.0, lambda t: t * 1.5, v)
        return v, k + 1

    v, k = lax.while_loop(lambda s: (s[0] < 20.0) & (s[1] < n * 4), wbody, (jnp.float32(1), 0))
    sw = lax.fori_loop(0, 6, lambda i, a: lax.switch(i % 3, [lambda t: t + 1, lambda t: t * 2,
                                                             lambda t: t - 3], a), 1)
    (b8, flag), bs = lax.scan(lambda cr, x: ((cr[0] + jnp.int8(100), ~cr[1]), cr[0]),
                              (jnp.int8(0), False), None, length=4)
    return c, sums, v, k, sw, b8, flag, bs


@case("gradients through remat (jax.checkpoint), lax.optimization_barrier, stop_gradient, a "
      "custom_vjp (clipped gradient) and jax.hessian of a small function.",
      lambda rng: [normal(rng, (3, 4)), normal(rng, (3,))], rtol=1e-5, atol=1e-5)
def autodiff_extras(x, v):
    @jax.custom_vjp
    def clip_grad(t):
        return t

    clip_grad.defvjp(lambda t: (t, None), lambda _, g: (jnp.clip(g, -0.1, 0.1),))

    def f(y):
        z = jax.checkpoint(lambda w: jnp.sin(w) * w)(y)
        z = lax.optimization_barrier(z)
        return jnp.sum(clip_grad(z) ** 2 + lax.stop_gradient(z) * y)

    hess = jax.hessian(lambda w: jnp.sum(jnp.tanh(w) ** 3))(v)
    return jax.grad(f)(x), hess, lax.optimization_barrier((x * 2, v))[1]


@case("mixed-precision dots: int8 x int8 -> int32 (preferred_element_type), bf16 x bf16 -> "
      "f32, f16 matmul, u8 x s32 promotion, a batched int dot_general with two contracting "
      "dims.",
      lambda rng: [ints(rng, (3, 8), -128, 128, np.int8), ints(rng, (8, 4), -128, 128, np.int8),
                   normal(rng, (3, 5)).astype(BF16), normal(rng, (5, 2)).astype(BF16),
                   normal(rng, (4, 4)).astype(np.float16), ints(rng, (2, 3, 2, 2), -9, 9)],
      rtol=1e-2, atol=1e-2)
def mixed_precision_dots(a, b, p, q, h, t):
    return (lax.dot(a, b, preferred_element_type=jnp.int32),
            lax.dot(p, q, preferred_element_type=jnp.float32), p @ q, h @ h,
            lax.dot_general(t, t, (((2, 3), (2, 3)), ((0,), (0,)))),
            jnp.einsum("ij,jk->ik", a, b, preferred_element_type=jnp.int16))


@case("library-level jnp: convolve/correlate (full, same, valid), interp, median and "
      "quantile (sort), jax.image.resize bilinear and nearest, associative_scan, meshgrid and "
      "ravel_multi_index.",
      lambda rng: [normal(rng, (9,)), normal(rng, (3,)), normal(rng, (3, 4)),
                   np.sort(uniform(rng, (5,), 0, 10)), uniform(rng, (4,), -1, 11)],
      rtol=1e-5, atol=1e-5)
def jnp_library(s, k, img, xp, xq):
    fp = jnp.sin(xp)
    return (jnp.convolve(s, k), jnp.convolve(s, k, mode="same"),
            jnp.correlate(s, k, mode="valid"), jnp.interp(xq, xp, fp), jnp.median(img, axis=1),
            jnp.quantile(s, jnp.array([0.1, 0.5, 0.9])),
            jax.image.resize(img, (5, 7), "bilinear"), jax.image.resize(img, (6, 2), "nearest"),
            lax.associative_scan(jnp.add, s), lax.associative_scan(jnp.maximum, s[::-1]),
            jnp.ravel_multi_index(jnp.meshgrid(jnp.arange(2), jnp.arange(3)), (2, 3),
                                  mode="clip"))


@case("strided and reversed slicing (x[::2, ::-1], x[1::3]), jnp.tile, jnp.repeat with "
      "array repeats and total_repeat_length, broadcast_to with size-1 expansion, "
      "squeeze/expand, split, stack, jnp.select and lax.select_n with an int index.",
      lambda rng: [normal(rng, (6, 5)), np.array([1, 0, 3], np.int32), ints(rng, (6, 5), 0, 3)],
      rtol=0.0, atol=0.0)
def slicing_tiling(x, r, w):
    a, b = jnp.split(x, [2], axis=0)
    return (x[::2, ::-1], x[1::3], x[::-2, 1:4:2], jnp.tile(x[:2, :2], (2, 3)),
            jnp.repeat(x[:3, 0], r, total_repeat_length=5), jnp.repeat(x[:2], 2, axis=1),
            jnp.broadcast_to(x[:1, :, None], (3, 5, 2)), jnp.squeeze(x[None, :, 1:2]),
            a, jnp.stack([b[:, 0], b[:, -1]], axis=1),
            jnp.select([w == 0, w == 1], [x, -x], 7.0), lax.select_n(w, x, x * 2, x * 3))


@case("more jax.random: categorical (argmax of gumbel noise over logits) and choice without "
      "replacement (a sort of random keys).",
      lambda rng: [np.array([3, 11], np.uint32), normal(rng, (2, 4))],
      rtol=1e-5, atol=1e-5)
def random_samplers(kd, logits):
    k1, k2 = jax.random.split(jax.random.wrap_key_data(kd))
    return (jax.random.categorical(k1, logits, axis=-1),
            jax.random.choice(k2, 8, (4,), replace=False))


@case("elementwise library: logaddexp/logaddexp2, hypot, sinc, deg2rad, heaviside, "
      "float_power, exp2/log2/log10, cbrt, reciprocal, square, sign of ints, gcd/lcm, "
      "isin, bitwise reductions (reduce_or/and/xor of uint32).",
      lambda rng: [normal(rng, (8,)) * 3, with_edges(normal(rng, (8,)), (0.0, -0.0, 1.0)),
                   ints(rng, (8,), -40, 40),
                   rng.integers(0, 2**32, (3, 5), dtype=np.uint64).astype(np.uint32)],
      rtol=1e-5, atol=1e-6)
def elementwise_library(a, b, i, u):
    return (jnp.logaddexp(a, b), jnp.logaddexp2(a, b), jnp.hypot(a, b), jnp.sinc(a),
            jnp.deg2rad(a), jnp.heaviside(b, 0.5), jnp.float_power(jnp.abs(a), b),
            jnp.exp2(b), jnp.log2(jnp.abs(a)), jnp.log10(jnp.abs(a)), jnp.cbrt(a),
            jnp.reciprocal(a), jnp.square(i), jnp.sign(i), jnp.gcd(i, 12), jnp.lcm(i, 6),
            jnp.isin(i, jnp.array([1, -3, 7])),
            lax.reduce(u, jnp.uint32(0), lax.bitwise_or, (1,)),
            lax.reduce(u, jnp.uint32(0xFFFFFFFF), lax.bitwise_and, (0,)),
            lax.reduce(u, jnp.uint32(0), lax.bitwise_xor, (0, 1)))


@case("x64 mode integer and float corners: uint64 shifts/div past 2**63, int64 "
      "min/-1, f64 nextafter and frexp, s64 argsort, cumsum of uint32 wrapping, "
      "jax.random bits as uint64, f64 fft.",
      lambda rng: [np.array([2**63 + 5, 2**64 - 1, 0, 12345678901234567], np.uint64),
                   np.array([-2**63, -1, 2**62, -7], np.int64), normal(rng, (4,), np.float64),
                   np.array([4000000000, 300000000, 1, 2], np.uint32),
                   np.array([0, 7], np.uint32)],
      rtol=1e-12, atol=1e-12, x64=True)
def x64_corners(u, i, d, w, kd):
    key = jax.random.wrap_key_data(kd)
    return (u >> jnp.uint64(3), u // jnp.uint64(7), u % jnp.uint64(1000), lax.div(i, jnp.int64(
        -1)), lax.rem(i, jnp.int64(-1)), jnp.nextafter(d, jnp.inf), *jnp.frexp(d),
        jnp.argsort(i), jnp.cumsum(w, dtype=jnp.uint32), jax.random.bits(key, (3,), jnp.uint64),
        jnp.fft.fft(d), u.astype(jnp.float64), d.astype(jnp.uint64))


@case("scatter variants through lax.scatter directly: update_window_dims with inserted dims, "
      "scatter of whole rows with unique_indices/indices_are_sorted, scatter-apply with a "
      "custom combiner (x * 2 + u), and FILL_OR_DROP / CLIP modes.",
      lambda rng: [normal(rng, (5, 4)), np.array([[3], [0], [4]], np.int32),
                   normal(rng, (3, 4)), np.array([[1, 1], [6, 0], [2, 3]], np.int32),
                   normal(rng, (3, 2, 2))],
      rtol=1e-6, atol=1e-6)
def scatter_lax_direct(x, rows, upd, starts, win):
    rdn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                      scatter_dims_to_operand_dims=(0,))
    wdn = lax.ScatterDimensionNumbers(update_window_dims=(1, 2), inserted_window_dims=(),
                                      scatter_dims_to_operand_dims=(0, 1))
    return (lax.scatter(x, rows, upd, rdn, indices_are_sorted=False, unique_indices=True),
            lax.scatter_add(x, rows, upd, rdn, indices_are_sorted=True),
            lax.scatter_apply(x, rows, lambda t: t * 2 + 1, rdn, update_shape=(3, 4)),
            lax.scatter(x, starts, win, wdn, mode=lax.GatherScatterMode.FILL_OR_DROP),
            lax.scatter_max(x, starts, win, wdn, mode=lax.GatherScatterMode.CLIP))


def optimized_text(compiled) -> str:
    """The module XLA:CPU ran, with every constant's data (`compiled.as_text()` elides large
    constants as `{...}`) and without metadata (source locations, most of the bytes)."""
    from jaxlib._hlo import HloPrintOptions
    opts = HloPrintOptions()
    opts.print_large_constants = True
    opts.print_metadata = False
    (module,) = compiled.runtime_executable().hlo_modules()
    return module.to_string(opts)


def _array_meta(a: np.ndarray) -> dict:
    name = a.dtype.name
    meta = {"hlo_type": HLO_TYPES[name], "shape": list(a.shape),
            "npz_dtype": "uint16" if name == "bfloat16" else name}
    if name == "bfloat16":
        meta["encoding"] = "bits:uint16"
    return meta


def generate(c: Case, out_root: Path = OUT_DIR) -> Path:
    jax.config.update("jax_enable_x64", c.x64)
    seed = zlib.crc32(c.name.encode())
    host = [np.asarray(a) for a in c.make_inputs(np.random.default_rng(seed))]
    args = [jnp.asarray(a) for a in host]
    for h, a in zip(host, args):
        assert a.dtype == h.dtype, f"{c.name}: {h.dtype} became {a.dtype} (x64={c.x64})"
    lowered = jax.jit(c.fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    compiled = lowered.compile()
    optimized = optimized_text(compiled)
    leaves = [np.asarray(o) for o in jax.tree_util.tree_leaves(compiled(*args))]
    ins = {f"arg{i}": a for i, a in enumerate(host)}
    outs = {f"out{i}": a for i, a in enumerate(leaves)}

    folder = out_root / c.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "module.hlo").write_text(text)
    (folder / "module.optimized.hlo").write_text(optimized)
    np.savez(folder / "inputs.npz", **{k: gc._encode(v) for k, v in ins.items()})
    np.savez(folder / "expected.npz", **{k: gc._encode(v) for k, v in outs.items()})

    facts = gc._module_facts(text)
    opt_facts = gc._module_facts(optimized)
    arrays = {k: _array_meta(v) for k, v in {**ins, **outs}.items()}
    meta = {
        "name": c.name, "description": c.description, "ops": facts["ops"],
        "optimized_ops": opt_facts["ops"],
        "dtypes": sorted({a["hlo_type"] for a in arrays.values()}),
        "rtol": c.rtol, "atol": c.atol, "out_tol": c.out_tol,
        "num_inputs": len(ins), "num_outputs": len(outs), "x64": c.x64,
        "custom_call_targets": sorted(set(facts["custom_call_targets"])
                                      | set(opt_facts["custom_call_targets"])),
        "arrays": arrays,
        "compare": "float/complex outputs: allclose(rtol, atol, equal_nan=True); "
                   "integer/pred outputs: exact",
        "generator": {"tool": "tools/gen_zoo_single.py", "jax": jax.__version__,
                      "numpy": np.__version__, "seed": seed},
    }
    (folder / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    jax.config.update("jax_enable_x64", False)
    return folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="cases to generate (default: all)")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="output folder")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES.values():
            print(f"{c.name}: {c.description}")
        return 0
    unknown = [n for n in args.cases if n not in CASES]
    if unknown:
        ap.error(f"unknown cases: {', '.join(unknown)}")
    failed = []
    for name in args.cases or list(CASES):
        try:
            folder = generate(CASES[name], args.out)
        except Exception as e:  # noqa: BLE001 -- report every case that jax cannot build
            failed.append(name)
            print(f"FAILED {name}: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"wrote {folder} ({size // 1024} KB)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
