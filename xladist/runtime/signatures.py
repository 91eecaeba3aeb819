"""Devices that meet in one collective must issue it alike (reference 21b), checked at run time.

Every device runs the same module, so a mismatch inside one collective needs control flow
that diverges: one device's branch issues an f32 all-reduce where another's issues an s32
one, or a loop that runs once more on one device pairs its collective with the next one
of another. XLA leaves that undefined (XLA:CPU returns garbage; MPI would reduce the bytes
of one type as the other). The deadlock check refuses it before the run; a run the check
did not prove (`--no-check`, or a program it could not prove, which runs with a warning)
has the members of each collective exchange its signature first -- what the check compares
(its form, reducer and dimensions; each operand's element type and dimensions, as they
are at this call: a dynamic dimension's size) -- on the collective's own communicator, so the exchange adds
no wait the collective itself would not make. A disagreement fails every member with an
error naming both devices and both instructions.

A proven run skips all of this (the check paired every collective across devices), and
only a proven run takes the native paths (bound and native-loop collectives), which have
no room for the exchange.
"""

from __future__ import annotations

import hashlib

import numpy as np

from xladist.collectives.all_gather import all_gather_native
from xladist.collectives.permute import collective_permute_native
from xladist.hlo.collective_groups import collective_terms

_DIGEST = 16     # bytes each member contributes to the group's exchange
_SAID = 256      # bytes of an instruction's description when they disagree

_HINT = ("devices disagree on a collective, which XLA leaves undefined; the deadlock check "
         "refuses such a program before it runs (this run was not proven by it: "
         "--no-check, or a program it could not prove)")


def _operand(shape, value) -> str:
    if shape.is_tuple:
        values = value if value is not None else [None] * len(shape.tuple_shapes)
        return "(" + ", ".join(_operand(s, v) for s, v in zip(shape.tuple_shapes, values)) + ")"
    if not shape.is_array:
        return shape.to_text(False)
    dims = shape.dims if value is None else np.shape(value)
    return f"{shape.element_type.name}[{','.join(map(str, dims))}]"


def signature(instr, args=None) -> str:
    """What must be alike on every member, as the deadlock check compares it
    (hlo/collective_groups.collective_terms) with this call's dimensions (`args`; None: the
    static ones): `all-reduce(f32[4]) to_apply=add (f32[])`. No layout: the collectives move
    logical values."""
    form, reducer, dimensions = collective_terms(instr)
    args = args if args is not None else [None] * len(instr.operands)
    text = f"{form}({', '.join(_operand(op.shape, a) for op, a in zip(instr.operands, args))})"
    if reducer is not None:
        text += f" to_apply={reducer}"
    if dimensions is not None:
        text += f" dimensions={{{','.join(map(str, dimensions))}}}"
    return text


def _digest(sig: str) -> np.ndarray:
    return np.frombuffer(hashlib.blake2b(sig.encode(), digest_size=_DIGEST).digest(), np.uint8)


def _signed(plan, instr, args=None) -> tuple[str, np.ndarray]:
    """(signature, digest) of this call of `instr`; one without a dynamic dimension has the
    same for every call, kept on its plan (formatting and hashing cost ~4 us a call)."""
    if plan.signed is not None:
        return plan.signed
    sig = signature(instr, args)
    signed = (sig, _digest(sig))
    if not any(any(leaf.dynamic) for op in instr.operands for _, leaf in op.shape.leaves()):
        plan.signed = signed
    return signed


def _said(instr, sig: str) -> np.ndarray:
    """`sig` and where it is, for the error (cut to a fixed size: MPI's exchange needs one)."""
    text = f"{sig} ({instr.name}, line {instr.line})".encode()[:_SAID]
    return np.frombuffer(text + bytes(_SAID - len(text)), np.uint8)


def _text(row) -> str:
    return bytes(row).rstrip(b"\0").decode(errors="replace")


def _pairwise(instr) -> bool:
    """A collective-permute, whose members meet only their pair (_with_peers)."""
    return instr.opcode.removesuffix("-start") == "collective-permute"


def disagreement(plan, instr, args, device: int) -> str | None:
    """The members' exchange for this call of `instr` (collective over `plan.comm`): None
    when every member issues the same signature, else the error text naming both devices."""
    if plan.comm is None:  # a device in no group (collective-broadcast): no one to meet
        return None
    sig, mine = _signed(plan, instr, args)
    if _pairwise(instr):
        return _with_peers(plan, instr, sig, mine, device)
    comm = plan.comm
    every = np.empty((comm.size, _DIGEST), np.uint8)
    comm.allgather(mine, every, plan.label)
    if (every == mine).all():
        return None
    return _told(plan, instr, sig, mine, every, device)


def _told(plan, instr, sig: str, mine, every, device: int) -> str:
    """After members' digests differed (`every`, which every member holds alike, so every
    member makes this second exchange too): their descriptions, and the error text."""
    comm = plan.comm
    said = np.empty((comm.size, _SAID), np.uint8)
    comm.allgather(_said(instr, sig), said, plan.label)
    other = next(i for i in range(comm.size) if not (every[i] == mine).all())
    return _message(device, _text(said[comm.rank]), plan.group[other], _text(said[other]))


def _pair(plan) -> tuple[int | None, int | None]:
    """A collective-permute's peers to exchange with (a self pair exchanges nothing)."""
    me = plan.comm.rank
    return (None if plan.send_to == me else plan.send_to,
            None if plan.recv_from == me else plan.recv_from)


def _pair_row(instr, sig: str, digest) -> np.ndarray:
    """What a collective-permute's source sends its target: digest, then description."""
    return np.concatenate([digest, _said(instr, sig)])


def _pair_refusal(plan, mine, theirs, device: int) -> str | None:
    """The error when the row received from this device's source differs from its own."""
    recv_from = _pair(plan)[1]
    if recv_from is None or (theirs[:_DIGEST] == mine[:_DIGEST]).all():
        return None
    return _message(device, _text(mine[_DIGEST:]), plan.group[recv_from],
                    _text(theirs[_DIGEST:]))


def _with_peers(plan, instr, sig: str, digest, device: int) -> str | None:
    """A collective-permute meets only its pair: the source tells its target what it sends
    (the target, which would read those bytes as its own shape, is the one that refuses)."""
    send_to, recv_from = _pair(plan)
    if send_to is None and recv_from is None:
        return None
    mine = _pair_row(instr, sig, digest)
    theirs = np.zeros_like(mine)
    plan.comm.permute(mine, theirs, send_to, recv_from, plan.label)
    return _pair_refusal(plan, mine, theirs, device)


def _message(me: int, mine: str, other: int, theirs: str) -> str:
    return f"device {me} issues {mine} where device {other} issues {theirs}: {_HINT}"


class NativeAgreement:
    """`disagreement`'s exchange as a native loop makes it before its collective step
    (compiler/native/collectives.py emit_agreement), the same bytes: one MPI_Allgather of
    the 16-byte digests on the group's communicator, or one MPI_Sendrecv of digest and
    description with a collective-permute's peers. Native steps have static shapes, so
    the signature is computed once. `refused(where)` is the error after the driver found
    the members apart (a group's second exchange happens here, in Python, on every member:
    they all saw the same digests)."""

    def __init__(self, plan, instr, device: int, error, call, mine, rows: int):
        self.plan, self.instr, self.device, self.error = plan, instr, device, error
        self.call, self.mine, self.rows = call, mine, rows
        # A missing source leaves `theirs` as it is: mine, so it compares equal. (`call`
        # keeps the status buffer its address points to.)
        self.theirs = np.tile(mine, rows)

    def entries(self) -> list[int]:
        c = self.call
        return [c.fn, self.mine.ctypes.data, self.theirs.ctypes.data, self.rows, c.count,
                c.datatype, c.comm, getattr(c, "dest", 0), getattr(c, "source", 0),
                getattr(c, "status", 0)]

    def refused(self, where: str):
        if _pairwise(self.instr):  # what the source sent says it
            text = _pair_refusal(self.plan, self.mine, self.theirs, self.device)
        else:
            sig, digest = _signed(self.plan, self.instr)
            text = _told(self.plan, self.instr, sig, digest,
                         self.theirs.reshape(self.rows, _DIGEST), self.device)
        return self.error(f"{text} (in {where})")


def native_agreement(plan, instr, device: int, error):
    """The NativeAgreement of `instr` (a planned collective), None when there is nothing to
    exchange (a permute without another peer), False when its communicator has no native
    form (the loop then keeps the Python path, which exchanges)."""
    sig, digest = _signed(plan, instr)
    if _pairwise(instr):
        send_to, recv_from = _pair(plan)
        if send_to is None and recv_from is None:
            return None
        mine = _pair_row(instr, sig, digest)
        call = collective_permute_native(plan.comm, send_to, recv_from, mine.size, plan.label)
        rows = 1
    else:
        mine = digest
        call = all_gather_native(plan.comm, _DIGEST, plan.label)
        rows = plan.comm.size
    if call is None:
        return False
    return NativeAgreement(plan, instr, device, error, call, mine, rows)
