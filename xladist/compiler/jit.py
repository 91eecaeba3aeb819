"""llvmlite engine: target machine with the host's CPU features, O3, and an
on-disk cache of compiled object code.

One LLVM module holds every kernel of an HLO module. Its object file is cached
under `$XLADIST_CACHE_DIR` (default `~/.cache/xladist`) keyed by a hash of the
module's canonical text (fingerprint.py), the target description and the
compiler's own version (xladist version + a hash of xladist/compiler sources), so
the second compilation of a module runs no codegen and no LLVM at all.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from functools import lru_cache
from pathlib import Path

import llvmlite.binding as llvm

from ..version import __version__
from ..errors import UnsupportedError
from . import elf, kernel_cache, runtime_symbols
from .target import (Target, host_target, init_llvm, target_description, target_machine,
                     vector_width)

_LOCK = threading.Lock()
KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def hashed_sources() -> list[Path]:
    """The sources whose text decides the code a kernel gets: the compiler's own and the
    semantics layer's (codegen emits its rules: semantics/complex_xla.py's formulas run on
    registers through scalar_ops.LlvmOps). The whole semantics package, not a list of files,
    so a rule codegen starts reading later is covered without anyone remembering to add it."""
    xladist = Path(__file__).resolve().parent.parent
    return [p for folder in ("compiler", "semantics")
            for p in sorted((xladist / folder).rglob("*.py"))]


@lru_cache(maxsize=1)
def compiler_version() -> str:
    """xladist version plus a hash of `hashed_sources()` (codegen changes invalidate cached
    kernels even without a version bump)."""
    h = hashlib.sha256(__version__.encode())
    for path in hashed_sources():
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return f"{__version__}+{h.hexdigest()[:16]}"


def cache_key(module_text: str) -> str:
    h = hashlib.sha256()
    for part in (module_text, target_description(), compiler_version()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _with_vector_width(llvm_ir: str) -> str:
    """Every defined function gets the "prefer-vector-width" attribute (llvmlite.ir has no
    string attributes, so it is added to the IR text). Function attributes go after the
    parameter list, before the `{` that opens the body: llvmlite puts that brace on a line
    of its own, hand-written kernels (conv_kernel, builtins) at the end of the `define` line
    or of a parameter list that spans lines; the body's brace is the first one that ends a
    line from the `define` on."""
    width = vector_width()
    if width is None:
        return llvm_ir
    attr = f'"prefer-vector-width"="{width}"'
    lines = llvm_ir.split("\n")
    in_header = False
    for n, line in enumerate(lines):
        if line.startswith("define "):
            in_header = True
        if in_header and line.rstrip().endswith("{"):
            head = line.rstrip()[:-1].rstrip()
            lines[n] = f"{head} {attr} {{" if head else f"{attr} {{"
            in_header = False
    return "\n".join(lines)


def optimize(llvm_ir: str, target: Target | None = None) -> llvm.ModuleRef:
    init_llvm()
    target = target or host_target()
    mod = llvm.parse_assembly(_with_vector_width(llvm_ir))
    mod.verify()
    tm = target.machine()
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def check_symbols(obj: bytes, allowed) -> None:
    """UnsupportedError unless every undefined symbol of `obj` is in `allowed`."""
    stray = {name: users for name, users in elf.undefined_symbols(obj).items()
             if name not in allowed}
    if stray:
        lines = [f"kernel {', '.join(users) or '<data>'} calls {name!r}"
                 for name, users in stray.items()]
        raise UnsupportedError(
            "the compiled code calls functions xladist does not provide on this CPU "
            f"({host_target().cpu}): " + "; ".join(lines) + ". Kernels are named "
            "after the HLO instruction they compute; `XLADIST_TARGET_CPU=x86-64` compiles "
            "for the baseline CPU instead.")


def compile_ir(llvm_ir: str, target: Target | None = None) -> bytes:
    """LLVM IR text -> optimized native object code whose every external call is on the
    allowlist (runtime_symbols.py)."""
    with _LOCK:
        target = target or host_target()
        mod = optimize(llvm_ir, target)
        obj = target.machine().emit_object(mod)
    check_symbols(obj, runtime_symbols.allowlist())
    return obj


class LoadedCode:
    """Object code loaded into an MCJIT engine; hands out kernel addresses.

    Every undefined symbol is checked against what runtime_symbols registered with LLVM
    before MCJIT links it: an unresolved one would be a call to address 0."""

    def __init__(self, obj: bytes):
        init_llvm()
        check_symbols(obj, runtime_symbols.resolved())
        with _LOCK:
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
            self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
            self.engine.finalize_object()
        self._cache: dict[str, int] = {}

    def address(self, name: str) -> int:
        addr = self._cache.get(name)
        if addr is None:
            addr = self.engine.get_function_address(name)
            if not addr:
                raise KeyError(f"kernel {name!r} is missing from the compiled object")
            self._cache[name] = addr
        return addr

    def kernel(self, name: str):
        return KERNEL_TYPE(self.address(name))


def get_code(module_text: str, build_ir) -> tuple[LoadedCode, bool]:
    """Compiled code for a module: from the cache (kernel_cache.py checks the entry), or
    build_ir() -> IR text compiled and stored. Returns (code, was_cached)."""
    key = cache_key(module_text)
    obj = kernel_cache.load(key)
    cached = obj is not None
    if obj is None:
        obj = compile_ir(build_ir())
        kernel_cache.store(key, obj)
    return LoadedCode(obj), cached
