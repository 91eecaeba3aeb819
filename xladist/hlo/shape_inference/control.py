"""Shape rules of control flow, calls and value sources (operation semantics: Call, While,
Conditional, fusion, CustomCall, async wrappers, OptimizationBarrier, domain, parameter,
constant, RngUniform/RngNormal, RngBitGenerator).

Called computations arrive as ir.Computation attribute values; their signatures come from
`program_shape()`. Results of calls keep the callee's root shape (with its layouts), as XLA does.
"""

from __future__ import annotations

from ..shape import Shape
from .base import (PRED, S32, U32, U64, ShapeError, attr, expect_array,
                                   expect_count, expect_scalar, fmt, fmt_all, make,
                                   need_declared, program_shape, signature)


def check_arguments(comp, role: str, shapes: list[Shape]) -> Shape:
    """Arguments must match the callee's parameters (layouts ignored); returns its result."""
    params, result = program_shape(comp, role)
    if len(params) != len(shapes):
        raise ShapeError(f"{role}={signature(comp)} takes {len(params)} parameters but "
                         f"{len(shapes)} operands were given ({fmt_all(shapes)})")
    for i, (p, s) in enumerate(zip(params, shapes)):
        if not p.compatible(s):
            raise ShapeError(f"operand {i} is {fmt(s)} but parameter {i} of {role}="
                             f"{signature(comp)} is {fmt(p)}")
    return result


def call(op, shapes, attrs, declared):
    return check_arguments(attrs.get("to_apply"), "to_apply", shapes)


def fusion(op, shapes, attrs, declared):
    return check_arguments(attrs.get("calls"), "calls", shapes)


def while_(op, shapes, attrs, declared):
    """condition: S -> pred[], body: S -> S, and the init (the one operand) is S."""
    expect_count(shapes, 1)
    (init,) = shapes
    cond, body = attrs.get("condition"), attrs.get("body")
    cparams, cresult = program_shape(cond, "condition")
    bparams, bresult = program_shape(body, "body")
    if len(cparams) != 1 or len(bparams) != 1:
        raise ShapeError(f"condition={signature(cond)} and body={signature(body)} must each "
                         "take exactly one parameter (the loop state)")
    if not cresult.compatible(make(PRED, ())):
        raise ShapeError(f"condition={signature(cond)} must return pred[]")
    for what, s in (("body parameter", bparams[0]), ("body result", bresult),
                    ("condition parameter", cparams[0])):
        if not s.compatible(init):
            raise ShapeError(f"the loop state must have one shape: init is {fmt(init)} but the "
                             f"{what} is {fmt(s)} (condition={signature(cond)}, "
                             f"body={signature(body)})")
    return init


def branches(attrs) -> list:
    """The branch computations in branch-index order (pred: true is branch 0)."""
    comps = attrs.get("branch_computations")
    if comps:
        return list(comps)
    t, f = attrs.get("true_computation"), attrs.get("false_computation")
    if t is None or f is None:
        raise ShapeError("needs branch_computations= or true_computation= and "
                         "false_computation=")
    return [t, f]


def conditional(op, shapes, attrs, declared):
    """Selector pred[] (two branches) or s32[] (N branches); branch i gets operand i+1."""
    if not shapes:
        raise ShapeError("expects a branch selector and one operand per branch")
    sel, args = shapes[0], shapes[1:]
    comps = branches(attrs)
    if sel.compatible(make(PRED, ())):
        if len(comps) != 2:
            raise ShapeError(f"a pred[] selector needs exactly 2 branches, got {len(comps)}")
    elif not sel.compatible(make(S32, ())):
        raise ShapeError(f"the branch selector must be pred[] or s32[], got {fmt(sel)}")
    if len(args) != len(comps):
        raise ShapeError(f"{len(comps)} branches need {len(comps)} branch operands after the "
                         f"selector, got {len(args)} ({fmt_all(args)})")
    result = None
    for i, (comp, arg) in enumerate(zip(comps, args)):
        r = check_arguments(comp, f"branch {i}", [arg])
        if result is None:
            result = r
        elif not r.compatible(result):
            raise ShapeError(f"all branches must return one shape: branch 0 returns "
                             f"{fmt(result)}, branch {i} ({comp.name}) returns {fmt(r)}")
    return result


def custom_call(op, shapes, attrs, declared):
    d = need_declared(declared, "a custom call's result is defined by its target")
    layouts = attrs.get("operand_layout_constraints")
    if layouts is not None:
        if len(layouts) != len(shapes):
            raise ShapeError(f"operand_layout_constraints lists {len(layouts)} shapes for "
                             f"{len(shapes)} operands ({fmt_all(shapes)})")
        for i, (c, s) in enumerate(zip(layouts, shapes)):
            if not c.compatible(s):
                raise ShapeError(f"operand_layout_constraints[{i}] is {fmt(c)} but operand {i} "
                                 f"is {fmt(s)}")
    return d


def async_start(op, shapes, attrs, declared):
    """((operand shapes...), wrapped result, context...); context shapes are free-form."""
    comp = attrs.get("calls")
    result = check_arguments(comp, "calls", shapes)
    operands = Shape.tuple_of(shapes)
    if declared is None:
        return Shape.tuple_of([operands, result, make(U32, ())])
    if not declared.is_tuple or len(declared.tuple_shapes) < 2:
        raise ShapeError(f"result must be ((operands...), result, context...), got "
                         f"{fmt(declared)}")
    if not declared.tuple_shapes[0].compatible(operands):
        raise ShapeError(f"result element 0 must be the operands {fmt(operands)}, got "
                         f"{fmt(declared.tuple_shapes[0])}")
    if not declared.tuple_shapes[1].compatible(result):
        raise ShapeError(f"result element 1 must be the result of calls={signature(comp)}, got "
                         f"{fmt(declared.tuple_shapes[1])}")
    return declared


def _async_state(shapes, role):
    expect_count(shapes, 1)
    (s,) = shapes
    if not s.is_tuple or len(s.tuple_shapes) < 2:
        raise ShapeError(f"the operand must be the {role}'s state ((operands...), result, "
                         f"context...), got {fmt(s)}")
    return s


def async_update(op, shapes, attrs, declared):
    return _async_state(shapes, "async-start")


def async_done(op, shapes, attrs, declared):
    s = _async_state(shapes, "async-start")
    comp = attrs.get("calls")
    if comp is not None:
        _, result = program_shape(comp, "calls")
        if not result.compatible(s.tuple_shapes[1]):
            raise ShapeError(f"the state's result {fmt(s.tuple_shapes[1])} differs from "
                             f"calls={signature(comp)}")
    return s.tuple_shapes[1]


def passthrough(op, shapes, attrs, declared):
    """domain and opt-barrier return their operand (any shape, tuples included)."""
    expect_count(shapes, 1)
    return shapes[0]


def parameter(op, shapes, attrs, declared):
    return need_declared(declared, "a parameter's shape is its declaration")


def constant(op, shapes, attrs, declared):
    return need_declared(declared, "a constant's shape comes with its literal")


_DISTRIBUTIONS = ("rng_uniform", "rng_normal")
_BIT_ALGORITHMS = ("rng_default", "rng_three_fry", "rng_philox")
# The states XLA:CPU's rng-bit-generator takes: ThreeFry a u64[2] (key, counter), Philox
# (and rng_default, Philox on CPU) a u64[2] or u64[3]. Any other state passes XLA's verifier
# but fails when XLA expands the op ("limit index (2) must be less than or equal to
# dimension size (1)"; a u64[3] ThreeFry: "Expected instruction to have shape equal to
# (u64[2], ...)").
_RNG_STATE_SIZES = {"rng_three_fry": (2,), "rng_philox": (2, 3), "rng_default": (2, 3)}


def rng_state_problem(algorithm: str, element_type: str, dims) -> str | None:
    """Why a state of this element type and dims cannot drive `algorithm`, or None: the
    one rule, for shape inference and both backends (semantics/rng.py)."""
    sizes = _RNG_STATE_SIZES[algorithm]
    if element_type != "u64" or len(dims) != 1 or dims[0] not in sizes:
        wanted = " or ".join(f"u64[{n}]" for n in sizes)
        return (f"{algorithm} needs a {wanted} state (key, counter), got "
                f"{element_type}{list(dims)}")
    return None


def rng(op, shapes, attrs, declared):
    """rng_uniform(a, b) / rng_normal(mu, sigma): scalar parameters of the result's type."""
    dist = attr(attrs, "distribution")
    if dist not in _DISTRIBUTIONS:
        raise ShapeError(f"distribution={dist} is not one of {', '.join(_DISTRIBUTIONS)}")
    expect_count(shapes, 2)
    for s in shapes:
        expect_scalar(s, "parameter")
        if s.element_type != shapes[0].element_type:
            raise ShapeError(f"parameters must have one type, got {fmt_all(shapes)}")
    t = shapes[0].element_type
    if dist == "rng_normal" and not t.is_float:
        raise ShapeError(f"rng_normal needs floating-point parameters, got {fmt_all(shapes)}")
    d = need_declared(declared, "the result dimensions are only in the result shape")
    if not d.is_array or d.element_type != t:
        raise ShapeError(f"result {fmt(d)} must be an array of the parameters' type {t}")
    return d


def rng_bit_generator(op, shapes, attrs, declared):
    """(new state, random bits): the state keeps its shape, the bits shape is declared."""
    expect_count(shapes, 1)
    (state,) = shapes
    expect_array(state, "state")
    alg = attr(attrs, "algorithm")
    if alg not in _BIT_ALGORITHMS:
        raise ShapeError(f"algorithm={alg} is not one of {', '.join(_BIT_ALGORITHMS)}")
    problem = rng_state_problem(alg, state.element_type.name, state.dims)
    if problem:
        raise ShapeError(problem)
    d = need_declared(declared, "the shape of the random bits is only in the result shape")
    if not d.is_tuple or len(d.tuple_shapes) != 2:
        raise ShapeError(f"result must be (state, bits), got {fmt(d)}")
    new_state, bits = d.tuple_shapes
    if not new_state.compatible(state):
        raise ShapeError(f"result element 0 {fmt(new_state)} must be the state shape "
                         f"{fmt(state)}")
    if not bits.is_array or bits.element_type.kind not in ("uint", "sint"):
        raise ShapeError(f"result element 1 must be an integer array, got {fmt(bits)}")
    return d


def rng_get_and_update_state(op, shapes, attrs, declared):
    expect_count(shapes, 0)
    return make(U64, (2,))


RULES = {
    "call": call,
    "fusion": fusion,
    "while": while_,
    "conditional": conditional,
    "custom-call": custom_call,
    "async-start": async_start,
    "async-update": async_update,
    "async-done": async_done,
    "domain": passthrough,
    "opt-barrier": passthrough,
    "parameter": parameter,
    "constant": constant,
    "rng": rng,
    "rng-bit-generator": rng_bit_generator,
    "rng-get-and-update-state": rng_get_and_update_state,
}
