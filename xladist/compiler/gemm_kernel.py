"""Row-major GEMM C = A @ B (f32, f64) generated with LLVM for the host's vector width,
in the style of BLIS/GotoBLAS: packed panels of A and B, cache blocking MC/KC/NC and a
register-blocked micro-kernel.

Measured against OpenBLAS (cblas through compiler/blas_blocks.py and compiler/native/blas.py,
the dot path) by benchmarks/gemm_kernels.py (which imports this file), one pinned core, f32,
interleaved medians of 15, two runs (time of OpenBLAS / time of this kernel; > 1 is
this kernel faster), AMD EPYC znver4 with AVX2 + FMA visible (no AVX-512), numpy's
OpenBLAS 0.3.31 with its Haswell kernel, 6x16 tile, MC 96 KC 512:

    square 256   0.989x 0.959x      MLP x@w1    0.993x 0.947x   dw1 x^T@dh  1.063x 0.987x
    square 512   1.050x 1.022x      MLP h@w2    0.971x 0.984x   dh dy@w2^T  1.073x 1.010x
    square 1024  1.066x 1.038x      dw2 h^T@dy  1.056x 1.014x   dx dh@w1^T  1.018x 0.983x
    square 2048  1.020x 0.972x

Parity, not a clear win (>= 5% at both 512 and 1024 in both runs was the bar): both
reach 66-75 GFLOP/s on this shared host (80-82 when it is quiet), and the core's FMA
peak measured in the same runs (12 register FMA chains) is 86-90 GFLOP/s: OpenBLAS
already runs at ~75-95% of it, so no kernel can be much faster here. Against jax.jit
on one thread (XLA:CPU) the kernel is 1.04-1.18x faster on the squares and the
products with a plain or transposed B, and 1.4-2.1x on the X^T @ dY products. f64
(6x8 tile, one run): 0.86-1.13x OpenBLAS, parity as well. matmul() costs ~10 us a call
from Python (numpy's matmul ~1 us), so products much under 256^3 lose on that alone.

Loops, outermost first (BLIS's five loops around the micro-kernel):

    for jc in 0..N step NC:        B block KC x NC, packed into NR-column panels (L3)
      for pc in 0..K step KC:
        pack B[pc:pc+kc, jc:jc+nc]  -> bbuf[jr/NR][p][0:NR]   (zero-padded)
        for ic in 0..M step MC:    A block MC x KC, packed into MR-row panels (L2)
          pack A[ic:ic+mc, pc:pc+kc] -> abuf[ir/MR][p][0:MR]  (zero-padded)
          for jr in 0..nc step NR:       one B panel (KC x NR) stays in L1
            for ir in 0..mc step MR:
              C[ic+ir : +MR, jc+jr : +NR] (=, or += after the first pc) micro-kernel

The micro-kernel keeps MR x NV vector accumulators (NR = NV * VW columns) in registers
over the whole KC loop: per k, NV vector loads of the B panel, MR broadcasts of A and
MR * NV fused multiply-adds. Panels are zero-padded to MR/NR, so the micro-kernel always
runs a whole tile; an edge tile (m or n not a multiple) goes through a stack tile and
only its mr x nr corner reaches C.

A and B are read through (row stride, column stride) pairs, so transposed operands
(the gradient products X^T @ dY, dY @ W^T) are packed straight from the arrays a
transpose view of numpy gives, with no copy:

    void gemm(ptr A, i64 rsa, i64 csa, ptr B, i64 rsb, i64 csb, ptr C, i64 ldc,
              i64 M, i64 N, i64 K, ptr abuf, ptr bbuf)

abuf holds ceil(MC/MR)*MR*KC elements, bbuf ceil(NC/NR)*NR*KC (vector-aligned; gemm()
keeps one pair per thread). K = 0 is handled by the caller (C = 0).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import threading
from dataclasses import dataclass, replace
from typing import Callable, NamedTuple

import numpy as np

from . import jit
from .target import in_callers_target, kernel_vector_bytes


@dataclass(frozen=True)
class Params:
    """Shape of the kernel: micro-tile MR x (NV vectors), cache blocks, k unrolling,
    prefetch distances (in k steps ahead in the A and B panels; 0 = none) and whether
    the C tile is prefetched before the k loop."""

    # 6 x 2 vectors (6x16 f32 on AVX2): 12 accumulators, 2 B vectors and a broadcast
    # in the 16 ymm registers. Blocks tried on the AVX2 host (one core, interleaved
    # medians, ratio OpenBLAS time / this kernel's at 512 / 1024): MC 144 KC 256
    # 0.95-1.01 / 0.88-1.03, MC 288 KC 256 0.96-1.01 / 0.96-1.05, MC 96 KC 512
    # 1.00-1.04 / 1.03-1.07, MC 144 KC 512 0.94 / 1.03; the 4 x 3-vector tile 0.88-0.99
    # / 0.95-1.06, 8 x 1 0.76 / 0.73. k unrolled 1, 4 or 8, prefetching A 16 or B 4-8
    # k-steps ahead, or not prefetching C: all within +-3% of each other (noise).
    mr: int = 6
    nv: int = 2
    kc: int = 512
    mc: int = 96
    # Rounded down to a multiple of NR for the vector width (fitted): 4080 columns on
    # AVX2 (NR 16), 4064 with AVX-512 (NR 32).
    nc: int = 4080
    unroll: int = 4
    prefetch_a: int = 0
    prefetch_b: int = 0
    prefetch_c: bool = True
    # The K blocks: KC while at least 2 KC are left, then the rest in one block if it is
    # at most KC, else in two: half of it rounded up to a multiple of KROUND, and the
    # remainder. This is OpenBLAS's level-3 driver's cut of K (GEMM_Q = KC, KROUND =
    # GEMM_UNROLL_M), and the cut fixes the order of each element's sums: with OpenBLAS's
    # Q and unroll (openblas_cut) the kernel gives OpenBLAS's bits, so the dot path can
    # offer it as one more way to the same result (blas_blocks.py).
    kround: int = 1

    def __post_init__(self):
        if self.kc < 1 or self.kround < 1 or self.kc % self.kround:
            raise ValueError(f"KC {self.kc} must be a positive multiple of KROUND "
                             f"{self.kround}")


DEFAULT = Params()


def k_blocks(k: int, params: Params = DEFAULT) -> list[tuple[int, int]]:
    """The [lo, hi) blocks of K the kernel sums in order (Params.kround)."""
    q, u, out, lo = params.kc, params.kround, [], 0
    while lo < k:
        left = k - lo
        size = q if left >= 2 * q else left if left <= q else -(-(left // 2) // u) * u
        out.append((lo, lo + size))
        lo += size
    return out

_TYPES = {np.dtype(np.float32): ("float", "f32", 4), np.dtype(np.float64): ("double", "f64", 8)}
_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_void_p, ctypes.c_int64,
                       ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_int64)
_PACK_B = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
_lock = threading.Lock()
_loaded: dict = {}
_build_lock = threading.Lock()
_builds: dict = {}  # (dtype, uncut Params) -> False while building, the exception if it failed
_build_threads: list = []
_asked: dict = {}
_buffers = threading.local()


def vector_bytes() -> int | None:
    """Bytes of the target's vector registers the kernel uses (32 for AVX2, 64 for
    AVX-512), None without FMA (the kernel is not for this target)."""
    return kernel_vector_bytes()


def vector_lanes(dtype=np.float32) -> int | None:
    vb = vector_bytes()
    return None if vb is None else vb // np.dtype(dtype).itemsize


def _micro(p: Params, t: str, vw: int) -> str:
    """ukernel(kc, a, b, c, ldc, first, mr, nr): one MR x NR tile, accumulators as phis.
    The first K block stores 0 + its sums, as OpenBLAS (beta 0: C = +0, then C += AB):
    a sum whose products underflow to -0 is +0 there, and so here (an fadd of +0 is
    not folded away: it is no identity for -0)."""
    v = f"<{vw} x {t}>"
    sfx = f"v{vw}{'f32' if t == 'float' else 'f64'}"
    mr, nv, nr = p.mr, p.nv, p.nv * vw
    esz = 4 if t == "float" else 8
    accs = [(i, k) for i in range(mr) for k in range(nv)]
    s = ["define internal void @ukernel(i64 %kc, ptr %a, ptr %b, ptr %c, i64 %ldc, i1 %first, "
         "i64 %mr, i64 %nr) alwaysinline {", "entry:"]
    if p.prefetch_c:  # the tile's rows of C come in while the k loop runs
        for i in range(mr):
            s += [f"  %pco{i} = mul i64 %ldc, {i}",
                  f"  %pcp{i} = getelementptr {t}, ptr %c, i64 %pco{i}",
                  f"  call void @llvm.prefetch.p0(ptr %pcp{i}, i32 1, i32 3, i32 1)"]
            if nr * esz > 64:
                s += [f"  %pcq{i} = getelementptr i8, ptr %pcp{i}, i64 {nr * esz - 1}",
                      f"  call void @llvm.prefetch.p0(ptr %pcq{i}, i32 1, i32 3, i32 1)"]
    # The edge tile's alloca in the entry block: once inlined it is a fixed stack slot.
    s += [f"  %tile = alloca [{mr * nr} x {t}], align 64",
          "  br label %loop", "loop:", "  %p = phi i64 [0, %entry], [%p1, %loop]"]
    for i, k in accs:
        s.append(f"  %acc{i}_{k} = phi {v} [zeroinitializer, %entry], [%f{i}_{k}, %loop]")
    s += [f"  %bo = mul i64 %p, {nr}", f"  %ao = mul i64 %p, {mr}"]
    if p.prefetch_a:
        s += [f"  %pao = add i64 %ao, {p.prefetch_a * mr}",
              f"  %pap = getelementptr {t}, ptr %a, i64 %pao",
              "  call void @llvm.prefetch.p0(ptr %pap, i32 0, i32 3, i32 1)"]
    if p.prefetch_b:
        s += [f"  %pbo = add i64 %bo, {p.prefetch_b * nr}",
              f"  %pbp = getelementptr {t}, ptr %b, i64 %pbo",
              "  call void @llvm.prefetch.p0(ptr %pbp, i32 0, i32 3, i32 1)"]
    for k in range(nv):
        s += [f"  %bi{k} = add i64 %bo, {k * vw}",
              f"  %bp{k} = getelementptr {t}, ptr %b, i64 %bi{k}",
              f"  %bv{k} = load {v}, ptr %bp{k}, align {vw * esz}"]
    for i in range(mr):
        s += [f"  %ai{i} = add i64 %ao, {i}",
              f"  %ap{i} = getelementptr {t}, ptr %a, i64 %ai{i}",
              f"  %as{i} = load {t}, ptr %ap{i}, align {esz}",
              f"  %ae{i} = insertelement {v} poison, {t} %as{i}, i64 0",
              f"  %av{i} = shufflevector {v} %ae{i}, {v} poison, <{vw} x i32> zeroinitializer"]
        for k in range(nv):
            s.append(f"  %f{i}_{k} = call {v} @llvm.fma.{sfx}({v} %av{i}, {v} %bv{k}, "
                     f"{v} %acc{i}_{k})")
    s += ["  %p1 = add i64 %p, 1", "  %pm = icmp slt i64 %p1, %kc",
          "  br i1 %pm, label %loop, label %done, !llvm.loop !0", "done:",
          f"  %fullm = icmp eq i64 %mr, {mr}", f"  %fulln = icmp eq i64 %nr, {nr}",
          "  %full = and i1 %fullm, %fulln",
          "  br i1 %full, label %whole, label %edge", "whole:",
          "  br i1 %first, label %cset, label %cadd"]
    for mode in ("set", "add"):
        s.append(f"c{mode}:")
        for i, k in accs:
            s += [f"  %{mode}o{i}_{k}a = mul i64 %ldc, {i}",
                  f"  %{mode}o{i}_{k} = add i64 %{mode}o{i}_{k}a, {k * vw}",
                  f"  %{mode}p{i}_{k} = getelementptr {t}, ptr %c, i64 %{mode}o{i}_{k}"]
            if mode == "set":  # (0 + sum: OpenBLAS's C = 0, then C += AB; below)
                s += [f"  %z{i}_{k} = fadd {v} %f{i}_{k}, zeroinitializer",
                      f"  store {v} %z{i}_{k}, ptr %setp{i}_{k}, align {esz}"]
            else:
                s += [f"  %old{i}_{k} = load {v}, ptr %addp{i}_{k}, align {esz}",
                      f"  %new{i}_{k} = fadd {v} %old{i}_{k}, %f{i}_{k}",
                      f"  store {v} %new{i}_{k}, ptr %addp{i}_{k}, align {esz}"]
        s.append("  ret void")
    # Edge tile: the accumulators to a stack tile, its mr x nr corner to C.
    s.append("edge:")
    for i, k in accs:
        s += [f"  %tp{i}_{k} = getelementptr {t}, ptr %tile, i64 {i * nr + k * vw}",
              f"  store {v} %f{i}_{k}, ptr %tp{i}_{k}, align {esz}"]
    s += ["  br label %erow", "erow:",
          "  %ei = phi i64 [0, %edge], [%ei1, %erow.end]",
          "  %eco = mul i64 %ei, %ldc", f"  %eto = mul i64 %ei, {nr}",
          "  br label %ecol", "ecol:",
          "  %ej = phi i64 [0, %erow], [%ej1, %ecol.next]",
          "  %etj = add i64 %eto, %ej", f"  %etp = getelementptr {t}, ptr %tile, i64 %etj",
          f"  %ev = load {t}, ptr %etp", "  %ecj = add i64 %eco, %ej",
          f"  %ecp = getelementptr {t}, ptr %c, i64 %ecj",
          "  br i1 %first, label %eset, label %eadd", "eadd:",
          f"  %eold = load {t}, ptr %ecp", f"  %esum = fadd {t} %eold, %ev",
          "  br label %ecol.next", "eset:", f"  %ezero = fadd {t} %ev, 0.0",
          "  br label %ecol.next", "ecol.next:",
          f"  %eout = phi {t} [%esum, %eadd], [%ezero, %eset]",
          f"  store {t} %eout, ptr %ecp",
          "  %ej1 = add i64 %ej, 1", "  %ejm = icmp slt i64 %ej1, %nr",
          "  br i1 %ejm, label %ecol, label %erow.end", "erow.end:",
          "  %ei1 = add i64 %ei, 1", "  %eim = icmp slt i64 %ei1, %mr",
          "  br i1 %eim, label %erow, label %eret", "eret:", "  ret void", "}"]
    return "\n".join(s)


def _transpose_block(rows: int, t: str, vw: int, x: str, src: str) -> str:
    """IR of one block of `rows` x VW, each row VW contiguous elements at
    src + %{x}row{i} + %{x}q, moved to column-major order (element (i, q) to q*rows +
    i) at buf + %{x}qb: `rows` vector loads and one shuffle. It packs whole panels of
    row-contiguous A (rows = MR) and of transposed B (rows = NR columns). Element by
    element (the first version) the packing of A took ~0.5 ns a value: 30 us of a
    288x256 block, 5% of a 256^3 product."""
    v = f"<{vw} x {t}>"
    esz = 4 if t == "float" else 8
    s = []
    for i in range(rows):
        s += [f"  %{x}r{i} = add i64 %{x}row{i}, %{x}q",
              f"  %{x}p{i} = getelementptr {t}, ptr %{src}, i64 %{x}r{i}",
              f"  %{x}v{i} = load {v}, ptr %{x}p{i}, align {esz}"]
    # Concatenate pairs, then pairs of pairs..., to one vector of MR*VW lanes (an odd
    # one out pairs with poison), then one shuffle picks lanes q*MR + i <- i*VW + q.
    parts, w, n = [f"%{x}v{i}" for i in range(rows)], vw, 0
    while len(parts) > 1:
        nxt = []
        for j in range(0, len(parts), 2):
            other = parts[j + 1] if j + 1 < len(parts) else "poison"
            mask = ", ".join(f"i32 {k}" if k < w or other != "poison" else "i32 poison"
                             for k in range(2 * w))
            s.append(f"  %{x}c{n} = shufflevector <{w} x {t}> {parts[j]}, <{w} x {t}> "
                     f"{other}, <{2 * w} x i32> <{mask}>")
            nxt.append(f"%{x}c{n}")
            n += 1
        parts, w = nxt, 2 * w
    order = ", ".join(f"i32 {i * vw + q}" for q in range(vw) for i in range(rows))
    s += [f"  %{x}t = shufflevector <{w} x {t}> {parts[0]}, <{w} x {t}> poison, "
          f"<{rows * vw} x i32> <{order}>",
          f"  %{x}b = getelementptr {t}, ptr %buf, i64 %{x}qb",
          f"  store <{rows * vw} x {t}> %{x}t, ptr %{x}b, align {esz}"]
    return "\n".join(s)


def _pack_a(p: Params, t: str, vw: int) -> str:
    """pack_a(A, rsa, csa, abuf, mc, kc): abuf[ir/MR][q][i] = A[ir+i, q], rows past mc
    zero. Whole panels of row-contiguous A (csa = 1) move in MR x VW blocks
    (_transpose_block), their last kc % VW columns and partial panels element by element
    along the rows; whole panels of a transposed view (rsa = 1) as MR-element copies,
    column by column across the panels; the rest element by element."""
    mr = p.mr
    esz = 4 if t == "float" else 8
    rows = "\n".join(f"  %trow{i}a = add i64 %ir, {i}\n  %trow{i} = mul i64 %trow{i}a, %rsa"
                     for i in range(mr))
    tail = "\n".join(
        f"  %ur{i} = add i64 %trow{i}, %uq\n"
        f"  %up{i} = getelementptr {t}, ptr %A, i64 %ur{i}\n"
        f"  %uv{i} = load {t}, ptr %up{i}\n"
        f"  %ub{i} = add i64 %uqb, {i}\n"
        f"  %ud{i} = getelementptr {t}, ptr %buf, i64 %ub{i}\n"
        f"  store {t} %uv{i}, ptr %ud{i}" for i in range(mr))
    return f"""
define internal void @pack_a(ptr %A, i64 %rsa, i64 %csa, ptr %buf, i64 %mc, i64 %kc) {{
entry:
  %rows = icmp eq i64 %csa, 1
  %acols = icmp eq i64 %rsa, 1
  %kv = and i64 %kc, {-vw}
  %hasv = icmp sgt i64 %kv, 0
  %vecok = and i1 %rows, %hasv
  %npw = udiv i64 %mc, {mr}
  %anyw = icmp sgt i64 %npw, 0
  %downw = and i1 %acols, %anyw
  br i1 %downw, label %dq, label %panel
dq:
  ; A transposed view: its columns q lie MC contiguous values apart by csa. Column by
  ; column, every whole panel takes its MR values: panel by panel instead (each
  ; reading kc rows csa apart, 4 KiB for the MLP's 1024 rows: one L1 set) packed h^T
  ; of the MLP's dw2 product at 0.82-0.95x OpenBLAS.
  %kq = phi i64 [0, %entry], [%kq1, %dq.end]
  %kqa = mul i64 %kq, %csa
  %kqm = mul i64 %kq, {mr}
  br label %dp
dp:
  %dj = phi i64 [0, %dq], [%dj1, %dp]
  %dir = mul i64 %dj, {mr}
  %dsrc = add i64 %kqa, %dir
  %dsp = getelementptr {t}, ptr %A, i64 %dsrc
  %dv = load <{mr} x {t}>, ptr %dsp, align {esz}
  %dpb = mul i64 %dir, %kc
  %ddst = add i64 %dpb, %kqm
  %ddp = getelementptr {t}, ptr %buf, i64 %ddst
  store <{mr} x {t}> %dv, ptr %ddp, align {esz}
  %dj1 = add i64 %dj, 1
  %djc = icmp slt i64 %dj1, %npw
  br i1 %djc, label %dp, label %dq.end
dq.end:
  %kq1 = add i64 %kq, 1
  %kqc = icmp slt i64 %kq1, %kc
  br i1 %kqc, label %dq, label %dq.rest
dq.rest:
  %wdone = mul i64 %npw, {mr}
  %restm = icmp slt i64 %wdone, %mc
  br i1 %restm, label %panel, label %exit
panel:
  %ir = phi i64 [0, %entry], [%wdone, %dq.rest], [%ir1, %panel.end]
  %pbase = mul i64 %ir, %kc
  %pend = add i64 %ir, {mr}
  %pwhole = icmp sle i64 %pend, %mc
  %usev = and i1 %pwhole, %vecok
  br i1 %usev, label %vblk.pre, label %scalar
vblk.pre:
{rows}
  br label %vblk
vblk:
  %tq = phi i64 [0, %vblk.pre], [%tq1, %vblk]
  %tqm = mul i64 %tq, {mr}
  %tqb = add i64 %pbase, %tqm
{_transpose_block(mr, t, vw, 't', 'A')}
  %tq1 = add i64 %tq, {vw}
  %tqc = icmp slt i64 %tq1, %kv
  br i1 %tqc, label %vblk, label %vtail
vtail:
  %anyt = icmp slt i64 %kv, %kc
  br i1 %anyt, label %utail, label %panel.end
utail:
  %uq = phi i64 [%kv, %vtail], [%uq1, %utail]
  %uqm = mul i64 %uq, {mr}
  %uqb = add i64 %pbase, %uqm
{tail}
  %uq1 = add i64 %uq, 1
  %uqc = icmp slt i64 %uq1, %kc
  br i1 %uqc, label %utail, label %panel.end
scalar:
  br i1 %rows, label %row, label %col
row:
  %i = phi i64 [0, %scalar], [%i1, %row.end]
  %gi = add i64 %ir, %i
  %valid = icmp slt i64 %gi, %mc
  %arow = mul i64 %gi, %rsa
  %bi0 = add i64 %pbase, %i
  br i1 %valid, label %rq, label %zq
rq:
  %q = phi i64 [0, %row], [%q1, %rq]
  %aq = add i64 %arow, %q
  %ap = getelementptr {t}, ptr %A, i64 %aq
  %av = load {t}, ptr %ap
  %qo = mul i64 %q, {mr}
  %bq = add i64 %bi0, %qo
  %bp = getelementptr {t}, ptr %buf, i64 %bq
  store {t} %av, ptr %bp
  %q1 = add i64 %q, 1
  %qm = icmp slt i64 %q1, %kc
  br i1 %qm, label %rq, label %row.end
zq:
  %z = phi i64 [0, %row], [%z1, %zq]
  %zo = mul i64 %z, {mr}
  %bz = add i64 %bi0, %zo
  %zp = getelementptr {t}, ptr %buf, i64 %bz
  store {t} 0.0, ptr %zp
  %z1 = add i64 %z, 1
  %zm = icmp slt i64 %z1, %kc
  br i1 %zm, label %zq, label %row.end
row.end:
  %i1 = add i64 %i, 1
  %im = icmp slt i64 %i1, {mr}
  br i1 %im, label %row, label %panel.end
col:
  %cq = phi i64 [0, %scalar], [%cq1, %col.end]
  %cqa = mul i64 %cq, %csa
  %cqb0 = mul i64 %cq, {mr}
  %cqb = add i64 %pbase, %cqb0
  br label %ci
ci:
  %j = phi i64 [0, %col], [%j1, %ci.next]
  %gj = add i64 %ir, %j
  %cvalid = icmp slt i64 %gj, %mc
  br i1 %cvalid, label %cload, label %ci.next
cload:
  %cja = mul i64 %gj, %rsa
  %cjq = add i64 %cja, %cqa
  %cap = getelementptr {t}, ptr %A, i64 %cjq
  %cav = load {t}, ptr %cap
  br label %ci.next
ci.next:
  %cv = phi {t} [%cav, %cload], [0.0, %ci]
  %cbj = add i64 %cqb, %j
  %cbp = getelementptr {t}, ptr %buf, i64 %cbj
  store {t} %cv, ptr %cbp
  %j1 = add i64 %j, 1
  %jm = icmp slt i64 %j1, {mr}
  br i1 %jm, label %ci, label %col.end
col.end:
  %cq1 = add i64 %cq, 1
  %cqm = icmp slt i64 %cq1, %kc
  br i1 %cqm, label %col, label %panel.end
panel.end:
  %ir1 = add i64 %ir, {mr}
  %irm = icmp slt i64 %ir1, %mc
  br i1 %irm, label %panel, label %exit
exit:
  ret void
}}"""


def _pack_b(p: Params, t: str, vw: int) -> str:
    """pack_b(B, rsb, csb, bbuf, kc, nc): bbuf[jr/NR][q][j] = B[q, jr+j], columns past
    nc zero. Whole panels of row-contiguous B (csb = 1) move as NV vectors per row;
    whole panels of a transposed view (rsb = 1) in NR x VW blocks (_transpose_block)
    and a tail of rows; the rest element by element, down the columns."""
    nv, nr = p.nv, p.nv * vw
    v = f"<{vw} x {t}>"
    esz = 4 if t == "float" else 8
    vec = []
    for k in range(nv):
        vec += [f"  %vs{k} = add i64 %vsrc, {k * vw}",
                f"  %vsp{k} = getelementptr {t}, ptr %B, i64 %vs{k}",
                f"  %vv{k} = load {v}, ptr %vsp{k}, align {esz}",
                f"  %vd{k} = add i64 %vdst, {k * vw}",
                f"  %vdp{k} = getelementptr {t}, ptr %buf, i64 %vd{k}",
                f"  store {v} %vv{k}, ptr %vdp{k}, align {vw * esz}"]
    vec = "\n".join(vec)
    cols = "\n".join(f"  %xrow{j}a = add i64 %jr, {j}\n  %xrow{j} = mul i64 %xrow{j}a, %csb"
                     for j in range(nr))
    tail = "\n".join(
        f"  %yr{j} = add i64 %xrow{j}, %yq\n"
        f"  %yp{j} = getelementptr {t}, ptr %B, i64 %yr{j}\n"
        f"  %yv{j} = load {t}, ptr %yp{j}\n"
        f"  %yb{j} = add i64 %yqb, {j}\n"
        f"  %yd{j} = getelementptr {t}, ptr %buf, i64 %yb{j}\n"
        f"  store {t} %yv{j}, ptr %yd{j}" for j in range(nr))
    return f"""
define internal void @pack_b(ptr %B, i64 %rsb, i64 %csb, ptr %buf, i64 %kc, i64 %nc) {{
entry:
  %unit = icmp eq i64 %csb, 1
  %tr = icmp eq i64 %rsb, 1
  %kv = and i64 %kc, {-vw}
  %hasv = icmp sgt i64 %kv, 0
  %trv = and i1 %tr, %hasv
  br label %panel
panel:
  %jr = phi i64 [0, %entry], [%jr1, %panel.end]
  %pbase = mul i64 %jr, %kc
  %jend = add i64 %jr, {nr}
  %whole = icmp sle i64 %jend, %nc
  %vecrows = and i1 %whole, %unit
  br i1 %vecrows, label %vrow, label %notrow
notrow:
  %tblk = and i1 %whole, %trv
  br i1 %tblk, label %xblk.pre, label %col
xblk.pre:
{cols}
  br label %xblk
xblk:
  %xq = phi i64 [0, %xblk.pre], [%xq1, %xblk]
  %xqm = mul i64 %xq, {nr}
  %xqb = add i64 %pbase, %xqm
{_transpose_block(nr, t, vw, 'x', 'B')}
  %xq1 = add i64 %xq, {vw}
  %xqc = icmp slt i64 %xq1, %kv
  br i1 %xqc, label %xblk, label %xtail
xtail:
  %anyx = icmp slt i64 %kv, %kc
  br i1 %anyx, label %ytail, label %panel.end
ytail:
  %yq = phi i64 [%kv, %xtail], [%yq1, %ytail]
  %yqm = mul i64 %yq, {nr}
  %yqb = add i64 %pbase, %yqm
{tail}
  %yq1 = add i64 %yq, 1
  %yqc = icmp slt i64 %yq1, %kc
  br i1 %yqc, label %ytail, label %panel.end
vrow:
  %vq = phi i64 [0, %panel], [%vq1, %vrow]
  %vqr = mul i64 %vq, %rsb
  %vsrc = add i64 %vqr, %jr
  %vqo = mul i64 %vq, {nr}
  %vdst = add i64 %pbase, %vqo
{vec}
  %vq1 = add i64 %vq, 1
  %vqm = icmp slt i64 %vq1, %kc
  br i1 %vqm, label %vrow, label %panel.end
col:
  %j = phi i64 [0, %notrow], [%j1, %col.end]
  %gj = add i64 %jr, %j
  %valid = icmp slt i64 %gj, %nc
  %bcol = mul i64 %gj, %csb
  %dcol = add i64 %pbase, %j
  br label %cq
cq:
  %q = phi i64 [0, %col], [%q1, %cq.next]
  br i1 %valid, label %cload, label %cq.next
cload:
  %qr = mul i64 %q, %rsb
  %src = add i64 %qr, %bcol
  %sp = getelementptr {t}, ptr %B, i64 %src
  %sv = load {t}, ptr %sp
  br label %cq.next
cq.next:
  %val = phi {t} [%sv, %cload], [0.0, %cq]
  %qo = mul i64 %q, {nr}
  %dst = add i64 %dcol, %qo
  %dp = getelementptr {t}, ptr %buf, i64 %dst
  store {t} %val, ptr %dp
  %q1 = add i64 %q, 1
  %qm = icmp slt i64 %q1, %kc
  br i1 %qm, label %cq, label %col.end
col.end:
  %j1 = add i64 %j, 1
  %jm = icmp slt i64 %j1, {nr}
  br i1 %jm, label %col, label %panel.end
panel.end:
  %jr1 = add i64 %jr, {nr}
  %jrm = icmp slt i64 %jr1, %nc
  br i1 %jrm, label %panel, label %exit
exit:
  ret void
}}"""


def _driver(p: Params, t: str, vw: int) -> str:
    mr, nr = p.mr, p.nv * vw
    return f"""
define void @gemm(ptr %A, i64 %rsa, i64 %csa, ptr %B, i64 %rsb, i64 %csb, ptr %C, i64 %ldc,
                  i64 %M, i64 %N, i64 %K, ptr %abuf, ptr %bbuf, i64 %Q, i64 %U,
                  i64 %pre) {{
entry:
  %preb = and i64 %pre, 1
  %packed = icmp ne i64 %preb, 0
  %prea = and i64 %pre, 2
  %apacked = icmp ne i64 %prea, 0
  %mrr = add i64 %M, {mr - 1}
  %mrd = udiv i64 %mrr, {mr}
  %mp = mul i64 %mrd, {mr}
  br label %jc.head
jc.head:
  %jc = phi i64 [0, %entry], [%jc1, %jc.end]
  %nleft = sub i64 %N, %jc
  %nlt = icmp slt i64 %nleft, {p.nc}
  %nc = select i1 %nlt, i64 %nleft, i64 {p.nc}
  br label %pc.head
pc.head:
  %pc = phi i64 [0, %jc.head], [%pc1, %pc.end]
  %kleft = sub i64 %K, %pc
  %kc = call i64 @kcut(i64 %kleft, i64 %Q, i64 %U)
  %first = icmp eq i64 %pc, 0
  br i1 %packed, label %pc.pre, label %pc.pack
pc.pack:
  %bq = mul i64 %pc, %rsb
  %bj = mul i64 %jc, %csb
  %bo = add i64 %bq, %bj
  %bsrc = getelementptr {t}, ptr %B, i64 %bo
  call void @pack_b(ptr %bsrc, i64 %rsb, i64 %csb, ptr %bbuf, i64 %kc, i64 %nc)
  br label %ic.start
pc.pre:
  %bslab = call ptr @b_slab(ptr %bbuf, i64 %jc, i64 %pc, i64 %K, i64 %nc)
  br label %ic.start
ic.start:
  %bb = phi ptr [%bbuf, %pc.pack], [%bslab, %pc.pre]
  br label %ic.head
ic.head:
  %ic = phi i64 [0, %ic.start], [%ic1, %ic.end]
  %mleft = sub i64 %M, %ic
  %mlt = icmp slt i64 %mleft, {p.mc}
  %mc = select i1 %mlt, i64 %mleft, i64 {p.mc}
  br i1 %apacked, label %ic.pre, label %ic.pack
ic.pack:
  %ai = mul i64 %ic, %rsa
  %aq = mul i64 %pc, %csa
  %ao = add i64 %ai, %aq
  %asrc = getelementptr {t}, ptr %A, i64 %ao
  call void @pack_a(ptr %asrc, i64 %rsa, i64 %csa, ptr %abuf, i64 %mc, i64 %kc)
  br label %ic.go
ic.pre:
  %aslab = call ptr @a_slab(ptr %abuf, i64 %ic, i64 %pc, i64 %mp, i64 %kc)
  br label %ic.go
ic.go:
  %ab = phi ptr [%abuf, %ic.pack], [%aslab, %ic.pre]
  %crow = mul i64 %ic, %ldc
  %cblk = add i64 %crow, %jc
  br label %jr.head
jr.head:
  %jr = phi i64 [0, %ic.go], [%jr1, %jr.end]
  %nrleft = sub i64 %nc, %jr
  %nrlt = icmp slt i64 %nrleft, {nr}
  %nr = select i1 %nrlt, i64 %nrleft, i64 {nr}
  %bpo = mul i64 %jr, %kc
  %bpanel = getelementptr {t}, ptr %bb, i64 %bpo
  br label %ir.head
ir.head:
  %ir = phi i64 [0, %jr.head], [%ir1, %ir.head]
  %mrleft = sub i64 %mc, %ir
  %mrlt = icmp slt i64 %mrleft, {mr}
  %mr = select i1 %mrlt, i64 %mrleft, i64 {mr}
  %apo = mul i64 %ir, %kc
  %apanel = getelementptr {t}, ptr %ab, i64 %apo
  %cr = mul i64 %ir, %ldc
  %cc = add i64 %cr, %jr
  %ct = add i64 %cblk, %cc
  %ctile = getelementptr {t}, ptr %C, i64 %ct
  call void @ukernel(i64 %kc, ptr %apanel, ptr %bpanel, ptr %ctile, i64 %ldc, i1 %first,
                     i64 %mr, i64 %nr)
  %ir1 = add i64 %ir, {mr}
  %irm = icmp slt i64 %ir1, %mc
  br i1 %irm, label %ir.head, label %jr.end
jr.end:
  %jr1 = add i64 %jr, {nr}
  %jrm = icmp slt i64 %jr1, %nc
  br i1 %jrm, label %jr.head, label %ic.end
ic.end:
  %ic1 = add i64 %ic, {p.mc}
  %icm = icmp slt i64 %ic1, %M
  br i1 %icm, label %ic.head, label %pc.end
pc.end:
  %pc1 = add i64 %pc, %kc
  %pcm = icmp slt i64 %pc1, %K
  br i1 %pcm, label %pc.head, label %jc.end
jc.end:
  %jc1 = add i64 %jc, {p.nc}
  %jcm = icmp slt i64 %jc1, %N
  br i1 %jcm, label %jc.head, label %exit
exit:
  ret void
}}

; The size of the next K block with `kleft` left (Params.kround): one rule for the
; driver and pack_all_b.
define internal i64 @kcut(i64 %kleft, i64 %Q, i64 %U) alwaysinline {{
entry:
  %Q2 = shl i64 %Q, 1
  %ktwo = icmp sge i64 %kleft, %Q2
  %kover = icmp sgt i64 %kleft, %Q
  %khalf = lshr i64 %kleft, 1
  %U1 = sub i64 %U, 1
  %khu = add i64 %khalf, %U1
  %khd = udiv i64 %khu, %U
  %khr = mul i64 %khd, %U
  %kmid = select i1 %kover, i64 %khr, i64 %kleft
  %kc = select i1 %ktwo, i64 %Q, i64 %kmid
  ret i64 %kc
}}

; Where the packed slab of B's rows [pc, pc + kc) and columns [jc, jc + nc) is in a
; buffer holding all of B packed (pack_all_b): the slabs of a column block follow each
; other, each ceil(nc / NR) panels of kc rows.
define internal ptr @b_slab(ptr %buf, i64 %jc, i64 %pc, i64 %K, i64 %nc) alwaysinline {{
entry:
  %ncr = add i64 %nc, {nr - 1}
  %ncd = udiv i64 %ncr, {nr}
  %ncp = mul i64 %ncd, {nr}
  %jo = mul i64 %jc, %K
  %po = mul i64 %pc, %ncp
  %o = add i64 %jo, %po
  %p = getelementptr {t}, ptr %buf, i64 %o
  ret ptr %p
}}

; B's columns [n0, n1) packed into buf, where all of B packed (ceil(N / NR) * NR * K
; elements) has them, in the driver's blocks: gemm with pre = 1 then reads it instead of
; packing B again -- a product cut into blocks of rows (blas_blocks.py) packs B once
; instead of once per block, its columns' panels shared out among the threads (n0 a
; multiple of NR, n1 too or N).
define void @pack_all_b(ptr %B, i64 %rsb, i64 %csb, ptr %buf, i64 %N, i64 %K, i64 %Q,
                        i64 %U, i64 %n0, i64 %n1) {{
entry:
  br label %jc.head
jc.head:
  %jc = phi i64 [0, %entry], [%jc1, %jc.end]
  %nleft = sub i64 %N, %jc
  %nlt = icmp slt i64 %nleft, {p.nc}
  %nc = select i1 %nlt, i64 %nleft, i64 {p.nc}
  %jend = add i64 %jc, %nc
  %lo0 = icmp sgt i64 %n0, %jc
  %lo = select i1 %lo0, i64 %n0, i64 %jc
  %hi0 = icmp slt i64 %n1, %jend
  %hi = select i1 %hi0, i64 %n1, i64 %jend
  %some = icmp slt i64 %lo, %hi
  br i1 %some, label %pc.start, label %jc.end
pc.start:
  %cols = sub i64 %hi, %lo
  %skip = sub i64 %lo, %jc
  br label %pc.head
pc.head:
  %pc = phi i64 [0, %pc.start], [%pc1, %pc.head]
  %kleft = sub i64 %K, %pc
  %kc = call i64 @kcut(i64 %kleft, i64 %Q, i64 %U)
  %bq = mul i64 %pc, %rsb
  %bj = mul i64 %lo, %csb
  %bo = add i64 %bq, %bj
  %bsrc = getelementptr {t}, ptr %B, i64 %bo
  %slab = call ptr @b_slab(ptr %buf, i64 %jc, i64 %pc, i64 %K, i64 %nc)
  %po = mul i64 %skip, %kc
  %dst = getelementptr {t}, ptr %slab, i64 %po
  call void @pack_b(ptr %bsrc, i64 %rsb, i64 %csb, ptr %dst, i64 %kc, i64 %cols)
  %pc1 = add i64 %pc, %kc
  %pcm = icmp slt i64 %pc1, %K
  br i1 %pcm, label %pc.head, label %jc.end
jc.end:
  %jc1 = add i64 %jc, {p.nc}
  %jcm = icmp slt i64 %jc1, %N
  br i1 %jcm, label %jc.head, label %exit
exit:
  ret void
}}

; Where the packed slab of A's rows [ic, ic + mc) and columns [pc, pc + kc) is in a
; buffer holding all of A packed (pack_all_a): the K blocks follow each other, each
; `mp` (M rounded up to MR) rows of kc, its row blocks kc-long MR-row panels in order.
define internal ptr @a_slab(ptr %buf, i64 %ic, i64 %pc, i64 %mp, i64 %kc) alwaysinline {{
entry:
  %ko = mul i64 %pc, %mp
  %io = mul i64 %ic, %kc
  %o = add i64 %ko, %io
  %p = getelementptr {t}, ptr %buf, i64 %o
  ret ptr %p
}}

; A's rows [m0, m1) packed into buf, where all of A packed (ceil(M / MR) * MR * K
; elements) has them, in the driver's blocks: gemm with pre = 2 then reads it instead of
; packing A again -- a product cut into blocks of columns packs A once instead of once
; per block, its rows' panels shared out among the threads (m0 a multiple of MR, m1 too
; or M).
define void @pack_all_a(ptr %A, i64 %rsa, i64 %csa, ptr %buf, i64 %M, i64 %K, i64 %Q,
                        i64 %U, i64 %m0, i64 %m1) {{
entry:
  %mrr = add i64 %M, {p.mr - 1}
  %mrd = udiv i64 %mrr, {p.mr}
  %mp = mul i64 %mrd, {p.mr}
  br label %pc.head
pc.head:
  %pc = phi i64 [0, %entry], [%pc1, %pc.end]
  %kleft = sub i64 %K, %pc
  %kc = call i64 @kcut(i64 %kleft, i64 %Q, i64 %U)
  br label %ic.head
ic.head:
  %ic = phi i64 [0, %pc.head], [%ic1, %ic.end]
  %mleft = sub i64 %M, %ic
  %mlt = icmp slt i64 %mleft, {p.mc}
  %mc = select i1 %mlt, i64 %mleft, i64 {p.mc}
  %iend = add i64 %ic, %mc
  %lo0 = icmp sgt i64 %m0, %ic
  %lo = select i1 %lo0, i64 %m0, i64 %ic
  %hi0 = icmp slt i64 %m1, %iend
  %hi = select i1 %hi0, i64 %m1, i64 %iend
  %some = icmp slt i64 %lo, %hi
  br i1 %some, label %ic.pack, label %ic.end
ic.pack:
  %rows = sub i64 %hi, %lo
  %skip = sub i64 %lo, %ic
  %ai = mul i64 %lo, %rsa
  %aq = mul i64 %pc, %csa
  %ao = add i64 %ai, %aq
  %asrc = getelementptr {t}, ptr %A, i64 %ao
  %slab = call ptr @a_slab(ptr %buf, i64 %ic, i64 %pc, i64 %mp, i64 %kc)
  %po = mul i64 %skip, %kc
  %dst = getelementptr {t}, ptr %slab, i64 %po
  call void @pack_a(ptr %asrc, i64 %rsa, i64 %csa, ptr %dst, i64 %rows, i64 %kc)
  br label %ic.end
ic.end:
  %ic1 = add i64 %ic, {p.mc}
  %icm = icmp slt i64 %ic1, %M
  br i1 %icm, label %ic.head, label %pc.end
pc.end:
  %pc1 = add i64 %pc, %kc
  %pcm = icmp slt i64 %pc1, %K
  br i1 %pcm, label %pc.head, label %exit
exit:
  ret void
}}"""


def fitted(params: Params, vw: int) -> Params:
    """params with NC rounded down to a whole number of NR = NV * VW column panels: the
    same NC does not divide into the panels of every vector width (4080 is 255 AVX2
    panels of 16 f32 columns, 127.5 AVX-512 panels of 32)."""
    nr = params.nv * vw
    return replace(params, nc=max(params.nc // nr, 1) * nr)


def ir_text(dtype=np.float32, params: Params = DEFAULT, vw: int | None = None) -> str:
    """The module for `dtype` and vectors of vw elements (default: the host's); NC is
    fitted to the panels first."""
    t, short, _ = _TYPES[np.dtype(dtype)]
    vw = vw or vector_lanes(dtype)
    if params.mc % params.mr:
        raise ValueError("MC must be a multiple of MR")
    params = fitted(params, vw)
    v = f"<{vw} x {t}>"
    return "\n".join([
        _micro(params, t, vw), _pack_a(params, t, vw), _pack_b(params, t, vw),
        _driver(params, t, vw),
        f"declare {v} @llvm.fma.v{vw}{short}({v}, {v}, {v})",
        "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
        "!0 = distinct !{!0, !1}",
        f'!1 = !{{!"llvm.loop.unroll.count", i32 {params.unroll}}}', ""])


def kernel(dtype=np.float32, params: Params = DEFAULT):
    """(gemm compiled for `dtype` on this host, its vector lanes): once per process,
    from the kernel cache when it is there. Reading the host's features costs ~0.5 ms
    (llvmlite formats the feature string), so the lanes are kept with the code."""
    got = _compiled(np.dtype(dtype), params)
    return got[0], got[1]


def built(dtype=np.float32, params: Params = DEFAULT) -> bool | None:
    """Whether kernel(dtype, params) is loaded: True; False while it is being built on a
    thread of its own, which the first call that finds it missing starts; None when that
    build failed. A product asks this instead of building the kernel itself: into a cold
    kernel cache the build takes ~0.9 s per dtype, a stall of the step that asked (and,
    in a job, of every rank waiting for that one at its next collective)."""
    key = (np.dtype(dtype), _uncut(params))
    if key in _loaded:
        return True
    if not threading.main_thread().is_alive():
        # At exit (an atexit handler's product: the main thread has ended): a thread
        # started now is joined by nobody, and LLVM's teardown met it mid-compile (an
        # abort after a run that succeeded). Built on the caller, as before the thread.
        _build(key, lambda: _compiled(*key))
        return True if key in _loaded else None
    with _build_lock:
        state = _builds.get(key)
        if state is None:
            _builds[key] = False
            build = in_callers_target(lambda: _compiled(*key))
            thread = threading.Thread(target=_build, args=(key, build), daemon=True,
                                      name=f"xladist gemm build {key[0]}")
            if not _build_threads:
                atexit.register(_join_builds)
            _build_threads.append(thread)
            thread.start()
            return False
    return None if isinstance(state, BaseException) else key in _loaded or False


def _join_builds() -> None:
    # At exit, a build still in LLVM would meet LLVM's own teardown (a crash at the end
    # of a run that succeeded): it is waited for, a few seconds at most.
    for thread in _build_threads:
        thread.join(timeout=30)


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: a build the parent had running
    never ends there -- built() said False forever, and the way was never offered in the
    child -- and a lock the build held stays held (kernel() waited forever). The child
    forgets the builds still running (the next product starts its own) and takes fresh
    locks."""
    global _lock, _build_lock
    _lock = threading.Lock()
    _build_lock = threading.Lock()
    for key in [k for k, state in _builds.items() if state is False and k not in _loaded]:
        del _builds[key]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _build(key, build) -> None:
    try:
        build()
    except Exception as e:  # noqa: BLE001 -- kept for built(): the way is then not offered
        with _build_lock:
            _builds[key] = e


def _packer(dtype, params: Params, operand: str = "b"):
    """pack_all_b (pack_all_a) of the kernel(dtype, params) (compiled with it)."""
    return _compiled(np.dtype(dtype), params)[3 if operand == "b" else 4]


def _uncut(params: Params) -> Params:
    """params without its cut of K: KC and KROUND are arguments of the compiled function,
    so kernels differing only in them are one (and share their packing buffers)."""
    return replace(params, kc=DEFAULT.kc, kround=DEFAULT.kround)


def _compiled(dtype: np.dtype, params: Params) -> tuple:
    """(gemm, vector lanes, code, pack_all_b, pack_all_a) for `params` as asked: looked up by them
    first, since a product's blocks ask on every call and making the normalized Params
    (dataclasses.replace) costs ~10 us."""
    got = _asked.get((dtype, params))
    if got is not None:
        return got
    key = (dtype, _uncut(params))
    with _lock:
        got = _loaded.get(key)
        if got is None:
            vw = vector_lanes(dtype)
            text = ir_text(dtype, key[1], vw)
            code, _cached = jit.get_code("xladist gemm\n" + text, lambda: text)
            # code keeps the engine alive
            got = _loaded[key] = (_FN(code.address("gemm")), vw, code,
                                  _PACK_B(code.address("pack_all_b")),
                                  _PACK_B(code.address("pack_all_a")))
        _asked[(dtype, params)] = got
    return got


def _aligned(n: int, dtype) -> np.ndarray:
    raw = np.empty(n * np.dtype(dtype).itemsize + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + n * np.dtype(dtype).itemsize].view(dtype)


def _packing_buffers(dtype, params: Params, vw: int):
    """This thread's (abuf, bbuf, their addresses), made once: a fresh 4 MiB buffer per
    call would page-fault on every call (and .ctypes.data costs ~1 us a look). Kernels
    differing only in KC and KROUND (the cuts blas_blocks's probe tries) share one pair,
    grown to the largest KC asked: a pair per cut kept 122 pairs (771 MiB of f32)
    after a probe that found none."""
    key = (dtype, params, vw)  # (vw: the panels' sizes, and so the buffers', follow it)
    bufs = getattr(_buffers, "d", None)
    if bufs is None:
        bufs = _buffers.d = {}
    got = bufs.get(key)
    if got is None:
        shared = ("shared", dtype, _uncut(params), vw)
        have = bufs.get(shared)
        if have is None or have[0] < params.kc:
            if have is not None:  # (the smaller pair goes: no entry keeps it alive)
                for old in [k for k, v in bufs.items() if v is have[1]]:
                    del bufs[old]
            fit = fitted(params, vw)
            nr = fit.nv * vw
            a = _aligned(-(-fit.mc // fit.mr) * fit.mr * fit.kc, dtype)
            b = _aligned(-(-fit.nc // nr) * nr * fit.kc, dtype)
            have = bufs[shared] = (params.kc, (a, b, a.ctypes.data, b.ctypes.data))
        got = bufs[key] = have[1]
    return got


def _strides(x: np.ndarray) -> tuple[int, int]:
    return x.strides[0] // x.itemsize, x.strides[1] // x.itemsize


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
           params: Params = DEFAULT) -> np.ndarray:
    """a [M, K] @ b [K, N] -> [M, N] (f32 or f64; a and b may be any strided views
    whose strides are whole elements, e.g. transposes); into `out` when given (that
    shape and dtype, its rows contiguous: a C-contiguous array or a slice of its columns)."""
    dtype = np.result_type(a, b)
    if dtype not in _TYPES or a.dtype != dtype or b.dtype != dtype:
        raise TypeError(f"gemm_kernel.matmul takes two f32 or two f64 arrays, not "
                        f"{a.dtype} and {b.dtype}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"shapes {a.shape} and {b.shape} do not multiply")
    (m, k), n = a.shape, b.shape[1]
    if out is None:
        out = np.empty((m, n), dtype)
    elif out.shape != (m, n) or out.dtype != dtype or out.strides[1] != out.itemsize and \
            n > 1 or out.strides[0] % out.itemsize or out.strides[0] < n * out.itemsize:
        raise ValueError("out must be of the product's shape and dtype, with contiguous "
                         "rows")
    if m == 0 or n == 0:
        return out
    if k == 0:
        out.fill(0)
        return out
    if any(s % a.itemsize for s in a.strides + b.strides):
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    fn, vw = kernel(dtype, params)
    _, _, abuf, bbuf = _packing_buffers(dtype, params, vw)
    fn(a.ctypes.data, *_strides(a), b.ctypes.data, *_strides(b), out.ctypes.data,
       out.strides[0] // out.itemsize, m, n, k, abuf, bbuf, params.kc, params.kround, 0)
    return out


class ProductBlocks(NamedTuple):
    """A product's work for its fixed blocks (product_blocks): first `pack` over B's
    `panels` column panels (A's row panels for blocks of columns), when it is not None,
    then `compute` over the blocks; each is
    fn(_, lo, hi) over any partition of its units, run in any order and on any threads."""

    pack: Callable | None
    panels: int
    compute: Callable


def product_blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray, axis: int,
                   params: Params = DEFAULT) -> ProductBlocks:
    """The kernel's calls for a product cut in fixed blocks (blas_blocks.py): compute(_,
    lo, hi) gives out[lo:hi] = a[lo:hi] @ b (axis 0) or out[:, lo:hi] = a @ b[:, lo:hi]
    (axis 1), the operands' addresses and strides read once. Blocks of rows all read
    all of B, so it is packed once for them first (pack; the kernel's four blocks of
    1024^3 f32 took 21.7 ms of CPU packing B in each, against 19.9 ms for one call),
    into the calling thread's buffer, while it is not larger than PACKED_MAX_BYTES
    packed; blocks of columns all read all of A, packed once for them the same way. a and b: f32 or f64 of one dtype, strides whole elements;
    out: rows contiguous; k > 0. The calls hold the arrays' addresses, not the arrays: a, b
    and out must outlive them."""
    if any(s % a.itemsize for s in a.strides + b.strides + out.strides):
        raise ValueError("product_blocks reads strides in whole elements")
    fn, vw = kernel(a.dtype, params)
    it, dtype = a.itemsize, a.dtype
    (m, k), n = a.shape, b.shape[1]
    (rsa, csa), (rsb, csb), ldc = _strides(a), _strides(b), out.strides[0] // it
    pa, pb, pc = (x.__array_interface__["data"][0] for x in (a, b, out))
    q, u = params.kc, params.kround
    nr = params.nv * vw
    panels = -(-n // nr)
    if axis == 0 and panels * nr * k * it <= PACKED_MAX_BYTES:
        packed, packer = _packed_buffer(dtype, panels * nr * k, "b"), _packer(dtype, params)

        def pack(_, lo, hi):
            packer(pb, rsb, csb, packed, n, k, q, u, lo * nr, min(hi * nr, n))

        def rows_packed(_, lo, hi):
            abuf = _packing_buffers(dtype, params, vw)[2]
            fn(pa + lo * rsa * it, rsa, csa, pb, rsb, csb, pc + lo * ldc * it, ldc,
               hi - lo, n, k, abuf, packed, q, u, 1)
        return ProductBlocks(pack, panels, rows_packed)
    mr = params.mr
    tiles = -(-m // mr)
    if axis == 1 and tiles * mr * k * it <= PACKED_MAX_BYTES:
        # The mirror for blocks of columns, which all read all of A.
        packed_a = _packed_buffer(dtype, tiles * mr * k, "a")
        packer_a = _packer(dtype, params, "a")

        def pack_a(_, lo, hi):
            packer_a(pa, rsa, csa, packed_a, m, k, q, u, lo * mr, min(hi * mr, m))

        def columns_packed(_, lo, hi):
            bbuf = _packing_buffers(dtype, params, vw)[3]
            fn(pa, rsa, csa, pb + lo * csb * it, rsb, csb, pc + lo * it, ldc,
               m, hi - lo, k, packed_a, bbuf, q, u, 2)
        return ProductBlocks(pack_a, tiles, columns_packed)

    def rows(_, lo, hi):
        _, _, abuf, bbuf = _packing_buffers(dtype, params, vw)
        fn(pa + lo * rsa * it, rsa, csa, pb, rsb, csb, pc + lo * ldc * it, ldc,
           hi - lo, n, k, abuf, bbuf, q, u, 0)

    def columns(_, lo, hi):
        _, _, abuf, bbuf = _packing_buffers(dtype, params, vw)
        fn(pa, rsa, csa, pb + lo * csb * it, rsb, csb, pc + lo * it, ldc,
           m, hi - lo, k, abuf, bbuf, q, u, 0)
    return ProductBlocks(None, 0, rows if axis == 0 else columns)


# Blocks of the kernel's own cut per thread (thread_blocks). Two, not one: beside one busy
# process per core the call waited for a descheduled partner's one block (matmul 1024 f32,
# 2 threads, forced, interleaved medians of 15, two runs on a quiet host: 2 column blocks
# 29.9-31.5 ms, 4 column blocks 24.0-24.2, OpenBLAS's 4 row blocks 30.8-31.5, numpy
# 27.9-31.7); quiet, 4 column blocks 11.7-12.1 ms, 2 11.6-11.7, the 4 row blocks
# 12.1-12.3, numpy 12.8-13.2. A third run in a noisier hour (order shuffled per round,
# every side ~25% slower): quiet 15.3-15.7 / 15.1-15.2 / 15.8-15.9 / 16.4-17.2 ms, loaded
# 28.6 / 30.8 / 29.2 / 34.0: never slower than the row blocks, often faster.
BLOCKS_PER_THREAD = 2


def thread_blocks(m: int, n: int, threads: int, dtype, params: Params = DEFAULT):
    """The kernel's own (axis, blocks) of an m x n result on `threads` threads, for
    product_blocks: BLOCKS_PER_THREAD per thread, of whole NR-column panels where the
    result is at least as wide as tall -- each block then packs its own columns of B as
    it goes, and the call is one hand-off to the pool -- else of whole MR-row tiles, B
    packed once for them first. Every element is computed as in one call of the whole
    product (the cut of K is params'), so the blocks change no bit; the bits check runs
    these blocks all the same (blas_blocks._kernel_agrees)."""
    axis, units = (1, n) if n >= m else (0, m)
    unit = params.nv * vector_lanes(dtype) if axis else params.mr
    pieces = threads * BLOCKS_PER_THREAD if threads > 1 else 1
    share = -(-units // pieces)
    per = max(unit, -(-share // unit) * unit)  # the share in whole panels or tiles
    return axis, [(lo, min(lo + per, units)) for lo in range(0, units, per)]


# B (A) packed whole for a product's blocks of rows (columns) up to this size (product_blocks);
# beyond, each block packs its slabs into its thread's buffer as it goes.
PACKED_MAX_BYTES = 64 << 20


def _packed_buffer(dtype, elements: int, operand: str) -> int:
    """The address of this thread's buffer for B (operand "b") or A ("a") packed whole,
    of at least `elements` (kept, and grown when a larger product comes: a fresh one per
    call would page-fault every call)."""
    have = getattr(_buffers, "packed_" + operand, None)
    nbytes = elements * np.dtype(dtype).itemsize
    if have is None or have[0].nbytes < nbytes:
        buf = _aligned(nbytes, np.uint8)
        have = (buf, buf.ctypes.data)
        setattr(_buffers, "packed_" + operand, have)
    return have[1]


def available() -> bool:
    return vector_bytes() is not None


__all__ = ["Params", "DEFAULT", "available", "built", "product_blocks", "ProductBlocks", "fitted", "ir_text", "k_blocks",
           "kernel", "matmul", "thread_blocks",
           "vector_bytes", "vector_lanes"]
