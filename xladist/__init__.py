"""xladist: run XLA HLO programs across MPI ranks, one device per rank.

Public API (imported lazily so that `import xladist` stays cheap and never loads MPI):
  parse_hlo(text) -> Module          load_hlo(path) -> Module
  verify(module)                      compile(module, backend=...) -> Executable
  run(module, inputs, n=N, ...)       HloParseError, VerifierError, XlaDistError
  load_executable(path) -> Executable (a `.xlx` file from `xladist compile`, not recompiled)
  Cluster(n=N, hosts=...)             ranks started once, many runs (docs/cluster.md)
"""

from __future__ import annotations

from .errors import (DeadlockError, ExecutionError, HloParseError, InputError, OutputError,
                     UnsupportedError, VerifierError, XlaDistError)

from .version import __version__

__all__ = ["parse_hlo", "load_hlo", "verify", "compile", "run", "load_executable", "Cluster",
           "HloParseError",
           "VerifierError", "XlaDistError", "InputError", "ExecutionError",
           "UnsupportedError", "DeadlockError", "OutputError", "__version__"]


def parse_hlo(text: str, filename: str | None = None):
    """Parse XLA HLO text (either print style) into a Module; raises HloParseError."""
    from .hlo.parser import parse_module
    if not isinstance(text, (str, bytes)):
        raise InputError(f"parse_hlo takes HLO text, got {type(text).__name__}")
    return parse_module(text, filename=filename)


def load_hlo(path, what: str = "module file"):
    """Read and parse an HLO text file; InputError when it cannot be read (`what` names it
    in the message), HloParseError when it is not HLO."""
    from .hlo.parser import parse_file
    return parse_file(path, what)


def verify(module):
    """Check every instruction's shape and attributes; raises VerifierError (UnsupportedError
    for a module written before SPMD partitioning, which no device can run)."""
    from .hlo.ir import expect_module
    from .hlo.verifier import verify_module
    from .semantics.custom_calls import check_partitioned
    check_partitioned(expect_module(module, "verify"))  # UnsupportedError, as xladist.run says
    return verify_module(module)


def compile(module, backend: str = "cpu", **options):
    """Compile a module for one device (default: the cpu backend, native code via LLVM;
    backend="interpreter" for the numpy reference); returns an Executable called with
    numpy arrays."""
    from .backends import compile as _compile
    return _compile(module, backend=backend, **options)


def run(module, inputs=None, n: int = 1, **options):
    """Run a module on n devices (MPI ranks); returns per-device outputs."""
    from xladist.runtime.api import run as _run
    return _run(module, inputs, n=n, **options)


def load_executable(path, **options):
    """Run a serialized executable (`xladist compile MODULE -o NAME.xlx`) without compiling:
    the file is validated (magic, version, checksum) and refused if it was made for another
    CPU or xladist version. Options as the cpu backend's (device, infeed)."""
    from .compiler.serialized import load_executable as load
    return load(path, **options)


def __getattr__(name: str):
    # Cluster is imported on first use: `import xladist` stays cheap.
    if name == "Cluster":
        from xladist.runtime.cluster import Cluster
        return Cluster
    raise AttributeError(f"module 'xladist' has no attribute {name!r}")
