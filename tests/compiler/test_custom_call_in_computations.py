"""A custom-call inside a computation that another instruction applies: a reduce's or a
map's to_apply, a sort's comparator, a scatter's, reduce-window's and select-and-scatter's
combiners, a collective's reducer.

The probe behind these tests (leftovers39): the interpreter evaluates such a computation
element by element (a custom-call is not vector-safe, so the evaluator never hands it a
batch: its result check without the batch is right) and agrees with numpy; the cpu backend
refused every such program at compile time ("instruction `c` (custom-call) has no
elemental emitter"). It now runs the applying instruction by the interpreter's rule
(compiler/interpreted.py), and a collective's reducer in Python: the same values and the
same errors on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.errors import ExecutionError, UnsupportedError
from xladist.semantics.custom_calls import CUSTOM_CALLS, register_custom_call
from tests import custom_call_fns

BACKENDS = ["interpreter", "cpu"]
COMBINE = """
comb {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] custom-call(a, b), custom_call_target="%s"
}
"""


def _twice_plus(instr, args):  # not associative: the order of the calls shows
    return (args[0] * 2 + args[1]).astype(args[0].dtype)


def _less(instr, args):
    return np.asarray(args[0] < args[1])


def _neg(instr, args):
    return np.negative(args[0])


def _float64(instr, args):
    return np.float64(args[0]) * 2


def _raises(instr, args):
    raise ValueError("exploded")


def _vector(instr, args):
    return np.zeros(3, np.float32)


TARGETS = {"cc.twice_plus": _twice_plus, "cc.less": _less, "cc.neg": _neg,
           "cc.float64": _float64, "cc.raises": _raises, "cc.vector": _vector,
           "cc.add": custom_call_fns.scalar_add}


@pytest.fixture(autouse=True)
def targets():
    for name, fn in TARGETS.items():
        register_custom_call(name, fn)
    yield
    for name in TARGETS:
        CUSTOM_CALLS.pop(name, None)


X = np.array([[3, -1, 7, 0.5], [2, 9, -4, 1], [0.25, 6, -2, 5]], np.float32)


def _fold(row, f, acc=np.float32(0)):
    for v in row:
        acc = f(acc, v)
    return acc


def _twice(a, b):
    return np.float32(np.float32(a) * 2 + np.float32(b))


def _scatter_ref(x):
    out = x.copy()
    for i, u in ((1, 10), (3, 20), (1, 30)):
        out[0, i] = _twice(out[0, i], u)
    return out


CASES = {
    # name: (entry, combiner target, inputs, numpy reference)
    "reduce": ("""  x = f32[3,4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3] reduce(x, z), dimensions={1}, to_apply=comb""", "cc.twice_plus",
               lambda x: np.array([_fold(r, _twice) for r in x], np.float32)),
    "map": ("""  x = f32[3,4] parameter(0)
  ROOT r = f32[3,4] map(x, x), dimensions={0,1}, to_apply=comb""", "cc.twice_plus",
            lambda x: x * 2 + x),
    "reduce-window": ("""  x = f32[3,4] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[3,3] reduce-window(x, z), window={size=1x2}, to_apply=comb""", "cc.twice_plus",
                      lambda x: np.float32(2) * (np.float32(2) * 0 + x[:, :-1]) + x[:, 1:]),
    "scatter": ("""  x = f32[3,4] parameter(0)
  i = s32[3,2] constant({{0,1},{0,3},{0,1}})
  u = f32[3] constant({10, 20, 30})
  ROOT r = f32[3,4] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0,1},
    scatter_dims_to_operand_dims={0,1}, index_vector_dim=1, to_apply=comb""",
                "cc.twice_plus", _scatter_ref),
}


def _module(name: str) -> str:
    entry, target, _ = CASES[name]
    return f"HloModule {name.replace('-', '_')}\n{COMBINE % target}\nENTRY main {{\n{entry}\n}}\n"


def _run(text: str, backend: str, *args):
    out = xladist.compile(xladist.parse_hlo(text), backend=backend)(*args)
    return out[0] if isinstance(out, (list, tuple)) else out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_custom_call_in_an_applied_computation_runs_as_numpy_says(backend, name):
    """Before: the cpu backend refused each at compile time (no elemental emitter)."""
    out = _run(_module(name), backend, X)
    want = CASES[name][2](X)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_custom_call_as_a_sort_comparator(backend):
    text = """HloModule so
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] custom-call(a, b), custom_call_target="cc.less"
}
ENTRY main {
  x = f32[3,4] parameter(0)
  ROOT r = f32[3,4] sort(x), dimensions={1}, is_stable=true, to_apply=cmp
}
"""
    np.testing.assert_array_equal(_run(text, backend, X), np.sort(X, axis=1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_custom_call_inside_a_reduce_inside_a_while_body(backend):
    text = """HloModule loop
""" + COMBINE % "cc.add" + """
cond {
  p = (s32[], f32[3,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[3,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[3,4] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  z = f32[] constant(0)
  s = f32[3] reduce(x, z), dimensions={1}, to_apply=comb
  sb = f32[3,4] broadcast(s), dimensions={0}
  y = f32[3,4] subtract(x, sb)
  ROOT t = (s32[], f32[3,4]) tuple(i2, y)
}
ENTRY main {
  x = f32[3,4] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[3,4]) tuple(z, x)
  w = (s32[], f32[3,4]) while(t), condition=cond, body=body
  ROOT o = f32[3,4] get-tuple-element(w), index=1
}
"""
    want = X.copy()
    for _ in range(3):
        s = np.array([_fold(r, lambda a, b: np.float32(a + b)) for r in want], np.float32)
        want = want - s[:, None]
    np.testing.assert_array_equal(_run(text, backend, X), want)


@pytest.mark.parametrize("target, says", [
    ("cc.float64", "custom-call target 'cc.float64' returned a wrong value (expected element "
                   "type f32 (float32), got float64) where f32[] was expected"),
    ("cc.vector", "custom-call target 'cc.vector' returned a wrong value (expected dims [], "
                  "got [3]) where f32[] was expected"),
    ("cc.raises", "custom-call target 'cc.raises' raised ValueError: exploded"),
])
@pytest.mark.parametrize("name", ["reduce", "map"])
def test_a_wrong_target_in_an_applied_computation_is_the_same_error_on_both(name, target,
                                                                          says):
    text = _module(name).replace('"cc.twice_plus"', f'"{target}"')
    errors = []
    for backend in BACKENDS:
        with pytest.raises(ExecutionError) as e:
            _run(text, backend, X)
        errors.append(str(e.value))
        assert "internal" not in str(e.value)
        assert f"c = f32[] custom-call(a, b) in computation comb: {says}" in str(e.value)
    assert errors[0] == errors[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_unregistered_target_in_an_applied_computation_is_refused_at_compile(backend):
    text = _module("reduce").replace('"cc.twice_plus"', '"cc.nobody"')
    with pytest.raises(UnsupportedError, match="cc.nobody"):
        xladist.compile(xladist.parse_hlo(text), backend=backend)


ALL_REDUCE = """HloModule ar, replica_count=2
""" + COMBINE % "cc.add" + """
ENTRY main {
  x = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(x), replica_groups={}, to_apply=comb
}
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_custom_call_as_an_all_reduce_reducer_on_two_ranks(backend):
    """Before: the cpu backend refused it (no elemental emitter for the reducer kernel)
    where the interpreter reduced with it."""
    x = np.array([[3, -1, 7, 0.5], [2, 9, -4, 1]], np.float32)
    out = xladist.run(ALL_REDUCE, [x], n=2, backend=backend, timeout=60)
    for device in out:
        np.testing.assert_array_equal(device[0], x[0] + x[1])
