"""Custom-call targets the launching process registered, handed to the ranks it starts.

The custom-call registry (xladist/semantics/custom_calls.py) is per process, and the ranks
of xladist.run, xladist.Cluster and `xladist run` are fresh processes (`python -m
xladist.runtime.rank_main`): they have the built-in targets and nothing the user's
process registered. So the launcher sends, with the job's settings (api.rank_options ->
the job description every rank reads), a reference to each function the module needs
beyond the built-ins -- its module and qualified name, and the sys.path folder it was
imported from -- and a rank imports and registers it before it loads the module
(`register`). Targets the ranks have anyway -- the built-ins, and those the run's backend
plugin registers as it loads -- are not sent. Like multiprocessing's spawn, code travels by name, never pickled.

What a rank cannot import by name is refused here, before any rank starts (`references`):
a lambda, a closure, a local class's method, a bound method or other callable object, and a
function of `__main__` -- the ranks' `__main__` is rank_main, not the user's script, and
running the script again on every rank (spawn's way) would also run its top level.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from xladist.errors import UnsupportedError

WHAT_TO_DO = ("define the function at the top level of a module the ranks can import (on "
              "their PYTHONPATH) and register that one, or run the script under `mpiexec -n "
              "N python script.py`, where every rank runs its registrations itself")


def references(module, backend: str) -> dict[str, dict]:
    """target -> {"function": "module:qualname", "path": folder or None} for every
    custom-call target of `module` this process registered beyond the built-ins
    (custom_calls.added) and beyond what loading `backend`'s plugin registered (the ranks
    load it too: backends.PLUGIN_CALLS); UnsupportedError naming every one the ranks could
    not import."""
    from xladist.backends import PLUGIN_CALLS
    from xladist.semantics.custom_calls import added
    refs, problems = {}, []
    theirs = PLUGIN_CALLS.get(backend, {})
    for target, fn in added(module).items():
        if theirs.get(target) is fn:
            continue
        why = _not_importable(fn)
        if why:
            problems.append(f"custom-call target {target!r} is registered in this process to "
                            f"{_describe(fn)}, which ranks started as fresh processes cannot "
                            f"import: {why}")
        else:
            refs[target] = {"function": f"{fn.__module__}:{fn.__qualname__}",
                            "path": _import_root(sys.modules[fn.__module__])}
    if problems:
        raise UnsupportedError("; ".join(problems) + f". To run it on ranks xladist starts, "
                               f"{WHAT_TO_DO}")
    return refs


def _describe(fn) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{getattr(fn, '__module__', '?')}.{name}"


def _not_importable(fn) -> str | None:
    """Why `fn` cannot be found again by module and qualified name (None: it can)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return "it is not a function or class with a module and a qualified name"
    if "<lambda>" in qualname:
        return "it is a lambda"
    if "<locals>" in qualname:
        return "it is defined inside a function (a closure or a local class)"
    if module in ("__main__", "__mp_main__"):
        return ("it is defined in __main__ (the script run as `python script.py`, or an "
                "interactive session), and the ranks' __main__ is xladist's rank program")
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001 -- any failure to find it again is the answer
        return f"looking up {module}:{qualname} failed ({type(e).__name__}: {e})"
    if obj is not fn:
        return (f"{module}:{qualname} names another object (a bound method, or the name "
                f"was rebound)")
    return None


def _import_root(mod) -> str | None:
    """The sys.path folder `mod` was imported from (the script's folder, a test suite's
    root: ranks started elsewhere may lack it), or None (a built-in or zip module)."""
    file = getattr(mod, "__file__", None)
    if not file:
        return None
    root = Path(file).resolve().parent
    depth = mod.__name__.count(".") + (1 if Path(file).name == "__init__.py" else 0)
    for _ in range(depth):
        root = root.parent
    return str(root)


def register(refs: dict) -> None:
    """On a rank: import and register every forwarded target (the launcher's own function
    replaces a built-in one it replaced), and note them for the error of a target still
    unknown here (custom_calls.FORWARDED)."""
    from xladist.semantics import custom_calls
    if custom_calls.FORWARDED is None:
        custom_calls.FORWARDED = {}
    for target, ref in refs.items():
        from .feeds.pipeline import load_function  # (a job without forwarded targets: never)
        path = ref.get("path")
        if path and path not in sys.path and Path(path).is_dir():
            sys.path.append(path)  # after the ranks' own entries: it shadows nothing
        fn = load_function(ref["function"], option=f"custom-call target {target!r}, forwarded "
                                                   f"from the launching process as")
        custom_calls.register_custom_call(target, fn, replace=True)
        custom_calls.FORWARDED[target] = ref["function"]
