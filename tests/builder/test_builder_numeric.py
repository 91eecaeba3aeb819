"""Programs built with XlaBuilder, run on the reference interpreter, checked against numpy
(and jax.grad for gradients when jax is installed): an MLP forward/backward, loops,
conditionals, variadic reduce, sort, gather, and an infeed/outfeed training loop."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import xladist
from xladist.builder import XlaBuilder
from xladist.hlo.shape import PRIMITIVE_TYPES
from xladist.examples.train_mlp import loss_and_grads as mlp_loss_and_grads

from .test_builder import check_text
from tests.optional import need_jax

B, D, H, C = 4, 3, 5, 2
RNG = np.random.default_rng(42)
X = RNG.normal(size=(B, D)).astype(np.float32)
Y = RNG.normal(size=(B, C)).astype(np.float32)
W1 = RNG.normal(size=(D, H)).astype(np.float32) * 0.5
B1 = RNG.normal(size=(H,)).astype(np.float32) * 0.1
W2 = RNG.normal(size=(H, C)).astype(np.float32) * 0.5
B2 = RNG.normal(size=(C,)).astype(np.float32) * 0.1


def run(module, *args, **options):
    """Run the module, and its printed-and-reparsed twin, which must agree exactly."""
    got = xladist.compile(module, backend="interpreter", **options)(*args)
    again = xladist.compile(check_text(module), backend="interpreter", **options)(*args)
    for a, b in zip(got, again, strict=True):
        np.testing.assert_array_equal(a, b)
    return got


def numpy_loss(x, y, w1, b1, w2, b2):
    out = np.tanh(x @ w1 + b1) @ w2 + b2
    return np.mean((out - y) ** 2)


def build_mlp():
    b = XlaBuilder("mlp")
    shapes = [("x", X), ("y", Y), ("w1", W1), ("b1", B1), ("w2", W2), ("b2", B2)]
    ps = [b.parameter(i, ("f32", a.shape), name=n) for i, (n, a) in enumerate(shapes)]
    loss, grads = mlp_loss_and_grads(b, *ps)
    return b.build([loss, *grads])


def test_mlp_forward_matches_numpy():
    loss, *_ = run(build_mlp(), X, Y, W1, B1, W2, B2)
    np.testing.assert_allclose(loss, numpy_loss(X, Y, W1, B1, W2, B2), rtol=1e-5)


@pytest.mark.slow
def test_mlp_gradients_match_jax_grad():
    jax = need_jax()
    jnp = need_jax("jax.numpy")

    def loss_fn(w1, b1, w2, b2):
        out = jnp.tanh(X @ w1 + b1) @ w2 + b2
        return jnp.mean((out - Y) ** 2)

    expected = jax.grad(loss_fn, argnums=(0, 1, 2, 3))(W1, B1, W2, B2)
    _, *grads = run(build_mlp(), X, Y, W1, B1, W2, B2)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-6)


def test_mlp_gradients_match_finite_differences():
    _, *grads = run(build_mlp(), X, Y, W1, B1, W2, B2)
    params = [W1, B1, W2, B2]
    eps = 1e-3
    for k, (p, g) in enumerate(zip(params, grads)):
        idx = (0,) * p.ndim
        plus = [q.astype(np.float64) for q in params]
        minus = [q.astype(np.float64) for q in params]
        plus[k][idx] += eps
        minus[k][idx] -= eps
        fd = (numpy_loss(X, Y, *plus) - numpy_loss(X, Y, *minus)) / (2 * eps)
        np.testing.assert_allclose(g[idx], fd, rtol=1e-2, atol=1e-5)


def test_while_loop_with_callables():
    b = XlaBuilder("loop")
    v = b.parameter(0, "f32[3]")
    # v <- v * 0.5 + i, for i in 0..5; returns (i, v)
    loop = b.while_loop(lambda sb, i, x: sb.lt(i, 6),
                        lambda sb, i, x: [i + 1, x * 0.5 + sb.convert(i, "f32")],
                        [b.constant_r0(0, "s32"), v])
    m = b.build(list(loop))
    v0 = np.array([1, 2, 3], np.float32)
    i_end, v_end = run(m, v0)
    want = v0.copy()
    for i in range(6):
        want = want * 0.5 + i
    assert i_end == 6
    np.testing.assert_allclose(v_end, want, rtol=1e-6)


def test_fori_loop_with_runtime_bound():
    b = XlaBuilder("fori")
    n = b.parameter(0, "s32[]")
    acc, = b.fori_loop(0, n, lambda sb, i, a: a + i * i, [b.constant_r0(0, "s32")])
    m = b.build(acc)
    assert run(m, np.int32(5))[0] == sum(i * i for i in range(5))
    assert run(m, np.int32(0))[0] == 0


def test_conditionals_pick_the_right_branch():
    b = XlaBuilder("cond")
    x = b.parameter(0, "f32[2]")
    k = b.parameter(1, "s32[]")
    by_pred = b.conditional(b.gt(k, 0), [lambda sb, v: v * 10.0, lambda sb, v: -v], x)
    by_index = b.conditional(k, [lambda sb, v: v + 1.0, lambda sb, v: v + 2.0,
                                 lambda sb, v: v + 3.0], x)
    m = b.build([by_pred, by_index])
    x0 = np.array([1, -2], np.float32)
    p, i = run(m, x0, np.int32(1))
    np.testing.assert_array_equal(p, x0 * 10)
    np.testing.assert_array_equal(i, x0 + 2)
    p, i = run(m, x0, np.int32(0))
    np.testing.assert_array_equal(p, -x0)
    np.testing.assert_array_equal(i, x0 + 1)
    _, i = run(m, x0, np.int32(7))      # out of range runs the last branch
    np.testing.assert_array_equal(i, x0 + 3)


def test_variadic_reduce_argmax_sort_and_gather():
    b = XlaBuilder("misc")
    x = b.parameter(0, "f32[3,4]")

    def argmax(sb, best, best_i, v, vi):
        take = sb.gt(v, best)
        return [sb.select(take, v, best), sb.select(take, vi, best_i)]

    mx, am = b.reduce([x, b.iota("s32", [3, 4], 1)], [-np.inf, 0], argmax, [1])
    srt_keys, srt_idx = b.sort([x, b.iota("s32", [3, 4], 1)], dimension=1)
    rows = b.parameter(1, "s32[2,1]")
    picked = b.gather(x, rows, offset_dims=(1,), collapsed_slice_dims=(0,),
                      start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 4))
    m = b.build([mx, am, srt_keys, srt_idx, picked])
    x0 = RNG.normal(size=(3, 4)).astype(np.float32)
    r0 = np.array([[2], [0]], np.int32)
    got = run(m, x0, r0)
    np.testing.assert_array_equal(got[0], x0.max(1))
    np.testing.assert_array_equal(got[1], x0.argmax(1))
    np.testing.assert_array_equal(got[2], np.sort(x0, 1))
    np.testing.assert_array_equal(got[3], np.argsort(x0, 1))
    np.testing.assert_array_equal(got[4], x0[[2, 0]])


def test_training_loop_with_infeed_outfeed_and_all_reduce():
    """The shape of the data-parallel example on one device: per step take a batch from
    infeed, compute loss and gradients, all-reduce the gradients (a group of one here),
    SGD, outfeed the loss."""
    steps, lr = 3, 0.1
    b = XlaBuilder("train")
    params = [b.parameter(i, ("f32", a.shape), name=n)
              for i, (n, a) in enumerate([("w1", W1), ("b1", B1), ("w2", W2), ("b2", B2)])]

    def body(sb, i, token, w1, b1, w2, b2):
        batch, token = sb.infeed([("f32", (B, D)), ("f32", (B, C))], token)
        x, y = batch
        loss, grads = mlp_loss_and_grads(sb, x, y, w1, b1, w2, b2)
        grads = list(sb.all_reduce(grads, "add"))
        token = sb.outfeed(loss, token)
        new = [p - g * lr for p, g in zip([w1, b1, w2, b2], grads)]
        return [i + 1, token, *new]

    state = b.while_loop(lambda sb, i, *rest: sb.lt(i, steps), body,
                         [b.constant_r0(0, "s32"), b.after_all(), *params])
    m = b.build(list(state)[2:])
    batches = [(RNG.normal(size=(B, D)).astype(np.float32),
                RNG.normal(size=(B, C)).astype(np.float32)) for _ in range(steps)]
    exe = xladist.compile(check_text(m), backend="interpreter", infeed=batches)
    final = exe(W1, B1, W2, B2)

    # numpy reference: the same SGD with hand-derived gradients in float64
    ps = [p.astype(np.float64) for p in (W1, B1, W2, B2)]
    losses = []
    for x, y in batches:
        w1, b1, w2, b2 = ps
        h = np.tanh(x @ w1 + b1)
        diff = h @ w2 + b2 - y
        losses.append(np.mean(diff ** 2))
        dout = 2 * diff / diff.size
        dpre = (dout @ w2.T) * (1 - h * h)
        grads = [x.T @ dpre, dpre.sum(0), h.T @ dout, dout.sum(0)]
        ps = [p - lr * g for p, g in zip(ps, grads)]
    np.testing.assert_allclose([float(v) for v in exe.device.outfeed_values], losses,
                               rtol=1e-4)
    for got, want in zip(final, ps):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("strides, padding, rhs_dilation", [
    ((1, 1), "SAME", (1, 1)), ((2, 2), "SAME", (1, 1)), ((2, 1), "VALID", (1, 1)),
    ((1, 2), "SAME", (2, 1)), ((1, 1), [(1, 0), (2, 1)], (1, 1))])
def test_conv_padding_modes_match_jax(strides, padding, rhs_dilation):
    lax = need_jax("jax.lax")
    lhs = RNG.normal(size=(2, 6, 7, 3)).astype(np.float32)   # NHWC
    rhs = RNG.normal(size=(3, 2, 3, 4)).astype(np.float32)   # HWIO
    dn = ("NHWC", "HWIO", "NHWC")
    b = XlaBuilder("conv")
    x = b.parameter(0, ("f32", lhs.shape))
    k = b.parameter(1, ("f32", rhs.shape))
    m = b.build(b.conv_general_dilated(x, k, strides, padding, rhs_dilation=rhs_dilation,
                                       dimension_numbers=dn))
    want = lax.conv_general_dilated(lhs, rhs, strides, padding, rhs_dilation=rhs_dilation,
                                    dimension_numbers=dn)
    (got,) = run(m, lhs, rhs)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-4)


def test_reduce_window_same_padding_matches_jax():
    lax = need_jax("jax.lax")
    x0 = RNG.normal(size=(5, 7)).astype(np.float32)
    b = XlaBuilder("pool")
    x = b.parameter(0, "f32[5,7]")
    m = b.build(b.reduce_window(x, -np.inf, "max", (3, 2), (2, 2), "SAME"))
    want = lax.reduce_window(x0, -np.inf, lax.max, (3, 2), (2, 2), "SAME")
    np.testing.assert_array_equal(run(m, x0)[0], np.asarray(want))


REAL_TYPES = [t for t in PRIMITIVE_TYPES.values()
              if t.kind in ("pred", "sint", "uint", "float")]


@pytest.mark.parametrize("t", REAL_TYPES, ids=str)
@pytest.mark.parametrize("kind", ["max", "min"])
def test_reduce_max_min_identity_for_every_type(kind, t):
    """reduce_max/min pick an init that is the identity for every real type: s1-u4 too
    (ml_dtypes.iinfo), and floats without inf (f8e4m3fn, fnuz, f4e2m1fn) where -inf would
    convert to NaN and poison the result. numpy on the same values is the reference."""
    rng = np.random.default_rng(7)
    if t.kind == "pred":
        x = rng.integers(0, 2, (3, 4)).astype(bool)
    elif t.is_float:
        info = ml_dtypes.finfo(t.dtype)
        x = rng.uniform(float(info.min) / 2, float(info.max) / 2, (3, 4)).astype(t.dtype)
    else:
        info = ml_dtypes.iinfo(t.dtype)
        x = rng.integers(int(info.min), min(int(info.max), 2**62) + 1, (3, 4)).astype(t.dtype)
    b = XlaBuilder(f"reduce_{kind}_{t}")
    p = b.parameter(0, (t.name, (3, 4)))
    getattr(b, f"reduce_{kind}")(p, [1])
    got = run(b.build(), x)[0]
    want = x.max(axis=1) if kind == "max" else x.min(axis=1)
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_python_int_start_indices_take_the_type_of_the_xlaop_indices(backend):
    """Before: a Python int start index was always s32, so [1, j] with j a u32[] (or s64)
    XlaOp failed shape inference ('start indices must be integer scalars of one type, got
    s32[], u32[]') over an s32 the user never wrote."""
    b = XlaBuilder("dyn")
    x = b.parameter(0, "f32[4,5]")
    j = b.parameter(1, "u32[]")
    k = b.parameter(2, "s64[]")
    u = b.parameter(3, "f32[2,2]")
    m = b.build([b.dynamic_slice(x, [1, j], [2, 2]), b.dynamic_update_slice(x, u, [k, 3])])
    xs = np.arange(20, dtype=np.float32).reshape(4, 5)
    us = -np.ones((2, 2), np.float32)
    got = xladist.compile(check_text(m), backend=backend)(xs, np.uint32(2), np.int64(9), us)
    want = xs.copy()
    want[2:4, 3:5] = us  # start 9 clamps to 4 - 2
    np.testing.assert_array_equal(got[0], xs[1:3, 2:4])
    np.testing.assert_array_equal(got[1], want)
