"""`MpiDeviceContext`: the DeviceContext of one rank in an MPI job.

Both backends (interpreter and cpu) call this for every op that needs another device
or the host. When the executable is loaded, `prepare()` walks the whole module once,
expands every collective's replica groups into device groups (xladist/hlo/collective_groups.py)
and creates the sub-communicators collectively, in text order, on every rank — never
per call. Each collective instruction gets a `_Plan` (its communicator, this device's
position, dimension, peers) so running it is one dictionary lookup and one MPI call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from xladist.collectives.all_gather import all_gather, all_gather_native, all_gather_start
from xladist.collectives.all_reduce import all_reduce, all_reduce_bound, all_reduce_native, all_reduce_start
from xladist.collectives.all_to_all import all_to_all, all_to_all_start
from xladist.collectives.broadcast import collective_broadcast, collective_broadcast_start
from xladist.collectives.communicator import Communicator
from xladist.collectives.communicator_cache import CommunicatorCache
from xladist.hlo.collective_groups import GroupError, collective_permute_pairs, instruction_device_groups
from xladist.collectives.permute import (
    collective_permute,
    collective_permute_native,
    collective_permute_start,
    peers,
)
from xladist.collectives.ragged_all_to_all import ragged_all_to_all
from xladist.collectives.reduce_scatter import reduce_scatter, reduce_scatter_start
from xladist.collectives.reduction import AND, MAX, MIN, OR, PROD, SUM, XOR, Reducer
from xladist.environment import signatures
from xladist.errors import ExecutionError, VerifierError
from xladist.semantics.device import DeviceContext

from .device import Placement
from .signatures import disagreement, native_agreement

# Opcodes (after stripping -start) that this context plans at load.
_COLLECTIVES = frozenset({"all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                          "collective-broadcast", "ragged-all-to-all", "collective-permute"})

# Root opcode of a to_apply computation -> builtin reduction (C.10).
_BUILTIN_REDUCERS = {"add": SUM, "multiply": PROD, "maximum": MAX, "minimum": MIN,
                     "and": AND, "or": OR, "xor": XOR}


def match_reducer(computation) -> Reducer | None:
    """The builtin Reducer a to_apply computation is, or None for any other computation.

    Recognized: exactly two scalar parameters and a root that is one binary op of them.
    """
    params = computation.parameters
    root = computation.root
    if len(params) != 2 or root is None or len(computation.instructions) != 3:
        return None
    if set(root.operands) != set(params) or len(root.operands) != 2:
        return None
    return _BUILTIN_REDUCERS.get(root.opcode)


class _Proxy:
    """A reducer function that forwards to the backend's current one (set per call)."""

    __slots__ = ("target",)

    def __init__(self):
        self.target = None

    def __call__(self, a, b):
        return self.target(a, b)

    def into(self, a, b, out):
        """Reducer.into: the backend's compiled kernel in place when it fits the buffers."""
        target = self.target
        combine = getattr(target, "combine_into", None)
        if combine is None or not combine(a, b, out):
            np.copyto(out, target(a, b), casting="unsafe")


@dataclass
class _Plan:
    run: Callable
    label: str
    comm: Communicator | None = None
    dim: int | None = None
    send_to: int | None = None
    recv_from: int | None = None
    group: tuple[int, ...] = ()
    reducer: tuple[Reducer, _Proxy] | None = field(default=None)
    # (signature, digest) of a collective without dynamic dimensions, once computed
    # (runtime/signatures.py: a run that exchanges them).
    signed: tuple | None = None


def _base(opcode: str) -> str:
    return opcode.removesuffix("-start")


class MpiDeviceContext(DeviceContext):
    """One device of a multi-device run; see the module docstring."""

    def __init__(self, module, placement: Placement, cache: CommunicatorCache, *,
                 feeds=None, channels=None, proven: bool = False):
        self.module = module
        self.placement = placement
        self.replica_id = placement.replica
        self.partition_id = placement.partition
        self.replica_count = placement.replica_count
        self.num_partitions = placement.num_partitions
        self.rank = placement.rank
        self.cache = cache
        self.feeds = feeds
        self.channels = channels
        self.plans: dict[object, _Plan] = {}
        # A run the deadlock check did not prove exchanges each collective's signature first
        # (xladist/runtime/signatures.py; native loops natively: native_agreement).
        when = signatures()
        self.agree = when == "always" or (when == "unproven" and not proven)

    # ---- loading ---------------------------------------------------------------------
    def prepare(self) -> None:
        """Plan every collective and create its communicators (collective over all ranks)."""
        todo = []
        for comp in self.module.computations:
            for instr in comp.instructions:
                base = _base(instr.opcode)
                if base in _COLLECTIVES and not instr.opcode.endswith("-done"):
                    todo.append((instr, base, self._grouping(instr, base)))
        self.cache.prepare([g for _, _, g in todo])
        for instr, base, grouping in todo:
            self.plans[instr] = self._plan(instr, base, grouping)

    def _error(self, instr, message: str) -> ExecutionError:
        p = self.placement
        return ExecutionError(message, rank=p.rank, replica=p.replica, partition=p.partition,
                              instruction=f"{instr.name} (line {instr.line})")

    def _grouping(self, instr, base: str) -> list[list[int]]:
        try:
            return instruction_device_groups(base, instr.attrs, self.placement.assignment)
        except GroupError as e:
            raise VerifierError(str(e), computation=instr.parent.name if instr.parent else None,
                                instruction=instr.name, line=instr.line) from None

    def _plan(self, instr, base: str, grouping) -> _Plan:
        me = self.placement.device
        comm = self.cache.find(grouping)
        group = next((tuple(g) for g in grouping if me in g), ())
        label = f"{instr.name} (line {instr.line}) over devices {list(group)}"
        plan = _Plan(_RUNNERS[base], label, comm, group=group)
        dims = instr.attrs.get("dimensions")
        if dims:
            plan.dim = int(dims[0])
        if base == "collective-permute":
            has_channel = instr.attrs.get("channel_id") is not None
            pairs = collective_permute_pairs(
                [tuple(p) for p in instr.attrs.get("source_target_pairs", ())], has_channel,
                self.replica_count, self.num_partitions, self.placement.assignment)
            send_to, recv_from = peers(pairs, me)
            # Communicator ranks follow the group's member order.
            plan.send_to = group.index(send_to) if send_to is not None else None
            plan.recv_from = group.index(recv_from) if recv_from is not None else None
        return plan

    # ---- reducers --------------------------------------------------------------------
    def _reducer(self, plan: _Plan, reducer) -> Reducer:
        """The collectives' Reducer of this instruction's to_apply, decided once per plan.

        A computation that is one builtin op keeps that kind and numpy fn (so MPI's builtin
        ops and the order-free rules of xladist/collectives/reduction.py apply); a compiled backend's
        kernel rides along as ``into``, which MPI user-defined ops run on whole buffers.
        """
        if reducer is None:
            return SUM
        # The compiled kernel as a native MPI_User_function (compiler/native/collectives.py).
        native = getattr(reducer, "mpi_function", None)
        kernel = getattr(reducer, "kernel_address", None)
        if plan.reducer is None or plan.reducer[0].native != native \
                or plan.reducer[0].kernel != kernel:
            proxy = _Proxy()
            into = proxy.into if hasattr(reducer, "combine_into") else None
            builtin = match_reducer(reducer.computation)
            if builtin is None:
                red = Reducer(None, proxy, reducer.computation.name, into, native, kernel)
            elif into is None:
                red = builtin
            else:
                red = Reducer(builtin.kind, builtin.fn, builtin.name, into, native, kernel)
            plan.reducer = (red, proxy)
        plan.reducer[1].target = reducer
        return plan.reducer[0]

    # ---- DeviceContext ---------------------------------------------------------------
    def collective(self, instr, args, reducer=None):
        return self._start(instr, args, reducer, start=False)

    def bound_collective(self, instr, reducer=None):
        """``f(operand_bytes) -> result_bytes`` for an all-reduce of one array whose operand
        and result share a layout, with its communicator, MPI op and datatype bound once;
        None for every other collective (those go through `collective`). The cpu backend
        binds this on a collective's first run (compiler/devices.py), so a loop pays one
        MPI call and a result allocation per iteration instead of the generic dispatch."""
        plan = self._single_array_all_reduce(instr)
        if plan is None or self.agree:  # an exchange first: the generic path (_start)
            return None
        dst = instr.shape
        red = self._reducer(plan, reducer)
        nbytes = dst.size * dst.dtype.itemsize
        call = all_reduce_bound(plan.comm, red, dst.dtype, plan.label, nbytes)
        if call is None:
            return None
        result = plan.comm.result
        shape, u8 = (nbytes,), np.dtype(np.uint8)

        def run(src_bytes):
            out = result(shape, u8, src_bytes)  # recycled, placed (Communicator.result)
            call(src_bytes, out)
            return out
        return run

    def _single_array_all_reduce(self, instr) -> _Plan | None:
        """The plan of an all-reduce of one array whose operand and result share a layout
        (what bound_collective and native_all_reduce serve), else None."""
        if instr.opcode != "all-reduce" or len(instr.operands) != 1:
            return None
        src, dst = instr.operands[0].shape, instr.shape
        if not (src.is_array and dst.is_array) or any(dst.dynamic) or any(src.dynamic) or \
                src.to_text() != dst.to_text() or src.size == 0:
            return None
        return self._native_plan(instr, "all-reduce")

    def _native_plan(self, instr, opcode: str) -> _Plan | None:
        """The plan a bound or native-loop call of `instr` runs with, or None (another
        opcode, nothing planned)."""
        plan = self.plans.get(instr)
        if instr.opcode != opcode or plan is None or plan.comm is None:
            return None
        return plan

    def native_agreement(self, instr):
        """What a native loop exchanges before `instr` in a run whose collectives' members
        compare signatures (signatures.NativeAgreement): None when nothing is exchanged,
        False when native code cannot make the exchange (the loop keeps the Python path)."""
        plan = self.plans.get(instr)
        if not self.agree or plan is None or plan.comm is None:
            return None
        return native_agreement(plan, instr, self.placement.device,
                                lambda text: self._error(instr, text))

    def native_all_reduce(self, instr, reducer=None):
        """The all-reduce as a native while loop calls it (compiler/native/collectives.py):
        the MPI_Allreduce address and handles, resolved now; None where only Python can run
        it (the generic path, a reducer kernel without a native MPI function, ...)."""
        plan = self._single_array_all_reduce(instr)
        if plan is None:
            return None
        dst = instr.shape
        red = self._reducer(plan, reducer)
        return all_reduce_native(plan.comm, red, dst.dtype, dst.size * dst.dtype.itemsize,
                                 plan.label)

    def native_collective_permute(self, instr, reducer=None):
        """A collective-permute of one array as a native while loop calls it (one
        MPI_Sendrecv with this device's peers, resolved at load: _plan), or None."""
        plan = self._native_plan(instr, "collective-permute")
        if plan is None:
            return None
        return collective_permute_native(plan.comm, plan.send_to, plan.recv_from,
                                         instr.shape.nbytes, plan.label)

    def native_all_gather(self, instr, reducer=None):
        """An all-gather whose result is the members' operands one after another (the
        compiler checked dimension and layout: native/collectives.py AllGatherStep) as a
        native while loop calls it: one MPI_Allgather, or None."""
        plan = self._native_plan(instr, "all-gather")
        if plan is None:
            return None
        return all_gather_native(plan.comm, instr.operands[0].shape.nbytes, plan.label)

    def native_reduce_scatter(self, instr, reducer=None):
        """A reduce-scatter of one array (the compiler checked dimension and layout:
        compiler/native/exchange.py) as a native while loop calls it: one
        MPI_Reduce_scatter_block with a builtin op, or None."""
        plan = self._native_plan(instr, "reduce-scatter")
        if plan is None:
            return None
        from xladist.collectives.native_exchange import reduce_scatter_native
        return reduce_scatter_native(plan.comm, self._reducer(plan, reducer),
                                     instr.shape.dtype, instr.shape.nbytes, plan.label)

    def native_all_to_all(self, instr, reducer=None):
        """An all-to-all of one array (array form; compiler/native/exchange.py checked
        dimension and layout) as a native while loop calls it: one MPI_Alltoall, or None."""
        plan = self._native_plan(instr, "all-to-all")
        if plan is None:
            return None
        from xladist.collectives.native_exchange import all_to_all_native
        return all_to_all_native(plan.comm, instr.shape.nbytes, plan.label)

    def native_channel(self, start, done):
        """A send or recv and its done as a native while loop calls them (MPI_Issend /
        MPI_Irecv, MPI_Wait: xladist/collectives/native_channels.py), or None (no channels, a host
        transfer, ...: the loop keeps the Python path)."""
        if self.channels is None:
            return None
        return self.channels.native_transfer(start, done)

    def collective_start(self, instr, args, reducer=None):
        return self._start(instr, args, reducer, start=True)

    def collective_done(self, instr, handle):
        try:
            return _as_value(handle.wait())
        except GroupError as e:
            raise self._error(instr, str(e)) from None

    def _start(self, instr, args, reducer, *, start: bool):
        plan = self.plans.get(instr)
        if plan is None:
            raise self._error(instr, f"{instr.opcode} was not planned when the program was "
                                     "loaded (internal error: prepare() missed it)")
        if self.agree:
            problem = disagreement(plan, instr, args, self.placement.device)
            if problem is not None:
                raise self._error(instr, problem)
        try:
            result = plan.run(self, plan, instr, list(args), reducer, start)
        except (ValueError, GroupError) as e:
            raise self._error(instr, str(e)) from None
        return result if start else _as_value(result)

    # Channels and feeds are served by their own components (p2p.py, feeds.py).
    def send(self, instr, data):
        return self._need(self.channels, instr, "channels").send(instr, data)

    def send_done(self, instr, handle):
        return self.channels.send_done(instr, handle)

    def recv(self, instr):
        return self._need(self.channels, instr, "channels").recv(instr)

    def recv_done(self, instr, handle):
        return self.channels.recv_done(instr, handle)

    def infeed(self, instr):
        return self._need(self.feeds, instr, "an infeed source").infeed(instr)

    def outfeed(self, instr, data):
        return self._need(self.feeds, instr, "an outfeed sink").outfeed(instr, data)

    def _need(self, component, instr, what):
        if component is None:
            raise self._error(instr, f"{instr.opcode} needs {what}, and this run has none")
        return component


def _as_value(result):
    """Collective results as interpreter values: lists (variadic forms) become tuples."""
    if isinstance(result, list):
        return tuple(result)
    return result


def _operand(args):
    return args[0] if len(args) == 1 else list(args)


def _run_all_reduce(ctx, plan, instr, args, reducer, start):
    red = ctx._reducer(plan, reducer)
    fn = all_reduce_start if start else all_reduce
    return fn(plan.comm, _operand(args), red, label=plan.label)


def _run_all_gather(ctx, plan, instr, args, reducer, start):
    fn = all_gather_start if start else all_gather
    return fn(plan.comm, _operand(args), plan.dim, label=plan.label)


def _run_reduce_scatter(ctx, plan, instr, args, reducer, start):
    red = ctx._reducer(plan, reducer)
    fn = reduce_scatter_start if start else reduce_scatter
    return fn(plan.comm, _operand(args), red, plan.dim, label=plan.label)


def _run_all_to_all(ctx, plan, instr, args, reducer, start):
    fn = all_to_all_start if start else all_to_all
    if "dimensions" in instr.attrs:
        return fn(plan.comm, args[0], plan.dim, label=plan.label)
    return fn(plan.comm, list(args), None, label=plan.label)


def _run_permute(ctx, plan, instr, args, reducer, start):
    fn = collective_permute_start if start else collective_permute
    return fn(plan.comm, _operand(args), plan.send_to, plan.recv_from, label=plan.label)


def _run_broadcast(ctx, plan, instr, args, reducer, start):
    fn = collective_broadcast_start if start else collective_broadcast
    return fn(plan.comm, _operand(args), label=plan.label)


def _run_ragged(ctx, plan, instr, args, reducer, start):
    # No -start form exists; an async-start wrapper runs it synchronously, so start is False.
    return ragged_all_to_all(plan.comm, *args, label=plan.label)


_RUNNERS = {
    "all-reduce": _run_all_reduce,
    "all-gather": _run_all_gather,
    "reduce-scatter": _run_reduce_scatter,
    "all-to-all": _run_all_to_all,
    "collective-permute": _run_permute,
    "collective-broadcast": _run_broadcast,
    "ragged-all-to-all": _run_ragged,
}

