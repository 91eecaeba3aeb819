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
by an execution that holds OpenBLAS alone (parallel.exclusive_blas); the jobs go to the
pool through the native claim loop (parallel._on_pool) with one block per job. A call
made meanwhile by another thread of the process (a user's own numpy) also arrives in
the callback: its jobs run on threads started for it, all at once, as OpenBLAS needs.

Bits: the partition depends on the shapes and the thread count alone, not on which
threads run it, so this way gives the bits of OpenBLAS's own threads -- offered, like
them, only where a check shows those equal the blocks' (blas_blocks._threads_agree).
"""

from __future__ import annotations

import _signal  # signal.py's own module, on plain ints (_signal_numbers)
import contextlib
import ctypes
import os
import signal
import threading

from . import parallel

# jobs(argv, lo, hi): argv = [dojob, jobdata, element size, dojob's third argument];
# runs dojob(i, jobdata + i * size, extra) for i in [lo, hi). A RANGE_TYPE function, so
# the pool's native claim loop hands out the jobs.
_JOBS_IR = """
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
"""

_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                             ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int)
_owner = {"tid": None, "n": 0, "error": None}
# Callback calls; of them, those whose jobs ran on the pool / on threads of their own;
# products a signal arrived in (held, handled once the product ended: _signals_held).
counts = {"calls": 0, "pool": 0, "threads": 0, "held": 0}


def _jobs_fn():
    """The compiled jobs function, or None (then the way is not offered)."""
    return parallel.native_function(_JOBS_IR, "xladist_blas_jobs", parallel.RANGE_TYPE)


def available() -> bool:
    """Whether products can run OpenBLAS's split on the pool in this process."""
    return bool(parallel.blas_callback_setters()) and _jobs_fn() is not None and \
        parallel._claimer() is not None


def _on_threads(fn, argv, numjobs: int) -> None:
    """Every job at once: job 0 here, each other on a thread of its own."""
    threads = [threading.Thread(target=fn, args=(argv, i, i + 1), daemon=True)
               for i in range(1, numjobs)]
    for t in threads:
        t.start()
    fn(argv, 0, 1)
    for t in threads:
        parallel._wait_out(t.join)


def _run(sync, dojob, numjobs, size, jobdata, extra) -> None:
    counts["calls"] += 1
    try:
        fn = _jobs_fn()
        argv = (ctypes.c_uint64 * 4)(dojob or 0, jobdata or 0, size, extra & 0xFFFFFFFF)
        addr = ctypes.addressof(argv)
        if numjobs <= 1:
            fn(addr, 0, max(numjobs, 0))
            return
        # The jobs wait for each other: each needs a thread of its own, two on one
        # thread would never end. The pool gives them that when it has a worker for
        # every job but the caller's (together=True wakes workers on the caller's core
        # too, as a pool larger than the cores has).
        pool = parallel._get_pool(_owner["n"]) if threading.get_ident() == _owner["tid"] \
            else None
        if pool is not None and numjobs <= len(pool.inbox) + 1:
            if parallel._on_pool(pool, fn, addr, [(i, i + 1) for i in range(numjobs)],
                                 numjobs, together=True):
                counts["pool"] += 1
                return
        _on_threads(fn, addr, numjobs)
        counts["threads"] += 1
    except BaseException as e:  # noqa: BLE001 -- a callback cannot raise into OpenBLAS
        # Running out of threads (jobs that did not run leave the product unfinished:
        # the owner computes it again another way), or what another signal's handler
        # raised once every job has ended (parallel._wait_out): the owner raises it.
        # (No signal handler runs here: on_pool holds them, _signals_held.)
        _owner["error"] = e


def _after_fork_in_child() -> None:
    """A child forked while another thread's product had the callback installed: its
    owner thread is not in the child, so OpenBLAS goes back to its own threads."""
    if _owner["tid"] is not None:
        for put in parallel.blas_callback_setters():
            put(None)
        _owner.update(tid=None, n=0, error=None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_callback = _CALLBACK(_run)
_address = ctypes.cast(_callback, ctypes.c_void_p).value


_numbers: list = []


def _signal_numbers() -> list[int]:
    """Every valid signal number, as plain ints (read once). _signals_held looks at each
    one per product through the `_signal` module signal.py wraps: signal.getsignal turns
    every answer into an enum member: ~45 us for the 65 signals, against ~2 us here."""
    if not _numbers:
        _numbers.extend(sorted(int(s) for s in signal.valid_signals()))
    return _numbers


@contextlib.contextmanager
def _signals_held():
    """Every signal with a Python handler (SIGINT's KeyboardInterrupt, a SIGTERM or
    SIGALRM handler raising -- pytest-timeout's, a batch script's) runs it later, at the
    end of the block. What a handler raises inside the callback has nowhere safe to go:
    at the callback's first lines ctypes prints and drops it (OpenBLAS returns as if the
    jobs had run: the product unfinished, reported as fine), and between waking the
    pool's workers and the caller's own jobs it leaves jobs that wait for each other,
    on a stack that is about to be freed. Held here, the handlers run in arrival order
    after the product has ended whole. Only the main thread runs signal handlers;
    SIG_DFL / SIG_IGN run none in Python."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {}
    for signum in _signal_numbers():
        try:
            handler = _signal.getsignal(signum)
        except (ValueError, OSError):
            continue
        if callable(handler):
            handlers[signum] = handler
    held: list = []
    for signum in handlers:
        _signal.signal(signum, lambda got, frame: held.append((got, frame)))
    try:
        yield
    finally:
        # signal.signal first runs the handlers of pending signals (into `held`): each
        # handler is put back all the same.
        for signum, handler in handlers.items():
            parallel._wait_out(lambda s=signum, h=handler: _signal.signal(s, h))
        if held:
            counts["held"] += 1
            for signum, frame in held:  # Python's SIGINT default raises KeyboardInterrupt
                handlers[signum](signum, frame)


@contextlib.contextmanager
def on_pool(n: int):
    """Inside the block, OpenBLAS's threaded calls made by this thread run their jobs on
    the pool (of `n` threads; OpenBLAS's thread count is the caller's to set, n at most).
    The caller holds OpenBLAS alone (parallel.exclusive_blas). Yields a function that
    tells whether every call's jobs ran (False: compute the product again), and raises
    a BaseException other than Exception that arrived in the callback; signals with a
    Python handler (Ctrl-C) are held for the block and handled at its end
    (_signals_held). Only where available()."""
    setters = parallel.blas_callback_setters() if available() else []
    with _signals_held():
        _owner.update(tid=threading.get_ident(), n=n, error=None)
        for put in setters:
            put(_address)

        def complete() -> bool:
            error = _owner["error"]
            if error is not None and not isinstance(error, Exception):
                raise error
            return error is None
        try:
            yield complete
        finally:
            for put in setters:
                put(None)
            _owner.update(tid=None, n=0)
