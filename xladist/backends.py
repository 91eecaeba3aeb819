"""The backend table: `compile(module, backend=...) -> Executable`.

Each backend is a factory `factory(module, **options) -> Executable` (executable.py), named
in BUILTIN as "module:attribute" and imported when first asked for, so no backend registers
itself as a side effect of an import and this module imports none of them. An installed
package adds more through the `xladist.backends` entry-point group, and a process can add
its own with `register_backend` (docs/BACKENDS.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .errors import InputError, UnsupportedError

BUILTIN = {
    "cpu": "xladist.compiler.program:CpuExecutable",
    "interpreter": "xladist.interpreter.executable:InterpreterExecutable",
}

BACKENDS: dict[str, Callable] = {}
# backend -> the custom-call targets its entry point registered as it loaded: every process
# that loads it (the ranks of a run with it too) has them, so none is forwarded
# (runtime/forwarded_calls.py).
PLUGIN_CALLS: dict[str, dict[str, Callable]] = {}


def register_backend(name: str, factory: Callable, *, replace: bool = False) -> None:
    """Make `compile(module, backend=name, **options)` call `factory(module, **options)`."""
    if name in BACKENDS and not replace:
        raise RuntimeError(f"backend {name!r} registered twice")
    BACKENDS[name] = factory


# Installed packages add backends through this entry-point group (docs/BACKENDS.md):
#   [project.entry-points."xladist.backends"]
#   mybackend = "my_package:MyExecutable"     # factory(module, **options) -> Executable
ENTRY_POINT_GROUP = "xladist.backends"


def _plugins() -> dict:
    from importlib.metadata import entry_points
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_plugin(name: str) -> None:
    ep = _plugins().get(name)
    if ep is None:
        return
    from .semantics.custom_calls import CUSTOM_CALLS
    before = dict(CUSTOM_CALLS)
    try:
        factory = ep.load()
    except Exception as e:  # noqa: BLE001 - a broken plugin must not look like a crash here
        raise UnsupportedError(f"backend {name!r} from the installed package entry point "
                               f"{ep.value!r} failed to load: {type(e).__name__}: {e}") from e
    if not callable(factory):
        raise UnsupportedError(f"backend {name!r}: entry point {ep.value!r} is not callable "
                               f"(it must be factory(module, **options) -> Executable)")
    PLUGIN_CALLS[name] = {t: f for t, f in CUSTOM_CALLS.items() if before.get(t) is not f}
    BACKENDS.setdefault(name, factory)


def load_backend(name: str) -> Callable:
    """The factory of backend `name`: registered in this process, built in, or from an
    installed package's entry point; UnsupportedError listing the known names otherwise."""
    if name not in BACKENDS and name in BUILTIN:
        module, attr = BUILTIN[name].split(":")
        BACKENDS[name] = getattr(importlib.import_module(module), attr)
    check_backend(name)
    return BACKENDS[name]


def check_backend(name: str) -> None:
    """UnsupportedError (listing the known names) unless backend `name` exists. A built-in
    one is not imported: a launcher checks the name before its ranks start, and the cpu
    backend's import (codegen, llvmlite: ~60 ms) is the ranks' to pay, not the launcher's."""
    if name in BACKENDS or name in BUILTIN:
        return
    _load_plugin(name)
    if name not in BACKENDS:
        known = ", ".join(sorted(set(BACKENDS) | set(BUILTIN) | set(_plugins())))
        raise UnsupportedError(f"backend {name!r} is not available (available: {known})")


def _check_async_groups(module) -> None:
    """Sends and recvs grouped in one async-start (xladist/hlo/async_groups.py) run on both
    built-in backends; a group its async-done could not complete is refused here, before any
    rank computes."""
    from .hlo.async_groups import transfer_group
    for instr in module.all_instructions():
        if instr.opcode == "async-start":
            transfer_group(instr)


def compile(module, backend: str = "cpu", *, verify: bool = True, **options):
    """Compile `module` for one device with the named backend; returns an Executable."""
    from .hlo.ir import expect_module
    expect_module(module, "compile")
    if not isinstance(backend, str):
        raise InputError(f"backend must be a name (cpu or interpreter), got {backend!r}")
    factory = load_backend(backend)
    if backend in BUILTIN:
        _check_async_groups(module)
    if verify:
        from .hlo.verifier import verify_module
        from .semantics.custom_calls import check_partitioned
        check_partitioned(module)  # before the verifier, whose hint would not help
        # A run's device context knows the run's counts (where the header says nothing); a
        # module compiled on its own is verified with its header's (without counts: one device).
        device = options.get("device")
        counts = None
        if device is not None:
            from .hlo.collective_groups import config_counts
            counts = config_counts(module, device.replica_count, device.num_partitions)
        verify_module(module, counts=counts)
    from .hlo.dynamic_padder import pad_dynamic
    static, dynamic_results = pad_dynamic(module)
    if dynamic_results is not None or static is not module:
        # A schedule names the original module's instructions; the padded copy runs in
        # text order (every rank pads the same way, so collectives still line up).
        options.pop("schedule", None)
    exe = factory(static, **options)
    exe.dynamic_results = dynamic_results
    return exe
