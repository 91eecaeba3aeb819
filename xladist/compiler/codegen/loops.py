"""Counted loops and loop nests in llvmlite IR.

Loops are emitted in the canonical form LLVM's vectorizer expects: a preheader,
a header with the induction phi, a latch comparing against a constant trip count.
"""

from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

from .types import I64


@contextmanager
def for_range(b: ir.IRBuilder, count, name: str = "i", carried=(), start=None):
    """`for i in range(start or 0, count)`; yields (i, phis) where phis carry loop
    values. The body runs at least once: a caller passing a runtime `start` makes
    sure start < count.

    carried: initial values of loop-carried registers; the caller sets the next
    values with `loop.update(values)` before the body ends.
    """
    count = count if isinstance(count, ir.Value) else ir.Constant(I64, count)
    fn = b.function
    pre = b.block
    head = fn.append_basic_block(f"{name}.body")
    done = fn.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    iv = b.phi(I64, name=name)
    iv.add_incoming(ir.Constant(I64, 0) if start is None else start, pre)
    phis = []
    for v in carried:
        p = b.phi(v.type, name=f"{name}.acc")
        p.add_incoming(v, pre)
        phis.append(p)
    loop = _Loop(iv, phis)
    yield loop
    latch = b.block
    nxt = b.add(iv, ir.Constant(I64, 1), name=f"{name}.next")
    iv.add_incoming(nxt, latch)
    for p, v in zip(phis, loop.next_values or phis):
        p.add_incoming(v, latch)
    b.cbranch(b.icmp_unsigned("<", nxt, count), head, done)
    b.position_at_end(done)
    # After the loop, the final carried values are the last `next` values; since
    # the latch is the only predecessor of `done`, they dominate this block.
    loop.results = list(loop.next_values or phis)


class _Loop:
    def __init__(self, iv, phis):
        self.iv = iv
        self.phis = phis
        self.next_values = None
        self.results = None

    def update(self, values):
        self.next_values = list(values)


@contextmanager
def loop_nest(b: ir.IRBuilder, dims, order, name: str = "d", ranged=None):
    """Nested loops over `dims`, outermost first in `order` (a list of dimensions).

    Yields the multi-index (i64 per dimension; size-1 dims are constant 0) and the
    row-major linear position over the visited dims in `order`. ranged: (dim, (begin,
    end)) with i64 values bounding that dimension's loop (a split kernel's block,
    parallel.py), wherever it is in the nest.
    """
    multi = [ir.Constant(I64, 0)] * len(dims)
    linear = ir.Constant(I64, 0)
    stack = []
    try:
        for d in order:
            if dims[d] == 1:
                continue
            bounds = (dims[d], None)
            if ranged is not None and ranged[0] == d:
                bounds = (ranged[1][1], ranged[1][0])
            cm = for_range(b, bounds[0], name=f"{name}{d}", start=bounds[1])
            loop = cm.__enter__()
            stack.append(cm)
            multi[d] = loop.iv
            linear = loop.iv if isinstance(linear, ir.Constant) and linear.constant == 0 \
                else b.add(b.mul(linear, ir.Constant(I64, dims[d])),
                           loop.iv)
        yield multi, linear
    finally:
        for cm in reversed(stack):
            cm.__exit__(None, None, None)


@contextmanager
def if_then(b: ir.IRBuilder, cond, name: str = "if"):
    """Emit the body only when cond holds; the builder continues after it."""
    with b.if_then(cond):
        yield
