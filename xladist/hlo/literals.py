"""Constant literal values: text elements -> numpy, numpy -> XLA's text (section 5).

Parsing side: the parser collects the element tokens of a `constant(...)` in C
order and calls `build_array`, which converts them for the element type (range
checks, `-0` kept as -0.0, NaN sign and payload bits, bf16/f8/s4 via ml_dtypes).

Printing side: `format_literal` reproduces XLA's one-line literal printer
(`LiteralBase::PrintWithoutShapeOneline`): `%g` with the digit counts of
`RoundTripFpToString`, `-nan` / `nan(0x..)` suffixes, pred arrays as 0/1, and the
brace/space layout of nested arrays including `/*i0=..*/` for rank > 3. One exception: a
negative zero prints as `-0.0`, not XLA's `-0`, which XLA's parser reads as +0.
"""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np

from .attrs import Literal
from .shape import PrimitiveType, Shape


class LiteralValueError(ValueError):
    """A bad element; `index` is its position in the collected element list."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


# Float types with IEEE-style inf/NaN encodings; only these carry NaN payloads
# (XLA's RoundTripNanPayload skips the fn/fnuz/fnu 8-bit types).
_IEEE_FLOATS = frozenset({"f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3", "f8e3m4"})
_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _float_layout(ptype: PrimitiveType) -> tuple[int, int]:
    """(total bits, mantissa bits) of a float type."""
    return ptype.bits, int(ml_dtypes.finfo(ptype.dtype).nmant)


def _int_range(ptype: PrimitiveType) -> tuple[int, int]:
    if ptype.kind == "uint":
        return 0, (1 << ptype.bits) - 1
    return -(1 << (ptype.bits - 1)), (1 << (ptype.bits - 1)) - 1


def _dtype(ptype: PrimitiveType) -> np.dtype:
    try:
        return ptype.dtype
    except TypeError:
        raise LiteralValueError(f"constants of type {ptype.name} are not supported", 0) from None


def build_array(ptype: PrimitiveType, dims: tuple[int, ...], items: list) -> np.ndarray:
    """Convert element token texts (C order) to an array of `ptype` with shape `dims`.

    Real elements are token texts ('1', '-0', '2.5e-3', 'true', '-nan', 'nan(0x7)');
    complex elements are (real text, imaginary text) pairs.
    Raises LiteralValueError naming the bad element.
    """
    kind = ptype.kind
    dtype = _dtype(ptype)
    if kind == "pred":
        values = []
        for j, t in enumerate(items):
            if t in ("true", "1"):
                values.append(True)
            elif t in ("false", "0"):
                values.append(False)
            else:
                raise LiteralValueError(f"expected true, false, 0 or 1 for a pred element, "
                                        f"found '{t}'", j)
        return np.array(values, dtype=np.bool_).reshape(dims)
    if kind in ("sint", "uint"):
        lo, hi = _int_range(ptype)
        # XLA reads integers as s64 and bit-casts them for u64, so `u64[] constant(-1)` is
        # 2^64-1 (hlo_parser_test.cc ConstantUnsignedUnderflow); narrower types are checked.
        wrap = ptype.name == "u64"
        values = []
        for j, t in enumerate(items):
            try:
                v = int(t)
            except ValueError:
                raise LiteralValueError(f"expected an integer for a {ptype.name} element, "
                                        f"found '{t}'", j) from None
            if wrap and -(1 << 63) <= v < 0:
                v += 1 << 64
            if not lo <= v <= hi:
                raise LiteralValueError(f"value {v} is out of range for {ptype.name} "
                                        f"[{lo}, {hi}]", j)
            values.append(v)
        return np.array(values, dtype=dtype).reshape(dims)
    if kind == "float":
        return _float_array(ptype, dtype, items).reshape(dims)
    if kind == "complex":
        part = PRIMITIVE_PART[ptype.name]
        re_items = []
        im_items = []
        for j, pair in enumerate(items):
            if not isinstance(pair, tuple):
                raise LiteralValueError(f"expected a complex element (re, im) for {ptype.name}, "
                                        f"found '{pair}'", j)
            re_items.append(pair[0])
            im_items.append(pair[1])
        out = np.empty(len(items), dtype=dtype)
        out.real = _float_array(part, part.dtype, re_items)
        out.imag = _float_array(part, part.dtype, im_items)
        return out.reshape(dims)
    raise LiteralValueError(f"constants of type {ptype.name} are not supported", 0)


def _float_array(ptype: PrimitiveType, dtype, items: list) -> np.ndarray:
    try:  # plain decimals, read by numpy in C (correctly rounded, as float() reads them)
        wide = np.array(items, dtype=np.float64)
    except (ValueError, TypeError):
        wide = None
    if wide is None or not np.isfinite(wide).all():
        return _float_array_by_item(ptype, dtype, items)  # nan, inf, errors: item by item
    return _narrowed(ptype, dtype, wide, items)


def _float_array_by_item(ptype: PrimitiveType, dtype, items: list) -> np.ndarray:
    values = []
    nans = []  # (position, negative, payload or None)
    for j, t in enumerate(items):
        if isinstance(t, tuple):
            raise LiteralValueError(f"complex element given for {ptype.name}", j)
        try:
            v = float(t.partition("(")[0])
        except ValueError:
            raise LiteralValueError(f"expected a number for a {ptype.name} element, "
                                    f"found '{t}'", j) from None
        if v != v:
            # nan(0x7): the hex digits are the mantissa bits (the lexer checked the form).
            payload = int(t[t.index("(") + 3:-1], 16) if "(" in t else None
            nans.append((j, t.startswith("-"), payload))
        elif v in (math.inf, -math.inf) and "inf" not in t:
            # A finite decimal beyond f64 (`1.8e308`): XLA says out of range, as for the
            # narrower types below (hlo_parser_test.cc ConstantF64Overflow).
            raise LiteralValueError(f"value {t} is out of range for {ptype.name}", j)
        values.append(v)
    out = _narrowed(ptype, dtype, np.array(values, dtype=np.float64), items)
    if nans:
        _set_nan_bits(ptype, out, nans)
    return out


def _narrowed(ptype: PrimitiveType, dtype, wide: np.ndarray, items: list) -> np.ndarray:
    """`wide` (f64) as `dtype`; a finite value the type cannot hold is an error."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = wide.astype(dtype)
        back = out.astype(np.float64)
    bad = np.isfinite(wide) & ~np.isfinite(back)
    if bad.any():
        j = int(np.argmax(bad))
        raise LiteralValueError(f"value {items[j]} is out of range for {ptype.name}", j)
    return out


def _set_nan_bits(ptype: PrimitiveType, out: np.ndarray, nans) -> None:
    if ptype.name not in _IEEE_FLOATS:
        for j, _, payload in nans:
            if payload is not None:
                raise LiteralValueError(f"{ptype.name} has no NaN payloads", j)
        return
    bits, mant = _float_layout(ptype)
    raw = out.view(_UINT_OF_SIZE[out.dtype.itemsize])
    exp_mask = ((1 << (bits - 1)) - 1) & ~((1 << mant) - 1)
    for j, negative, payload in nans:
        if payload is None:
            payload = 1 << (mant - 1)  # the quiet NaN XLA prints as plain `nan`
        elif not 0 < payload < (1 << mant):
            raise LiteralValueError(f"NaN payload 0x{payload:x} does not fit the {mant} "
                                    f"mantissa bits of {ptype.name}", j)
        raw[j] = (int(negative) << (bits - 1)) | exp_mask | payload


PRIMITIVE_PART: dict[str, PrimitiveType] = {}


def _init_parts():
    from .shape import PRIMITIVE_TYPES
    PRIMITIVE_PART["c64"] = PRIMITIVE_TYPES["f32"]
    PRIMITIVE_PART["c128"] = PRIMITIVE_TYPES["f64"]


_init_parts()


# ---- printing -------------------------------------------------------------------
def _max_digits10(ptype: PrimitiveType) -> int:
    """std::numeric_limits<T>::max_digits10 = 2 + floor(digits * log10(2))."""
    _, mant = _float_layout(ptype)
    return 2 + (mant + 1) * 30103 // 100000


_F32 = struct.Struct("<f")


def _f32_roundtrips(text: str, value: float) -> bool:
    try:
        return _F32.unpack(_F32.pack(float(text)))[0] == value
    except OverflowError:
        return False


def float_formatter(ptype: PrimitiveType):
    """A function (python float, raw bits) -> text, as XLA's RoundTripFpToString."""
    name = ptype.name
    ieee = name in _IEEE_FLOATS
    _, mant = _float_layout(ptype)
    quiet = 1 << (mant - 1) if mant else 0
    payload_mask = (1 << mant) - 1

    def nan_text(v: float, raw: int) -> str:
        text = "-nan" if math.copysign(1.0, v) < 0 else "nan"
        if ieee and (raw & payload_mask) != quiet:
            text += f"(0x{raw & payload_mask:x})"
        return text

    if name == "f32":
        def fmt(v, raw):
            if v != v:
                return nan_text(v, raw)
            s = "%.6g" % v
            return s if _f32_roundtrips(s, v) else "%.9g" % v
    elif name == "f64":
        def fmt(v, raw):
            if v != v:
                return nan_text(v, raw)
            s = "%.15g" % v
            return s if float(s) == v else "%.17g" % v
    else:
        spec = "%%.%dg" % _max_digits10(ptype)

        def fmt(v, raw):
            if v != v:
                return nan_text(v, raw)
            return spec % v

    def fmt_keeping_negative_zero(v, raw):
        # XLA prints a negative zero "-0", which its own parser reads as the integer 0, a
        # positive zero (jax 0.10.2: `f32[] constant(-0)` bitcasts to 0); both read "-0.0"
        # as -0.0. Parsing still keeps the sign of "-0", as the program XLA printed had it.
        return "-0.0" if v == 0 and math.copysign(1.0, v) < 0 else fmt(v, raw)
    return fmt_keeping_negative_zero


def element_strings(ptype: PrimitiveType, arr: np.ndarray, scalar: bool) -> list[str]:
    """Each element of `arr` (C order) as XLA prints it."""
    kind = ptype.kind
    flat = arr.reshape(-1)
    if kind == "pred":
        if scalar:
            return ["true" if b else "false" for b in flat.tolist()]
        return ["1" if b else "0" for b in flat.tolist()]
    if kind in ("sint", "uint"):
        if flat.dtype.itemsize * 8 != ptype.bits or flat.dtype.kind not in "iu":
            flat = flat.astype(np.int64 if kind == "sint" else np.uint64)
        return [str(v) for v in flat.tolist()]
    if kind == "float":
        return _float_strings(ptype, flat)
    if kind == "complex":
        part = PRIMITIVE_PART[ptype.name]
        re = _complex_part_strings(part, np.ascontiguousarray(flat.real))
        im = _complex_part_strings(part, np.ascontiguousarray(flat.imag))
        return [f"({a}, {b})" for a, b in zip(re, im)]
    raise ValueError(f"cannot print constants of type {ptype.name}")


def _float_strings(ptype: PrimitiveType, flat: np.ndarray) -> list[str]:
    fmt = float_formatter(ptype)
    with np.errstate(invalid="ignore"):
        values = flat.astype(np.float64).tolist()
    uint = _UINT_OF_SIZE.get(flat.dtype.itemsize)
    if uint is not None and any(v != v for v in values):
        raws = flat.view(uint).tolist()
    else:
        raws = [0] * len(values)
    strs = [fmt(v, r) for v, r in zip(values, raws)]
    if ptype.name not in ("f32", "f64") and uint is not None:
        _widen_non_round_trips(flat, strs, uint)
    return strs


def _complex_part_strings(part: PrimitiveType, flat: np.ndarray) -> list[str]:
    """The parts of complex elements as XLA prints them, except a finite part whose text
    reads (as a double) beyond the part type's largest value: XLA's parser checks complex
    parts against that bound before rounding ("real part 3.40282e+38 is out of range for
    literal's primitive type C64", jax 0.10.2), so +-FLT_MAX prints with 17 digits,
    3.4028234663852886e+38, the same f32."""
    strs = _float_strings(part, flat)
    top = float(np.finfo(flat.dtype).max)
    for j, text in enumerate(strs):
        value = float(flat[j])
        if math.isfinite(value) and abs(float(text.partition("(")[0])) > top:
            strs[j] = "%.17g" % value
    return strs


def _widen_non_round_trips(flat: np.ndarray, strs: list[str], uint) -> None:
    """Reprint, with more digits, the elements whose text does not parse back (as
    _float_array converts: through float64) to the same bits.  max_digits10 is enough
    for correctly rounding conversions, but ml_dtypes rounds some values near a narrow
    type's smallest exponent up (f8e8m0fnu: 2**-127 printed as 5.9e-39 would come back
    as 2**-126)."""
    with np.errstate(all="ignore"):
        back = np.array([float(t.partition("(")[0]) for t in strs]).astype(flat.dtype)
    want = flat.view(uint)
    differ = (back.view(uint) != want) & ~np.isnan(flat.astype(np.float32))
    for j in np.flatnonzero(differ).tolist():
        v = float(flat[j].astype(np.float64))
        for spec in ("%.9g", "%.17g"):
            strs[j] = spec % v
            if np.float64(float(strs[j])).astype(flat.dtype).view(uint) == want[j]:
                break


def format_array_text(strs: list[str], dims: tuple[int, ...]) -> str:
    """Nest element texts in XLA's one-line brace layout for an array of shape `dims`."""
    rank = len(dims)
    if rank == 0:
        return strs[0]
    if rank == 1:
        return "{" + ", ".join(strs) + "}"
    out: list[str] = []
    strides = [1] * rank
    for d in range(rank - 2, -1, -1):
        strides[d] = strides[d + 1] * dims[d + 1]

    def rec(level: int, offset: int, last_index: int) -> None:
        n = dims[level]
        if level == rank - 1:
            if n <= 1:
                out.append("{" + ", ".join(strs[offset:offset + n]) + "}")
            else:
                out.append("{ " + ", ".join(strs[offset:offset + n]) + " }")
            return
        if rank > 3 and level > 0:
            out.append(f"{{ /*i{level - 1}={last_index}*/" + (" " if n > 0 else ""))
        else:
            out.append("{ ")
        stride = strides[level]
        for i in range(n):
            rec(level + 1, offset + i * stride, i)
            if i < n - 1:
                out.append(", ")
        out.append(" }")

    rec(0, 0, 0)
    return "".join(out)


def format_literal(literal: Literal, shape: Shape | None = None) -> str:
    """The text inside `constant(...)`; `{...}` for an elided literal."""
    shape = shape if shape is not None else literal.shape
    value = literal.value
    if value is None:
        return "{...}"
    if shape.is_tuple:
        parts = [format_literal(v, s) for v, s in zip(value, shape.tuple_shapes)]
        return "( " + ", ".join(parts) + " )"
    if not shape.is_array:
        return "token"
    arr = np.asarray(value)
    strs = element_strings(shape.element_type, arr, scalar=shape.rank == 0)
    return format_array_text(strs, shape.dims)
