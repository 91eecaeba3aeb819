"""A small constant folder over the IR: the values that decide control flow on one device.

The deadlock check must know, per device, how often a while loop runs and which branch a
conditional takes.  Those decisions are usually functions of constants, replica-id,
partition-id and loop counters; this folder computes exactly such values and answers
`Unknown` for everything else (parameters of the entry, infeed, received data, big arrays,
ops it has no rule for).  An `Unknown` remembers the instruction it came from so a report can
say what the control decision depends on.

Values: numpy arrays (0-d for scalars) in the element type of the instruction's shape, tuples
of values, `TOKEN`, or `Unknown`.  Rules are registered by opcode in FOLD_RULES; a rule gets
the already-folded operand values (never Unknown unless the rule is marked lazy).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from xladist.errors import UnsupportedError
from xladist.hlo.ir import Computation, Instruction
from xladist.semantics import layout
from xladist.semantics.compare import clamp_rule, compare_rule, select_rule
from xladist.semantics.conversion import convert_rule
from xladist.semantics.elementwise import binary_rule, unary_rule
from xladist.semantics.values import TOKEN

__all__ = ["FOLD_RULES", "MAX_FOLD_ELEMENTS", "TOKEN", "Folder", "Frame", "IdValue", "Unknown",
           "id_value", "key_part"]

# Control values are scalars or tiny vectors; anything bigger is data, not control.
MAX_FOLD_ELEMENTS = 4096
# What a rule raises for values it cannot compute: the value is then Unknown.
_CANNOT_FOLD = (ValueError, TypeError, IndexError, ZeroDivisionError, UnsupportedError)
# A loop folded only for its value (it has no collectives) stops being folded after this.
MAX_FOLD_ITERATIONS = 100_000


# Collectives whose result is the same on every member of the group, whatever each member
# contributes: a reduction of all operands, or all operands concatenated in group order.
SAME_ON_EVERY_MEMBER = frozenset({"all-reduce", "all-gather"})


class Unknown:
    """A value the folder cannot compute; `origin` is the instruction it first came from.

    `key` is set when the value, though unknown, is the same on every device that computes
    the same key: an all-reduce or all-gather result (the same on its whole group) and what
    the same instructions compute from such results and equal known values. The deadlock
    check may then enumerate the branches such a value picks instead of giving up (trace.py).
    """

    __slots__ = ("key", "origin", "reason")

    def __init__(self, origin: Instruction | None, reason: str, key=None):
        self.origin = origin
        self.reason = reason
        self.key = key

    def describe(self) -> str:
        if self.origin is None:
            return self.reason
        where = f" (line {self.origin.line})" if self.origin.line else ""
        return f"{self.origin.name}{where}: {self.reason}"

    def __repr__(self) -> str:
        return f"Unknown({self.describe()})"


class IdValue(Unknown):
    """A scalar that differs between the devices of a class (classes.py): `vals` holds its
    value on each member, in the order of the class's members.  To everything but the
    element-wise rules below it is an Unknown without key, so control it decides is either
    split by the class engine or stops the trace as any other Unknown would."""

    __slots__ = ("vals",)

    def __init__(self, origin: Instruction, vals: np.ndarray):
        super().__init__(origin, "differs between the devices of the class")
        self.vals = vals


def id_value(instr: Instruction, vals: np.ndarray):
    """The value of `instr` on each member of a class: a plain scalar, as the per-device
    folder computes it, when every member has the same one; else an IdValue."""
    vals = np.ascontiguousarray(np.asarray(vals).astype(_dtype(instr), copy=False))
    # The same bits, not equal values: -0.0 == +0.0, yet TOTALORDER tells them apart.
    raw = vals.view(np.uint8).reshape(len(vals), vals.dtype.itemsize)
    if len(vals) and bool(np.all(raw == raw[0])):
        return vals[:1].reshape(())
    return IdValue(instr, vals)


class Frame:
    """One activation of a computation: lazily bound parameters and memoized values."""

    __slots__ = ("comp", "memo", "params", "walked")

    def __init__(self, comp: Computation, params: list):
        self.comp = comp
        # Each parameter is a value or a zero-argument callable producing it (lazy binding).
        self.params = params
        self.memo: dict[Instruction, object] = {}
        # call/fusion/conditional -> the frame the tracer walked it in (trace.py): its values
        # are folded there, where each all-reduce holds the key of the run it was.
        self.walked: dict[Instruction, Frame] = {}

    def param(self, n: int):
        if n >= len(self.params):
            return Unknown(None, f"parameter {n} of {self.comp.name} is not bound")
        p = self.params[n]
        if callable(p):
            p = p()
            self.params[n] = p
        return p


FoldRule = Callable[[Instruction, list, "Folder", Frame], object]
FOLD_RULES: dict[str, FoldRule] = {}
# Rules that receive Unknown operands themselves (tuple building, selection, calls).
_LAZY: set[str] = set()


def _rule(*opcodes: str, lazy: bool = False):
    def wrap(fn):
        for op in opcodes:
            FOLD_RULES[op] = fn
            if lazy:
                _LAZY.add(op)
        return fn
    return wrap


class Folder:
    """Folds instruction values for one device (its replica id and partition id), or for
    every device at once when both ids are None: then they fold to an Unknown without key,
    so control that depends on them stops the trace (symmetry.py falls back then)."""

    def __init__(self, replica_id: int | None, partition_id: int | None, uniform_key=None,
                 ids=None):
        self.replica_id = replica_id
        self.partition_id = partition_id
        # classes.py: with both ids None, the ids of a class of devices (each member's
        # replica-id and partition-id as arrays; IdValue when they differ).
        self.ids = ids
        # instr -> a key naming this run of an all-reduce and this device's group (None: no
        # key); set by the tracer, which knows the groups and how often the op has run.
        self.uniform_key = uniform_key

    def eval(self, instr: Instruction, frame: Frame):
        memo = frame.memo
        if instr in memo:
            return memo[instr]
        rule = FOLD_RULES.get(instr.opcode)
        if instr.opcode in SAME_ON_EVERY_MEMBER and self.uniform_key is not None:
            value = Unknown(instr, f"{instr.opcode} is computed from data at run time",
                            self.uniform_key(instr))
        elif rule is None:
            value = Unknown(instr, f"{instr.opcode} is computed from data at run time")
        elif instr.shape.is_array and instr.shape.size > MAX_FOLD_ELEMENTS:
            value = Unknown(instr, f"{instr.shape.size} elements: data, not control")
        else:
            args = [self.eval(op, frame) for op in instr.operands]
            if self.ids is not None and instr.opcode in _VECTOR and any(
                    isinstance(a, IdValue)
                    for a in (args[:1] if instr.opcode == "select" else args)):
                value = _vector(instr, args)
                memo[instr] = value
                return value
            if instr.opcode not in _LAZY:
                bad = next((a for a in args if isinstance(a, Unknown)), None)
                if bad is not None:
                    bad = _combine(instr, args, bad)
                    memo[instr] = bad
                    return bad
            with np.errstate(all="ignore"):
                try:
                    value = rule(instr, args, self, frame)
                except _CANNOT_FOLD as e:
                    value = Unknown(instr, f"cannot fold: {e}")
        memo[instr] = value
        return value

    def call(self, comp: Computation, args: list):
        frame = Frame(comp, list(args))
        return self.eval(comp.root, frame)


def _combine(instr: Instruction, args: list, first: Unknown) -> Unknown:
    """The Unknown `instr` computes from `args`: keyed when every unknown operand is keyed and
    every known one is a plain array (its bytes join the key, so devices that hold different
    known values get different keys); else `first`, which has the origin to report."""
    parts = []
    for a in args:
        part = key_part(a)
        if part is None:
            if isinstance(a, Unknown) and not isinstance(a, IdValue):
                return a
            # Not `a` itself when it is an IdValue: its per-member values are not this op's.
            return Unknown(first.origin, first.reason)
        parts.append(part)
    return Unknown(first.origin, first.reason, (id(instr), tuple(parts)))


def key_part(v):
    """What a value adds to a uniform key: an all-reduce result's key, a known array's
    bytes; None when the value may differ between devices (or is not comparable)."""
    if isinstance(v, Unknown):
        return v.key
    if isinstance(v, np.ndarray):
        return (v.dtype.str, v.shape, v.tobytes())
    return None


def _unkeyed(u: Unknown) -> Unknown:
    """`u` as the value of an instruction that does not compute it from `u` alone."""
    return Unknown(u.origin, u.reason)


def _dtype(instr: Instruction):
    return instr.shape.dtype


def _arr(instr: Instruction, value) -> np.ndarray:
    return np.asarray(value).astype(_dtype(instr), copy=False).reshape(instr.shape.dims)


@_rule("constant")
def _constant(instr, args, folder, frame):
    lit = instr.literal
    if lit is None or lit.value is None:
        return Unknown(instr, "constant without data")
    return _literal_value(lit)


def _literal_value(lit):
    if isinstance(lit.value, tuple):
        return tuple(_literal_value(v) for v in lit.value)
    return np.asarray(lit.value)


@_rule("parameter", lazy=True)
def _parameter(instr, args, folder, frame):
    return frame.param(instr.parameter_number)


@_rule("replica-id")
def _replica_id(instr, args, folder, frame):
    if folder.replica_id is None and folder.ids is not None:
        return id_value(instr, folder.ids.replica)
    if folder.replica_id is None:
        return Unknown(instr, "replica-id differs between devices")
    return np.asarray(folder.replica_id, np.uint32)


@_rule("partition-id")
def _partition_id(instr, args, folder, frame):
    if folder.partition_id is None and folder.ids is not None:
        return id_value(instr, folder.ids.partition)
    if folder.partition_id is None:
        return Unknown(instr, "partition-id differs between devices")
    return np.asarray(folder.partition_id, np.uint32)


@_rule("tuple", lazy=True)
def _tuple(instr, args, folder, frame):
    return tuple(args)


@_rule("get-tuple-element", lazy=True)
def _gte(instr, args, folder, frame):
    t = args[0]
    if isinstance(t, Unknown):
        # An element of a keyed tuple (a variadic all-reduce's results) is uniform too, but
        # each element is a value of its own: the same key for all would make the check
        # try only the branch combinations where they all agree.
        if t.key is None:
            return t
        return Unknown(t.origin, t.reason, (t.key, "element", instr.attrs["index"]))
    return t[instr.attrs["index"]]


@_rule("after-all")
def _after_all(instr, args, folder, frame):
    return TOKEN


@_rule("add-dependency", "opt-barrier", "copy", "reshape", lazy=True)
def _identity(instr, args, folder, frame):
    v = args[0]
    if isinstance(v, np.ndarray) and instr.shape.is_array:
        return v.reshape(instr.shape.dims)
    return v


@_rule("bitcast")
def _bitcast(instr, args, folder, frame):
    # Not a reshape: XLA's bitcast reads the operand's buffer in its layout as the result's
    # shape, element type included (s32[2,2]{1,0} -> {0,1} transposes the logical value).
    return layout.bitcast(np.asarray(args[0]), instr.operands[0].shape, instr.shape)


# The element-wise ops control code uses (counters, ids, comparisons), computed by the
# interpreter's own rules (xladist/semantics): a branch or trip count folded here must be the
# one the run takes, corner cases included (a saturating convert, TOTALORDER, x / 0).
_SHARED = {op: unary_rule for op in ("negate", "abs", "sign", "not")}
_SHARED.update({op: binary_rule for op in (
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power",
    "and", "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical")})
_SHARED.update({"compare": compare_rule, "convert": convert_rule, "clamp": clamp_rule})


def _register_shared(name, fn):
    @_rule(name)
    def _shared(instr, args, folder, frame):
        return _arr(instr, fn(instr, args, None))


for _name, _fn in _SHARED.items():
    _register_shared(_name, _fn)


def _vector(instr: Instruction, args: list):
    """A scalar element-wise op on per-member values (IdValue) and scalars, computed for all
    members of the class at once with the same rules as above."""
    if not (instr.shape.is_array and instr.shape.dims == ()):
        return Unknown(instr, "a device-dependent value that is not a scalar")
    vals = []
    for a in args:
        if isinstance(a, IdValue):
            vals.append(a.vals)
        elif isinstance(a, np.ndarray) and a.ndim == 0:
            vals.append(a)
        else:
            return Unknown(instr, "computed from a device-dependent value and data")
    n = max(np.size(v) for v in vals)
    vals = [np.broadcast_to(v, (n,)) for v in vals]
    with np.errstate(all="ignore"):
        try:
            out = (select_rule if instr.opcode == "select" else _SHARED[instr.opcode])(
                instr, vals, None)
        except _CANNOT_FOLD as e:
            return Unknown(instr, f"cannot fold: {e}")
    return id_value(instr, out)


@_rule("select", lazy=True)
def _select(instr, args, folder, frame):
    pred, on_true, on_false = args
    if isinstance(pred, Unknown):
        return _combine(instr, args, pred)
    if pred.ndim == 0:
        return on_true if bool(pred) else on_false
    for a in (on_true, on_false):
        if isinstance(a, Unknown):
            return _combine(instr, args, a)
    return _arr(instr, np.where(pred, on_true, on_false))


# Ops `_vector` computes for a class of devices at once.
_VECTOR = frozenset(_SHARED) | {"select"}


@_rule("broadcast")
def _broadcast(instr, args, folder, frame):
    x = args[0]
    dims = instr.attrs.get("dimensions", ())
    out_shape = instr.shape.dims
    shape = [1] * len(out_shape)
    for i, d in enumerate(dims):
        shape[d] = x.shape[i]
    return _arr(instr, np.broadcast_to(x.reshape(shape), out_shape))


@_rule("iota")
def _iota(instr, args, folder, frame):
    dims = instr.shape.dims
    d = instr.attrs["iota_dimension"]
    shape = [1] * len(dims)
    shape[d] = dims[d]
    return _arr(instr, np.broadcast_to(np.arange(dims[d]).reshape(shape), dims))


@_rule("slice")
def _slice(instr, args, folder, frame):
    spec = instr.attrs["slice"]
    return _arr(instr, args[0][tuple(slice(a, b, s) for a, b, s in spec.dims)])


@_rule("dynamic-slice")
def _dynamic_slice(instr, args, folder, frame):
    x, starts = args[0], args[1:]
    sizes = instr.attrs["dynamic_slice_sizes"]
    if len(starts) == 1 and starts[0].ndim == 1:
        starts = list(starts[0])
    idx = []
    for dim, (s, size) in enumerate(zip(starts, sizes)):
        s = int(np.clip(int(s), 0, x.shape[dim] - size))  # XLA clamps start indices
        idx.append(slice(s, s + size))
    return _arr(instr, x[tuple(idx)])


@_rule("concatenate")
def _concatenate(instr, args, folder, frame):
    return _arr(instr, np.concatenate(args, axis=instr.attrs["dimensions"][0]))


@_rule("transpose")
def _transpose(instr, args, folder, frame):
    return _arr(instr, np.transpose(args[0], instr.attrs["dimensions"]))


@_rule("call", "fusion", lazy=True)
def _call(instr, args, folder, frame):
    comp = instr.attrs.get("to_apply") or instr.attrs.get("calls")
    inner = frame.walked.get(instr)
    if inner is not None:
        return folder.eval(comp.root, inner)
    return folder.call(comp, args)


@_rule("conditional", lazy=True)
def _conditional(instr, args, folder, frame):
    index = args[0]
    if isinstance(index, Unknown):
        return _unkeyed(index)  # the result depends on the operands too
    comp, k = pick_branch(instr, index)
    inner = frame.walked.get(instr)
    if inner is not None and inner.comp is comp:
        return folder.eval(comp.root, inner)
    return folder.call(comp, [args[1 + k]])


def pick_branch(instr: Instruction, index) -> tuple[Computation, int]:
    """The branch a conditional runs for a folded index (operation semantics: Conditional).

    A pred index picks true_computation (branch 0) or false_computation (branch 1); an integer
    index outside [0, N) runs the last branch.
    """
    branches = instr.attrs.get("branch_computations")
    if branches is None:
        branches = [instr.attrs["true_computation"], instr.attrs["false_computation"]]
    if index.dtype == bool:
        k = 0 if bool(index) else 1
    else:
        k = int(index)
        if not 0 <= k < len(branches):
            k = len(branches) - 1
    return branches[k], k


@_rule("while", lazy=True)
def _while(instr, args, folder, frame):
    state = args[0]
    cond, body = instr.attrs["condition"], instr.attrs["body"]
    for _ in range(MAX_FOLD_ITERATIONS):
        go = folder.call(cond, [state])
        if isinstance(go, Unknown):
            return _unkeyed(go)  # the loop state, not the condition
        if not bool(go):
            return state
        state = folder.call(body, [state])
    return Unknown(instr, f"runs more than {MAX_FOLD_ITERATIONS} iterations")
