"""Intra-op parallelism: how many threads this process computes with, and the pool
that runs a split kernel's blocks on them.

A kernel that runs in blocks (codegen/split.py) has a second entry point
`name__range(argv, begin, end)` over a range of its outermost physical dimension.
Blocks are fixed by the kernel's shape alone, never by the thread count, and every
block writes disjoint outputs: so 1, 2 or 16 threads run the same native calls on
the same ranges and give bit-identical results. Kernels below their minimum work
(split.py) run whole, on the calling thread.

The pool is Python threads calling ctypes function pointers: ctypes releases the GIL
for the duration of each native call, so the blocks run truly in parallel; the
dispatch costs ~10-30 us per kernel (a queue hand-off per worker).

Thread count, first that applies: `set_threads(n)` (the CLI's `--threads`, the
config key `threads`), `XLADIST_THREADS`, else the cores of this process's CPU
affinity mask divided among the ranks on its node (`set_local_ranks`, from
MPI_COMM_TYPE_SHARED; 1 outside MPI), at least 1. BLAS (OpenBLAS under numpy/scipy)
runs on one thread while xladist executes (blas_scope; for good in ranks) and large
BLAS calls are split into blocks on this same pool (blas_blocks.py): OpenBLAS's own
threads spin and yield while they wait, which on a busy machine made a matmul many
times slower than on one thread; this way kernels and BLAS together use thread_count()
threads and every wait blocks. A split call runs on the pool, on the caller alone or
(a large product) as one call on OpenBLAS's threads, whichever its call site measured
fastest in the current regime (run_blocks, choice.py): the same bits every way.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import math
import os
import queue
import threading
import time

from ..environment import setting
from . import choice
from .codegen.split import blocks_of

RANGE_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

_explicit: int | None = None
_local_ranks = 1
_local_index = 0
_pool: _Pool | None = None
_lock = threading.Lock()


def available_cores() -> int:
    """The cores this process may use: its CPU affinity mask, capped by a cgroup CPU quota
    (a container started with `docker run --cpus 2` on a 64-core host sees all 64 cores
    in its mask but is throttled to 2 cores' time: 64 threads there wait out most of
    each period)."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = max(1, os.cpu_count() or 1)
    limit = cgroup_cpu_limit()
    return cores if limit is None else max(1, min(cores, math.ceil(limit)))


_CGROUP_ROOT = "/sys/fs/cgroup"
_cgroup_limit: list = []


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cgroup_cpu_limit() -> float | None:
    """This process's cgroup CPU quota in cores (quota / period), or None when there is
    none or it cannot be read; cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us`), at this
    process's cgroup path or, inside a container's namespace, at the mount's root. The
    tightest limit on the path up to the root counts. Read once per process."""
    if _cgroup_limit:
        return _cgroup_limit[0]
    limits = []
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if not hier:
            continue
        if controllers == "":  # v2: one unified hierarchy
            quota_file, period_file = "cpu.max", None
            bases = [_CGROUP_ROOT, f"{_CGROUP_ROOT}/unified"]
        elif "cpu" in controllers.split(","):
            quota_file, period_file = "cpu.cfs_quota_us", "cpu.cfs_period_us"
            bases = [f"{_CGROUP_ROOT}/{controllers}", f"{_CGROUP_ROOT}/cpu",
                     f"{_CGROUP_ROOT}/cpu,cpuacct"]
        else:
            continue
        parts = [p for p in path.strip().split("/") if p]
        for base in bases:
            for depth in range(len(parts), -1, -1):
                limit = _quota("/".join([base, *parts[:depth]]), quota_file, period_file)
                if limit is not None:
                    limits.append(limit)
    _cgroup_limit.append(min(limits) if limits else None)
    return _cgroup_limit[0]


def _quota(folder: str, quota_file: str, period_file: str | None) -> float | None:
    text = _read(f"{folder}/{quota_file}")
    if text is None:
        return None
    try:
        if period_file is None:  # v2 "max 100000" or "200000 100000"
            quota, period = text.split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        quota = int(text)
        period = int(_read(f"{folder}/{period_file}") or 0)
    except (ValueError, IndexError):
        return None
    return quota / period if quota > 0 and period > 0 else None


# thread_count's last answer: every split call and product asks (a system call for the
# affinity mask, the variable parsed: ~2 us, ~25 us right after a pause), so the mask is
# read again at most every COUNT_PERIOD seconds; a new XLADIST_THREADS or rank count is
# seen at once.
_counted = {"raw": None, "ranks": 0, "n": 1, "next": 0.0}
COUNT_PERIOD = 1.0


def thread_count() -> int:
    """The threads this process computes with (see the module docstring)."""
    if _explicit is not None:
        return _explicit
    raw, now, last = os.environ.get("XLADIST_THREADS"), time.monotonic(), _counted
    if now < last["next"] and raw == last["raw"] and last["ranks"] == _local_ranks:
        return last["n"]
    n = setting("XLADIST_THREADS")
    if n is None:
        n = max(1, available_cores() // max(1, _local_ranks))
    last.update(raw=raw, ranks=_local_ranks, n=n, next=now + COUNT_PERIOD)
    return n


def _parse(text, where: str) -> int:
    from ..errors import InputError
    try:
        n = int(text)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise InputError(f"{where} must be a whole number of threads >= 1, got {text!r}")
    return n


def set_threads(n: int | None) -> None:
    """Fix the thread count (None: back to XLADIST_THREADS / the affinity mask)."""
    global _explicit
    _explicit = None if n is None else _parse(n, "--threads (the config key `threads`)")


def local_ranks() -> int:
    """How many ranks share this node's cores (set_local_ranks; 1 outside MPI)."""
    return _local_ranks


def set_local_ranks(n: int, index: int = 0) -> None:
    """How many ranks share this node's cores (MPI_COMM_TYPE_SHARED size), and which of
    them this one is (its rank there: where its pinned workers go, worker_cpus)."""
    global _local_ranks, _local_index, _pool
    n, index = max(1, int(n)), max(0, int(index))
    if (n, index % n) != (_local_ranks, _local_index):
        with _lock:  # a new pool pins its workers to this rank's slice (idle ones stay)
            _pool = None
    _local_ranks, _local_index = n, index % n
    sync_blas()


# ---- BLAS -------------------------------------------------------------------------

_libs: dict[str, tuple | None] = {}


def _openblas_libs():
    """(library, symbol prefix, suffix, path) of every OpenBLAS loaded in this process
    (numpy's and scipy's wheels each bring their own, with prefixed symbols)."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "openblas" in line.split()[-1].lower() and ".so" in line})
    except OSError:
        return []
    for p in paths:
        if p not in _libs:
            _libs[p] = _open_blas(p)
    return [_libs[p] for p in paths if _libs[p] is not None]


def _open_blas(path):
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for pre, suf in (("scipy_", "64_"), ("scipy_", ""), ("", "64_"), ("", "")):
        if hasattr(lib, f"{pre}openblas_set_num_threads{suf}"):
            return lib, pre, suf, path
    return None


_blas_applied: tuple | None = None
BLAS_THREADS = 1


def sync_blas() -> None:
    """Every loaded OpenBLAS on BLAS_THREADS for good, the pool splitting large calls
    (module docstring): for ranks, whose process runs nothing but xladist (set_local_ranks
    calls it; cheap when nothing changed). A user's own process gets blas_scope instead."""
    global _blas_applied
    n = BLAS_THREADS
    libs = _openblas_libs()
    key = (n, tuple(p for *_x, p in libs))
    if key == _blas_applied:
        return
    for lib, pre, suf, _p in libs:
        getattr(lib, f"{pre}openblas_set_num_threads{suf}")(ctypes.c_int(n))
    _blas_applied = key


_scope_libs: list | None = None   # the OpenBLAS libraries blas_scope sets, found at compile
_callback_setters: list = []      # their set-threads-callback functions (blas_pool.py)


def refresh_blas_libs() -> None:
    """Find the loaded OpenBLAS libraries again (compiling calls it: numpy/scipy may have
    loaded another since); blas_scope uses this list, since reading /proc/self/maps per
    execution would cost ~2 ms."""
    global _scope_libs, _callback_setters
    libs = _openblas_libs()
    _scope_libs = [(getattr(lib, f"{pre}openblas_get_num_threads{suf}"),
                    getattr(lib, f"{pre}openblas_set_num_threads{suf}"))
                   for lib, pre, suf, _p in libs]
    setters = [getattr(lib, f"{pre}openblas_set_threads_callback_function{suf}", None)
               for lib, pre, suf, _p in libs]
    for fn in setters:
        if fn is not None:
            fn.argtypes, fn.restype = [ctypes.c_void_p], None
    # Those that have one (scipy 1.17's own OpenBLAS has none, numpy 2.4's has): whether
    # the one numpy's matmul calls has it, its first call tells (blas_blocks.py).
    _callback_setters = [fn for fn in setters if fn is not None]


def blas_callback_setters() -> list:
    """The set-threads-callback functions (OpenBLAS 0.3.27 on) of the loaded OpenBLAS
    libraries that have one."""
    if _scope_libs is None:
        refresh_blas_libs()
    return _callback_setters


def _set_blas_threads(n: int) -> list:
    """Every loaded OpenBLAS on `n` threads; what _restore_blas_threads takes to put
    each library's setting back. ~1 us per library when a change is needed."""
    if _scope_libs is None:
        refresh_blas_libs()
    changed = []
    for get, put in _scope_libs:
        was = get()
        if was != n:
            put(ctypes.c_int(n))
            changed.append((put, was))
    return changed


def _restore_blas_threads(changed: list) -> None:
    for put, was in changed:
        put(ctypes.c_int(was))


@contextlib.contextmanager
def openblas_threads(n: int):
    """Every loaded OpenBLAS on `n` threads inside the block, each library's setting
    restored after."""
    changed = _set_blas_threads(n)
    try:
        yield
    finally:
        _restore_blas_threads(changed)


# OpenBLAS's thread count is one setting for the whole process, read when a call starts.
# The bits of a block's BLAS call assume one thread, so while any execution is in flight
# (blas_scope) it stays at BLAS_THREADS, and a call on OpenBLAS's threads (exclusive_blas)
# runs only when its execution is the only one, holding _blas_gate so that none starts
# meanwhile. Executions in two threads of one process (rare) thus never see each other's
# setting; the first to start and the last to end set and restore the caller's.
_blas_gate = threading.Lock()
_blas_flight = {"n": 0, "restore": None}


class _BlasScope:
    """blas_scope's context manager: a class, not a generator, since every execution of
    a program with a BLAS call enters one."""

    __slots__ = ()

    def __enter__(self) -> None:
        with _blas_gate:
            if _blas_flight["n"] == 0:
                _blas_flight["restore"] = _set_blas_threads(BLAS_THREADS)
            _blas_flight["n"] += 1

    def __exit__(self, *exc) -> None:
        with _blas_gate:
            _blas_flight["n"] -= 1
            if _blas_flight["n"] == 0:
                _restore_blas_threads(_blas_flight["restore"])
                _blas_flight["restore"] = None


_BLAS_SCOPE = _BlasScope()


def blas_scope() -> _BlasScope:
    """OpenBLAS on BLAS_THREADS for one execution (`with blas_scope():`), the caller's
    setting restored after the last execution in flight ends: in a user's own process (a
    notebook calling xladist.compile), numpy's matmul outside xladist keeps its threads.
    Ranks set it once for good (set_local_ranks -> sync_blas), and then this changes
    nothing."""
    return _BLAS_SCOPE


def others_in_flight() -> bool:
    """Whether another execution is in flight beside the caller's, so that exclusive_blas
    would refuse now (a hint read without the gate: exclusive_blas decides)."""
    return _blas_flight["n"] > 1


class _ExclusiveBlas:
    """exclusive_blas's context manager (a class, as _BlasScope). It releases the gate it
    took: a fork meanwhile gives the child a new one (_after_fork_in_child)."""

    __slots__ = ("n", "changed", "gate")

    def __init__(self, n: int):
        self.n, self.changed, self.gate = n, None, None

    def __enter__(self) -> bool:
        self.gate = gate = _blas_gate
        gate.acquire()
        if _blas_flight["n"] > 1:
            return False
        try:
            self.changed = _set_blas_threads(self.n)
        except BaseException:
            gate.release()
            raise
        return True

    def __exit__(self, *exc) -> None:
        try:
            if self.changed is not None:
                _restore_blas_threads(self.changed)
        finally:
            self.changed = None
            self.gate.release()


def exclusive_blas(n: int) -> _ExclusiveBlas:
    """`with exclusive_blas(n) as alone:` OpenBLAS on `n` threads for one call of the
    caller's, alone True, when no other execution is in flight (blas_scope); else nothing
    changes and alone is False. No execution starts until the block ends."""
    return _ExclusiveBlas(n)


def blas_info() -> list[dict]:
    """What each loaded OpenBLAS runs: library, kernel (core) name, threads."""
    out = []
    for lib, pre, suf, path in _openblas_libs():
        core = getattr(lib, f"{pre}openblas_get_corename{suf}", None)
        nth = getattr(lib, f"{pre}openblas_get_num_threads{suf}", None)
        if core is not None:
            core.restype = ctypes.c_char_p
        out.append({"library": os.path.basename(path),
                    "core": core().decode() if core is not None else "?",
                    "threads": nth() if nth is not None else None})
    return out


# ---- splitting --------------------------------------------------------------------

def describe_split(split, threads: int | None = None) -> str:
    """What `xladist explain` prints for a kernel's split."""
    if split is None:
        return "one thread: not splittable"
    blocks = blocks_of(split)
    if blocks is None:
        return (f"one thread: below threshold ({split.units * split.work} < "
                f"{split.min_work} elements)")
    threads = thread_count() if threads is None else threads
    per = blocks[0][1] - blocks[0][0]
    return (f"{min(threads, len(blocks))} threads: {len(blocks)} blocks of {per} "
            f"x {split.work} elements")


# ---- is there an idle core? -----------------------------------------------------------
# Which way is fastest flips with it (choice.py measures each regime apart): a helper
# handed a block when every core is taken runs only when the scheduler preempts
# someone, and the caller may wait for its block (on the loaded 2-core host a 1 M-element
# row sum took 1.68x its one-thread time on 2 threads), while a kernel ten times the
# size gains its fair share of the busy cores by splitting. Until issue 31 this regime
# alone decided, as libgomp's OMP_DYNAMIC does: no idle core, the caller alone -- below
# what the OS gives an ordinary multi-threaded process. The signal: the runnable-thread
# count (/proc/loadavg's "running/total", read at most every LOAD_PERIOD seconds,
# smoothed) against the cores.
LOAD_PERIOD = 0.005
DYNAMIC = True  # False: always hand blocks to the pool, no choice (tests of the pool itself)
_load = {"next": 0.0, "running": 0.0, "last": 0, "fd": None, "at": 0.0}


def _has_room() -> bool:
    return regime() == choice.IDLE


# Threads of this process that are not ours -- numpy's OpenBLAS workers spinning ~0.1 s
# after its threaded matmul, XLA's pool a few ms after a jax call, the user's own
# threads -- runnable now make a busy machine the OWN_POOLS regime: there the fastest way
# differs from the one under other processes' load (a large product is best handed to
# OpenBLAS's awake threads; with another process on a core they wait for a descheduled
# partner). Now, from each thread's state: the process's CPU time over the interval since
# the last sample (until stop 39) held whatever ran in it -- after a pause, numpy's or
# jax's whole call -- and kept a plain process under other processes' load in OWN_POOLS
# for calls long after their pools slept (compute.py --company, background load: every
# matmul 1024 call). A thread is looked at again only when its CPU clock has moved since
# it was last seen asleep, and the list of threads is read at most every TASKS_PERIOD.
TASKS_PERIOD = 1.0
_tasks = {"ids": [], "next": 0.0, "seen": {}}


def _thread_cpu(tid: int) -> float | None:
    """CPU seconds the thread `tid` (a native id) of this process has run, None when it
    has ended: Linux's clock id of a thread's CPU clock (CPUCLOCK_PERTHREAD |
    CPUCLOCK_SCHED over the id), no /proc read."""
    try:
        return time.clock_gettime(((~tid) << 3) | 6)
    except (OSError, ValueError, OverflowError):
        return None


def _foreign_runnable(now: float) -> bool:
    """Whether a thread of this process other than the caller and the pool's workers is
    runnable now (/proc/self/task/TID/stat); False where there is no /proc. It stops at
    the first one: after a jax call XLA's threads all spin, and reading each one's state
    costs ~10 us."""
    st = _tasks
    seen = st["seen"]
    if now >= st["next"]:
        try:
            st["ids"] = [int(t) for t in os.listdir("/proc/self/task")]
        except (OSError, ValueError):
            st["ids"] = []
        st["next"] = now + TASKS_PERIOD
        st["seen"] = seen = {t: seen[t] for t in st["ids"] if t in seen}  # the ended go
    me = threading.get_native_id()
    ours = _pool.native_ids if _pool is not None else ()
    for tid in st["ids"]:
        if tid == me or tid in ours:
            continue
        cpu = _thread_cpu(tid)
        if cpu is None:
            continue  # it has ended
        last = seen.get(tid)
        if last is not None and last[0] == cpu and not last[1]:
            continue  # asleep when last seen, and has not run since
        try:
            fd = os.open(f"/proc/self/task/{tid}/stat", os.O_RDONLY)
            try:
                stat = os.read(fd, 512)
            finally:
                os.close(fd)
            end = stat.rindex(b")")  # the name may hold spaces and parentheses
            running = stat[end + 2:end + 3] == b"R"
        except (OSError, ValueError):
            continue
        seen[tid] = (cpu, running)
        if running:
            return True
    return False


_cpus = {"n": 1, "next": 0.0}
CPUS_PERIOD = 1.0


def _online_cpus(now: float) -> int:
    """The machine's online cores (what /proc/loadavg's runnable count is against), read
    at most every CPUS_PERIOD seconds: os.cpu_count() reads a sysfs file each time (~6 us,
    more right after a pause), and regime() runs on every split call."""
    if now >= _cpus["next"]:
        _cpus.update(n=os.cpu_count() or 1, next=now + CPUS_PERIOD)
    return _cpus["n"]


def regime() -> int:
    """choice.IDLE while a core is idle; else choice.OWN_POOLS when other threads of this
    process are runnable (_foreign_runnable), else choice.OTHERS. The same blocks run in every
    regime; the regime only tells which measurements of a site apply."""
    if not DYNAMIC:
        return choice.IDLE
    now = time.monotonic()
    st = _load
    if now >= st["next"]:
        st["next"] = now + LOAD_PERIOD
        # Samples read LOAD_PERIOD apart while calls come; after a pause (the caller did
        # something else) the smoothing goes by the time that passed, not by samples: a
        # busy count from before the pause says nothing about now. Counting it kept a
        # plain process's first calls after numpy's burst in the busy regimes, where a
        # large product went to OpenBLAS's threads, whose own spin after the call then
        # kept the regime busy for as long as calls came (the MLP step, compute.py
        # --company, quiet: 14-16 ms of CPU per step against 10-12 ms).
        periods = max(1.0, (now - st["at"]) / max(LOAD_PERIOD, 1e-6))
        st["at"] = now
        try:
            if st["fd"] is None:
                st["fd"] = os.open("/proc/loadavg", os.O_RDONLY)
            running = int(os.pread(st["fd"], 128, 0).split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            running = 0  # no /proc: assume the cores are ours
        if _pool is not None:  # our own workers finishing a previous call
            running -= sum(_pool.active)
        # A busy core counts once two samples in a row show it: single samples of one
        # more runnable thread than there was (a kernel thread, a timer, a neighbour's
        # short wake-up) were 10-20% of the reads in compute.py's matmul rounds, and each
        # kept that many calls on one thread for ~10 ms.
        running, st["last"] = min(running, st["last"]), running
        # Back off at once, come back slowly (~4 idle samples from a busy one): the
        # other sessions' load comes in bursts, and splitting into one costs far more
        # than running one burst's gap alone.
        if running >= st["running"]:
            st["running"] = float(running)
        else:
            st["running"] += (1.0 - 0.75 ** periods) * (running - st["running"])
        st["foreign"] = None  # read when the cores are all busy (below)
    # The count includes the calling thread itself, and the other ranks on this node
    # (set_local_ranks) with their threads: they are ours, not someone else's load.
    ours = (_local_ranks - 1) * thread_count() if _local_ranks > 1 else 0
    cpus = _online_cpus(now)
    if st["running"] < cpus + ours - 0.25:
        return choice.IDLE
    if st.get("foreign") is None:
        st["foreign"] = _foreign_runnable(now)
    return choice.OWN_POOLS if st["foreign"] else choice.OTHERS


def run_blocks(fn, argv, blocks, site=None, whole=None, n: int | None = None) -> None:
    """Run fn(argv, begin, end) over every block. With a `site` (choice.Site), in the way
    it measured fastest now: on the pool, on the calling thread alone, or one of `whole`
    -- way -> a callable computing the same result another way (one call partitioned
    by OpenBLAS, on its threads or on the pool; the blocks on the LLVM GEMM:
    blas_blocks.py), returning False when it could not; without a site, on the pool
    whenever it has threads (on one thread, a site still chooses). Every way gives the
    same bits. A compiled kernel's range function (RANGE_TYPE) takes its blocks in native
    code (_NativeTask). `n`: thread_count(), when the caller has it already."""
    if n is None:
        n = thread_count()
    whole = whole or {}
    # (on one thread a site still chooses between its blocks and its other ways)
    if n < 2 and (not whole or site is None or not DYNAMIC) or len(blocks) < 2 and not whole:
        _alone(fn, argv, blocks)
        return
    pool = _get_pool(n) if len(blocks) > 1 and n > 1 else None
    if site is None or not DYNAMIC:
        if pool is None:
            if not next(iter(whole.values()))():
                _alone(fn, argv, blocks)
        elif not _on_pool(pool, fn, argv, blocks, n):
            _alone(fn, argv, blocks)
        return
    now = regime()
    way = site.pick(now)
    t0 = time.perf_counter()
    if way in whole:
        ran = whole[way]()
        if not ran:  # another execution in flight (exclusive_blas): the blocks, no sample
            if pool is None or not _on_pool(pool, fn, argv, blocks, n):
                _alone(fn, argv, blocks)
            return
        if ran is UNTIMED:
            site.record(now, way, None)  # counted, not timed
            return
    elif way == choice.ALONE or pool is None:
        _alone(fn, argv, blocks)
    elif not _on_pool(pool, fn, argv, blocks, n):
        _alone(fn, argv, blocks)  # another thread of the caller's holds the pool: no sample
        return
    site.record(now, way, time.perf_counter() - t0)


# What a way of run_blocks' `whole` returns when it ran but its call also paid a one-time
# cost that later calls do not (blas_blocks: the bits check of its product, two or three
# products more): the call is counted and gives the site no sample. Timed, such a first
# call was one of the two a way warms up with (choice.WARM), and where the other was slow
# too (the pool's worker touching its packing buffers for the first time, a neighbour's
# burst) the way lost at once and was looked at again only every 8, 16, 32... calls: the
# LLVM GEMM's warm-up samples of matmul 1024 in compute.py --company's quiet rows were
# 17.6-18.0 ms in two runs of eight, against 11.4-13.6 ms in the others, and the product
# ran on the pool's OpenBLAS blocks (14 ms) throughout.
UNTIMED = type("Untimed", (), {"__repr__": lambda self: "UNTIMED"})()


def _alone(fn, argv, blocks) -> None:
    for lo, hi in blocks:
        fn(argv, lo, hi)


def _on_pool(pool, fn, argv, blocks, n: int) -> bool:
    """The blocks on the pool and the caller; False (nothing ran) when the pool is busy
    with another thread's call."""
    if not pool.busy.acquire(blocking=False):
        return False
    try:
        claimer = _claimer() if NATIVE_CLAIM and isinstance(fn, RANGE_TYPE) else None
        task = _NativeTask(fn, argv, blocks, claimer) if claimer is not None \
            else _Task(fn, argv, blocks)
        pool.run(task, min(n, len(blocks)))
    finally:
        pool.busy.release()
    return True


# ---- blocks claimed in native code -----------------------------------------------------
# A participant of _Task goes back to Python between blocks: a claim, a ctypes call, the
# GIL taken again. For a compiled kernel the claim loop runs natively instead
# (xladist_claim_blocks below): each participant makes ONE ctypes call, holding no GIL
# while it takes blocks by an atomic counter, so a descheduled thread never holds the
# GIL between two blocks. The blocks are exactly blocks_of's (uniform `per`, the last
# cut at `units`), so results do not change.
NATIVE_CLAIM = True  # False: claim blocks in Python (_Task) for every function

_CLAIM_IR = """
define i64 @xladist_claim_blocks(ptr %fn, ptr %argv, ptr %next, i64 %nb, i64 %per,
                                 i64 %units) nounwind {
entry:
  br label %loop
loop:
  %done = phi i64 [0, %entry], [%done1, %body]
  %i = atomicrmw add ptr %next, i64 1 monotonic
  %more = icmp slt i64 %i, %nb
  br i1 %more, label %body, label %exit
body:
  %lo = mul i64 %i, %per
  %end = add i64 %lo, %per
  %short = icmp slt i64 %end, %units
  %hi = select i1 %short, i64 %end, i64 %units
  call void %fn(ptr %argv, i64 %lo, i64 %hi)
  %done1 = add i64 %done, 1
  br label %loop
exit:
  ret i64 %done
}
"""
_CLAIM_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                               ctypes.c_int64)
_native: dict = {}  # symbol -> [ctypes function or None, its code]


def native_function(ir: str, symbol: str, ctype):
    """`symbol` of the LLVM IR `ir` as a `ctype` function, compiled once per process
    (through the kernel cache); None when it cannot be built (the caller has another
    way)."""
    got = _native.get(symbol)
    if got is None:
        with _lock:
            got = _native.get(symbol)
            if got is None:
                try:
                    from . import jit
                    code, _cached = jit.get_code(f"xladist {symbol}\n" + ir, lambda: ir)
                    got = [ctype(code.address(symbol)), code]
                except Exception:  # noqa: BLE001 - None: the caller's other way
                    got = [None, None]
                _native[symbol] = got
    return got[0]


def _claimer():
    """The compiled claim loop, or None (then blocks are claimed in Python)."""
    return native_function(_CLAIM_IR, "xladist_claim_blocks", _CLAIM_TYPE)


class _NativeTask:
    """A compiled kernel's split call: every participant runs the native claim loop
    once; the one whose blocks complete the count releases `done` (see _Task)."""

    __slots__ = ("fn", "argv", "next", "args", "nb", "finished", "count", "done", "error",
                 "claim")

    def __init__(self, fn, argv, blocks, claim):
        self.claim = claim  # the compiled claim loop (_claimer), looked up once per call
        self.fn, self.argv = ctypes.cast(fn, ctypes.c_void_p).value, argv
        self.next = ctypes.c_int64(0)
        self.nb = len(blocks)
        self.args = (self.fn, argv, ctypes.addressof(self.next), self.nb,
                     blocks[0][1] - blocks[0][0], blocks[-1][1])
        self.finished = 0
        self.count = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()
        self.error = None

    def work(self) -> None:
        got = self.claim(*self.args)
        if got:
            with self.count:
                self.finished += got
                last = self.finished == self.nb
            if last:
                self.done.release()


def _wait_out(wait) -> None:
    """wait() to its end even when a signal handler raises in it (Ctrl-C in the main
    thread), and then raise what it raised: blocks that still run may use memory the
    caller's return would free (blas_pool.py: OpenBLAS's jobs live on its caller's stack)."""
    raised = None
    while True:
        try:
            wait()
            break
        except BaseException as e:  # noqa: BLE001 -- re-raised below
            raised = raised or e
    if raised is not None:
        raise raised


def pool_busy() -> bool:
    """Whether another thread's call holds the pool now (a hint: it may take it or let it
    go the next instant). A way that runs its blocks on the pool asks first, so that it
    does not run them on the caller alone and be timed as itself (choice.Site.record)."""
    pool = _pool
    return pool is not None and pool.busy.locked()


def _get_pool(n: int):
    global _pool
    if _pool is None or _pool.size != n:
        with _lock:
            if _pool is None or _pool.size != n:
                _pool = _Pool(n)
    return _pool


def _after_fork_in_child() -> None:
    """A forked child (multiprocessing's default on Linux before 3.14) has none of the
    parent's threads: the pool's workers are gone -- its calls ran every block on the
    caller, and OpenBLAS's jobs on the pool (blas_pool.py), which need every worker,
    waited forever -- and a lock another thread held at the fork stays held. The child
    starts its own pool on first use. (Executions another thread had in flight stay
    counted in _blas_flight: the child then only skips OpenBLAS's threads.)"""
    global _pool, _lock, _blas_gate
    _pool = None
    _lock = threading.Lock()
    _blas_gate = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Task:
    """One split kernel call: its blocks are claimed one at a time, by whoever comes.

    The caller waits for the blocks, not for the helpers: a helper the scheduler has
    not woken by the time every block is claimed (a busy machine: its core runs
    someone else) finds nothing left and returns, and the caller does not wait for it.
    Waiting for every helper to report was what made a loaded machine slow: a 1 ms
    kernel waited a whole scheduler time slice (several ms) for a helper that had
    nothing left to do. `finished` counts completed blocks; whoever completes the last
    one releases `done`, which the caller blocks on (no spinning)."""

    __slots__ = ("fn", "argv", "blocks", "claim", "finished", "done", "error")

    def __init__(self, fn, argv, blocks):
        self.fn, self.argv, self.blocks = fn, argv, blocks
        self.claim = itertools.count()  # next(): atomic under the GIL
        self.finished = itertools.count(1)
        self.done = threading.Lock()
        self.done.acquire()
        self.error: BaseException | None = None

    def work(self) -> None:
        blocks, nb = self.blocks, len(self.blocks)
        while True:
            i = next(self.claim)
            if i >= nb:
                return
            lo, hi = blocks[i]
            try:
                self.fn(self.argv, lo, hi)
            except BaseException as e:  # handed to the caller, who raises it
                self.error = self.error or e
            if next(self.finished) == nb:
                self.done.release()


WORKER_STACK = 8 << 20

# Workers are pinned, one per core of this rank's slice, and a call hands its blocks to
# the workers on the cores the caller is not on. Unpinned, Linux sometimes woke the
# worker on the caller's own core and left it there while the other core idled (seen on
# this 2-core KVM guest, for tens of ms at a time, e.g. after numpy's multi-threaded
# OpenBLAS had run: a vCPU the host has descheduled is not "idle" to the guest's wake-up
# placement): the two blocks of a 512^3 matmul then ran in turns on one core, 3.6-4.2 ms
# instead of 2.1-2.3 ms (per block, sched_getcpu). Pinning workers alone did not do: the
# caller, which stays unpinned (it is the user's thread), was often on the worker's core
# (4.4-4.5 ms). Choosing by sched_getcpu (vDSO, no system call) avoids both. Results do
# not change: the blocks are the same.
PIN_WORKERS = os.environ.get("XLADIST_PIN_THREADS", "1").strip().lower() not in ("0", "no", "false")


def worker_cpus(size: int) -> list[int] | None:
    """The cores a `size`-thread pool pins its `size` workers to (one each), or None
    (pinning off, one core, no affinity API): then size-1 unpinned workers. The ranks on
    a node take consecutive slices of the affinity mask (set_local_ranks gives the
    index); a slice wraps around a mask smaller than the threads asked for."""
    if not PIN_WORKERS or size < 2 or _getcpu() is None:
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    if len(cpus) < 2:
        return None
    base = _local_index * size
    return [cpus[(base + i) % len(cpus)] for i in range(size)]


_getcpu_fn: list = []


def _getcpu():
    """libc's sched_getcpu as a ctypes function, or None where there is none."""
    if not _getcpu_fn:
        try:
            fn = ctypes.CDLL(None, use_errno=True).sched_getcpu
            fn.restype, fn.argtypes = ctypes.c_int, []
            _getcpu_fn.append(fn if fn() >= 0 else None)
        except (OSError, AttributeError):
            _getcpu_fn.append(None)
    return _getcpu_fn[0]


class _Pool:
    """Daemon workers blocked on their inboxes; the calling thread is one more
    participant. Pinned (worker_cpus): one worker per core, and a call wakes those not
    on the caller's core; else size-1 unpinned workers."""

    def __init__(self, size: int):
        self.size = size
        self.busy = threading.Lock()
        self.cpus = worker_cpus(size)
        workers = size if self.cpus is not None else size - 1
        self.inbox = [queue.SimpleQueue() for _ in range(workers)]
        # Pinned: for each core, the inboxes of the workers not on it (run() looks up the
        # caller's core; a caller outside the slice may wake any worker).
        self.off_core = {c: [q for q, w in zip(self.inbox, self.cpus) if w != c]
                         for c in set(self.cpus)} if self.cpus is not None else {}
        # Which workers are between tasks' start and end: runnable threads of ours,
        # which the idle-core estimate (regime) must not count as load.
        self.active = [False] * workers
        self.native_ids: set[int] = set()  # the workers' thread ids (_foreign_runnable)
        # Kernels keep rows on their stack (codegen/kernels/core.py ROW_CACHE_BYTES, twice
        # when a trig kernel reruns its accurate version): a worker gets glibc's 8 MiB
        # even where threads default to less (musl: 128 KiB), instead of a SIGSEGV.
        default = threading.stack_size()
        threading.stack_size(max(default, WORKER_STACK))
        try:
            for i, q in enumerate(self.inbox):
                threading.Thread(target=self._loop, args=(q, i), daemon=True,
                                 name="xladist-compute").start()
        finally:
            threading.stack_size(default)

    def cpu(self) -> float:
        """CPU seconds the workers have run."""
        return sum(_thread_cpu(t) or 0.0 for t in list(self.native_ids))

    def _loop(self, q, i: int) -> None:
        self.native_ids.add(threading.get_native_id())
        if self.cpus is not None:
            try:  # pid 0: this thread only
                os.sched_setaffinity(0, {self.cpus[i]})
            except OSError:  # a cpuset that has since shrunk: stay unpinned
                pass
        while True:
            task = q.get()
            self.active[i] = True
            task.work()
            self.active[i] = False

    def helpers(self, count: int, together: bool = False) -> list:
        """The inboxes of up to `count` workers to hand a call's work to: those not on
        the caller's core (pinned). `together`: the work waits for itself (blas_pool.py's
        jobs), so each part needs a thread of its own: workers on the caller's core are
        taken too when those off it are too few."""
        helpers = self.inbox
        if self.cpus is not None:  # not the worker that shares the caller's core
            helpers = self.off_core.get(_getcpu()(), self.inbox)
            if together and len(helpers) < count:
                helpers = helpers + [q for q in self.inbox if q not in helpers]
        return helpers[:count]

    def run(self, task: _Task, participants: int) -> None:
        for q in self.helpers(participants - 1):
            q.put(task)
        task.work()
        task.done.acquire()  # blocks until the last claimed block is finished
        if task.error is not None:
            raise task.error
