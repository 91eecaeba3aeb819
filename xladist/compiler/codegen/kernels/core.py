"""One LLVM function per fused kernel.

Every kernel has the signature `void name(ptr argv)`: argv holds the addresses of
the kernel's output buffers then its input buffers (KernelSpec.inputs order).
A kernel that runs in blocks (split.py: loop kernels, and reductions whose outer
loops visit only kept dimensions, with enough work) is emitted as
`void name__range(ptr argv, i64 begin, i64 end)` over [begin, end) of its outermost
physical dimension, plus `name(argv)` calling it over the whole dimension; each
value of that dimension writes its own outputs, so blocks may run on any threads
(parallel.py).
KERNEL_EMITTERS maps a kernel kind to the function that emits its loop nest:
  loop    elemental loop over the root's output in physical order (flat when no
          fused instruction needs a multi-dimensional index, so LLVM sees one
          unit-stride loop and vectorizes it)
  reduce  loop nest over the input in physical order with the reducer inlined;
          trailing reduced dims accumulate in registers (float sums and products in
          the lanes of lanes.py, an order codegen fixes), other reduced dims
          accumulate into the output
  scatter, sort, select-and-scatter: special.py; dynamic-update-slice in place: inplace.py
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from llvmlite import ir

from ....hlo.ir import Instruction
from .. import ir_array, mathlib
from ..elemental import ElementalContext, reduce_window_values
from ..ir_array import Index, c64, layout_of
from ..lanes import lane_reducer, reduce_in_lanes
from ..loops import for_range, loop_nest
from ..split import blocks_of, reduce_plan, split_of
from ..types import I64, PTR, VOID


@dataclass
class KernelSpec:
    """What the planner hands to codegen: a root, what is fused, what is read."""

    name: str
    kind: str
    root: Instruction
    fused: list[Instruction]
    inputs: list[Instruction]
    outputs: list = field(default_factory=list)  # leaf shapes of the root, in order
    scratch: int = 0  # bytes of scratch memory passed as the last argv entry
    # The output is operand 0's buffer (compiler/inplace.py): write only the update.
    inplace: bool = False

    @property
    def fused_set(self) -> set:
        return set(self.fused)


KERNEL_EMITTERS: dict[str, Callable] = {}


def kernel_kind(kind: str):
    def wrap(fn):
        KERNEL_EMITTERS[kind] = fn
        return fn
    return wrap


class _Tracker:
    multi_used = False


RANGE_SUFFIX = "__range"


def begin_function(module: ir.Module, name: str, nptrs: int, ranged: bool = False):
    """The kernel's function and its buffer pointers; ranged: `name__range(argv,
    begin, end)`, whose body (emitted after this returns) runs only when begin < end;
    fn.range holds (begin, end)."""
    args = [PTR, I64, I64] if ranged else [PTR]
    fn = ir.Function(module, ir.FunctionType(VOID, args),
                     name=name + RANGE_SUFFIX if ranged else name)
    fn.attributes.add("nounwind")
    argv = fn.args[0]
    argv.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs = []
    for i in range(nptrs):
        p = b.load(b.gep(argv, [c64(i)], inbounds=True, source_etype=PTR), typ=PTR,
                   name=f"buf{i}")
        ptrs.append(p)
    mathlib.begin_fast_function(b)
    fn.range = None
    if ranged:
        fn.range = (fn.args[1], fn.args[2])
        run, empty = fn.append_basic_block("run"), fn.append_basic_block("empty")
        b.cbranch(b.icmp_signed("<", fn.range[0], fn.range[1]), run, empty)
        b.position_at_end(empty)
        b.ret_void()
        b.position_at_end(run)
    return fn, b, ptrs


def _ranged(spec: KernelSpec):
    """split_of(spec) when the kernel runs in blocks, else None: small kernels keep
    their constant trip counts (a whole-range entry would only cost them)."""
    split = split_of(spec)
    return split if split is not None and blocks_of(split) is not None else None


def _whole_range_wrapper(module: ir.Module, name: str, ranged_fn, units: int) -> None:
    """`name(argv)` = `name__range(argv, 0, units)` (LLVM inlines it)."""
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR]), name=name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.call(ranged_fn, [fn.args[0], c64(0), c64(units)])
    b.ret_void()


def make_context(b, spec: KernelSpec, ptrs):
    nout = len(spec.outputs)
    inputs = {instr: ("buffer", p) for instr, p in zip(spec.inputs, ptrs[nout:])}
    return ElementalContext(b, inputs), ptrs[:nout]


def root_values(ctx, root, index):
    if root.opcode == "reduce-window" and root.shape.is_tuple:
        return reduce_window_values(ctx, root, index)
    return [ctx.gen(root, index)]


ACCURATE_SUFFIX = "__accurate"


def emit_kernel(module: ir.Module, spec: KernelSpec) -> None:
    """The kernel's functions; one with sin/cos/tan comes in two versions (mathlib's
    fast_trig): the fast one, under the kernel's own names, reruns its whole range in
    the accurate one when an argument needed Payne-Hanek. Rerunning is safe because a
    kernel's outputs never alias its inputs (buffers.py), except an in-place update's,
    which is emitted accurate only."""
    from . import inplace, special  # noqa: F401  (register their kinds; not at a cache hit)
    emit = KERNEL_EMITTERS[spec.kind]
    if spec.inplace:
        emit(module, spec)
        return
    with mathlib.fast_trig() as trig:
        emit(module, spec)
    flagged = {fn: flag for fn, flag in trig.flagged.items() if fn.module is module}
    if not flagged:
        return
    accurate = replace(spec, name=spec.name + ACCURATE_SUFFIX)
    emit(module, accurate)
    for fn in module.functions:
        if fn.name.startswith(accurate.name):
            # Internal: dropped when unused; noinline: a row cache's stack array must
            # not be doubled in the fast function's frame.
            fn.linkage = "internal"
            fn.attributes.add("noinline")
            fn.attributes.add("cold")
    for fn, flag in flagged.items():
        _rerun_when_flagged(fn, module.get_global(
            accurate.name + fn.name[len(spec.name):]), flag)


def _rerun_when_flagged(fn: ir.Function, accurate: ir.Function, flag) -> None:
    """Before each `ret` of fn: if the flag is set, call `accurate` with fn's args."""
    for block in list(fn.blocks):
        term = block.terminator
        if not isinstance(term, ir.Ret):
            continue
        block.instructions.remove(term)
        block.terminator = None
        b = ir.IRBuilder(block)
        rerun = fn.append_basic_block(block.name + ".accurate")
        done = fn.append_basic_block(block.name + ".done")
        b.cbranch(b.load(flag, typ=flag.allocated_type), rerun, done)
        b.position_at_end(rerun)
        b.call(accurate, list(fn.args))
        b.ret_void()
        b.position_at_end(done)
        b.ret_void()


@kernel_kind("loop")
def _emit_loop(module, spec: KernelSpec):
    shape = spec.outputs[0]
    # Try one flat loop first; if any fused instruction needed a multi-index,
    # nested loops (in physical order) are cheaper than div/mod per element.
    scratch = ir.Module(name="scratch")
    tracker = _Tracker()
    split = _ranged(spec)
    _loop_body(scratch, spec, shape, flat=True, tracker=tracker, split=split)
    fn = _loop_body(module, spec, shape, flat=not tracker.multi_used, tracker=_Tracker(),
                    split=split)
    if split is not None:
        _whole_range_wrapper(module, spec.name, fn, split.units)


def _loop_body(module, spec, shape, flat, tracker, split):
    fn, b, ptrs = begin_function(module, spec.name, len(spec.outputs) + len(spec.inputs),
                                 ranged=split is not None)
    ctx, outs = make_context(b, spec, ptrs)
    dims, layout = shape.dims, layout_of(shape)
    if flat:
        count, start = max(shape.size, 1), None
        if split is not None:  # units of the outermost dim are runs of `per` elements
            per = c64(split.work)
            count, start = b.mul(fn.range[1], per), b.mul(fn.range[0], per)
        with for_range(b, count, name="i", start=start) as loop:
            idx = Index(b, dims, None, loop.iv, layout)
            idx.tracker = tracker
            _write_all(b, ctx, spec, outs, idx)
    else:
        order = [d for d in reversed(layout) if dims[d] > 1]
        inner = order[-1:] if order else []
        block = (order[0], fn.range) if fn.range is not None else None
        outer_range = block if order[:-1] else None
        inner_range = block if not order[:-1] else None
        with loop_nest(b, dims, order[:-1], ranged=outer_range) as (outer, outer_lin):
            _hoist(ctx, spec, outer, inner)
            with loop_nest(b, dims, inner, name="j",
                           ranged=inner_range) as (inner_multi, inner_lin):
                multi = [inner_multi[d] if d in inner else outer[d] for d in range(len(dims))]
                linear = inner_lin if not order[:-1] else (
                    b.add(b.mul(outer_lin, c64(dims[inner[0]])), inner_lin) if inner
                    else outer_lin)
                idx = Index(b, dims, multi, linear, layout)
                idx.tracker = tracker
                _write_all(b, ctx, spec, outs, idx)
    b.ret_void()
    return fn


def _hoist(ctx, spec, outer, inner):
    """Generate, before the innermost loop, the operands of broadcasts that do not
    depend on the innermost dimension and are worth hoisting (fused reductions,
    expensive values); the memo then serves them inside the loop. Expensive values
    that a hoisted row reduction and the inner loop both need go through a row
    cache (_RowCache), so each element computes them once."""
    root = spec.root
    if not inner or not root.shape.is_array:
        return
    d_inner = inner[0]
    fused = spec.fused_set
    caches = []
    for instr in spec.fused:
        if instr.opcode != "broadcast" or instr.shape.dims != root.shape.dims:
            continue
        dims = tuple(instr.attrs["dimensions"])
        op = instr.operands[0]
        if d_inner in dims or op.opcode != "reduce" or op not in fused:
            continue
        for e in _row_cached(spec, op, d_inner):
            if e not in ctx.overrides:
                cache = _RowCache(d_inner, root.shape.dims[d_inner], outer)
                ctx.overrides[e] = cache
                caches.append(cache)
        ctx.gen(op, Index(ctx.b, op.shape.dims, [outer[d] for d in dims]))
        for cache in caches:  # the row is complete: later loops read it back
            cache.filled = cache.ptr is not None


# A row of a cached value lives on the kernel's stack (in L1/L2 while the row is
# processed); longer rows recompute it. Pool threads have the default 8 MiB stacks.
ROW_CACHE_BYTES = 64 << 10


class _RowCache:
    """One expensive fused value (softmax's exp(x - max)) needed by a hoisted row
    reduction and by the row's inner loop. The reduction's loop computes it and
    stores element j of the current row into a stack array; once the reduction is
    done (filled), the inner loop loads element j instead of computing it again.
    Elements of other rows (reached through a broadcast, reverse, ...) are computed
    as before. XLA:CPU gets the same effect with a multi-output fusion."""

    def __init__(self, dim: int, length: int, row: list):
        self.dim, self.length = dim, length
        self.row = row  # the outer loops' index registers: the current row
        self.ptr = None
        self.filled = False

    def __call__(self, ctx, instr, index):
        from ..elemental import EMIT_RULES
        b = ctx.b
        multi = index.multi
        if any(multi[d] is not self.row[d] for d in range(len(multi)) if d != self.dim):
            return EMIT_RULES[instr.opcode](ctx, instr, index)
        j = multi[self.dim]
        if self.filled:
            return b.load(self._at(b, j), typ=self.typ)
        v = EMIT_RULES[instr.opcode](ctx, instr, index)
        if self.ptr is None:
            self.typ = v.type
            with b.goto_entry_block():
                self.ptr = b.alloca(v.type, size=c64(self.length), name="rowcache")
        b.store(v, self._at(b, j))
        return v

    def _at(self, b, j):
        return b.gep(self.ptr, [j], inbounds=True)


def _row_cached(spec: KernelSpec, red: Instruction, d_inner: int) -> list:
    """Expensive instructions computed at the same index both inside the fused row
    reduction `red` (one input, reducing exactly the inner dim of an input shaped
    like the root) and in the root's own element computation: element-wise paths of
    the root's shape from both sides, nothing reached through broadcasts or slices."""
    from ..scalar_ops import SCALAR_RULES
    from ..split import EXPENSIVE
    root = spec.root
    dims = root.shape.dims
    if len(red.operands) != 2 or set(red.attrs["dimensions"]) != {d_inner} \
            or red.operands[0].shape.dims != dims or dims[d_inner] * 8 > ROW_CACHE_BYTES:
        return []
    fused = spec.fused_set

    def same_index_region(start):
        seen, stack = set(), [start]
        while stack:
            i = stack.pop()
            if i in seen or i not in fused or i.opcode not in SCALAR_RULES \
                    or not i.shape.is_array or i.shape.dims != dims:
                continue
            seen.add(i)
            stack.extend(i.operands)
        return seen

    both = same_index_region(root) & same_index_region(red.operands[0])
    return [i for i in spec.fused  # in program order: the same code on every run
            if i in both and i.opcode in EXPENSIVE and i.shape.element_type.is_float
            and not i.shape.element_type.is_complex]


def _write_all(b, ctx, spec, outs, idx):
    values = root_values(ctx, spec.root, idx)
    for p, s, v in zip(outs, spec.outputs, values):
        ir_array.write(b, p, s, idx, v)


@kernel_kind("reduce")
def _emit_reduce(module, spec: KernelSpec):
    root = spec.root
    split = _ranged(spec)
    fn, b, ptrs = begin_function(module, spec.name, len(spec.outputs) + len(spec.inputs),
                                 ranged=split is not None)
    ctx, outs = make_context(b, spec, ptrs)
    n = len(root.operands) // 2
    inputs, inits = root.operands[:n], root.operands[n:]
    reducer = root.attrs["to_apply"]
    red = set(root.attrs["dimensions"])
    in_shape = inputs[0].shape
    in_dims = in_shape.dims
    out_shapes = spec.outputs
    out_dims = out_shapes[0].dims
    kept = [d for d in range(len(in_dims)) if d not in red]
    scalar = Index.scalar(b)
    init_vals = [ctx.gen(i, scalar) for i in inits]

    # A split kernel's block [begin, end) of input dim split.dim: it initializes and
    # accumulates only that slice of the output (out dim kept.index(split.dim)).
    rng = (split.dim, fn.range) if split is not None else None

    def write_init(block=None):
        with loop_nest(b, out_dims, list(reversed(layout_of(out_shapes[0]))),
                       ranged=block) as (m, lin):
            idx = Index(b, out_dims, m, lin, layout_of(out_shapes[0]))
            for p, s, v in zip(outs, out_shapes, init_vals):
                ir_array.write(b, p, s, idx, v)

    plan = reduce_plan(root)
    if plan is None:
        if out_shapes[0].size:
            write_init()
        b.ret_void()
        return
    trailing, outer, init_pass = plan
    in_lanes = bool(trailing) and n == 1 and lane_reducer(reducer)
    if init_pass:
        write_init(None if rng is None else (kept.index(rng[0]), rng[1]))
    with loop_nest(b, in_dims, outer, name="o", ranged=rng) as (multi, _lin):
        out_idx = Index(b, out_dims, [multi[d] for d in kept])
        if init_pass:
            start = [ir_array.read(b, p, s, out_idx) for p, s in zip(outs, out_shapes)]
        else:
            start = init_vals
        base = list(multi)

        def nest(level, acc):
            if level == len(trailing):
                ctx.push()
                idx = Index(b, in_dims, list(base))
                vals = [ctx.gen(i, idx) for i in inputs]
                out = ctx.step(reducer, list(acc) + vals)
                ctx.pop()
                return out
            d = trailing[level]
            with for_range(b, in_dims[d], name=f"r{d}", carried=acc) as loop:
                base[d] = loop.iv
                nxt = nest(level + 1, loop.phis)
                loop.update(nxt)
            return loop.results

        ctx.push()
        if in_lanes:  # a float sum or product: in the order lanes.py states
            final = [reduce_in_lanes(ctx, reducer, in_dims, trailing, base,
                                     lambda m: ctx.gen(inputs[0], Index(b, in_dims, m)),
                                     start[0])]
        else:
            final = ctx.settle(reducer, nest(0, start))
        ctx.pop()
        for p, s, v in zip(outs, out_shapes, final):
            ir_array.write(b, p, s, out_idx, v)
    b.ret_void()
    if split is not None:
        _whole_range_wrapper(module, spec.name, fn, split.units)


def emit_map_kernel(module: ir.Module, name: str, comp) -> None:
    """`void name(ptr argv, i64 n)`: out[i] = comp(a[i], b[i]) over flat arrays.
    Collective reducers use it: the runtime hands it whole buffers to combine."""
    from ..types import load_element, storage_type, store_element
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64]), name=name)
    argv, n = fn.args
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    ptrs = [b.load(b.gep(argv, [c64(i)], source_etype=PTR), typ=PTR) for i in range(3)]
    params = comp.parameters
    t_in = params[0].shape.element_type
    t_out = comp.root.shape.element_type if comp.root.shape.is_array else t_in
    done = fn.append_basic_block("done")
    # Callers combine in place (out = b in MPI user functions, out = a in folds). With out
    # a third pointer, LLVM's vectorizer checks out against a and b at run time and, when
    # they are equal, falls back to its scalar loop (16x slower for a NaN-propagating max);
    # a loop that stores through the very pointer it loads from needs no check.
    same_b = fn.append_basic_block("out_is_b")
    same_a, fresh = fn.append_basic_block("out_is_a"), fn.append_basic_block("out_fresh")
    b.cbranch(b.icmp_signed(">", n, c64(0)), same_b, done)
    for block, test, out in ((same_b, ptrs[2], ptrs[2]), (same_a, ptrs[1], ptrs[1]),
                             (fresh, None, ptrs[0])):
        b.position_at_end(block)
        if test is not None:
            loop_block = fn.append_basic_block(block.name + ".loop")
            b.cbranch(b.icmp_unsigned("==", ptrs[0], test), loop_block,
                      same_a if block is same_b else fresh)
            b.position_at_end(loop_block)
        with for_range(b, n, name="i") as loop:
            vals = [load_element(b, t_in, b.gep(p, [loop.iv],
                                                source_etype=storage_type(t_in)))
                    for p in ptrs[1:]]
            ctx = ElementalContext(b, {})
            r = ctx.inline(comp, vals)[0]
            store_element(b, t_out, r, b.gep(out, [loop.iv],
                                             source_etype=storage_type(t_out)))
        b.branch(done)
    b.position_at_end(done)
    b.ret_void()
