"""Ops that need other devices or the host, delegated to the evaluator's DeviceContext.

replica-id and partition-id read the context's ids (u32 scalars). Every collective, its
async start/done forms, send/recv and their done ops, infeed and outfeed call the
DeviceContext (context.py; `SingleDeviceContext` for one device, the MPI runtime for N).

Async values: a `*-start` instruction's value must have the start's shape (a tuple that
holds the operands and a slot for the result). The slot that the matching `*-done` will
fill holds a `Pending(handle, start)`; `handle` is whatever the DeviceContext returned from
`collective_start` / `send` / `recv`, and the done op hands it back. The shape check
accepts a Pending in any position, so pending values may travel through tuples and
while-loop state (pipelined send/recv).

Reducers: collectives with `to_apply` receive a `Reducer`: callable on two arrays
(the computation applied element-wise through Evaluator.call_vectorized), with
`.computation` for runtimes that map it onto MPI builtin ops.
"""

from __future__ import annotations

import numpy as np

from ..hlo.reducers import reducer_for

from ..semantics.values import TOKEN, zeros_value
from .registry import register


class Pending:
    """The not-yet-available result of an async start (see module docstring)."""

    __slots__ = ("handle", "start")

    def __init__(self, handle, start):
        self.handle = handle
        self.start = start

    def __repr__(self) -> str:
        return f"Pending({self.start.name})"


class Reducer:
    """A to_apply computation as a binary function on arrays."""

    __slots__ = ("_ev", "computation")

    def __init__(self, computation, ev):
        self.computation = computation
        self._ev = ev

    def __call__(self, a, b):
        return self._ev.call_vectorized(self.computation, [a, b])

    def __repr__(self) -> str:
        return f"Reducer({self.computation.name})"


def _reducer(instr, ev):
    comp = reducer_for(instr)  # to_apply, in the operands' element type
    return Reducer(comp, ev) if comp is not None else None


def _u32(value: int) -> np.ndarray:
    return np.array(value, dtype=np.uint32)


@register("replica-id")
def replica_id_rule(instr, args, ev):
    return _u32(ev.device.replica_id)


@register("partition-id")
def partition_id_rule(instr, args, ev):
    return _u32(ev.device.partition_id)


@register("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
          "collective-broadcast", "ragged-all-to-all")
def collective_rule(instr, args, ev):
    return ev.device.collective(instr, list(args), _reducer(instr, ev))


@register("all-reduce-start")
def all_reduce_start_rule(instr, args, ev):
    # all-reduce-start's shape is the result's shape: the whole value is pending.
    return Pending(ev.device.collective_start(instr, list(args), _reducer(instr, ev)), instr)


@register("all-reduce-done")
def all_reduce_done_rule(instr, args, ev):
    return ev.device.collective_done(instr, args[0].handle)


def _operand_part(instr, args):
    first = instr.shape.tuple_shapes[0]
    return tuple(args) if first.is_tuple else args[0]


def _contexts(instr):
    return tuple(zeros_value(s) for s in instr.shape.tuple_shapes[2:])


@register("all-gather-start", "collective-permute-start")
def two_slot_start_rule(instr, args, ev):
    # (operand(s), result(s), contexts...): the result slot is pending.
    handle = ev.device.collective_start(instr, list(args), _reducer(instr, ev))
    return (_operand_part(instr, args), Pending(handle, instr)) + _contexts(instr)


@register("all-gather-done", "collective-permute-done")
def two_slot_done_rule(instr, args, ev):
    return ev.device.collective_done(instr, args[0][1].handle)


@register("send")
def send_rule(instr, args, ev):
    data, _token = args
    handle = ev.device.send(instr, data)
    return (data, Pending(handle, instr), TOKEN)


@register("send-done")
def send_done_rule(instr, args, ev):
    ev.device.send_done(instr, args[0][1].handle)
    return TOKEN


@register("recv")
def recv_rule(instr, args, ev):
    handle = ev.device.recv(instr)
    return (Pending(handle, instr), _u32(0), TOKEN)


@register("recv-done")
def recv_done_rule(instr, args, ev):
    return (ev.device.recv_done(instr, args[0][0].handle), TOKEN)


@register("infeed")
def infeed_rule(instr, args, ev):
    return (ev.device.infeed(instr), TOKEN)


@register("outfeed")
def outfeed_rule(instr, args, ev):
    ev.device.outfeed(instr, args[0])
    return TOKEN
