"""Pass 4: thunk list emission — per computation, an ordered list of thunks.

Runs the earlier passes (inline -> fusion -> buffer slots -> in-place updates,
after compiling the while bodies they depend on), turns every
non-fused instruction into its thunk (THUNK_BUILDERS by kind), then places the
temporaries in the arena (buffers.place). Kernels are only *named* here; their
LLVM code is generated later (or loaded from the cache) by program.py.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import UnsupportedError
from ..hlo.ir import Computation
from ..hlo.reducers import reducer_for
from .buffers import Assignment, assign_slots, place
from .control import AsyncStartThunk, ConditionalThunk, WhileThunk
from .devices import CompiledReducer, DeviceThunk
from .fusion import FusionPlan, plan_fusion
from .inline import flatten
from .inplace import PASS_THROUGH, plan_in_place
from .interpreted import calls_python, evaluate, python_reducer
from .library import LIBRARY_THUNKS, UNSUPPORTED, CustomCallThunk, DotThunk
from .native.loop import NativeLoop
from .simplify import simplify
from .thunks import CompiledComputation, KernelThunk, LibraryThunk, Thunk


class ProgramBuilder:
    """Builds CompiledComputations for a module, collecting the kernels to generate."""

    def __init__(self, module, schedule: dict | None = None):
        self.module = module
        # computation name -> instruction order (keys may be Computations or names).
        self.schedule = {getattr(c, "name", c): list(order)
                         for c, order in (schedule or {}).items()}
        self.compiled: dict[int, CompiledComputation] = {}
        self.kernels = []           # KernelSpecs, in a deterministic order
        self.kernel_thunks: list[KernelThunk] = []
        self.reducers: dict[int, CompiledReducer] = {}
        self.loops: list[NativeLoop] = []  # while loops run by one native function
        # (computation name, donated) -> (flat, plan, asg)
        self.plans: dict[tuple, tuple] = {}

    def computation(self, comp: Computation, donated: bool = False) -> CompiledComputation:
        """Compile `comp`; donated: the caller hands over every parameter leaf (while
        bodies), so in-place updates may write into them (inplace.py)."""
        key = (id(comp), donated)
        if key in self.compiled:
            return self.compiled[key]
        flat = flatten(comp, self.schedule)
        simplify(flat)
        prefix = f"c{len(self.plans)}"
        plan = plan_fusion(flat, prefix)
        asg = assign_slots(flat, plan.kind)
        self.plans[(comp.name, donated)] = (flat, plan, asg)
        # Loop bodies first: what they write in place decides what their loops own.
        loops = {i: self.computation(i.attrs["body"], donated=True)
                 for i in flat.instructions if i.opcode == "while" and plan.kind[i] == "control"}
        inplace = plan_in_place(flat, plan, asg, donated, loops)
        for instr in inplace.kernels:
            spec = plan.kernels[instr]
            spec.inplace = True
            if spec.kind == "loop":
                spec.kind = "update-slice"
        thunks: list[Thunk] = []
        for instr in flat.instructions:
            kind = plan.kind[instr]
            builder = THUNK_BUILDERS.get(kind)
            if builder is None:
                continue
            t = builder(self, instr, plan, asg, inplace)
            if t is not None:
                thunks.append(t)
        params = [s for p in flat.parameters for s in asg.leaves[p]]
        root = asg.leaves[flat.root]
        place(asg, _liveness_io(thunks, root))
        param_shapes = [s for p in flat.parameters for _, s in p.shape.leaves()]
        root_shapes = [s for _, s in flat.root.shape.leaves()]
        cc = CompiledComputation(comp.name, asg, thunks, params, root, param_shapes,
                                 root_shapes)
        cc.used, cc.sources = frozenset(inplace.used), inplace.sources
        self.compiled[key] = cc
        return cc

    def reducer(self, comp: Computation) -> CompiledReducer:
        r = self.reducers.get(id(comp))
        if r is None:
            r = CompiledReducer(comp, f"reducer{len(self.reducers)}_{_clean(comp.name)}")
            self.reducers[id(comp)] = r
        return r


def _clean(name: str) -> str:
    import re
    return re.sub(r"[^A-Za-z0-9_]", "_", name)[:40]


def _liveness_io(thunks, root_slots):
    """(reads, writes) per thunk. A control or device thunk's results may be its
    inputs passed through (a nested computation, a one-device collective), so its
    inputs stay live as long as its results do; latest thunks first, so a chain of
    pass-throughs keeps the first one's inputs live to the end of the chain."""
    io = [(list(t.reads), list(t.writes)) for t in thunks]
    last_read: dict[int, int] = {}
    for i, (reads, _) in enumerate(io):
        for s in reads:
            last_read[s.id] = i
    end = len(io) - 1
    for s in root_slots:
        if s is not None:
            last_read[s.id] = end
    for i in range(len(thunks) - 1, -1, -1):
        t = thunks[i]
        if t.kind not in PASS_THROUGH:
            continue
        until = max([last_read.get(s.id, i) for s in t.writes] + [i])
        if until > i:
            io[until][0].extend(t.reads)
            for s in t.reads:
                last_read[s.id] = max(last_read.get(s.id, i), until)
    return io


THUNK_BUILDERS: dict[str, Callable] = {}


def _builder(kind):
    def wrap(fn):
        THUNK_BUILDERS[kind] = fn
        return fn
    return wrap


@_builder("kernel")
def _kernel(pb: ProgramBuilder, instr, plan: FusionPlan, asg: Assignment, inplace):
    spec = plan.kernels[instr]
    outs = asg.leaves[instr]
    if all(s is None or s.nbytes == 0 for s in outs):
        return None
    ins = [asg.leaves[i][0] for i in spec.inputs]
    slots = list(outs) + ins
    if spec.scratch:
        slots.append(asg.new("temp", None, spec.scratch, name=f"{instr.name}.scratch"))
    writes = list(outs) + slots[len(outs) + len(ins):]
    t = KernelThunk(spec, slots, ins, writes)
    pb.kernels.append(spec)
    pb.kernel_thunks.append(t)
    return t


@_builder("library")
def _library(pb, instr, plan, asg, inplace):
    fn = LIBRARY_THUNKS.get(instr.opcode)
    if fn is None and calls_python(instr):  # fusion.base_kind: the interpreter's rule
        return LibraryThunk(instr, evaluate, f"{instr.opcode} (its computation calls a "
                            f"custom-call target: run by the interpreter's rule)",
                            [asg.leaves[o] for o in instr.operands], asg.leaves[instr])
    if fn is None:
        _refuse(instr, UNSUPPORTED.get(instr.opcode, "no library thunk"))
    if instr.opcode == "custom-call":
        original = getattr(instr.parent, "original_of", {}).get(instr, instr)
        return CustomCallThunk(instr, original, [asg.leaves[o] for o in instr.operands],
                               asg.leaves[instr])
    if instr.opcode == "dot":
        return DotThunk(instr, [asg.leaves[o] for o in instr.operands], asg.leaves[instr])
    return LibraryThunk(instr, fn, instr.opcode, [asg.leaves[o] for o in instr.operands],
                        asg.leaves[instr])


@_builder("control")
def _control(pb, instr, plan, asg, inplace):
    op = instr.opcode
    if op == "while":
        cond = pb.computation(instr.attrs["condition"])
        body = pb.computation(instr.attrs["body"], donated=True)
        original = getattr(instr.parent, "original_of", {}).get(instr)
        t = WhileThunk(instr, cond, body, asg.leaves[instr.operands[0]], asg.leaves[instr],
                       original, inplace.takes.get(instr))
        if NativeLoop.eligible(cond, body, t.identity_relayouts()):
            t.native = NativeLoop(f"loop{len(pb.loops)}_{_clean(instr.name)}", cond, body,
                                  t.orig.name)
            pb.loops.append(t.native)
        return t
    if op == "conditional":
        a = instr.attrs
        if "branch_computations" in a:
            comps = list(a["branch_computations"])
        else:
            comps = [a["true_computation"], a["false_computation"]]
        branches = [pb.computation(c) for c in comps]
        operand_slots = [asg.leaves[o] for o in instr.operands[1:]]
        return ConditionalThunk(instr, branches, asg.leaves[instr.operands[0]][0],
                                operand_slots, asg.leaves[instr])
    if op == "async-start":
        comp = pb.computation(instr.attrs["calls"])
        return AsyncStartThunk(instr, comp, [asg.leaves[o] for o in instr.operands],
                               asg.leaves[instr])
    raise UnsupportedError(f"instruction `{instr.name}` ({op}): {CONTROL_UNSUPPORTED[op]}")


# Control opcodes the cpu backend refuses, with the reason (none today: calls, composite
# ones included, are inlined).
CONTROL_UNSUPPORTED: dict[str, str] = {}


def _refuse(instr, reason: str):
    raise UnsupportedError(f"instruction `{instr.name}` ({instr.opcode}) in computation "
                           f"{instr.parent.name if instr.parent else '?'}: {reason}")


@_builder("device")
def _device(pb, instr, plan, asg, inplace):
    if instr.opcode in UNSUPPORTED:  # a device op no runner implements: collective-reduce
        _refuse(instr, UNSUPPORTED[instr.opcode])
    comp = reducer_for(instr)  # to_apply, in the operands' element type
    reducer = python_reducer(comp)  # it calls a custom-call target: interpreted.py
    if reducer is None and comp is not None:
        reducer = pb.reducer(comp)
    original = getattr(instr.parent, "original_of", {}).get(instr)
    return DeviceThunk(instr, [asg.leaves[o] for o in instr.operands], asg.leaves[instr],
                       reducer, original)
