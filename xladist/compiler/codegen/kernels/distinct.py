"""Each distinct kernel emitted once: the cost of compiling grows with the kernels a module
has that differ, not with how often they repeat.

A model's layers repeat: a 16-layer transformer's training step has 625 fused kernels but
only 35 different ones (same instructions, shapes and layouts; only the names differ), and
LLVM's optimizer and instruction selection took ~90% of its compile time. Two kernels are
the same when the LLVM IR emitted for them is the same text up to the kernel's own name,
so nothing the emitters decide can be missed by the comparison. The first of each kind is
emitted under its own name; the others become aliases of its functions: the same code at
the same address under their names, so thunks, a native loop's calls, the kernel cache and
serialized executables find every name in the object as before.
"""

from __future__ import annotations

import hashlib

from llvmlite import ir

from .core import emit_kernel

_PLACEHOLDER = "\x00kernel\x00"


def _signature(spec) -> str:
    scratch = ir.Module(name="scratch")
    emit_kernel(scratch, spec)
    text = str(scratch).replace(spec.name, _PLACEHOLDER)
    return hashlib.sha256(text.encode()).hexdigest()


def emit_distinct_kernels(module: ir.Module, specs, own_names=frozenset()) -> dict[str, str]:
    """Emit every kernel of ``specs`` into ``module``, the repeats of one as aliases;
    those in ``own_names`` (kernels called from IR emitted later, by name) always as
    functions of their own.

    Returns the aliases to add to the IR text, ``{name: name of the function it stands
    for}`` (llvmlite.ir has no aliases; alias_text() writes them)."""
    first: dict[str, object] = {}  # signature -> spec emitted under its own name
    defined: dict[str, list[ir.Function]] = {}  # kernel name -> the functions it added
    aliases: dict[str, str] = {}
    for spec in specs:
        sig = _signature(spec)
        rep = first.get(sig)
        if rep is None or spec.name in own_names:
            first.setdefault(sig, spec)
            before = set(module.globals)
            emit_kernel(module, spec)
            defined[spec.name] = [module.globals[n] for n in module.globals
                                  if n not in before and isinstance(module.globals[n],
                                                                    ir.Function)]
            continue
        for fn in defined[rep.name]:
            if fn.is_declaration or fn.linkage == "internal":
                continue
            assert fn.name.startswith(rep.name), (fn.name, rep.name)
            aliases[spec.name + fn.name[len(rep.name):]] = fn.name
    return aliases


def alias_text(module: ir.Module, aliases: dict[str, str]) -> str:
    """LLVM IR alias definitions for ``aliases`` (functions of ``module``)."""
    lines = []
    for name, target in aliases.items():
        fnty = module.globals[target].function_type
        lines.append(f'@"{name}" = alias {fnty}, {fnty}* @"{target}"')
    return "\n".join(lines) + ("\n" if lines else "")
