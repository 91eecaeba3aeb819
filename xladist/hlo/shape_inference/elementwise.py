"""Shape rules of element-wise ops and conversions (operation semantics: element-wise unary,
binary and comparison ops, Select, Clamp, ConvertElementType, BitcastConvertType,
ReducePrecision).

Operands of binary/ternary ops must already have the same dimensions: implicit broadcasting is
the builder's job, as in XLA's HLO (only XlaBuilder broadcasts). Type rules follow
shape_inference.cc (InferUnaryOpShape / InferBinaryOpShape).
"""

from __future__ import annotations

from ..shape import PRIMITIVE_TYPES
from .base import (PRED, ShapeError, expect_array, expect_count, fmt, fmt_all,
                                   like, need_declared)

INT = frozenset({"sint", "uint"})
FLOAT = frozenset({"float"})
COMPLEX = frozenset({"complex"})
SIGNED = frozenset({"sint", "float"})
ANY = frozenset({"pred", "sint", "uint", "float", "complex"})

_COMPONENT = {"c64": "f32", "c128": "f64"}


def _component(t):
    return PRIMITIVE_TYPES[_COMPONENT[t.name]]


def _same(t):
    return t


def _to_pred(t):
    return PRED


def _component_if_complex(t):
    return _component(t) if t.kind == "complex" else t


# opcode -> (element kinds accepted, description for messages, result element type of operand's)
_UNARY = {}


def _unary_rows(names, kinds, wanted, result=_same):
    for name in names:
        _UNARY[name] = (kinds, wanted, result)


# Rounding is defined on floats only.
_unary_rows(("floor", "ceil", "round-nearest-afz", "round-nearest-even"), FLOAT, "floating-point")
# Transcendentals take floats or complex numbers; erf and cbrt have no complex form in XLA
# ("Expected element type in shape to be floating for cbrt operation; got C64").
_unary_rows(("sqrt", "rsqrt", "exponential", "exponential-minus-one", "log",
             "log-plus-one", "logistic", "sine", "cosine", "tan", "tanh", "acos", "acosh", "asin",
             "asinh", "atan", "atanh", "cosh", "sinh"), FLOAT | COMPLEX,
            "floating-point or complex")
_unary_rows(("erf", "cbrt"), FLOAT, "floating-point")
# real/imag/abs of a complex number are its float component type.
_unary_rows(("real", "imag"), FLOAT | COMPLEX, "floating-point or complex", _component_if_complex)
_unary_rows(("abs",), SIGNED | COMPLEX, "signed, floating-point or complex",
            _component_if_complex)
_unary_rows(("sign",), SIGNED | COMPLEX, "signed, floating-point or complex")
_unary_rows(("negate",), INT | FLOAT | COMPLEX, "integer, floating-point or complex")
_unary_rows(("popcnt", "count-leading-zeros"), INT, "integer")
_unary_rows(("not",), INT | {"pred"}, "pred or integer")
_unary_rows(("is-finite",), FLOAT, "floating-point", _to_pred)


def unary(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (x,) = shapes
    kinds, wanted, result = _UNARY[op]
    expect_array(x, "operand")
    if x.element_type.kind not in kinds:
        raise ShapeError(f"operand must have {wanted} elements, got {fmt(x)}")
    return like(x, result(x.element_type))


def copy(op, shapes, attrs, declared):
    # copy is the identity on any shape (tuples included); it may change the layout.
    expect_count(shapes, 1)
    return shapes[0]


# opcode -> (kinds accepted, description); result type = operand type.
_BINARY = {}


def _binary_rows(names, kinds, wanted):
    for name in names:
        _BINARY[name] = (kinds, wanted)


_binary_rows(("add", "multiply", "maximum", "minimum"), ANY, "array")
# Arithmetic that is meaningless on booleans (XLA rejects PRED for these).
_binary_rows(("subtract", "divide", "remainder", "power", "atan2"),
             INT | FLOAT | COMPLEX, "numeric")
_binary_rows(("shift-left", "shift-right-arithmetic", "shift-right-logical", "mulhi"), INT,
             "integer")
_binary_rows(("and", "or", "xor"), INT | {"pred"}, "pred or integer")


def _same_shape_operands(shapes, names=("lhs", "rhs")) -> None:
    for s, n in zip(shapes, names):
        expect_array(s, n)
    a = shapes[0]
    for s, n in zip(shapes[1:], names[1:]):
        if s.element_type != a.element_type:
            raise ShapeError(f"{names[0]} and {n} must have the same element type, got "
                             f"{fmt_all(shapes)}")
        if s.dims != a.dims:
            raise ShapeError(f"{names[0]} and {n} must have the same dimensions (broadcast "
                             f"explicitly first), got {fmt_all(shapes)}")


def _merged_dynamic(shapes):
    return tuple(any(s.dynamic[i] for s in shapes) for i in range(shapes[0].rank))


def binary(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    kinds, wanted = _BINARY[op]
    _same_shape_operands(shapes)
    lhs = shapes[0]
    if lhs.element_type.kind not in kinds:
        raise ShapeError(f"operands must have {wanted} elements, got {fmt_all(shapes)}")
    return like(lhs, dims=lhs.dims, dynamic=_merged_dynamic(shapes))


def complex_(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    _same_shape_operands(shapes, ("real part", "imaginary part"))
    t = shapes[0].element_type.name
    if t not in ("f32", "f64"):
        raise ShapeError(f"operands must be f32 (-> c64) or f64 (-> c128), got "
                         f"{fmt_all(shapes)}")
    return like(shapes[0], PRIMITIVE_TYPES["c64" if t == "f32" else "c128"])


_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
_COMPARE_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")
# The comparison types each element kind takes, its default first (XLA's verifier,
# CheckCompareType; semantics/compare.py reads the default from here).
COMPARE_TYPES_OF_KIND = {"float": ("FLOAT", "TOTALORDER"), "complex": ("FLOAT",), "sint": ("SIGNED",),
                         "uint": ("UNSIGNED",), "pred": ("UNSIGNED",)}


def compare(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    _same_shape_operands(shapes)
    direction = attrs.get("direction")
    if direction is None:
        raise ShapeError("missing required attribute direction= (EQ, NE, LT, LE, GT, GE)")
    if direction not in _DIRECTIONS:
        raise ShapeError(f"direction={direction} is not one of {', '.join(_DIRECTIONS)}")
    ctype = attrs.get("type")
    if ctype is not None and ctype not in _COMPARE_TYPES:
        raise ShapeError(f"type={ctype} is not one of {', '.join(_COMPARE_TYPES)}")
    allowed = COMPARE_TYPES_OF_KIND[shapes[0].element_type.kind]
    if ctype is not None and ctype not in allowed:
        # XLA's verifier refuses the rest ("Expected comparison type SIGNED"): a type
        # names how the operands' bits are read, and only these read them as they are.
        raise ShapeError(f"type={ctype} does not compare {fmt_all(shapes)}: "
                         f"{shapes[0].element_type.name} takes type={' or '.join(allowed)}")
    if shapes[0].element_type.is_complex and direction not in ("EQ", "NE"):
        # XLA orders no complex numbers: its evaluator and CPU emitter have EQ and NE only.
        raise ShapeError(f"complex operands can only be compared with EQ or NE, got "
                         f"direction={direction} for {fmt_all(shapes)}")
    return like(shapes[0], PRED)


def select(op, shapes, attrs, declared):
    expect_count(shapes, 3)
    pred, on_true, on_false = shapes
    expect_array(pred, "predicate")
    _same_shape_operands([on_true, on_false], ("on_true", "on_false"))
    if pred.element_type != PRED:
        raise ShapeError(f"predicate must be pred, got {fmt(pred)} (on_true {fmt(on_true)})")
    if pred.rank != 0 and pred.dims != on_true.dims:
        raise ShapeError(f"predicate must be pred[] or have the operands' dimensions, got "
                         f"predicate {fmt(pred)}, on_true {fmt(on_true)}")
    return like(on_true)


def clamp(op, shapes, attrs, declared):
    expect_count(shapes, 3)
    lo, x, hi = shapes
    for s, n in ((lo, "min"), (x, "operand"), (hi, "max")):
        expect_array(s, n)
    for s, n in ((lo, "min"), (hi, "max")):
        if s.element_type != x.element_type:
            raise ShapeError(f"{n} must have the operand's element type, got min {fmt(lo)}, "
                             f"operand {fmt(x)}, max {fmt(hi)}")
        if s.rank != 0 and s.dims != x.dims:
            raise ShapeError(f"{n} must be a scalar or have the operand's dimensions, got "
                             f"min {fmt(lo)}, operand {fmt(x)}, max {fmt(hi)}")
    return like(x)


def convert(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    d = need_declared(declared, "the target element type is only in the result shape")
    if not d.is_array:
        raise ShapeError(f"result must be an array, got {fmt(d)}")
    if d.dims != x.dims:
        raise ShapeError(f"result {fmt(d)} must have the operand's dimensions {fmt(x)}")
    if x.element_type.is_complex and not d.element_type.is_complex:
        # As XLA's InferConvertShape: take real (or imag) first, as JAX does.
        raise ShapeError(f"cannot convert complex {fmt(x)} to the real type {fmt(d)}; "
                         "take its real part (real) or imaginary part (imag) instead")
    return d


def bitcast_convert(op, shapes, attrs, declared):
    """Same bits, new element type: a narrower target adds a minor dimension of size
    ratio, a wider target removes a last dimension that must equal the ratio."""
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    d = need_declared(declared, "the target element type is only in the result shape")
    if not d.is_array:
        raise ShapeError(f"result must be an array, got {fmt(d)}")
    src, dst = x.element_type, d.element_type
    if (src.kind == "complex") != (dst.kind == "complex"):
        raise ShapeError(f"cannot bitcast between complex and real types: {fmt(x)} -> {fmt(d)}")
    a, b = src.bits, dst.bits
    if a == b:
        expected = x.dims
    elif max(a, b) % min(a, b):
        raise ShapeError(f"bit widths {a} and {b} do not divide: {fmt(x)} -> {fmt(d)}")
    elif a > b:
        expected = x.dims + (a // b,)
    else:
        if not x.dims or x.dims[-1] != b // a:
            raise ShapeError(f"{fmt(x)} -> {dst.name}: the last dimension must be {b // a} "
                             f"(the ratio of bit widths) to bitcast to a wider type")
        expected = x.dims[:-1]
    if d.dims != expected:
        raise ShapeError(f"result {fmt(d)} should have dimensions {list(expected)} for "
                         f"{fmt(x)} -> {dst.name}")
    return d


def reduce_precision(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    if not x.element_type.is_float:
        raise ShapeError(f"operand must be floating-point, got {fmt(x)}")
    e, m = attrs.get("exponent_bits"), attrs.get("mantissa_bits")
    if e is None or m is None:
        raise ShapeError("needs exponent_bits= and mantissa_bits=")
    if e < 1 or m < 0:
        raise ShapeError(f"exponent_bits={e} must be >= 1 and mantissa_bits={m} >= 0 "
                         f"(operand {fmt(x)})")
    return like(x)


def stochastic_convert(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    x, bits = shapes
    expect_array(x, "operand")
    expect_array(bits, "random bits")
    if not x.element_type.is_float:
        raise ShapeError(f"operand must be floating-point, got {fmt(x)}")
    if bits.element_type.kind != "uint" or bits.element_type.bits != x.element_type.bits:
        raise ShapeError(f"random bits must be unsigned with the operand's width, got operand "
                         f"{fmt(x)}, random {fmt(bits)}")
    if bits.dims != x.dims:
        raise ShapeError(f"random bits {fmt(bits)} must have the operand's dimensions {fmt(x)}")
    d = need_declared(declared, "the target element type is only in the result shape")
    if not d.is_array or d.dims != x.dims:
        raise ShapeError(f"result {fmt(d)} must be an array with the operand's dimensions "
                         f"{fmt(x)}")
    return d


RULES = {name: unary for name in _UNARY}
RULES["copy"] = copy
RULES.update({name: binary for name in _BINARY})
RULES.update({
    "complex": complex_,
    "compare": compare,
    "select": select,
    "clamp": clamp,
    "convert": convert,
    "bitcast-convert": bitcast_convert,
    "reduce-precision": reduce_precision,
    "stochastic-convert": stochastic_convert,
})
