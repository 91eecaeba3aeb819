"""Element-wise ops: unary, binary (with broadcasting), compare, select, clamp, conversions.

The unary and binary families are generated from the tables below (method name -> HLO
opcode); every binary op goes through `ElementwiseMixin._binary`, which applies XLA's
broadcasting rules (broadcasting.py) before emitting the same-shape HLO instruction.
"""

from __future__ import annotations

import keyword
from collections.abc import Sequence

from ..hlo.shape import Shape
from .broadcasting import binary_plan, nary_plan
from .core import XlaOp, as_type

# Method name -> opcode. Names follow XLA's client API (Exp, Neg, Log1p, ...) in
# lower case; `not_` has the underscore because `not` is a Python keyword.
UNARY_OPS = {
    "abs": "abs", "ceil": "ceil", "floor": "floor", "neg": "negate", "not_": "not",
    "sign": "sign", "population_count": "popcnt", "clz": "count-leading-zeros",
    "round": "round-nearest-afz", "round_nearest_even": "round-nearest-even",
    "is_finite": "is-finite", "real": "real", "imag": "imag", "copy": "copy",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "cbrt": "cbrt", "exp": "exponential",
    "expm1": "exponential-minus-one", "log": "log", "log1p": "log-plus-one",
    "logistic": "logistic", "sin": "sine", "cos": "cosine", "tan": "tan", "tanh": "tanh",
    "erf": "erf", "acos": "acos", "acosh": "acosh", "asin": "asin", "asinh": "asinh",
    "atan": "atan", "atanh": "atanh", "cosh": "cosh", "sinh": "sinh",
}

BINARY_OPS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "rem": "remainder",
    "pow": "power", "atan2": "atan2", "max": "maximum", "min": "minimum", "and_": "and",
    "or_": "or", "xor": "xor", "shift_left": "shift-left",
    "shift_right_arithmetic": "shift-right-arithmetic",
    "shift_right_logical": "shift-right-logical", "complex": "complex", "mulhi": "mulhi",
}

COMPARISON_DIRECTIONS = {"eq": "EQ", "ne": "NE", "lt": "LT", "le": "LE", "gt": "GT", "ge": "GE"}
COMPARISON_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")


def _alias(opcode: str) -> str | None:
    """The opcode spelled as a method name (`exponential_minus_one`), None for keywords."""
    name = opcode.replace("-", "_")
    return None if keyword.iskeyword(name) else name


def _make_unary(method: str, opcode: str):
    def unary(self, operand: XlaOp) -> XlaOp:
        return self._add(opcode, [operand])
    unary.__name__ = method
    unary.__doc__ = f"Element-wise `{opcode}` (XLA operation semantics: element-wise unary)."
    return unary


def _make_binary(method: str, opcode: str):
    def binary(self, lhs, rhs, broadcast_dimensions: Sequence[int] | None = None) -> XlaOp:
        return self._binary(opcode, lhs, rhs, broadcast_dimensions)
    binary.__name__ = method
    binary.__doc__ = (f"Element-wise `{opcode}` with XLA's implicit broadcasting: scalars "
                      "broadcast, different ranks need `broadcast_dimensions` (lower-rank "
                      "operand dim i -> higher-rank dim broadcast_dimensions[i]), same-rank "
                      "size-1 dimensions stretch.")
    return binary


def _make_compare(method: str, direction: str):
    def compare(self, lhs, rhs, broadcast_dimensions: Sequence[int] | None = None, *,
                compare_type: str | None = None) -> XlaOp:
        return self.compare(lhs, rhs, direction, broadcast_dimensions,
                            compare_type=compare_type)
    compare.__name__ = method
    compare.__doc__ = f"`compare`, direction={direction}; broadcasting as in add."
    return compare


class ElementwiseMixin:
    # ---- broadcasting ------------------------------------------------------
    def _apply_plan(self, op: XlaOp, plan, out_dims) -> XlaOp:
        if plan.identity:
            return op
        if plan.reshape_to is not None:
            op = self.reshape(op, plan.reshape_to)
        return self.broadcast_in_dim(op, out_dims, plan.dimensions)

    def _binary(self, opcode: str, lhs, rhs, broadcast_dimensions=None,
                attrs: dict | None = None) -> XlaOp:
        lhs, rhs = self._coerce_pair(lhs, rhs)
        for o in (lhs, rhs):
            self._check_operand(o, opcode)
        if lhs.shape.is_array and rhs.shape.is_array:
            out, lp, rp = binary_plan(
                lhs.dims, rhs.dims, broadcast_dimensions, what=f"{opcode} in {self.name}",
                lhs_text=lhs.shape.to_text(layout=False), rhs_text=rhs.shape.to_text(layout=False))
            lhs = self._apply_plan(lhs, lp, out)
            rhs = self._apply_plan(rhs, rp, out)
        return self._add(opcode, [lhs, rhs], attrs)

    def _coerce_pair(self, lhs, rhs):
        if isinstance(lhs, XlaOp):
            return lhs, self._coerce(rhs, like=lhs)
        if isinstance(rhs, XlaOp):
            return self._coerce(lhs, like=rhs), rhs
        return self._coerce(lhs), self._coerce(rhs)

    def broadcast_to_common(self, *operands, what: str = "op") -> list[XlaOp]:
        """Scalars broadcast to the common shape; same-rank operands stretch size-1 dims."""
        ops = [self._coerce(o) for o in operands]
        arrays = [o for o in ops if o.shape.is_array]
        like = arrays[0] if arrays else None
        ops = [self._coerce(o, like=like) for o in operands]
        out, plans = nary_plan([o.dims for o in ops], what=f"{what} in {self.name}",
                               texts=[o.shape.to_text(layout=False) for o in ops])
        return [self._apply_plan(o, p, out) for o, p in zip(ops, plans)]

    # ---- compare / select / clamp ------------------------------------------------
    def compare(self, lhs, rhs, direction: str, broadcast_dimensions=None, *,
                compare_type: str | None = None) -> XlaOp:
        """`compare` with direction EQ/NE/LT/LE/GT/GE; compare_type (FLOAT, TOTALORDER,
        SIGNED, UNSIGNED) is set only when given (XLA's default follows the element type)."""
        direction = direction.upper()
        if direction not in COMPARISON_DIRECTIONS.values():
            raise ValueError(f"compare direction {direction!r} is not one of "
                             f"{sorted(COMPARISON_DIRECTIONS.values())}")
        if compare_type is not None and compare_type.upper() not in COMPARISON_TYPES:
            raise ValueError(f"compare type {compare_type!r} is not one of {COMPARISON_TYPES}")
        attrs = {"direction": direction,
                 "type": compare_type.upper() if compare_type else None}
        return self._binary("compare", lhs, rhs, broadcast_dimensions, attrs)

    def shift_right(self, lhs, rhs, broadcast_dimensions=None) -> XlaOp:
        """`>>`: arithmetic for signed element types, logical for unsigned."""
        lhs, rhs = self._coerce_pair(lhs, rhs)
        opcode = ("shift-right-arithmetic" if lhs.element_type.kind == "sint"
                  else "shift-right-logical")
        return self._binary(opcode, lhs, rhs, broadcast_dimensions)

    def select(self, pred, on_true, on_false) -> XlaOp:
        """Element-wise choice; a scalar predicate or branch value is broadcast."""
        on_true, on_false = self._coerce_pair(on_true, on_false)
        ops = self.broadcast_to_common(self._coerce(pred), on_true, on_false, what="select")
        return self._add("select", ops)

    def clamp(self, min_value, operand, max_value) -> XlaOp:
        """min(max(operand, min_value), max_value); scalar bounds are broadcast."""
        operand = self._coerce(operand)
        lo, x, hi = self.broadcast_to_common(self._coerce(min_value, like=operand), operand,
                                             self._coerce(max_value, like=operand),
                                             what="clamp")
        return self._add("clamp", [lo, x, hi])

    # ---- conversions -------------------------------------------------------
    def convert(self, operand: XlaOp, new_element_type) -> XlaOp:
        """Element-type conversion (XLA ConvertElementType)."""
        t = as_type(new_element_type)
        operand = self._operand(operand, "convert")
        return self._add("convert", [operand], declared=operand.shape.with_element_type(t))

    def bitcast_convert(self, operand: XlaOp, new_element_type) -> XlaOp:
        """Reinterpret bits. To a narrower type a minor dimension of size ratio is added;
        to a wider type the minor dimension (of that size) is consumed (BitcastConvertType)."""
        t = as_type(new_element_type)
        operand = self._operand(operand, "bitcast-convert")
        src = operand.element_type
        dims = operand.dims
        if t.bits < src.bits:
            dims = dims + (src.bits // t.bits,)
        elif t.bits > src.bits:
            dims = dims[:-1]
        return self._add("bitcast-convert", [operand], declared=Shape.array(t, dims))

    def reduce_precision(self, operand: XlaOp, exponent_bits: int, mantissa_bits: int) -> XlaOp:
        operand = self._operand(operand, "reduce-precision")
        return self._add("reduce-precision", [operand],
                         {"exponent_bits": int(exponent_bits),
                          "mantissa_bits": int(mantissa_bits)},
                         declared=operand.shape)

    def stochastic_convert(self, operand: XlaOp, random: XlaOp, new_element_type) -> XlaOp:
        t = as_type(new_element_type)
        operand = self._operand(operand, "stochastic-convert")
        return self._add("stochastic-convert", [operand, random],
                         declared=operand.shape.with_element_type(t))


for _m, _op in UNARY_OPS.items():
    setattr(ElementwiseMixin, _m, _make_unary(_m, _op))
    if _alias(_op) and not hasattr(ElementwiseMixin, _alias(_op)):
        setattr(ElementwiseMixin, _alias(_op), _make_unary(_alias(_op), _op))
for _m, _op in BINARY_OPS.items():
    setattr(ElementwiseMixin, _m, _make_binary(_m, _op))
    if _alias(_op) and not hasattr(ElementwiseMixin, _alias(_op)):
        setattr(ElementwiseMixin, _alias(_op), _make_binary(_alias(_op), _op))
for _m, _d in COMPARISON_DIRECTIONS.items():
    setattr(ElementwiseMixin, _m, _make_compare(_m, _d))
