"""batch-norm-training, batch-norm-inference, batch-norm-grad (operation semantics:
BatchNormTraining / BatchNormInference / BatchNormGrad).

Statistics are taken over every dim except `feature_index`; the variance is the
biased one (divide by the element count m). Formulas, with x_hat = (x - mean) /
sqrt(var + epsilon):
  training:  y = scale * x_hat + offset; returns (y, mean, var)
  inference: y = scale * (x - mean) / sqrt(var + epsilon) + offset
  grad:      grad_scale  = sum(grad_out * x_hat)
             grad_offset = sum(grad_out)
             grad_x = scale / sqrt(var + eps) *
                      (grad_out - grad_offset / m - x_hat * grad_scale / m)
Computed in f32 at least (f64 stays f64) and rounded to the element type once. The
interpreter's rules (interpreter/batchnorm.py) and the cpu backend's library thunks both
call these.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError


def _prep(x, feature_index):
    x = np.asarray(x)
    if not 0 <= feature_index < x.ndim:
        raise UnsupportedError(f"feature_index {feature_index} is out of range for an "
                               f"operand of shape {x.shape}")
    wide = np.float64 if x.dtype == np.float64 else np.float32
    axes = tuple(d for d in range(x.ndim) if d != feature_index)
    shape = [1] * x.ndim
    shape[feature_index] = x.shape[feature_index]
    return x.astype(wide), axes, shape, wide


def batch_norm_training(x, scale, offset, epsilon, feature_index):
    dtype = np.asarray(x).dtype
    xw, axes, shape, wide = _prep(x, feature_index)
    mean = xw.mean(axis=axes)
    var = ((xw - mean.reshape(shape)) ** 2).mean(axis=axes)
    inv = 1 / np.sqrt(var + wide(epsilon))
    y = (np.asarray(scale, wide).reshape(shape) * (xw - mean.reshape(shape)) * inv.reshape(shape)
         + np.asarray(offset, wide).reshape(shape))
    return y.astype(dtype), mean.astype(dtype), var.astype(dtype)


def batch_norm_inference(x, scale, offset, mean, var, epsilon, feature_index):
    dtype = np.asarray(x).dtype
    xw, _, shape, wide = _prep(x, feature_index)
    r = [np.asarray(v, wide).reshape(shape) for v in (scale, offset, mean, var)]
    y = r[0] * (xw - r[2]) / np.sqrt(r[3] + wide(epsilon)) + r[1]
    return y.astype(dtype)


def batch_norm_grad(x, scale, mean, var, grad_out, epsilon, feature_index):
    dtype = np.asarray(x).dtype
    xw, axes, shape, wide = _prep(x, feature_index)
    m = xw.size // max(xw.shape[feature_index], 1) if xw.size else 0
    g = np.asarray(grad_out, wide)
    inv = 1 / np.sqrt(np.asarray(var, wide) + wide(epsilon))
    x_hat = (xw - np.asarray(mean, wide).reshape(shape)) * inv.reshape(shape)
    grad_scale = (g * x_hat).sum(axis=axes)
    grad_offset = g.sum(axis=axes)
    with np.errstate(invalid="ignore", divide="ignore"):
        grad_x = (np.asarray(scale, wide) * inv).reshape(shape) * (
            g - grad_offset.reshape(shape) / m - x_hat * grad_scale.reshape(shape) / m)
    return grad_x.astype(dtype), grad_scale.astype(dtype), grad_offset.astype(dtype)
