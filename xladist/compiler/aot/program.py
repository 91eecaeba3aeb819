"""Ahead-of-time compilation (tfcompile): a module as an object file a C program links.

    obj = AotProgram(module, "step").compile(target_cpu=None, triple=None)

The thunk lists of the cpu backend (emit.py) become one generated driver function,
`int NAME_run(const void *const *args, void *const *results, void *temp)`, that calls the
kernels in order with buffer addresses fixed at compile time:
  * every computation *instance* (the entry; each while's condition and body; each
    conditional branch) gets its own region of the caller's `temp` buffer, laid out once
    here: its arena (buffers.py offsets), the argv array of each kernel call, and the
    buffers control flow owns (a loop's carry C and body results R, a conditional's
    results, a condition's predicate). Nothing is global but read-only constants, so
    calls with distinct temp buffers may run concurrently;
  * a while loop is native control flow: C <- init; loop { cond(C) -> pred; body(C) -> R;
    C <- R }: the body may update its carry in place (inplace.py) because C is the
    loop's own, and it writes R while reading C, so there is no hazard;
  * a conditional branches to one of its branch instances, which write the results;
  * root leaves not computed directly into their destination are copied there.
dot, convolution and rng-bit-generator become generated code (dot.py, conv.py,
rng.py) instead of their library thunks. Anything else (library thunks: fft, ...; device
thunks: collectives, channels, feeds; custom calls; async) is refused with an
UnsupportedError naming the instruction: never wrong code.

LLVM may lower some operations to compiler-runtime calls (f16 conversions on a CPU
without F16C: __extendhfsf2, __truncsfhf2; f64 -> f16 everywhere: __truncdfhf2; i128
division). The object must need nothing beyond libc/libm, and libgcc's copies must not
clash with ours when the user links, so xladist's own builtins (codegen/builtins.py, the
ones the JIT uses) are linked into every object as *internal* functions, kept through
llvm.compiler.used: codegen's libcalls bind to them by name inside the object.
"""

from __future__ import annotations

import re
import threading
from contextlib import ExitStack
from dataclasses import dataclass

import llvmlite.binding as llvm
from llvmlite import ir

from ...errors import InputError, UnsupportedError
from .. import llvm_worker
from ..compile_pool import pipeline_exact
from ..buffers import ALIGN, _round
from ..codegen import builtins
from ..codegen.ir_array import c64, layout_of, physical_strides
from ..codegen.loops import for_range
from ..codegen.kernels.distinct import emit_distinct_kernels
from ..codegen.types import I1, I8, I32, I64, PTR
from ..control import ConditionalThunk, WhileThunk
from ..emit import ProgramBuilder
from ..target import Target, check_cpu
from ..thunks import KernelThunk, LibraryThunk
from .conv import emit_conv
from .dot import emit_dot
from .rng import emit_rng


def _out_lhs_rhs(t):
    return [t.out_slots[0], t.operand_slots[0][0], t.operand_slots[1][0]]


def _state_bits_state(t):
    return [t.out_slots[0], t.out_slots[1], t.operand_slots[0][0]]


# Library thunks replaced by generated code: opcode -> (emitter(module, name, instr,
# where), the thunk's slots in the order of the generated function's argv).
GENERATED = {"dot": (emit_dot, _out_lhs_rhs), "convolution": (emit_conv, _out_lhs_rhs),
             "rng-bit-generator": (emit_rng, _state_bits_state)}

_NUMPY = "it runs as a Python library thunk (numpy{}) in the cpu backend, and an object " \
         "file cannot call Python; no generated code for it yet"

# Why each library thunk the driver does not generate is refused: opcode -> reason.
REFUSED_LIBRARY = {
    "fft": _NUMPY.format(".fft"),
    "cholesky": _NUMPY.format(".linalg"),
    "triangular-solve": _NUMPY.format(" + scipy.linalg"),
    "topk": _NUMPY.format(" argsort"),
    "ragged-dot": _NUMPY.format(" matmul per group"),
    "scaled-dot": _NUMPY.format(" matmul with block scales"),
    "batch-norm-training": _NUMPY.format(", in f64"),
    "batch-norm-inference": _NUMPY.format(", in f64"),
    "batch-norm-grad": _NUMPY.format(", in f64"),
    "bitcast-convert": _NUMPY.format(" view") + " (only a bitcast-convert between element "
                       "types of different widths is a library thunk)",
    "rng": "its values come from numpy's random generator at run time (implementation-"
           "defined); rng-bit-generator compiles",
    "get-dimension-size": "it is a dynamic-shape query the dynamic padder left in the "
                          "program, evaluated in Python",
    "copy-start": "asynchronous copies are refused (copy-start/copy-done)",
}
# Why other thunks are refused: thunk kind -> reason.
REFUSED_KINDS = {
    "custom-call": "custom calls run Python functions registered with xladist (host "
                   "callbacks), which an object file cannot call",
    "device": "collectives, send/recv and infeed/outfeed need xladist's multi-device "
              "runtime; an ahead-of-time object runs one device",
    "control": "asynchronous operations are refused (only while, conditional and call "
               "compile)",
}


def refusal(t) -> str:
    """Why thunk `t` cannot be compiled ahead of time, for the error message."""
    if t.kind == "library":
        return REFUSED_LIBRARY.get(t.name, _NUMPY.format(""))
    return REFUSED_KINDS.get(t.kind, f"{t.describe()} has no ahead-of-time form")


# The exported symbols of NAME.o; everything else in it is internal.
EXPORTS = ("run", "temp_bytes", "arg_bytes", "result_bytes")


@dataclass
class Leaf:
    """One argument or result of the C API."""

    name: str
    shape: object  # hlo Shape

    @property
    def nbytes(self) -> int:
        return self.shape.nbytes


def _where(instr) -> str:
    orig = getattr(instr.parent, "original_of", {}).get(instr, instr)
    comp = instr.parent.name if instr.parent is not None else "?"
    return f"`{orig.name}` ({orig.opcode}) in computation {comp}"


class AotProgram:
    """The driver of one module: check what it can compile, then emit and compile."""

    def __init__(self, module, name: str):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise InputError(f"--name {name!r} is not a C identifier")
        module = self._static(module)
        self.module = module
        self.name = name
        self.args = self._args(module)
        self.results = self._results(module)
        self.pb = ProgramBuilder(module)
        self.entry = self.pb.computation(module.entry)
        self.temp = 0       # bytes of temp laid out so far
        # Per constant buffer: slot ids are numbered per computation, so the key is the
        # slot itself (its id(); the slots live as long as self.pb).
        self._consts: dict[int, ir.GlobalVariable] = {}
        self._n_generated = 0

    # ---- what the C API sees ---------------------------------------------------
    @staticmethod
    def _static(module):
        """`module` with its dynamic shapes padded, as xladist.compile does (the padder's
        rule, hlo/dynamic_padder.py: it also refuses a dynamic entry parameter); a dense
        buffer of the C API carries no size, so a dynamic result is refused."""
        from ...hlo.dynamic_padder import pad_dynamic
        static, dynamic_results = pad_dynamic(module)
        if dynamic_results is not None:
            root = module.entry.root
            raise UnsupportedError(f"ahead-of-time compilation: the result {root.name}: "
                                   f"{root.shape.to_text(layout=False)} has dynamic "
                                   f"dimensions, and the C API's result buffers carry no "
                                   f"sizes (only static results compile)")
        return static

    @staticmethod
    def _args(module) -> list[Leaf]:
        out = []
        for p in module.entry.parameters:
            if not p.shape.is_array:
                raise UnsupportedError(f"parameter {p.parameter_number} ({p.name}: {p.shape}) "
                                       f"is not an array: the C API takes one dense buffer per "
                                       f"parameter (tuple and token parameters are not supported)")
            out.append(Leaf(p.name, p.shape))
        return out

    @staticmethod
    def _results(module) -> list[Leaf]:
        root = module.entry.root
        out = []
        for index, s in root.shape.leaves():
            if not s.is_array:
                raise UnsupportedError(f"result leaf {list(index)} of {root.name} is a {s}: "
                                       f"the C API returns arrays only")
            out.append(Leaf(f"{root.name}{list(index) if index else ''}", s))
        return out

    # ---- layout of temp ----------------------------------------------------------
    def _alloc(self, nbytes: int) -> int:
        off = self.temp
        self.temp += _round(max(nbytes, 1))
        return off

    # ---- emission ----------------------------------------------------------------
    def llvm_module(self) -> ir.Module:
        mod = ir.Module(name=self.name)
        # Repeated kernels once: the driver below calls the first of each kind.
        self.same_as = emit_distinct_kernels(mod, self.pb.kernels)
        self._check_exports_free(mod)
        for fn in mod.functions:
            if fn.blocks:
                fn.linkage = "internal"
        self.mod = mod
        self.memcpy = mod.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
        run = ir.Function(mod, ir.FunctionType(I32, [PTR, PTR, PTR]), name=f"{self.name}_run")
        run.attributes.add("nounwind")
        self.fn = run
        args_p, results_p, temp = run.args
        b = ir.IRBuilder(run.append_basic_block("entry"))
        self.temp_base = temp

        def ptr_at(table, i):
            return b.load(b.gep(table, [c64(i)], inbounds=True, source_etype=PTR), typ=PTR)

        b = self._computation(b, self.entry, [ptr_at(args_p, i) for i in range(len(self.args))],
                              [ptr_at(results_p, j) for j in range(len(self.results))])
        b.ret(ir.Constant(I32, 0))
        temp_fn = ir.Function(mod, ir.FunctionType(I64, []), name=f"{self.name}_temp_bytes")
        ir.IRBuilder(temp_fn.append_basic_block("entry")).ret(c64(self.temp))
        for what, leaves in (("arg_bytes", self.args), ("result_bytes", self.results)):
            ty = ir.ArrayType(I64, len(leaves))
            g = ir.GlobalVariable(mod, ty, name=f"{self.name}_{what}")
            g.global_constant = True
            g.initializer = ir.Constant(ty, [c64(x.nbytes) for x in leaves])
        return mod

    def _check_exports_free(self, mod) -> None:
        """Kernel functions are named after their HLO instructions (`c0_2_run` for an
        instruction `run`); an exported name must not be one of them."""
        for what in EXPORTS:
            symbol = f"{self.name}_{what}"
            if symbol in mod.globals:
                kernel = next((k for k in self.pb.kernels if k.name == symbol), None)
                of = f" (the kernel of `{kernel.root.name}`)" if kernel is not None else ""
                raise InputError(f"--name {self.name}: the exported {symbol} would have the "
                                 f"name of a function in the object{of}; choose another "
                                 f"--name")

    def _const(self, slot) -> ir.GlobalVariable:
        g = self._consts.get(id(slot))
        if g is None:
            data = bytes(slot.data) if slot.data is not None else bytes(slot.nbytes)
            ty = ir.ArrayType(I8, max(len(data), 1))
            g = ir.GlobalVariable(self.mod, ty, name=f"const{len(self._consts)}")
            g.global_constant = True
            g.linkage = "internal"
            g.align = ALIGN
            g.initializer = ir.Constant(ty, bytearray(data or b"\0"))
            self._consts[id(slot)] = g
        return g

    def _temp(self, b, nbytes: int):
        return b.gep(self.temp_base, [c64(self._alloc(nbytes))], inbounds=True, source_etype=I8)

    def _copy(self, b, dst, src, nbytes: int) -> None:
        if nbytes and dst is not src:
            b.call(self.memcpy, [dst, src, c64(nbytes), ir.Constant(I1, 0)])

    def _computation(self, b: ir.IRBuilder, cc, params: list, outs: list) -> ir.IRBuilder:
        """Emit one instance of `cc` reading `params` (one pointer per parameter leaf) and
        leaving its result leaves in `outs`; returns the builder positioned after it."""
        base = self._alloc(cc.asg.arena_size)
        addr: dict[int, ir.Value] = {}
        for k, s in enumerate(cc.param_slots):
            if s is not None:
                addr[s.id] = params[k]
        first_out: dict[int, int] = {}
        for j, s in enumerate(cc.root_slots):
            if s is not None and s.kind == "out" and s.id not in first_out:
                first_out[s.id] = j
                addr[s.id] = outs[j]
        for s in cc.asg.slots:
            # An "out" slot that is no result leaf is a buffer a while loop takes as its
            # initial carry (inplace.py: fresh per run in the jit, outside the arena):
            # here it gets a region of temp of its own, as an unplaced temp does.
            if s.kind == "temp" or (s.kind == "out" and s.id not in addr):
                off = base + s.offset if s.offset >= 0 else self._alloc(s.nbytes)
                addr[s.id] = b.gep(self.temp_base, [c64(off)], inbounds=True, source_etype=I8)
            elif s.kind == "const":
                addr[s.id] = self._const(s)
        for t in cc.thunks:
            if type(t) is KernelThunk:
                self._kernel(b, t, addr)
            elif isinstance(t, WhileThunk):
                b = self._while(b, t, addr)
            elif isinstance(t, ConditionalThunk):
                b = self._conditional(b, t, addr)
            elif isinstance(t, LibraryThunk) and t.kind == "library" and t.name in GENERATED:
                self._generated(b, t, addr)
            else:
                where = _where(t.instr) if t.instr is not None else t.kind
                raise UnsupportedError(f"ahead-of-time compilation cannot compile {where}: "
                                       f"{refusal(t)}")
        for j, s in enumerate(cc.root_slots):
            if s is not None and first_out.get(s.id) != j:
                self._copy(b, outs[j], self._slot(addr, s, cc), s.nbytes)
        return b

    @staticmethod
    def _slot(addr, s, cc):
        try:
            return addr[s.id]
        except KeyError:
            raise UnsupportedError(f"ahead-of-time compilation: buffer {s.describe()} of "
                                   f"computation {cc.name} has no static address") from None

    def _call(self, b, fn_name: str, slots, addr) -> None:
        """fn(argv): argv, in temp, holds the slots' addresses."""
        argv = self._temp(b, 8 * len(slots))
        for i, s in enumerate(slots):
            b.store(addr[s.id], b.gep(argv, [c64(i)], inbounds=True, source_etype=PTR))
        b.call(self.mod.get_global(fn_name), [argv])

    def _kernel(self, b, t: KernelThunk, addr) -> None:
        self._call(b, self.same_as.get(t.spec.name, t.spec.name), t.slots, addr)

    def _generated(self, b, t: LibraryThunk, addr) -> None:
        """dot / convolution / rng-bit-generator: generated code instead of the library
        call."""
        emit, slots = GENERATED[t.name]
        name = f"aot_{t.name.replace('-', '_')}{self._n_generated}"
        self._n_generated += 1
        emit(self.mod, name, t.instr, _where(t.instr))
        self._call(b, name, slots(t), addr)

    def _while(self, b, t: WhileThunk, addr) -> ir.IRBuilder:
        if any(r.pairs for r in (t.init_to_state, t.state_to_cond, t.result_to_state,
                                 t.state_to_out)):
            raise UnsupportedError(f"ahead-of-time compilation cannot compile {_where(t.instr)}: "
                                   f"its state changes layout between condition and body")
        shapes = t.body.param_shapes
        carry = [self._temp(b, s.nbytes) if s.is_array else None for s in shapes]
        results = [self._temp(b, s.nbytes) if s.is_array else None for s in shapes]
        for c, s, shape in zip(carry, t.in_slots, shapes):
            if c is not None:
                self._copy(b, c, addr[s.id], shape.nbytes)
        pred = self._temp(b, 1)
        head = self.fn.append_basic_block("while_cond")
        body = self.fn.append_basic_block("while_body")
        done = self.fn.append_basic_block("while_done")
        b.branch(head)
        b = ir.IRBuilder(head)
        b = self._computation(b, t.cond, carry, [pred])
        b.cbranch(b.icmp_unsigned("!=", b.load(pred, typ=I8), ir.Constant(I8, 0)), body, done)
        b = ir.IRBuilder(body)
        b = self._computation(b, t.body, carry, results)
        for c, r, shape in zip(carry, results, shapes):
            if c is not None:
                self._copy(b, c, r, shape.nbytes)
        b.branch(head)
        b = ir.IRBuilder(done)
        for s, c in zip(t.out_slots, carry):
            if s is not None:
                addr[s.id] = c
        return b

    def _relayout(self, b, dst, src, have, want, where: str) -> None:
        """Copy an array lying in layout `have` to `want` (the same dims), element by
        element: the driver's form of control.Relayout."""
        if have.layout is not None and have.layout.has_extras \
                or want.layout is not None and want.layout.has_extras:
            raise UnsupportedError(f"ahead-of-time compilation cannot compile {where}: a "
                                   f"branch result changes layout ({have.to_text()} -> "
                                   f"{want.to_text()}) with layout extras")
        if not have.size:
            return
        esize = have.nbytes // have.size
        s_have = physical_strides(have.dims, layout_of(have))
        s_want = physical_strides(have.dims, layout_of(want))
        with ExitStack() as loops:
            src_off, dst_off = c64(0), c64(0)
            for k, n in enumerate(have.dims):
                iv = loops.enter_context(for_range(b, n, name=f"relayout{k}")).iv
                src_off = b.add(src_off, b.mul(iv, c64(s_have[k] * esize)))
                dst_off = b.add(dst_off, b.mul(iv, c64(s_want[k] * esize)))
            self._copy(b, b.gep(dst, [dst_off], inbounds=True, source_etype=I8),
                       b.gep(src, [src_off], inbounds=True, source_etype=I8), esize)

    def _conditional(self, b, t: ConditionalThunk, addr) -> ir.IRBuilder:
        if any(r.pairs for r in t.into):
            # simplify copies every operand into its branch's layout (XLA's layout assignment).
            raise UnsupportedError(f"ahead-of-time compilation cannot compile {_where(t.instr)}: "
                                   f"a branch takes another layout")
        outs = [self._temp(b, s.nbytes) if s is not None else None for s in t.out_slots]
        raw = addr[t.index_slot.id]
        n = len(t.branches)
        if t.is_pred:  # true selects branch 0
            k = b.select(b.icmp_unsigned("!=", b.load(raw, typ=I8), ir.Constant(I8, 0)),
                         ir.Constant(I32, 0), ir.Constant(I32, 1))
        else:  # out of range selects the last branch
            i = b.load(raw, typ=I32)
            ok = b.and_(b.icmp_signed(">=", i, ir.Constant(I32, 0)),
                        b.icmp_signed("<", i, ir.Constant(I32, n)))
            k = b.select(ok, i, ir.Constant(I32, n - 1))
        merge = self.fn.append_basic_block("cond_merge")
        blocks = [self.fn.append_basic_block(f"branch{j}") for j in range(n)]
        sw = b.switch(k, blocks[-1])
        for j, blk in enumerate(blocks):
            sw.add_case(ir.Constant(I32, j), blk)
        for blk, branch, ops, back in zip(blocks, t.branches, t.operand_slots, t.out_of):
            # A branch whose result lies in another layout than the conditional's (JAX's
            # text: `lax.cond(p, lambda: x.T @ y, ...)`) writes it aside, then it is relaid.
            bb = ir.IRBuilder(blk)
            mine = list(outs)
            for i, have, _ in back.pairs:
                mine[i] = self._temp(bb, have.nbytes)
            bb = self._computation(bb, branch,
                                   [addr[s.id] if s is not None else None for s in ops], mine)
            for i, have, want in back.pairs:
                self._relayout(bb, outs[i], mine[i], have, want, _where(t.instr))
            bb.branch(merge)
        for s, o in zip(t.out_slots, outs):
            if s is not None:
                addr[s.id] = o
        return ir.IRBuilder(merge)

    # ---- compiling ---------------------------------------------------------------
    def compile(self, target_cpu: str | None = None, triple: str | None = None) -> bytes:
        """Object code for `triple` (default: this host) and `target_cpu` (default: this
        host's CPU and features when the triple is the host's, else generic)."""
        text = str(self.llvm_module())
        tm, target = target_machine(target_cpu, triple)
        with _LOCK:
            # The pipeline by the rule jit's units follow (one rule: compile_pool's), so an
            # AOT object computes the bits `xladist.compile` computes.
            mod = llvm_worker.optimize(text, tm, target.triple,
                                       exact=pipeline_exact(text, target))
            # After optimizing: nothing in the IR calls the builtins yet (codegen does).
            mod.link_in(llvm.parse_assembly(_builtins_ir()))
            for name in builtins.provided_names():
                mod.get_function(name).linkage = llvm.Linkage.internal
            return tm.emit_object(mod)

    # ---- the C header ----------------------------------------------------------------
    def header(self) -> str:
        n = self.name
        lines = [f"/* {n}.h: generated by `xladist aot` from HLO module {self.module.name}.",
                 f"   Link {n}.o (plus the flags in {n}.ldflags); it needs only libc and libm. */",
                 # The guard keeps the name's case: `step` and `STEP` are two APIs a
                 # program may include together.
                 f"#ifndef XLADIST_AOT_{n}_H", f"#define XLADIST_AOT_{n}_H",
                 "#include <stddef.h>",
                 "#ifdef __cplusplus", 'extern "C" {', "#endif", ""]
        for what, leaves in (("args", self.args), ("results", self.results)):
            for i, x in enumerate(leaves):
                lines.append(f"/* {what}[{i}]: {x.name} {x.shape.to_text()} "
                             f"({x.shape.element_type.name} = {x.shape.dtype}, {x.nbytes} bytes) */")
        lines += ["",
                  f"#define {n}_NUM_ARGS {len(self.args)}       /* entry parameters */",
                  (f"#define {n}_NUM_RESULTS {len(self.results)}    "
                  f"/* leaves of the flattened result */"),
                  # (no size for none: ISO C and C++ have no zero-size arrays)
                  f"extern const size_t {n}_arg_bytes[{f'{n}_NUM_ARGS' if self.args else ''}];",
                  (f"extern const size_t {n}_result_bytes"
                   f"[{f'{n}_NUM_RESULTS' if self.results else ''}];"),
                  (f"size_t {n}_temp_bytes(void);  /* scratch the caller provides, 64-byte "
                  f"aligned; may be 0 */"),
                  ("/* args[i], results[j]: dense buffers in the parameter's / result's layout "
                  "(row-major"),
                  ("   for the default layout), 64-byte aligned. Returns 0 on success. Reentrant: "
                  "calls"),
                  "   with distinct temp buffers may run concurrently. */",
                  *self._sub_byte_note(),
                  f"int {n}_run(const void *const *args, void *const *results, void *temp);",
                  "", "#ifdef __cplusplus", "}", "#endif", "#endif", ""]
        return "\n".join(lines)

    def _sub_byte_note(self) -> list[str]:
        """How the buffers hold s4/u4 (s2/u2) elements, when some argument or result has
        them: as the code reads and writes them (lowbits.py), which C has no type to say."""
        from ..codegen.lowbits import SUB_BYTE_INTS
        used = sorted({x.shape.element_type.name for x in (*self.args, *self.results)} &
                      set(SUB_BYTE_INTS))
        if not used:
            return []
        return [f"/* {'/'.join(used)} elements: one per byte, in its low bits (two's "
                "complement for the signed ones), as ml_dtypes",
                "   stores int4/uint4: the high bits are ignored in args and written as 0 in "
                "results. */"]


_LOCK = threading.Lock()


def _builtins_ir() -> str:
    """The compiler-runtime builtins, each listed in llvm.compiler.used so that, internal
    and uncalled in the IR, they still reach the object for codegen's libcalls."""
    names = builtins.provided_names()
    used = ", ".join(f"ptr @{n}" for n in names)
    return (builtins.runtime_ir() + f"\n@llvm.compiler.used = appending global "
            f"[{len(names)} x ptr] [{used}], section \"llvm.metadata\"\n")


def target_machine(cpu: str | None, triple: str | None):
    """(TargetMachine, Target) for position-independent object code."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    host = llvm.get_process_triple()
    triple = triple or host
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise UnsupportedError(f"unknown target triple {triple!r}: {e}") from None
    if cpu is None and triple == host:
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    else:
        cpu, features = cpu or "generic", ""
        check_cpu(triple, cpu, "--target-cpu")
    tm = target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic",
                                      codemodel="default")
    bits = _pointer_bits(str(tm.target_data))
    if bits != 64:
        raise UnsupportedError(f"--triple {triple}: a {bits}-bit target; ahead-of-time "
                               f"compilation makes objects for 64-bit targets only (the "
                               f"header's size_t sizes and the driver's addresses are "
                               f"64-bit)")
    arch = triple.split("-", 1)[0]
    if arch not in AOT_ARCHES:
        raise UnsupportedError(f"--triple {triple}: ahead-of-time objects are made for "
                               f"{', '.join(AOT_ARCHES)} only; LLVM cannot compile the "
                               f"object's bf16 helpers for {arch} (it aborted the process)")
    return tm, Target(triple, cpu, features)


# The architectures whose objects are made (tests/compiler/test_aot.py builds each): on
# others (powerpc64le, s390x) LLVM has no instruction for the bf16 conversions of the
# runtime helpers every object carries and ends the process with SIGABRT ("Cannot select:
# fp_to_bf16"), whatever the module.
AOT_ARCHES = ("x86_64", "aarch64", "arm64", "riscv64")


def _pointer_bits(data_layout: str) -> int:
    """Pointer width of address space 0 in an LLVM data layout ("p:32:32"; 64 when the
    layout leaves it at LLVM's default)."""
    for part in data_layout.split("-"):
        if part.startswith("p:"):
            return int(part.split(":")[1])
    return 64
