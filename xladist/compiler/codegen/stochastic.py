"""stochastic-convert as an element-wise emitter, so it fuses with its producers (the
random bits usually come from rng-bit-generator, the operand from arithmetic).

Semantics are semantics/stochastic_convert.py's (stochastic_convert_array, from
XLA's StochasticConvertDecomposer): |x| = t + f with t = floor(|x|); t rounds up when the
random bits are below floor(f * 2**bits), the sign is applied after rounding, x <= INT_MIN
and x >= INT_MAX saturate, NaN gives 0. Registers hold f16/bf16 values in f32, where
floor, the subtraction and the power-of-two scaling are all exact.
"""

from __future__ import annotations

from llvmlite import ir

from ...errors import UnsupportedError
from ...semantics.stochastic_convert import stochastic_convert_unsupported
from . import intrinsics as intr
from .types import compute_type


def emit_stochastic_convert(b: ir.IRBuilder, instr, values) -> ir.Value:
    x, random = values
    src = instr.operands[0].shape.element_type
    dst = instr.shape.element_type
    reason = stochastic_convert_unsupported(src, dst)
    if reason is not None:
        raise UnsupportedError(f"instruction `{instr.name}` (stochastic-convert): {reason}")
    ft, it, rt = x.type, compute_type(dst), random.type
    lo, hi = -(1 << (dst.bits - 1)), (1 << (dst.bits - 1)) - 1
    # hi rounds up to 2**(n-1) in f32/f64; no float lies between the two, so the
    # comparisons below are the exact ones.
    lo_f, hi_f = ir.Constant(ft, float(lo)), ir.Constant(ft, float(hi))
    inside = b.and_(b.fcmp_ordered(">", x, lo_f), b.fcmp_ordered("<", x, hi_f))
    a = intr.fabs(b, b.select(inside, x, ir.Constant(ft, 0.0)))  # NaN/inf never reach fptoi
    t = intr.intrinsic(b, "floor", [a])
    scaled = b.fmul(b.fsub(a, t), ir.Constant(ft, float(2 ** rt.width)))
    up = b.icmp_unsigned("<", random, b.fptoui(scaled, rt))
    mag = b.add(b.fptosi(t, it), b.zext(up, it))
    res = b.select(b.fcmp_ordered("<", x, ir.Constant(ft, 0.0)), b.neg(mag), mag)
    res = b.select(b.fcmp_ordered("<=", x, lo_f), ir.Constant(it, lo & ((1 << it.width) - 1)),
                   res)
    return b.select(b.fcmp_ordered(">=", x, hi_f), ir.Constant(it, hi), res)
