"""The `cpu` backend: HLO compiled to native code with llvmlite.

Pipeline (one pass per module): inline.py (flatten fusions/calls) ->
fusion.py (what becomes one kernel) -> buffers.py (slots, arena reuse) ->
emit.py (thunk lists) -> codegen/ (LLVM IR per kernel) -> units.py (LLVM modules)
-> compile_pool.py (compiled on every core; llvm_worker.py says how) -> jit.py (host CPU,
on-disk object cache) -> program.py (CpuExecutable).

    exe = xladist.compile(module, backend="cpu")
    outputs = exe(x, y)
"""

from __future__ import annotations

from .coverage import coverage
from .program import CpuExecutable, CpuProgram, compile_module

__all__ = ["CpuExecutable", "CpuProgram", "compile_module", "coverage"]
