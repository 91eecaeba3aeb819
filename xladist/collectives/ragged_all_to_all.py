"""ragged-all-to-all (docs/reference/collective-semantics.md C.16; XLA RaggedAllToAll, jax.lax.ragged_all_to_all).

Operands (every member passes its own): ``x`` (input), ``output`` (the base of the result),
``input_offsets``, ``send_sizes``, ``output_offsets``, ``recv_sizes``.  The four metadata arrays
share one integer type and shape: rank 1 with ``n * k`` entries or rank 2 ``[n, k]`` (n = group
size, k = updates per peer; XLA's verifier allows both ranks); entry ``j * k + u`` describes
update u between this member and member j:

* sending: rows ``[input_offsets[e], input_offsets[e] + send_sizes[e])`` of ``x`` (dimension 0)
  go to member j, which writes them at row ``output_offsets[e]`` of ITS output -- the sender
  names the place in the receiver's buffer;
* receiving: ``recv_sizes[i * k + u]`` is how many rows update u from member i brings.

The result is ``output`` with every received chunk written in place; rows nobody writes keep
``output``'s values.  Chunks that overlap in a receiver's output are written in sender order,
then update order (XLA leaves overlaps undefined).

Two exchanges, each waited on under the process deadline (:mod:`xladist.collectives.deadline`):

1. an all-to-all of small int64 rows: to member j, ``[status, send sizes for j, output offsets
   for j]``, so each receiver learns how many rows every sender sends it and where they go;
2. one all-to-all-v of whole rows (counts and displacements in rows; a row is the product of
   the non-leading dimensions).  With one update per peer, chunks go straight from ``x`` and,
   when they do not overlap, straight into the result; otherwise through staging buffers.

Bad metadata never corrupts memory and never hangs a member: a sender whose own sizes or
offsets are invalid announces status 1 and sends nothing; every receiver posts exactly the
row counts its senders announced (into a staging buffer when anything is off) and checks them
against its ``recv_sizes`` and its output only after both exchanges, so every member finishes
both before any raises ``ValueError``.  The runtime (xladist/runtime/mpi_context.py) turns that into an
error naming the rank and the instruction.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from ._common import contiguous
from .communicator import Communicator

__all__ = ["ragged_all_to_all"]

_OK, _BAD = 0, 1
_MAX_LISTED = 6  # problems spelled out in one error; the rest are counted


def _member(comm: Communicator, j: int) -> str:
    if comm.devices is not None and j < len(comm.devices) and comm.devices[j] is not None:
        return f"member {j} (device {comm.devices[j]})"
    return f"member {j}"


def _check_static(comm: Communicator, x: np.ndarray, output: np.ndarray, meta) -> int:
    """Shapes and types every member has alike (static in a module): k, updates per peer."""
    n = comm.size
    if x.ndim == 0 or output.ndim != x.ndim or x.shape[1:] != output.shape[1:] \
            or x.dtype != output.dtype:
        raise ValueError(f"ragged-all-to-all: input {x.dtype}{list(x.shape)} and output "
                         f"{output.dtype}{list(output.shape)} must have one element type and "
                         "rank >= 1, and agree in every dimension but the first")
    names = ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")
    shape = meta[0].shape
    for name, m in zip(names, meta):
        if m.dtype.kind not in "iu" or m.shape != shape or m.dtype != meta[0].dtype:
            raise ValueError("ragged-all-to-all: input_offsets, send_sizes, output_offsets and "
                             "recv_sizes must be integer arrays of one type and shape, got "
                             + ", ".join(f"{nm} {a.dtype}{list(a.shape)}"
                                         for nm, a in zip(names, meta)))
    if len(shape) == 2 and shape[0] != n:
        raise ValueError(f"ragged-all-to-all: rank-2 offsets and sizes {list(shape)} must be "
                         f"[group size, updates per peer], and the group has {n} members")
    if len(shape) not in (1, 2) or meta[0].size == 0 or meta[0].size % n:
        raise ValueError(f"ragged-all-to-all: offsets and sizes of shape {list(shape)} must "
                         f"hold k entries per group member (rank 1 [{n}*k] or rank 2 "
                         f"[{n},k], k >= 1) for a group of {n}")
    return meta[0].size // n


def _sender_problems(comm, io, ss, rows_in: int, k: int) -> list[str]:
    out = []
    for j in range(comm.size):
        for u in range(k):
            e, start, size = j * k + u, int(io[j, u]), int(ss[j, u])
            if size < 0 or (size and start < 0):  # an empty chunk's offset is never used
                out.append(f"input_offsets[{e}]={start}, send_sizes[{e}]={size} (update {u} "
                           f"for {_member(comm, j)}): offsets and sizes must be >= 0")
            elif start + size > rows_in:
                out.append(f"input_offsets[{e}]={start} + send_sizes[{e}]={size} (update {u} "
                           f"for {_member(comm, j)}) runs past the input's {rows_in} rows")
    return out


def _receiver_problems(comm, status, sizes, offsets, rs, rows_out: int, k: int) -> list[str]:
    out = []
    for i in range(comm.size):
        if status[i] != _OK:
            out.append(f"{_member(comm, i)} sent nothing: its own offsets or sizes are "
                       "invalid (its error gives the details)")
            continue
        for u in range(k):
            e, size, at, want = i * k + u, int(sizes[i, u]), int(offsets[i, u]), int(rs[i, u])
            if want != size:
                out.append(f"recv_sizes[{e}]={want}, but {_member(comm, i)} sends {size} rows "
                           f"for update {u}")
            if size > 0 and (at < 0 or at + size > rows_out):
                out.append(f"{_member(comm, i)} writes {size} rows at output_offsets={at} "
                           f"(update {u}), past this output's {rows_out} rows")
    return out


def _disjoint(offsets: np.ndarray, sizes: np.ndarray) -> bool:
    spans = sorted((int(o), int(o) + int(s)) for o, s in zip(offsets, sizes) if s > 0)
    return all(a[1] <= b[0] for a, b in pairwise(spans))


def _rows(a: np.ndarray) -> np.ndarray:
    """Flat bytes of a C-contiguous array (MPI addresses them in rows of row_bytes)."""
    return a.reshape(-1).view(np.uint8)


def ragged_all_to_all(comm: Communicator, x, output, input_offsets, send_sizes, output_offsets,
                      recv_sizes, *, label: str | None = None) -> np.ndarray:
    """Every member sends its ragged chunks and returns a fresh copy of ``output`` with the
    chunks it received written in place (see the module docstring)."""
    label = label or "ragged-all-to-all"
    n, me = comm.size, comm.rank
    x = contiguous(np.asarray(x))
    output = np.asarray(output)
    meta = [np.asarray(a) for a in (input_offsets, send_sizes, output_offsets, recv_sizes)]
    k = _check_static(comm, x, output, meta)
    io, ss, oo, rs = (m.astype(np.int64).reshape(n, k) for m in meta)
    rows_in, rows_out = x.shape[0], output.shape[0]
    row_bytes = x.dtype.itemsize * int(np.prod(x.shape[1:], dtype=np.int64))

    mine = _sender_problems(comm, io, ss, rows_in, k)
    sent = np.zeros_like(ss) if mine else ss
    # 1. Metadata: member j learns [status, my sizes for j, my output offsets for j].
    announce = np.empty((n, 1 + 2 * k), np.int64)
    announce[:, 0] = _BAD if mine else _OK
    announce[:, 1:1 + k] = sent
    announce[:, 1 + k:] = oo
    heard = np.empty_like(announce)
    comm.alltoall(announce, heard, f"{label} (sizes and offsets)")
    status, sizes, offsets = heard[:, 0], heard[:, 1:1 + k], heard[:, 1 + k:]
    problems = mine + _receiver_problems(comm, status, sizes, offsets, rs, rows_out, k)

    out = comm.result(output.shape, output.dtype, like=output)
    np.copyto(out, output)
    if row_bytes:
        _exchange(comm, x, out, io, sent, sizes, offsets, k, row_bytes, not problems, label)
    if problems:
        more = len(problems) - _MAX_LISTED
        raise ValueError(f"ragged-all-to-all over {comm}, member {me}: "
                         + "; ".join(problems[:_MAX_LISTED])
                         + (f"; and {more} more" if more > 0 else ""))
    return out


def _exchange(comm, x, out, io, sent, sizes, offsets, k: int, row_bytes: int, place: bool,
              label: str) -> None:
    """2. The rows themselves.  ``sent`` is what this member sends (zeros if its metadata is
    bad), ``sizes``/``offsets`` what each sender announced; ``place`` is False when anything is
    wrong, and the received rows then stay in a staging buffer."""
    n = comm.size
    if k == 1:
        # Empty chunks may carry any offset (nothing checks it): point them at row 0.
        send, send_counts = x, sent[:, 0]
        send_displs = np.where(send_counts > 0, io[:, 0], 0)
    else:
        send_counts = sent.sum(axis=1)
        send = np.empty((int(send_counts.sum()), *x.shape[1:]), x.dtype)
        pos = 0
        for j in range(n):
            for u in range(k):
                size = int(sent[j, u])
                send[pos:pos + size] = x[io[j, u]:io[j, u] + size]
                pos += size
        send_displs = np.concatenate(([0], np.cumsum(send_counts)[:-1]))
    recv_counts = sizes.sum(axis=1)
    if place and k == 1 and _disjoint(offsets[:, 0], sizes[:, 0]):
        comm.alltoallv(_rows(send), send_counts, send_displs, _rows(out), recv_counts,
                       np.where(recv_counts > 0, offsets[:, 0], 0), row_bytes, label)
        return
    staged = np.empty((int(recv_counts.sum()), *x.shape[1:]), x.dtype)
    recv_displs = np.concatenate(([0], np.cumsum(recv_counts)[:-1]))
    comm.alltoallv(_rows(send), send_counts, send_displs, _rows(staged), recv_counts,
                   recv_displs, row_bytes, label)
    if not place:
        return
    pos = 0
    for i in range(n):
        for u in range(k):
            size, at = int(sizes[i, u]), int(offsets[i, u])
            out[at:at + size] = staged[pos:pos + size]
            pos += size
