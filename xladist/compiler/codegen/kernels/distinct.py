"""Each distinct kernel emitted once: the cost of compiling grows with the kernels a module
has that differ, not with how often they repeat.

A model's layers repeat: a 16-layer transformer's training step has 625 fused kernels but
only 35 different ones (same instructions, shapes and layouts; only the names differ), and
LLVM's optimizer and instruction selection took ~90% of its compile time. Two kernels are
the same when their structural keys (`kernel_key`) are: everything the emitters read of a
spec -- its kind, outputs, scratch and in-place flag, the shapes of its inputs, and every
fused instruction with its opcode, shape and layout, attributes (called computations by
their own structure), literal values and which operand it reads -- with every name left
out. The key is computed from the HLO, before any LLVM IR exists, so a repeat costs no
codegen; tests/compiler/test_distinct.py checks on the corpora that kernels with one key
emit the same IR up to their names, which is what makes the alias below exact. The first
kernel of each key is emitted, and when its IR (up to its name) is that of an earlier one,
it is a repeat too: keys are conservative (a transpose that moves no byte is another key
with the same code).

The first of each kind is emitted under its own name; the others become aliases of its
functions: the same code at the same address under their names, so thunks, a native loop's
calls, the kernel cache and serialized executables find every name in the object as before.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from ....hlo.ir import Computation
from ....hlo.printer import shape_text
from .core import emit_kernel

_PLACEHOLDER = "\x00kernel\x00"


class _Keys:
    """Structural keys of kernels and of the computations their instructions call; a
    called computation's key is cached (reducers repeat across every kernel)."""

    def __init__(self):
        self._comps: dict[int, tuple[Computation, str]] = {}

    def kernel(self, spec) -> str:
        refs = {instr: f"i{k}" for k, instr in enumerate(spec.inputs)}
        for j, instr in enumerate(spec.fused):
            refs.setdefault(instr, f"f{j}")
        parts = [spec.kind, str(bool(spec.inplace)), str(spec.scratch),
                 ";".join(shape_text(s) for s in spec.outputs), f"root={refs.get(spec.root)}"]
        for instr in spec.inputs:
            # Inputs are read from their buffers by shape; a fused get-tuple-element
            # also looks at whether its operand is a tuple.
            parts.append(f"in {shape_text(instr.shape)} {instr.opcode == 'tuple'}")
        for instr in spec.fused:
            if refs.get(instr, "").startswith("f"):
                parts.append(self._instruction(instr, refs))
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def computation(self, comp: Computation) -> str:
        hit = self._comps.get(id(comp))
        if hit is None:
            refs = {instr: f"c{k}" for k, instr in enumerate(comp.instructions)}
            lines = [self._instruction(i, refs) for i in comp.instructions]
            lines.append(f"root={refs.get(comp.root)}")
            text = hashlib.sha256("\n".join(lines).encode()).hexdigest()
            hit = self._comps[id(comp)] = (comp, text)  # keeps comp alive: ids stay unique
        return hit[1]

    def _instruction(self, instr, refs) -> str:
        # An operand outside the kernel (neither fused nor an input) gets a name nothing
        # else has, so the kernel keeps its own code.
        ops = ",".join(refs.get(o) or f"?{o.name}@{id(o)}" for o in instr.operands)
        out = [f"{shape_text(instr.shape)} {instr.opcode}({ops})"]
        if instr.opcode == "parameter":
            out.append(f"#{instr.parameter_number}")
        if instr.opcode == "constant":
            out.append(_literal_text(instr.literal))
        for name, value in instr.attrs.items():
            out.append(f"{name}={self._value(value)}")
        for extra in (instr.backend_config, instr.sharding):
            if extra is not None:
                out.append(extra)
        if instr.frontend_attributes:
            out.append(repr(sorted(instr.frontend_attributes.items())))
        return " ".join(out)

    def _value(self, v) -> str:
        if isinstance(v, Computation):
            return "{" + self.computation(v) + "}"
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(self._value(x) for x in v) + "]"
        if isinstance(v, np.ndarray):
            return _array_text(v)
        to_text = getattr(v, "to_text", None)
        if to_text is not None:
            return f"{type(v).__name__}:{to_text()}"
        if hasattr(v, "tuple_shapes"):  # a Shape
            return shape_text(v)
        return f"{type(v).__name__}:{v!r}"


def _array_text(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return f"{a.dtype.str}{a.shape}:{hashlib.sha256(a.tobytes()).hexdigest()}"


def _literal_text(lit) -> str:
    if lit is None or lit.value is None:
        return "elided"
    if isinstance(lit.value, tuple):
        return "(" + ",".join(_literal_text(x) for x in lit.value) + ")"
    return _array_text(np.asarray(lit.value))


def kernel_keys(specs) -> list[str]:
    """The structural key of every spec, in order."""
    keys = _Keys()
    return [keys.kernel(spec) for spec in specs]


def computation_keys(comps) -> list[str]:
    """The structural key of every computation (collective reducers), in order."""
    keys = _Keys()
    return [keys.computation(c) for c in comps]


def emit_functions(module: ir.Module, spec) -> list[str]:
    """Emit the kernel into `module`; the names of the functions it defines that other
    code may call (not declarations, not internal helpers such as the accurate rerun)."""
    before = set(module.globals)
    emit_kernel(module, spec)
    return [n for n, g in module.globals.items()
            if n not in before and isinstance(g, ir.Function) and not g.is_declaration
            and g.linkage != "internal"]


def alias_names(rep, functions: list[str], spec) -> dict[str, str]:
    """{name in `spec`'s kernel -> the function of `rep` it stands for}."""
    out = {}
    for fn in functions:
        assert fn.startswith(rep.name), (fn, rep.name)
        out[spec.name + fn[len(rep.name):]] = fn
    return out


@dataclass
class Distinct:
    """Which kernels of a program are emitted and which alias an earlier one."""

    rep: dict[str, object] = field(default_factory=dict)  # name -> spec whose code it runs
    alone: dict[str, ir.Module] = field(default_factory=dict)  # rep name -> it alone
    functions: dict[str, list[str]] = field(default_factory=dict)  # rep name -> callables

    def aliases(self, spec) -> dict[str, str]:
        rep = self.rep[spec.name]
        return {} if rep is spec else alias_names(rep, self.functions[rep.name], spec)


def find_distinct(specs, own_names=frozenset()) -> Distinct:
    """The first kernel of each structural key is emitted, alone in a module of its own
    (`alone`: what compile units hold); when its IR, up to its name, is that of an earlier
    one (keys are conservative: a transpose that moves no byte is another key with the
    same code), it and its key's repeats alias that one instead. Kernels in own_names
    (called by name from IR emitted later: native loops) are emitted as themselves."""
    out = Distinct()
    first: dict[str, object] = {}   # structural key -> the spec its kernels run
    by_ir: dict[str, object] = {}   # sha256 of the IR up to the name -> the same
    for spec, key in zip(specs, kernel_keys(specs)):
        rep = first.get(key)
        own = spec.name in own_names
        if rep is None or own:
            alone = ir.Module(name=spec.name)
            functions = emit_functions(alone, spec)
            text = str(alone).replace(spec.name, _PLACEHOLDER)
            digest = hashlib.sha256(text.encode()).hexdigest()
            same = by_ir.get(digest)
            if same is None or own:
                by_ir.setdefault(digest, spec)
                out.alone[spec.name] = alone
                out.functions[spec.name] = functions
                same = spec
            first.setdefault(key, same)
            rep = spec if own else first[key]
        out.rep[spec.name] = rep
    return out


def emit_distinct_kernels(module: ir.Module, specs, own_names=frozenset()) -> dict[str, str]:
    """Emit every kernel of ``specs`` into ``module``, the repeats of one as aliases;
    those in ``own_names`` (kernels called from IR emitted later, by name) always as
    functions of their own.

    Returns the aliases to add to the IR text, ``{name: name of the function it stands
    for}`` (llvmlite.ir has no aliases; alias_text() writes them)."""
    found = find_distinct(specs, own_names)
    aliases: dict[str, str] = {}
    for spec in specs:
        if found.rep[spec.name] is spec:
            emit_kernel(module, spec)
        else:
            aliases.update(found.aliases(spec))
    return aliases


def alias_text(module: ir.Module, aliases: dict[str, str]) -> str:
    """LLVM IR alias definitions for ``aliases`` (functions of ``module``)."""
    lines = []
    for name, target in aliases.items():
        fnty = module.globals[target].function_type
        lines.append(f'@"{name}" = alias {fnty}, {fnty}* @"{target}"')
    return "\n".join(lines) + ("\n" if lines else "")
