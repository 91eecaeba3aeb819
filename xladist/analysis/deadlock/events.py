"""The event model of the deadlock check: what one device does that another must answer.

An `Event` is one step of a device's communication trace (trace.py builds them):

  sync       a synchronous collective: blocks until every member of its group arrives (also
             a generic async-start wrapping a collective, which both backends run at once)
  start      an async collective's start: issues it, never blocks
  done       an async collective's done: blocks until every member has issued the start
  send/recv  issue a transfer on a channel to/from one peer, never block
  send-done  blocks until the peer has issued the matching recv (channels are unbuffered)
  recv-done  blocks until the peer has issued the matching send

A `Signature` is what all members of one collective must agree on; a `DeviceTrace` is one
device's ordered events.  A `Handle` is the value the tracer gives a start, send or recv: it
travels through tuples, calls and loop state as the runtime's handle does, so each done finds
the very start it completes.
"""

from __future__ import annotations

from xladist.hlo.ir import Instruction

__all__ = ["DeviceTrace", "Event", "Handle", "Signature", "where"]


def where(instr: Instruction, ctx: tuple[str, ...] = ()) -> str:
    """`name (line N, iteration 2 of while.3)` for messages."""
    parts = [f"line {instr.line}"] if instr.line else []
    parts.extend(ctx)
    return f"{instr.name} ({', '.join(parts)})" if parts else instr.name


class Signature:
    """What all members of one collective must agree on (docs/reference/collective-semantics.md
    G.24-25, 21b)."""

    FIELDS = ("kind", "groups", "types", "shapes", "reducer", "dimensions", "pairs")
    __slots__ = FIELDS

    def __init__(self, kind, groups, types, shapes, reducer, dimensions, pairs):
        self.kind = kind
        self.groups = groups
        self.types = types
        self.shapes = shapes
        self.reducer = reducer
        self.dimensions = dimensions
        self.pairs = pairs

    def first_difference(self, other: Signature) -> str | None:
        if self is other:
            return None
        for f in self.FIELDS:
            if getattr(self, f) != getattr(other, f):
                return f
        return None

    def show(self, field: str) -> str:
        v = getattr(self, field)
        if v is None:
            return "-"
        if field == "groups":
            return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in v) + "}"
        if field == "pairs":
            return "{" + ",".join(f"{{{s},{t}}}" for s, t in v) + "}"
        if isinstance(v, tuple):
            return ", ".join(map(str, v)) if v else "()"
        return str(v)


class Event:
    __slots__ = (
        "channel",
        "ctx",
        "device",
        "group",
        "index",
        "inst",
        "instr",
        "issued",
        "kind",
        "link",
        "looped",
        "partner",
        "peer",
        "shape",
        "sig",
        "stream",
    )

    def __init__(self, kind: str, instr: Instruction, device: int, ctx: tuple[str, ...]):
        self.kind = kind
        self.instr = instr
        self.device = device
        self.ctx = ctx
        self.sig: Signature | None = None
        self.group: tuple[int, ...] = ()
        self.channel = None                 # send/recv: the channel_id (for messages)
        self.stream = None                  # and the pairing stream (SendRecvStreams.key)
        self.peer: int | None = None
        self.shape: str | None = None
        self.link: Event | None = None      # done -> its start / send / recv
        self.inst = None                    # the matched collective instance
        self.partner: Event | None = None   # send <-> matched recv
        self.issued = False
        self.index = 0                      # position in the device's trace
        self.looped = False                 # inside a loop traced by induction (check.py)

    def where(self) -> str:
        return where(self.instr, self.ctx)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.instr.name} on device {self.device}>"


class Handle:
    """The traced value of a start, send or recv: its event (None when this device takes no
    part in it) and, in a symbolic trace, its step (symmetry.py)."""

    __slots__ = ("event", "op", "step")

    def __init__(self, op: str, event: Event | None, step: int | None):
        self.op, self.event, self.step = op, event, step

    def __repr__(self) -> str:
        return f"Handle({self.op}, {self.event})"


class DeviceTrace:
    def __init__(self, device: int, replica: int, partition: int):
        self.device = device
        self.replica = replica
        self.partition = partition
        self.events: list[Event] = []
        # (instruction, reason, ctx) where the trace stopped because control depends on data.
        self.unproven: tuple[Instruction, str, tuple[str, ...], str] | None = None
        # Loops traced by induction (induction.py): (while, ctx, trip count or trip key).
        self.shortened: list[tuple] = []
        # The steady iterations of each loop instance traced for more: (while, ctx, first
        # event index, end index, period p, how many more times they run or None, index of
        # the loop's first event) spanning its last p traced iterations (steady.py).
        self.windows: list[tuple] = []
        # Loops whose trip count was taken from known_trip_count because the condition could
        # not be folded: (while, ctx, count, why); the verdict then says "assuming".
        self.assumptions: list[tuple] = []
        # A symbolic trace (symmetry.py): every communicating instruction reached, whether
        # or not the traced device takes part, as (kind, instruction, step of its start/op).
        self.steps: list[tuple] | None = None

