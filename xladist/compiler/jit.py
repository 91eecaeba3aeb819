"""llvmlite engine: target machine with the host's CPU features, O3, and an
on-disk cache of compiled object code.

A program's kernels are compiled as units (units.py: one LLVM module per distinct kernel,
per group of native loops, and one for the reducers), in parallel (compile_pool.py), each
into its own object; the objects travel together as one code blob (`pack_objects`), which
MCJIT loads into one engine. The blob is cached under `$XLADIST_CACHE_DIR` (default
`~/.cache/xladist`) keyed by a hash of the module's canonical text (program.kernel_fingerprint), the
target description and the compiler's own version (xladist version + a hash of
xladist/compiler sources, so a change to the pipelines of llvm_worker.py is a new key), so
the second compilation of a module runs no codegen and no LLVM at all.
"""

from __future__ import annotations

import ctypes
import hashlib
import struct
import time
from functools import lru_cache
from pathlib import Path

import llvmlite.binding as llvm

from ..version import __version__
from ..errors import UnsupportedError
from . import elf, kernel_cache, llvm_worker, runtime_symbols
from .target import (Target, host_target, init_llvm, target_description, target_machine,
                     vector_width)

_LOCK = llvm_worker.LOCK  # one lock for every sequence of llvmlite calls in this process
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


def optimize(llvm_ir: str, target: Target | None = None, exact: bool = True) -> llvm.ModuleRef:
    """Parsed, verified and optimized (llvm_worker.optimize: O3, exact = with loop
    unrolling) for the target."""
    init_llvm()
    target = target or host_target()
    return llvm_worker.optimize(_with_vector_width(llvm_ir), target.machine(), target.triple,
                                exact)


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
    """LLVM IR text -> optimized native object code (the exact pipeline) whose every
    external call is on the allowlist (runtime_symbols.py)."""
    target = target or host_target()
    obj = llvm_worker.compile_unit(_with_vector_width(llvm_ir), target.triple, target.cpu,
                                   target.features, exact=True)
    check_symbols(obj, runtime_symbols.allowlist())
    return obj


def compile_units(units, target: Target | None = None, *, exact: bool | None = None,
                  stats: dict | None = None) -> bytes:
    """A program's units (units.py) -> the code blob of their objects, compiled in parallel
    (compile_pool.py), each with the pipeline its IR allows (compile_pool.pipeline_exact;
    exact=True: the exact pipeline for all). `stats`: compile_pool.compile_jobs's counts."""
    from . import compile_pool  # (and subprocess) only when there is something to compile
    target = target or host_target()
    jobs = []
    for unit in units:
        text = _with_vector_width(unit.text())
        jobs.append(compile_pool.Job(unit.name, text, exact or compile_pool.pipeline_exact(
            text, target)))
    objects = compile_pool.compile_jobs(jobs, target, stats)
    allowed = runtime_symbols.allowlist()
    for obj in objects:
        check_symbols(obj, allowed)
    return pack_objects(objects)


# A code blob holding several objects: magic, u32 count, then per object a u64 length and
# its bytes. A blob that starts with ELF's own magic is one object (hand-written kernels).
BUNDLE_MAGIC = b"XLDOBJS1"
_COUNT = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")


def pack_objects(objects: list[bytes]) -> bytes:
    parts = [BUNDLE_MAGIC, _COUNT.pack(len(objects))]
    for obj in objects:
        parts += [_LENGTH.pack(len(obj)), obj]
    return b"".join(parts)


def unpack_objects(blob: bytes) -> list[bytes]:
    """The objects of a code blob; ValueError if it is neither a bundle nor one object."""
    if blob[:4] == b"\x7fELF":
        return [blob]
    if blob[:len(BUNDLE_MAGIC)] != BUNDLE_MAGIC or len(blob) < len(BUNDLE_MAGIC) + 4:
        raise ValueError("not xladist object code")
    (count,) = _COUNT.unpack_from(blob, len(BUNDLE_MAGIC))
    at = len(BUNDLE_MAGIC) + _COUNT.size
    out = []
    for _ in range(count):
        if at + _LENGTH.size > len(blob):
            raise ValueError("truncated object code")
        (n,) = _LENGTH.unpack_from(blob, at)
        at += _LENGTH.size
        if at + n > len(blob):
            raise ValueError("truncated object code")
        out.append(blob[at:at + n])
        at += n
    if at != len(blob):
        raise ValueError("trailing bytes after the objects")
    return out


class LoadedCode:
    """Object code (a code blob: one object or a bundle) loaded into an MCJIT engine;
    hands out kernel addresses. `blob` is what was loaded (serialized.py stores it).

    Every undefined symbol is checked against what runtime_symbols registered with LLVM
    before MCJIT links it: an unresolved one would be a call to address 0."""

    def __init__(self, blob: bytes):
        init_llvm()
        objects = unpack_objects(blob)
        allowed = runtime_symbols.resolved()
        for obj in objects:
            check_symbols(obj, allowed)
        self.blob = blob  # the code blob, for a launcher that ships it to its ranks
        with _LOCK:
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
            for obj in objects:
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


def get_code(module_text: str, build, timings: dict | None = None,
             stats: dict | None = None) -> tuple[LoadedCode, bool]:
    """Compiled code for a module: from the cache (kernel_cache.py checks the entry), or
    built and stored: build() returns LLVM IR text (one module, compile_ir) or a list of
    units (compile_units, which fills `stats`). Returns (code, was_cached); `timings` gets
    the seconds of "llvm" (compiling, when not cached) and "load"."""
    key = cache_key(module_text)
    blob = kernel_cache.load(key)
    cached = blob is not None
    if blob is None:
        what = build()
        t0 = time.perf_counter()
        blob = compile_ir(what) if isinstance(what, str) else compile_units(what, stats=stats)
        if timings is not None:
            timings["llvm"] = time.perf_counter() - t0
        kernel_cache.store(key, blob)
    t0 = time.perf_counter()
    code = LoadedCode(blob)
    if timings is not None:
        timings["load"] = time.perf_counter() - t0
    return code, cached
