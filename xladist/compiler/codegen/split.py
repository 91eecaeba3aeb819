"""How a kernel splits into blocks for intra-op parallelism (compiler/parallel.py).

A kernel splits along one dimension when each value of it writes its own outputs:
loop kernels along their outermost physical dimension (a non-empty array result);
reductions along their outermost loop when it visits a kept dimension: row reductions,
and reductions whose reduced dims lie inside that kept one (sum over axis 1 of
[B, R, C]), each block initializing and accumulating its own slice of the output,
every element in the same order as unsplit. Column reductions (a reduced dim outside
every kept one, e.g. a sum over axis 0) stay whole: blocks of their kept minor
dimension were measured slower than the whole kernel (4096x4096 f32, load ~8.7,
interleaved: one thread 11.6-12.0 ms whole, 19.0 ms in 1024-column blocks, 24.4 ms in
256-column blocks; two threads 20.2 ms; 2048x8192 in two 4096-column blocks on two
threads 12.8 ms vs 13.7 ms whole): short runs per row defeat the prefetcher, and two
cores share one memory bus. (A narrow float sum reduces each output element on its own,
every reduced dim in lanes -- reduce_plan -- so its outermost loop is a kept dim.) The
split is decided from the KernelSpec alone, so a kernel loaded from the cache splits
exactly as when it was generated.

Blocks hold BLOCK_WORK elements of work (more when that makes over MAX_BLOCKS) and
kernels below their minimum work run whole: constants of the program, never of the machine or the thread count, so the
block boundaries, hence the results, are the same on every host and thread count.
Minimum work, measured on the 2-core development host (1 vs 2 threads, load ~2.3,
benchmarks of tanh(a*b), a+b, a broadcast fill and a row sum):
  MIN_WORK        kernels computing an EXPENSIVE op (transcendentals, division):
                  tanh(a*b) 256 K elements 0.79x the one-thread time, 1 M 0.63x.
  MIN_WORK_CHEAP  memory-bound kernels (adds, copies, fills, sums): at 256 K a+b took
                  1.07x and a row sum 1.51x the one-thread time (the pool's ~15-50 us
                  hand-off is most of their run); at 1 M 0.68x / 0.94x, at 4 M 0.82x /
                  0.59x.
"""

from __future__ import annotations

from typing import NamedTuple

from . import mathlib
from .ir_array import layout_of
from .lanes import lanes_over_every_dim

# Operations costing many times a load/store per element: kernels with one are
# compute-bound and split at a smaller size (also fusion's duplication rule).
EXPENSIVE = set(mathlib.FLOAT_FUNCTIONS) | set(mathlib.FLOAT_BINARY_FUNCTIONS) | {
    "divide", "remainder", "gather", "map"}

BLOCK_WORK = 1 << 16
MIN_WORK = 1 << 18
MIN_WORK_CHEAP = 1 << 20
# Larger kernels get larger blocks, at most this many: each block costs a few us of
# Python (claim, ctypes call). 16 M-element chain on 2 threads, interleaved, load 2.7:
# 16.96 ms in 64 K-element blocks, 14.16 ms in 64 blocks; row sum 4096^2 3.93 / 3.53 ms.
MAX_BLOCKS = 64


class Split(NamedTuple):
    """A kernel's split: `units` values of dimension `dim` (of the output for loop
    kernels, of the input for reductions), its outermost loop, `work` elements per
    unit; `min_work`: below it the kernel runs whole."""
    units: int
    work: int
    min_work: int = MIN_WORK
    dim: int = 0


def blocks_of(split: Split) -> list[tuple[int, int]] | None:
    """Fixed [begin, end) blocks of the split dimension, or None: run whole."""
    units = split.units
    if units < 2 or units * split.work < split.min_work:
        return None
    per = max(-(-BLOCK_WORK // max(1, split.work)), -(-units // MAX_BLOCKS))
    if per >= units:
        return None
    return [(b, min(b + per, units)) for b in range(0, units, per)]


def split_of(spec) -> Split | None:
    """The split of a splittable kernel, or None. Decided from the spec alone, so a
    cached kernel's thunk knows it too."""
    if spec.inplace or not spec.outputs or not spec.outputs[0].is_array:
        return None
    min_work = MIN_WORK if any(i.opcode in EXPENSIVE for i in spec.fused) \
        else MIN_WORK_CHEAP
    if spec.kind == "loop":
        shape = spec.outputs[0]
        order = [d for d in reversed(layout_of(shape)) if shape.dims[d] > 1]
        if not order or shape.size == 0:
            return None
        units = shape.dims[order[0]]
        return Split(units, shape.size // units, min_work, order[0])
    if spec.kind == "reduce":
        plan = reduce_plan(spec.root)
        if plan is None:
            return None
        _trailing, outer, _init_pass = plan
        in_shape = spec.root.operands[0].shape
        outer = [d for d in outer if in_shape.dims[d] > 1]
        if not outer or outer[0] in spec.root.attrs["dimensions"]:
            return None  # nothing kept outside, or a column reduction (docstring)
        units = in_shape.dims[outer[0]]
        return Split(units, in_shape.size // units, min_work, outer[0])
    return None


def reduce_plan(root):
    """(trailing, outer, init_pass) of a reduce kernel, None when it reduces nothing
    (an empty input): trailing reduced dims accumulate in registers (in lanes.py's
    lanes where the reducer takes them; for a narrow float sum, lanes_over_every_dim,
    every reduced dim); outer are the other dims, major to minor; init_pass: some outer
    dim is reduced, so the output is initialized first and accumulated into."""
    in_shape = root.operands[0].shape
    in_dims = in_shape.dims
    red = set(root.attrs["dimensions"])
    if any(in_dims[d] == 0 for d in red) or in_shape.size == 0:
        return None
    phys = list(reversed(layout_of(in_shape)))  # major to minor
    if len(root.operands) == 2 and lanes_over_every_dim(root.attrs["to_apply"]):
        # (a narrow float sum: every reduced dim in the lanes, none chained outside)
        trailing = [d for d in phys if d in red and in_dims[d] > 1]
        return trailing, [d for d in phys if d not in trailing], False
    trailing = []
    for d in reversed(phys):
        if d in red:
            trailing.insert(0, d)
        else:
            break
    trailing = [d for d in trailing if in_dims[d] > 1] if any(
        in_dims[d] > 1 for d in trailing) else []
    outer = [d for d in phys if d not in trailing]
    init_pass = any(d in red and in_dims[d] > 1 for d in outer)
    return trailing, outer, init_pass
