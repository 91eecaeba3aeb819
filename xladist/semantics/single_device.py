"""`SingleDeviceContext`: the DeviceContext of a one-device run (N = 1).

Every collective runs over a group of one (docs/reference/collective-semantics.md section C):
all-reduce, all-gather, reduce-scatter, all-to-all and collective-broadcast are the
identity; collective-permute copies when the pairs contain the self pair (0, 0) and gives
zeros otherwise; a collective-broadcast on a device in no group gives zeros. A module
whose collectives need more than one device (e.g. an all-gather whose result is larger
than its operand) is refused with an ExecutionError naming the instruction.

Channels: a send/recv pair on this device (`_xla_send_recv_source_target_pairs`
containing {0,0}) passes data through a per-channel queue; a recv that no pair targets
yields zeros and a send that no pair sources completes at once (section D.21a). Host
transfers (is_host_transfer=true) read from `host_recv` and append to `host_sent`.

Feeds: infeed items come from the iterable given at construction, one item per infeed
(an array, or a tuple of arrays for a tuple-shaped infeed; an empty-tuple infeed takes
no item, E.22a); outfeed values are appended to `outfeed_values`. With `feeds=` (a
xladist.runtime.feeds.Feeds, as `xladist run -n 1 --infeed/--outfeed` passes) both go there.
"""

from __future__ import annotations

from collections import defaultdict, deque

import numpy as np

from ..errors import ExecutionError
from ..hlo.ir import describe
from ..hlo.collective_groups import PAIRS_ATTR, parse_pairs
from ..hlo.shape import Shape
from .device import DeviceContext
from .values import TOKEN, zeros_value


def _result_of(instr, args):
    """Operand(s) as the instruction's (non-tuple or tuple) result value."""
    return tuple(args) if len(args) != 1 or _result_shape(instr).is_tuple else args[0]


def _result_shape(instr) -> Shape:
    # *-start ops carry (operands, result, ...) or, for all-reduce-start, the result itself.
    if instr.opcode in ("all-gather-start", "collective-permute-start"):
        return instr.shape.tuple_shapes[1]
    return instr.shape


def _check_identity(instr, args):
    """On one device the result must be the operands themselves (group of one)."""
    result = _result_shape(instr)
    shapes = [s for _, s in result.leaves()]
    if len(shapes) != len(args) or any(tuple(s.dims) != a.shape for s, a in zip(shapes, args)):
        raise ExecutionError(
            f"{instr.opcode} over a group of one device must return its operands unchanged, but "
            f"the result is {result}: this module needs more devices (run it with "
            f"`xladist run -n N`)", instruction=describe(instr))


def _identity(ctx, instr, args, reducer):
    _check_identity(instr, args)
    return _result_of(instr, args)


def _permute(ctx, instr, args, reducer):
    me = ctx.partition_id if instr.attrs.get("channel_id") else ctx.replica_id
    pairs = instr.attrs.get("source_target_pairs", ())
    # (the in-place form with slice_sizes never gets here: the verifier refuses it)
    if (me, me) in {tuple(p) for p in pairs}:
        return _identity(ctx, instr, args, reducer)
    return zeros_value(_result_shape(instr))  # no source sends to us: zeros (C.14)


def _broadcast(ctx, instr, args, reducer):
    me = ctx.partition_id if instr.attrs.get("channel_id") else ctx.replica_id
    groups = getattr(instr.attrs.get("replica_groups"), "groups", ())
    if not groups or any(me in g for g in groups):
        return _identity(ctx, instr, args, reducer)
    return zeros_value(_result_shape(instr))


def _ragged_all_to_all(ctx, instr, args, reducer):
    """Group of one: every entry e is an update to this device itself (C.16), written in
    order; bounds are checked as over MPI (xladist/collectives/ragged_all_to_all.py)."""
    data, output, *meta = args
    out = np.array(output, copy=True)
    in_off, sizes, out_off, recv = (np.asarray(m).astype(np.int64).reshape(-1) for m in meta)
    for e in range(in_off.size):
        start, size, dest = int(in_off[e]), int(sizes[e]), int(out_off[e])
        # An empty chunk's offsets are never used, so only a real chunk must fit.
        if size < 0 or int(recv[e]) != size or (size and (
                start < 0 or start + size > data.shape[0]
                or dest < 0 or dest + size > out.shape[0])):
            raise ExecutionError(
                f"ragged-all-to-all update {e}: input_offsets={start}, send_sizes={size}, "
                f"output_offsets={dest}, recv_sizes={int(recv[e])} must be >= 0, agree in "
                f"size and stay within the input's {data.shape[0]} and the output's "
                f"{out.shape[0]} rows", instruction=describe(instr))
        out[dest:dest + size] = data[start:start + size]
    return out


# Base opcode (without -start) -> behaviour on one device.
COLLECTIVES = {
    "all-reduce": _identity,
    "all-gather": _identity,
    "reduce-scatter": _identity,
    "all-to-all": _identity,
    "collective-permute": _permute,
    "collective-broadcast": _broadcast,
    "ragged-all-to-all": _ragged_all_to_all,
}

class SingleDeviceContext(DeviceContext):
    """Device 0 of a one-device run; see the module docstring for the rules."""

    rank = 0

    def __init__(self, infeed=(), *, host_recv=(), replica_id: int = 0, partition_id: int = 0,
                 feeds=None):
        self.feeds = feeds  # runtime Feeds (files, functions, callbacks): replaces infeed=
        self.replica_id = replica_id
        self.partition_id = partition_id
        self.replica_count = 1
        self.num_partitions = 1
        self._infeed = iter(infeed)
        self._infeed_taken = 0
        self._host_recv = iter(host_recv)
        self.outfeed_values: list = []
        self.host_sent: list = []
        self._channels: dict[int, deque] = defaultdict(deque)

    # ---- collectives ---------------------------------------------------------------
    def collective(self, instr, args, reducer=None):
        base = instr.opcode.removesuffix("-start")
        fn = COLLECTIVES.get(base)
        if fn is None:
            raise ExecutionError(f"no single-device rule for collective {base}",
                                 instruction=describe(instr))
        return fn(self, instr, args, reducer)

    # ---- channels --------------------------------------------------------------------
    def _self_channel(self, instr) -> bool:
        me = self.partition_id
        return (me, me) in parse_pairs(instr.frontend_attributes.get(PAIRS_ATTR, ""))

    def send(self, instr, data):
        if instr.attrs.get("is_host_transfer"):
            self.host_sent.append(data)
        elif self._self_channel(instr):
            self._channels[instr.attrs.get("channel_id", 0)].append(data)
        return ("send", instr)

    def send_done(self, instr, handle):
        return None

    def recv(self, instr):
        return ("recv", instr)

    def recv_done(self, instr, handle):
        recv = handle[1]
        shape = recv.shape.tuple_shapes[0]
        if recv.attrs.get("is_host_transfer"):
            try:
                return self._conform(recv, next(self._host_recv), shape, "host recv")
            except StopIteration:
                raise ExecutionError("host-transfer recv has no data left (pass host_recv= "
                                     "to SingleDeviceContext)", instruction=describe(instr))
        if not self._self_channel(recv):
            return zeros_value(shape)  # no peer sends to this device: zeros (D.21a)
        queue = self._channels[recv.attrs.get("channel_id", 0)]
        if not queue:
            raise ExecutionError("recv-done has no matching send on this device: the "
                                 "program would deadlock", instruction=describe(instr))
        return queue.popleft()

    # ---- feeds -----------------------------------------------------------------------
    def infeed(self, instr):
        if self.feeds is not None:
            return self.feeds.infeed(instr)
        shape = instr.shape.tuple_shapes[0]
        if shape.is_tuple and not shape.tuple_shapes:
            return ()  # an empty-tuple infeed consumes nothing (E.22a)
        try:
            item = next(self._infeed)
        except StopIteration:
            raise ExecutionError(f"the infeed queue is empty: this infeed wants item "
                                 f"#{self._infeed_taken} ({shape}); pass more items",
                                 instruction=describe(instr)) from None
        self._infeed_taken += 1
        return self._conform(instr, item, shape, f"infeed item #{self._infeed_taken - 1}")

    def outfeed(self, instr, data):
        if self.feeds is not None:
            return self.feeds.outfeed(instr, data)
        self.outfeed_values.append(data)

    def _conform(self, instr, item, shape: Shape, what: str):
        """item as a value of `shape`; exact dtype (bf16 also from uint16 bits) and dims."""
        if shape.is_tuple:
            if not isinstance(item, (tuple, list)) or len(item) != len(shape.tuple_shapes):
                raise ExecutionError(f"{what} must be a tuple of {len(shape.tuple_shapes)} "
                                     f"arrays for {shape}", instruction=describe(instr))
            return tuple(self._conform(instr, v, s, f"{what}[{i}]")
                         for i, (v, s) in enumerate(zip(item, shape.tuple_shapes)))
        if shape.is_token:
            return TOKEN
        a = np.asarray(item)
        if shape.element_type.name == "bf16" and a.dtype == np.uint16:
            a = a.view(shape.dtype)
        if a.dtype != shape.dtype or a.shape != tuple(shape.dims):
            raise ExecutionError(f"{what} is {a.dtype}{list(a.shape)}, expected {shape}",
                                 instruction=describe(instr))
        return a
