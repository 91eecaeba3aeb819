"""While loops run by one native function, when condition and body are kernels,
collectives the driver can call (native/collectives.py: all-reduce, collective-permute,
leading-dimension all-gather; exchange.py: reduce-scatter, all-to-all), send/recv channels
whose done is in the same iteration (channels.py) and 2-D dots (native/blas.py: numpy's own
BLAS call) only.

A while thunk otherwise runs every iteration from Python: two computation runs,
buffers bound per run (several microseconds per iteration, which dominates a
`lax.scan` that writes one row per step, or a loop around a small all-reduce). When
the condition and the body consist only of kernel thunks and all-reduce device thunks
(native/collectives.py), their buffers can stay put for the whole loop, as XLA's
buffer assignment keeps a while's state in one allocation:
  * the carry lives in one buffer per leaf (C), owned by the loop: the condition
    and the body read their parameters from it;
  * a body result that is its parameter leaf handed back (unchanged, or updated in
    place: inplace.py) needs nothing;
  * a result the body computes into a buffer of its own (a kernel's result slot, an
    all-reduce's result: R, fixed for the loop) swaps roles with C: the table holds two
    halves, the second with every C and R exchanged, and iteration t uses half t % 2 --
    the body reads C while writing R, then the next iteration reads R while writing C.
    No copy per iteration (a 4 MiB all-reduce would pay a 4 MiB memcpy); when the loop
    ends after an odd number of bodies, R is copied into C once;
  * a result an all-reduce computes from the same carry leaf, `x' = all-reduce(x)`, with
    nothing reading x after it, is reduced in place (MPI_IN_PLACE into C): no swap, and
    MPI skips its own copy of the operand into the result (4 MiB: ~0.3 ms);
  * any other result (a constant, an alias, a leaf moved to another position, one
    buffer for two leaves) makes the loop ineligible: it keeps the Python path.
The driver `i64 loopN(ptr table)` calls the condition's kernels, reads the pred, runs
the body's steps, until the pred is false, and returns 0 or the MPI error code of a
failed all-reduce; `table` holds every kernel's argv, every all-reduce's MPI call and
the address of a few cells the driver writes (the iteration, the wait cell the
deadline daemon reads, the number of bodies run): filled once per loop run. The kernels
are in the same LLVM module, so the optimizer may inline them into it.

Kernel-only loops run natively whenever no timeline is recorded. A loop with
all-reduces runs natively when the device resolves every one of them to an MPI call
(`native_all_reduce`, xladist/runtime/mpi_context.py; else the Python path), and under the
deadline watchdog the whole run is one native wait bracket (deadline.py begin_native):
the report still names the rank, the all-reduce and the iteration. Traced runs keep
the Python path (they observe iterations).
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
from llvmlite import ir

from ...errors import ExecutionError
from ..codegen.ir_array import c64
from ..codegen.types import I8, I64, PTR
from ..inplace import FRESH
from ..thunks import KernelThunk, thunk_error
from . import exchange  # noqa: F401  (registers reduce-scatter, all-to-all steps)
from .blas import DotStep
from .callback import BOUND, CALLBACK, CallbackStep, emit_call, falls_back
from .callback import describe as describe_callbacks
from .channels import pair_up, paired
from .collectives import (
    AGREE_ENTRIES,
    CELL_BODIES,
    CELL_CLOCK,
    CELL_FAILED,
    CELL_ITERATION,
    CELL_WAIT,
    CELL_WAIT_NS,
    DISAGREE,
    N_CELLS,
    STEPS,
    WAIT_STEPS,
    emit_agreement,
    store_monotonic,
)
from .collectives import eligible as collective_eligible

DRIVER_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)
# The driver times its MPI calls with the C library's clock_gettime (its address in a cell).
_CLOCK_GETTIME = ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value
# Loops with all-reduces run natively unless XLADIST_NATIVE_COLLECTIVES=0 (tests compare
# both paths bit for bit; benchmarks measure the difference).
COLLECTIVES = os.environ.get("XLADIST_NATIVE_COLLECTIVES", "1") != "0"
# Other thunks are called back in Python from the driver (native/callback.py) unless
# XLADIST_NATIVE_CALLBACKS=0 (read when a loop is compiled): then such a loop keeps the
# Python executor.
CALLBACKS = os.environ.get("XLADIST_NATIVE_CALLBACKS", "1") != "0"


class KernelStep:
    """A kernel thunk the driver calls with its argv (one table entry)."""

    kind = "kernel"
    N_ENTRIES = 1

    def __init__(self, thunk):
        self.thunk = thunk

    def emit(self, b, entry, cells, progress, index, fail) -> None:
        b.call(b.function.module.get_global(self.thunk.spec.name), [entry(0, PTR)])


def _step(thunk):
    if type(thunk) is KernelThunk:
        return KernelStep(thunk)
    if DotStep.eligible(thunk):
        return DotStep(thunk)
    if collective_eligible(thunk):
        return STEPS[thunk.instr.opcode](thunk)
    return CallbackStep(thunk)


def _agrees(step) -> bool:
    """A collective step, which an unproven run's members agree on first (AGREE_ENTRIES)."""
    return step.kind in STEPS


def _own_entries(step) -> int:
    """A step's table entries before its agreement's: its own, then its callback's two."""
    return step.N_ENTRIES + (2 if falls_back(step) else 0)


def _resolve(step, device):
    """What a non-kernel step calls, resolved once per loop run: a collective by the
    device's method `step.bind` (e.g. native_all_reduce), a dot by itself (native/blas.py);
    None when it cannot run natively."""
    own = getattr(step, "resolve", None)
    if own is not None:
        return own(device)
    native = getattr(device, step.bind, None)
    return native(step.instr, step.thunk.reducer) if native is not None else None


class NativeLoop:
    """The driver of one while thunk: its steps, its table, the leaves it swaps."""

    def __init__(self, name: str, cond, body, while_name: str):
        self.name = name
        self.while_name = while_name  # the user's while, as the watchdog names it
        self.cond, self.body = cond, body
        self.steps = [_step(t) for t in list(cond.thunks) + list(body.thunks)]
        self.n_cond = len(cond.thunks)
        pair_up(self.steps)  # channel starts and dones (native/channels.py)
        self.collective_steps = [j for j, s in enumerate(self.steps) if s.kind != "kernel"]
        self.collectives = [self.steps[j] for j in self.collective_steps]
        # (carry leaf, body result slot) per leaf the body computes into its own buffer;
        # those an all-reduce computes from the same leaf run in place instead (_in_place).
        self.in_place = _in_place(body, self.steps[self.n_cond:])
        self.swaps = [(k, r) for k, r in _swaps(body) if k not in self.in_place]
        for step in self.in_place.values():
            step.in_place = True
        self.pred_slot = cond.root_slots[0]
        # Entries per table half: the cells' address, the steps', the pred's address.
        self.offsets = []
        n = 1
        for s in self.steps:
            self.offsets.append(n)
            n += _own_entries(s) + (AGREE_ENTRIES if _agrees(s) else 0)
        self.half = n + 1
        self.fn = None
        self._fixed: dict = {}  # (computation id, slot id) -> a buffer the loop keeps
        self._bound = (None, None)  # (device, [native all-reduce per collective] or None)
        # Per collective step: the device's exchange before it (runtime/signatures.py) or
        # None, for the device in _bound.
        self._agreements: list = []
        # Callbacks (native/callback.py): the C function, and per run the Frames of each
        # table half and the exception a callback caught.
        # Step index -> the CallbackStep run for it (its own, or a collective's fallback).
        self._called = {j: s if s.kind == "callback" else CallbackStep(s.thunk)
                        for j, s in enumerate(self.steps)
                        if s.kind == "callback" or falls_back(s)}
        self._callback = CALLBACK(self._call_back) if self._called else None
        self._frames = None
        self._raised = None

    @staticmethod
    def eligible(cond, body, identity_relayouts: bool) -> bool:
        thunks = list(cond.thunks) + list(body.thunks)
        if not identity_relayouts or len(thunks) >= WAIT_STEPS - 1:  # steps fit the wait cell
            return False
        called_back = False
        for t in thunks:
            if type(t) is not KernelThunk and not collective_eligible(t) \
                    and not DotStep.eligible(t):
                if not (CALLBACKS and CallbackStep.eligible(t)):
                    return False
                called_back = True
        # A loop that needs callbacks was the Python executor's, which runs split kernels
        # on the compute threads; the driver runs kernels on one thread: keep such loops.
        if called_back and any(type(t) is KernelThunk and t.blocks is not None
                               for t in thunks):
            return False
        if not paired(thunks):
            return False
        pred = cond.root_slots[0] if len(cond.root_slots) == 1 else None
        if pred is None or pred.kind not in ("out", "const", "param"):
            return False
        return _swaps(body) is not None

    # ---- code ------------------------------------------------------------------
    def emit(self, module: ir.Module) -> None:
        fn = ir.Function(module, ir.FunctionType(I64, [PTR]), name=self.name)
        fn.attributes.add("nounwind")
        table = fn.args[0]
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        head = fn.append_basic_block("cond")
        body = fn.append_basic_block("body")
        done = fn.append_basic_block("done")
        parity = b.alloca(I64, name="parity")      # which table half this iteration uses
        bodies = b.alloca(I64, name="bodies")
        iteration = b.alloca(I64, name="iteration")
        progress = b.alloca(I64, name="progress")  # collective calls (native_collectives)
        for v in (parity, bodies, iteration, progress):
            b.store(c64(0), v)
        cells = b.load(table, typ=PTR)

        def cell(k):
            return b.gep(cells, [c64(k)], inbounds=True, source_etype=I64)

        def half():
            return b.gep(table, [b.mul(b.load(parity, typ=I64), c64(self.half))],
                         inbounds=True, source_etype=PTR)

        def fail(bb, code):
            bb.store(bb.load(bodies, typ=I64), cell(CELL_BODIES))
            bb.ret(code)

        def run_steps(steps, first):
            base = half()
            for j, step in enumerate(steps, first):
                at = self.offsets[j]

                def entry(k, typ, at=at):
                    return b.load(b.gep(base, [c64(at + k)], inbounds=True,
                                        source_etype=PTR), typ=typ)
                if _agrees(step):
                    skip = _own_entries(step)
                    emit_agreement(b, lambda k, typ, entry=entry, skip=skip: entry(skip + k, typ),
                                   cells, progress, j, fail, step.kind == "collective-permute")
                if not falls_back(step):
                    step.emit(b, entry, cells, progress, j, fail)
                    continue
                # Called back when the runtime left the step's callback entry non-zero.
                via_cb = b.function.append_basic_block(f"step{j}.callback")
                via_native = b.function.append_basic_block(f"step{j}.native")
                after = b.function.append_basic_block(f"step{j}.done")
                b.cbranch(b.icmp_unsigned("!=", entry(step.N_ENTRIES, I64), c64(0)),
                          via_cb, via_native)
                b.position_at_end(via_cb)
                emit_call(b, entry, step.N_ENTRIES, cells, j, fail)
                b.branch(after)
                b.position_at_end(via_native)
                step.emit(b, entry, cells, progress, j, fail)
                b.branch(after)
                b.position_at_end(after)

        b.branch(head)
        b.position_at_end(head)
        # The condition before body k belongs to iteration k (control.py, the watchdog).
        it = b.add(b.load(iteration, typ=I64), c64(1))
        b.store(it, iteration)
        store_monotonic(b, it, cell(CELL_ITERATION))
        run_steps(self.steps[:self.n_cond], 0)
        pred_at = b.load(b.gep(half(), [c64(self.half - 1)], inbounds=True, source_etype=PTR),
                         typ=PTR)
        b.cbranch(b.icmp_unsigned("!=", b.load(pred_at, typ=I8), ir.Constant(I8, 0)),
                  body, done)
        b.position_at_end(body)
        run_steps(self.steps[self.n_cond:], self.n_cond)
        b.store(b.xor(b.load(parity, typ=I64), c64(1)), parity)
        b.store(b.add(b.load(bodies, typ=I64), c64(1)), bodies)
        b.branch(head)
        b.position_at_end(done)
        b.store(b.load(bodies, typ=I64), cell(CELL_BODIES))
        b.ret(c64(0))

    def bind(self, code) -> None:
        self.fn = DRIVER_TYPE(code.address(self.name))

    def describe(self) -> str:
        """`loop3; callbacks: infeed.24, outfeed.65` (xladist explain)."""
        return self.name + describe_callbacks(self.steps)

    # ---- running ---------------------------------------------------------------
    def bind_device(self, device):
        """The device's native form of every collective (cached per device: its method
        `step.bind`, e.g. native_all_reduce), or None when one of them has none: then the
        loop keeps the Python path."""
        if not COLLECTIVES:
            return None
        if self._bound[0] is not device:
            bound, agreements = [], []
            agree = getattr(device, "native_agreement", None)
            for s in self.collectives:
                d = _resolve(s, device)
                if d is None and CALLBACKS and falls_back(s):
                    d = BOUND  # called back in Python (native/callback.py)
                # A step called back exchanges in Python, as every collective call does.
                a = agree(s.instr) if agree is not None and _agrees(s) and d is not BOUND \
                    else None
                if d is None or a is False:  # False: an exchange native code cannot make
                    bound = None
                    break
                bound.append(d)
                agreements.append(a)
            self._bound = (device, bound)
            self._agreements = agreements
        return self._bound[1]

    def _fixed_outs(self, cc) -> dict:
        """A buffer per result slot of cc and per all-reduce result, kept for every run
        of the loop (the loop swaps or copies out of them; they never leave it)."""
        out = {}
        for s in cc.asg.slots:
            # In an eligible loop only collectives write dynamic slots.
            if s.kind in ("out", "dyn"):
                key = (id(cc), s.id)
                a = self._fixed.get(key)
                if a is None:
                    a = self._fixed[key] = np.empty(max(s.nbytes, 1), np.uint8)
                out[s.id] = a
        return out

    def _half(self, state, outs, cells, bound, argvs: list, which: int, rs) -> list[int]:
        """Table half `which`: addresses for a run on `state` with result buffers `outs`
        (the kernels' argv arrays are kept alive in `argvs`); with callbacks, the half's
        Frames go to self._frames[which]."""
        addrs = {id(cc): cc.addresses(state, outs[id(cc)]) for cc in (self.cond, self.body)}
        if self._frames is not None:
            self._frames[which] = [cc.frame(state, outs[id(cc)], addrs[id(cc)], rs)
                                   for cc in (self.cond, self.body)]
        table = [ctypes.addressof(cells)]
        collective = iter(bound or ())
        agreement = iter(self._agreements)
        for j, step in enumerate(self.steps):
            a = addrs[id(self.cond if j < self.n_cond else self.body)]
            if step.kind == "kernel":
                ids = step.thunk.ids
                argv = (ctypes.c_uint64 * max(len(ids), 1))(*[a[i] for i in ids])
                argvs.append(argv)
                table.append(ctypes.addressof(argv))
            else:
                d, agree = next(collective), next(agreement)
                if d is BOUND:
                    table += [0] * (step.N_ENTRIES if step.kind != "callback" else 0) + \
                        [ctypes.cast(self._callback, ctypes.c_void_p).value, which]
                else:
                    table += step.entries(a, d) + ([0, which] if falls_back(step) else [])
                if _agrees(step):
                    table += agree.entries() if agree is not None else [0] * AGREE_ENTRIES
        table.append(addrs[id(self.cond)][self.pred_slot.id])
        return table

    def _call_back(self, j: int, which: int) -> int:
        """The driver's callback (native/callback.py): step j on table half `which`."""
        step = self._called[j]
        try:
            step.run(self._frames[which][j >= self.n_cond])
        except BaseException as e:  # noqa: BLE001 -- never into the C frames: run() raises it
            self._raised = (e, step.thunk)
            return 1
        return 0

    def run(self, state: list, owned: set, bound=None, wd=None, rs=None) -> list:
        """Runs the loop on `state` (leaves in `owned` may be written) with the device's
        native all-reduces `bound`; returns the final state, every swapped leaf a buffer
        of the loop's own. `wd`: the deadline watchdog, told about the whole run; `rs`:
        the RunState callbacks run in."""
        state = list(state)
        for k in [k for k, _s in self.swaps] + list(self.in_place):
            if k not in owned:
                state[k] = state[k].copy()
        outs = {id(cc): self._fixed_outs(cc) for cc in (self.cond, self.body)}
        for k, step in self.in_place.items():  # the all-reduce's result is the carry itself
            outs[id(self.body)][step.dst.id] = state[k]
        # The second half: every swapped carry buffer and its result buffer exchanged.
        state2, outs2 = list(state), {k: dict(v) for k, v in outs.items()}
        body_outs = outs[id(self.body)]
        for k, s in self.swaps:
            state2[k] = body_outs[s.id]
            outs2[id(self.body)][s.id] = state[k]
        cells = (ctypes.c_int64 * N_CELLS)()
        cells[CELL_CLOCK] = _CLOCK_GETTIME
        argvs: list = []
        self._frames = [None, None] if any(d is BOUND for d in bound or ()) else None
        table = self._half(state, outs, cells, bound, argvs, 0, rs) + \
            self._half(state2, outs2, cells, bound, argvs, 1, rs)
        t = (ctypes.c_uint64 * len(table))(*table)
        if wd is None:
            code = self.fn(ctypes.addressof(t))
        else:
            places = {j: (d.label, d.where) for j, d in zip(self.collective_steps, bound)
                      if hasattr(d, "label")}  # the steps that wait (not dots)
            token = wd.begin_native(self.while_name, cells, places)
            try:
                code = self.fn(ctypes.addressof(t))
            finally:
                wd.end_native(token)
        del argvs
        self._frames = None
        # The loop's waits in MPI, for `--stats` (a device that keeps such totals).
        note = getattr(getattr(rs, "device", None), "native_waits", None)
        if note is not None:
            note(cells[CELL_WAIT_NS], cells[CELL_WAIT] // WAIT_STEPS)
        if self._raised is not None:
            (e, thunk), self._raised = self._raised, None
            if not isinstance(e, Exception):
                raise e
            raise thunk_error(e, thunk, getattr(rs, "device", None)) from None
        if code == DISAGREE:
            agree = self._agreements[self.collective_steps.index(cells[CELL_FAILED])]
            raise agree.refused(f"iteration {cells[CELL_ITERATION]} of {self.while_name}")
        if code:
            d = bound[self.collective_steps.index(cells[CELL_FAILED])]
            raise ExecutionError(f"{d.call} failed in iteration "
                                 f"{cells[CELL_ITERATION]} of {self.while_name}: "
                                 f"{d.error_text(code)}", instruction=d.label)
        if cells[CELL_BODIES] % 2:
            for k, s in self.swaps:
                np.copyto(state[k], body_outs[s.id])
        return state


def _in_place(body, steps) -> dict:
    """Carry leaf -> the all-reduce step computing that leaf's next value from the leaf itself
    (`x' = all-reduce(x)`), when nothing reads x after it: MPI then reduces in place
    (MPI_IN_PLACE), saving the copy of the operand into the result that MPI makes first."""
    out = {}
    params = {s.id: k for k, s in enumerate(body.param_slots) if s is not None}
    roots = [s.id if s is not None else None for s in body.root_slots]
    for j, step in enumerate(steps):
        if step.kind != "all-reduce":
            continue
        k = params.get(step.src.id)
        if k is None or roots[k] != step.dst.id or step.src.id in roots \
                or roots.count(step.dst.id) != 1:
            continue
        if any(step.src.id in _reads(later) for later in steps[j + 1:]):
            continue
        out[k] = step
    return out


def _reads(step) -> set:
    """Slots a step may read (a kernel: every slot it is given, in-place updates included)."""
    if step.kind == "kernel":
        return set(step.thunk.ids)
    reads = getattr(step, "reads", None)  # dots, channels (a send-done: the send's data)
    return reads if reads is not None else {step.src.id}


def _swaps(body):
    """(carry leaf, result slot) per body result computed into a buffer of the body's own:
    a kernel's result slot or an all-reduce's result (the driver swaps them with the
    carry); None when some result fits neither that nor "the same leaf handed back"."""
    written = {s.id for t in body.thunks if type(t) is not KernelThunk
               for s in getattr(t, "out_slots", ()) if s is not None}
    swaps, seen = [], set()
    for k, (s, src) in enumerate(zip(body.root_slots, body.sources)):
        if s is None or src == k:
            continue
        own = (src == FRESH and s.kind == "out") or (s.kind == "dyn" and s.id in written)
        if not own or s.id in seen:
            return None
        if not s.nbytes:
            continue
        seen.add(s.id)
        swaps.append((k, s))
    return swaps
