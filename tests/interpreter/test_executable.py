"""xladist.compile / Executable argument checking, npz io, `xladist run -n 1` and the
`xladist ops` coverage matrix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import xladist
from tests.interpreter.ir import Comp
from xladist.cli import main
from xladist.errors import InputError, UnsupportedError
from xladist.backends import BACKENDS, register_backend
from xladist.executable import Executable
from xladist.hlo.opcodes import OPCODES
from xladist.io import read_inputs, read_outputs, write_outputs

ROOT = Path(__file__).resolve().parents[2]
BF16 = ml_dtypes.bfloat16


def two_param_module():
    c = Comp()
    x, y = c.param("f32[2,3]"), c.param("bf16[3]")
    yb = c.op("broadcast", "bf16[2,3]", y, dimensions=(1,))
    yf = c.op("convert", "f32[2,3]", yb)
    s = c.op("add", "f32[2,3]", x, yf)
    n = c.op("negate", "bf16[3]", y)
    inner = c.op("tuple", "(bf16[3], token[])", n, c.op("after-all", "token[]"))
    return c.module(c.op("tuple", "(f32[2,3], (bf16[3], token[]))", s, inner))


def test_compile_runs_and_flattens_tuple_results():
    exe = xladist.compile(two_param_module(), verify=False)
    x = np.ones((2, 3), np.float32)
    y = np.array([1.0, 2.0, -0.5], BF16)
    out = exe(x, y)
    assert len(out) == 2  # the token leaf is dropped
    assert out[0].tolist() == [[2.0, 3.0, 0.5]] * 2
    assert out[1].dtype == BF16 and out[1].astype(np.float32).tolist() == [-1.0, -2.0, 0.5]
    # bf16 parameters also accept the uint16 bit patterns of the npz encoding.
    out2 = exe(x, y.view(np.uint16))
    assert (out2[0] == out[0]).all()


@pytest.mark.parametrize("args,match", [
    ((np.ones((2, 3), np.float64), np.zeros(3, BF16)),
     r"parameter 0 \(p0\.\d+: f32\[2,3\]\): expected f32\[2,3\] \(float32\), got a float64 array"),
    ((np.ones((3, 2), np.float32), np.zeros(3, BF16)),
     r"parameter 0 .*got a float32 array of dims \[3, 2\]"),
    ((np.ones((2, 3), np.float32), np.zeros(3, np.float32)),
     r"parameter 1 \(p1\.\d+: bf16\[3\]\).*got a float32 array"),
    ((np.ones((2, 3), np.float32),), r"takes 2 arguments .*got 1"),
    ((1.0, np.zeros(3, BF16)), r"parameter 0 .*got a float; convert it explicitly"),
])
def test_argument_errors_name_the_parameter(args, match):
    exe = xladist.compile(two_param_module(), verify=False)
    with pytest.raises(InputError, match=match):
        exe(*args)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_arguments_of_any_memory_order_give_the_same_results(backend):
    """The executable takes a C-ordered argument as its buffer as it is and converts any
    other (a strided or Fortran-ordered view, a 0-d numpy scalar) first; parameters in a
    column-major layout, too. Every form gives numpy's answer; a big-endian array is
    refused like any other element type."""
    mod = xladist.parse_hlo("""HloModule m
ENTRY e {
  a = f32[3,4]{1,0} parameter(0)
  b = f32[4,2]{0,1} parameter(1)
  s = f32[] parameter(2)
  d = f32[3,2]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bs = f32[3,2]{1,0} broadcast(s), dimensions={}
  ROOT r = f32[3,2]{1,0} add(d, bs)
}""")
    exe = xladist.compile(mod, backend=backend)
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 4, (3, 8)).astype(np.float32)
    b = rng.integers(-4, 4, (2, 4)).astype(np.float32)
    want = a[:, ::2] @ b.T + np.float32(0.5)
    for args in [(a[:, ::2], b.T, np.float32(0.5)),
                 (np.ascontiguousarray(a[:, ::2]), np.ascontiguousarray(b.T),
                  np.array(0.5, np.float32)),
                 (np.asfortranarray(a[:, ::2]), np.asfortranarray(b.T), np.float32(0.5))]:
        (got,) = exe(*args)
        assert got.flags.c_contiguous and np.array_equal(got, want), args
    with pytest.raises(InputError, match=r"parameter 0 .*got a >f4 array"):
        exe(a[:, ::2].astype(">f4"), b.T, np.float32(0.5))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_results_are_the_callers_own_not_a_constant_or_an_argument(backend):
    """A result that is a constant, a parameter or a reshape of one is a new array: changing
    it changes neither the caller's argument nor the next call's results. Before, the
    interpreter returned the module's constant itself (`c += 100` made every later call
    return 101, 102, ...) and the caller's argument itself (`out is x`)."""
    mod = xladist.parse_hlo("""HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  c = f32[4] constant({1, 2, 3, 4})
  cr = f32[2,2] reshape(c)
  xr = f32[2,2] reshape(x)
  ROOT t = (f32[4], f32[2,2], f32[4], f32[2,2]) tuple(c, cr, x, xr)
}""")
    exe = xladist.compile(mod, backend=backend)
    x = np.zeros(4, np.float32)
    for out in exe(x):
        assert out.flags.writeable and not np.shares_memory(out, x)
        out += 100
    assert np.array_equal(x, np.zeros(4))
    c, cr, x2, xr = exe(np.full(4, 7, np.float32))
    assert np.array_equal(c, [1, 2, 3, 4]) and np.array_equal(cr, [[1, 2], [3, 4]])
    assert np.array_equal(x2, [7] * 4) and np.array_equal(xr, [[7, 7], [7, 7]])


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_a_value_the_root_names_twice_comes_back_as_two_arrays(backend):
    """XLA gives every result leaf its own buffer: ROOT tuple(n, n, reshape(n)) is three
    arrays, and changing one leaves the others. Before, both backends returned one memory
    three times (`out[0] += 1` changed out[1] and out[2])."""
    mod = xladist.parse_hlo("""HloModule m
ENTRY e {
  x = f32[6] parameter(0)
  n = f32[6] negate(x)
  r = f32[2,3] reshape(n)
  ROOT t = (f32[6], f32[6], f32[2,3]) tuple(n, n, r)
}""")
    x = np.arange(6, dtype=np.float32)
    a, b, r = xladist.compile(mod, backend=backend)(x)
    a += 100
    assert np.array_equal(b, -x) and np.array_equal(r, -x.reshape(2, 3))


def test_backend_table():
    with pytest.raises(UnsupportedError, match=r"backend 'nope' is not available"):
        xladist.compile(two_param_module(), backend="nope", verify=False)

    class Fake(Executable):
        backend = "fake"

        def execute(self, args):
            return (args[0] * 0, (args[1], None))

    register_backend("fake-test", lambda module, **opts: Fake(module))
    try:
        out = xladist.compile(two_param_module(), backend="fake-test", verify=False)(
            np.ones((2, 3), np.float32), np.zeros(3, BF16))
        assert out[0].tolist() == [[0.0] * 3] * 2
    finally:
        BACKENDS.pop("fake-test")


# ---- npz io -------------------------------------------------------------------------------
def test_read_inputs_with_and_without_device_axis(tmp_path):
    m = two_param_module()
    shapes = [p.shape for p in m.entry.parameters]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    ybits = np.array([0x3F80, 0x4000, 0xBF00], np.uint16)
    f = tmp_path / "in.npz"
    np.savez(f, arg0=x[None], arg1=ybits[None])
    (args,) = read_inputs(f, shapes, num_devices=1)
    assert (args[0] == x).all() and args[1].dtype == BF16
    assert args[1].astype(np.float32).tolist() == [1.0, 2.0, -0.5]
    np.savez(f, arg0=x, arg1=ybits)
    (args,) = read_inputs(f, shapes, num_devices=1, device_axis=None)
    assert (args[0] == x).all()
    with pytest.raises(InputError, match=r"arg0 for parameter 0 .*lacks the leading device"):
        read_inputs(f, shapes, num_devices=1, device_axis=True)
    np.savez(f, arg0=np.stack([x, x + 1]), arg1=np.stack([ybits, ybits]))
    dev = read_inputs(f, shapes, num_devices=2)
    assert (dev[1][0] == x + 1).all()


@pytest.mark.parametrize("arrays,match", [
    ({"arg0": np.zeros((2, 3), np.float32)}, r"no array 'arg1' for parameter 1 \(y: bf16\[3\]\)"),
    ({"arg0": np.zeros((2, 3), np.float32), "arg1": np.zeros(3, np.uint16),
      "arg2": np.zeros(1)}, r"arrays the module does not take: arg2 \(the module has 2 "
                            r"parameters: arg0..arg1\)"),
    ({"arg0": np.zeros((2, 3), np.float64), "arg1": np.zeros(3, np.uint16)},
     r"arg0 for parameter 0 \(x: f32\[2,3\]\): expected element type float32, got float64"),
    ({"arg0": np.zeros((2, 2), np.float32), "arg1": np.zeros(3, np.uint16)},
     r"arg0 for parameter 0 .*expected dims \[2, 3\] .*got \[2, 2\]"),
])
def test_read_inputs_errors_name_the_parameter(tmp_path, arrays, match):
    m = two_param_module()
    shapes = [p.shape for p in m.entry.parameters]
    f = tmp_path / "in.npz"
    np.savez(f, **arrays)
    with pytest.raises(InputError, match=match):
        read_inputs(f, shapes, num_devices=1, device_axis=None, names=["x", "y"])


def test_an_extra_array_names_what_a_module_of_one_or_no_parameters_takes(tmp_path):
    """Not "1 parameters: arg0..arg0" nor "0 parameters: arg0..arg-1"."""
    f = tmp_path / "in.npz"
    np.savez(f, arg0=np.zeros(3, np.float32), x=np.zeros(1))
    shape = two_param_module().entry.parameters[1].shape
    with pytest.raises(InputError, match=r"does not take: x \(the module has 1 parameter: "
                                         r"arg0\)$"):
        read_inputs(f, [shape], num_devices=1, device_axis=None, names=["y"])
    with pytest.raises(InputError, match=r"does not take: arg0, x \(the module has no "
                                         r"parameters\)$"):
        read_inputs(f, [], num_devices=1, device_axis=None, names=[])


def test_write_outputs_encodes_bf16_and_stacks_devices(tmp_path):
    f = tmp_path / "out.npz"
    outs = [[np.array([1.0], BF16), np.array(3, np.int32)],
            [np.array([2.0], BF16), np.array(4, np.int32)]]
    write_outputs(f, outs)
    o0, o1 = read_outputs(f)
    assert o0.dtype == np.uint16 and o0.tolist() == [[0x3F80], [0x4000]]
    assert o1.tolist() == [3, 4]


# ---- the CLI --------------------------------------------------------------------------------
MODULE = """HloModule add_mul, entry_computation_layout={(f32[2]{0}, s32[])->(f32[2]{0}, s32[])}

ENTRY %main (x: f32[2], n: s32[]) -> (f32[2], s32[]) {
  %x = f32[2]{0} parameter(0)
  %n = s32[] parameter(1)
  %c = f32[] constant(2)
  %b = f32[2]{0} broadcast(%c), dimensions={}
  %m = f32[2]{0} multiply(%x, %b)
  %k = s32[] constant(7)
  %d = s32[] divide(%n, %k)
  ROOT %t = (f32[2]{0}, s32[]) tuple(%m, %d)
}
"""


@pytest.mark.slow
def test_cli_run_writes_outputs(tmp_path):
    hlo = tmp_path / "m.hlo"
    hlo.write_text(MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.array([[1.5, -2.0]], np.float32),
             arg1=np.array([-15], np.int32))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(check=False, args=[sys.executable, "-m", "xladist", "run", str(hlo), "-n", "1",
                           "--backend", "interpreter", "--inputs", str(tmp_path / "in.npz"),
                           "--outputs", str(tmp_path / "out.npz")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out0, out1 = read_outputs(tmp_path / "out.npz")
    assert out0.tolist() == [[3.0, -4.0]] and out1.tolist() == [-2]  # -15 / 7 truncates


def test_cli_run_bad_inputs_exit_2_naming_the_parameter(tmp_path, capsys):
    hlo = tmp_path / "m.hlo"
    hlo.write_text(MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.array([1.5, -2.0, 3.0], np.float32))
    code = main(["run", str(hlo), "--inputs", str(tmp_path / "in.npz")])
    err = capsys.readouterr().err
    assert code == 2 and "parameter 0 (x: f32[2])" in err and "expected dims" in err
    np.savez(tmp_path / "in.npz", arg0=np.array([1.5, -2.0], np.float32))
    code = main(["run", str(hlo), "--inputs", str(tmp_path / "in.npz")])
    assert code == 2 and "no array 'arg1' for parameter 1 (n: s32[])" in capsys.readouterr().err


def test_cli_run_prints_outputs_without_an_outputs_file(tmp_path, capsys):
    hlo = tmp_path / "m.hlo"
    hlo.write_text(MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.array([1.0, 2.0], np.float32),
             arg1=np.array(8, np.int32))
    assert main(["run", str(hlo), "--inputs", str(tmp_path / "in.npz")]) == 0
    out = capsys.readouterr().out
    assert "out0: float32[2]" in out and "out1: int32[]" in out
    assert "[2. 4.]" in out and "1" in out


def test_ops_matrix_covers_every_opcode_in_the_interpreter_column(capsys):
    from xladist.cli.ops import coverage_matrix
    matrix = coverage_matrix()
    assert set(matrix) == set(OPCODES)
    for op, row in matrix.items():
        assert set(row) == {"parse", "verify", "interpreter", "cpu", "runtime"}
        assert row["interpreter"], f"{op}: interpreter column is blank"
        assert row["interpreter"] == "yes" or len(row["interpreter"]) > 10, op
    assert matrix["add"]["interpreter"] == "yes"
    assert "not implemented" in matrix["stochastic-convert"]["interpreter"] or \
        matrix["stochastic-convert"]["interpreter"] == "yes"
    assert main(["ops", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == matrix
    assert main(["ops", "--family", "collective"]) == 0
    text = capsys.readouterr().out
    assert "all-reduce" in text and " add " not in text


def test_every_opcode_has_an_interpreter_rule_or_a_reason():
    from xladist.interpreter import EVAL_RULES, UNSUPPORTED
    blank = [op for op in OPCODES if op not in EVAL_RULES and op not in UNSUPPORTED]
    assert blank == []
    stale = [op for op in UNSUPPORTED if op in EVAL_RULES]
    assert stale == []
