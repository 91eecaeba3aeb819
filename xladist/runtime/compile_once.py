"""One compile per job: the launching process compiles, for a target every rank runs, and the
ranks load that object over the network.

Without this every rank of `xladist run -n N` runs codegen and LLVM on the same module (N
compiles on a machine with fewer cores than ranks, and on a cluster N compiles that may
differ: ranks on hosts with other CPUs would compile other code, so "replicated" values
would differ in their last bits). Here:

1. while mpiexec starts the ranks, the launching process (or rank 0 of a bare launch)
   compiles the module for its own CPU -- the common case, all hosts alike, needs nothing
   else (`CodeStore`, in the background);
2. when every rank has told the coordination service its CPU (hostinfo.target_info), the
   service decides the job's target (hostinfo.job_target) and, if it is not that one, the
   module is compiled again for it (`decide`);
3. a rank compiles exactly as the launcher did -- same module text, xladist.analysis.schedule's
   order, the job's target in XLADIST_JOB_TARGET -- so it computes the same kernel-cache
   key, misses its own disk cache (if it has one at all) and asks the service, which sends
   the object (`get`). The object goes to the kernel cache of the launching process as
   usual (unless it is off); the ranks keep it in memory only.

A module the launcher cannot compile is left to the ranks: they compile and report the error
with their rank, as before. XLADIST_COMPILE_ONCE=0 turns this off (for measuring it).
"""

from __future__ import annotations

import os
import queue
import threading

from xladist.errors import XlaDistError

ENV = "XLADIST_COMPILE_ONCE"
# How long a rank's request for code may wait for the launcher's compile.
WAIT_S = 600.0


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "no", "false")


def _text(target: dict | None) -> str | None:
    if target is None:
        return None
    from xladist.compiler.target import job_target_text
    return job_target_text(target["cpu"], target["features"], target["width"])


def targeting(target: dict | None):
    """This thread compiles for `target` (None: this host's own) inside the block; the
    process's environment and its other threads are untouched (the launching process may
    be a user's own: xladist.run from a notebook)."""
    from xladist.compiler.target import job_target_for
    return job_target_for(_text(target))


class CodeStore:
    """The job's compiled code by kernel-cache key (see the module docstring). `backend`
    other than "cpu" (or None: nothing to compile) makes it an empty store."""

    def __init__(self, module, backend: str | None):
        self.module = module
        self.on = backend == "cpu" and enabled()
        self.objects: dict[str, bytes] = {}
        self.targets: list[str | None] = []   # what was compiled (None: this host's own)
        self._jobs: queue.Queue = queue.Queue()
        self._pending = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()  # cancel(): the job is ending, compile no more
        self._worker = None
        if self.on:
            self._worker = threading.Thread(target=self._work, name="xladist-compile-once",
                                            daemon=True)
            self._worker.start()
            self._submit(None)

    def _submit(self, target: dict | None) -> None:
        with self._cond:
            self._pending += 1
        self._jobs.put(target)

    def _work(self) -> None:
        # One thread: compiles for different targets set XLADIST_JOB_TARGET in turn.
        from xladist.compiler import compile_pool
        while True:
            target = self._jobs.get()
            if target is StopIteration:
                return
            try:
                if self._stop.is_set():
                    continue
                with compile_pool.cancellable(self._stop):
                    try:
                        key, obj = _compile(self.module, target)
                    except compile_pool.Cancelled:
                        continue
                if key is not None:
                    with self._cond:
                        self.objects[key] = obj
                        self.targets.append(_text(target))
            finally:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()

    def decide(self, target: dict) -> None:
        """The job's target (from the service): compile for it unless this host's own
        compile already is that."""
        if not self.on:
            return
        from xladist.compiler.target import own_target
        try:
            own, width = own_target()
        except XlaDistError:
            # XLADIST_TARGET_CPU names a CPU this host cannot run (a login node launching
            # onto compute nodes): its own compile failed; the job's target is compiled.
            self._submit(target)
            return
        if _text(target) == _text({"cpu": own.cpu, "features": own.features, "width": width}):
            return
        self._submit(target)

    def get(self, key: str, timeout: float = WAIT_S) -> bytes | None:
        """The object for `key` once the compiles under way are done; None if it is not
        one of them (a rank then compiles that code itself)."""
        if not self.on:
            return None
        with self._cond:
            self._cond.wait_for(lambda: self._pending == 0, timeout)
            return self.objects.get(key)

    def cancel(self) -> None:
        """The job is ending early (a signal, Ctrl-C, a failed start): the compile under way
        stops after the unit this process is compiling (its helpers are killed) and no other
        starts, so `close` returns in about a unit's time, not the whole compile's."""
        if self._worker is not None:
            from xladist.compiler import compile_pool
            compile_pool.cancel(self._stop)

    def close(self) -> None:
        """No more compiles; waits for one under way (also when the job was interrupted: a
        process that exits while LLVM runs in a thread crashes at exit; `cancel` first
        shortens that wait)."""
        if self._worker is not None:
            self._jobs.put(StopIteration)
            self._worker.join(timeout=WAIT_S)
            self._worker = None


def _compile(module, target: dict | None):
    """(key, object) of `module` compiled as a rank compiles it, for `target`."""
    from xladist.analysis.schedule import schedule_module
    from xladist.compiler import jit, kernel_cache
    from xladist.compiler.program import CpuProgram
    with targeting(target), kernel_cache.local_only():
        try:
            prog = CpuProgram(module, schedule_module(module))  # also stores it in the cache
        except XlaDistError:
            return None, None  # the ranks compile and report it themselves, with their rank
        return jit.cache_key(prog.fingerprint), prog.code.blob
