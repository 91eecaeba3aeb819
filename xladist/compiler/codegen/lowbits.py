"""8-bit and 4-bit floats and sub-byte integers: registers, memory and rounding.

Memory holds one element per byte, exactly as ml_dtypes arrays do (our buffers are
numpy arrays of those dtypes): a float's bit pattern, or a sub-byte integer's low
bits with the high bits zero. Loads ignore the high bits, as ml_dtypes does.

Registers: small floats are computed in f32 (like f16/bf16); every result is
rounded back to the type by `round_f32` = decode(encode(x)). Sub-byte integers are
computed in i8 holding the value sign-extended (sN) or zero-extended (uN), and
`wrap_int` brings every result back to the type's bit width.

Every float format is one row of SMALL_FLOATS; encode/decode are one emitter
parameterized by that row. The rules are ml_dtypes' float32 -> type cast (which is
what the interpreter does; f64 converts through f32 there too), checked bit for bit
by tests/compiler/test_lowbits.py:
- finite values round to nearest even (f8e8m0fnu: ties away from zero);
- "ieee" types (inf and NaN at the all-ones exponent): overflow -> +-inf, NaN ->
  +-quiet NaN (sign kept, payload dropped);
- "fn" types (no inf, NaN = all-ones magnitude): overflow and +-inf -> +-NaN;
- "fnuz" types (no inf, no -0, NaN = 0x80): overflow, inf and NaN -> 0x80, a
  negative value that rounds to zero -> +0;
- "none" (f4e2m1fn, no inf and no NaN): overflow and inf saturate to +-max; every NaN
  becomes -0 (0x8), as XLA:CPU stores it (ml_dtypes gives a zero of the NaN's sign
  inverted; the interpreter's semantics.dtypes.store_as makes the same correction);
- "e8m0" (f8e8m0fnu, unsigned powers of two, no zero): zero, negatives, inf, NaN and
  overflow -> 0xFF (NaN); f32 subnormals up to 2^-127 -> 2^-127, above it -> 2^-126.
Decoding is exact; NaNs decode to a quiet NaN carrying the pattern's sign bit (0x80
of fnuz types is a negative NaN, as in ml_dtypes).

NaN payloads: the interpreter moves bytes (copy, transpose, sort, bitcast-convert,
TOTALORDER compare see every NaN pattern of f8e5m2/f8e4m3/f8e3m4 as distinct) but
canonicalizes them in arithmetic and converts (through ml_dtypes' f32 cast). So a
decoded "ieee" NaN keeps its mantissa in the f32 payload's low bits; `encode(...,
keep_payload=True)` (stores, bitcasts, total-order keys) puts it back, the default
encode (rounding after arithmetic, converts) gives the canonical NaN, and converts to
wider floats drop the payload (`canonical_nan`).
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_F32 = ir.FloatType()

_QNAN = 0x7FC00000
_INF = 0x7F800000


@dataclass(frozen=True)
class SmallFloat:
    ebits: int
    mbits: int
    bias: int
    special: str  # "ieee" | "fn" | "fnuz" | "none" | "e8m0" (module docstring)

    @property
    def magnitude_bits(self) -> int:
        return self.ebits + self.mbits

    @property
    def max_magnitude(self) -> int:
        """Bit pattern (without sign) of the largest finite value."""
        ones = (1 << self.magnitude_bits) - 1
        if self.special == "ieee":
            return (((1 << self.ebits) - 1) << self.mbits) - 1
        if self.special == "fn":
            return ones - 1
        return ones  # fnuz, none; e8m0 is handled apart


# HLO element type -> format. Bias, specials per ml_dtypes.finfo / XLA's primitive types.
SMALL_FLOATS: dict[str, SmallFloat] = {
    "f8e5m2": SmallFloat(5, 2, 15, "ieee"),
    "f8e4m3": SmallFloat(4, 3, 7, "ieee"),
    "f8e3m4": SmallFloat(3, 4, 3, "ieee"),
    "f8e4m3fn": SmallFloat(4, 3, 7, "fn"),
    "f8e4m3fnuz": SmallFloat(4, 3, 8, "fnuz"),
    "f8e5m2fnuz": SmallFloat(5, 2, 16, "fnuz"),
    "f8e4m3b11fnuz": SmallFloat(4, 3, 11, "fnuz"),
    "f8e8m0fnu": SmallFloat(8, 0, 127, "e8m0"),
    "f4e2m1fn": SmallFloat(2, 1, 1, "none"),
}

# Sub-byte integers the backend compiles: name -> bit width. s1/u1 have no numpy
# dtype in xladist (hlo/shape.py), so neither backend can hold them.
SUB_BYTE_INTS: dict[str, int] = {"s1": 1, "s2": 2, "s4": 4, "u1": 1, "u2": 2, "u4": 4}


def _c(v: int) -> ir.Constant:
    return ir.Constant(_I32, v & 0xFFFFFFFF)


# ---- floats ---------------------------------------------------------------------

def decode(b: ir.IRBuilder, fmt: SmallFloat, v: ir.Value) -> ir.Value:
    """An i8 storage pattern -> its exact f32 value."""
    v32 = b.zext(v, _I32)
    if fmt.special == "e8m0":
        bits = b.select(b.icmp_unsigned("==", v32, _c(0)), _c(0x00400000),  # 2^-127
                        b.shl(v32, _c(23)))
        bits = b.select(b.icmp_unsigned("==", v32, _c(0xFF)), _c(_QNAN), bits)
        return b.bitcast(bits, _F32)
    nb, m = fmt.magnitude_bits, fmt.mbits
    sign = b.and_(b.lshr(v32, _c(nb)), _c(1))
    mag = b.and_(v32, _c((1 << nb) - 1))
    # Normal: shift the fields into place and rebias the exponent in one add.
    normal = b.add(b.shl(mag, _c(23 - m)), _c((127 - fmt.bias) << 23))
    # Subnormal: mantissa * 2^(1 - bias - m), exact in f32.
    scale = ir.Constant(_F32, 2.0 ** (1 - fmt.bias - m))
    sub = b.bitcast(b.fmul(b.uitofp(mag, _F32), scale), _I32)
    bits = b.select(b.icmp_unsigned("<", mag, _c(1 << m)), sub, normal)
    if fmt.special == "ieee":
        inf = ((1 << fmt.ebits) - 1) << m
        nan = b.or_(_c(_QNAN), b.and_(mag, _c((1 << m) - 1)))  # payload in the low bits
        special = b.select(b.icmp_unsigned("==", mag, _c(inf)), _c(_INF), nan)
        bits = b.select(b.icmp_unsigned(">=", mag, _c(inf)), special, bits)
    elif fmt.special == "fn":
        bits = b.select(b.icmp_unsigned("==", mag, _c((1 << nb) - 1)), _c(_QNAN), bits)
    elif fmt.special == "fnuz":
        nan = b.icmp_unsigned("==", b.and_(v32, _c((1 << (nb + 1)) - 1)), _c(1 << nb))
        bits = b.select(nan, _c(_QNAN), bits)
    return b.bitcast(b.or_(b.shl(sign, _c(31)), bits), _F32)


def encode(b: ir.IRBuilder, fmt: SmallFloat, x: ir.Value,
           keep_payload: bool = False) -> ir.Value:
    """An f32 register -> the i8 storage pattern (the module docstring's rules).
    keep_payload: a NaN of an "ieee" type gets the mantissa decode() left in the low
    payload bits (the canonical NaN when those are zero)."""
    bits = b.bitcast(x, _I32)
    sign = b.lshr(bits, _c(31))
    mag = b.and_(bits, _c(0x7FFFFFFF))
    if fmt.special == "e8m0":
        # The value's exponent, rounded on the first dropped bit (ties away). f32
        # subnormals: ml_dtypes gives 2^-127 (field 0) up to 2^-127 itself and 2^-126
        # (field 1) above it.
        r = b.lshr(b.add(mag, _c(1 << 22)), _c(23))
        r = b.select(b.icmp_unsigned("<", mag, _c(0x800000)),
                     b.zext(b.icmp_unsigned(">", mag, _c(0x400000)), _I32), r)
        bad = b.or_(b.icmp_unsigned("!=", sign, _c(0)),
                    b.or_(b.icmp_unsigned("==", mag, _c(0)),
                          b.icmp_unsigned(">", r, _c(254))))  # inf, NaN, overflow
        return b.trunc(b.select(bad, _c(0xFF), r), _I8)
    nb, m = fmt.magnitude_bits, fmt.mbits
    shift = 23 - m
    min_normal_field = 127 + 1 - fmt.bias  # f32 exponent field of the type's min normal
    exp_field = b.lshr(mag, _c(23))
    # Normal result: round the f32 pattern at the type's last mantissa bit (nearest
    # even); a carry moves into the exponent by itself; then rebias.
    lsb = b.and_(b.lshr(mag, _c(shift)), _c(1))
    rounded = b.lshr(b.add(mag, b.add(_c((1 << (shift - 1)) - 1), lsb)), _c(shift))
    r_norm = b.sub(rounded, _c((127 - fmt.bias) << m))
    # Subnormal result: the significand (with its hidden bit) in units of the type's
    # smallest subnormal, rounded to nearest even. The shift is capped at 31: the
    # significand has 24 bits, so such values round to zero anyway.
    has_hidden = b.icmp_unsigned("!=", exp_field, _c(0))
    sig = b.or_(b.and_(mag, _c(0x7FFFFF)), b.select(has_hidden, _c(0x800000), _c(0)))
    e_eff = b.select(has_hidden, exp_field, _c(1))
    s = b.sub(_c(shift + min_normal_field), e_eff)
    s = b.select(b.icmp_unsigned(">", s, _c(31)), _c(31), s)
    half_m1 = b.sub(b.shl(_c(1), b.sub(s, _c(1))), _c(1))
    lsb_s = b.and_(b.lshr(sig, s), _c(1))
    r_sub = b.lshr(b.add(sig, b.add(half_m1, lsb_s)), s)
    r = b.select(b.icmp_unsigned(">=", exp_field, _c(min_normal_field)), r_norm, r_sub)
    # NaN and inf patterns round to huge magnitudes, so `over` covers them too.
    over = b.icmp_unsigned(">", r, _c(fmt.max_magnitude))
    signbit = b.shl(sign, _c(nb))
    if fmt.special == "ieee":
        inf = ((1 << fmt.ebits) - 1) << m
        is_nan = b.icmp_unsigned(">", mag, _c(_INF))
        nan = _c(inf | (1 << (m - 1)))
        if keep_payload:
            low = b.and_(mag, _c((1 << m) - 1))
            nan = b.select(b.icmp_unsigned("==", low, _c(0)), nan, b.or_(_c(inf), low))
        out_mag = b.select(is_nan, nan, b.select(over, _c(inf), r))
        out = b.or_(signbit, out_mag)
    elif fmt.special == "fn":
        out = b.or_(signbit, b.select(over, _c((1 << nb) - 1), r))
    elif fmt.special == "fnuz":
        signed = b.select(b.icmp_unsigned("==", r, _c(0)), _c(0), b.or_(signbit, r))
        out = b.select(over, _c(1 << nb), signed)
    else:  # "none": saturate; every NaN -> -0 (XLA:CPU; semantics.dtypes.store_as)
        is_nan = b.icmp_unsigned(">", mag, _c(_INF))
        sat = b.or_(signbit, b.select(over, _c(fmt.max_magnitude), r))
        out = b.select(is_nan, _c(1 << nb), sat)
    return b.trunc(out, _I8)


def canonical_nan(b: ir.IRBuilder, fmt: SmallFloat, x: ir.Value) -> ir.Value:
    """x with a NaN's payload dropped (sign kept): what ml_dtypes' widening gives."""
    if fmt.special != "ieee":
        return x  # decode() gives those types' NaNs no payload
    bits = b.bitcast(x, _I32)
    canon = b.bitcast(b.and_(bits, _c(0xFFC00000)), _F32)
    return b.select(b.fcmp_unordered("uno", x, x), canon, x)


def decoded_bits(fmt: SmallFloat, pattern: int) -> int:
    """decode() of a constant pattern, in Python: the f32 bits of an LLVM constant."""
    import numpy as np

    if fmt.special == "ieee":
        nb, m = fmt.magnitude_bits, fmt.mbits
        mag = pattern & ((1 << nb) - 1)
        inf = ((1 << fmt.ebits) - 1) << m
        if mag > inf:
            return ((pattern >> nb) & 1) << 31 | _QNAN | (mag & ((1 << m) - 1))
    from ...hlo.shape import PRIMITIVE_TYPES
    name = next(k for k, v in SMALL_FLOATS.items() if v == fmt)
    x = np.array([pattern], np.uint8).view(PRIMITIVE_TYPES[name].dtype).astype(np.float32)
    return int(x.view(np.uint32)[0])


def round_f32(b: ir.IRBuilder, fmt: SmallFloat, x: ir.Value) -> ir.Value:
    """x rounded to the format, still in f32."""
    return decode(b, fmt, encode(b, fmt, x))


def total_order_key(b: ir.IRBuilder, fmt: SmallFloat, x: ir.Value) -> ir.Value:
    """An i16 key ordering like XLA's TOTALORDER on the storage pattern: the pattern
    sign-extended from its top bit, magnitude bits flipped when negative; the fnuz NaN
    0x80 lowest (-NaN), f8e8m0fnu unsigned (as semantics/order.total_order_key)."""
    v = encode(b, fmt, x, keep_payload=True)
    i16 = ir.IntType(16)
    if fmt.special == "e8m0":
        # No sign bit: the patterns in unsigned order, 0xFF (NaN) the largest.
        return b.zext(v, i16)
    v = _sign_extend(b, v, fmt.magnitude_bits + 1)
    flip = b.lshr(b.ashr(v, ir.Constant(_I8, 7)), ir.Constant(_I8, 1))
    key = b.sext(b.xor(v, flip), i16)
    if fmt.special == "fnuz":
        # 0x80, the only NaN, is -NaN (as XLA:CPU and ml_dtypes widen it): the lowest.
        is_nan = b.icmp_unsigned("==", v, ir.Constant(_I8, 0x80))
        key = b.select(is_nan, ir.Constant(i16, -32768), key)
    return key


# ---- sub-byte integers ------------------------------------------------------------

def _sign_extend(b, v, width: int):
    if width >= v.type.width:
        return v
    k = ir.Constant(v.type, v.type.width - width)
    return b.ashr(b.shl(v, k), k)


def wrap_int(b: ir.IRBuilder, name: str, v: ir.Value) -> ir.Value:
    """An i8 register reduced to the type's width: sign-extended for sN, masked for uN."""
    width = SUB_BYTE_INTS[name]
    if name[0] == "s":
        return _sign_extend(b, v, width)
    return b.and_(v, ir.Constant(v.type, (1 << width) - 1))


def int_storage(b: ir.IRBuilder, name: str, v: ir.Value) -> ir.Value:
    """The byte ml_dtypes stores: the low bits, high bits zero."""
    return b.and_(v, ir.Constant(v.type, (1 << SUB_BYTE_INTS[name]) - 1))
