"""Element-type helpers: the interpreter's rule families and the semantics modules read
element types through them.

numpy's dtype.kind cannot tell ml_dtypes apart (bfloat16, float8_* and int4 are all
kind 'V'), so rules ask `kind_of(dtype)` for the HLO kind: pred, sint, uint, float,
complex.
"""

from __future__ import annotations

import sys
from functools import cache

import numpy as np

from ..errors import UnsupportedError
from ..hlo.shape import primitive_type_of_dtype

F32 = np.dtype(np.float32)


@cache
def kind_of(dtype) -> str:
    """HLO kind of a numpy dtype: pred, sint, uint, float or complex."""
    return primitive_type_of_dtype(np.dtype(dtype)).kind


@cache
def bits_of(dtype) -> int:
    """The element type's bit width: 4 for int4 and float4 (stored one per byte)."""
    dtype = np.dtype(dtype)
    if dtype.itemsize == 1 and dtype != np.bool_:
        return primitive_type_of_dtype(dtype).bits
    return dtype.itemsize * 8


@cache
def compute_dtype(dtype) -> np.dtype:
    """The type a float op computes in: f32 for floats narrower than f32 (f16, bf16, f8),
    as XLA's CPU backend upcasts them and rounds the result back once."""
    dtype = np.dtype(dtype)
    if kind_of(dtype) == "float" and dtype.itemsize < 4:
        return F32
    return dtype


@cache
def _precision_key(dtype) -> tuple:
    """XLA's primitive_util::HigherPrecisionType order, most important first: complex
    over real, then a float's range (overflow exponent) and precision (significand
    width) over any integer's, then bit width, then signed over unsigned."""
    import ml_dtypes
    dtype = np.dtype(dtype)
    kind = kind_of(dtype)
    fi = ml_dtypes.finfo(dtype) if kind == "float" else None
    return (kind == "complex", fi.maxexp if fi else -1, fi.nmant + 1 if fi else -1,
            1 if kind == "pred" else bits_of(dtype), kind == "sint")  # pred: 1 bit


def higher_precision(a, b) -> np.dtype:
    """The more precise of two element types (XLA's HigherPrecisionType; a on a tie)."""
    a, b = np.dtype(a), np.dtype(b)
    return b if _precision_key(b) > _precision_key(a) else a


@cache
def product_operand_dtype(lhs, rhs, result) -> np.dtype:
    """The type a dot's or convolution's operands are converted to before the product,
    as XLA's OperandUpcaster decides: the result type when it is at least as precise as
    both operands (s8 x s8 -> s32, bf16 x bf16 -> f32, and f16 x f16 -> bf16, which
    rounds the operands to bf16), else the more precise operand's own type: f32 x f32 ->
    bf16 and f64 x f64 -> f32 multiply and accumulate at the operands' precision and
    round once at the end (XLA:CPU, jax 0.10.2)."""
    wide = higher_precision(lhs, rhs)
    result = np.dtype(result)
    return result if higher_precision(wide, result) == result else wide


def product_value(acc: np.ndarray, operand, result) -> np.ndarray:
    """A dot's or convolution's accumulated values as XLA gives them before the final
    convert to `result`: a product whose operands stay in a type more precise than the
    result (product_operand_dtype) is a value of that type first, so the result is
    rounded twice (f8e5m2 x f8e5m2 -> f8e4m3fn: a sum of -1.875 is e5m2's -2, then
    e4m3fn's -2, not -1.875)."""
    operand = np.dtype(operand)
    if operand != np.dtype(result) and acc.dtype != operand:
        return store_as(acc, operand)
    return acc


@cache
def reduces_in_f16(dtype) -> bool:
    """Whether XLA:CPU runs a reduce-precision of this sub-16-bit float type in f16: its
    float normalization upcasts the f8 (and f4) types f16 holds exactly -- at most 5
    exponent bits -- to f16, and an f16 reduce-precision to 5 exponent bits keeps f16's
    range (e5m2 subnormals survive; through f32 a 5-bit clamp flushes them). f8e8m0fnu,
    beyond f16's range, goes through f32."""
    import ml_dtypes
    dtype = np.dtype(dtype)
    return (kind_of(dtype) == "float" and dtype.itemsize == 1
            and ml_dtypes.finfo(dtype).nexp <= 5)


@cache
def _has_no_nan(dtype) -> bool:
    return primitive_type_of_dtype(np.dtype(dtype)).name == "f4e2m1fn"


def f64_to_f32_odd(x: np.ndarray) -> np.ndarray:
    """f64 values rounded to f32 by round-to-odd: toward zero, the last bit set when any
    bit was lost. A second rounding of that to a type of at most 22 significant bits
    (every f8 and f4 type) then gives what one rounding of the f64 value gives; through
    f32's own nearest-even rounding, values just below a midpoint of the narrow type
    become the midpoint and round up (f8e4m3fn 431.9999999996 -> 448, not 416; XLA:CPU
    rounds them once). (The cpu backend's is codegen/scalar_ops.f64_to_f32_odd.)"""
    y = x.astype(F32)
    back = y.astype(np.float64)
    inexact = (back != x) & np.isfinite(x)
    away = inexact & (np.abs(back) > np.abs(x))  # rounded up in magnitude: step back
    bits = y.view(np.uint32)
    bits = np.where(away, bits - np.uint32(1), bits) | inexact.astype(np.uint32)
    return np.asarray(bits, np.uint32).view(F32)


# XLA:CPU converts an f64 below f8e8m0fnu's smallest value to NaN, as it does 0 (from f32
# it rounds 2^-128 < x < 2^-127 up to 2^-127): jax 0.10.2, 0.75 * 2^-127 and 1e-300 -> 0xff.
E8M0_F64_LOWEST = 2.0 ** -127


def store_as(x: np.ndarray, dtype) -> np.ndarray:
    """x (a result computed in a wider type, or a convert's operand) rounded to dtype as
    XLA:CPU stores it: numpy's / ml_dtypes' cast, except that
    - f64 rounds to the f8 and f4 types once (f64_to_f32_odd; ml_dtypes goes through
      f32), and below 2^-127 to f8e8m0fnu as NaN (E8M0_F64_LOWEST);
    - f4e2m1fn, which has neither NaN nor inf, stores every NaN as -0 (0x8) -- ml_dtypes
      gives a zero whose sign is the NaN's inverted.
    (The cpu backend's convert and encode in compiler/codegen/scalar_ops.py and lowbits.py
    are the same rules in LLVM IR.)"""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    if x.dtype == np.float64 and dtype.itemsize == 1 and kind_of(dtype) == "float":
        out = store_as(f64_to_f32_odd(x), dtype)
        if dtype.name == "float8_e8m0fnu":
            out = np.where(x < E8M0_F64_LOWEST, np.array(np.nan, dtype), out)
        return out
    out = x.astype(dtype, copy=False)
    if _has_no_nan(out.dtype) and x.dtype != out.dtype and kind_of(x.dtype) == "float":
        nan = np.isnan(x)
        if nan.any():
            out = np.where(nan, np.array(-0.0, np.float32).astype(out.dtype), out)
    return out


def upcast(x: np.ndarray) -> np.ndarray:
    """x in its compute dtype (exact: every narrow float is representable in f32)."""
    c = compute_dtype(x.dtype)
    return x if x.dtype == c else x.astype(c)


@cache
def unsigned_of(dtype) -> np.dtype:
    """The unsigned integer dtype of the same width (for bit manipulation)."""
    return np.dtype(f"uint{np.dtype(dtype).itemsize * 8}")


@cache
def signed_of(dtype) -> np.dtype:
    return np.dtype(f"int{np.dtype(dtype).itemsize * 8}")


def as_unsigned(x: np.ndarray) -> np.ndarray:
    """Reinterpret the bits of x as the unsigned integer of the same width (sub-byte
    types: their own low bits only)."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return x.view(np.uint8)
    u = x.view(unsigned_of(x.dtype))
    n = bits_of(x.dtype)
    return u & np.uint8((1 << n) - 1) if n < 8 else u


def as_signed(x: np.ndarray) -> np.ndarray:
    """The bits of x as a signed integer; sub-byte types (int4, float4, ...) are
    sign-extended from their own top bit (ml_dtypes keeps them in a byte's low bits)."""
    x = np.asarray(x)
    s = x.view(signed_of(x.dtype)) if x.dtype != np.bool_ else x.view(np.int8)
    n = bits_of(x.dtype)
    if x.dtype != np.bool_ and n < 8:
        k = np.int8(8 - n)
        s = (s << k) >> k
    return s


def int_limits(dtype) -> tuple[int, int]:
    import ml_dtypes  # its iinfo knows int4/int2 too
    info = ml_dtypes.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def from_bits(u: np.ndarray, dtype) -> np.ndarray:
    """Unsigned bit patterns (the low bits_of(dtype) bits of each element of u) as values of
    dtype; sub-byte types keep their pattern in a byte's low bits, as ml_dtypes does."""
    dtype = np.dtype(dtype)
    n = bits_of(dtype)
    if n >= 8:
        return np.asarray(u).astype(unsigned_of(dtype)).view(dtype)
    return (np.asarray(u) & ((1 << n) - 1)).astype(np.uint8).view(dtype)


def bitcast_convert(x: np.ndarray, dtype) -> np.ndarray:
    """XLA's BitcastConvertType: reinterpret bits; a width change adds or removes a minor
    dimension of width ratio elements, element 0 in the lowest bits (little-endian: bytes
    for byte-sized types, bit fields for int4/int2/float4: s8 0x12 -> s4 [2, 1])."""
    x = np.require(x, requirements="C")  # np.ascontiguousarray would make a scalar rank 1
    dtype = np.dtype(dtype)
    src, dst = bits_of(x.dtype), bits_of(dtype)
    if sys.byteorder != "little":  # pragma: no cover - XLA defines the byte order
        raise UnsupportedError("bitcast-convert needs a little-endian host")
    if src > dst and min(src, dst) >= 8:
        return x[..., None].view(dtype)  # a scalar too: (1,) -> (src // dst,) elements
    if src < dst and (not x.shape or x.shape[-1] * src != dst):
        raise UnsupportedError(f"bitcast-convert {x.dtype}{list(x.shape)} -> {dtype}: the "
                               f"minor dimension must hold {dst // src} elements")
    if min(src, dst) >= 8:
        return x.view(dtype) if src == dst else x.view(dtype).reshape(x.shape[:-1])
    u = as_unsigned(x).astype(np.uint64)
    if src == dst:
        return from_bits(u, dtype)
    if src > dst:
        mask = np.uint64((1 << dst) - 1)
        return from_bits(np.stack([(u >> np.uint64(i * dst)) & mask
                                   for i in range(src // dst)], axis=-1), dtype)
    acc = np.zeros(x.shape[:-1], np.uint64)
    for i in range(dst // src):
        acc |= u[..., i] << np.uint64(i * src)
    return from_bits(acc, dtype)

