"""collective-broadcast (docs/reference/collective-semantics.md C.15): the group's first member is the root.

Same outline as :mod:`xladist.collectives.all_reduce`.  ``comm`` is the communicator of this device's
group (rank 0 = first listed member, as CommunicatorCache orders ranks by group position), or
None when the device is in no group, which yields zeros.
"""

from __future__ import annotations

import numpy as np

from ._common import Pending
from .communicator import Communicator

__all__ = ["collective_broadcast", "collective_broadcast_start"]


def collective_broadcast(comm: Communicator | None, x, *, label: str | None = None):
    """Return the root's operand on every member (fresh array); zeros if ``comm`` is None."""
    if type(x) is list or type(x) is tuple:
        return [collective_broadcast(comm, xi, label=label) for xi in x]
    x = np.asarray(x)
    if comm is None:
        return np.zeros(x.shape, x.dtype)
    out = np.array(x, order="C") if comm.rank == 0 else comm.result(x.shape, x.dtype, like=x)
    if comm.size > 1 and x.size:
        comm.bcast(out, 0, label or "collective-broadcast")
    return out


def collective_broadcast_start(comm: Communicator | None, x, *,
                               label: str | None = None) -> Pending:
    """Start a collective-broadcast; ``.wait()`` returns what :func:`collective_broadcast`
    would."""
    if type(x) is list or type(x) is tuple:
        parts = [collective_broadcast_start(comm, xi, label=label) for xi in x]
        return Pending((), lambda: [p.wait() for p in parts])
    x = np.asarray(x)
    if comm is None:
        return Pending.ready(np.zeros(x.shape, x.dtype))
    out = np.array(x, order="C") if comm.rank == 0 else comm.result(x.shape, x.dtype, like=x)
    if comm.size == 1 or x.size == 0:
        return Pending.ready(out)
    req = comm.ibcast(out, 0, label or "collective-broadcast")
    return Pending((req,), lambda: out)
