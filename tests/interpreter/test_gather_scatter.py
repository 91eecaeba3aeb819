"""gather and scatter against per-element loops written from the operation semantics,
hand examples, and jax.lax when it imports."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.interpreter.support import S, binary, instr, run, shape_of
from xladist.builder import XlaBuilder
from xladist.hlo.shape import Shape
from xladist.interpreter.gather_scatter import gather
from tests.optional import need_jax


def naive_gather(operand, indices, offset_dims, collapsed, start_index_map, ivd, slice_sizes,
                 obatch=(), ibatch=()):
    """For every output index: In = batch coords; G = index vector; S = start (clamped);
    operand index = S + offset, per the Gather section of the operation semantics."""
    if ivd == indices.ndim:
        indices = indices[..., None]
    batch_dims_of_idx = [d for d in range(indices.ndim) if d != ivd]
    batch_shape = [indices.shape[d] for d in batch_dims_of_idx]
    window = [d for d in range(operand.ndim) if d not in collapsed and d not in obatch]
    out_rank = len(batch_shape) + len(offset_dims)
    out_shape = [0] * out_rank
    batch_axes = [a for a in range(out_rank) if a not in offset_dims]
    for a, n in zip(batch_axes, batch_shape):
        out_shape[a] = n
    for a, d in zip(offset_dims, window):
        out_shape[a] = slice_sizes[d]
    out = np.zeros(out_shape, operand.dtype)
    for o in itertools.product(*[range(n) for n in out_shape]):
        b = [o[a] for a in batch_axes]
        start = [0] * operand.ndim
        for k, d in enumerate(start_index_map):
            idx = list(b)
            idx.insert(ivd, k)
            start[d] = int(indices[tuple(idx)])
        for od, sd in zip(obatch, ibatch):
            start[od] = b[batch_dims_of_idx.index(sd)]
        start = [min(max(s, 0), operand.shape[d] - slice_sizes[d]) for d, s in enumerate(start)]
        full = list(start)
        for a, d in zip(offset_dims, window):
            full[d] += o[a]
        out[o] = operand[tuple(full)]
    return out


def naive_scatter(operand, indices, updates, uwd, iwd, sdod, ivd, ibatch=(), sibatch=(),
                  combine=np.add):
    out = operand.copy()
    if ivd == indices.ndim:
        indices = indices[..., None]
    idx_batch = [d for d in range(indices.ndim) if d != ivd]
    window = [d for d in range(operand.ndim) if d not in iwd and d not in ibatch]
    scatter_axes = [a for a in range(updates.ndim) if a not in uwd]
    for u in itertools.product(*[range(n) for n in updates.shape]):
        b = [u[a] for a in scatter_axes]
        start = [0] * operand.ndim
        for k, d in enumerate(sdod):
            idx = list(b)
            idx.insert(ivd, k)
            start[d] = int(indices[tuple(idx)])
        for od, sd in zip(ibatch, sibatch):
            start[od] = b[idx_batch.index(sd)]
        sizes = [updates.shape[uwd[window.index(d)]] if d in window else 1
                 for d in range(operand.ndim)]
        if any(s < 0 or s + n > operand.shape[d] for d, (s, n) in enumerate(zip(start, sizes))):
            continue  # the whole window is skipped
        full = list(start)
        for a, d in zip(uwd, window):
            full[d] += u[a]
        out[tuple(full)] = combine(out[tuple(full)], updates[u])
    return out


def test_gather_operation_semantics_rows_example():
    # Gather rows [1] and [0] of a 3x3 matrix: the classic row-gather example.
    operand = np.arange(9, dtype=np.int32).reshape(3, 3)
    indices = np.array([1, 0], np.int32)
    got = gather(operand, indices, offset_dims=(1,), collapsed_slice_dims=(0,),
                 start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 3))
    np.testing.assert_array_equal(got, [[3, 4, 5], [0, 1, 2]])


def test_gather_clamps_start_indices():
    operand = np.arange(10, dtype=np.float32)
    indices = np.array([[-5], [8], [3]], np.int32)
    got = gather(operand, indices, offset_dims=(1,), collapsed_slice_dims=(),
                 start_index_map=(0,), index_vector_dim=1, slice_sizes=(4,))
    np.testing.assert_array_equal(got, [[0, 1, 2, 3], [6, 7, 8, 9], [3, 4, 5, 6]])


GATHER_CASES = [
    # operand shape, indices (shape, high), dnums
    ("gather_nd_points", (4, 5), ((6, 2), 5),
     {"offset_dims": (), "collapsed": (0, 1), "start_index_map": (0, 1), "ivd": 1, "slice_sizes": (1, 1)}),
    ("windows_2d", (6, 7), ((2, 3, 2), 7),
     {"offset_dims": (2, 3), "collapsed": (), "start_index_map": (1, 0), "ivd": 2, "slice_sizes": (2, 3)}),
    ("index_vector_first", (5, 6), ((2, 4), 6),
     {"offset_dims": (1,), "collapsed": (0,), "start_index_map": (0, 1), "ivd": 0,
          "slice_sizes": (1, 2)}),
    ("implicit_index_vector", (8, 3), ((2, 5), 8),
     {"offset_dims": (2,), "collapsed": (0,), "start_index_map": (0,), "ivd": 2, "slice_sizes": (1, 3)}),
    ("offset_dims_in_front", (5, 4, 3), ((6, 1), 5),
     {"offset_dims": (0, 1), "collapsed": (0,), "start_index_map": (0,), "ivd": 1,
          "slice_sizes": (1, 2, 3)}),
    ("batching_dims", (3, 7, 4), ((3, 5, 1), 7),
     {"offset_dims": (2,), "collapsed": (1,), "start_index_map": (1,), "ivd": 2, "slice_sizes": (1, 1, 4),
          "obatch": (0,), "ibatch": (0,)}),
    ("batching_dims_not_leading", (6, 2, 3), ((4, 2, 1), 6),
     {"offset_dims": (2,), "collapsed": (0,), "start_index_map": (0,), "ivd": 2,
          "slice_sizes": (1, 1, 3), "obatch": (1,), "ibatch": (1,)}),
]


@pytest.mark.parametrize("name,oshape,ispec,dn", GATHER_CASES, ids=[c[0] for c in GATHER_CASES])
def test_gather_matches_naive(name, oshape, ispec, dn):
    rng = np.random.RandomState(len(name))
    operand = rng.randn(*oshape)
    ishape, high = ispec
    indices = rng.randint(-2, high + 2, size=ishape).astype(np.int32)  # some out of bounds
    ref = naive_gather(operand, indices, dn["offset_dims"], dn["collapsed"],
                       dn["start_index_map"], dn["ivd"], dn["slice_sizes"],
                       dn.get("obatch", ()), dn.get("ibatch", ()))
    ins = instr("gather", shape_of(ref), [shape_of(operand), shape_of(indices)],
                offset_dims=dn["offset_dims"], collapsed_slice_dims=dn["collapsed"],
                start_index_map=dn["start_index_map"], index_vector_dim=dn["ivd"],
                slice_sizes=dn["slice_sizes"], operand_batching_dims=dn.get("obatch", ()),
                start_indices_batching_dims=dn.get("ibatch", ()))
    np.testing.assert_array_equal(run(ins, operand, indices), ref)


def test_gather_matches_jax_with_batching_dims():
    need_jax()
    from jax import lax
    rng = np.random.RandomState(9)
    operand = rng.randn(3, 7, 4).astype(np.float32)
    indices = rng.randint(0, 7, size=(3, 5, 1)).astype(np.int32)
    dn = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,),
                                    start_index_map=(1,), operand_batching_dims=(0,),
                                    start_indices_batching_dims=(0,))
    ref = lax.gather(operand, indices, dn, (1, 1, 4), mode="clip")
    got = gather(operand, indices, offset_dims=(2,), collapsed_slice_dims=(1,),
                 start_index_map=(1,), index_vector_dim=2, slice_sizes=(1, 1, 4),
                 operand_batching_dims=(0,), start_indices_batching_dims=(0,))
    np.testing.assert_array_equal(got, np.asarray(ref))


# ---- scatter ----------------------------------------------------------------------------

def _scatter_instr(operand, indices, updates, comp, **dn):
    return instr("scatter", shape_of(operand), [shape_of(operand), shape_of(indices),
                                                shape_of(updates)], to_apply=comp, **dn)


def test_scatter_add_duplicates_accumulate():
    operand = np.zeros(5, np.float32)
    indices = np.array([[1], [3], [1], [1]], np.int32)
    updates = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    ins = _scatter_instr(operand, indices, updates, binary("add", "f32"), update_window_dims=(),
                         inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
                         index_vector_dim=1)
    np.testing.assert_array_equal(run(ins, operand, indices, updates), [0, 8, 0, 2, 0])


def test_scatter_applies_updates_in_order():
    # A "keep the update" combiner (returns its second parameter): the last update wins.
    b = XlaBuilder("take_update")
    ps = [b.parameter(i, S("s32")) for i in range(2)]
    last = b.build_computation(ps[1])
    operand = np.zeros(3, np.int32)
    indices = np.array([[0], [2], [0], [0]], np.int32)
    updates = np.array([7, 8, 9, 10], np.int32)
    ins = _scatter_instr(operand, indices, updates, last, update_window_dims=(),
                         inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,),
                         index_vector_dim=1)
    np.testing.assert_array_equal(run(ins, operand, indices, updates), [10, 0, 8])


def test_scatter_skips_out_of_bounds_windows_entirely():
    operand = np.zeros((4, 4), np.int32)
    indices = np.array([[0, 0], [3, 3], [2, -1], [1, 2]], np.int32)
    updates = np.ones((4, 2, 2), np.int32)
    ins = _scatter_instr(operand, indices, updates, binary("add", "s32"),
                         update_window_dims=(1, 2), inserted_window_dims=(),
                         scatter_dims_to_operand_dims=(0, 1), index_vector_dim=1)
    got = run(ins, operand, indices, updates)
    expected = np.zeros((4, 4), np.int32)
    expected[0:2, 0:2] += 1
    expected[1:3, 2:4] += 1  # (3,3) and (2,-1) would leave the operand: skipped
    np.testing.assert_array_equal(got, expected)


SCATTER_CASES = [
    ("rows", (5, 3), (4, 1), (4, 3), 5,
     {"uwd": (1,), "iwd": (0,), "sdod": (0,), "ivd": 1}),
    ("points", (4, 5), (6, 2), (6,), 5, {"uwd": (), "iwd": (0, 1), "sdod": (0, 1), "ivd": 1}),
    ("windows", (6, 6), (3, 2), (3, 2, 3), 6, {"uwd": (1, 2), "iwd": (), "sdod": (1, 0), "ivd": 1}),
    ("implicit_ivd", (7,), (2, 3), (2, 3), 7, {"uwd": (), "iwd": (0,), "sdod": (0,), "ivd": 2}),
    ("batching", (3, 6, 2), (3, 4, 1), (3, 4, 2), 6,
     {"uwd": (2,), "iwd": (1,), "sdod": (1,), "ivd": 2, "ibatch": (0,), "sibatch": (0,)}),
]


@pytest.mark.parametrize("name,oshape,ishape,ushape,high,dn", SCATTER_CASES,
                         ids=[c[0] for c in SCATTER_CASES])
def test_scatter_matches_naive(name, oshape, ishape, ushape, high, dn):
    rng = np.random.RandomState(len(name) + 100)
    operand = rng.randint(-5, 5, size=oshape).astype(np.int32)
    indices = rng.randint(-1, high + 1, size=ishape).astype(np.int32)
    updates = rng.randint(-5, 5, size=ushape).astype(np.int32)
    ref = naive_scatter(operand, indices, updates, dn["uwd"], dn["iwd"], dn["sdod"], dn["ivd"],
                        dn.get("ibatch", ()), dn.get("sibatch", ()))
    ins = _scatter_instr(operand, indices, updates, binary("add", "s32"),
                         update_window_dims=dn["uwd"], inserted_window_dims=dn["iwd"],
                         scatter_dims_to_operand_dims=dn["sdod"], index_vector_dim=dn["ivd"],
                         input_batching_dims=dn.get("ibatch", ()),
                         scatter_indices_batching_dims=dn.get("sibatch", ()))
    before = operand.copy()
    got = run(ins, operand, indices, updates)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(operand, before)  # values are immutable: no write-through


def test_variadic_scatter():
    a = np.zeros(4, np.int32)
    b = np.ones(4, np.float32)
    indices = np.array([[2], [0], [2]], np.int32)
    ua = np.array([1, 2, 3], np.int32)
    ub = np.array([5.0, 6.0, 7.0], np.float32)
    pb = XlaBuilder("pair")
    a0, b0 = pb.parameter(0, S("s32"), name="a0"), pb.parameter(1, S("f32"), name="b0")
    a1, b1 = pb.parameter(2, S("s32"), name="a1"), pb.parameter(3, S("f32"), name="b1")
    comp = pb.build_computation(pb.tuple(a0 + a1, b0 * b1))
    ins = instr("scatter", Shape.tuple_of([S("s32", 4), S("f32", 4)]),
                [S("s32", 4), S("f32", 4), S("s32", 3, 1), S("s32", 3), S("f32", 3)],
                update_window_dims=(), inserted_window_dims=(0,),
                scatter_dims_to_operand_dims=(0,), index_vector_dim=1, to_apply=comp)
    ra, rb = run(ins, a, b, indices, ua, ub)
    np.testing.assert_array_equal(ra, [2, 0, 4, 0])
    np.testing.assert_array_equal(rb, [6, 1, 35, 1])


def test_scatter_matches_jax():
    need_jax()
    from jax import lax
    rng = np.random.RandomState(12)
    operand = rng.randn(5, 4).astype(np.float32)
    indices = rng.randint(0, 5, size=(6, 1)).astype(np.int32)
    updates = rng.randn(6, 4).astype(np.float32)
    dn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
    ref = lax.scatter_add(operand, indices, updates, dn)
    ins = _scatter_instr(operand, indices, updates, binary("add", "f32"),
                         update_window_dims=(1,), inserted_window_dims=(0,),
                         scatter_dims_to_operand_dims=(0,), index_vector_dim=1)
    np.testing.assert_allclose(run(ins, operand, indices, updates), np.asarray(ref), rtol=1e-6)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_huge_start_indices_clamp_high_and_scatter_drops_them(backend):
    """XLA clamps dynamic-slice / dynamic-update-slice / gather starts into range: a u64
    start >= 2^63 is huge, so it clamps to the last window (both backends took it for
    negative and clamped to 0, the cpu backend's gather and dynamic slices, the
    interpreter's gather). A scatter index of INT64_MAX is out of bounds and dropped
    (the interpreter's bounds test overflowed and raised IndexError). Found by
    tools/edge_sweep.py --ops ds,dus,gather,scatter against XLA:CPU."""
    import xladist
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY main {
  x = f32[10] parameter(0)
  u = u64[] parameter(1)
  s = s64[] parameter(2)
  iu = u64[2,1] parameter(3)
  is = s64[2,1] parameter(4)
  ds = f32[3] dynamic-slice(x, u), dynamic_slice_sizes={3}
  v = f32[3] constant({-1, -2, -3})
  dus = f32[10] dynamic-update-slice(x, v, u)
  g = f32[2,3] gather(x, iu), offset_dims={1}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={3}
  up = f32[2] constant({100, 200})
  sc = f32[10] scatter(x, is, up), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  ROOT r = (f32[3], f32[10], f32[2,3], f32[10]) tuple(ds, dus, g, sc)
}
"""
    x = np.arange(10, dtype=np.float32)
    args = [x, np.uint64(2**63), np.int64(2**63 - 1),
            np.array([[2**63], [2**64 - 1]], np.uint64),
            np.array([[2**63 - 1], [1]], np.int64)]
    ds, dus, g, sc = xladist.compile(xladist.parse_hlo(text), backend=backend)(*args)
    assert ds.tolist() == [7, 8, 9]
    assert dus.tolist() == [0, 1, 2, 3, 4, 5, 6, -1, -2, -3]
    assert g.tolist() == [[7, 8, 9], [7, 8, 9]]
    assert sc.tolist() == [0, 201, 2, 3, 4, 5, 6, 7, 8, 9]


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_gather_of_a_scalar_repeats_it_per_batch_position(backend):
    """A gather from a rank-0 operand (no index components, s32[3,0] indices) gives the
    scalar at each of the 3 batch positions: XLA:CPU (jax 0.10.2) returns f32[3]
    {2.5, 2.5, 2.5}. The interpreter returned the scalar itself and refused its own
    result ("gather computes shape () but the instruction declares f32[3]"). Found by the
    structural-op sweep against XLA:CPU."""
    import xladist
    text = """HloModule m
ENTRY main {
  x = f32[] parameter(0)
  i = s32[3,0] parameter(1)
  ROOT g = f32[3] gather(x, i), offset_dims={}, collapsed_slice_dims={}, start_index_map={}, index_vector_dim=1, slice_sizes={}
}
"""
    exe = xladist.compile(xladist.parse_hlo(text), backend=backend)
    (g,) = exe(np.float32(2.5), np.zeros((3, 0), np.int32))
    assert g.dtype == np.float32 and g.tolist() == [2.5, 2.5, 2.5]
