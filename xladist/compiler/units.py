"""A program's LLVM code as compile units: LLVM modules that are optimized and emitted
separately (in parallel: compile_pool.py), each into an object of its own.

  one unit per distinct kernel (codegen/kernels/distinct.py), holding the aliases of its
    repeats: an alias must live in the module of the function it names;
  one unit per group of native while loops that share kernels (native/loop.py): a loop's
    driver calls its kernels by name, and they stay in its module as they always were, so
    LLVM sees (and may inline) the same calls;
  one unit for the collective reducers (map kernels and their MPI_User_functions), each
    distinct reducer once: a step's all-reduces each name their own `add` computation.

Every kernel's function is the same IR in its unit as in one module holding the whole
program (`separate=False`, what `CpuProgram.llvm_ir()` prints): LLVM optimizes functions
one by one, so compiled with the same pipeline it is the same machine code
(tests/compiler/test_compile_units.py compares the bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from .codegen.kernels import emit_map_kernel
from .codegen.kernels import emit_kernel
from .codegen.kernels.distinct import alias_text, computation_keys, find_distinct
from .native.collectives import emit_user_function, user_function_name


@dataclass
class Unit:
    """One LLVM module of a program and the aliases to append to its text."""

    name: str  # what it holds, for messages ("kernel c0_3_add_fusion", ...)
    module: ir.Module
    aliases: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        return str(self.module) + alias_text(self.module, self.aliases)


def _loop_groups(loops) -> tuple[dict[str, int], list[int]]:
    """(kernel name -> group, group of each loop): loops that call a common kernel (two
    while loops with one body computation) share a group, so each kernel is defined once."""
    parent = list(range(len(loops)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, lp in enumerate(loops):
        for s in lp.steps:
            if s.kind != "kernel":
                continue
            name = s.thunk.spec.name
            if name in owner:
                parent[find(i)] = find(owner[name])
            else:
                owner[name] = i
    return {name: find(i) for name, i in owner.items()}, [find(i) for i in range(len(loops))]


def program_units(builder, separate: bool = True) -> list[Unit]:
    """The units of a ProgramBuilder's kernels, reducers and native loops; separate=False:
    everything in one unit (kernels in program order, then reducers, then loops)."""
    units: list[Unit] = []

    def new_unit(name: str) -> Unit:
        if not separate and units:
            return units[0]
        unit = Unit(name, ir.Module(name=name if separate else builder.module.name))
        units.append(unit)
        return unit

    if not separate:
        new_unit(builder.module.name)
    owner, loop_group = _loop_groups(builder.loops)
    group_units: dict[int, Unit] = {}

    def group_unit(g: int) -> Unit:
        if g not in group_units:
            group_units[g] = new_unit(f"native loop {builder.loops[g].name}")
        return group_units[g]

    found = find_distinct(builder.kernels, frozenset(owner))
    unit_of: dict[str, Unit] = {}  # kernel defined under its own name -> its unit
    for spec in builder.kernels:
        g = owner.get(spec.name)
        if g is not None:  # a native loop's kernel: its own function in the loop's unit
            unit_of[spec.name] = group_unit(g)
            emit_kernel(unit_of[spec.name].module, spec)
        elif found.rep[spec.name] is spec:
            if separate:
                unit_of[spec.name] = Unit(f"kernel {spec.name}", found.alone[spec.name])
                units.append(unit_of[spec.name])
            else:
                unit_of[spec.name] = units[0]
                emit_kernel(units[0].module, spec)
        else:
            unit_of[found.rep[spec.name].name].aliases.update(found.aliases(spec))
    if builder.reducers:
        unit = new_unit("the collective reducers")
        reducers = list(builder.reducers.values())
        same: dict[str, str] = {}  # structural key -> kernel name of the first
        for r, key in zip(reducers, computation_keys([r.computation for r in reducers])):
            rep = same.setdefault(key, r.kernel_name)
            if rep != r.kernel_name:
                unit.aliases[r.kernel_name] = rep
                unit.aliases[user_function_name(r.kernel_name)] = user_function_name(rep)
                continue
            emit_map_kernel(unit.module, r.kernel_name, r.computation)
            emit_user_function(unit.module, r.kernel_name)  # for MPI user ops
    for lp, g in zip(builder.loops, loop_group):  # after the kernels they call
        lp.emit(group_unit(g).module)
    return units
