"""The compiler-runtime functions LLVM may call from our kernels, written in LLVM IR.

On a CPU without a native instruction for an operation, LLVM lowers it to a call of a
compiler-rt/libgcc function: `fptrunc double to half` becomes `__truncdfhf2` on every
x86-64 without AVX512-FP16, `fpext half` becomes `__extendhfsf2` without F16C, i128
division becomes `__divti3`. Nothing guarantees libgcc_s is loaded into the process (a
call to an unresolved symbol jumps to address 0), so xladist provides these itself.

Every body here uses integer operations only (shifts, masks, add, compare, ctlz), which
every 64-bit target has natively: the runtime object itself must call nothing (jit.py
checks that). Conversions round to nearest even and are bit-exact with compiler-rt
(NaN: quiet bit set, payload's high bits kept, sign kept).
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

_I1 = ir.IntType(1)


@dataclass(frozen=True)
class IeeeFormat:
    bits: int
    ebits: int
    mbits: int

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emax(self) -> int:
        return (1 << self.ebits) - 1

    @property
    def int_type(self) -> ir.IntType:
        return ir.IntType(self.bits)


F64 = IeeeFormat(64, 11, 52)
F32 = IeeeFormat(32, 8, 23)
F16 = IeeeFormat(16, 5, 10)
BF16 = IeeeFormat(16, 8, 7)

# The function bodies work on bit patterns; the ABI wrappers below give them the float
# types LLVM's libcalls use. Names: libcall -> (source, destination, kind).
CONVERSIONS: dict[str, tuple[IeeeFormat, IeeeFormat, str]] = {
    "__truncdfhf2": (F64, F16, "trunc"),
    "__truncsfhf2": (F32, F16, "trunc"),
    "__gnu_f2h_ieee": (F32, F16, "trunc"),
    "__truncdfbf2": (F64, BF16, "trunc"),
    "__truncsfbf2": (F32, BF16, "trunc"),
    "__extendhfsf2": (F16, F32, "extend"),
    "__gnu_h2f_ieee": (F16, F32, "extend"),
    "__extendhfdf2": (F16, F64, "extend"),
    "__extendbfsf2": (BF16, F32, "extend"),
}

_FLOAT_TYPE_TEXT = {F64: "double", F32: "float", F16: "half", BF16: "bfloat"}


def _c(t: ir.IntType, v: int) -> ir.Constant:
    return ir.Constant(t, v & ((1 << t.width) - 1))


def _rne_shift(b: ir.IRBuilder, sig, shift):
    """sig >> shift rounded to nearest even (1 <= shift < width)."""
    t = sig.type
    one = _c(t, 1)
    kept = b.lshr(sig, shift)
    rem = b.and_(sig, b.sub(b.shl(one, shift), one))
    half = b.shl(one, b.sub(shift, one))
    up = b.or_(b.icmp_unsigned(">", rem, half),
               b.and_(b.icmp_unsigned("==", rem, half), b.trunc(kept, _I1)))
    return b.add(kept, b.zext(up, t))


def _emit_trunc(fn: ir.Function, src: IeeeFormat, dst: IeeeFormat) -> None:
    """Body of a narrowing conversion: bits of `src` (argument) -> bits of `dst`."""
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    t = src.int_type
    x = fn.args[0]
    sign = b.lshr(x, _c(t, src.bits - 1))
    exp = b.and_(b.lshr(x, _c(t, src.mbits)), _c(t, src.emax))
    mant = b.and_(x, _c(t, (1 << src.mbits) - 1))
    # NaN: quiet, top payload bits kept; inf stays inf.
    payload = b.lshr(mant, _c(t, src.mbits - dst.mbits))
    nan = b.or_(_c(t, (dst.emax << dst.mbits) | (1 << (dst.mbits - 1))), payload)
    inf = _c(t, dst.emax << dst.mbits)
    special = b.select(b.icmp_unsigned("!=", mant, _c(t, 0)), nan, inf)
    # Finite: value = sig * 2^(E - bias - mbits) with E = max(exp, 1), sig with its
    # implicit bit when exp > 0. The destination's biased exponent de decides the shift.
    is_sub = b.icmp_unsigned("==", exp, _c(t, 0))
    e_eff = b.select(is_sub, _c(t, 1), exp)
    sig = b.select(is_sub, mant, b.or_(mant, _c(t, 1 << src.mbits)))
    de = b.add(e_eff, _c(t, dst.bias - src.bias))  # may be "negative" (two's complement)
    normal = b.icmp_signed(">=", de, _c(t, 1))
    base_shift = src.mbits - dst.mbits
    # Below the normal range every extra exponent step shifts one more bit out; past
    # mbits + 2 bits nothing can round up any more, so the shift is clamped there.
    deficit = b.sub(_c(t, 1), de)
    deficit = b.select(b.icmp_signed(">", deficit, _c(t, src.mbits + 2 - base_shift)),
                       _c(t, src.mbits + 2 - base_shift), deficit)
    shift = b.select(normal, _c(t, base_shift), b.add(_c(t, base_shift), deficit))
    base = b.select(normal, b.shl(b.sub(de, _c(t, 1)), _c(t, dst.mbits)), _c(t, 0))
    # The implicit bit lands on the exponent field's lowest bit (hence de - 1 above); a
    # rounding carry moves into the exponent, up to exactly inf.
    finite = b.add(base, _rne_shift(b, sig, shift))
    overflow = b.icmp_signed(">=", de, _c(t, dst.emax))
    finite = b.select(overflow, inf, finite)
    mag = b.select(b.icmp_unsigned("==", exp, _c(t, src.emax)), special, finite)
    out = b.or_(mag, b.shl(sign, _c(t, dst.bits - 1)))
    b.ret(b.trunc(out, dst.int_type) if dst.bits < src.bits else out)


def _emit_extend(fn: ir.Function, src: IeeeFormat, dst: IeeeFormat) -> None:
    """Body of a widening conversion (exact): bits of `src` -> bits of `dst`."""
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    t = dst.int_type
    x = b.zext(fn.args[0], t)
    sign = b.shl(b.lshr(x, _c(t, src.bits - 1)), _c(t, dst.bits - 1))
    exp = b.and_(b.lshr(x, _c(t, src.mbits)), _c(t, src.emax))
    mant = b.and_(x, _c(t, (1 << src.mbits) - 1))
    widen = dst.mbits - src.mbits
    normal = b.or_(b.shl(b.add(exp, _c(t, dst.bias - src.bias)), _c(t, dst.mbits)),
                   b.shl(mant, _c(t, widen)))
    quiet = _c(t, 1 << (dst.mbits - 1))
    nan_or_inf = b.or_(_c(t, dst.emax << dst.mbits), b.shl(mant, _c(t, widen)))
    nan_or_inf = b.select(b.icmp_unsigned("!=", mant, _c(t, 0)),
                          b.or_(nan_or_inf, quiet), nan_or_inf)
    if dst.bias == src.bias:  # bf16 -> f32: same exponent range, subnormal stays one
        subnormal = b.shl(mant, _c(t, widen))
    else:
        subnormal = _normalize(b, mant, src, dst)
    is_zero_exp = b.icmp_unsigned("==", exp, _c(t, 0))
    tiny = b.select(b.icmp_unsigned("==", mant, _c(t, 0)), _c(t, 0), subnormal)
    mag = b.select(is_zero_exp, tiny,
                   b.select(b.icmp_unsigned("==", exp, _c(t, src.emax)), nan_or_inf, normal))
    b.ret(b.or_(mag, sign))


def _normalize(b: ir.IRBuilder, mant, src: IeeeFormat, dst: IeeeFormat):
    """A subnormal source's mantissa as a normal destination number: the leading one at
    bit p becomes the implicit bit."""
    t = dst.int_type
    ctlz = b.module.globals.get(f"llvm.ctlz.i{t.width}") or ir.Function(
        b.module, ir.FunctionType(t, [t, _I1]), name=f"llvm.ctlz.i{t.width}")
    p = b.sub(_c(t, dst.bits - 1), b.call(ctlz, [mant, ir.Constant(_I1, 0)]))
    sub_exp = b.add(p, _c(t, dst.bias - src.bias - src.mbits + 1))
    sub_mant = b.and_(b.shl(mant, b.sub(_c(t, dst.mbits), p)), _c(t, (1 << dst.mbits) - 1))
    return b.or_(b.shl(sub_exp, _c(t, dst.mbits)), sub_mant)


def _emit_udivmod(fn: ir.Function, want_rem: bool, signed: bool) -> None:
    """i128 division by shift-and-subtract (128 steps; only for targets without it)."""
    t = ir.IntType(128)
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("loop")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    a, d = fn.args
    zero = _c(t, 0)
    if signed:
        neg_a = b.icmp_signed("<", a, zero)
        neg_d = b.icmp_signed("<", d, zero)
        a = b.select(neg_a, b.sub(zero, a), a)
        d = b.select(neg_d, b.sub(zero, d), d)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(t)
    q = b.phi(t)
    r = b.phi(t)
    bit = b.and_(b.lshr(a, b.sub(_c(t, 127), i)), _c(t, 1))
    r2 = b.or_(b.shl(r, _c(t, 1)), bit)
    ge = b.icmp_unsigned(">=", r2, d)
    r3 = b.select(ge, b.sub(r2, d), r2)
    q2 = b.or_(b.shl(q, _c(t, 1)), b.zext(ge, t))
    i2 = b.add(i, _c(t, 1))
    i.add_incoming(zero, entry)
    q.add_incoming(zero, entry)
    r.add_incoming(zero, entry)
    i.add_incoming(i2, loop)
    q.add_incoming(q2, loop)
    r.add_incoming(r3, loop)
    b.cbranch(b.icmp_unsigned("==", i2, _c(t, 128)), done, loop)
    b.position_at_end(done)
    out = r3 if want_rem else q2
    if signed:
        # C semantics: the quotient's sign is the xor of the signs, the remainder's the
        # dividend's.
        flip = neg_a if want_rem else b.xor(neg_a, neg_d)
        out = b.select(flip, b.sub(zero, out), out)
    b.ret(out)


# name -> (signed, remainder)
DIVISIONS = {"__udivti3": (False, False), "__umodti3": (False, True),
             "__divti3": (True, False), "__modti3": (True, True)}


def runtime_ir() -> str:
    """LLVM IR text of every builtin (the float-typed entry points are written as text:
    llvmlite.ir has no bfloat type)."""
    mod = ir.Module(name="xladist_runtime")
    wrappers = []
    for name, (src, dst, kind) in CONVERSIONS.items():
        body = ir.Function(mod, ir.FunctionType(dst.int_type, [src.int_type]),
                           name=f"xladist.bits{name}")
        body.linkage = "internal"
        (_emit_trunc if kind == "trunc" else _emit_extend)(body, src, dst)
        st, dt = _FLOAT_TYPE_TEXT[src], _FLOAT_TYPE_TEXT[dst]
        wrappers.append(
            f"define {dt} @{name}({st} %x) {{\n"
            f"  %b = bitcast {st} %x to i{src.bits}\n"
            f"  %r = call i{dst.bits} @\"xladist.bits{name}\"(i{src.bits} %b)\n"
            f"  %f = bitcast i{dst.bits} %r to {dt}\n"
            f"  ret {dt} %f\n}}\n")
    i128 = ir.IntType(128)
    for name, (signed, rem) in DIVISIONS.items():
        _emit_udivmod(ir.Function(mod, ir.FunctionType(i128, [i128, i128]), name=name),
                      rem, signed)
    # i128 multiply: every 64-bit target multiplies i128 inline (mul + mulh), so LLVM
    # only calls __multi3 on 32-bit targets, which xladist does not support.
    mul = ir.Function(mod, ir.FunctionType(i128, [i128, i128]), name="__multi3")
    bm = ir.IRBuilder(mul.append_basic_block("entry"))
    bm.ret(bm.mul(*mul.args))
    return str(mod) + "\n" + "\n".join(wrappers)


def provided_names() -> list[str]:
    return sorted([*CONVERSIONS, *DIVISIONS, "__multi3"])
