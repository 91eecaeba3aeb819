"""The reference interpreter's driver: evaluates computations instruction by instruction.

Every opcode's meaning lives in `registry.EVAL_RULES` (one function per opcode, filled by
the family modules of this package); the Evaluator only walks computations, binds
parameters, checks that every rule returned exactly the instruction's shape, and turns
surprises into errors that name the instruction.

Three entry points:
- `run(args)`: the entry computation;
- `call(computation, args)`: any called computation (while bodies, fusions, branches ...);
- `call_vectorized(computation, arrays)`: a *scalar* computation (reducer, comparator, map
  body, scatter combiner) applied element-wise to whole arrays. When every instruction of
  the computation is element-wise-safe (see `VECTOR_SAFE`) it runs once on the arrays;
  otherwise it runs once per element (slow, always right).

Instructions run in the computation's text order, which XLA guarantees is a valid
schedule (operands before users); a scheduler may later pass its own order via
`Evaluator(schedule=...)`.

Values (registry.py): numpy arrays with logical values (any strides; the layout only
matters where bytes are reinterpreted, see semantics/layout.py), tuples, `TOKEN`, and
`device_ops.Pending` placeholders for results of async starts. Values are immutable:
rules must never write into an operand array (copy first).
"""

from __future__ import annotations

from time import perf_counter_ns

import numpy as np

from ..errors import ExecutionError, UnsupportedError, XlaDistError, out_of_memory
from ..hlo.ir import describe
from ..hlo.shape import Shape
from .device_ops import Pending
from ..semantics.values import TOKEN, constant_literal
from .registry import EVAL_RULES, UNSUPPORTED

# Opcodes whose rule is element-wise whatever the array shape: a scalar computation made
# only of these can run once on whole arrays in `call_vectorized`.
VECTOR_SAFE_FAMILIES = frozenset({"elementwise_unary", "elementwise_binary",
                                  "elementwise_ternary", "compare"})
VECTOR_SAFE = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "convert",
                         "bitcast-convert", "reduce-precision", "broadcast", "reshape",
                         "bitcast", "copy", "opt-barrier"})


def _same_scalar(instr, args, ev):
    return args[0]


def _scalar_bitcast(instr, args, ev):
    # A scalar bitcast is a same-width reinterpretation (f32[] -> s32[] in sort
    # comparators); element-wise over the batch it is a dtype view.
    return np.ascontiguousarray(args[0]).view(instr.shape.dtype)


# In vectorized mode the shaping ops of a scalar computation (scalar -> scalar) act
# element-wise; their normal rules would reshape to the scalar dims and drop the batch.
_VECTOR_OVERRIDES = {"broadcast": _same_scalar, "reshape": _same_scalar, "copy": _same_scalar,
                     "opt-barrier": _same_scalar, "bitcast": _scalar_bitcast}


def _is_scalar_shape(shape: Shape) -> bool:
    if shape.is_tuple:
        return all(_is_scalar_shape(s) for s in shape.tuple_shapes)
    return shape.is_token or (shape.is_array and shape.rank == 0)


def value_matches(value, shape: Shape, batch: tuple[int, ...] | None = None) -> str | None:
    """None when `value` has exactly `shape` (dtype and dims), else what is wrong.

    `batch`: in vectorized mode array leaves may carry these leading dims (or be scalars).
    """
    if isinstance(value, Pending):
        return None
    if shape.is_tuple:
        if not isinstance(value, tuple) or len(value) != len(shape.tuple_shapes):
            return f"expected a tuple of {len(shape.tuple_shapes)}, got {_kind(value)}"
        for i, (v, s) in enumerate(zip(value, shape.tuple_shapes)):
            why = value_matches(v, s, batch)
            if why:
                return f"tuple element {i}: {why}"
        return None
    if shape.is_token:
        return None if value is TOKEN else f"expected a token, got {_kind(value)}"
    if shape.is_opaque:
        return None
    if not isinstance(value, np.ndarray):
        return f"expected an array {shape}, got {_kind(value)}"
    if value.dtype != shape.dtype:
        return f"expected element type {shape.element_type} ({shape.dtype}), got {value.dtype}"
    dims = tuple(shape.dims)
    if batch is not None:
        if value.shape not in (dims, tuple(batch) + dims):
            return f"expected dims {list(dims)} over batch {list(batch)}, got {list(value.shape)}"
    elif value.shape != dims:
        return f"expected dims {list(dims)}, got {list(value.shape)}"
    return None


def _kind(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array {value.dtype}{list(value.shape)}"
    return type(value).__name__


def _normalize(value):
    """numpy scalars -> 0-d arrays (numpy returns scalars from 0-d ufuncs)."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, tuple):
        return tuple(_normalize(v) for v in value)
    return value


class Evaluator:
    """Evaluates one module on one device.

    `device` is the DeviceContext for ids, collectives, channels and feeds (default: a
    fresh SingleDeviceContext). `check` asserts every rule's result shape (cheap; on by
    default because the interpreter is the specification). `schedule` optionally maps a
    computation (or its name) to the instruction order to use -- the MPI runtime passes
    xladist.analysis.schedule.schedule_module's, the order the deadlock check proved. `rules`
    optionally overrides opcode rules for this evaluator only (the runtime's while rule
    records loop iterations for the watchdog).
    """

    def __init__(self, module, device=None, *, check: bool = True, schedule=None,
                 rules=None):
        if device is None:
            from ..semantics.single_device import SingleDeviceContext
            device = SingleDeviceContext()
        self.module = module
        self.device = device
        self.check = check
        self.schedule = {getattr(c, "name", c): order for c, order in (schedule or {}).items()}
        self._rules = {**EVAL_RULES, **rules} if rules else EVAL_RULES
        self._frames: list[list] = []
        self._batch: tuple[int, ...] | None = None
        self._vector_ok: dict[int, bool] = {}
        self.rng_state = 0  # rng-get-and-update-state's counter, if a rule uses it
        # Timeline hook (xladist/runtime/trace.py): a device that carries a tracer gets
        # `tracer.instruction(instr, t0_ns, t1_ns)` after each instruction; None costs nothing.
        self.tracer = getattr(device, "tracer", None)

    # ---- public API ----------------------------------------------------------------
    def run(self, args):
        """Evaluate the entry computation on `args` (one value per parameter)."""
        if self.module.entry is None:
            raise UnsupportedError(f"module {self.module.name} has no ENTRY computation")
        return self.call(self.module.entry, list(args))

    def call(self, computation, args):
        """Evaluate `computation` with its parameters bound to `args`; returns the root value."""
        with np.errstate(all="ignore"):
            return self._call(computation, list(args), None)

    def evaluate(self, instr, operands):
        """The value of one instruction on its operands' values, by its rule, checked and
        with its errors located as in a run (the cpu backend evaluates an instruction whose
        computation calls a custom-call target this way: compiler/interpreted.py)."""
        with np.errstate(all="ignore"):
            return self._eval(instr, list(operands))

    def call_vectorized(self, computation, arrays):
        """Apply a scalar computation element-wise over arrays of one (broadcast) shape.

        `arrays[i]` binds parameter i; they are broadcast together to a batch shape B.
        Returns an array of shape B (or a tuple of them when the root is a tuple) with the
        root's element type(s).
        """
        arrays = [np.asarray(a) for a in arrays]
        if len(arrays) != computation.num_parameters:
            raise ExecutionError(
                f"computation {computation.name} takes {computation.num_parameters} "
                f"parameters, called with {len(arrays)} arrays")
        batch = np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
        arrays = [np.broadcast_to(a, batch) for a in arrays]
        # A scalar computation applied element-wise is part of its caller's slice: untraced.
        tracer, self.tracer = self.tracer, None
        try:
            with np.errstate(all="ignore"):
                if self._vectorizable(computation):
                    out = self._call(computation, arrays, tuple(batch))
                    return _broadcast_leaves(out, batch)
                return self._per_element(computation, arrays, tuple(batch))
        finally:
            self.tracer = tracer

    def fold_vectorized(self, computation, acc, rows):
        """The left fold acc = computation(*acc, *row) over `rows` (each a list of arrays of
        acc's shape, one per parameter after the accumulators), element-wise as
        call_vectorized applies it; returns the final acc as a list.

        A fold over many rows is one short call per row, so the per-call work is what
        counts: the first row goes through call_vectorized with every check, and when the
        computation vectorizes and that row gave back arrays of acc's shapes and dtypes,
        the remaining rows run the computation directly (the same rules in the same order,
        under one errstate, without the per-rule shape checks the first row passed)."""
        acc = [np.asarray(a) for a in acc]
        rows = iter(rows)
        first = next(rows, None)
        if first is None:
            return acc
        out = _as_list(self.call_vectorized(computation, acc + list(first)))
        fast = (self._vectorizable(computation) and len(out) == len(acc)
                and all(isinstance(o, np.ndarray) and o.shape == a.shape and o.dtype == a.dtype
                        for o, a in zip(out, acc)))
        if not fast:
            for row in rows:
                out = _as_list(self.call_vectorized(computation, out + list(row)))
            return out
        batch = tuple(acc[0].shape)
        tracer, self.tracer = self.tracer, None
        check, self.check = self.check, False
        try:
            with np.errstate(all="ignore"):
                for row in rows:
                    out = _as_list(_broadcast_leaves(
                        self._call(computation, out + list(row), batch), batch))
        finally:
            self.tracer, self.check = tracer, check
        return out

    def parameter_value(self, instr):
        """The value bound to a `parameter` instruction in the computation being run."""
        frame = self._frames[-1]
        n = instr.parameter_number
        if n is None or not 0 <= n < len(frame):
            raise ExecutionError(
                f"parameter({n}) of computation {instr.parent.name} has no argument "
                f"({len(frame)} given)", instruction=describe(instr))
        return frame[n]

    @property
    def vectorized(self) -> bool:
        """True while a computation runs on whole arrays inside call_vectorized."""
        return self._batch is not None

    # ---- internals -----------------------------------------------------------------
    def _order(self, computation):
        order = self.schedule.get(computation.name)
        return order if order is not None else computation.instructions

    def _call(self, computation, args, batch):
        if self.check:
            self._check_args(computation, args, batch)
        saved_batch = self._batch
        self._batch = batch
        self._frames.append(args)
        env: dict[int, object] = {}
        tracer = self.tracer
        try:
            for instr in self._order(computation):
                operands = []
                for o in instr.operands:
                    try:
                        operands.append(env[id(o)])
                    except KeyError:
                        raise ExecutionError(
                            f"operand {o.name} is used before it is computed (the instruction "
                            f"order of computation {computation.name} is not a valid schedule)",
                            instruction=describe(instr)) from None
                if tracer is None:
                    env[id(instr)] = self._eval(instr, operands)
                else:
                    t0 = perf_counter_ns()
                    env[id(instr)] = self._eval(instr, operands)
                    tracer.instruction(instr, t0, perf_counter_ns())
            return env[id(computation.root)]
        finally:
            self._frames.pop()
            self._batch = saved_batch

    def _rule(self, instr):
        if self._batch is not None:
            override = _VECTOR_OVERRIDES.get(instr.opcode)
            if override is not None:
                return override
        rule = self._rules.get(instr.opcode)
        if rule is None:
            reason = UNSUPPORTED.get(instr.opcode, "no interpreter rule is registered")
            raise UnsupportedError(f"{describe(instr)}: opcode {instr.opcode}: {reason}")
        return rule

    def _eval(self, instr, operands):
        rule = self._rule(instr)
        try:
            value = _normalize(rule(instr, operands, self))
        except XlaDistError as e:
            if isinstance(e, ExecutionError):  # locate it: rank, device, instruction
                if e.instruction is None:
                    e.instruction = describe(instr)
                if e.rank is None:
                    d = self.device
                    e.rank = getattr(d, "rank", None)
                    e.replica, e.partition = d.replica_id, d.partition_id
                e.args = (e._format(),)
            raise
        except MemoryError as e:  # not a bug: the value does not fit
            d = self.device
            raise out_of_memory(e, rank=getattr(d, "rank", None), replica=d.replica_id,
                                partition=d.partition_id, instruction=describe(instr)) from None
        except Exception as e:  # a bug in a rule: say which instruction tripped it
            raise self._internal(instr, f"{type(e).__name__}: {e}") from e
        if self.check:
            why = value_matches(value, instr.shape, self._batch)
            if why:
                raise self._internal(instr, f"the {instr.opcode} rule returned a wrong value: "
                                            f"{why}")
        return value

    def _internal(self, instr, message):
        d = self.device
        return ExecutionError(f"internal interpreter error: {message}",
                              rank=getattr(d, "rank", None), replica=d.replica_id,
                              partition=d.partition_id, instruction=describe(instr))

    def _check_args(self, computation, args, batch=None):
        params = computation.parameters
        if len(args) != len(params):
            raise ExecutionError(f"computation {computation.name} takes {len(params)} "
                                 f"parameters, called with {len(args)} values")
        for p, a in zip(params, args):
            why = value_matches(_normalize(a), p.shape, batch)
            if why:
                raise ExecutionError(f"argument for parameter {p.parameter_number} ({p.name}) "
                                     f"of computation {computation.name}: {why}")

    def _vectorizable(self, computation) -> bool:
        key = id(computation)
        ok = self._vector_ok.get(key)
        if ok is None:
            ok = all(_vector_safe(i) for i in computation.instructions)
            self._vector_ok[key] = ok
        return ok

    def _per_element(self, computation, arrays, batch):
        root = computation.root.shape
        leaves = [s for _, s in root.leaves()]
        outs = [np.empty(batch, s.dtype) for s in leaves]
        for idx in np.ndindex(*batch):
            value = self._call(computation, [np.asarray(a[idx]) for a in arrays], None)
            flat = _flatten(value)
            for o, v in zip(outs, flat):
                o[idx] = v
        return _unflatten(root, iter(outs))


def _vector_safe(instr) -> bool:
    if not _is_scalar_shape(instr.shape):
        return False
    if instr.opcode in VECTOR_SAFE:
        return True
    return instr.family in VECTOR_SAFE_FAMILIES


def _as_list(value) -> list:
    return list(value) if isinstance(value, tuple) else [value]


def _broadcast_leaves(value, batch):
    if isinstance(value, tuple):
        return tuple(_broadcast_leaves(v, batch) for v in value)
    if isinstance(value, np.ndarray) and value.shape != tuple(batch):
        return np.ascontiguousarray(np.broadcast_to(value, batch))
    return value


def _flatten(value) -> list:
    if isinstance(value, tuple):
        out = []
        for v in value:
            out.extend(_flatten(v))
        return out
    return [value]


def _unflatten(shape: Shape, it):
    if shape.is_tuple:
        return tuple(_unflatten(s, it) for s in shape.tuple_shapes)
    return next(it)


def check_supported(module) -> None:
    """Refuse, before anything runs, a module the interpreter cannot execute.

    Finds opcodes without a rule, custom-call targets nobody registered and constants
    whose data was elided in the dump; raises UnsupportedError naming the instruction.
    """
    from ..semantics.custom_calls import CUSTOM_CALLS, why_unregistered
    problems = []
    for instr in module.all_instructions():
        if instr.opcode not in EVAL_RULES:
            reason = UNSUPPORTED.get(instr.opcode, "no interpreter rule is registered")
            problems.append(f"{describe(instr)}: opcode {instr.opcode}: {reason}")
        elif instr.opcode == "custom-call":
            if instr.attrs.get("custom_call_target") not in CUSTOM_CALLS:
                problems.append(f"{describe(instr)}: {why_unregistered(instr)}")
        elif instr.opcode == "constant":
            try:
                constant_literal(instr)
            except UnsupportedError as e:
                problems.append(str(e))
    if problems:
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        raise UnsupportedError("the interpreter cannot run this module:\n  "
                               + "\n  ".join(problems[:10]) + more)
