"""Dots inside native while loops: the BLAS call numpy's matmul would make, from native code.

On the Python path a 2-D dot is a library thunk: library/core.py dot_into hands numpy's matmul
(possibly transposed) views of the operands, and numpy calls its bundled OpenBLAS
(cblas_?gemm, or cblas_?syrk for a matrix times its own transpose). A native loop
(native/loop.py) makes that same call itself, so results are the same bits:

  * DotStep.plan mirrors dot_into and numpy's matmul (numpy/_core/src/umath/matmul.c.src,
    matmul_matrixmatrix) on the shapes and layouts: which operand is BLAS's A and B, the
    transposition flags and leading dimensions. Only what is one BLAS call there is
    eligible: a 2-D f32/f64 product, every dimension >= 2 (numpy takes gemv/dot paths for
    a vector), no batch dimensions, operands and result in one of the two 2-D layouts, not
    split into blocks (blas_blocks.gemm_split: a split product makes several calls on the
    pool; it keeps the Python path).
  * numpy picks syrk when both operands are the same memory (a runtime fact: two carry
    leaves may start as one array), so the driver compares the two pointers, as numpy
    does, and then calls syrk and copies the upper triangle down, as numpy does.
  * The functions are numpy's OpenBLAS's, found at run time (`blas_functions`: the
    library in /proc/self/maps that lives in numpy's wheel, as parallel.py finds
    openblas_set_num_threads) and handed to the driver through the loop's table, so the
    compiled object gains no undefined symbol (runtime_symbols.py). A machine whose numpy
    uses another BLAS (or none we can find) gets None: the loop keeps the Python path.
    ILP64 builds (numpy's wheels: `scipy_cblas_sgemm64_`) take 64-bit integers, LP64
    builds 32-bit: the table says which, and the driver has both calls.
  * OpenBLAS runs on one thread during the loop as on the Python path: ranks set it for
    good (parallel.sync_blas), an executable's run inside parallel.blas_scope (the loop's
    dot is a library thunk of the program, so `uses_blas` holds).
"""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache

import numpy as np
from llvmlite import ir

from ..blas_blocks import gemm_split
from ..codegen.ir_array import c64, layout_of
from ..codegen.loops import for_range
from ..codegen.types import I32, I64, PTR, VOID
from ..thunks import LibraryThunk

ROW_MAJOR, NO_TRANS, TRANS, UPPER = 101, 111, 112, 121
_TYPES = {"f32": ("s", ir.FloatType(), np.float32), "f64": ("d", ir.DoubleType(), np.float64)}


class Blas:
    """numpy's OpenBLAS as the driver calls it: function addresses and integer width."""

    def __init__(self, lib, pre: str, suf: str, path: str):
        self.path = path
        self.wide = suf.startswith("64")  # ILP64: blasint is int64
        self.fns = {}
        for p in "sd":
            for name in ("gemm", "syrk"):
                f = getattr(lib, f"{pre}cblas_{p}{name}{suf}")
                self.fns[p + name] = ctypes.cast(f, ctypes.c_void_p).value


def _numpy_openblas():
    """(lib, prefix, suffix, path) of the OpenBLAS inside numpy's wheel, or None."""
    import numpy

    from .. import parallel
    home = os.path.dirname(os.path.dirname(os.path.abspath(numpy.__file__)))
    for lib, pre, suf, path in parallel._openblas_libs():
        if os.path.abspath(path).startswith(os.path.join(home, "numpy")):
            return lib, pre, suf, path
    return None


@lru_cache(maxsize=1)
def blas_functions() -> Blas | None:
    """numpy's cblas_?gemm / cblas_?syrk, checked once against np.matmul on a small product
    (the same bits, or this machine's numpy calls something else); None when not found."""
    np.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))  # loads numpy's BLAS
    found = _numpy_openblas()
    if found is None:
        return None
    try:
        blas = Blas(*found)
    except AttributeError:  # an OpenBLAS without CBLAS, or other symbol names
        return None
    return blas if _agrees(blas) else None


def _agrees(blas: Blas) -> bool:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 5)).astype(np.float32)
    b = rng.normal(size=(5, 6)).astype(np.float32)
    want = np.matmul(a, b)
    got = np.empty((7, 6), np.float32)
    it = ctypes.c_int64 if blas.wide else ctypes.c_int
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, it, it, it,
                          ctypes.c_float, ctypes.c_void_p, it, ctypes.c_void_p, it,
                          ctypes.c_float, ctypes.c_void_p, it)(blas.fns["sgemm"])
    fn(ROW_MAJOR, NO_TRANS, NO_TRANS, 7, 6, 5, 1.0, a.ctypes.data, 5, b.ctypes.data, 6, 0.0,
       got.ctypes.data, 6)
    return got.tobytes() == want.tobytes()


def _strides(shape) -> tuple[int, int]:
    """Element strides of a 2-D array's logical dimensions in its layout."""
    minor = layout_of(shape)[0]
    return (shape.dims[1], 1) if minor == 1 else (1, shape.dims[0])


def _blasable(s_outer: int, s_inner: int, inner: int) -> bool:
    """numpy's is_blasable2d in elements: unit inner stride, leading dimension >= inner."""
    return s_inner == 1 and s_outer >= inner


class DotPlan:
    """The one BLAS call numpy makes for a dot (see the module docstring); `swap`: BLAS's A
    is the dot's rhs (a column-major result: (A B)^T = B^T A^T, as dot_into does)."""

    def __init__(self, prefix, ftype, swap, m, n, k, sa, sb, ldc):
        self.prefix, self.ftype, self.swap = prefix, ftype, swap
        self.m, self.n, self.k, self.ldc = m, n, k, ldc
        (sam, sak), (sbk, sbn) = sa, sb
        # matmul_matrixmatrix: A is m x k with strides sa, B is k x n with strides sb.
        self.ta, self.lda = (NO_TRANS, sam) if _blasable(sam, sak, k) else (TRANS, sak)
        self.tb, self.ldb = (NO_TRANS, sbk) if _blasable(sbk, sbn, n) else (TRANS, sbn)
        # numpy's syrk test, less the pointer equality the driver checks.
        self.syrk = m == n and sam == sbn and sak == sbk and self.ta != self.tb


def plan(instr) -> DotPlan | None:
    if instr.opcode != "dot" or len(instr.operands) != 2:
        return None
    lhs, rhs, out = instr.operands[0].shape, instr.operands[1].shape, instr.shape
    a = instr.attrs
    if not (lhs.is_array and rhs.is_array and out.is_array) or \
            lhs.rank != 2 or rhs.rank != 2 or out.rank != 2:
        return None
    if any(lhs.dynamic) or any(rhs.dynamic) or any(out.dynamic):
        return None
    lb, lc = list(a.get("lhs_batch_dims", ()) or ()), list(a.get("lhs_contracting_dims", ()) or ())
    rb, rc = list(a.get("rhs_batch_dims", ()) or ()), list(a.get("rhs_contracting_dims", ()) or ())
    t = out.element_type.name
    if lb or rb or len(lc) != 1 or len(rc) != 1 or t not in _TYPES or \
            lhs.element_type.name != t or rhs.element_type.name != t:
        return None
    lf, rf = 1 - lc[0], 1 - rc[0]
    m, k, n = lhs.dims[lf], lhs.dims[lc[0]], rhs.dims[rf]
    if min(m, k, n) < 2 or rhs.dims[rc[0]] != k or tuple(out.dims) != (m, n):
        return None
    sl, sr = _strides(lhs), _strides(rhs)
    lm = (sl[lf], sl[lc[0]])   # lhs as m x k
    rm = (sr[rc[0]], sr[rf])   # rhs as k x n
    prefix, ftype, _ = _TYPES[t]
    if layout_of(out)[0] == 1:  # row-major result: matmul(lm, rm, out)
        if gemm_split(m, n, k) is not None:
            return None
        return DotPlan(prefix, ftype, False, m, n, k, lm, rm, n)
    # column-major: matmul(rm.T, lm.T, out.T), an n x m product into a row-major n x m
    if gemm_split(n, m, k) is not None:
        return None
    return DotPlan(prefix, ftype, True, n, m, k, rm[::-1], lm[::-1], m)


def _call(b: ir.IRBuilder, fn, wide, args: list, index: int, tag: str) -> None:
    """fn(type) -> the function pointer loaded as `type`; calls it with args, where ("int", v) arguments are blasint: i64 when `wide` (ILP64), else i32
    (the two calls in two branches); ("enum", v) is a C int, ("f", v)/("ptr", v) as is."""
    def call(width):
        vals, types = [], []
        for kind, v in args:
            if kind == "int":
                vals.append(ir.Constant(width, v))
                types.append(width)
            elif kind == "enum":
                vals.append(ir.Constant(I32, v))
                types.append(I32)
            else:
                vals.append(v)
                types.append(v.type)
        b.call(fn(ir.FunctionType(VOID, types).as_pointer()), vals)
    big = b.function.append_basic_block(f"{tag}{index}.ilp64")
    small = b.function.append_basic_block(f"{tag}{index}.lp64")
    after = b.function.append_basic_block(f"{tag}{index}.done")
    b.cbranch(b.icmp_unsigned("!=", wide, c64(0)), big, small)
    b.position_at_end(big)
    call(I64)
    b.branch(after)
    b.position_at_end(small)
    call(I32)
    b.branch(after)
    b.position_at_end(after)


class DotStep:
    """A 2-D dot library thunk the driver runs as numpy's BLAS call (module docstring)."""

    kind = "dot"
    # Table entries: gemm, syrk, A, B, C, integer width flag (1: ILP64).
    N_ENTRIES = 6
    in_place = False

    def __init__(self, thunk):
        self.thunk = thunk
        self.instr = thunk.instr
        self.plan = plan(thunk.instr)
        self.lhs = thunk.operand_slots[0][0]
        self.rhs = thunk.operand_slots[1][0]
        self.dst = thunk.out_slots[0]
        self.reads = {self.lhs.id, self.rhs.id}

    @staticmethod
    def eligible(thunk) -> bool:
        # (a custom-call's thunk is a LibraryThunk too, of another kind)
        if not isinstance(thunk, LibraryThunk) or thunk.kind != "library" or \
                plan(thunk.instr) is None:
            return False
        ops, outs = thunk.operand_slots, thunk.out_slots
        return len(ops) == 2 and all(len(o) == 1 and o[0] is not None for o in ops) \
            and len(outs) == 1 and outs[0] is not None

    def resolve(self, device):
        """The BLAS the driver calls (not the device's business), or None."""
        return blas_functions()

    def entries(self, addrs, blas) -> list[int]:
        p = self.plan
        a, b = addrs[self.lhs.id], addrs[self.rhs.id]
        if p.swap:
            a, b = b, a
        return [blas.fns[p.prefix + "gemm"], blas.fns[p.prefix + "syrk"], a, b,
                addrs[self.dst.id], int(blas.wide)]

    def emit(self, b: ir.IRBuilder, entry, cells, progress, index: int, fail) -> None:
        p = self.plan
        def gemm(typ):
            return entry(0, typ)

        def syrk(typ):
            return entry(1, typ)
        pa, pb, pc = entry(2, PTR), entry(3, PTR), entry(4, PTR)
        wide = entry(5, I64)
        one, zero = ir.Constant(p.ftype, 1.0), ir.Constant(p.ftype, 0.0)
        general = [("enum", ROW_MAJOR), ("enum", p.ta), ("enum", p.tb), ("int", p.m),
                   ("int", p.n), ("int", p.k), ("f", one), ("ptr", pa), ("int", p.lda),
                   ("ptr", pb), ("int", p.ldb), ("f", zero), ("ptr", pc), ("int", p.ldc)]
        if not p.syrk:
            _call(b, gemm, wide, general, index, "gemm")
            return
        fn = b.function
        same = fn.append_basic_block(f"syrk{index}")
        other = fn.append_basic_block(f"gemm{index}")
        done = fn.append_basic_block(f"dot{index}.done")
        b.cbranch(b.icmp_unsigned("==", b.ptrtoint(pa, I64), b.ptrtoint(pb, I64)), same, other)
        b.position_at_end(other)
        _call(b, gemm, wide, general, index, "gemm")
        b.branch(done)
        b.position_at_end(same)
        ld = p.lda if p.ta == NO_TRANS else p.ldb
        _call(b, syrk, wide, [("enum", ROW_MAJOR), ("enum", UPPER), ("enum", p.ta),
                              ("int", p.n), ("int", p.k), ("f", one), ("ptr", pa),
                              ("int", ld), ("f", zero), ("ptr", pc), ("int", p.ldc)],
              index, "syrkcall")
        # numpy copies the upper triangle into the lower one: c[j, i] = c[i, j], j > i.
        with for_range(b, c64(p.n), name=f"tri{index}") as row, \
                for_range(b, c64(p.n), name=f"tri{index}.j") as col:
            below = b.icmp_signed(">", col.iv, row.iv)
            src = b.gep(pc, [b.add(b.mul(row.iv, c64(p.ldc)), col.iv)], source_etype=p.ftype)
            dst = b.gep(pc, [b.add(b.mul(col.iv, c64(p.ldc)), row.iv)], source_etype=p.ftype)
            cur = b.load(dst, typ=p.ftype)
            b.store(b.select(below, b.load(src, typ=p.ftype), cur), dst)
        b.branch(done)
        b.position_at_end(done)
