"""The backend interface: `Executable`, one device's callable program, and the argument and
result conventions every backend shares.

    exe = xladist.compile(module)             # backend="cpu" (LLVM); or "interpreter"
    outputs = exe(x, y)                       # list of numpy arrays, one per result leaf

Arguments are checked against the entry parameters before anything runs: count, element
type and dims must match exactly (no silent casting), except that a bf16 parameter also
accepts a uint16 array of bit patterns (the npz encoding). Tuple-shaped parameters take a
tuple of arrays; token parameters take `None` or TOKEN. Results are flattened: a tuple
root gives one array per array leaf, in order (token leaves are dropped).

Which backends exist, and `compile`, are in backends.py (docs/BACKENDS.md).
"""

from __future__ import annotations

import numpy as np

from .errors import InputError, out_of_memory
from .hlo.shape import Shape
from .semantics.values import TOKEN


# ---- arguments and results ---------------------------------------------------------------
def describe_parameter(param) -> str:
    return f"parameter {param.parameter_number} ({param.name}: {param.shape.to_text(layout=False)})"


def _describe_given(a) -> str:
    if isinstance(a, np.ndarray):
        return f"a {a.dtype} array of dims {list(a.shape)}"
    return f"a {type(a).__name__}"


def conform_argument(value, shape: Shape, what: str):
    """`value` as an interpreter value of `shape`, or InputError saying what differs."""
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


def exact_form(shape: Shape):
    """(dtype, dims) of the arrays a parameter of `shape` takes as they are, or None
    (tuples, tokens): conform_parameter's fast path."""
    return (shape.dtype, tuple(shape.dims)) if shape.is_array else None


def conform_parameter(value, param, exact, where: str = ""):
    """`value` for entry parameter `param` (conform_argument); `exact` is its exact_form.
    An array of exactly that type and dims is taken without building the message an
    error needs (describe_parameter's two strings per argument per call)."""
    if exact is not None and type(value) is np.ndarray and value.dtype == exact[0] and \
            value.shape == exact[1]:
        return value
    return conform_argument(value, param.shape, where + describe_parameter(param))


def distinct_leaves(leaves: list) -> list:
    """`leaves` with each array in memory of its own, as XLA gives every result leaf its own
    buffer: a value the root names twice (`tuple(n, n)`, or `n` and a reshape of it) comes
    back once as it is and copied after that. Before, both were one memory, and changing
    one result changed the other."""
    if len(leaves) < 2:
        return leaves
    seen = set()
    out = []
    for a in leaves:
        owner = a
        while isinstance(owner, np.ndarray) and owner.base is not None:
            owner = owner.base
        if id(owner) in seen:
            a = a.copy()
        else:
            seen.add(id(owner))
        out.append(a)
    return out


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
    # Own, writable, C-ordered results (rules may return broadcast or transposed views, and
    # the interpreter holds constants and the caller's arguments read-only: shaping.read_only).
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
        self._exact = [exact_form(p.shape) for p in self.parameters]

    def check_arguments(self, arrays) -> list:
        if len(arrays) != len(self.parameters):
            wanted = ", ".join(describe_parameter(p) for p in self.parameters) or "none"
            raise InputError(f"{self.module.name} takes {len(self.parameters)} arguments "
                             f"({wanted}), got {len(arrays)}")
        return [conform_parameter(a, p, exact)
                for a, p, exact in zip(arrays, self.parameters, self._exact)]

    def __call__(self, *arrays) -> list[np.ndarray]:
        args = self.check_arguments(arrays)
        value = self.execute(args)
        try:  # (a broadcast root is a view until here)
            leaves = flatten_result(value, self.result_shape)
        except MemoryError as e:
            root = self.module.entry.root
            raise out_of_memory(e, f"the result {root.name} "
                                   f"({self.result_shape.to_text(layout=False)})") from None
        if self.dynamic_results is not None:
            leaves = self.dynamic_results.cut(leaves)
        return distinct_leaves(leaves)

    def execute(self, args):
        """Run on checked arguments; returns the root value (tuples unflattened)."""
        raise NotImplementedError
