"""Kernels that are loop nests rather than one elemental loop: scatter, sort,
select-and-scatter. Each reads its operands through the elemental context, so
producers can still be fused into them.
"""

from __future__ import annotations

from llvmlite import ir

from .. import ir_array
from ..ir_array import Index, c64, layout_of
from ..loops import for_range, loop_nest
from ..types import I1, I64, compute_type, storage_type
from .core import begin_function, kernel_kind, make_context


def _copy_into_outputs(b, ctx, sources, outs, out_shapes):
    """outs[k] = sources[k] element-wise (the base a scatter/sort starts from)."""
    shape = out_shapes[0]
    with loop_nest(b, shape.dims, list(reversed(layout_of(shape))), name="c") as (m, lin):
        idx = Index(b, shape.dims, m, lin, layout_of(shape))
        ctx.push()
        for src, p, s in zip(sources, outs, out_shapes):
            ir_array.write(b, p, s, idx, ctx.gen(src, idx))
        ctx.pop()


def _as_i64(b, v, t):
    if v.type.width < 64:
        return b.sext(v, I64) if t.kind == "sint" else b.zext(v, I64)
    return v


@kernel_kind("scatter")
def _emit_scatter(module, spec):
    root = spec.root
    a = root.attrs
    _fn, b, ptrs = begin_function(module, spec.name, len(spec.outputs) + len(spec.inputs))
    ctx, outs = make_context(b, spec, ptrs)
    n = (len(root.operands) - 1) // 2
    operands, indices, updates = root.operands[:n], root.operands[n], root.operands[n + 1:]
    out_shapes = spec.outputs
    if out_shapes[0].size == 0:
        b.ret_void()
        return
    if not spec.inplace:  # in place, the output already holds the operand
        _copy_into_outputs(b, ctx, operands, outs, out_shapes)
    upd_shape = updates[0].shape
    if upd_shape.size == 0:
        b.ret_void()
        return
    window_dims = tuple(a["update_window_dims"])
    inserted = set(a["inserted_window_dims"])
    to_operand = tuple(a["scatter_dims_to_operand_dims"])
    in_batch = tuple(a.get("input_batching_dims", ()))
    idx_batch = tuple(a.get("scatter_indices_batching_dims", ()))
    ivd = a["index_vector_dim"]
    op_dims = out_shapes[0].dims
    op_rank = len(op_dims)
    scatter_dims = [d for d in range(upd_shape.rank) if d not in window_dims]
    idx_rank = indices.shape.rank
    idx_no_ivd = [d for d in range(idx_rank) if d != ivd]
    op_window = [d for d in range(op_rank) if d not in inserted and d not in in_batch]
    window_size = [1] * op_rank
    for k, od in enumerate(op_window):
        window_size[od] = upd_shape.dims[window_dims[k]]
    reducer = a["to_apply"]
    with loop_nest(b, upd_shape.dims, list(range(upd_shape.rank)), name="u") as (u, _lin):
        ctx.push()
        idx_multi = [None] * idx_rank
        for k, d in enumerate(idx_no_ivd):
            idx_multi[d] = u[scatter_dims[k]]
        start = [c64(0)] * op_rank
        for k, od in enumerate(to_operand):
            m = list(idx_multi)
            if ivd < idx_rank:
                m[ivd] = c64(k)
            v = ctx.gen(indices, Index(b, indices.shape.dims, m))
            start[od] = _as_i64(b, v, indices.shape.element_type)
        for od, idd in zip(in_batch, idx_batch):
            start[od] = idx_multi[idd]
        # The whole window must be in bounds, otherwise the update is skipped.
        ok = ir.Constant(I1, 1)
        for od in range(op_rank):
            limit = op_dims[od] - window_size[od]
            ok = b.and_(ok, b.icmp_unsigned("<=", start[od], c64(limit)))
        target = list(start)
        for k, od in enumerate(op_window):
            target[od] = b.add(start[od], u[window_dims[k]])
        with b.if_then(ok):
            ctx.push()
            t_idx = Index(b, op_dims, target)
            u_idx = Index(b, upd_shape.dims, list(u))
            cur = [ir_array.read(b, p, s, t_idx) for p, s in zip(outs, out_shapes)]
            new = [ctx.gen(upd, u_idx) for upd in updates]
            res = ctx.inline(reducer, cur + new)
            for p, s, v in zip(outs, out_shapes, res):
                ir_array.write(b, p, s, t_idx, v)
            ctx.pop()
        ctx.pop()
    b.ret_void()


def sort_scratch_bytes(root) -> int:
    """Scratch for the sort kernel: two permutation arrays and one row of values."""
    dim = root.attrs["dimensions"][0]
    n = root.operands[0].shape.dims[dim]
    return n * 16 + n * 16


@kernel_kind("sort")
def _emit_sort(module, spec):
    """Stable bottom-up merge sort of a permutation per row, comparator inlined;
    the permutation is then applied to every operand."""
    root = spec.root
    nptr = len(spec.outputs) + len(spec.inputs) + 1
    _fn, b, ptrs = begin_function(module, spec.name, nptr)
    ctx, outs = make_context(b, spec, ptrs[:-1])
    scratch = ptrs[-1]
    out_shapes = spec.outputs
    shape = out_shapes[0]
    dim = root.attrs["dimensions"][0]
    n = shape.dims[dim]
    comparator = root.attrs["to_apply"]
    if shape.size == 0:
        b.ret_void()
        return
    _copy_into_outputs(b, ctx, list(root.operands), outs, out_shapes)
    if n <= 1:
        b.ret_void()
        return
    perm_a = scratch
    perm_b = b.gep(scratch, [c64(n)], source_etype=I64)
    tmp = b.gep(scratch, [c64(2 * n)], source_etype=I64)
    order = [d for d in reversed(layout_of(shape)) if d != dim]
    with loop_nest(b, shape.dims, order, name="row") as (row, _lin):
        ctx.push()

        def at(pos):
            m = list(row)
            m[dim] = pos
            return Index(b, shape.dims, m)

        def load_all(pos):
            return [ir_array.read(b, p, s, at(pos)) for p, s in zip(outs, out_shapes)]

        def less(pa, pb):
            va, vb = load_all(pa), load_all(pb)
            args = []
            for x, y in zip(va, vb):
                args += [x, y]
            return ctx.inline(comparator, args)[0]

        with for_range(b, n, name="init") as loop:
            b.store(loop.iv, b.gep(perm_a, [loop.iv], source_etype=I64))
        src_slot = ctx.alloca(ir.PointerType())
        dst_slot = ctx.alloca(ir.PointerType())
        b.store(perm_a, src_slot)
        b.store(perm_b, dst_slot)
        _merge_passes(b, ctx, n, src_slot, dst_slot, less)
        final = b.load(src_slot, typ=ir.PointerType())
        # Apply the permutation to each operand through the tmp row.
        for p, s in zip(outs, out_shapes):
            st = storage_type(s.element_type)
            with for_range(b, n, name="gather") as loop:
                k = b.load(b.gep(final, [loop.iv], source_etype=I64), typ=I64)
                v = b.load(ir_array.element_pointer(b, p, s, at(k)), typ=st)
                b.store(v, b.gep(tmp, [loop.iv], source_etype=st))
            with for_range(b, n, name="put") as loop:
                v = b.load(b.gep(tmp, [loop.iv], source_etype=st), typ=st)
                b.store(v, ir_array.element_pointer(b, p, s, at(loop.iv)))
        ctx.pop()
    b.ret_void()


def _merge_passes(b, ctx, n, src_slot, dst_slot, less):
    """while width < n: merge runs of `width` from src into dst; swap."""
    fn = b.function
    ptr_t = ir.PointerType()
    width_slot = ctx.alloca(I64)
    b.store(c64(1), width_slot)
    head = fn.append_basic_block("ms.width")
    body = fn.append_basic_block("ms.pass")
    done = fn.append_basic_block("ms.done")
    b.branch(head)
    b.position_at_end(head)
    width = b.load(width_slot, typ=I64)
    b.cbranch(b.icmp_unsigned("<", width, c64(n)), body, done)
    b.position_at_end(body)
    src = b.load(src_slot, typ=ptr_t)
    dst = b.load(dst_slot, typ=ptr_t)
    lo_slot = ctx.alloca(I64)
    b.store(c64(0), lo_slot)
    run_head = fn.append_basic_block("ms.run")
    run_body = fn.append_basic_block("ms.merge")
    run_done = fn.append_basic_block("ms.rundone")
    b.branch(run_head)
    b.position_at_end(run_head)
    lo = b.load(lo_slot, typ=I64)
    b.cbranch(b.icmp_unsigned("<", lo, c64(n)), run_body, run_done)
    b.position_at_end(run_body)

    def umin(x, y):
        return b.select(b.icmp_unsigned("<", x, y), x, y)

    mid = umin(b.add(lo, width), c64(n))
    hi = umin(b.add(lo, b.mul(width, c64(2))), c64(n))
    i_slot, j_slot, k_slot = ctx.alloca(I64), ctx.alloca(I64), ctx.alloca(I64)
    b.store(lo, i_slot)
    b.store(mid, j_slot)
    b.store(lo, k_slot)
    m_head = fn.append_basic_block("ms.k")
    m_body = fn.append_basic_block("ms.kbody")
    m_done = fn.append_basic_block("ms.kdone")
    b.branch(m_head)
    b.position_at_end(m_head)
    k = b.load(k_slot, typ=I64)
    b.cbranch(b.icmp_unsigned("<", k, hi), m_body, m_done)
    b.position_at_end(m_body)
    i = b.load(i_slot, typ=I64)
    j = b.load(j_slot, typ=I64)
    ic = umin(i, b.sub(mid, c64(1)))
    jc = umin(j, b.sub(hi, c64(1)))
    pi = b.load(b.gep(src, [ic], source_etype=I64), typ=I64)
    pj = b.load(b.gep(src, [jc], source_etype=I64), typ=I64)
    ctx.push()
    right_first = less(pj, pi)
    ctx.pop()
    left_empty = b.icmp_unsigned(">=", i, mid)
    right_ok = b.icmp_unsigned("<", j, hi)
    take_right = b.and_(right_ok, b.or_(left_empty, right_first))
    b.store(b.select(take_right, pj, pi), b.gep(dst, [k], source_etype=I64))
    b.store(b.add(j, b.zext(take_right, I64)), j_slot)
    b.store(b.add(i, b.zext(b.not_(take_right), I64)), i_slot)
    b.store(b.add(k, c64(1)), k_slot)
    b.branch(m_head)
    b.position_at_end(m_done)
    b.store(b.add(lo, b.mul(width, c64(2))), lo_slot)
    b.branch(run_head)
    b.position_at_end(run_done)
    b.store(dst, src_slot)
    b.store(src, dst_slot)
    b.store(b.mul(width, c64(2)), width_slot)
    b.branch(head)
    b.position_at_end(done)


@kernel_kind("select-and-scatter")
def _emit_select_and_scatter(module, spec):
    root = spec.root
    _fn, b, ptrs = begin_function(module, spec.name, len(spec.outputs) + len(spec.inputs))
    ctx, outs = make_context(b, spec, ptrs)
    operand, source, init = root.operands
    out_shape = spec.outputs[0]
    out = outs[0]
    select_comp, scatter_comp = root.attrs["select"], root.attrs["scatter"]
    window = root.attrs.get("window")
    rank = out_shape.rank
    from ....hlo.attrs import WindowDim
    wdims = window.dims if window is not None else tuple(WindowDim(1) for _ in range(rank))
    if out_shape.size == 0:
        b.ret_void()
        return
    scalar = Index.scalar(b)
    init_v = ctx.gen(init, scalar)
    with loop_nest(b, out_shape.dims, list(reversed(layout_of(out_shape))), name="c") as (m, l):
        ir_array.write(b, out, out_shape, Index(b, out_shape.dims, m, l, layout_of(out_shape)),
                       init_v)
    if source.shape.size == 0:
        b.ret_void()
        return
    vt = compute_type(operand.shape.element_type)
    sel_val = ctx.alloca(vt)
    sel_pos = [ctx.alloca(I64) for _ in range(rank)]
    have = ctx.alloca(I1)
    src_dims = source.shape.dims
    with loop_nest(b, src_dims, list(range(rank)), name="s") as (s, _l):
        ctx.push()
        b.store(ir.Constant(I1, 0), have)
        loops = [d for d in range(rank) if wdims[d].size > 1]
        wpos = [c64(0)] * rank

        def visit():
            pos = []
            inside = ir.Constant(I1, 1)
            for d in range(rank):
                w = wdims[d]
                p = b.add(b.mul(s[d], c64(w.stride)), b.mul(wpos[d], c64(w.window_dilation)))
                p = b.sub(p, c64(w.padding_low))
                inside = b.and_(inside, b.icmp_unsigned("<", p, c64(out_shape.dims[d])))
                pos.append(p)
            with b.if_then(inside):
                ctx.push()
                v = ctx.gen(operand, Index(b, operand.shape.dims, pos))
                h = b.load(have, typ=I1)
                cur = b.load(sel_val, typ=vt)
                keep = ctx.inline(select_comp, [cur, v])[0]
                take = b.or_(b.not_(h), b.not_(keep))
                with b.if_then(take):
                    b.store(v, sel_val)
                    for slot, p in zip(sel_pos, pos):
                        b.store(p, slot)
                    b.store(ir.Constant(I1, 1), have)
                ctx.pop()

        def nest(level):
            if level == len(loops):
                visit()
                return
            d = loops[level]
            with for_range(b, wdims[d].size, name=f"w{d}") as loop:
                wpos[d] = loop.iv
                nest(level + 1)

        nest(0)
        with b.if_then(b.load(have, typ=I1)):
            ctx.push()
            t = Index(b, out_shape.dims, [b.load(p, typ=I64) for p in sel_pos])
            cur = ir_array.read(b, out, out_shape, t)
            src_v = ctx.gen(source, Index(b, src_dims, list(s)))
            new = ctx.inline(scatter_comp, [cur, src_v])[0]
            ir_array.write(b, out, out_shape, t, new)
            ctx.pop()
        ctx.pop()
    b.ret_void()
