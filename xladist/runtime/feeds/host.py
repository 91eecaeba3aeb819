"""Python feeds of spawned ranks, hosted by the launching process (see feeds.py).

`xladist.run(..., infeed=lambda rank, replica, partition: ..., outfeed=callback)` from a
plain Python process starts its ranks under mpiexec; the lambda and the callback stay
in the launching process. `FeedHost` listens on a Unix socket in the job folder; every
rank connects once per direction (`SocketSource` for its infeed, `SocketSink` for its
outfeed) and says who it is. The host then runs the rank's iterable in one thread,
sending items as they come, and calls the callback for the rank's outfeed items in
another (one lock serializes the callbacks of all ranks, in each rank's program order).

Wire format, both directions: a 13-byte header (kind u8, JSON length u32, payload length
u64, little-endian), a JSON object, then the leaves' raw bytes back to back (C order,
native byte order: both ends run on this machine). Kinds: HELLO {role, rank, replica,
partition}; ITEM {tree, leaves: [[dtype name, dims], ...]}; END {}; FAIL {text}.

Flow control is the socket itself: sends block while the receiver is behind, so the
host reads a rank's iterable at most a socket buffer plus the rank's prefetch queue
ahead. Deadlines: connecting and saying hello are bounded; a rank's outfeed send is
bounded by the run's deadline; the rank's wait for infeed items is the device side's
deadline (feeds.py). A host thread blocked on a rank that died gets a broken pipe or
end-of-file as soon as mpiexec has taken the rank down.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time

import numpy as np

from xladist.errors import InputError

from .items import from_tree, tree_of

_HEADER = struct.Struct("<BIQ")
HELLO, ITEM, END, FAIL = 1, 2, 3, 4
_SMALL = 1 << 16  # messages up to this size go out in one send
CONNECT_TIMEOUT_S = 60.0


class RemoteSourceError(RuntimeError):
    """The host's infeed source raised; `remote_text` is its `Type: message`."""

    def __init__(self, text: str):
        super().__init__(text)
        self.remote_text = text


# ---- framing --------------------------------------------------------------------------------
def send_message(sock, kind: int, meta: dict, leaves=()) -> None:
    meta_bytes = json.dumps(meta).encode()
    bufs = [memoryview(np.ascontiguousarray(a)).cast("B") for a in leaves]
    size = sum(b.nbytes for b in bufs)
    head = _HEADER.pack(kind, len(meta_bytes), size)
    if size <= _SMALL:
        sock.sendall(b"".join([head, meta_bytes, *bufs]))
        return
    sock.sendall(head + meta_bytes)
    for b in bufs:
        sock.sendall(b)


def _recv_exact(sock, n: int) -> bytes | None:
    """n bytes, or None at a clean end-of-stream before the first byte."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            if got == 0:
                return None
            raise ConnectionError(f"stream ended inside a message ({got} of {n} bytes)")
        got += k
    return bytes(buf)


def _recv_into(sock, array: np.ndarray) -> None:
    view = memoryview(array).cast("B")
    got = 0
    while got < view.nbytes:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("stream ended inside an item")
        got += k


def recv_message(sock):
    """(kind, meta, item or None), or None at end-of-stream."""
    head = _recv_exact(sock, _HEADER.size)
    if head is None:
        return None
    kind, meta_len, _size = _HEADER.unpack(head)
    meta = json.loads(_recv_exact(sock, meta_len) or b"{}") if meta_len else {}
    if kind != ITEM:
        return kind, meta, None
    leaves = []
    for name, dims in meta["leaves"]:
        a = np.empty(dims, np.dtype(name))
        _recv_into(sock, a)
        leaves.append(a)
    return kind, meta, from_tree(meta["tree"], leaves)


def send_item(sock, item) -> None:
    tree, leaves = tree_of(item)
    send_message(sock, ITEM, {"tree": tree,
                              "leaves": [[a.dtype.name, list(a.shape)] for a in leaves]},
                 leaves)


def _connect(path: str, timeout: float):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(path)
    return sock


# ---- rank side --------------------------------------------------------------------------------
class SocketSource:
    """A rank's infeed, produced by the launching process (picklable: only the path)."""

    copies = False  # every item arrives in fresh arrays

    def __init__(self, path: str):
        self.path = path
        self.sock = None

    def describe(self) -> str:
        return "the infeed source"

    def open(self, placement):
        self.sock = _connect(self.path, CONNECT_TIMEOUT_S)
        send_message(self.sock, HELLO, {"role": "in", "rank": placement.rank,
                                        "replica": placement.replica,
                                        "partition": placement.partition})
        self.sock.settimeout(None)  # the device side's queue.get holds the deadline
        return self._items(self.sock)

    @staticmethod
    def _items(sock):
        while True:
            msg = recv_message(sock)
            if msg is None:
                raise ConnectionError("the launching process closed the infeed stream")
            kind, meta, item = msg
            if kind == END:
                return
            if kind == FAIL:
                raise RemoteSourceError(meta.get("text", "?"))
            yield item

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()


class SocketSink:
    """A rank's outfeed, consumed by a callback in the launching process."""

    def __init__(self, path: str, timeout: float | None = None):
        self.path = path
        self.timeout = timeout
        self.sock = None

    def open(self, placement) -> None:
        self.sock = _connect(self.path, CONNECT_TIMEOUT_S)
        send_message(self.sock, HELLO, {"role": "out", "rank": placement.rank,
                                        "replica": placement.replica,
                                        "partition": placement.partition})
        if self.timeout is None:
            from xladist.collectives import deadline
            self.timeout = deadline.watchdog.timeout_s
        self.sock.settimeout(self.timeout or None)

    def write(self, item) -> None:
        try:
            send_item(self.sock, item)
        except TimeoutError:
            raise RuntimeError(f"the outfeed consumer in the launching process took no data "
                               f"for {self.timeout:g} s (the deadline)") from None
        except OSError as e:
            raise RuntimeError(f"the outfeed consumer in the launching process stopped "
                               f"reading ({e.strerror or e}); see its error") from None

    def close(self, *, failed: bool) -> None:
        if self.sock is None:
            return
        try:
            send_message(self.sock, END, {})
        except OSError:
            pass
        self.sock.close()
        self.sock = None


# ---- launching-process side -----------------------------------------------------------------
class FeedHost:
    """Serves the ranks of one spawned job (see the module docstring).

    `errors` collects (rank, "infeed" | "outfeed", exception) for failures of the user's
    iterables and callbacks; `xladist.run` raises the first one after the job.
    """

    def __init__(self, job_dir, infeed=None, outfeed=None):
        self.path = os.path.join(str(job_dir), "feeds.sock")
        self.infeed = infeed      # callable (rank, replica, partition) -> iterable, or list
        self.outfeed = outfeed    # callable (rank, replica, partition, item)
        self.errors: list[tuple[int, str, BaseException]] = []
        self._lock = threading.Lock()
        self._consumers: list[threading.Thread] = []
        self._producers: list[threading.Thread] = []
        self._stop = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(256)
        self.listener.settimeout(0.5)  # wake now and then to notice close()
        self._acceptor = threading.Thread(target=self._accept, daemon=True,
                                          name="xladist-feed-host")
        self._acceptor.start()

    def rank_feeds(self, prefetch: int, timeout: float | None):
        """The picklable Feeds every rank receives."""
        from .pipeline import Feeds
        return Feeds(SocketSource(self.path) if self.infeed is not None else None,
                     SocketSink(self.path, timeout) if self.outfeed is not None else None,
                     prefetch=prefetch, timeout=timeout)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._start(conn)

    def _start(self, conn) -> None:
        conn.settimeout(CONNECT_TIMEOUT_S)
        try:
            msg = recv_message(conn)
        except OSError:
            conn.close()
            return
        if msg is None or msg[0] != HELLO:
            conn.close()
            return
        meta = msg[1]
        who = (meta["rank"], meta["replica"], meta["partition"])
        conn.settimeout(None)
        if meta["role"] == "in":
            t = threading.Thread(target=self._produce, args=(conn, who), daemon=True)
            self._producers.append(t)
        else:
            t = threading.Thread(target=self._consume, args=(conn, who), daemon=True)
            self._consumers.append(t)
        t.start()

    def _produce(self, conn, who) -> None:
        rank = who[0]
        try:
            try:
                if callable(self.infeed):
                    it = iter(self.infeed(*who))
                else:
                    it = iter(list(self.infeed)[rank])
            except BaseException as e:  # noqa: BLE001 - user code: report to the rank
                self._fail(conn, rank, e)
                return
            while True:
                try:
                    item = next(it)
                except StopIteration:
                    send_message(conn, END, {})
                    return
                except BaseException as e:  # noqa: BLE001 - user code
                    self._fail(conn, rank, e)
                    return
                send_item(conn, item)
        except (OSError, ValueError):
            return  # the rank finished or died: it wants no more items
        finally:
            conn.close()

    def _fail(self, conn, rank, error) -> None:
        with self._lock:
            self.errors.append((rank, "infeed", error))
        try:
            send_message(conn, FAIL, {"text": f"{type(error).__name__}: {error}"})
        except OSError:
            pass

    def _consume(self, conn, who) -> None:
        try:
            while True:
                try:
                    msg = recv_message(conn)
                except OSError:
                    return
                if msg is None or msg[0] == END:
                    return
                try:
                    with self._lock:
                        self.outfeed(*who, msg[2])
                except BaseException as e:  # noqa: BLE001 - user code: stop this rank
                    with self._lock:
                        self.errors.append((who[0], "outfeed", e))
                    return
        finally:
            conn.close()

    def close(self, producer_wait: float = 2.0) -> None:
        """After the job: accept what is still queued, deliver every outfeed item, stop."""
        self._stop.set()
        self._acceptor.join()
        self.listener.setblocking(False)
        while True:  # connections made just before the ranks ended
            try:
                conn, _ = self.listener.accept()
            except OSError:
                break
            conn.setblocking(True)
            self._start(conn)
        self.listener.close()
        for t in self._consumers:
            t.join()  # every outfeed item the ranks sent is delivered before we return
        end = time.monotonic() + producer_wait
        for t in self._producers:
            t.join(timeout=max(0.0, end - time.monotonic()))
        try:
            os.unlink(self.path)
        except OSError:
            pass


# ---- xladist.run from a plain Python process --------------------------------------------------
class SpawnedFeeds:
    """The feeds of one spawned job as the launching process sees them.

    `rank_feeds` is what every rank receives (None without feeds). Python iterables and
    callbacks are served by a FeedHost here; npz paths and named functions go to the
    ranks as they are.
    """

    def __init__(self, job_dir, module, n, device_assignment, *, infeed=None, outfeed=None,
                 infeed_fn=None, prefetch=8, timeout=None):
        from .pipeline import Feeds, check_paths, make_sink, make_source, placements_of
        hosted_in = infeed is not None and (callable(infeed) or isinstance(infeed, (list, tuple)))
        hosted_out = outfeed is not None and callable(outfeed)
        self.placements = placements_of(module, n, device_assignment)
        self.host = FeedHost(job_dir, infeed if hosted_in else None,
                             outfeed if hosted_out else None) \
            if hosted_in or hosted_out else None
        source = SocketSource(self.host.path) if hosted_in else make_source(infeed, infeed_fn)
        sink = SocketSink(self.host.path, timeout) if hosted_out else make_sink(outfeed)
        self.rank_feeds = None
        if source is not None or sink is not None:
            self.rank_feeds = Feeds(source, sink, prefetch=prefetch, timeout=timeout)
            if self.rank_feeds.prefetch < 1:
                raise InputError(f"prefetch must be at least 1, got {prefetch}")
            check_paths(self.rank_feeds, self.placements)

    def after_job(self, returncode: int) -> None:
        """The ranks have ended: deliver every outfeed item, finish killed ranks' files."""
        if self.host is not None:
            self.host.close()
        if returncode != 0:
            from .pipeline import recover_outfeeds
            recover_outfeeds(self.rank_feeds, self.placements)

    def first_error(self):
        return self.host.errors[0][2] if self.host is not None and self.host.errors else None

    def error_text(self) -> str:
        """Failures of this process's callbacks (the ranks' report names the infeed ones)."""
        if self.host is None:
            return ""
        return "".join(f"\n(in this process: the outfeed callback for rank {rank} raised "
                       f"{type(e).__name__}: {e})"
                       for rank, what, e in self.host.errors if what == "outfeed")

    def raise_errors(self) -> None:
        """A callback that failed although every rank finished is still an error."""
        # (An infeed source that raised only while reading ahead of a program that needed
        # no more items did no harm: the ranks report the ones they reached.)
        failed = [x for x in (self.host.errors if self.host else ()) if x[1] == "outfeed"]
        if failed:
            from xladist.errors import ExecutionError
            rank, _, e = failed[0]
            raise ExecutionError(f"the outfeed callback for rank {rank} raised "
                                 f"{type(e).__name__}: {e}", rank=rank) from e


def spawned_feeds(job_dir, module, n, device_assignment=None, **options) -> SpawnedFeeds:
    return SpawnedFeeds(job_dir, module, n, device_assignment, **options)
