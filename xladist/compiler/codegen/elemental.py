"""The elemental emitter: EMIT_RULES[opcode](ctx, instr, index) -> register value.

Each rule produces the value of `instr` at one output `Index` by asking the
context for its operands at derived indices (XLA's ElementalIrEmitter). Fused
kernels compose these generators inside one loop; nothing is materialized
between fused instructions. Scalar computations (reducers, comparators, map)
are inlined through the same rules with their parameters bound to registers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir

from ...errors import UnsupportedError
from ...hlo.ir import Computation, Instruction
from ...semantics.values import constant_literal
from . import ir_array
from .ir_array import Index, c64, layout_of
from .lanes import lane_reducer, raw_step, reduce_in_lanes
from .loops import for_range
from .lowbits import SMALL_FLOATS
from .scalar_ops import SCALAR_RULES, bitcast_value, canonical_nan
from .types import (
    I1,
    I64,
    compute_type,
    constant,
    is_narrow_float,
    is_sub_byte_int,
    round_to_storage,
    wrap_to_type,
)

EMIT_RULES: dict[str, Callable] = {}


def register(*opcodes):
    def wrap(fn):
        for op in opcodes:
            if op in EMIT_RULES:
                raise RuntimeError(f"emit rule for {op!r} registered twice")
            EMIT_RULES[op] = fn
        return fn
    return wrap


class ElementalContext:
    """Generates values of instructions at indices inside one LLVM function.

    inputs: instruction -> ("buffer", ptr) to read from memory, or ("value", reg)
    for scalar-computation parameters. Every other instruction reached is
    emitted through EMIT_RULES. Values are memoized per (instruction, index)
    in scopes; a branch pushes a scope so values never leak out of the block
    that defines them.
    """

    def __init__(self, builder: ir.IRBuilder, inputs: dict, entry_builder=None):
        self.b = builder
        self.inputs = inputs
        self.scopes: list[dict] = [{}]
        # instruction -> fn(ctx, instr, index) replacing its rule (kernels/core.py's row
        # cache: a value computed in one loop and read back in another).
        self.overrides: dict[Instruction, Callable] = {}

    # ---- generation ------------------------------------------------------
    def gen(self, instr: Instruction, index: Index):
        key = (instr, _index_key(index))
        for scope in reversed(self.scopes):
            hit = scope.get(key)
            if hit is not None:
                return hit[0]
        src = self.inputs.get(instr)
        if src is not None:
            kind, what = src
            if kind == "value":
                v = what
            else:
                v = ir_array.read(self.b, what, instr.shape, index)
        elif instr.shape.is_array and instr.shape.size == 0:
            # An element of an empty array: only code that never runs asks for one (a
            # pad's or concatenate's branch into an empty operand); its rule may not know
            # how to index nothing (a concatenate of empty operands only).
            v = constant(instr.shape.element_type, 0)
        else:
            rule = self.overrides.get(instr) or EMIT_RULES.get(instr.opcode)
            if rule is None:
                raise UnsupportedError(
                    f"instruction `{instr.name}` ({instr.opcode}) has no elemental emitter "
                    "in the cpu backend")
            v = rule(self, instr, index)
        self.scopes[-1][key] = (v, index)
        return v

    def push(self):
        self.scopes.append({})

    def pop(self):
        self.scopes.pop()

    def alloca(self, typ, name=""):
        with self.b.goto_entry_block():
            return self.b.alloca(typ, name=name)

    def branch_value(self, cond, then_fn, else_fn, typ):
        """if cond: then_fn() else else_fn(), merged by a phi."""
        b = self.b
        with b.if_else(cond) as (then, other):
            with then:
                self.push()
                tv = then_fn()
                tb = b.block
                self.pop()
            with other:
                self.push()
                ev = else_fn()
                eb = b.block
                self.pop()
        phi = b.phi(typ)
        phi.add_incoming(tv, tb)
        phi.add_incoming(ev, eb)
        return phi

    def step(self, reducer: Computation, args: list) -> list:
        """One step of a reduction's chain: the reducer inlined, or its raw LLVM op
        (lanes.raw_step), whose chain ends in settle()."""
        raw = raw_step(reducer)
        return [raw(self.b, *args)] if raw else self.inline(reducer, args)

    def settle(self, reducer: Computation, values: list) -> list:
        """The end of a chain of step()s: the reducer's rule for which NaN."""
        if raw_step(reducer) is None:
            return values
        return [canonical_nan(v, self.b) for v in values]

    def inline(self, comp: Computation, args: list) -> list:
        """Values of comp's root (flattened if a tuple) with its parameters = args."""
        inputs = {p: ("value", a) for p, a in zip(comp.parameters, args)}
        sub = ElementalContext(self.b, inputs)
        root = comp.root
        idx = Index.scalar(self.b)
        if root.opcode == "tuple":
            return [sub.gen(op, idx) for op in root.operands]
        return [sub.gen(root, idx)]


def _index_key(index: Index):
    """Memo key naming *which* element: the identities of the index registers.
    Two Index objects built from the same loop variables hit the same entry, so
    values generated outside an inner loop are reused inside it (hoisting)."""
    if index._multi is not None:
        return tuple(map(id, index._multi))
    return ("linear", id(index.linear), index.dims, index.layout)


def _scalar_index(index: Index) -> Index:
    return index.derive((), [])


def _index_values(ctx, operands, index):
    return [ctx.gen(op, index) for op in operands]


# ---- element-wise families ----------------------------------------------------

def _elementwise(ctx, instr, index):
    values = _index_values(ctx, instr.operands, index)
    b = ctx.b
    v = SCALAR_RULES[instr.opcode](b, instr, values)
    t = instr.shape.element_type if instr.shape.is_array else None
    if t is not None and (is_sub_byte_int(t) or t.name in SMALL_FLOATS) \
            and not _moves_unchanged(instr):
        # Every result of an 8/4-bit float or sub-byte integer type is brought back
        # into the type (rounding is idempotent, so rules that already did cost only
        # time), so -0, overflow and wrap-around match the interpreter mid-fusion.
        v = wrap_to_type(b, t, v)
    return v


register(*SCALAR_RULES)(_elementwise)


def _moves_unchanged(instr) -> bool:
    """copy, select, bitcast-convert and convert to the same type pass values through as
    the interpreter passes bytes (NaN payloads included), so they are not rounded again."""
    return instr.opcode in ("copy", "select", "bitcast-convert") or (
        instr.opcode == "convert" and instr.operands[0].shape.element_type
        == instr.shape.element_type)


@register("constant")
def _constant(ctx, instr, index):
    value = np.asarray(constant_literal(instr).value)
    t = instr.shape.element_type
    if value.size == 1:
        return constant(t, value.reshape(-1)[0])
    gv = _constant_global(ctx.b.module, instr, value)
    return ir_array.read(ctx.b, gv, instr.shape, index)


def _constant_global(module, instr, value):
    """A module-level constant array holding the literal in its physical layout."""
    name = f"const.{instr.parent.name if instr.parent else ''}.{instr.name}"
    gv = module.globals.get(name)
    if gv is not None:
        return gv
    from .constants import physical_bytes
    data = physical_bytes(instr.shape, value)
    arr_t = ir.ArrayType(ir.IntType(8), len(data))
    gv = ir.GlobalVariable(module, arr_t, name=name)
    gv.initializer = ir.Constant(arr_t, bytearray(data))
    gv.global_constant = True
    gv.linkage = "private"
    gv.align = 64
    return gv


@register("iota")
def _iota(ctx, instr, index):
    i = index.multi[instr.attrs["iota_dimension"]]
    t = instr.shape.element_type
    ct = compute_type(t)
    if t.is_float:
        v = ctx.b.uitofp(i, ct)
        return round_to_storage(ctx.b, t, v) if is_narrow_float(t) else v
    if t.is_complex:
        from ...hlo.shape import PRIMITIVE_TYPES
        from .scalar_ops import convert_value as cv
        return cv(ctx.b, PRIMITIVE_TYPES["s64"], t, i)
    if t.name == "pred":
        return ctx.b.icmp_unsigned("!=", i, c64(0))
    v = ctx.b.trunc(i, ct) if ct.width < 64 else i
    return wrap_to_type(ctx.b, t, v) if is_sub_byte_int(t) else v


@register("broadcast")
def _broadcast(ctx, instr, index):
    op = instr.operands[0]
    if op.shape.size == 1 and op.shape.rank == 0:
        return ctx.gen(op, _scalar_index(index))
    dims = instr.attrs["dimensions"]
    if op.shape.dims == instr.shape.dims and tuple(dims) == tuple(range(instr.shape.rank)):
        return ctx.gen(op, index)
    multi = index.multi
    return ctx.gen(op, index.derive(op.shape.dims, [multi[d] for d in dims]))


def _row_major(shape_dims):
    return tuple(range(len(shape_dims) - 1, -1, -1))


@register("reshape")
def _reshape(ctx, instr, index):
    op = instr.operands[0]
    out, src = instr.shape, op.shape
    if out.dims == src.dims:
        return ctx.gen(op, index)
    if src.size == 1:
        return ctx.gen(op, index.derive(src.dims, [c64(0)] * src.rank))
    # Reshape is defined on row-major element order.
    rm_out = _row_major(out.dims)
    lin = index.linear if (index.linear is not None and index.dims == out.dims
                           and (out.rank <= 1 or index.layout == rm_out)) else None
    if lin is None:
        lin = ir_array.row_major_linear(ctx.b, index.multi, out.dims)
    return ctx.gen(op, index.with_linear(src.dims, lin, _row_major(src.dims)))


@register("bitcast")
def _bitcast(ctx, instr, index):
    op = instr.operands[0]
    out, src = instr.shape, op.shape
    if out.element_type.bits != src.element_type.bits:
        raise UnsupportedError(f"bitcast `{instr.name}` changes the element width "
                               f"({src} -> {out}); not compiled")
    # A bitcast keeps the physical bytes: same physical position in both.
    lin = ir_array.element_offset(ctx.b, out, index)
    v = ctx.gen(op, index.with_linear(src.dims, lin, layout_of(src)))
    if out.element_type != src.element_type:
        v = bitcast_value(ctx.b, src.element_type, out.element_type, v)
    return v


@register("transpose")
def _transpose(ctx, instr, index):
    op = instr.operands[0]
    perm = instr.attrs["dimensions"]
    out, src = instr.shape, op.shape
    # A transpose whose layouts make it a physical no-op keeps the linear index.
    if index.linear is not None and out.rank > 1 and index.layout == layout_of(out) \
            and tuple(perm[d] for d in layout_of(out)) == layout_of(src):
        return ctx.gen(op, index.with_linear(src.dims, index.linear, layout_of(src)))
    multi = index.multi
    src_multi = [None] * src.rank
    for i, p in enumerate(perm):
        src_multi[p] = multi[i]
    return ctx.gen(op, index.derive(src.dims, src_multi))


@register("opt-barrier", "domain")
def _passthrough(ctx, instr, index):
    return ctx.gen(instr.operands[0], index)


@register("reverse")
def _reverse(ctx, instr, index):
    dims = set(instr.attrs["dimensions"])
    multi = list(index.multi)
    for d in dims:
        multi[d] = ctx.b.sub(c64(instr.shape.dims[d] - 1), multi[d])
    return ctx.gen(instr.operands[0], index.derive(instr.shape.dims, multi))


@register("slice")
def _slice(ctx, instr, index):
    b = ctx.b
    multi = []
    for i, (start, _limit, stride) in zip(index.multi, instr.attrs["slice"].dims):
        v = i if stride == 1 else b.mul(i, c64(stride))
        multi.append(v if start == 0 else b.add(v, c64(start)))
    op = instr.operands[0]
    return ctx.gen(op, index.derive(op.shape.dims, multi))


def _clamp_start(b, v, t, limit: int):
    """Start index value `v` of integer type `t` as i64, clamped to [0, limit] as XLA
    does (dynamic-slice, dynamic-update-slice, gather)."""
    if v.type.width < 64:
        v = b.sext(v, I64) if t.kind == "sint" else b.zext(v, I64)
    if t.kind != "sint":
        # Unsigned: a u64 start >= 2^63 is huge, not negative.
        return b.select(b.icmp_unsigned(">", v, c64(limit)), c64(limit), v)
    lo = b.select(b.icmp_signed("<", v, c64(0)), c64(0), v)
    return b.select(b.icmp_signed(">", lo, c64(limit)), c64(limit), lo)


def _start_index(ctx, op, index, limit):
    """A dynamic start index as i64, clamped to [0, limit] as XLA does."""
    return _clamp_start(ctx.b, ctx.gen(op, _scalar_index(index)), op.shape.element_type,
                        limit)


def _start_indices(ctx, instr, ops, index, sizes, operand_dims):
    """Start indices given one scalar operand per dimension, or (the old form XLA's parser
    still takes) one rank-1 integer array holding them all."""
    limits = [max(n - k, 0) for n, k in zip(operand_dims, sizes)]
    if len(ops) == 1 and ops[0].shape.rank == 1:
        op = ops[0]
        return [_clamp_start(ctx.b, ctx.gen(op, index.derive(op.shape.dims, [c64(d)])),
                             op.shape.element_type, limit)
                for d, limit in enumerate(limits)]
    return [_start_index(ctx, op, index, limit) for op, limit in zip(ops, limits)]


@register("dynamic-slice")
def _dynamic_slice(ctx, instr, index):
    op = instr.operands[0]
    starts = _start_indices(ctx, instr, instr.operands[1:], index, instr.shape.dims,
                            op.shape.dims)
    multi = [ctx.b.add(s, i) for s, i in zip(starts, index.multi)]
    return ctx.gen(op, index.derive(op.shape.dims, multi))


@register("dynamic-update-slice")
def _dynamic_update_slice(ctx, instr, index):
    b = ctx.b
    op, upd = instr.operands[0], instr.operands[1]
    starts = _start_indices(ctx, instr, instr.operands[2:], index, upd.shape.dims,
                            op.shape.dims)
    inside = ir.Constant(I1, 1)
    rel = []
    for d, (s, i) in enumerate(zip(starts, index.multi)):
        r = b.sub(i, s)
        rel.append(r)
        # r unsigned < size also rejects i < s.
        inside = b.and_(inside, b.icmp_unsigned("<", r, c64(upd.shape.dims[d])))
    typ = compute_type(instr.shape.element_type)
    return ctx.branch_value(
        inside,
        lambda: ctx.gen(upd, index.derive(upd.shape.dims, rel)),
        lambda: ctx.gen(op, index),
        typ)


@register("concatenate")
def _concatenate(ctx, instr, index):
    b = ctx.b
    dim = instr.attrs["dimensions"][0]
    typ = compute_type(instr.shape.element_type)
    ops = list(instr.operands)

    def emit_from(k, offset):
        op = ops[k]
        if k == len(ops) - 1:
            multi = list(index.multi)
            multi[dim] = b.sub(multi[dim], c64(offset)) if offset else multi[dim]
            return ctx.gen(op, index.derive(op.shape.dims, multi))
        size = op.shape.dims[dim]

        def here():
            multi = list(index.multi)
            multi[dim] = b.sub(multi[dim], c64(offset)) if offset else multi[dim]
            return ctx.gen(op, index.derive(op.shape.dims, multi))

        cond = b.icmp_unsigned("<", index.multi[dim], c64(offset + size))
        return ctx.branch_value(cond, here, lambda: emit_from(k + 1, offset + size), typ)

    # Zero-sized operands contribute nothing.
    ops = [op for op in ops if op.shape.dims[dim] > 0]
    return emit_from(0, 0)


@register("pad")
def _pad(ctx, instr, index):
    b = ctx.b
    op, pad_value = instr.operands
    inside = ir.Constant(I1, 1)
    src = []
    for d, (lo, _hi, interior) in enumerate(instr.attrs["padding"].dims):
        t = b.sub(index.multi[d], c64(lo))
        if interior:
            step = interior + 1
            q = b.sdiv(t, c64(step))
            ok = b.icmp_signed("==", b.srem(t, c64(step)), c64(0))
            inside = b.and_(inside, ok)
            t = q
        inside = b.and_(inside, b.icmp_unsigned("<", t, c64(op.shape.dims[d])))
        src.append(t)
    typ = compute_type(instr.shape.element_type)
    return ctx.branch_value(
        inside,
        lambda: ctx.gen(op, index.derive(op.shape.dims, src)),
        lambda: ctx.gen(pad_value, _scalar_index(index)),
        typ)


@register("map")
def _map(ctx, instr, index):
    values = _index_values(ctx, instr.operands, index)
    return ctx.inline(instr.attrs["to_apply"], values)[0]


@register("call", "fusion")
def _call(ctx, instr, index):
    """A call inside a scalar computation (reducers, comparators): inline it.
    Calls in computations the compiler runs are inlined earlier (inline.py)."""
    values = _index_values(ctx, instr.operands, index)
    comp = instr.attrs["to_apply" if instr.opcode == "call" else "calls"]
    out = ctx.inline(comp, values)
    return out[0]


@register("get-tuple-element")
def _gte(ctx, instr, index):
    op = instr.operands[0]
    if op.opcode == "tuple":
        return ctx.gen(op.operands[instr.attrs["index"]], index)
    raise UnsupportedError(f"get-tuple-element `{instr.name}` of a non-tuple instruction "
                           "inside a fused kernel")


@register("gather")
def _gather(ctx, instr, index):
    """XLA gather: output = batch dims x offset dims (operation semantics 'Gather')."""
    b = ctx.b
    a = instr.attrs
    operand, indices = instr.operands
    offset_dims = tuple(a["offset_dims"])
    collapsed = set(a["collapsed_slice_dims"])
    start_map = tuple(a["start_index_map"])
    op_batch = tuple(a.get("operand_batching_dims", ()))
    idx_batch = tuple(a.get("start_indices_batching_dims", ()))
    ivd = a["index_vector_dim"]
    sizes = tuple(a["slice_sizes"])
    out_multi = index.multi
    batch_pos = [d for d in range(instr.shape.rank) if d not in offset_dims]
    # Position in start_indices for each batch dim of the output.
    idx_rank = indices.shape.rank
    idx_dims_no_ivd = [d for d in range(idx_rank) if d != ivd]
    idx_multi = [None] * idx_rank
    for k, d in enumerate(idx_dims_no_ivd):
        idx_multi[d] = out_multi[batch_pos[k]]
    # Load each component of the start index vector.
    starts = [c64(0)] * operand.shape.rank
    for k, od in enumerate(start_map):
        m = list(idx_multi)
        if ivd < idx_rank:
            m[ivd] = c64(k)
        v = ctx.gen(indices, index.derive(indices.shape.dims, m))
        starts[od] = _clamp_start(b, v, indices.shape.element_type,
                                  operand.shape.dims[od] - sizes[od])
    # Operand batching dims take the index of the matching start_indices dim.
    for od, idd in zip(op_batch, idx_batch):
        starts[od] = idx_multi[idd]
    # Offset dims of the output walk the non-collapsed, non-batching operand dims.
    window_dims = [d for d in range(operand.shape.rank)
                   if d not in collapsed and d not in op_batch]
    src = list(starts)
    for k, od in enumerate(window_dims):
        src[od] = b.add(starts[od], out_multi[offset_dims[k]])
    return ctx.gen(operand, index.derive(operand.shape.dims, src))


@register("reduce")
def _reduce_elemental(ctx, instr, index):
    """A reduce inside a fusion: loop over the reduced dims for one output element."""
    b = ctx.b
    n = len(instr.operands) // 2
    inputs, inits = instr.operands[:n], instr.operands[n:]
    reducer = instr.attrs["to_apply"]
    red = sorted(instr.attrs["dimensions"])
    in_dims = inputs[0].shape.dims
    kept = [d for d in range(len(in_dims)) if d not in red]
    acc = [ctx.gen(i, _scalar_index(index)) for i in inits]
    out_multi = index.multi
    if any(in_dims[d] == 0 for d in red):
        return acc[0] if n == 1 else acc
    base = [None] * len(in_dims)
    for k, d in enumerate(kept):
        base[d] = out_multi[k]
    loops = [d for d in red if in_dims[d] > 1]
    for d in red:
        if in_dims[d] == 1:
            base[d] = c64(0)

    def nest(level, acc):
        if level == len(loops):
            ctx.push()
            idx = index.derive(in_dims, list(base))
            vals = [ctx.gen(i, idx) for i in inputs]
            out = ctx.step(reducer, list(acc) + vals)
            ctx.pop()
            return out
        d = loops[level]
        with for_range(b, in_dims[d], name=f"r{d}", carried=acc) as loop:
            base[d] = loop.iv
            ctx.push()
            nxt = nest(level + 1, loop.phis)
            ctx.pop()
            loop.update(nxt)
        return loop.results

    if n == 1 and loops and lane_reducer(reducer):  # a float sum or product
        return reduce_in_lanes(ctx, reducer, in_dims, loops, base,
                               lambda m: ctx.gen(inputs[0], index.derive(in_dims, m)), acc[0])
    acc = ctx.settle(reducer, nest(0, acc))
    if n == 1:
        return acc[0]
    raise UnsupportedError(f"variadic reduce `{instr.name}` fused into another kernel")


@register("reduce-window")
def _reduce_window(ctx, instr, index):
    """One output element of reduce-window: loop over the window, skip padding."""
    n = len(instr.operands) // 2
    if n != 1 and instr.shape.is_tuple:
        raise UnsupportedError(f"variadic reduce-window `{instr.name}` is compiled only as "
                               "a kernel root")
    return reduce_window_values(ctx, instr, index)[0]


def reduce_window_values(ctx, instr, index):
    b = ctx.b
    n = len(instr.operands) // 2
    inputs, inits = instr.operands[:n], instr.operands[n:]
    reducer = instr.attrs["to_apply"]
    window = instr.attrs.get("window")
    in_dims = inputs[0].shape.dims
    rank = len(in_dims)
    from ...hlo.attrs import WindowDim
    wdims = window.dims if window is not None else tuple(WindowDim(1) for _ in range(rank))
    acc_slots = []
    for i in inits:
        v = ctx.gen(i, _scalar_index(index))
        slot = ctx.alloca(v.type)
        b.store(v, slot)
        acc_slots.append(slot)
    src = [None] * rank
    loops = [d for d in range(rank) if wdims[d].size > 1]

    def body():
        inside = ir.Constant(I1, 1)
        pos = []
        for d in range(rank):
            w = wdims[d]
            o = index.multi[d]
            p = o if w.stride == 1 else b.mul(o, c64(w.stride))
            if w.size > 1:
                k = src[d]
                if w.window_reversal:
                    k = b.sub(c64(w.size - 1), k)
                p = b.add(p, k if w.window_dilation == 1 else b.mul(k, c64(w.window_dilation)))
            if w.padding_low:
                p = b.sub(p, c64(w.padding_low))
            if w.base_dilation > 1:
                inside = b.and_(inside, b.icmp_signed(
                    "==", b.srem(p, c64(w.base_dilation)), c64(0)))
                p = b.sdiv(p, c64(w.base_dilation))
            inside = b.and_(inside, b.icmp_unsigned("<", p, c64(in_dims[d])))
            pos.append(p)
        with b.if_then(inside):
            ctx.push()
            idx = index.derive(in_dims, pos)
            vals = [ctx.gen(i, idx) for i in inputs]
            accs = [b.load(s) for s in acc_slots]
            out = ctx.step(reducer, accs + vals)
            for s, v in zip(acc_slots, out):
                b.store(v, s)
            ctx.pop()

    def nest(level):
        if level == len(loops):
            body()
            return
        d = loops[level]
        with for_range(b, wdims[d].size, name=f"w{d}") as loop:
            src[d] = loop.iv
            nest(level + 1)

    for d in range(rank):
        if wdims[d].size <= 1:
            src[d] = c64(0)
    nest(0)
    return ctx.settle(reducer, [b.load(s) for s in acc_slots])
