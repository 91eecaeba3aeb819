"""xladist.compile(module) leaves the caller's Module exactly as it was.

The deadlock check proves a schedule computed from the module, the runtime hands the
ranks a schedule of the same module, and compile-once compiles in the launcher with the
ranks' schedule: a compile that rewrote the module (inlining, simplify, fusion planning,
dynamic padding) would make those schedules disagree. The compiler works on private
copies (compiler/inline.py clones, hlo/dynamic_padder.py reparses); this checks it.
"""


import pytest

import xladist
from xladist.errors import XlaDistError
from xladist.analysis.schedule import schedule_module
from xladist.hlo.ir import Instruction
from tests.paths import ROOT

CORPUS = ROOT / "tests" / "data" / "corpus"
MODULES = [
    ROOT / "benchmarks" / "mlp_train_step.hlo",                         # calls, fusions, dots
    CORPUS / "jax" / "while_loop_psum_mesh4" / "module.hlo",            # while + collective
    CORPUS / "jax_extra" / "loops_collectives_mesh2" / "module.hlo",    # nested loops
    CORPUS / "jax_extra" / "dp_adam_step_mesh4" / "module.hlo",         # fusions
    CORPUS / "jax_extra" / "cond_switch_collectives_mesh2x2" / "module.hlo",  # conditional
    CORPUS / "dynamic" / "while_loop" / "module.hlo",                   # dynamic padder
]


def snapshot(module) -> tuple:
    """Text, schedule, and the identity of every computation and instruction with the
    fields the printer does not show (parent, operand objects)."""
    fields = [s for s in Instruction.__slots__ if s not in ("__weakref__", "parent",
                                                              "operands", "attrs",
                                                              "control_predecessors")]
    objects = []
    for comp in module.computations:
        objects.append((id(comp), comp.name, id(comp.root), id(comp.module)))
        for i in comp.instructions:
            objects.append((id(i), id(i.parent), [id(o) for o in i.operands],
                            [id(o) for o in i.control_predecessors],
                            {k: id(v) if hasattr(v, "instructions") else repr(v)
                             for k, v in i.attrs.items()},
                            [repr(getattr(i, f)) for f in fields]))
    schedule = {c.name: [i.name for i in order] for c, order in schedule_module(module).items()}
    return module.to_text(), schedule, objects


def compile_in(module, how: str) -> None:
    if how == "compile":
        xladist.compile(module, backend="cpu")
    elif how == "compile-scheduled":  # what every rank does with the runtime's schedule
        xladist.compile(module, backend="cpu", schedule=schedule_module(module))
    else:  # compile-once's launcher: the backend's program directly, dynamic or not
        from xladist.compiler.program import CpuProgram
        try:
            CpuProgram(module, schedule_module(module))
        except XlaDistError:
            pass  # refused (a dynamic module needs compile's padder): still untouched


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.parent.name if p.name ==
                         "module.hlo" else p.stem)
@pytest.mark.parametrize("how", ["compile", "compile-scheduled", "cpu-program"])
def test_compile_leaves_the_module_unchanged(path, how):
    module = xladist.load_hlo(str(path))
    before = snapshot(module)
    compile_in(module, how)
    text, schedule, objects = snapshot(module)
    assert text == before[0], "compile changed the module's text"
    assert schedule == before[1], "compile changed the module's schedule"
    assert objects == before[2], "compile changed the module's instructions in place"
