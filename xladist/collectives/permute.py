"""collective-permute (docs/reference/collective-semantics.md C.14): point-to-point moves along given pairs.

Same outline as :mod:`xladist.collectives.all_reduce`.  Every member of the communicator calls it
(SPMD); ``send_to`` / ``recv_from`` are ranks in ``comm`` or None.  A member that receives
from nobody gets zeros, even if it sends; a self pair is a local copy.  Use
:func:`xladist.hlo.collective_groups.collective_permute_pairs` (device pairs) or
:func:`xladist.hlo.collective_groups.permute_device_groups` (a communicator per partition/replica whose
ranks equal the ids in source_target_pairs) with :func:`peers` to find the two ranks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._common import Pending, bind_into_result, contiguous
from .communicator import Communicator

__all__ = ["collective_permute", "collective_permute_native", "collective_permute_start",
           "peers"]


def peers(pairs: Sequence[Sequence[int]], me: int) -> tuple[int | None, int | None]:
    """``(send_to, recv_from)`` of ``me`` given (source, target) pairs (ids or ranks)."""
    send_to = recv_from = None
    for s, t in pairs:
        if s == me:
            send_to = t
        if t == me:
            recv_from = s
    return send_to, recv_from


def _prepare(comm, x, send_to, recv_from):
    me = comm.rank
    for what, r in (("send_to", send_to), ("recv_from", recv_from)):
        if r is not None and not 0 <= r < comm.size:
            raise ValueError(f"collective-permute: {what}={r} is not a rank of {comm} "
                             f"(size {comm.size})")
    if (send_to == me) != (recv_from == me):
        raise ValueError(f"collective-permute: rank {me} sends to {send_to} and receives from "
                         f"{recv_from}; a self pair must be both")
    return me


def collective_permute(comm: Communicator, x, send_to: int | None, recv_from: int | None, *,
                       label: str | None = None):
    """Send ``x`` to rank ``send_to`` and return what rank ``recv_from`` sent (zeros if None).

    A list/tuple ``x`` (combined permute) moves each array along the same pair.
    """
    if type(x) is np.ndarray and x.flags.c_contiguous:
        fast = comm.bound(("collective-permute", x.shape, x.dtype, send_to, recv_from),
                          lambda: _fast(comm, x, send_to, recv_from))
        if fast is not None:
            return fast(x, label)
    if type(x) is list or type(x) is tuple:
        return [collective_permute(comm, xi, send_to, recv_from, label=label) for xi in x]
    x = np.asarray(x)
    me = _prepare(comm, x, send_to, recv_from)
    if recv_from is None:
        out = np.zeros(x.shape, x.dtype)
    else:
        out = comm.result(x.shape, x.dtype, like=x)
    if send_to == me:
        np.copyto(out, x)
        return out
    if x.size == 0 or (send_to is None and recv_from is None):
        return out
    comm.permute(contiguous(x), out, send_to, recv_from, label or "collective-permute")
    return out


def _fast(comm: Communicator, x: np.ndarray, send_to, recv_from):
    """``f(x, label)``: :func:`collective_permute` of a C-contiguous array of ``x``'s shape
    and dtype as the recycled result and one Sendrecv straight into it, for a member that
    receives from another (valid peers, non-empty operand); else None (the general path,
    which also reports bad peers)."""
    try:
        me = _prepare(comm, x, send_to, recv_from)
    except ValueError:
        return None
    if recv_from is None or send_to == me or x.size == 0:
        return None
    permute = comm.permute
    return bind_into_result(comm, x.shape, x.dtype,
                            lambda x, out, label: permute(x, out, send_to, recv_from, label),
                            "collective-permute")


def collective_permute_start(comm: Communicator, x, send_to: int | None,
                             recv_from: int | None, *, label: str | None = None) -> Pending:
    """Start a collective-permute; ``.wait()`` returns what :func:`collective_permute` would."""
    if type(x) is list or type(x) is tuple:
        parts = [collective_permute_start(comm, xi, send_to, recv_from, label=label)
                 for xi in x]
        return Pending((), lambda: [p.wait() for p in parts])
    x = np.asarray(x)
    me = _prepare(comm, x, send_to, recv_from)
    out = np.zeros(x.shape, x.dtype) if recv_from is None else comm.result(x.shape, x.dtype, like=x)
    if send_to == me:
        np.copyto(out, x)
        return Pending.ready(out)
    if x.size == 0 or (send_to is None and recv_from is None):
        return Pending.ready(out)
    req = comm.ipermute(contiguous(x), out, send_to, recv_from, label or "collective-permute")
    return Pending((req,), lambda: out)


def collective_permute_native(comm: Communicator, send_to: int | None, recv_from: int | None,
                              nbytes: int, label: str):
    """:func:`collective_permute` of ``nbytes`` as native code runs it (one MPI_Sendrecv:
    xladist/collectives/native_ops.py NativePermute), or None where it cannot (a communicator without
    a native form, peers :func:`collective_permute` refuses: it then reports the error)."""
    bind = getattr(comm, "native_permute", None)
    if bind is None:
        return None
    try:
        _prepare(comm, None, send_to, recv_from)
    except ValueError:
        return None
    return bind(send_to, recv_from, nbytes, label)
