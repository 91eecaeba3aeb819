"""Pass 2: fusion planning — which instructions become one kernel.

Every instruction of a flattened computation gets a *kind* (the table KINDS, by
opcode) and element-wise-able instructions are either fused into their users'
kernels or *materialized* as the root of a kernel of their own:

  alias     no code: parameter, tuple, get-tuple-element, bitcast, opt-barrier,
            tokens, and reshape/copy/transpose that keep the physical bytes when
            their operand is already in a buffer
  const     a static buffer (small constants are also inlined into kernels)
  elemental fusible: element-wise ops, broadcast, reshape, slice, dynamic-slice,
            dynamic-update-slice, concatenate, pad, iota, convert, select, compare,
            clamp, reverse, gather, map, copy
  root      a kernel root that absorbs its producers but is never fused into a
            consumer: reduce, reduce-window, transpose, scatter, sort,
            select-and-scatter
  library / control / device: thunks of their own (library/, thunks.py); a map or root
            whose computation calls a custom-call target is a library thunk running the
            interpreter's rule (interpreted.py)

An elemental instruction is materialized when a user cannot fuse it (library,
control, device, tuple, the computation's result), when it is expensive and
its users would recompute it (broadcast/reduce-window/gather reuse elements, or
more than two users), or when duplicating a large fused subgraph into several
users would cost more than a buffer (XLA's InstructionFusion makes the same calls).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..hlo.ir import Computation, Instruction
from .codegen.ir_array import layout_of
from .codegen.kernels import KernelSpec
from .codegen.scalar_ops import SCALAR_RULES
from .codegen.split import EXPENSIVE  # ops costing many loads per element
from .interpreted import calls_python

ELEMENTAL = set(SCALAR_RULES) | {
    "broadcast", "reshape", "copy", "reverse", "slice", "dynamic-slice",
    "dynamic-update-slice", "concatenate", "pad", "iota", "map", "gather"}
ROOT_KERNELS = {"reduce": "reduce", "reduce-window": "loop", "transpose": "loop",
                "scatter": "scatter", "sort": "sort", "select-and-scatter": "select-and-scatter"}
ALIAS = {"parameter", "tuple", "get-tuple-element", "bitcast", "opt-barrier", "domain",
         "after-all", "add-dependency", "async-update", "async-done", "copy-done"}
CONTROL = {"while", "conditional", "call", "async-start"}
DEVICE_FAMILIES = ("collective", "collective_async", "p2p", "feed")
# Ids of this device, and the run's rng counter (RunState.rng_state): device thunks see
# the run, library thunks only their operands.
DEVICE = {"replica-id", "partition-id", "rng-get-and-update-state"}

# Inlining constants bigger than this into kernel code would bloat the object.
INLINE_CONSTANT_LIMIT = 4096
# A fused subgraph this large is not duplicated into several consumers.
DUPLICATION_LIMIT = 12
# The longest chain of fused producers a kernel takes: the next one is materialized.
# Codegen and _kernel_spec walk a kernel's producers recursively (a few Python frames per
# fused op: a chain of ~300 single-use ops ran out of recursion), and one kernel's LLVM
# time grows faster than its size (a 3,000-op chain: 24 s); chunks of this many ops
# compile once and are repeated as one distinct kernel.
FUSION_DEPTH_LIMIT = 100


def physical_bitcast(instr: Instruction) -> bool:
    """reshape/copy/transpose whose result has exactly the operand's bytes. A copy of a
    tuple is XLA's shallow copy: the same leaves (values never change in place)."""
    op = instr.operands[0] if instr.operands else None
    if instr.opcode == "copy" and op is not None and instr.shape.is_tuple:
        return True
    if op is None or not instr.shape.is_array or not op.shape.is_array:
        return False
    out, src = instr.shape, op.shape
    if out.element_type != src.element_type:
        return False
    if instr.opcode == "copy":
        return out.rank <= 1 or layout_of(out) == layout_of(src)
    if instr.opcode == "reshape":
        return (out.rank <= 1 or out.has_default_layout()) and \
            (src.rank <= 1 or src.has_default_layout())
    if instr.opcode == "transpose":
        perm = instr.attrs["dimensions"]
        if out.rank <= 1:
            return True
        return tuple(perm[d] for d in layout_of(out)) == layout_of(src)
    return False


def base_kind(instr: Instruction) -> str:
    op = instr.opcode
    if op == "constant":
        return "const"
    if op in ALIAS:
        return "alias"
    if op == "map" and calls_python(instr):
        return "library"  # a custom-call in its computation: the interpreter's rule
    if op in ELEMENTAL:
        if op == "bitcast-convert" and instr.shape.element_type.bits != \
                instr.operands[0].shape.element_type.bits:
            return "library"
        return "elemental"
    if op in ROOT_KERNELS and calls_python(instr):
        return "library"
    if op in ROOT_KERNELS:
        return "root"
    if op in CONTROL:
        return "control"
    # copy-start/copy-done sit in the async family but move data on this device.
    if op in DEVICE or (instr.family in DEVICE_FAMILIES and op != "copy-start"):
        return "device"
    if op == "get-dimension-size":
        return "library"
    return "library"


@dataclass
class FusionPlan:
    computation: Computation
    kind: dict[Instruction, str] = field(default_factory=dict)
    kernels: dict[Instruction, KernelSpec] = field(default_factory=dict)

    def buffered(self, instr: Instruction) -> bool:
        return self.kind[instr] not in ("fused",)


def plan_fusion(comp: Computation, name_prefix: str,
                materialize_reduces: frozenset = frozenset()) -> FusionPlan:
    """Kinds for every instruction and one KernelSpec per kernel root.

    Resulting kinds: alias, const, fused (inside other kernels), kernel, library,
    control, device.
    """
    plan = FusionPlan(comp)
    users = comp.users()
    root = comp.root

    def can_fuse_into(u: Instruction) -> bool:
        k = base_kind(u)
        return k in ("elemental", "root") or (
            u.opcode in ("reshape", "copy", "transpose", "bitcast") and k != "alias")

    def effective_users(i, seen=None):
        """Users, looking through reshape/bitcast/copy chains (they fuse or alias
        depending on this very decision)."""
        out = []
        for u in users[i]:
            same_width = u.opcode != "bitcast" or \
                u.shape.element_type.bits == i.shape.element_type.bits
            if u.opcode in ("reshape", "bitcast", "copy") and u.shape.is_array and same_width:
                if u is root:
                    out.append(None)
                out.extend(effective_users(u))
            else:
                out.append(u)
        if i is root:
            out.append(None)
        return out

    def reuses(u: Instruction, operand: Instruction) -> bool:
        if u.opcode == "broadcast":
            return u.shape.size > operand.shape.size
        if u.opcode in ("reduce-window", "select-and-scatter"):
            return True
        if u.opcode == "gather":
            return u.operands[0] is operand
        if u.opcode in ("reshape", "bitcast", "copy", "convert", "transpose", "slice",
                        "reverse"):
            return any(reuses(v, u) for v in users[u])
        return False

    cost: dict[Instruction, int] = {}
    depth: dict[Instruction, int] = {}  # longest chain of fused producers, itself included

    def fused_depth(instr: Instruction) -> int:
        return 1 + max((depth.get(o, 0) for o in instr.operands
                        if plan.kind.get(o) == "fused"), default=0)

    for instr in comp.instructions:
        k = base_kind(instr)
        if k == "elemental" or instr.opcode in ("reshape", "copy", "transpose", "bitcast"):
            operand_buffered = bool(instr.operands) and plan.kind.get(
                instr.operands[0]) not in ("fused", None)
            if instr.opcode in ("reshape", "copy", "transpose") and operand_buffered \
                    and physical_bitcast(instr):
                plan.kind[instr] = "alias"
                continue
            if instr.opcode == "bitcast" and (
                    operand_buffered or instr.shape.element_type.bits
                    != instr.operands[0].shape.element_type.bits):
                plan.kind[instr] = "alias"
                continue
            if instr.opcode == "transpose":
                plan.kind[instr] = "kernel"
                continue
            eff = effective_users(instr)
            c = 1 + sum(cost.get(o, 0) for o in instr.operands
                        if plan.kind.get(o) == "fused")
            materialize = (
                any(u is None or not can_fuse_into(u) for u in eff)
                or (instr.opcode in EXPENSIVE
                    and (len(eff) > 2 or any(reuses(u, instr) for u in users[instr])))
                or (len(eff) > 1 and c > DUPLICATION_LIMIT)
                or not instr.shape.is_array
                or fused_depth(instr) >= FUSION_DEPTH_LIMIT
            )
            plan.kind[instr] = "kernel" if materialize else "fused"
            cost[instr] = 0 if materialize else c
            if not materialize:
                depth[instr] = fused_depth(instr)
        elif k == "root":
            fusible_reduce = (instr.opcode == "reduce" and instr not in materialize_reduces
                              and _row_broadcast_users(instr, users[instr], root))
            plan.kind[instr] = "fused" if fusible_reduce else "kernel"
            if fusible_reduce:
                depth[instr] = fused_depth(instr)
        else:
            plan.kind[instr] = k
    # Kernel specs: each kernel fuses the closure of its unmaterialized producers.
    for n, instr in enumerate(comp.instructions):
        if plan.kind[instr] != "kernel":
            continue
        spec = _kernel_spec(plan, instr, f"{name_prefix}_{n}_{_clean(instr.name)}")
        bad = _unhoistable_reduces(spec)
        if bad:
            # A fused reduce that its kernel cannot compute once per row would be
            # recomputed per element: plan again with it as a kernel of its own.
            return plan_fusion(comp, name_prefix, materialize_reduces | bad)
        plan.kernels[instr] = spec
    return plan


def _row_broadcast_users(r: Instruction, users, root) -> bool:
    """A reduce whose every user broadcasts it along the minor (innermost loop)
    dimension: fused into the consumer, it is computed once per row, before the
    row's inner loop (softmax: max, sum and the division in one kernel, each row
    staying in cache)."""
    if r is root or not r.shape.is_array or not users:
        return False
    for u in users:
        if u.opcode != "broadcast" or not u.shape.has_default_layout() or u.shape.rank < 2:
            return False
        minor = u.shape.rank - 1
        if minor in u.attrs["dimensions"] or u.shape.dims[minor] < 2:
            return False
    return True


def _unhoistable_reduces(spec: KernelSpec) -> set:
    fused = set(spec.fused)
    reduces = {i for i in spec.fused if i.opcode == "reduce" and i is not spec.root}
    if not reduces:
        return set()
    root = spec.root
    ok_kernel = (spec.kind == "loop" and root.shape.is_array and root.shape.rank >= 2
                 and root.shape.has_default_layout())
    bad = set()
    for r in reduces:
        for b in spec.fused:
            if b.opcode == "broadcast" and b.operands[0] is r and b in fused \
                    and (not ok_kernel or b.shape.dims != root.shape.dims):
                bad.add(r)
    return bad


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)[:48]


def _kernel_spec(plan: FusionPlan, root: Instruction, name: str) -> KernelSpec:
    fused: list[Instruction] = []
    inputs: list[Instruction] = []
    seen: set[int] = set()

    def visit(i: Instruction):
        if id(i) in seen:
            return
        seen.add(id(i))
        k = plan.kind[i]
        small_const = (i.opcode == "constant" and i.shape.is_array
                       and i.shape.size <= INLINE_CONSTANT_LIMIT)
        if i is root or k == "fused" or small_const:
            for op in i.operands:
                visit(op)
            fused.append(i)
        else:
            inputs.append(i)

    visit(root)
    kind = ROOT_KERNELS.get(root.opcode, "loop")
    outputs = [s for _, s in root.shape.leaves()]
    spec = KernelSpec(name, kind, root, fused, inputs, outputs)
    if kind == "sort":
        from .codegen.kernels.special import sort_scratch_bytes
        spec.scratch = sort_scratch_bytes(root)
    return spec
