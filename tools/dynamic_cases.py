"""Hand-written HLO programs with bounded dynamic shapes (the tests/data/corpus/dynamic cases).

Each case is one module whose last parameters are s32[] sizes, run for several size
tuples (including 0 and the full bound). `cuts` says how XLA:CPU's padded result buffers are
cut to their dynamic size: {output index: (for each dimension, the index of the output that
holds its get-dimension-size, or None for a static dimension)}. tools/gen_dynamic_corpus.py
runs them on XLA:CPU; the tests run them on both xladist backends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

_ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""
_MUL = _ADD.replace("add", "mul").replace("ROOT c = f32[] mul(", "ROOT c = f32[] multiply(")
_MAX = _ADD.replace("add", "max").replace("ROOT c = f32[] max(", "ROOT c = f32[] maximum(")
_MAXS32 = _MAX.replace("f32", "s32").replace("max {", "maxs {")
_LT = """lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
"""
_LT_KV = """ltkv {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=GT
}
"""


@dataclass
class Case:
    name: str
    description: str
    hlo: str
    args: list[tuple[str, tuple[int, ...]]]   # (dtype, dims) of the data parameters
    sizes: list[tuple[int, ...]]             # one tuple of s32 sizes per run
    cuts: dict[int, tuple] = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-5
    # numpy (args) -> outputs, for a program XLA:CPU's jaxlib path cannot compile
    reference: Callable | None = None
    reference_why: str = ""
    # sizes at which the generator also runs XLA:CPU and checks the reference against it
    xla_check: list[tuple[int, ...]] = field(default_factory=list)


def _flatten_rows(x, n):
    flat = x[:n].reshape(-1)
    return [flat, np.int32(flat.size), np.float32(flat.sum(dtype=np.float32)),
            flat.reshape(-1, 2), np.int32(flat.size // 2)]


_SEGV = ("XLA:CPU (jaxlib 0.4.30) crashes with a segmentation fault at small sizes of this "
         "program; the numpy reference of the operation semantics is checked against XLA:CPU "
         "at the sizes where it runs (case.json xla_checked_sizes)")


def _slice_reverse(v, n):
    n = max(0, min(n, v.size))
    r = v[:n][::-1]
    return [r, v[2:5], np.float32(r.sum(dtype=np.float32)), np.int32(n)]


def _windows(x, n):
    d = x[:n]
    padded = np.concatenate([np.zeros((1, 2), np.float32), d, np.zeros((1, 2), np.float32)])
    # XLA counts VALID windows over the dynamic size (padding adds none), but their values
    # are those of the padded windows
    k = max(n - 2, 0)
    s = np.array([padded[i:i + 3].sum(0, dtype=np.float32) for i in range(k)],
                 np.float32).reshape(k, 2)
    m = np.array([d[2 * i:2 * i + 2].max(0) for i in range(n // 2)],
                 np.float32).reshape(n // 2, 2)
    return [s, m, np.int32(k), np.int32(n // 2)]


_NO_MLIR_RESHAPE = ("jaxlib 0.4.30's only compile path (HLO -> MHLO -> StableHLO) refuses a "
                    "reshape to a bounded dynamic shape, so the expected values follow the "
                    "operation semantics: the valid elements, row-major")


def _reshape(x, n):
    flat = x[:n].reshape(-1)
    return [flat, flat.reshape(-1, 2), np.int32(flat.size), np.int32(flat.size // 2)]


def _module(name: str, comps: str, entry: str) -> str:
    return f"HloModule {name}\n\n{comps}\nENTRY main {{\n{entry.strip()}\n}}\n"


CASES = [
    Case("reduce_add_1d", "sum of the first n of 10 elements, and get-dimension-size",
         _module("reduce_add_1d", _ADD, """
  v = f32[10] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=10] set-dimension-size(v, n), dimensions={0}
  z = f32[] constant(0)
  r = f32[] reduce(d, z), dimensions={0}, to_apply=add
  g = s32[] get-dimension-size(d), dimensions={0}
  ROOT t = (f32[], s32[]) tuple(r, g)"""),
         [("f32", (10,))], [(n,) for n in range(11)]),
    Case("reduce_mul_1d", "product of the first n of 10 elements",
         _module("reduce_mul_1d", _MUL, """
  v = f32[10] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=10] set-dimension-size(v, n), dimensions={0}
  o = f32[] constant(1)
  ROOT r = f32[] reduce(d, o), dimensions={0}, to_apply=mul"""),
         [("f32", (10,))], [(n,) for n in range(11)]),
    Case("reduce_max_1d", "max of the first n of 10 elements (init -inf)",
         _module("reduce_max_1d", _MAX, """
  v = f32[10] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=10] set-dimension-size(v, n), dimensions={0}
  i = f32[] constant(-inf)
  ROOT r = f32[] reduce(d, i), dimensions={0}, to_apply=max"""),
         [("f32", (10,))], [(n,) for n in range(11)]),
    Case("reduce_max_s32", "s32 max of the first n elements (init INT_MIN)",
         _module("reduce_max_s32", _MAXS32, """
  v = s32[7] parameter(0)
  n = s32[] parameter(1)
  d = s32[<=7] set-dimension-size(v, n), dimensions={0}
  i = s32[] constant(-2147483648)
  ROOT r = s32[] reduce(d, i), dimensions={0}, to_apply=maxs"""),
         [("s32", (7,))], [(0,), (1,), (4,), (7,)]),
    Case("reduce_2d", "a dynamic row count: column sums, column max, row sums (dynamic)",
         _module("reduce_2d", _ADD + _MAX, """
  x = f32[6,3] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=6,3] set-dimension-size(x, n), dimensions={0}
  z = f32[] constant(0)
  i = f32[] constant(-inf)
  cs = f32[3] reduce(d, z), dimensions={0}, to_apply=add
  cm = f32[3] reduce(d, i), dimensions={0}, to_apply=max
  rs = f32[<=6] reduce(d, z), dimensions={1}, to_apply=add
  g = s32[] get-dimension-size(rs), dimensions={0}
  ROOT t = (f32[3], f32[3], f32[<=6], s32[]) tuple(cs, cm, rs, g)"""),
         [("f32", (6, 3))], [(0,), (2,), (6,)], cuts={2: (3,)}),
    Case("elementwise_reduce", "element-wise ops on a dynamic vector, then a full reduce",
         _module("elementwise_reduce", _ADD, """
  v = f32[8] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=8] set-dimension-size(v, n), dimensions={0}
  e = f32[<=8] exponential(d)
  m = f32[<=8] multiply(e, d)
  c = f32[] constant(1)
  b = f32[8] broadcast(c), dimensions={}
  s = f32[<=8] add(m, b)
  z = f32[] constant(0)
  r = f32[] reduce(s, z), dimensions={0}, to_apply=add
  g = s32[] get-dimension-size(s), dimensions={0}
  ROOT t = (f32[], f32[<=8], s32[]) tuple(r, s, g)"""),
         [("f32", (8,))], [(0,), (3,), (8,)], cuts={1: (2,)}),
    Case("dot_contracting", "dot whose contracting dimension is dynamic on both sides",
         _module("dot_contracting", "", """
  a = f32[3,8] parameter(0)
  b = f32[8,2] parameter(1)
  n = s32[] parameter(2)
  da = f32[3,<=8] set-dimension-size(a, n), dimensions={1}
  db = f32[<=8,2] set-dimension-size(b, n), dimensions={0}
  ROOT r = f32[3,2] dot(da, db), lhs_contracting_dims={1}, rhs_contracting_dims={0}"""),
         [("f32", (3, 8)), ("f32", (8, 2))], [(0,), (1,), (5,), (8,)]),
    Case("dot_free_dim", "dot with a dynamic free (batch-like) dimension on the lhs",
         _module("dot_free_dim", "", """
  a = f32[5,4] parameter(0)
  b = f32[4,3] parameter(1)
  n = s32[] parameter(2)
  da = f32[<=5,4] set-dimension-size(a, n), dimensions={0}
  r = f32[<=5,3] dot(da, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g = s32[] get-dimension-size(r), dimensions={0}
  ROOT t = (f32[<=5,3], s32[]) tuple(r, g)"""),
         [("f32", (5, 4)), ("f32", (4, 3))], [(0,), (2,), (5,)], cuts={0: (1, None)}),
    Case("dynamic_reshape", "flatten the valid rows, and back to rows of 3",
         _module("dynamic_reshape", _ADD, """
  x = f32[4,3] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=4,3] set-dimension-size(x, n), dimensions={0}
  three = s32[] constant(3)
  total = s32[] multiply(n, three)
  f = f32[<=12] dynamic-reshape(d, total)
  g = s32[] get-dimension-size(f), dimensions={0}
  z = f32[] constant(0)
  s = f32[] reduce(f, z), dimensions={0}, to_apply=add
  two = s32[] constant(2)
  half = s32[] divide(total, two)
  h = f32[<=6,2] dynamic-reshape(f, half, two)
  gh = s32[] get-dimension-size(h), dimensions={0}
  ROOT t = (f32[<=12], s32[], f32[], f32[<=6,2], s32[]) tuple(f, g, s, h, gh)"""),
         [("f32", (4, 3))], [(0,), (2,), (4,)], cuts={0: (1,), 3: (4, None)},
         reference=lambda x, n: _flatten_rows(x, int(n)),
         reference_why="jaxlib 0.4.30's only compile path (HLO -> MHLO -> StableHLO) fails on "
                       "dynamic-reshape ('failed to legalize mhlo.unknown'), so the expected "
                       "values follow the operation semantics: the valid rows, row-major"),
    Case("concatenate", "concatenate of two dynamic vectors",
         _module("concatenate", "", """
  a = f32[5] parameter(0)
  b = f32[4] parameter(1)
  n = s32[] parameter(2)
  m = s32[] parameter(3)
  da = f32[<=5] set-dimension-size(a, n), dimensions={0}
  db = f32[<=4] set-dimension-size(b, m), dimensions={0}
  c = f32[<=9] concatenate(da, db), dimensions={0}
  g = s32[] get-dimension-size(c), dimensions={0}
  ROOT t = (f32[<=9], s32[]) tuple(c, g)"""),
         [("f32", (5,)), ("f32", (4,))], [(0, 0), (2, 3), (5, 0), (0, 4), (5, 4)],
         cuts={0: (1,)}),
    Case("sort", "sort of a dynamic vector, and a descending key/value sort",
         _module("sort", _LT + _LT_KV, """
  v = f32[10] parameter(0)
  k = s32[10] parameter(1)
  n = s32[] parameter(2)
  d = f32[<=10] set-dimension-size(v, n), dimensions={0}
  dk = s32[<=10] set-dimension-size(k, n), dimensions={0}
  s = f32[<=10] sort(d), dimensions={0}, to_apply=lt
  kv = (f32[<=10], s32[<=10]) sort(d, dk), dimensions={0}, to_apply=ltkv
  s0 = f32[<=10] get-tuple-element(kv), index=0
  s1 = s32[<=10] get-tuple-element(kv), index=1
  g = s32[] get-dimension-size(s), dimensions={0}
  ROOT t = (f32[<=10], f32[<=10], s32[<=10], s32[]) tuple(s, s0, s1, g)"""),
         [("f32", (10,)), ("s32", (10,))], [(0,), (1,), (6,), (10,)],
         cuts={0: (3,), 1: (3,), 2: (3,)}),
    Case("mean_variance", "mean and variance over a dynamic row count, divided by the count",
         _module("mean_variance", _ADD, """
  x = f32[8,2] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=8,2] set-dimension-size(x, n), dimensions={0}
  z = f32[] constant(0)
  s = f32[2] reduce(d, z), dimensions={0}, to_apply=add
  g = s32[] get-dimension-size(d), dimensions={0}
  c = f32[] convert(g)
  cb = f32[2] broadcast(c), dimensions={}
  mean = f32[2] divide(s, cb)
  mb = f32[8,2] broadcast(mean), dimensions={1}
  dm = f32[<=8,2] subtract(d, mb)
  sq = f32[<=8,2] multiply(dm, dm)
  ss = f32[2] reduce(sq, z), dimensions={0}, to_apply=add
  var = f32[2] divide(ss, cb)
  ROOT t = (f32[2], f32[2]) tuple(mean, var)"""),
         [("f32", (8, 2))], [(1,), (3,), (8,)]),
    Case("transpose", "a dynamic row count through an add with a broadcast, and transpose",
         _module("transpose", _ADD, """
  x = f32[6,4] parameter(0)
  v = f32[6] parameter(1)
  n = s32[] parameter(2)
  d = f32[<=6,4] set-dimension-size(x, n), dimensions={0}
  b = f32[6,4] broadcast(v), dimensions={0}
  a = f32[<=6,4] add(d, b)
  t = f32[4,<=6] transpose(a), dimensions={1,0}
  z = f32[] constant(0)
  r = f32[4] reduce(t, z), dimensions={1}, to_apply=add
  g = s32[] get-dimension-size(t), dimensions={1}
  ROOT o = (f32[4,<=6], f32[4], s32[]) tuple(t, r, g)"""),
         [("f32", (6, 4)), ("f32", (6,))], [(0,), (4,), (6,)], cuts={0: (None, 2)}),
    Case("slice_reverse", "a whole and a partial slice, and reverse, of a dynamic vector",
         _module("slice_reverse", _ADD, """
  v = f32[8] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=8] set-dimension-size(v, n), dimensions={0}
  w = f32[<=8] slice(d), slice={[0:8]}
  p = f32[3] slice(d), slice={[2:5]}
  r = f32[<=8] reverse(w), dimensions={0}
  z = f32[] constant(0)
  s = f32[] reduce(r, z), dimensions={0}, to_apply=add
  g = s32[] get-dimension-size(r), dimensions={0}
  ROOT t = (f32[<=8], f32[3], f32[], s32[]) tuple(r, p, s, g)"""),
         [("f32", (8,))], [(0,), (1,), (5,), (8,)], cuts={0: (3,)},
         reference=lambda v, n: _slice_reverse(v, int(n)), xla_check=[(5,), (8,)],
         reference_why=_SEGV),
    Case("reduce_window", "a sliding-window sum and a strided max pool over a dynamic length",
         _module("reduce_window", _ADD + _MAX, """
  x = f32[9,2] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=9,2] set-dimension-size(x, n), dimensions={0}
  z = f32[] constant(0)
  i = f32[] constant(-inf)
  s = f32[<=9,2] reduce-window(d, z), window={size=3x1 pad=1_1x0_0}, to_apply=add
  m = f32[<=4,2] reduce-window(d, i), window={size=2x1 stride=2x1}, to_apply=max
  gs = s32[] get-dimension-size(s), dimensions={0}
  gm = s32[] get-dimension-size(m), dimensions={0}
  ROOT t = (f32[<=9,2], f32[<=4,2], s32[], s32[]) tuple(s, m, gs, gm)"""),
         [("f32", (9, 2))], [(0,), (1,), (4,), (5,), (9,)], cuts={0: (2, None), 1: (3, None)},
         reference=lambda x, n: _windows(x, int(n)), xla_check=[(4,), (5,), (9,)],
         reference_why=_SEGV),
    Case("convolution", "1-D convolutions with a dynamic batch and with dynamic input features "
         "(XLA:CPU refuses a dynamic spatial dimension: 'Dynamic Spatial Convolution is not "
         "supported')",
         _module("convolution", "", """
  x = f32[4,8,3] parameter(0)
  k = f32[3,3,4] parameter(1)
  n = s32[] parameter(2)
  d = f32[<=4,8,3] set-dimension-size(x, n), dimensions={0}
  c = f32[<=4,6,4] convolution(d, k), window={size=3}, dim_labels=b0f_0io->b0f
  g = s32[] get-dimension-size(c), dimensions={0}
  m = s32[] constant(2)
  f = f32[4,8,<=3] set-dimension-size(x, m), dimensions={2}
  kf = f32[3,<=3,4] set-dimension-size(k, m), dimensions={1}
  cf = f32[4,6,4] convolution(f, kf), window={size=3}, dim_labels=b0f_0io->b0f
  ROOT t = (f32[<=4,6,4], s32[], f32[4,6,4]) tuple(c, g, cf)"""),
         [("f32", (4, 8, 3)), ("f32", (3, 3, 4))], [(0,), (2,), (4,)],
         cuts={0: (1, None, None)}, rtol=1e-4, atol=1e-4),
    Case("while_loop", "a dynamic vector carried through a while loop: doubled and summed "
         "three times",
         _module("while_loop", _ADD + """
body {
  p = (s32[], f32[<=8], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[<=8] get-tuple-element(p), index=1
  acc = f32[] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  two = f32[] constant(2)
  tb = f32[8] broadcast(two), dimensions={}
  v2 = f32[<=8] multiply(v, tb)
  z = f32[] constant(0)
  s = f32[] reduce(v2, z), dimensions={0}, to_apply=add
  acc1 = f32[] add(acc, s)
  ROOT t = (s32[], f32[<=8], f32[]) tuple(i1, v2, acc1)
}

cond {
  p = (s32[], f32[<=8], f32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}

""", """
  x = f32[8] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=8] set-dimension-size(x, n), dimensions={0}
  zero = s32[] constant(0)
  fz = f32[] constant(0)
  init = (s32[], f32[<=8], f32[]) tuple(zero, d, fz)
  w = (s32[], f32[<=8], f32[]) while(init), condition=cond, body=body
  v = f32[<=8] get-tuple-element(w), index=1
  acc = f32[] get-tuple-element(w), index=2
  g = s32[] get-dimension-size(v), dimensions={0}
  ROOT r = (f32[<=8], f32[], s32[]) tuple(v, acc, g)"""),
         [("f32", (8,))], [(0,), (1,), (3,), (8,)], cuts={0: (2,)}),
    Case("reshape", "reshape of a dynamic row count: merge into one dimension, split again",
         _module("reshape", "", """
  x = f32[4,3] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=4,3] set-dimension-size(x, n), dimensions={0}
  f = f32[<=12] reshape(d)
  h = f32[<=6,2] reshape(f)
  gf = s32[] get-dimension-size(f), dimensions={0}
  gh = s32[] get-dimension-size(h), dimensions={0}
  ROOT t = (f32[<=12], f32[<=6,2], s32[], s32[]) tuple(f, h, gf, gh)"""),
         [("f32", (4, 3))], [(0,), (2,), (4,)], cuts={0: (2,), 1: (3, None)},
         reference=lambda x, n: _reshape(x, int(n)), reference_why=_NO_MLIR_RESHAPE),
    Case("pad", "pad of a dynamic vector with low, high and interior padding",
         _module("pad", _ADD, """
  x = f32[4] parameter(0)
  n = s32[] parameter(1)
  d = f32[<=4] set-dimension-size(x, n), dimensions={0}
  c = f32[] constant(7)
  p = f32[<=13] pad(d, c), padding=1_2_2
  g = s32[] get-dimension-size(p), dimensions={0}
  z = f32[] constant(0)
  s = f32[] reduce(p, z), dimensions={0}, to_apply=add
  ROOT t = (f32[<=13], s32[], f32[]) tuple(p, g, s)"""),
         [("f32", (4,))], [(0,), (1,), (2,), (4,)], cuts={0: (1,)}),
    Case("conditional", "a conditional whose branches return different dynamic sizes (the "
         "last argument picks the branch: 0 negates the first n, 1 keeps the first 3)",
         _module("conditional", _ADD + """
neg {
  t = (f32[8], s32[]) parameter(0)
  p = f32[8] get-tuple-element(t), index=0
  n = s32[] get-tuple-element(t), index=1
  d = f32[<=8] set-dimension-size(p, n), dimensions={0}
  ROOT r = f32[<=8] negate(d)
}

grow {
  t = (f32[8], s32[]) parameter(0)
  p = f32[8] get-tuple-element(t), index=0
  three = s32[] constant(3)
  ROOT d = f32[<=8] set-dimension-size(p, three), dimensions={0}
}

""", """
  x = f32[8] parameter(0)
  n = s32[] parameter(1)
  b = s32[] parameter(2)
  tx = (f32[8], s32[]) tuple(x, n)
  r = f32[<=8] conditional(b, tx, tx), branch_computations={neg, grow}
  z = f32[] constant(0)
  s = f32[] reduce(r, z), dimensions={0}, to_apply=add
  g = s32[] get-dimension-size(r), dimensions={0}
  ROOT t = (f32[<=8], f32[], s32[]) tuple(r, s, g)"""),
         [("f32", (8,))], [(0, 0), (0, 1), (5, 0), (5, 1), (8, 0), (8, 1)], cuts={0: (2,)}),
    Case("gather_scatter", "a gather with a dynamic number of indices of a dynamic table, "
         "and a scatter-add into a dynamic vector",
         _module("gather_scatter", _ADD, """
  t = f32[6,3] parameter(0)
  i = s32[5,1] parameter(1)
  u = f32[2] parameter(2)
  n = s32[] parameter(3)
  dt = f32[<=6,3] set-dimension-size(t, n), dimensions={0}
  di = s32[<=5,1] set-dimension-size(i, n), dimensions={0}
  g = f32[<=5,3] gather(dt, di), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}
  gg = s32[] get-dimension-size(g), dimensions={0}
  c = f32[6,1] slice(t), slice={[0:6], [0:1]}
  v = f32[6] reshape(c)
  dv = f32[<=6] set-dimension-size(v, n), dimensions={0}
  si = s32[2,1] constant({ {0}, {1} })
  s = f32[<=6] scatter(dv, si, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  gs = s32[] get-dimension-size(s), dimensions={0}
  ROOT o = (f32[<=5,3], s32[], f32[<=6], s32[]) tuple(g, gg, s, gs)"""),
         [("f32", (6, 3)), ("idx5", (5, 1)), ("f32", (2,))], [(0,), (2,), (5,)],
         cuts={0: (1, None), 2: (3,)}),
    Case("scatter_dynamic_updates", "a scatter-add whose number of index vectors and updates "
         "is dynamic: padded ones must not land",
         _module("scatter_dynamic_updates", _ADD, """
  v = f32[6] parameter(0)
  i = s32[5,1] parameter(1)
  u = f32[5] parameter(2)
  n = s32[] parameter(3)
  di = s32[<=5,1] set-dimension-size(i, n), dimensions={0}
  du = f32[<=5] set-dimension-size(u, n), dimensions={0}
  ROOT s = f32[6] scatter(v, di, du), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add"""),
         [("f32", (6,)), ("idx5", (5, 1)), ("f32", (5,))], [(0,), (1,), (3,), (5,)]),
]
