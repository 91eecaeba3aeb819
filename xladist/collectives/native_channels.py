"""Send/recv channels as native code calls them (xladist/compiler/native/channels.py: a
while loop's driver), like native_ops.py does for the collectives.

The Python path (p2p.py Channels) starts a transfer with ``Issend`` / ``Irecv`` on the
channels' own communicator, tag = the number of its pairing stream (p2p.py), and its done
waits the request.  A native loop makes the same calls with the same communicator, peers
and tag, so a native rank and a Python rank pair up exactly as two Python ranks do, and the
bytes moved are the same:

  start (send)   MPI_Issend(data, nbytes, MPI_BYTE, dest, tag, comm, &request)
  start (recv)   MPI_Irecv(result, nbytes, MPI_BYTE, source, tag, comm, &request), the
                 result cleared to zeros first when no pair targets this device (21a)
  done           MPI_Wait(&request, &status); a recv-done then checks with MPI_Get_count
                 that the peer sent exactly nbytes (p2p.py's "the two ends disagree")

A missing peer is MPI_PROC_NULL: such a transfer completes at once, as p2p.py's does.  The
request, status and count cells live in one buffer per start instruction, shared by its
start and done descriptors (``Transfer``); the driver only holds their addresses.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from xladist.compiler.native.channels import GOT_FAILED  # a recv-done's wrong byte count

from . import native_ops

__all__ = ["NativeChannelDone", "NativeChannelStart", "Transfer", "transfer"]


class Transfer:
    """The memory one start/done pair shares: request, status, received byte count."""

    def __init__(self, status_size: int):
        self.request = ctypes.create_string_buffer(16)   # MPI_Request: int or pointer
        self.status = ctypes.create_string_buffer(max(status_size, 64))
        self.got = ctypes.c_int32(0)


@dataclass(frozen=True)
class NativeChannelStart(native_ops._NativeCall):
    """``fn(buf, count, datatype, peer, tag, comm, request)``: MPI_Issend for a send, MPI_Irecv
    for a recv (``zero``: nobody sends to this device, its result is cleared instead)."""

    fn: int
    count: int
    datatype: int
    peer: int
    tag: int
    comm: int
    request: int
    zero: bool
    label: str
    where: object
    call: str = "MPI_Issend"
    keep: object = None


@dataclass(frozen=True)
class NativeChannelDone(native_ops._NativeCall):
    """``MPI_Wait(request, status)``; for a recv-done with a peer (``check``) then
    ``MPI_Get_count(status, datatype, got)`` must give ``count``."""

    fn: int
    request: int
    status: int
    get_count: int
    datatype: int
    got: int
    count: int
    check: bool
    label: str
    where: object
    call: str = "MPI_Wait"
    keep: object = None
    mismatch: object = None  # got bytes -> the message p2p.py raises for a wrong size

    def error_text(self, code: int) -> str:
        if code == GOT_FAILED and self.mismatch is not None:
            return self.mismatch(self.keep.got.value)
        return native_ops._NativeCall.error_text(code)


def transfer(mpi_comm, shared: Transfer, *, send: bool, nbytes: int, peer: int | None,
             tag: int, start_label: str, done_label: str, where, mismatch):
    """(start, done) descriptors of one transfer on the mpi4py communicator ``mpi_comm``, or
    None when native code cannot make the calls."""
    from mpi4py import MPI
    if not native_ops.available() or nbytes >= 1 << 31:
        return None
    byte = native_ops.handle(MPI.BYTE)
    null = MPI.PROC_NULL
    start = NativeChannelStart(
        native_ops.function_address("MPI_Issend" if send else "MPI_Irecv"), nbytes, byte,
        (null if peer is None else peer) & 0xFFFFFFFFFFFFFFFF, tag,
        native_ops.handle(mpi_comm), ctypes.addressof(shared.request),
        not send and peer is None, start_label, where,
        "MPI_Issend" if send else "MPI_Irecv", shared)
    done = NativeChannelDone(
        native_ops.function_address("MPI_Wait"), ctypes.addressof(shared.request),
        ctypes.addressof(shared.status), native_ops.function_address("MPI_Get_count"), byte,
        ctypes.addressof(shared.got), nbytes, not send and peer is not None, done_label,
        where, "MPI_Wait", shared, mismatch)
    return start, done
