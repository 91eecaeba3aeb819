"""An order-preserving reduce-scatter (+ all-gather) as one native function, for reducers
MPI has no builtin for.

`i32 xladist_ordered_reduce(ptr table)` does, for this member r of an n-member group whose
buffer of `count` elements is split into n chunks (chunk j: `counts[j]` elements at
element `displs[j]`, the same split on every member):

  1. MPI_Alltoallv: chunk j of the operand goes to member j (nothing to itself), member j's
     chunk r arrives in the scratch buffer (n - 1 chunks of `counts[r]`, in group order
     without r);
  2. the left fold in group-rank order of the n contributions to chunk r, with the
     compiled reducer kernel (`void k(ptr argv, i64 n)`, argv = out, a, b):
     `acc = f(c0, c1)`, then `acc = f(acc, cj)` for j = 2..n-1 (c_r read from the operand
     itself; acc in the first scratch slot, the last step writing the result chunk, so the
     operand may be the result: in place) -- the interpreter's fold bit for bit, for ANY
     reducer, associative or not;
  2b. CANON = 4 or 8 (a float sum/product, whose NaN results xladist makes canonical): every
     NaN of the folded chunk, seen as floats of that width (complex: per component), is
     rewritten to the canonical quiet NaN before anyone receives it (a read-only search,
     the rewrite only if it finds one) -- 1/n of the result,
     still warm from the fold, instead of a pass over the whole result on every member;
  3. all-reduce only: MPI_Allgather (equal chunks; GATHER = 1) or MPI_Allgatherv
     (uneven; GATHER = 2) with MPI_IN_PLACE, each member's folded chunk already sitting at
     its place in the result. (MPICH's Allgatherv measured 2-3x its Allgather from 1 MiB,
     so the common equal split takes Allgather.)

That moves the bytes MPI's own reduce-scatter + all-gather moves for a builtin op, and
every result element is computed on exactly one member, so all members get the same bits.
MPI is reached through function pointers in the table (compiled objects name no MPI
symbol: runtime_symbols.py), like native/collectives.py's loop steps; the caller brackets
the call with the deadline watchdog (xladist/collectives/ordered.py). Returns 0, or the MPI error
code with the failing call's number (1: Alltoallv, 2: Allgather, 3: Allgatherv) in the
STAGE entry.

Table (i64 entries; pointers as integers): see the T_* indices below.
"""

from __future__ import annotations

from functools import lru_cache

from llvmlite import ir

from ..codegen.ir_array import c64
from ..codegen.types import I32, I64, PTR

NAME = "xladist_ordered_reduce"

# Table entries.
(T_ALLTOALLV, T_ALLGATHER, T_ALLGATHERV, T_KERNEL, T_N, T_RANK, T_COMM, T_DATATYPE, T_SEND, T_OUT,
 T_SCRATCH, T_ITEMSIZE, T_GATHER, T_SENDCOUNTS, T_SENDDISPLS, T_RECVCOUNTS, T_RECVDISPLS,
 T_COUNTS, T_DISPLS, T_IN_PLACE, T_STAGE, T_CANON) = range(22)
N_ENTRIES = 22

# CANON width -> (bits of |x| above which x is a NaN, the canonical quiet NaN's bits), as
# numpy's float32(nan) / float64(nan) (xladist/collectives/reduction.py canonicalize_nan).
_NAN_BITS = {4: (0x7F800000, 0x7FC00000), 8: (0x7FF0000000000000, 0x7FF8000000000000)}

# MPI_Alltoallv(send, sendcounts, sdispls, type, recv, recvcounts, rdispls, type, comm)
MPI_ALLTOALLV = ir.FunctionType(I32, [PTR, PTR, PTR, I64, PTR, PTR, PTR, I64, I64])
# MPI_Allgatherv(send, sendcount, type, recv, recvcounts, displs, type, comm)
MPI_ALLGATHERV = ir.FunctionType(I32, [PTR, I32, I64, PTR, PTR, PTR, I64, I64])
# MPI_Allgather(send, sendcount, type, recv, recvcount, type, comm)
MPI_ALLGATHER = ir.FunctionType(I32, [PTR, I32, I64, PTR, I32, I64, I64])
MAP_KERNEL = ir.FunctionType(ir.VoidType(), [PTR, I64])


def _ir() -> str:
    module = ir.Module(name="ordered_reduce")
    fn = ir.Function(module, ir.FunctionType(I32, [PTR]), name=NAME)
    fn.attributes.add("nounwind")
    (table,) = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def entry(k, typ=I64):
        v = b.load(b.gep(table, [c64(k)], inbounds=True, source_etype=I64), typ=I64)
        return b.inttoptr(v, typ) if isinstance(typ, ir.PointerType) else v

    def i32_at(ptr, idx):
        return b.sext(b.load(b.gep(ptr, [idx], inbounds=True, source_etype=I32), typ=I32),
                      I64)

    def failed_if(rc, stage):
        ok = fn.append_basic_block(f"ok{stage}")
        bad = fn.append_basic_block(f"failed{stage}")
        b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), ok, bad)
        b.position_at_end(bad)
        b.store(c64(stage), b.gep(table, [c64(T_STAGE)], inbounds=True, source_etype=I64))
        b.ret(rc)
        b.position_at_end(ok)

    n, rank, comm, dt = entry(T_N), entry(T_RANK), entry(T_COMM), entry(T_DATATYPE)
    send, out, scratch = entry(T_SEND, PTR), entry(T_OUT, PTR), entry(T_SCRATCH, PTR)
    itemsize, gather = entry(T_ITEMSIZE), entry(T_GATHER)
    counts, displs = entry(T_COUNTS, PTR), entry(T_DISPLS, PTR)

    # 1. chunk exchange.
    a2a = entry(T_ALLTOALLV, MPI_ALLTOALLV.as_pointer())
    rc = b.call(a2a, [send, entry(T_SENDCOUNTS, PTR), entry(T_SENDDISPLS, PTR), dt, scratch,
                      entry(T_RECVCOUNTS, PTR), entry(T_RECVDISPLS, PTR), dt, comm])
    failed_if(rc, 1)

    # 2. the left fold in group-rank order into this member's place of the result.
    mine = i32_at(counts, rank)
    chunk_bytes = b.mul(mine, itemsize)
    own = b.gep(send, [b.mul(i32_at(displs, rank), itemsize)], source_etype=ir.IntType(8))
    # Where the result chunk goes: its place in the whole result (all-reduce), or the
    # result itself (reduce-scatter: the result is this member's part only).
    dst_off = b.select(b.icmp_unsigned("!=", gather, c64(0)),
                       b.mul(i32_at(displs, rank), itemsize), c64(0))
    dst = b.gep(out, [dst_off], source_etype=ir.IntType(8))

    def source(j):
        """Contribution j to this chunk: the operand's own chunk, or its scratch slot."""
        slot = b.sub(j, b.zext(b.icmp_unsigned(">", j, rank), I64))
        theirs = b.gep(scratch, [b.mul(slot, chunk_bytes)], source_etype=ir.IntType(8))
        return b.select(b.icmp_unsigned("==", j, rank), own, theirs)

    kernel = entry(T_KERNEL, MAP_KERNEL.as_pointer())
    argv = b.alloca(ir.ArrayType(PTR, 3))
    slots = [b.gep(argv, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True)
             for i in range(3)]
    # The partial folds of n >= 3 members go to the first scratch slot (it held c0 or c1,
    # both read by the first step), only the last step writes `dst`: so `dst` may be the
    # operand's own chunk (an all-reduce in place) -- it is read before it is written.
    last = b.sub(n, c64(1))

    def target(j):
        return b.select(b.icmp_unsigned("==", j, last), dst, scratch)

    b.store(target(c64(1)), slots[0])
    b.store(source(c64(0)), slots[1])
    b.store(source(c64(1)), slots[2])
    b.call(kernel, [argv, mine])
    b.store(scratch, slots[1])
    head = fn.append_basic_block("fold")
    body = fn.append_basic_block("fold.body")
    done = fn.append_basic_block("fold.done")
    pre = b.block
    b.branch(head)
    b.position_at_end(head)
    j = b.phi(I64)
    j.add_incoming(c64(2), pre)
    b.cbranch(b.icmp_unsigned("<", j, n), body, done)
    b.position_at_end(body)
    b.store(target(j), slots[0])
    b.store(source(j), slots[2])
    b.call(kernel, [argv, mine])
    j.add_incoming(b.add(j, c64(1)), body)
    b.branch(head)
    b.position_at_end(done)

    # 2b. canonical NaNs in this member's folded chunk (CANON = float width, or 0).
    canon = entry(T_CANON)
    canon_end = fn.append_basic_block("canonical")
    sw = b.switch(canon, canon_end)
    for width, (inf_bits, qnan_bits) in _NAN_BITS.items():
        typ = ir.IntType(8 * width)
        pre = fn.append_basic_block(f"canon{width}")
        sw.add_case(c64(width), pre)
        b.position_at_end(pre)
        count = b.udiv(chunk_bytes, c64(width))
        mask = ir.Constant(typ, (1 << (8 * width - 1)) - 1)

        def nan_at(i, typ=typ, mask=mask, inf_bits=inf_bits):
            at = b.gep(dst, [i], inbounds=True, source_etype=typ)
            bits = b.load(at, typ=typ)
            return at, bits, b.icmp_unsigned(">", b.and_(bits, mask), ir.Constant(typ, inf_bits))

        # A read-only search first (a vectorized any-of), the rewrite only when it finds a
        # NaN: storing every element measured +15-20% on the whole all-reduce.
        head = fn.append_basic_block(f"canon{width}.scan")
        body = fn.append_basic_block(f"canon{width}.scan.body")
        found = fn.append_basic_block(f"canon{width}.scanned")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        seen = b.phi(I32)
        i.add_incoming(c64(0), pre)
        seen.add_incoming(ir.Constant(I32, 0), pre)
        b.cbranch(b.icmp_unsigned("<", i, count), body, found)
        b.position_at_end(body)
        _, _, is_nan = nan_at(i)
        i.add_incoming(b.add(i, c64(1)), body)
        seen.add_incoming(b.or_(seen, b.zext(is_nan, I32)), body)
        b.branch(head)
        b.position_at_end(found)
        fix = fn.append_basic_block(f"canon{width}.fix")
        b.cbranch(b.icmp_unsigned("!=", seen, ir.Constant(I32, 0)), fix, canon_end)
        b.position_at_end(fix)
        head = fn.append_basic_block(f"canon{width}.fix.head")
        body = fn.append_basic_block(f"canon{width}.fix.body")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(c64(0), fix)
        b.cbranch(b.icmp_unsigned("<", i, count), body, canon_end)
        b.position_at_end(body)
        at, bits, is_nan = nan_at(i)
        b.store(b.select(is_nan, ir.Constant(typ, qnan_bits), bits), at)
        i.add_incoming(b.add(i, c64(1)), body)
        b.branch(head)
    b.position_at_end(canon_end)

    # 3. all-reduce: every member's chunk to every member, in place.
    skip = fn.append_basic_block("gathered")
    equal = fn.append_basic_block("gather")
    uneven = fn.append_basic_block("gatherv")
    in_place, zero = entry(T_IN_PLACE, PTR), ir.Constant(I32, 0)
    switch = b.switch(gather, skip)
    switch.add_case(c64(1), equal)
    switch.add_case(c64(2), uneven)
    b.position_at_end(equal)
    ag = entry(T_ALLGATHER, MPI_ALLGATHER.as_pointer())
    failed_if(b.call(ag, [in_place, zero, dt, out, b.trunc(mine, I32), dt, comm]), 2)
    b.branch(skip)
    b.position_at_end(uneven)
    agv = entry(T_ALLGATHERV, MPI_ALLGATHERV.as_pointer())
    failed_if(b.call(agv, [in_place, zero, dt, out, counts, displs, dt, comm]), 3)
    b.branch(skip)
    b.position_at_end(skip)
    b.ret(ir.Constant(I32, 0))
    return str(module)


@lru_cache(maxsize=1)
def address() -> int:
    """The driver's address, compiled once per process (and cached on disk: jit.py)."""
    from .. import jit
    text = _ir()
    code, _ = jit.get_code(text, lambda: text)
    address.code = code  # the machine code must outlive every caller
    return code.address(NAME)
