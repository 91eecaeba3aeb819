"""Float sums, products, maxima and minima in an order xladist states, the same for every
LLVM pipeline, CPU, vector width, thread count and rank.

A reduction whose reducer is one float `add`, `multiply`, `maximum` or `minimum` of its
two parameters (f32 or f64) is accumulated in lanes. Sums and products used to accumulate
into one register with LLVM's `reassoc` flag, so LLVM's loop vectorizer, interleaver and
unroller chose the order of the sum -- and a different pipeline (or CPU) gave different
last bits. Now codegen fixes the order itself and emits plain IEEE arithmetic: a
vectorizer may only widen lane-wise operations, which keeps every bit, so these kernels
take the pipeline without loop unrolling (compile_pool.pipeline_exact).

The order, for each output element (every element computes alone; a split kernel's blocks,
parallel.py, are whole output elements):
  * L lanes, L = the largest power of two <= min(n, LANES), n the trip count of the
    reduction's innermost loop (its innermost reduced dimension, physical for a reduce
    kernel, logical inside a fusion), LANES = LANE_BITS / the element's bits (32 f32, 16 f64);
  * lane k starts at the reducer's identity (-0.0 for add, 1.0 for multiply, -inf for
    maximum, +inf for minimum: combining with it changes no bit, so the lane's first
    element is taken as is) and combines, in order, elements k, k + L, k + 2L, ... of each
    pass of the innermost loop; loops over the other reduced dimensions run around it, the
    lanes carrying on through them;
  * the lanes are combined by halving: lane k with lane k + L/2 for every k < L/2, then
    k with k + L/4, ..., down to one value t;
  * the result is reducer(start, t): start is the init value, or, for a reduction kernel
    that also reduces over outer loops, the partial result already in its output.
L is decided by the shape alone (never by the host: ranks on different CPUs compute the
same bits); on AVX-512 the 32 f32 lanes are two registers, on AVX2 four, on SSE eight.

maximum and minimum give the same bits in any order (semantics/order.py: any NaN gives the
canonical NaN); lanes let the vectorizer widen them, and inside the lanes they take
LLVM's own op, the rule applied once at the end (raw_step).

Sums and products of f16, bf16 and the f8 types take the same order with two changes:
L is the largest power of two <= min(N, LANE_BITS / the type's bits), N the count of all
the reduced elements (64 lanes of bf16), and the elements take the lanes in turn over the
whole loop nest -- element p (row-major over the reduction's loops) into lane p mod L --
so that short innermost loops still fill every lane (for one loop, or passes a multiple of
L long, this is the order above); each step is rounded to the type by the reducer's rule,
and the lanes are combined one scalar pair at a time. One chain in element order stalled:
a bf16 sum of 1000 terms near 1 gave 512 (XLA:CPU, which splits it into blocks of 32,
1024; the interpreter's pairwise tree 1016).

Their reduce kernels take every reduced dimension into the loop nest of the lanes, a
column sum (no reduced minor dimension) too, each output element on its own
(lanes_over_every_dim): a bf16 column sum of 1000 terms near 1 was one chain per output
element, 512 (XLA:CPU 992, exact 993.5).

This is the only place that decides a float reduction's order in compiled code. Every
other reducer (f16/bf16 max and min, variadic reductions, computations of several
ops) stays one sequential chain in element order, and an f32/f64 reduction with no
reduced minor dimension (a column sum) one chain per output element: without fast-math
flags no LLVM pass reorders them either. The last bits of row sums changed once when this
order replaced LLVM's (docs/compile.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from . import intrinsics as intr
from .ir_array import c64
from .loops import for_range
from .types import F32, F64, I64

LANE_BITS = 1024
_IDENTITY = {"add": -0.0, "multiply": 1.0, "maximum": float("-inf"), "minimum": float("inf")}
_TYPES = {"f32": F32, "f64": F64}
_BITS = {"f32": 32, "f64": 64}
# Sums and products of the floats narrower than f32 (held in f32 registers, every step
# rounded to the type by the reducer's own rule): in lanes too, so that no one chain runs
# long -- a single bf16 chain stops growing once the sum's ulp passes the terms (1000
# terms near 1 summed to 512; XLA:CPU splits such a reduction into blocks of 32: 1024).
_NARROW = frozenset({"f16", "bf16", "f8e5m2", "f8e4m3", "f8e4m3fn", "f8e3m4", "f8e4m3fnuz",
                     "f8e5m2fnuz", "f8e4m3b11fnuz"})
_NARROW_OPS = frozenset({"add", "multiply"})


def _lane_type(element_type):
    """(register type, bits per lane) of a lane of this element type."""
    name = element_type.name
    return (F32, element_type.bits) if name in _NARROW else (_TYPES[name], _BITS[name])


def lane_reducer(reducer) -> bool:
    """Whether a reduction with this to_apply computation is accumulated in lanes: one
    float add, multiply, maximum or minimum (f32, f64) of its two parameters, or one add
    or multiply of a narrower float."""
    root = reducer.root
    if not (root.opcode in _IDENTITY and root.shape.is_array
            and len(reducer.parameters) == 2
            and set(root.operands) == set(reducer.parameters)):  # not add(x, x)
        return False
    name = root.shape.element_type.name
    return name in _TYPES or (name in _NARROW and root.opcode in _NARROW_OPS)


def lanes_over_every_dim(reducer) -> bool:
    """Whether a reduce kernel takes every reduced dimension into its lanes, the outer
    ones included (split.reduce_plan), rather than chaining each output element over its
    outer reduced dimensions: sums and products of the floats narrower than f32, where
    one chain stops growing (a bf16 column sum of 1000 terms near 1 gave 512; XLA:CPU
    992, exact 993.5)."""
    return lane_reducer(reducer) and reducer.root.shape.element_type.name in _NARROW


def raw_step(reducer):
    """For a reducer that is one f32/f64 maximum or minimum of its two parameters: LLVM's
    own op (intrinsics.maximum / minimum) for the steps of its chain, else None. It gives
    the rule's bits (scalar_ops._float_max_min) except which NaN, and a NaN stays a NaN
    through every later step: so a chain of raw steps ends in scalar_ops.canonical_nan
    (or one step of the rule) and has the rule's bits. The rule at every step costs a
    compare and select on the chain's critical path: a 2x2 max-pool 1.35x, a row max
    1.15x (and the loop vectorizer does not widen it)."""
    if lane_reducer(reducer) and reducer.root.opcode in _RAW:
        return _RAW[reducer.root.opcode]
    return None


_RAW = {"maximum": intr.maximum, "minimum": intr.minimum}


def lane_count(element_type, n: int) -> int:
    """L for an innermost loop of n elements (the module docstring)."""
    most = LANE_BITS // _lane_type(element_type)[1]
    lanes = 1
    while lanes * 2 <= min(n, most):
        lanes *= 2
    return lanes


def reduce_in_lanes(ctx, reducer, dims, loops, base: list, element: Callable, start):
    """reducer(start, lanes) of one output element (the order above): the elements of the
    loop nest over dimensions `loops` (outermost first, each of size > 1; the last one
    in lanes) of an input of `dims`. base: the input's multi-index, the other dimensions
    set; element(multi) emits the input's value there. Each loop body is a memo scope of
    ctx (ElementalContext)."""
    b = ctx.b
    # (a narrow float: as many lanes as all the loops' elements allow, filled in turn)
    lanes = Lanes(ctx, reducer, dims[loops[-1]], math.prod(dims[d] for d in loops)
                  if lanes_over_every_dim(reducer) else None)
    lanes.reset()

    def walk(level):
        d = loops[level]
        if level < len(loops) - 1:
            with for_range(b, dims[d], name=f"r{d}") as loop:
                base[d] = loop.iv
                ctx.push()
                walk(level + 1)
                ctx.pop()
            return

        def at(j):
            base[d] = j
            ctx.push()
            v = element(list(base))
            ctx.pop()
            return v
        lanes.accumulate(dims[d], at)

    walk(0)
    return lanes.total(start)


class Lanes:
    """The lanes of one reduction inside a kernel's function: a stack vector of L
    elements (LLVM keeps it in registers once the lane loop is vectorized). Emitted as
    reset(), accumulate() for each pass of the innermost loop, total()."""

    def __init__(self, ctx, reducer, n: int, total: int | None = None):
        """n: the innermost loop's trip count. total: all the elements, where they take
        the lanes in turn (element p of the loop nest into lane p mod L, L by `total`),
        else None (each pass of the innermost loop starts again at lane 0)."""
        self.ctx, self.reducer = ctx, reducer
        etype = reducer.root.shape.element_type
        self.count = lane_count(etype, n if total is None else total)
        # Where every pass starts at a multiple of L the two orders are one: no position
        # needs carrying from pass to pass.
        self.pos = None
        if total is not None and total > n and n % self.count:
            self.pos = ctx.alloca(I64, name="lane_pos")
        self.elem = _lane_type(etype)[0]
        # The rule of a narrow float rounds scalars (scalar_ops._finish): combined lane by
        # lane, not on vectors.
        self.scalar_total = etype.name in _NARROW
        self.ptr = ctx.alloca(ir.VectorType(self.elem, self.count), name="lanes")
        with ctx.b.goto_entry_block():
            self.lane_ptr = ctx.b.bitcast(self.ptr, self.elem.as_pointer())
        self.identity = _IDENTITY[reducer.root.opcode]
        self.raw = raw_step(reducer)  # maximum / minimum: total() applies the rule

    def reset(self) -> None:
        vec = ir.Constant(ir.VectorType(self.elem, self.count), [self.identity] * self.count)
        self.ctx.b.store(vec, self.ptr)
        if self.pos is not None:
            self.ctx.b.store(c64(0), self.pos)

    def accumulate(self, n: int, gen: Callable) -> None:
        """Combine elements 0..n-1 of the innermost loop into the lanes; gen(j) emits the
        value of element j (an i64 register) at the builder's position. Whole rounds of
        L elements run in a loop of L lanes (LLVM's vectorizer widens it: no lane depends
        on another); the n mod L left over go to lanes 0.. in a loop of their own. With
        a carried position (total given, passes not a multiple of L), element j goes to
        lane (position + j) mod L."""
        b = self.ctx.b
        if self.pos is not None:
            at = b.load(self.pos, typ=I64)
            with for_range(b, n, name="elt") as elt:
                lane = b.and_(b.add(at, elt.iv), c64(self.count - 1))
                self._combine(lane, gen(elt.iv))
            b.store(b.and_(b.add(at, c64(n)), c64(self.count - 1)), self.pos)
            return
        rounds, left = divmod(n, self.count)
        if rounds:
            with for_range(b, rounds, name="round") as rnd:
                first = b.mul(rnd.iv, c64(self.count))
                with for_range(b, self.count, name="lane") as lane:
                    self._combine(lane.iv, gen(b.add(first, lane.iv)))
        if left:
            with for_range(b, left, name="left") as lane:
                self._combine(lane.iv, gen(b.add(c64(rounds * self.count), lane.iv)))

    def _combine(self, k, value) -> None:
        b = self.ctx.b
        p = b.gep(self.lane_ptr, [k], inbounds=True)
        acc = b.load(p, typ=self.elem)
        b.store(self.raw(b, acc, value) if self.raw else self._apply(acc, value), p)

    def total(self, start):
        """reducer(start, the lanes combined by halving)."""
        b = self.ctx.b
        v = b.load(self.ptr, typ=ir.VectorType(self.elem, self.count))
        width = self.count
        if self.scalar_total:
            vals = [b.extract_element(v, c64(k)) for k in range(width)]
            while width > 1:
                half = width // 2
                vals = [self._apply(vals[k], vals[k + half]) for k in range(half)]
                width = half
            return self._apply(start, vals[0])
        while width > 1:
            half = width // 2
            lo = b.shuffle_vector(v, v, _mask(range(half)))
            hi = b.shuffle_vector(v, v, _mask(range(half, width)))
            v = self._apply(lo, hi)  # lane-wise
            width = half
        return self._apply(start, b.extract_element(v, c64(0)))

    def _apply(self, x, y):
        # The reducer's own rule (scalar_ops), on scalars or lane-wise on vectors.
        return self.ctx.inline(self.reducer, [x, y])[0]


def _mask(lanes) -> ir.Constant:
    lanes = list(lanes)
    return ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), lanes)
