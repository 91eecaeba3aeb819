"""XLA's integer power, written once for both backends (as complex_xla.py: an `ops` object
gives the arithmetic -- NumpyIntOps here for the interpreter, codegen/scalar_ops.py's
LlvmIntOps on registers in the cpu backend -- so the two cannot drift apart).

XLA's elemental IR emitter (EmitIntegerPow) unrolls exponentiation by squaring over the
exponent's low 6 bits only (any larger power overflows every integer type but for bases
0, 1 and -1), so x^64 == 1 and x^65 == x. An exponent that is negative when read as
signed -- for unsigned types too: u8 255 counts as -1 -- gives 1 for base 1, +-1 for base
-1 (all bits set) by the exponent's parity, and 0 otherwise. Checked against XLA:CPU for
every width, signed and unsigned, at the edge values (tools/xla_cpu.py).
"""

from __future__ import annotations

import numpy as np

from .dtypes import as_signed, as_unsigned

SQUARINGS = 6


def power(o, x, y):
    """x ** y in XLA's integer semantics, on the ops interface `o`."""
    one, minus_one = o.c(1), o.c(-1)
    acc, base = one, x
    for i in range(SQUARINGS):
        acc = o.select(o.bit(y, i), o.mul(acc, base), acc)
        base = o.mul(base, base)
    odd = o.bit(y, 0)
    negative = o.select(o.eq(x, one), one,
                        o.select(o.eq(x, minus_one), o.select(odd, minus_one, one), o.c(0)))
    return o.select(o.is_negative(y), negative, acc)


class NumpyIntOps:
    """The interface on numpy integer arrays of one dtype (wrapping arithmetic)."""

    def __init__(self, dtype):
        self.dt = np.dtype(dtype)

    def c(self, v):
        return np.array(v, np.int64).astype(self.dt)  # -1 wraps to all bits set

    def mul(self, x, y):
        return x * y

    def select(self, cond, x, y):
        return np.where(cond, x, y).astype(self.dt, copy=False)

    def eq(self, x, y):
        return x == y

    def bit(self, y, i):
        e = as_unsigned(np.asarray(y))
        return ((e >> np.array(i, e.dtype)) & np.array(1, e.dtype)) == 1

    def is_negative(self, y):
        return as_signed(np.asarray(y)) < 0


def power_array(x, y):
    """The interpreter's integer power of two arrays of one integer dtype."""
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    with np.errstate(over="ignore"):
        return power(NumpyIntOps(x.dtype), x, y)
