"""Send/recv channels over MPI (docs/reference/collective-semantics.md D.18-21b).

``send(data, token)`` / ``recv(token)`` start a transfer and return at once; ``send-done`` /
``recv-done`` wait for it.  :class:`Channels` is the ``channels`` component of one rank's
``MpiDeviceContext``:

* peers come from the ``_xla_send_recv_source_target_pairs`` frontend attribute, one pair list
  per channel, read by :func:`send_recv_pairs` (shared with the static check): partition ids
  inside every replica, or replica ids when the module has one partition;
* which send pairs with which recv is `SendRecvStreams` (xladist/hlo/collective_groups.py,
  shared with the scheduler and the static check): by channel_id where the module has both
  ends on that channel, else by peers and program order as XLA does (its pipeliner puts the
  sends of one transfer on one channel and the recvs on another). The MPI tag is the
  stream's number, on a communicator used for nothing else, so two streams never take each
  other's messages; MPI's non-overtaking rule pairs the k-th send with the k-th recv of one
  (stream, source, target);
* channels are unbuffered (D.20): a send uses ``Issend``, so send-done returns only once the
  peer has posted the matching recv -- the run-time behaviour the static check proves;
* an end that no pair names completes at once; such a recv yields zeros (21a);
* the handle returned by send/recv carries everything its done needs, so pipelined transfers
  (``_xla_send_recv_pipeline``: the op in iteration i, its done in iteration i+1, the handle in
  the loop state) need nothing else;
* ``is_host_transfer=true`` ends talk to the host instead: ``host.host_send(rank, channel_id,
  array)`` at the send, ``host.host_recv(rank, channel_id) -> array`` at the recv-done.

Every wait runs under the process deadline (xladist.collectives.deadline), labelled with the done
instruction, the channel and the peer.  Importing this module does not import mpi4py.
"""

from __future__ import annotations

import numpy as np

from xladist.errors import ExecutionError

from . import deadline as _deadline
from ._common import contiguous
from xladist.hlo.collective_groups import GroupError, SendRecvStreams, required_send_recv_pairs

__all__ = ["Channels"]

def _leaf_shapes(shape) -> list:
    return [s for _, s in shape.leaves() if s.is_array]


def _pack(shape, it):
    """Rebuild a value of `shape` from its array leaves (tokens for token leaves)."""
    if shape.is_tuple:
        return tuple(_pack(s, it) for s in shape.tuple_shapes)
    if shape.is_array:
        return next(it)
    from xladist.semantics.values import TOKEN
    return TOKEN


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        out = []
        for v in value:
            out.extend(_flatten(v))
        return out
    return [value] if isinstance(value, np.ndarray) else []


class _Peer:
    """The ``where`` of a channel wait: str() for messages; ``devices`` and ``p2p`` for the
    job report (xladist.runtime.watchdog), which names the peer that never arrived."""

    __slots__ = ("channel", "devices", "direction", "p2p")

    def __init__(self, me: int, peer: int, channel, direction: str):
        self.devices = [me, peer]
        self.channel = channel
        self.direction = direction
        self.p2p = True

    def __str__(self) -> str:
        return f"{_channel_words(self.channel)}{self.direction} device {self.devices[1]}"


def _channel_words(channel) -> str:
    """"channel 3 " -- or nothing for a send/recv without channel_id (XLA pairs those by
    their source-target pairs: "channel None" named nothing)."""
    return "" if channel is None else f"channel {channel} "


class _Plan:
    __slots__ = ("channel", "dest", "peer_device", "source", "tag")

    def __init__(self, tag, channel, dest, source, peer_device):
        self.tag = tag            # the MPI tag: the pairing stream's number
        self.channel = channel    # the channel_id, for messages
        self.dest = dest          # world rank to send to, or None
        self.source = source      # world rank to receive from, or None
        self.peer_device = peer_device


class _Transfer:
    """A started transfer; the done op waits it."""

    __slots__ = ("channel", "keep", "op", "peer", "reqs", "shape", "value")

    def __init__(self, op, reqs=(), keep=None, shape=None, value=None, peer=None, channel=None):
        self.op = op            # the send/recv instruction
        self.reqs = list(reqs)
        self.keep = keep        # send: the arrays MPI reads; recv: the buffers it fills
        self.shape = shape      # recv: the data shape
        self.value = value      # the result once complete (recv), or a ready value
        self.peer = peer        # _Peer, or None when no pair names this end
        self.channel = channel


def _size_mismatch(peer_device, got: int, channel, shape, nbytes: int) -> str:
    where = "" if channel is None else f" on channel {channel}"
    return (f"device {peer_device} sent {got} bytes{where}, but this recv "
            f"expects {shape.to_text(layout=False)} ({nbytes} bytes): the two ends disagree "
            "on the shape")


class Channels:
    """Send/recv for one rank; see the module docstring.

    ``comm``: an mpi4py intracommunicator over all ranks that nothing else uses (a Dup of the
    world), ``placement``: this rank's xladist.runtime.device.Placement, ``rank_of``: device id ->
    rank in ``comm`` (default: the same number), ``host``: an object with ``host_send`` and
    ``host_recv`` for host transfers (None: a host transfer is an error).
    """

    def __init__(self, comm, placement, *, rank_of=None, host=None):
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self.placement = placement
        self.rank_of = rank_of or (lambda d: d)
        self.host = host
        self.tag_ub = int(MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767)
        self._plans: dict[object, _Plan] = {}
        self._streams: dict[int, SendRecvStreams] = {}   # id(module) -> its pairing rule
        self._native: dict[object, object] = {}  # start instruction -> native (start, done)
        self._wd = _deadline.watchdog

    def close(self) -> None:
        """Free the communicator (every rank calls it, after its last transfer)."""
        if self.comm is not None:
            self.comm.Free()
            self.comm = None

    # ---- errors and plans ----------------------------------------------------------------
    def _error(self, instr, message: str) -> ExecutionError:
        p = self.placement
        return ExecutionError(message, rank=p.rank, replica=p.replica, partition=p.partition,
                              instruction=f"{instr.name} (line {instr.line})")

    def _plan(self, instr) -> _Plan:
        plan = self._plans.get(instr)
        if plan is not None:
            return plan
        p = self.placement
        channel = instr.attrs.get("channel_id")
        tag = self._stream_tag(instr)
        if not 0 <= tag <= self.tag_ub:
            raise self._error(instr, f"the module pairs sends and recvs on more channels than "
                                     f"MPI has tags (0..{self.tag_ub})")
        try:
            pairs = required_send_recv_pairs(instr, p.replica_count, p.num_partitions,
                                             p.assignment)
        except GroupError as e:
            raise self._error(instr, str(e)) from None
        me = p.device
        dest = next((t for s, t in pairs if s == me), None)
        source = next((s for s, t in pairs if t == me), None)
        peer = dest if instr.opcode == "send" else source
        plan = _Plan(tag, channel, None if dest is None else self.rank_of(dest),
                     None if source is None else self.rank_of(source), peer)
        self._plans[instr] = plan
        return plan

    def _stream_tag(self, instr) -> int:
        module = instr.parent.module if instr.parent is not None else None
        streams = self._streams.get(id(module))
        if streams is None:
            streams = self._streams[id(module)] = SendRecvStreams(module)
        return streams.tag(instr)

    def _wait(self, done, handle: _Transfer, statuses=None) -> None:
        label = f"{done.name} (line {done.line})"
        token = self._wd.begin(label, handle.peer)
        try:
            if statuses is None:
                self._MPI.Request.Waitall(handle.reqs)
            else:
                self._MPI.Request.Waitall(handle.reqs, statuses)
        except self._MPI.Exception as e:
            raise self._error(done, f"{done.opcode} on {handle.peer} failed in MPI: "
                                    f"{e.Get_error_string()}") from None
        finally:
            self._wd.end(token)
        handle.reqs = []

    # ---- the four ops ------------------------------------------------------------------------
    def send(self, instr, data) -> _Transfer:
        if instr.attrs.get("is_host_transfer", False):
            return self._host_send(instr, data)
        plan = self._plan(instr)
        if plan.dest is None:
            return _Transfer(instr)  # no pair sources this device: done at once (21a)
        leaves = [contiguous(np.asarray(a)) for a in _flatten(data)]
        BYTE = self._MPI.BYTE
        reqs = [self.comm.Issend([a, BYTE], plan.dest, plan.tag) for a in leaves]
        peer = _Peer(self.placement.device, plan.peer_device, plan.channel, "to")
        return _Transfer(instr, reqs, keep=leaves, peer=peer, channel=plan.channel)

    def send_done(self, instr, handle: _Transfer) -> None:
        if handle.reqs:
            self._wait(instr, handle)
        handle.keep = None

    def recv(self, instr) -> _Transfer:
        shape = instr.shape.tuple_shapes[0]
        if instr.attrs.get("is_host_transfer", False):
            return _Transfer(instr, shape=shape, channel=instr.attrs.get("channel_id"))
        plan = self._plan(instr)
        if plan.source is None:
            # No pair targets this device: zeros at once (21a).
            from xladist.semantics.values import zeros_value
            return _Transfer(instr, shape=shape, value=zeros_value(shape))
        bufs = [np.empty(tuple(s.dims), s.dtype) for s in _leaf_shapes(shape)]
        BYTE = self._MPI.BYTE
        reqs = [self.comm.Irecv([b, BYTE], plan.source, plan.tag) for b in bufs]
        peer = _Peer(self.placement.device, plan.peer_device, plan.channel, "from")
        return _Transfer(instr, reqs, keep=bufs, shape=shape, peer=peer, channel=plan.channel)

    def recv_done(self, instr, handle: _Transfer):
        if handle.value is not None:
            return handle.value
        if handle.peer is None:  # a host transfer: ask the host now that the data is needed
            handle.value = self._host_recv(instr, handle)
            return handle.value
        statuses = [self._MPI.Status() for _ in handle.reqs]
        self._wait(instr, handle, statuses)
        BYTE = self._MPI.BYTE
        for st, buf in zip(statuses, handle.keep):
            got = st.Get_count(BYTE)
            if got != buf.nbytes:
                raise self._error(instr, _size_mismatch(handle.peer.devices[1], got,
                                                        handle.channel, handle.shape,
                                                        buf.nbytes))
        handle.value = _pack(handle.shape, iter(handle.keep))
        handle.keep = None
        return handle.value

    # ---- native loops ------------------------------------------------------------------------
    def native_transfer(self, start, done):
        """(start, done) descriptors of a device-to-device send or recv whose done runs in
        the same iteration of a native while loop (xladist/collectives/native_channels.py), or None:
        a host transfer, an invalid channel (the Python path reports it), data that is not one
        array in the default layout (the wire carries logical bytes)."""
        if start in self._native:
            return self._native[start]
        self._native[start] = None
        if start.attrs.get("is_host_transfer", False) or self.comm is None:
            return None
        send = start.opcode == "send"
        shape = start.operands[0].shape if send else start.shape.tuple_shapes[0]
        if not shape.is_array or not shape.has_default_layout() or \
                shape.nbytes != shape.size * shape.dtype.itemsize:
            return None
        try:
            plan = self._plan(start)
        except ExecutionError:
            return None
        from . import native_channels
        peer = plan.dest if send else plan.source
        where = None if peer is None else _Peer(self.placement.device, plan.peer_device,
                                                plan.channel, "to" if send else "from")

        def mismatch(got):
            return _size_mismatch(plan.peer_device, got, plan.channel, shape, shape.nbytes)
        pair = native_channels.transfer(
            self.comm, native_channels.Transfer(self._MPI._sizeof(self._MPI.Status)),
            send=send, nbytes=shape.nbytes, peer=peer, tag=plan.tag,
            start_label=f"{start.name} (line {start.line})",
            done_label=f"{done.name} (line {done.line})", where=where, mismatch=mismatch)
        self._native[start] = pair
        return pair

    # ---- host transfers ----------------------------------------------------------------------
    def _need_host(self, instr, fn: str):
        if self.host is None or getattr(self.host, fn, None) is None:
            what = "send to" if fn == "host_send" else "receive from"
            raise self._error(instr, f"{instr.opcode} is a host transfer (is_host_transfer=true) "
                                     f"on channel {instr.attrs.get('channel_id')}, but this run "
                                     f"has no host to {what}: pass {fn}= to xladist.run or "
                                     f"--{fn.replace('_', '-')} to xladist run")
        return getattr(self.host, fn)

    def _host_send(self, instr, data) -> _Transfer:
        fn = self._need_host(instr, "host_send")
        channel = instr.attrs.get("channel_id")
        value = data if isinstance(data, tuple) else np.array(data, copy=True)
        with _deadline.waiting(f"{instr.name} (line {instr.line}) handing channel {channel} "
                               "data to the host"):
            try:
                fn(self.placement.rank, channel, value)
            except ExecutionError:
                raise
            except Exception as e:  # noqa: BLE001 -- the user's callback: report where it ran
                raise self._error(instr, f"host_send callback failed on channel {channel}: "
                                         f"{type(e).__name__}: {e}") from None
        return _Transfer(instr)

    def _host_recv(self, instr, handle: _Transfer):
        fn = self._need_host(instr, "host_recv")
        channel = handle.channel
        with _deadline.waiting(f"{instr.name} (line {instr.line}) waiting for channel "
                               f"{channel} data from the host"):
            try:
                value = fn(self.placement.rank, channel)
            except ExecutionError:
                raise
            except Exception as e:  # noqa: BLE001 -- the user's callback: report where it ran
                raise self._error(instr, f"host_recv callback failed on channel {channel}: "
                                         f"{type(e).__name__}: {e}") from None
        return self._conform(instr, value, handle.shape, channel)

    def _conform(self, instr, value, shape, channel):
        """The host's value as `shape` exactly (bf16 also from uint16 bit patterns)."""
        if shape.is_tuple:
            if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
                raise self._error(instr, f"the host gave {type(value).__name__} for channel "
                                         f"{channel}, expected a tuple {shape}")
            return tuple(self._conform(instr, v, s, channel)
                         for v, s in zip(value, shape.tuple_shapes))
        if not shape.is_array:
            return _pack(shape, iter(()))
        a = np.asarray(value)
        if shape.element_type.name == "bf16" and a.dtype == np.uint16:
            a = a.view(shape.dtype)
        if a.dtype != shape.dtype or a.shape != tuple(shape.dims):
            raise self._error(instr, f"the host gave a {a.dtype} array of dims {list(a.shape)} "
                                     f"for channel {channel}, expected "
                                     f"{shape.to_text(layout=False)} ({shape.dtype})")
        return np.array(a, copy=True)
