"""convolution for ahead-of-time compilation (program.py): generated loops instead of the
library thunk (library/core.py's im2col + numpy matmul), so an object needs only libc/libm.

    void convN(ptr argv)    argv = [out, lhs, rhs]

Direct form, one loop per result dimension around loops over the input features of the
group and the kernel taps:
    out[n, o, p] = sum_{c, k} x[n_in, g*C + c, q(p, k)] * w[o, c, k]
with q = p*stride + k*window_dilation - padding_low in the base-dilated input (a tap that
lands in padding or between dilated elements reads 0; the load address is clamped so it
is always in bounds), the feature group g and batch group of output feature o as in
interpreter/convolution.py, and window reversal reading tap size-1-k. Same element-type
rule as dot (dot.py).
"""

from __future__ import annotations

from contextlib import ExitStack

from llvmlite import ir

from ...errors import UnsupportedError
from ..codegen.ir_array import c64
from ..codegen.loops import for_range
from ..codegen.types import I1
from .dot import Contraction, strides_of


def emit_conv(module: ir.Module, name: str, instr, where: str) -> None:
    lhs, rhs = (o.shape for o in instr.operands)
    out = instr.shape
    dn = instr.attrs["dim_labels"]
    ns = len(dn.input_spatial)
    window = instr.attrs.get("window")
    wdims = list(window.dims) if window is not None else []
    G = instr.attrs.get("feature_group_count", 1)
    B = instr.attrs.get("batch_group_count", 1)
    taps = [rhs.dims[d] for d in dn.kernel_spatial]
    cg = rhs.dims[dn.kernel_input_feature]
    o_feat = out.dims[dn.output_feature]
    n_out = out.dims[dn.output_batch]
    if o_feat % (G * B):
        raise UnsupportedError(f"ahead-of-time compilation cannot compile {where}: "
                               f"{o_feat} output features do not divide into "
                               f"{G * B} groups")
    og = o_feat // (G * B)

    def win(i):
        if i < len(wdims):
            w = wdims[i]
            return (w.stride, w.padding_low, w.base_dilation, w.window_dilation,
                    w.window_reversal)
        return (1, 0, 1, 1, False)

    ls, rs, os_ = strides_of(lhs), strides_of(rhs), strides_of(out)
    f = Contraction(module, name, instr, where)
    b, pl, pr = f.b, f.pl, f.pr
    if out.size == 0:
        b.ret_void()
        return
    with ExitStack() as outer:
        iv = {}
        ooff = c64(0)
        for d in range(out.rank):
            iv[d] = outer.enter_context(for_range(b, out.dims[d], name=f"o{d}")).iv
            ooff = b.add(ooff, b.mul(iv[d], c64(os_[d])))
        n, o = iv[dn.output_batch], iv[dn.output_feature]
        group = b.udiv(o, c64(og))                      # b_index * G + g
        g = b.urem(group, c64(G))
        n_in = b.add(b.mul(b.udiv(group, c64(G)), c64(n_out)), n)
        b.store(f.zero, f.acc)
        if lhs.size and rhs.size:  # else zeros, reading neither (Contraction)
            with ExitStack() as inner:
                c = inner.enter_context(for_range(b, cg, name="c")).iv
                feat = b.add(b.mul(g, c64(cg)), c)
                loff = b.add(b.mul(n_in, c64(ls[dn.input_batch])),
                             b.mul(feat, c64(ls[dn.input_feature])))
                roff = b.add(b.mul(o, c64(rs[dn.kernel_output_feature])),
                             b.mul(c, c64(rs[dn.kernel_input_feature])))
                valid = ir.Constant(I1, 1)
                for i in range(ns):
                    stride, pad_lo, base_dil, win_dil, reverse = win(i)
                    k = inner.enter_context(for_range(b, taps[i], name=f"k{i}")).iv
                    tap = b.sub(c64(taps[i] - 1), k) if reverse else k
                    roff = b.add(roff, b.mul(tap, c64(rs[dn.kernel_spatial[i]])))
                    p = iv[dn.output_spatial[i]]
                    q = b.sub(b.add(b.mul(p, c64(stride)), b.mul(k, c64(win_dil))), c64(pad_lo))
                    n_sp = lhs.dims[dn.input_spatial[i]]
                    ok = b.and_(b.icmp_signed(">=", q, c64(0)),
                                b.icmp_signed("<=", q, c64((n_sp - 1) * base_dil)))
                    if base_dil > 1:
                        ok = b.and_(ok, b.icmp_signed("==", b.srem(q, c64(base_dil)), c64(0)))
                        q = b.sdiv(q, c64(base_dil))
                    q = b.select(ok, q, c64(0))  # an in-bounds address even for padding taps
                    valid = b.and_(valid, ok)
                    loff = b.add(loff, b.mul(q, c64(ls[dn.input_spatial[i]])))
                f.accumulate(b.select(valid, f.load(pl, loff), f.zero), f.load(pr, roff))
        f.store_result(ooff)
    b.ret_void()
