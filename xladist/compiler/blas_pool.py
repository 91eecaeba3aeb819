"""OpenBLAS's own split of a product, run on xladist's compute pool.

OpenBLAS (0.3.27 on) lets its caller run the jobs of a threaded call on the caller's
threads (openblas_set_threads_callback_function): the level-3 driver cuts the product
its own way -- each thread packs its slice of one operand once and every thread reads
all the packed slices, so nothing is packed twice -- and hands the callback `numjobs`
jobs that must all run at once (they wait for each other's packed slices). On its own
threads that is the fastest way to multiply two large matrices on an idle machine
(matmul 1024: numpy's OpenBLAS on 2 threads ~10.8 ms against ~11.6 ms for xladist's
fixed blocks, blas_blocks.py, each of which packs the whole other operand again), but
its workers spin ~0.1 s after every call (THREAD_TIMEOUT) in a process that has not
lowered the timeout, taking a core from whatever runs next. Run on the pool, the
product gets OpenBLAS's partition and the pool's blocking waits: the pool's workers
sleep as soon as the call ends (choice.SHARED).

The callback is installed only for the length of one such call (`on_pool`), and only
by an execution that holds OpenBLAS alone (parallel.exclusive_blas) and the pool. It is
native code (_NATIVE_IR), and so is everything it does for its owner: before the
product starts, the pool's workers are handed a native wait (`standby`), one job slot
each; the callback publishes the jobs, wakes them (a futex), runs job 0 itself and
sleeps until theirs are done; when the product has ended the workers are let go. No
Python runs between OpenBLAS's call and its return -- so no signal handler can either
(Ctrl-C, a test suite's SIGALRM timeout): what one raises comes after the product, whole
-- and the call costs no Python callback, no queue hand-off and no GIL hand-over (a
quiesced matmul 1024 spent ~0.15 ms of cold Python there, stop 40). A call made
meanwhile by another thread of the process also arrives in the callback: it goes on to a
Python callback (_run) whose jobs run on threads started for them, all at once, as
OpenBLAS needs. But a window is opened only when no other thread that may call OpenBLAS
is alive (_others_may_call_blas): a threaded call already running when the callback is
installed or removed can lose its jobs and wait for ever; then the product runs on
OpenBLAS's own threads (the same bits).

Bits: the partition depends on the shapes and the thread count alone, not on which
threads run it, so this way gives the bits of OpenBLAS's own threads -- offered, like
them, only where a check shows those equal the blocks' (blas_blocks._threads_agree).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import platform
import string
import sys
import threading

from . import parallel

# The futex system call, by machine: the native wait below is a futex on a word of the
# slot. Elsewhere the way is not offered (available()).
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower())

# The slot: one per process (the callback has no argument of its own to find it by), a
# global of the native module, owned by the one window open at a time (on_pool: its
# execution holds OpenBLAS alone and the pool). Words, i64 each; GEN, DONE and each
# worker's STATE are futex words (their low 32 bits).
# The IR below names them as $GEN, ... : one layout, substituted into it.
(GEN, OPEN, DOJOB, DATA, SIZE, EXTRA, NUMJOBS, DONE, OWNER, ARMED, CALLS, FELL_BACK,
 SYSCALL, SELF, FALLBACK, FUTEX, POOLED, USED) = range(18)
STATE = 32  # STATE + k: worker k's state, window * 4 + (1 handed out, 2 waiting), or 0
MAX_WORKERS = 96
WORDS = STATE + MAX_WORKERS
WAIT, WAKE = 128, 129  # the futex operations FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE

# xladist_blas_callback: OpenBLAS's threads callback. Another thread's call, or any call
# while no window is open, goes on to FALLBACK (the Python _run). The owner's: numjobs
# <= 1 run here; else, the first such call of the window with a waiting worker for every
# job but the first publishes them (DONE = 0, then GEN + 1, woken), runs job 0 and
# sleeps on DONE until the workers' jobs are done. Otherwise (a second threaded call in one window, more jobs than
# workers: neither happens while OpenBLAS runs one level-3 call on at most the pool's
# threads) it counts FELL_BACK and goes on to FALLBACK too: never back to OpenBLAS
# without its jobs run.
# xladist_blas_standby(k, window, seen): worker k's part, once: it waits (if the window
# has not closed before it began) until GEN moves past `seen`, runs job k+1 if there is
# one -- its STATE back to 0 first: the window cannot close before DONE counts the job
# -- adds one to DONE, wakes the caller and returns; without a job it waits on until the
# window closes. So a worker is back in the pool as the product ends, and closing the
# window waits for nobody.
# xladist_blas_close(window): OWNER = OPEN = 0, GEN + 1, every worker woken; a worker
# that had not begun is cancelled, one still waiting is waited for.
_NATIVE_IR = string.Template("""
@slot = global [$WORDS x i64] zeroinitializer

define ptr @xladist_blas_slot() nounwind {
  ret ptr @slot
}

define void @xladist_blas_jobs(ptr %argv, i64 %lo, i64 %hi) nounwind {
entry:
  %fn = load ptr, ptr %argv
  %p1 = getelementptr i64, ptr %argv, i64 1
  %data = load ptr, ptr %p1
  %p2 = getelementptr i64, ptr %argv, i64 2
  %size = load i64, ptr %p2
  %p3 = getelementptr i64, ptr %argv, i64 3
  %extra64 = load i64, ptr %p3
  %extra = trunc i64 %extra64 to i32
  br label %loop
loop:
  %i = phi i64 [%lo, %entry], [%i1, %body]
  %more = icmp slt i64 %i, %hi
  br i1 %more, label %body, label %exit
body:
  %off = mul i64 %i, %size
  %job = getelementptr i8, ptr %data, i64 %off
  %i32 = trunc i64 %i to i32
  call void %fn(i32 %i32, ptr %job, i32 %extra)
  %i1 = add i64 %i, 1
  br label %loop
exit:
  ret void
}

define internal ptr @word(i64 %i) alwaysinline nounwind {
  %p = getelementptr [$WORDS x i64], ptr @slot, i64 0, i64 %i
  ret ptr %p
}

define internal void @futex(ptr %addr, i32 %op, i32 %val) nounwind {
  %fp = call ptr @word(i64 $SYSCALL)
  %sys = load ptr, ptr %fp
  %np = call ptr @word(i64 $FUTEX)
  %nr = load i64, ptr %np
  %r = call i64 (i64, ...) %sys(i64 %nr, ptr %addr, i32 %op, i32 %val, ptr null, ptr null, i32 0)
  ret void
}

define internal void @run_job(i64 %j) nounwind {
  ; DOJOB, DATA, SIZE, EXTRA: consecutive words, the jobs function's argv
  %argv = call ptr @word(i64 $DOJOB)
  %j1 = add i64 %j, 1
  call void @xladist_blas_jobs(ptr %argv, i64 %j, i64 %j1)
  ret void
}

define void @xladist_blas_callback(i32 %sync, ptr %dojob, i32 %numjobs, i64 %size,
                                   ptr %data, i32 %extra) nounwind {
entry:
  %selfp = call ptr @word(i64 $SELF)
  %selffn = load ptr, ptr %selfp
  %me = call i64 %selffn()
  %ownp = call ptr @word(i64 $OWNER)
  %owner = load atomic i64, ptr %ownp seq_cst, align 8
  %isme = icmp eq i64 %me, %owner
  %openp0 = call ptr @word(i64 $OPEN)
  %open0 = load atomic i64, ptr %openp0 seq_cst, align 8
  %isopen = icmp ne i64 %open0, 0
  %mine = and i1 %isme, %isopen
  br i1 %mine, label %own, label %other
other:
  %fbp = call ptr @word(i64 $FALLBACK)
  %fb = load ptr, ptr %fbp
  call void %fb(i32 %sync, ptr %dojob, i32 %numjobs, i64 %size, ptr %data, i32 %extra)
  ret void
own:
  %callsp = call ptr @word(i64 $CALLS)
  %c0 = atomicrmw add ptr %callsp, i64 1 seq_cst
  %fnp = call ptr @word(i64 $DOJOB)
  store ptr %dojob, ptr %fnp
  %dp = call ptr @word(i64 $DATA)
  store ptr %data, ptr %dp
  %sp = call ptr @word(i64 $SIZE)
  store i64 %size, ptr %sp
  %ep = call ptr @word(i64 $EXTRA)
  %extra64 = zext i32 %extra to i64
  store i64 %extra64, ptr %ep
  %n = sext i32 %numjobs to i64
  %single = icmp sle i64 %n, 1
  br i1 %single, label %inline, label %many
inline:
  call void @xladist_blas_jobs(ptr %fnp, i64 0, i64 %n)
  ret void
many:
  %need = sub i64 %n, 1
  %armedp = call ptr @word(i64 $ARMED)
  %armed = load i64, ptr %armedp
  %short = icmp sgt i64 %need, %armed
  %usedp = call ptr @word(i64 $USED)
  %used = load i64, ptr %usedp
  %again = icmp ne i64 %used, 0
  %cannot = or i1 %short, %again
  br i1 %cannot, label %fail, label %go
fail:
  %failp = call ptr @word(i64 $FELL_BACK)
  %f0 = atomicrmw add ptr %failp, i64 1 seq_cst
  br label %other
go:
  store i64 1, ptr %usedp
  %np = call ptr @word(i64 $NUMJOBS)
  store i64 %n, ptr %np
  %donep = call ptr @word(i64 $DONE)
  store atomic i32 0, ptr %donep seq_cst, align 8
  %genp = call ptr @word(i64 $GEN)
  %g0 = atomicrmw add ptr %genp, i32 1 seq_cst
  call void @futex(ptr %genp, i32 $WAKE, i32 2147483647)
  call void @run_job(i64 0)
  %need32 = trunc i64 %need to i32
  br label %wait
wait:
  %d = load atomic i32, ptr %donep seq_cst, align 8
  %fin = icmp sge i32 %d, %need32
  br i1 %fin, label %finished, label %sleep
sleep:
  call void @futex(ptr %donep, i32 $WAIT, i32 %d)
  br label %wait
finished:
  %pooledp = call ptr @word(i64 $POOLED)
  %p0 = atomicrmw add ptr %pooledp, i64 1 seq_cst
  ret void
}

define void @xladist_blas_standby(i64 %k, i64 %window, i64 %seen0) nounwind {
entry:
  %idx = add i64 %k, $STATE
  %statep = call ptr @word(i64 %idx)
  %w4 = shl i64 %window, 2
  %w32 = trunc i64 %w4 to i32
  %handed = or i32 %w32, 1
  %waiting = or i32 %w32, 2
  %cx = cmpxchg ptr %statep, i32 %handed, i32 %waiting seq_cst seq_cst
  %began = extractvalue { i32, i1 } %cx, 1
  br i1 %began, label %start, label %cancelled
cancelled:
  ret void
start:
  %genp = call ptr @word(i64 $GEN)
  %openp = call ptr @word(i64 $OPEN)
  %donep = call ptr @word(i64 $DONE)
  %np = call ptr @word(i64 $NUMJOBS)
  %seen00 = trunc i64 %seen0 to i32
  %j = add i64 %k, 1
  br label %loop
loop:
  %seen = phi i32 [%seen00, %start], [%seen, %sleep], [%g, %nojob]
  %g = load atomic i32, ptr %genp seq_cst, align 8
  %open = load atomic i64, ptr %openp seq_cst, align 8
  %closed = icmp ne i64 %open, %window
  br i1 %closed, label %leave, label %look
look:
  %same = icmp eq i32 %g, %seen
  br i1 %same, label %sleep, label %jobs
sleep:
  call void @futex(ptr %genp, i32 $WAIT, i32 %seen)
  br label %loop
jobs:
  %n = load i64, ptr %np
  %mine = icmp slt i64 %j, %n
  br i1 %mine, label %job, label %nojob
nojob:
  br label %loop
job:
  %cxj = cmpxchg ptr %statep, i32 %waiting, i32 0 seq_cst seq_cst
  call void @run_job(i64 %j)
  %d0 = atomicrmw add ptr %donep, i32 1 seq_cst
  call void @futex(ptr %donep, i32 $WAKE, i32 1)
  ret void
leave:
  %cxl = cmpxchg ptr %statep, i32 %waiting, i32 0 seq_cst seq_cst
  call void @futex(ptr %statep, i32 $WAKE, i32 1)
  ret void
}

define void @xladist_blas_close(i64 %window) nounwind {
entry:
  %ownp = call ptr @word(i64 $OWNER)
  store atomic i64 0, ptr %ownp seq_cst, align 8
  %openp = call ptr @word(i64 $OPEN)
  store atomic i64 0, ptr %openp seq_cst, align 8
  %genp = call ptr @word(i64 $GEN)
  %g0 = atomicrmw add ptr %genp, i32 1 seq_cst
  call void @futex(ptr %genp, i32 $WAKE, i32 2147483647)
  %armedp = call ptr @word(i64 $ARMED)
  %armed = load i64, ptr %armedp
  %w4 = shl i64 %window, 2
  %w32 = trunc i64 %w4 to i32
  %handed = or i32 %w32, 1
  %waiting = or i32 %w32, 2
  br label %each
each:
  %k = phi i64 [0, %entry], [%k1, %next]
  %more = icmp slt i64 %k, %armed
  br i1 %more, label %cancel, label %exit
cancel:
  %idx = add i64 %k, $STATE
  %statep = call ptr @word(i64 %idx)
  %cx = cmpxchg ptr %statep, i32 %handed, i32 0 seq_cst seq_cst
  br label %check
check:
  %v = load atomic i32, ptr %statep seq_cst, align 8
  %busy = icmp eq i32 %v, %waiting
  br i1 %busy, label %sleep, label %next
sleep:
  call void @futex(ptr %statep, i32 $WAIT, i32 %waiting)
  br label %check
next:
  %k1 = add i64 %k, 1
  br label %each
exit:
  ret void
}
""").substitute(globals())

_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                             ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int)
_STANDBY = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
_CLOSE = ctypes.CFUNCTYPE(None, ctypes.c_int64)
_SLOT = ctypes.CFUNCTYPE(ctypes.c_void_p)
_owner = {"tid": None}
# Callback calls; of them, those whose jobs ran on the pool / on threads of their own;
# windows not opened because the pool was busy or another thread may be inside OpenBLAS
# (_others_may_call_blas); the owner's calls the pool could not give workers (sent to
# threads of their own).
counts = {"calls": 0, "pool": 0, "threads": 0, "busy": 0, "fell back": 0}

# xladist's own threads that never call OpenBLAS beside an execution of this process. The
# pool's workers run only the window's jobs (its execution holds OpenBLAS alone:
# parallel.exclusive_blas). The coordination service's run a user's feed sources and host
# callbacks only while a thread of the user's waits in xladist.run or a Cluster's call --
# another thread than the caller, which keeps the window shut. A rank's infeed producer
# (xladist-infeed-*) runs an infeed_fn's code beside the rank's executions: not here.
_QUIET_THREADS = ("xladist-compute", "xladist-service-", "xladist-deadline",
                  "xladist-progress", "xladist-compile", "xladist-helper-requests",
                  "xladist gemm build", "xladist-cluster-launch")


def _others_may_call_blas() -> bool:
    """Whether a thread of this process other than the caller and _QUIET_THREADS is alive:
    it may be inside a threaded OpenBLAS call of its own (a user's numpy in a thread pool,
    a feed's source), and OpenBLAS's callback installed or removed while such a call runs
    loses that call's jobs -- it waits for ever -- or corrupts a product (OpenBLAS 0.3.31:
    one thread's f64 matmul loop beside another's f32 products with the callback set for
    each, hung within seconds, results with overflows; set for good, it did not hang)."""
    me = threading.current_thread()
    return any(t is not me and not t.name.startswith(_QUIET_THREADS) for t in _alive())


_alive = threading.enumerate  # (tests narrow it to their own threads)


class NoThreads(RuntimeError):
    """The threads for a call's jobs could not all start; none of its jobs ran."""


def _on_threads(fn, argv, numjobs: int) -> None:
    """Every job at once: job 0 here, each other on a thread of its own. No job begins
    before every thread has started: the jobs wait for each other's parts, so one begun
    beside a partner whose thread could not start would spin for ever, reading OpenBLAS's
    stack after its call returned. A thread that cannot start raises NoThreads here, no
    job run."""
    go, run = threading.Event(), [True]

    def job(i: int) -> None:
        go.wait()
        if run[0]:
            fn(argv, i, i + 1)
    threads = []
    try:
        for i in range(1, numjobs):
            threads.append(threading.Thread(target=job, args=(i,), daemon=True))
            threads[-1].start()
    except BaseException as e:
        run[0] = False
        go.set()
        for t in threads:
            if t.ident is not None:
                parallel._wait_out(t.join)
        raise NoThreads(f"{type(e).__name__}: {e}") from e
    go.set()
    fn(argv, 0, 1)
    for t in threads:
        parallel._wait_out(t.join)


def _run(sync, dojob, numjobs, size, jobdata, extra) -> None:
    """The callback's way for a threaded OpenBLAS call of a thread other than the owner's
    (a user's own numpy inside the window), of any thread while no window is open, and of
    the owner's calls the window cannot give workers: every job at once on threads of
    its own."""
    counts["calls"] += 1
    try:
        argv = (ctypes.c_uint64 * 4)(dojob or 0, jobdata or 0, size, extra & 0xFFFFFFFF)
        _on_threads(_native[0].jobs, ctypes.addressof(argv), max(numjobs, 0))
        counts["threads"] += 1
    except BaseException as e:  # noqa: BLE001 -- a callback cannot raise into OpenBLAS
        if isinstance(e, NoThreads) and _owner["tid"] != threading.get_ident():
            # Another thread's numpy call: its result is not computed, and the callback
            # cannot fail the call, so that must not pass unnoticed.
            sys.stderr.write(f"xladist: error: OpenBLAS's threaded call in thread "
                             f"{threading.current_thread().name} could not start threads "
                             f"for its jobs ({e}); its result is wrong\n")
            sys.stderr.flush()
        else:
            _owner["error"] = e  # the owner's product is computed again (or e raised)


_fallback = _CALLBACK(_run)


class _Native:
    """The compiled callback, standby and close functions and the slot's words."""

    def __init__(self, code):
        self.code = code  # keeps the functions alive
        self.slot = (ctypes.c_int64 * WORDS).from_address(
            _SLOT(code.address("xladist_blas_slot"))())
        self.callback = code.address("xladist_blas_callback")
        self.standby = _STANDBY(code.address("xladist_blas_standby"))
        self.close = _CLOSE(code.address("xladist_blas_close"))
        # jobs(argv, lo, hi), argv = [dojob, jobdata, element size, dojob's third
        # argument]: dojob(i, jobdata + i * size, extra) for i in [lo, hi) -- the owner's
        # single job, and the fallback's jobs on threads of their own.
        self.jobs = parallel.RANGE_TYPE(code.address("xladist_blas_jobs"))
        libc = ctypes.CDLL(None)
        self.slot[SYSCALL] = ctypes.cast(libc.syscall, ctypes.c_void_p).value
        self.slot[SELF] = ctypes.cast(libc.pthread_self, ctypes.c_void_p).value
        self.slot[FALLBACK] = ctypes.cast(_fallback, ctypes.c_void_p).value
        self.slot[FUTEX] = _FUTEX


_native: list = []
_native_lock = threading.Lock()


def _compiled() -> _Native | None:
    """The native part (_NATIVE_IR), built once per process (one slot: two threads' first
    products must not each build their own), or None where it cannot be."""
    if not _native:
        with _native_lock:
            if not _native:
                got = None
                if _FUTEX is not None:
                    try:
                        from . import jit
                        code, _cached = jit.get_code("xladist blas_pool\n" + _NATIVE_IR,
                                                     lambda: _NATIVE_IR)
                        got = _Native(code)
                    except Exception:  # noqa: BLE001 -- then the way is not offered
                        got = None
                _native.append(got)
    return _native[0]


def available() -> bool:
    """Whether products can run OpenBLAS's split on the pool in this process."""
    return bool(parallel.blas_callback_setters()) and _compiled() is not None


def _after_fork_in_child() -> None:
    """A child forked while another thread's product had the callback installed: its
    owner thread is not in the child, so OpenBLAS goes back to its own threads. (A lock
    another thread held at the fork stays held in the child: a new one.)"""
    global _native_lock
    _native_lock = threading.Lock()
    if _owner["tid"] is not None:
        for put in parallel.blas_callback_setters():
            put(None)
        _owner.update(tid=None, error=None)
        if _native and _native[0] is not None:
            _native[0].slot[OWNER] = _native[0].slot[OPEN] = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Standby:
    """Worker k's part of one on_pool window (xladist_blas_standby), as a pool task."""

    __slots__ = ("standby", "k", "window", "seen")

    def __init__(self, standby, k: int, window: int, seen: int):
        self.standby, self.k, self.window, self.seen = standby, k, window, seen

    def work(self) -> None:
        self.standby(self.k, self.window, self.seen)


_windows = itertools.count()


def _window() -> int:
    """A new window's id, 1 to 2^29 - 1: STATE words hold it times 4 in 32 bits."""
    return next(_windows) % ((1 << 29) - 1) + 1


def _own_threads() -> bool:
    """complete() of a block that opened no window: its calls ran on OpenBLAS's own threads,
    whole (not the last window's outcome, which _owner still holds)."""
    return True


class on_pool:
    """`with on_pool(n) as complete:` OpenBLAS's threaded calls made by this thread inside
    the block run their jobs on the pool (of `n` threads; OpenBLAS's thread count is the
    caller's to set, n at most). The caller holds OpenBLAS alone (parallel.exclusive_blas).
    complete() tells whether every call's jobs ran (False: a call the pool could not give
    workers went to threads of its own, and starting them failed: compute the product
    another way), and raises a BaseException other than Exception that a fallback call
    raised. Where not available(), the calls run on
    OpenBLAS's own threads (the same bits). (A class, not a generator: every SHARED
    product enters one.)"""

    __slots__ = ("n", "native", "pool", "window", "setters")

    def __init__(self, n: int):
        self.n, self.native, self.pool, self.window, self.setters = n, None, None, 0, []

    def __enter__(self):
        native = _compiled() if available() else None
        if native is None:
            return _own_threads
        if _others_may_call_blas():
            counts["busy"] += 1  # on OpenBLAS's own threads, as below
            return _own_threads
        pool = parallel._get_pool(self.n)
        if not pool.busy.acquire(blocking=False):
            # Another thread's split call holds it (an execution without a BLAS call is
            # not kept out by exclusive_blas): the product runs on OpenBLAS's own threads
            # -- the same bits -- and its site keeps the way (blas_blocks.py).
            counts["busy"] += 1
            return _own_threads
        self.pool = pool
        self.native, self.window = native, _window()
        try:
            slot, me, window = native.slot, threading.get_ident(), self.window
            if slot[OPEN]:  # a window a signal's exception kept from closing: closed now
                native.close(slot[OPEN])
            helpers = pool.helpers(min(self.n - 1, MAX_WORKERS), together=True)
            for w in (CALLS, FELL_BACK, POOLED, USED):
                slot[w] = 0
            slot[OWNER], slot[OPEN], slot[ARMED] = me, window, len(helpers)
            for k in range(len(helpers)):
                slot[STATE + k] = window * 4 + 1
            _owner.update(tid=me, error=None)
            tasks = [_Standby(native.standby, k, window, slot[GEN] & 0xFFFFFFFF)
                     for k in range(len(helpers))]
            self.setters = parallel.blas_callback_setters()
            for put in self.setters:
                put(native.callback)
            # The workers last, and no foreign call after: a woken worker takes the GIL
            # at this thread's next release of it -- inside a ctypes call here, this
            # thread would then wait for the GIL back (~0.1 ms after a pause); in the
            # product, numpy has let it go.
            for q, task in zip(helpers, tasks):
                q.put(task)
        except BaseException:
            self.__exit__()
            raise
        return self.complete

    def complete(self) -> bool:
        error = _owner["error"]
        if error is not None and not isinstance(error, Exception):
            raise error
        return error is None

    def __exit__(self, *exc) -> None:
        native, pool = self.native, self.pool
        try:
            if native is not None:
                # First (one call, no Python between its steps): no owner, the window
                # closed, workers that had not begun cancelled, any still waiting waited
                # for (none after a product whose jobs ran: each returned with its job).
                # A call the callback gets from here on goes to the fallback. Should a
                # signal's exception skip this, the next window closes this one first, a
                # worker left waiting clears only its own window's state, and the owner's
                # path needs an open window.
                native.close(self.window)
                for put in self.setters:
                    put(None)
                slot = native.slot
                counts["calls"] += slot[CALLS] - slot[FELL_BACK]  # _run counted those
                counts["pool"] += slot[POOLED]
                counts["fell back"] += slot[FELL_BACK]
                _owner["tid"] = None
        finally:
            self.native = self.pool = None
            self.setters = []
            if pool is not None:
                pool.busy.release()
