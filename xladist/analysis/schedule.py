"""A linear order for every computation: the order the executor runs and the deadlock check walks.

Constraints (docs/reference/collective-semantics.md D, F, G.26):

* data dependencies, control-predecessors and token chains (tokens are operands);
* channel chains, as XLA's P2PSchedulePreparation forms them: where a computation holds
  exactly one device-to-device recv and one send of a channel (with their done ops when
  these consume them directly), the order is recv -> send -> recv-done -> send-done.
  Posting the recv before the send is what lets two devices that send to each other on one
  channel both make progress over unbuffered channels.  A channel with more sends or recvs
  in the computation, or only one kind (XLA's pipeliner puts the sends of a transfer on one
  channel and the recvs on another), forms no chain: XLA leaves such groups alone, and so
  does this scheduler; their order is the dependencies' and the text's;
* no other cross-device instruction (collective, async collective, another chain's op, or a
  call/while/conditional/fusion that contains one) may sit between a chain's first and last op:
  it goes before the chain's first op or after its last.  Otherwise the collective and the
  transfer can wait on each other across devices (G.26, XLA's P2PSchedulePreparation);
* async starts come before their dones (a data dependency); the async-done of a send/recv
  group (xladist/hlo/async_groups.py) waits for its transfers, so it counts as cross-device.

The order is deterministic: among the instructions that may go next, the one earliest in the
text goes first, so a module already in a valid order keeps it.  A module with
`is_scheduled=true` keeps its given (text) order, which must respect the dependencies only,
as XLA runs a scheduled module as written: the channel chain rules are how this scheduler
picks an order, not a property of every good order, and the deadlock check (analysis/deadlock)
proves or refutes the given one.
"""

from __future__ import annotations

import heapq
import itertools
import weakref
from collections.abc import Iterable

from xladist.errors import VerifierError
from xladist.hlo.async_groups import group_start, transfer_group
from xladist.hlo.ir import Computation, Instruction, Module

__all__ = [
    "Chain",
    "ScheduleError",
    "channel_chains",
    "check_order",
    "communicates",
    "computation_communicates",
    "is_cross_device_p2p",
    "schedule_computation",
    "schedule_module",
]

# Async forms that stay on one device: they never wait for another device.
_LOCAL_ASYNC = frozenset({"copy-start", "copy-done"})


class ScheduleError(VerifierError):
    """No order satisfies the constraints, or a given schedule breaks one."""


def _where(instr: Instruction) -> str:
    return f"{instr.name} (line {instr.line})" if instr.line else instr.name


def is_cross_device_p2p(instr: Instruction) -> bool:
    """send/recv and their dones between devices (host transfers never wait for a device)."""
    return instr.family == "p2p" and not instr.attrs.get("is_host_transfer", False)


# Computations are not edited once scheduling starts, so the answer can be remembered.
_COMM_CACHE: weakref.WeakKeyDictionary[Computation, bool] = weakref.WeakKeyDictionary()


def computation_communicates(comp: Computation) -> bool:
    """Whether running `comp` (including everything it calls) talks to another device."""
    hit = _COMM_CACHE.get(comp)
    if hit is not None:
        return hit
    _COMM_CACHE[comp] = False  # recursion guard; HLO call graphs are acyclic
    result = any(communicates(i) for i in comp.instructions)
    _COMM_CACHE[comp] = result
    return result


def communicates(instr: Instruction) -> bool:
    """Whether executing `instr` may wait for another device."""
    family = instr.family
    if family == "collective":
        return True
    if family == "collective_async":
        return instr.opcode not in _LOCAL_ASYNC
    if family == "p2p":
        return is_cross_device_p2p(instr)
    if instr.opcode == "async-done":
        # The done of a send/recv group (xladist/hlo/async_groups.py) waits for its transfers.
        start = group_start(instr)
        return start is not None and any(is_cross_device_p2p(op)
                                         for _, op in transfer_group(start))
    return any(computation_communicates(c) for c in instr.called_computations())


class Chain:
    """One recv/send pair of a channel in one computation, with the dones that consume them.

    `members` is in the order the chain runs: recv, send, recv-done, send-done (absent ones
    skipped).
    """

    __slots__ = ("channel", "recv", "recv_done", "send", "send_done")

    def __init__(self, channel, recv, send, recv_done, send_done):
        self.channel = channel
        self.recv = recv
        self.send = send
        self.recv_done = recv_done
        self.send_done = send_done

    @property
    def members(self) -> list[Instruction]:
        return [i for i in (self.recv, self.send, self.recv_done, self.send_done) if i is not None]

    def describe(self) -> str:
        return f"channel {self.channel} chain " + " -> ".join(_where(i) for i in self.members)


def channel_chains(comp: Computation) -> list[Chain]:
    """The channel chains of a computation, in text order of their first op.

    A chain is the one recv and the one send of a channel in `comp` (a channel with more of
    either, or none of one kind, forms no chain, as in XLA's P2PSchedulePreparation); a done
    belongs to it when its operand is the chain's recv/send itself.  Dones whose op arrives
    through a loop parameter (pipelined transfers) belong to no chain.
    """
    recvs: dict[object, list[Instruction]] = {}
    sends: dict[object, list[Instruction]] = {}
    done_of: dict[Instruction, Instruction] = {}
    for instr in comp.instructions:
        if not is_cross_device_p2p(instr):
            continue
        channel = instr.attrs.get("channel_id")
        if instr.opcode == "recv":
            recvs.setdefault(channel, []).append(instr)
        elif instr.opcode == "send":
            sends.setdefault(channel, []).append(instr)
        elif instr.operands and instr.operands[0].opcode in ("send", "recv"):
            done_of.setdefault(instr.operands[0], instr)
    chains = []
    for channel, rs in recvs.items():
        ss = sends.get(channel, [])
        if len(rs) == 1 and len(ss) == 1:
            r, s = rs[0], ss[0]
            chains.append(Chain(channel, r, s, done_of.get(r), done_of.get(s)))
    order = {instr: i for i, instr in enumerate(comp.instructions)}
    chains.sort(key=lambda c: min(order[m] for m in c.members))
    return chains


class _Graph:
    """Predecessor lists over one computation's instructions, by text index; with `chains`,
    the channel chains' order too."""

    def __init__(self, comp: Computation, chains: bool = True):
        self.comp = comp
        self.instrs = list(comp.instructions)
        self.index = {instr: i for i, instr in enumerate(self.instrs)}
        n = len(self.instrs)
        self.preds: list[set[int]] = [set() for _ in range(n)]
        self.reason: dict[tuple[int, int], str] = {}
        for i, instr in enumerate(self.instrs):
            for op in instr.operands:
                self._edge(op, instr, "operand")
            for op in instr.control_predecessors:
                self._edge(op, instr, "control-predecessor")
        self.chains = channel_chains(comp) if chains else []
        for chain in self.chains:
            members = chain.members
            for a, b in itertools.pairwise(members):
                self._edge(a, b, f"channel {chain.channel} order recv, send, recv-done, send-done")
        self.comm = [communicates(i) for i in self.instrs]
        self.chain_of: dict[int, Chain] = {}
        for chain in self.chains:
            for m in chain.members:
                self.chain_of[self.index[m]] = chain

    def _edge(self, a: Instruction, b: Instruction, why: str) -> None:
        ia, ib = self.index.get(a), self.index.get(b)
        if ia is None or ib is None or ia == ib:
            return
        if ia not in self.preds[ib]:
            self.preds[ib].add(ia)
            self.reason.setdefault((ia, ib), why)

    def topo(self) -> list[int]:
        """Kahn's order, earliest text index first; raises ScheduleError on a cycle."""
        n = len(self.instrs)
        succs: list[list[int]] = [[] for _ in range(n)]
        indeg = [len(p) for p in self.preds]
        for b, ps in enumerate(self.preds):
            for a in ps:
                succs[a].append(b)
        heap = [i for i in range(n) if indeg[i] == 0]
        heapq.heapify(heap)
        out = []
        while heap:
            i = heapq.heappop(heap)
            out.append(i)
            for j in succs[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    heapq.heappush(heap, j)
        if len(out) < n:
            raise ScheduleError(self._describe_cycle(set(range(n)) - set(out)),
                                computation=self.comp.name)
        return out

    def _describe_cycle(self, stuck: set[int]) -> str:
        # Walk predecessors inside the stuck set until a node repeats: that is a cycle.
        start = min(stuck)
        path, seen = [start], {start: 0}
        while True:
            nxt = min(p for p in self.preds[path[-1]] if p in stuck)
            if nxt in seen:
                cycle = path[seen[nxt]:] + [nxt]
                break
            seen[nxt] = len(path)
            path.append(nxt)
        cycle.reverse()  # now each element must run before the next
        lines = [f"  {_where(self.instrs[a])} must run before {_where(self.instrs[b])} "
                 f"({self.reason.get((a, b), 'dependency')})" for a, b in itertools.pairwise(cycle)]
        return ("no order satisfies the dependencies and channel rules; they form a cycle:\n"
                + "\n".join(lines))


def _collective_ancestors(g: _Graph, topo: list[int]) -> tuple[list[int], dict[int, int]]:
    """Per instruction, a bitset of the cross-device instructions it (transitively) needs."""
    bit = {}
    for i, c in enumerate(g.comm):
        if c:
            bit[i] = 1 << len(bit)
    anc = [0] * len(g.instrs)
    for i in topo:
        acc = 0
        for p in g.preds[i]:
            acc |= anc[p] | bit.get(p, 0)
        anc[i] = acc
    return anc, bit


def _chain_needs(g: _Graph, anc: list[int], bit: dict[int, int]) -> dict[int, int]:
    """For each chain (keyed by its first op), the cross-device ops that must precede it.

    Raises ScheduleError when such an op also depends on the chain's first op: it would have to
    run inside the chain.
    """
    needs: dict[int, int] = {}
    by_bit = {b: i for i, b in bit.items()}
    for chain in g.chains:
        idx = [g.index[m] for m in chain.members]
        own = 0
        for i in idx:
            own |= bit[i]
        need = 0
        for i in idx:
            need |= anc[i]
        need &= ~own
        first = idx[0]
        rest = need
        while rest:
            low = rest & -rest
            rest ^= low
            x = by_bit[low]
            if anc[x] & bit[first]:
                inner = g.instrs[x]
                raise ScheduleError(
                    f"{_where(inner)} talks to other devices but has to run inside "
                    f"{chain.describe()}: it depends on the chain's first op and a later chain "
                    "op depends on it. Move it before the chain's recv or after its send-done, "
                    "so that the transfer and the collective cannot wait on each other across "
                    "devices (docs/reference/collective-semantics.md G.26, XLA's "
                    "P2PSchedulePreparation; or give the module is_scheduled=true to run it in "
                    "its own order)",
                    computation=g.comp.name, instruction=inner.name, line=inner.line)
        needs[first] = need
    return needs


def schedule_computation(comp: Computation) -> list[Instruction]:
    """A linear order of `comp` that respects every constraint of the module docstring.

    Raises ScheduleError (naming the instructions) when no such order exists.
    """
    g = _Graph(comp)
    topo = g.topo()
    anc, bit = _collective_ancestors(g, topo)
    needs = _chain_needs(g, anc, bit)
    n = len(g.instrs)
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(p) for p in g.preds]
    for b, ps in enumerate(g.preds):
        for a in ps:
            succs[a].append(b)
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    done_bits = 0
    open_chain: Chain | None = None
    open_left = 0
    order: list[int] = []

    def eligible(i: int) -> bool:
        if not g.comm[i]:
            return True
        chain = g.chain_of.get(i)
        if open_chain is not None:
            return chain is open_chain
        if chain is not None:
            # Only a chain's first op can be ready while it is closed (chain edges).
            return needs[i] & ~done_bits == 0
        return True

    while ready:
        skipped = []
        pick = None
        while ready:
            i = heapq.heappop(ready)
            if eligible(i):
                pick = i
                break
            skipped.append(i)
        for s in skipped:
            heapq.heappush(ready, s)
        if pick is None:
            blocked = [g.chain_of[i] for i in skipped if i in g.chain_of]
            text = "; ".join(c.describe() for c in blocked) or \
                ", ".join(_where(g.instrs[i]) for i in skipped)
            raise ScheduleError(
                "channel chains need each other's ops first, so they cannot be serialized "
                "(docs/reference/collective-semantics.md G.26: a chain's recv ... send-done "
                "holds no other collective): " + text, computation=comp.name)
        order.append(pick)
        if pick in bit:
            done_bits |= bit[pick]
        chain = g.chain_of.get(pick)
        if chain is not None:
            if open_chain is None:
                open_chain, open_left = chain, len(chain.members)
            open_left -= 1
            if open_left == 0:
                open_chain = None
        for j in succs[pick]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    return [g.instrs[i] for i in order]


def check_order(comp: Computation, order: Iterable[Instruction] | None = None) -> None:
    """Check a given order (default: text order) against the dependencies (operands, tokens,
    control-predecessors); raise ScheduleError.  The channel chain rules are the scheduler's
    way to pick an order, not checked here (module docstring)."""
    g = _Graph(comp, chains=False)
    order = list(comp.instructions if order is None else order)
    pos = {instr: k for k, instr in enumerate(order)}
    if len(pos) != len(g.instrs) or any(i not in pos for i in g.instrs):
        raise ScheduleError("the schedule does not list every instruction exactly once",
                            computation=comp.name)
    for b, ps in enumerate(g.preds):
        for a in sorted(ps):
            ia, ib = g.instrs[a], g.instrs[b]
            if pos[ia] > pos[ib]:
                raise ScheduleError(
                    f"the schedule runs {_where(ib)} before {_where(ia)}, but "
                    f"{g.reason.get((a, b), 'a dependency')} requires {ia.name} first",
                    computation=comp.name, instruction=ib.name, line=ib.line)


def schedule_module(module: Module) -> dict[Computation, list[Instruction]]:
    """The order of every computation of `module`.

    A module marked `is_scheduled=true` keeps its text order, after `check_order`; otherwise
    every computation is ordered by `schedule_computation`.
    """
    out: dict[Computation, list[Instruction]] = {}
    for comp in module.computations:
        if module.is_scheduled:
            check_order(comp)
            out[comp] = list(comp.instructions)
        else:
            out[comp] = schedule_computation(comp)
    return out
