"""A dot's `algorithm=` (XLA's PrecisionConfig.Algorithm): the precision its float operands
are rounded to before the product. The one rule both backends take: the interpreter rounds
the operands' values (interpreter/dot.py), the cpu backend rounds them with converts and a
reduce-precision before its dot (compiler/simplify.py), so every dot path of it (library,
native loops, ahead-of-time code) computes the same.

- `dot_<in>_<in>_<acc>` with <in> bf16 or f16: each operand is converted to <in> and back
  to f32 (one rounding, nearest even), and the products accumulate in f32;
- <in> tf32: each operand is converted to f32, then its mantissa rounded to 10 bits
  (nearest even, the exponent range of f32: reduce-precision(8, 10));
- `..._x3`, `_x6`, `_x9` emulate f32 with several bf16 terms: computed in f32 as they are;
- any other (f32, f64, any_f8 ...): the operands as they are.

Only operands of the IEEE float types (f16, f32, f64) are rounded. XLA:CPU (jax 0.10.2)
ignores the algorithm and computes at full precision; xladist computes what the module
says (docs/xla-compatibility.md).
"""

from __future__ import annotations

import numpy as np

# Rounding type -> the (exponent bits, mantissa bits) it keeps.
ROUNDINGS = {"bf16": (8, 7), "f16": (5, 10), "tf32": (8, 10)}


def operand_rounding(algorithm) -> str | None:
    """"bf16", "f16" or "tf32": what a dot's float operands are rounded to first; None
    when the algorithm computes with them as they are (or there is no algorithm)."""
    if not algorithm:
        return None
    parts = str(algorithm).lower().removeprefix("dot_").split("_")
    if parts[-1] in ("x3", "x6", "x9"):
        return None
    return parts[0] if parts[0] in ROUNDINGS else None


def rounds(dtype) -> bool:
    """Whether an operand of this element type is rounded (the IEEE float types)."""
    return np.dtype(dtype).kind == "f"
