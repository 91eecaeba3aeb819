"""Direct convolution kernel generated with LLVM for the host's vector width (f32,
stride 1, one feature group): the library thunk's fast path (library/core.py).

Why: per-tap BLAS calls (one contiguous OpenBLAS matmul of K = C = 64 per tap, or
im2col with K = 576) reached ~70 GFLOP/s on the benchmark's 3x3 conv (8x56x56x64 ->
64) on one core and XLA:CPU ~80: OpenBLAS packs both operands on every call and a
K of 64 is too short to amortize it. This kernel packs only the weights, once per
call, and reads the input where it lies: one core, interleaved, load ~2: 20.5-21.3 ms
against jax.jit's 22.7-24.6 ms and 28.4 ms for the per-tap matmuls.

The input is the padded, channels-last array flattened to rows of C values (one row
per padded spatial position), as library._channels_last_padded makes it. An output
"line" is one run of the last output spatial dimension (an image row for 2-D); its
positions p read input rows line_in[l] + p + offs[t] for every tap t. Each output
block of MR positions x NR features keeps MR x NR/VW vector accumulators in
registers over every tap (outer) and input feature (inner):

    out[l*W + p, j*NR : j*NR + NR] = sum_t sum_c x[line_in[l] + p + offs[t], c]
                                                 * wp[j, t, c, :]

with one fused multiply-add per term, always in that order. A position's value does
not depend on which block, line range or thread computes it (the tail positions take
the same chain one position at a time), so any split of the lines gives bit-identical
results.

    void conv_lines(ptr x, ptr wp, ptr out, ptr offs, ptr line_in,
                    i64 taps, i64 C, i64 O, i64 W, i64 lo, i64 hi)

wp: the weights packed [O / NR][taps][C][NR]; out: [lines * W, O] row-major.
Compiled once per process (through the kernel cache, so a warm cache compiles
nothing) for the host's vector width; hosts without FMA (or a named
XLADIST_TARGET_CPU) keep the BLAS path.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import jit
from ..semantics.dtypes import compute_dtype, product_operand_dtype
from .target import kernel_vector_bytes

# Output positions per block. Measured with 2 vectors of features (NR = 2 VW) on the
# AVX2 host, one thread, interleaved: MR 4 20.5-21.3 ms, 5 22.3, 6 21.3-22.7; one
# vector (NR = VW) at MR 4: 37.4 ms (a broadcast per FMA).
MR = 4
NV = 2

_FN = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 5 + [ctypes.c_int64] * 6))
_lock = threading.Lock()
_loaded: dict = {}


def vector_floats() -> int | None:
    """f32 lanes of the target's vectors, None when the kernel is not for this target
    (no FMA)."""
    vb = kernel_vector_bytes()
    return None if vb is None else vb // 4


def _block(mr: int, vw: int) -> str:
    """One MR x NR output block: vector accumulators (allocas that SROA keeps in
    registers), taps outer, input features inner, one FMA per term."""
    v = f"<{vw} x float>"
    nr = vw * NV
    accs = [(i, k) for i in range(mr) for k in range(NV)]
    s = [f"define internal void @block{mr}(ptr %x, ptr %w, ptr %out, ptr %offs, i64 %nt, "
         f"i64 %C, i64 %O, i64 %inrow, i64 %outrow, i64 %j) alwaysinline {{", "entry:"]
    for i, k in accs:
        s += [f"  %acc{i}_{k} = alloca {v}, align 64",
              f"  store {v} zeroinitializer, ptr %acc{i}_{k}"]
    s += ["  %jnt = mul i64 %j, %nt", "  br label %tap", "tap:",
          "  %t = phi i64 [0, %entry], [%t1, %tap.end]",
          "  %offp = getelementptr i64, ptr %offs, i64 %t",
          "  %off = load i64, ptr %offp",
          "  %row = add i64 %inrow, %off",
          "  %xb = mul i64 %row, %C",
          "  %jt = add i64 %jnt, %t",
          "  %jtc = mul i64 %jt, %C",
          f"  %wt = mul i64 %jtc, {nr}",
          "  br label %feat", "feat:",
          "  %c = phi i64 [0, %tap], [%c1, %feat]",
          f"  %cw = mul i64 %c, {nr}",
          "  %wi = add i64 %wt, %cw",
          "  %xc = add i64 %xb, %c"]
    for k in range(NV):
        s += [f"  %wi{k} = add i64 %wi, {k * vw}",
              f"  %wp{k} = getelementptr float, ptr %w, i64 %wi{k}",
              f"  %wv{k} = load {v}, ptr %wp{k}, align 4"]
    for i in range(mr):
        s += [f"  %xo{i} = mul i64 %C, {i}",
              f"  %xi{i} = add i64 %xc, %xo{i}",
              f"  %xp{i} = getelementptr float, ptr %x, i64 %xi{i}",
              f"  %xs{i} = load float, ptr %xp{i}, align 4",
              f"  %xe{i} = insertelement {v} poison, float %xs{i}, i64 0",
              f"  %xv{i} = shufflevector {v} %xe{i}, {v} poison, <{vw} x i32> zeroinitializer"]
        for k in range(NV):
            s += [f"  %a{i}_{k} = load {v}, ptr %acc{i}_{k}",
                  f"  %f{i}_{k} = call {v} @llvm.fma.v{vw}f32({v} %xv{i}, {v} %wv{k}, "
                  f"{v} %a{i}_{k})",
                  f"  store {v} %f{i}_{k}, ptr %acc{i}_{k}"]
    s += ["  %c1 = add i64 %c, 1", "  %cm = icmp slt i64 %c1, %C",
          "  br i1 %cm, label %feat, label %tap.end", "tap.end:",
          "  %t1 = add i64 %t, 1", "  %tm = icmp slt i64 %t1, %nt",
          "  br i1 %tm, label %tap, label %store", "store:",
          f"  %jn = mul i64 %j, {nr}"]
    for i in range(mr):
        s += [f"  %or{i} = add i64 %outrow, {i}", f"  %ob{i} = mul i64 %or{i}, %O",
              f"  %oc{i} = add i64 %ob{i}, %jn"]
        for k in range(NV):
            s += [f"  %oi{i}_{k} = add i64 %oc{i}, {k * vw}",
                  f"  %op{i}_{k} = getelementptr float, ptr %out, i64 %oi{i}_{k}",
                  f"  %r{i}_{k} = load {v}, ptr %acc{i}_{k}",
                  f"  store {v} %r{i}_{k}, ptr %op{i}_{k}, align 4"]
    s += ["  ret void", "}"]
    return "\n".join(s)


def ir_text(vw: int) -> str:
    """The module: blocks of MR positions and of one (a line's tail), and the driver
    over lines [lo, hi), feature panels, then positions."""
    nr = vw * NV
    args = "ptr %x, ptr %w, ptr %out, ptr %offs, i64 %nt, i64 %C, i64 %O"
    return "\n".join([_block(MR, vw), _block(1, vw), f"""
define void @conv_lines(ptr %x, ptr %w, ptr %out, ptr %offs, ptr %linein, i64 %nt, i64 %C,
                        i64 %O, i64 %W, i64 %lo, i64 %hi) {{
entry:
  %np = udiv i64 %O, {nr}
  %any = icmp slt i64 %lo, %hi
  br i1 %any, label %line, label %done
line:
  %l = phi i64 [%lo, %entry], [%l1, %line.end]
  %lip = getelementptr i64, ptr %linein, i64 %l
  %lin = load i64, ptr %lip
  %lout = mul i64 %l, %W
  br label %panel
panel:
  %j = phi i64 [0, %line], [%j1, %panel.end]
  br label %pos
pos:
  %p = phi i64 [0, %panel], [%p1, %pos.body]
  %pe = add i64 %p, {MR}
  %pm = icmp sle i64 %pe, %W
  br i1 %pm, label %pos.body, label %tail
pos.body:
  %ir = add i64 %lin, %p
  %orow = add i64 %lout, %p
  call void @block{MR}({args}, i64 %ir, i64 %orow, i64 %j)
  %p1 = add i64 %p, {MR}
  br label %pos
tail:
  %q = phi i64 [%p, %pos], [%q1, %tail.body]
  %qm = icmp slt i64 %q, %W
  br i1 %qm, label %tail.body, label %panel.end
tail.body:
  %ir1 = add i64 %lin, %q
  %or1 = add i64 %lout, %q
  call void @block1({args}, i64 %ir1, i64 %or1, i64 %j)
  %q1 = add i64 %q, 1
  br label %tail
panel.end:
  %j1 = add i64 %j, 1
  %jm = icmp slt i64 %j1, %np
  br i1 %jm, label %panel, label %line.end
line.end:
  %l1 = add i64 %l, 1
  %lm = icmp slt i64 %l1, %hi
  br i1 %lm, label %line, label %done
done:
  ret void
}}
declare {f"<{vw} x float>"} @llvm.fma.v{vw}f32(<{vw} x float>, <{vw} x float>, <{vw} x float>)
"""])


def kernel(vw: int):
    """conv_lines compiled for vectors of vw floats (once per process; the object
    comes from the kernel cache when it is there)."""
    with _lock:
        fn = _loaded.get(vw)
        if fn is None:
            text = ir_text(vw)
            code, _cached = jit.get_code("xladist conv_lines\n" + text, lambda: text)
            fn = (_FN(code.address("conv_lines")), code)  # code keeps the engine alive
            _loaded[vw] = fn
    return fn[0]


def features_per_panel() -> int | None:
    """NR: output features per block, None when the kernel is not for this host."""
    vw = vector_floats()
    return None if vw is None else vw * NV


def applies(dtype, feature_groups: int, batch_groups: int, strides, n_spatial: int,
            out_features: int) -> bool:
    nr = features_per_panel()
    return (nr is not None and np.dtype(dtype) == np.float32 and feature_groups == 1
            and batch_groups == 1 and n_spatial >= 1 and all(s == 1 for s in strides)
            and out_features % nr == 0)


def lines_of(instr) -> tuple[int, int] | None:
    """(lines, multiply-adds per line) when the convolution `instr` runs on this
    kernel (what `xladist explain` shows), else None."""
    a = instr.attrs
    dn, out, rhs = a["dim_labels"], instr.shape, instr.operands[1].shape
    # The type the library thunk computes in (library/core.py's _product_dtypes).
    dtype = compute_dtype(product_operand_dtype(instr.operands[0].shape.element_type.dtype,
                                                rhs.element_type.dtype,
                                                out.element_type.dtype))
    window = a.get("window")
    strides = [d.stride for d in window.dims] if window is not None else []
    osp = [out.dims[d] for d in dn.output_spatial]
    o = out.dims[dn.output_feature]
    if not osp or not applies(dtype, int(a.get("feature_group_count", 1) or 1),
                              int(a.get("batch_group_count", 1) or 1), strides, len(osp), o):
        return None
    taps = 1
    for i, d in enumerate(dn.kernel_spatial):
        dil = window.dims[i].window_dilation if window is not None else 1
        taps *= (rhs.dims[d] - 1) * dil + 1
    lines = out.dims[dn.output_batch] * int(np.prod(osp[:-1]))
    return lines, osp[-1] * o * rhs.dims[dn.kernel_input_feature] * taps


def conv_lines(xl: np.ndarray, w: np.ndarray, out_sp, run, out=None) -> np.ndarray:
    """[N, padded spatial..., C] f32 (C-contiguous) * [O, C, k...] -> [N, out..., O],
    into `out` when given (that shape, f32, C-contiguous). run(fn, lines,
    work_per_line) calls fn(lo, hi) over line ranges (the pool's fixed blocks,
    blas_blocks.by_blocks)."""
    vw = vector_floats()
    nr = vw * NV
    n, sp, c = xl.shape[0], xl.shape[1:-1], xl.shape[-1]
    o, ksz = w.shape[0], w.shape[2:]
    taps = int(np.prod(ksz))
    wp = np.ascontiguousarray(
        w.reshape(o // nr, nr, c, taps).transpose(0, 3, 2, 1), dtype=np.float32)
    pitch = [int(np.prod(sp[k + 1:])) for k in range(len(sp))]  # rows per step of dim k
    offs = np.array([sum(t * st for t, st in zip(tap, pitch)) for tap in np.ndindex(*ksz)],
                    np.int64)
    # Lines: every (image, output index of the leading spatial dims).
    lead = [np.arange(m, dtype=np.int64) * st for m, st in zip(out_sp[:-1], pitch[:-1])]
    line_in = np.arange(n, dtype=np.int64) * int(np.prod(sp))
    for col in lead:
        line_in = (line_in[:, None] + col[None, :]).reshape(-1)
    width = int(out_sp[-1])
    if out is None:
        out = np.empty((n, *out_sp, o), np.float32)
    fn = kernel(vw)
    xa, wa, oa, fa, la = (a.ctypes.data for a in (xl, wp, out, offs, line_in))

    def lines(lo, hi):
        fn(xa, wa, oa, fa, la, taps, c, o, width, lo, hi)

    run(lines, line_in.size, width * o * c * taps)
    return out
