"""xla/backends/gpu/tests/collective_pipeline_parallelism_test.cc (fixture
CollectivePipelineParallelismTest), transcribed from revision 3656481.

Pipeline-parallel programs: 4 stages, each a linear layer that scales by 1, 2, 3 and 4, data
moving stage to stage by collective-permute or send/recv, microbatches read and written by
index. The last stage's output is the input scaled by 24 (576 with two circular repeats).
The test's parameter (XLA's pipeline-parallelism optimization level) changes the compiled
schedule, not the program, so each test is one case. Several programs leave result shapes
out (`i_ = add(i, c1)`, `output_ = call(...)`), which XLA's parser infers.
"""

from __future__ import annotations

import math

import numpy as np

from .records import Case, arr, full, made, per_device

SOURCE = "xla/backends/gpu/tests/collective_pipeline_parallelism_test.cc"
FIXTURE = "CollectivePipelineParallelismTest"

_COMMON = """
read_buffer_mb4 {
  buffer = f32[4,16] parameter(0)
  offset = u32[] parameter(1)
  index = u32[] parameter(2)
  c0 = u32[] constant(0)
  c4 = u32[] constant(4)
  index_ = u32[] add(index, offset)
  index__ = u32[] remainder(index_, c4)
  slice = f32[1,16] dynamic-slice(buffer, index__, c0),
      dynamic_slice_sizes={1,16}
  ROOT slice_ = f32[16] reshape(slice)
}

read_buffer_mb5 {
  buffer = f32[5,16] parameter(0)
  offset = u32[] parameter(1)
  index = u32[] parameter(2)
  c0 = u32[] constant(0)
  c5 = u32[] constant(5)
  index_ = u32[] add(index, offset)
  index__ = u32[] remainder(index_, c5)
  slice = f32[1,16] dynamic-slice(buffer, index__, c0),
      dynamic_slice_sizes={1,16}
  ROOT slice_ = f32[16] reshape(slice)
}

update_buffer_mb4 {
  buffer = f32[4,16] parameter(0)
  update = f32[16] parameter(1)
  offset = u32[] parameter(2)
  index = u32[] parameter(3)
  c0 = u32[] constant(0)
  c4 = u32[] constant(4)
  index_ = u32[] add(index, offset)
  index__ = u32[] remainder(index_, c4)
  update_ = f32[1,16] reshape(update)
  ROOT buffer_ = f32[4,16] dynamic-update-slice(buffer, update_, index__, c0)
}

update_buffer_mb5 {
  buffer = f32[5,16] parameter(0)
  update = f32[16] parameter(1)
  offset = u32[] parameter(2)
  index = u32[] parameter(3)
  c0 = u32[] constant(0)
  c5 = u32[] constant(5)
  index_ = u32[] add(index, offset)
  index__ = u32[] remainder(index_, c5)
  update_ = f32[1,16] reshape(update)
  ROOT buffer_ = f32[5,16] dynamic-update-slice(buffer, update_, index__, c0)
}

is_input_replica {
  replica_id = u32[] replica-id()
  c0 = u32[] constant(0)
  ROOT predicate = pred[] compare(replica_id, c0), direction=EQ
}

is_output_replica {
  replica_id = u32[] replica-id()
  c3 = u32[] constant(3)
  ROOT predicate = pred[] compare(replica_id, c3), direction=EQ
}

is_read_input_mb4 {
  is_input_replica = pred[] call(), to_apply=is_input_replica
  i = u32[] parameter(0)
  c4 = u32[] constant(4)
  is_input_iteration = pred[] compare(i, c4), direction=LT
  ROOT is_read_input = pred[] and(is_input_replica, is_input_iteration)
}

is_read_input_mb5 {
  is_input_replica = pred[] call(), to_apply=is_input_replica
  i = u32[] parameter(0)
  c5 = u32[] constant(5)
  is_input_iteration = pred[] compare(i, c5), direction=LT
  ROOT is_read_input = pred[] and(is_input_replica, is_input_iteration)
}
"""


def _with_common(more: str, name: str = "test") -> str:
    """The test's GetModuleStrWithCommonComputations."""
    return f"HloModule {name}\n{_COMMON}\n{more}"


def _fingerprint(m: int, n: int, scale: float = 1.0) -> np.ndarray:
    """LiteralUtil::CreateFingerprintMatixR2<float>(m, n, scale) as XLA writes it: each row's
    diagonal element set, the column loop leaving the last column's value (float arithmetic)."""
    f = np.float32
    row, col = f(math.log10(m) + 1), f(math.log10(n) + 1)
    out = np.zeros((m, n), np.float32)
    for i in range(min(m, n)):
        out[i, i] = f(scale) * (row * f(i) + col * f(n - 1))
    return out


def _weights(k: float) -> np.ndarray:
    return np.diag(np.full(16, k, np.float32))


def _pipeline(test, more, microbatches, factor, **kw) -> Case:
    """Stage r's weights scale by r + 1; replica 0 holds the input; replica 3's output is
    checked (the others hold partial results XLA does not state)."""
    dims = (microbatches, 16)
    inputs = per_device(*[(made("f32", (16, 16), lambda r=r: _weights(r + 1.0)),
                           made("f32", dims, lambda: _fingerprint(*dims)) if r == 0
                           else full("f32", dims, 0.0)) for r in range(4)])
    return Case(name=f"{FIXTURE}.{test}", source=SOURCE, test=f"{FIXTURE}.{test}",
                module=_with_common(more), n=4, replica_count=4, inputs=inputs,
                expected=per_device(None, None, None,
                                    made("f32", dims, lambda: _fingerprint(*dims, factor))),
                tolerance=(1e-5, 1e-5), **kw)


def _naive(mb: int, n_iter: int, circular: bool, update_offset: int, consts) -> str:
    """NaiveBFS* without a circular buffer: read input, permute, compute, write output."""
    constants = "\n".join(f"    c{c} = u32[] constant({c})" for c in consts)
    read = f"is_read_input = pred[] call(i), to_apply=is_read_input_mb{mb}" if circular else \
        "read_input = pred[] call(), to_apply=is_input_replica"
    pick = "is_read_input" if circular else "read_input"
    out_shape = f"f32[{mb},16] " if circular else ""
    return f"""  while_condition {{
    tuple = (f32[16,16], f32[{mb},16], f32[{mb},16], f32[16], u32[]) parameter(0)
    i = u32[] get-tuple-element(tuple), index=4
    n = u32[] constant({n_iter})
    ROOT predicate = pred[] compare(i, n), direction=LT
  }}

  while_body {{
    tuple = (f32[16,16], f32[{mb},16], f32[{mb},16], f32[16], u32[]) parameter(0)
    weights = f32[16,16] get-tuple-element(tuple), index=0
    input = f32[{mb},16] get-tuple-element(tuple), index=1
    output = f32[{mb},16] get-tuple-element(tuple), index=2
    prev_iteration_compute_res = f32[16] get-tuple-element(tuple), index=3
    i = u32[] get-tuple-element(tuple), index=4

{constants}

    // Read from buffers.
    input_slice = f32[16] call(input, c0, i), to_apply=read_buffer_mb{mb}

    // Shift data to the next stage in the pipeline.
    prev_stage_slice = f32[16] collective-permute(prev_iteration_compute_res),
        source_target_pairs={{{{0,1}}, {{1,2}}, {{2,3}}, {{3,0}}}}

    // Select compute argument from previous stage or from input and perform
    // compute.
    {read}
    compute_arg = f32[16] select({pick}, input_slice, prev_stage_slice)
    compute_res = f32[16] dot(weights, compute_arg), lhs_contracting_dims={{1}},
        rhs_contracting_dims={{0}}

    // Update buffers.
    output_ = {out_shape}call(output, compute_res, c{update_offset}, i),
        to_apply=update_buffer_mb{mb}

    i_ = add(i, c1)

    ROOT tuple1 = (f32[16,16], f32[{mb},16], f32[{mb},16], f32[16], u32[]) tuple(
        weights, input, output_, compute_res, i_)
  }}

  ENTRY main {{
    weights = f32[16,16] parameter(0)
    input = f32[{mb},16] parameter(1)

    cf0 = f32[] constant(0)
    output = f32[{mb},16] broadcast(cf0), dimensions={{}}
    prev_iteration_compute_res = f32[16] broadcast(cf0), dimensions={{}}
    c0 = u32[] constant(0)

    tuple = (f32[16,16], f32[{mb},16], f32[{mb},16], f32[16], u32[]) tuple(weights,
        input, output, prev_iteration_compute_res, c0)
    tuple_ = (f32[16,16], f32[{mb},16], f32[{mb},16], f32[16], u32[]) while(tuple),
        condition=while_condition, body=while_body

    ROOT output_ = f32[{mb},16] get-tuple-element(tuple_), index=2
  }}
"""


def _circular_mb5(buffer_from_compute: bool) -> str:
    """NaiveBFSMicrobatch5CircularRepeat2Replica4 (the circular buffer written from this
    iteration's compute) and NaiveWoDirectBufferDependency... (from the previous one)."""
    if buffer_from_compute:
        updates = """    output_ = f32[5,16] call(output, compute_res, c2, i),
        to_apply=update_buffer_mb5
    buffer_ = f32[5,16] call(buffer, compute_res, c0, i),
        to_apply=update_buffer_mb5"""
    else:
        updates = """    buffer_ = f32[5,16] call(buffer, prev_iteration_compute_res, c4, i),
        to_apply=update_buffer_mb5
    output_ = f32[5,16] call(output, compute_res, c2, i),
        to_apply=update_buffer_mb5"""
    return f"""  while_condition {{
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        parameter(0)
    i = u32[] get-tuple-element(tuple), index=5
    n = u32[] constant(13)
    ROOT predicate = pred[] compare(i, n), direction=LT
  }}

  while_body {{
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        parameter(0)
    weights = f32[16,16] get-tuple-element(tuple), index=0
    input = f32[5,16] get-tuple-element(tuple), index=1
    output = f32[5,16] get-tuple-element(tuple), index=2
    buffer = f32[5,16] get-tuple-element(tuple), index=3
    prev_iteration_compute_res = f32[16] get-tuple-element(tuple), index=4
    i = u32[] get-tuple-element(tuple), index=5

    c0 = u32[] constant(0)
    c1 = u32[] constant(1)
    c2 = u32[] constant(2)
    c3 = u32[] constant(3)
    c4 = u32[] constant(4)
    c5 = u32[] constant(5)

    // Read from buffers.
    input_slice = f32[16] call(input, c0, i), to_apply=read_buffer_mb5
    buffer_slice = f32[16] call(buffer, c3, i), to_apply=read_buffer_mb5

    // Shift data to the next stage in the pipeline.
    is_output_replica = pred[] call(), to_apply=is_output_replica
    next_stage_slice = select(is_output_replica, buffer_slice,
        prev_iteration_compute_res)
    prev_stage_slice = f32[16] collective-permute(next_stage_slice),
        source_target_pairs={{{{0,1}}, {{1,2}}, {{2,3}}, {{3,0}}}}

    // Select compute argument from previous stage or from input and perform
    // compute.
    is_read_input = pred[] call(i), to_apply=is_read_input_mb5
    compute_arg = f32[16] select(is_read_input, input_slice, prev_stage_slice)
    compute_res = f32[16] dot(weights, compute_arg), lhs_contracting_dims={{1}},
        rhs_contracting_dims={{0}}

    // Update buffers.
{updates}

    i_ = add(i, c1)

    ROOT tuple_ = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        tuple(weights, input, output_, buffer_, compute_res, i_)
  }}

  ENTRY main {{
    weights = f32[16,16] parameter(0)
    input = f32[5,16] parameter(1)

    cf0 = f32[] constant(0)
    output = f32[5,16] broadcast(cf0), dimensions={{}}
    buffer = f32[5,16] broadcast(cf0), dimensions={{}}
    prev_iteration_compute_res = f32[16] broadcast(cf0), dimensions={{}}
    c0 = u32[] constant(0)

    // Iterate through pipeline stages.
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        tuple(weights, input, output, buffer, prev_iteration_compute_res, c0)
    tuple_ = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        while(tuple), condition=while_condition, body=while_body

    ROOT output_ = f32[5,16] get-tuple-element(tuple_), index=2
  }}
"""


_CIRCULAR_PRE_OPTIMIZATION = """HloModule test

while_cond {
  param = (u32[], f32[2,2], f32[2,2]) parameter(0)
  iter = u32[] get-tuple-element(param), index=0
  max_iter = u32[] constant(3)
  ROOT cmp = pred[] compare(iter, max_iter), direction=LT
}

while_body {
  param = (u32[], f32[2,2], f32[2,2]) parameter(0)
  iter = u32[] get-tuple-element(param), index=0
  data = f32[2,2] get-tuple-element(param), index=1
  weights = f32[2,2] get-tuple-element(param), index=2
  cp = f32[2,2] collective-permute(data),
    source_target_pairs={{0,1}, {1,2}, {2,3}, {3,0}}
  matmul = f32[2,2] dot(weights, cp),
    lhs_contracting_dims={1}, rhs_contracting_dims={0}
  iter_increment = u32[] constant(1)
  next_iter = u32[] add(iter, iter_increment)
  ROOT result = (u32[], f32[2,2], f32[2,2]) tuple(next_iter, matmul, weights)
}

ENTRY test_computation {
  iter = u32[] constant(0)
  data = f32[2,2] parameter(0)
  weights = f32[2,2] parameter(1)
  input = (u32[], f32[2,2], f32[2,2]) tuple(iter, data, weights)
  while_res = (u32[], f32[2,2], f32[2,2]) while(input), condition=while_cond,
      body=while_body
  ROOT data_out = f32[2,2] get-tuple-element(while_res), index=1
}
"""


def _send_recv_loop(partitions: int, iterations: int, pairs: str) -> str:
    """SendRecvLoop(2Devices): a loop sending each partition's data to the next one, sends on
    channel 1, recvs on channel 2."""
    return f"""HloModule test, num_partitions={partitions}

while_condidtion {{
  param = (u32[], f32[2,2]) parameter(0)
  i = u32[] get-tuple-element(param), index=0
  c{iterations} = u32[] constant({iterations})
  ROOT cmp = pred[] compare(i, c{iterations}), direction=LT
}}

while_body {{
  param = (u32[], f32[2,2]) parameter(0)
  i = u32[] get-tuple-element(param), index=0
  data = f32[2,2] get-tuple-element(param), index=1

  // Send data to the next partition; the last sends nothing, so there is no cycle.
  after_all = token[] after-all()
  data_cpy = f32[2,2] copy(data)
  send_ctx = (f32[2,2], u32[], token[]) send(data_cpy, after_all),
      frontend_attributes={{
      _xla_send_recv_source_target_pairs={pairs}}}, channel_id=1
  recv_ctx = (f32[2,2], u32[], token[]) recv(after_all),
      frontend_attributes={{
      _xla_send_recv_source_target_pairs={pairs}}}, channel_id=2,
      control-predecessors={{data_cpy}}
  send_done = token[] send-done(send_ctx), channel_id=1
  recv_done = (f32[2,2], token[]) recv-done(recv_ctx), channel_id=2
  data_ = f32[2,2] get-tuple-element(recv_done), index=0

  c1 = u32[] constant(1)
  i_ = u32[] add(i, c1)
  ROOT result = (u32[], f32[2,2]) tuple(i_, data_)
}}

ENTRY test_computation {{
  data = f32[2,2] parameter(0)
  i = u32[] constant(0)
  init = (u32[], f32[2,2]) tuple(i, data)
  while = (u32[], f32[2,2]) while(init), condition=while_condidtion,
      body=while_body
  ROOT data_ = f32[2,2] get-tuple-element(while), index=1
}}
"""


def _partially_pipelined(partitions: int, pairs: str) -> str:
    """PartiallyPipelinedAsyncSendRecvLoop(2Devices): the first send/recv before the loop,
    each iteration finishing the previous one's and starting the next."""
    copy = "data_cpy = f32[2,2] copy(data)\n      " if partitions == 4 else ""
    sent = "data_cpy" if partitions == 4 else "data"
    return f"""HloModule test, num_partitions={partitions}

while_condidtion {{
  param = (u32[], (f32[2,2], u32[], token[]), (f32[2,2], u32[], token[]))
      parameter(0)
  i = u32[] get-tuple-element(param), index=0
  c2 = u32[] constant(2)
  ROOT cmp = pred[] compare(i, c2), direction=LT
}}

while_body {{
  param = (u32[], (f32[2,2], u32[], token[]), (f32[2,2], u32[], token[]))
      parameter(0)
  i = u32[] get-tuple-element(param), index=0
  send_ctx = get-tuple-element(param), index=1
  recv_ctx = get-tuple-element(param), index=2
  send_done = token[] send-done(send_ctx), channel_id=1
  recv_done = (f32[2,2], token[]) recv-done(recv_ctx), channel_id=2
  data = get-tuple-element(recv_done), index=0
  after_all = token[] after-all(send_done)
  {copy}send_ctx_ = (f32[2,2], u32[], token[]) send({sent}, after_all),
      frontend_attributes={{
      _xla_send_recv_source_target_pairs={pairs}}}, channel_id=1
  recv_ctx_ = (f32[2,2], u32[], token[]) recv(after_all),
      frontend_attributes={{
      _xla_send_recv_source_target_pairs={pairs}}}, channel_id=2,
      control-predecessors={{{sent}}}
  c1 = u32[] constant(1)
  i_ = u32[] add(i, c1)
  ROOT result = (u32[], (f32[2,2], u32[], token[]),
      (f32[2,2], u32[], token[])) tuple(i_, send_ctx_, recv_ctx_)
}}

ENTRY test_computation {{
  data = f32[2,2] parameter(0)
  i = u32[] constant(0)
  after_all = token[] after-all()
  send_ctx_ = (f32[2,2], u32[], token[]) send(data, after_all),
      frontend_attributes={{
      _xla_send_recv_source_target_pairs={pairs}}}, channel_id=1
  recv_ctx_ = (f32[2,2], u32[], token[]) recv(after_all),
      frontend_attributes={{
      _xla_send_recv_source_target_pairs={pairs}}}, channel_id=2
  init = (u32[], (f32[2,2], u32[], token[]), (f32[2,2], u32[], token[]))
      tuple(i, send_ctx_, recv_ctx_)
  while = (u32[], (f32[2,2], u32[], token[]), (f32[2,2], u32[], token[]))
      while(init), condition=while_condidtion, body=while_body
  send_ctx = get-tuple-element(while), index=1
  recv_ctx = get-tuple-element(while), index=2
  send_done = token[] send-done(send_ctx), channel_id=1
  recv_done = (f32[2,2], token[]) recv-done(recv_ctx), channel_id=2
  ROOT data_ = get-tuple-element(recv_done), index=0
}}
"""


def _send_recv_case(test, module, partitions, expected) -> Case:
    return Case(name=f"{FIXTURE}.{test}", source=SOURCE, test=f"{FIXTURE}.{test}", module=module,
                n=partitions, replica_count=1, num_partitions=partitions,
                inputs=per_device(*[full("f32", (2, 2), float(i + 1)) for i in range(partitions)]),
                expected=per_device(*[full("f32", (2, 2), float(v)) for v in expected]))


_SEND_RECV_PIPELINED = """  while_condition {
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[],
      (f32[16], token[]), (f32[16], token[])) parameter(0)
    i = u32[] get-tuple-element(tuple), index=5
    n = u32[] constant(13)
    ROOT predicate = pred[] compare(i, n), direction=LT
  }

  while_body {
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[],
      (f32[16], token[]), (f32[16], token[])) parameter(0)
    weights = f32[16,16] get-tuple-element(tuple), index=0
    input = f32[5,16] get-tuple-element(tuple), index=1
    output = f32[5,16] get-tuple-element(tuple), index=2
    buffer = f32[5,16] get-tuple-element(tuple), index=3
    prev_iteration_compute_res = f32[16] get-tuple-element(tuple), index=4
    i = u32[] get-tuple-element(tuple), index=5

    prev_iter_fwd_recv_done = (f32[16], token[])
      get-tuple-element(tuple), index=6
    prev_iter_bwd_recv_done = (f32[16], token[])
      get-tuple-element(tuple), index=7
    prev_stage_slice_fwd = f32[16] get-tuple-element(prev_iter_fwd_recv_done),
      index=0
    prev_stage_slice_bwd = f32[16] get-tuple-element(prev_iter_bwd_recv_done),
      index=0

    c0 = u32[] constant(0)
    c1 = u32[] constant(1)
    c2 = u32[] constant(2)
    c3 = u32[] constant(3)
    c4 = u32[] constant(4)
    c5 = u32[] constant(5)

    // Read from buffers.
    input_slice = f32[16] call(input, c0, i), to_apply=read_buffer_mb5
    buffer_slice = f32[16] call(buffer, c3, i), to_apply=read_buffer_mb5

    // Shift data to the next stage in the pipeline.
    is_output_replica = pred[] call(), to_apply=is_output_replica
    next_stage_slice = select(is_output_replica, buffer_slice,
        prev_iteration_compute_res)

    // Shift data to the next stage in the pipeline.
    after_all_fwd = token[] after-all()
    fwd_send = (f32[16], u32[], token[]) send(next_stage_slice, after_all_fwd),
      frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}},_xla_send_recv_pipeline="1"}
    fwd_send_done = token[] send-done(fwd_send), frontend_attributes={_xla_send_recv_pipeline="1"}

    // Select compute argument from previous stage or from input and perform
    // compute.
    is_read_input = pred[] call(i), to_apply=is_read_input_mb5
    compute_arg_bwd = f32[16] select(is_read_input, input_slice, prev_stage_slice_bwd)
    compute_res_bwd = f32[16] dot(weights, compute_arg_bwd),
      lhs_contracting_dims={1}, rhs_contracting_dims={0}
    is_device_zero = pred[] call(), to_apply=is_input_replica
    compute_arg_fwd = f32[16] select(is_device_zero,
      prev_stage_slice_bwd, prev_stage_slice_fwd)
    compute_res_fwd = f32[16] dot(weights, compute_arg_fwd),
      lhs_contracting_dims={1}, rhs_contracting_dims={0}

    // Update buffers.
    compute_res = f32[16] select(is_device_zero, compute_res_bwd, compute_res_fwd)
    output_ = f32[5,16] call(output, compute_res, c1, i),
        to_apply=update_buffer_mb5
    buffer_ = f32[5,16] call(buffer, prev_iteration_compute_res, c4, i),
        to_apply=update_buffer_mb5


    after_all_bwd = token[] after-all()
    bwd_recv = (f32[16], u32[], token[]) recv(after_all_bwd),
      frontend_attributes={_xla_send_recv_source_target_pairs={{3,0}},_xla_send_recv_pipeline="0"},
      control-predecessors={fwd_send_done, fwd_send}
    bwd_recv_done = (f32[16], token[]) recv-done(bwd_recv),
      frontend_attributes={_xla_send_recv_source_target_pairs={{3,0}},_xla_send_recv_pipeline="0"}
    bwd_send = (f32[16], u32[], token[]) send(next_stage_slice, after_all_bwd),
      frontend_attributes={_xla_send_recv_source_target_pairs={{3,0}},_xla_send_recv_pipeline="0"},
      control-predecessors={bwd_recv_done, bwd_recv}
    bwd_send_done = token[] send-done(bwd_send), frontend_attributes={_xla_send_recv_pipeline="0"}

    fwd_recv = (f32[16], u32[], token[]) recv(after_all_fwd),
      frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}},_xla_send_recv_pipeline="1"},
      control-predecessors={bwd_send_done, bwd_send}
    fwd_recv_done = (f32[16], token[]) recv-done(fwd_recv),
      frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}},_xla_send_recv_pipeline="1"}

    i_ = add(i, c1)

    ROOT tuple_ = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[],
      (f32[16], token[]), (f32[16], token[])) tuple(weights, input, output_,
      buffer_, compute_res, i_, fwd_recv_done, bwd_recv_done)
  }

  ENTRY main {
    weights = f32[16,16] parameter(0)
    input = f32[5,16] parameter(1)

    cf0 = f32[] constant(0)
    output = f32[5,16] broadcast(cf0), dimensions={}
    buffer = f32[5,16] broadcast(cf0), dimensions={}
    prev_iteration_compute_res = f32[16] broadcast(cf0), dimensions={}
    c0 = u32[] constant(0)
    input_slice = f32[16] call(input, c0, c0), to_apply=read_buffer_mb5


    after_all_bwd = token[] after-all()
    bwd_recv = (f32[16], u32[], token[]) recv(after_all_bwd),
      frontend_attributes={_xla_send_recv_source_target_pairs={{3,0}},_xla_send_recv_pipeline="0"}
    bwd_recv_done = (f32[16], token[]) recv-done(bwd_recv), frontend_attributes={_xla_send_recv_pipeline="0"}
    bwd_send = (f32[16], u32[], token[]) send(input_slice, after_all_bwd),
      frontend_attributes={_xla_send_recv_source_target_pairs={{3,0}},_xla_send_recv_pipeline="0"},
      control-predecessors={bwd_recv_done, bwd_recv}
    bwd_send_done = token[] send-done(bwd_send), frontend_attributes={_xla_send_recv_pipeline="0"}

    after_all_fwd = token[] after-all()
    fwd_recv = (f32[16], u32[], token[]) recv(after_all_fwd),
      frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}},_xla_send_recv_pipeline="1"},
      control-predecessors={bwd_send_done, bwd_send}
    fwd_recv_done = (f32[16], token[]) recv-done(fwd_recv),
      frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}},_xla_send_recv_pipeline="1"}

    // Iterate through pipeline stages.
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[],
      (f32[16], token[]), (f32[16], token[])) tuple(weights, input, output,
      buffer, prev_iteration_compute_res, c0, fwd_recv_done, bwd_recv_done)
    tuple_ = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[],
      (f32[16], token[]), (f32[16], token[])) while(tuple),
      condition=while_condition, body=while_body


    // unroll while loop results
    weights_ = f32[16,16] get-tuple-element(tuple_), index=0
    input_ = f32[5,16] get-tuple-element(tuple_), index=1
    output_ = f32[5,16] get-tuple-element(tuple_), index=2
    buffer_ = f32[5,16] get-tuple-element(tuple_), index=3
    prev_iteration_compute_res_ = f32[16] get-tuple-element(tuple_), index=4
    i_ = u32[] get-tuple-element(tuple_), index=5
    prev_stage_fwd_recv_done_ = (f32[16], token[]) get-tuple-element(tuple_), index=6
    prev_stage_bwd_recv_done_ = (f32[16], token[]) get-tuple-element(tuple_), index=7
    prev_stage_slice_fwd_ = f32[16] get-tuple-element(prev_stage_fwd_recv_done_), index=0
    prev_stage_slice_bwd_ = f32[16] get-tuple-element(prev_stage_bwd_recv_done_), index=0

    c0_ = u32[] constant(0)
    c1_ = u32[] constant(1)
    c2_ = u32[] constant(2)
    c3_ = u32[] constant(3)
    c4_ = u32[] constant(4)
    c5_ = u32[] constant(5)

    // Read from buffers.
    input_slice_ = f32[16] call(input, c0_, i_), to_apply=read_buffer_mb5
    buffer_slice_ = f32[16] call(buffer, c3_, i_), to_apply=read_buffer_mb5

    // Shift data to the next stage in the pipeline.
    is_output_replica_ = pred[] call(), to_apply=is_output_replica
    next_stage_slice_ = select(is_output_replica_, buffer_slice_,
        prev_iteration_compute_res_)

    fwd_send = (f32[16], u32[], token[]) send(next_stage_slice_, after_all_fwd),
      frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}},_xla_send_recv_pipeline="1"}
    fwd_send_done = token[] send-done(fwd_send), frontend_attributes={_xla_send_recv_pipeline="1"}


    // Select compute argument from previous stage or from input and perform
    // compute.
    is_read_input_ = pred[] call(i_), to_apply=is_read_input_mb5
    compute_arg_bwd_ = f32[16] select(is_read_input_, input_slice_, prev_stage_slice_bwd_)
    compute_res_bwd_ = f32[16] dot(weights_, compute_arg_bwd_), lhs_contracting_dims={1},
        rhs_contracting_dims={0}
    is_device_zero_ = pred[] call(), to_apply=is_input_replica
    compute_arg_fwd_ = f32[16] select(is_device_zero_, prev_stage_slice_bwd_, prev_stage_slice_fwd_)
    compute_res_fwd_ = f32[16] dot(weights_, compute_arg_fwd_), lhs_contracting_dims={1},
        rhs_contracting_dims={0}

    // Update buffers.
    compute_res_ = f32[16] select(is_device_zero_, compute_res_bwd_, compute_res_fwd_)
    ROOT output__ = f32[5,16] call(output_, compute_res_, c1_, i_),
        to_apply=update_buffer_mb5

  }
"""

_SEND_RECV_ASYNC_GROUP = """
  wrapped_send_recv_1 {
    fwd_send_data = f32[16] parameter(0)
    fwd_send_after_all = token[] parameter(1)
    fwd_send = (f32[16], u32[], token[]) send(fwd_send_data, fwd_send_after_all),
      frontend_attributes={_xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}}}

    fwd_recv_after_all = token[] parameter(2)
    fwd_recv = (f32[16], u32[], token[]) recv(fwd_recv_after_all), frontend_attributes={
        _xla_send_recv_source_target_pairs={{0,1},{1,2},{2,3}}}

    bwd_send_data = f32[16] parameter(3)
    bwd_send_after_all = token[] parameter(4)
    bwd_send = (f32[16], u32[], token[]) send(bwd_send_data, bwd_send_after_all), frontend_attributes={
        _xla_send_recv_source_target_pairs={{3,0}}}

    bwd_recv_after_all = token[] parameter(5)
    bwd_recv = (f32[16], u32[], token[]) recv(bwd_recv_after_all), frontend_attributes={
        _xla_send_recv_source_target_pairs={{3,0}}}

    ROOT out = ((f32[16], u32[], token[]),(f32[16], u32[], token[]),
      (f32[16], u32[], token[]),(f32[16], u32[], token[])) tuple(fwd_send,
      fwd_recv, bwd_send, bwd_recv)

  }

  while_condition {
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        parameter(0)
    i = u32[] get-tuple-element(tuple), index=5
    n = u32[] constant(13)
    ROOT predicate = pred[] compare(i, n), direction=LT
  }

  while_body {
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        parameter(0)
    weights = f32[16,16] get-tuple-element(tuple), index=0
    input = f32[5,16] get-tuple-element(tuple), index=1
    output = f32[5,16] get-tuple-element(tuple), index=2
    buffer = f32[5,16] get-tuple-element(tuple), index=3
    prev_iteration_compute_res = f32[16] get-tuple-element(tuple), index=4
    i = u32[] get-tuple-element(tuple), index=5

    c0 = u32[] constant(0)
    c1 = u32[] constant(1)
    c2 = u32[] constant(2)
    c3 = u32[] constant(3)
    c4 = u32[] constant(4)
    c5 = u32[] constant(5)

    // Read from buffers.
    input_slice = f32[16] call(input, c0, i), to_apply=read_buffer_mb5
    buffer_slice = f32[16] call(buffer, c3, i), to_apply=read_buffer_mb5

    // Shift data to the next stage in the pipeline.
    is_output_replica = pred[] call(), to_apply=is_output_replica
    next_stage_slice = select(is_output_replica, buffer_slice,
        prev_iteration_compute_res)


    // Shift data to the next stage in the pipeline.
    after_all_fwd = token[] after-all()
    after_all_bwd = token[] after-all()

    async_comp_start = (( f32[16], token[], token[], f32[16], token[], token[]),
      ((f32[16], u32[], token[]), (f32[16], u32[], token[]), (f32[16], u32[], token[]),
      (f32[16], u32[], token[])), s32[]) async-start(next_stage_slice,
        after_all_fwd, after_all_fwd, next_stage_slice,
        after_all_bwd, after_all_bwd), calls=wrapped_send_recv_1

    async_comp_done = ((f32[16], u32[], token[]), (f32[16], u32[], token[]),
      (f32[16], u32[], token[]), (f32[16], u32[], token[])) async-done(async_comp_start)
    unpack_fwd_recv = (f32[16], u32[], token[]) get-tuple-element(async_comp_done), index=1
    fwd_recv_data = f32[16] get-tuple-element(unpack_fwd_recv), index=0
    fwd_recv_token = token[] get-tuple-element(unpack_fwd_recv), index=2
    fwd_recv_done = (f32[16], token[]) tuple(fwd_recv_data, fwd_recv_token),
      control-predecessors={async_comp_start}

    unpack_bwd_recv = (f32[16], u32[], token[]) get-tuple-element(async_comp_done), index=3
    bwd_recv_data = f32[16] get-tuple-element(unpack_bwd_recv), index=0
    bwd_recv_token = token[] get-tuple-element(unpack_bwd_recv), index=2
    bwd_recv_done = (f32[16], token[]) tuple(bwd_recv_data, bwd_recv_token),
      control-predecessors={async_comp_start}
    prev_stage_slice_fwd = f32[16] get-tuple-element(fwd_recv_done), index=0
    prev_stage_slice_bwd = f32[16] get-tuple-element(bwd_recv_done), index=0


    // Select compute argument from previous stage or from input and perform
    // compute.
    is_read_input = pred[] call(i), to_apply=is_read_input_mb5
    compute_arg_bwd = f32[16] select(is_read_input, input_slice, prev_stage_slice_bwd)
    compute_res_bwd = f32[16] dot(weights, compute_arg_bwd), lhs_contracting_dims={1},
        rhs_contracting_dims={0}
    is_device_zero = pred[] call(), to_apply=is_input_replica
    compute_arg_fwd = f32[16] select(is_device_zero, prev_stage_slice_bwd, prev_stage_slice_fwd)
    compute_res_fwd = f32[16] dot(weights, compute_arg_fwd), lhs_contracting_dims={1},
        rhs_contracting_dims={0}

    // Update buffers.
    compute_res = f32[16] select(is_device_zero, compute_res_bwd, compute_res_fwd)
    output_ = f32[5,16] call(output, compute_res, c2, i),
        to_apply=update_buffer_mb5
    buffer_ = f32[5,16] call(buffer, compute_res, c0, i),
        to_apply=update_buffer_mb5

    i_ = add(i, c1)

    ROOT tuple_ = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        tuple(weights, input, output_, buffer_, compute_res, i_)

    unpack-send-done1 = (f32[16], u32[], token[]) get-tuple-element(async_comp_done), index=0
    send-done1 = token[] get-tuple-element(unpack-send-done1), index=2
    unpack-send-done2 = (f32[16], u32[], token[]) get-tuple-element(async_comp_done), index=2
    send-done2 = token[] get-tuple-element(unpack-send-done2), index=2
  }

  ENTRY main {
    weights = f32[16,16] parameter(0)
    input = f32[5,16] parameter(1)

    cf0 = f32[] constant(0)
    output = f32[5,16] broadcast(cf0), dimensions={}
    buffer = f32[5,16] broadcast(cf0), dimensions={}
    prev_iteration_compute_res = f32[16] broadcast(cf0), dimensions={}
    c0 = u32[] constant(0)

    // Iterate through pipeline stages.
    tuple = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        tuple(weights, input, output, buffer, prev_iteration_compute_res, c0)
    tuple_ = (f32[16,16], f32[5,16], f32[5,16], f32[5,16], f32[16], u32[])
        while(tuple), condition=while_condition, body=while_body

    ROOT output_ = f32[5,16] get-tuple-element(tuple_), index=2
  }
"""

_RING = "{{0,1},{1,2},{2,3}}"

CASES: list[Case] = [
    Case(name=f"{FIXTURE}.CollectivePermute_CircularPipelinePreOptimization", source=SOURCE,
         test=f"{FIXTURE}.CollectivePermute_CircularPipelinePreOptimization",
         module=_CIRCULAR_PRE_OPTIMIZATION, n=4, replica_count=4,
         inputs=per_device(*[(full("f32", (2, 2), float(i + 1)), arr("f32", [[0, 0], [0, 1]]))
                             for i in range(4)]),
         expected=per_device(*[arr("f32", [[0, 0], [v, v]]) for v in (2, 3, 4, 1)])),
    _pipeline("NaiveBFSMicrobatch4Replica4", _naive(4, 7, False, 1, (0, 1, 4)), 4, 24.0),
    _pipeline("NaiveBFSMicrobatch5Replica4", _naive(5, 8, False, 2, (0, 1, 2, 5)), 5, 24.0),
    _pipeline("NaiveBFSMicrobatch4CircularRepeat2Replica4", _naive(4, 11, True, 1, (0, 1, 4)),
              4, 576.0),
    _pipeline("NaiveBFSMicrobatch5CircularRepeat2Replica4", _circular_mb5(True), 5, 576.0),
    _pipeline("NaiveWoDirectBufferDependencyBFSMicrobatch5CircularRepeat2Replica4",
              _circular_mb5(False), 5, 576.0),
    # Partition 0 sends on, nothing reaches it: zeros; partition 3 ends with partition 0's 1s.
    # Sends on channel 1, recvs on channel 2: paired by their peers and program order, as XLA
    # pairs them (docs/channels.md).
    _send_recv_case("SendRecvLoop", _send_recv_loop(4, 3, _RING), 4, [0, 0, 0, 1]),
    _send_recv_case("SendRecvLoop2Devices", _send_recv_loop(2, 1, "{{0,1}}"), 2, [0, 1]),
    _send_recv_case("PartiallyPipelinedAsyncSendRecvLoop", _partially_pipelined(4, _RING), 4,
                    [0, 0, 0, 1]),
    _send_recv_case("PartiallyPipelinedAsyncSendRecvLoop2Devices",
                    _partially_pipelined(2, "{{0,1}}"), 2, [0, 0]),
    # No channel ids, a send issued before its recv: runs as XLA runs it.
    _pipeline("NaiveBFSMb5Cr2Replica4SendRecvPartiallyPipelined", _SEND_RECV_PIPELINED, 5,
              576.0),
    _pipeline("NaiveBFSMb5Cr2Replica4SendRecvAsyncGroup", _SEND_RECV_ASYNC_GROUP, 5, 576.0),
]

SKIPPED = {
    f"{FIXTURE}.JaxExampleWithDecomposedCycle":
        "needs the SPMD partitioner (a module before partitioning: full-size f32[4,5,4096,8192] "
        "parameters with sharding annotations, 2.7 GB each); XLA checks only that it runs",
}
