"""The host ends of channels (`is_host_transfer=true` send/recv): callbacks, files, a relay.

xladist/collectives/p2p.py calls `host.host_send(rank, channel_id, value)` when a rank sends to the
host and `host.host_recv(rank, channel_id) -> value` when a recv-done from the host needs its
data.  Three hosts:

* `CallbackHost(host_send, host_recv)`: the Python API's callbacks, called in the rank's own
  process (`xladist.run` inside an MPI job).
* `ServiceHost`: ranks started by `xladist run` or by `xladist.run` from a plain process
  reach the callbacks or files of the launching process through the job's coordination
  service (one request per transfer, callbacks called one at a time), on any host.
* `FileHost(recv_pattern, send_pattern)`: the CLI's files, used by the launching process.  Patterns name one .npz file per rank and
  channel, with `{rank}` and `{channel}` placeholders, e.g. `host/rank{rank}_ch{channel}.npz`.
  The k-th host recv of a rank on a channel takes the k-th array of its file (the order
  `np.savez(path, a0, a1, ...)` stores them); what a rank sends to the host on a channel is
  written, one array per send (tuple data: one per leaf), when its program has finished --
  or fails, or is aborted: what was sent before the failure is kept.
  bf16 arrays are uint16 bit patterns, as in the other npz files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xladist.files import deliver, fill_template, load_npz

__all__ = ["CallbackHost", "FileHost", "ServiceHost"]


class CallbackHost:
    def __init__(self, host_send=None, host_recv=None):
        self.host_send = host_send
        self.host_recv = host_recv

    def finish(self) -> None:
        return None


class ServiceHost:
    """A rank's host end when the launching process holds it: each host transfer is a
    request to the job's coordination service (service/jobs.py), which calls the callbacks
    or reads and writes the .npz files there -- on the launching host, whatever host the
    rank is on. The rank waits for the answer under the deadline."""

    def __init__(self, client, can_send: bool, can_recv: bool, timeout: float | None = None):
        self.client = client
        self.timeout = timeout
        if not can_send:
            self.host_send = None
        if not can_recv:
            self.host_recv = None

    def host_send(self, rank: int, channel, value) -> None:
        from .feeds.items import tree_of
        tree, leaves = tree_of(value)
        self.client.request("host", self.timeout, arrays=leaves, dir="send", channel=channel,
                            tree=tree)

    def host_recv(self, rank: int, channel):
        from .feeds.items import from_tree
        meta, leaves = self.client.request("host", self.timeout, dir="recv", channel=channel)
        return from_tree(meta["tree"], leaves or [])

    def finish(self) -> None:
        return None


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
        return Path(fill_template(pattern, "host file pattern", rank=rank, channel=channel))

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
        failed or is being aborted). Every channel's file is attempted; those that could be
        neither written nor rescued (files.deliver) are then one OutputError naming them
        all."""
        from xladist.errors import OutputError
        sent, self._sent = self._sent, {}
        lost: list[str] = []
        for (rank, channel), arrays in sent.items():
            path = self._path(self.send_pattern, rank, channel)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError:
                pass  # deliver reports it and saves the data in the job directory
            stored = [_storable(a) for a in arrays]
            try:
                deliver(path, lambda f, stored=stored: np.savez(f, *stored), "--host-send")
            except OutputError as e:
                lost.append(str(e))
        if lost:
            raise OutputError("; ".join(lost))
