"""While loops run by one native function, when condition and body are kernels only.

A while thunk otherwise runs every iteration from Python: two computation runs,
buffers bound per run (several microseconds per iteration, which dominates a
`lax.scan` that writes one row per step). When the condition and the body consist
only of kernel thunks, their buffers can stay put for the whole loop, as XLA's
buffer assignment keeps a while's state in one allocation:
  * the carry lives in one buffer per leaf (C), owned by the loop: the condition
    and the body read their parameters from it;
  * a body result that is its parameter leaf handed back (unchanged, or updated in
    place: inplace.py) needs nothing; a result the body computes into a result
    buffer (R, fixed for the loop) is copied into C after the iteration — the body
    reads C while writing R, so there is no hazard;
  * any other result (a constant, an alias, a leaf moved to another position) makes
    the loop ineligible: it keeps the Python path.
The driver `void loopN(ptr table)` calls the condition's kernels, reads the pred,
calls the body's kernels and memcpys R into C, until the pred is false; `table`
holds every kernel's argv and the copy addresses, filled once per loop run. The
kernels are in the same LLVM module, so the optimizer may inline them into it.
Traced or watchdog-tracked runs keep the Python path (they observe iterations).
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from .codegen.ir_array import c64
from .codegen.types import I1, I8, PTR, VOID
from .inplace import FRESH
from .thunks import KernelThunk, address


class NativeLoop:
    """The driver of one while thunk: what it calls and copies, and its table."""

    def __init__(self, name: str, cond, body):
        self.name = name
        self.cond, self.body = cond, body
        self.kernels = list(cond.thunks) + list(body.thunks)
        self.n_cond = len(cond.thunks)
        # (carry leaf, body result slot) per leaf the body computes into a result buffer.
        self.copies = [(k, s) for k, (s, src) in enumerate(zip(body.root_slots, body.sources))
                       if s is not None and src == FRESH and s.kind == "out" and s.nbytes]
        self.pred_slot = cond.root_slots[0]
        self.fn = None
        self._outs: dict = {}  # (computation id, slot id) -> the fixed result buffer

    @staticmethod
    def eligible(cond, body, identity_relayouts: bool) -> bool:
        if not identity_relayouts:
            return False
        if not all(type(t) is KernelThunk for t in list(cond.thunks) + list(body.thunks)):
            return False
        pred = cond.root_slots[0] if len(cond.root_slots) == 1 else None
        if pred is None or pred.kind not in ("out", "const", "param"):
            return False
        for k, (s, src) in enumerate(zip(body.root_slots, body.sources)):
            if s is None:
                continue
            if not (src == k or (src == FRESH and s.kind == "out")):
                return False
        return True

    # ---- code ------------------------------------------------------------------
    def emit(self, module: ir.Module) -> None:
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR]), name=self.name)
        fn.attributes.add("nounwind")
        table = fn.args[0]
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        head = fn.append_basic_block("cond")
        body = fn.append_basic_block("body")
        done = fn.append_basic_block("done")
        memcpy = module.declare_intrinsic("llvm.memcpy", [PTR, PTR, ir.IntType(64)])

        def entry(i):
            return b.load(b.gep(table, [c64(i)], inbounds=True, source_etype=PTR), typ=PTR)

        def call(j, thunk):
            b.call(module.get_global(thunk.spec.name), [entry(j)])

        b.branch(head)
        b.position_at_end(head)
        for j, t in enumerate(self.kernels[:self.n_cond]):
            call(j, t)
        n = len(self.kernels)
        pred = b.load(entry(n), typ=I8)
        b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(I8, 0)), body, done)
        b.position_at_end(body)
        for j, t in enumerate(self.kernels[self.n_cond:], self.n_cond):
            call(j, t)
        for c, (_k, s) in enumerate(self.copies):
            dst, src = entry(n + 1 + 2 * c), entry(n + 2 + 2 * c)
            b.call(memcpy, [dst, src, c64(s.nbytes), ir.Constant(I1, 0)])
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()

    def bind(self, code) -> None:
        self.fn = code.kernel(self.name)

    # ---- running ---------------------------------------------------------------
    def _fixed_outs(self, cc) -> dict:
        """A result buffer per result slot of cc, kept for every run of the loop (the
        loop copies out of them; they never leave it)."""
        out = {}
        for s in cc.asg.slots:
            if s.kind == "out":
                key = (id(cc), s.id)
                a = self._outs.get(key)
                if a is None:
                    a = self._outs[key] = np.empty(max(s.nbytes, 1), np.uint8)
                out[s.id] = a
        return out

    def run(self, state: list, owned: set) -> list:
        """Runs the loop on `state` (leaves in `owned` may be written); returns the
        final state, every copied-into leaf a buffer of the loop's own."""
        state = list(state)
        for k, _s in self.copies:
            if k not in owned:
                state[k] = state[k].copy()
        addrs = {}
        for cc in (self.cond, self.body):
            addrs[id(cc)] = cc.addresses(state, self._fixed_outs(cc))
        argvs = []
        table = []
        for j, t in enumerate(self.kernels):
            cc = self.cond if j < self.n_cond else self.body
            a = addrs[id(cc)]
            argv = (ctypes.c_uint64 * max(len(t.ids), 1))(*[a[i] for i in t.ids])
            argvs.append(argv)
            table.append(ctypes.addressof(argv))
        table.append(addrs[id(self.cond)][self.pred_slot.id])
        body_addrs = addrs[id(self.body)]
        for k, s in self.copies:
            table += [address(state[k]), body_addrs[s.id]]
        t = (ctypes.c_uint64 * len(table))(*table)
        self.fn(ctypes.addressof(t))
        del argvs
        return state
