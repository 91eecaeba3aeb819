"""`compile(module, backend=...) -> Executable`: one device's callable program.

    exe = xladist.compile(module)             # backend="cpu" (LLVM); or "interpreter"
    outputs = exe(x, y)                       # list of numpy arrays, one per result leaf

Backends are a table: `BACKENDS[name] = factory(module, **options) -> Executable`.
The interpreter is built in; the compiler registers "cpu" with `register_backend`; an
installed package registers more through the `xladist.backends` entry-point group, loaded
when first named (docs/BACKENDS.md).

Arguments are checked against the entry parameters before anything runs: count, element
type and dims must match exactly (no silent casting), except that a bf16 parameter also
accepts a uint16 array of bit patterns (the npz encoding). Tuple-shaped parameters take a
tuple of arrays; token parameters take `None` or TOKEN. Results are flattened: a tuple
root gives one array per array leaf, in order (token leaves are dropped).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import InputError, UnsupportedError
from .hlo.shape import Shape

BACKENDS: dict[str, Callable] = {}


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
    try:
        factory = ep.load()
    except Exception as e:  # noqa: BLE001 - a broken plugin must not look like a crash here
        raise UnsupportedError(f"backend {name!r} from the installed package entry point "
                               f"{ep.value!r} failed to load: {type(e).__name__}: {e}") from e
    if not callable(factory):
        raise UnsupportedError(f"backend {name!r}: entry point {ep.value!r} is not callable "
                               f"(it must be factory(module, **options) -> Executable)")
    BACKENDS.setdefault(name, factory)


def _load_backend(name: str) -> Callable:
    if name not in BACKENDS and name == "cpu":
        try:  # the compiler registers itself on import
            import xladist.compiler  # noqa: F401
        except ModuleNotFoundError as e:
            if e.name is None or not e.name.startswith("xladist.compiler"):
                raise
    if name not in BACKENDS:
        _load_plugin(name)
    if name not in BACKENDS:
        known = ", ".join(sorted(set(BACKENDS) | {"cpu", "interpreter"} | set(_plugins()))) or "none"
        raise UnsupportedError(f"backend {name!r} is not available (available: {known})")
    return BACKENDS[name]


def verify_if_available(module) -> None:
    """Run the verifier when xladist.hlo.verifier exists (it raises VerifierError)."""
    try:
        from .hlo.verifier import verify_module
    except ModuleNotFoundError as e:
        if e.name in ("xladist.hlo.verifier",):
            return
        raise
    verify_module(module)


def compile(module, backend: str = "cpu", *, verify: bool = True, **options):
    """Compile `module` for one device with the named backend; returns an Executable."""
    from .hlo.ir import Module
    if not isinstance(module, Module):
        raise InputError(f"compile takes a parsed module (xladist.load_hlo(path) or "
                         f"xladist.parse_hlo(text)), got {type(module).__name__}")
    if not isinstance(backend, str):
        raise InputError(f"backend must be a name (cpu or interpreter), got {backend!r}")
    factory = _load_backend(backend)
    if verify:
        verify_if_available(module)
    from .hlo.dynamic_padder import pad_dynamic
    static, dynamic_results = pad_dynamic(module)
    if dynamic_results is not None or static is not module:
        # A schedule names the original module's instructions; the padded copy runs in
        # text order (every rank pads the same way, so collectives still line up).
        options.pop("schedule", None)
    exe = factory(static, **options)
    exe.dynamic_results = dynamic_results
    return exe


# ---- arguments and results ---------------------------------------------------------------
def describe_parameter(param) -> str:
    return f"parameter {param.parameter_number} ({param.name}: {param.shape.to_text(layout=False)})"


def _describe_given(a) -> str:
    if isinstance(a, np.ndarray):
        return f"a {a.dtype} array of dims {list(a.shape)}"
    return f"a {type(a).__name__}"


def conform_argument(value, shape: Shape, what: str):
    """`value` as an interpreter value of `shape`, or InputError saying what differs."""
    from .interpreter.registry import TOKEN
    if shape.is_tuple:
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.tuple_shapes):
            raise InputError(f"{what}: expected a tuple of {len(shape.tuple_shapes)} values "
                             f"for {shape}, got {_describe_given(value)}")
        return tuple(conform_argument(v, s, f"{what}[{i}]")
                     for i, (v, s) in enumerate(zip(value, shape.tuple_shapes)))
    if shape.is_token:
        if value is None or value is TOKEN:
            return TOKEN
        raise InputError(f"{what}: a token parameter takes None, got {_describe_given(value)}")
    if not isinstance(value, (np.ndarray, np.generic)):
        raise InputError(f"{what}: expected a numpy array {shape.to_text(layout=False)} "
                         f"({shape.dtype}), got {_describe_given(value)}; convert it explicitly")
    a = np.asarray(value)
    if shape.element_type.name == "bf16" and a.dtype == np.uint16:
        a = a.view(shape.dtype)  # bf16 bit patterns, the npz encoding
    if a.dtype != shape.dtype or a.shape != tuple(shape.dims):
        raise InputError(f"{what}: expected {shape.to_text(layout=False)} ({shape.dtype}), "
                         f"got {_describe_given(a)}")
    return a


def flatten_result(value, shape: Shape) -> list[np.ndarray]:
    """Array leaves of a result in order (tuples flattened depth-first, tokens dropped)."""
    if shape.is_tuple:
        out = []
        for v, s in zip(value, shape.tuple_shapes):
            out.extend(flatten_result(v, s))
        return out
    if not shape.is_array:
        return []
    a = np.asarray(value)
    # Own, writable, C-ordered results (rules may return broadcast or transposed views).
    return [a if a.flags.c_contiguous and a.flags.writeable else a.copy()]


class Executable:
    """A compiled single-device program; call it with one array per entry parameter."""

    backend = "?"
    # Set by compile() for a module with bounded dynamic shapes (hlo.dynamic_padder): the
    # padded results are cut back to their dynamic sizes.
    dynamic_results = None

    def __init__(self, module):
        self.module = module
        self.parameters = module.entry.parameters
        self.result_shape = module.entry.root.shape

    def check_arguments(self, arrays) -> list:
        if len(arrays) != len(self.parameters):
            wanted = ", ".join(describe_parameter(p) for p in self.parameters) or "none"
            raise InputError(f"{self.module.name} takes {len(self.parameters)} arguments "
                             f"({wanted}), got {len(arrays)}")
        return [conform_argument(a, p.shape, describe_parameter(p))
                for a, p in zip(arrays, self.parameters)]

    def __call__(self, *arrays) -> list[np.ndarray]:
        args = self.check_arguments(arrays)
        leaves = flatten_result(self.execute(args), self.result_shape)
        if self.dynamic_results is not None:
            leaves = self.dynamic_results.cut(leaves)
        return leaves

    def execute(self, args):
        """Run on checked arguments; returns the root value (tuples unflattened)."""
        raise NotImplementedError


class InterpreterExecutable(Executable):
    """The numpy reference interpreter as a backend.

    Options: `device` (a DeviceContext; default SingleDeviceContext(infeed)), `infeed`
    (items for a SingleDeviceContext), `check` (assert rule result shapes, default on),
    `schedule` (computation -> instruction order to run, e.g. xladist.analysis.schedule's) and
    `rules` (per-run opcode rule overrides); see interpreter.Evaluator.
    """

    backend = "interpreter"

    def __init__(self, module, *, device=None, infeed=(), check: bool = True, schedule=None,
                 rules=None):
        super().__init__(module)
        from .interpreter import SingleDeviceContext, check_supported
        check_supported(module)
        self.device = device if device is not None else SingleDeviceContext(infeed)
        self.check = check
        self.schedule = schedule
        self.rules = rules

    def execute(self, args):
        from .interpreter import Evaluator
        return Evaluator(self.module, self.device, check=self.check, schedule=self.schedule,
                         rules=self.rules).run(args)


register_backend("interpreter", InterpreterExecutable)
