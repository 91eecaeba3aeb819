"""The one allowlist of external symbols compiled kernels may call, each resolved on purpose.

A kernel's object code may refer to functions it does not define: libm (our `erf`, or
`floor` for `llvm.floor` on a CPU without SSE4.1), libc (`memcpy`/`memset` that LLVM
recognizes in copy loops) and compiler-runtime helpers (`__truncdfhf2` ...). MCJIT would
look each up in the process, where e.g. libgcc_s may be missing, and a symbol it cannot
find becomes a call to address 0. So jit.py lists every undefined symbol of every object
(elf.py) and accepts only the names below, after registering each one's address with
LLVM explicitly:

  PROVIDED  compiler-runtime builtins xladist compiles itself (codegen/builtins.py);
  LIBC      looked up in the C library, LIBM in the math library, through ctypes.

Anything else fails compilation with UnsupportedError naming the kernel and the symbol.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from functools import lru_cache

import llvmlite.binding as llvm

from . import elf
from .codegen import builtins
from .target import Target

LIBC = ("memcpy", "memmove", "memset", "memcmp", "bcmp")

_LIBM_DOUBLE = (
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh",
    "acosh", "atanh", "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p",
    "pow", "cbrt", "sqrt", "hypot", "erf", "erfc", "tgamma", "lgamma", "fmod", "remainder",
    "ldexp", "frexp", "sincos", "fma", "fmin", "fmax", "floor", "ceil", "trunc", "round",
    "roundeven", "rint", "nearbyint", "copysign", "fabs")
LIBM = _LIBM_DOUBLE + tuple(name + "f" for name in _LIBM_DOUBLE) + ("__powidf2", "__powisf2")

_LOCK = threading.Lock()


# The C and math libraries by their glibc sonames: dlopen finds them (already loaded in this
# process) without find_library's `ldconfig -p` in a subprocess, a fork of a large process.
_SONAMES = {"c": "libc.so.6", "m": "libm.so.6"}


def _process_library(name: str):
    try:
        return ctypes.CDLL(_SONAMES[name])
    except OSError:
        pass  # not glibc: ask the system where it is
    from ctypes.util import find_library  # (and subprocess) only then
    path = find_library(name)
    try:
        return ctypes.CDLL(path) if path else None
    except OSError:
        return None


@lru_cache(maxsize=1)
def _library_addresses() -> dict[str, int]:
    """Every LIBC/LIBM name the C and math libraries define -> its address."""
    out: dict[str, int] = {}
    libs = [lib for lib in (_process_library("c"), _process_library("m")) if lib is not None]
    for name in LIBC + LIBM:
        for lib in libs:
            try:
                out[name] = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                break
            except AttributeError:
                continue
    return out


def _builtins_target() -> Target:
    triple = llvm.get_process_triple()
    return Target(triple, "generic" if "aarch64" in triple else "x86-64")


def builtins_cache_key(ir: str | None = None) -> str:
    """The kernel-cache key of the builtins' object: this very IR (codegen/builtins.py), for
    this target and LLVM, made the way this file and target.py make it."""
    from pathlib import Path
    target = _builtins_target()
    h = hashlib.sha256()
    for part in ("xladist runtime builtins", target.triple, target.cpu,
                 ".".join(map(str, llvm.llvm_version_info)),
                 builtins.runtime_ir() if ir is None else ir):
        h.update(part.encode())
        h.update(b"\0")
    for source in ("target.py", "runtime_symbols.py"):
        h.update((Path(__file__).parent / source).read_bytes())
    return h.hexdigest()


class _Runtime:
    """The builtins, compiled once for the baseline CPU of the host's triple (so they run
    on every CPU of it) into their own MCJIT engine, which lives as long as the process.
    Their object comes from this host's kernel cache when it holds it (compiling it was a
    tenth of a warm run's compile, in every process); it is never fetched from a job's
    service: a process without a cache compiles its own, as before."""

    def __init__(self):
        from . import kernel_cache
        target = _builtins_target()
        ir = builtins.runtime_ir()
        key = builtins_cache_key(ir)
        with kernel_cache.local_only():
            obj = kernel_cache.load(key)
        if obj is None:
            mod = llvm.parse_assembly(ir)
            mod.verify()
            obj = target.machine().emit_object(mod)
            kernel_cache.store(key, obj)
        stray = elf.undefined_symbols(obj)
        if stray:  # a builtin calling out would defeat the point; caught by the tests
            raise RuntimeError(f"xladist runtime builtins call {sorted(stray)}")
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target.machine())
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self.engine.finalize_object()
        self.addresses = {name: self.engine.get_function_address(name)
                          for name in builtins.provided_names()}


_runtime: _Runtime | None = None


def resolved() -> dict[str, int]:
    """Every allowlisted symbol this process can provide -> its address, registered with
    LLVM (llvm.add_symbol) so MCJIT links kernels against exactly these."""
    global _runtime
    with _LOCK:
        if _runtime is None:
            runtime = _Runtime()
            for name, addr in {**_library_addresses(), **runtime.addresses}.items():
                llvm.add_symbol(name, addr)
            _runtime = runtime
        return {**_library_addresses(), **_runtime.addresses}


def allowlist() -> frozenset[str]:
    """Names a kernel object may leave undefined (whether or not this host provides them)."""
    return frozenset(LIBC + LIBM) | frozenset(builtins.provided_names())


def unresolvable(obj: bytes) -> dict[str, list[str]]:
    """Undefined symbols of `obj` this process does not resolve -> functions using them."""
    have = resolved()
    return {name: users for name, users in elf.undefined_symbols(obj).items()
            if name not in have}
