"""Argument reduction by pi/2 for huge arguments (Payne-Hanek), branch-free in f64.

mathlib's sin/cos/tan reduce x by pi/2 with Cody-Waite (x - k*p1 - k*p2 - k*p3), exact
only while k*p1 fits in 53 bits: |x| < ~1e6. Past that the result loses its bits and,
from ~1e15 (k no longer an integer an i64 holds, k*p1 far from x), turns into +-inf. A
float32 holds values to 3.4e38, and frequencies times positions reach those ranges.

Payne-Hanek: write |x| = M * 2**e with M a 53-bit integer. Only x*(2/pi) mod 4 matters
(the quadrant and the fraction), and since M is an integer, M*(C + 4j) = M*C (mod 4) for
C = (2**e * 2/pi) mod 4. So a table keeps, per exponent, C split in seven chunks of 26
significant bits (c0 from bit 2**1 down); with M split in Mh (its top 27 bits) and Ml (the
low 26), every product Mh*cj, Ml*cj is exact in f64, Mh*c0 is a multiple of 4 and drops
out, the rest is summed mod 4 exactly down to 2**-50, and the smaller products are
added as a double-double. An f32 argument (M has 24 bits) needs no table: its chunks
are cut from 2/pi's first 256 bits held as constants (_reduce_f32). The table starts at
2**TABLE_MIN_EXP: below it Cody-Waite is exact and the caller selects its result. 2/pi's
bits come from integer arithmetic here (Machin's formula), not a pasted constant.
"""

from __future__ import annotations

import functools
import math

from llvmlite import ir

from . import intrinsics as intr
from .types import F64, I32, I64

__all__ = ["TABLE_MIN_EXP", "reduce_pio2"]

TABLE_MIN_EXP = 19          # |x| >= 2**19 uses the table; below, Cody-Waite is exact
_CHUNKS, _CHUNK_BITS = 7, 26   # C to 2**-180: M * (what is left) < 2**-127
_FIRST_E = 1023 + TABLE_MIN_EXP   # the first biased exponent in the table
_N = 2047 - _FIRST_E              # biased exponents _FIRST_E .. 2046 (2047: inf/nan)


def _pi_fixed(bits: int) -> int:
    """floor(pi * 2**bits), by Machin's formula pi = 16 atan(1/5) - 4 atan(1/239)."""
    guard = bits + 32
    one = 1 << guard

    def atan_inv(n: int) -> int:
        total, term, k, n2 = 0, one // n, 1, n * n
        while term:
            total += term // k if (k // 2) % 2 == 0 else -(term // k)
            term //= n2
            k += 2
        return total
    return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 32


@functools.cache
def _table() -> list[list[float]]:
    """Per biased exponent E >= _FIRST_E: C = (2**e * 2/pi) mod 4 in chunks, e = E - 1075."""
    top_e = 2046 - 1075
    frac_bits = top_e + 2 + _CHUNKS * _CHUNK_BITS + 8   # bits of 2/pi right of the point
    two_over_pi = (1 << (2 * frac_bits + 1)) // _pi_fixed(frac_bits)  # 2/pi * 2**frac_bits
    rows = []
    for big_e in range(_FIRST_E, 2047):
        e = big_e - 1075
        # C * 2**(frac_bits - e) as an integer: 2/pi's bits from 2**1 (weight after *2**e)
        # down, i.e. (two_over_pi mod 2**(frac_bits - e + 2)).
        shift = frac_bits - e
        c = two_over_pi & ((1 << (shift + 2)) - 1)
        row = []
        for j in range(_CHUNKS):
            lo = shift + 2 - (j + 1) * _CHUNK_BITS     # bit position of this chunk's lsb
            chunk = (c >> lo) & ((1 << _CHUNK_BITS) - 1)
            row.append(math.ldexp(chunk, lo - shift))
        rows.append(row)
    return rows


def _global(module: ir.Module) -> ir.GlobalVariable:
    name = "xladist.two_over_pi_chunks"
    if name in module.globals:
        return module.globals[name]
    row_t = ir.ArrayType(F64, _CHUNKS)
    table_t = ir.ArrayType(row_t, _N)
    g = ir.GlobalVariable(module, table_t, name)
    g.linkage = "internal"
    g.global_constant = True
    g.initializer = ir.Constant(table_t, [ir.Constant(row_t, r) for r in _table()])
    return g


def _c(v: float) -> ir.Constant:
    return ir.Constant(F64, v)


def _mod4(b, t):
    """t mod 4 for t >= 0, exact (floor(t/4)*4 and the difference are representable)."""
    return b.fsub(t, b.fmul(_c(4.0), intr.floor(b, b.fmul(t, _c(0.25)))))


def _two_sum(b, x, y):
    """(s, e) with s = fl(x + y) and s + e = x + y exactly (Knuth's TwoSum)."""
    s = b.fadd(x, y)
    yy = b.fsub(s, x)
    e = b.fadd(b.fsub(x, b.fsub(s, yy)), b.fsub(y, yy))
    return s, e


_M64 = (1 << 64) - 1


@functools.cache
def _words() -> list[int]:
    """2/pi's first 256 bits in four words, after a word of zeros."""
    bits = (1 << (2 * 256 + 1)) // _pi_fixed(256)   # floor(2/pi * 2**256)
    return [0] + [(bits >> (64 * (3 - j))) & _M64 for j in range(4)]


def _reduce_f32(b, bits, big_e):
    """reduce_pio2 for an f32 widened to f64, without a table: x = m24 * 2**e24 with
    m24 < 2**24, and the 128 bits of 2/pi that C needs start at bit e24 - 1, so they are
    cut from five constant words with selects and funnel shifts: integer vector ops, no
    gathers (a 1M-element f32 sine, with Cody-Waite beside it: 3-4.7x Cody-Waite alone,
    against ~6x with the table's gathers). Chunks of 29 bits make every m24 * chunk
    exact."""
    w = _words()

    def i64(v):
        return ir.Constant(I64, v)
    # Bit index p0 of C's 2**1 bit in the 320-bit [zero word, 2/pi's 256 bits]:
    # 62 + e24, e24 = E - 1046.  Clamped: smaller x never use this result.
    p0 = b.sub(b.zext(big_e, I64), i64(984))
    p0 = b.select(b.icmp_signed("<", p0, i64(0)), i64(0), p0)
    p0 = b.select(b.icmp_signed(">", p0, i64(191)), i64(191), p0)
    q, sh = b.lshr(p0, i64(6)), b.and_(p0, i64(63))

    def word(offset):   # w[q + offset], q in 0..2
        return b.select(b.icmp_unsigned("==", q, i64(0)), i64(w[offset]),
                        b.select(b.icmp_unsigned("==", q, i64(1)), i64(w[1 + offset]),
                                 i64(w[2 + offset])))
    t0, t1, t2 = word(0), word(1), word(2)
    hi = intr.intrinsic(b, "fshl", [t0, t1, sh])
    lo = intr.intrinsic(b, "fshl", [t1, t2, sh])
    mask29 = i64((1 << 29) - 1)
    chunks = (b.lshr(hi, i64(35)),                                  # 2**1  .. 2**-27
              b.and_(b.lshr(hi, i64(6)), mask29),                   # 2**-28 .. 2**-56
              b.or_(b.shl(b.and_(hi, i64(63)), i64(23)), b.lshr(lo, i64(41))),  # .. 2**-85
              b.and_(b.lshr(lo, i64(12)), mask29))                  # .. 2**-114
    magic = 0x4330000000000000   # 2**52: or-ing in an integer < 2**52 gives 2**52 + it

    def to_f64(v):
        return b.fsub(b.bitcast(b.or_(v, i64(magic)), F64), _c(2.0 ** 52))
    m_bits = b.or_(b.and_(bits, i64((1 << 52) - 1)), i64(magic))
    m24 = b.fmul(b.bitcast(m_bits, F64), _c(2.0 ** -29))           # exact: low 29 bits 0
    p = [b.fmul(b.fmul(m24, to_f64(c)), _c(2.0 ** scale))
         for c, scale in zip(chunks, (-27, -56, -85, -114))]
    p0m = _mod4(b, p[0])
    k = intr.rint(b, b.fadd(p0m, p[1]))
    hi_s, err = _two_sum(b, b.fsub(p0m, k), p[1])                 # p0m - k is exact
    return k, b.fadd(hi_s, b.fadd(err, b.fadd(p[2], p[3])))


def reduce_pio2(b: ir.IRBuilder, ax, narrow: bool = False) -> tuple[ir.Value, ir.Value]:
    """(k, f) with |x|*(2/pi) = k + f (mod 4), k an f64 integer in 0..4, |f| <= ~0.5, for
    finite ax = |x| >= 2**TABLE_MIN_EXP (other inputs give a value the caller discards).
    narrow: ax came from an f32 (_reduce_f32: no table)."""
    bits = b.bitcast(ax, I64)
    big_e = b.trunc(b.lshr(bits, ir.Constant(I64, 52)), I32)
    if narrow:
        return _reduce_f32(b, bits, big_e)
    idx = b.sub(big_e, ir.Constant(I32, _FIRST_E))
    idx = b.select(b.icmp_signed("<", idx, ir.Constant(I32, 0)), ir.Constant(I32, 0), idx)
    idx = b.select(b.icmp_signed(">=", idx, ir.Constant(I32, _N)),
                   ir.Constant(I32, _N - 1), idx)

    def as_float(mask: int):
        # 2**52 + (mantissa bits under mask): M (or Mh) as an f64, no int->float convert.
        return b.bitcast(b.or_(b.and_(bits, ir.Constant(I64, mask)),
                               ir.Constant(I64, 0x4330000000000000)), F64)
    g = _global(b.module)
    zero = ir.Constant(I32, 0)

    def chunk(j):
        return b.load(b.gep(g, [zero, idx, ir.Constant(I32, j)], inbounds=True))
    mh = as_float(((1 << 52) - 1) & ~((1 << 26) - 1))  # M's top 27 bits (times 2**26)
    ml = b.fsub(as_float((1 << 52) - 1), mh)            # its low 26 bits, exact
    c = [chunk(j) for j in range(_CHUNKS)]
    # Mh*c0 is a multiple of 4. The others, by decreasing weight (lsb in brackets):
    a = _mod4(b, b.fadd(_mod4(b, b.fmul(ml, c[0])), _mod4(b, b.fmul(mh, c[1]))))  # [2**-24]
    bb = _mod4(b, b.fadd(b.fmul(ml, c[1]), _mod4(b, b.fmul(mh, c[2]))))        # [2**-50]
    s1 = _mod4(b, b.fadd(a, bb))                  # exact: < 8 with lsb 2**-50
    k = intr.rint(b, s1)
    # The rest, largest first, summed as a double-double (TwoSum, "Sum2"): when x is close
    # to a multiple of pi/2, s1 - k and the next products cancel (f64's worst case leaves
    # f ~ 3e-19), and only an exact running sum keeps f's relative accuracy.
    hi, lo = b.fsub(s1, k), None                   # s1 - k is exact
    for j in range(3, _CHUNKS):
        for term in (b.fmul(mh, c[j]), b.fmul(ml, c[j - 1])):
            hi, err = _two_sum(b, hi, term)
            lo = err if lo is None else b.fadd(lo, err)
    return k, b.fadd(hi, b.fadd(lo, b.fmul(ml, c[_CHUNKS - 1])))


def pio2_times(b: ir.IRBuilder, f):
    """f * pi/2 with pi/2 as a double-double: r's relative error stays ~2**-53."""
    hi = math.pi / 2
    lo = 6.123233995736766e-17   # pi/2 - hi
    return intr.fmuladd(b, f, _c(hi), b.fmul(f, _c(lo)))
