"""How a kernel splits into blocks for intra-op parallelism (compiler/parallel.py).

A kernel splits along its outermost physical dimension when each value of that
dimension writes its own outputs: loop kernels always (a non-empty array result),
reductions when their outer loops visit only kept dimensions (no reduced dim
outside the register-accumulated trailing ones, so no output is accumulated by
two blocks). The split is decided from the KernelSpec alone, so a kernel loaded
from the cache splits exactly as when it was generated.

Blocks hold BLOCK_WORK elements of work and kernels below MIN_WORK run whole:
constants of the program, never of the machine or the thread count, so the block
boundaries, hence the results, are the same on every host and thread count.
MIN_WORK: on the 2-core development host the pool's hand-off costs ~15-50 us per
kernel, which a 256 K-element element-wise kernel (~100-200 us) repays on two
threads and a smaller one does not.
"""

from __future__ import annotations

from .ir_array import layout_of

BLOCK_WORK = 1 << 16
MIN_WORK = 1 << 18


def blocks_of(units: int, work_per_unit: int) -> list[tuple[int, int]] | None:
    """Fixed [begin, end) blocks of the outer dimension, or None: run whole."""
    if units < 2 or units * work_per_unit < MIN_WORK:
        return None
    per = max(1, -(-BLOCK_WORK // max(1, work_per_unit)))
    if per >= units:
        return None
    return [(b, min(b + per, units)) for b in range(0, units, per)]


def split_of(spec) -> tuple[int, int] | None:
    """(units, work per unit) of a splittable kernel's outermost physical dimension,
    or None. Decided from the spec alone, so a cached kernel's thunk knows it too."""
    if spec.inplace or not spec.outputs or not spec.outputs[0].is_array:
        return None
    if spec.kind == "loop":
        shape = spec.outputs[0]
        order = [d for d in reversed(layout_of(shape)) if shape.dims[d] > 1]
        if not order or shape.size == 0:
            return None
        units = shape.dims[order[0]]
        return units, shape.size // units
    if spec.kind == "reduce":
        plan = reduce_plan(spec.root)
        if plan is None:
            return None
        _trailing, outer, init_pass = plan
        in_shape = spec.root.operands[0].shape
        outer = [d for d in outer if in_shape.dims[d] > 1]
        if init_pass or not outer:
            return None
        units = in_shape.dims[outer[0]]
        return units, in_shape.size // units
    return None


def reduce_plan(root):
    """(trailing, outer, init_pass) of a reduce kernel, None when it reduces nothing
    (an empty input): trailing reduced dims accumulate in registers; outer are the
    other dims, major to minor; init_pass: some outer dim is reduced, so the output
    is initialized first and accumulated into."""
    in_shape = root.operands[0].shape
    in_dims = in_shape.dims
    red = set(root.attrs["dimensions"])
    if any(in_dims[d] == 0 for d in red) or in_shape.size == 0:
        return None
    phys = list(reversed(layout_of(in_shape)))  # major to minor
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
