"""Pass 1: a private, flattened copy of each computation the compiler runs.

JAX/XLA `fusion` instructions (kLoop and kCustom) and plain `call`s are inlined:
the compiler re-plans fusion itself (fusion.py), and calls disappear so producers
and consumers on both sides of a call can fuse. An async group of sends and recvs
(xladist/hlo/async_groups.py) is inlined too: its sends and recvs where the async-start
is, a send-done / recv-done for each where the async-done is, and the done's value rebuilt
from them, so the group runs on the same channel thunks (and native loop steps) as any
send and recv. The user's Module is never modified: instructions are cloned,
called computations (reducers, loop bodies) stay shared references.
"""

from __future__ import annotations

import numpy as np

from ..analysis.schedule import communicates
from ..hlo.async_groups import group_start, transfer_group
from ..hlo.ir import Computation, Instruction
from ..hlo.attrs import Literal
from ..hlo.shape import Shape
from .simplify import relaid

# Opcodes whose called computation is inlined into the caller.
INLINED = {"fusion", "call"}


def _clone(instr: Instruction, name: str, operands) -> Instruction:
    c = Instruction(name, instr.opcode, instr.shape, operands, dict(instr.attrs),
                    parameter_number=instr.parameter_number, literal=instr.literal)
    c.frontend_attributes = dict(instr.frontend_attributes)
    c.backend_config = instr.backend_config
    c.metadata = instr.metadata
    c.line = instr.line
    return c


def _inlinable(instr: Instruction) -> bool:
    # A composite call (is_composite=true, composite.name/attributes/version in its
    # frontend attributes) means exactly its decomposition, the called computation
    # (CompositeCall in XLA's operation semantics): inlined like any call.
    return instr.opcode in ("fusion", "call")


def flatten(comp: Computation, schedule: dict | None = None) -> Computation:
    """A copy of comp with every fusion and call inlined (recursively), in a
    topological order, parameters first, dead pure instructions dropped.

    `schedule` (computation name -> instruction order, e.g. xladist.analysis.schedule's) gives
    the order to keep: every computation, inlined ones included, is walked in its
    scheduled order, so the thunks run it exactly (fusion only moves pure producers
    into their consumers' kernels, never a communicating op)."""
    schedule = schedule or {}
    out = Computation(comp.name)
    out.module = comp.module
    # clone -> the user's instruction: device ops are keyed by the original
    # (the runtime plans collectives per instruction when the program loads).
    out.original_of = {}
    mapping: dict[Instruction, Instruction] = {}
    groups: dict = {}   # async-start of a send/recv group -> (its group, the inlined root)

    def emit(src: Computation, prefix: str, bound: dict[Instruction, Instruction]):
        for instr in _topological(src, schedule.get(src.name)):
            if instr.opcode == "parameter" and instr in bound:
                mapping[instr] = bound[instr]
                continue
            if instr.opcode in ("async-update", "async-done") and \
                    group_start(instr) in groups:
                if instr.opcode == "async-done":
                    mapping[instr] = _complete(out, prefix + instr.name, instr,
                                               *groups[group_start(instr)], mapping)
                continue
            ops = [mapping[o] for o in instr.operands]
            if instr.opcode == "async-start" and transfer_group(instr):
                callee = instr.attrs["calls"]
                inner = {p: ops[p.parameter_number] for p in callee.parameters}
                groups[instr] = (transfer_group(instr), emit(callee, f"{prefix}{instr.name}/",
                                                             inner))
                continue
            if _inlinable(instr):
                callee = instr.attrs["calls" if instr.opcode == "fusion" else "to_apply"]
                # Each parameter in its own declared layout (a bitcast inside reads it).
                inner = {p: _relayout(out, f"{prefix}{instr.name}/{p.name}",
                                      ops[p.parameter_number], p.shape)
                         for p in callee.parameters}
                mapping[instr] = _relayout(out, prefix + instr.name,
                                           emit(callee, f"{prefix}{instr.name}/", inner),
                                           instr.shape)
                continue
            c = _clone(instr, prefix + instr.name, ops)
            out.original_of[c] = instr
            out.add(c)
            mapping[instr] = c
        return mapping[src.root]

    out.root = emit(comp, "", {})
    _drop_dead(out)
    return out


def _relayout(out: Computation, name: str, value: Instruction, shape: Shape) -> Instruction:
    """`value` (an inlined callee's root, or an operand bound to a callee parameter) in the
    layout of `shape` (the call's or fusion's own, or the parameter's): XLA's call result
    has the instruction's layout, which may differ from the callee root's, and a callee
    parameter its own; every user (and the entry's result) reads the declared one
    (simplify.relaid: arrays copied, tuples rebuilt; nothing added where the layouts
    agree)."""
    new = relaid(value, shape, name)
    for i in new:
        out.add(i)
    return new[-1] if new else value


def _complete(out: Computation, name: str, done: Instruction, group, root: Instruction,
              mapping) -> Instruction:
    """The async-done of a send/recv group, inlined: a send-done / recv-done per transfer (in
    the wrapped root's order), and the done's value, each transfer's (data, u32 0, token)."""
    u32 = Shape.scalar("u32")

    def add(suffix, opcode, shape, operands=(), attrs=None, literal=None):
        i = Instruction(f"{name}.{suffix}", opcode, shape, operands, attrs, literal=literal)
        i.line = done.line
        out.add(i)
        return i

    zero = add("context", "constant", u32, literal=Literal(u32, np.zeros((), np.uint32)))
    parts = list(root.operands) if group[0][0] is not None else [root]
    for k, op in group:
        k = 0 if k is None else k
        start = mapping[op]
        channel = {a: op.attrs[a] for a in ("channel_id", "is_host_transfer")
                   if a in op.attrs}
        if op.opcode == "send":
            token = add(op.name, "send-done", Shape.token(), [start], channel)
            data = start.operands[0]
        else:
            received = add(op.name, "recv-done", Shape.tuple_of(
                [op.shape.tuple_shapes[0], Shape.token()]), [start], channel)
            data = add(f"{op.name}.data", "get-tuple-element", op.shape.tuple_shapes[0],
                       [received], {"index": 0})
            token = add(f"{op.name}.token", "get-tuple-element", Shape.token(), [received],
                        {"index": 1})
        parts[k] = add(f"{op.name}.value", "tuple", op.shape, [data, zero, token])
    if group[0][0] is None:
        return parts[0]
    return add("value", "tuple", root.shape, parts)


def _topological(comp: Computation, given=None) -> list[Instruction]:
    """Operands before users; parameters first; side-effecting roots kept. A `given`
    order that is itself topological comes out unchanged."""
    seen: set[int] = set()
    order: list[Instruction] = []
    for p in comp.parameters:
        seen.add(id(p))
        order.append(p)

    def visit(i: Instruction):
        stack = [(i, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for pred in reversed(list(node.operands) + list(node.control_predecessors)):
                if id(pred) not in seen:
                    stack.append((pred, False))

    # The schedule's (else the text's) order first keeps side effects (outfeed, send)
    # in program order; anything it leaves out follows in text order.
    for instr in list(given or ()) + list(comp.instructions):
        visit(instr)
    return order


def _drop_dead(comp: Computation) -> None:
    """Drop what nothing uses, except what has an effect: a side effect, or waiting for
    another device -- a conditional, call or loop whose computations communicate is a
    rendezvous the other devices count on, as the interpreter and the deadlock check run
    it (dropping a dead conditional that all-reduces on one replica only paired that
    replica's next all-reduce with another of its partner's, and the run hung)."""
    live: set[int] = set()
    stack = [comp.root]
    for i in comp.instructions:
        info = i.info
        if i.opcode == "parameter" or (info is not None and info.side_effect) or \
                i.opcode in ("custom-call", "infeed", "outfeed", "send", "recv", "send-done",
                             "recv-done") or communicates(i):
            stack.append(i)
    while stack:
        i = stack.pop()
        if id(i) in live:
            continue
        live.add(id(i))
        stack.extend(i.operands)
    comp.instructions = [i for i in comp.instructions if id(i) in live]
