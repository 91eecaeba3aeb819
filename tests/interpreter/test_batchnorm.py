"""batch-norm-training / -inference / -grad against the operation-semantics formulas
(computed here in float64 with plain numpy) and a finite-difference gradient check."""

from __future__ import annotations

import numpy as np
import pytest

from tests.interpreter.support import S, instr, run
from xladist.hlo.shape import Shape
from xladist.semantics.batchnorm import batch_norm_grad, batch_norm_inference, batch_norm_training

EPS = 1e-3


def _data(feature_index, shape=(4, 3, 5, 2)):
    rng = np.random.RandomState(feature_index)
    x = rng.randn(*shape) * 3 + 1
    c = shape[feature_index]
    return x, rng.rand(c) + 0.5, rng.randn(c)


@pytest.mark.parametrize("fi", [0, 1, 3])
def test_training_output_mean_and_biased_variance(fi):
    x, scale, offset = _data(fi)
    axes = tuple(d for d in range(x.ndim) if d != fi)
    shape = [1] * x.ndim
    shape[fi] = -1
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)  # numpy's default ddof=0: the biased variance
    ref = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + EPS) * \
        scale.reshape(shape) + offset.reshape(shape)
    c = x.shape[fi]
    ins = instr("batch-norm-training",
                Shape.tuple_of([S("f64", *x.shape), S("f64", c), S("f64", c)]),
                [S("f64", *x.shape), S("f64", c), S("f64", c)], epsilon=EPS, feature_index=fi)
    y, m, v = run(ins, x, scale, offset)
    np.testing.assert_allclose(y, ref, rtol=1e-12)
    np.testing.assert_allclose(m, mean, rtol=1e-12)
    np.testing.assert_allclose(v, var, rtol=1e-12)


def test_inference_uses_given_statistics():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    scale = np.array([2.0, 1.0], np.float32)
    offset = np.array([0.5, -1.0], np.float32)
    mean = np.array([1.0, 0.0], np.float32)
    var = np.array([4.0 - EPS, 1.0 - EPS], np.float32)
    ins = instr("batch-norm-inference", S("f32", 2, 2), [S("f32", 2, 2)] + [S("f32", 2)] * 4,
                epsilon=EPS, feature_index=1)
    got = run(ins, x, scale, offset, mean, var)
    assert got.dtype == np.float32
    # (x - mean) / sqrt(var + eps) * scale + offset, with var + eps = 4 and 1.
    np.testing.assert_allclose(got, [[0.5, 1.0], [2.5, 3.0]], rtol=1e-5)


def test_training_f32_and_bf16_dtypes():
    import ml_dtypes
    x, scale, offset = _data(1)
    for dt in (np.float32, ml_dtypes.bfloat16):
        y, m, v = batch_norm_training(x.astype(dt), scale.astype(dt), offset.astype(dt), EPS, 1)
        assert y.dtype == dt and m.dtype == dt and v.dtype == dt


@pytest.mark.parametrize("fi", [0, 2])
def test_grad_matches_finite_differences(fi):
    x, scale, offset = _data(fi, shape=(3, 2, 4))
    rng = np.random.RandomState(10)
    gy = rng.randn(*x.shape)

    def loss(x_, scale_, offset_):
        y, _, _ = batch_norm_training(x_, scale_, offset_, EPS, fi)
        return float((y * gy).sum())

    axes = tuple(d for d in range(x.ndim) if d != fi)
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    gx, gs, go = batch_norm_grad(x, scale, mean, var, gy, EPS, fi)
    h = 1e-6
    for arr, grad in ((x, gx), (scale, gs), (offset, go)):
        for idx in list(np.ndindex(arr.shape))[:6]:
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += h
            minus[idx] -= h
            args_p = [plus if a is arr else a for a in (x, scale, offset)]
            args_m = [minus if a is arr else a for a in (x, scale, offset)]
            numeric = (loss(*args_p) - loss(*args_m)) / (2 * h)
            assert abs(numeric - grad[idx]) < 1e-5 * max(1, abs(numeric)), (idx, numeric,
                                                                              grad[idx])


def test_grad_instruction_returns_three_values():
    x, scale, _ = _data(1)
    c = x.shape[1]
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    ins = instr("batch-norm-grad",
                Shape.tuple_of([S("f64", *x.shape), S("f64", c), S("f64", c)]),
                [S("f64", *x.shape), S("f64", c), S("f64", c), S("f64", c), S("f64", *x.shape)],
                epsilon=EPS, feature_index=1)
    gx, gs, go = run(ins, x, scale, mean, var, np.ones_like(x))
    # d/d offset of sum(y) is the element count per feature; d/d scale of sum(y) is
    # sum(x_hat) = 0.
    np.testing.assert_allclose(go, np.full(c, x.size / c))
    np.testing.assert_allclose(gs, 0, atol=1e-9)
    np.testing.assert_allclose(gx, 0, atol=1e-9)


def test_inference_matches_training_normalization():
    x, scale, offset = _data(0)
    y, m, v = batch_norm_training(x, scale, offset, EPS, 0)
    np.testing.assert_allclose(batch_norm_inference(x, scale, offset, m, v, EPS, 0), y,
                               rtol=1e-12)


@pytest.mark.parametrize("t", ["f32", "bf16", "f64"])
def test_both_backends_give_the_same_bits(t):
    """One implementation (semantics/batchnorm.py): the cpu backend's library thunks computed
    in f64 where the interpreter computes f32 in f32, so their f32 results differed."""
    import ml_dtypes

    import xladist
    dt = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f64": np.float64}[t]
    text = (f"HloModule bn\nENTRY e {{\n x = {t}[2,3,5] parameter(0)\n s = {t}[3] parameter(1)\n"
            f" o = {t}[3] parameter(2)\n m = {t}[3] parameter(3)\n v = {t}[3] parameter(4)\n"
            f" g = {t}[2,3,5] parameter(5)\n"
            f" tr = ({t}[2,3,5], {t}[3], {t}[3]) batch-norm-training(x, s, o), epsilon=0.001, "
            f"feature_index=1\n"
            f" bi = {t}[2,3,5] batch-norm-inference(x, s, o, m, v), epsilon=0.001, "
            f"feature_index=1\n"
            f" gr = ({t}[2,3,5], {t}[3], {t}[3]) batch-norm-grad(x, s, m, v, g), epsilon=0.001, "
            f"feature_index=1\n"
            f" ROOT r = (({t}[2,3,5], {t}[3], {t}[3]), {t}[2,3,5], ({t}[2,3,5], {t}[3], {t}[3]))"
            f" tuple(tr, bi, gr)\n}}\n")
    rng = np.random.RandomState(3)
    args = [rng.randn(2, 3, 5), rng.rand(3) + 0.5, rng.randn(3), rng.randn(3), rng.rand(3) + 0.1,
            rng.randn(2, 3, 5)]
    args = [np.asarray(a).astype(dt) for a in args]
    module = xladist.parse_hlo(text)
    got = xladist.compile(module, backend="interpreter")(*args)
    want = xladist.compile(module, backend="cpu")(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))
