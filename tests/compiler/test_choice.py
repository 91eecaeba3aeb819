"""The measured choice of how a split call runs (compiler/choice.py, parallel.run_blocks,
blas_blocks.py): each call site times its ways -- the pool, the caller alone, one call on
OpenBLAS's threads -- per regime (a core idle or not) and keeps the fastest; the ways give
the same bits, so no choice changes a result."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

import xladist
from xladist.compiler import blas_blocks, blas_pool, choice, gemm_kernel, parallel
from xladist.compiler.choice import ALONE, KERNEL, MAX_GAP, POOL, SHARED, WARM, WHOLE, Site

IDLE, BUSY, OWN_POOLS = choice.IDLE, choice.OTHERS, choice.OWN_POOLS


def feed(site: Site, regime: int, times: dict, calls: int) -> list[int]:
    """`calls` picks of `site`, each way taking times[way] seconds; the ways picked."""
    picked = []
    for _ in range(calls):
        way = site.pick(regime)
        picked.append(way)
        site.record(regime, way, times[way])
    return picked


def test_site_warms_every_way_then_keeps_the_fastest():
    site = Site((POOL, ALONE, WHOLE))
    picked = feed(site, IDLE, {POOL: 2.0, ALONE: 3.0, WHOLE: 1.0}, 200)
    assert picked[:3 * WARM] == [POOL] * WARM + [ALONE] * WARM + [WHOLE] * WARM
    assert site.best(IDLE) == WHOLE
    rest = picked[3 * WARM:]
    # Other ways are looked at again, ever more rarely while they lose.
    assert {POOL, ALONE} <= set(rest)
    assert rest.count(WHOLE) >= len(rest) * 0.9
    assert sum(w != WHOLE for w in rest[-2 * MAX_GAP:]) <= 3  # gaps grew to MAX_GAP


def test_site_follows_a_change_of_conditions():
    """OpenBLAS's threads waking up (numpy ran) or a neighbour taking a core: the way that
    was slower becomes faster within the same regime; the site moves to it within a few
    of its gaps, and an exploration that wins is repeated at once."""
    site = Site((POOL, WHOLE))
    feed(site, IDLE, {POOL: 1.0, WHOLE: 2.0}, 300)
    assert site.best(IDLE) == POOL
    picked = feed(site, IDLE, {POOL: 2.0, WHOLE: 1.0}, 2 * MAX_GAP)
    assert site.best(IDLE) == WHOLE
    first = picked.index(WHOLE)
    assert picked[first:first + 3] == [WHOLE] * 3  # confirmed at once, not after a gap


def test_regimes_are_measured_apart():
    site = Site((POOL, ALONE))
    feed(site, IDLE, {POOL: 1.0, ALONE: 2.0}, 50)
    feed(site, OWN_POOLS, {POOL: 3.0, ALONE: 2.5}, 50)
    assert site.best(IDLE) == POOL and site.best(OWN_POOLS) == ALONE
    assert site.describe()[choice.REGIMES[OWN_POOLS]]["chosen"] == "caller alone"
    site.drop(WHOLE)  # not offered: nothing changes
    site.drop(ALONE)
    assert site.pick(OWN_POOLS) == POOL and site.ways == [POOL]
    site.drop(POOL)  # the last way stays
    assert site.ways == [POOL]


def test_under_other_processes_load_a_site_with_the_pool_keeps_its_share():
    """Other processes hold every core: the caller alone is not offered where the pool
    is, even when its calls time faster -- they run in the caller's time slice and leave
    the process one core's share (choice.SHARE_REGIMES). Without the pool it is the way."""
    site = Site((POOL, ALONE))
    picked = feed(site, BUSY, {POOL: 3.0, ALONE: 1.0}, 200)
    assert set(picked) == {POOL} and site.best(BUSY) == POOL
    assert site.samples[BUSY][ALONE] == [] and site.calls[ALONE] == 0
    assert feed(site, OWN_POOLS, {POOL: 3.0, ALONE: 1.0}, 50).count(ALONE) > 40
    products = Site((ALONE, WHOLE), only={WHOLE: (OWN_POOLS,)})  # a product with no split
    assert set(feed(products, BUSY, {ALONE: 2.0, WHOLE: 1.0}, 20)) == {ALONE}
    # A site may still offer it there when told so.
    told = Site((POOL, ALONE), only={ALONE: (IDLE, OWN_POOLS, BUSY)})
    assert feed(told, BUSY, {POOL: 3.0, ALONE: 1.0}, 50).count(ALONE) > 40
    # A way dropped may leave only ways restricted to other regimes: those are offered.
    lone = Site((POOL, ALONE, WHOLE), only={WHOLE: (OWN_POOLS,)})
    lone.drop(POOL)
    assert lone.offered(BUSY) == [ALONE, WHOLE] and lone.pick(BUSY) in (ALONE, WHOLE)


def _names_per_call(regime: int, monkeypatch, slow_on_helpers: bool, calls: int):
    """run_blocks on one site in `regime`, `calls` times; per call, where its blocks ran ("pool" or
    "caller"). Time is a fake clock the ways advance, so what is asserted is the choice
    and the dispatch, not the scheduler (a loaded machine may leave a real helper
    unscheduled for a whole call; the pool itself is tested in test_threads.py): on the
    pool the blocks take 8 x 4 ms / 2, alone 8 x 4 ms; with `slow_on_helpers` the pool's
    call takes 40 ms."""
    parallel.set_threads(2)
    monkeypatch.setattr(parallel, "regime", lambda: regime)
    clock = [0.0]

    class FakeTime:
        def __getattr__(self, name):
            return getattr(time, name)

        def perf_counter(self):
            return clock[0]
    monkeypatch.setattr(parallel, "time", FakeTime())

    def on_pool(pool, fn, argv, blocks, n):
        names.add("pool")
        clock[0] += 0.04 if slow_on_helpers else 0.004 * len(blocks) / 2
        return True
    monkeypatch.setattr(parallel, "_on_pool", on_pool)
    site = Site((POOL, ALONE))
    per_call = []

    def block(_a, lo, hi):
        names.add("caller")
        clock[0] += 0.004

    for _ in range(calls):
        names = set()
        parallel.run_blocks(block, None, [(i, i + 1) for i in range(8)], site)
        per_call.append(names)
    return site, per_call


@pytest.fixture
def two_threads(monkeypatch):
    # The WHOLE way is offered in every regime only where OpenBLAS's workers sleep after a
    # call (ranks: OPENBLAS_THREAD_TIMEOUT=4); these tests exercise it in this process so.
    monkeypatch.setattr(blas_blocks, "_PRODUCT_REGIMES", blas_blocks.product_regimes(True))
    yield
    parallel.set_threads(None)


def test_no_idle_core_still_splits_when_that_is_faster(two_threads, monkeypatch):
    """Every core busy (simulated): the call keeps its share of the machine -- the pool,
    measured faster -- instead of stepping back to the caller alone by rule (before issue
    31 it ran on the caller whenever no core was idle)."""
    site, per_call = _names_per_call(BUSY, monkeypatch, False, 2 * WARM + 7)
    assert site.best(BUSY) == POOL
    chosen = per_call[2 * WARM:]  # after the warm-up, before the first look elsewhere
    assert all(names == {"pool"} for names in chosen), per_call


def test_own_pools_awake_runs_on_the_caller_when_that_is_faster(two_threads, monkeypatch):
    site, per_call = _names_per_call(OWN_POOLS, monkeypatch, True, 2 * WARM + 7)
    assert site.best(OWN_POOLS) == ALONE
    assert all(names == {"caller"} for names in per_call[2 * WARM:]), per_call


def test_other_processes_load_keeps_the_pool_even_when_alone_times_faster(two_threads,
                                                                          monkeypatch):
    site, per_call = _names_per_call(BUSY, monkeypatch, True, 2 * WARM + 7)
    assert site.best(BUSY) == POOL
    assert all(names == {"pool"} for names in per_call), per_call


# Spins until its parent is gone: a test process killed by a signal (a closed pipe, a
# crash) runs no `finally`, and its hogs kept the cores busy for everything after it.
_SPIN = ("import os, sys\nparent = int(sys.argv[2])\nos.sched_setaffinity(0, {int(sys.argv[1])})\n"
         "while os.getppid() == parent:\n    for _ in range(100000):\n        pass\n")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or os.cpu_count() is None,
                    reason="needs the affinity API")
def test_busy_processes_on_every_core(two_threads, monkeypatch, tmp_path):
    """A real busy process on every core: the machine reads as having no idle core, the
    split kernel's site runs on the pool there (the caller alone is not offered:
    choice.SHARE_REGIMES), and its results are still the bits of one thread."""
    cores = sorted(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", _SPIN, str(c), str(os.getpid())])
            for c in cores]
    try:
        monkeypatch.setattr(parallel, "DYNAMIC", True)
        text = ("HloModule m\nENTRY main {\n a = f32[600,1100] parameter(0)\n"
                " t = f32[600,1100] tanh(a)\n ROOT r = f32[600,1100] multiply(t, a)\n}\n")
        exe = xladist.compile(xladist.parse_hlo(text), backend="cpu")
        (thunk,) = exe.program.builder.kernel_thunks
        assert thunk.blocks is not None and len(thunk.blocks) > 2
        x = np.random.default_rng(0).standard_normal((600, 1100)).astype(np.float32)
        parallel.set_threads(1)
        one = np.array(exe(x)[0])
        parallel.set_threads(2)
        deadline = time.monotonic() + 10
        while parallel._has_room() and time.monotonic() < deadline:
            time.sleep(parallel.LOAD_PERIOD)  # the hogs show in two samples in a row
        while parallel.regime() != choice.OTHERS and time.monotonic() < deadline:
            time.sleep(parallel.LOAD_PERIOD)  # (an earlier test's OpenBLAS threads spinning)
        assert parallel.regime() == choice.OTHERS, "busy processes on every core were not seen"
        got = [np.array(exe(x)[0]) for _ in range(3 * WARM)]
        busy = thunk.site.samples[BUSY]
        assert len(busy[POOL]) >= 1 and busy[ALONE] == [], busy
        assert all(g.tobytes() == one.tobytes() for g in got)
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait(10)


def test_a_busy_count_from_before_a_pause_does_not_outlive_it(monkeypatch):
    """The runnable count comes back slowly from a busy sample while samples come
    LOAD_PERIOD apart (the other sessions' load comes in bursts), but by the time that
    passed, not by the samples taken: after a pause -- the caller ran numpy or jax, or
    nothing -- a busy count from before it says nothing about now, and an idle machine
    is the IDLE regime at the first sample. (Counted in samples, a plain process's
    first calls after numpy's burst ran in a busy regime and handed large products to
    OpenBLAS's threads, whose spin after the call then kept it busy.)"""
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    monkeypatch.setattr(parallel, "_foreign_runnable", lambda now: 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    running = {"n": 6}
    monkeypatch.setattr(os, "pread", lambda fd, n, off: b"1 1 1 %d/99 1\n" % running["n"])
    st = {"next": 0.0, "running": 0.0, "last": 0, "fd": -1, "at": 0.0}
    monkeypatch.setattr(parallel, "_load", st)

    def sample(after: float):
        """regime() as if `after` seconds passed since the last sample."""
        st["next"] = 0.0
        st["at"] = time.monotonic() - after
        return parallel.regime()

    sample(0.005)  # a busy core counts once two samples in a row show it
    assert sample(0.005) == choice.OTHERS
    running["n"] = 1  # the calling thread alone
    assert sample(0.005) != choice.IDLE  # one sample after a busy one: not yet
    assert sample(0.5) == choice.IDLE    # half a second later: idle now


def _no_core_idle(monkeypatch):
    """regime() samples a load of 8 runnable threads more than the cores, every call."""
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    monkeypatch.setattr(parallel, "LOAD_PERIOD", 0.0)
    cores = os.cpu_count() or 1
    monkeypatch.setattr(parallel, "_load", {"next": 0.0, "running": 0.0, "last": 0,
                                            "fd": -1, "at": time.monotonic()})
    monkeypatch.setattr(os, "pread", lambda fd, n, off: b"9 9 9 %d/99 1\n" % (cores + 8))


def test_a_burst_of_this_process_before_a_pause_is_not_a_busy_pool_now(monkeypatch):
    """No core idle (the load sample says so) and a thread of this process computed
    before the caller's pause -- numpy's matmul, a jax call, then asleep -- is not the
    OWN_POOLS regime after it: the regime says who is runnable now. (Measured over the
    interval since the last sample, a burst before the pause kept a plain process's
    calls under other processes' load in OWN_POOLS, where OpenBLAS's threads are offered:
    compute.py --company, background load, every matmul 1024 sample.)"""
    _no_core_idle(monkeypatch)
    parallel.regime()
    assert parallel.regime() == choice.OTHERS
    a = np.ones((300, 300), np.float32)
    for _ in range(2):
        def burst():
            end = time.monotonic() + 0.1
            while time.monotonic() < end:
                a @ a
        t = threading.Thread(target=burst, daemon=True)
        t.start()
        t.join(10)
        # The caller's pause: the burst has ended, and OpenBLAS's workers, which spin
        # ~0.1 s after numpy's last threaded call, are asleep.
        time.sleep(0.3)
        assert parallel.regime() == choice.OTHERS


def test_busy_threads_of_this_process_are_told_from_other_processes(monkeypatch):
    """No core idle (the load sample says so): a thread of this process computing --
    numpy's OpenBLAS workers still awake, here a thread in numpy's matmul -- makes it
    the OWN_POOLS regime; without one, OTHERS."""
    _no_core_idle(monkeypatch)

    def settle(want, seconds=2.0):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if parallel.regime() == want:
                return True
            time.sleep(0.01)
        return False

    assert settle(choice.OTHERS)
    stop = threading.Event()

    def compute():
        a = np.ones((300, 300), np.float32)
        while not stop.is_set():
            a @ a  # the GIL released inside BLAS: this thread burns CPU next to ours

    t = threading.Thread(target=compute, daemon=True)
    t.start()
    try:
        assert settle(choice.OWN_POOLS)
    finally:
        stop.set()
        t.join(10)
    assert settle(choice.OTHERS)


# ---- products: OpenBLAS's own threads as a way --------------------------------------

def _dot_module(m, k, n, dtype="f32"):
    return xladist.parse_hlo(
        f"HloModule m\nENTRY main {{\n a = {dtype}[{m},{k}] parameter(0)\n"
        f" b = {dtype}[{k},{n}] parameter(1)\n ROOT d = {dtype}[{m},{n}] dot(a, b), "
        f"lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")


@pytest.fixture(autouse=True)
def _kernel_at_once(monkeypatch):
    # The LLVM GEMM is offered from a process's KERNEL_AFTER-th product; here from the
    # first, whatever ran before (the delay itself: its own test below).
    monkeypatch.setattr(blas_blocks, "KERNEL_AFTER", 0)


@pytest.fixture(autouse=True)
def _threads_of_this_test_only(monkeypatch):
    # The OpenBLAS split on the pool opens no window while another thread that may call
    # OpenBLAS is alive (blas_pool._others_may_call_blas); threads an earlier test of the
    # session left (a pump of a finished job, an idle executor's worker) are not this
    # test's: they made the window tests fail in the whole suite and pass alone.
    before = set(threading.enumerate())
    real = threading.enumerate
    monkeypatch.setattr(blas_pool, "_alive", lambda: [t for t in real() if t not in before])


def _force(monkeypatch, way) -> list:
    """Every site picks `way` where it has it, else its first way; returns the sites it
    picked for, in order (_ran_or_refused reads the last)."""
    picked = []

    def pick(self, regime):
        picked.append(self)
        return way if way in self.ways else self.ways[0]
    monkeypatch.setattr(Site, "pick", pick)
    return picked


def _ran_or_refused(way, picked, before: dict, also=()) -> str:
    """A forced way either ran (calls_by_way counts it, or one of `also`: the names a
    way takes where it is another, e.g. the pool on a product of one block) or its site
    dropped it (its check refused it): so a forced-way test cannot pass on another way
    without saying so. Returns "ran" or "refused"."""
    now = choice.calls_by_way()
    for name in (choice.NAMES[way], *also):
        if now.get(name, 0) > before.get(name, 0):
            return "ran"
    assert picked and way not in picked[-1].ways, (
        f"{choice.NAMES[way]} was forced and offered, but "
        f"{[w for w in now if now[w] != before.get(w, 0)] or 'no recorded way'} ran")
    return "refused"


def _forced_product(monkeypatch, way, a, b, threads=2):
    """a @ b through matmul_into on `threads` threads, its site's choice on (DYNAMIC) and
    `way` forced where the site offers it."""
    parallel.set_threads(threads)
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    _force(monkeypatch, way)
    out = np.full((a.shape[0], b.shape[1]), np.nan, a.dtype)
    with parallel.blas_scope():
        blas_blocks.matmul_into(a, b, out)
    return out


# (m, k, n): unsplit (one block), split by rows, split by columns; 37x2000x900 and
# 700x700x3000 are shapes whose OpenBLAS 0.3.31 threads sum in another order than one
# thread (the check must refuse them where that holds).
PRODUCTS = [(256, 256, 256), (520, 300, 300), (100, 400, 1030), (37, 2000, 900)]


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("mkn", PRODUCTS, ids=lambda s: "x".join(map(str, s)))
def test_every_way_of_a_product_gives_the_bits_of_one_thread(mkn, dtype, monkeypatch,
                                                              two_threads):
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    m, k, n = mkn
    exe = xladist.compile(_dot_module(m, k, n, dtype), backend="cpu")
    rng = np.random.default_rng(1)
    np_t = np.float32 if dtype == "f32" else np.float64
    a, b = rng.standard_normal((m, k)).astype(np_t), rng.standard_normal((k, n)).astype(np_t)
    parallel.set_threads(1)
    want = np.array(exe(a, b)[0])
    np.testing.assert_allclose(want, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    blas_blocks._openblas_cut(np.dtype(np_t))  # (the LLVM GEMM built: offered at once)
    one_block = blas_blocks.gemm_split(m, n, k) is None
    ran = {}
    for threads in (1, 2, 4):
        parallel.set_threads(threads)
        for way in (POOL, ALONE, WHOLE, SHARED, KERNEL):
            picked = _force(monkeypatch, way)
            for _ in range(2):  # (a way's first call may run its check instead)
                before = dict(choice.calls_by_way())
                got = np.array(exe(a, b)[0])
                assert got.tobytes() == want.tobytes(), (threads, choice.NAMES[way])
            ran[threads, way] = _ran_or_refused(way, picked, before, also=(
                ("caller alone",) if way == POOL and (threads == 1 or one_block) else ()))
    # What the loop above covered: with 2 threads or more, the pool, the caller alone and
    # OpenBLAS split on the pool always run (their bits are the blocks' own); OpenBLAS's
    # threads and the LLVM GEMM where their checks pass.
    for threads in (2, 4):
        assert all(ran[threads, w] == "ran" for w in (POOL, ALONE)), ran


# The products above whose every block OpenBLAS computes with its level-3 driver, as the
# LLVM GEMM does: 520x300x300's last block of 8 rows (7.2e5 multiply-adds) goes to the
# SkylakeX small-matrix kernel, whose signed zeros differ (_signed_zeros), so there the
# check refuses the way; 530x300x300's last block has 18 rows.
KERNEL_PRODUCTS = [p for p in PRODUCTS if p != (520, 300, 300)] + [(530, 300, 300),
                                                                   (300, 1000, 260)]


@pytest.mark.parametrize("trans", ["NN", "TN", "NT"])
@pytest.mark.parametrize("mkn", KERNEL_PRODUCTS, ids=lambda s: "x".join(map(str, s)))
def test_the_llvm_gemm_cut_as_openblas_runs_and_gives_its_bits(mkn, trans, monkeypatch,
                                                               two_threads):
    """Where the probe finds OpenBLAS's cut of K, the LLVM GEMM is offered for every
    product above (plain and transposed operands, K cut in one to three blocks) and,
    forced, runs and gives the fixed blocks' bits on 1 and 2 threads."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    if blas_blocks._openblas_cut(np.dtype(np.float32)) is None:
        pytest.skip("no cut of K found that gives this OpenBLAS's bits")
    m, k, n = mkn
    a, b, _ = _product_and_blocks(m, k, n, seed=4)
    if trans[0] == "T":
        a = np.asfortranarray(a)
    if trans[1] == "T":
        b = np.asfortranarray(b)
    want = _blocks_of(a, b)
    for threads in (1, 2):
        before = choice.calls_by_way().get("LLVM GEMM", 0)
        out = _forced_product(monkeypatch, KERNEL, a, b, threads)
        assert choice.calls_by_way().get("LLVM GEMM", 0) == before + 1, threads
        assert out.tobytes() == want.tobytes(), threads


def test_the_llvm_gemm_gives_openblas_bits_as_an_avx2_machine_builds_it(tmp_path):
    """The LLVM GEMM built for an AVX2 machine (XLADIST_TARGET_CPU=haswell: 8-wide
    vectors, its own packing and micro-tiles) finds OpenBLAS's cut and gives the fixed
    blocks' bits, as on this host's own vectors: the tests above, in a process whose
    target is that CPU."""
    if not gemm_kernel.available() or gemm_kernel.vector_bytes() != 64:
        pytest.skip("the host's own vectors are already the AVX2 ones (or there are none)")
    import llvmlite.binding as llvm
    if not all(llvm.get_host_cpu_features().get(f, False) for f in ("avx2", "fma", "f16c")):
        pytest.skip("this host cannot run code for haswell")
    env = dict(os.environ, XLADIST_TARGET_CPU="haswell", XLADIST_CACHE_DIR=str(tmp_path))
    test = f"{__file__}::test_the_llvm_gemm_cut_as_openblas_runs_and_gives_its_bits"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-k", "NN", test], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and " passed" in done.stdout and "skipped" not in \
        done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_llvm_gemm_gives_openblas_zero_where_a_sum_underflows(dtype, monkeypatch,
                                                                   two_threads):
    """OpenBLAS sets C to +0 (beta 0) and adds each K block's sum to it, so a row whose
    products all underflow to -0 gives +0; the LLVM GEMM stored its first block's sum as
    it was, -0, and the way gave other bits than the fixed blocks although the check on
    random operands (which never meet a signed zero) passed."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    if blas_blocks._openblas_cut(np.dtype(dtype)) is None:
        pytest.skip("no cut of K found that gives this OpenBLAS's bits")
    m, k, n = 256, 1000, 256
    tiny = float(np.finfo(dtype).smallest_subnormal) ** 0.5 / 2  # tiny * tiny rounds to 0
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    a[0], b[:, :5] = -tiny, tiny  # row 0 and columns 0-4: sums of -0 (and one edge tile)
    a[7, :500] = -tiny            # row 7: -0 in the first K block only
    want = _blocks_of(a, b)
    assert not np.signbit(want[0, :5]).any() and not np.signbit(want[7, :5]).any()
    for threads in (1, 2):
        before = choice.calls_by_way().get("LLVM GEMM", 0)
        out = _forced_product(monkeypatch, KERNEL, a, b, threads)
        assert choice.calls_by_way().get("LLVM GEMM", 0) == before + 1, threads
        assert out.tobytes() == want.tobytes(), (threads, np.signbit(out[0, :5]))


@pytest.mark.parametrize("way", [WHOLE, SHARED, KERNEL], ids=lambda w: choice.NAMES[w])
def test_a_way_is_refused_where_a_small_block_keeps_a_sum_s_negative_zero(way, monkeypatch,
                                                                          two_threads):
    """520x300x300's last block of 8 rows is under OpenBLAS's small-matrix bound (its
    SkylakeX kernel): there a sum whose products underflow stays -0, while one threaded
    call and the LLVM GEMM add it to +0. The checks on random operands passed, and the
    ways gave other bits than the blocks; the checks' operands now hold such sums at
    every block's corners, and refuse them."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    m, k, n = 520, 300, 300
    rng = np.random.default_rng(9)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    tiny = float(np.finfo(np.float32).smallest_subnormal) ** 0.5 / 2
    a[515], b[:, 3] = -tiny, tiny
    want = _blocks_of(a, b)
    if not np.signbit(want[515, 3]):
        pytest.skip("this OpenBLAS gives +0 for the last block's sum too")
    if way == KERNEL and blas_blocks._openblas_cut(np.dtype(np.float32)) is None:
        pytest.skip("no cut of K found that gives this OpenBLAS's bits")  # (else: built)
    monkeypatch.setattr(blas_blocks, "_agree", {})
    monkeypatch.setattr(blas_blocks, "_sites", {})
    out = _forced_product(monkeypatch, way, a, b)
    assert out.tobytes() == want.tobytes(), (choice.NAMES[way], out[515, 3])
    assert way not in _gemm_site(a, b, 2).ways


def test_the_check_refuses_the_llvm_gemm_cut_otherwise(monkeypatch, two_threads):
    """With a cut of K that is not OpenBLAS's the kernel's sums differ, the check says
    so, and the site drops the way: the product keeps the fixed blocks' bits."""
    if not gemm_kernel.available():
        pytest.skip("no LLVM GEMM for this target")
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    found = blas_blocks._openblas_cut(np.dtype(np.float32))
    wrong = replace(gemm_kernel.DEFAULT, kc=(found.kc if found else 448) // 2 + 8,
                    kround=8)
    monkeypatch.setitem(blas_blocks._cuts, np.dtype(np.float32), wrong)
    m, k, n = 520, 1000, 300
    a, b, want = _product_and_blocks(m, k, n, seed=5)
    blas_blocks._agree.pop(("kernel", "f", a.shape, b.shape, "N", "N"), None)
    assert blas_blocks._kernel_agrees(a, b, blas_blocks.gemm_split(m, n, k), wrong) is False
    out = _forced_product(monkeypatch, KERNEL, a, b)
    assert KERNEL not in _gemm_site(a, b, 2).ways
    assert out.tobytes() == want.tobytes()
    blas_blocks._agree.pop(("kernel", "f", a.shape, b.shape, "N", "N"), None)


def test_the_check_refuses_openblas_threads_where_they_change_the_sums(monkeypatch,
                                                                       two_threads):
    """For every product above, OpenBLAS's threads are offered exactly when they give the
    blocks' bits on the test's own operands; and where they do not, the way is refused
    -- without the check, forcing it changes the result (what the test above would
    catch)."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    refused = 0
    rng = np.random.default_rng(2)
    for m, k, n in PRODUCTS:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        blas_blocks._signed_zeros(a, b)  # (sums that show signed zeros, as the check's)
        blocks = _blocks_of(a, b)
        threaded = np.empty((m, n), np.float32)
        with parallel.openblas_threads(2):
            np.matmul(a, b, out=threaded)
        same = blocks.tobytes() == threaded.tobytes()
        assert blas_blocks._threads_agree(a, b, 2) == same, (m, k, n)
        refused += not same
        if not same:  # the way would change the bits: the site does not offer it
            parallel.set_threads(2)
            monkeypatch.setattr(parallel, "DYNAMIC", True)
            _force(monkeypatch, WHOLE)  # (its first pick runs the check)
            key = ("gemm", "f", m, n, k, "N", "N", 2, True)
            blas_blocks._sites.pop(key, None)
            out = np.empty((m, n), np.float32)
            with parallel.blas_scope():
                blas_blocks.matmul_into(a, b, out)
            site = blas_blocks._sites[key]
            assert WHOLE not in site.ways and SHARED not in site.ways
            assert out.tobytes() == blocks.tobytes()
    if refused == 0:
        pytest.skip("this OpenBLAS sums every product above the same way on 2 threads")


def _product_and_blocks(m, k, n, seed):
    """Random f32 operands of an m x k by k x n product, and their fixed blocks' result
    on one thread (the bits every way must give)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b, _blocks_of(a, b)


def _blocks_of(a, b):
    """a @ b as the product's fixed blocks give it on one thread (the bits every way
    must give)."""
    (m, k), n = a.shape, b.shape[1]
    want = np.empty((m, n), a.dtype)
    with parallel.openblas_threads(1):
        blas_blocks._gemm_blocks(a, b, want, blas_blocks.gemm_split(m, n, k))
    return want


def _gemm_site(a, b, threads, checkable=True):
    (m, k), n = a.shape, b.shape[1]
    return blas_blocks._sites[("gemm", a.dtype.char, m, n, k, "N", "N", threads, checkable)]


@pytest.mark.parametrize("cap", ["CHECK_MAX_MACS", "CHECK_MAX_BYTES"])
def test_a_product_too_large_for_a_bits_check_keeps_its_fixed_blocks(cap, monkeypatch,
                                                                     two_threads):
    """A bits check runs the product twice on random operands: a product beyond its
    bounds (multiply-adds, the check's memory) is offered no way that needs one
    (OpenBLAS's threads, its split on the pool) and never pays it."""
    m, k, n = 1100, 400, 160
    monkeypatch.setattr(blas_blocks, cap, 1000)
    checked = []
    monkeypatch.setattr(blas_blocks, "_threads_agree", lambda *a: checked.append(a) or 1)
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    parallel.set_threads(2)
    blas_blocks._sites.clear()
    a = np.ones((m, k), np.float32)
    b = np.ones((k, n), np.float32)
    out = np.empty((m, n), np.float32)
    for _ in range(2 * WARM * 6):
        with parallel.blas_scope():
            blas_blocks.matmul_into(a, b, out)
    assert (out == k).all()
    assert _gemm_site(a, b, 2, False).ways == [POOL, ALONE] and not checked


def test_a_matrix_times_its_own_transpose_records_no_way_it_did_not_run(monkeypatch,
                                                                      two_threads):
    """a @ a.T (numpy's syrk: no way but the fixed blocks) and a @ c.T of the same shapes
    and orders are two sites: sharing one, the syrk product -- offered none of the checked
    ways -- ran its blocks on the pool whenever the site picked one of them and recorded
    that time as the way's (found by review: 3 pool runs recorded as "OpenBLAS
    threads"), so the other product's choice went by times no such call made."""
    m, k = 600, 100
    rng = np.random.default_rng(11)
    a = rng.standard_normal((m, k)).astype(np.float32)
    c = rng.standard_normal((m, k)).astype(np.float32)
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    parallel.set_threads(2)
    blas_blocks._sites.clear()
    _force(monkeypatch, POOL)
    with parallel.blas_scope():
        blas_blocks.matmul_into(a, c.T, np.empty((m, m), np.float32))
    want = _blocks_of(a, a.T)
    _force(monkeypatch, WHOLE)
    for _ in range(3):
        out = np.empty((m, m), np.float32)
        with parallel.blas_scope():
            blas_blocks.matmul_into(a, a.T, out)
        assert out.tobytes() == want.tobytes()
    recorded = {(s.name, choice.NAMES[w]): s.calls[w] for s in blas_blocks._sites.values()
                for w in (WHOLE, SHARED) if s.calls.get(w)}
    assert not recorded


@pytest.mark.parametrize("way", [WHOLE, SHARED])
def test_a_check_without_memory_keeps_the_fixed_blocks(way, monkeypatch, two_threads):
    """A bits check allocates random operands and two results (up to CHECK_MAX_BYTES):
    where that memory is not there the way is not offered and the product runs its fixed
    blocks -- the execution does not fail. Found by review: the MemoryError went up
    through matmul_into."""
    threads = 2
    m, k, n = 1100, 400, 160
    a, b, want = _product_and_blocks(m, k, n, 12)

    def no_memory(*_):
        raise MemoryError
    monkeypatch.setattr(blas_blocks, "_random_like", no_memory)
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    parallel.set_threads(threads)
    blas_blocks._sites.clear()
    blas_blocks._agree.clear()
    _force(monkeypatch, way)
    for _ in range(2):
        out = np.full((m, n), np.nan, np.float32)
        with parallel.blas_scope():
            blas_blocks.matmul_into(a, b, out)
        assert out.tobytes() == want.tobytes()
    site, = blas_blocks._sites.values()
    assert way not in site.ways
    assert not blas_blocks._agree  # nothing learned: the memory may be there later


@pytest.mark.parametrize("dtype,mkn", [("f", (2048, 4096, 16)), ("F", (1100, 400, 160))])
def test_a_bits_check_takes_the_memory_its_bound_counts(dtype, mkn, two_threads):
    """CHECK_MAX_BYTES bounds a check's operands and two results; the check takes no
    more at its peak (numpy's allocations, tracemalloc). Found by review: random operands
    made in float64 and then converted, and the results compared as bytes copies, took
    up to 3x the bound (f32 2048x4096x16: 2.96x, c64 1100x400x160: 2.28x), so a check
    the bound admitted at 256 MiB took ~750 MiB."""
    import tracemalloc
    m, k, n = mkn
    a, b = np.ones((m, k), dtype), np.ones((n, k), dtype).T
    blas_blocks._agree.clear()
    parallel.set_threads(2)
    tracemalloc.start()
    try:
        blas_blocks._threads_agree(a, b, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        blas_blocks._agree.clear()
    bound = (m * k + k * n + 2 * m * n) * a.itemsize
    assert peak <= bound + (1 << 20), peak / bound


def test_openblas_threads_first_picked_beside_another_execution_stay_offered(
        monkeypatch, two_threads):
    """The check of OpenBLAS's threads needs its execution to be the only one in flight
    (exclusive_blas); beside another one it cannot run and says so ("ask later"). Found
    by review: the site took that answer for a failed check and dropped WHOLE and SHARED
    for good, so a product whose threads give the blocks' bits lost the way because
    another thread of the process ran an execution at its first pick. Asked again at
    each pick meanwhile, the check makes neither its operands nor its product of the
    blocks."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    m, k, n = 512, 256, 384  # OpenBLAS's threads give its blocks' bits (test above)
    a, b, want = _product_and_blocks(m, k, n, 13)
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    parallel.set_threads(2)
    blas_blocks._sites.clear()
    blas_blocks._agree.clear()
    _force(monkeypatch, WHOLE)
    checked = []
    real = blas_blocks._gemm_blocks
    monkeypatch.setattr(blas_blocks, "_gemm_blocks", lambda *x: checked.append(1) or real(*x))
    made = []  # the check's random operands: not made while the check cannot run
    real_like = blas_blocks._random_like
    monkeypatch.setattr(blas_blocks, "_random_like", lambda *x: made.append(1) or real_like(*x))
    for _ in range(3):
        out = np.empty((m, n), np.float32)
        with parallel.blas_scope(), parallel.blas_scope():  # two executions in flight
            blas_blocks.matmul_into(a, b, out)
        assert out.tobytes() == want.tobytes()
    site = _gemm_site(a, b, 2)
    assert WHOLE in site.ways and site.calls[WHOLE] == 0
    assert not checked and not made  # nor its product of the blocks, nor its operands
    if not blas_blocks._threads_agree(a, b, 2):
        pytest.skip("this OpenBLAS sums 512x256x384 another way on 2 threads")
    with parallel.blas_scope():  # alone now: the way runs
        blas_blocks.matmul_into(a, b, out)
    assert out.tobytes() == want.tobytes() and site.calls[WHOLE] == 1


@pytest.mark.parametrize("dtype", ["F", "D"])
def test_every_way_of_a_complex_product_of_transposed_operands_gives_the_blocks_bits(
        dtype, monkeypatch, two_threads):
    """The every-way test above runs f32 and f64 of row-major operands; the checked ways
    (OpenBLAS's threads and split) also keep the fixed blocks' bits for complex products
    of a transposed and a strided operand, on 2 and 3 threads."""
    m, k, n = 1100, 200, 160
    rng = np.random.default_rng(14)

    def rand(shape):
        return (rng.random(shape) - 0.5 + 1j * (rng.random(shape) - 0.5)).astype(dtype)
    a = rand((k, m)).T                      # order "T"
    b = rand((k, n + 7))[:, 3:n + 3]        # order "N", leading dimension > n
    split = blas_blocks.gemm_split(m, n, k)
    assert split is not None and blas_blocks._order(a) == "T"
    want = _blocks_of(a, b)
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    for threads in (2, 3):
        parallel.set_threads(threads)
        blas_blocks._sites.clear()
        for way in (POOL, ALONE, WHOLE, SHARED):
            picked = _force(monkeypatch, way)
            for _ in range(2):  # (a way's first call may run its check instead)
                before = dict(choice.calls_by_way())
                out = np.full((m, n), np.nan, dtype)
                with parallel.blas_scope():
                    blas_blocks.matmul_into(a, b, out)
                assert out.tobytes() == want.tobytes(), (threads, choice.NAMES[way])
            ran = _ran_or_refused(way, picked, before)
            assert way in (WHOLE, SHARED) or ran == "ran"


def test_a_matrix_times_its_own_transpose_is_not_handed_to_openblas_threads(two_threads):
    # numpy takes syrk for it, which the check's independent operands do not exercise.
    parallel.set_threads(2)
    a = np.random.default_rng(3).standard_normal((300, 400)).astype(np.float32)
    out = np.empty((300, 300), np.float32)
    blas_blocks._sites.clear()
    with parallel.blas_scope():
        blas_blocks.matmul_into(a, a.T, out)
    assert all(not {WHOLE, SHARED} & set(s.ways)
               for s in blas_blocks._sites.values())
    parallel.set_threads(1)
    one = np.empty_like(out)
    with parallel.blas_scope():
        blas_blocks.matmul_into(a, a.T, one)
    assert out.tobytes() == one.tobytes()


def _needs_pool_callback():
    if not blas_pool.available():
        pytest.skip("no OpenBLAS with a threads callback (0.3.27 on) in this process")


@pytest.mark.parametrize("threads", [2, 4])
def test_openblas_split_on_the_pool_gives_its_own_threads_bits_and_runs_on_the_pool(
        threads, two_threads):
    """The SHARED way: OpenBLAS's jobs of one threaded call run on the compute pool
    (the callback counts them; the pool's workers take CPU), and the product is the one
    OpenBLAS's own threads compute, bit for bit, for shapes its threads cut in rows,
    columns or both."""
    _needs_pool_callback()
    parallel.set_threads(threads)
    rng = np.random.default_rng(5)
    for m, k, n in [(512, 256, 512), (64, 300, 1500), (1100, 200, 90), (37, 2000, 900)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        server, pooled = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        assert blas_blocks._threaded(a, b, server, threads, server=True)
        before, cpu = blas_pool.counts["pool"], parallel._get_pool(threads).cpu()
        assert blas_blocks._threaded(a, b, pooled, threads)
        assert blas_pool.counts["pool"] == before + 1, (m, k, n)
        assert pooled.tobytes() == server.tobytes(), (m, k, n)
        np.testing.assert_allclose(pooled, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert parallel._get_pool(threads).cpu() > cpu
    assert blas_pool._owner["tid"] is None  # the callback is gone after the call


def test_a_product_whose_openblas_never_calls_back_stops_offering_the_pool_split(
        monkeypatch, two_threads):
    """The callback is installed in every loaded OpenBLAS that has the setter (scipy
    1.17's own has none, numpy 2.4's has); whether the one numpy's matmul calls is among
    them, the first call tells: a product whose call never reached the callback (here:
    none installed) ran on OpenBLAS's own threads -- the same bits -- and its site stops
    offering the way."""
    _needs_pool_callback()
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    monkeypatch.setattr(parallel, "blas_callback_setters", lambda: [])
    monkeypatch.setattr(blas_pool, "available", lambda: True)
    _force(monkeypatch, SHARED)
    parallel.set_threads(2)
    blas_blocks._sites.clear()
    exe = xladist.compile(_dot_module(512, 256, 384), backend="cpu")
    rng = np.random.default_rng(9)
    a = rng.standard_normal((512, 256)).astype(np.float32)
    b = rng.standard_normal((256, 384)).astype(np.float32)
    got = np.array(exe(a, b)[0])
    site = blas_blocks._sites[("gemm", "f", 512, 384, 256, "N", "N", 2, True)]
    assert SHARED not in site.ways and WHOLE in site.ways
    parallel.set_threads(1)
    assert got.tobytes() == np.array(exe(a, b)[0]).tobytes()


def _window_product(threads: int, pool: int, *pairs):
    """The products of `pairs` in one on_pool window of a `pool`-thread pool with
    OpenBLAS on `threads`: (outputs, complete())."""
    outs = []
    with parallel.exclusive_blas(threads) as alone:
        assert alone
        with blas_pool.on_pool(pool) as complete:
            for a, b in pairs:
                outs.append(np.matmul(a, b))
    return outs, complete()


def _operands_and_product(seed: int):
    """f32 512x384 and 384x512 operands and their product on OpenBLAS's own 2 threads."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((512, 384)).astype(np.float32)
    b = rng.standard_normal((384, 512)).astype(np.float32)
    want = np.empty((512, 512), np.float32)
    assert blas_blocks._threaded(a, b, want, 2, server=True)
    return a, b, want


def test_the_fallback_begins_no_job_unless_every_job_has_a_thread(monkeypatch, capsys):
    """blas_pool's fallback runs a call's jobs all at once, each on a thread of its own
    (they wait for each other's parts). When a thread cannot start, no job may begin:
    one begun beside a partner never started would spin for ever on OpenBLAS's stack
    after its call returned. Before, the threads already started ran their jobs."""
    barrier = threading.Barrier(4, timeout=10)
    ran = []

    def job(argv, lo, hi):
        barrier.wait()  # every job at once, or this breaks
        ran.append((argv, lo, hi))
    blas_pool._on_threads(job, 7, 4)
    assert sorted(ran) == [(7, i, i + 1) for i in range(4)]

    ran.clear()
    real_start, started = threading.Thread.start, []

    def start(self):
        if len(started) == 2:
            raise RuntimeError("can't start new thread")
        started.append(self)
        real_start(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(blas_pool.NoThreads, match="RuntimeError: can't start new thread"):
        blas_pool._on_threads(lambda argv, lo, hi: ran.append(lo), 0, 4)
    monkeypatch.setattr(threading.Thread, "start", real_start)
    assert ran == [] and len(started) == 2 and not any(t.is_alive() for t in started)
    # Through the callback's fallback, for a thread that is not the window's owner: said
    # on stderr, since the call it was made for cannot be failed.
    monkeypatch.setattr(blas_pool, "_on_threads", lambda fn, argv, n: (_ for _ in ()).throw(
        blas_pool.NoThreads("RuntimeError: can't start new thread")))
    monkeypatch.setattr(blas_pool, "_native", [type("N", (), {"jobs": None})()])
    blas_pool._run(None, 0, 2, 0, 0, 0)
    assert "could not start threads for its jobs (RuntimeError: can't start new thread); " \
        "its result is wrong" in capsys.readouterr().err


def test_calls_the_pool_cannot_give_workers_run_on_threads_of_their_own(two_threads):
    """The native callback runs a call's jobs on the pool only when a waiting worker
    stands for every job but the caller's, once per window (each worker returns with its
    job). A call with more jobs than the pool has workers (OpenBLAS on 4 threads, a pool
    of 2), or a second threaded call in one window, goes to threads of its own -- never
    back to OpenBLAS with its jobs not run. A window with no threaded call (a product
    OpenBLAS runs on one thread) lets its workers go. After each, the next product on
    the pool is right and ends."""
    _needs_pool_callback()
    a, b, want = _operands_and_product(11)
    with parallel.openblas_threads(4):
        want4 = a @ b
    pool = parallel._get_pool(2)

    def right_after():
        assert not pool.busy.locked()
        before = blas_pool.counts["pool"]
        (got,), complete = _window_product(2, 2, (a, b))
        assert complete and blas_pool.counts["pool"] == before + 1
        assert got.tobytes() == want.tobytes()

    fell = blas_pool.counts["fell back"]
    (got,), complete = _window_product(4, 2, (a, b))
    assert complete and got.tobytes() == want4.tobytes()
    assert blas_pool.counts["fell back"] == fell + 1
    right_after()
    (first, second), complete = _window_product(2, 2, (a, b), (a, b))
    assert complete and first.tobytes() == want.tobytes() == second.tobytes()
    assert blas_pool.counts["fell back"] == fell + 2
    right_after()
    before = blas_pool.counts["pool"]
    (small,), complete = _window_product(2, 2, (a[:8, :8], b[:8, :8]))
    assert complete and blas_pool.counts["pool"] == before
    np.testing.assert_allclose(small, a[:8, :8] @ b[:8, :8], rtol=1e-5, atol=1e-5)
    right_after()


def test_a_product_that_finds_the_pool_busy_runs_on_openblas_threads_and_keeps_the_way(
        two_threads):
    """An execution without a BLAS call is not kept out by exclusive_blas, and its split
    kernels hold the pool for a moment: a product that finds the pool busy runs on
    OpenBLAS's own threads (the same bits), once, and its site still offers the way."""
    _needs_pool_callback()
    a, b, want = _operands_and_product(13)
    pool = parallel._get_pool(2)
    assert pool.busy.acquire(blocking=False)
    try:
        busy, pooled = blas_pool.counts["busy"], blas_pool.counts["pool"]
        got = np.empty_like(want)
        assert blas_blocks._threaded(a, b, got, 2)
        assert got.tobytes() == want.tobytes()
        assert blas_pool.counts["busy"] == busy + 1 and blas_pool.counts["pool"] == pooled
    finally:
        pool.busy.release()
    again = np.empty_like(want)
    assert blas_blocks._threaded(a, b, again, 2)
    assert blas_pool.counts["pool"] == pooled + 1
    assert again.tobytes() == want.tobytes()


def test_a_window_an_exception_kept_from_closing_harms_no_later_product(two_threads):
    """A signal's exception at the very start of on_pool's exit (before any of it ran)
    would leave the window open, its worker waiting, the callback installed and the pool
    taken. Later products are still right and nothing hangs: the owner thread's own
    threaded call (no product of ours in flight) runs its jobs; products meanwhile run
    on OpenBLAS's own threads (the pool is taken); once the pool is free again the next
    window closes the stale one first, and the stale worker clears nothing of the new
    window's."""
    _needs_pool_callback()
    a, b, want = _operands_and_product(15)
    pool = parallel._get_pool(2)
    try:
        with parallel.exclusive_blas(2) as alone:
            assert alone
            stale = blas_pool.on_pool(2)
            stale.__enter__()  # ... and no __exit__
            user = np.matmul(a, b)  # the owner thread's own call, the window left open
        assert user.tobytes() == want.tobytes()
        got = np.empty_like(want)
        assert blas_blocks._threaded(a, b, got, 2)  # the pool is taken: OpenBLAS's threads
        assert got.tobytes() == want.tobytes()
    finally:
        pool.busy.release()  # what the skipped exit would have done last
    for _ in range(3):
        before = blas_pool.counts["pool"]
        again = np.empty_like(want)
        assert blas_blocks._threaded(a, b, again, 2)
        assert blas_pool.counts["pool"] == before + 1
        assert again.tobytes() == want.tobytes()
    assert not pool.busy.locked()


@pytest.mark.parametrize("numjobs", [0, 1, 2, 3])
def test_the_callback_runs_every_job_once_with_its_own_data(numjobs, two_threads):
    """OpenBLAS's callback called directly inside a window (2 threads: one worker): no job,
    one job (run on the caller), two (one on the worker), three (more than the workers:
    the fallback's threads) -- each job index once, with the address of its own element
    of the job data and the extra argument."""
    _needs_pool_callback()
    import ctypes
    seen, lock = [], threading.Lock()
    data = (ctypes.c_char * (64 * 4))()

    @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
    def dojob(i, job, extra):
        with lock:
            seen.append((i, job - ctypes.addressof(data), extra))

    callback = blas_pool._CALLBACK(blas_pool._compiled().callback)
    with parallel.exclusive_blas(2) as alone:
        assert alone
        with blas_pool.on_pool(2) as complete:
            callback(0, ctypes.cast(dojob, ctypes.c_void_p), numjobs, 64, data, 7)
    assert complete()
    assert sorted(seen) == [(i, 64 * i, 7) for i in range(numjobs)]


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_many_windows_in_a_row_keep_their_bits(threads, two_threads):
    """Windows opened and closed back to back, on pools as large as the cores and larger
    (4 threads on the 2-core host: workers descheduled mid-window), with shapes OpenBLAS
    cuts into 1 to `threads` jobs: every product has OpenBLAS's own threads' bits, and
    none hangs (a worker of one window acting in the next would run a job twice or
    against freed data)."""
    _needs_pool_callback()
    parallel.set_threads(threads)
    rng = np.random.default_rng(12)
    cases = []
    for m, k, n in [(256, 128, 256), (64, 300, 700), (16, 16, 16), (300, 64, 64)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        want = np.empty((m, n), np.float32)
        assert blas_blocks._threaded(a, b, want, threads, server=True)
        cases.append((a, b, want))
    for i in range(60):
        a, b, want = cases[i % len(cases)]
        got = np.empty_like(want)
        assert blas_blocks._threaded(a, b, got, threads)
        assert got.tobytes() == want.tobytes(), (i, a.shape, b.shape)
    assert not parallel._get_pool(threads).busy.locked()


def test_another_threads_openblas_call_inside_the_window_runs_on_threads_of_its_own(
        two_threads):
    """While one execution's product runs its jobs on the pool, the callback is
    installed for the whole process: a threaded OpenBLAS call another thread makes then
    (a user's own numpy) gets its jobs run all at once on threads started for it --
    the right product, and no hang."""
    _needs_pool_callback()
    rng = np.random.default_rng(6)
    a = rng.standard_normal((400, 300)).astype(np.float32)
    b = rng.standard_normal((300, 500)).astype(np.float32)
    with parallel.openblas_threads(2):
        want = a @ b
    got = {}
    before = blas_pool.counts["threads"]
    with parallel.exclusive_blas(2) as alone:
        assert alone
        with blas_pool.on_pool(2) as complete:
            user = threading.Thread(target=lambda: got.update(v=a @ b))
            user.start()
            user.join(60)
            assert not user.is_alive()
        assert complete()
    assert blas_pool.counts["threads"] == before + 1
    assert got["v"].tobytes() == want.tobytes()


def test_ctrl_c_inside_a_product_on_the_pool_is_raised_after_its_jobs_end(two_threads,
                                                                         monkeypatch):
    """SIGINT while OpenBLAS's jobs run on the pool: the jobs' data lives on OpenBLAS's
    caller's stack, so the KeyboardInterrupt reaches the caller once the product has
    ended whole -- never swallowed, never a crash from jobs still running after their
    caller returned. The signal is sent once the callback has published the jobs (the
    slot's call count moved while the window is open)."""
    _needs_pool_callback()
    import signal
    # The watcher thread only reads the slot: it never calls OpenBLAS.
    monkeypatch.setattr(blas_pool, "_others_may_call_blas", lambda: False)
    slot = blas_pool._compiled().slot
    rng = np.random.default_rng(7)
    a = rng.standard_normal((1024, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 1024)).astype(np.float32)
    out = np.empty((1024, 1024), np.float32)
    want = np.empty_like(out)
    assert blas_blocks._threaded(a, b, want, 2)
    main = threading.get_ident()
    inside = 0
    for _ in range(3):
        out[...] = 0
        sent = threading.Event()
        landed = []

        def watch():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # a test's probe: 0.2 ms naps
                if slot[blas_pool.OPEN] and slot[blas_pool.CALLS]:
                    signal.pthread_kill(main, signal.SIGINT)
                    landed.append(bool(slot[blas_pool.OPEN]))
                    break
                time.sleep(0.0002)
            sent.set()
        watcher = threading.Thread(target=watch, daemon=True)
        with pytest.raises(KeyboardInterrupt):
            watcher.start()
            blas_blocks._threaded(a, b, out, 2)
            sent.wait(30)  # the signal came after the product: raised here
        watcher.join(30)
        assert landed, "the watcher never saw the callback"
        inside += landed[0]
        assert out.tobytes() == want.tobytes()
    assert blas_blocks._threaded(a, b, out, 2)
    assert out.tobytes() == want.tobytes()
    if inside == 0:
        pytest.skip("no signal arrived while the product's window was open")


def _lands_before_the_callback_is_installed(frame, event, arg) -> bool:
    return event == "return" and frame.f_code is parallel.blas_callback_setters.__code__ \
        and frame.f_back.f_code is blas_pool.on_pool.__enter__.__code__


def _lands_as_the_window_closes(frame, event, arg) -> bool:
    return event == "return" and frame.f_code is blas_pool.on_pool.__exit__.__code__


def _lands_after_a_worker_was_handed_its_part(frame, event, arg) -> bool:
    return event == "c_return" and isinstance(getattr(arg, "__self__", None),
                                              queue.SimpleQueue)


class _TimedOut(BaseException):
    """What a test-suite timeout's SIGALRM handler raises (pytest-timeout's Failed is a
    BaseException too)."""


@pytest.mark.parametrize("how", ["SIGINT", "SIGALRM raising"])
@pytest.mark.parametrize("lands", [_lands_after_a_worker_was_handed_its_part,
                                   _lands_before_the_callback_is_installed,
                                   _lands_as_the_window_closes],
                         ids=["after a worker was handed its part",
                              "before the callback is installed", "as the window closes"])
def test_ctrl_c_at_any_point_of_a_product_on_the_pool_leaves_it_whole_or_not_begun(
        lands, how, two_threads):
    """A signal whose Python handler raises (Ctrl-C; a test suite's timeout on SIGALRM),
    handled anywhere around a product on the pool: raised to the caller, the product
    either whole or not begun -- never a partial one reported as fine -- and the pool
    usable after (a worker handed its part before the exception is let go, not left
    waiting for jobs that never come; the next product is right and ends). Inside the
    callback no Python runs for the owner, so none is handled there (the test above).
    (The profile hook only places the real signal where one lands by chance.)"""
    _needs_pool_callback()
    import signal
    signum, raised = signal.SIGINT, KeyboardInterrupt
    if how == "SIGALRM raising":
        def timed_out(got, frame):
            raise _TimedOut()
        previous = signal.signal(signal.SIGALRM, timed_out)
        signum, raised = signal.SIGALRM, _TimedOut
    rng = np.random.default_rng(9)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    want = np.empty((512, 512), np.float32)
    assert blas_blocks._threaded(a, b, want, 2)
    out = np.zeros_like(want)
    main = threading.get_ident()
    sent = []

    def hook(frame, event, arg):
        if not sent and lands(frame, event, arg):
            sent.append(True)
            signal.pthread_kill(main, signum)

    sys.setprofile(hook)
    try:
        with pytest.raises(raised):
            blas_blocks._threaded(a, b, out, 2)
    finally:
        sys.setprofile(None)
        if signum == signal.SIGALRM:
            signal.signal(signal.SIGALRM, previous)
    assert sent
    assert not out.any() or out.tobytes() == want.tobytes()
    assert not parallel._get_pool(2).busy.locked()
    again = np.empty_like(want)
    before = blas_pool.counts["pool"]
    assert blas_blocks._threaded(a, b, again, 2)
    assert blas_pool.counts["pool"] == before + 1
    assert again.tobytes() == want.tobytes()


def test_a_forked_child_runs_products_on_a_pool_of_its_own(two_threads):
    """After fork the child has none of the parent's threads: the pool's workers are
    gone. OpenBLAS's jobs on the pool need every worker at once -- in a child that kept
    the parent's pool they waited forever -- and split kernels ran every block on the
    caller. The child starts its own pool: its product on the pool is right and ends."""
    _needs_pool_callback()
    rng = np.random.default_rng(8)
    a = rng.standard_normal((512, 512)).astype(np.float32)
    b = rng.standard_normal((512, 512)).astype(np.float32)
    want = np.empty((512, 512), np.float32)
    assert blas_blocks._threaded(a, b, want, 2)  # the parent's pool exists
    parent_pool = parallel._get_pool(2)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when the product ran on a pool of its own
        code = 1
        try:
            out = np.empty_like(want)
            before = blas_pool.counts["pool"]
            ok = blas_blocks._threaded(a, b, out, 2)
            code = 0 if ok and out.tobytes() == want.tobytes() and \
                blas_pool.counts["pool"] == before + 1 and \
                parallel._get_pool(2) is not parent_pool else 2
        finally:
            os._exit(code)
    status = _wait_child(pid, "the forked child's product on the pool never ended")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def _wait_child(pid: int, hung: str, seconds: float = 60) -> int:
    """A forked child's wait status; killed, and the test failed with `hung`, when it
    has not ended within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(hung)


def test_report_names_each_site_and_its_choice(two_threads, monkeypatch):
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    monkeypatch.setattr(parallel, "regime", lambda: IDLE)
    parallel.set_threads(2)
    exe = xladist.compile(_dot_module(520, 300, 300), backend="cpu")
    a = np.ones((520, 300), np.float32)
    b = np.ones((300, 300), np.float32)
    for _ in range(len(choice.NAMES) * WARM):  # every way warm
        exe(a, b)
    rows = dict(choice.report())
    mine = rows["dot 520x300x300 float32"][choice.REGIMES[IDLE]]
    assert mine["chosen"] in choice.NAMES.values()
    assert {"pool", "caller alone"} <= set(mine)


def test_executions_in_two_threads_keep_their_bits(monkeypatch, two_threads):
    """One thread runs a product on OpenBLAS's threads over and over while another runs
    a product whose blocks change bits on two OpenBLAS threads (f64 520x300x300): the
    second never sees the first's setting (parallel.exclusive_blas, blas_scope), and the
    caller's own setting is back once both are done."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    _force(monkeypatch, WHOLE)
    parallel.set_threads(2)
    whole = xladist.compile(_dot_module(256, 256, 256), backend="cpu")
    blocks = xladist.compile(_dot_module(520, 300, 300, "f64"), backend="cpu")
    rng = np.random.default_rng(4)
    a32, b32 = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    a64, b64 = rng.standard_normal((520, 300)), rng.standard_normal((300, 300))
    want = np.array(blocks(a64, b64)[0])
    before = [b["threads"] for b in parallel.blas_info()]
    stop, errors, runs = threading.Event(), [], [0]

    def hammer():
        try:
            while not stop.is_set():
                whole(a32, b32)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=hammer, daemon=True)
    t.start()
    try:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            got = np.array(blocks(a64, b64)[0])
            runs[0] += 1
            assert got.tobytes() == want.tobytes(), f"run {runs[0]}: bits changed"
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors
    assert [b["threads"] for b in parallel.blas_info()] == before


def test_openblas_threads_are_offered_only_where_their_workers_sleep_or_are_awake(monkeypatch):
    """Spinning ~0.1 s after each call (OpenBLAS's default), OpenBLAS's workers woken by us
    slow the ways measured after them and burn CPU the wall time does not show: the WHOLE
    way is offered in every regime only with OPENBLAS_THREAD_TIMEOUT at most
    WHOLE_MAX_TIMEOUT (ranks get 4); otherwise only where this process's other pools are
    awake already (OWN_POOLS), and the bits check waits until it is first picked.
    OpenBLAS's split on the pool (SHARED) is never offered under other processes' load
    (BUSY here): its jobs wait for each other spinning, on partners a neighbour holds
    off their cores."""
    for value, sleep in (("4", True), ("8", True), ("28", False), ("", False), ("x", False)):
        monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", value)
        assert blas_blocks._workers_sleep() is sleep, value
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT")
    assert not blas_blocks._workers_sleep()
    assert blas_blocks._PRODUCT_REGIMES == blas_blocks.product_regimes(False)
    parallel.set_threads(2)
    try:
        a = np.ones((512, 512), np.float32)
        out = np.empty((512, 512), np.float32)
        for sleep, regimes in ((False, {OWN_POOLS}), (True, {IDLE, OWN_POOLS, BUSY})):
            monkeypatch.setattr(blas_blocks, "_PRODUCT_REGIMES",
                                blas_blocks.product_regimes(sleep))
            blas_blocks._sites.clear()
            blas_blocks._agree.clear()
            with parallel.blas_scope():
                blas_blocks.matmul_into(a, a.copy(), out)
            (site,) = blas_blocks._sites.values()
            assert {r for r in (IDLE, OWN_POOLS, BUSY) if WHOLE in site.offered(r)} == regimes
            if SHARED in site.ways:  # where blas_pool is available
                assert {r for r in (IDLE, OWN_POOLS, BUSY) if SHARED in site.offered(r)} == \
                    {IDLE, OWN_POOLS}
            assert not blas_blocks._agree  # not checked before WHOLE is picked
    finally:
        parallel.set_threads(None)


def test_a_way_offered_in_some_regimes_is_neither_picked_nor_judged_in_others():
    site = Site((POOL, ALONE, WHOLE), only={WHOLE: (OWN_POOLS,)})
    assert WHOLE not in feed(site, IDLE, {POOL: 2.0, ALONE: 3.0, WHOLE: 1.0}, 200)
    assert site.best(IDLE) == POOL
    picked = feed(site, OWN_POOLS, {POOL: 2.0, ALONE: 3.0, WHOLE: 1.0}, 200)
    assert site.best(OWN_POOLS) == WHOLE and picked.count(WHOLE) > 150
    site.drop(WHOLE)
    assert site.best(OWN_POOLS) == POOL


def test_the_products_sites_stay_bounded_and_keep_the_recent_ones(monkeypatch):
    """A program with ever new shapes does not grow the measured sites without bound: the
    least recently used goes first, a shape in use keeps its measurements."""
    monkeypatch.setattr(blas_blocks, "MAX_SITES", 4)
    blas_blocks._sites.clear()
    first = blas_blocks._site(("gemm", 0), (POOL, ALONE), lambda: "dot 0")
    for i in range(1, 10):
        blas_blocks._site(("gemm", i), (POOL, ALONE), lambda: f"dot {i}")
        assert blas_blocks._site(("gemm", 0), (POOL, ALONE), lambda: "dot 0") is first  # in use
    assert len(blas_blocks._sites) == 4
    assert list(blas_blocks._sites) == [("gemm", 7), ("gemm", 8), ("gemm", 9), ("gemm", 0)]
    blas_blocks._sites.clear()


def test_a_kernel_that_cannot_be_built_is_not_offered(monkeypatch, two_threads):
    """The probe of OpenBLAS's cut builds the LLVM GEMM: where that fails (no LLVM target
    for this CPU, a broken kernel cache), the product keeps its other ways and bits."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")

    def broken(*_a, **_k):
        raise RuntimeError("no kernel here")
    monkeypatch.setattr(gemm_kernel, "kernel", broken)
    monkeypatch.setattr(blas_blocks, "_cuts", {})
    m, k, n = 300, 700, 280
    a, b, want = _product_and_blocks(m, k, n, seed=6)
    out = _forced_product(monkeypatch, KERNEL, a, b)
    for thread in list(gemm_kernel._build_threads):  # (the way is asked once it is built)
        thread.join(60)
    out = _forced_product(monkeypatch, KERNEL, a, b)
    assert blas_blocks._cuts == {np.dtype(np.float32): None}
    assert KERNEL not in _gemm_site(a, b, 2).ways
    assert out.tobytes() == want.tobytes()


def test_no_memory_for_the_llvm_gemm_check_drops_the_way(monkeypatch, two_threads):
    """Where the bits check's random operands cannot be made (MemoryError), the LLVM GEMM
    is dropped as OpenBLAS's threads are: it was left offered and unmeasured, so the
    site picked it to warm it on every call, tried the allocation again each time, and
    never chose among its ways."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    if blas_blocks._openblas_cut(np.dtype(np.float32)) is None:
        pytest.skip("no cut of K found that gives this OpenBLAS's bits")
    m, k, n = 264, 500, 256
    a, b, want = _product_and_blocks(m, k, n, seed=8)
    tried = []
    monkeypatch.setattr(blas_blocks, "_check_arrays", lambda *x: tried.append(1))
    monkeypatch.setattr(blas_blocks, "_agree", {})
    monkeypatch.setattr(blas_blocks, "_sites", {})
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    parallel.set_threads(1)
    for _ in range(4 * WARM + 2):
        out = np.empty((m, n), np.float32)
        with parallel.blas_scope():
            blas_blocks.matmul_into(a, b, out)
        assert out.tobytes() == want.tobytes()
    site = _gemm_site(a, b, 1)
    assert len(tried) == 1
    assert KERNEL not in site.ways
    assert any(site.best(r) is not None for r in choice.REGIMES)


def test_a_probe_that_finds_no_cut_keeps_one_pair_of_packing_buffers(monkeypatch):
    """Where no candidate cut gives numpy's bits (a BLAS other than OpenBLAS, another
    OpenBLAS version) the probe tries them all: the packing buffers of every candidate's
    block size were kept on the probing thread for good (122 pairs, 771 MiB of f32
    address space, ~36 MiB of it touched); one pair, grown to the largest, is kept."""
    if not gemm_kernel.available():
        pytest.skip("no LLVM GEMM on this host")
    monkeypatch.setattr(blas_blocks, "_cuts", {})
    monkeypatch.setattr(blas_blocks, "_same_bits", lambda x, y: False)
    held = []

    def probe():
        assert blas_blocks._openblas_cut(np.dtype(np.float32)) is None
        arrays, todo = {}, list(getattr(gemm_kernel._buffers, "d", {}).values())
        while todo:  # every array the thread's buffer table holds
            x = todo.pop()
            if isinstance(x, tuple):
                todo += x
            elif isinstance(x, np.ndarray):
                arrays[id(x)] = x.nbytes
        held.append(sum(arrays.values()))
    worker = threading.Thread(target=probe)
    worker.start()
    worker.join()
    most = max(blas_blocks._CUT_Q)
    one_pair = (gemm_kernel.DEFAULT.mc + gemm_kernel.DEFAULT.nc + 64) * most * 4
    assert held and held[0] <= one_pair, (held, one_pair)


def test_explain_says_where_the_llvm_gemm_is_offered(tmp_path, capsys):
    """`xladist explain` names the cut of K per dtype (or that the way is not offered),
    from the same probe the products use."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    from xladist.cli import main
    hlo = tmp_path / "mm.hlo"
    hlo.write_text(_dot_module(300, 300, 300).to_text())
    assert main(["explain", str(hlo), "--no-buffers"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("LLVM GEMM:"))
    cut = blas_blocks._openblas_cut(np.dtype(np.float32))
    if cut is None:
        assert "not offered" in line
    else:
        assert f"float32 (K cut {cut.kc}, unroll {cut.kround})" in line


def test_a_byte_strided_operand_is_not_given_to_the_llvm_gemm(monkeypatch, two_threads):
    """The kernel reads strides in whole elements: rows 4 * k + 2 bytes apart (a view
    into bytes, which numpy multiplies by copying it) keep the product on OpenBLAS."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    m, k, n = 260, 300, 280
    a, b, want = _product_and_blocks(m, k, n, seed=7)
    raw = np.zeros(m * (4 * k + 2) + 4, np.uint8)
    odd = np.ndarray((m, k), np.float32, raw, 2, (4 * k + 2, 4))
    odd[...] = a
    assert blas_blocks._order(odd) == "N" and odd.strides[0] % 4
    with pytest.raises(ValueError, match="whole elements"):
        gemm_kernel.product_blocks(odd, b, np.empty((m, n), np.float32), 0)
    before = choice.calls_by_way().get("LLVM GEMM", 0)
    out = _forced_product(monkeypatch, KERNEL, odd, b)
    assert choice.calls_by_way().get("LLVM GEMM", 0) == before
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_the_llvm_gemm_is_offered_from_the_kernel_after_th_product(monkeypatch, two_threads):
    """Before a process's KERNEL_AFTER-th product nothing is built or probed for the way
    (a process with a few products does not pay ~0.9 s to build a kernel into a cold
    cache). From it on the kernel is built on a thread of its own while the products go
    on without the way -- none waits for the compile (it stalled the step that asked,
    and in a job every rank at the next collective) -- and once it is built a site made
    before takes the way on; a dropped way stays dropped."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    monkeypatch.setattr(blas_blocks, "KERNEL_AFTER", 3)
    monkeypatch.setattr(blas_blocks, "_kernel_asked", [0])
    monkeypatch.setattr(blas_blocks, "_cuts", {})
    monkeypatch.setattr(blas_blocks, "_sites", {})
    for name, fresh in (("_loaded", {}), ("_asked", {}), ("_builds", {}),
                        ("_build_threads", [])):
        monkeypatch.setattr(gemm_kernel, name, fresh)
    built, gate = [], threading.Event()
    real = gemm_kernel._compiled
    import llvmlite.binding.ffi as llvm_ffi

    def compiled(*x):
        if threading.current_thread().name.startswith("xladist gemm build"):
            # The build takes as long as the test wants, inside LLVM: llvmlite's one lock
            # held, as by a compile's emit (~0.8 s). A product that made any llvmlite call
            # meanwhile (the target's features, 0.25 ms) waited for it all.
            with llvm_ffi.lib._lock:
                gate.wait(20)
            built.append(1)
        return real(*x)
    monkeypatch.setattr(gemm_kernel, "_compiled", compiled)
    a, b, want = _product_and_blocks(300, 400, 290, seed=9)
    for _ in range(3):
        assert _forced_product(monkeypatch, KERNEL, a, b).tobytes() == want.tobytes()
    site = _gemm_site(a, b, 2)
    assert KERNEL not in site.ways and blas_blocks._cuts == {} and not gemm_kernel._builds
    before = choice.calls_by_way().get("LLVM GEMM", 0)
    # the product that asks first starts the build and goes on without it, and so do the
    # next ones (asked again: one build)
    for _ in range(3):
        t0 = time.monotonic()
        assert _forced_product(monkeypatch, KERNEL, a, b).tobytes() == want.tobytes()
        assert time.monotonic() - t0 < 10, "a product waited for the kernel's build"
        assert len(gemm_kernel._build_threads) == 1 and not built
    assert KERNEL not in site.ways and choice.calls_by_way().get("LLVM GEMM", 0) == before
    gate.set()
    gemm_kernel._build_threads[0].join(60)
    assert built and gemm_kernel.built(np.float32) is True
    assert _forced_product(monkeypatch, KERNEL, a, b).tobytes() == want.tobytes()
    if blas_blocks._cuts[np.dtype(np.float32)] is None:
        pytest.skip("no cut of K found that gives this OpenBLAS's bits")
    assert KERNEL in site.ways
    assert choice.calls_by_way().get("LLVM GEMM", 0) == before + 1
    site.drop(KERNEL)
    _forced_product(monkeypatch, KERNEL, a, b)
    assert KERNEL not in site.ways


_ENDS_WHILE_BUILDING = """
import numpy as np
from xladist.compiler import blas_blocks, gemm_kernel, parallel
parallel.set_threads(2)
a = np.random.default_rng(0).standard_normal((600, 600)).astype(np.float32)
out = np.empty_like(a)
with parallel.blas_scope():
    for _ in range(blas_blocks.KERNEL_AFTER + 1):
        blas_blocks.matmul_into(a, a.T.copy(), out)
print("building", gemm_kernel.built() is False, flush=True)
"""


_PRODUCT_AT_EXIT = """
import atexit
import numpy as np
from xladist.compiler import blas_blocks, gemm_kernel, parallel

def last_step():
    blas_blocks.KERNEL_AFTER = 0
    parallel.set_threads(2)
    a = np.random.default_rng(0).standard_normal((600, 600)).astype(np.float32)
    out = np.empty_like(a)
    with parallel.blas_scope():
        blas_blocks.matmul_into(a, a.T.copy(), out)
    print("product", np.allclose(out, a @ a.T, atol=1e-3), gemm_kernel.built(), flush=True)
atexit.register(last_step)
"""


def test_a_product_at_exit_builds_the_llvm_gemm_on_the_caller(tmp_path):
    """A product in an atexit handler (a last checkpoint's) that asks for the kernel first:
    the main thread has ended, nobody joins a build thread started then, and LLVM's
    teardown met it mid-compile -- the process aborted ("An asserting value handle still
    pointed to this value!", exit 134) after a run that succeeded. At exit the kernel is
    built on the caller."""
    assert _clean_run(_PRODUCT_AT_EXIT, tmp_path) == ["product", "True", "True"]


def test_a_process_that_ends_while_the_llvm_gemm_is_built_exits_cleanly(tmp_path):
    """The kernel is built on a thread of its own; a process that ends meanwhile (into a
    cold kernel cache the build takes ~0.9 s) waits for it at exit instead of tearing
    LLVM down under it: exit status 0, nothing on stderr."""
    assert _clean_run(_ENDS_WHILE_BUILDING, tmp_path) == ["building", "True"]


def _clean_run(script: str, cache) -> list[str]:
    """The words `script` printed, run in a process of its own into the empty kernel
    cache `cache`, which must exit with status 0 and nothing on stderr."""
    if not gemm_kernel.available() or not parallel.blas_info():
        pytest.skip("no LLVM GEMM or OpenBLAS here")
    env = dict(os.environ, XLADIST_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    return done.stdout.split()


def test_the_llvm_gemm_is_not_timed_on_the_caller_while_another_call_holds_the_pool(
        monkeypatch, two_threads):
    """While another thread's call holds the pool, the LLVM GEMM's blocks would run on the
    caller alone and be recorded as the way's time (a sample of half its speed): the
    product runs its fixed blocks instead, unrecorded, and gives their bits."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    if blas_blocks._openblas_cut(np.dtype(np.float32)) is None:
        pytest.skip("no cut of K found that gives this OpenBLAS's bits")
    a, b, want = _product_and_blocks(300, 400, 290, seed=11)
    assert _forced_product(monkeypatch, KERNEL, a, b).tobytes() == want.tobytes()
    site = _gemm_site(a, b, 2)
    assert KERNEL in site.ways
    before = site.calls[KERNEL]
    pool = parallel._get_pool(2)
    assert pool.busy.acquire(timeout=10)  # (as another thread's call does)
    try:
        assert _forced_product(monkeypatch, KERNEL, a, b).tobytes() == want.tobytes()
    finally:
        pool.busy.release()
    assert site.calls[KERNEL] == before
    assert _forced_product(monkeypatch, KERNEL, a, b).tobytes() == want.tobytes()
    assert site.calls[KERNEL] == before + 1


def test_a_failed_build_of_the_llvm_gemm_leaves_the_way_out(monkeypatch, two_threads):
    """A build of the kernel that raises (no memory, an LLVM error) is kept: the way is
    not offered, the build is not started again, and the products keep their bits."""
    monkeypatch.setattr(blas_blocks, "KERNEL_AFTER", 0)
    monkeypatch.setattr(blas_blocks, "_cuts", {})
    monkeypatch.setattr(blas_blocks, "_sites", {})
    for name, fresh in (("_loaded", {}), ("_asked", {}), ("_builds", {}),
                        ("_build_threads", [])):
        monkeypatch.setattr(gemm_kernel, name, fresh)

    def compiled(*x):
        raise MemoryError("no memory for the kernel")
    monkeypatch.setattr(gemm_kernel, "_compiled", compiled)
    if not gemm_kernel.available():
        pytest.skip("no LLVM GEMM for this target")
    a, b, want = _product_and_blocks(300, 400, 290, seed=9)
    assert _forced_product(monkeypatch, KERNEL, a, b).tobytes() == want.tobytes()
    gemm_kernel._build_threads[0].join(60)
    assert gemm_kernel.built(np.float32) is None
    for _ in range(2):
        assert _forced_product(monkeypatch, KERNEL, a, b).tobytes() == want.tobytes()
    assert blas_blocks._cuts == {np.dtype(np.float32): None}
    assert len(gemm_kernel._build_threads) == 1
    assert KERNEL not in _gemm_site(a, b, 2).ways


def test_a_target_without_the_llvm_gemm_is_asked_once(monkeypatch):
    """Where the kernel is not for the target (no FMA: XLADIST_TARGET_CPU=x86-64, an old
    host) that answer is kept like a probe's. Before, it was taken for a build still
    running and asked again by every product after the KERNEL_AFTER-th (~0.25 ms each on
    the host's own target, which formats the host's feature string)."""
    asked = []
    monkeypatch.setattr(gemm_kernel, "available", lambda: asked.append(1) or False)
    monkeypatch.setattr(blas_blocks, "_cuts", {})
    assert blas_blocks._openblas_cut(np.dtype(np.float32), wait=False) is None
    first = len(asked)
    for _ in range(3):
        assert blas_blocks._openblas_cut(np.dtype(np.float32), wait=False) is None
    assert blas_blocks._cuts == {np.dtype(np.float32): None}
    assert len(asked) == first  # (the later products asked nothing)


def test_a_child_forked_while_the_llvm_gemm_is_built_builds_its_own(monkeypatch):
    """The kernel is built on a thread of its own, which a forked child does not have:
    the child kept the parent's "building" for ever (gemm_kernel.built said False at
    every product, and the way was never offered there) and any lock the build held. The
    child starts its own build, which ends."""
    if not gemm_kernel.available():
        pytest.skip("no LLVM GEMM for this target")
    for name, fresh in (("_loaded", {}), ("_asked", {}), ("_builds", {}),
                        ("_build_threads", [])):
        monkeypatch.setattr(gemm_kernel, name, fresh)
    gate, parent, real = threading.Event(), os.getpid(), gemm_kernel._compiled

    def compiled(*x):
        if os.getpid() == parent:
            gate.wait(60)  # the parent's build is still running at the fork
        return real(*x)
    monkeypatch.setattr(gemm_kernel, "_compiled", compiled)
    assert gemm_kernel.built(np.float32) is False
    try:
        pid = os.fork()
        if pid == 0:  # the child: exit 0 once its own build has loaded the kernel
            code = 1
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    if gemm_kernel.built(np.float32):
                        code = 0
                        break
                    time.sleep(0.05)
            finally:
                os._exit(code)
        status = _wait_child(pid, "the forked child never ended")
    finally:
        gate.set()
        gemm_kernel._build_threads[0].join(60)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert gemm_kernel.built(np.float32) is True


def test_no_pool_window_while_another_thread_may_be_inside_openblas(two_threads):
    """OpenBLAS's threads callback installed or removed while another thread's threaded
    call runs loses that call's jobs: it waits for ever (the concurrency probe: three
    threads each calling its own executable and numpy's f64 matmul hung within seconds;
    one thread's matmul beside another toggling the callback, without xladist, too). While
    a thread that may call OpenBLAS is alive (here one parked on an event), the SHARED way
    runs on OpenBLAS's own threads -- the same bits -- and opens no window; once it is
    gone, the window opens again."""
    _needs_pool_callback()
    parallel.set_threads(2)
    rng = np.random.default_rng(11)
    a = rng.standard_normal((512, 256)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    server, pooled = np.empty((512, 512), np.float32), np.empty((512, 512), np.float32)
    assert blas_blocks._threaded(a, b, server, 2, server=True)
    release = threading.Event()
    other = threading.Thread(target=release.wait, args=(30,), name="user-numpy")
    other.start()
    try:
        before = blas_pool.counts["pool"]
        assert blas_blocks._threaded(a, b, pooled, 2)
        assert blas_pool.counts["pool"] == before  # no window: OpenBLAS's own threads
        assert pooled.tobytes() == server.tobytes()
    finally:
        release.set()
        other.join(10)
    assert blas_blocks._threaded(a, b, pooled, 2)
    assert blas_pool.counts["pool"] == before + 1
    np.testing.assert_allclose(pooled, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("way", [WHOLE, KERNEL], ids=lambda w: choice.NAMES[w])
def test_a_call_that_runs_its_way_s_bits_check_is_counted_but_no_sample(way, monkeypatch,
                                                                        two_threads):
    """The first call of OpenBLAS's threads or the LLVM GEMM for a shape also runs the
    check that the way gives the blocks' bits (two or three products more): it is
    counted as a call of the way, but is none of the samples the site chooses by -- one
    of only two warm-up samples, it made the way lose at once. The next call is one."""
    if not parallel.blas_info():
        pytest.skip("no OpenBLAS loaded in this process")
    if way == KERNEL:
        monkeypatch.setattr(blas_blocks, "KERNEL_AFTER", 0)
        if blas_blocks._openblas_cut(np.dtype(np.float32)) is None:
            pytest.skip("no cut of K found that gives this OpenBLAS's bits")
    monkeypatch.setattr(blas_blocks, "_agree", {})  # no check of the shape has run yet
    rng = np.random.default_rng(11)
    m, k, n = 512, 512, 512  # a shape whose OpenBLAS threads give the blocks' bits
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = _blocks_of(a, b)

    def site_of_shape():
        return [d for name, d in choice.report() if name == f"dot {m}x{k}x{n} float32"]

    def samples():
        return sum(ways[choice.NAMES[way]][1] for d in site_of_shape() for ways in d.values()
                   if choice.NAMES[way] in ways)

    counts = []
    for _ in range(2):
        calls, sampled = choice.calls_by_way().get(choice.NAMES[way], 0), samples()
        out = _forced_product(monkeypatch, way, a, b)
        assert out.tobytes() == want.tobytes()
        counts += [choice.calls_by_way().get(choice.NAMES[way], 0) - calls, samples() - sampled]
    assert counts == [1, 0, 1, 1], counts  # (calls, samples) of each of the two calls
