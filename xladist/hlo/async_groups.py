"""Send/recv grouped in one async computation (an "async group"), as XLA's GPU pipeliner writes
them: `async-start(...), calls=wrapped` where `wrapped` holds several send and recv ops and
returns them in its root tuple; the one `async-done` completes them all and yields the wrapped
root, each send's and recv's `(data, u32[], token[])` with the received data in place.

The start issues every transfer of the group (issuing never blocks, so their order among
themselves cannot deadlock); the done waits for all of them (send: the peer posted the matching
recv; recv: the data arrived). Which send pairs with which recv is the usual rule
(collective_groups.SendRecvStreams): the group changes when a transfer completes, not whom it
meets. `transfer_group` is the one reading of the form, shared by both backends and the static
check.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from .ir import Instruction

__all__ = ["group_start", "transfer_group"]

_P2P = ("send", "recv")


def transfer_group(start: Instruction) -> list[tuple[int | None, Instruction]]:
    """The send/recv ops an async-start wraps, as (index in the wrapped root tuple, op) in root
    order (index None: the root is the op itself); [] when it wraps none.

    UnsupportedError, naming the instruction, for a group whose done could not complete every
    transfer: a send or recv that is not an element of the root (or is used by anything else),
    or a send-done / recv-done inside the wrapped computation."""
    wrapped = start.attrs.get("calls") if start.opcode == "async-start" else None
    if wrapped is None:
        return []
    ops = [i for i in wrapped.instructions if i.opcode in _P2P]
    dones = [i for i in wrapped.instructions if i.opcode in ("send-done", "recv-done")]
    if not ops and not dones:
        return []
    where = f"{start.name} (line {start.line})"
    if dones:
        raise UnsupportedError(
            f"{where} wraps {dones[0].opcode} {dones[0].name} in an async computation "
            f"({wrapped.name}); an async group holds send and recv ops only, completed by the "
            "async-done")
    root = wrapped.root
    if root.opcode in _P2P:
        group = [(None, root)]
    elif root.opcode == "tuple":
        group = [(k, op) for k, op in enumerate(root.operands) if op.opcode in _P2P]
    else:
        group = []
    users = wrapped.users()
    grouped = [op for _, op in group]
    for op in ops:
        mine = users.get(op, [])
        if grouped.count(op) != 1 or any(u is not root for u in mine) or len(mine) > 1:
            raise UnsupportedError(
                f"{where}: {op.opcode} {op.name} in the async computation {wrapped.name} must "
                "be an element of its root tuple (once) and used by nothing else: the async-done "
                "completes the transfers the wrapped root returns")
    return group


def group_start(done: Instruction) -> Instruction | None:
    """The async-start an async-update or async-done completes (through async-updates)."""
    start = done.operands[0] if done.operands else None
    while start is not None and start.opcode == "async-update":
        start = start.operands[0] if start.operands else None
    return start if start is not None and start.opcode == "async-start" else None
