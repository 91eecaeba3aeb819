"""LLVM IR text -> object code, the one place that says how xladist optimizes and emits.

jit.py calls `compile_unit` in its own process; compile_pool.py runs this file as a
script (`python llvm_worker.py`) in helper processes that compile units in parallel, so it
imports nothing but the standard library and llvmlite: starting a helper must not import
xladist's compiler (a third of a second).

Two pipelines, both LLVM's O3 with the loop and SLP vectorizers and the target machine at
opt level 3:
  exact=True   also loop unrolling: what every kernel got before compile units existed.
               A unit whose IR lets LLVM change the rounding of its results (compile_pool's
               `pipeline_exact`: fast-math flags, which codegen no longer emits, libm
               calls, fmuladd on a CPU without FMA) must keep it: LLVM may fold such a
               call on constants that only unrolling exposes, or, with `reassoc`, let
               the unroller decide a sum's order.
  exact=False  without loop unrolling. For IR with plain IEEE arithmetic every LLVM pass
               keeps every result bit, so this changes speed, never values; unrolling
               took ~70% of LLVM's time on the training steps of benchmarks/ and bought no
               measurable kernel speed (docs/compile.md).

Protocol when run as a script (compile_pool.py is the other side): frames on stdin and
stdout, each an 8-byte little-endian length and a pickle. First, once llvmlite is loaded,
("ready", pid). Request: (job, ir_text, triple, cpu, features, exact). Reply: (job, True,
object bytes) or (job, False, error text). The process exits at end of input, at once, also
in the middle of a compile, so it never outlives the process that started it, whatever
signal ended that one (its end of the pipe closes when it dies).
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import struct
import sys
import threading

import llvmlite.binding as llvm
from llvmlite.binding.newpassmanagers import NewPassManager

_FRAME = struct.Struct("<Q")
LOCK = threading.Lock()  # held around each compile: llvmlite objects are not shared
_INIT = []


def _llvmlite_lock():
    """llvmlite's own lock, held around each of its calls into LLVM (ffi.lib._lock, not
    public: None where a llvmlite has none)."""
    return getattr(getattr(llvm.ffi, "lib", None), "_lock", None)


def _before_fork() -> None:
    """A fork waits until no thread of this process is inside a compile or an LLVM call.
    A child forked meanwhile (multiprocessing's fork start method beside a compiling
    thread, xladist's background GEMM build) inherited those locks held by a thread it
    does not have: its first compile waited for ever (in llvmlite's lock, 8 of 10 such
    forks), and LLVM's own state might be half-changed."""
    LOCK.acquire()
    held = _llvmlite_lock()
    if held is not None:
        held.__enter__()


def _after_fork() -> None:
    held = _llvmlite_lock()
    if held is not None:
        held.__exit__(None, None, None)
    LOCK.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                        after_in_child=_after_fork)


def _init() -> None:
    if not _INIT:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _INIT.append(True)


def target_machine(triple: str, cpu: str, features: str):
    """A fresh target machine (MCJIT takes ownership of the one it is given)."""
    _init()
    if triple != llvm.get_process_triple():
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, codemodel="jitdefault")


def pass_builder(tm, exact: bool):
    """LLVM's pass builder for target machine `tm` and the pipeline `exact` names."""
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = exact
    return llvm.create_pass_builder(tm, pto)


# (triple, cpu, features, exact) -> (target machine, pass builder) of compile_unit.
_PIPELINES: dict = {}


def _pipeline(triple: str, cpu: str, features: str, exact: bool):
    """The target machine and pass builder compile_unit uses for this target and pipeline,
    made once per process (a handful: one per target and pipeline). llvmlite's PassBuilder
    keeps ~1.7 KB of native memory after it is freed, so one per unit grew a process by
    ~8 KB for every small module it compiled (10,000 compiles: 80 MB). Both are only read
    by a compile, and compiles take turns (LOCK)."""
    key = (triple, cpu, features, exact)
    got = _PIPELINES.get(key)
    if got is None:
        tm = target_machine(triple, cpu, features)
        got = _PIPELINES[key] = (tm, pass_builder(tm, exact))
    return got


def optimize(llvm_ir: str, tm, triple: str, exact: bool = True, pb=None, context=None):
    """Parse, verify and optimize `llvm_ir` for target machine `tm`; the ModuleRef. `pb`:
    the pass_builder(tm, exact) to use (default: a new one); `context`: the LLVM context
    to parse into (default: llvmlite's global one)."""
    mod = llvm.parse_assembly(llvm_ir, context)
    mod.verify()
    mod.triple = triple
    mod.data_layout = str(tm.target_data)
    if pb is None:
        pb = pass_builder(tm, exact)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(mod, pb)
    finally:
        dispose_pass_manager(mpm)
    return mod


def dispose_pass_manager(mpm) -> None:
    """Free a module pass manager now. llvmlite's ModulePassManager never frees its own: its
    class lists ffi.ObjectRef before NewPassManager, so the `_dispose` that __del__ calls is
    ObjectRef's, which does nothing (llvmlite 0.50). Each optimized unit leaked ~70 KB of
    native memory: a process compiling 2,000 small modules grew by 150 MB. `detach` after
    the dispose: a later llvmlite whose own __del__ frees it does not free it twice."""
    if not mpm.closed:
        NewPassManager._dispose(mpm)
        mpm.detach()


def compile_unit(llvm_ir: str, triple: str, cpu: str, features: str,
                 exact: bool = True) -> bytes:
    """Optimized object code of one LLVM module for the target (triple, cpu, features).

    The module lives in an LLVM context of its own, freed with it: LLVM keeps every type and
    constant a context ever made until the context goes, so in llvmlite's global context
    each unit of new shapes left ~1.3-2 KB for good (1,000 distinct small units: 1.3-2.1
    KB each; 0 in their own contexts)."""
    with LOCK:
        tm, pb = _pipeline(triple, cpu, features, exact)
        context = llvm.create_context()
        try:
            mod = optimize(llvm_ir, tm, triple, exact, pb, context)
            try:
                return tm.emit_object(mod)
            finally:
                mod.close()
        finally:
            context.close()


def _read_exact(f, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = f.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frame(f):
    """The next pickled frame of `f`, or None at end of input."""
    head = _read_exact(f, _FRAME.size)
    if head is None:
        return None
    body = _read_exact(f, _FRAME.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def write_frame(f, value) -> None:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_FRAME.pack(len(body)) + body)
    f.flush()


def _compile_request(request):
    job, text, triple, cpu, features, exact = request
    try:
        return (job, True, compile_unit(text, triple, cpu, features, exact))
    except Exception as e:  # noqa: BLE001 -- reported to the parent, which raises it
        return (job, False, f"{type(e).__name__}: {e}")


def serve(inp, out) -> None:
    """Compile requests from `inp`, replies to `out`. The end of `inp` ends this process at
    once, also in the middle of a compile: the parent closed the pipe or died (by any
    signal, SIGKILL too: the kernel closes its end), and no one waits for the unit under
    way. A thread reads the requests; this one compiles."""
    requests: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:
        while (request := read_frame(inp)) is not None:
            requests.put(request)
        os._exit(0)

    threading.Thread(target=read, daemon=True, name="xladist-helper-requests").start()
    while True:
        reply = _compile_request(requests.get())
        try:
            write_frame(out, reply)
        except OSError:  # the parent is gone (EPIPE): the reader ends us too
            os._exit(0)


def main() -> None:
    # Ctrl-C at the terminal reaches the whole process group: the process that started this
    # one decides (and closes the pipe, which ends this one), no traceback from here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Replies go to the pipe that was stdout; anything else printed goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _init()
    try:
        write_frame(out, ("ready", os.getpid()))  # llvmlite is loaded: send work
    except OSError:  # the parent died while this one started: nothing to say, no traceback
        os._exit(0)
    serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
