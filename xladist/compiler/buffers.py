"""Pass 3: buffer assignment — where every array value lives while a
computation runs.

Each array leaf of an instruction that produces data gets a `Slot`:
  param  an argument of the computation (never written)
  const  a static buffer holding a literal in its physical layout
  temp   a region of the computation's arena; dead regions are reused
  out    a leaf of the computation's result: allocated fresh per run, so results
         never alias the arena that the next run reuses
  dyn    filled while running by a thunk that produces new arrays (control flow,
         device ops)
  unused the slot of an in-place update's result, merged into its operand's
         slot by inplace.py
Aliasing instructions (tuple, get-tuple-element, bitcast, physical reshapes,
opt-barrier) share their operand's slots. Arena offsets come from a best-fit
allocator over the thunk order: a temp's region is free again after the last
thunk that reads it. Only in-place updates (inplace.py) write a buffer they
read; every other kernel's outputs are distinct from its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..hlo.ir import Computation, Instruction
from ..hlo.shape import Shape
from ..semantics.values import constant_literal
from .codegen.constants import to_physical

ALIGN = 64


@dataclass(eq=False)
class Slot:
    id: int
    kind: str
    shape: Shape | None
    nbytes: int
    offset: int = -1
    param: tuple[int, int] | None = None  # (parameter number, leaf index)
    data: np.ndarray | None = None        # const: the physical bytes
    name: str = ""

    def describe(self) -> str:
        where = {"temp": f"arena+{self.offset}", "param": f"param{self.param}",
                 "const": "static", "out": "result", "dyn": "dynamic",
                 "unused": "merged"}[self.kind]
        s = self.shape.to_text() if self.shape is not None else "scratch"
        return f"#{self.id} {s} {self.nbytes}B {where}"


@dataclass
class Assignment:
    slots: list[Slot] = field(default_factory=list)
    leaves: dict[Instruction, list[Slot | None]] = field(default_factory=dict)
    arena_size: int = 0

    def new(self, kind: str, shape: Shape | None, nbytes: int | None = None,
            name: str = "") -> Slot:
        n = shape.nbytes if nbytes is None else nbytes
        s = Slot(len(self.slots), kind, shape, n, name=name)
        self.slots.append(s)
        return s


def leaf_count(shape: Shape) -> int:
    return sum(1 for _ in shape.leaves())


def _slot_for_leaf(asg: Assignment, shape: Shape, kind: str, name: str) -> Slot | None:
    if not shape.is_array:
        return None
    return asg.new(kind, shape, name=name)


def _literal_leaf(literal, index: tuple[int, ...]):
    """The value of the leaf at shape index `index` of a constant's literal."""
    value = literal.value
    for i in index:
        value = value[i].value
    return value


def assign_slots(comp: Computation, kinds: dict[Instruction, str]) -> Assignment:
    """Slots for every instruction's leaves (offsets come later, in `place`)."""
    asg = Assignment()
    for instr in comp.instructions:
        k = kinds[instr]
        op = instr.opcode
        if k == "fused":
            continue
        if op == "parameter":
            slots = []
            for i, (_, s) in enumerate(instr.shape.leaves()):
                slot = _slot_for_leaf(asg, s, "param", instr.name)
                if slot is not None:
                    slot.param = (instr.parameter_number, i)
                slots.append(slot)
            asg.leaves[instr] = slots
        elif k == "const":
            # One static slot per array leaf: a tuple-shaped constant (`constant(( {1, 2},
            # 1.5 ))`) is a tuple of literals, each leaf its own buffer.
            slots = []
            literal = constant_literal(instr)  # (refuses an elided one)
            for index, s in instr.shape.leaves():
                slot = _slot_for_leaf(asg, s, "const", instr.name)
                value = _literal_leaf(literal, index)
                if slot is not None:
                    phys = to_physical(s, value)
                    slot.data = np.frombuffer(phys.tobytes(), dtype=np.uint8).copy()
                slots.append(slot)
            asg.leaves[instr] = slots
        elif k == "alias":
            asg.leaves[instr] = _alias_leaves(asg, instr)
        else:
            kind = "dyn" if k in ("control", "device") else "temp"
            asg.leaves[instr] = [_slot_for_leaf(asg, s, kind, instr.name)
                                 for _, s in instr.shape.leaves()]
    for slot in root_slots(asg, comp):
        if slot is not None and slot.kind == "temp":
            slot.kind = "out"
    return asg


def root_slots(asg: Assignment, comp: Computation) -> list[Slot | None]:
    return asg.leaves[comp.root]


def _alias_leaves(asg: Assignment, instr: Instruction) -> list[Slot | None]:
    op = instr.opcode
    if op == "tuple":
        out = []
        for o in instr.operands:
            out.extend(asg.leaves[o])
        return out
    if op == "get-tuple-element":
        src = instr.operands[0]
        i = instr.attrs["index"]
        start = sum(leaf_count(s) for s in src.shape.tuple_shapes[:i])
        return asg.leaves[src][start:start + leaf_count(src.shape.tuple_shapes[i])]
    if op in ("after-all",):
        return [None]
    if op in ("async-done", "copy-done"):
        # async-done: the result part (index 1) of the start's value;
        # copy-done: the destination (index 0) of copy-start's (dest, src, context).
        src = instr.operands[0]
        k = 1 if op == "async-done" else 0
        start = sum(leaf_count(s) for s in src.shape.tuple_shapes[:k])
        return asg.leaves[src][start:start + leaf_count(src.shape.tuple_shapes[k])]
    if op == "add-dependency":
        return asg.leaves[instr.operands[0]]
    # bitcast, reshape/copy/transpose (physical), opt-barrier, domain.
    return list(asg.leaves[instr.operands[0]])


def place(asg: Assignment, thunk_io: list[tuple[list[Slot], list[Slot]]]) -> None:
    """Arena offsets for temp slots. thunk_io[t] = (slots read, slots written) by
    thunk t, in execution order."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for t, (reads, writes) in enumerate(thunk_io):
        for s in writes:
            if s is not None and s.kind == "temp":
                first.setdefault(s.id, t)
                last[s.id] = max(last.get(s.id, t), t)
        for s in reads:
            if s is not None and s.kind == "temp":
                last[s.id] = max(last.get(s.id, t), t)
    free: list[tuple[int, int]] = []  # (offset, size), sorted by offset
    top = 0
    by_start: dict[int, list[Slot]] = {}
    by_end: dict[int, list[Slot]] = {}
    for s in asg.slots:
        if s.kind == "temp" and s.id in first:
            by_start.setdefault(first[s.id], []).append(s)
            by_end.setdefault(last[s.id], []).append(s)
    for t in range(len(thunk_io)):
        for s in by_start.get(t, []):
            size = _round(max(s.nbytes, 1))
            best = None
            for k, (off, sz) in enumerate(free):
                if sz >= size and (best is None or sz < free[best][1]):
                    best = k
            if best is None:
                s.offset = top
                top += size
            else:
                off, sz = free.pop(best)
                s.offset = off
                if sz > size:
                    free.append((off + size, sz - size))
                    free.sort()
        for s in by_end.get(t, []):
            free.append((s.offset, _round(max(s.nbytes, 1))))
            free.sort()
            free[:] = _merge(free)
    asg.arena_size = top


def _round(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _merge(blocks):
    out = []
    for off, sz in blocks:
        if out and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + sz)
        else:
            out.append((off, sz))
    return out
