"""The cpu backend's dot thunk (library/core.py DotThunk): from its second run on it makes
the arrays BLAS reads and writes straight from the slots' buffers, where they lie as its
first run found them. Every layout, transpose and dtype case gives numpy's product on
every run, with fresh arguments each time, and a case whose BLAS operands are not views
(a conversion, a copying reshape) keeps the general path."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import xladist
from xladist.compiler.library import DotThunk

CASES = {
    # name: (lhs shape, rhs shape, out shape, dims, reference)
    "matrix": ("f32[6,5]{1,0}", "f32[5,4]{1,0}", "f32[6,4]{1,0}",
               "lhs_contracting_dims={1}, rhs_contracting_dims={0}", lambda a, b: a @ b),
    "column-major operands": ("f32[6,5]{0,1}", "f32[5,4]{0,1}", "f32[6,4]{1,0}",
                              "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                              lambda a, b: a @ b),
    "transposed result": ("f32[6,5]{1,0}", "f32[5,4]{1,0}", "f32[6,4]{0,1}",
                          "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                          lambda a, b: a @ b),
    "contract the first dims": ("f64[5,6]{1,0}", "f64[5,4]{1,0}", "f64[6,4]{1,0}",
                                "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
                                lambda a, b: a.T @ b),
    "matrix-vector": ("f32[6,5]{1,0}", "f32[5]{0}", "f32[6]{0}",
                      "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                      lambda a, b: a @ b),
    "batched": ("f32[3,6,5]{2,1,0}", "f32[3,5,4]{2,1,0}", "f32[3,6,4]{2,1,0}",
                "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                "rhs_contracting_dims={1}", lambda a, b: a @ b),
    "batched, batch dim last": ("f32[6,5,3]{2,1,0}", "f32[5,4,3]{2,1,0}", "f32[3,6,4]{2,1,0}",
                                "lhs_batch_dims={2}, lhs_contracting_dims={1}, "
                                "rhs_batch_dims={2}, rhs_contracting_dims={0}",
                                lambda a, b: np.einsum("mkb,knb->bmn", a, b)),
    "two free dims": ("f32[2,3,5]{2,1,0}", "f32[5,4]{1,0}", "f32[2,3,4]{2,1,0}",
                      "lhs_contracting_dims={2}, rhs_contracting_dims={0}",
                      lambda a, b: a @ b),
    "bf16 operands, f32 result": ("bf16[6,5]{1,0}", "bf16[5,4]{1,0}", "f32[6,4]{1,0}",
                                  "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                                  lambda a, b: a.astype(np.float32) @ b.astype(np.float32)),
    "int32": ("s32[6,5]{1,0}", "s32[5,4]{1,0}", "s32[6,4]{1,0}",
              "lhs_contracting_dims={1}, rhs_contracting_dims={0}", lambda a, b: a @ b),
}


def _module(lhs, rhs, out, dims):
    return xladist.parse_hlo(f"""HloModule dot
ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {out} dot(a, b), {dims}
}}""")


def _array(rng, shape):
    return rng.integers(-3, 4, shape.dims).astype(shape.dtype)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_run_of_a_dot_gives_numpys_product(name):
    lhs, rhs, out, dims, reference = CASES[name]
    module = _module(lhs, rhs, out, dims)
    exe = xladist.compile(module, backend="cpu")
    (thunk,) = [t for t in exe.program.entry.thunks if isinstance(t, DotThunk)]
    rng = np.random.default_rng(7)
    shapes = [p.shape for p in module.entry.parameters]
    for _ in range(4):  # the first run finds the views, the others make them
        a, b = (_array(rng, s) for s in shapes)
        (got,) = exe(a, b)
        want = reference(a, b)
        assert got.dtype == module.entry.root.shape.dtype
        np.testing.assert_array_equal(got, want.astype(got.dtype))
    # Views of the buffers but for the conversion (and "two free dims": the lhs's
    # reshape merges dims that are contiguous, so it stays a view too).
    assert bool(thunk._views) == (name != "bf16 operands, f32 result")


def test_a_dot_of_an_argument_with_itself_and_of_two_arrays_alike():
    """The same array as both operands (numpy takes syrk for a matrix times its own
    transpose), then two different ones, in the same executable."""
    module = _module("f32[5,6]{1,0}", "f32[5,6]{1,0}", "f32[6,6]{1,0}",
                     "lhs_contracting_dims={0}, rhs_contracting_dims={0}")
    exe = xladist.compile(module, backend="cpu")
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (5, 6)).astype(np.float32)
    b = rng.integers(-3, 4, (5, 6)).astype(np.float32)
    for x, y in ((a, a), (a, b), (b, b), (a, b)):
        (got,) = exe(x, y)
        np.testing.assert_array_equal(got, x.T @ y)


def test_a_dot_inside_a_while_loop_runs_on_its_changing_buffers():
    """A loop body's dot runs once per iteration on buffers that change between
    iterations: x <- x @ w, three times, against numpy."""
    module = xladist.parse_hlo("""HloModule loop
body {
  p = (s32[], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[4,4] get-tuple-element(p), index=1
  w = f32[4,4] constant({{1,0,0,1},{0,1,1,0},{1,1,0,0},{0,0,1,1}})
  d = f32[4,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4,4]) tuple(j, d)
}
cond {
  p = (s32[], f32[4,4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}
ENTRY e {
  x = f32[4,4] parameter(0)
  zero = s32[] constant(0)
  t = (s32[], f32[4,4]) tuple(zero, x)
  w = (s32[], f32[4,4]) while(t), condition=cond, body=body
  ROOT r = f32[4,4] get-tuple-element(w), index=1
}""")
    exe = xladist.compile(module, backend="cpu")
    w = np.array([[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]], np.float32)
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-2, 3, (4, 4)).astype(np.float32)
        (got,) = exe(x)
        np.testing.assert_array_equal(got, x @ w @ w @ w)
