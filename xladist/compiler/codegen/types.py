"""HLO element types as LLVM types: how a value sits in memory and in a register.

Registers hold the *compute* type: pred is i1, integers are iN (signedness lives in
the HLO type, not in LLVM), f16 and bf16 are computed in f32 and rounded back
after every operation (that is what numpy/ml_dtypes do, so results match the
interpreter bit for bit), complex numbers are {re, im} literal structs.
Memory holds the *storage* type: pred is one byte, bf16 is an i16 bit pattern.
8/4-bit floats (computed in f32) and sub-byte integers (computed in i8) are one
byte each in memory; lowbits.py holds their encodings.
"""

from __future__ import annotations

from llvmlite import ir

from ...errors import UnsupportedError
from ...hlo.shape import PrimitiveType
from .lowbits import (
    SMALL_FLOATS,
    SUB_BYTE_INTS,
    decode,
    decoded_bits,
    encode,
    int_storage,
    round_f32,
    wrap_int,
)

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
HALF = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()
C64 = ir.LiteralStructType([F32, F32])
C128 = ir.LiteralStructType([F64, F64])

_INT_BITS = {"s8": 8, "s16": 16, "s32": 32, "s64": 64, "u8": 8, "u16": 16, "u32": 32, "u64": 64}

# Element types without a compiled representation, with the reason shown to users.
UNSUPPORTED_TYPES: dict[str, str] = {}


def _check(t: PrimitiveType) -> None:
    if t.name in UNSUPPORTED_TYPES:
        raise UnsupportedError(f"element type {t.name}: {UNSUPPORTED_TYPES[t.name]}")
    if not t.is_array_type:
        raise UnsupportedError(f"element type {t.name} has no array representation")


def compute_type(t: PrimitiveType) -> ir.Type:
    """The register type an element of HLO type t is computed in."""
    _check(t)
    if t.name == "pred":
        return I1
    if t.name in _INT_BITS:
        return ir.IntType(_INT_BITS[t.name])
    if t.name in SUB_BYTE_INTS:
        return I8
    if t.name in ("f16", "bf16", "f32") or t.name in SMALL_FLOATS:
        return F32
    if t.name == "f64":
        return F64
    if t.name == "c64":
        return C64
    if t.name == "c128":
        return C128
    raise UnsupportedError(f"element type {t.name} is not compiled by the cpu backend")


def storage_type(t: PrimitiveType) -> ir.Type:
    """The in-memory type of one element."""
    _check(t)
    if t.name == "pred":
        return I8
    if t.name == "f16":
        return HALF
    if t.name == "bf16":
        return I16
    if t.name in SMALL_FLOATS:
        return I8
    return compute_type(t)


def is_narrow_float(t: PrimitiveType) -> bool:
    """f16/bf16/f8*/f4*: computed in f32, rounded to storage precision after each op."""
    return t.name in ("f16", "bf16") or t.name in SMALL_FLOATS


def is_sub_byte_int(t: PrimitiveType) -> bool:
    """s2/s4/u2/u4: computed in i8, wrapped to the type's width after each op."""
    return t.name in SUB_BYTE_INTS


def wrap_to_type(b: ir.IRBuilder, t: PrimitiveType, v: ir.Value) -> ir.Value:
    """A computed register brought back into t's range: narrow floats rounded,
    sub-byte integers wrapped; other types unchanged."""
    if t.name in SUB_BYTE_INTS:
        return wrap_int(b, t.name, v)
    return round_to_storage(b, t, v)


def float_type_of_complex(t: PrimitiveType) -> ir.Type:
    return F32 if t.name == "c64" else F64


def bf16_to_f32(b: ir.IRBuilder, bits16: ir.Value) -> ir.Value:
    wide = b.shl(b.zext(bits16, I32), ir.Constant(I32, 16))
    return b.bitcast(wide, F32)


def f32_to_bf16(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Round to nearest even, as ml_dtypes does; NaNs stay quiet NaNs. (A bf16 signalling
    NaN stored after a bitcast-convert into bf16 is quieted here, where XLA:CPU keeps its
    bits; a bitcast out of bf16 reads them with bf16_bits_of. Keeping
    them -- a select on the payload -- changed how LLVM compiled every bf16 kernel and with
    it which operand's NaN a bf16 add returns, so the ordered all-reduce's fold no longer
    matched the reference bit for bit (tests/mpi/test_ordered_reduce.py at n=4).)"""
    bits = b.bitcast(x, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb))
    is_nan = b.fcmp_unordered("uno", x, x)
    quiet = b.or_(bits, ir.Constant(I32, 0x00400000))
    chosen = b.select(is_nan, quiet, rounded)
    return b.trunc(b.lshr(chosen, ir.Constant(I32, 16)), I16)


def bf16_bits_of(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The i16 pattern of an f32 register that holds a bf16 value exactly (a load, or a
    result round_to_storage rounded): its upper half, so a signalling NaN read by
    bitcast-convert keeps its bits as XLA:CPU's do (f32_to_bf16 would quiet it, and stays
    the store's rule: its docstring says why). A NaN whose payload sits only in the low
    half would read as inf there, so it gets f32_to_bf16's quiet NaN instead."""
    bits = b.bitcast(x, I32)
    high = b.trunc(b.lshr(bits, ir.Constant(I32, 16)), I16)
    payload_low_only = b.and_(b.fcmp_unordered("uno", x, x), b.icmp_unsigned(
        "==", b.and_(high, ir.Constant(I16, 0x7F)), ir.Constant(I16, 0)))
    return b.select(payload_low_only, f32_to_bf16(b, x), high)


def round_to_storage(b: ir.IRBuilder, t: PrimitiveType, x: ir.Value) -> ir.Value:
    """Round an f32 register value of a narrow-float type to its storage precision."""
    if t.name == "f16":
        return b.fpext(b.fptrunc(x, HALF), F32)
    if t.name == "bf16":
        return bf16_to_f32(b, f32_to_bf16(b, x))
    if t.name in SMALL_FLOATS:
        return round_f32(b, SMALL_FLOATS[t.name], x)
    return x


def load_element(b: ir.IRBuilder, t: PrimitiveType, ptr: ir.Value) -> ir.Value:
    """Load one element (ptr points at it) and widen it to its compute type."""
    st = storage_type(t)
    v = b.load(ptr, typ=st)
    if t.name == "pred":
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
    if t.name == "f16":
        return b.fpext(v, F32)
    if t.name == "bf16":
        return bf16_to_f32(b, v)
    if t.name in SMALL_FLOATS:
        return decode(b, SMALL_FLOATS[t.name], v)
    if t.name in SUB_BYTE_INTS:
        return wrap_int(b, t.name, v)
    return v


def store_element(b: ir.IRBuilder, t: PrimitiveType, value: ir.Value, ptr: ir.Value) -> None:
    if t.name == "pred":
        value = b.zext(value, I8)
    elif t.name == "f16":
        value = b.fptrunc(value, HALF)
    elif t.name == "bf16":
        value = f32_to_bf16(b, value)
    elif t.name in SMALL_FLOATS:
        value = encode(b, SMALL_FLOATS[t.name], value, keep_payload=True)
    elif t.name in SUB_BYTE_INTS:
        value = int_storage(b, t.name, value)
    b.store(value, ptr)


def constant(t: PrimitiveType, value) -> ir.Constant:
    """An LLVM constant of t's compute type from a numpy scalar."""
    ct = compute_type(t)
    if t.name == "pred":
        return ir.Constant(I1, int(bool(value)))
    if t.is_integer:
        v = int(value)
        bits = ct.width
        return ir.Constant(ct, v & ((1 << bits) - 1))
    if t.is_complex:
        ft = float_type_of_complex(t)
        c = complex(value)
        return ir.Constant(ct, [ir.Constant(ft, c.real), ir.Constant(ft, c.imag)])
    if t.name in SMALL_FLOATS:  # the register decode() would give, NaN payload included
        import numpy as np
        pattern = int(np.asarray(value, dtype=t.dtype).reshape(1).view(np.uint8)[0])
        return ir.Constant(I32, decoded_bits(SMALL_FLOATS[t.name], pattern)).bitcast(F32)
    return ir.Constant(ct, float(value))


def zero(t: PrimitiveType) -> ir.Constant:
    return constant(t, 0)
