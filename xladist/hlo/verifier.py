"""The HLO verifier: structure, attributes, shapes and collective groups of a whole module.

`verify_module(module, num_devices=None, counts=None)` checks, for every computation reachable
from the module (fused, called and synthesized async-wrapper computations included):

* structure: an entry, unique names, no recursive calls, a root that belongs to its
  computation, parameters numbered 0..n-1 without gaps, operands from the same computation;
* per instruction: a known opcode, the opcode's operand count, required attributes present
  and of the schema's kind (opcodes.py), the result shape compatible with the one inferred
  from the operands (shape_inference.py, which also checks attribute ranges and the called
  computations' signatures: reducers, comparators, loop bodies, branches);
* start/done pairing: a *-done consumes its own *-start (send-done a send on its channel, ...);
* collectives against replica_count / num_partitions (docs/reference/collective-semantics.md A.1-A.6, B.9,
  C.10-C.14): group mode, ids in range and unique, groups covering every id, equal group sizes
  except all-reduce, the group size dividing all-gather / reduce-scatter / all-to-all
  dimensions, collective-permute pairs;
* entry_computation_layout (if present) against the entry's parameters and root;
* input_output_alias and buffer_donor (if present) against the entry, as XLA's alias and
  donor configs check them (indices name arrays, sizes agree, nothing aliased twice).

The first problem raises VerifierError naming the computation, the printed instruction, and
the expected and actual shapes. Non-fatal findings (elided constants that cannot execute,
opcodes whose shapes are not modelled) are returned as warnings in the VerifyReport.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError, VerifierError
from . import collective_groups as cg
from .attrs import (ConvDimensionNumbers, PaddingConfig, RawAttr, ReplicaGroups, SliceSpec,
                    Window)
from .ir import Computation, Instruction, Module
from .opcodes import OPCODES, collective_opcodes
from .shape import Shape
from .shape_inference import UNSUPPORTED, infer_shape
from .shape_inference.base import ShapeError, fmt, fmt_dims
from .shape_inference.collective import in_place_permute

__all__ = ["verify_module", "VerifyReport", "instruction_text"]


@dataclass
class VerifyReport:
    """What verify_module saw; `warnings` are findings that do not make the module invalid."""

    module: str
    computations: int = 0
    instructions: int = 0
    replica_count: int = 1
    num_partitions: int = 1
    has_collectives: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def num_devices(self) -> int:
        return self.replica_count * self.num_partitions


def instruction_text(instr: Instruction) -> str:
    """The instruction as printed HLO, or a short stand-in if the printer is not available."""
    try:
        return instr.to_text()
    except Exception:  # the printer is optional here: never hide the real error behind it
        ops = ", ".join(f"%{o.name}" for o in instr.operands)
        return f"%{instr.name} = {instr.shape} {instr.opcode}({ops})"


def _fail(message: str, comp: Computation | None, instr: Instruction | None = None,
          expected=None, actual=None):
    raise VerifierError(message, computation=comp.name if comp is not None else None,
                        instruction=instruction_text(instr) if instr is not None else None,
                        expected=expected, actual=actual,
                        line=getattr(instr, "line", None) if instr is not None else None)


# ---- attribute kinds (opcodes.py schema) ------------------------------------------------------

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_seq(v, item):
    return isinstance(v, (tuple, list)) and all(item(x) for x in v)


_KIND_CHECKS = {
    "int": _is_int,
    "bool": lambda v: isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "word": lambda v: isinstance(v, str),
    "string": lambda v: isinstance(v, str),
    "ints": lambda v: _is_seq(v, _is_int),
    "intss": lambda v: _is_seq(v, lambda x: _is_seq(x, _is_int)),
    "pairs": lambda v: _is_seq(v, lambda x: _is_seq(x, _is_int) and len(x) == 2),
    "replica_groups": lambda v: isinstance(v, ReplicaGroups),
    "window": lambda v: isinstance(v, Window),
    "dim_labels": lambda v: isinstance(v, ConvDimensionNumbers),
    "padding": lambda v: isinstance(v, PaddingConfig),
    "slice": lambda v: isinstance(v, SliceSpec),
    "computation": lambda v: isinstance(v, Computation),
    "computations": lambda v: _is_seq(v, lambda x: isinstance(x, Computation)),
    "shape": lambda v: isinstance(v, Shape),
    "shapes": lambda v: _is_seq(v, lambda x: isinstance(x, Shape)),
    "words": lambda v: _is_seq(v, lambda x: isinstance(x, str)),
    "raw": lambda v: isinstance(v, (RawAttr, str)),
    "literal": lambda v: isinstance(v, (RawAttr, str)),
}


def _check_attrs(comp: Computation, instr: Instruction) -> None:
    info = OPCODES[instr.opcode]
    for spec in info.attrs:
        value = instr.attrs.get(spec.name)
        if value is None:
            if spec.required:
                _fail(f"{instr.opcode} requires attribute {spec.name}= ({spec.kind})", comp,
                      instr)
            continue
        check = _KIND_CHECKS.get(spec.kind)
        if check is not None and not check(value) and not isinstance(value, RawAttr):
            _fail(f"attribute {spec.name}= should be of kind {spec.kind}, got {value!r}", comp,
                  instr)
        # XLA takes any channel id; 0 is a channel like any other (send/recv in XLA's own
        # tests use it) except on all-reduce, whose verifier wants one greater than 0
        # (docs/reference/collective-semantics.md C.10). A negative one names no MPI tag.
        if spec.name == "channel_id" and value < 0:
            _fail(f"channel_id={value} must not be negative", comp, instr)
        if spec.name == "channel_id" and value == 0 and instr.opcode == "all-reduce":
            _fail("all-reduce channel_id=0: an all-reduce's channel id must be greater than 0 "
                  "(XLA refuses 0; leave channel_id out for a cross-replica all-reduce)",
                  comp, instr)


# ---- start/done pairing -----------------------------------------------------------------------

# done opcode -> opcodes its operand may have. A get-tuple-element or parameter operand is a
# start carried through a loop (pipelined send/recv, async ops across a while), not checked.
_DONE_OF = {
    "all-reduce-done": ("all-reduce-start",),
    "all-gather-done": ("all-gather-start",),
    "collective-permute-done": ("collective-permute-start",),
    "copy-done": ("copy-start",),
    "send-done": ("send",),
    "recv-done": ("recv",),
    "async-update": ("async-start", "async-update"),
    "async-done": ("async-start", "async-update"),
}
_CARRIED = ("get-tuple-element", "parameter")
# start opcode -> what its one user must be (XLA's verifier, VerifyAsynchronousInstructionPairs):
# a start that nothing completes -- or that two dones complete -- leaves its transfer or copy
# in flight past the end of the program (a send/recv may also go into a tuple: pipelined
# through a loop; as the root of an async computation it is completed by the async-done).
_ONE_USER = {
    "async-start": ("async-update", "async-done"),
    "async-update": ("async-update", "async-done"),
    "all-reduce-start": ("all-reduce-done",),
    "copy-start": ("copy-done",),
    "collective-permute-start": ("collective-permute-done",),
    "send": ("send-done", "tuple"),
    "recv": ("recv-done", "tuple"),
}


def _check_completed(comp: Computation, async_bodies: set[int]) -> None:
    users = None
    for instr in comp.instructions:
        allowed = _ONE_USER.get(instr.opcode)
        if allowed is None:
            continue
        if instr.opcode in ("send", "recv") and instr is comp.root and id(comp) in async_bodies:
            continue
        if users is None:
            users = comp.users()
        mine = users.get(instr, [])
        if len(mine) != 1 or mine[0].opcode not in allowed:
            found = ", ".join(f"%{u.name} ({u.opcode})" for u in mine) or "none"
            _fail(f"{instr.opcode} must have exactly one user, {' or '.join(allowed)}, that "
                  f"completes it; its users: {found}", comp, instr)


def _check_pairing(comp: Computation, instr: Instruction) -> None:
    allowed = _DONE_OF.get(instr.opcode)
    if allowed is None or not instr.operands:
        return
    start = instr.operands[0]
    if start.opcode in _CARRIED:
        return
    if start.opcode not in allowed:
        _fail(f"{instr.opcode} must consume a {' or '.join(allowed)}, but its operand "
              f"%{start.name} is a {start.opcode}", comp, instr)
    if instr.opcode in ("send-done", "recv-done"):
        for key in ("channel_id", "is_host_transfer"):
            a, b = instr.attrs.get(key), start.attrs.get(key)
            if (a != b) if key == "channel_id" else (bool(a) != bool(b)):
                _fail(f"{instr.opcode} and its {start.opcode} %{start.name} must have the same "
                      f"{key} ({a} vs {b})", comp, instr)
    if instr.opcode in ("async-update", "async-done"):
        mine, theirs = instr.attrs.get("calls"), start.attrs.get("calls")
        if mine is not None and theirs is not None and mine is not theirs:
            _fail(f"{instr.opcode} calls {mine.name} but its start %{start.name} calls "
                  f"{theirs.name}", comp, instr)


# ---- collectives --------------------------------------------------------------------------------

def _gathered(instr):
    """(operand, result) array pairs of an all-gather or reduce-scatter."""
    result = instr.shape
    if instr.opcode == "all-gather-start" and result.is_tuple and len(result.tuple_shapes) == 2:
        result = result.tuple_shapes[1]
    outs = list(result.tuple_shapes) if result.is_tuple else [result]
    return list(zip([o.shape for o in instr.operands], outs))


def _check_scaled_dim(comp, instr, size, grow: bool):
    dims = instr.attrs.get("dimensions") or ()
    if len(dims) != 1:
        return  # shape inference reports it
    d = dims[0]
    for x, y in _gathered(instr):
        if not (x.is_array and y.is_array and d < x.rank and d < y.rank):
            continue
        expected = x.dims[d] * size if grow else x.dims[d] // size
        if not grow and x.dims[d] % size:
            _fail(f"reduce-scatter dimension {d} of operand {fmt(x)} (size {x.dims[d]}) is not "
                  f"divisible by the group size {size}", comp, instr)
        if y.dims[d] != expected:
            verb = "gathers" if grow else "scatters"
            want = y.with_dims(y.dims[:d] + (expected,) + y.dims[d + 1:])
            _fail(f"{instr.opcode} {verb} over groups of {size}, so dimension {d} of the result "
                  f"must be {expected} for operand {fmt(x)}", comp, instr,
                  expected=fmt(want), actual=fmt(y))


def _check_all_to_all(comp, instr, size):
    dims = instr.attrs.get("dimensions")
    if dims:
        x = instr.operands[0].shape if instr.operands else None
        d = dims[0]
        if x is not None and x.is_array and d < x.rank and x.dims[d] % size:
            _fail(f"all-to-all splits dimension {d} of {fmt(x)} (size {x.dims[d]}) into "
                  f"{size} blocks, which does not divide", comp, instr)
    elif len(instr.operands) != size:
        _fail(f"the tuple form of all-to-all needs one operand per group member ({size}), got "
              f"{len(instr.operands)}", comp, instr)


def _check_ragged(comp, instr, size):
    """The offsets and sizes hold k >= 1 entries per group member: [n*k], or [n, k]."""
    meta = instr.operands[2].shape if len(instr.operands) == 6 else None
    if meta is None or not meta.is_array or meta.rank not in (1, 2):
        return  # the shape rule reports these
    count = 1
    for d in meta.dims:
        count *= d
    if (meta.rank == 2 and meta.dims[0] != size) or count == 0 or count % size:
        _fail(f"ragged-all-to-all offsets and sizes {fmt(meta)} must hold k >= 1 entries per "
              f"group member ([{size}*k] or [{size},k]) for groups of {size}", comp, instr)


# opcode -> (require every id in some group, check of group size against shapes or None)
_GROUPED = {
    "all-reduce": (True, None),
    "all-reduce-start": (True, None),
    "all-gather": (True, lambda c, i, n: _check_scaled_dim(c, i, n, True)),
    "all-gather-start": (True, lambda c, i, n: _check_scaled_dim(c, i, n, True)),
    "reduce-scatter": (True, lambda c, i, n: _check_scaled_dim(c, i, n, False)),
    "all-to-all": (True, _check_all_to_all),
    "ragged-all-to-all": (True, _check_ragged),
    # A device in no group of a collective-broadcast receives zeros (C.15).
    "collective-broadcast": (False, None),
}


def _check_collective(comp, instr, replica_count, num_partitions):
    op = instr.opcode
    channel = instr.attrs.get("channel_id")
    if "use_global_device_ids" in instr.attrs and not cg.has_global_ids_flag(op):
        # Kept by the parser as an unknown attribute, it would be ignored: the ids would be
        # read in another mode than the writer meant (A.2). XLA's parser rejects it.
        _fail(f"{op} has no use_global_device_ids (docs/reference/collective-semantics.md "
              "A.2: only all-reduce, all-gather and reduce-scatter carry it); its ids are "
              "partition ids with a channel_id and replica ids without", comp, instr)
    try:
        if op in _GROUPED:
            require_cover, size_check = _GROUPED[op]
            mode = cg.group_mode(op, channel, instr.attrs.get("use_global_device_ids"))
            groups = instr.attrs.get("replica_groups")
            cg.check_groups(op, groups, mode, replica_count, num_partitions,
                            require_cover=require_cover)
            size = cg.device_group_size(groups, mode, replica_count, num_partitions)
            if size_check is not None and size:
                size_check(comp, instr, size)
        elif op in ("collective-permute", "collective-permute-start"):
            slices = instr.attrs.get("slice_sizes")
            if in_place_permute([o.shape for o in instr.operands], instr.attrs):
                # Valid XLA (TPU), but no xladist runtime moves slices into an output operand.
                _fail(f"{op}: the in-place form (input, output, input and output start "
                      "indices, slice_sizes) is not supported by xladist; write it as a "
                      "collective-permute of the slice (a dynamic-slice of the input) and a "
                      "dynamic-update-slice of the output", comp, instr)
            cg.check_source_target_pairs(op, instr.attrs.get("source_target_pairs") or (),
                                         channel is not None, replica_count, num_partitions,
                                         max_uses=max(len(slices), 1) if slices else 1)
    except cg.GroupError as e:
        _fail(str(e) + _count_hint(str(e), replica_count, num_partitions), comp, instr)


def _count_hint(message: str, replica_count: int, num_partitions: int) -> str:
    """What to do when ids fall outside a count of 1: the count comes from the run."""
    if "partition id" in message and "out of range [0, 1)" in message and num_partitions == 1:
        return ("; the run has one partition: ids of a collective with channel_id are "
                "partition ids (docs/reference/collective-semantics.md A.1), so give the run "
                "its partitions (--num-partitions, or num_partitions= in the module header)")
    if "replica id" in message and "out of range [0, 1)" in message and replica_count == 1:
        return ("; the run has one replica: run the module on as many devices as its groups "
                "name (-n), or give replica_count= in the module header")
    return ""


# ---- structure ----------------------------------------------------------------------------------

def _reachable(module: Module) -> list[Computation]:
    """Module computations in text order, then any called computation not listed (synthesized
    async wrappers), so every instruction is verified once."""
    out = list(module.computations)
    seen = {id(c) for c in out}
    i = 0
    while i < len(out):
        for callee in out[i].called_computations():
            if id(callee) not in seen:
                seen.add(id(callee))
                out.append(callee)
        i += 1
    return out


def _check_no_recursion(comps: list[Computation]) -> None:
    state: dict[int, int] = {}  # 1 = on the DFS stack, 2 = done

    def visit(c: Computation, path: list[str]):
        state[id(c)] = 1
        for callee in c.called_computations():
            s = state.get(id(callee))
            if s == 1:
                cycle = " -> ".join(path[path.index(callee.name):] + [callee.name]) \
                    if callee.name in path else f"{c.name} -> {callee.name}"
                _fail(f"computations call each other recursively: {cycle}", c)
            if s is None:
                visit(callee, path + [callee.name])
        state[id(c)] = 2

    for c in comps:
        if id(c) not in state:
            visit(c, [c.name])


def _check_structure(comp: Computation) -> None:
    members = set(map(id, comp.instructions))
    if comp.root is None:
        _fail("computation has no root instruction", comp)
    if id(comp.root) not in members:
        _fail(f"root %{comp.root.name} is not an instruction of this computation", comp)
    names: dict[str, Instruction] = {}
    for instr in comp.instructions:
        if instr.name in names:
            _fail(f"instruction name %{instr.name} is used twice in this computation", comp,
                  instr)
        names[instr.name] = instr
        for i, o in enumerate(instr.operands):
            if id(o) not in members:
                _fail(f"operand {i} %{o.name} is not an instruction of computation {comp.name}",
                      comp, instr)
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    numbers = sorted(p.parameter_number for p in params if p.parameter_number is not None)
    for p in params:
        if p.parameter_number is None or p.parameter_number < 0:
            _fail("parameter has no valid parameter number", comp, p)
    if numbers != list(range(len(params))):
        dup = sorted({n for n in numbers if numbers.count(n) > 1})
        gaps = sorted(set(range(len(params))) - set(numbers))
        _fail(f"parameters must be numbered 0..{len(params) - 1} without gaps or repeats; "
              f"numbers {numbers}" + (f", repeated {dup}" if dup else "")
              + (f", missing {gaps}" if gaps else ""), comp)


def _check_entry_layout(module: Module) -> None:
    layout = module.entry_computation_layout
    entry = module.entry
    if layout is None or entry is None:
        return
    params, result = layout
    actual = [p.shape for p in entry.parameters]
    if len(params) != len(actual):
        _fail(f"entry_computation_layout lists {len(params)} parameters but ENTRY "
              f"{entry.name} has {len(actual)}", entry,
              expected=", ".join(map(fmt, params)), actual=", ".join(map(fmt, actual)))
    for i, (a, b) in enumerate(zip(params, actual)):
        if not a.compatible(b):
            _fail(f"entry_computation_layout parameter {i} differs from the ENTRY parameter",
                  entry, entry.parameter(i), expected=fmt(a), actual=fmt(b))
    if not result.compatible(entry.root.shape):
        _fail("entry_computation_layout result differs from the ENTRY root", entry, entry.root,
              expected=fmt(result), actual=fmt(entry.root.shape))


def _check_aliasing(module: Module) -> None:
    """The header's input_output_alias and buffer_donor against the entry, as XLA's
    HloInputOutputAliasConfig / HloBufferDonorConfig (SetUpAlias, Verify) check them: every
    index names an array in the root or parameter shape, an aliased parameter and output
    have the same byte size, each output index and each parameter buffer is aliased at most
    once, and a donor is not also aliased."""
    entry = module.entry
    params = entry.parameters

    def subshape(shape, index, what):
        try:
            s = shape.subshape(index)
        except IndexError:
            s = None
        if s is None or not s.is_array:
            _fail(f"{what}: shape index {fmt_dims(index)} does not name an array in "
                  f"{fmt(shape)}", entry)
        return s

    def param_subshape(param, index, what):
        if not 0 <= param < len(params):
            _fail(f"{what}: parameter {param} does not exist (ENTRY {entry.name} has "
                  f"{len(params)} parameters)", entry)
        return subshape(entry.parameter(param).shape, index, f"{what}, parameter {param}")

    outputs, aliased = set(), set()
    for output, param, index, _kind in module.input_output_alias:
        what = f"input_output_alias {fmt_dims(output)}: ({param}, {fmt_dims(index)})"
        out = subshape(entry.root.shape, output, f"{what}, the result")
        src = param_subshape(param, index, what)
        if output in outputs:
            _fail(f"{what}: output index {fmt_dims(output)} is aliased twice", entry)
        if (param, index) in aliased:
            _fail(f"{what}: parameter {param} at {fmt_dims(index)} is aliased "
                  "with two outputs", entry)
        outputs.add(output)
        aliased.add((param, index))
        if src.nbytes != out.nbytes:   # ShapeUtil::ByteSizeOf, sub-byte types unpacked
            _fail(f"{what}: an aliased parameter and output must have the same size", entry,
                  expected=fmt(src), actual=fmt(out))
    for param, index in module.buffer_donors:
        what = f"buffer_donor ({param}, {fmt_dims(index)})"
        param_subshape(param, index, what)
        if (param, index) in aliased:
            _fail(f"{what}: the parameter is also in input_output_alias", entry)


def _devices(module: Module, num_devices: int | None,
             counts: tuple[int, int] | None) -> tuple[int, int]:
    r, p = module.replica_count, module.num_partitions
    if r < 1 or p < 1:
        raise InputError(f"module {module.name}: replica_count={r} and num_partitions={p} "
                         "must be >= 1")
    if counts is not None:
        return cg.run_device_counts(module, counts[0] * counts[1], replica_count=counts[0],
                                    num_partitions=counts[1])
    return cg.run_device_counts(module, num_devices)


# ---- the walk -----------------------------------------------------------------------------------

_COLLECTIVES = frozenset(collective_opcodes())


def _check_instruction(comp, instr, report, r, p):
    info = OPCODES.get(instr.opcode)
    if info is None:
        _fail(f"unknown opcode {instr.opcode!r}", comp, instr)
    if info.arity is not None and len(instr.operands) != info.arity:
        _fail(f"{instr.opcode} takes {info.arity} operand(s), got {len(instr.operands)}", comp,
              instr)
    _check_attrs(comp, instr)
    _check_pairing(comp, instr)
    if instr.opcode in _COLLECTIVES:
        # Group problems first: they explain a wrong group size better than a shape does.
        report.has_collectives = True
        _check_collective(comp, instr, r, p)
    operand_shapes = [o.shape for o in instr.operands]
    try:
        inferred = infer_shape(instr.opcode, operand_shapes, instr.attrs, declared=instr.shape)
    except ShapeError as e:
        _fail(str(e), comp, instr)
    # Dynamic-ness is not compared (as XLA's ShapeUtil::Compatible): which dimensions are
    # dynamic follows the data flow from set-dimension-size, tracked by hlo.dynamic_padder.
    if not inferred.compatible(instr.shape, ignore_dynamic=True):
        _fail(f"{instr.opcode}: the declared result shape differs from the shape inferred from "
              f"the operands ({', '.join(fmt(s) for s in operand_shapes) or 'none'})", comp,
              instr, expected=fmt(inferred), actual=fmt(instr.shape))
    if instr.opcode == "constant":
        lit = instr.literal
        if lit is None or lit.elided:
            report.warnings.append(f"computation {comp.name}: constant %{instr.name} has no "
                                   "data ({...}); it cannot execute")
        elif getattr(lit, "shape", None) is not None and not lit.shape.compatible(instr.shape):
            _fail("the constant's literal has a different shape", comp, instr,
                  expected=fmt(instr.shape), actual=fmt(lit.shape))
    if instr.opcode in UNSUPPORTED:
        report.warnings.append(f"computation {comp.name}: %{instr.name} ({instr.opcode}): shape "
                               f"not checked ({UNSUPPORTED[instr.opcode]})")


def verify_module(module: Module, *, num_devices: int | None = None,
                  counts: tuple[int, int] | None = None) -> VerifyReport:
    """Verify `module`; returns a VerifyReport or raises VerifierError at the first problem.

    Collectives are checked against the run's device layout: `counts` = (replica_count,
    num_partitions) when the run has fixed them (the runtime passes its device context's), else
    the counts `collective_groups.run_device_counts` gives for `num_devices` devices (the header's
    counts, the rest from the device total; a module declaring neither runs as `num_devices`
    replicas). Without either, the header's counts (1 where it says nothing).
    """
    r, p = _devices(module, num_devices, counts)
    report = VerifyReport(module.name, replica_count=r, num_partitions=p)
    if module.entry is None:
        _fail(f"module {module.name} has no ENTRY computation", None)
    names: dict[str, Computation] = {}
    for c in module.computations:
        if c.name in names:
            _fail(f"computation name {c.name} is used twice in module {module.name}", c)
        names[c.name] = c
    comps = _reachable(module)
    _check_no_recursion(comps)
    async_bodies = {id(i.attrs["calls"]) for c in comps for i in c.instructions
                    if i.opcode == "async-start" and i.attrs.get("calls") is not None}
    for comp in comps:
        _check_structure(comp)
        for instr in comp.instructions:
            _check_instruction(comp, instr, report, r, p)
        _check_completed(comp, async_bodies)  # after: a done's own check says more
        report.computations += 1
        report.instructions += len(comp.instructions)
    _check_entry_layout(module)
    _check_aliasing(module)
    return report
