"""The in-process twin of the MPI communicator: ranks are threads of one process, for fast
unit tests of the collective families. Its waits raise :class:`CollectiveError` on timeout
or when members disagree on which collective comes next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from . import deadline as _deadline
from .communicator import CollectiveError, Communicator, Request

__all__ = ["InProcessCommunicator", "in_process_world", "run_in_threads"]


def _bytes(a: np.ndarray) -> np.ndarray:
    """Flat uint8 view of a C-contiguous array (works for 0-d and extension dtypes)."""
    return a.reshape(-1).view(np.uint8)


_NP_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
           "band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}


def _np_op(op):
    """A builtin op name's ufunc, or a Reducer's ``fn`` cast back to the operand dtype (the
    user-op path: left fold in rank order, which is what MPI's tree computes there)."""
    if type(op) is str:
        return _NP_OPS[op]
    fn = op.fn

    def combine(a, b):
        with np.errstate(all="ignore"):
            return np.asarray(fn(a, b)).astype(a.dtype, copy=False)

    return combine


class _Slot:
    __slots__ = ("arrived", "done", "error", "ops", "payloads", "readers", "result")

    def __init__(self, size: int):
        self.payloads = [None] * size
        self.ops: list[str | None] = [None] * size
        self.arrived = 0
        self.done = False
        self.result = None
        self.error: str | None = None
        self.readers = 0


class _Rendezvous:
    """Shared by the N members of one in-process communicator.  The k-th call of every member
    meets in slot k; the last to arrive combines the payloads once, under the lock, so every
    member reads the same result object."""

    def __init__(self, size: int):
        self.size = size
        self.cond = threading.Condition()
        self.slots: dict[int, _Slot] = {}


class _InProcRequest(Request):
    __slots__ = ("_result", "comm", "extract", "label", "seq", "slot")

    def __init__(self, comm, seq, slot, label, extract):
        self.comm, self.seq, self.slot, self.label, self.extract = comm, seq, slot, label, extract

    def wait(self):
        if self.slot is None:
            return self._result
        result = self.comm._wait(self.seq, self.slot, self.label)
        self.slot = None
        out = self.extract(result)
        self._result = out
        return out


class InProcessCommunicator(Communicator):
    """Threads-as-ranks twin of MpiCommunicator (see :func:`in_process_world`)."""

    def __init__(self, rendezvous: _Rendezvous, rank: int, devices=None, timeout_s=None):
        super().__init__(rank, rendezvous.size, devices)
        self._rv = rendezvous
        self._seq = 0
        self.timeout_s = (_deadline.watchdog.timeout_s or 60.0) if timeout_s is None \
            else timeout_s

    def _post(self, op: str, label, payload, combine: Callable, extract: Callable) -> Request:
        rv = self._rv
        seq = self._seq
        self._seq += 1
        with rv.cond:
            slot = rv.slots.get(seq)
            if slot is None:
                slot = rv.slots[seq] = _Slot(rv.size)
            slot.payloads[self.rank] = payload
            slot.ops[self.rank] = op
            slot.arrived += 1
            if slot.arrived == rv.size:
                if len(set(slot.ops)) > 1:
                    runs = ", ".join(f"rank {r} runs {o}" for r, o in enumerate(slot.ops))
                    slot.error = f"members disagree on collective #{seq} of {self}: {runs}"
                else:
                    try:
                        slot.result = combine(slot.payloads)
                    except Exception as e:  # noqa: BLE001 -- reported to every member, not only the combiner
                        slot.error = f"{op} failed while combining: {type(e).__name__}: {e}"
                slot.done = True
                rv.cond.notify_all()
        return _InProcRequest(self, seq, slot, label or op, extract)

    def _wait(self, seq: int, slot: _Slot, label: str):
        rv = self._rv
        end = time.monotonic() + self.timeout_s
        with rv.cond:
            while not slot.done:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    missing = [r for r, o in enumerate(slot.ops) if o is None]
                    raise CollectiveError(
                        f"rank {self.rank}: timed out after {self.timeout_s:g} s waiting in "
                        f"{label} over {self}; ranks {missing} never arrived")
                rv.cond.wait(remaining)
            slot.readers += 1
            if slot.readers == rv.size:
                del rv.slots[seq]
        if slot.error:
            raise CollectiveError(f"rank {self.rank}: {slot.error}")
        return slot.result

    # -- primitives ------------------------------------------------------------------------
    def iallreduce(self, send, recv, op, label=None):
        ufunc = _np_op(op)

        def combine(ps):
            acc = ps[0]
            for p in ps[1:]:
                acc = ufunc(acc, p)
            return acc

        return self._post("all-reduce", label, send.copy(), combine,
                          lambda res: np.copyto(recv, res))

    def iallgather(self, send, recv, label=None):
        return self._post("all-gather", label, _bytes(send).copy(), list,
                          lambda ps: np.copyto(_bytes(recv), np.concatenate(ps)))

    def ialltoall(self, send, recv, label=None):
        n, me = self.size, self.rank

        def extract(ps):
            out = _bytes(recv).reshape(n, -1)
            for i, p in enumerate(ps):
                out[i] = p.reshape(n, -1)[me]

        return self._post("all-to-all", label, _bytes(send).copy(), list, extract)

    def ialltoallv(self, send, send_counts, send_displs, recv, recv_counts, recv_displs,
                   row_bytes, label=None):
        me = self.rank
        rb = int(row_bytes)
        src = _bytes(send)
        # What this member sends to each peer, as separate byte strings (copies: the caller may
        # reuse its buffer as soon as the request completes).
        payload = [src[int(d) * rb:(int(d) + int(c)) * rb].copy()
                   for c, d in zip(send_counts, send_displs)]

        def extract(ps):
            dst = _bytes(recv)
            for i, chunks in enumerate(ps):
                data = chunks[me]
                if data.size != int(recv_counts[i]) * rb:
                    raise CollectiveError(
                        f"rank {me}: all-to-all-v over {self}: expected {int(recv_counts[i])} "
                        f"rows from rank {i}, but it sends {data.size // rb}")
                start = int(recv_displs[i]) * rb
                dst[start:start + data.size] = data

        return self._post("all-to-all-v", label, payload, list, extract)

    def ireduce_scatter_block(self, send, recv, op, label=None):
        ufunc = _np_op(op)
        n, me = self.size, self.rank

        def combine(ps):
            acc = ps[0]
            for p in ps[1:]:
                acc = ufunc(acc, p)
            return acc.reshape(n, -1)

        return self._post("reduce-scatter", label, send.reshape(-1).copy(), combine,
                          lambda res: np.copyto(recv.reshape(-1), res[me]))

    def ipermute(self, send, recv, dest, source, label=None):
        me = self.rank

        def extract(ps):
            if source is None:
                return
            data, their_dest = ps[source]
            if their_dest != me:
                raise CollectiveError(
                    f"rank {me}: collective-permute over {self}: expected data from rank "
                    f"{source}, but it sends to {their_dest}")
            np.copyto(_bytes(recv), data)

        payload = (_bytes(send).copy() if dest is not None else None, dest)
        return self._post("collective-permute", label, payload, list, extract)

    def ibcast(self, buf, root, label=None):
        me = self.rank
        payload = _bytes(buf).copy() if me == root else None

        def extract(ps):
            if me != root:
                np.copyto(_bytes(buf), ps[root])

        return self._post("collective-broadcast", label, payload, list, extract)

    def barrier(self, label=None):
        self._post("barrier", label, None, lambda ps: None, lambda r: None).wait()

    def split(self, color, key, devices=None):
        timeout = self.timeout_s

        def combine(ps):
            members: dict[int, list[tuple[int, int]]] = {}
            for r, (c, k) in enumerate(ps):
                if c is not None:
                    members.setdefault(c, []).append((k, r))
            return {c: (_Rendezvous(len(m)), [r for _, r in sorted(m)])
                    for c, m in members.items()}

        def extract(groups):
            if color is None:
                return None
            rv, ranks = groups[color]
            return InProcessCommunicator(rv, ranks.index(self.rank), devices, timeout)

        return self._post("split", None, (color, key), combine, extract).wait()


def in_process_world(n: int, timeout_s: float | None = None) -> list[InProcessCommunicator]:
    """N communicators sharing one rendezvous: hand ``comms[i]`` to the thread playing rank i."""
    rv = _Rendezvous(n)
    return [InProcessCommunicator(rv, r, list(range(n)), timeout_s) for r in range(n)]


def run_in_threads(n: int, fn: Callable[[InProcessCommunicator], object],
                   timeout_s: float = 30.0) -> list:
    """Run ``fn(comm)`` on n threads over an in-process world; return the per-rank results.

    The first exception raised by any rank is re-raised here (after all threads finish).
    """
    comms = in_process_world(n, timeout_s)
    results: list = [None] * n
    errors: list = [None] * n

    def body(r):
        try:
            results[r] = fn(comms[r])
        except BaseException as e:  # noqa: BLE001 -- re-raised in the caller
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5)
    for r, e in enumerate(errors):
        if e is not None:
            raise e
    if any(t.is_alive() for t in threads):
        raise CollectiveError(f"in-process ranks still running after {timeout_s + 5:g} s")
    return results
