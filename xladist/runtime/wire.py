"""Frames on a TCP (or Unix) stream: what the coordination service, the feeds and the host
transfers say to each other (docs/ARCHITECTURE.md "The coordination service").

A frame is a 13-byte header -- kind (u8), JSON length (u32), payload length (u64), little
endian -- then a JSON object, then the payload. The payload is either raw bytes (the JSON
says `"blob": true`) or arrays: the JSON's `"leaves": [[dtype name, dims], ...]` describes
them and their bytes follow back to back in C order. Arrays travel in little-endian byte
order: a host of the other order is refused when it says hello (`check_byte_order`), so
neither end ever converts. Nothing on the wire is pickled: the service never runs code a
peer sent.

Every wait here has a deadline when the caller gives one (`timeout`): sending uses
non-blocking sends (waiting in `select` only while the peer's buffer is full) and fails
when the peer takes nothing for that long;
receiving uses the socket's own timeout. A peer that died is an
end-of-stream (or a connection error) as soon as its host's kernel closed the socket.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import sys
import time

import ml_dtypes  # noqa: F401 -- registers bfloat16, float8_*, ... as numpy type names
import numpy as np

from xladist.io import byte_view

_HEADER = struct.Struct("<BIQ")
HEADER_SIZE = _HEADER.size
# Kinds. HELLO opens every connection; ITEM / END / FAIL are feed items (feeds/host.py);
# MSG is a JSON message of the coordination service (its "op" says which).
HELLO, ITEM, END, FAIL, MSG = 1, 2, 3, 4, 5
_SMALL = 1 << 16       # frames up to this size go out in one send
CHUNK = 1 << 22        # payloads are copied in pieces of this size, never whole


class PeerGone(ConnectionError):
    """The other end closed the connection or stopped answering within the deadline."""


class PeerSilent(PeerGone):
    """The other end took or sent nothing within the deadline (it may still be there)."""


def check_byte_order() -> None:
    if sys.byteorder != "little":
        raise RuntimeError("xladist sends arrays in little-endian byte order; this host is "
                           f"{sys.byteorder}-endian")


def dtype_of(name: str) -> np.dtype:
    return np.dtype(name)


class Streamed:
    """An array whose bytes come in pieces from elsewhere (a row of an npz file on disk):
    sent without ever being whole in memory."""

    def __init__(self, dtype, shape, pieces):
        self.dtype, self.shape, self.pieces = np.dtype(dtype), tuple(shape), pieces
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def leaves_meta(arrays) -> list:
    return [[a.dtype.name, list(a.shape)] for a in arrays]


def leaf_nbytes(leaf) -> int:
    """The bytes on the stream of one array described as in `leaves` ([dtype, dims])."""
    name, dims = leaf
    return int(np.prod(dims, dtype=np.int64)) * dtype_of(name).itemsize


def _views(arrays) -> list:
    return [a if isinstance(a, Streamed) else byte_view(np.ascontiguousarray(a))
            for a in arrays]


# ---- sending ---------------------------------------------------------------------------------
def _send_all(sock, data, timeout: float | None) -> None:
    """Send all of `data`; PeerGone when the peer takes nothing for `timeout` seconds (a
    deadline on progress, so a big array over a slow link is fine, a stuck peer is not)."""
    if timeout is None:
        sock.sendall(data)
        return
    view = memoryview(data).cast("B")
    deadline = None
    while view.nbytes:
        try:  # first without waiting: a small message nearly always fits at once
            sent = sock.send(view[:CHUNK], socket.MSG_DONTWAIT)
        except BlockingIOError:  # the peer's buffer is full: wait until it takes some
            now = time.monotonic()
            deadline = deadline or now + timeout
            if now >= deadline:
                raise PeerSilent(f"the peer took no data for {timeout:g} s") from None
            select.select([], [sock], [], deadline - now)
            continue
        view = view[sent:]
        deadline = None  # progress: the deadline starts again at the next full buffer


def send(sock, kind: int, meta: dict, arrays=(), blob: bytes | None = None, *,
         timeout: float | None = None) -> None:
    """One frame: `meta` as JSON, then `arrays` (described in meta["leaves"]) or `blob`."""
    meta = dict(meta)
    if blob is not None:
        bufs = [memoryview(blob).cast("B")]
        meta["blob"] = True
    else:
        bufs = _views(arrays)
        if bufs:
            meta["leaves"] = leaves_meta(arrays)
    text = json.dumps(meta, separators=(",", ":")).encode()
    size = sum(b.nbytes for b in bufs)
    head = _HEADER.pack(kind, len(text), size)
    if size <= _SMALL and not any(isinstance(b, Streamed) for b in bufs):
        _send_all(sock, b"".join([head, text, *bufs]), timeout)
        return
    _send_all(sock, head + text, timeout)
    for b in bufs:
        if isinstance(b, Streamed):
            sent = 0
            for piece in b.pieces:
                _send_all(sock, piece, timeout)
                sent += len(piece)
            if sent != b.nbytes:
                raise PeerGone(f"an array's source gave {sent} of {b.nbytes} bytes")
        else:
            _send_all(sock, b, timeout)


def send_msg(sock, op: str, timeout: float | None = None, arrays=(), blob=None, **fields):
    send(sock, MSG, {"op": op, **fields}, arrays, blob, timeout=timeout)


# ---- receiving -------------------------------------------------------------------------------
def _recv_into(sock, view: memoryview) -> None:
    got = 0
    while got < view.nbytes:
        try:
            k = sock.recv_into(view[got:got + CHUNK])
        except TimeoutError:
            raise PeerSilent("the peer sent nothing within the deadline") from None
        if k == 0:
            raise PeerGone(f"the stream ended inside a frame ({got} of {view.nbytes} bytes)")
        got += k


def recv_header(sock):
    """(kind, meta, payload bytes) of the next frame -- the payload still on the stream --
    or None at a clean end of stream."""
    head = bytearray(HEADER_SIZE)
    view = memoryview(head)
    try:
        k = sock.recv_into(view)
    except TimeoutError:
        raise PeerSilent("the peer sent nothing within the deadline") from None
    if k == 0:
        return None
    if k < HEADER_SIZE:
        _recv_into(sock, view[k:])
    kind, meta_len, size = _HEADER.unpack(head)
    raw = bytearray(meta_len)
    _recv_into(sock, memoryview(raw))
    meta = json.loads(raw) if meta_len else {}
    return kind, meta, size


def recv_payload(sock, meta: dict, size: int):
    """The payload announced by recv_header: a list of fresh arrays, bytes, or None."""
    if "leaves" in meta:
        out = []
        for name, dims in meta["leaves"]:
            a = np.empty(dims, dtype_of(name))
            _recv_into(sock, byte_view(a))
            out.append(a)
        return out
    if size:
        data = bytearray(size)
        _recv_into(sock, memoryview(data))
        return bytes(data)
    return None


def copy_payload(sock, size: int, write) -> None:
    """Stream the next `size` payload bytes to `write(memoryview)` in CHUNK pieces (an
    output's bytes go to disk without ever being whole in memory)."""
    buf = bytearray(min(size, CHUNK))
    view = memoryview(buf)
    left = size
    while left:
        piece = view[:min(left, CHUNK)]
        _recv_into(sock, piece)
        write(piece)
        left -= piece.nbytes


def recv(sock):
    """(kind, meta, payload) of the next frame, or None at a clean end of stream."""
    got = recv_header(sock)
    if got is None:
        return None
    kind, meta, size = got
    return kind, meta, recv_payload(sock, meta, size)


def close(sock) -> None:
    """Shut a connection down both ways (a thread blocked reading it wakes) and close it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def connect(address: str, timeout: float, refused_is_final: bool = False):
    """A TCP connection to "host:port" (or a Unix socket path), giving up after `timeout`
    seconds of refused or unanswered attempts (the service may still be starting).
    `refused_is_final`: the listener was up before this process learnt its address, so a
    refusal means it has gone (its process died): raise at once."""
    end = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            if ":" in address and not address.startswith("/"):
                host, port = address.rsplit(":", 1)
                sock = socket.create_connection((host, int(port)),
                                                timeout=max(0.1, end - time.monotonic()))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            else:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(max(0.1, end - time.monotonic()))
                sock.connect(address)
            return sock
        except OSError as e:
            if time.monotonic() + delay >= end or refused_is_final and isinstance(
                    e, (ConnectionRefusedError, FileNotFoundError)):
                raise
            if isinstance(e, socket.gaierror) and e.errno == socket.EAI_NONAME:
                raise  # a name this host does not know: waiting does not teach it
            time.sleep(delay)  # refused: the listener is not up yet; try again shortly
            delay = min(delay * 2, 1.0)
