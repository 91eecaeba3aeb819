"""HLO text XLA's parser accepts or rejects, as its own parser tests state it
(openxla/xla xla/hlo/parser/hlo_parser_test.cc, the test named at each case): one test per
disagreement a comparison against those tests found, each failing before its fix. The
inputs are minimal modules written here for each syntax fact, not XLA's test text."""

from __future__ import annotations

import numpy as np
import pytest

import xladist

from xladist.errors import HloParseError, VerifierError
from xladist.hlo.parser import parse_module
from xladist.hlo.printer import print_module
from xladist.hlo.verifier import verify_module


def _module(body: str) -> str:
    return f"HloModule m\n\nENTRY %e () -> f32[2] {{\n{body}\n}}\n\n"


@pytest.mark.parametrize("literal", [
    "s32[2]{0} {1, 2}",                                      # CustomCallWithLiteral
    "f32[] 0.1",                                             # CustomCallWithLiteralR0
    "( s32[3]{0} {4, 16, 2}, pred[2]{0} {1, 0} )",           # CustomCallWithLiteralTuple
    "( s32[1]{0} {4}, pred[] true )",
])
def test_custom_call_literal_is_a_shape_and_a_value(literal):
    """XLA prints custom-call `literal=` as the literal's shape then its value; a non-tuple
    one used to stop our raw-value reader after the shape ("expected an instruction ...
    found '{'")."""
    text = _module("  %c = f32[1]{0} constant({1})\n  ROOT %cc = f32[2]{0} custom-call(%c), "
                   f'custom_call_target="foo", literal={literal}')
    module = parse_module(text)
    assert module.entry.root.attrs["literal"].to_text() == literal
    assert print_module(module) == text


@pytest.mark.parametrize("literal", ["s32[2]{0} {1, 2, 3}", "f32[] x", "{1, 2}"])
def test_custom_call_literal_is_checked_against_its_shape(literal):
    with pytest.raises(HloParseError) as e:
        parse_module(_module("  ROOT %cc = f32[2]{0} custom-call(), custom_call_target=\"f\", "
                             f"literal={literal}"))
    assert e.value.line == 4 and e.value.column > 40


def test_origin_recovery_table_ends_with_a_newline_like_xla():
    """XLA prints `, origin_recovery_table={\\n...}\\n`: its own newline, so a blank line more
    before the first computation (hlo_parser_test.cc OriginalValueRecoveryTable); we printed
    the usual two newlines and the round trip lost one."""
    table = '{\n  {"c"} : {"c__ovp0"},\n  "\n    ENTRY %r (p: s32[2]) -> s32[2] {\n' \
            '      ROOT %p = s32[2]{0} parameter(0)\n    }\n  "\n}'
    text = (f"HloModule m, entry_computation_layout={{()->s32[2]{{0}}}}, "
            f"origin_recovery_table={table}\n\n\n"
            "ENTRY %e () -> s32[2] {\n  ROOT %c = s32[2]{0} constant({1, 2})\n}\n\n")
    module = parse_module(text)
    assert module.header_attrs["origin_recovery_table"] == table
    assert print_module(module) == text


def test_after_all_takes_any_operand_like_xlas_verifier():
    """XLA's verifier lets after-all take non-token operands as ordering edges
    (hlo_parser_test.cc AddDependency: `token0 = token[] after-all(neg)` with neg f32[]);
    ours said "operand 0 must be token[]"."""
    text = """HloModule m

ENTRY e {
  p = f32[] parameter(0)
  neg = f32[] negate(p)
  token0 = token[] after-all(neg, p)
  p_after_token = f32[] add-dependency(p, token0)
  ROOT sum = f32[] add(neg, p_after_token)
}
"""
    verify_module(parse_module(text))


COMBINED_PERMUTE = """HloModule m, replica_count=2

ENTRY e {
  a = f32[4]{0} parameter(0)
  b = s32[2]{0} parameter(1)
  s = ((f32[4]{0}, s32[2]{0}), (f32[4]{0}, s32[2]{0})) collective-permute-start(a, b), source_target_pairs={{0,1},{1,0}}
  ROOT d = (f32[4]{0}, s32[2]{0}) collective-permute-done(s)
}
"""


def test_combined_collective_permute_start_has_no_context_scalars():
    """collective-permute-start of several operands is ((inputs), (outputs)), without the
    two u32[] of the one-operand form (hlo_parser_test.cc CombinedCollectivePermuteStartAndDone);
    ours demanded them. XLA's InferCollectivePermuteStartShape takes the contexts from the
    declared shape, so written ones are accepted too; the operand and result parts are not
    free."""
    text = COMBINED_PERMUTE
    verify_module(parse_module(text))
    verify_module(parse_module(text.replace(
        "(f32[4]{0}, s32[2]{0})) collective", "(f32[4]{0}, s32[2]{0}), u32[], u32[]) "
        "collective")))
    with pytest.raises(VerifierError, match="differs from the shape inferred"):
        verify_module(parse_module(text.replace(
            "(f32[4]{0}, s32[2]{0})) collective", "(f32[4]{0}, f32[2]{0})) collective")))


@pytest.mark.parametrize("labels", ["?b01f_0?1io->b01?f", "b0?f_0io->bf0", "bf01_oi01->bf01"])
def test_dim_labels_with_unused_positions_print_back(labels):
    """`?` marks a label position no dimension uses, so a label can be longer than its
    spatial dims + 2 (hlo_parser_test.cc CustomCallWithUnknownDimLabels); printing such a
    module raised IndexError because the length was taken as spatial + 2."""
    text = ("HloModule m\n\nENTRY c {\n  ROOT r = f32[100]{0} custom-call(), window={size=2x2}, "
            f'dim_labels={labels}, custom_call_target="target"\n}}\n\n')
    module = parse_module(text)
    assert print_module(module, sigils=False) == text
    assert module.entry.root.attrs["dim_labels"].to_text() == labels


@pytest.mark.parametrize("header", ["HloModule no_root:", "HloModule no_root"])
def test_module_name_may_end_with_a_colon(header):
    """XLA's lexer reads `name:` as a name token, so `HloModule no_root:` is a module named
    no_root (hlo_parser_test.cc NoRoot, NoEntry, Comments, SameNameDiffComputations...);
    ours said "expected the module name after HloModule"."""
    module = parse_module(f"{header}\nENTRY consts {{\n  first = f32[1]{{0}} constant({{1}})\n"
                          "  last = f32[1]{0} constant({2})\n}\n")
    assert module.name == "no_root" and module.entry.root.name == "last"


def test_u64_constant_takes_negative_s64_bit_cast():
    """XLA reads integer literals as s64 and bit-casts them for u64: `u64[] constant(-1)` is
    2^64-1 (hlo_parser_test.cc ConstantUnsignedUnderflow); narrower unsigned types still
    reject negatives (ConstantU4Underflow)."""
    text = "HloModule m\nENTRY e {\n  ROOT c = u64[2]{0} constant({-1, -9223372036854775808})\n}\n"
    module = parse_module(text)
    assert module.entry.root.literal.value.tolist() == [2**64 - 1, 2**63]
    assert "constant({18446744073709551615, 9223372036854775808})" in print_module(module)
    for bad in ("u32[] constant(-1)", "u64[] constant(-9223372036854775809)"):
        with pytest.raises(HloParseError, match="out of range"):
            parse_module(f"HloModule m\nENTRY e {{\n  ROOT c = {bad}\n}}\n")


@pytest.mark.parametrize("value", ["1.8e308", "-1.8e308", "(1.8e308, 0)"])
def test_f64_literal_beyond_range_is_rejected(value):
    """A finite decimal beyond the f64 range became inf silently; XLA says it is out of range
    (hlo_parser_test.cc ConstantF64Overflow/Underflow)."""
    ty = "c128" if value.startswith("(") else "f64"
    with pytest.raises(HloParseError, match="out of range") as e:
        parse_module(f"HloModule m\nENTRY e {{\n  ROOT c = {ty}[] constant({value})\n}}\n")
    assert e.value.line == 3
    assert parse_module("HloModule m\nENTRY e {\n  ROOT c = f64[] constant(-inf)\n}\n")


@pytest.mark.parametrize("attr, message", [
    ("input_output_alias={ {0 : (0, {0}), {1}: (0, {1}) }", "integer list"),
    ("input_output_alias={ {0, a}: (0, {0}), {1}: (0, {1}) }", "expected an integer"),
    ("input_output_alias={ {0, 0}: (0, {0}), (0, {1}) }", "integer list"),
    ("input_output_alias={ {0}: (0, {0}): {0, 1}, {1}: (0, {1}) }", "to close"),
    ("input_output_alias={ {0}: (0, {0}, maybe-alias) }", "may-alias or must-alias"),
    ("buffer_donor={ (0, {0, a}), (0, {1}) }", "expected an integer"),
    ("buffer_donor={ (zero, {0}), (0, {1}) }", "expects an integer"),
])
def test_malformed_aliasing_header_is_rejected(attr, message):
    """input_output_alias / buffer_donor were kept as raw text unchecked; XLA rejects these
    (hlo_parser_test.cc Aliasing*, BufferDonor*)."""
    with pytest.raises(HloParseError, match=message) as e:
        parse_module(f"HloModule m, {attr}\n\nENTRY e {{\n  ROOT p = (f32[], f32[]) "
                     "parameter(0)\n}\n")
    assert e.value.line == 1 and e.value.column > 14


@pytest.mark.parametrize("attr", [
    "input_output_alias={ {0}: (0, {0}, must-alias), {1}: (0, {1}) }",
    "input_output_alias={ {0, 0}: (0, {0}), {1, 1}: (0, {1}) }",
    "input_output_alias={ {}: (0, {}, may-alias) }", "buffer_donor={ (0, {0}), (0, {1}) }",
])
def test_wellformed_aliasing_header_prints_back(attr):
    text = f"HloModule m, {attr}\n\nENTRY e {{\n  ROOT p = (f32[], f32[]) parameter(0)\n}}\n\n"
    assert print_module(parse_module(text), sigils=False) == text


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.slow
def test_combined_collective_permute_runs_on_two_ranks(backend, cluster_run):
    """The combined form the verifier now accepts also runs: each operand moves along the
    pairs, on both backends, under MPI (the session's 2-rank cluster, tests/cluster_fixture.py)."""
    import numpy as np

    text = COMBINED_PERMUTE
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.arange(4, dtype=np.int32).reshape(2, 2)
    outs = cluster_run(parse_module(text), [[a[d], b[d]] for d in range(2)], n=2,
                       backend=backend, timeout=60)
    for d in range(2):
        np.testing.assert_array_equal(outs[d][0], a[1 - d])
        np.testing.assert_array_equal(outs[d][1], b[1 - d])


@pytest.mark.parametrize("broadcast", [
    "ROOT %b = f32[3,2] broadcast(%s)",                       # shape written, no dimensions=
    "ROOT %b = f32[3,2] broadcast(f32[] constant(7))",        # inline scalar operand
])
def test_broadcast_of_a_scalar_needs_no_dimensions(broadcast):
    """BroadcastOfScalarDoesntNeedDimensionsAttr: XLA's parser makes `dimensions=` optional
    when the operand is a scalar (it can only be {}). It used to be refused as a missing
    required attribute."""
    text = _module(f"  %s = f32[] constant(7)\n  {broadcast}").replace("-> f32[2]", "-> f32[3,2]")
    module = parse_module(text)
    verify_module(module)
    root = module.entry.root
    assert root.attrs["dimensions"] == ()
    assert "dimensions={}" in print_module(module)


def test_broadcast_of_an_array_still_needs_dimensions():
    """Only a scalar operand leaves nothing to choose: an array operand's dimensions stay
    required, as in XLA."""
    text = _module("  %v = f32[2] constant({1, 2})\n  ROOT %b = f32[3,2] broadcast(%v)")
    with pytest.raises(HloParseError, match="missing required attribute dimensions"):
        parse_module(text)


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_slash_slash_comment_ends_at_any_line_end(eol):
    """SlashSlashComment{,MsDosEolFormat,MacEolFormat}: a `//` comment ends at the line's end,
    whether lines end in \\n, \\r\\n or a lone \\r (old Mac files). With \\r alone the comment
    used to run to the end of the text, swallowing the module ("expected at least one
    computation")."""
    text = eol.join(["HloModule m", "// a comment", "ENTRY e {  // another",
                     "  ROOT c = f32[1]{0} constant({7}) // a third", "}"])
    module = parse_module(text)
    verify_module(module)
    assert module.entry.root.name == "c"


def test_called_computation_written_in_place():
    """CanonicalOpWithNested / ...IndexedConditionalInlinedBranches: XLA's parser takes a
    computation's body written where its name would go (`to_apply={ ... }`, each item of
    `branch_computations={{...}, {...}}`), as HloPrintOptions::Canonical prints it. It used
    to be refused ("expects a computation name, found '{'"). The body gets a fresh name and
    is defined before its user, so the module prints back with named computations."""
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(x, z), dimensions={0}, to_apply=
  {
    a = f32[] parameter(0)
    b = f32[] parameter(1)
    ROOT s = f32[] add(a, b)
  }
  i = s32[] constant(1)
  ROOT c = f32[] conditional(i, r, r), branch_computations={
  { p = f32[] parameter(0)
    ROOT n = f32[] negate(p) },
  { p = f32[] parameter(0)
    ROOT n = f32[] abs(p) }
  }
}"""
    module = parse_module(text)
    verify_module(module)
    names = [c.name for c in module.computations]
    assert len(names) == 4 and len(set(names)) == 4 and names[-1] == "e"
    again = parse_module(print_module(module))
    verify_module(again)
    assert [c.name for c in again.computations] == names


def test_a_name_the_parser_gave_is_never_the_texts_and_yields_to_it():
    """A body written in place is named nested_computation (an async op's wrapped one
    NAME.wrapped_computation). A computation of that name defined later in the text used
    to be refused ("defined twice", pointing at the body written in place), and a name
    in the text could reach the parser's own computation: `to_apply=nested_computation`
    before that definition bound the in-place reducer. Now the text's computation keeps
    its name, the parser's takes another, and a name refers only to what the text defines."""
    reducer = """to_apply={
    a = f32[] parameter(0)
    b = f32[] parameter(1)
    ROOT s = f32[] add(a, b)
  }"""
    later = f"""HloModule m
helper {{
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={{0}}, {reducer}
}}
nested_computation {{
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}}
s.wrapped_computation {{
  p = f32[] parameter(0)
  ROOT n = f32[] abs(p)
}}
ENTRY e {{
  x = f32[4] parameter(0)
  s = ((f32[4]), f32[4]) all-to-all-start(x), dimensions={{0}}, replica_groups={{}}
  d = f32[4] all-to-all-done(s)
  r = f32[] call(d), to_apply=helper
  y = f32[] call(r), to_apply=nested_computation
  w = f32[] call(y), to_apply=s.wrapped_computation
  ROOT t = (f32[], f32[], f32[]) tuple(r, y, w)
}}"""
    module = parse_module(later)
    verify_module(module)
    names = [c.name for c in module.computations]
    assert len(set(names)) == len(names), names
    e = module.entry
    assert e.instruction("y").attrs["to_apply"].root.opcode == "negate"
    assert e.instruction("w").attrs["to_apply"].root.opcode == "abs"
    assert e.instruction("r").attrs["to_apply"].name == "helper"
    again = parse_module(print_module(module))
    assert [c.name for c in again.computations] == names
    assert print_module(again) == print_module(module)
    x = np.arange(4, dtype=np.float32)
    for backend in ("interpreter", "cpu"):
        got = xladist.compile(module, backend=backend)(x)
        assert [float(v) for v in got] == [6.0, -6.0, 6.0], backend
    used_first = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  z = f32[] constant(0)
  r = f32[] reduce(x, z), dimensions={0}, %s
  ROOT y = f32[] call(r), to_apply=nested_computation
}
nested_computation {
  p = f32[] parameter(0)
  ROOT n = f32[] negate(p)
}""" % reducer
    with pytest.raises(HloParseError, match=r":10:\d+: computation nested_computation used by "
                                            r".* is not defined; computations must be defined "
                                            r"before they are used"):
        parse_module(used_first)


# collective-reduce, as XLA's hlo_to_mhlo import test (import.hlo) writes it: before, the
# whole file failed to parse ("unknown opcode 'collective-reduce'"); the reference's rule
# for opcodes newer than xladist is to parse them and refuse them at execution.
_COLLECTIVE_REDUCE = """HloModule m, replica_count=2
add {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT add = f32[] add(lhs, rhs)
}
ENTRY e {
  input = f32[8] parameter(0)
  root = s32[1] parameter(1)
  r1 = f32[8] collective-reduce(input), channel_id=1, replica_groups={{0,1}}, to_apply=add
  r2 = f32[8] collective-reduce(input, root), replica_groups={{0,1}}, has_dynamic_root=true, to_apply=add
  ROOT t = (f32[8], f32[8]) tuple(r1, r2)
}
"""


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_collective_reduce_parses_and_is_refused_by_name(backend):
    module = parse_module(_COLLECTIVE_REDUCE)
    text = print_module(module)
    assert "has_dynamic_root=true" in text and print_module(parse_module(text)) == text
    verify_module(module)
    with pytest.raises(xladist.UnsupportedError, match=r"r1.*collective-reduce.*no published "
                       r"semantics"):
        xladist.compile(module, backend=backend)(np.ones(8, np.float32),
                                                 np.zeros(1, np.int32))


# What XLA's verifier (jax 0.10.2) says of `compare(p, q), type=T` by element type: True
# where it accepts, else the types it names ("Expected comparison type SIGNED.").
_COMPARE_TYPE_VERDICTS = [
    ("f32", "FLOAT", True), ("f32", "TOTALORDER", True), ("f32", "SIGNED", False),
    ("bf16", "UNSIGNED", False), ("c64", "FLOAT", True), ("c64", "TOTALORDER", False),
    ("c64", "SIGNED", False), ("s32", "SIGNED", True), ("s8", "UNSIGNED", False),
    ("s32", "TOTALORDER", False), ("u32", "UNSIGNED", True), ("u32", "SIGNED", False),
    ("pred", "UNSIGNED", True), ("pred", "SIGNED", False), ("pred", "FLOAT", False),
]


@pytest.mark.parametrize("element, ctype, accepted", _COMPARE_TYPE_VERDICTS)
def test_compare_type_must_suit_the_element_type_like_xla(element, ctype, accepted):
    """A comparison type that does not read the operands' elements as they are (f32 with
    type=SIGNED, u32 with SIGNED, c64 with TOTALORDER) is refused by XLA's verifier; we
    verified it, and the builder built it (`b.compare(x, y, "LT", compare_type="SIGNED")`)."""
    text = ("HloModule m\n\nENTRY %e {\n"
            f"  %p = {element}[2]{{0}} parameter(0)\n  %q = {element}[2]{{0}} parameter(1)\n"
            f"  ROOT %r = pred[2]{{0}} compare(%p, %q), direction=LT, type={ctype}\n}}\n")
    if element == "c64":
        text = text.replace("direction=LT", "direction=EQ")
    if accepted:
        verify_module(parse_module(text))
    else:
        with pytest.raises(VerifierError, match=f"compare: type={ctype} does not compare "
                                                f"{element}.*{element} takes type="):
            verify_module(parse_module(text))


def test_builder_refuses_a_compare_type_naming_the_op_and_shapes():
    from xladist.builder import XlaBuilder
    from xladist.hlo.shape_inference.base import ShapeError
    b = XlaBuilder("cmp")
    x, y = b.parameter(0, "f32[2]"), b.parameter(1, "f32[2]")
    with pytest.raises(ShapeError, match=r"compare: type=SIGNED does not compare f32\[2\], "
                                         r"f32\[2\]: f32 takes type=FLOAT or TOTALORDER"):
        b.compare(x, y, "LT", compare_type="SIGNED")


@pytest.mark.parametrize("element, accepted", [("f32", True), ("bf16", True), ("c64", False),
                                               ("c128", False)])
def test_cbrt_takes_floats_only_like_xla(element, accepted):
    """XLA's shape inference refuses a complex cbrt ("Expected element type in shape to be
    floating for cbrt operation; got C64."); we verified it and the interpreter took the
    principal cube root, a program XLA cannot run."""
    text = (f"HloModule m\n\nENTRY %e {{\n  %p = {element}[2]{{0}} parameter(0)\n"
            f"  ROOT %r = {element}[2]{{0}} cbrt(%p)\n}}\n")
    if accepted:
        verify_module(parse_module(text))
    else:
        with pytest.raises(VerifierError, match=f"cbrt: operand must have floating-point "
                                                f"elements, got {element}"):
            verify_module(parse_module(text))


# The states XLA:CPU (jax 0.10.2) runs rng-bit-generator with: True where it does, False
# where it fails ("limit index (2) must be less than or equal to dimension size (1)").
_RNG_STATE_VERDICTS = [
    ("rng_three_fry", "u64[2]", True), ("rng_three_fry", "u64[1]", False),
    ("rng_three_fry", "u64[3]", False), ("rng_philox", "u64[2]", True),
    ("rng_philox", "u64[3]", True), ("rng_philox", "u64[1]", False),
    ("rng_philox", "u64[4]", False), ("rng_default", "u64[1]", False),
    ("rng_philox", "u32[4]", False), ("rng_three_fry", "u32[4]", False),
]


@pytest.mark.parametrize("algorithm, state, runs", _RNG_STATE_VERDICTS)
def test_rng_bit_generator_state_is_one_xla_runs(algorithm, state, runs):
    """A Philox state u64[1] verified and the builder built it, then both backends failed
    inside ("internal interpreter error: IndexError: index 1 is out of bounds"); a u64[3]
    ThreeFry ran here though XLA refuses it. The verifier now refuses what XLA cannot run,
    naming the algorithm and the states it takes."""
    text = (f"HloModule m\n\nENTRY %e {{\n  %p = {state}{{0}} parameter(0)\n"
            f"  ROOT %r = ({state}{{0}}, u32[4]{{0}}) rng-bit-generator(%p), "
            f"algorithm={algorithm}\n}}\n")
    if runs:
        verify_module(parse_module(text))
    else:
        with pytest.raises(VerifierError, match=rf"{algorithm} needs a u64\[2\].* state "
                                                rf"\(key, counter\), got {state[:3]}"):
            verify_module(parse_module(text))


# How XLA's parser (jax 0.10.2) reads a zero with a minus sign, by the bits of
# `bitcast-convert(f32[] constant(TEXT))`: "-0" is the integer 0, a positive zero, though
# XLA's own printer writes a negative zero that way.
_XLA_READS_ZERO = {"-0": 0x00000000, "-0.0": 0x80000000, "-0e0": 0x80000000, "0": 0}


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float8_e4m3fn",
                                   "complex64"])
def test_a_negative_zero_prints_as_text_xla_reads_as_negative_zero(dtype):
    """A negative zero constant printed "-0", as XLA prints it, and XLA's parser read that
    text as +0: a builder program `x * constant(-0.0)` meant another program to XLA. It
    prints "-0.0" now, which XLA reads as -0; our parser keeps "-0" negative too."""
    from xladist.builder import XlaBuilder
    b = XlaBuilder("z")
    value = np.array([-0.0, 0.0], dtype=dtype) if dtype != "complex64" else \
        np.array([complex(-0.0, -0.0), 0], np.complex64)
    text = b.build(b.constant(value)).to_text()
    elements = text.split("constant({")[1].split("})")[0]
    zero_texts = [t.strip("() ") for t in elements.replace("(", "").split(",")]
    negative = [t for t in zero_texts if t.startswith("-")]
    assert negative and all(_XLA_READS_ZERO[t] == 0x80000000 for t in negative), text
    back = parse_module(text).entry.root.literal.value
    assert np.signbit(np.asarray(back).real.astype(np.float64))[0]
    assert print_module(parse_module(text)) == text
    assert np.signbit(parse_module(text.replace("-0.0", "-0")).entry.root.literal
                      .value.real.astype(np.float64))[0]


def test_a_complex_part_at_the_largest_float_prints_as_text_xla_reads():
    """XLA's parser checks a complex part, read as a double, against the largest f32
    before rounding: `c64[] constant((3.40282347e+38, 0))` (XLA's own spelling of FLT_MAX)
    is "real part 3.40282e+38 is out of range for literal's primitive type C64" (jax
    0.10.2), and a c64 constant holding +-FLT_MAX printed that way. It prints the exact
    double now; an f32 array keeps XLA's spelling, which XLA reads."""
    from xladist.builder import XlaBuilder
    top = np.finfo(np.float32).max
    b = XlaBuilder("c")
    value = np.array([complex(top, -top), complex(np.nan, 1), complex(np.inf, 0.5)], np.complex64)
    text = b.build([b.constant(value), b.constant(np.array([top], np.float32))]).to_text()
    assert ("constant({(3.4028234663852886e+38, -3.4028234663852886e+38), (nan, 1), "
            "(inf, 0.5)})") in text
    assert "f32[1]{0} constant({3.40282347e+38})" in text
    back = parse_module(text).entry.root.operands[0].literal.value
    assert back.view(np.uint32).tolist() == value.view(np.uint32).tolist()
    assert print_module(parse_module(text)) == text
