"""A collective's to_apply computation in its operand's element type.

XLA:CPU's float normalization widens an all-reduce (or reduce-scatter) over a type the CPU
cannot reduce in (f8e4m3fn, f8e5m2, ...) to f16 but leaves its to_apply computation in the
narrow type: `f16[2,4] all-reduce(...), to_apply=%r` with `%r (f8e4m3fn[], f8e4m3fn[]) ->
f8e4m3fn[]`. XLA's runtime reduces in the operand's type with the op the computation names
(its reduction kind), so the computation's own element type does not take part. `retyped`
gives that meaning to both backends: the same computation with its element type replaced by
the operand's, for a float computation of scalar element-wise ops (no constants of the type,
no called computations); `reducer_for` picks the computation a collective applies.
"""

from __future__ import annotations

from .ir import Computation, Instruction
from .shape import Shape


def _signature_type(comp: Computation):
    """T when `comp` is (T[], T[]) -> T[] with T a float type, else None."""
    params = comp.parameters
    root = comp.root
    if len(params) != 2 or root is None:
        return None
    shapes = [p.shape for p in params] + [root.shape]
    if not all(s.is_array and s.rank == 0 for s in shapes):
        return None
    types = {s.element_type for s in shapes}
    if len(types) != 1:
        return None
    (t,) = types
    return t if t.is_float else None


def retyped(comp: Computation, element_type) -> Computation | None:
    """`comp` computed in `element_type` (module doc); None when it cannot be: not a float
    scalar binary computation, a constant or a called computation of the old type, or a
    non-float target."""
    old = _signature_type(comp)
    if old is None or not element_type.is_float:
        return None
    if old == element_type:
        return comp
    cache = comp.__dict__.setdefault("_retyped", {})
    if element_type in cache:
        return cache[element_type]
    new: dict[Instruction, Instruction] = {}
    for instr in comp.instructions:
        if instr.called_computations() or (instr.opcode == "constant"
                                           and instr.shape.element_type == old):
            cache[element_type] = None
            return None
        shape: Shape = instr.shape
        if shape.is_array and shape.element_type == old:
            shape = shape.with_element_type(element_type)
        clone = Instruction(instr.name, instr.opcode, shape, attrs=instr.attrs,
                            parameter_number=instr.parameter_number, literal=instr.literal)
        clone.line = instr.line
        new[instr] = clone
    for instr in comp.instructions:
        new[instr].operands = [new[o] for o in instr.operands]
    out = Computation(f"{comp.name}.{element_type.name}", [new[i] for i in comp.instructions],
                      new[comp.root])
    out.module = comp.module
    cache[element_type] = out
    return out


def reducer_for(instr: Instruction) -> Computation | None:
    """The computation collective `instr` reduces with: its to_apply, retyped to its
    operands' element type when they share one that differs (module doc)."""
    comp = instr.attrs.get("to_apply")
    if comp is None:
        return None
    types = {s.element_type for o in instr.operands for _, s in o.shape.leaves() if s.is_array}
    if len(types) != 1:
        return comp
    (t,) = types
    if _signature_type(comp) in (None, t):
        return comp
    return retyped(comp, t) or comp
