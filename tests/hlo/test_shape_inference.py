"""Shape inference against independent references: numpy results, hand-computed examples from
XLA's operation semantics, and the rules of shape_inference.cc."""

from __future__ import annotations

import re

import numpy as np
import pytest

from xladist.hlo.attrs import (ConvDimensionNumbers, PaddingConfig, ReplicaGroups, SliceSpec,
                               Window, WindowDim)
from xladist.hlo.ir import Computation, Instruction
from xladist.hlo.opcodes import OPCODES
from xladist.hlo.shape import Shape
from xladist.hlo.shape_inference import SHAPE_RULES, UNSUPPORTED, ShapeError, infer_shape


# ---- helpers shared with test_verifier.py ---------------------------------------------------

def S(text: str) -> Shape:
    """A shape from its text form: `f32[2,3]`, `(s32[], f32[4])`, `token[]` (no layouts)."""
    text = text.strip()
    if text.startswith("("):
        inner, depth, parts, start = text[1:-1], 0, [], 0
        for i, ch in enumerate(inner):
            depth += ch == "("
            depth -= ch == ")"
            if ch == "," and depth == 0 and inner[start:i].count("[") == inner[start:i].count("]"):
                parts.append(inner[start:i])
                start = i + 1
        if inner.strip():
            parts.append(inner[start:])
        return Shape.tuple_of([S(p) for p in parts])
    m = re.fullmatch(r"(\w+)\[([\d,]*)\]", text)
    assert m, text
    if m.group(1) == "token":
        return Shape.token()
    dims = [int(d) for d in m.group(2).split(",") if d]
    return Shape.array(m.group(1), dims)


def comp(name: str, params: list[str], body) -> Computation:
    """A computation with parameters of the given shapes; body(params) returns the root
    (a (opcode, shape, operands) triple or an existing parameter)."""
    c = Computation(name)
    ps = [c.add(Instruction(f"{name}.p{i}", "parameter", S(s), parameter_number=i))
          for i, s in enumerate(params)]
    root = body(ps)
    if isinstance(root, tuple):
        opcode, shape, operands = root[:3]
        attrs = root[3] if len(root) > 3 else {}
        root = c.add(Instruction(f"{name}.root", opcode, S(shape), operands, attrs))
    c.root = root
    return c


def binary_comp(name="add", t="f32", opcode="add"):
    return comp(name, [f"{t}[]", f"{t}[]"], lambda p: (opcode, f"{t}[]", p))


def infer(opcode, shapes, declared=None, **attrs):
    return infer_shape(opcode, [S(s) for s in shapes], attrs,
                       None if declared is None else S(declared))


def assert_shape(shape: Shape, text: str):
    assert shape.compatible(S(text)), f"{shape} != {text}"


def window(*dims) -> Window:
    return Window(tuple(WindowDim(**d) if isinstance(d, dict) else WindowDim(d) for d in dims))


# ---- coverage ---------------------------------------------------------------------------------

def test_every_opcode_has_a_rule_or_a_reason():
    for op in OPCODES:
        assert op in SHAPE_RULES or op in UNSUPPORTED, op
    assert not set(SHAPE_RULES) & set(UNSUPPORTED)
    assert all(UNSUPPORTED.values())


def test_unsupported_opcode_returns_declared_or_explains():
    assert_shape(infer("scan", ["f32[4]"], "f32[4]"), "f32[4]")
    with pytest.raises(ShapeError, match="scan: shape inference is not supported"):
        infer("scan", ["f32[4]"])


# ---- element-wise -------------------------------------------------------------------------------

@pytest.mark.parametrize("op,operand,result", [
    ("is-finite", "f32[3]", "pred[3]"),
    ("real", "c64[2]", "f32[2]"),
    ("imag", "c128[]", "f64[]"),
    ("real", "f32[2]", "f32[2]"),
    ("abs", "c64[2,2]", "f32[2,2]"),
    ("abs", "s32[5]", "s32[5]"),
    ("negate", "u8[2]", "u8[2]"),
    ("not", "pred[4]", "pred[4]"),
    ("popcnt", "u32[4]", "u32[4]"),
    ("exponential", "c64[3]", "c64[3]"),
    ("copy", "(f32[2], s32[])", "(f32[2], s32[])"),
])
def test_unary_result_types(op, operand, result):
    assert_shape(infer(op, [operand]), result)


@pytest.mark.parametrize("op,operand", [
    ("abs", "u32[2]"), ("floor", "s32[2]"), ("is-finite", "s32[2]"), ("not", "f32[2]"),
    ("popcnt", "f32[2]"), ("erf", "c64[2]"), ("sign", "u8[2]"), ("sqrt", "s32[]"),
])
def test_unary_rejects_element_type(op, operand):
    with pytest.raises(ShapeError, match=re.escape(f"{op}: operand must have")):
        infer(op, [operand])


def test_numpy_agrees_on_real_imag_abs_types():
    z = np.zeros(2, np.complex64)
    assert np.real(z).dtype == np.float32 and np.abs(z).dtype == np.float32
    assert_shape(infer("abs", ["c64[2]"]), "f32[2]")


@pytest.mark.parametrize("op,shapes,result", [
    ("add", ["f32[2,3]", "f32[2,3]"], "f32[2,3]"),
    ("and", ["pred[4]", "pred[4]"], "pred[4]"),
    ("xor", ["u32[4]", "u32[4]"], "u32[4]"),
    ("shift-left", ["s32[]", "s32[]"], "s32[]"),
    ("complex", ["f32[3]", "f32[3]"], "c64[3]"),
    ("complex", ["f64[]", "f64[]"], "c128[]"),
    ("atan2", ["f32[2]", "f32[2]"], "f32[2]"),
])
def test_binary_result(op, shapes, result):
    assert_shape(infer(op, shapes), result)


@pytest.mark.parametrize("op,shapes,message", [
    ("add", ["f32[2,3]", "f32[3,2]"], "same dimensions"),
    ("add", ["f32[2]", "s32[2]"], "same element type"),
    ("add", ["f32[2]", "f32[]"], "broadcast explicitly"),
    ("shift-left", ["f32[2]", "f32[2]"], "integer"),
    ("shift-right-logical", ["pred[2]", "pred[2]"], "integer"),
    ("and", ["f32[2]", "f32[2]"], "pred or integer"),
    ("subtract", ["pred[2]", "pred[2]"], "numeric"),
    ("complex", ["f16[2]", "f16[2]"], "f32 .* or f64"),
])
def test_binary_errors_name_both_shapes(op, shapes, message):
    with pytest.raises(ShapeError, match=message) as e:
        infer(op, shapes)
    assert str(e.value).startswith(op + ":")
    for s in shapes:
        assert s in str(e.value)


def test_compare_gives_pred_and_checks_direction():
    assert_shape(infer("compare", ["s32[4]", "s32[4]"], direction="LT"), "pred[4]")
    assert_shape(infer("compare", ["f32[]", "f32[]"], direction="NE", type="TOTALORDER"),
                 "pred[]")
    with pytest.raises(ShapeError, match="direction=LESS"):
        infer("compare", ["f32[]", "f32[]"], direction="LESS")
    with pytest.raises(ShapeError, match="missing required attribute direction"):
        infer("compare", ["f32[]", "f32[]"])


@pytest.mark.parametrize("result", ["f32[3]", "s32[3]", "pred[3]", "f64[3]"])
def test_convert_from_complex_to_real_is_refused(result):
    # XLA's InferConvertShape refuses it ("Conversion from complex to real type ... is not
    # implemented"); the verifier took it and both backends dropped the imaginary part.
    with pytest.raises(ShapeError, match=r"cannot convert complex c64\[3\] to the real type"):
        infer("convert", ["c64[3]"], declared=result)
    assert_shape(infer("convert", ["c64[3]"], declared="c128[3]"), "c128[3]")
    assert_shape(infer("convert", ["f32[3]"], declared="c64[3]"), "c64[3]")


@pytest.mark.parametrize("direction", ["LT", "LE", "GT", "GE"])
def test_complex_numbers_have_no_order(direction):
    # XLA's evaluator and CPU emitter compare complex numbers with EQ and NE only; the
    # verifier took LT and the backends disagreed (the interpreter ordered lexicographically,
    # the cpu backend gave neither that nor a consistent answer).
    with pytest.raises(ShapeError, match=f"complex operands can only be compared with EQ or "
                       rf"NE, got direction={direction} for c64\[4\], c64\[4\]"):
        infer("compare", ["c64[4]", "c64[4]"], direction=direction)
    for ok in ("EQ", "NE"):
        assert_shape(infer("compare", ["c128[]", "c128[]"], direction=ok), "pred[]")


def test_select_predicate_scalar_or_same_shape():
    assert_shape(infer("select", ["pred[2,3]", "f32[2,3]", "f32[2,3]"]), "f32[2,3]")
    assert_shape(infer("select", ["pred[]", "s32[4]", "s32[4]"]), "s32[4]")
    with pytest.raises(ShapeError, match=r"pred\[3\]"):
        infer("select", ["pred[3]", "f32[2,3]", "f32[2,3]"])
    with pytest.raises(ShapeError, match="must be pred"):
        infer("select", ["s32[2]", "f32[2]", "f32[2]"])
    with pytest.raises(ShapeError, match="on_false"):
        infer("select", ["pred[2]", "f32[2]", "f32[3]"])


def test_clamp_scalar_or_same_shape_bounds():
    assert_shape(infer("clamp", ["f32[]", "f32[5]", "f32[5]"]), "f32[5]")
    with pytest.raises(ShapeError, match=r"min f32\[4\]"):
        infer("clamp", ["f32[4]", "f32[5]", "f32[]"])
    with pytest.raises(ShapeError, match="element type"):
        infer("clamp", ["s32[]", "f32[5]", "f32[]"])


def test_convert_needs_declared_and_same_dims():
    assert_shape(infer("convert", ["f32[2,3]"], "s8[2,3]"), "s8[2,3]")
    with pytest.raises(ShapeError, match="give the result shape explicitly"):
        infer("convert", ["f32[2]"])
    with pytest.raises(ShapeError, match="operand's dimensions"):
        infer("convert", ["f32[2,3]"], "s8[3,2]")


@pytest.mark.parametrize("src,dst,ok", [
    ("f32[4]", "u8[4,4]", True),    # narrower: adds a minor dimension of the width ratio
    ("u8[4,4]", "f32[4]", True),    # wider: removes a last dimension equal to the ratio
    ("f32[2,3]", "s32[2,3]", True),
    ("u8[4,3]", "f32[4]", False),
    ("f32[4]", "u8[4]", False),
    ("f32[2]", "c64[2]", False),
])
def test_bitcast_convert_width_changes(src, dst, ok):
    # numpy's view agrees on the shapes of the legal cases.
    if ok and src == "f32[4]":
        assert np.zeros(4, np.float32).view(np.uint8).reshape(4, 4).shape == (4, 4)
    if ok:
        assert_shape(infer("bitcast-convert", [src], dst), dst)
    else:
        with pytest.raises(ShapeError):
            infer("bitcast-convert", [src], dst)


def test_reduce_precision():
    assert_shape(infer("reduce-precision", ["f32[3]"], exponent_bits=5, mantissa_bits=10),
                 "f32[3]")
    with pytest.raises(ShapeError, match="exponent_bits=0"):
        infer("reduce-precision", ["f32[3]"], exponent_bits=0, mantissa_bits=10)


# ---- data movement ------------------------------------------------------------------------------

def test_broadcast_validates_declared():
    assert_shape(infer("broadcast", ["f32[3]"], "f32[2,3]", dimensions=(1,)), "f32[2,3]")
    assert_shape(infer("broadcast", ["f32[]"], "f32[2,3]", dimensions=()), "f32[2,3]")
    with pytest.raises(ShapeError, match=r"dimension 0 has size 3 but result f32\[3,2\]"):
        infer("broadcast", ["f32[3]"], "f32[3,2]", dimensions=(1,))
    with pytest.raises(ShapeError, match="give the result shape explicitly"):
        infer("broadcast", ["f32[3]"], dimensions=(1,))


def test_reshape_element_count():
    assert_shape(infer("reshape", ["f32[2,3]"], "f32[6]"), "f32[6]")
    with pytest.raises(ShapeError, match=r"operand f32\[2,3\] has 6, result f32\[7\] has 7"):
        infer("reshape", ["f32[2,3]"], "f32[7]")


def test_transpose_against_numpy():
    x = np.zeros((2, 3, 4))
    out = infer("transpose", ["f32[2,3,4]"], dimensions=(2, 0, 1))
    assert out.dims == np.transpose(x, (2, 0, 1)).shape
    with pytest.raises(ShapeError, match="not a permutation"):
        infer("transpose", ["f32[2,3,4]"], dimensions=(0, 0, 1))


def test_reverse_dimensions_checked():
    assert_shape(infer("reverse", ["f32[2,3]"], dimensions=(0, 1)), "f32[2,3]")
    with pytest.raises(ShapeError, match="out of range"):
        infer("reverse", ["f32[2,3]"], dimensions=(2,))
    with pytest.raises(ShapeError, match="repeats"):
        infer("reverse", ["f32[2,3]"], dimensions=(1, 1))


def test_concatenate():
    assert_shape(infer("concatenate", ["f32[2,3]", "f32[2,5]"], dimensions=(1,)), "f32[2,8]")
    with pytest.raises(ShapeError, match="dimension 0 differs"):
        infer("concatenate", ["f32[2,3]", "f32[3,5]"], dimensions=(1,))


@pytest.mark.parametrize("n,start,limit,stride", [(10, 1, 8, 3), (10, 0, 10, 1), (7, 2, 2, 1),
                                                  (9, 0, 9, 4)])
def test_slice_sizes_match_numpy(n, start, limit, stride):
    out = infer("slice", [f"f32[{n},2]"], slice=SliceSpec(((start, limit, stride), (0, 2, 1))))
    assert out.dims == np.zeros((n, 2))[start:limit:stride].shape


def test_slice_out_of_bounds():
    with pytest.raises(ShapeError, match=r"\[0:11:1\].*f32\[10\]"):
        infer("slice", ["f32[10]"], slice=SliceSpec(((0, 11, 1),)))


def test_dynamic_slice_new_and_old_index_forms():
    assert_shape(infer("dynamic-slice", ["f32[8,6]", "s32[]", "s32[]"],
                       dynamic_slice_sizes=(2, 3)), "f32[2,3]")
    assert_shape(infer("dynamic-slice", ["f32[8,6]", "s32[2]"], dynamic_slice_sizes=(2, 3)),
                 "f32[2,3]")
    with pytest.raises(ShapeError, match="needs 2 scalar start indices"):
        infer("dynamic-slice", ["f32[8,6]", "s32[]"], dynamic_slice_sizes=(2, 3))
    with pytest.raises(ShapeError, match="size 9 of dimension 0"):
        infer("dynamic-slice", ["f32[8,6]", "s32[]", "s32[]"], dynamic_slice_sizes=(9, 3))


def test_dynamic_update_slice():
    assert_shape(infer("dynamic-update-slice", ["f32[8,6]", "f32[2,6]", "s32[]", "s32[]"]),
                 "f32[8,6]")
    with pytest.raises(ShapeError, match=r"update f32\[9,6\] is larger"):
        infer("dynamic-update-slice", ["f32[8,6]", "f32[9,6]", "s32[]", "s32[]"])


@pytest.mark.parametrize("n,lo,hi,interior,expected", [
    (3, 1, 2, 0, 6),     # edges only
    (3, 0, 0, 1, 5),     # x0x0x
    (3, -1, 2, 1, 6),    # interior then a negative low edge drops one element
    (4, -2, -1, 0, 1),   # negative edges crop
    (0, 1, 1, 3, 2),     # interior padding of an empty dimension adds nothing
])
def test_pad_sizes(n, lo, hi, interior, expected):
    out = infer("pad", [f"f32[{n}]", "f32[]"], padding=PaddingConfig(((lo, hi, interior),)))
    assert out.dims == (expected,)


def test_pad_errors():
    with pytest.raises(ShapeError, match="negative"):
        infer("pad", ["f32[2]", "f32[]"], padding=PaddingConfig(((-3, 0, 0),)))
    with pytest.raises(ShapeError, match="interior"):
        infer("pad", ["f32[2]", "f32[]"], padding=PaddingConfig(((0, 0, -1),)))
    with pytest.raises(ShapeError, match="padding value"):
        infer("pad", ["f32[2]", "s32[]"], padding=PaddingConfig(((0, 0, 0),)))


def test_iota_and_bitcast():
    assert_shape(infer("iota", [], "s32[4,5]", iota_dimension=1), "s32[4,5]")
    with pytest.raises(ShapeError, match="iota_dimension=2"):
        infer("iota", [], "s32[4,5]", iota_dimension=2)
    assert_shape(infer("bitcast", ["f32[]"], "s32[]"), "s32[]")
    assert_shape(infer("bitcast", ["f32[2,3]"], "f32[6,1]"), "f32[6,1]")
    with pytest.raises(ShapeError, match="buffer size"):
        infer("bitcast", ["f32[2,3]"], "f64[6]")


def _gather(operand, indices, **attrs):
    attrs.setdefault("collapsed_slice_dims", ())
    return infer("gather", [operand, indices], **attrs)


def test_gather_rows_like_numpy_take():
    # x[idx] with idx of shape [5]: collapse dim 0, keep the row as an offset dim.
    x, idx = np.zeros((7, 4)), np.zeros(5, int)
    out = _gather("f32[7,4]", "s32[5]", offset_dims=(1,), collapsed_slice_dims=(0,),
                  start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 4))
    assert out.dims == x[idx].shape


def test_gather_operation_semantics_example():
    # operand [3,3] (XLA's Gather example): indices [2,2] with index_vector_dim=1 gather two
    # 2x2 windows, offset dims {1,2} -> [2,2,2].
    out = _gather("f32[3,3]", "s32[2,2]", offset_dims=(1, 2), start_index_map=(0, 1),
                  index_vector_dim=1, slice_sizes=(2, 2))
    assert_shape(out, "f32[2,2,2]")
    # Offset dims may sit before batch dims: offset_dims={0} puts the window first.
    out = _gather("f32[3,3]", "s32[5,1]", offset_dims=(0,), collapsed_slice_dims=(0,),
                  start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 3))
    assert_shape(out, "f32[3,5]")


def test_gather_batching_dims():
    # operand [B=4, 10, 8], indices [4, 3, 1]: per batch 3 lookups of a row of 8.
    out = _gather("f32[4,10,8]", "s32[4,3,1]", offset_dims=(2,), collapsed_slice_dims=(1,),
                  start_index_map=(1,), operand_batching_dims=(0,),
                  start_indices_batching_dims=(0,), index_vector_dim=2, slice_sizes=(1, 1, 8))
    assert_shape(out, "f32[4,3,8]")


def test_gather_errors():
    with pytest.raises(ShapeError, match="start_index_map has 1 entries"):
        _gather("f32[3,3]", "s32[2,2]", offset_dims=(1, 2), start_index_map=(0,),
                index_vector_dim=1, slice_sizes=(2, 2))
    with pytest.raises(ShapeError, match="dimension 0 must have slice size <= 1, has 2"):
        _gather("f32[3,3]", "s32[2,1]", offset_dims=(1,), collapsed_slice_dims=(0,),
                start_index_map=(0,), index_vector_dim=1, slice_sizes=(2, 3))


def test_scatter_single_and_variadic():
    add = binary_comp()
    attrs = dict(update_window_dims=(1,), inserted_window_dims=(0,),
                 scatter_dims_to_operand_dims=(0,), index_vector_dim=1, to_apply=add)
    assert_shape(infer("scatter", ["f32[7,4]", "s32[5,1]", "f32[5,4]"], **attrs), "f32[7,4]")
    with pytest.raises(ShapeError, match=r"updates must have rank 2"):
        infer("scatter", ["f32[7,4]", "s32[5,1]", "f32[5]"], **attrs)
    with pytest.raises(ShapeError, match=r"update scatter dimensions \[6\]"):
        infer("scatter", ["f32[7,4]", "s32[5,1]", "f32[6,4]"], **attrs)
    pair = comp("pair", ["f32[]", "s32[]", "f32[]", "s32[]"],
                lambda p: ("tuple", "(f32[], s32[])", [p[2], p[3]]))
    attrs["to_apply"] = pair
    out = infer("scatter", ["f32[7,4]", "s32[7,4]", "s32[5,1]", "f32[5,4]", "s32[5,4]"],
                **attrs)
    assert_shape(out, "(f32[7,4], s32[7,4])")


def test_tuple_and_get_tuple_element():
    t = infer("tuple", ["f32[2]", "s32[]"])
    assert_shape(t, "(f32[2], s32[])")
    assert_shape(infer_shape("get-tuple-element", [t], {"index": 1}), "s32[]")
    with pytest.raises(ShapeError, match="index=2 is out of range"):
        infer_shape("get-tuple-element", [t], {"index": 2})


def test_get_and_set_dimension_size():
    assert_shape(infer("get-dimension-size", ["f32[3,4]"], dimensions=(1,)), "s32[]")
    out = infer("set-dimension-size", ["f32[3,4]", "s32[]"], dimensions=(0,))
    assert out.dims == (3, 4) and out.dynamic == (True, False)


# ---- reductions ---------------------------------------------------------------------------------

def test_reduce_single_and_variadic():
    add = binary_comp()
    assert_shape(infer("reduce", ["f32[2,3,4]", "f32[]"], dimensions=(0, 2), to_apply=add),
                 "f32[3]")
    argmax = comp("argmax", ["f32[]", "s32[]", "f32[]", "s32[]"],
                  lambda p: ("tuple", "(f32[], s32[])", [p[0], p[1]]))
    out = infer("reduce", ["f32[5,6]", "s32[5,6]", "f32[]", "s32[]"], dimensions=(1,),
                to_apply=argmax)
    assert_shape(out, "(f32[5], s32[5])")
    assert np.zeros((2, 3, 4)).sum(axis=(0, 2)).shape == (3,)


def test_reduce_checks_reducer():
    with pytest.raises(ShapeError, match="init value 0 is s32"):
        infer("reduce", ["f32[4]", "s32[]"], dimensions=(0,), to_apply=binary_comp())
    with pytest.raises(ShapeError, match="must take 2 scalar parameters"):
        infer("reduce", ["f32[4]", "f32[]"], dimensions=(0,),
              to_apply=comp("one", ["f32[]"], lambda p: p[0]))
    with pytest.raises(ShapeError, match="dimension 1 is out of range"):
        infer("reduce", ["f32[4]", "f32[]"], dimensions=(1,), to_apply=binary_comp())


def test_reduce_window_sizes():
    add = binary_comp()
    # 2x3 windows with strides 2x3 over [4,6] -> [2,2]
    out = infer("reduce-window", ["f32[4,6]", "f32[]"], window=window(
        dict(size=2, stride=2), dict(size=3, stride=3)), to_apply=add)
    assert_shape(out, "f32[2,2]")
    # SAME-style padding: size 3 stride 1 pad 1_1 keeps 5; base dilation 2: 5 -> 9 -> 7.
    out = infer("reduce-window", ["f32[5,5]", "f32[]"], window=window(
        dict(size=3, padding_low=1, padding_high=1), dict(size=3, base_dilation=2)),
        to_apply=add)
    assert_shape(out, "f32[5,7]")


def test_select_and_scatter():
    ge = comp("ge", ["f32[]", "f32[]"], lambda p: ("compare", "pred[]", p, {"direction": "GE"}))
    w = window(dict(size=2, stride=2), dict(size=2, stride=2))
    out = infer("select-and-scatter", ["f32[4,6]", "f32[2,3]", "f32[]"], window=w, select=ge,
                scatter=binary_comp())
    assert_shape(out, "f32[4,6]")
    with pytest.raises(ShapeError, match="windowed operand's shape"):
        infer("select-and-scatter", ["f32[4,6]", "f32[3,3]", "f32[]"], window=w, select=ge,
              scatter=binary_comp())


def test_map_sort_topk():
    assert_shape(infer("map", ["f32[3]", "f32[3]"], dimensions=(0,), to_apply=binary_comp()),
                 "f32[3]")
    lt = comp("lt", ["f32[]", "f32[]", "s32[]", "s32[]"],
              lambda p: ("compare", "pred[]", p[:2], {"direction": "LT"}))
    assert_shape(infer("sort", ["f32[4,5]", "s32[4,5]"], dimensions=(1,), to_apply=lt),
                 "(f32[4,5], s32[4,5])")
    with pytest.raises(ShapeError, match="comparator"):
        infer("sort", ["f32[4,5]"], dimensions=(1,), to_apply=lt)
    assert_shape(infer("topk", ["f32[3,10]"], k=4, largest=True), "(f32[3,4], s32[3,4])")
    with pytest.raises(ShapeError, match="k=11"):
        infer("topk", ["f32[3,10]"], k=11)


# ---- linear algebra -----------------------------------------------------------------------------

def test_dot_dimension_numbers_match_einsum():
    # Batch dims first, then lhs free dims, then rhs free dims.
    lhs, rhs = np.zeros((8, 2, 3, 7)), np.zeros((3, 8, 5))
    expected = np.einsum("bikx,kbj->bixj", lhs, rhs).shape
    out = infer("dot", ["f32[8,2,3,7]", "f32[3,8,5]"], lhs_batch_dims=(0,),
                rhs_batch_dims=(1,), lhs_contracting_dims=(2,), rhs_contracting_dims=(0,))
    assert out.dims == expected


def test_dot_error_message_names_sizes_and_shapes():
    with pytest.raises(ShapeError) as e:
        infer("dot", ["f32[2,3]", "f32[4,5]"], lhs_contracting_dims=(1,),
              rhs_contracting_dims=(0,))
    assert str(e.value) == ("dot: lhs contracting dimension 1 has size 3 but rhs contracting "
                            "dimension 0 has size 4 (lhs f32[2,3], rhs f32[4,5])")


def test_dot_preferred_element_type():
    attrs = dict(lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    assert_shape(infer("dot", ["s8[2,3]", "s8[3,4]"], "s32[2,4]", **attrs), "s32[2,4]")
    assert_shape(infer("dot", ["bf16[2,3]", "bf16[3,4]"], "f32[2,4]", **attrs), "f32[2,4]")
    assert_shape(infer("dot", ["f32[2,3]", "f32[3,4]"], **attrs), "f32[2,4]")
    with pytest.raises(ShapeError, match="cannot produce s32"):
        infer("dot", ["f32[2,3]", "f32[3,4]"], "s32[2,4]", **attrs)


def test_ragged_dot_modes():
    # ragged lhs rows: lhs [m,k], rhs [g,k,n], group_sizes [g] -> [m,n]
    out = infer("ragged-dot", ["f32[11,5]", "f32[3,5,7]", "s32[3]"], lhs_contracting_dims=(1,),
                rhs_contracting_dims=(1,), lhs_ragged_dims=(0,), rhs_group_dims=(0,))
    assert_shape(out, "f32[11,7]")
    # ragged contracting dim: lhs [m,k], rhs [k,n] -> [g,m,n]
    out = infer("ragged-dot", ["f32[11,5]", "f32[5,7]", "s32[3]"], lhs_contracting_dims=(1,),
                rhs_contracting_dims=(0,), lhs_ragged_dims=(1,))
    assert_shape(out, "f32[3,11,7]")


def _conv(lhs, rhs, labels, w, declared=None, **attrs):
    return infer("convolution", [lhs, rhs], declared,
                 dim_labels=ConvDimensionNumbers.from_text(labels), window=w, **attrs)


def test_convolution_output_sizes():
    # NCHW input 5x5, 3x3 kernel, stride 2, pad 1: (5 + 2 - 3) // 2 + 1 = 3 per spatial dim.
    w = window(dict(size=3, stride=2, padding_low=1, padding_high=1),
               dict(size=3, stride=2, padding_low=1, padding_high=1))
    assert_shape(_conv("f32[1,3,5,5]", "f32[2,3,3,3]", "bf01_oi01->bf01", w), "f32[1,2,3,3]")
    # NHWC / HWIO (TensorFlow layout), VALID: 7 - 3 + 1 = 5; rhs dilation 2: 7 - 5 + 1 = 3.
    w = window(dict(size=3), dict(size=3, window_dilation=2))
    assert_shape(_conv("f32[2,7,7,4]", "f32[3,3,4,8]", "b01f_01io->b01f", w), "f32[2,5,3,8]")


def test_convolution_groups():
    w = window(dict(size=1))
    # depthwise-style: 4 input features in 2 groups, kernel input features 2.
    assert_shape(_conv("f32[1,4,9]", "f32[6,2,1]", "bf0_oi0->bf0", w,
                       feature_group_count=2), "f32[1,6,9]")
    assert_shape(_conv("f32[4,3,9]", "f32[6,3,1]", "bf0_oi0->bf0", w,
                       batch_group_count=2), "f32[2,6,9]")
    with pytest.raises(ShapeError, match="input features 4 / feature_group_count 3"):
        _conv("f32[1,4,9]", "f32[6,2,1]", "bf0_oi0->bf0", w, feature_group_count=3)
    with pytest.raises(ShapeError, match="window size 2 of spatial dimension 0"):
        _conv("f32[1,4,9]", "f32[6,4,1]", "bf0_oi0->bf0", window(dict(size=2)))


def test_fft_shapes_match_numpy():
    x = np.zeros((4, 8))
    assert infer("fft", ["f32[4,8]"], fft_type="RFFT", fft_length=(8,)).dims == \
        np.fft.rfft(x).shape
    assert_shape(infer("fft", ["f32[4,8]"], fft_type="RFFT", fft_length=(8,)), "c64[4,5]")
    assert_shape(infer("fft", ["c64[4,5]"], fft_type="IRFFT", fft_length=(8,)), "f32[4,8]")
    assert_shape(infer("fft", ["c128[2,3,4]"], fft_type="IFFT", fft_length=(3, 4)),
                 "c128[2,3,4]")
    with pytest.raises(ShapeError, match="RFFT needs the innermost"):
        infer("fft", ["f32[4,8]"], fft_type="RFFT", fft_length=(6,))


def test_cholesky_triangular_solve_batch_norm():
    assert_shape(infer("cholesky", ["f32[2,3,3]"], lower=True), "f32[2,3,3]")
    with pytest.raises(ShapeError, match="square"):
        infer("cholesky", ["f32[3,4]"])
    assert_shape(infer("triangular-solve", ["f32[3,3]", "f32[3,5]"], left_side=True),
                 "f32[3,5]")
    with pytest.raises(ShapeError, match="does not match"):
        infer("triangular-solve", ["f32[3,3]", "f32[3,5]"], left_side=False)
    out = infer("batch-norm-training", ["f32[2,4,5]", "f32[4]", "f32[4]"], epsilon=0.001,
                feature_index=1)
    assert_shape(out, "(f32[2,4,5], f32[4], f32[4])")
    with pytest.raises(ShapeError, match=r"offset must be f32\[5\]"):
        infer("batch-norm-training", ["f32[2,4,5]", "f32[5]", "f32[4]"], epsilon=0.1,
              feature_index=2)


# ---- control flow -------------------------------------------------------------------------------

def test_while_loop_state():
    state = "(s32[], f32[3])"
    cond = comp("cond", [state], lambda p: ("compare", "pred[]", [p[0], p[0]],
                                            {"direction": "EQ"}))
    body = comp("body", [state], lambda p: p[0])
    assert_shape(infer("while", [state], condition=cond, body=body), state)
    bad_cond = comp("bad", [state], lambda p: ("get-tuple-element", "s32[]", p, {"index": 0}))
    with pytest.raises(ShapeError, match="must return pred"):
        infer("while", [state], condition=bad_cond, body=body)
    with pytest.raises(ShapeError, match=r"init is \(s32\[\], f32\[4\]\)"):
        infer("while", ["(s32[], f32[4])"], condition=cond, body=body)


def test_conditional_pred_and_index():
    a = comp("a", ["f32[2]"], lambda p: p[0])
    b = comp("b", ["s32[]"], lambda p: ("broadcast", "f32[2]", [], {}))
    b.root.opcode = "convert"
    b.root.shape = S("f32[2]")
    assert_shape(infer("conditional", ["pred[]", "f32[2]", "s32[]"], true_computation=a,
                       false_computation=b), "f32[2]")
    assert_shape(infer("conditional", ["s32[]", "f32[2]", "s32[]"],
                       branch_computations=[a, b]), "f32[2]")
    with pytest.raises(ShapeError, match="pred\\[\\] or s32\\[\\]"):
        infer("conditional", ["u32[]", "f32[2]", "s32[]"], branch_computations=[a, b])
    c = comp("c", ["f32[2]"], lambda p: ("negate", "f32[3]", p))
    with pytest.raises(ShapeError, match=r"branch 1 \(c\) returns f32\[3\]"):
        infer("conditional", ["s32[]", "f32[2]", "f32[2]"], branch_computations=[a, c])


def test_call_fusion_custom_call():
    neg = comp("neg", ["f32[4]"], lambda p: ("negate", "f32[4]", p))
    assert_shape(infer("call", ["f32[4]"], to_apply=neg), "f32[4]")
    assert_shape(infer("fusion", ["f32[4]"], calls=neg, kind="kLoop"), "f32[4]")
    with pytest.raises(ShapeError, match=r"operand 0 is f32\[5\] but parameter 0"):
        infer("call", ["f32[5]"], to_apply=neg)
    assert_shape(infer("custom-call", ["f32[4]"], "(f32[2], s32[])", custom_call_target="x"),
                 "(f32[2], s32[])")
    with pytest.raises(ShapeError, match="give the result shape explicitly"):
        infer("custom-call", ["f32[4]"], custom_call_target="x")


def test_async_start_update_done():
    neg = comp("neg", ["f32[4]"], lambda p: ("negate", "f32[4]", p))
    start = infer("async-start", ["f32[4]"], calls=neg)
    assert_shape(start, "((f32[4]), f32[4], u32[])")
    assert_shape(infer("async-start", ["f32[4]"], "((f32[4]), f32[4])", calls=neg),
                 "((f32[4]), f32[4])")
    with pytest.raises(ShapeError, match="element 1 must be the result"):
        infer("async-start", ["f32[4]"], "((f32[4]), f32[5], u32[])", calls=neg)
    assert_shape(infer_shape("async-update", [start], {}), "((f32[4]), f32[4], u32[])")
    assert_shape(infer_shape("async-done", [start], {"calls": neg}), "f32[4]")


def test_rng_ops():
    assert_shape(infer("rng", ["f32[]", "f32[]"], "f32[3,4]", distribution="rng_uniform"),
                 "f32[3,4]")
    with pytest.raises(ShapeError, match="parameters' type"):
        infer("rng", ["f32[]", "f32[]"], "s32[3]", distribution="rng_uniform")
    assert_shape(infer("rng-bit-generator", ["u64[2]"], "(u64[2], u32[8])",
                       algorithm="rng_three_fry"), "(u64[2], u32[8])")
    assert_shape(infer("rng-get-and-update-state", [], delta=1), "u64[2]")


# ---- collectives, channels, feeds ---------------------------------------------------------------

def groups(*gs):
    return ReplicaGroups(tuple(tuple(g) for g in gs))


def test_all_reduce_and_reducer_type():
    add = binary_comp()
    assert_shape(infer("all-reduce", ["f32[4]"], to_apply=add, replica_groups=groups()),
                 "f32[4]")
    assert_shape(infer("all-reduce", ["f32[4]", "f32[2,2]"], to_apply=add),
                 "(f32[4], f32[2,2])")
    with pytest.raises(ShapeError, match=r"to_apply=add \(f32\[\], f32\[\]\) -> f32\[\] must be "
                                          r"a binary scalar computation \(s32\[\], s32\[\]\)"):
        infer("all-reduce", ["s32[4]"], to_apply=add)


def test_all_gather_reduce_scatter_group_size():
    g = groups((0, 1, 2, 3))
    assert_shape(infer("all-gather", ["f32[2,3]"], replica_groups=g, dimensions=(0,)),
                 "f32[8,3]")
    assert_shape(infer("reduce-scatter", ["f32[8,3]"], replica_groups=g, dimensions=(0,),
                       to_apply=binary_comp()), "f32[2,3]")
    with pytest.raises(ShapeError, match="not divisible by the group size 4"):
        infer("reduce-scatter", ["f32[6,3]"], replica_groups=g, dimensions=(0,),
              to_apply=binary_comp())
    # `{}`: the group size depends on the device count, so the declared shape is needed.
    assert_shape(infer("all-gather", ["f32[2,3]"], "f32[2,12]", replica_groups=groups(),
                       dimensions=(1,)), "f32[2,12]")
    with pytest.raises(ShapeError, match="whole factor"):
        infer("all-gather", ["f32[2,3]"], "f32[2,7]", replica_groups=groups(), dimensions=(1,))
    start = infer("all-gather-start", ["f32[2,3]"], replica_groups=g, dimensions=(0,))
    assert_shape(start, "(f32[2,3], f32[8,3])")
    assert_shape(infer_shape("all-gather-done", [start], {}), "f32[8,3]")


def test_cross_replica_and_partition_group_size_needs_the_module():
    # channel_id without use_global_device_ids: each replica id brings all its partitions, so
    # the gathered size depends on num_partitions and only the declared shape can tell.
    attrs = dict(channel_id=1, replica_groups=groups((0, 1)), dimensions=(0,))
    with pytest.raises(ShapeError, match="group size depends on the device count"):
        infer("all-gather", ["f32[2]"], **attrs)
    assert_shape(infer("all-gather", ["f32[2]"], "f32[8]", **attrs), "f32[8]")
    attrs["use_global_device_ids"] = True
    assert_shape(infer("all-gather", ["f32[2]"], **attrs), "f32[4]")


def test_all_to_all_forms():
    g = groups((0, 1, 2, 3))
    assert_shape(infer("all-to-all", ["f32[8,3]"], replica_groups=g, dimensions=(0,)),
                 "f32[8,3]")
    with pytest.raises(ShapeError, match="not divisible"):
        infer("all-to-all", ["f32[6,3]"], replica_groups=g, dimensions=(0,))
    assert_shape(infer("all-to-all", ["f32[4,2]"] * 4, replica_groups=g),
                 "(f32[4,2], f32[4,2], f32[4,2], f32[4,2])")
    with pytest.raises(ShapeError, match="one operand per group member"):
        infer("all-to-all", ["f32[4,2]"] * 3, replica_groups=g)


def test_collective_permute_forms():
    pairs = ((0, 1), (1, 0))
    assert_shape(infer("collective-permute", ["f32[3]"], source_target_pairs=pairs), "f32[3]")
    start = infer("collective-permute-start", ["f32[3]"], source_target_pairs=pairs)
    assert_shape(start, "(f32[3], f32[3], u32[], u32[])")
    assert_shape(infer_shape("collective-permute-done", [start], {}), "f32[3]")
    assert_shape(infer("collective-broadcast", ["s32[2]"], replica_groups=groups((0, 1))),
                 "s32[2]")
    assert_shape(infer("ragged-all-to-all", ["f32[8,2]", "f32[6,2]", "s32[2]", "s32[2]",
                                             "s32[2]", "s32[2]"]), "f32[6,2]")


def test_send_recv_feeds_tokens_ids():
    assert_shape(infer("send", ["f32[2]", "token[]"], channel_id=1),
                 "(f32[2], u32[], token[])")
    assert_shape(infer("recv", ["token[]"], "(f32[2], u32[], token[])", channel_id=1),
                 "(f32[2], u32[], token[])")
    assert_shape(infer("send-done", ["(f32[2], u32[], token[])"]), "token[]")
    assert_shape(infer("recv-done", ["(f32[2], u32[], token[])"]), "(f32[2], token[])")
    with pytest.raises(ShapeError, match="token"):
        infer("send", ["f32[2]", "f32[]"])
    assert_shape(infer("infeed", ["token[]"], "((f32[2], s32[]), token[])"),
                 "((f32[2], s32[]), token[])")
    assert_shape(infer("outfeed", ["f32[2]", "token[]"], outfeed_shape=S("f32[2]")), "token[]")
    with pytest.raises(ShapeError, match=r"outfeed_shape=f32\[3\]"):
        infer("outfeed", ["f32[2]", "token[]"], outfeed_shape=S("f32[3]"))
    assert_shape(infer("after-all", ["token[]", "token[]"]), "token[]")
    assert_shape(infer("after-all", []), "token[]")
    assert_shape(infer("add-dependency", ["f32[2]", "token[]"]), "f32[2]")
    assert_shape(infer("replica-id", []), "u32[]")
    assert_shape(infer("partition-id", []), "u32[]")
    assert_shape(infer("copy-start", ["f32[2]"]), "(f32[2], f32[2], u32[])")
    assert_shape(infer("copy-done", ["(f32[2], f32[2], u32[])"]), "f32[2]")


def test_declared_shape_required_for_underivable_ops():
    for op, shapes, attrs in [("parameter", [], {}), ("constant", [], {}),
                              ("reshape", ["f32[4]"], {}), ("iota", [], {"iota_dimension": 0}),
                              ("recv", ["token[]"], {}), ("infeed", ["token[]"], {})]:
        with pytest.raises(ShapeError, match="give the result shape explicitly"):
            infer(op, shapes, **attrs)


def test_layouts_default_on_constructed_shapes():
    out = infer("transpose", ["f32[2,3]"], dimensions=(1, 0))
    assert out.layout is not None and out.layout.minor_to_major == (1, 0)


def test_malformed_attribute_is_a_shape_error():
    with pytest.raises(ShapeError, match="transpose: "):
        infer("transpose", ["f32[2,3]"], dimensions=None)


@pytest.mark.parametrize("opcode, shapes", [
    ("dynamic-slice", [("f32", [2, 3]), ("s32", [])]),
    ("dynamic-update-slice", [("f32", [2, 3]), ("f32", [1, 1]), ("s32", []), ("u32", [])]),
])
def test_start_index_errors_name_the_opcode_once(opcode, shapes):
    """Before: 'dynamic-slice: dynamic-slice: needs 2 scalar start indices ...' (the rule
    and infer_shape both put the opcode in front)."""
    attrs = {"dynamic_slice_sizes": (1, 1)} if opcode == "dynamic-slice" else {}
    with pytest.raises(ShapeError) as e:
        infer_shape(opcode, [Shape.array(t, d) for t, d in shapes], attrs)
    assert str(e.value).startswith(f"{opcode}: ") and str(e.value).count(opcode) == 1, e.value
