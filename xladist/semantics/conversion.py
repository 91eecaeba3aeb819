"""convert, bitcast-convert, reduce-precision (operation semantics: ConvertElementType,
BitcastConvertType, ReducePrecision).

The interpreter registers these rules (interpreter/conversion.py); the deadlock check folds control
values with the same ones (analysis/deadlock/fold.py), so it decides branches and trip
counts as the run does.

convert follows XLA:CPU (elemental_ir_emitter.cc, checked against XLA:CPU):
- float -> integer truncates toward zero and saturates: x <= INT_MIN -> INT_MIN,
  x >= INT_MAX -> INT_MAX, NaN -> 0; to unsigned, x <= 0 and NaN give 0;
- integer -> float rounds to nearest even (to floats narrower than f32 through f32 first,
  XLA's int -> f32 -> bf16 path);
- float -> float rounds to nearest even with ml_dtypes (its f8 overflow/NaN rules and
  its f64 -> bf16 path through f32 match XLA), once: f64 -> f8/f4 rounds to f32 by
  round-to-odd first (dtypes.store_as), as XLA rounds them straight from f64;
- anything -> pred is `x != 0` (NaN -> true); pred -> anything is 0/1;
- complex -> real takes the real part; real -> complex has imaginary part 0;
- integer -> integer wraps.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..hlo.ir import describe
from .dtypes import (F32, bits_of, bitcast_convert, int_limits, kind_of,
                     reduces_in_f16, store_as, unsigned_of, upcast)
from .stochastic_convert import (stochastic_convert_array,
                                           stochastic_convert_unsupported)


def _float_to_int(x, dtype):
    f = upcast(x)
    lo, hi = int_limits(dtype)
    lo_f, hi_f = np.array(lo, f.dtype), np.array(hi, f.dtype)  # rounded like XLA's constants
    if kind_of(dtype) == "uint":
        low = (f <= 0) | np.isnan(f)
        lo_f = np.array(0, f.dtype)
    else:
        low = f <= lo_f
    high = f >= hi_f
    inside = ~(low | high | np.isnan(f))
    t = np.trunc(np.where(inside, f, np.zeros_like(f))).astype(dtype)
    t = np.where(low, np.array(lo, dtype), t)
    t = np.where(high, np.array(hi, dtype), t)
    return np.where(np.isnan(f), np.zeros_like(t), t)


def _int_to_float(x, dtype):
    if np.dtype(dtype).itemsize >= 4:
        return x.astype(dtype)
    return x.astype(F32).astype(dtype)


def _to_pred(x, dtype):
    return np.asarray(x != 0)


def _cast(x, dtype):
    if x.dtype.itemsize == 1 and np.dtype(dtype).itemsize == 1 and x.dtype != dtype \
            and bits_of(x.dtype) + bits_of(dtype) < 16:
        # ml_dtypes has no cast between int4/int2/uint4/... and (u)int8: wrap via int64.
        return x.astype(np.int64).astype(dtype)
    return x.astype(dtype)


def _real_part(x, dtype):
    return convert_array(np.real(x), dtype)


def _float_to_float(x, dtype):
    if x.dtype.itemsize < 4 and np.dtype(dtype).itemsize < 4 and x.dtype != dtype:
        # Between narrow floats: exact through f32, then one rounding (ml_dtypes has no
        # direct cast for some pairs, e.g. float4_e2m1fn -> float8_e8m0fnu).
        return store_as(upcast(x), dtype)
    return store_as(x, dtype)


def _float_to_complex(x, dtype):
    return upcast(x).astype(dtype)


# (source kind, target kind) -> conversion. Missing pairs fall back to a plain cast.
CONVERSIONS = {
    ("float", "sint"): _float_to_int, ("float", "uint"): _float_to_int,
    ("sint", "float"): _int_to_float, ("uint", "float"): _int_to_float,
    ("pred", "float"): _int_to_float,
    ("float", "pred"): _to_pred, ("sint", "pred"): _to_pred, ("uint", "pred"): _to_pred,
    ("complex", "pred"): _to_pred,
    ("complex", "float"): _real_part, ("complex", "sint"): _real_part,
    ("complex", "uint"): _real_part,
    ("float", "float"): _float_to_float, ("float", "complex"): _float_to_complex,
}


def convert_array(x: np.ndarray, dtype) -> np.ndarray:
    """XLA's ConvertElementType of a numpy array to `dtype`."""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    fn = CONVERSIONS.get((kind_of(x.dtype), kind_of(dtype)), _cast)
    return np.asarray(fn(x, dtype)).astype(dtype, copy=False)


def convert_rule(instr, args, ev):
    return convert_array(args[0], instr.shape.dtype)


def bitcast_convert_rule(instr, args, ev):
    return bitcast_convert(args[0], instr.shape.dtype)


# ---- reduce-precision ----------------------------------------------------------------
def _mantissa_bits(dtype) -> int:
    import ml_dtypes
    return int(ml_dtypes.finfo(dtype).nmant)


def reduce_precision_array(x: np.ndarray, exponent_bits: int, mantissa_bits: int):
    """XLA's ReducePrecision on an IEEE-style float array (f16, bf16, f32, f64).

    Rounds the mantissa to nearest even, then forces values whose exponent does not fit
    to signed infinity / signed zero (denormals of the narrow format flush to zero).
    NaNs come back unchanged, as XLA:CPU returns them. Other float types (f8, f4) are
    reduced through f16 where XLA:CPU computes them in f16 (dtypes.reduces_in_f16), else
    through f32.
    """
    x = np.asarray(x)
    if x.dtype not in (np.float16, np.float32, np.float64) and x.dtype.name != "bfloat16":
        carrier = np.float16 if reduces_in_f16(x.dtype) else F32
        return reduce_precision_array(x.astype(carrier), exponent_bits,
                                      mantissa_bits).astype(x.dtype)
    nbits = bits_of(x.dtype)
    sm = _mantissa_bits(x.dtype)
    se = nbits - 1 - sm
    u = unsigned_of(x.dtype)
    one = u.type(1)

    def c(v):
        return u.type(v)

    bits = np.require(x, requirements="C").view(u)  # keeps scalars rank 0
    sign_mask = c(1 << (nbits - 1))
    exp_mask = c(((1 << se) - 1) << sm)
    is_nan = (bits & ~sign_mask) > exp_mask
    if mantissa_bits < sm:
        shift = sm - mantissa_bits
        last = c(1 << shift)
        bias = c((1 << shift >> 1) - 1)
        last_bit = (bits & last) >> c(shift)
        bits = (bits + last_bit + bias) & ~(last - one)
    if exponent_bits < se:
        exp_bias = (1 << (se - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        max_exp = c((exp_bias + reduced_bias) << sm)
        min_exp = c((exp_bias - reduced_bias) << sm)
        exponent = bits & exp_mask
        signed_zero = bits & sign_mask
        signed_inf = signed_zero | exp_mask
        bits = np.where(exponent > max_exp, signed_inf, bits)
        bits = np.where(exponent <= min_exp, signed_zero, bits)
    out = np.asarray(bits, u).view(x.dtype)
    return np.where(is_nan, x, out)


def reduce_precision_rule(instr, args, ev):
    e = int(instr.attrs["exponent_bits"])
    m = int(instr.attrs["mantissa_bits"])
    if e < 1 or m < 0:
        raise UnsupportedError(f"{describe(instr)}: reduce-precision needs exponent_bits >= 1 "
                               f"and mantissa_bits >= 0, got {e} and {m}")
    return reduce_precision_array(args[0], e, m)


# ---- stochastic-convert: semantics/stochastic_convert.py ----------------------------

def stochastic_convert_rule(instr, args, ev):
    operand, random = (op.shape.element_type for op in instr.operands)
    result = instr.shape.element_type
    reason = stochastic_convert_unsupported(operand, result)
    if reason is not None:
        raise UnsupportedError(f"{describe(instr)}: {reason}")
    return stochastic_convert_array(args[0], args[1], random.bits, instr.shape.dtype,
                                    result.bits)
