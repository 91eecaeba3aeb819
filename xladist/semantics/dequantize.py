"""scaled-dot's operands (XLA's ScaledDotRewriter): each operand times its scale, the scale
repeated over contiguous blocks of every dimension it is smaller in, rounded once to the
dequantization type. Both backends dequantize with this and then run their dot
(interpreter/dot.py, compiler/library/dot.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np


def dequantize_type(operand: np.dtype, scale: np.dtype) -> np.dtype:
    """The type an operand and its scale are multiplied in (XLA's ScaledDotRewriter): bf16
    when both are narrower than 16 bits (f8/f4 data with f8e8m0 scales), the type itself
    when they agree, f32 for two different types of one width, else the wider type."""
    operand, scale = np.dtype(operand), np.dtype(scale)
    if operand.itemsize < 2 and scale.itemsize < 2:
        return np.dtype(ml_dtypes.bfloat16)
    if operand == scale:
        return operand
    if operand.itemsize == scale.itemsize:
        return np.dtype(np.float32)
    return operand if operand.itemsize > scale.itemsize else scale


def dequantize(x, scale) -> np.ndarray:
    """x times its scale repeated over blocks (scale[i] covers x[i*b:(i+1)*b] along every
    dimension), rounded once to dequantize_type. The scale is broadcast without being
    materialized: x viewed as [s0, b0, s1, b1, ...] times the scale as [s0, 1, s1, 1, ...]."""
    x, scale = np.asarray(x), np.asarray(scale)
    t = dequantize_type(x.dtype, scale.dtype)
    if x.size == 0:
        return x.astype(t)
    wide = np.float64 if t == np.float64 else np.float32  # products of t values are exact
    blocks = [n for k, b in zip(scale.shape, x.shape) for n in (k, b // k)]
    ones = [n for k in scale.shape for n in (k, 1)]
    xb = x.astype(t).astype(wide).reshape(blocks)
    sb = scale.astype(t).astype(wide).reshape(ones)
    with np.errstate(over="ignore", invalid="ignore"):
        return (xb * sb).reshape(x.shape).astype(t)
