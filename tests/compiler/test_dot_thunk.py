"""The cpu backend's dot thunk (library/core.py DotThunk): from its second run on it makes
the arrays BLAS reads and writes straight from the slots' buffers, where they lie as its
first run found them. Every layout, transpose and dtype case gives numpy's product on
every run, with fresh arguments each time, and a case whose BLAS operands are not views
(a conversion, a copying reshape) keeps the general path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


EMPTY = [  # (lhs, rhs, out, lhs contracting dim): a contraction of size 0 sums nothing
    ("f32[3,0]{1,0}", "f32[0,4]{1,0}", "f32[3,4]{1,0}", 1),
    ("s32[3,0]{1,0}", "s32[0,4]{1,0}", "s32[3,4]{1,0}", 1),
    ("f32[0]{0}", "f32[0,4]{1,0}", "f32[4]{0}", 0),
    ("f64[3,0]{0,1}", "f64[0]{0}", "f64[3]{0}", 1),
    ("f32[0,5]{1,0}", "f32[5,4]{1,0}", "f32[0,4]{1,0}", 1),
]


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("lhs,rhs,out,lc", EMPTY, ids=[c[0] + "." + c[1] for c in EMPTY])
def test_a_dot_with_an_empty_dimension(lhs, rhs, out, lc, backend):
    """jnp.zeros((3, 0)) @ jnp.zeros((0, 4)) as JAX lowers it (found by a JAX program
    sweep): the cpu backend's plain-product path reshaped the operands with -1 beside the
    empty contraction and failed ('cannot reshape array of size 0')."""
    module = _module(lhs, rhs, out, f"lhs_contracting_dims={{{lc}}}, rhs_contracting_dims={{0}}")
    a, b = (np.zeros(p.shape.dims, p.shape.dtype) for p in module.entry.parameters)
    for _ in range(2):
        (got,) = xladist.compile(module, backend=backend)(a, b)
        np.testing.assert_array_equal(got, np.matmul(a, b).astype(got.dtype))
        assert got.shape == tuple(module.entry.root.shape.dims)


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


# ---- random dot_generals: every run against einsum ---------------------------------------
_LETTERS = "abcdefgh"  # at most 2 + 2 + 2 + 2 axes


@st.composite
def _dots(draw):
    """A dot_general of random batch / contracting / free dims, dims in any order on each
    side, any layout of each operand and of the result, f32 or f64."""
    nb, nc = draw(st.integers(0, 2)), draw(st.integers(1, 2))
    nlf, nrf = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    sizes = draw(st.lists(st.integers(1, 4), min_size=nb + nc + nlf + nrf,
                          max_size=nb + nc + nlf + nrf))
    batch, contract = list(range(nb)), list(range(nb, nb + nc))
    lfree = list(range(nb + nc, nb + nc + nlf))
    rfree = list(range(nb + nc + nlf, nb + nc + nlf + nrf))
    lhs_axes = draw(st.permutations(batch + contract + lfree))
    rhs_axes = draw(st.permutations(batch + contract + rfree))
    # The result: batch dims, then lhs's free dims in lhs's order, then rhs's in rhs's.
    out_axes = batch + [a for a in lhs_axes if a in lfree] + [a for a in rhs_axes if a in rfree]
    ty = draw(st.sampled_from(["f32", "f64"]))

    def layout(rank):
        return draw(st.permutations(list(range(rank))))
    return sizes, lhs_axes, rhs_axes, out_axes, batch, contract, ty, \
        layout(len(lhs_axes)), layout(len(rhs_axes)), layout(len(out_axes))


def _shape_text(ty, sizes, axes, layout):
    text = f"{ty}[{','.join(str(sizes[a]) for a in axes)}]"
    return text + f"{{{','.join(map(str, layout))}}}" if axes else text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dots())
def test_random_dots_give_einsums_product_on_every_run(dot):
    """The dot thunk's first run and its later ones (views made from the buffers) against
    numpy's einsum, for random dim orders and layouts: three runs with fresh arguments,
    after a first one with the same array twice where the operands have one shape."""
    sizes, la, ra, oa, batch, contract, ty, ll, rl, ol = dot
    dims = (f"lhs_batch_dims={{{','.join(str(la.index(a)) for a in batch)}}}, "
            f"lhs_contracting_dims={{{','.join(str(la.index(a)) for a in contract)}}}, "
            f"rhs_batch_dims={{{','.join(str(ra.index(a)) for a in batch)}}}, "
            f"rhs_contracting_dims={{{','.join(str(ra.index(a)) for a in contract)}}}")
    module = _module(_shape_text(ty, sizes, la, ll), _shape_text(ty, sizes, ra, rl),
                     _shape_text(ty, sizes, oa, ol), dims)
    exe = xladist.compile(module, backend="cpu")
    spec = (f"{''.join(_LETTERS[a] for a in la)},{''.join(_LETTERS[a] for a in ra)}"
            f"->{''.join(_LETTERS[a] for a in oa)}")
    dtype = np.float32 if ty == "f32" else np.float64
    rng = np.random.default_rng(len(spec))
    runs = [tuple(rng.integers(-3, 4, [sizes[a] for a in axes]).astype(dtype)
                  for axes in (la, ra)) for _ in range(3)]
    if [sizes[a] for a in la] == [sizes[a] for a in ra]:
        runs.insert(0, (runs[0][0], runs[0][0]))  # the first run: one buffer for both
    for a, b in runs:
        (got,) = exe(a, b)
        np.testing.assert_array_equal(got, np.einsum(spec, a, b).astype(dtype))
