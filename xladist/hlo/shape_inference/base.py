"""Helpers shared by the shape-rule families (shape_inference_*.py).

A shape rule is `rule(opcode, operand_shapes, attrs, declared) -> Shape`; it raises ShapeError
with a message naming the operand shapes and attributes involved. `infer_shape` (in
shape_inference.py) prefixes the opcode, so messages here start with what went wrong.
"""

from __future__ import annotations

from typing import Callable

from ..shape import PRIMITIVE_TYPES, PrimitiveType, Shape

Rule = Callable[[str, list, dict, "Shape | None"], Shape]

PRED = PRIMITIVE_TYPES["pred"]
S32 = PRIMITIVE_TYPES["s32"]
U32 = PRIMITIVE_TYPES["u32"]
U64 = PRIMITIVE_TYPES["u64"]

_MISSING = object()


class ShapeError(ValueError):
    """Operands or attributes that break an operation's shape rules."""


def fmt(shape: Shape) -> str:
    """A shape as people read it in messages: `f32[2,3]`, `(s32[], f32[4])` (no layouts)."""
    return shape.to_text(layout=False)


def fmt_all(shapes) -> str:
    return ", ".join(fmt(s) for s in shapes)


def fmt_dims(dims) -> str:
    return "{" + ",".join(str(d) for d in dims) + "}"


def make(element_type: PrimitiveType | str, dims, dynamic=None) -> Shape:
    """A new array shape with the default layout."""
    return Shape.array(element_type, dims, dynamic=dynamic).with_default_layouts()


def like(shape: Shape, element_type: PrimitiveType | None = None, dims=None,
         dynamic=None) -> Shape:
    """`shape` with a new element type and/or dims (default layout, dynamic kept if dims kept)."""
    t = element_type if element_type is not None else shape.element_type
    if dims is None:
        return make(t, shape.dims, shape.dynamic)
    return make(t, dims, dynamic)


def tuple_or_single(shapes: list[Shape]) -> Shape:
    """One result shape for one operand, a tuple for several (variadic ops)."""
    return shapes[0] if len(shapes) == 1 else Shape.tuple_of(shapes)


def attr(attrs: dict, name: str, default=_MISSING):
    """An attribute value; a missing attribute without default is a ShapeError."""
    if name in attrs and attrs[name] is not None:
        return attrs[name]
    if default is _MISSING:
        raise ShapeError(f"missing required attribute {name}=")
    return default


def need_declared(declared: Shape | None, why: str) -> Shape:
    """The declared result shape, or an error saying why one has to be given."""
    if declared is None:
        raise ShapeError(f"the result shape cannot be derived from the operands ({why}); "
                         "give the result shape explicitly")
    return declared


def expect_count(shapes: list, n: int | tuple[int, ...], what: str = "operands") -> None:
    allowed = (n,) if isinstance(n, int) else n
    if len(shapes) not in allowed:
        want = " or ".join(str(a) for a in allowed)
        raise ShapeError(f"expects {want} {what}, got {len(shapes)} ({fmt_all(shapes)})")


def expect_array(shape: Shape, role: str) -> None:
    if not shape.is_array:
        raise ShapeError(f"{role} must be an array, got {fmt(shape)}")


def expect_token(shape: Shape, role: str) -> None:
    if not shape.is_token:
        raise ShapeError(f"{role} must be token[], got {fmt(shape)}")


def expect_scalar(shape: Shape, role: str) -> None:
    if not shape.is_array or shape.rank != 0:
        raise ShapeError(f"{role} must be a scalar, got {fmt(shape)}")


def expect_kind(shape: Shape, kinds: set[str] | frozenset[str], role: str,
                wanted: str) -> None:
    if shape.element_type.kind not in kinds:
        raise ShapeError(f"{role} must have {wanted} elements, got {fmt(shape)}")


def check_dim_list(dims, rank: int, what: str, shape: Shape, *, unique: bool = True) -> None:
    """Every entry a dimension of `shape` (0 <= d < rank), no repeats."""
    for d in dims:
        if not 0 <= d < rank:
            raise ShapeError(f"{what}={fmt_dims(dims)}: dimension {d} is out of range for "
                             f"{fmt(shape)} (rank {rank})")
    if unique and len(set(dims)) != len(dims):
        raise ShapeError(f"{what}={fmt_dims(dims)} repeats a dimension (operand {fmt(shape)})")


def check_permutation(dims, rank: int, what: str, shape: Shape) -> None:
    if sorted(dims) != list(range(rank)):
        raise ShapeError(f"{what}={fmt_dims(dims)} is not a permutation of the {rank} "
                         f"dimensions of {fmt(shape)}")


def same_type(a: Shape, b: Shape) -> bool:
    return a.element_type == b.element_type


def check_declared_array(declared: Shape, role: str = "result") -> None:
    if not declared.is_array:
        raise ShapeError(f"{role} shape must be an array, got {fmt(declared)}")


def program_shape(comp, role: str) -> tuple[list[Shape], Shape]:
    """(parameter shapes, result shape) of a called computation, with a clear error if absent."""
    if comp is None:
        raise ShapeError(f"missing called computation {role}=")
    if not hasattr(comp, "program_shape"):
        raise ShapeError(f"{role}= must name a computation, got {comp!r}")
    if comp.root is None:
        raise ShapeError(f"called computation {comp.name} ({role}=) has no root instruction")
    return comp.program_shape()


def signature(comp) -> str:
    params, result = comp.program_shape()
    return f"{comp.name} ({fmt_all(params)}) -> {fmt(result)}"


def check_reducer(comp, role: str, init_shapes: list[Shape], input_types: list[PrimitiveType],
                  ) -> list[Shape]:
    """A reduction computation: (acc_1..acc_N, x_1..x_N) -> (acc_1..acc_N), all scalars.

    Accumulators match the init values' types, inputs match the reduced arrays' element types
    (XLA's VerifyReducerShape). Returns the accumulator shapes.
    """
    params, result = program_shape(comp, role)
    n = len(init_shapes)
    if len(params) != 2 * n:
        raise ShapeError(f"{role}={signature(comp)} must take {2 * n} scalar parameters "
                         f"({n} accumulators then {n} inputs), takes {len(params)}")
    if result.is_tuple:
        accs = list(result.tuple_shapes)
        if len(accs) != n:
            raise ShapeError(f"{role}={signature(comp)} must return {n} scalars, "
                             f"returns {len(accs)}")
    else:
        if n != 1:
            raise ShapeError(f"{role}={signature(comp)} must return a tuple of {n} scalars")
        accs = [result]
    for i, acc in enumerate(accs):
        if not acc.is_array or acc.rank != 0:
            raise ShapeError(f"{role}={signature(comp)} must return scalars, result {i} is "
                             f"{fmt(acc)}")
        if not acc.compatible(params[i]):
            raise ShapeError(f"{role}={signature(comp)}: parameter {i} ({fmt(params[i])}) must "
                             f"have the result's shape {fmt(acc)}")
        init = init_shapes[i]
        if not (init.is_array and init.rank == 0 and init.element_type == acc.element_type):
            raise ShapeError(f"{role}={signature(comp)}: init value {i} is {fmt(init)} but the "
                             f"accumulator is {fmt(acc)}")
        x = params[n + i]
        if not (x.is_array and x.rank == 0 and x.element_type == input_types[i]
                and x.element_type == acc.element_type):
            raise ShapeError(f"{role}={signature(comp)}: parameter {n + i} is {fmt(x)} but the "
                             f"reduced input {i} has {input_types[i]} elements")
    return accs


def window_output_dims(base: tuple[int, ...], window, role: str,
                       operand: Shape) -> tuple[int, ...]:
    """Output size per dimension of a window sliding over a (dilated, padded) base.

    dilated base = (b-1)*base_dilation+1, padded = low + dilated + high,
    dilated window = (w-1)*window_dilation+1, out = (padded - dilated window)//stride + 1
    (0 when the window does not fit), as in XLA's InferWindowOutputShape.
    """
    dims = window.dims if window is not None else ()
    if len(dims) != len(base):
        raise ShapeError(f"{role} window has {len(dims)} dimensions but operand {fmt(operand)} "
                         f"has rank {len(base)}")
    out = []
    for i, (b, w) in enumerate(zip(base, dims)):
        if w.size <= 0 or w.stride <= 0 or w.base_dilation < 1 or w.window_dilation < 1:
            raise ShapeError(f"{role} window {window.to_text()}: dimension {i} needs size>0, "
                             "stride>0 and dilations>=1")
        dilated = (b - 1) * w.base_dilation + 1 if b > 0 else 0
        padded = w.padding_low + dilated + w.padding_high
        dwin = (w.size - 1) * w.window_dilation + 1
        out.append(0 if padded < dwin else (padded - dwin) // w.stride + 1)
    return tuple(out)
