"""Shape inference: the result shape of an HLO instruction from its operands and attributes.

One rule per opcode in SHAPE_RULES, filled family by family from this package's modules
(elementwise, shaping, reduction, linalg, control, collective; helpers in base.py). XLA's
shape_inference.cc and the operation semantics are the reference. Opcodes without a
rule are listed in UNSUPPORTED with the reason; a test proves that together they cover
opcodes.OPCODES.

    >>> from xladist.hlo.shape import Shape
    >>> infer_shape("dot", [Shape.array("f32", (2, 3)), Shape.array("f32", (3, 5))],
    ...             {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)})
    Shape(f32[2,5]{1,0})

Rules build new shapes with default layouts; shapes passed through (tuple elements, called
computation results, collectives' operands) keep theirs. Compare with `Shape.compatible`.
"""

from __future__ import annotations

from . import collective, control, elementwise, linalg, reduction, shaping
from ..shape import Shape
from .base import Rule, ShapeError, fmt_all

__all__ = ["infer_shape", "ShapeError", "SHAPE_RULES", "UNSUPPORTED"]

SHAPE_RULES: dict[str, Rule] = {}
for _family in (elementwise, shaping, reduction, linalg, control, collective):
    _overlap = SHAPE_RULES.keys() & _family.RULES.keys()
    assert not _overlap, f"shape rules registered twice: {sorted(_overlap)}"
    SHAPE_RULES.update(_family.RULES)

# Opcodes that parse but whose shapes we do not derive; the verifier trusts the declared shape.
UNSUPPORTED: dict[str, str] = {
    "shuffle": "XLA 2025 opcode whose semantics are not published in operation semantics yet",
    "scan": "XLA 2025 opcode (carries + scanned outputs); not modelled by xladist yet",
    "collective-reduce": "XLA 2025 opcode whose semantics are not published in operation "
                         "semantics yet",
}


def infer_shape(opcode: str, operand_shapes: list[Shape], attrs: dict,
                declared: Shape | None = None) -> Shape:
    """The result shape of `opcode` applied to operands of `operand_shapes` with `attrs`.

    `attrs` holds typed attribute values as documented in opcodes.py (called computations as
    ir.Computation objects). `declared` is the shape written in the text (or asked for by the
    builder): ops whose result is not derivable from operands and attributes (constant,
    parameter, convert, reshape, broadcast, iota, custom-call, recv, ...) validate it and return
    it, and raise if it is None. The element type of dot/convolution follows `declared` when
    given (XLA's preferred_element_type).

    Raises ShapeError (a ValueError) whose message starts with the opcode and names the operand
    shapes and attributes involved.
    """
    rule = SHAPE_RULES.get(opcode)
    if rule is None:
        if opcode in UNSUPPORTED:
            if declared is None:
                raise ShapeError(f"{opcode}: shape inference is not supported "
                                 f"({UNSUPPORTED[opcode]}); give the result shape explicitly")
            return declared
        raise ShapeError(f"{opcode}: unknown opcode (operands {fmt_all(operand_shapes)})")
    try:
        return rule(opcode, list(operand_shapes), attrs or {}, declared)
    except ShapeError as e:
        raise ShapeError(f"{opcode}: {e}") from None
    except (IndexError, KeyError, TypeError, AttributeError) as e:
        # Malformed attribute values (wrong kind, wrong length) are user input errors too.
        raise ShapeError(f"{opcode}: malformed operands or attributes ({type(e).__name__}: {e}); "
                         f"operands {fmt_all(operand_shapes)}, attributes "
                         f"{sorted(attrs or {})}") from None
