"""Corners of real HLO text that both backends must run as XLA does, each checked against
numpy on the cpu backend and the interpreter (found by feeding hand-written modules covering
the text format's corners through parse, verify and both backends)."""

from __future__ import annotations

import numpy as np
import pytest

import xladist

BACKENDS = ["cpu", "interpreter"]


def run(text, *args, backend):
    return xladist.compile(xladist.parse_hlo(text), backend=backend)(*args)


# A tuple-shaped constant (XLA prints `constant(( {3, 4}, 1.5 ))`; constant folding makes
# them, e.g. a while loop's initial state). The cpu backend gave it one buffer of the tuple
# shape and failed with a Python TypeError ("tuple has no numpy dtype").
TUPLE_CONSTANT = """HloModule m

cond {
  p = (s32[], (f32[2], ())) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], (f32[2], ())) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  q = (f32[2], ()) get-tuple-element(p), index=1
  x = f32[2] get-tuple-element(q), index=0
  e = () get-tuple-element(q), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  x2 = f32[2] add(x, x)
  q2 = (f32[2], ()) tuple(x2, e)
  ROOT t = (s32[], (f32[2], ())) tuple(i2, q2)
}

ENTRY main {
  y = s32[2] parameter(0)
  c = (s32[2], f32[]) constant(( {3, 4}, 1.5 ))
  g = s32[2] get-tuple-element(c), index=0
  a = s32[2] add(y, g)
  init = (s32[], (f32[2], ())) constant((0, ({1.5, -2}, ( ))))
  w = (s32[], (f32[2], ())) while(init), condition=cond, body=body
  ROOT r = (s32[2], (s32[2], f32[]), (s32[], (f32[2], ()))) tuple(a, c, w)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_tuple_shaped_constants_run(backend):
    y = np.array([10, -20], np.int32)
    a, c0, c1, i, x = run(TUPLE_CONSTANT, y, backend=backend)
    np.testing.assert_array_equal(a, y + np.array([3, 4], np.int32))
    np.testing.assert_array_equal(c0, np.array([3, 4], np.int32))
    assert c1.dtype == np.float32 and c1 == np.float32(1.5)
    assert i == 3
    np.testing.assert_array_equal(x, np.array([1.5, -2], np.float32) * 8)


# A copy of a tuple (XLA: a shallow copy, the same element values; hand-written tests and
# copy insertion write them). The cpu backend planned it as an elementwise kernel and
# refused the module: "element type tuple has no array representation".
TUPLE_COPY = """HloModule m

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] negate(x)
  s = s32[] parameter(1)
  t = (f32[4], s32[]) tuple(y, s)
  c = (f32[4], s32[]) copy(t)
  g = f32[4] get-tuple-element(c), index=0
  u = f32[1] constant({100})
  i = s32[] constant(1)
  d = f32[4] dynamic-update-slice(g, u, i)
  z = f32[4] add(d, y)
  ROOT r = (f32[4], f32[4], (f32[4], s32[])) tuple(z, y, c)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_of_a_tuple_runs(backend):
    x = np.array([1, 2, 3, 4], np.float32)
    z, y, c0, c1 = run(TUPLE_COPY, x, np.int32(7), backend=backend)
    d = -x
    d[1] = 100
    np.testing.assert_array_equal(z, d - x)    # the update did not reach y or the copy
    np.testing.assert_array_equal(y, -x)
    np.testing.assert_array_equal(c0, -x)
    assert c1 == 7


# `constant({...})`: XLA's long style elides constants of more than 10 elements. The
# interpreter refused such a module; the cpu backend ran it with zeros in place of the data
# when the constant had a buffer of its own (here: returned), refusing it in other words only
# when a kernel read it.
ELIDED = """HloModule m

ENTRY main {
  x = f32[12] parameter(0)
  big = f32[12] constant({...})
  ROOT t = (f32[12], f32[12]) tuple(big, x)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_elided_constants_are_refused_by_every_backend(backend):
    from xladist.errors import UnsupportedError
    with pytest.raises(UnsupportedError, match=r"big = f32\[12\] constant\(\) in computation "
                       r"main: its data was elided \(\{\.\.\.\}\) where the text was "
                       r"printed, so it cannot execute: .*--xla_dump_large_constants"):
        run(ELIDED, np.zeros(12, np.float32), backend=backend)


# A call or fusion whose declared layout differs from its callee's root (XLA's parser and
# its layout-insensitive verifier take it; layout assignment makes them agree). The cpu
# backend inlines the callee and used the root's buffer as the call's: as the entry's
# result, read in the call's layout, the values came out transposed.
CALL_RESULT_LAYOUT = """HloModule m

f {
  p = f32[2,3]{1,0} parameter(0)
  ROOT n = f32[2,3]{0,1} negate(p)
}

g {
  p = f32[2,3]{1,0} parameter(0)
  n = f32[2,3]{0,1} negate(p)
  ROOT t = (f32[2,3]{0,1}, (f32[2,3]{1,0}, f32[2,3]{0,1})) tuple(n, (f32[2,3]{1,0}, f32[2,3]{0,1}) tuple(p, n))
}

fused {
  p = f32[2,3]{0,1} parameter(0)
  ROOT a = f32[2,3]{0,1} abs(p)
}

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  c = f32[2,3]{1,0} call(x), to_apply=f
  t = (f32[2,3]{1,0}, (f32[2,3]{0,1}, f32[2,3]{1,0})) call(x), to_apply=g
  u = f32[2,3]{1,0} fusion(x), kind=kLoop, calls=fused
  ROOT r = (f32[2,3]{1,0}, (f32[2,3]{1,0}, (f32[2,3]{0,1}, f32[2,3]{1,0})), f32[2,3]{1,0}) tuple(c, t, u)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_and_fusion_results_take_their_declared_layout(backend):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    outs = run(CALL_RESULT_LAYOUT, x, backend=backend)
    for got, want in zip(outs, [-x, -x, x, -x, np.abs(x)]):
        np.testing.assert_array_equal(got, want)
    assert len(outs) == 5


# A callee parameter declared in another layout than the caller's operand holds its bytes
# in the parameter's layout, which a bitcast inside reads (XLA's layout assignment copies
# the operand). The cpu backend bound the operand itself when it inlined the call or
# fusion, so the bitcast read x's row-major bytes: x.reshape(3, 2) instead of x.T. Found
# by the random-layout sweep.
CALL_PARAMETER_LAYOUT = """HloModule m

f {
  p = s32[2,3]{0,1} parameter(0)
  ROOT b = s32[3,2]{1,0} bitcast(p)
}

fused {
  p = s32[2,3]{0,1} parameter(0)
  b = s32[3,2]{1,0} bitcast(p)
  ROOT n = s32[3,2]{1,0} negate(b)
}

ENTRY main {
  x = s32[2,3]{1,0} parameter(0)
  c = s32[3,2]{1,0} call(x), to_apply=f
  u = s32[3,2]{1,0} fusion(x), kind=kLoop, calls=fused
  ROOT r = (s32[3,2]{1,0}, s32[3,2]{1,0}) tuple(c, u)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_and_fusion_parameters_take_their_declared_layout(backend):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    c, u = run(CALL_PARAMETER_LAYOUT, x, backend=backend)
    np.testing.assert_array_equal(c, x.T)     # column-major bytes 0 3 1 4 2 5, row-major 3x2
    np.testing.assert_array_equal(u, -x.T)


# dynamic-slice / dynamic-update-slice with their start indices in one rank-1 array (the
# old form XLA's parser still takes; the verifier and the interpreter did). The cpu
# emitter read one scalar operand per dimension and died with a Python IndexError.
OLD_FORM_STARTS = """HloModule m

ENTRY main {
  x = f32[5,4] parameter(0)
  i = s32[2] parameter(1)
  s = f32[2,2] dynamic-slice(x, i), dynamic_slice_sizes={2,2}
  u = f32[2,2] constant({ { 100, 200 }, { 300, 400 } })
  d = f32[5,4] dynamic-update-slice(x, u, i)
  v = f32[5] parameter(2)
  j = u8[1] constant({4})
  w = f32[2] dynamic-slice(v, j), dynamic_slice_sizes={2}
  ROOT t = (f32[2,2], f32[5,4], f32[2]) tuple(s, d, w)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("starts", [(1, 2), (-3, 9)])
def test_start_indices_in_one_array(backend, starts):
    x = np.arange(20, dtype=np.float32).reshape(5, 4)
    v = np.arange(5, dtype=np.float32) * 10
    s, d, w = run(OLD_FORM_STARTS, x, np.array(starts, np.int32), v, backend=backend)
    r, c = min(max(starts[0], 0), 3), min(max(starts[1], 0), 2)   # clamped as XLA does
    np.testing.assert_array_equal(s, x[r:r + 2, c:c + 2])
    want = x.copy()
    want[r:r + 2, c:c + 2] = [[100, 200], [300, 400]]
    np.testing.assert_array_equal(d, want)
    np.testing.assert_array_equal(w, v[3:5])
