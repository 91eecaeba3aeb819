"""xla/tests/collective_ops_e2e_test.cc (fixtures AsyncCollectiveOps, MemcpyCollectiveOps,
AsyncMemcpyCollectiveOps, CollectiveOpsTestE2E, CollectiveOpsTestE2EWindowedNonWindowed,
CollectiveOpsTestE2EPipelinedNonPipelined, AllReduceTest), transcribed from revision 225ab6c.

The GPU flags these tests vary (async or not, memcpy or NCCL, one-shot kernels) do not change
what a program computes, so each TEST_P is one case. Tests that compare two compilations of
one program on random inputs (windowed einsum, collective pipelining, memcpy p2p) are given
inputs of their own -- different on every device where XLA's are the same, so that block
order is observable -- and values from a numpy reference of the program. Tests that only
check a compiled module's structure state the values the op semantics give.
"""

from __future__ import annotations

import zlib

import numpy as np

from .records import Case, arr, each, full, made, per_device

SOURCE = "xla/tests/collective_ops_e2e_test.cc"


def _case(fixture: str, test: str, module: str, n: int, *, name: str | None = None,
          partitions: int | None = None, **kw) -> Case:
    if partitions:
        kw.update(replica_count=1, num_partitions=partitions)
    else:
        kw.setdefault("replica_count", n)
    return Case(name=f"{fixture}.{name or test}", source=SOURCE, test=f"{fixture}.{test}",
                module=module, n=n, **kw)


def _async(test, module, n, **kw):
    return _case("AsyncCollectiveOps", test, module, n, **kw)


def _e2e(test, module, n, **kw):
    return _case("CollectiveOpsTestE2E", test, module, n, **kw)


def _seed(*parts) -> int:
    """A seed from a case's name and indices, the same in every process (unlike hash())."""
    return zlib.crc32(repr(parts).encode())


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _uniform(seed: int, dims, lo=1.0, hi=10.0, dtype=np.float32) -> np.ndarray:
    """Array::FillRandom(lo, hi, seed) in spirit: uniform values, one seed per replica."""
    return _rng(seed).uniform(lo, hi, size=dims).astype(dtype)


def _small_ints(seed: int, dims, lo=-3, hi=4) -> np.ndarray:
    """Small integers: exact in bf16 and in the sums of a few of them."""
    return _rng(seed).integers(lo, hi, size=dims).astype(np.float64)


# ---- AsyncCollectiveOps and friends: small programs with stated values ------------------------

_A2A_NO_SPLIT = """HloModule test

ENTRY test_computation {
  id = u32[] replica-id()
  id2 = u32[2] broadcast(id), dimensions={}
  a0 = u32[2] constant({10, 15})
  a1 = u32[2] add(id2, a0)
  a2 = u32[2] constant({4, 4})
  a3 = u32[2] multiply(a1, a2)
  // r0 : a1 = {10, 15}, a2 = {40, 60)
  // r1 : a1 = {11, 16}, a1 = {44, 64}
  // r0: a2a element 0 = {10, 15}, a2a element 1 = {11, 16}
  // r0: a2a element 0 = {40, 60}, a2a element 1 = {44, 64}
  a2a = (u32[2], u32[2]) all-to-all(u32[2] a1, u32[2] a3), replica_groups={{0,1}}
  gte0 = get-tuple-element(a2a), index=0
  gte1 = get-tuple-element(a2a), index=1
  ROOT x = u32[4] concatenate(gte0, gte1), dimensions={0}
}
"""

_A2A_SPLIT_2X2 = """HloModule test

ENTRY test_computation {
  id = u32[] replica-id()
  id2 = u32[2, 2] broadcast(id), dimensions={}
  a0 = u32[2, 2] constant({{10, 15}, {20, 25}})
  a1 = u32[2, 2] add(id2, a0)
  all2all = u32[2, 2] all-to-all(a1), REPLICA_GROUPSdimensions={0}
  ROOT out = u32[4] reshape(all2all)
}
"""


def _a2a_degenerate(split: bool) -> str:
    body = ("ROOT a2a = u32[2] all-to-all(u32[2] a1), dimensions={0}, replica_groups={{0},{1}}"
            if split else
            "a2a = (u32[2]) all-to-all(u32[2] a1), replica_groups={{0},{1}}\n"
            "  ROOT gte0 = get-tuple-element(a2a), index=0")
    return f"""HloModule test

ENTRY test_computation {{
  id = u32[] replica-id()
  id2 = u32[2] broadcast(id), dimensions={{}}
  a0 = u32[2] constant({{10, 20}})
  a1 = u32[2] add(id2, a0)
  {body}
}}
"""


def _all_to_all_8(d: int) -> list[int]:
    """AllToAll8Gpus: device d gets element 2d and 2d+1 of every device's 10*id + iota."""
    return [10 * s + 2 * d + k for s in range(8) for k in range(2)]


_MATMUL = """HloModule test

ENTRY test {
  x_f32 = f32[16,32] parameter(0)
  y_f32 = f32[16,32] parameter(1)
  replica_id = u32[] replica-id()
  addend = f32[] convert(replica_id)
  addend_bcast = f32[16,32] broadcast(addend), dimensions={}
  x_add = f32[16,32] add(addend_bcast, x_f32)
  ROOT dot_a = f32[16,16] dot(x_add, y_f32), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}
"""


def _matmul_expected(r: int):
    # XLA checks each replica against the module run on one device with replica-id as input.
    x, y = _uniform(190, (16, 32), -1, 1), _uniform(191, (16, 32), -1, 1)
    return ((x.astype(np.float64) + r) @ y.astype(np.float64).T).astype(np.float32)


_WHILE_RS = """HloModule test

%add {
  %x = u32[] parameter(0)
  %y = u32[] parameter(1)
  ROOT %add = u32[] add(%x, %y)
}

%cond {
  %param = (u32[], u32[2], u32[1]) parameter(0)
  %count = get-tuple-element(%param), index=0
  %limit = u32[] constant(3)
  ROOT %result = pred[] compare(%count, %limit), direction=LT
}

%body {
  %param = (u32[], u32[2], u32[1]) parameter(0)

  %count = u32[] get-tuple-element(%param), index=0
  %increment = u32[] constant(1)
  %new_count = u32[] add(%count, %increment)

  // iter0: replica0 = {10, 15}, replica1 = {11, 16}
  // iter1: replica0 = {11, 17}, replica1 = {12, 18}
  // iter2: replica0 = {12, 19}, replica1 = {13, 20}

  %rs_input = u32[2] get-tuple-element(%param), index=1

  // iter0: replica0 = 21, replica1 = 31
  // iter1: replica0 = 23, replica1 = 35
  // iter2: replicq0 = 25, replica1 = 39
  %rs = u32[1] reduce-scatter(%rs_input), replica_groups={{0,1}}, to_apply=%add, dimensions={0}

  // iter0: replica0 = 5, replica1 = 5
  // iter1: replica0 = 26, replica1 = 36
  // iter2: replica0 = 49, replica1 = 70
  %old_accum = u32[1] get-tuple-element(%param), index=2

  // iter0: replica0 = 26, replica1 = 36
  // iter1: replica0 = 49, replica1 = 71
  // iter2: replica0 = 74, replica1 = 110
  %new_accum = u32[1] add(%rs, %old_accum)

  %input_inc = u32[2] constant({1, 2})

  // iter0: replica0 = {11, 17}, replica1 = {12, 18}
  // iter1: replica0 = {12, 19}, replica1 = {13, 20}
  // iter2: replica0 = {13, 21}, replica1 = {14, 22}
  %new_rs_input = u32[2] add(%rs_input, %input_inc)

  ROOT ret = (u32[], u32[2], u32[1]) tuple(%new_count, %new_rs_input, %new_accum)
}

ENTRY test_computation {
  // loop that executes 3 times.
  %count = u32[] constant(0)
  %id = u32[] replica-id()
  %id2 = u32[2] broadcast(id), dimensions={}
  %a0 = u32[2] constant({10, 15})
  // replica0: {10, 15}, replica1 : {11, 16}
  %init_rs_input = u32[2] add(id2, a0)
  %init_rs_accum = u32[1] constant({5})
  %while_init = (u32[], u32[2], u32[1]) tuple(%count, %init_rs_input, %init_rs_accum)
  %while_result = (u32[], u32[2], u32[1]) while(%while_init), body=%body, condition=%cond
  ROOT gte = u32[1] get-tuple-element(%while_result), index=2
}
"""

CASES: list[Case] = [
    # An instruction named like its opcode.
    _async("AsyncAllReduce", """HloModule test

apply_op {
  x = u32[] parameter(0)
  y = u32[] parameter(1)
  ROOT apply_op = u32[] add(x, y)
}

ENTRY test_computation {
  id = u32[] replica-id()
  ROOT all-reduce = u32[] all-reduce(id), to_apply=apply_op
}
""", 2, expected=each(2, arr("u32", 1))),
    _async("AsyncAllGather", """HloModule test
ENTRY test_computation {
  id = u32[] replica-id()
  id2 = u32[1, 2] broadcast(id), dimensions={}
  a0 = u32[1, 2] constant({{10, 15}})
  a1 = u32[1, 2] add(id2, a0)
  allgather = u32[2, 2] all-gather(a1), dimensions={0}
  ROOT out = u32[4] reshape(allgather)
}
""", 2, expected=each(2, arr("u32", [10, 15, 11, 16]))),
    _async("AsyncAllGatherMixedTypes", """HloModule test
ENTRY test_computation {
  id = u32[] replica-id()
  id2 = u32[1, 2] broadcast(id), dimensions={}
  a0 = u32[1, 2] constant({{10, 15}})
  a1 = u32[1, 2] add(id2, a0)
  a2 = f32[1, 2] convert(a1)
  allgather = (u32[2, 2], f32[2,2]) all-gather(a1, a2), dimensions={0}
  gte0 = u32[2,2] get-tuple-element(allgather), index=0
  gte1 = f32[2,2] get-tuple-element(allgather), index=1
  out0 = u32[4] reshape(gte0)
  out1 = f32[4] reshape(gte1)
  ROOT out = (u32[4], f32[4]) tuple(out0, out1)
}
""", 2, expected=each(2, arr("u32", [10, 15, 11, 16]), arr("f32", [10, 15, 11, 16]))),
    # The result shape of `res` is left out.
    _async("AsyncCollectiveBroadcast", """HloModule test
ENTRY test_computation {
  replica = u32[] replica-id()
  ten = u32[] constant(10)
  sum = u32[] add(replica, ten)
  p = u32[2] broadcast(sum), dimensions={}
  bcast = u32[2] collective-broadcast(p), replica_groups={{1, 0}}
  ROOT res = copy(bcast)
}
""", 2, expected=each(2, arr("u32", [11, 11]))),
    _async("AsyncCollectivePermute", """HloModule test
ENTRY test_computation {
  replica = u32[] replica-id()
  ten = u32[] constant(10)
  sum = u32[] add(replica, ten)
  p = u32[2] broadcast(sum), dimensions={}
  permute = u32[2] collective-permute(p), source_target_pairs={{1,0}, {0,1}}
  ROOT copy = u32[2] copy(permute)
}
""", 2, expected=per_device(arr("u32", [11, 11]), arr("u32", [10, 10]))),
    _async("CombinedCollectivePermute", """HloModule test
ENTRY test_computation {
  replica = u32[] replica-id()
  ten = u32[] constant(10)
  sum = u32[] add(replica, ten)
  replica.1 = u32[2] broadcast(replica), dimensions={}
  sum.1 = u32[2] broadcast(sum), dimensions={}
  permute = (u32[2], u32[2]) collective-permute(replica.1, sum.1), source_target_pairs={{1,0}, {0,1}}
  gte0 = get-tuple-element(permute), index=0
  gte1 = get-tuple-element(permute), index=1
  ROOT concat = u32[4] concatenate(gte0, gte1), dimensions={0}
}
""", 2, expected=per_device(arr("u32", [1, 1, 11, 11]), arr("u32", [0, 0, 10, 10]))),
    _async("CollectivePermuteCombiner", """HloModule test
ENTRY test_computation {
  replica = u32[] replica-id()
  ten = u32[] constant(10)
  sum = u32[] add(replica, ten)
  replica.1 = u32[2] broadcast(replica), dimensions={}
  sum.1 = u32[2] broadcast(sum), dimensions={}
  replica.2 = u32[2] add(replica.1, replica.1)
  permute.0 = u32[2] collective-permute(replica.1), source_target_pairs={{0,1}, {1, 2}, {2, 3}, {3, 0}}
  permute.1 = u32[2] collective-permute(replica.2), source_target_pairs={{0,1}, {1, 2}, {2, 3}, {3, 0}}
  permute.2 = u32[2] collective-permute(sum.1), source_target_pairs={{0,1}, {1, 2}, {2, 3}, {3, 0}}
  ROOT concat = u32[6] concatenate(permute.0, permute.1, permute.2), dimensions={0}
}
""", 4, expected=per_device(arr("u32", [3, 3, 6, 6, 13, 13]), arr("u32", [0, 0, 0, 0, 10, 10]),
                            arr("u32", [1, 1, 2, 2, 11, 11]), arr("u32", [2, 2, 4, 4, 12, 12]))),
    _async("AsyncReduceScatter", """HloModule test
add {
  lhs = u32[] parameter(0)
  rhs = u32[] parameter(1)
  ROOT add = u32[] add(lhs, rhs)
}

ENTRY main {
  c0 = u32[8] constant({1, 2, 3, 4, 5, 6, 7, 8})
  c1 = u32[8] constant({10, 11, 12, 13, 14, 15, 16, 17})
  zero = u32[] constant(0)
  id = u32[] replica-id()
  p = pred[] compare(id, zero), direction=EQ
  pb = pred[8] broadcast(p), dimensions={}
  // data = c0 for replica 0 and c1 for replica 1
  data = u32[8] select(pb, c0, c1)
  ROOT ars = u32[4] reduce-scatter(data), replica_groups={},
                    dimensions={0}, to_apply=add
}
""", 2, expected=per_device(arr("u32", [11, 13, 15, 17]), arr("u32", [19, 21, 23, 25]))),
    _async("AsyncAllToAllWithSplitDim", """HloModule test

ENTRY test_computation {
  id = u32[] replica-id()
  id2 = u32[2] broadcast(id), dimensions={}
  a0 = u32[2] constant({10, 15})
  a1 = u32[2] add(id2, a0)
  ROOT a2a = u32[2] all-to-all(u32[2] a1), dimensions={0}
}
""", 2, expected=per_device(arr("u32", [10, 11]), arr("u32", [15, 16]))),
    _e2e("AsyncAllToAllMemCpyWithSplitDim", _A2A_SPLIT_2X2.replace("REPLICA_GROUPS", ""), 2,
         expected=per_device(arr("u32", [10, 15, 11, 16]), arr("u32", [20, 25, 21, 26]))),
    _async("AsyncAllToAllWithoutSplitDim", _A2A_NO_SPLIT, 2,
           expected=per_device(arr("u32", [10, 15, 11, 16]), arr("u32", [40, 60, 44, 64]))),
    _async("AsyncAllToAllMemCpyWithoutSplitDim", _A2A_NO_SPLIT, 2,
           expected=per_device(arr("u32", [10, 15, 11, 16]), arr("u32", [40, 60, 44, 64]))),
    # 2^31 bytes per buffer: every device's input and output twice over does not fit a CI
    # machine (tagged huge; the runner runs it only when asked). XLA checks 2 elements.
    _async("AsyncAllToAllNumberOfElementsLargerThanInt32Max", """HloModule test
ENTRY test_computation {
  id = u32[] replica-id()
  id_u8 = u8[] convert(id)
  a0 = u8[2,32768,32768] broadcast(id_u8), dimensions={}
  ROOT a2a = u8[2,32768,32768] all-to-all(u8[2,32768,32768] a0),
    replica_groups={{0,1}}, dimensions={0}
}
""", 2, tags=("huge",), expected=each(2, made(
        "u8", (2, 32768, 32768),
        lambda: np.repeat(np.arange(2, dtype=np.uint8), 32768 * 32768).reshape(2, 32768, 32768)))),
    _async("AsyncRaggedAllToAll_2GPUs_BF16", """HloModule test
ENTRY entry {
  input = bf16[2] constant({4., 8.})
  output = bf16[2] constant({0., 0.})
  input_offsets = s64[2] constant({0, 1})
  send_sizes = s64[2] constant({1, 1})
  c0 = s64[2] constant({0, 0})
  replica_id = u32[] replica-id()
  replica_id_s64 = s64[] convert(replica_id)
  broadcast_replica_id = s64[2] broadcast(replica_id_s64), dimensions={}
  output_offsets = s64[2] add(broadcast_replica_id, c0)
  recv_sizes = s64[2] constant({1, 1})
  ROOT ragged-all-to-all = bf16[2] ragged-all-to-all(input, output,
    input_offsets, send_sizes, output_offsets, recv_sizes),
    replica_groups={{0,1}}
}
""", 2, expected=per_device(arr("bf16", [4, 4]), arr("bf16", [8, 8]))),
    _case("AsyncMemcpyCollectiveOps", "AsyncAllToAllMultipleReplicaGroups", """HloModule test

ENTRY test_computation {
  id = u32[] replica-id()
  id2 = u32[2] broadcast(id), dimensions={}
  a0 = u32[2] constant({10, 20})
  a1 = u32[2] add(id2, a0)
  ROOT a2a = u32[2] all-to-all(u32[2] a1), dimensions={0}, replica_groups={{0,3},{1,2}}
}
""", 4, expected=per_device(arr("u32", [10, 13]), arr("u32", [11, 12]), arr("u32", [21, 22]),
                            arr("u32", [20, 23]))),
    _case("AsyncMemcpyCollectiveOps", "AsyncAllToAllDegenerateWithSplitDim",
          _a2a_degenerate(True), 2,
          expected=per_device(arr("u32", [10, 20]), arr("u32", [11, 21]))),
    _case("AsyncMemcpyCollectiveOps", "AsyncAllToAllDegenerateWithoutSplitDim",
          _a2a_degenerate(False), 2,
          expected=per_device(arr("u32", [10, 20]), arr("u32", [11, 21]))),
    _case("MemcpyCollectiveOps", "AllToAll8Gpus", """HloModule test
ENTRY test_computation {
  id = u32[] replica-id()
  ten = u32[] constant(10)
  id_times_ten = u32[] multiply(id, ten)
  broadcast = u32[16] broadcast(id_times_ten), dimensions={}
  iota = u32[16] iota(), iota_dimension=0
  added = u32[16] add(broadcast, iota)
  ROOT all2all = u32[16] all-to-all(added), dimensions={0}
}
""", 8, expected=per_device(*[arr("u32", _all_to_all_8(d)) for d in range(8)])),
    _async("MatmulReplicated", _MATMUL, 4,
           inputs=each(4, made("f32", (16, 32), lambda: _uniform(190, (16, 32), -1, 1)),
                       made("f32", (16, 32), lambda: _uniform(191, (16, 32), -1, 1))),
           expected=per_device(*[made("f32", (16, 16), lambda r=r: _matmul_expected(r))
                                 for r in range(4)]),
           tolerance=(5e-3, 5e-3)),
    # The loop's result shapes of %count in %cond are left out.
    _e2e("WhileLoopReduceScatterCodeMotion", _WHILE_RS, 2,
         expected=per_device(arr("u32", [74]), arr("u32", [110]))),
    _e2e("NoAllToAllDecomposition",
         _A2A_SPLIT_2X2.replace("REPLICA_GROUPS", "replica_groups={{0,1}}, "), 2,
         expected=per_device(arr("u32", [10, 15, 11, 16]), arr("u32", [20, 25, 21, 26]))),
    # XLA checks only that the collectives stay synchronous; the values are the ops'.
    _e2e("NoAsyncCollectives", """HloModule test
apply_op {
  x = u32[] parameter(0)
  y = u32[] parameter(1)
  ROOT apply_op = u32[] add(x, y)
}

ENTRY test_computation {
  id = u32[] replica-id()
  id2 = u32[2, 2] broadcast(id), dimensions={}
  a0 = u32[2, 2] constant({{10, 15}, {20, 25}})
  a1 = u32[2, 2] add(id2, a0)
  all2all = u32[2, 2] all-to-all(a1), replica_groups={{0,1}}, dimensions={0}
  ROOT ag = u32[2, 2] all-reduce(all2all), replica_groups={{0,1}}, to_apply=apply_op
}
""", 2, expected=each(2, arr("u32", [[30, 40], [32, 42]]))),
]


# ---- windowed einsum, already partitioned (4 partitions): numpy references --------------------

def _bf16():
    import ml_dtypes
    return ml_dtypes.bfloat16


def _all_to_all(blocks: list[np.ndarray], me: int, dim: int) -> np.ndarray:
    """Array-form all-to-all over all devices: block `me` of every device's operand along
    `dim`, concatenated in device order (docs/reference/collective-semantics.md C.13)."""
    n = len(blocks)
    return np.concatenate([np.split(x, n, axis=dim)[me] for x in blocks], axis=dim)


def _windowed(test, module, params, reference, tolerance=(1e-2, 1e-2)):
    """`params`: per parameter (type, dims); every partition gets inputs of its own (seeded by
    test, parameter and device); `reference(inputs_of_all, me)` gives partition me's result."""
    def value(p, d):
        return _small_ints(_seed(test, p, d), params[p][1])

    inputs = per_device(*[tuple(made(t, dims, lambda p=p, d=d: value(p, d))
                                for p, (t, dims) in enumerate(params)) for d in range(4)])

    def expected(me):
        every = [[value(p, d) for p in range(len(params))] for d in range(4)]
        return np.asarray(reference(every, me)).astype(_bf16())

    expected_dims = reference(None, None)  # called without inputs, a reference says its dims
    return _case("CollectiveOpsTestE2EWindowedNonWindowed", test, module, 4, partitions=4,
                 inputs=inputs, tolerance=tolerance,
                 expected=per_device(*[made("bf16", expected_dims,
                                            lambda me=me: expected(me)) for me in range(4)]))


def _ref_a2a_decompose(every, me):
    if every is None:
        return (1, 4, 64, 64)
    a = _all_to_all([dev[1] for dev in every], me, 1)           # [1,4,64,128]
    return np.einsum("bjmk,bkn->bjmn", a, every[me][0])


def _ref_a2a_transpose_decompose(every, me):
    if every is None:
        return (1, 4, 32, 128)
    a = _all_to_all([dev[1] for dev in every], me, 3)           # [1,1,64,4,1,32]
    t15 = a.transpose(0, 3, 1, 2, 4, 5).reshape(4, 64, 1, 32)
    t16 = t15.transpose(2, 0, 3, 1)                              # [1,4,32,64]
    return np.einsum("bjmk,bkn->bjmn", t16, every[me][0])


def _ref_gemm_a2a(every, me):
    if every is None:
        return (1, 4, 32, 64)
    dots = [np.einsum("bjmk,bnk->bjmn", dev[1], dev[0]).astype(_bf16()) for dev in every]
    return _all_to_all(dots, me, 1)


def _ref_gemm_a2a_transpose(every, me):
    if every is None:
        return (1, 4, 1, 1, 32, 64)
    outs = []
    for dev in every:
        dot = np.einsum("bjmk,bkn->bjmn", dev[0], dev[1]).astype(_bf16())   # [1,4,32,64]
        outs.append(dot.transpose(1, 0, 2, 3).reshape(1, 4, 1, 1, 32, 64))
    return _all_to_all(outs, me, 1)


CASES += [
    _windowed("WindowedEinsumE2EAllToAllDecompose", """HloModule pjit__unnamed_wrapped_function_, entry_computation_layout={(bf16[1,128,64]{2,1,0}, bf16[1,4,64,128]{3,2,1,0})->bf16[1,4,64,64]{3,2,1,0}}, num_partitions=4

ENTRY main.9_spmd {
  param0 = bf16[1,128,64]{2,1,0} parameter(0)
  param1 = bf16[1,4,64,128]{3,2,1,0} parameter(1)
  all-to-all = bf16[1,4,64,128]{3,2,1,0} all-to-all(param1), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={1}
  ROOT dot.12 = bf16[1,4,64,64]{3,2,1,0} dot(all-to-all, param0), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
""", [("bf16", (1, 128, 64)), ("bf16", (1, 4, 64, 128))], _ref_a2a_decompose),
    _windowed("WindowedEinsumE2EAllToAllTransposeDecompose", """HloModule pjit__unnamed_wrapped_function_, entry_computation_layout={(bf16[1,64,128]{2,1,0}, bf16[1,1,64,4,1,32]{5,4,3,2,1,0})->bf16[1,4,32,128]{3,2,1,0}}, num_partitions=4
ENTRY main.9_spmd {
  param.9 = bf16[1,64,128]{2,1,0} parameter(0)
  param.10 = bf16[1,1,64,4,1,32]{5,4,3,2,1,0} parameter(1)
  all-to-all = bf16[1,1,64,4,1,32]{5,4,3,2,1,0} all-to-all(param.10), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={3}
  transpose.15 = bf16[1,4,1,64,1,32]{5,4,1,3,2,0} transpose(all-to-all), dimensions={0,3,1,2,4,5}
  reshape.2170 = bf16[1,4,64,1,32]{4,3,2,1,0} reshape(transpose.15)
  reshape.2173 = bf16[4,64,1,32]{3,2,1,0} reshape(reshape.2170)
  transpose.16 = bf16[1,4,32,64]{2,0,3,1} transpose(reshape.2173), dimensions={2,0,3,1}
  copy.53 = bf16[1,4,32,64]{3,2,1,0} copy(transpose.16)
  ROOT dot.12 = bf16[1,4,32,128]{3,2,1,0} dot(copy.53, param.9), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
""", [("bf16", (1, 64, 128)), ("bf16", (1, 1, 64, 4, 1, 32))], _ref_a2a_transpose_decompose),
    _windowed("WindowedEinsumE2EGemmAllToAllDecompose", """HloModule pjit__unnamed_wrapped_function_, entry_computation_layout={(bf16[1,64,128]{2,1,0}, bf16[1,4,32,128]{3,2,1,0})->bf16[1,4,32,64]{3,2,1,0}}, num_partitions=4

ENTRY main.9_spmd {
  param.9 = bf16[1,64,128]{2,1,0} parameter(0)
  param.10 = bf16[1,4,32,128]{3,2,1,0} parameter(1)
  dot.12 = bf16[1,4,32,64]{3,2,1,0} dot(param.10, param.9), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  ROOT all-to-all = bf16[1,4,32,64]{3,2,1,0} all-to-all(dot.12), channel_id=4, replica_groups={{0,1,2,3}}, dimensions={1}
}
""", [("bf16", (1, 64, 128)), ("bf16", (1, 4, 32, 128))], _ref_gemm_a2a),
    _windowed("WindowedEinsumE2EGemmAllToAllTransposeDecompose", """HloModule pjit__unnamed_wrapped_function_, entry_computation_layout={(bf16[1,4,32,128]{3,2,1,0}, bf16[1,128,64]{2,1,0})->bf16[1,4,1,1,32,64]{5,4,3,2,1,0}}, num_partitions=4

ENTRY main.9_spmd {
  param.9 = bf16[1,4,32,128]{3,2,1,0} parameter(0)
  param.10 = bf16[1,128,64]{2,1,0} parameter(1)
  dot.13 = bf16[1,4,32,64]{3,2,1,0} dot(param.9, param.10), lhs_batch_dims={0}, lhs_contracting_dims={3}, rhs_batch_dims={0}, rhs_contracting_dims={1}
  copy.55 = bf16[1,4,32,64]{3,2,1,0} copy(dot.13)
  transpose.17 = bf16[4,1,32,64]{3,2,0,1} transpose(copy.55), dimensions={1,0,2,3}
  copy.56 = bf16[4,1,32,64]{3,2,1,0} copy(transpose.17)
  reshape.2216 = bf16[1,4,1,32,64]{4,3,2,1,0} reshape(copy.56)
  reshape.2219 = bf16[1,4,1,1,32,64]{5,4,3,2,1,0} reshape(reshape.2216)
  ROOT all-to-all.1 = bf16[1,4,1,1,32,64]{5,4,3,2,1,0} all-to-all(reshape.2219), channel_id=7, replica_groups={{0,1,2,3}}, dimensions={1}
}
""", [("bf16", (1, 4, 32, 128)), ("bf16", (1, 128, 64))], _ref_gemm_a2a_transpose),
]


# ---- collective pipelining (2 partitions), quantizers, duplicate channels, p2p ----------------

def _pipelined(test, module, params, reference, **kw):
    """CollectiveOpsTestE2EPipelinedNonPipelined: XLA compares the program with and without its
    collective pipeliner on random inputs; here each partition gets inputs of its own."""
    def value(p, d):
        t, dims = params[p]
        return _small_ints(_seed(test, p, d), dims, -4, 5)

    inputs = per_device(*[tuple(made(t, dims, lambda p=p, d=d: value(p, d))
                                for p, (t, dims) in enumerate(params)) for d in range(2)])
    every = lambda: [[value(p, d) for p in range(len(params))] for d in range(2)]  # noqa: E731
    return _case("CollectiveOpsTestE2EPipelinedNonPipelined", test, module, 2, partitions=2,
                 inputs=inputs, tolerance=(1e-5, 1e-5),
                 expected=per_device(*[made("bf16", (5, 8, 16), lambda me=me: np.asarray(
                     reference(every(), me)).astype(_bf16())) for me in range(2)]), **kw)


_PIPELINED_FORWARD = """HloModule module, entry_computation_layout={(bf16[5,8,16])->bf16[5,8,16]}, allow_spmd_sharding_propagation_to_parameters={false,false}, num_partitions=2

add {
  lhs = bf16[] parameter(0)
  rhs = bf16[] parameter(1)
  ROOT add = bf16[] add(lhs, rhs)
}

while_cond {
  param = (s32[], bf16[5,8,16], bf16[5,8,16]) parameter(0)
  loop_index = s32[] get-tuple-element(param), index=0
  c5 = s32[] constant(5)
  ROOT cmp = pred[] compare(loop_index, c5), direction=LT
}

while_body {
  param = (s32[], bf16[5,8,16], bf16[5,8,16]) parameter(0)
  loop_index = s32[] get-tuple-element(param), index=0
  partial_output = bf16[5,8,16] get-tuple-element(param), index=1
  slice_input = bf16[5,8,16] get-tuple-element(param), index=2
  c0 = s32[] constant(0)
  c1 = s32[] constant(1)
  next_loop_index = s32[] add(loop_index, c1)
  dynamic_slice = bf16[1,8,16] dynamic-slice(slice_input, loop_index, c0, c0), dynamic_slice_sizes={1,8,16}
  all_reduce = bf16[1,8,16] all-reduce(dynamic_slice), replica_groups={}, to_apply=add, channel_id=1
  updated_partial_output = bf16[5,8,16] dynamic-update-slice(partial_output, all_reduce, loop_index, c0, c0)
  ROOT tuple = (s32[], bf16[5,8,16], bf16[5,8,16]) tuple(next_loop_index, updated_partial_output, slice_input)
}

ENTRY entry {
  c0 = s32[] constant(0)
  p0 = bf16[5,8,16] parameter(0)
  tuple = (s32[], bf16[5,8,16], bf16[5,8,16]) tuple(c0, p0, p0)
  while = (s32[], bf16[5,8,16], bf16[5,8,16]) while(tuple), condition=while_cond, body=while_body
  ROOT gte = bf16[5,8,16] get-tuple-element(while), index=1
}
"""

_PIPELINED_ELEMENTWISE = """HloModule module, entry_computation_layout={(bf16[5,8,16], bf16[])->bf16[5,8,16]}, allow_spmd_sharding_propagation_to_parameters={false,false}, num_partitions=2

add {
  lhs = bf16[] parameter(0)
  rhs = bf16[] parameter(1)
  ROOT add = bf16[] add(lhs, rhs)
}

while_cond {
  param = (s32[], bf16[5,8,16], bf16[5,8,16], bf16[]) parameter(0)
  loop_index = s32[] get-tuple-element(param), index=0
  c5 = s32[] constant(5)
  ROOT cmp = pred[] compare(loop_index, c5), direction=LT
}

while_body {
  param = (s32[], bf16[5,8,16], bf16[5,8,16], bf16[]) parameter(0)
  loop_index = s32[] get-tuple-element(param), index=0
  partial_output = bf16[5,8,16] get-tuple-element(param), index=1
  slice_input = bf16[5,8,16] get-tuple-element(param), index=2
  scale = bf16[] get-tuple-element(param), index=3
  scale_bcast = bf16[1,8,16] broadcast(scale), dimensions={}
  c0 = s32[] constant(0)
  c1 = s32[] constant(1)
  next_loop_index = s32[] add(loop_index, c1)
  dynamic_slice = bf16[1,8,16] dynamic-slice(slice_input, loop_index, c0, c0), dynamic_slice_sizes={1,8,16}
  all_reduce = bf16[1,8,16] all-reduce(dynamic_slice), replica_groups={}, to_apply=add, channel_id=1
  all_reduce_scaled = bf16[1,8,16] multiply(all_reduce, scale_bcast)
  updated_partial_output = bf16[5,8,16] dynamic-update-slice(partial_output, all_reduce_scaled, loop_index, c0, c0)
  ROOT tuple = (s32[], bf16[5,8,16], bf16[5,8,16], bf16[]) tuple(next_loop_index, updated_partial_output, slice_input, scale)
}

ENTRY entry {
  c0 = s32[] constant(0)
  p0 = bf16[5,8,16] parameter(0)
  p1 = bf16[] parameter(1)
  tuple = (s32[], bf16[5,8,16], bf16[5,8,16], bf16[]) tuple(c0, p0, p0, p1)
  while = (s32[], bf16[5,8,16], bf16[5,8,16], bf16[]) while(tuple), condition=while_cond, body=while_body
  ROOT gte = bf16[5,8,16] get-tuple-element(while), index=1
}
"""


def _pipelined_backward(first: int) -> str:
    """CollectivePipelinerBackward (loop from 0) and ...BackwardStartFromOne (from 1)."""
    offset = ("  loop_index_minus_one = s32[] subtract(loop_index, c1)\n" if first else "")
    row = "loop_index_minus_one" if first else "loop_index"
    limit = 5 + first
    return f"""HloModule module, entry_computation_layout={{(bf16[5,4,16], bf16[5,1,2,16])->bf16[5,4,16]}}, allow_spmd_sharding_propagation_to_parameters={{false,false}}, num_partitions=2

while_cond {{
  param = (s32[], bf16[5,4,16], bf16[5,1,2,16]) parameter(0)
  loop_index = s32[] get-tuple-element(param), index=0
  c{limit} = s32[] constant({limit})
  ROOT cmp = pred[] compare(loop_index, c{limit}), direction=LT
}}

while_body {{
  param = (s32[], bf16[5,4,16], bf16[5,1,2,16]) parameter(0)
  loop_index = s32[] get-tuple-element(param), index=0
  partial_output = bf16[5,4,16] get-tuple-element(param), index=1
  slice_input = bf16[5,1,2,16] get-tuple-element(param), index=2
  c0 = s32[] constant(0)
  c1 = s32[] constant(1)
  next_loop_index = s32[] add(loop_index, c1)
{offset}  dynamic_slice = bf16[1,1,2,16] dynamic-slice(slice_input, {row}, c0, c0, c0), dynamic_slice_sizes={{1,1,2,16}}
  dynamic_slice_reshape = bf16[1,2,16] reshape(dynamic_slice)
  all_gather = bf16[1,4,16] all-gather(dynamic_slice_reshape), dimensions={{1}}, replica_groups={{}}
  updated_partial_output = bf16[5,4,16] dynamic-update-slice(partial_output, all_gather, {row}, c0, c0)
  ROOT tuple = (s32[], bf16[5,4,16], bf16[5,1,2,16]) tuple(next_loop_index, updated_partial_output, slice_input)
}}

ENTRY entry {{
  c{first} = s32[] constant({first})
  p0 = bf16[5,4,16] parameter(0)
  p1 = bf16[5,1,2,16] parameter(1)
  tuple = (s32[], bf16[5,4,16], bf16[5,1,2,16]) tuple(c{first}, p0, p1)
  while = (s32[], bf16[5,4,16], bf16[5,1,2,16]) while(tuple), condition=while_cond, body=while_body
  ROOT gte = bf16[5,4,16] get-tuple-element(while), index=1
}}
"""


# The all-gather has no channel_id, so it gathers over replicas: with 1 replica and 2
# partitions its groups have one member, and bf16[1,2,16] cannot become bf16[1,4,16]
# (docs/reference/collective-semantics.md C.11). XLA's verifier skips that check for groups of 1.
_GATHER_OF_ONE = ("the all-gather's groups have 1 member(s) here (1 replica, no channel_id), "
                  "so the result cannot grow 2x")


def _pipelined_refused(test, first):
    return _case("CollectiveOpsTestE2EPipelinedNonPipelined", test, _pipelined_backward(first),
                 2, partitions=2, refused="all-gather gathers over groups of 1",
                 note=_GATHER_OF_ONE,
                 inputs=each(2, full("bf16", (5, 4, 16), 0), full("bf16", (5, 1, 2, 16), 1)))


_DUPLICATE_CHANNEL = """HloModule pjit__unnamed_wrapped_function_, entry_computation_layout={(f32[4,32,128]{2,1,0})->(f32[4,32,128]{2,1,0}, f32[4,32,128]{2,1,0})}, num_partitions=4
ENTRY entry {
  param = f32[4,32,128]{2,1,0} parameter(0)
  all-to-all = f32[4,32,128]{2,1,0} all-to-all(param), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={1}
  all-to-all.1 = f32[4,32,128]{2,1,0} all-to-all(param), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT tuple = (f32[4,32,128]{2,1,0}, f32[4,32,128]{2,1,0}) tuple(all-to-all, all-to-all.1)
}
"""


def _duplicate_input(d):
    return (np.arange(4 * 32 * 128, dtype=np.float32).reshape(4, 32, 128) + 100000 * d)


_P2P_LARGE = """HloModule MemcpyP2pLargeMessage, entry_computation_layout={(bf16[256,16000]{1,0})->bf16[256,16000]{1,0}}, num_partitions=4

ENTRY main {
  Arg_0.5 = bf16[256,16000]{1,0} parameter(0)
  collective-permute.0 = bf16[256,16000]{1,0} collective-permute(Arg_0.5), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  collective-permute.1 = bf16[256,16000]{1,0} collective-permute(collective-permute.0), channel_id=2, source_target_pairs={{0,3},{1,0},{2,1},{3,2}}
  collective-permute.2 = bf16[256,16000]{1,0} collective-permute(collective-permute.1), channel_id=3, source_target_pairs={{0,3},{1,0},{2,1},{3,2}}
  collective-permute.3 = bf16[256,16000]{1,0} collective-permute(collective-permute.2), channel_id=4, source_target_pairs={{0,3},{1,0},{2,1},{3,2}}
  collective-permute.4 = bf16[256,16000]{1,0} collective-permute(collective-permute.3), channel_id=5, source_target_pairs={{0,3},{1,0},{2,1},{3,2}}
  collective-permute.5 = bf16[256,16000]{1,0} collective-permute(collective-permute.4), channel_id=6, source_target_pairs={{0,3},{1,0},{2,1},{3,2}}
  collective-permute.6 = bf16[256,16000]{1,0} collective-permute(collective-permute.5), channel_id=7, source_target_pairs={{0,3},{1,0},{2,1},{3,2}}
  collective-permute.7 = bf16[256,16000]{1,0} collective-permute(collective-permute.6), channel_id=8, source_target_pairs={{0,3},{1,0},{2,1},{3,2}}

  constant.0 = bf16[] constant(2)
  broadcast.0 = bf16[256,16000]{1,0} broadcast(constant.0), dimensions={}
  collective-permute.8 = bf16[256,16000]{1,0} collective-permute(broadcast.0), channel_id=6, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  collective-permute.9 = bf16[256,16000]{1,0} collective-permute(collective-permute.8), channel_id=9, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  collective-permute.10 = bf16[256,16000]{1,0} collective-permute(collective-permute.9), channel_id=10, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  collective-permute.11 = bf16[256,16000]{1,0} collective-permute(collective-permute.10), channel_id=11, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}

  ROOT multiply.10 = bf16[256,16000]{1,0} multiply(collective-permute.7, collective-permute.11)
} // main
"""


def _p2p_input(d):
    # Small integers, a different pattern on every device: exact in bf16, and doubled exactly.
    return ((np.arange(256 * 16000).reshape(256, 16000) * (d + 3)) % 61 - 30).astype(np.float64)


CASES += [
    _pipelined("CollectivePipelinerForward", _PIPELINED_FORWARD, [("bf16", (5, 8, 16))],
               lambda every, me: every[0][0] + every[1][0]),
    _pipelined("CollectivePipelinerForwardElementwise", _PIPELINED_ELEMENTWISE,
               [("bf16", (5, 8, 16)), ("bf16", ())],
               lambda every, me: (every[0][0] + every[1][0]) * every[me][1]),
    _pipelined_refused("CollectivePipelinerBackward", 0),
    _pipelined_refused("CollectivePipelinerBackwardStartFromOne", 1),
    _e2e("AllToAllQuantizeCollectiveQuantizer", """HloModule pjit__unnamed_wrapped_function_, entry_computation_layout={()->bf16[2]}, num_partitions=2
ENTRY entry {
  input = f32[2] constant({2., 4.})
  scale = f32[] constant(2.)
  scale_bcast = f32[2] broadcast(scale), dimensions={}
  input_scaled = f32[2] multiply(input, scale_bcast)
  all-to-all = f32[2] all-to-all(input_scaled), channel_id=1, replica_groups={{0,1}}, dimensions={0}
  ROOT convert = bf16[2] convert(all-to-all)
}
""", 2, partitions=2, expected=per_device(arr("bf16", [4, 4]), arr("bf16", [8, 8]))),
    _e2e("DequantizeAllToAllCollectiveQuantizer", """HloModule pjit__unnamed_wrapped_function_, entry_computation_layout={()->f32[2]}, num_partitions=2
ENTRY entry {
  input = bf16[2] constant({2., 4.})
  input_f32 = f32[2] convert(input)
  scale = f32[] constant(2.)
  scale_bcast = f32[2] broadcast(scale), dimensions={}
  input_scaled = f32[2] multiply(input_f32, scale_bcast)
  ROOT all-to-all = f32[2] all-to-all(input_scaled), channel_id=1, replica_groups={{0,1}}, dimensions={0}
}
""", 2, partitions=2, expected=per_device(arr("f32", [4, 4]), arr("f32", [8, 8]))),
    # XLA checks only that the quantizer rewrote the all-gather to bf16; the values are the
    # program's: gather within {0,1} / {2,3}, divide by the group's largest scale, clamp.
    _e2e("AllGatherQuantizeCollectiveQuantizer", """HloModule module, entry_computation_layout={(f32[2], f32[1])->bf16[4]}, num_partitions=4
max {
    a = f32[] parameter(0)
    b = f32[] parameter(1)
    ROOT max = f32[] maximum(a, b)
  }

ENTRY entry {
  param = f32[2] parameter(0)
  all-gather = f32[4] all-gather(param), dimensions={0}, replica_groups={{0,1},{2,3}}, channel_id=1, use_global_device_ids=true
  scale = f32[1] parameter(1), sharding={devices=[4]<=[4]}
  scalar_scale = f32[] reshape(scale)
  all_reduced_scale = f32[] all-reduce(scalar_scale), to_apply=max, replica_groups={{0,1},{2,3}}, channel_id=2, use_global_device_ids=true
  scale_bcast = f32[4] broadcast(all_reduced_scale), dimensions={}
  divide = f32[4] divide(all-gather, scale_bcast)
  clamp_lower = f32[] constant(-448.0)
  clamp_lower_bcast = f32[4] broadcast(clamp_lower), dimensions={}
  clamp_upper = f32[] constant(448.0)
  clamp_upper_bcast = f32[4] broadcast(clamp_upper), dimensions={}
  clamp = f32[4] clamp(clamp_lower_bcast, divide, clamp_upper_bcast)
  ROOT convert = bf16[4] convert(clamp)
}
""", 4, partitions=4,
         inputs=per_device((arr("f32", [4, -8]), arr("f32", [1])),
                           (arr("f32", [8, -16]), arr("f32", [2])),
                           (arr("f32", [12, -24]), arr("f32", [3])),
                           (arr("f32", [4000, -8]), arr("f32", [4]))),
         expected=per_device(*([arr("bf16", [2, -4, 4, -8])] * 2
                               + [arr("bf16", [3, -6, 448, -2])] * 2))),
    # Two all-to-alls share channel_id=1 (XLA runs it with xla_ignore_channel_id); XLA checks
    # only that it compiles.
    _e2e("NoErrorOnDuplicateChannelId", _DUPLICATE_CHANNEL, 4, partitions=4,
         inputs=per_device(*[made("f32", (4, 32, 128), lambda d=d: _duplicate_input(d))
                             for d in range(4)]),
         expected=per_device(*[(made("f32", (4, 32, 128), lambda me=me: _all_to_all(
             [_duplicate_input(d) for d in range(4)], me, 1)),
             made("f32", (4, 32, 128), lambda me=me: _all_to_all(
                 [_duplicate_input(d) for d in range(4)], me, 0))) for me in range(4)])),
    # Arg goes one step forward, then seven back: device t ends with device t+2's argument;
    # the broadcast 2 goes round once. Two of the permutes share channel_id=6.
    _e2e("MemcpyP2pLargeMessage", _P2P_LARGE, 4, partitions=4,
         inputs=per_device(*[made("bf16", (256, 16000), lambda d=d: _p2p_input(d))
                             for d in range(4)]),
         expected=per_device(*[made("bf16", (256, 16000),
                                    lambda t=t: 2 * _p2p_input((t + 2) % 4)) for t in range(4)]),
         tolerance=(1e-5, 1e-5)),
]


# ---- AllReduceTest: larger all-reduces with inputs from a seed per replica -------------------

def _all_reduce_test(test, module, n, inputs, expected, tolerance=None):
    return _case("AllReduceTest", test, module, n, inputs=inputs, expected=expected,
                 tolerance=tolerance)


def _f32_sum_module(n_elems, groups, dtype="f32", op="add"):
    return f"""HloModule test

apply_op {{
  x = {dtype}[] parameter(0)
  y = {dtype}[] parameter(1)
  ROOT apply_op = {dtype}[] {op}(x, y)
}}

ENTRY test_computation {{
  param_0 = {dtype}[{n_elems}] parameter(0)
  ROOT all-reduce = {dtype}[{n_elems}] all-reduce(param_0), to_apply=apply_op, replica_groups={groups}
}}
"""


def _while_all_reduce(n_elems, iterations, groups):
    """An all-reduce in a loop; the counter's increment is an operand written inline."""
    return f"""HloModule test

apply_op {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT apply_op = f32[] add(x, y)
}}

while_condition {{
  limit = s32[] constant({iterations})
  params = (s32[], f32[{n_elems}]{{0}}) parameter(0)
  loop_counter = get-tuple-element(params), index=0
  ROOT result = pred[] compare(loop_counter, limit), direction=LT
}}

while_body {{
  params = (s32[], f32[{n_elems}]{{0}}) parameter(0)
  loop_counter = get-tuple-element(params), index=0
  tensor = get-tuple-element(params), index=1
  out0 = f32[{n_elems}] all-reduce(tensor), to_apply=apply_op,
    replica_groups={groups}
  new_loop_counter = s32[] add(loop_counter, s32[] constant(1))
  ROOT result = (s32[], f32[{n_elems}]{{0}}) tuple(new_loop_counter, out0)
}}

ENTRY test_computation {{
  param_0 = f32[{n_elems}] parameter(0)
  while_init = (s32[], f32[{n_elems}]{{0}}) tuple(s32[] constant(0), param_0)
  while_result = (s32[], f32[{n_elems}]{{0}})
    while(while_init), condition=while_condition, body=while_body
  ROOT result = get-tuple-element(while_result), index=1
}}
"""


def _floats(seed, count, dtype=np.float32):
    return _uniform(seed, (count,)).astype(dtype)


def _bools(seed, count):
    return _rng(seed).integers(0, 2, size=count).astype(bool)


def _bf16_floats(seed, count):
    return _uniform(seed, (count,)).astype(_bf16())


_N = 65536

CASES += [
    _all_reduce_test("AsyncAllReduce_F32_2GPUs", _f32_sum_module(_N, "{{0,1}}"), 2,
                     inputs=per_device(*[made("f32", (_N,), lambda s=s: _floats(s, _N))
                                         for s in range(2)]),
                     expected=each(2, made("f32", (_N,), lambda: _floats(0, _N) + _floats(1, _N)))),
    _all_reduce_test("AsyncAllReduceInsideWhile_F32_2GPUs", _while_all_reduce(32, 3, "{{0,1}}"), 2,
                     inputs=per_device(*[made("f32", (32,), lambda s=s: _floats(s, 32))
                                         for s in range(2)]),
                     expected=each(2, made("f32", (32,),
                                           lambda: (_floats(0, 32) + _floats(1, 32)) * 4))),
    _all_reduce_test("AsyncAllReduce_BF16_2GPUs", _f32_sum_module(_N, "{{0,1}}", "bf16"), 2,
                     inputs=per_device(*[made("bf16", (_N,), lambda s=s: _bf16_floats(s, _N))
                                         for s in range(2)]),
                     expected=each(2, made("bf16", (_N,), lambda: (
                         _bf16_floats(0, _N).astype(np.float32)
                         + _bf16_floats(1, _N).astype(np.float32)).astype(_bf16())))),
    _all_reduce_test("AsyncAllReduce_PRED_2GPUs", _f32_sum_module(_N, "{{0,1}}", "pred", "or"),
                     2, inputs=per_device(*[made("pred", (_N,), lambda s=s: _bools(s, _N))
                                            for s in range(2)]),
                     expected=each(2, made("pred", (_N,), lambda: _bools(0, _N) | _bools(1, _N)))),
    _all_reduce_test("AsyncAllReduce_8GPUs_AllReplicasOneGroup",
                     _f32_sum_module(_N, "{{0,1,2,3,4,5,6,7}}"), 8,
                     inputs=per_device(*[made("f32", (_N,), lambda s=s: _floats(s, _N))
                                         for s in range(8)]),
                     expected=each(8, made("f32", (_N,), lambda: np.sum(
                         [_floats(s, _N).astype(np.float64) for s in range(8)], axis=0))),
                     tolerance=(1e-4, 1e-4)),
    _all_reduce_test("AsyncAllReduce_8GPUs_2ReplicasPerGroup",
                     _while_all_reduce(_N, 3, "{{0,4},{1,5},{2,6},{3,7}}"), 8,
                     inputs=per_device(*[made("f32", (_N,), lambda s=s: _floats(s, _N))
                                         for s in range(8)]),
                     expected=per_device(*[made("f32", (_N,), lambda r=r: (
                         _floats(r % 4, _N) + _floats(r % 4 + 4, _N)) * 4) for r in range(8)])),
]


# ---- sub-byte all-gathers, and two modules on different device groups -------------------------

def _sub_byte(test, module, expected):
    return _e2e(test, module, 2, expected=each(2, arr("s4", expected)))


CASES += [
    # A computation without ENTRY (the last one is the entry) and without ROOT.
    _sub_byte("OptimizedSubByteAllGatherOnDim0OutputIsCorrect", """HloModule m, replica_count=2

e {
  a = s4[2,4]{1,0:E(4)} constant({{0,1,2,3},{4,5,5,4}})
  b = s4[4,4]{1,0:E(4)} all-gather(a), dimensions={0}
}
""", [[0, 1, 2, 3], [4, 5, 5, 4], [0, 1, 2, 3], [4, 5, 5, 4]]),
    _sub_byte("OptimizedSubByteAllGatherOnDim1OutputIsCorrect", """HloModule m, replica_count=2

e {
  a = s4[4,2]{1,0:E(4)} constant({{0,1},{2,3},{4,5},{5,4}})
  b = s4[4,4]{1,0:E(4)} all-gather(a), dimensions={1}
}
""", [[0, 1, 0, 1], [2, 3, 2, 3], [4, 5, 4, 5], [5, 4, 5, 4]]),
    # XLA runs both modules and checks only that they run; the sums are the ops'.
    _e2e("MultipleModuleDifferentDeviceGroupsShouldRun", _f32_sum_module(8, "{{0,1}}"), 2,
         name="MultipleModuleDifferentDeviceGroupsShouldRun/2replicas",
         inputs=per_device(*[made("f32", (8,), lambda s=s: _floats(s, 8)) for s in range(2)]),
         expected=each(2, made("f32", (8,), lambda: _floats(0, 8) + _floats(1, 8))),
         tolerance=(1e-6, 1e-6)),
    _e2e("MultipleModuleDifferentDeviceGroupsShouldRun", """HloModule test

apply_op {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT apply_op = f32[] add(x, y)
}

ENTRY test_computation {
  param_0 = f32[8] parameter(0)
  all-reduce.1 = f32[8] all-reduce(param_0), to_apply=apply_op, replica_groups={{0,1}, {2,3}}
  all-reduce.2 = f32[8] all-reduce(all-reduce.1), to_apply=apply_op, replica_groups={{0,1}, {2,3}}
  all-reduce.3 = f32[8] all-reduce(all-reduce.2), to_apply=apply_op, replica_groups={{0,1}, {2,3}}
  ROOT all-reduce.4 = f32[8] all-reduce(all-reduce.3), to_apply=apply_op, replica_groups={{0,1,2,3}}
}
""", 4, name="MultipleModuleDifferentDeviceGroupsShouldRun/4replicas",
         inputs=per_device(*[made("f32", (8,), lambda s=s: _floats(s, 8)) for s in range(4)]),
         expected=each(4, made("f32", (8,), lambda: 8 * np.sum(
             [_floats(s, 8).astype(np.float64) for s in range(4)], axis=0))),
         tolerance=(1e-5, 1e-5)),
]

SKIPPED = {
    "CollectiveOpsTestE2E.HostMemoryOffloadingWithDonation":
        "GPU: host memory offloading (layout memory space S(5)) and the buffer-assignment "
        "error it causes with a must-alias donation",
    **{f"CollectiveOpsTestE2EWindowedNonWindowed.{t}":
       "needs the SPMD partitioner: the module is written before partitioning (sharding "
       "annotations, custom-call Sharding), and the test compares XLA's windowed-einsum "
       "rewrite against its plain partitioning"
       for t in ("WindowedEinsumE2EAllgatherMultiConsumer", "WindowedEinsumE2EAllGatherF8",
                 "WindowedEinsumE2EAllGatherReshapeF8", "WindowedEinsumE2EAllGatherMultiConsumerF8",
                 "WindowedEinsumE2EReduceScatterF8", "WindowedEinsumE2EPartial")},
    "CollectiveOpsTestE2E.CollectivePipelinerF8":
        "GPU: checks that the FP8 GEMM rewrite (cuBLASLt, Hopper) survives collective "
        "pipelining; nothing is run",
    "CollectiveOpsTestE2E.MemcpyP2pWhileLoopCorrectness":
        "needs the SPMD partitioner: custom-calls SPMDFullToShardShape / SPMDShardToFullShape "
        "around a shard_map body",
    "CollectiveOpsTestE2E.AllgatherMemspaceWithNcclUserBuffer":
        "GPU: checks the NCCL user-buffer memory space of a compiled all-gather; nothing is run",
    "CollectiveOpsTestE2E.CollectiveConsumingConstantAndModuleShouldHaveCopies":
        "GPU: checks copies into the NCCL user-buffer memory space; nothing is run",
    "AllReduceTest.AsyncAllReduce_F8E4M3FN_TrainingStep_2GPUs":
        "GPU: FP8 NCCL reductions (Hopper); compares an f16 program with an f8 one",
    "AllReduceTest.AsyncAllReduce_F8E4M3FN_FailsOnPreHopper":
        "GPU: expects NCCL's error for FP8 reductions on GPUs before sm90",
}
