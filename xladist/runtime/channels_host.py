"""The host ends of channels (`is_host_transfer=true` send/recv): callbacks, files, a relay.

xladist/collectives/p2p.py calls `host.host_send(rank, channel_id, value)` when a rank sends to the
host and `host.host_recv(rank, channel_id) -> value` when a recv-done from the host needs its
data.  Three hosts:

* `CallbackHost(host_send, host_recv)`: the Python API's callbacks, called in the rank's own
  process (`xladist.run` inside an MPI job).
* `HostRelay` + `RelayHost`: `xladist.run` from a plain process starts the ranks under mpiexec,
  so the callbacks live in another process.  The launching process serves them over a Unix
  socket in the job directory (one thread per connected rank, callbacks called one at a time);
  each rank's `RelayHost` sends its request and blocks for the answer under the deadline.
* `FileHost(recv_pattern, send_pattern)`: the CLI.  Patterns name one .npz file per rank and
  channel, with `{rank}` and `{channel}` placeholders, e.g. `host/rank{rank}_ch{channel}.npz`.
  The k-th host recv of a rank on a channel takes the k-th array of its file (the order
  `np.savez(path, a0, a1, ...)` stores them); what a rank sends to the host on a channel is
  written, one array per send (tuple data: one per leaf), when its program has finished --
  or fails, or is aborted: what was sent before the failure is kept.
  bf16 arrays are uint16 bit patterns, as in the other npz files.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from xladist.files import deliver, load_npz

__all__ = ["CallbackHost", "FileHost", "HostRelay", "RelayHost"]


class CallbackHost:
    def __init__(self, host_send=None, host_recv=None):
        self.host_send = host_send
        self.host_recv = host_recv

    def finish(self) -> None:
        return None


class HostRelay:
    """Serves `host_send`/`host_recv` to the ranks of a spawned job (launching process side)."""

    def __init__(self, directory: Path, host_send=None, host_recv=None):
        from multiprocessing.connection import Listener

        self.address = str(Path(directory) / "host.sock")
        self.host_send = host_send
        self.host_recv = host_recv
        self._listener = Listener(self.address, family="AF_UNIX")
        self._lock = threading.Lock()  # user callbacks are called one at a time
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="xladist-host-relay",
                                        daemon=True)
        self._thread.start()

    def client(self) -> RelayHost:
        return RelayHost(self.address, self.host_send is not None, self.host_recv is not None)

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except OSError:
                return
            if self._closed:
                conn.close()
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn) -> None:
        with conn:
            while True:
                try:
                    op, rank, channel, payload = conn.recv()
                except (EOFError, OSError):
                    return
                try:
                    with self._lock:
                        if op == "send":
                            self.host_send(rank, channel, payload)
                            reply = ("ok", None)
                        else:
                            reply = ("ok", self.host_recv(rank, channel))
                except Exception as e:  # noqa: BLE001 -- sent back to the rank, which reports it
                    reply = ("error", f"{type(e).__name__}: {e}")
                try:
                    conn.send(reply)
                except (OSError, ValueError):
                    return

    def close(self) -> None:
        """Stop serving (after the job ended)."""
        if self._closed:
            return
        self._closed = True
        from multiprocessing.connection import Client
        try:  # wake the accept() so the thread sees the flag
            Client(self.address, family="AF_UNIX").close()
        except OSError:
            pass
        self._listener.close()
        self._thread.join(timeout=5)


class RelayHost:
    """A rank's end of a HostRelay (picklable: it connects on first use)."""

    def __init__(self, address: str, can_send: bool, can_recv: bool):
        self.address = address
        self._conn = None
        if not can_send:
            self.host_send = None
        if not can_recv:
            self.host_recv = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_conn"} | {"_conn": None}

    def _ask(self, op: str, rank: int, channel, payload=None):
        if self._conn is None:
            from multiprocessing.connection import Client
            self._conn = Client(self.address, family="AF_UNIX")
        self._conn.send((op, rank, channel, payload))
        status, value = self._conn.recv()
        if status != "ok":
            raise RuntimeError(value)
        return value

    def host_send(self, rank: int, channel, value) -> None:
        self._ask("send", rank, channel, value)

    def host_recv(self, rank: int, channel):
        return self._ask("recv", rank, channel)

    def finish(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _leaves(value) -> list:
    if isinstance(value, tuple):
        out = []
        for v in value:
            out.extend(_leaves(v))
        return out
    return [value] if isinstance(value, np.ndarray) else []


def _storable(a: np.ndarray) -> np.ndarray:
    # npz cannot hold ml_dtypes types; bf16 travels as uint16 bit patterns (xladist.io).
    if a.dtype.kind == "V" or a.dtype.name == "bfloat16":
        return a.view(np.uint16) if a.dtype.itemsize == 2 else a.view(f"u{a.dtype.itemsize}")
    return a


class FileHost:
    """Host transfers from and to .npz files (see the module docstring)."""

    def __init__(self, recv_pattern: str | None = None, send_pattern: str | None = None):
        self.recv_pattern = recv_pattern
        self.send_pattern = send_pattern
        self._recv_items: dict[tuple, tuple[Path, list[np.ndarray]]] = {}
        self._recv_next: dict[tuple, int] = {}
        self._sent: dict[tuple, list[np.ndarray]] = {}
        if recv_pattern is None:
            self.host_recv = None
        if send_pattern is None:
            self.host_send = None

    @staticmethod
    def _path(pattern: str, rank: int, channel) -> Path:
        try:
            return Path(pattern.format(rank=rank, channel=channel))
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"host file pattern {pattern!r}: only {{rank}} and {{channel}} "
                             f"may be used ({e})") from None

    def host_recv(self, rank: int, channel):
        key = (rank, channel)
        if key not in self._recv_items:
            path = self._path(self.recv_pattern, rank, channel)
            items = list(load_npz(path, f"--host-recv (rank {rank}, channel {channel})")
                         .values())
            self._recv_items[key] = (path, items)
        path, items = self._recv_items[key]
        k = self._recv_next.get(key, 0)
        if k >= len(items):
            raise ValueError(f"recv number {k + 1} from the host on channel {channel} needs "
                             f"item {k} of {path}, which holds {len(items)}")
        self._recv_next[key] = k + 1
        return items[k]

    def host_send(self, rank: int, channel, value) -> None:
        self._sent.setdefault((rank, channel), []).extend(
            np.array(a, copy=True) for a in _leaves(value))

    def finish(self) -> None:
        """Write what each channel sent to the host (when the rank's program has finished,
        failed or is being aborted)."""
        for (rank, channel), arrays in self._sent.items():
            path = self._path(self.send_pattern, rank, channel)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError:
                pass  # deliver reports it and saves the data in the job directory
            stored = [_storable(a) for a in arrays]
            deliver(path, lambda f, stored=stored: np.savez(f, *stored), "--host-send")
        self._sent.clear()
