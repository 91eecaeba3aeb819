"""Compiling a program's units (units.py) on every core this process may use.

Why processes: llvmlite releases the GIL in its calls (ctypes), but it wraps every call into
LLVM in one process-wide lock (llvmlite.binding.ffi's _LLVMLock), and optimizing a module
or emitting its object is one call each, so threads would take turns. So the units go to helper processes running llvm_worker.py --
the same function this process calls, with the same target and pipeline, so a unit's
object is the same bytes whichever process made it -- and this process compiles units
itself meanwhile.

  jobs(): XLADIST_COMPILE_JOBS, else parallel.thread_count() (this process's share of the
  cores). jobs() - 1 helpers are started the first time a program with MIN_UNITS units or
  more compiles, and kept for the life of the process (starting one costs ~0.25 s of a
  core: Python and llvmlite; a few small units compile faster than that here). They block
  on their pipe between compiles and exit when it closes, at this process's exit or death;
  a forked child does not use its parent's helpers. `python -P`: the script's folder
  (xladist/compiler, with its coverage.py, target.py, ...) is not put on sys.path.

Largest units go first (LLVM's time grows with a unit's IR, and the exact pipeline costs
~3x the other), so the last unit to finish is a small one. Each unit is compiled with the
pipeline its IR allows (`pipeline_exact`, llvm_worker.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from . import llvm_worker
from .target import Target

ENV = "XLADIST_COMPILE_JOBS"
MIN_UNITS = 8

# Fast-math flags: with any of them LLVM may change a result's rounding, and how far it
# does depends on the pipeline (reassoc: the unroller and vectorizers would decide a sum's
# order). Codegen emits none (float reductions fix their own order, codegen/lanes.py); the
# clause stays so that IR which ever carries one keeps the pipeline that is safe for it.
_FAST_MATH = re.compile(r"\b(?:reassoc|nnan|ninf|nsz|arcp|contract|afn|fast)\b")
# A declared function that is not an LLVM intrinsic (libm's erf): LLVM may fold a call with
# constant arguments using the host's own function, and constants appear when loops unroll.
_EXTERNAL = re.compile(r'^declare [^@]*@(?!"?llvm\.)', re.MULTILINE)


def pipeline_exact(llvm_ir: str, target: Target) -> bool:
    """Whether a unit must get the pipeline every kernel got before (loop unrolling on):
    when its IR lets LLVM's choices change result bits. The one rule: jit.compile_units
    and the AOT compile (aot/program.py) both ask it. llvm.fmuladd is fused on a CPU with
    FMA whatever the pipeline, but on one without it is a multiply and an add at run time
    while LLVM folds constants fused."""
    if _FAST_MATH.search(llvm_ir) or _EXTERNAL.search(llvm_ir):
        return True
    return "llvm.fmuladd" in llvm_ir and "+fma" not in target.features.split(",")


def jobs() -> int:
    from ..environment import setting
    n = setting(ENV)
    if n is not None:
        return n
    from .parallel import thread_count
    return thread_count()


@dataclass
class Job:
    name: str      # what the unit holds, for messages
    text: str      # LLVM IR, vector width applied
    exact: bool

    @property
    def cost(self) -> int:
        return len(self.text) * (3 if self.exact else 1)


class CompileError(RuntimeError):
    """LLVM failed on a unit, or the helper process compiling it ended (the message says
    which unit and why)."""


class Cancelled(CompileError):
    """The compile was cancelled (`cancelling`): whoever wanted its code is ending."""


class _Died(Exception):
    """A helper process ended while compiling a job; args[0] is its exit code."""


def _how_it_ended(returncode: int) -> str:
    """A helper's end in words: a signal by name (SIGKILL is what the kernel's out-of-memory
    killer sends), else the exit code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        why = " (out of memory?)" if returncode == -signal.SIGKILL else ""
        return f"was killed by {name}{why}"
    return f"ended (exit code {returncode})"


class _Helper:
    """One helper process and the pipes to it; used by one thread at a time (lock)."""

    def __init__(self):
        env = dict(os.environ)
        # llvmlite from wherever this process found it.
        import llvmlite
        site = os.path.dirname(os.path.dirname(os.path.abspath(llvmlite.__file__)))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (site, env.get("PYTHONPATH", "")) if p)
        script = os.path.abspath(llvm_worker.__file__)
        self.proc = subprocess.Popen([sys.executable, "-P", script], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, close_fds=True)
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.dead = False
        threading.Thread(target=self._wait_ready, daemon=True,
                         name="xladist-compile-helper-start").start()

    def alive(self) -> bool:
        if not self.dead and self.proc.poll() is not None:
            self.dead = True  # ended between compiles (killed, or out of memory)
        return not self.dead

    def _wait_ready(self) -> None:
        with self.lock:
            if llvm_worker.read_frame(self.proc.stdout) is None:
                self.dead = True
            self.ready.set()

    def run(self, job_id: int, job: Job, target: Target):
        """(ok, object bytes or error text); None if the job could not be handed over
        (the process had ended: the job is still to do); raises _Died when the process
        ended while compiling it."""
        if self.proc.poll() is not None:
            self.dead = True
            return None
        try:
            llvm_worker.write_frame(self.proc.stdin, (job_id, job.text, target.triple,
                                                      target.cpu, target.features, job.exact))
        except (OSError, ValueError):
            self.dead = True
            return None
        try:
            reply = llvm_worker.read_frame(self.proc.stdout)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            self.dead = True
            raise _Died(self.proc.wait())
        return reply[1], reply[2]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Pool:
    def __init__(self):
        self.pid = os.getpid()
        self.helpers: list[_Helper] = []

    def grow(self, n: int) -> list[_Helper]:
        self.helpers = [h for h in self.helpers if h.alive()]
        while len(self.helpers) < n:
            try:
                self.helpers.append(_Helper())
            except OSError:
                break  # no helper: this process compiles alone
        return list(self.helpers)

    def close(self) -> None:
        if self.pid == os.getpid():
            for h in self.helpers:
                h.close()
        self.helpers = []


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _helpers(n: int, units: int) -> list[_Helper]:
    """Up to n helpers: started when there are MIN_UNITS units or more, else only those
    already running."""
    global _pool
    if n <= 0 or not sys.executable:
        return []
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = _Pool()  # a forked child leaves its parent's helpers alone
        if units < MIN_UNITS:
            return [h for h in _pool.helpers if h.alive()][:n]
        return _pool.grow(n)


def start_helpers(units: int, wait: float = 0) -> int:
    """Start the helpers for about `units` units now (they boot while the caller
    generates IR); wait: up to that many seconds until they can take work. Returns how
    many are running."""
    helpers = _helpers(jobs() - 1, units)
    deadline = time.monotonic() + wait
    for h in helpers:
        h.ready.wait(max(0.0, deadline - time.monotonic()))
    return sum(h.alive() for h in helpers)


def helper_pids() -> list[int]:
    """Process ids of this process's running helpers (for tools measuring CPU time)."""
    if _pool is None or _pool.pid != os.getpid():
        return []
    return [h.proc.pid for h in _pool.helpers if h.alive()]


# Compiles under way that may be cancelled, with the event that cancels each (`cancelling`).
_active: dict["_Run", threading.Event] = {}
_cancel = threading.local()


@contextlib.contextmanager
def cancellable(event: threading.Event):
    """compile_jobs calls made by this thread in the block stop when `event` is set and
    `cancel(event)` is called: no unit starts after, the helpers compiling theirs are
    killed, and they raise Cancelled (a unit that this thread itself compiles finishes
    first: LLVM cannot be stopped inside a process). For a launcher that a signal ends
    while it compiles for its ranks (runtime/compile_once.py): it should not go on
    compiling for them, and its helpers die with it at once."""
    _cancel.event = event
    try:
        yield
    finally:
        _cancel.event = None


def cancel(event: threading.Event) -> None:
    """Set `event` and cancel the compiles running under it (see `cancellable`)."""
    event.set()
    with _pool_lock:
        runs = [r for r, e in _active.items() if e is event]
    for run in runs:
        run.cancel(Cancelled("the compile was cancelled"))
        run.kill_helpers()


@atexit.register
def _close() -> None:
    if _pool is not None:
        _pool.close()


class _Run:
    """One compile_jobs call: the jobs still to do (largest first), those in progress, and
    the results."""

    def __init__(self, jobs_: list[Job], target: Target):
        self.jobs, self.target = jobs_, target
        self.todo = sorted(range(len(jobs_)), key=lambda i: jobs_[i].cost)  # pop() = largest
        self.busy = 0
        self.results: list = [None] * len(jobs_)
        self.errors: dict[int, BaseException] = {}
        self.by_helpers = 0
        self.holding: set[_Helper] = set()  # helpers inside feed() for it (under cond)
        self.cond = threading.Condition()

    def claim(self, wait: bool = False) -> int | None:
        """The next job, or None when none is left (after an error: none). wait=True (this
        process's thread): while jobs are in progress elsewhere, wait for them to finish or
        to come back (a helper that ended before taking its job)."""
        with self.cond:
            while True:
                if self.errors:
                    return None
                if self.todo:
                    self.busy += 1
                    return self.todo.pop()
                if not wait or not self.busy:
                    return None
                self.cond.wait()

    def unclaim(self, i: int) -> None:
        with self.cond:
            self.todo.append(i)
            self.busy -= 1
            self.cond.notify_all()

    def done(self, i: int, obj=None, error: BaseException | None = None) -> None:
        with self.cond:
            if error is not None:
                self.errors[i] = error
            else:
                self.results[i] = obj
            self.busy -= 1
            self.cond.notify_all()

    def cancel(self, error: BaseException) -> None:
        with self.cond:
            self.errors.setdefault(-1, error)
            self.cond.notify_all()

    def wait(self) -> None:
        """Until no job is in progress (after an error, the others finish first)."""
        with self.cond:
            while self.busy:
                self.cond.wait()

    def kill_helpers(self) -> None:
        """Kill the helpers feeding this run (cancel): each ends its job at once, and the
        pool replaces it when next needed. Under `cond`, which feed() takes to leave, so
        a helper killed here has not yet passed to another run."""
        with self.cond:
            for h in self.holding:
                h.proc.kill()

    def feed(self, helper: _Helper) -> None:
        with helper.lock:
            with self.cond:
                self.holding.add(helper)
            try:
                self._feed(helper)
            finally:
                with self.cond:
                    self.holding.discard(helper)

    def _feed(self, helper: _Helper) -> None:
        while not helper.dead:
            i = self.claim()
            if i is None:
                return
            try:
                reply = helper.run(i, self.jobs[i], self.target)
            except _Died as e:
                self.done(i, error=CompileError(
                    f"the LLVM helper process {helper.proc.pid} {_how_it_ended(e.args[0])} "
                    f"while compiling {self.jobs[i].name}"))
                return
            if reply is None:  # gone before it got the job: someone else does it
                self.unclaim(i)
            elif reply[0]:
                self.by_helpers += 1
                self.done(i, reply[1])
            else:
                self.done(i, error=CompileError(
                    f"LLVM failed on {self.jobs[i].name}: {reply[1]}"))


def compile_jobs(jobs_: list[Job], target: Target, stats: dict | None = None) -> list[bytes]:
    """Object code of every job, in order. `stats` gets the counts of "units", "exact"
    units, units compiled by "helpers" and "processes" used."""
    run = _Run(jobs_, target)
    event = getattr(_cancel, "event", None)
    if event is not None:
        with _pool_lock:
            _active[run] = event
        if event.is_set():  # checked after registering: `cancel` sees the run or we see this
            _active.pop(run, None)
            raise Cancelled("the compile was cancelled")
    try:
        return _compile_run(run, stats)
    finally:
        with _pool_lock:
            _active.pop(run, None)


def _compile_run(run: _Run, stats: dict | None) -> list[bytes]:
    jobs_, target = run.jobs, run.target
    helpers = _helpers(min(jobs(), len(jobs_)) - 1, len(jobs_))
    feeding: set[int] = set()

    def feed_ready() -> None:
        for h in helpers:
            if id(h) not in feeding and h.ready.is_set() and not h.dead:
                feeding.add(id(h))
                threading.Thread(target=run.feed, args=(h,), daemon=True,
                                 name="xladist-compile-feed").start()

    try:
        while True:
            feed_ready()  # helpers that finished starting since the last job
            i = run.claim(wait=True)
            if i is None:
                break
            job = jobs_[i]
            try:
                obj = llvm_worker.compile_unit(job.text, target.triple, target.cpu,
                                               target.features, job.exact)
            except Exception as e:  # noqa: BLE001 -- raised below, after the helpers stop
                error = CompileError(f"LLVM failed on {job.name}: {type(e).__name__}: {e}")
                error.__cause__ = e
                run.done(i, error=error)
            else:
                run.done(i, obj)
        run.wait()
    except BaseException as e:  # an interrupt: the helpers take no further job
        run.cancel(e)
        raise
    if run.errors:
        raise run.errors[min(run.errors)]
    if stats is not None:
        stats.update(units=len(jobs_), exact=sum(j.exact for j in jobs_),
                     helpers=run.by_helpers, processes=1 + len(feeding))
    return run.results
