"""compare, select and clamp (operation semantics: Comparison, Select, Clamp).

The interpreter registers these rules (interpreter/compare.py); the deadlock check folds control
values with the same ones (analysis/deadlock/fold.py), so it decides branches and trip
counts as the run does.

compare reads `direction` (EQ NE LT LE GT GE) and `type`:
- FLOAT: IEEE comparisons (NaN compares false except NE);
- TOTALORDER: floats ordered by bit pattern, -NaN < -inf < ... < -0 < +0 < ... < inf < NaN
  (so -0 != +0 and a NaN equals itself);
- SIGNED / UNSIGNED: integers, each with its own signedness.
The default type follows the operand: FLOAT for floats and complex, SIGNED for signed
integers, UNSIGNED for unsigned integers and pred; shape inference refuses any other type
than these and TOTALORDER for floats, as XLA's verifier
(hlo/shape_inference/elementwise.py COMPARE_TYPES_OF_KIND).
clamp(lo, x, hi) = min(hi, max(lo, x)) with maximum/minimum's NaN rules; lo and hi may
be scalars.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..hlo.ir import describe
from ..hlo.shape_inference.elementwise import COMPARE_TYPES_OF_KIND
from .dtypes import as_signed, as_unsigned, kind_of, upcast
from .order import float_max, float_min, total_order_key

DIRECTIONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
              "GT": np.greater, "GE": np.greater_equal}

_DEFAULT_TYPE = {kind: types[0] for kind, types in COMPARE_TYPES_OF_KIND.items()}


def _float_keys(a, b):
    return upcast(a), upcast(b)


def _total_keys(a, b):
    return total_order_key(a), total_order_key(b)


def _signed_keys(a, b):
    return as_signed(a), as_signed(b)


def _unsigned_keys(a, b):
    return as_unsigned(a), as_unsigned(b)


# Comparison type -> how operands become numpy-comparable keys.
COMPARISON_KEYS = {"FLOAT": _float_keys, "TOTALORDER": _total_keys, "SIGNED": _signed_keys,
                   "UNSIGNED": _unsigned_keys}


def comparison_type(instr) -> str:
    kind = kind_of(instr.operands[0].shape.dtype)
    return instr.attrs.get("type") or _DEFAULT_TYPE[kind]


def compare_rule(instr, args, ev):
    a, b = args
    direction = instr.attrs.get("direction")
    ctype = comparison_type(instr)
    if direction not in DIRECTIONS or ctype not in COMPARISON_KEYS:
        raise UnsupportedError(f"{describe(instr)}: unknown comparison direction={direction} "
                               f"type={ctype}")
    ka, kb = COMPARISON_KEYS[ctype](a, b)
    return np.asarray(DIRECTIONS[direction](ka, kb))


def select_rule(instr, args, ev):
    pred, on_true, on_false = args
    return np.where(pred, on_true, on_false).astype(instr.shape.dtype, copy=False)


def _int_clamp(lo, x, hi):
    return np.minimum(hi, np.maximum(lo, x))


def _float_clamp(lo, x, hi):
    lo, x, hi = upcast(lo), upcast(x), upcast(hi)
    return float_min(hi, float_max(lo, x))


CLAMP = {"float": _float_clamp, "sint": _int_clamp, "uint": _int_clamp, "pred": _int_clamp}


def clamp_rule(instr, args, ev):
    lo, x, hi = args
    fn = CLAMP.get(kind_of(x.dtype))
    if fn is None:
        raise UnsupportedError(f"{describe(instr)}: clamp is not defined for "
                               f"{instr.shape.element_type}")
    return np.asarray(fn(lo, x, hi)).astype(instr.shape.dtype, copy=False)
