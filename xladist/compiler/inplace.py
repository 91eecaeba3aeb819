"""Pass 3b: in-place updates — which dynamic-update-slice and scatter kernels write
into their operand's buffer, and which while loops take their initial carry
without copying it.

A kernel whose root is dynamic-update-slice (or a single-operand scatter) and
whose operand 0 is a buffer (not fused) may write only the updated region into
that buffer, when (XLA's buffer assignment makes the same call through
CanShareOperandBufferWithUser):
  * the buffer is *owned* by this run of the computation: an arena temporary, a
    result buffer, a parameter leaf the caller donated (while bodies, below), or a
    while loop's output leaf the loop guarantees it owns;
  * nothing reads the operand's value after the kernel: no later thunk, not the
    computation's result, and no earlier control/device thunk whose results may
    *be* that buffer (a while or conditional passes arrays through) and are read
    later;
  * the kernel reads the operand only as the update's destination (an update
    computed from the same buffer would read elements already overwritten).
The update's result then shares the operand's slot (buffers.Slot), so the loop
carry of `lax.scan`/`fori_loop` stacking is updated in O(update) per iteration
instead of being copied.

While loops: a body is compiled assuming every parameter leaf is donated, and
reports which leaves it actually writes or gives away (`used`) and where each
result leaf's array comes from (`sources`: a fresh buffer, parameter leaf j, or
unknown). The while thunk (control.py) makes sure every `used` leaf is owned by the
loop before each body run: it takes the initial value when this pass says the
enclosing computation owns it and reads it no more (`takes`), else copies it once;
after a body run, a leaf whose source is not owned is copied again (rare: a body
that returns a constant or an alias). Entry parameters are never donated: the
caller's arrays are never written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo.ir import Computation, Instruction
from .buffers import Assignment, Slot
from .codegen.ir_array import layout_of
from .fusion import FusionPlan

# Thunk kinds whose results may be their inputs' arrays (while state passed through,
# a conditional branch returning its operand, device ops on one device).
PASS_THROUGH = frozenset({"control", "device"})
THUNK_KINDS = frozenset({"kernel", "library", "control", "device"})
FRESH = "fresh"  # a result leaf that is a buffer this run allocated (or owns outright)


@dataclass
class InPlacePlan:
    kernels: set = field(default_factory=set)        # kernel roots that update in place
    takes: dict = field(default_factory=dict)        # while -> [take init leaf k?]
    used: set = field(default_factory=set)           # donated parameter leaves written/given
    sources: list = field(default_factory=list)      # per result leaf: FRESH, int j, None


def plan_in_place(comp: Computation, plan: FusionPlan, asg: Assignment, donated: bool,
                  loops: dict) -> InPlacePlan:
    """Decide in-place kernels and while takes; merges the slots of in-place results
    into their operands' slots (asg.leaves is rewritten). `loops` maps each while of
    `comp` to its compiled body (with `used`), `donated` says whether the caller
    donates every parameter leaf (while bodies)."""
    out = InPlacePlan()
    order = [i for i in comp.instructions if plan.kind[i] in THUNK_KINDS]
    pos = {i: t for t, i in enumerate(order)}
    end = len(order)
    reads = {i: _reads(i, plan, asg) for i in order}
    root = [s for s in asg.leaves[comp.root]]
    # Slot id -> [(position of a read, the thunk it is read through)]: a direct read
    # is (t, t); a pass-through thunk t's inputs are also read wherever its results
    # are read (ext, t); the result is read at (end, None).
    seen: dict[int, list] = {}
    for i in order:
        for s in reads[i]:
            seen.setdefault(s.id, []).append((pos[i], pos[i]))
    for s in root:
        if s is not None:
            seen.setdefault(s.id, []).append((end, None))
    for i in reversed(order):
        if plan.kind[i] not in PASS_THROUGH:
            continue
        t = pos[i]
        ext = max([p for s in asg.leaves[i] if s is not None
                   for p, _ in seen.get(s.id, ())] + [t])
        if ext > t:
            for s in reads[i]:
                seen.setdefault(s.id, []).append((ext, t))
    param_leaf = {s.id: k for k, s in enumerate(
        s for p in comp.parameters for s in asg.leaves[p]) if s is not None}
    owned_dyn: set[int] = set()
    base: dict[int, Slot] = {}

    def resolve(s: Slot) -> Slot:
        while s.id in base:
            s = base[s.id]
        return s

    def owned(s: Slot) -> bool:
        b = resolve(s)
        if b.kind in ("temp", "out"):
            return True
        if b.kind == "param":
            return donated
        return b.kind == "dyn" and b.id in owned_dyn

    def claim(s: Slot) -> None:
        b = resolve(s)
        if b.kind == "param":
            out.used.add(param_leaf[b.id])

    def dead_after(s: Slot, t: int, via_ok: bool) -> bool:
        """Nothing but thunk t reads s's value from t on (t reads it exactly once);
        via_ok: reads through t's own results count as t's (a while's output is the
        loop's value, even when it is the same array)."""
        direct = 0
        for p, via in seen.get(s.id, ()):
            if p < t:
                continue
            if (p, via) == (t, t):
                direct += 1
            elif not (via_ok and via == t):
                return False
        return direct == 1

    for i in order:
        t = pos[i]
        if plan.kind[i] == "kernel":
            spec = plan.kernels[i]
            x = _update_target(spec)
            if x is None:
                continue
            s, d = asg.leaves[x][0], asg.leaves[i][0]
            if s is None or d is None or s.nbytes == 0 or not owned(s):
                continue
            others = [asg.leaves[j][0] for j in spec.inputs if j is not x]
            if any(o is not None and resolve(o) is resolve(s) for o in others):
                continue
            if not dead_after(s, t, via_ok=False):
                continue
            if resolve(s).kind == "temp" and any(r is d for r in root):
                continue  # an arena buffer cannot be a result
            claim(s)
            base[d.id] = resolve(s)
            out.kernels.add(i)
        elif i.opcode == "while" and i in loops:
            body = loops[i]
            init = asg.leaves[i.operands[0]]
            takes = []
            for k, s in enumerate(init):
                take = (s is not None and k in body.used and owned(s)
                        and dead_after(s, t, via_ok=True))
                if take:
                    claim(s)
                    b = resolve(s)
                    if b.kind == "temp":
                        # The loop's result may be this very buffer and may leave the
                        # computation: a fresh buffer per run, not an arena region.
                        b.kind = "out"
                takes.append(take)
            out.takes[i] = takes
            for k in body.used:
                s = asg.leaves[i][k]
                if s is not None:
                    owned_dyn.add(s.id)
    out.sources = _sources(root, seen, end, resolve, owned_dyn, param_leaf, out.used)
    _merge(asg, base, resolve)
    return out


def _reads(instr: Instruction, plan: FusionPlan, asg: Assignment) -> list[Slot]:
    if plan.kind[instr] == "kernel":
        ins = [asg.leaves[j][0] for j in plan.kernels[instr].inputs]
    else:
        ins = [s for o in instr.operands for s in asg.leaves[o]]
    return [s for s in ins if s is not None]


def _update_target(spec) -> Instruction | None:
    """Operand 0 of a dynamic-update-slice / single-operand scatter root when the
    kernel may write into it: a buffer input, read by nothing else in the kernel,
    with the result's layout."""
    root = spec.root
    dus = root.opcode == "dynamic-update-slice" and spec.kind == "loop"
    scatter = root.opcode == "scatter" and spec.kind == "scatter" and len(root.operands) == 3
    if not (dus or scatter):
        return None
    x = root.operands[0]
    if x not in spec.inputs or x in root.operands[1:] or not root.shape.is_array:
        return None
    if any(x in f.operands for f in spec.fused if f is not root):
        return None
    if x.shape.element_type != root.shape.element_type or x.shape.dims != root.shape.dims \
            or (root.shape.rank > 1 and layout_of(x.shape) != layout_of(root.shape)):
        return None
    return x


def _sources(root, seen, end, resolve, owned_dyn, param_leaf, used) -> list:
    """Per result leaf: FRESH (a buffer this run owns and hands over), parameter leaf j
    (handed back), or None (a constant, an alias, an array something else may hold).

    A parameter leaf handed back unchanged while a control or device thunk reads it and
    hands its own result to the root too (`tuple(x, all-reduce(x))`) may share its array
    with that result (a one-device collective returns its operand). It is still "handed
    back" when the body never writes it (not in `used`): nothing then writes the shared
    array through leaf j, and the other result, whose source is None, is copied before
    anything writes it (control.py `_settle`). A native loop (native/loop.py) keeps such a
    leaf in its carry buffer; its collectives write results of their own."""
    out = []
    for s in root:
        ends = [e for e in seen.get(s.id, ()) if e[0] == end] if s is not None else []
        if s is None or sum(1 for r in root if r is s) != 1 or (end, None) not in ends:
            out.append(None)
            continue
        b = resolve(s)
        only_root = ends == [(end, None)]
        if only_root and (b.kind == "out" or (b.kind == "dyn" and b.id in owned_dyn)):
            out.append(FRESH)
        elif b.kind == "param" and (only_root or param_leaf[b.id] not in used):
            out.append(param_leaf[b.id])
        else:
            out.append(None)
    return out


def _merge(asg: Assignment, base: dict, resolve) -> None:
    """In-place results live in their operands' slots."""
    if not base:
        return
    for instr, leaves in asg.leaves.items():
        asg.leaves[instr] = [resolve(s) if s is not None and s.id in base else s
                             for s in leaves]
    for sid in base:
        asg.slots[sid].kind = "unused"
