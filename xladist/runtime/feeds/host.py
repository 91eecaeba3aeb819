"""Feeds served by the launching process, over the network (see pipeline.py).

`xladist run --infeed FILE --outfeed FILE` and `xladist.run(infeed=..., outfeed=...)` keep
their sources and sinks in the launching process -- the user's iterables and callbacks, and
the npz files on the launching host -- and the job's coordination service
(xladist/runtime/service/) serves them to the ranks, on whatever host they run. Every rank
connects once per direction (`SocketSource` for its infeed, `SocketSink` for its outfeed)
and says who it is (role feed-in / feed-out, its rank, replica and partition, the job's
token). The service then runs the rank's source in one thread, sending items as they come
(`produce`), and hands the rank's outfeed items to its sink in another (`consume`; one lock
serializes the user's callbacks of all ranks, in each rank's program order).

Frames (wire.py): ITEM {tree, leaves} with the leaves' bytes, END {}, FAIL {text}.

Flow control is the socket itself: sends block while the receiver is behind, so the
service reads a rank's source at most a socket buffer plus the rank's prefetch queue
ahead. Deadlines: connecting and saying hello are bounded; a rank's outfeed send is bounded
by the run's deadline; the rank's wait for infeed items is the device side's deadline
(pipeline.py). A service thread serving a rank that died gets a broken pipe or end-of-file
as soon as that rank's host has closed its socket; an npz sink then writes what arrived.
"""

from __future__ import annotations


from .. import wire
from ..wire import END, FAIL, HELLO, ITEM
from .items import from_tree, tree_of

CONNECT_TIMEOUT_S = 60.0
# After a rank failed, how long its outfeed waits for the service to take the items so far.
FAILED_CLOSE_S = 5.0


class RemoteSourceError(RuntimeError):
    """The host's infeed source raised; `remote_text` is its `Type: message`."""

    def __init__(self, text: str):
        super().__init__(text)
        self.remote_text = text


def send_item(sock, item, timeout: float | None = None) -> None:
    tree, leaves = tree_of(item)
    wire.send(sock, ITEM, {"tree": tree}, leaves, timeout=timeout)


def recv_item(sock):
    """(kind, meta, item or None), or None at end-of-stream."""
    got = wire.recv(sock)
    if got is None:
        return None
    kind, meta, payload = got
    if kind != ITEM:
        return kind, meta, None
    return kind, meta, from_tree(meta["tree"], payload or [])


def _connect(address: str, token: str, role: str, placement, timeout: float):
    sock = wire.connect(address, timeout)
    sock.settimeout(timeout)
    wire.send(sock, HELLO, {"role": role, "token": token, "rank": placement.rank,
                            "replica": placement.replica, "partition": placement.partition,
                            "device": placement.device})
    return sock


# ---- rank side --------------------------------------------------------------------------------
class SocketSource:
    """A rank's infeed, produced by the launching process (picklable: only the address)."""

    copies = False  # every item arrives in fresh arrays

    def __init__(self, address: str, token: str):
        self.address, self.token = address, token
        self.sock = None

    def describe(self) -> str:
        return "the infeed source (in the launching process)"

    def open(self, placement):
        self.sock = _connect(self.address, self.token, "feed-in", placement,
                             CONNECT_TIMEOUT_S)
        self.sock.settimeout(None)  # the device side's queue.get holds the deadline
        return self._items(self.sock)

    @staticmethod
    def _items(sock):
        while True:
            msg = recv_item(sock)
            if msg is None:
                raise ConnectionError("the launching process closed the infeed stream")
            kind, meta, item = msg
            if kind == END:
                return
            if kind == FAIL:
                raise RemoteSourceError(meta.get("text", "?"))
            if kind == wire.MSG and meta.get("op") == "refused":
                raise ConnectionError(f"the coordination service refused the infeed: "
                                      f"{meta.get('reason')}")
            yield item

    def close(self) -> None:
        if self.sock is not None:
            wire.close(self.sock)


class SocketSink:
    """A rank's outfeed, consumed in the launching process (a callback or an npz file)."""

    def __init__(self, address: str, token: str, timeout: float | None = None):
        self.address, self.token = address, token
        self.timeout = timeout
        self.sock = None

    def open(self, placement) -> None:
        self.placement = placement
        self.sock = _connect(self.address, self.token, "feed-out", placement,
                             CONNECT_TIMEOUT_S)
        if self.timeout is None:
            from xladist.collectives import deadline
            self.timeout = deadline.watchdog.timeout_s
        self.sock.settimeout(None)

    def write(self, item) -> None:
        try:
            send_item(self.sock, item, timeout=self.timeout or None)
        except wire.PeerGone:
            raise RuntimeError(f"the outfeed consumer in the launching process took no data "
                               f"for {self.timeout:g} s (the deadline)") from None
        except OSError as e:
            raise RuntimeError(f"the outfeed consumer in the launching process stopped "
                               f"reading ({e.strerror or e}); see its error") from None

    def close(self, *, failed: bool) -> None:
        """Say END and wait for the service's word that every item reached the user's
        callback or file. After a success that wait has the run's deadline, and not hearing
        within it fails the rank: the items still in the socket would be lost with the
        job while it reported success. After a failure, 5 s at most."""
        if self.sock is None:
            return
        wait = FAILED_CLOSE_S if failed else (self.timeout or None)
        why = None
        try:
            wire.send(self.sock, END, {}, timeout=wait)
            self.sock.settimeout(wait)
            wire.recv(self.sock)  # the service closes once every item is delivered
        except TimeoutError as e:  # (socket.timeout)
            why = wire.PeerSilent(str(e))
        except OSError as e:  # (wire.PeerGone too)
            why = e
        finally:
            self.sock.close()
            self.sock = None
        if why is not None and not failed:
            from xladist.errors import ExecutionError
            p = self.placement
            if isinstance(why, wire.PeerSilent):
                text = (f"the outfeed consumer in the launching process did not take rank "
                        f"{p.rank}'s last outfeed items within {self.timeout:g} s of the "
                        f"program's end (the deadline; raise it with --timeout): an outfeed "
                        f"callback slower than that, or the launching process stopped reading")
            else:  # the connection ended: the consumer failed, or the process went
                text = (f"the launching process stopped taking rank {p.rank}'s outfeed items "
                        f"before it had them all ({why.strerror or why}): its outfeed "
                        f"callback or file failed (see the launching process's error), or "
                        f"it ended")
            raise ExecutionError(text, rank=p.rank, replica=p.replica, partition=p.partition)


# ---- the service's side ----------------------------------------------------------------------
def produce(sock, source, placement, fail) -> None:
    """Send `source`'s items for this rank until it ends (END) or raises (FAIL); `fail(rank,
    error)` records a failure of the user's source."""
    try:
        try:
            items = iter(source.open(placement))
        except BaseException as e:  # noqa: BLE001 - user code: report to the rank
            _fail(sock, placement.rank, e, fail)
            return
        while True:
            try:
                item = next(items)
            except StopIteration:
                wire.send(sock, END, {})
                return
            except BaseException as e:  # noqa: BLE001 - user code
                _fail(sock, placement.rank, e, fail)
                return
            send_item(sock, item)
    except (OSError, ValueError):
        return  # the rank finished or died: it wants no more items


def _fail(sock, rank, error, fail) -> None:
    fail(rank, error)
    try:
        wire.send(sock, FAIL, {"text": f"{type(error).__name__}: {error}"})
    except (OSError, ValueError):
        pass


def consume(sock, sink, placement, lock, fail) -> None:
    """Hand the rank's outfeed items to `sink` in order; at its END (or when the rank died:
    the items so far are kept) close the sink."""
    failed = True
    try:
        try:
            sink.open(placement)
        except BaseException as e:  # noqa: BLE001 - user code: stop this rank's stream
            fail(placement.rank, e)
            return
        while True:
            try:
                msg = recv_item(sock)
            except (OSError, ValueError):
                return
            if msg is None:
                return
            if msg[0] == END:
                failed = False
                return
            try:
                with lock:
                    sink.write(msg[2])
            except BaseException as e:  # noqa: BLE001 - user code: stop this rank's stream
                fail(placement.rank, e)
                return
    finally:
        error = None
        with lock:
            try:
                sink.close(failed=failed)
            except Exception as e:  # noqa: BLE001 - e.g. the file cannot be written
                error = e
        if error is not None:  # not under `lock`: recording a failure may take it
            fail(placement.rank, error)
        try:
            wire.send(sock, END, {}, timeout=2.0)  # every item is delivered
        except (OSError, ValueError):  # the rank is gone (ValueError: the service closed it)
            pass
