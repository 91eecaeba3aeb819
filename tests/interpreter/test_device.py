"""Device ops on one device: ids, every collective form over a group of one, channels,
infeed/outfeed (docs/reference/collective-semantics.md sections C, D, E)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.interpreter.ir import Comp, run, scalar_binary
from xladist.errors import ExecutionError
from xladist.hlo.attrs import ReplicaGroups
from xladist.semantics.single_device import SingleDeviceContext
from xladist.semantics.values import TOKEN
from xladist.semantics.device import DeviceContext
from xladist.interpreter.device_ops import Reducer

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def one_op(opcode, shape, *in_shapes, device=None, args=None, **attrs):
    c = Comp()
    params = [c.param(s) for s in in_shapes]
    m = c.module(c.op(opcode, shape, *params, **attrs))
    return run(m, *(args if args is not None else [X] * len(in_shapes)), device=device)


def test_ids_are_u32_scalars():
    c = Comp()
    r = c.op("replica-id", "u32[]")
    p = c.op("partition-id", "u32[]")
    out = run(c.module(c.op("tuple", "(u32[], u32[])", r, p)),
              device=SingleDeviceContext(replica_id=0, partition_id=0))
    assert out[0].dtype == np.uint32 and out[0] == 0 and out[1] == 0


def test_all_reduce_gather_scatter_and_all_to_all_are_identities_on_one_device():
    add = scalar_binary("add", "f32")
    g = ReplicaGroups(((0,),))
    got = one_op("all-reduce", "f32[2,3]", "f32[2,3]", to_apply=add, replica_groups=g)
    assert (got == X).all()
    got = one_op("all-gather", "f32[2,3]", "f32[2,3]", dimensions=(0,), replica_groups=g)
    assert (got == X).all()
    got = one_op("reduce-scatter", "f32[2,3]", "f32[2,3]", dimensions=(1,), to_apply=add)
    assert (got == X).all()
    got = one_op("all-to-all", "f32[2,3]", "f32[2,3]", dimensions=(0,))
    assert (got == X).all()
    got = one_op("all-to-all", "(f32[2,3])", "f32[2,3]")  # tuple form: N=1 operands
    assert isinstance(got, tuple) and (got[0] == X).all()
    v = one_op("all-reduce", "(f32[2,3], f32[2,3])", "f32[2,3]", "f32[2,3]", to_apply=add)
    assert isinstance(v, tuple) and len(v) == 2


def test_a_collective_that_needs_more_devices_is_refused():
    with pytest.raises(ExecutionError, match=r"all-gather.*needs more devices"):
        one_op("all-gather", "f32[4,3]", "f32[2,3]", dimensions=(0,),
               replica_groups=ReplicaGroups(((0, 1),)))


def test_collective_permute_self_pair_copies_and_otherwise_zeros():
    got = one_op("collective-permute", "f32[2,3]", "f32[2,3]", source_target_pairs=((0, 0),))
    assert (got == X).all()
    got = one_op("collective-permute", "f32[2,3]", "f32[2,3]", channel_id=1,
                 source_target_pairs=((0, 1), (1, 0)))
    assert (got == 0).all() and got.dtype == np.float32


def test_collective_broadcast():
    got = one_op("collective-broadcast", "f32[2,3]", "f32[2,3]",
                 replica_groups=ReplicaGroups(((0,),)))
    assert (got == X).all()
    got = one_op("collective-broadcast", "f32[2,3]", "f32[2,3]",
                 replica_groups=ReplicaGroups(((1,),)))
    assert (got == 0).all()


def test_ragged_all_to_all_with_one_peer():
    c = Comp()
    data, out = c.param("s32[6]"), c.param("s32[6]")
    offs = [c.param("s64[1]") for _ in range(4)]
    m = c.module(c.op("ragged-all-to-all", "s32[6]", data, out, *offs))
    got = run(m, np.arange(6, dtype=np.int32), np.full(6, -1, np.int32),
              np.array([1]), np.array([3]), np.array([2]), np.array([3]))
    assert got.tolist() == [-1, -1, 1, 2, 3, -1]


def test_async_collectives_pass_through_pending_values():
    add = scalar_binary("add", "f32")
    c = Comp()
    p = c.param("f32[2,3]")
    ars = c.op("all-reduce-start", "f32[2,3]", p, to_apply=add)
    ard = c.op("all-reduce-done", "f32[2,3]", ars)
    ags = c.op("all-gather-start", "(f32[2,3], f32[2,3])", ard, dimensions=(0,))
    agd = c.op("all-gather-done", "f32[2,3]", ags)
    cps = c.op("collective-permute-start", "(f32[2,3], f32[2,3], u32[], u32[])", agd,
               source_target_pairs=((0, 0),))
    cpd = c.op("collective-permute-done", "f32[2,3]", cps)
    got = run(c.module(cpd, add), X)
    assert (got == X).all()


class RecordingDevice(SingleDeviceContext):
    """Checks the interface the MPI runtime implements: start/done handles round-trip."""

    def __init__(self):
        super().__init__()
        self.log = []

    def collective_start(self, instr, args, reducer=None):
        self.log.append(("start", instr.opcode, reducer))
        return {"token": len(self.log), "value": self.collective(instr, args, reducer)}

    def collective_done(self, instr, handle):
        self.log.append(("done", instr.opcode, handle["token"]))
        return handle["value"]


def test_device_context_receives_start_handles_and_reducers():
    add = scalar_binary("add", "f32")
    c = Comp()
    p = c.param("f32[2,3]")
    ars = c.op("all-reduce-start", "f32[2,3]", p, to_apply=add)
    ard = c.op("all-reduce-done", "f32[2,3]", ars)
    dev = RecordingDevice()
    run(c.module(ard, add), X, device=dev)
    (_, op0, reducer), (_, op1, token) = dev.log
    assert (op0, op1, token) == ("all-reduce-start", "all-reduce-done", 1)
    assert isinstance(reducer, Reducer) and reducer.computation is add
    a, b = np.array([1.0, 2.0], np.float32), np.array([10.0, 20.0], np.float32)
    assert reducer(a, b).tolist() == [11.0, 22.0]  # the reducer applies to_apply


def send_recv_module(pairs: str | None, host=False):
    c = Comp()
    x = c.param("f32[3]")
    tok = c.op("after-all", "token[]")
    recv = c.op("recv", "(f32[3], u32[], token[])", tok, channel_id=5, is_host_transfer=host)
    send = c.op("send", "(f32[3], u32[], token[])", x, tok, channel_id=5, is_host_transfer=host)
    if pairs is not None:
        for i in (recv, send):
            i.frontend_attributes["_xla_send_recv_source_target_pairs"] = pairs
    rd = c.op("recv-done", "(f32[3], token[])", recv, channel_id=5, is_host_transfer=host)
    sd = c.op("send-done", "token[]", send, channel_id=5, is_host_transfer=host)
    data = c.op("get-tuple-element", "f32[3]", rd, index=0)
    return c.module(c.op("tuple", "(f32[3], token[])", data, sd))


def test_send_recv_on_one_device():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    data, tok = run(send_recv_module("{{0,0}}"), x)
    assert data.tolist() == [1.0, 2.0, 3.0] and tok is TOKEN
    data, _ = run(send_recv_module("{{0,1},{1,0}}"), x)  # no pair targets device 0
    assert data.tolist() == [0.0, 0.0, 0.0]
    dev = SingleDeviceContext(host_recv=[np.array([7.0, 8.0, 9.0], np.float32)])
    data, _ = run(send_recv_module(None, host=True), x, device=dev)
    assert data.tolist() == [7.0, 8.0, 9.0]
    assert [a.tolist() for a in dev.host_sent] == [[1.0, 2.0, 3.0]]


def feed_module():
    c = Comp()
    tok = c.op("after-all", "token[]")
    inf1 = c.op("infeed", "((f32[2], s32[]), token[])", tok)
    data = c.op("get-tuple-element", "(f32[2], s32[])", inf1, index=0)
    t1 = c.op("get-tuple-element", "token[]", inf1, index=1)
    empty = c.op("infeed", "((), token[])", t1)
    t2 = c.op("get-tuple-element", "token[]", empty, index=1)
    inf2 = c.op("infeed", "(f32[2], token[])", t2)
    second = c.op("get-tuple-element", "f32[2]", inf2, index=0)
    t3 = c.op("get-tuple-element", "token[]", inf2, index=1)
    out = c.op("outfeed", "token[]", second, t3, outfeed_shape=None)
    return c.module(c.op("tuple", "((f32[2], s32[]), token[])", data, out))


def test_infeed_and_outfeed():
    items = [(np.array([1.0, 2.0], np.float32), np.array(3, np.int32)),
             np.array([4.0, 5.0], np.float32)]
    dev = SingleDeviceContext(items)
    (a, n), _ = run(feed_module(), device=dev)
    assert a.tolist() == [1.0, 2.0] and n == 3
    assert [v.tolist() for v in dev.outfeed_values] == [[4.0, 5.0]]


def test_infeed_errors_name_the_instruction():
    with pytest.raises(ExecutionError,
                       match=r"rank 0 .*infeed\.\d+ = .*infeed queue is empty.*item #1"):
        run(feed_module(), device=SingleDeviceContext(
            [(np.zeros(2, np.float32), np.array(0, np.int32))]))
    with pytest.raises(ExecutionError, match=r"infeed item #0\[1\] is int64\[\], expected s32"):
        run(feed_module(), device=SingleDeviceContext([(np.zeros(2, np.float32), np.array(0))]))


def test_device_context_interface_defaults_to_not_implemented():
    with pytest.raises(NotImplementedError):
        DeviceContext().collective(None, [])


def test_ragged_all_to_all_one_peer_several_updates_and_bad_sizes():
    c = Comp()
    data, out = c.param("s32[6]"), c.param("s32[6]")
    offs = [c.param("s32[1,2]") for _ in range(4)]
    m = c.module(c.op("ragged-all-to-all", "s32[6]", data, out, *offs))
    x, base = np.arange(6, dtype=np.int32), np.full(6, -1, np.int32)
    # Two updates to ourselves: rows [0,2) -> 4, rows [3,4) -> 0; a rank-2 [1, k] form.
    meta = [np.array([[0, 3]]), np.array([[2, 1]]), np.array([[4, 0]]), np.array([[2, 1]])]
    got = run(m, x, base, *[a.astype(np.int32) for a in meta])
    assert got.tolist() == [3, -1, -1, -1, 0, 1]
    # A chunk past the input's end is refused, naming the update.
    meta[1] = np.array([[2, 4]])
    meta[3] = np.array([[2, 4]])
    with pytest.raises(ExecutionError, match="update 1.*input's 6"):
        run(m, x, base, *[a.astype(np.int32) for a in meta])
