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
import os
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

import llvmlite.binding as llvm

from .. import __version__

_LOCK = threading.Lock()
KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@lru_cache(maxsize=1)
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def target_machine():
    """A fresh target machine for the host (MCJIT takes ownership of the one it
    is given, so each engine gets its own)."""
    _init()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
        opt=3, codemodel="jitdefault")


@lru_cache(maxsize=1)
def target_description() -> str:
    """Triple, CPU and feature string: what the cached code depends on."""
    _init()
    return "|".join([llvm.get_process_triple(), llvm.get_host_cpu_name(),
                     llvm.get_host_cpu_features().flatten(), llvm.llvm_version_info.__repr__(),
                     f"vector-width={vector_width()}"])


@lru_cache(maxsize=1)
def compiler_version() -> str:
    """xladist version plus a hash of the compiler sources (codegen changes
    invalidate cached kernels even without a version bump)."""
    h = hashlib.sha256(__version__.encode())
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return f"{__version__}+{h.hexdigest()[:16]}"


def cache_dir() -> Path | None:
    """The kernel cache directory, or None when caching is disabled
    (XLADIST_CACHE_DIR set to an empty string or 'off')."""
    env = os.environ.get("XLADIST_CACHE_DIR")
    if env is not None and env.strip().lower() in ("", "off", "none", "0"):
        return None
    return Path(env) if env else Path.home() / ".cache" / "xladist"


def cache_key(module_text: str) -> str:
    h = hashlib.sha256()
    for part in (module_text, target_description(), compiler_version()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _cache_path(key: str) -> Path | None:
    d = cache_dir()
    return None if d is None else d / key[:2] / f"{key}.o"


def load_cached(key: str) -> bytes | None:
    path = _cache_path(key)
    if path is None or not path.exists():
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def store_cached(key: str, obj: bytes) -> None:
    path = _cache_path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename: concurrent ranks never read a half-written file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(obj)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache is not an error, only slower


@lru_cache(maxsize=1)
def vector_width() -> int | None:
    """The vector width (bits) the vectorizers may use, when it differs from LLVM's choice.

    LLVM tunes AVX-512 hosts (Ice Lake and later) to prefer 256-bit vectors, fearing the
    clock drop of 512-bit instructions on older parts. Our kernels are short, hot loops of
    exp/tanh polynomials where full-width vectors measured ~1.35x faster on the development
    host (softmax 1024x4096: 5.3 -> 3.9 ms) and never slower, so AVX-512 hosts get 512.
    `XLADIST_VECTOR_WIDTH` (bits) overrides it; it is part of the cache key.
    """
    env = os.environ.get("XLADIST_VECTOR_WIDTH", "").strip()
    if env:
        return int(env)
    _init()
    return 512 if llvm.get_host_cpu_features().get("avx512f", False) else None


def _with_vector_width(llvm_ir: str) -> str:
    """Every defined function gets the "prefer-vector-width" attribute (llvmlite.ir has no
    string attributes, so it is added to the `define` lines of the IR text)."""
    width = vector_width()
    if width is None:
        return llvm_ir
    attr = f' "prefer-vector-width"="{width}"'
    return "\n".join(line + attr if line.startswith("define ") else line
                     for line in llvm_ir.split("\n"))


def optimize(llvm_ir: str) -> llvm.ModuleRef:
    _init()
    mod = llvm.parse_assembly(_with_vector_width(llvm_ir))
    mod.verify()
    tm = target_machine()
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(tm.target_data)
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def compile_ir(llvm_ir: str) -> bytes:
    """LLVM IR text -> optimized native object code."""
    with _LOCK:
        mod = optimize(llvm_ir)
        return target_machine().emit_object(mod)


class LoadedCode:
    """Object code loaded into an MCJIT engine; hands out kernel addresses."""

    def __init__(self, obj: bytes):
        _init()
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
    """Compiled code for a module: from the cache, or build_ir() -> IR text compiled
    and stored. Returns (code, was_cached)."""
    key = cache_key(module_text)
    obj = load_cached(key)
    cached = obj is not None
    if obj is None:
        obj = compile_ir(build_ir())
        store_cached(key, obj)
    return LoadedCode(obj), cached
