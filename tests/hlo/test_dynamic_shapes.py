"""Bounded dynamic shapes (hlo/dynamic_padder.py): text round trip, the verifier, padder
results against numpy on both backends, refusals, and how dynamic results leave the runtime
(Executable, npz files with a device axis, `xladist run -n 2`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xladist
from tests.cli_util import xladist_cli
from xladist.errors import UnsupportedError
from xladist.hlo.dynamic_padder import pad_dynamic
from xladist.hlo.parser import parse_module
from xladist.hlo.verifier import verify_module
from xladist.io import read_outputs, write_outputs

_REDUCERS = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
"""


def module(body: str, header: str = "HloModule m") -> str:
    return f"{header}\n{_REDUCERS}\nENTRY e {{\n{body.strip()}\n}}\n"


SUM_SORT = module("""
  v = f32[10] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=10] set-dimension-size(v, n), dimensions={0}
  z = f32[] constant(0)
  r = f32[] reduce(d, z), dimensions={0}, to_apply=add
  s = f32[<=10] sort(d), dimensions={0}, to_apply=lt
  ROOT t = (f32[], f32[<=10]) tuple(r, s)
""")


def test_bounded_shapes_print_back_exactly():
    text = module("""
  x = f32[4,3] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=4,3] set-dimension-size(x, n), dimensions={0}
  ROOT f = f32[<=12] dynamic-reshape(d, n)
""")
    printed = parse_module(text).to_text()
    assert "%d = f32[<=4,3]{1,0} set-dimension-size(%x, %n), dimensions={0}" in printed
    assert "%f = f32[<=12]{0} dynamic-reshape(%d, %n)" in printed
    assert parse_module(printed).to_text() == printed


def test_the_verifier_accepts_a_sort_with_a_dynamic_result():
    verify_module(parse_module(SUM_SORT))


def test_padding_leaves_the_input_module_unchanged():
    m = parse_module(SUM_SORT)
    before = m.to_text()
    static, results = pad_dynamic(m)
    assert m.to_text() == before
    assert "<=" not in static.to_text() and "set-dimension-size" not in static.to_text()
    assert results.num_sizes == 1 and results.cuts == ((), (0,))


def test_a_static_module_is_not_copied():
    m = parse_module(module("""
  ROOT v = f32[3] parameter(0)
"""))
    assert pad_dynamic(m) == (m, None)


@pytest.fixture(scope="module", params=["interpreter", "cpu"])
def sum_sort(request):
    return xladist.compile(parse_module(SUM_SORT), backend=request.param)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(0, 10), seed=st.integers(0, 2**16))
def test_sum_and_sort_see_only_the_valid_elements(sum_sort, n, seed):
    v = np.random.default_rng(seed).uniform(-5, 5, 10).astype(np.float32)
    r, s = sum_sort(v, np.int32(n))
    np.testing.assert_allclose(r, v[:n].sum(dtype=np.float32), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(s, np.sort(v[:n]))


def test_a_size_beyond_the_bound_is_clamped_to_it():
    exe = xladist.compile(parse_module(SUM_SORT), backend="interpreter")
    v = np.arange(10, dtype=np.float32)
    assert exe(v, np.int32(99))[1].shape == (10,)
    assert exe(v, np.int32(-3))[1].shape == (0,)


@pytest.mark.parametrize("body, words", [
    ("""
  v = f32[4] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=4] set-dimension-size(v, n), dimensions={0}
  ROOT s = f32[<=4] all-reduce(d), replica_groups={}, to_apply=add
""", ["instruction s (all-reduce)", "collective", "dynamic dimension"]),
    ("""
  ROOT v = f32[<=4] parameter(0)
""", ["instruction v (parameter)", "dynamic entry parameters are not supported"]),
    ("""
  v = f32[4] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=4] set-dimension-size(v, n), dimensions={0}
  z = f32[] constant(0)
  ROOT r = f32[<=4] pad(d, z), padding=-1_1
""", ["instruction r (pad)", "negative padding", "not supported yet"]),
    ("""
  v = f32[4] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=4] set-dimension-size(v, n), dimensions={0}
  ROOT r = f32[<=2,<=2] reshape(d)
""", ["instruction r (reshape)", "exactly one dynamic result dimension"]),
])
def test_unsupported_dynamic_programs_are_refused_naming_the_instruction(body, words):
    with pytest.raises(UnsupportedError) as e:
        xladist.compile(parse_module(module(body)), backend="interpreter")
    for w in words:
        assert w in str(e.value)


def test_npz_outputs_of_different_sizes_are_padded_with_their_sizes(tmp_path):
    f = tmp_path / "out.npz"
    write_outputs(f, [[np.array([1, 2], np.float32)], [np.array([3, 4, 5], np.float32)]])
    with np.load(f) as npz:
        np.testing.assert_array_equal(npz["out0"], [[1, 2, 0], [3, 4, 5]])
        np.testing.assert_array_equal(npz["out0_sizes"], [[2], [3]])
    assert len(read_outputs(f)) == 1


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_xladist_run_writes_each_devices_dynamic_result(tmp_path):
    hlo = tmp_path / "m.hlo"
    hlo.write_text(module("""
  v = f32[6] parameter(0)
  r = u32[] replica-id()
  c = s32[] convert(r)
  two = s32[] constant(2)
  n = s32[] add(c, two)
  d = f32[<=6] set-dimension-size(v, n), dimensions={0}
  ROOT s = f32[<=6] sort(d), dimensions={0}, to_apply=lt
""", "HloModule m, replica_count=2"))
    v = np.array([[5, 4, 3, 2, 1, 0], [9, 8, 7, 6, 5, 4]], np.float32)
    np.savez(tmp_path / "in.npz", arg0=v)
    proc = xladist_cli("run", hlo, "-n", 2, "--inputs", tmp_path / "in.npz",
                       "--outputs", tmp_path / "out.npz", "-q")
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "out.npz") as npz:
        np.testing.assert_array_equal(npz["out0_sizes"], [[2], [3]])
        np.testing.assert_array_equal(npz["out0"], [[4, 5, 0], [7, 8, 9]])


def test_shape_inference_keeps_the_dynamic_dimensions_xla_declares():
    """Every instruction of the dynamic corpus (text XLA parsed and ran) infers exactly the
    declared shape, dynamic dimensions included; a partial slice is the one place where XLA's
    shape inference (dynamic unless the slice has size 1) and its padder differ."""
    from tests import corpus_util as cu
    from xladist.hlo.shape_inference import infer_shape
    checked = 0
    for folder in cu.case_folders("dynamic"):
        m = parse_module((folder / "module.hlo").read_text())
        for instr in m.all_instructions():
            if instr.opcode in ("parameter", "constant", "slice"):
                continue
            inferred = infer_shape(instr.opcode, [o.shape for o in instr.operands],
                                   instr.attrs, declared=instr.shape)
            assert inferred.compatible(instr.shape), (folder.name, instr.name)
            checked += instr.shape.has_dynamic
    assert checked > 40


COND_DYNAMIC_OPERAND = module("""
  x = f32[8] parameter(0)
  n = s32[] parameter(1)
  b = pred[] parameter(2)
  d = f32[<=8] set-dimension-size(x, n), dimensions={0}
  td = (f32[<=8]) tuple(d)
  tx = (f32[8]) tuple(x)
  r = f32[<=8] conditional(b, td, tx), true_computation=neg, false_computation=grow
  z = f32[] constant(0)
  s = f32[] reduce(r, z), dimensions={0}, to_apply=add
  g = s32[] get-dimension-size(r), dimensions={0}
  ROOT t = (f32[<=8], f32[], s32[]) tuple(r, s, g)
""").replace("ENTRY e", """neg {
  t = (f32[<=8]) parameter(0)
  p = f32[<=8] get-tuple-element(t), index=0
  ROOT n = f32[<=8] negate(p)
}

grow {
  t = (f32[8]) parameter(0)
  p = f32[8] get-tuple-element(t), index=0
  three = s32[] constant(3)
  ROOT d = f32[<=8] set-dimension-size(p, three), dimensions={0}
}

ENTRY e""")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_a_dynamic_operand_passes_into_a_conditional_branch(backend):
    """Branch operands with dynamic dimensions (jaxlib's path to XLA:CPU cannot compile this
    one, so numpy is the reference): the true branch negates the valid elements, the false
    branch keeps the first 3 of the static operand."""
    exe = xladist.compile(parse_module(COND_DYNAMIC_OPERAND), backend=backend)
    x = np.arange(1, 9, dtype=np.float32)
    for n in (0, 5, 8):
        r, s, g = exe(x, np.int32(n), np.bool_(True))
        np.testing.assert_array_equal(r, -x[:n])
        assert s == -x[:n].sum() and g == n
        r, s, g = exe(x, np.int32(n), np.bool_(False))
        np.testing.assert_array_equal(r, x[:3])
        assert s == 6 and g == 3


def test_explain_shows_the_padded_module(capsys):
    from tests import corpus_util as cu
    from xladist.cli import main
    assert main(["explain", str(cu.CORPUS / "dynamic" / "sort" / "module.hlo")]) == 0
    assert "dynpad" in capsys.readouterr().out


def test_the_builder_makes_dynamic_programs():
    from xladist.builder import XlaBuilder
    b = XlaBuilder("dyn")
    x = b.parameter(0, "f32[4,3]")
    n = b.parameter(1, "s32[]")
    d = b.set_dimension_size(x, n, 0)
    assert d.shape.to_text(layout=False) == "f32[<=4,3]"
    count = b.mul(n, b.constant_r0(3, "s32"))
    f = b.dynamic_reshape(d, [count], "f32[<=12]")
    b.tuple(f, b.get_dimension_size(f, 0))
    exe = xladist.compile(b.build(), backend="interpreter")
    x_ = np.arange(12, dtype=np.float32).reshape(4, 3)
    flat, size = exe(x_, np.int32(2))
    np.testing.assert_array_equal(flat, x_[:2].reshape(-1))
    assert size == 6


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_dynamic_slice_update_slice_and_map_keep_the_size(backend):
    text = module("""
  v = f32[6] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=6] set-dimension-size(v, n), dimensions={0}
  zero = s32[] constant(0)
  ds = f32[<=6] dynamic-slice(d, zero), dynamic_slice_sizes={6}
  part = f32[2] dynamic-slice(d, zero), dynamic_slice_sizes={2}
  one = s32[] constant(1)
  u = f32[<=6] dynamic-update-slice(ds, part, one)
  m = f32[<=6] map(u, u), dimensions={0}, to_apply=add
  ROOT t = (f32[<=6], f32[2]) tuple(m, part)
""")
    exe = xladist.compile(parse_module(text), backend=backend)
    v = np.arange(1, 7, dtype=np.float32)
    for n in (0, 3, 6):
        m, part = exe(v, np.int32(n))
        want = v.copy()
        want[1:3] = v[:2]
        np.testing.assert_array_equal(m, 2 * want[:n])
        np.testing.assert_array_equal(part, v[:2])


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_a_convolution_over_a_dynamic_spatial_dimension(backend):
    """XLA:CPU refuses this one ("Dynamic Spatial Convolution is not supported"); xladist
    runs it with the padder's rule for windows (VALID windows over the size), against numpy."""
    text = module("""
  x = f32[2,8,3] parameter(0)
  k = f32[3,3,4] parameter(1)
  n = s32[] parameter(2)
  d = f32[2,<=8,3] set-dimension-size(x, n), dimensions={1}
  c = f32[2,<=6,4] convolution(d, k), window={size=3}, dim_labels=b0f_0io->b0f
  g = s32[] get-dimension-size(c), dimensions={1}
  ROOT t = (f32[2,<=6,4], s32[]) tuple(c, g)
""")
    exe = xladist.compile(parse_module(text), backend=backend)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (2, 8, 3)).astype(np.float32)
    k = rng.uniform(-1, 1, (3, 3, 4)).astype(np.float32)
    for n in (0, 2, 3, 5, 8):
        c, g = exe(x, k, np.int32(n))
        windows = max(n - 2, 0)
        want = np.zeros((2, windows, 4), np.float32)
        for i in range(windows):
            want[:, i] = np.einsum("bkc,kco->bo", x[:, i:i + 3], k)
        assert g == windows
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
