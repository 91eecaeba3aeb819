"""Loops by induction: what lets the check trace a few iterations of a loop instead of all.

A while loop's body whose communication cannot depend on the iteration -- it holds no
communicating while or conditional (the only places where a folded value changes which
events a device issues; groups and peers are fixed per instruction and device) -- issues
the same events every iteration.  Tracing it `INDUCTION_ITERATIONS` times then covers
every trip count n >= that bound: iteration 1 (the entry, which may consume an async start
or channel end from before the loop), iteration 2 (the transition from one iteration to
the next, which consumes what iteration 1 left pending) and iteration 3, which stands for
all later ones ("from iteration 3 of while.2"); fewer iterations are traced as they are.
check.py only accepts such a shortened trace when every device shortened the same loops
with the same trip counts (else it unrolls in full): then all devices repeat the same
per-iteration sequences the same number of times, and the matching and the joint
simulation from one iteration boundary to the next are the same for every later
iteration (docs/ARCHITECTURE.md argues it in full).  A communicating while inside the body
(a scan inside a fori_loop) is such a decision too when its own body decides nothing: its
events follow from its trip count, which its control slice's initial values decide.

The trip count itself must then be known without unrolling.  `control_slice` finds the
loop-state elements the condition reads, closed under what the body computes them from;
when that slice reads nothing but itself and constants (no replica-id, partition-id,
collective or data), the trip count is a function of the slice's initial value:
`closed_form_trip_count` computes it for a counter stepping by a constant against a bound,
and a slice made of all-reduce results (the same on every member) gives the same trip
count on every device whose initial slice is the same, whatever its value.
"""

from __future__ import annotations

import math

import numpy as np

from xladist.hlo.ir import Computation, Instruction

from ..schedule import communicates, computation_communicates
from .fold import FOLD_RULES, MAX_FOLD_ELEMENTS, key_part

__all__ = ["INDUCTION_ITERATIONS", "body_period", "closed_form_trip_count", "control_slice",
           "kept", "most_trips", "slice_key"]

# Iterations of an iteration-independent loop the check traces: entry, transition, the rest.
INDUCTION_ITERATIONS = 3

# Opcodes a control slice may compute with: pure folds of their operands (no device ids,
# no data sources, no nested control whose cost the analysis would have to bound).
_PURE = frozenset(FOLD_RULES) - {"replica-id", "partition-id", "parameter", "while",
                                 "conditional", "call", "fusion", "tuple",
                                 "get-tuple-element"}


def _pure_fusion(i: Instruction) -> bool:
    """A fusion computing only with pure ops of its operands (XLA:CPU wraps a loop's scalar
    compare and counter add in such kLoop fusions: `wrapped_compare`, `wrapped_add`)."""
    if i.opcode != "fusion":
        return False
    comp = i.attrs.get("calls")
    return comp is not None and all(x.opcode in _PURE or x.opcode == "parameter"
                                    for x in comp.instructions)


class _Wrapped:
    """The one op a fusion wraps, seen from outside: its opcode and attributes, with every
    operand that is a fusion parameter replaced by the fusion's operand (constants stay)."""

    __slots__ = ("opcode", "attrs", "operands", "literal", "shape")

    def __init__(self, root: Instruction, operands: list):
        self.opcode, self.attrs, self.literal, self.shape = (root.opcode, root.attrs,
                                                              root.literal, root.shape)
        self.operands = operands


def _view(i: Instruction):
    """`i`, or the single op it wraps when `i` is a fusion of one op over its parameters and
    constants (so `wrapped_compare(gte, gte)` reads as `compare(gte, gte)`)."""
    if not _pure_fusion(i):
        return i
    root = i.attrs["calls"].root
    if root is None or root.opcode in ("parameter", "constant"):
        return i
    operands = []
    for o in root.operands:
        if o.opcode == "parameter" and o.parameter_number is not None \
                and o.parameter_number < len(i.operands):
            operands.append(i.operands[o.parameter_number])
        elif o.opcode == "constant":
            operands.append(o)
        else:
            return i
    return _Wrapped(root, operands)


def _reads(root: Instruction, param: Instruction,
           reduced: list | None = None) -> set[int] | None:
    """The tuple indices of `param` that `root` reads through pure ops; None if it reads
    anything else (the whole parameter, device ids, data).  With `reduced` (a list), an
    all-reduce is read too: its result is the same on every member of its group whatever
    its operand, so the operand is not followed and the all-reduce joins `reduced`."""
    out: set[int] = set()
    seen: set[Instruction] = set()
    stack = [root]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if reduced is not None and i.opcode == "all-reduce" and i.shape.is_array:
            reduced.append(i)
            continue
        if i.shape.is_array and i.shape.size > MAX_FOLD_ELEMENTS:
            return None
        if i.opcode == "get-tuple-element" and i.operands[0] is param:
            out.add(i.attrs["index"])
            continue
        if i.opcode not in _PURE and not _pure_fusion(i):
            return None
        stack.extend(i.operands)
    return out


def control_slice(cond: Computation, body: Computation, reduced: list | None = None,
                  carried: list | None = None) -> tuple[int, ...] | None:
    """The loop-state indices that decide the trip count, closed under the body; None when
    they depend on anything but themselves and constants.  With `reduced` (a list: the
    condition communicates), the condition may also read all-reduces it computes itself,
    which are appended to `reduced` (their operands are not part of the slice: every member
    of the group gets the same result whatever each member contributes).  With `carried` (a
    list), the body may compute slice elements from all-reduces at its top level, appended
    to `carried` (`while pmax(|dx|) > tol` with the pmax computed in the body)."""
    if len(cond.parameters) != 1 or len(body.parameters) != 1:
        return None
    root = body.root
    if root is None or root.opcode != "tuple" or cond.root is None:
        return None
    todo = _reads(cond.root, cond.parameters[0], reduced)
    if todo is None:
        return None
    done: set[int] = set()
    while todo:
        j = todo.pop()
        if j in done:
            continue
        if j >= len(root.operands):
            return None
        done.add(j)
        more = _reads(root.operands[j], body.parameters[0], carried)
        if more is None:
            return None
        todo |= more - done
    return tuple(sorted(done))


def slice_key(state, indices) -> tuple | None:
    """A key equal on two devices exactly when their slices are known equal: bytes of known
    values, keys of all-reduce results; None when some element is data of one device."""
    if not isinstance(state, tuple):
        return None
    parts = tuple(key_part(state[j]) for j in indices)
    return None if any(p is None for p in parts) else parts


def _step(body: Computation, j: int) -> int | None:
    """c when the body computes element j as element j + constant c."""
    elem = _view(body.root.operands[j])
    if elem.opcode not in ("add", "subtract") or len(elem.operands) != 2:
        return None
    a, b = elem.operands
    p = body.parameters[0]

    def is_counter(x):
        return x.opcode == "get-tuple-element" and x.operands[0] is p and x.attrs["index"] == j

    def const(x):
        lit = x.literal if x.opcode == "constant" else None
        return None if lit is None or lit.value is None else np.asarray(lit.value)

    if is_counter(a) and const(b) is not None and const(b).ndim == 0:
        c = int(const(b))
        return c if elem.opcode == "add" else -c
    if elem.opcode == "add" and is_counter(b) and const(a) is not None and const(a).ndim == 0:
        return int(const(a))
    return None


_FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "NE": "NE"}


def closed_form_trip_count(cond: Computation, body: Computation, state) -> int | None:
    """The trip count of `i CMP bound` with i stepping by a constant and the bound a constant
    or an element the body leaves unchanged, from the folded initial `state`; else None."""
    root = _view(cond.root) if cond.root is not None else None
    if root is None or root.opcode != "compare" or not isinstance(state, tuple):
        return None
    p = cond.parameters[0]
    direction = root.attrs.get("direction")
    a, b = root.operands

    def gte_index(x):
        return (x.attrs["index"] if x.opcode == "get-tuple-element" and x.operands[0] is p
                else None)

    def bound_value(x):
        if x.opcode == "constant" and x.literal is not None and x.literal.value is not None:
            return np.asarray(x.literal.value)
        m = gte_index(x)
        if m is None or m >= len(body.root.operands):
            return None
        keep = body.root.operands[m]
        if not (keep.opcode == "get-tuple-element" and keep.operands[0] is body.parameters[0]
                and keep.attrs["index"] == m):
            return None  # the body changes it
        return state[m]

    for counter, other, d in ((a, b, direction), (b, a, _FLIP.get(direction))):
        j = gte_index(counter)
        if j is None or d is None or j >= len(state):
            continue
        step = _step(body, j)
        i0, bound = state[j], bound_value(other)
        if step is None or not all(isinstance(v, np.ndarray) and v.ndim == 0
                                   and v.dtype.kind in "iu" for v in (i0, bound)):
            continue
        return _count(int(i0), int(bound), step, d, i0.dtype)
    return None


def most_trips(cond: Computation, body: Computation, state) -> int | None:
    """At most how many iterations the loop runs whatever the bound it compares with (an
    all-reduce result, say): `i < bound` with i stepping by 1 (`i > bound` by -1) stops
    before i leaves its type, so after at most max - i0 iterations; None when the condition
    bounds nothing so (another form, another step: `i <= bound` wraps at bound = max)."""
    root = _view(cond.root) if cond.root is not None else None
    if root is None or root.opcode != "compare" or not isinstance(state, tuple):
        return None
    p = cond.parameters[0]
    direction = root.attrs.get("direction")
    for counter, d in zip(root.operands, (direction, _FLIP.get(direction))):
        j = (counter.attrs["index"] if counter.opcode == "get-tuple-element"
             and counter.operands[0] is p else None)
        if j is None or d not in ("LT", "GT") or j >= len(state):
            continue
        i0 = state[j]
        if not (isinstance(i0, np.ndarray) and i0.ndim == 0 and i0.dtype.kind in "iu"):
            continue
        info = np.iinfo(i0.dtype)
        if d == "LT" and _step(body, j) == 1:
            return max(info.max - int(i0), 0)
        if d == "GT" and _step(body, j) == -1:
            return max(int(i0) - info.min, 0)
    return None


def _count(i0: int, bound: int, step: int, direction: str, dtype) -> int | None:
    info = np.iinfo(dtype)
    if direction == "LT":
        n = 0 if i0 >= bound else (-(-(bound - i0) // step) if step > 0 else None)
    elif direction == "LE":
        n = 0 if i0 > bound else ((bound - i0) // step + 1 if step > 0 else None)
    elif direction == "GT":
        n = 0 if i0 <= bound else (-(-(i0 - bound) // -step) if step < 0 else None)
    elif direction == "GE":
        n = 0 if i0 < bound else ((i0 - bound) // -step + 1 if step < 0 else None)
    elif direction == "NE":
        n = 0 if i0 == bound else (
            (bound - i0) // step if step and (bound - i0) % step == 0
            and (bound - i0) // step > 0 else None)
    else:
        return None
    # The counter must not wrap around on the way (the folded loop would not stop there).
    if n is None or not info.min <= i0 + n * step <= info.max:
        return None
    return int(n)


# A loop whose decisions repeat with a longer period than this is unrolled instead.
MAX_PERIOD = 16


def body_period(body: Computation, state, needs_values, trips: int | None) -> int | None:
    """The period p of a body whose communicating decisions depend on the iteration only
    through `counter % m` (m constant; the counter steps by a constant and stays >= 0 from
    its folded initial value in `state`, and does not wrap around in the loop's `trips`
    iterations, None: any number): iterations k and k + p issue the same events.
    1 when the body's events cannot depend on the iteration; None when neither is shown.

    `needs_values(comp)` says whether tracing `comp` folds values (trace.py): the decisions
    must sit at the top level of the body, each conditional's branches free of decisions;
    an inner while counts as a decision on its trip count (`_inner_loop_period`).
    """
    if not needs_values(body):
        return 1
    root, param = body.root, body.parameters[0] if body.parameters else None
    if root is None or root.opcode != "tuple" or param is None or not isinstance(state, tuple):
        return None
    period = 1
    for i in body.instructions:
        if not communicates(i):
            continue
        if i.opcode == "while":
            p = _inner_loop_period(i, body, param, state, needs_values, trips)
            if p is None:
                return None  # an inner loop whose events may change: unroll
            period = period * p // math.gcd(period, p)
            if period > MAX_PERIOD:
                return None
            continue
        if i.opcode != "conditional":
            if needs_values_of(i, needs_values):
                return None  # a communicating nested decision: unroll
            continue
        if any(needs_values(c) for c in i.called_computations()):
            return None
        p = _decision_period(i.operands[0], body, param, state, trips)
        if p is None:
            return None
        period = period * p // math.gcd(period, p)
        if period > MAX_PERIOD:
            return None
    return period


def _inner_loop_period(loop: Instruction, body: Computation, param, state,
                       needs_values, trips: int | None) -> int | None:
    """The period in outer iterations of the events of `loop`, a communicating while at the
    top level of the body (a scan inside a fori_loop): its own body decides nothing (the
    same events every inner iteration) and its condition does not communicate, so its
    events follow from its trip count, which its control slice decides alone
    (`control_slice`: the slice reads nothing but itself and constants); the slice's
    initial values, built like a conditional's index from constants, device ids,
    loop-invariant state and `counter % m`, repeat with the period _decision_period finds.
    None otherwise."""
    cond, inner = loop.attrs["condition"], loop.attrs["body"]
    if computation_communicates(cond) or needs_values(inner):
        return None
    indices = control_slice(cond, inner)
    init = loop.operands[0] if loop.operands else None
    if indices is None or init is None or init.opcode != "tuple":
        return None
    period = 1
    for j in indices:
        if j >= len(init.operands):
            return None
        p = _decision_period(init.operands[j], body, param, state, trips)
        if p is None:
            return None
        period = period * p // math.gcd(period, p)
    return period


def _keeps_period(i0: np.ndarray, step: int, modulus: int, trips: int | None) -> bool:
    """Whether `counter % modulus` repeats with its period in every iteration that reads it:
    the counter does not wrap around on the way (it reads i0 + (trips - 1) * step last), or
    it wraps where the period goes on, an unsigned counter whose modulus divides 2^bits. A
    signed counter wrapping to negative values gives negative remainders, another pattern
    (the check traced the iterations before the wrap only)."""
    info = np.iinfo(i0.dtype)
    if i0.dtype.kind == "u" and (1 << info.bits) % modulus == 0:
        return True
    return trips is not None and int(i0) + (max(trips, 1) - 1) * step <= info.max


def needs_values_of(instr: Instruction, needs_values) -> bool:
    return instr.opcode == "while" or any(needs_values(c) for c in instr.called_computations())


def kept(body: Computation, j: int) -> bool:
    """Whether the body hands element j of its state on unchanged."""
    keep = body.root.operands[j] if j < len(body.root.operands) else None
    return (keep is not None and keep.opcode == "get-tuple-element"
            and keep.operands[0] is body.parameters[0] and keep.attrs["index"] == j)


def _decision_period(index: Instruction, body, param, state, trips: int | None) -> int | None:
    """The period in iterations of `index`, built by pure ops from constants, device ids,
    loop-invariant state and `counter % m` only, over `trips` iterations (None: any
    number); None otherwise."""
    period = 1
    seen: set[Instruction] = set()
    stack = [index]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        i = _view(i)
        if i.opcode in ("replica-id", "partition-id", "constant"):
            continue
        if i.opcode == "get-tuple-element" and i.operands[0] is param:
            if not kept(body, i.attrs["index"]):
                return None  # the counter outside a remainder, or state the body changes
            continue
        if i.opcode == "remainder":
            x, m = i.operands
            if (x.opcode == "get-tuple-element" and x.operands[0] is param
                    and m.opcode == "constant" and m.literal is not None
                    and m.literal.value is not None and np.asarray(m.literal.value).ndim == 0):
                j, modulus = x.attrs["index"], abs(int(np.asarray(m.literal.value)))
                step = _step(body, j) if j < len(body.root.operands) else None
                i0 = state[j] if j < len(state) else None
                if (step is None or step <= 0 or modulus == 0 or not isinstance(i0, np.ndarray)
                        or i0.ndim != 0 or i0.dtype.kind not in "iu" or int(i0) < 0):
                    return None  # a counter that may cross zero flips remainder's sign
                if not _keeps_period(i0, step, modulus, trips):
                    return None
                p = modulus // math.gcd(step, modulus)
                period = period * p // math.gcd(period, p)
                continue
        if i.opcode not in _PURE and not _pure_fusion(i):
            return None
        stack.extend(i.operands)
    return period
