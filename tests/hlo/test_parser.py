"""Parsing HLO text: shapes, layouts, attributes, literals, styles, sugar, errors.

Expected values are written out by hand from docs/reference/hlo-text-format.md and XLA's
operation semantics; literal values are checked bit for bit with numpy.
"""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

from xladist import parse_hlo
from xladist.errors import HloParseError
from xladist.hlo.attrs import (ConvDimensionNumbers, PaddingConfig, RawAttr, ReplicaGroups,
                               SliceSpec, Window, WindowDim)
from xladist.hlo.ir import Computation, Instruction
from xladist.hlo.parser import parse_module
from xladist.hlo.shape import PRIMITIVE_TYPES, UNBOUNDED, Layout, Shape
from xladist.hlo.verifier import verify_module

ADD = """
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""


def entry(body: str, extra: str = ADD, header: str = "HloModule m") -> str:
    return f"{header}\n{extra}\nENTRY %main {{\n{body}\n}}\n"


def instr(body: str, name: str, **kw) -> Instruction:
    return parse_module(entry(body, **kw)).entry.instruction(name)


def value_of(type_and_literal: str):
    """The numpy value of `constant(...)` with the given result shape."""
    shape, _, lit = type_and_literal.partition(" ")
    return instr(f"ROOT %c = {shape} constant({lit})", "c").literal.value


# ---- shapes and layouts --------------------------------------------------------------
ARRAY_TYPES = [t for t in PRIMITIVE_TYPES.values() if t.is_array_type]


@pytest.mark.parametrize("ptype", ARRAY_TYPES, ids=lambda t: t.name)
def test_every_primitive_type_parses_as_array_and_scalar(ptype):
    m = parse_module(entry(f"%x = {ptype.name}[3,2]{{0,1}} parameter(0)\n"
                           f"ROOT %y = {ptype.name}[] parameter(1)"))
    x, y = m.entry.parameters
    assert x.shape.element_type is ptype and x.shape.dims == (3, 2)
    assert x.shape.layout.minor_to_major == (0, 1)
    assert y.shape == Shape.scalar(ptype)


def test_token_and_tuple_shapes():
    i = instr("%t = token[] after-all()\n"
              "ROOT %p = ((f32[], u32[]), token[], ()) parameter(0)", "p")
    s = i.shape
    assert s.is_tuple and len(s.tuple_shapes) == 3
    assert s.tuple_shapes[0].tuple_shapes[1] == Shape.scalar("u32")
    assert s.tuple_shapes[1].is_token and s.tuple_shapes[2].tuple_shapes == ()


@pytest.mark.parametrize("text, expected", [
    ("f32[2,3]{1,0}", Layout((1, 0))),
    ("f32[2,3]{0,1}", Layout((0, 1))),
    ("f32[2,3,4,5]{0,3,2,1}", Layout((0, 3, 2, 1))),
    ("f32[2,3,4]{1,2,0:T(1,128)}", Layout((1, 2, 0), tiles=((1, 128),))),
    ("f32[8,128]{1,0:T(8,128)(2,1)}", Layout((1, 0), tiles=((8, 128), (2, 1)))),
    ("f32[8,128]{1,0:T(*,128)}", Layout((1, 0), tiles=((-1, 128),))),
    ("u32[]{:S(2)}", Layout((), memory_space=2)),
    ("f32[4]{0:S(1)}", Layout((0,), memory_space=1)),
    ("s4[8]{0:E(4)}", Layout((0,), element_size_in_bits=4)),
    ("f32[4]{0:T(4)L(2)#(u16)*(u32)E(32)S(5)}", Layout(
        (0,), tiles=((4,),), tail_padding_alignment=2, index_type="u16", pointer_type="u32",
        element_size_in_bits=32, memory_space=5)),
    ("f32[1024]{0:SC(0:512)}", Layout((0,), split_configs=((0, (512,)),))),
    ("f32[4]{0:M(8)}", Layout((0,), dynamic_shape_metadata_prefix_bytes=8)),
    ("f32[4]{0:D(D+~)}", Layout((0,), dim_level_types="D+~")),
    ("f32[2, 3] {1,0}", Layout((1, 0))),
    ("f32[2, 3]{ 0, 1 }", Layout((0, 1))),
])
def test_layout_forms(text, expected):
    assert instr(f"ROOT %x = {text} parameter(0)", "x").shape.layout == expected


def test_physical_shape_in_layout():
    lay = instr("ROOT %x = s4[8]{0:P(s8[4]{0})} parameter(0)", "x").shape.layout
    assert lay.physical_shape == Shape.array("s8", (4,), (0,))


def test_missing_layout_is_none_and_scalar_layout_is_omitted():
    i = instr("ROOT %x = f32[2,3] parameter(0)", "x")
    assert i.shape.layout is None and i.shape.dims == (2, 3)


@pytest.mark.parametrize("text, dims, dynamic", [
    ("f32[<=8,4]{1,0}", (8, 4), (True, False)),
    ("f32[?,4]{1,0}", (UNBOUNDED, 4), (True, False)),
    ("s32[3, <=5]", (3, 5), (False, True)),
    ("f32[0]{0}", (0,), (False,)),
])
def test_dynamic_and_zero_dims(text, dims, dynamic):
    s = instr(f"ROOT %x = {text} parameter(0)", "x").shape
    assert s.dims == dims and s.dynamic == dynamic


def test_buffer_shape():
    s = instr("ROOT %x = b(f32[4]{0}) parameter(0)", "x").shape
    assert s.buffer and s.dims == (4,)


def test_buffer_shape_as_an_operands_written_shape():
    # The long style with operand shapes writes `custom-call(b(f32[4]{0}) %x)`; the operand
    # reader took `b(` for an operand written inline with opcode b ("unknown opcode 'b'").
    text = entry('  %x = b(f32[4]{0}) parameter(0)\n'
                 '  ROOT %y = b(f32[4]{0}) custom-call(b(f32[4]{0}) %x), custom_call_target="P"')
    m = parse_module(text)
    assert m.entry.root.operands == [m.entry.parameters[0]]
    printed = m.to_text(operand_shapes=True)
    assert "custom-call(b(f32[4]{0}) %x)" in printed
    assert parse_module(printed).to_text(operand_shapes=True) == printed


# ---- attribute syntaxes ---------------------------------------------------------------
def test_every_attribute_syntax_becomes_its_typed_value():
    text = entry("""
  %p = f32[1,4,4,2]{3,2,1,0} parameter(0)
  %k = f32[3,3,2,2]{3,2,1,0} parameter(1)
  %z = f32[] constant(0)
  %cv = f32[1,4,4,2]{3,2,1,0} convolution(%p, %k), window={size=3x3 stride=2x1 pad=1_1x0_-1 lhs_dilate=1x2 rhs_dilate=2x1 rhs_reversal=0x1}, dim_labels=b01f_01io->b01f, feature_group_count=1, operand_precision={high,default}
  %rw = f32[1,2,4,2]{3,2,1,0} reduce-window(%p, %z), window={size=1x2x1x1 stride=1x2x1x1}, to_apply=%add
  %pd = f32[3,6,9,2]{3,2,1,0} pad(%p, %z), padding=1_1x0_2x-1_2_2x0_0
  %sl = f32[1,2,2,2]{3,2,1,0} slice(%p), slice={[0:1], [0:4:2], [1:3], [0:2]}
  %ar = f32[1,4,4,2]{3,2,1,0} all-reduce(%p), channel_id=7, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add
  %ag = f32[2,4,4,2]{3,2,1,0} all-gather(%p), replica_groups=[2,2]<=[2,2]T(1,0), dimensions={0}
  %a2 = f32[1,4,4,2]{3,2,1,0} all-to-all(%p), replica_groups={}, dimensions={3}
  %cp = f32[1,4,4,2]{3,2,1,0} collective-permute(%p), channel_id=2, source_target_pairs={{0,1},{1,2},{3,0}}
  %cc = (f32[4]{0}, s32[]) custom-call(%p, %z), custom_call_target="my\\ttarget\\"x", operand_layout_constraints={f32[1,4,4,2]{0,1,2,3}, f32[]}, api_version=API_VERSION_TYPED_FFI, output_to_operand_aliasing={{0}: (0, {})}
  %bn = f32[1,4,4,2]{3,2,1,0} batch-norm-inference(%p, %z, %z, %z, %z), epsilon=0.001, feature_index=3
  %cmp = pred[] compare(%z, %z), direction=LT, type=TOTALORDER
  %of = token[] outfeed(%z, %tk), outfeed_shape=f32[], outfeed_config="cfg"
  %tk = token[] after-all()
  ROOT %t = () tuple()
""".replace("  %of = token[] outfeed(%z, %tk), outfeed_shape=f32[], outfeed_config=\"cfg\"\n"
            "  %tk = token[] after-all()",
            "  %tk = token[] after-all()\n"
            "  %of = token[] outfeed(%z, %tk), outfeed_shape=f32[], outfeed_config=\"cfg\""))
    e = parse_module(text).entry
    add = parse_module(text).computation("add")
    cv = e.instruction("cv").attrs
    assert cv["window"] == Window((
        WindowDim(3, 2, 1, 1, window_dilation=2, base_dilation=1, window_reversal=False),
        WindowDim(3, 1, 0, -1, window_dilation=1, base_dilation=2, window_reversal=True)))
    assert cv["dim_labels"] == ConvDimensionNumbers(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    assert cv["feature_group_count"] == 1 and cv["operand_precision"] == ("high", "default")
    assert e.instruction("rw").attrs["window"].dims[1] == WindowDim(2, 2)
    assert e.instruction("pd").attrs["padding"] == PaddingConfig(
        ((1, 1, 0), (0, 2, 0), (-1, 2, 2), (0, 0, 0)))
    assert e.instruction("sl").attrs["slice"] == SliceSpec(
        ((0, 1, 1), (0, 4, 2), (1, 3, 1), (0, 2, 1)))
    ar = e.instruction("ar").attrs
    assert ar["channel_id"] == 7 and ar["use_global_device_ids"] is True
    assert ar["replica_groups"] == ReplicaGroups(((0, 1), (2, 3)))
    assert ar["to_apply"].name == "add"
    # [2,2]<=[2,2]T(1,0): iota(4) reshaped 2x2, transposed -> {{0,2},{1,3}}
    assert e.instruction("ag").attrs["replica_groups"].groups == ((0, 2), (1, 3))
    assert e.instruction("a2").attrs["replica_groups"].groups == ()
    assert e.instruction("cp").attrs["source_target_pairs"] == ((0, 1), (1, 2), (3, 0))
    cc = e.instruction("cc").attrs
    assert cc["custom_call_target"] == 'my\ttarget"x'
    assert cc["operand_layout_constraints"] == (
        Shape.array("f32", (1, 4, 4, 2), (0, 1, 2, 3)), Shape.scalar("f32"))
    assert cc["api_version"] == "API_VERSION_TYPED_FFI"
    assert cc["output_to_operand_aliasing"] == RawAttr("{{0}: (0, {})}")
    bn = e.instruction("bn").attrs
    assert bn["epsilon"] == 0.001 and bn["feature_index"] == 3
    assert e.instruction("cmp").attrs == {"direction": "LT", "type": "TOTALORDER"}
    assert e.instruction("of").attrs == {"outfeed_shape": Shape.scalar("f32"),
                                         "outfeed_config": "cfg"}
    assert add.root.opcode == "add"


def test_common_attributes_go_to_instruction_fields():
    i = instr("""
  %a = f32[4]{0} parameter(0)
  %b = f32[4]{0} negate(%a)
  ROOT %r = f32[4]{0} add(%a, %b), sharding={{replicated}, /*index=1*/{maximal device=0} metadata={op_name="s"}}, frontend_attributes={_xla_compute_type="host",mlir={n = 1 : i32, s = "}"},esc="a\\"b"}, control-predecessors={%b, %a}, statistics={visualizing_index=0,stat=1.5}, result_accuracy={mode=highest}, origin={{"x"}}, metadata={op_type="add" op_name="jit(f)/add" source_file="f.py" source_line=3}, backend_config={"key":"va}l{ue","n":[1,2]}""", "r")
    assert i.sharding == ('{{replicated}, /*index=1*/{maximal device=0} '
                          'metadata={op_name="s"}}')
    assert i.frontend_attributes == {"_xla_compute_type": "host",
                                     "mlir": '{n = 1 : i32, s = "}"}', "esc": 'a"b'}
    assert [p.name for p in i.control_predecessors] == ["b", "a"]
    assert i.statistics == "{visualizing_index=0,stat=1.5}"
    assert i.result_accuracy == "{mode=highest}" and i.origin == '{{"x"}}'
    assert i.metadata == 'op_type="add" op_name="jit(f)/add" source_file="f.py" source_line=3'
    assert i.backend_config == '{"key":"va}l{ue","n":[1,2]}'
    assert i.attrs == {}


def test_quoted_backend_config_keeps_its_quotes_and_escapes():
    i = instr('%a = f32[] parameter(0)\nROOT %r = f32[] negate(%a), '
              'backend_config="opaque \\"text\\""', "r")
    assert i.backend_config == '"opaque \\"text\\""'


def test_unknown_attributes_are_kept_raw():
    i = instr("%a = f32[] parameter(0)\nROOT %r = f32[] negate(%a), new_thing={a=[1,2]<=[2]}, "
              "glued=[2,2]<=[4]T(1,0), word=FOO", "r")
    assert i.attrs == {"new_thing": RawAttr("{a=[1,2]<=[2]}"),
                       "glued": RawAttr("[2,2]<=[4]T(1,0)"), "word": RawAttr("FOO")}


# ---- literals ----------------------------------------------------------------------
def bits(value, dtype):
    return np.asarray(value).view(dtype).tolist()


def test_float_literal_edge_cases_bit_exact():
    assert bits(value_of("f32[] -0"), np.uint32) == 0x80000000
    assert bits(value_of("f32[] 0"), np.uint32) == 0
    assert bits(value_of("f64[] -0"), np.uint64) == 1 << 63
    assert bits(value_of("f32[] nan"), np.uint32) == 0x7FC00000
    assert bits(value_of("f32[] -nan"), np.uint32) == 0xFFC00000
    assert bits(value_of("f32[] nan(0x7)"), np.uint32) == 0x7F800007
    assert bits(value_of("f32[] -nan(0x400001)"), np.uint32) == 0xFFC00001
    assert bits(value_of("f64[] nan(0x1)"), np.uint64) == 0x7FF0000000000001
    assert bits(value_of("bf16[] -nan"), np.uint16) == 0xFFC0
    assert bits(value_of("f16[] nan(0x1)"), np.uint16) == 0x7C01
    assert value_of("f32[] inf") == np.inf and value_of("f32[] -inf") == -np.inf
    assert value_of("f32[] 1E+3") == 1000.0 and value_of("f32[] 42") == 42.0
    assert value_of("f32[] 1.17549435e-38") == np.float32(1.17549435e-38)
    assert value_of("f64[] 0.1") == 0.1 and value_of("f32[] .5") == 0.5


@pytest.mark.parametrize("text, dtype, expected", [
    ("bf16[3] {1.5, -2, 0.1}", ml_dtypes.bfloat16, [1.5, -2, 0.1]),
    ("f16[2] {65504, -0.099976}", np.float16, [65504, -0.099976]),
    ("f8e4m3fn[2] {448, -0.5}", ml_dtypes.float8_e4m3fn, [448, -0.5]),
    ("f8e5m2[2] {57344, 0.09375}", ml_dtypes.float8_e5m2, [57344, 0.09375]),
    ("s4[3] {-8, 7, 0}", ml_dtypes.int4, [-8, 7, 0]),
    ("u4[2] {15, 0}", ml_dtypes.uint4, [15, 0]),
    ("u64[2] {18446744073709551615, 9223372036854775808}", np.uint64,
     [2**64 - 1, 2**63]),
    ("s64[1] {-9223372036854775808}", np.int64, [-2**63]),
    ("s8[2] {-128, 127}", np.int8, [-128, 127]),
    ("pred[4] {0, 1, true, false}", np.bool_, [False, True, True, False]),
])
def test_typed_literals(text, dtype, expected):
    v = value_of(text)
    assert v.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(v.astype(np.float64 if v.dtype.kind == "V" or
                                           "float" in str(v.dtype) else v.dtype),
                                  np.array(expected, dtype=dtype))


def test_complex_literals():
    v = value_of("c64[3] {(1, -2.5), (inf, nan), (-0, 0)}")
    assert v.dtype == np.complex64
    assert v[0] == 1 - 2.5j and v[1].real == np.inf and math.isnan(v[1].imag)
    assert math.copysign(1, v[2].real) == -1
    s = value_of("c128[] (0.5, 0)")
    assert s.shape == () and s == 0.5 + 0j and s.dtype == np.complex128


def test_nested_tuple_and_rank4_literals():
    t = instr("ROOT %c = (s32[2,1]{1,0}, (u32[2]{0}, pred[])) constant(( { {7}, {8} }, "
              "( {1, 5}, true ) ))", "c").literal
    assert t.value[0].value.tolist() == [[7], [8]]
    assert t.value[1].value[0].value.tolist() == [1, 5] and t.value[1].value[1].value
    v = value_of("f32[1,2,2,1]{3,2,1,0} { { /*i0=0*/ { /*i1=0*/ {1}, {2} }, "
                 "{ /*i1=1*/ {3}, {4} } } }")
    np.testing.assert_array_equal(v, np.arange(1, 5, dtype=np.float32).reshape(1, 2, 2, 1))


def test_zero_size_and_elided_literals():
    assert value_of("f32[0]{0} {}").shape == (0,)
    assert value_of("f32[2,0]{1,0} { {}, {} }").shape == (2, 0)
    assert value_of("f32[0,3]{1,0} {  }").shape == (0, 3)
    lit = instr("ROOT %c = f32[12]{0} constant({...})", "c").literal
    assert lit.elided and lit.value is None
    assert instr("ROOT %c = (f32[], s32[]) constant({...})", "c").literal.elided


def test_literal_values_match_numpy_layout():
    v = value_of("s32[2,3]{1,0} { { 1, 2, 3 }, { 4, 5, 6 } }")
    np.testing.assert_array_equal(v, np.arange(1, 7, dtype=np.int32).reshape(2, 3))
    v = value_of("s32[2,3]{0,1} { {1,2,3}, {4,5,6} }")  # values are logical, whatever the layout
    np.testing.assert_array_equal(v, np.arange(1, 7, dtype=np.int32).reshape(2, 3))


# ---- styles, comments, structure -----------------------------------------------------
LONG = """HloModule m, entry_computation_layout={(f32[4]{0}, f32[4]{0})->f32[4]{0}}

%sum.1 (a.1: f32[], b.1: f32[]) -> f32[] {
  %a.1 = f32[] parameter(0)
  %b.1 = f32[] parameter(1)
  ROOT %add.1 = f32[] add(f32[] %a.1, f32[] %b.1)
}

ENTRY %main.2 (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %m = f32[4]{0} multiply(f32[4]{0} %x, f32[4]{0} %y)
  ROOT %r = f32[4]{0} all-reduce(f32[4]{0} %m), replica_groups={}, to_apply=%sum.1
}
"""
SHORT = """HloModule m, entry_computation_layout={(f32[4]{0}, f32[4]{0})->f32[4]{0}}

sum.1 {
  a.1 = f32[] parameter(0)
  b.1 = f32[] parameter(1)
  ROOT add.1 = f32[] add(a.1, b.1)
}

ENTRY main.2 {
  x = f32[4]{0} parameter(0)
  y = f32[4]{0} parameter(1)
  m = f32[4]{0} multiply(x, y)
  ROOT r = f32[4]{0} all-reduce(m), replica_groups={}, to_apply=sum.1
}
"""


def test_both_styles_give_the_same_module():
    a, b = parse_module(LONG), parse_module(SHORT)
    assert a.to_text() == b.to_text()
    assert [c.name for c in a.computations] == ["sum.1", "main.2"]
    assert a.entry.root.attrs["to_apply"] is a.computation("sum.1")


def test_operands_and_calls_resolve_to_objects_and_lines_are_recorded():
    m = parse_module(LONG)
    r = m.entry.root
    mul = m.entry.instruction("m")
    assert r.operands == [mul] and mul.operands == [m.entry.parameter(0), m.entry.parameter(1)]
    assert isinstance(r.attrs["to_apply"], Computation)
    assert m.computation("sum.1").line == 3 and m.entry.line == 9
    assert mul.line == 12 and r.line == 13


def test_comments_everywhere_and_multiline_instructions():
    text = """// leading comment
HloModule m /* c */ , /* c */ replica_count=2
ENTRY /* c */ main {
  /* c */ a = f32[2] /* c */ {0} parameter(/* c */ 0) // trailing
  ROOT
    t = (f32[2]{0}, /*index=1*/ f32[2]{0})
      tuple(a, // one
            /*index=1*/a)  , metadata={op_name="x" /* c */}
}  // done
"""
    m = parse_module(text)
    assert m.replica_count == 2
    t = m.entry.root
    assert t.name == "t" and len(t.operands) == 2 and t.line == 5
    assert t.metadata == 'op_name="x" /* c */'


def test_header_less_module_and_entry_choice():
    m = parse_module("c { ROOT x = f32[] constant(1) }\nd { ROOT y = f32[] constant(2) }")
    assert m.entry.name == "d" and m.name == "d" and m.entry.is_entry
    m = parse_module("ENTRY c { ROOT x = f32[] constant(1) }\nd { ROOT y = f32[] constant(2) }")
    assert m.entry.name == "c"


def test_header_attributes():
    m = parse_module(
        "HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }, "
        "entry_computation_layout={(f32[2,3]{0,1}, s32[])->(f32[2,3]{1,0})}, "
        "allow_spmd_sharding_propagation_to_output={true}, replica_count=2, "
        "num_partitions=4, frontend_attributes={a=\"b\"}\n"
        "ENTRY e { ROOT p = f32[2,3]{0,1} parameter(0) }")
    assert m.is_scheduled and m.replica_count == 2 and m.num_partitions == 4
    params, result = m.entry_computation_layout
    assert params == [Shape.array("f32", (2, 3), (0, 1)), Shape.scalar("s32")]
    assert result == Shape.tuple_of([Shape.array("f32", (2, 3), (1, 0))])
    assert list(m.header_attrs.items()) == [
        ("input_output_alias", "{ {0}: (0, {}, may-alias) }"),
        ("allow_spmd_sharding_propagation_to_output", "{true}")]
    assert m.frontend_attributes == {"a": "b"}


def test_stack_frame_sections_are_kept_raw():
    frames = ('FileNames\n1 "a.py"\n\nFunctionNames\n1 "f"\n\nFileLocations\n'
              '1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=1 end_column=9}'
              '\n\nStackFrames\n1 {file_location_id=1 parent_frame_id=0}')
    m = parse_module(f"HloModule m\n\n{frames}\n\n\nENTRY e {{ ROOT x = f32[] constant(1) }}")
    assert m.stack_frames == frames


def test_execution_thread_and_names_with_dots_dashes_and_opcode_names():
    m = parse_module("""HloModule m
%host.1-a (p: f32[]) -> f32[] {
  %p = f32[] parameter(0)
  ROOT %add = f32[] add(%p, %p)
}, execution_thread="host"
ENTRY %e {
  %get-tuple-element.4 = f32[] parameter(0)
  %copy = f32[] copy(%get-tuple-element.4)
  ROOT %call = f32[] call(%copy), to_apply=%host.1-a
}""")
    assert m.computation("host.1-a").execution_thread == "host"
    assert m.entry.root.operands[0].name == "copy"


def test_root_anywhere_and_unused_parameters():
    c = parse_module("ENTRY e {\n ROOT r = f32[] add(a, a)\n}".replace(
        "ROOT r = f32[] add(a, a)", "a = f32[] parameter(1)\n ROOT r = f32[] add(a, a)\n"
        " u = f32[] parameter(0)")).entry
    assert c.root.name == "r" and c.instructions[-1].name == "u"
    assert [p.name for p in c.parameters] == ["u", "a"]


def test_async_sugar_synthesizes_a_wrapped_computation():
    m = parse_module(entry("""
  %p = f32[4,8]{1,0} parameter(0)
  %s = ((f32[4,8]{1,0}), f32[4,8]{1,0}) all-to-all-start(%p), channel_id=3, replica_groups={{0,1}}, dimensions={0}, metadata={op_name="a"}
  %u = ((f32[4,8]{1,0}), f32[4,8]{1,0}) all-to-all-update(%s)
  %d = f32[4,8]{1,0} all-to-all-done(%u)
  %rs = ((f32[4,8]{1,0}), f32[2,8]{1,0}) reduce-scatter-start(%d), dimensions={0}, to_apply=%add
  %rd = f32[2,8]{1,0} reduce-scatter-done(%rs)
  %ags = (f32[2,8]{1,0}, f32[4,8]{1,0}) all-gather-start(%rd), dimensions={0}
  ROOT %agd = f32[4,8]{1,0} all-gather-done(%ags)"""))
    e = m.entry
    s, u, d = e.instruction("s"), e.instruction("u"), e.instruction("d")
    assert (s.opcode, u.opcode, d.opcode) == ("async-start", "async-update", "async-done")
    wrapped = s.attrs["calls"]
    assert wrapped.is_async_wrapper and wrapped in m.computations
    assert u.attrs["calls"] is wrapped and d.attrs["calls"] is wrapped
    root = wrapped.root
    assert root.opcode == "all-to-all" and root.shape == Shape.array("f32", (4, 8), (1, 0))
    assert root.attrs == {"channel_id": 3, "replica_groups": ReplicaGroups(((0, 1),)),
                          "dimensions": (0,)}
    assert [p.opcode for p in root.operands] == ["parameter"]
    assert s.metadata == 'op_name="a"' and "channel_id" not in s.attrs
    assert e.instruction("rs").attrs["calls"].root.attrs["to_apply"] is m.computation("add")
    # Dedicated opcodes are looked up first.
    assert e.instruction("ags").opcode == "all-gather-start"
    assert e.instruction("agd").opcode == "all-gather-done"


def test_generic_async_with_named_computation():
    m = parse_module("""HloModule m
%w (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %n = f32[8]{0} negate(%p)
}
ENTRY %e {
  %x = f32[8]{0} parameter(0)
  %s = ((f32[8]{0}), f32[8]{0}, u32[]) async-start(%x), async_execution_thread="t", calls=%w
  ROOT %d = f32[8]{0} async-done(%s), calls=%w
}""")
    s = m.entry.instruction("s")
    assert s.attrs == {"async_execution_thread": "t", "calls": m.computation("w")}
    assert not m.computation("w").is_async_wrapper


def test_tricky_real_dump_forms():
    """docs/reference/hlo-text-format.md section 10: forms seen in real dumps."""
    m = parse_module(entry("""
  %p0 = s32[] parameter(0)
  %p1 = f32[4,5]{1,0} parameter(1)
  %idx = s32[2]{0} parameter(2)
  %ds = f32[2,5]{1,0} dynamic-slice(%p1, %idx), dynamic_slice_sizes={2,5}
  %init = f32[] constant(0)
  %i0 = s32[] constant(0)
  %red = (f32[], s32[]) reduce(%p1, %idx, %init, %i0), dimensions={0,1}, to_apply=%add
  %cond = f32[4,5]{1,0} conditional(%p0, %p1, %p1), branch_computations={%b0, %b1}
  %mh = s32[] mulhi(%p0, %p0)
  ROOT %t = (f32[2,5]{1,0}, f32[4,5]{1,0}) tuple(%ds, %cond)""",
        extra=ADD + """
%b0 (x: f32[4,5]) -> f32[4,5] {
  ROOT %x = f32[4,5]{1,0} parameter(0)
}
%b1 (x: f32[4,5]{0,1}) -> f32[4,5] {
  %x = f32[4,5]{1,0} parameter(0)
  ROOT %n = f32[4,5]{1,0} negate(%x)
}
"""))
    e = m.entry
    assert e.instruction("ds").operands[1].shape.dims == (2,)
    assert len(e.instruction("red").operands) == 4
    assert e.instruction("cond").attrs["branch_computations"] == [m.computation("b0"),
                                                                  m.computation("b1")]
    assert e.instruction("mh").opcode == "mulhi"


def test_public_api_parse_hlo():
    m = parse_hlo(SHORT, filename="x.hlo")
    assert m.entry.name == "main.2"


# ---- errors ------------------------------------------------------------------------
ERRORS = [
    ("ROOT r = f32[4]{0} add(p, p foo)", "expected ')' after operands of r, found 'foo'", 5, 31),
    ("ROOT r = f32[4]{0} ad(p, p)", "unknown opcode 'ad'", 5, 22),
    ("ROOT r = f32[4]{0} add(p, %x)", "operand %x of r is not defined in computation main",
     5, 29),
    ("ROOT r = f32[4,4]{1,0} broadcast(p), dimensions=1",
     "attribute dimensions of r expects an integer list like {0,1}, found '1'", 5, 51),
    ("ROOT r = f32[] reduce(p, c), dimensions={0}",
     "missing required attribute to_apply on r", 5, 8),
    ("ROOT r = f32[] reduce(p, c), dimensions={0}, to_apply=%nope",
     "computation %nope used by attribute to_apply of r is not defined", 5, 57),
    ("ROOT r = f32[4]{0} add(p)", "add r takes 2 operands, found 1", 5, 22),
    ("ROOT r = f32[4]{0,1} add(p, p)", "layout {0,1} is not a permutation", 5, 12),
    ("ROOT r = f32[4] constant({1, 2, 3})",
     "constant r: dimension 0 has 3 elements but the shape f32[4] needs 4", 5, 28),
    ("ROOT r = u8[] constant(256)", "value 256 is out of range for u8", 5, 26),
    ("ROOT r = f16[] constant(65520)", "value 65520 is out of range for f16", 5, 27),
    ("ROOT r = f32[4]{0} add(p, p), dimensions={0}, dimensions={1}",
     "attribute dimensions is given twice on r", 5, 49),
    ("ROOT r = f32[4]{0} add(p, p), backend_config=\"abc", "unterminated string", 5, 48),
    ("ROOT r = f32[4]{0} add(f32[3]{0} p, p)",
     "operand p of r is written with shape f32[3] but p has shape f32[4]", 5, 36),
    ("ROOT r = f32[4]{0} add(p, p) /* open", "unterminated comment", 5, 32),
    ("ROOT r = f32[4]{0} all-to-all-done(p)", "expects the result of all-to-all-start", 5, 22),
    ("ROOT r = f32[4]{0} parameter(0)", "parameter number 0 of r is already used by p", 5, 32),
    ("ROOT r = f32[4]{0} all-reduce(p), replica_groups=[2,3]<=[4], to_apply=add",
     "does not hold the 4 ids", 5, 52),
    ("ROOT r = f32[4]{0} custom-call(p), custom_call_target=\"x\\q\"",
     "unknown escape sequence \\q", 5, 57),
    ("ROOT r = f32[4]{0} convolution(p, p), dim_labels=b01f_01io->bf",
     "spatial dimension counts differ", 5, 52),
    ("ROOT r = f32[4]{0} reduce-window(p, c), window={size=2 stride=1x1}, to_apply=add",
     "stride has 2 dimension(s) but size has 1", 5, 50),
    ("ROOT r = f32[4]{0} copy(p), sharding={devices=[2]0,1)}", "unbalanced ')': expected '}'",
     5, 55),
    # (at the end of input: just after the last text, on its line, not on the empty line
    # after the final newline with no line to show)
    ("ROOT r = f32[4]{0} copy(p), sharding={devices=[2]0,1", "to close computation main",
     6, 2),
    ("ROOT = f32[4]{0} copy(p)", "expected an instruction", 5, 8),
    ("ROOT r f32[4]{0} copy(p)", "expected '=' after instruction name r, found 'f32[4]{0}'",
     5, 10),
    ("ROOT r = constant(1)", "constant r needs its result shape written before the opcode",
     5, 12),
    ("ROOT r = add(p, c)", "the result shape of r is not written and cannot be inferred: add:",
     5, 12),
    ("ROOT r = f32[4]{0} add(p, f32[4] parameter(0))",
     "parameter number 0 of parameter.inline.1 is already used by p", 5, 46),
    ("ROOT r = f32[4]{0} add(p, f32[4] negate(p) p)", "expected ')' after operands of r", 5, 46),
]


@pytest.mark.parametrize("body, message, line, column", ERRORS, ids=[e[1][:40] for e in ERRORS])
def test_errors_point_at_the_offending_token(body, message, line, column):
    text = ("HloModule m\nadd { a = f32[] parameter(0)\nROOT s = f32[] add(a, a) }\n"
            f"ENTRY main {{ p = f32[4]{{0}} parameter(0), c = f32[] constant(0)\n  {body}\n}}\n")
    text = text.replace(", c = f32[] constant(0)", " c = f32[] constant(0)")
    with pytest.raises(HloParseError) as info:
        parse_module(text, filename="t.hlo")
    e = info.value
    assert message in e.message
    assert (e.line, e.column) == (line, column), str(e)
    lines = text.splitlines()
    assert e.line_text == (lines[line - 1] if line <= len(lines) else "")
    assert str(e).startswith(f"t.hlo:{line}:{column}: ")
    if e.line_text:
        assert str(e).endswith("\n  " + " " * (column - 1) + "^")


def test_structural_errors():
    cases = [
        ("ENTRY e { ROOT a = f32[] constant(1)\nROOT b = f32[] constant(2) }", "two ROOT"),
        ("e { ROOT a = f32[] constant(1) }\ne { ROOT a = f32[] constant(1) }", "defined twice"),
        ("ENTRY e { a = f32[] constant(1)\na = f32[] constant(1) }", "defined twice"),
        ("ENTRY e { }", "has no instructions"),
        ("ENTRY e { ROOT a = f32[] constant(1) }\nENTRY f { ROOT a = f32[] constant(1) }",
         "second ENTRY"),
        ("e (p: f32[]) -> s32[] { ROOT a = f32[] parameter(0) }", "declares result shape s32[]"),
        ("HloModule m, replica_count=0\nENTRY e { ROOT a = f32[] constant(1) }",
         "at least 1"),
        ("HloModule m\nFileNames\n1 \"a\"\nStackFrames\n", "FunctionNames"),
        ("", "expected at least one computation"),
    ]
    for text, message in cases:
        with pytest.raises(HloParseError, match=re.escape(message)):
            parse_module(text)



# What jax.jit(f).lower(x).as_text() gives by default (StableHLO), with and without
# debug_info=True's location aliases (jax 0.10.2), and a bare func.func.
_STABLEHLO = """module @jit_f attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<3xf32>) -> (tensor<3xf32>) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<3xf32>
    %1 = stablehlo.add %arg0, %0 : tensor<3xf32>
    return %1 : tensor<3xf32>
  }
}
"""


@pytest.mark.parametrize("text,line", [
    (_STABLEHLO, 1),
    ('#loc1 = loc("a")\n#loc2 = loc("f.py":3:10)\n' + _STABLEHLO, 3),
    ("module attributes {mhlo.num_partitions = 1 : i32} {\n}\n", 1),
    ("func.func @main(%arg0: tensor<f32>) -> tensor<f32> {\n", 1),
])
def test_stablehlo_text_is_named_and_the_way_to_hlo_text_given(text, line):
    """A user who passes jax's default as_text() got "expected '{' to open the body of
    computation module, found '@'" (found by a JAX program sweep)."""
    with pytest.raises(HloParseError) as e:
        parse_module(text)
    assert "MLIR (StableHLO) text, not HLO text" in str(e.value)
    assert 'as_text(dialect="hlo")' in str(e.value)
    assert e.value.line == line


def test_a_computation_named_module_is_still_hlo():
    m = parse_module("module {\n  ROOT c = f32[] constant(1)\n}\n")
    assert m.entry.name == "module"

# ---- big integer-list attributes: one INTLISTS token, same values as the spelled-out form ----
_PERMUTE = """HloModule m, replica_count=4
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %e (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %ar = f32[4]{0} all-reduce(%p), replica_groups=GROUPS, to_apply=%add
  ROOT %c = f32[4]{0} collective-permute(%ar), source_target_pairs=PAIRS
}"""


@pytest.mark.parametrize("pairs, groups", [
    ("{{0,1},{1,2},{2,3},{3,0}}", "{{0,1},{2,3}}"),
    ("{{0,1}}", "{{0,1,2,3}}"),
    ("{{-0,1},{1,0}}", "{{0,1,2},{3}}"),
])
def test_int_lists_after_pairs_and_groups_are_one_token(pairs, groups):
    from xladist.hlo.lexer import INTLISTS, tokenize
    text = _PERMUTE.replace("PAIRS", pairs).replace("GROUPS", groups)
    kinds, texts, _ = tokenize(text)
    assert pairs in [t for k, t in zip(kinds, texts) if k == INTLISTS]
    spaced = _PERMUTE.replace("PAIRS", pairs.replace(",", ", ")).replace(
        "GROUPS", groups.replace(",", ", "))
    assert INTLISTS not in tokenize(spaced)[0]
    got, ref = (parse_hlo(t).entry for t in (text, spaced))
    for name, attr in (("c", "source_target_pairs"), ("ar", "replica_groups")):
        assert got.instruction(name).attrs[attr] == ref.instruction(name).attrs[attr]
    assert got.instruction("c").attrs["source_target_pairs"] == tuple(
        tuple(int(x) for x in g.split(",")) for g in pairs[2:-2].split("},{"))


@pytest.mark.parametrize("pairs, bad", [("{{0,1,2}}", "{0,1,2}"), ("{{0,1},{1}}", "{1}")])
def test_a_pair_list_with_a_non_pair_is_an_error(pairs, bad):
    with pytest.raises(HloParseError, match=f"expects {{source,target}} pairs, found {bad}"):
        parse_hlo(_PERMUTE.replace("PAIRS", pairs).replace("GROUPS", "{}"))


def test_unquoted_pairs_in_frontend_attributes_parse_and_print_back():
    """XLA prints `_xla_send_recv_source_target_pairs={{0,1},{1,2}}` unquoted inside
    frontend_attributes; after `source_target_pairs=` the lexer makes that one INTLISTS
    token, which the frontend-attributes reader takes as the value's text."""
    text = """HloModule m, replica_count=2
ENTRY %e (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  %t = token[] after-all()
  %s = (f32[2]{0}, u32[], token[]) send(%p, %t), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,0}}}
  %sd = token[] send-done(%s), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,0}}}
  %r = (f32[2]{0}, u32[], token[]) recv(%t), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,0}}}
  %rd = (f32[2]{0}, token[]) recv-done(%r), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,0}}}
  ROOT %g = f32[2]{0} get-tuple-element(%rd), index=0
}"""
    module = parse_hlo(text)
    send = module.entry.instruction("s")
    assert send.frontend_attributes["_xla_send_recv_source_target_pairs"] == "{{0,1},{1,0}}"
    assert "_xla_send_recv_source_target_pairs={{0,1},{1,0}}" in module.to_text()
    assert parse_hlo(module.to_text()).to_text() == module.to_text()


# ---- metadata / backend_config: one BRACED token when plain, the general path otherwise ----
@pytest.mark.parametrize("value, composite", [
    ('{op_name="jit(f)/add" source_file="/a/b.py" source_line=3}', True),
    ('{op_name="x{}y\\"z" profile_type={1,2} stack_frame_id=4}', True),
    ('{}', True),
    ("{op_name='single quoted' source_line=3}", False),    # other quote kind: token by token
    ('{op_name="a" /* comment */ source_line=3}', False),  # a comment: token by token
    ('{ op_name="a", {nested={deeper}} }', False),          # nested two levels
])
def test_metadata_is_one_token_when_plain_and_reads_the_same_either_way(value, composite):
    from xladist.hlo.lexer import BRACED, tokenize
    text = entry(f"  ROOT %p = f32[] parameter(0), metadata={value}, "
                 f"backend_config={value}", extra="")
    kinds, texts, _ = tokenize(text)
    assert (BRACED in kinds) == composite
    p = parse_module(text).entry.instruction("p")
    assert p.metadata == value[1:-1]
    assert p.backend_config == value


# ---- what XLA's parser takes and its tests write (issue 30 items 2 and 3) ----------------------

def test_a_result_shape_left_out_is_inferred():
    """XLA's parser infers a missing result shape (the pipeline-parallelism tests write
    `output_ = call(...)`, `gte0 = get-tuple-element(t), index=0`, `i_ = add(i, c1)`)."""
    m = parse_module("""HloModule m
inc {
  x = u32[] parameter(0)
  ROOT y = u32[] add(x, x)
}
ENTRY e {
  p = (u32[], f32[2,3]) parameter(0)
  i = get-tuple-element(p), index=0
  a = get-tuple-element(p), index=1
  j = call(i), to_apply=inc
  k = add(i, j)
  t = transpose(a), dimensions={1,0}
  ROOT r = tuple(k, t)
}
""")
    e = m.entry
    assert [str(e.instruction(n).shape.to_text(False)) for n in "ijkt"] == [
        "u32[]", "u32[]", "u32[]", "f32[3,2]"]
    assert e.root.shape.to_text(False) == "(u32[], f32[3,2])"
    # The inferred shapes print: the text round-trips through XLA's written form.
    assert "u32[] call(" in m.to_text() and parse_module(m.to_text()).to_text() == m.to_text()


def test_operands_written_inline_are_instructions_of_their_own():
    """`add(counter, s32[] constant(1))` (XLA's AllReduceTest loops): the inline operand
    becomes an instruction before its user, with a made-up name that a later written name
    takes over; attributes of an inline operand end where the next operand starts."""
    m = parse_module("""HloModule m
ENTRY e {
  p = s32[4] parameter(0)
  a = s32[4] add(p, s32[4] broadcast(s32[] constant(1)), dimensions={})
  constant.inline.1 = s32[] constant(7)
  ROOT r = s32[4] multiply(a, s32[4] broadcast(constant.inline.1), dimensions={})
}
""")
    names = [i.name for i in m.entry.instructions]
    opcodes = [i.opcode for i in m.entry.instructions]
    assert opcodes == ["parameter", "constant", "broadcast", "add", "constant", "broadcast",
                       "multiply"]
    assert names[4] == "constant.inline.1" and names[1] != "constant.inline.1"
    assert len(set(names)) == len(names)
    add = m.entry.instruction("a")
    assert add.operands[1].opcode == "broadcast" and add.operands[1].attrs["dimensions"] == ()
    assert add.operands[1].operands[0].literal.value.tolist() == 1
    assert parse_module(m.to_text()).to_text() == m.to_text()


def test_parameters_written_inline():
    """XLA's tests write reducers as `ROOT add = f32[] add(f32[] parameter(0), f32[]
    parameter(1))`: inline parameters are the computation's parameters, by their numbers."""
    m = parse_module("""HloModule m
sum {
  ROOT add = f32[] add(f32[] parameter(1), f32[] parameter(0))
}
ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[] reduce(p, f32[] constant(0)), dimensions={0}, to_apply=sum
}
""")
    verify_module(m)
    add = m.computation("sum").root
    assert [o.opcode for o in add.operands] == ["parameter", "parameter"]
    assert [o.parameter_number for o in add.operands] == [1, 0]
    assert [i.parameter_number for i in m.computation("sum").parameters] == [0, 1]
    assert parse_module(m.to_text()).to_text() == m.to_text()


def test_short_style_of_names_that_lex_as_floats_parses_back():
    # `%inf` and `%nan` are names for the lexer; the short style prints them bare (as XLA's
    # does), where they lexed as floats: the printed text did not parse back ("expected an
    # instruction ..., found 'inf'"). (Keywords stay refused bare: `ROOT = ...` lacks a name.)
    text = entry("  %inf = f32[2]{0} parameter(0)\n"
                 "  %nan = f32[2]{0} negate(%inf), control-predecessors={%inf}\n"
                 "  ROOT %r = f32[2]{0} add(%nan, %inf), control-predecessors={%nan}")
    m = parse_module(text)
    short = m.to_text(sigils=False)
    assert "  nan = f32[2]{0} negate(inf), control-predecessors={inf}\n" in short
    again = parse_module(short)
    assert again.to_text(sigils=False) == short and again.to_text() == m.to_text()
    assert [p.name for p in again.entry.root.control_predecessors] == ["nan"]


@pytest.mark.timeout(60)
def test_a_large_literal_the_numbers_token_cannot_take_is_read_in_linear_time():
    # The array-literal token's pattern once backtracked over every prefix of a literal
    # it could not take (a nan at its end): 8,000 elements 5 s, 10^5 elements an hour.
    # Now about a second for 10^5 (this test's timeout is the bound).
    n = 100_000
    vals = ", ".join(["1.5"] * (n - 1) + ["nan"])
    text = f"HloModule m\nENTRY e {{\n  ROOT c = f32[{n}] constant({{{vals}}})\n}}\n"
    got = parse_module(text).entry.root.literal.value
    assert got.shape == (n,) and np.isnan(got[-1]) and (got[:-1] == 1.5).all()


def test_a_large_array_literal_is_one_token_and_reads_as_numpy_reads_its_decimals():
    # Before: every number and comma of a literal was a token of its own (a 10^6-element
    # constant: 2 x 10^6 tokens, 4-6.7 s to parse). Now the literal after `constant(` is
    # one token whose braces are checked against the shape, its numbers read by numpy.
    from xladist.hlo import lexer
    rng = np.random.default_rng(0)
    a = rng.standard_normal((100, 200)).astype(np.float32)
    rows = ", ".join("{" + ", ".join(repr(float(v)) for v in row) + "}" for row in a)
    text = (f"HloModule m\n\nENTRY %e () -> f32[100,200] {{\n"
            f"  ROOT %c = f32[100,200] constant({{ {rows} }})\n}}\n")
    kinds, _, _ = lexer.tokenize(text)
    assert len(kinds) < 50, f"{len(kinds):,} tokens for a 20,000-element literal"
    np.testing.assert_array_equal(parse_module(text).entry.root.literal.value, a)
    # A literal that does not fit its shape is still read token by token, and named.
    bad = text.replace("{ {", "{ {1, ", 1)
    with pytest.raises(HloParseError, match="dimension 1 has 201 elements but the shape "
                                            r"f32\[100,200\] needs 200"):
        parse_module(bad)
