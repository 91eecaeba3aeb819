"""xla/backends/gpu/tests/reduce_scatter_e2e_test.cc (fixture ReduceScatterTest), transcribed
from revision a6a2e7c. The tests' inputs are formulas of the element index and the replica;
XLA states the expected values by a reference loop, written here in numpy."""

from __future__ import annotations

import numpy as np

from .records import Case, made, per_device

SOURCE = "xla/backends/gpu/tests/reduce_scatter_e2e_test.cc"


def _case(test, module, n, inputs, expected, out_dims, type_, **kw) -> Case:
    in_type = type_
    return Case(name=f"ReduceScatterTest.{test}", source=SOURCE, test=f"ReduceScatterTest.{test}",
                module=module, n=n, **kw,
                inputs=per_device(*[made(in_type, inputs(r).shape, lambda r=r: inputs(r))
                                    for r in range(n)]),
                expected=per_device(*[made(type_, out_dims, lambda r=r: expected(r))
                                      for r in range(n)]))


def _basic(r):
    i = np.arange(256, dtype=np.float32)
    return i if r == 0 else 1000 + 2 * i


def _two_dim(r):
    ij = np.arange(8 * 300).reshape(8, 300)
    return ((ij % 7) - 3 if r == 0 else (ij % 5) - 2).astype(np.int32)


def _loop_input(r):
    i = np.arange(4096)
    return (i % 13 if r == 0 else i % 11 + 1).astype(np.int32)


def _loop_expected(r):
    state = [_loop_input(0).astype(np.int64), _loop_input(1).astype(np.int64)]
    for _ in range(5):
        halves = [state[0][k * 2048:(k + 1) * 2048] + state[1][k * 2048:(k + 1) * 2048]
                  for k in range(2)]
        state = [np.concatenate([h, h]) for h in halves]
    return state[r].astype(np.int32)


def _bf16():
    import ml_dtypes
    return ml_dtypes.bfloat16


def _moe(r):
    idx = np.indices((16, 8, 128)).sum(axis=0)
    return ((idx + r) % 9).astype(np.float32).astype(_bf16())


def _moe_expected(r):
    i0, i1, i2 = np.indices((4, 8, 128))
    total = sum(((r * 4 + i0 + i1 + i2 + p) % 9) for p in range(4))
    return total.astype(np.float32).astype(_bf16())


def _pred(r):
    i, j = np.indices((32, 128))
    return ((i + j) % 3 == 0) if r == 0 else ((i * 2 + j) % 5 == 0)


CASES: list[Case] = [
    _case("Basic2GpuF32Sum", """HloModule test
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
ENTRY test_computation {
  param_0 = f32[256] parameter(0)
  ROOT rs = f32[128] reduce-scatter(param_0), dimensions={0},
    replica_groups={{0,1}}, to_apply=add
}
""", 2, _basic, lambda r: (_basic(0) + _basic(1))[r * 128:(r + 1) * 128], (128,), "f32",
          replica_count=2),
    # Flattened ids over 2 partitions (the run configuration says 1 x 2; the header nothing).
    _case("TwoDimS32Max", """HloModule test
max {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] maximum(a, b)
}
ENTRY test_computation {
  param_0 = s32[8,300] parameter(0)
  ROOT rs = s32[4,300] reduce-scatter(param_0), dimensions={0},
    channel_id=1, use_global_device_ids=true,
    replica_groups={{0,1}}, to_apply=max
}
""", 2, _two_dim, lambda r: np.maximum(_two_dim(0), _two_dim(1))[r * 4:(r + 1) * 4],
          (4, 300), "s32", replica_count=1, num_partitions=2),
    _case("RepeatedInWhileLoopS32Sum", """HloModule test
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] add(a, b)
}
cond {
  p = (s32[], s32[4096]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], s32[4096]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = s32[4096] get-tuple-element(p), index=1
  rs = s32[2048] reduce-scatter(x), dimensions={0},
    replica_groups={{0,1}}, to_apply=add
  y = s32[4096] concatenate(rs, rs), dimensions={0}
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], s32[4096]) tuple(i1, y)
}
ENTRY test_computation {
  param_0 = s32[4096] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], s32[4096]) tuple(zero, param_0)
  w = (s32[], s32[4096]) while(init), condition=cond, body=body
  ROOT out = s32[4096] get-tuple-element(w), index=1
}
""", 2, _loop_input, _loop_expected, (4096,), "s32", replica_count=2),
    _case("FourGpuBf16Sum", """HloModule test
add {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] add(a, b)
}
ENTRY test_computation {
  param_0 = bf16[16,8,128] parameter(0)
  ROOT rs = bf16[4,8,128] reduce-scatter(param_0), dimensions={0},
    replica_groups={{0,1,2,3}}, to_apply=add
}
""", 4, _moe, _moe_expected, (4, 8, 128), "bf16", replica_count=4),
    _case("PredOr2D", """HloModule test
or_op {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT r = pred[] or(a, b)
}
ENTRY test_computation {
  param_0 = pred[32,128] parameter(0)
  ROOT rs = pred[16,128] reduce-scatter(param_0), dimensions={0},
    replica_groups={{0,1}}, to_apply=or_op
}
""", 2, _pred, lambda r: (_pred(0) | _pred(1))[r * 16:(r + 1) * 16], (16, 128), "pred",
          replica_count=2),
]

SKIPPED: dict[str, str] = {}
