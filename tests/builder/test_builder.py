"""XlaBuilder: module structure, naming, layouts, and XLA's broadcasting semantics.

Broadcasting expectations are the worked examples of XLA's "Broadcasting semantics" page;
values are checked against numpy through a tiny evaluator of the few opcodes broadcasting
emits (parameter, constant, reshape, broadcast, element-wise), written here independently
of the builder.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xladist
from xladist.builder import BroadcastError, BuilderError, XlaBuilder
from xladist.builder.broadcasting import binary_plan
from xladist.hlo.ir import Module
from xladist.hlo.shape import Layout, Shape

# ---------------------------------------------------------------------------
# A minimal evaluator for the opcodes broadcasting produces (test reference).

_ELEMENTWISE = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
                "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum,
                "negate": np.negative}


def _broadcast(x, out_dims, dims):
    # out[i_0..i_n] = x[i_dims[0], ..., i_dims[k]]: move x's axes to `dims`, size 1 elsewhere.
    shape = [1] * len(out_dims)
    for k, d in enumerate(dims):
        shape[d] = x.shape[k]
    return np.broadcast_to(x.reshape(shape), out_dims)


def mini_eval(module: Module, *args):
    values = {}
    entry = module.entry
    for instr in entry.instructions:
        if instr.opcode == "parameter":
            v = np.asarray(args[instr.parameter_number])
        elif instr.opcode == "constant":
            v = instr.literal.value
        elif instr.opcode == "reshape":
            v = values[instr.operands[0].name].reshape(instr.shape.dims)
        elif instr.opcode == "broadcast":
            v = _broadcast(values[instr.operands[0].name], instr.shape.dims,
                           instr.attrs["dimensions"])
        elif instr.opcode == "tuple":
            v = tuple(values[o.name] for o in instr.operands)
        else:
            v = _ELEMENTWISE[instr.opcode](*[values[o.name] for o in instr.operands])
        assert tuple(np.shape(v)) == instr.shape.dims or instr.shape.is_tuple, instr
        values[instr.name] = v
    return values[entry.root.name]


# Opcodes newer than the XLA inside the installed jaxlib (docs/reference/hlo-text-format.md marks them
# [2025]); its parser rejects them, so modules using them skip the XLA acceptance check.
NEWER_THAN_INSTALLED_XLA = {"acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh",
                            "mulhi"}


def check_text(module: Module) -> Module:
    """The module's text parses back (our parser) to a module that prints identically and
    verifies, and XLA's own parser (from jaxlib, when installed) accepts it. Returns the
    re-parsed module."""
    import xladist
    text = module.to_text()
    again = xladist.parse_hlo(text)
    assert again.to_text() == text
    xladist.verify(again)
    if not {i.opcode for i in module.all_instructions()} & NEWER_THAN_INSTALLED_XLA:
        try:
            from jax._src.lib import xla_client
        except ImportError:
            return again
        xla_client.hlo.hlo_module_from_text(text)  # raises on anything XLA would reject
    return again


def build_binary(lhs_shape, rhs_shape, op="add", **kw):
    b = XlaBuilder("bcast")
    x = b.parameter(0, lhs_shape, name="x")
    y = b.parameter(1, rhs_shape, name="y")
    return check_text(b.build(getattr(b, op)(x, y, **kw)))


# ---------------------------------------------------------------------------
# Structure


def test_module_structure_names_and_entry_layout():
    b = XlaBuilder("axpy")
    a = b.parameter(0, ("f32", []), name="a")
    x = b.parameter(1, "f32[4]", name="x")
    y = b.parameter(2, Shape.array("f32", (4,)), name="y")
    m = b.build(a * x + y)
    assert isinstance(m, Module) and m.name == "axpy"
    assert m.entry is m.computations[-1] and m.entry.is_entry
    names = [i.name for i in m.entry.instructions]
    assert len(set(names)) == len(names)
    assert names[:3] == ["a.1", "x.2", "y.3"]
    assert [i.opcode for i in m.entry.instructions[3:]] == ["broadcast", "multiply", "add"]
    assert m.entry.root.opcode == "add"
    params, result = m.entry_computation_layout
    assert [p.to_text() for p in params] == ["f32[]", "f32[4]{0}", "f32[4]{0}"]
    assert result.to_text() == "f32[4]{0}"
    # Every array instruction of rank >= 1 carries the default layout.
    for i in m.all_instructions():
        if i.shape.is_array and i.shape.rank:
            assert i.shape.layout is not None and i.shape.layout.is_default()


# Words XLA's parser (jax 0.10.2) refuses as a module or computation name, "expects name":
# its keywords and element types. `tuple` is neither and stays a name.
XLA_RESERVED_WORDS = ["f32", "token", "s2", "pred", "opaque", "true", "nan", "inf", "ROOT",
                      "ENTRY", "HloModule", "maximal", "replicated", "unknown"]


@pytest.mark.parametrize("word", XLA_RESERVED_WORDS)
def test_names_that_are_hlo_keywords_get_an_underscore_like_xla(word):
    """A builder, sub-builder or parameter named `f32`/`nan`/`ROOT` printed `HloModule f32`
    and `f32 (p: ...)`, which XLA's parser refuses ("expects name"), and `HloModule nan`,
    which our own parser refused too. XLA's NameUniquer appends '_' to such names."""
    b = XlaBuilder(word)
    x = b.parameter(0, "f32[2]", name=word)
    sub = b.create_subbuilder(word)
    sub.add(sub.parameter(0, "f32[]"), sub.parameter(1, "f32[]"))
    m = check_text(b.build(b.reduce(x, b.constant_r0(0.0, "f32"), sub.build_computation(), [0])))
    assert m.name == word + "_"
    assert sorted(c.name for c in m.computations) == sorted([word + "_", word + "_.1"])
    assert xladist.parse_hlo(m.to_text(sigils=False)).to_text() == m.to_text()


def test_tuple_is_not_a_reserved_name():
    b = XlaBuilder("tuple")
    assert check_text(b.build(b.constant_r0(1, "s32"))).name == "tuple"


def test_subcomputations_come_before_their_callers_and_reducers_are_shared():
    b = XlaBuilder("main")
    x = b.parameter(0, "f32[2,3]")
    s1 = b.reduce_sum(x, [1])
    s2 = b.reduce_sum(x, [0])
    m = b.build([s1, s2])
    assert [c.name for c in m.computations] == ["add_f32", "main"]
    reducers = {id(i.attrs["to_apply"]) for i in m.entry.instructions if i.opcode == "reduce"}
    assert len(reducers) == 1
    add = m.computation("add_f32")
    assert [p.shape.to_text() for p in add.parameters] == ["f32[]", "f32[]"]
    assert add.root.opcode == "add"
    # Instruction ids are unique module-wide, as XLA's builder numbers them.
    names = [i.name for i in m.all_instructions()]
    assert len(set(names)) == len(names)


def test_tuple_root_and_tuple_indexing():
    b = XlaBuilder("t")
    x = b.parameter(0, "f32[2]")
    n = b.parameter(1, "s32[]")
    t = b.tuple(x, n)
    first, second = t
    assert first.shape.to_text() == "f32[2]{0}" and second.shape.to_text() == "s32[]"
    assert t[-1].instruction.attrs["index"] == 1
    m = b.build([t[0], t[1]])
    assert m.entry.root.opcode == "tuple"
    assert m.entry_computation_layout[1].to_text() == "(f32[2]{0}, s32[])"


def test_python_scalars_take_the_other_operands_type():
    b = XlaBuilder("s")
    x = b.parameter(0, "s32[3]")
    y = 2 * x - 1
    assert y.shape.to_text() == "s32[3]{0}"
    consts = [i for i in b._instructions if i.opcode == "constant"]
    assert [c.literal.value.dtype for c in consts] == [np.int32, np.int32]
    np.testing.assert_array_equal(mini_eval(b.build(y), np.array([1, 2, 3], np.int32)),
                                  [1, 3, 5])


def test_constant_literal_and_dtype_defaults():
    b = XlaBuilder("c")
    c1 = b.constant(np.arange(6, dtype=np.int64).reshape(2, 3))
    c2 = b.constant([1.5, 2.5])
    c3 = b.constant_r0(3, "bf16")
    assert c1.shape.to_text() == "s64[2,3]{1,0}"
    assert c2.shape.to_text() == "f32[2]{0}"  # Python floats default to f32
    assert c3.shape.to_text() == "bf16[]"
    np.testing.assert_array_equal(c1.instruction.literal.value, np.arange(6).reshape(2, 3))


def test_subbuilder_returns_computation_and_parameters_need_no_gaps():
    b = XlaBuilder("m")
    sub = b.create_subbuilder("f")
    p = sub.parameter(0, "f32[]")
    comp = sub.build(p * p)
    assert comp.name == "f" and comp.root.opcode == "multiply"
    gap = b.create_subbuilder("g")
    gap.parameter(1, "f32[]")
    with pytest.raises(BuilderError, match="0..0 without gaps"):
        gap.build()


def test_ops_from_another_builder_are_rejected_with_names():
    b = XlaBuilder("outer")
    x = b.parameter(0, "f32[2]", name="x")
    sub = b.create_subbuilder("inner")
    y = sub.parameter(0, "f32[2]", name="y")
    with pytest.raises(BuilderError, match=r"x\.1 belongs to computation outer"):
        sub.add(x, y)


def test_built_builder_refuses_new_ops():
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[]")
    b.build(x)
    with pytest.raises(BuilderError, match="already built"):
        b.neg(x)


def test_xlaop_has_no_truth_value():
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[]")
    with pytest.raises(TypeError, match="truth value"):
        bool(x.lt(1.0))


# ---------------------------------------------------------------------------
# Broadcasting: plans (pure) — the examples of XLA's broadcasting semantics page.


@pytest.mark.parametrize("lhs, rhs, bd, out", [
    ((2, 3), (3,), (1,), (2, 3)),          # vector along rows
    ((2, 3), (2,), (0,), (2, 3)),          # vector along columns
    ((3, 3), (3,), (0,), (3, 3)),
    ((3, 3), (3,), (1,), (3, 3)),
    ((2, 3, 4), (3, 4), (1, 2), (2, 3, 4)),
    ((2, 3, 4), (2, 4), (0, 2), (2, 3, 4)),
    ((2, 3), (), None, (2, 3)),            # matrix + scalar
    ((2, 1), (1, 3), None, (2, 3)),        # degenerate both ways: outer sum
    ((1, 2, 5), (7, 2, 5), None, (7, 2, 5)),
    ((7, 2, 5), (7, 1, 5), None, (7, 2, 5)),
    ((7, 2, 3), (2, 1), (1, 2), (7, 2, 3)),  # lower rank and degenerate at once
    ((2, 3), (2, 3), (0, 1), (2, 3)),      # identity mapping on equal ranks is allowed
])
def test_broadcast_plan_result_dims(lhs, rhs, bd, out):
    assert binary_plan(lhs, rhs, bd)[0] == out
    assert binary_plan(rhs, lhs, bd)[0] == out  # symmetric


@pytest.mark.parametrize("lhs, rhs, bd, message", [
    ((2, 3), (3,), (0,), ("dimension 0 .size 3. of the lower-rank operand is mapped to "
                          "dimension 0 .size 2.")),
    ((2, 3), (3,), None, "need broadcast_dimensions"),
    ((2, 3, 4), (3, 4), (2, 1), "strictly increasing"),
    ((2, 3, 4), (3, 4), (1,), "has 1 entries but the lower-rank operand has rank 2"),
    ((2, 3), (3,), (2,), "out of range"),
    ((7, 2, 5), (7, 2, 6), None, "dimension 2 has size 5 in one operand and 6"),
    ((2, 3), (2, 3), (1, 0), "must be empty or the identity"),
])
def test_broadcast_plan_errors(lhs, rhs, bd, message):
    with pytest.raises(BroadcastError, match=message):
        binary_plan(lhs, rhs, bd)


# ---------------------------------------------------------------------------
# Broadcasting: built IR evaluated against numpy.

X23 = np.array([[1, 2, 3], [4, 5, 6]], np.float32)


def test_vector_along_rows_matches_the_page_example():
    m = build_binary("f32[2,3]", "f32[3]", broadcast_dimensions=(1,))
    out = mini_eval(m, X23, np.array([7, 8, 9], np.float32))
    np.testing.assert_array_equal(out, [[8, 10, 12], [11, 13, 15]])
    bc = [i for i in m.entry.instructions if i.opcode == "broadcast"]
    assert len(bc) == 1 and bc[0].attrs["dimensions"] == (1,)


def test_vector_along_columns():
    m = build_binary("f32[2,3]", "f32[2]", broadcast_dimensions=(0,))
    out = mini_eval(m, X23, np.array([10, 20], np.float32))
    np.testing.assert_array_equal(out, X23 + np.array([[10], [20]]))


def test_matrix_plus_scalar_uses_empty_broadcast_dimensions():
    m = build_binary("f32[2,3]", "f32[]")
    bc = [i for i in m.entry.instructions if i.opcode == "broadcast"]
    assert [i.attrs["dimensions"] for i in bc] == [()]
    np.testing.assert_array_equal(mini_eval(m, X23, np.float32(7)), X23 + 7)


def test_degenerate_outer_sum_reshapes_then_broadcasts():
    m = build_binary("f32[2,1]", "f32[1,3]")
    ops = [i.opcode for i in m.entry.instructions]
    assert ops == ["parameter", "parameter", "reshape", "broadcast", "reshape", "broadcast",
                   "add"]
    a = np.array([[1], [2]], np.float32)
    c = np.array([[10, 20, 30]], np.float32)
    np.testing.assert_array_equal(mini_eval(m, a, c), a + c)


def test_rank3_plus_matrix_with_broadcast_dimensions():
    m = build_binary("f32[2,3,4]", "f32[3,4]", broadcast_dimensions=(1, 2), op="mul")
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    np.testing.assert_array_equal(mini_eval(m, x, y), x * y[None])
    # The other orientation: (2,4) mapped to dims 0 and 2.
    m = build_binary("f32[2,4]", "f32[2,3,4]", broadcast_dimensions=(0, 2), op="sub")
    z = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(mini_eval(m, z, x), z[:, None, :] - x)


def test_lower_rank_with_degenerate_dimension():
    m = build_binary("f32[7,2,3]", "f32[2,1]", broadcast_dimensions=(1, 2))
    x = np.random.default_rng(0).normal(size=(7, 2, 3)).astype(np.float32)
    y = np.array([[1], [2]], np.float32)
    np.testing.assert_allclose(mini_eval(m, x, y), x + y[None])


def test_same_shapes_need_no_broadcast():
    m = build_binary("f32[2,3]", "f32[2,3]")
    assert [i.opcode for i in m.entry.instructions] == ["parameter", "parameter", "add"]


def test_broadcast_errors_name_both_shapes_and_the_op():
    b = XlaBuilder("err")
    x = b.parameter(0, "f32[2,3]")
    v = b.parameter(1, "f32[3]")
    with pytest.raises(ValueError, match=r"add in err of f32\[2,3\] and f32\[3\]"):
        b.add(x, v)
    with pytest.raises(ValueError, match=r"f32\[2,3\] and f32\[3\].*sizes must be equal"):
        b.add(x, v, broadcast_dimensions=(0,))
    w = b.parameter(2, "f32[3,2]")
    with pytest.raises(ValueError, match=r"maximum in err of f32\[2,3\] and f32\[3,2\]"):
        b.max(x, w)


def test_element_type_mismatch_is_a_shape_error():
    b = XlaBuilder("types")
    x = b.parameter(0, "f32[2]")
    n = b.parameter(1, "s32[2]")
    with pytest.raises(ValueError, match=r"f32\[2\].*s32\[2\]|s32\[2\].*f32\[2\]"):
        b.add(x, n)


def test_select_and_clamp_broadcast_scalars():
    b = XlaBuilder("sel")
    x = b.parameter(0, "f32[2,3]")
    p = b.parameter(1, "pred[]")
    s = b.select(p, x, 0.0)
    c = b.clamp(-1.0, x, 1.0)
    assert s.shape.to_text() == c.shape.to_text() == "f32[2,3]{1,0}"
    assert [o.shape.to_text() for o in s.instruction.operands] == [
        "pred[2,3]{1,0}", "f32[2,3]{1,0}", "f32[2,3]{1,0}"]
    with pytest.raises(BroadcastError, match="same rank"):
        b.select(b.parameter(2, "pred[2]"), x, x)


def test_compare_builds_pred_with_direction_and_optional_type():
    b = XlaBuilder("cmp")
    x = b.parameter(0, "f32[2,3]")
    v = b.parameter(1, "f32[3]")
    lt = b.lt(x, v, broadcast_dimensions=(1,))
    assert lt.shape.to_text() == "pred[2,3]{1,0}"
    assert lt.instruction.attrs == {"direction": "LT"}
    tot = b.compare(x, 0.0, "ge", compare_type="totalorder")
    assert tot.instruction.attrs == {"direction": "GE", "type": "TOTALORDER"}
    assert x.ge(1.0).instruction.attrs["direction"] == "GE"
    with pytest.raises(ValueError, match="direction"):
        b.compare(x, x, "LESS")


def test_frontend_attribute_scopes_nest_and_end():
    b = XlaBuilder("fa")
    x = b.parameter(0, "f32[]")
    with b.frontend_attributes({"_xla_compute_type": "host"}):
        inner = b.neg(x)
        with b.frontend_attributes({"stage": 1}):
            nested = b.exp(inner)
    after = b.abs(nested)
    assert inner.instruction.frontend_attributes == {"_xla_compute_type": "host"}
    assert nested.instruction.frontend_attributes == {"_xla_compute_type": "host",
                                                      "stage": "1"}
    assert after.instruction.frontend_attributes == {}
    text = check_text(b.build(after)).to_text()
    assert 'frontend_attributes={_xla_compute_type="host",stage="1"}' in text


# Property: where numpy's rules apply (trailing alignment = broadcast_dimensions on the
# trailing dims), XLA's result dims and values agree with numpy's.


@st.composite
def _compatible_shapes(draw):
    out = draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    lhs = [d if draw(st.booleans()) else 1 for d in out]
    k = draw(st.integers(0, len(out)))
    rhs = [d if draw(st.booleans()) else 1 for d in out[len(out) - k:]]
    return tuple(lhs), tuple(rhs)


@settings(max_examples=40, deadline=None)
@given(_compatible_shapes())
def test_broadcasting_agrees_with_numpy_on_trailing_alignment(shapes):
    lhs, rhs = shapes
    bd = tuple(range(len(lhs) - len(rhs), len(lhs))) if 0 < len(rhs) < len(lhs) else None
    m = build_binary(("f32", lhs), ("f32", rhs), **({"broadcast_dimensions": bd} if bd else {}))
    a = np.arange(np.prod(lhs), dtype=np.float32).reshape(lhs)
    c = np.arange(np.prod(rhs), dtype=np.float32).reshape(rhs) * 10
    np.testing.assert_array_equal(mini_eval(m, a, c), a + c)


def test_instruction_by_opcode_name_checks_the_shape_it_is_given():
    """XlaBuilder.instruction: any opcode by name; a given result shape must agree with shape
    inference in element type and dims, and its layout is kept."""
    b = XlaBuilder("generic")
    x = b.parameter(0, "f32[2,3]")
    assert b.instruction("negate", [x]).shape.to_text() == "f32[2,3]{1,0}"
    col_major = Shape.array("f32", (2, 3)).with_layout(Layout((0, 1)))
    assert b.instruction("copy", [x], col_major).shape.to_text() == "f32[2,3]{0,1}"
    assert b.instruction("convert", [x], "s32[2,3]").shape.to_text() == "s32[2,3]{1,0}"
    with pytest.raises(BuilderError, match=r"the result shape given, f32\[3,2\], is not the "
                                           r"inferred f32\[2,3\]"):
        b.instruction("add", [x, x], "f32[3,2]")
    with pytest.raises(BuilderError, match="unknown opcode 'frobnicate'"):
        b.instruction("frobnicate", [x])
    with pytest.raises(ValueError, match="convert"):  # not derivable: the shape is required
        b.instruction("convert", [x])
    assert [i.opcode for i in b.build(x).entry.instructions].count("add") == 0


# ---------------------------------------------------------------------------
# Misuse is refused while building, naming the op and the values involved


def _arity_cases():
    yield "reduce", r"reduce in computation m: reducer: .*\(f32\[\], f32\[\]\)", \
        lambda b, x: b.reduce(x, 0.0, lambda sb, a: a, [0])
    yield "sort", r"sort in computation m: compare: .*\(f32\[\], f32\[\]\)", \
        lambda b, x: b.sort(x, lambda sb, a: sb.lt(a, a))
    yield "call", r"call in computation m: callee: .*\(f32\[2,3\]\).*missing", \
        lambda b, x: b.call(lambda sb, a, c: a, [x])
    yield "while", r"while in computation m: body: .*\(s32\[\], f32\[2,3\]\)", \
        lambda b, x: b.while_loop(lambda sb, i, v: sb.lt(i, 3), lambda sb, i: [i + 1],
                                  [b.constant_r0(0, "s32"), x])
    yield "fori", r"fori_loop in computation m: body: .*\(s32\[\], f32\[2,3\]\)", \
        lambda b, x: b.fori_loop(0, 3, lambda sb, a: [a], [x])
    yield "all-reduce", r"all-reduce in computation m: reducer: .*\(f32\[\], f32\[\]\)", \
        lambda b, x: b.all_reduce(x, lambda sb, a: a, replica_groups=[[0]])
    yield "conditional", r"conditional in computation m: branch_1: .*\(f32\[2,3\]\)", \
        lambda b, x: b.conditional(b.constant_r0(0, "s32"), [lambda sb, v: v, lambda sb: x],
                                   x)


@pytest.mark.parametrize("what, message, build", list(_arity_cases()),
                         ids=[c[0] for c in _arity_cases()])
def test_a_callable_of_the_wrong_arity_is_refused_naming_the_op_and_the_values(
        what, message, build):
    """Before: the callable was called and its own TypeError ('<lambda>() takes 2
    positional arguments but 3 were given') came out of core.py, naming neither the op nor
    the values it is given."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2,3]")
    with pytest.raises(BuilderError, match=message):
        build(b, x)


def test_callables_taking_varargs_or_partials_are_accepted():
    import functools

    def add_scaled(k, sb, a, c):
        return sb.add(a, sb.mul(c, k))
    b = XlaBuilder("ok")
    x = b.parameter(0, "f32[2,3]")
    b.reduce(x, 0.0, functools.partial(add_scaled, 2.0), [1])
    b.while_loop(lambda sb, *s: sb.lt(s[0], 3), lambda sb, i, *rest: [i + 1, *rest],
                 [b.constant_r0(0, "s32"), x])
    check_text(b.build())


_ARRAY = np.ones((3,), np.float32)
_NOT_AN_OP = [
    ("conditional", lambda b, x: b.conditional(0, [lambda sb, v: v, lambda sb, v: v], x)),
    ("convert", lambda b, x: b.convert(_ARRAY, "s32")),
    ("bitcast-convert", lambda b, x: b.bitcast_convert(3, "s32")),
    ("reshape", lambda b, x: b.reshape([1, 2], [2])),
    ("slice", lambda b, x: b.slice_in_dim(None, 0, 1)),
    ("pad", lambda b, x: b.pad(_ARRAY, 0.0, [(1, 1)])),
    ("dot", lambda b, x: b.dot(_ARRAY, x)),
    ("convolution", lambda b, x: b.conv_general_dilated(_ARRAY, x, (1,), "VALID")),
    ("reduce", lambda b, x: b.reduce(_ARRAY, 0.0, "add", [0])),
    ("reduce", lambda b, x: b.reduce_sum(_ARRAY)),
    ("reduce-window", lambda b, x: b.reduce_window(_ARRAY, 0.0, "add", (1,))),
    ("select-and-scatter", lambda b, x: b.select_and_scatter(_ARRAY, "ge", (1,), (1,),
                                                              "VALID", x, 0.0)),
    ("map", lambda b, x: b.map([_ARRAY], lambda sb, a: a)),
    ("sort", lambda b, x: b.sort([_ARRAY])),
    ("scatter", lambda b, x: b.scatter(_ARRAY, x, x, "add", update_window_dims=[],
                                       inserted_window_dims=[0],
                                       scatter_dims_to_operand_dims=[0], index_vector_dim=1)),
    ("get-tuple-element", lambda b, x: b.get_tuple_element((x, x), 0)),
    ("all-reduce", lambda b, x: b.all_reduce(_ARRAY)),
    ("all-gather", lambda b, x: b.all_gather(_ARRAY, 0, replica_groups=[[0]])),
    ("outfeed", lambda b, x: b.outfeed(_ARRAY)),
]


@pytest.mark.parametrize("opcode, build", _NOT_AN_OP, ids=[f"{o}-{i}" for i, (o, _) in
                                                              enumerate(_NOT_AN_OP)])
def test_an_operand_that_is_not_an_xlaop_is_a_builder_error_naming_the_op(opcode, build):
    """Before: methods read the operand's shape before checking it, so a numpy array, a
    list or a Python number where an XlaOp belongs raised AttributeError ("'numpy.ndarray'
    object has no attribute 'element_type'") from inside the builder."""
    b = XlaBuilder("m")
    x = b.parameter(0, "s32[3]")
    with pytest.raises(BuilderError, match=rf"^{opcode} in computation m: operand .* is not "
                                           "an XlaOp"):
        build(b, x)


def test_the_not_an_xlaop_message_describes_an_array_by_type_and_shape():
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2,3]")
    with pytest.raises(BuilderError, match=r"operand a numpy array of float32 \[4, 5\] is not"):
        b.concatenate([x, np.ones((4, 5), np.float32)], 0)


def test_slice_in_dim_out_of_range_dimno_names_the_op_and_shape():
    """Before: IndexError 'list assignment index out of range' from shaping.py."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2,3]")
    with pytest.raises(BuilderError, match=r"slice_in_dim in computation m: dimno=5 is out of "
                                           r"range for f32\[2,3\] \(rank 2\)"):
        b.slice_in_dim(x, 0, 1, dimno=5)


@pytest.mark.parametrize("dnums", [((1,), (0,)), (((1,), (0,)),), (((1,), (0,)), 7),
                                   ((1, 0), ((), ()))])
def test_dot_general_dimension_numbers_of_the_wrong_structure_say_the_expected_form(dnums):
    """Before: 'not enough values to unpack (expected 2, got 1)' or 'cannot unpack
    non-iterable int object' from linalg.py."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2,3]")
    y = b.parameter(1, "f32[3,2]")
    with pytest.raises(BuilderError, match=r"dot_general in computation m: dimension_numbers="
                                           r".* must be \(\(lhs_contracting, rhs_contracting\), "
                                           r"\(lhs_batch, rhs_batch\)\)"):
        b.dot_general(x, y, dnums)


@pytest.mark.parametrize("dnums, reason", [
    (("NCHW", "OIHW"), r"expected None, XLA dim_labels text .* or three strings"),
    (("NCHH", "OIHW", "NCHW"), r"'NCHH' must name each dimension once"),
    (("NCH", "OIHW", "NCHW"), r"'NCH' has 3 letters but the operands have rank 4"),
    (("NCHW", "OIHW", "NCXW"), r"'X' of 'NCXW' is not a spatial dimension of the kernel"),
    ("hello", r"malformed dim_labels 'hello'"),
    ("bf01_oi01->bfxx", r"spatial dimension counts differ"),
])
def test_invalid_conv_dimension_numbers_name_the_op_and_the_spec_given(dnums, reason):
    """Before: ('NCHW', 'OIHW') raised 'not enough values to unpack (expected 3, got 2)';
    a repeated letter ('NCHH') said 'dim_labels 'bf00_oi01->bf01': input spatial digits
    must be 0..n-1', digits the user never wrote; text labels raised a bare ValueError
    from hlo/attrs.py naming no op."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[1,2,5,5]")
    k = b.parameter(1, "f32[3,2,2,2]")
    with pytest.raises(BuilderError, match=r"^convolution dimension_numbers=" + r".*: " + reason):
        b.conv_general_dilated(x, k, (1, 1), "VALID", dimension_numbers=dnums)


@pytest.mark.parametrize("build", [
    lambda b, x: b.iota("s32", [2, -1]),
    lambda b, x: b.broadcast(x, [-2]),
    lambda b, x: b.reshape(x, [-2, -3]),
    lambda b, x: b.parameter(1, ("f32", [2, -1])),
    lambda b, x: b.infeed([("f32", [-1])]),
], ids=["iota", "broadcast", "reshape", "parameter", "infeed"])
def test_negative_dimension_sizes_are_refused_not_made_unbounded(build):
    """Before: a negative size was kept and printed as an unbounded dynamic dimension
    ('s32[2,?]'), a module that verified and parsed back; reshape to [-2, -3] of 6
    elements passed its element count check."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[6]")
    with pytest.raises(BuilderError, match=r"in computation m: dimension sizes \[.*-\d.*\] of "
                                           r"the \w+ result must not be negative"):
        build(b, x)


def test_a_callable_that_returns_none_is_refused():
    """Before: a sub-computation callable without `return` gave a computation whose root
    was the last op it happened to add (here the parameter: an identity 'reducer'),
    silently another program."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2,3]")

    def forgot_return(sb, a, c):
        sb.add(a, c)
        sb.mul(a, c)
    with pytest.raises(BuilderError, match=r"reduce in computation m: reducer: the callable "
                                           r".*forgot_return returned None"):
        b.reduce(x, 0.0, forgot_return, [1])
    with pytest.raises(BuilderError, match=r"call in computation m: callee: .* returned None"):
        b.call(lambda sb, a: None, [x])


@pytest.mark.parametrize("row", [(1,), (1, 1, 0, 2)])
def test_a_padding_config_entry_of_the_wrong_length_is_refused(row):
    """Before: (1,) raised IndexError 'tuple index out of range' from shaping.py, and a
    fourth number was dropped without a word."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2,3]")
    with pytest.raises(BuilderError, match=r"pad in computation m: padding_config entry \[.*\] "
                                           r"of dimension 0 must be \(low, high\) or "
                                           r"\(low, high, interior\)"):
        b.pad(x, 0.0, [row, (0, 0)])


@pytest.mark.parametrize("build, message", [
    (lambda b, x: b.convert(x, "float32x"), r"unknown element type 'float32x': give an HLO "
                                            r"type name"),
    (lambda b, x: b.iota("complex256", [2]), r"unknown element type 'complex256'"),
    (lambda b, x: b.parameter(1, "float[2]"), r"cannot read shape 'float\[2\]': 'float' is "
                                              r"not an HLO element type"),
    (lambda b, x: b.constant_r0(1, object), r"unknown element type <class 'object'>"),
])
def test_an_unknown_element_type_is_a_builder_error(build, message):
    """Before: numpy's TypeError "data type 'float32x' not understood", or a ValueError
    from hlo/shape.py, none of them a BuilderError."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2]")
    with pytest.raises(BuilderError, match=message):
        build(b, x)


@pytest.mark.parametrize("build, number, type_", [
    (lambda b, n, u, p, f: n.lt(2.5), "2.5", "s32"),
    (lambda b, n, u, p, f: b.select(p, n, 1.5), "1.5", "s32"),
    (lambda b, n, u, p, f: b.max(u, -1), "-1", "u8"),
    (lambda b, n, u, p, f: u + 300, "300", "u8"),
    (lambda b, n, u, p, f: b.eq(p, 2), "2", "pred"),
    (lambda b, n, u, p, f: b.reduce(n, float("-inf"), "max", [0]), "-inf", "s32"),
    (lambda b, n, u, p, f: f + 1j, "1j", "f32"),
])
def test_a_python_number_the_other_operands_type_cannot_hold_is_refused(build, number, type_):
    """Before: the number was cast silently: n < 2.5 became n < 2 (false for n == 2),
    max(u8, -1) became max(u8, 255), u8 + 300 became u8 + 44."""
    b = XlaBuilder("m")
    n = b.parameter(0, "s32[3]")
    u = b.parameter(1, "u8[3]")
    p = b.parameter(2, "pred[3]")
    f = b.parameter(3, "f32[3]")
    with pytest.raises(BuilderError, match=rf"computation m: the Python number {number} used "
                                           rf"with .* takes its element type {type_}, which "
                                           "cannot hold it exactly"):
        build(b, n, u, p, f)


def test_python_numbers_that_fit_keep_working():
    b = XlaBuilder("m")
    n = b.parameter(0, "s32[3]")
    u = b.parameter(1, "u8[3]")
    f = b.parameter(2, "f32[3]")
    p = b.parameter(3, "pred[3]")
    b.build([n.lt(2.0), n + True, u + 255, u.ge(0), f * 0.1, f + 10**20, b.eq(p, 1),
             b.select(p, f, float("inf")), b.reduce(n, -2**31, "max", [0])])


@pytest.mark.parametrize("build", [
    lambda b, x: b.iota("s32", [2.5]),
    lambda b, x: b.slice(x, [0.5, 0], [1, 3]),
    lambda b, x: b.dynamic_slice(x, [0.7, 0], [1, 1]),
    lambda b, x: b.reduce_sum(x, [1.0]),
    lambda b, x: b.pad(x, 0.0, [(0.5, 0), (0, 0)]),
    lambda b, x: b.conv_general_dilated(b.reshape(x, [1, 1, 2, 3]),
                                        b.reshape(x, [1, 1, 2, 3]), (1.5, 1), "VALID"),
], ids=["iota", "slice", "dynamic_slice", "reduce", "pad", "conv"])
def test_a_non_integer_size_or_index_is_refused_not_truncated(build):
    """Before: int() truncated it: iota('s32', [2.5]) made s32[2], a start index 0.7
    became 0."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2,3]")
    with pytest.raises(BuilderError, match=r"expected integers \(sizes, dimension numbers, "
                                           r"indices\), got \d\.\d in \["):
        build(b, x)


def test_gathered_dimension_errors_name_the_collective():
    """Before: all-gather's said only 'dimension 3 is out of range for f32[2,3]'."""
    b = XlaBuilder("m")
    x = b.parameter(0, "f32[2,3]")
    with pytest.raises(BuilderError, match=r"^all-gather in computation m: dimension 3 is out "
                                           r"of range for f32\[2,3\]"):
        b.all_gather(x, 3, replica_groups=[[0, 1]])
    with pytest.raises(BuilderError, match=r"^all-gather-start in computation m: dimension -1"):
        b.all_gather_start(x, -1, replica_groups=[[0, 1]])
    with pytest.raises(BuilderError, match=r"^reduce-scatter in computation m: dimension 1 of "
                                           r"f32\[2,3\] does not split into 2 equal parts"):
        b.reduce_scatter(x, "add", 1, replica_groups=[[0, 1]])


# custom-call backend_config strings and how XLA's parser and printer (jax 0.10.2) give them
# back: raw only for one brace dict, else double-quoted.
_XLA_BACKEND_CONFIG = [
    ("{", 'backend_config="{"'), ("{a", 'backend_config="{a"'),
    ('{"}', 'backend_config="{\\"}"'), ("{}}", 'backend_config="{}}"'),
    ('{"a": {"b": 1}}', 'backend_config={"a": {"b": 1}}'), ("plain", 'backend_config="plain"'),
]


@pytest.mark.parametrize("config, xla_text", _XLA_BACKEND_CONFIG)
def test_custom_call_backend_config_prints_as_xla_reads_it(config, xla_text):
    """The builder wrote any backend_config starting with '{' raw: `backend_config={a`,
    text that neither XLA's parser nor ours could read ("expected '}' to close
    computation"). It is kept as a string now and printed as XLA prints it."""
    b = XlaBuilder("cc")
    x = b.parameter(0, "f32[2]")
    m = check_text(b.build(b.custom_call("foo", [x], "f32[2]", backend_config=config)))
    assert m.to_text().splitlines()[4].endswith(f'custom_call_target="foo", {xla_text}')


@pytest.mark.parametrize("key, ok", [("a b", False), ("a=b", False), ("", False), ("1x", False),
                                     ('a"b', False), ("a:b", False), ("é", False),
                                     ("x-y.z", True), ("_xla_x", True), ("ROOT", True)])
def test_frontend_attribute_keys_are_hlo_attribute_names(key, ok):
    """A key is written bare in HLO text; XLA's parser refuses `{a b="v"}`, `{1x="v"}`,
    `{é="v"}` ("expects attribute name") and takes `{x-y.z="v"}`, `{ROOT="v"}`. The builder
    used to print any key, text that neither parser reads; it refuses those now."""
    b = XlaBuilder("fa")
    x = b.parameter(0, "f32[2]")
    if not ok:
        with pytest.raises(BuilderError, match="frontend attribute key .* is not an HLO "
                                               "attribute name"):
            with b.frontend_attributes({key: "v"}):
                pass
        return
    with b.frontend_attributes({key: "v"}):
        y = b.neg(x)
    assert f'frontend_attributes={{{key}="v"}}' in check_text(b.build(y)).to_text()


@pytest.mark.parametrize("attrs, unknown", [(dict(is_stabel=True), "is_stabel"),
                                            (dict(foo=3), "foo")])
def test_instruction_refuses_an_attribute_its_opcode_does_not_have(attrs, unknown):
    """`b.instruction("sort", [x], dimensions=(0,), is_stabel=True)` built a sort that was
    not stable and printed `is_stabel=true`, which XLA's parser refuses ('unexpected
    attribute "is_stabel". Allowed attributes: ...'); now the builder says so first."""
    b = XlaBuilder("g")
    x = b.parameter(0, "f32[6]")
    with pytest.raises(BuilderError, match=rf"sort in computation g: no attribute {unknown} "
                                           r"\(its attributes: dimensions, is_stable, "
                                           r"to_apply\)"):
        b.instruction("sort", [x], dimensions=(0,), **attrs)


@pytest.mark.parametrize("opcode, method", [("parameter", r"parameter\(number, shape\)"),
                                            ("constant", r"constant\(value\)")])
def test_instruction_sends_parameters_and_constants_to_their_methods(opcode, method):
    """`b.instruction("parameter", [], "f32[]")` failed later in build() with "TypeError:
    '<' not supported between instances of 'NoneType' and 'int'", and
    `b.instruction("constant", [], "f32[]")` printed `constant({...})`, a constant with no
    data that no backend runs (XLA's parser needs a literal there)."""
    b = XlaBuilder("g")
    with pytest.raises(BuilderError, match=rf"a {opcode} is made by builder\.{method}"):
        b.instruction(opcode, [], "f32[]")
