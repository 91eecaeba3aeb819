"""The in-place dynamic-update-slice kernel: writes only the update's region.

Used when buffer assignment (inplace.py) lets the result share operand 0's buffer:
the kernel loops over the update (in its physical order, so a contiguous row is one
vectorizable loop) and stores each element at the clamped start plus its index;
everything outside the update already holds operand 0's value.
"""

from __future__ import annotations

from .. import ir_array
from ..elemental import _start_indices
from ..ir_array import Index, layout_of
from ..loops import loop_nest
from .core import begin_function, kernel_kind, make_context


@kernel_kind("update-slice")
def _emit_update_slice(module, spec):
    root = spec.root
    op, upd = root.operands[0], root.operands[1]
    _fn, b, ptrs = begin_function(module, spec.name, len(spec.outputs) + len(spec.inputs))
    ctx, outs = make_context(b, spec, ptrs)
    if upd.shape.size and root.shape.size:
        # Start indices once, before the loop (clamped so the update fits, as XLA does).
        starts = _start_indices(ctx, root, root.operands[2:], Index.scalar(b),
                                upd.shape.dims, op.shape.dims)
        dims, layout = upd.shape.dims, layout_of(upd.shape)
        with loop_nest(b, dims, list(reversed(layout)), name="u") as (multi, lin):
            ctx.push()
            value = ctx.gen(upd, Index(b, dims, multi, lin, layout))
            target = Index(b, root.shape.dims, [b.add(s, m) for s, m in zip(starts, multi)])
            ir_array.write(b, outs[0], root.shape, target, value)
            ctx.pop()
    b.ret_void()
