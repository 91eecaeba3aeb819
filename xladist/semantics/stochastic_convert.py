"""stochastic-convert (XLA's StochasticConvertDecomposer): which conversions XLA defines,
checked by both backends (the interpreter's rule, codegen/stochastic.py's emitter), and the
numpy reference the interpreter runs and the emitter follows step by step."""

from __future__ import annotations

import numpy as np


def stochastic_convert_unsupported(operand, result) -> str | None:
    """Why stochastic-convert from PrimitiveType `operand` to `result` has no defined value,
    or None. XLA defines it only to signed integers (StochasticConvertDecomposer returns
    "Unsupported stochastic convert" otherwise), and its decomposition scales the fraction
    by 2**bits in the operand type (f16 through f32), which must be exact."""
    if result.kind != "sint":
        return (f"stochastic-convert to {result.name}: XLA defines stochastic rounding only "
                "to signed integer types")
    if operand.name == "f8e8m0fnu":
        return "stochastic-convert from f8e8m0fnu: the type has no zero and no fraction"
    if operand.name != "f16":
        import ml_dtypes
        if float(ml_dtypes.finfo(operand.dtype).max) < 2.0 ** operand.bits:
            return (f"stochastic-convert from {operand.name}: XLA scales the fraction by "
                    f"2**{operand.bits}, which overflows {operand.name}")
    return None


def stochastic_convert_array(x: np.ndarray, random: np.ndarray, random_bits: int, dtype,
                             result_bits: int) -> np.ndarray:
    """XLA's stochastic rounding of floats to a signed integer type of `result_bits` bits.

    |x| = t + f with t = floor(|x|); the fraction as a `random_bits`-bit fixed-point
    number, floor(f * 2**random_bits), is compared with the random bits: t rounds up
    to t + 1 when random < that number, so with probability f for uniform bits. The sign
    is put back after rounding; x <= INT_MIN gives INT_MIN, x >= INT_MAX gives INT_MAX
    (so +-inf saturate) and NaN gives 0 (StochasticConvertDecomposer). Computed in f64,
    where every step is exact for operands up to f64.
    """
    x = np.asarray(x)
    f64 = x.astype(np.float64)
    lo, hi = -(1 << (result_bits - 1)), (1 << (result_bits - 1)) - 1
    inside = (f64 > lo) & (f64 < hi)  # False for NaN and +-inf
    a = np.abs(np.where(inside, f64, 0.0))
    t = np.floor(a)
    fixed = np.floor((a - t) * 2.0 ** random_bits).astype(np.uint64)
    up = np.asarray(random).astype(np.uint64) < fixed
    mag = t.astype(np.int64) + up.astype(np.int64)
    out = np.where(f64 < 0, -mag, mag)
    out = np.where(f64 <= lo, lo, np.where(f64 >= hi, hi, out))
    return out.astype(np.int64).astype(dtype)
