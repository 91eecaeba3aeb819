"""compile_module(module) -> CpuExecutable: the whole pipeline, with timings.

  flatten (inline.py) -> fusion plan (fusion.py) -> buffer slots (buffers.py)
  -> thunk lists (emit.py) -> LLVM IR per compile unit (units.py, codegen/) -> object
  code (jit.py: units compiled in parallel by compile_pool.py, cached on disk) -> bound
  thunks.

On a cache hit no IR is generated and LLVM does not run: only the planning
passes (pure Python, milliseconds) and loading the object file.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref

import numpy as np

from ..errors import ExecutionError, UnsupportedError
from ..executable import Executable
from ..hlo.shape import Shape
from . import blas_blocks, jit, parallel
from .codegen.constants import logical_view
from .emit import ProgramBuilder
from .inplace import FRESH
from .thunks import RunState, physical_leaf


def kernel_fingerprint(module, kernel_names: list[str]) -> str:
    """What the object code is built from, the kernel cache's key: the module's text
    without metadata, each large constant (printer.large_constant) printed `{...}` and its
    data's digest listed after the text, and the kernel names. Printing a constant's
    elements was most of a warm compile of a module with a large literal (10^6 elements:
    2.8 s of it, in the launcher and again on every rank, on every launch)."""
    from ..hlo.attrs import Literal
    from ..hlo.printer import large_constant
    digests = [f"%{i.name}={i.literal.digest() if isinstance(i.literal, Literal) else '-'}"
               for i in module.all_instructions()
               if i.opcode == "constant" and large_constant(i.shape)]
    return (module.to_text(metadata=False, large_constants=False)
            + "\n// constants: " + " ".join(digests)
            + "\n// kernels: " + " ".join(kernel_names))


class CpuProgram:
    def __init__(self, module, schedule: dict | None = None, code: bytes | None = None,
                 fingerprint: str | None = None, *, compile_code: bool = True):
        """`code`: object code made before for the kernels named by `fingerprint` (a
        serialized executable, serialized.py): loaded as is, no codegen and no LLVM.
        compile_code=False plans and stops before LLVM: llvm_ir() then gives the text
        (the cross-target tests compile it for other CPUs)."""
        t0 = time.perf_counter()
        self.module = module
        self.builder = ProgramBuilder(module, schedule)
        self.entry = self.builder.computation(module.entry)
        t1 = time.perf_counter()
        # Kernel names carry their position in the (possibly scheduled) order: the
        # object code's symbols depend on them as well as on the module text.
        names = [k.name for k in self.builder.kernels] + \
            [r.kernel_name for r in self.builder.reducers.values()] + \
            [lp.name for lp in self.builder.loops]
        self.fingerprint = kernel_fingerprint(module, names)
        self.phases: dict[str, float] = {"plan": t1 - t0}
        # What compiling took, when it ran (compile_pool.compile_jobs): units, exact ones,
        # units the helper processes compiled, processes.
        self.compile_stats: dict[str, int] = {}
        if code is None:
            if not compile_code:
                return
            self.code, self.cached = jit.get_code(self.fingerprint, self.units, self.phases,
                                                  self.compile_stats)
        elif fingerprint != self.fingerprint:
            raise UnsupportedError(
                "the stored object code was made for other kernels: this xladist plans the "
                "module differently (another version, or the module's device counts were "
                "changed); recompile it with `xladist compile`")
        else:
            self.code, self.cached = jit.LoadedCode(code), True
        t2 = time.perf_counter()
        for t in self.builder.kernel_thunks:
            t.bind(self.code)
        for r in self.builder.reducers.values():
            r.bind(self.code)
        for lp in self.builder.loops:
            lp.bind(self.code)
        parallel.refresh_blas_libs()  # executions set BLAS threads (parallel.blas_scope)
        self.uses_blas = any(t.kind == "library" for cc in self.builder.compiled.values()
                             for t in cc.thunks)
        self.timings = {"plan": t1 - t0, "codegen+llvm" if not self.cached else "load": t2 - t1,
                        "total": time.perf_counter() - t0}
        # Where it went: codegen (units()), llvm (compiling the units), load (MCJIT).
        self.timings.update({k: v for k, v in self.phases.items() if k != "plan"})

    def explain(self) -> list[dict]:
        """Every compiled computation: its thunks (kind, what they run, fused
        instructions, buffers read and written) and its arena size."""
        out = []
        # A native while loop calls its kernels whole from its own native code.
        native = {id(c) for lp in self.builder.loops for c in (lp.cond, lp.body)}
        for cc in self.builder.compiled.values():
            thunks = []
            for t in cc.thunks:
                entry = {"kind": t.kind, "what": t.describe(),
                         "instruction": t.instr.name if t.instr is not None else None,
                         "reads": [s.describe() for s in t.reads],
                         "writes": [s.describe() for s in t.writes]}
                spec = getattr(t, "spec", None)
                if spec is not None:
                    entry["kernel"] = spec.name
                    entry["loop"] = spec.kind
                    entry["fused"] = [i.name for i in spec.fused]
                    # The result shares operand 0's buffer: only the update is written.
                    entry["in_place"] = spec.inplace
                    entry["split"] = ("one thread: inside a native while loop"
                                      if id(cc) in native else t.split_text())
                elif t.kind == "library" and t.instr is not None:
                    text = blas_blocks.split_text(t.instr, parallel.thread_count())
                    if text is not None:
                        entry["split"] = text
                thunks.append(entry)
            out.append({"computation": cc.name, "arena_bytes": cc.asg.arena_size,
                        "slots": len(cc.asg.slots), "thunks": thunks})
        return out

    def units(self) -> list:
        """The program's compile units (units.py), each kernel's LLVM IR generated once per
        distinct kernel; the helper processes start meanwhile (compile_pool.py)."""
        # Codegen's modules are imported here: a cache hit (a warm run) never needs them.
        from . import compile_pool
        from .units import program_units
        b = self.builder
        compile_pool.start_helpers(len(b.kernels) + len(b.loops) + bool(b.reducers))
        t0 = time.perf_counter()
        units = program_units(b)
        self.phases["codegen"] = time.perf_counter() - t0
        return units

    def llvm_ir(self) -> str:
        """LLVM IR text of every kernel of the module as one LLVM module (pure
        llvmlite.ir); a kernel that repeats another is an alias of it
        (codegen/kernels/distinct.py)."""
        from .units import program_units
        return program_units(self.builder, separate=False)[0].text()


def compiled_reducers(module) -> dict:
    """Every to_apply computation of ``module`` as a bound CompiledReducer, by computation
    name (what a compiled program hands the runtime; used by the collectives benchmark)."""
    prog = CpuProgram(module)
    return {r.computation.name: r for r in prog.builder.reducers.values()}


def to_leaves(value, shape: Shape) -> list:
    """Interpreter value (logical arrays, tuples) -> flat physical leaves."""
    if shape.is_tuple:
        out = []
        for v, s in zip(value, shape.tuple_shapes):
            out.extend(to_leaves(v, s))
        return out
    if not shape.is_array:
        return [None]
    return [physical_leaf(shape, value)]


def from_leaves(leaves, shape: Shape, copy_mask):
    """Flat leaves -> interpreter value (logical views; copies where masked)."""
    return _build(shape, iter(leaves), iter(copy_mask))


def _build(s: Shape, leaves, copies):
    # A module-level recursion: a self-referencing closure would form a cycle
    # that keeps result buffers alive until the garbage collector runs.
    if s.is_tuple:
        return tuple(_build(t, leaves, copies) for t in s.tuple_shapes)
    buf, copy = next(leaves), next(copies)
    if not s.is_array:
        from ..semantics.values import TOKEN
        return TOKEN
    v = logical_view(s, buf)
    return v.copy() if copy else v


class CpuExecutable(Executable):
    """A module compiled to native code; same call interface as the interpreter.

    Options: `device` (a DeviceContext; default SingleDeviceContext(infeed)),
    `infeed` (items for the default SingleDeviceContext), `schedule` (computation ->
    instruction order, e.g. xladist.analysis.schedule's: the thunks run in that order), `code`
    and `fingerprint` (object code and the kernels it was made for: serialized.py's
    executables).
    """

    backend = "cpu"

    def __init__(self, module, *, device=None, infeed=(), schedule=None, code=None,
                 fingerprint=None):
        super().__init__(module)
        self.program = CpuProgram(module, schedule, code, fingerprint)
        if device is None:
            from ..semantics.single_device import SingleDeviceContext
            device = SingleDeviceContext(infeed)
        self.device = device
        entry = self.program.entry
        # Results the caller may keep: copy anything not freshly allocated (a
        # result buffer, or a loop carry the loop owns: inplace.FRESH).
        self._copy_mask = [s is not None and s.kind != "out" and src != FRESH
                           for s, src in zip(entry.root_slots, entry.sources)]
        self._param_shapes = [p.shape for p in module.entry.parameters]
        # Array parameters in the default (row-major) layout: a C-ordered argument is its
        # own physical leaf, viewed as bytes without to_physical's steps.
        self._row_major = [s.is_array and (s.rank < 2 or s.has_default_layout())
                           for s in self._param_shapes]
        # One call at a time: a call runs in the program's own buffers (each computation's
        # arena, each kernel's argument vector), so two threads' calls in flight together
        # wrote over each other's temporaries. The thread in a call, to name a call from
        # inside it (a custom-call target calling this executable) instead of waiting for
        # itself forever.
        self._calls = threading.Lock()
        self._caller = None
        _EXECUTABLES.add(self)

    def execute(self, args):
        if not self._calls.acquire(blocking=False):
            if self._caller == threading.get_ident():
                raise ExecutionError(
                    f"{self.module.name} was called again from inside its own call (a "
                    "custom-call target calling the executable that runs it); compile "
                    "the module a second time for the inner call")
            self._calls.acquire()
        self._caller = threading.get_ident()
        try:
            return self._execute(args)
        finally:
            self._caller = None
            self._calls.release()

    def _execute(self, args):
        leaves = []
        for v, s, plain in zip(args, self._param_shapes, self._row_major):
            if plain and v.flags.c_contiguous:
                leaves.append(v.reshape(-1).view(np.uint8))
            else:
                leaves.extend(to_leaves(v, s))
        # Results that are not fresh buffers are copied here (_copy_mask), so the
        # entry need not copy the ones still in its arena first.
        with parallel.blas_scope() if self.program.uses_blas else contextlib.nullcontext():
            out = self.program.entry.run(leaves, RunState(self.device), copy_arena=False)
        return from_leaves(out, self.result_shape, self._copy_mask)


# Every cpu executable of the process: a child forked while another thread was inside a
# call has no such thread, and the call's lock, held for ever there, is made anew.
_EXECUTABLES: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for exe in list(_EXECUTABLES):
        exe._calls, exe._caller = threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def compile_module(module, **options) -> CpuExecutable:
    """Compile every computation of `module` for this CPU; see CpuExecutable."""
    return CpuExecutable(module, **options)
