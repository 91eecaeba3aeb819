"""Native while loops that call thunks back in Python (xladist/compiler/native/callback.py),
on one device: a custom call between kernels runs natively with a callback, bit for bit as
on the Python executor and as numpy; an error raised in the callback surfaces as the Python
executor's error; `xladist explain` names the callbacks. (Over MPI, with feeds and a tuple
all-reduce: tests/mpi/native_loops/test_callbacks.py.)"""


import numpy as np
import pytest

import xladist
from tests.compiler.test_native_loop_dots import run_paths
from xladist.errors import ExecutionError
from xladist.interpreter import register_custom_call
from tests.paths import ROOT

CALLS = []


def _twist(instr, args):
    """x -> x[::-1] * 3 (numpy in Python: what a callback runs); fails on a value of 1000."""
    x = np.asarray(args[0])
    CALLS.append(1)
    if (x == 1000).any():
        raise ValueError("a 1000 reached the custom call")
    return (x[::-1] * np.float32(3)).astype(np.float32)


register_custom_call("test.native_callback_twist", _twist, replace=True)

LOOP = """HloModule cb
cond {
  p = (s32[], s32[], f32[6]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, k), direction=LT
}
body {
  p = (s32[], s32[], f32[6]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  x = f32[6] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  onef = f32[] constant(1)
  ones = f32[6] broadcast(onef), dimensions={}
  y = f32[6] add(x, ones)
  z = f32[6] custom-call(y), custom_call_target="test.native_callback_twist"
  w = f32[6] subtract(z, x)
  ROOT t = (s32[], s32[], f32[6]) tuple(i1, k, w)
}
ENTRY e {
  x = f32[6] parameter(0)
  k = s32[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], s32[], f32[6]) tuple(zero, k, x)
  l = (s32[], s32[], f32[6]) while(init), condition=cond, body=body
  ROOT out = f32[6] get-tuple-element(l), index=2
}
"""


def _reference(x, trips):
    for _ in range(trips):
        x = ((x + 1)[::-1] * np.float32(3) - x).astype(np.float32)
    return x


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_custom_call_in_a_loop_is_called_back_with_the_python_paths_bits(monkeypatch, trips):
    x = np.array([0.5, -2, 1e-40, -0.0, 7, 3.25], np.float32)
    CALLS.clear()
    native, python, calls, loop = run_paths(LOOP, x, np.int32(trips), monkeypatch=monkeypatch)
    assert loop.native is not None and calls == [["callback"]]
    assert len(CALLS) == 2 * trips  # once per iteration on each path
    assert native.tobytes() == python.tobytes()
    np.testing.assert_array_equal(native, _reference(x, trips))


def test_an_error_in_a_callback_is_the_python_paths_error(monkeypatch):
    # 1000 - 1 enters the custom call in the first iteration: the target raises.
    x = np.array([999, 0, 0, 0, 0, 0], np.float32)
    cpu = xladist.compile(xladist.parse_hlo(LOOP), backend="cpu")
    errors = []
    for native in (True, False):
        monkeypatch.setattr("xladist.compiler.native.loop.COLLECTIVES", native)
        with pytest.raises(ExecutionError) as e:
            cpu(x, np.int32(3))
        errors.append(str(e.value))
    assert errors[0] == errors[1], errors
    assert "a 1000 reached the custom call" in errors[0] and "z = custom-call" in errors[0]


def test_explain_names_the_callbacks_of_the_demo_loop():
    text = (ROOT / "examples" / "train_mlp" / "train_mlp.hlo").read_text()
    cpu = xladist.compile(xladist.parse_hlo(text), backend="cpu")
    whats = [t["what"] for c in cpu.program.explain() for t in c["thunks"]
             if t["kind"] == "control"]
    assert any("callbacks: infeed.24, all-reduce.60, outfeed.65" in w for w in whats), whats
