"""rng-bit-generator for ahead-of-time compilation (program.py): generated code instead of the
numpy library thunk, bit-exact with semantics/rng.py, which that thunk and the interpreter
call.

    void rngN(ptr argv)    argv = [new_state, bits, state]

The same stream as semantics/rng.py (whose docstring has XLA's layout), one loop iteration
per counter:
  ThreeFry-2x32, 20 rounds, counter state[1] + j:
    64-bit bits: element j = lo | hi << 32;
    narrower: the dims split in halves along one dimension (the first even one, else the
      largest; XLA's SplitShapeIntoHalves) of H = ceil(D / 2); counter j = (o, h, i) in
      row-major order over (outer, H, inner) writes its two words to split indices 2h and
      2h + 1 (the second dropped past an odd D); narrow elements keep the low bits.
  Philox-4x32, 10 rounds, u128 counter (state[1], state[2]) (state[0] as the high word
    when the state has two elements) + k: words 4k..4k+3 of the stream, one element each
    (two words lo, hi per element for 64-bit bits).
  rng_default is Philox, as on XLA:CPU.
The state is read into registers before anything is written, so the new state may share
the old one's buffer.
"""

from __future__ import annotations

from contextlib import ExitStack

from llvmlite import ir

from ...errors import UnsupportedError
from ..codegen.ir_array import c64, layout_of, physical_strides
from ..codegen.kernels import begin_function
from ..codegen.loops import for_range
from ..codegen.types import I32, I64

# algorithm attribute -> generator; rng_default is what XLA:CPU maps it to.
ALGORITHMS = {"rng_three_fry": "threefry", "rng_philox": "philox", "rng_default": "philox"}

_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_PHILOX_MUL = (0xD2511F53, 0xCD9E8D57)
_PHILOX_WEYL = (0x9E3779B9, 0xBB67AE85)


def _c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v & 0xFFFFFFFF)


def _rotl(b, v, d: int):
    return b.or_(b.shl(v, _c32(d)), b.lshr(v, _c32(32 - d)))


def threefry2x32(b: ir.IRBuilder, x0, x1, k0, k1):
    """Threefry-2x32 with 20 rounds (i32 values in, i32 values out)."""
    ks = (k0, k1, b.xor(b.xor(_c32(_THREEFRY_PARITY), k0), k1))
    x0, x1 = b.add(x0, k0), b.add(x1, k1)
    for block in range(5):
        for r in _THREEFRY_ROTATIONS[block % 2]:
            x0 = b.add(x0, x1)
            x1 = b.xor(_rotl(b, x1, r), x0)
        x0 = b.add(x0, ks[(block + 1) % 3])
        x1 = b.add(b.add(x1, ks[(block + 2) % 3]), _c32(block + 1))
    return x0, x1


def philox4x32(b: ir.IRBuilder, x, k0, k1):
    """Philox-4x32 with 10 rounds (four i32 words in and out)."""
    x0, x1, x2, x3 = x
    ma, mb = (ir.Constant(I64, m) for m in _PHILOX_MUL)
    for _ in range(10):
        p0 = b.mul(b.zext(x0, I64), ma)
        p1 = b.mul(b.zext(x2, I64), mb)
        x0, x1, x2, x3 = (b.xor(b.xor(_hi32(b, p1), x1), k0), b.trunc(p1, I32),
                          b.xor(b.xor(_hi32(b, p0), x3), k1), b.trunc(p0, I32))
        k0, k1 = b.add(k0, _c32(_PHILOX_WEYL[0])), b.add(k1, _c32(_PHILOX_WEYL[1]))
    return x0, x1, x2, x3


def _hi32(b, v):
    return b.trunc(b.lshr(v, c64(32)), I32)


def _join64(b, lo, hi):
    return b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), c64(32)))


def split_halves(dims) -> tuple[int, int, int, int]:
    """(outer, D, H, inner) of XLA's SplitShapeIntoHalves: the split dimension's size D,
    its half H = ceil(D / 2), the element counts before and after it."""
    dims = tuple(dims) or (1,)
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    outer = inner = 1
    for d in dims[:split]:
        outer *= d
    for d in dims[split + 1:]:
        inner *= d
    return outer, dims[split], (dims[split] + 1) // 2, inner


class _Bits:
    """The bits result: stores an i32/i64 value at a row-major element index, through the
    result's physical layout, truncated to its element width."""

    def __init__(self, b, ptr, shape):
        self.b, self.ptr = b, ptr
        self.dims = tuple(shape.dims)
        self.ty = ir.IntType(shape.element_type.bits)
        self.strides = physical_strides(self.dims, layout_of(shape))
        row_major, step = [0] * len(self.dims), 1
        for k in reversed(range(len(self.dims))):
            row_major[k], step = step, step * self.dims[k]
        self.identity = self.strides == row_major

    def store(self, index, value) -> None:
        b = self.b
        off = index
        if not self.identity:  # row-major index -> multi-index -> physical offset
            off, rest = c64(0), index
            for k in reversed(range(len(self.dims))):
                i = b.urem(rest, c64(self.dims[k]))
                rest = b.udiv(rest, c64(self.dims[k]))
                off = b.add(off, b.mul(i, c64(self.strides[k])))
        if value.type.width > self.ty.width:
            value = b.trunc(value, self.ty)
        b.store(value, b.gep(self.ptr, [off], inbounds=True, source_etype=self.ty))

    def store_if(self, index, limit: int, value) -> None:
        with self.b.if_then(self.b.icmp_unsigned("<", index, c64(limit))):
            self.store(index, value)


def emit_rng(module: ir.Module, name: str, instr, where: str) -> None:
    state_shape, bits_shape = instr.shape.tuple_shapes
    alg = str(instr.attrs.get("algorithm", "rng_default")).lower()
    if alg not in ALGORITHMS:
        raise UnsupportedError(f"ahead-of-time compilation cannot compile {where}: algorithm "
                               f"{alg} is not one of {', '.join(ALGORITHMS)}")
    if state_shape.element_type.name != "u64" or state_shape.rank != 1 \
            or state_shape.dims[0] < 2:
        raise UnsupportedError(f"ahead-of-time compilation cannot compile {where}: the state "
                               f"must be u64[N] with N >= 2, got {state_shape.to_text()}")
    width = bits_shape.element_type.bits
    if width not in (8, 16, 32, 64):
        raise UnsupportedError(f"ahead-of-time compilation cannot compile {where}: "
                               f"rng-bit-generator makes 8-, 16-, 32- or 64-bit elements, "
                               f"not {bits_shape.element_type.name}")
    fn, b, (p_new, p_bits, p_state) = begin_function(module, name, 3)
    fn.linkage = "internal"
    n_state = state_shape.dims[0]
    state = [b.load(b.gep(p_state, [c64(i)], inbounds=True, source_etype=I64), typ=I64)
             for i in range(min(n_state, 3))]
    key = state[0]
    k0, k1 = b.trunc(key, I32), _hi32(b, key)
    out = _Bits(b, p_bits, bits_shape)
    if ALGORITHMS[alg] == "threefry":
        used = _threefry(b, out, state[1], k0, k1, bits_shape.size, width)
        updates = {1: b.add(state[1], c64(used))}
    else:
        lo, hi = state[1], state[2] if n_state >= 3 else state[0]
        used = _philox(b, out, lo, hi, k0, k1, bits_shape.size, width)
        new_lo = b.add(lo, c64(used))
        updates = {1: new_lo}
        if n_state >= 3:
            carry = b.zext(b.icmp_unsigned("<", new_lo, lo), I64)
            updates[2] = b.add(hi, carry)
    # The new state: the old one with the counter words replaced. The old words were
    # loaded above, and the copy writes each word back unchanged when the buffers are one.
    with for_range(b, n_state, name="st") as loop:
        src = b.gep(p_state, [loop.iv], inbounds=True, source_etype=I64)
        b.store(b.load(src, typ=I64), b.gep(p_new, [loop.iv], inbounds=True, source_etype=I64))
    for i, v in updates.items():
        b.store(v, b.gep(p_new, [c64(i)], inbounds=True, source_etype=I64))
    b.ret_void()


def _threefry(b, out: _Bits, ctr, k0, k1, n: int, width: int) -> int:
    """Write the bits; returns how many counters were used."""
    if width == 64:
        if n:
            with for_range(b, n, name="j") as loop:
                c = b.add(ctr, loop.iv)
                y0, y1 = threefry2x32(b, b.trunc(c, I32), _hi32(b, c), k0, k1)
                out.store(loop.iv, _join64(b, y0, y1))
        return n
    outer, d, h, inner = split_halves(out.dims)
    used = outer * h * inner
    if not used:
        return 0
    with ExitStack() as loops:
        o = loops.enter_context(for_range(b, outer, name="o")).iv
        hh = loops.enter_context(for_range(b, h, name="h")).iv
        i = loops.enter_context(for_range(b, inner, name="i")).iv
        j = b.add(b.mul(b.add(b.mul(o, c64(h)), hh), c64(inner)), i)
        c = b.add(ctr, j)
        y0, y1 = threefry2x32(b, b.trunc(c, I32), _hi32(b, c), k0, k1)
        row = b.add(b.mul(o, c64(d)), b.mul(hh, c64(2)))  # split index 2h
        out.store(b.add(b.mul(row, c64(inner)), i), y0)
        if d % 2 == 0:
            out.store(b.add(b.mul(b.add(row, c64(1)), c64(inner)), i), y1)
        else:  # the last pair of an odd D has no room for its second word
            second = b.add(b.mul(hh, c64(2)), c64(1))
            with b.if_then(b.icmp_unsigned("<", second, c64(d))):
                out.store(b.add(b.mul(b.add(row, c64(1)), c64(inner)), i), y1)
    return used


def _philox(b, out: _Bits, lo, hi, k0, k1, n: int, width: int) -> int:
    words = 2 * n if width == 64 else n
    used = (words + 3) // 4
    if not used:
        return 0
    with for_range(b, used, name="k") as loop:
        k = loop.iv
        clo = b.add(lo, k)
        chi = b.add(hi, b.zext(b.icmp_unsigned("<", clo, lo), I64))
        y = philox4x32(b, (b.trunc(clo, I32), _hi32(b, clo), b.trunc(chi, I32), _hi32(b, chi)),
                       k0, k1)
        if width == 64:
            e = b.mul(k, c64(2))
            out.store(e, _join64(b, y[0], y[1]))
            out.store_if(b.add(e, c64(1)), n, _join64(b, y[2], y[3]))
        else:
            e = b.mul(k, c64(4))
            for m in range(4):
                idx = b.add(e, c64(m))
                if m == 0:
                    out.store(idx, y[m])
                else:
                    out.store_if(idx, n, y[m])
    return used
