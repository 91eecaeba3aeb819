"""How XLA orders floats: TOTALORDER comparisons, maximum/minimum, topk without a comparator.

One place for the rules that the interpreter's compare, clamp, maximum/minimum, sort and
topk, the cpu backend's topk thunk and `TopK` custom call, and the collectives' min/max
reducers all follow:

- TOTALORDER (`total_order_key`): -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN, by bit
  pattern; the fnuz types' only NaN (0x80) is a negative NaN, f8e8m0fnu has no sign bit;
- maximum / minimum (`float_max`, `float_min`, and `maximum` / `minimum` for any element
  type): NaN wins as the canonical quiet NaN, and +0 > -0, so the result does not depend on
  the operand order;
- topk without a comparator (`top_k_total_order`): the k largest (or smallest) in TOTALORDER,
  ties by the lower index.

The cpu backend's codegen emits the same orders in LLVM (codegen/lowbits.py
total_order_key, scalar_ops.py maximum/minimum).
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from .dtypes import as_signed, as_unsigned, kind_of


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordered like XLA's TOTALORDER on floats:
    -NaN < -inf < ... < -0 < +0 < ... < inf < NaN (by bit pattern; the f8 "fnuz" NaN
    0x80 is -NaN, f8e8m0fnu has no sign bit)."""
    x = np.asarray(x)
    name = x.dtype.name
    if name == "float8_e8m0fnu":
        # No sign bit: every value is positive and 0xFF (NaN) the largest, as XLA:CPU
        # orders them (it compares the f32 values: 2^-127 ... 2^127, +NaN).
        return as_unsigned(x).astype(np.int16)
    s = as_signed(x)
    flip = np.array(np.iinfo(s.dtype).max, s.dtype)
    key = np.where(s < 0, s ^ flip, s)
    if name.endswith("fnuz"):
        # The only NaN, 0x80, is a negative NaN (ml_dtypes and XLA:CPU widen it to
        # -NaN): below -max, not between the negatives and +0 as its pattern would put it.
        key = np.where(s == np.iinfo(s.dtype).min, np.int16(-32768), key.astype(np.int16))
    return key


def float_max(a, b):
    """XLA maximum on floats: NaN wins (canonical quiet NaN), +0 > -0."""
    r = np.where(a > b, a, b)
    r = np.where((a == b) & np.signbit(b), a, r)
    return np.where(np.isnan(a) | np.isnan(b), np.array(np.nan, r.dtype), r)


def float_min(a, b):
    """XLA minimum on floats: NaN wins (canonical quiet NaN), -0 < +0."""
    r = np.where(a < b, a, b)
    r = np.where((a == b) & ~np.signbit(b), a, r)
    return np.where(np.isnan(a) | np.isnan(b), np.array(np.nan, r.dtype), r)


def maximum(a, b):
    """HLO maximum of two arrays of one element type: float_max on floats, the larger
    integer, OR on pred."""
    a, b = np.asarray(a), np.asarray(b)
    return float_max(a, b) if kind_of(a.dtype) == "float" else np.maximum(a, b)


def minimum(a, b):
    """HLO minimum of two arrays of one element type (see maximum)."""
    a, b = np.asarray(a), np.asarray(b)
    return float_min(a, b) if kind_of(a.dtype) == "float" else np.minimum(a, b)


def top_k_total_order(x: np.ndarray, k: int, largest: bool = True
                      ) -> tuple[np.ndarray, np.ndarray]:
    """topk without a comparator: the k largest (smallest) along the last axis in XLA's
    TOTALORDER (NaN above +inf, -0 below +0; dtypes.total_order_key, the one key sort's
    TOTALORDER compare uses too), ties by lower index; (values, s32 indices). The
    `TopK` custom call and the cpu backend's topk library thunk run this too."""
    x = np.asarray(x)
    kind = kind_of(x.dtype)
    if kind == "complex":
        raise UnsupportedError("complex values have no total order for topk")
    key = total_order_key(x) if kind == "float" else x
    if largest:
        # Stable descending with ties by lower index: sort the reversed row stably
        # and read the result backwards.
        n = x.shape[-1]
        idx = (n - 1) - np.argsort(key[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    else:
        idx = np.argsort(key, axis=-1, kind="stable")
    idx = np.ascontiguousarray(idx[..., :k])
    return np.take_along_axis(x, idx, axis=-1), idx.astype(np.int32)
