"""Bounded dynamic shapes, run the way XLA's dynamic padder runs them.

`pad_dynamic(module)` rewrites a module whose entry uses bounded dynamic dimensions
(`f32[<=10]`, set-dimension-size, get-dimension-size, dynamic-reshape) into a module with
static shapes only, so every backend runs it unchanged: a dynamic dimension is stored at its
bound, and the pass tracks its size as an s32[] value through the data flow.

- set-dimension-size records the size (clamped to [0, bound]) and passes its operand through;
  get-dimension-size becomes the tracked size (or the static bound).
- Element-wise ops, broadcast, transpose, tuple and get-tuple-element propagate sizes.
- reduce and dot over a dynamic dimension first replace the padded elements by the reducer's
  init value (dot: zero), with a select on an `iota < size` mask: padding never contributes.
- sort over a dynamic dimension sorts an extra s32 key first (0 valid, 1 padding), so the
  valid elements come first, sorted by the original comparator.
- concatenate along a dynamic dimension writes each operand at the running sum of the sizes
  before it (a dynamic-update-slice chain), so the valid elements are packed at the front.
- dynamic-reshape moves the valid elements, in row-major order, to the front of the result's
  row-major valid region (a gather from the flattened operand).
- Entry results: the root becomes `(root, size_0, ..., size_k)`; `DynamicResults.cut`
  slices each flattened result leaf to its dynamic sizes (Executable.__call__ applies it).

- slice and dynamic-slice keep the size of a dimension they take whole; a partial slice
  makes it static. dynamic-update-slice keeps its operand's sizes (a static update).
- reverse reverses the buffer and slices the valid part back to the front.
- reshape: the one result dimension declared dynamic gets count / (other dims), and the
  valid elements move row-major (as dynamic-reshape); pad fills the operand's padding with
  the pad value first, so the high padding follows the valid elements.
- reduce-window and convolution over dynamic dimensions fill the padding with the init
  value (convolution: zero) and count the windows from the size as XLA does (VALID
  windows: padding adds none, observed on XLA:CPU); a dynamic input
  feature dimension of a convolution is contracted like dot's.

- while: the sizes of the dynamic dimensions of the initial state ride along as extra s32
  elements of the loop state; body and condition are padded with them.
- gather: dynamic index batch dimensions and operand dimensions taken whole keep their
  sizes; scatter keeps its operand's sizes and skips the updates of padded index vectors.
- conditional: each branch takes `(operand, its sizes...)` and returns `(result, the size
  of every dimension some branch makes dynamic...)`.

Not handled (UnsupportedError naming the instruction): dynamic entry parameters, dynamic
shapes inside other called computations (call, fusion), a loop body that makes a
dimension dynamic that its initial state has static, and any other opcode whose
operand has a dynamic dimension (scatter update windows, collectives — XLA:CPU
refuses an all-reduce of a dynamic operand too).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedError
from .attrs import Literal
from .ir import Computation, Instruction, Module
from .shape import Shape
from .shape_inference import infer_shape

_S32 = "s32"
_ELEMENTWISE = ("elementwise_unary", "elementwise_binary", "elementwise_ternary", "compare",
                "conversion")
_PASS_THROUGH = ("copy", "map")


@dataclass(frozen=True)
class DynamicResults:
    """How to cut the flattened results of a padded module back to their dynamic sizes.

    `cuts[j][d]` is the index (among the trailing size outputs) of leaf j's dimension d size,
    or None for a static dimension; `num_sizes` trailing outputs hold the sizes.
    """

    cuts: tuple[tuple[int | None, ...], ...]
    num_sizes: int

    def cut(self, leaves: list[np.ndarray]) -> list[np.ndarray]:
        values, sizes = leaves[:-self.num_sizes], leaves[-self.num_sizes:]
        out = []
        for a, cut in zip(values, self.cuts):
            index = tuple(slice(0, int(sizes[k])) if k is not None else slice(None)
                          for k in cut)
            out.append(np.ascontiguousarray(a[index]) if index else a)
        return out


def module_is_dynamic(module: Module) -> bool:
    return any(i.shape.has_dynamic or i.opcode in _DYNAMIC_OPCODES
               for i in module.all_instructions())


_DYNAMIC_OPCODES = ("set-dimension-size", "dynamic-reshape")
# Opcodes that never reach a backend: this pass rewrites them (`xladist ops` shows "yes").
REWRITTEN = frozenset(_DYNAMIC_OPCODES)


def pad_dynamic(module: Module) -> tuple[Module, DynamicResults | None]:
    """A static copy of `module` and the result cutter, or (module, None) when nothing is
    dynamic. The input module is never changed."""
    if not module_is_dynamic(module):
        return module, None
    from .parser import parse_module  # a private copy to rewrite
    copy = parse_module(module.to_text())
    padded: set[Computation] = set()
    results = _Padder(copy, copy.entry, padded).run()
    for comp in copy.computations:
        if comp is not copy.entry and comp not in padded:
            for instr in comp.instructions:
                if instr.shape.has_dynamic or instr.opcode in _DYNAMIC_OPCODES:
                    raise _refuse(instr, "dynamic shapes inside a computation called by "
                                  f"anything but a while loop ({comp.name}) are not "
                                  "supported yet")
    return copy, results


def _refuse(instr: Instruction, why: str) -> UnsupportedError:
    return UnsupportedError(f"instruction {instr.name} ({instr.opcode}): {why}")


def check_entry_parameters(module) -> None:
    """UnsupportedError for a dynamic entry parameter (`f32[<=4]`, `f32[?,4]`): the padder
    takes dynamic sizes from set-dimension-size only. A run checks this before it reads any
    input (whose expected dims a dynamic parameter does not have)."""
    for p in module.entry.parameters:
        if p.shape.has_dynamic:
            raise _refuse(p, _DYNAMIC_ENTRY_PARAMETER)


_DYNAMIC_ENTRY_PARAMETER = ("dynamic entry parameters are not supported; pass the padded array "
                            "and its size and use set-dimension-size")


def _dynamic(sizes) -> bool:
    if isinstance(sizes, list):
        return any(_dynamic(s) for s in sizes)
    return any(s is not None for s in sizes)


class _Padder:
    """Pads one computation. `loop_dims` is set for a while body or condition: the (tuple
    element, dimension) pairs whose sizes ride along as extra s32 elements of the state."""

    def __init__(self, module: Module, comp: Computation, padded: set,
                 loop_dims: list[tuple[int, int]] | None = None,
                 branch_dims: list | None = None):
        self.module = module
        self.comp = comp
        self.padded = padded
        self.loop_dims = loop_dims
        # a conditional branch: the (path, dimension) pairs of its parameter whose sizes come
        # as extra elements, `(param, size...)`; its root is wrapped by the caller
        self.branch_dims = branch_dims
        self.out: list[Instruction] = []
        self.repl: dict[Instruction, Instruction] = {}
        # per instruction: a tuple (one s32[] instruction or None per dimension) for arrays,
        # a list of such structures for tuples
        self.sizes: dict[Instruction, object] = {}
        self.count = 0
        self.consts: dict[tuple, Instruction] = {}

    # ---- building -------------------------------------------------------------------------
    def emit(self, opcode: str, operands, attrs=None, shape: Shape | None = None) -> Instruction:
        attrs = attrs or {}
        shape = infer_shape(opcode, [o.shape for o in operands], attrs, declared=shape)
        self.count += 1
        instr = Instruction(f"dynpad.{self.count}", opcode, shape.with_default_layouts(),
                            operands, attrs)
        instr.parent = self.comp
        self.out.append(instr)
        return instr

    def const(self, etype, value) -> Instruction:
        key = (str(etype), repr(value))
        if key not in self.consts:
            shape = Shape.scalar(etype)
            self.count += 1
            c = Instruction(f"dynpad.{self.count}", "constant", shape,
                            literal=Literal(shape, np.asarray(value, dtype=shape.dtype)))
            c.parent = self.comp
            self.out.append(c)
            self.consts[key] = c
        return self.consts[key]

    def bcast(self, scalar: Instruction, like: Shape) -> Instruction:
        return self.emit("broadcast", [scalar], {"dimensions": ()},
                         Shape.array(scalar.shape.element_type, like.dims))

    def size_of(self, sizes, d: int, bound: int) -> Instruction:
        return sizes[d] if sizes[d] is not None else self.const(_S32, bound)

    def mask(self, shape: Shape, dims: dict[int, Instruction]) -> Instruction:
        """pred[shape]: true where every index along `dims` is below its size."""
        m = None
        for d, size in dims.items():
            iota = self.emit("iota", [], {"iota_dimension": d}, Shape.array(_S32, shape.dims))
            lt = self.emit("compare", [iota, self.bcast(size, shape)], {"direction": "LT"})
            m = lt if m is None else self.emit("and", [m, lt])
        return m

    def fill(self, x: Instruction, dims: dict[int, Instruction], value: Instruction):
        """x with every element outside the valid region along `dims` replaced by value."""
        return self.emit("select", [self.mask(x.shape, dims), x, self.bcast(value, x.shape)])

    # ---- the walk -------------------------------------------------------------------------
    def run(self) -> DynamicResults | None:
        for instr in list(self.comp.instructions):
            if instr.opcode == "parameter" and self.loop_dims is not None:
                self.loop_parameter(instr)
                continue
            if instr.opcode == "parameter" and self.branch_dims is not None:
                self.branch_parameter(instr)
                continue
            if instr.opcode == "parameter" and instr.shape.has_dynamic:
                raise _refuse(instr, _DYNAMIC_ENTRY_PARAMETER)
            ops = [self.repl.get(o, o) for o in instr.operands]
            szs = [self.sizes[o] for o in instr.operands]
            if (instr.opcode in _DYNAMIC_OPCODES or instr.opcode == "get-dimension-size"
                    or any(_dynamic(s) for s in szs) or self.loop_makes_dynamic(instr)):
                new, sizes = self.rewrite(instr, ops, szs)
            else:
                new, sizes = self.keep(instr, ops), _static(instr.shape)
            self.repl[instr] = new
            self.sizes[instr] = sizes  # keyed by the original: `new` may be shared
        root = self.repl.get(self.comp.root, self.comp.root)
        root_sizes = self.sizes[self.comp.root]
        results = None
        if self.loop_dims is not None:
            root = self.loop_root(root, root_sizes)
        elif self.branch_dims is not None:
            self.root_sizes = root_sizes  # the caller wraps the root with the union of sizes
        elif _dynamic(root_sizes):
            extra, cuts = [], []
            for leaf_sizes in _leaves(root_sizes, root.shape):
                cut = []
                for s in leaf_sizes:
                    cut.append(None if s is None else len(extra))
                    if s is not None:
                        extra.append(s)
                cuts.append(tuple(cut))
            root = self.emit("tuple", [root] + extra)
            results = DynamicResults(tuple(cuts), len(extra))
        self.comp.instructions = self.out
        self.comp.root = root
        self.module.entry_computation_layout = None
        return results

    # ---- while loops: sizes ride along in the loop state ----------------------------------
    def loop_parameter(self, param: Instruction) -> None:
        elems = param.shape.tuple_shapes
        param.shape = Shape.tuple_of([e.static() for e in elems]
                                     + [Shape.scalar(_S32)] * len(self.loop_dims))
        self.out.append(param)
        sizes = [list(_static(e)) for e in elems]
        for j, (e, d) in enumerate(self.loop_dims):
            sizes[e][d] = self.emit("get-tuple-element", [param], {"index": len(elems) + j})
        self.repl[param] = param
        self.sizes[param] = [tuple(s) for s in sizes]

    def loop_root(self, root: Instruction, root_sizes) -> Instruction:
        n = len(root_sizes)
        tracked = set(self.loop_dims)
        for e, es in enumerate(root_sizes):
            for d, s in enumerate(es if isinstance(es, tuple) else ()):
                if s is not None and (e, d) not in tracked:
                    raise _refuse(self.comp.root, f"this while loop computation makes "
                                  f"dimension {d} of state element {e} dynamic, which the "
                                  "loop's initial value does not have; not supported yet")
        if root.shape.is_array:  # the condition: a pred, sizes are not passed on
            return root
        parts = [self.emit("get-tuple-element", [root], {"index": i}) for i in range(n)]
        sizes = [self.size_of(root_sizes[e], d, root.shape.tuple_shapes[e].dims[d])
                 for e, d in self.loop_dims]
        return self.emit("tuple", parts + sizes)

    # ---- conditionals: sizes travel as extra tuple elements of operands and results -------
    def branch_parameter(self, param: Instruction) -> None:
        original = param.shape.static()
        param.shape = Shape.tuple_of([original] + [Shape.scalar(_S32)] * len(self.branch_dims))
        self.out.append(param)
        value = self.emit("get-tuple-element", [param], {"index": 0})
        sizes = _static(original)
        for j, (path, d) in enumerate(self.branch_dims):
            size = self.emit("get-tuple-element", [param], {"index": 1 + j})
            sizes = _set_size(sizes, path, d, size)
        self.repl[param] = value
        self.sizes[param] = sizes

    def conditional(self, instr, ops, szs):
        comps = instr.called_computations()
        results = []
        for k, comp in enumerate(comps):
            if comp in self.padded:
                raise _refuse(instr, f"computation {comp.name} is used by several "
                              "conditionals or loops with dynamic shapes; not supported yet")
            self.padded.add(comp)
            dims = [(path, d) for path, d, _ in _paths(szs[k + 1])]
            padder = _Padder(self.module, comp, self.padded, branch_dims=dims)
            padder.run()
            results.append(padder)
            sizes = [s for _, _, s in _paths(szs[k + 1])]
            ops[k + 1] = self.emit("tuple", [ops[k + 1]] + sizes)
        out_dims = sorted({(path, d) for p in results for path, d, _ in _paths(p.root_sizes)})
        result_shape = instr.shape.static()
        for p in results:  # every branch returns (value, the size of each result dimension)
            comp = p.comp
            found = {(path, d): s for path, d, s in _paths(p.root_sizes)}
            p.out = comp.instructions
            sizes = [found.get((path, d)) or p.const(_S32, _dim(result_shape, path, d))
                     for path, d in out_dims]
            comp.root = p.emit("tuple", [comp.root] + sizes)
            comp.instructions = p.out
        shape = Shape.tuple_of([result_shape] + [Shape.scalar(_S32)] * len(out_dims))
        new = self.emit("conditional", ops, dict(instr.attrs), shape)
        value = self.emit("get-tuple-element", [new], {"index": 0})
        sizes = _static(result_shape)
        for j, (path, d) in enumerate(out_dims):
            sizes = _set_size(sizes, path, d,
                              self.emit("get-tuple-element", [new], {"index": 1 + j}))
        return value, sizes

    def while_(self, instr, ops, szs):
        init_sizes = szs[0]
        loop_dims = []
        for e, es in enumerate(init_sizes):
            if isinstance(es, list):
                if _dynamic(es):
                    raise _refuse(instr, "a nested tuple with dynamic dimensions in a while "
                                  "loop state is not supported yet")
                continue
            loop_dims += [(e, d) for d, s in enumerate(es) if s is not None]
        body, cond = instr.attrs["body"], instr.attrs["condition"]
        for comp in (body, cond):
            if comp in self.padded:
                raise _refuse(instr, f"computation {comp.name} is used by several while "
                              "loops with dynamic shapes; not supported yet")
            self.padded.add(comp)
            _Padder(self.module, comp, self.padded, loop_dims).run()
        init = ops[0]
        n = len(init.shape.tuple_shapes)
        parts = [self.emit("get-tuple-element", [init], {"index": i}) for i in range(n)]
        sizes = [self.size_of(init_sizes[e], d, init.shape.tuple_shapes[e].dims[d])
                 for e, d in loop_dims]
        new_init = self.emit("tuple", parts + sizes)
        loop = self.emit("while", [new_init], dict(instr.attrs), body.root.shape)
        outs = [self.emit("get-tuple-element", [loop], {"index": i}) for i in range(n)]
        out_sizes = [list(s) if isinstance(s, tuple) else s for s in init_sizes]
        for j, (e, d) in enumerate(loop_dims):
            out_sizes[e][d] = self.emit("get-tuple-element", [loop], {"index": n + j})
        return self.emit("tuple", outs), [tuple(s) if isinstance(init_sizes[e], tuple) else s
                                          for e, s in enumerate(out_sizes)]

    def loop_makes_dynamic(self, instr: Instruction) -> bool:
        """A while or conditional whose computations use dynamic shapes themselves."""
        return instr.opcode in ("while", "conditional") and any(
            i.shape.has_dynamic or i.opcode in _DYNAMIC_OPCODES
            for c in instr.called_computations() for i in c.instructions)

    def keep(self, instr: Instruction, ops) -> Instruction:
        instr.operands = ops
        instr.shape = instr.shape.static()
        self.out.append(instr)
        return instr

    def rewrite(self, instr: Instruction, ops, szs):
        op = instr.opcode
        fam = instr.family
        if op == "set-dimension-size":
            (d,) = instr.attrs["dimensions"]
            bound = ops[0].shape.dims[d]
            size = self.emit("clamp", [self.const(_S32, 0), ops[1], self.const(_S32, bound)])
            sizes = list(szs[0])
            sizes[d] = size
            return ops[0], tuple(sizes)
        if op == "get-dimension-size":
            (d,) = instr.attrs["dimensions"]
            return self.size_of(szs[0], d, ops[0].shape.dims[d]), ()
        if op == "dynamic-reshape":
            return self.dynamic_reshape(instr, ops, szs)
        if fam in _ELEMENTWISE or op in _PASS_THROUGH:
            rank = instr.shape.rank
            sizes = [None] * rank
            for s in szs:
                if len(s) == rank:
                    sizes = [a if a is not None else b for a, b in zip(sizes, s)]
            return self.keep(instr, ops), tuple(sizes)
        if op == "opt-barrier":
            return self.keep(instr, ops), szs[0]
        if op == "dynamic-slice":
            sizes = tuple(s if n == b else None for s, n, b in zip(
                szs[0], instr.attrs["dynamic_slice_sizes"], ops[0].shape.dims))
            return self.keep(instr, ops), sizes
        if op == "dynamic-update-slice":
            if _dynamic(szs[1]):
                raise _refuse(instr, "a dynamic-update-slice whose update has a dynamic "
                              "dimension is not supported yet by xladist's dynamic padder")
            return self.keep(instr, ops), szs[0]
        if op == "broadcast":
            sizes = [None] * instr.shape.rank
            for k, r in enumerate(instr.attrs["dimensions"]):
                sizes[r] = szs[0][k]
            return self.keep(instr, ops), tuple(sizes)
        if op == "transpose":
            perm = instr.attrs["dimensions"]
            return self.keep(instr, ops), tuple(szs[0][p] for p in perm)
        if op == "tuple":
            return self.keep(instr, ops), list(szs)
        if op == "get-tuple-element":
            return self.keep(instr, ops), szs[0][instr.attrs["index"]]
        if op == "reduce":
            return self.reduce(instr, ops, szs)
        if op == "dot":
            return self.dot(instr, ops, szs)
        if op == "sort":
            return self.sort(instr, ops, szs)
        if op == "concatenate":
            return self.concatenate(instr, ops, szs)
        if op == "while":
            return self.while_(instr, ops, szs)
        if op == "conditional":
            return self.conditional(instr, ops, szs)
        if op == "slice":
            return self.slice(instr, ops, szs)
        if op == "reshape":
            return self.reshape(instr, ops, szs)
        if op == "gather":
            return self.gather(instr, ops, szs)
        if op == "scatter":
            return self.scatter(instr, ops, szs)
        if op == "pad":
            return self.pad(instr, ops, szs)
        if op == "reverse":
            return self.reverse(instr, ops, szs)
        if op == "reduce-window":
            return self.reduce_window(instr, ops, szs)
        if op == "convolution":
            return self.convolution(instr, ops, szs)
        if fam == "collective" or op.startswith("all-") or "collective" in op:
            raise _refuse(instr, "a collective of an operand with a dynamic dimension is not "
                          "supported (XLA:CPU refuses it too); set the size after the collective")
        raise _refuse(instr, f"{op} of an operand with a dynamic dimension is not supported yet "
                      "by xladist's dynamic padder")

    def slice(self, instr, ops, szs):
        """As XLA's dynamic dimension inference: a slice over the whole dimension keeps its
        size; a partial slice makes it static (it takes the buffer's elements as they are)."""
        sizes = []
        for d, (start, limit, stride) in enumerate(instr.attrs["slice"].dims):
            whole = start == 0 and stride == 1 and limit == ops[0].shape.dims[d]
            sizes.append(szs[0][d] if whole else None)
        return self.keep(instr, ops), tuple(sizes)

    def reverse(self, instr, ops, szs):
        """Reverse the padded buffer, then slice the valid elements back to the front: the
        reversed valid part starts at bound - size (XLA's padder does the same)."""
        x = ops[0]
        dims = [d for d in instr.attrs["dimensions"] if szs[0][d] is not None]
        rev = self.keep(instr, ops)
        if not dims:
            return rev, szs[0]
        out = rev
        for d in dims:
            bound = x.shape.dims[d]
            doubled = self.emit("concatenate", [out, out], {"dimensions": (d,)})
            start = self.emit("subtract", [self.const(_S32, bound), szs[0][d]])
            starts = [start if k == d else self.const(_S32, 0) for k in range(x.shape.rank)]
            out = self.emit("dynamic-slice", [doubled] + starts,
                            {"dynamic_slice_sizes": x.shape.dims})
        return out, szs[0]

    def window_size(self, size: Instruction, w) -> Instruction:
        """The number of windows over `size` valid elements, as XLA's dynamic dimension
        inference counts them: VALID windows (the padding does not add any), with the
        dilations and stride. The values stay those of the padded window."""
        def c(v):
            return self.const(_S32, v)
        dilated = self.emit("maximum", [c(0), self.emit("add", [
            self.emit("multiply", [size, c(w.base_dilation)]), c(1 - w.base_dilation)])])
        span = self.emit("add", [dilated, c(w.stride - ((w.size - 1) * w.window_dilation + 1))])
        return self.emit("divide", [self.emit("maximum", [span, c(0)]), c(w.stride)])

    def reduce_window(self, instr, ops, szs):
        """Padding holds the init value, which is what the window's own padding holds, so
        windows over the valid region see what XLA's dynamic semantics give them."""
        n = len(ops) // 2
        window = instr.attrs["window"]
        sizes = _merge(szs[:n])
        dims = {d: s for d, s in enumerate(sizes) if s is not None}
        for k in range(n):
            ops[k] = self.fill(ops[k], dims, ops[n + k])
        out = tuple(None if s is None else self.window_size(s, window.dims[d])
                    for d, s in enumerate(sizes))
        return self.keep(instr, ops), (out if n == 1 else [out] * n)

    def convolution(self, instr, ops, szs):
        dn = instr.attrs["dim_labels"]
        window = instr.attrs["window"]
        lhs, rhs = szs
        if (szs[1][dn.kernel_output_feature] is not None or any(
                rhs[d] is not None for d in dn.kernel_spatial)
                or instr.attrs.get("feature_group_count", 1) != 1
                or instr.attrs.get("batch_group_count", 1) != 1) and _dynamic(szs):
            raise _refuse(instr, "a convolution with a dynamic kernel spatial or output "
                          "feature dimension, or with feature/batch groups, is not supported "
                          "yet by xladist's dynamic padder")
        feature = lhs[dn.input_feature] or rhs[dn.kernel_input_feature]
        lhs_dims = {d: lhs[d] for d in dn.input_spatial if lhs[d] is not None}
        rhs_dims = {}
        if feature is not None:
            lhs_dims[dn.input_feature] = feature
            rhs_dims[dn.kernel_input_feature] = feature
        for k, dims in ((0, lhs_dims), (1, rhs_dims)):
            if dims:
                ops[k] = self.fill(ops[k], dims, self.const(ops[k].shape.element_type, 0))
        out = [None] * instr.shape.rank
        out[dn.output_batch] = lhs[dn.input_batch]
        for k, (di, do) in enumerate(zip(dn.input_spatial, dn.output_spatial)):
            if lhs[di] is not None:
                out[do] = self.window_size(lhs[di], window.dims[k])
        return self.keep(instr, ops), tuple(out)

    def reduce(self, instr, ops, szs):
        n = len(ops) // 2
        reduced = instr.attrs["dimensions"]
        for k in range(n):
            dims = {d: szs[k][d] for d in reduced if szs[k][d] is not None}
            if dims:
                ops[k] = self.fill(ops[k], dims, ops[n + k])
        kept = tuple(s for d, s in enumerate(_merge(szs[:n])) if d not in reduced)
        new = self.keep(instr, ops)
        return new, (kept if n == 1 else [kept] * n)

    def dot(self, instr, ops, szs):
        a = instr.attrs
        lc, rc = a.get("lhs_contracting_dims", ()), a.get("rhs_contracting_dims", ())
        lb, rb = a.get("lhs_batch_dims", ()), a.get("rhs_batch_dims", ())
        lhs_dims, rhs_dims = {}, {}
        for dl, dr in zip(lc, rc):
            size = szs[0][dl] if szs[0][dl] is not None else szs[1][dr]
            if size is not None:
                lhs_dims[dl], rhs_dims[dr] = size, size
        for k, dims in ((0, lhs_dims), (1, rhs_dims)):
            if dims:
                zero = self.const(ops[k].shape.element_type, 0)
                ops[k] = self.fill(ops[k], dims, zero)
        free_l = [d for d in range(ops[0].shape.rank) if d not in lc and d not in lb]
        free_r = [d for d in range(ops[1].shape.rank) if d not in rc and d not in rb]
        sizes = ([szs[0][d] if szs[0][d] is not None else szs[1][e] for d, e in zip(lb, rb)]
                 + [szs[0][d] for d in free_l] + [szs[1][d] for d in free_r])
        return self.keep(instr, ops), tuple(sizes)

    def sort(self, instr, ops, szs):
        (d,) = instr.attrs["dimensions"]
        sizes = _merge(szs)
        if sizes[d] is None:
            return self.keep(instr, ops), (tuple(sizes) if len(ops) == 1 else [sizes] * len(ops))
        shape = ops[0].shape
        valid = self.mask(shape, {d: sizes[d]})
        flag = self.emit("convert", [self.emit("not", [valid])], {},
                         Shape.array(_S32, shape.dims))
        comparator = self.padded_comparator(instr.attrs["to_apply"])
        attrs = dict(instr.attrs, to_apply=comparator)
        shapes = [o.shape for o in [flag] + ops]
        sorted_ = self.emit("sort", [flag] + ops, attrs, Shape.tuple_of(shapes))
        parts = [self.emit("get-tuple-element", [sorted_], {"index": k + 1})
                 for k in range(len(ops))]
        sizes = tuple(sizes)
        if len(ops) == 1:
            return parts[0], sizes
        return self.emit("tuple", parts), [sizes] * len(ops)

    def padded_comparator(self, orig: Computation) -> Computation:
        """(flag_a, flag_b, *orig params) -> flags differ ? flag_a < flag_b : orig(...)."""
        self.count += 1
        comp = Computation(f"{orig.name}.dynpad{self.count}")
        flag = Shape.scalar(_S32)
        fa = comp.add(Instruction("flag.a", "parameter", flag, parameter_number=0))
        fb = comp.add(Instruction("flag.b", "parameter", flag, parameter_number=1))
        mapping: dict[Instruction, Instruction] = {}
        for i in orig.instructions:
            c = Instruction(i.name, i.opcode, i.shape, [mapping[o] for o in i.operands], i.attrs,
                            parameter_number=(i.parameter_number + 2
                                              if i.parameter_number is not None else None),
                            literal=i.literal)
            mapping[i] = comp.add(c)
        pred = Shape.scalar("pred")
        ne = comp.add(Instruction("flag.ne", "compare", pred, [fa, fb], {"direction": "NE"}))
        lt = comp.add(Instruction("flag.lt", "compare", pred, [fa, fb], {"direction": "LT"}))
        root = comp.add(Instruction("flag.select", "select", pred,
                                    [ne, lt, mapping[orig.root]]))
        comp.root = root
        comp.module = self.module
        self.module.computations.insert(self.module.computations.index(self.comp), comp)
        return comp

    def concatenate(self, instr, ops, szs):
        (d,) = instr.attrs["dimensions"]
        sizes = _merge(szs)
        if all(s[d] is None for s in szs):
            return self.keep(instr, ops), tuple(sizes)
        shape = instr.shape.static()
        zero = self.const(shape.element_type, 0)
        acc = self.emit("broadcast", [zero], {"dimensions": ()}, shape)
        offset = self.const(_S32, 0)
        for x, s in zip(ops, szs):
            starts = [offset if k == d else self.const(_S32, 0) for k in range(shape.rank)]
            acc = self.emit("dynamic-update-slice", [acc, x] + starts)
            offset = self.emit("add", [offset, self.size_of(s, d, x.shape.dims[d])])
        sizes[d] = offset
        return acc, tuple(sizes)

    def reshape(self, instr, ops, szs):
        """A reshape of a dynamic operand: the result dimension declared dynamic (`<=`) gets
        the valid element count over the product of the other result dimensions, and the
        valid elements move row-major as for dynamic-reshape."""
        dyn = [d for d, flag in enumerate(instr.shape.dynamic) if flag]
        if len(dyn) != 1:
            raise _refuse(instr, "a reshape of an operand with a dynamic dimension needs "
                          f"exactly one dynamic result dimension, {instr.shape} has {len(dyn)} "
                          "(use dynamic-reshape to give every size)")
        x = ops[0]
        count = self.const(_S32, 1)
        for d, bound in enumerate(x.shape.dims):
            count = self.emit("multiply", [count, self.size_of(szs[0], d, bound)])
        rest = 1
        for d, bound in enumerate(instr.shape.dims):
            rest *= bound if d != dyn[0] else 1
        sizes = [self.const(_S32, b) for b in instr.shape.dims]
        sizes[dyn[0]] = self.emit("divide", [count, self.const(_S32, max(rest, 1))])
        return self.dynamic_reshape(instr, [x] + sizes, szs)

    def gather(self, instr, ops, szs):
        """Indices' dynamic batch dimensions become the output's batch dimensions; an operand
        dimension taken whole (slice size == bound) keeps its size in its offset dimension.
        Indices address the buffer, as in XLA (out-of-size indices read padding)."""
        a = instr.attrs
        operand, indices = szs
        ivd = a["index_vector_dim"]
        offset_dims = a["offset_dims"]
        out = [None] * instr.shape.rank
        batch_out = [d for d in range(instr.shape.rank) if d not in offset_dims]
        batch_in = [d for d in range(ops[1].shape.rank) if d != ivd]
        for o, i in zip(batch_out, batch_in):
            out[o] = indices[i]
        dropped = set(a["collapsed_slice_dims"]) | set(a.get("operand_batching_dims") or ())
        kept = [d for d in range(ops[0].shape.rank) if d not in dropped]
        for o, d in zip(offset_dims, kept):
            if operand[d] is not None and a["slice_sizes"][d] == ops[0].shape.dims[d]:
                out[o] = operand[d]
        return self.keep(instr, ops), tuple(out)

    def scatter(self, instr, ops, szs):
        """A dynamic operand keeps its sizes. Dynamic scatter (batch) dimensions of the indices
        or updates: the padded index vectors are pointed out of bounds, so the scatter skips
        their updates (XLA's padder does the same)."""
        a = instr.attrs
        n = (len(ops) - 1) // 2
        indices, ivd = ops[n], a["index_vector_dim"]
        window_dims = a["update_window_dims"]
        update = szs[n + 1]
        if any(update[d] is not None for d in window_dims) or any(
                szs[n + 1 + k] != update for k in range(n)):
            raise _refuse(instr, "scatter updates with a dynamic window dimension are not "
                          "supported yet by xladist's dynamic padder")
        if ivd < indices.shape.rank and szs[n][ivd] is not None:
            raise _refuse(instr, "a dynamic index vector dimension is not supported")
        batch_idx = [d for d in range(indices.shape.rank) if d != ivd]
        batch_upd = [d for d in range(len(update)) if d not in window_dims]
        dims = {}
        for di, du in zip(batch_idx, batch_upd):
            size = szs[n][di] if szs[n][di] is not None else update[du]
            if size is not None:
                dims[di] = size
        if dims:
            beyond = self.const(indices.shape.element_type, max(ops[0].shape.dims) + 1)
            ops[n] = self.fill(indices, dims, beyond)
        sizes = [tuple(s) for s in szs[:n]]
        return self.keep(instr, ops), (sizes[0] if n == 1 else sizes)

    def pad(self, instr, ops, szs):
        """Fill the operand's padding with the pad value, then pad the buffer: every element
        between the last valid one and the high edge is the pad value, as in the dynamic
        array. The size is low + high + the interior-dilated size."""
        config = instr.attrs["padding"].dims
        dims = {d: s for d, s in enumerate(szs[0]) if s is not None}
        for d in dims:
            if config[d][0] < 0 or config[d][1] < 0:
                raise _refuse(instr, f"negative padding of dynamic dimension {d} is not "
                              "supported yet")
        ops[0] = self.fill(ops[0], dims, ops[1])
        out = list(szs[0])
        for d, size in dims.items():
            lo, hi, interior = config[d]
            gaps = self.emit("maximum", [self.emit("subtract", [size, self.const(_S32, 1)]),
                                         self.const(_S32, 0)])
            extra = self.emit("multiply", [gaps, self.const(_S32, interior)])
            out[d] = self.emit("add", [self.emit("add", [size, extra]),
                                       self.const(_S32, lo + hi)])
        return self.keep(instr, ops), tuple(out)

    def dynamic_reshape(self, instr, ops, szs):
        """out[i] = x[unravel(ravel(i, result sizes), operand sizes)] in row-major order."""
        x, new_sizes = ops[0], ops[1:]
        out = instr.shape.static()
        xs = [self.size_of(szs[0], d, b) for d, b in enumerate(x.shape.dims)]
        index_shape = Shape.array(_S32, out.dims)
        linear = self.bcast(self.const(_S32, 0), index_shape)
        stride = self.const(_S32, 1)
        for d in reversed(range(out.rank)):
            iota = self.emit("iota", [], {"iota_dimension": d}, index_shape)
            term = self.emit("multiply", [iota, self.bcast(stride, index_shape)])
            linear = self.emit("add", [linear, term])
            stride = self.emit("multiply", [stride, new_sizes[d]])
        one = self.const(_S32, 1)
        flat_index = self.bcast(self.const(_S32, 0), index_shape)
        rest = linear
        bound_stride = 1
        for d in reversed(range(x.shape.rank)):
            size = self.bcast(self.emit("maximum", [xs[d], one]), index_shape)
            digit = self.emit("remainder", [rest, size])
            rest = self.emit("divide", [rest, size])
            term = self.emit("multiply", [digit, self.bcast(self.const(_S32, bound_stride),
                                                            index_shape)])
            flat_index = self.emit("add", [flat_index, term])
            bound_stride *= x.shape.dims[d]
        flat = self.emit("reshape", [x], {}, Shape.array(x.shape.element_type,
                                                         (x.shape.size,)))
        indices = self.emit("reshape", [flat_index], {},
                            Shape.array(_S32, out.dims + (1,)))
        gathered = self.emit("gather", [flat, indices], {
            "offset_dims": (), "collapsed_slice_dims": (0,), "start_index_map": (0,),
            "index_vector_dim": out.rank, "slice_sizes": (1,)}, out)
        return gathered, tuple(new_sizes)


def _static(shape: Shape):
    if shape.is_tuple:
        return [_static(s) for s in shape.tuple_shapes]
    return (None,) * (shape.rank if shape.is_array else 0)


def _paths(sizes, path=()):
    """(path, dimension, size) of every tracked size; path indexes nested tuples."""
    if isinstance(sizes, list):
        for i, s in enumerate(sizes):
            yield from _paths(s, path + (i,))
    else:
        for d, s in enumerate(sizes):
            if s is not None:
                yield path, d, s


def _set_size(sizes, path, d, size):
    """A copy of the sizes structure with (path, d) set to size."""
    if path:
        out = list(sizes)
        out[path[0]] = _set_size(sizes[path[0]], path[1:], d, size)
        return out
    out = list(sizes)
    out[d] = size
    return tuple(out)


def _dim(shape: Shape, path, d) -> int:
    return shape.subshape(path).dims[d]


def _merge(szs) -> list:
    """Per dimension, the first tracked size among same-rank operands."""
    rank = max(len(s) for s in szs)
    out = [None] * rank
    for s in szs:
        if len(s) == rank:
            out = [a if a is not None else b for a, b in zip(out, s)]
    return out


def _leaves(sizes, shape: Shape):
    """Per-dimension sizes of each array leaf, in flatten_result's order (tokens dropped)."""
    if shape.is_tuple:
        for s, sub in zip(sizes, shape.tuple_shapes):
            yield from _leaves(s, sub)
    elif shape.is_array:
        yield sizes
