"""dot for ahead-of-time compilation (program.py): generated loops instead of the BLAS
library thunk (library/core.py's numpy matmul), so an object needs nothing beyond libc/libm.

    void dotN(ptr argv)    argv = [out, lhs, rhs]

One loop per result dimension (batch, lhs free, rhs free: DotGeneral's order) around one
loop per contracting dimension, every buffer addressed through its physical layout's
strides; the accumulator is the result type (as XLA does for f32/f64 and integers).
Correctness first: LLVM vectorizes the inner loop when the strides allow, nothing more.
"""

from __future__ import annotations

from contextlib import ExitStack

from llvmlite import ir

from ...errors import UnsupportedError
from ..codegen.ir_array import c64, layout_of, physical_strides
from ..codegen.kernels import begin_function
from ..codegen.loops import for_range
from ..codegen.types import storage_type

# Element types the generated loops handle: one type for lhs, rhs and result.
DOT_TYPES = frozenset({"f32", "f64", "s32", "s64", "u32", "u64"})


def strides_of(shape) -> list[int]:
    return physical_strides(shape.dims, layout_of(shape))


class Contraction:
    """The shared frame of a generated dot or convolution: `void name(argv)` with argv =
    [out, lhs, rhs] (po, pl, pr), the element type `et` and an accumulator `acc`.

    An empty contraction (a zero-size contracting dimension, kernel window, input feature
    group or input) leaves every result element at the accumulator's 0, as XLA gives: the
    emitters emit no contraction loops then (for_range's body runs at least once), and read
    nothing from an empty operand."""

    def __init__(self, module: ir.Module, name: str, instr, where: str):
        lhs, rhs = (o.shape for o in instr.operands)
        t = instr.shape.element_type
        if {lhs.element_type.name, rhs.element_type.name, t.name} != {t.name} \
                or t.name not in DOT_TYPES:
            raise UnsupportedError(
                f"ahead-of-time compilation cannot compile {where}: {instr.opcode} is "
                f"generated for one element type among {', '.join(sorted(DOT_TYPES))} "
                f"(got {lhs.element_type.name} x {rhs.element_type.name} -> {t.name})")
        fn, self.b, (self.po, self.pl, self.pr) = begin_function(module, name, 3)
        fn.linkage = "internal"
        self.et = storage_type(t)
        self.is_float = t.name.startswith("f")
        self.zero = ir.Constant(self.et, 0.0 if self.is_float else 0)
        self.acc = self.b.alloca(self.et, name="acc")

    def load(self, base, offset):
        return self.b.load(self.b.gep(base, [offset], inbounds=True, source_etype=self.et),
                           typ=self.et)

    def accumulate(self, u, v) -> None:
        b, s = self.b, self.b.load(self.acc, typ=self.et)
        b.store(b.fadd(s, b.fmul(u, v)) if self.is_float else b.add(s, b.mul(u, v)), self.acc)

    def store_result(self, offset) -> None:
        b = self.b
        b.store(b.load(self.acc, typ=self.et),
                b.gep(self.po, [offset], inbounds=True, source_etype=self.et))


def emit_dot(module: ir.Module, name: str, instr, where: str) -> None:
    lhs, rhs = (o.shape for o in instr.operands)
    out = instr.shape
    a = instr.attrs
    lb, lc = list(a.get("lhs_batch_dims", ())), list(a.get("lhs_contracting_dims", ()))
    rb, rc = list(a.get("rhs_batch_dims", ())), list(a.get("rhs_contracting_dims", ()))
    lf = [d for d in range(lhs.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.rank) if d not in rb and d not in rc]
    ls, rs, os_ = strides_of(lhs), strides_of(rhs), strides_of(out)
    # Result dim k -> (lhs dim, rhs dim) it indexes (None: not that operand's).
    result_dims = [(x, y) for x, y in zip(lb, rb)] + [(x, None) for x in lf] + \
        [(None, y) for y in rf]
    f = Contraction(module, name, instr, where)
    b, pl, pr = f.b, f.pl, f.pr
    if out.size == 0:
        b.ret_void()
        return
    with ExitStack() as outer:
        loff, roff, ooff = c64(0), c64(0), c64(0)
        for k, (x, y) in enumerate(result_dims):
            iv = outer.enter_context(for_range(b, out.dims[k], name=f"o{k}")).iv
            ooff = b.add(ooff, b.mul(iv, c64(os_[k])))
            if x is not None:
                loff = b.add(loff, b.mul(iv, c64(ls[x])))
            if y is not None:
                roff = b.add(roff, b.mul(iv, c64(rs[y])))
        b.store(f.zero, f.acc)
        if not any(lhs.dims[x] == 0 for x in lc):  # else zeros (Contraction)
            with ExitStack() as inner:
                li, ri = loff, roff
                for j, (x, y) in enumerate(zip(lc, rc)):
                    iv = inner.enter_context(for_range(b, lhs.dims[x], name=f"c{j}")).iv
                    li = b.add(li, b.mul(iv, c64(ls[x])))
                    ri = b.add(ri, b.mul(iv, c64(rs[y])))
                f.accumulate(f.load(pl, li), f.load(pr, ri))
        f.store_result(ooff)
    b.ret_void()
