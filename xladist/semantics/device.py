"""The backends' window onto other devices and the host: the `DeviceContext` interface.

Ops that need another device or the host (collectives, send/recv, infeed/outfeed,
replica-id, partition-id) call a DeviceContext, in both backends (the interpreter's
device_ops.py, the cpu backend's compiler/devices.py). `SingleDeviceContext`
(single_device.py) implements it for one device (collectives over a group of one, ids 0);
the MPI runtime provides the real one (xladist/runtime/mpi_context.py). It sits in the
semantics layer, below both backends and the runtime, because its contract is stated in
values (values.py) and both sides of it -- the backends calling, the runtime
implementing -- must agree on them.
"""

from __future__ import annotations

from typing import Any


class DeviceContext:
    """Interface; every method receives the instruction for error messages and attributes.

    Contract both backends rely on (interpreter/device_ops.py and compiler/devices.py call
    these):
    - `collective(instr, args, reducer)` returns the value of the collective's result:
      instr.shape for the sync ops (a tuple for variadic/tuple forms); for a `*-start`
      instr (the default collective_start calls collective with it) the result part of the
      start's shape (tuple element 1 for all-gather-start / collective-permute-start). The
      base opcode is `instr.opcode.removesuffix("-start")`. A generic async-start wrapping a
      collective runs the wrapped computation, so the sync op reaches `collective`.
    - `reducer` is an interpreter/device_ops.Reducer: `reducer(a, b)` applies to_apply
      element-wise and `reducer.computation` is the HLO computation (for mapping onto MPI
      builtin ops).
    - `collective_start` / `send` / `recv` return opaque handles; the backend keeps them
      (the interpreter in device_ops.Pending slots) and passes them back to collective_done / send_done /
      recv_done with the *done* instruction: a send-done / recv-done, or for sends and recvs
      grouped in one async computation (xladist/hlo/async_groups.py) the async-done, once per
      transfer of the group (whose shape is the group's: take shapes from the handle).
    - `recv_done` returns the data (recv's shape element 0); `infeed` returns the data part
      (infeed's shape element 0).
    - Raise xladist.errors.ExecutionError on failure; the evaluator adds the rank (from an
      optional `rank` attribute), replica, partition and the instruction.
    """

    replica_id: int = 0
    partition_id: int = 0
    replica_count: int = 1
    num_partitions: int = 1

    # Synchronous collectives: all-reduce, all-gather, reduce-scatter, all-to-all,
    # collective-permute, collective-broadcast, ragged-all-to-all.
    # `reducer(a, b)` is the to_apply computation applied element-wise to arrays
    # (None for collectives without one).
    def collective(self, instr, args: list, reducer=None) -> Any:
        raise NotImplementedError

    # Async forms: *-start returns an opaque handle that *-done turns into the result.
    def collective_start(self, instr, args: list, reducer=None) -> Any:
        return ("done", self.collective(instr, args, reducer))

    def collective_done(self, instr, handle) -> Any:
        return handle[1]

    # Channels: send(data) -> handle; send_done(handle); recv() -> handle;
    # recv_done(handle) -> data.
    def send(self, instr, data) -> Any:
        raise NotImplementedError

    def send_done(self, instr, handle) -> None:
        raise NotImplementedError

    def recv(self, instr) -> Any:
        raise NotImplementedError

    def recv_done(self, instr, handle) -> Any:
        raise NotImplementedError

    def infeed(self, instr) -> Any:
        """The next item of this device's infeed, matching instr.shape's data part."""
        raise NotImplementedError

    def outfeed(self, instr, data) -> None:
        raise NotImplementedError
