"""Which of several equivalent ways to run one call is fastest now, measured.

A split kernel can run its fixed blocks on the compute pool or on the calling thread
alone; a large matrix product can also be one OpenBLAS call on OpenBLAS's own threads
(blas_blocks.py), that call's jobs on the pool (blas_pool.py), or its blocks computed by
xladist's LLVM GEMM (gemm_kernel.py) cut as OpenBLAS cuts them (KERNEL). The ways give
the same bits -- blocks are fixed by the shape, and OpenBLAS's threading and the LLVM GEMM
are offered for a product only after a check that they reproduce the blocks' bits -- so
choosing among them moves time, never results. No rule fixed in
advance chose well everywhere (issue 31): a small kernel's call on the pool times slower
when every core is taken and it waits for a descheduled helper's block (yet over a step
the pool keeps the process its share there: below), wins by 1.5x for the same kernel at
ten times the size; OpenBLAS's threads are the fastest way right after numpy used
them (they are still awake) and many times the slowest when another process holds a
core. So each call site (a kernel, a product's shape) times the ways where it runs:

  * per regime (parallel.regime: a core idle; no core idle while this process's other
    pools are awake; no core idle under other processes' load), since the best way
    flips with it and a process moves between them within milliseconds;
  * every way WARM times first, then the way with the lowest median of its last
    WINDOW samples (the median: a sample the scheduler stretched does not count).
    Breaking near-ties (within 3%) by the CPU the calls took instead -- the LLVM GEMM
    takes ~5% less than OpenBLAS's kernels -- did not help (stop 51, compute.py
    --company, four runs each way alternated: matmul 1024 quiet 1.05-1.21x min(numpy,
    jax) against 0.99-1.07x without it, the MLP step right after numpy and jax 1.14-1.25x
    against 1.06-1.21x): medians on this host swing by more than the tie;
  * another way again after `gap` calls (MIN_GAP, doubled up to MAX_GAP while it keeps
    losing): conditions change inside a regime (OpenBLAS's threads asleep or spinning,
    neighbours' bursts). An exploration that beats the best's median is repeated at
    once, so its median turns over within WINDOW calls. Exploring costs at most one
    call in MAX_GAP at the slower way's time.

Under other processes' load a site that has the pool does not offer the caller alone
(SHARE_REGIMES): its per-call times cannot show what it costs. A call on one thread that
fits in the caller's time slice runs at full speed, and the slices the neighbour takes in
between fall outside every sample or are the outliers the median drops; over a step the
process then gets one core's share of the machine where the pool gets it one per thread,
as the OS gives any multi-threaded process. Measured, the MLP training step under one busy
process per core (benchmarks/compute.py's, median of 25, two runs): with the caller alone
offered 13.7 and 16.5 ms (it took a quarter of the calls), without 11.6 and 13.6 ms, every
call on the pool 11.4 and 11.8 ms, jax 13.6 and 14.6 ms; the transformer step 88.7, 84.4,
84.9 and jax 120 ms.

A way may be offered in some regimes only (Site's `only`): OpenBLAS's threads, in a process
whose OpenBLAS workers spin after each call, only where this process's other pools are
awake already; OpenBLAS's split on the pool never under other processes' load, where its
jobs spin on partners held off their cores (blas_blocks.product_regimes).

A site never holds anything a result depends on; two ranks, or two runs, may choose
differently and still compute the same bits.
"""

from __future__ import annotations

import weakref

POOL, ALONE, WHOLE, SHARED, KERNEL = 0, 1, 2, 3, 4
NAMES = {POOL: "pool", ALONE: "caller alone", WHOLE: "OpenBLAS threads",
         SHARED: "OpenBLAS split on the pool", KERNEL: "LLVM GEMM"}
# Regimes (parallel.regime): a core idle; none, and this process's other threads busy
# (numpy's or XLA's pools still awake); none, other processes hold the cores.
IDLE, OWN_POOLS, OTHERS = 0, 1, 2
REGIMES = {IDLE: "idle core", OWN_POOLS: "own pools busy", OTHERS: "other processes busy"}

# Where a site with the pool offers the caller alone (not under other processes' load).
SHARE_REGIMES = (IDLE, OWN_POOLS)

WARM = 2
WINDOW = 5
MIN_GAP = 8
MAX_GAP = 64


def _median(samples: list[float]) -> float:
    s = sorted(samples)
    return s[(len(s) - 1) // 2]  # the lower one of an even count: one slow warm-up is out


class Site:
    """The measured choice of one call site among `ways` (POOL, ALONE, WHOLE, SHARED, KERNEL),
    tried in that order while warming up."""

    __slots__ = ("name", "ways", "only", "samples", "gap", "left", "turn", "exploring",
                 "calls", "dropped", "__weakref__")

    def __init__(self, ways, name: str = "", only: dict | None = None):
        """`only`: way -> the regimes it is offered in (others: every regime; ALONE, on a
        site with POOL, SHARE_REGIMES)."""
        self.name = name
        self.ways = list(ways)
        self.only = dict(only or {})
        if POOL in self.ways:
            self.only.setdefault(ALONE, SHARE_REGIMES)
        self.samples = [{w: [] for w in self.ways} for _ in REGIMES]  # per regime
        self.gap = [MIN_GAP] * len(REGIMES)
        self.left = [MIN_GAP] * len(REGIMES)
        self.turn = [0] * len(REGIMES)
        self.exploring = [None] * len(REGIMES)
        self.calls = {w: 0 for w in self.ways}  # measured calls per way, for reports
        self.dropped = set()
        _live.add(self)

    def drop(self, way: int) -> None:
        """Stop offering `way` (its precondition does not hold here)."""
        if way in self.ways and len(self.ways) > 1:
            self.ways.remove(way)
            self.dropped.add(way)

    def offer(self, way: int) -> None:
        """Offer `way` from now on -- a way that became available after the site was
        made -- unless it was dropped; it is timed as a new way is (WARM first)."""
        if way in self.ways or way in self.dropped:
            return
        self.ways.append(way)
        for samples in self.samples:
            samples[way] = []
        self.calls.setdefault(way, 0)

    def offered(self, regime: int) -> list[int]:
        """The ways offered in `regime` (every way, should none be: a dropped way may
        have left only ones restricted to other regimes)."""
        return [w for w in self.ways if regime in self.only.get(w, (regime,))] or self.ways

    def best(self, regime: int) -> int | None:
        """The way with the lowest median in `regime`, None before every way is warm."""
        samples, ways = self.samples[regime], self.offered(regime)
        if any(len(samples[w]) < WARM for w in ways):
            return None
        return min(ways, key=lambda w: _median(samples[w]))

    def pick(self, regime: int) -> int:
        samples, ways = self.samples[regime], self.offered(regime)
        for w in ways:
            if len(samples[w]) < WARM:
                return w
        best = self.best(regime)
        self.left[regime] -= 1
        if self.left[regime] > 0 or len(ways) < 2:
            return best
        others = [w for w in ways if w != best]
        way = others[self.turn[regime] % len(others)]
        self.exploring[regime] = way
        return way

    def record(self, regime: int, way: int, seconds: float | None) -> None:
        """A call of `way` that took `seconds`; None: a call that ran but is no sample of
        the way (it also paid a one-time cost: parallel.UNTIMED)."""
        samples = self.samples[regime]
        if way not in samples:
            return
        self.calls[way] += 1
        if seconds is None:
            return
        mine = samples[way]
        mine.append(seconds)
        if len(mine) > WINDOW:
            del mine[0]
        if self.exploring[regime] != way:
            return
        self.exploring[regime] = None
        others = [_median(samples[w]) for w in self.offered(regime) if w != way and samples[w]]
        if self.best(regime) == way:  # it took over: the old best is looked at soon
            self.gap[regime] = self.left[regime] = MIN_GAP
        elif others and seconds < min(others):
            self.gap[regime] = MIN_GAP  # promising: look again at once (same way)
            self.left[regime] = 1
        else:
            self.gap[regime] = min(2 * self.gap[regime], MAX_GAP)
            self.left[regime] = self.gap[regime]
            self.turn[regime] += 1

    def describe(self) -> dict:
        """Per regime: every way's median (ms) and sample count, and the way chosen."""
        out = {}
        for regime, label in REGIMES.items():
            samples = self.samples[regime]
            if not any(samples.values()):
                continue
            best = self.best(regime)
            out[label] = {"chosen": NAMES[best] if best is not None else "warming up",
                          **{NAMES[w]: (round(_median(s) * 1e3, 3), len(s))
                             for w, s in samples.items() if s}}
        return out


_live: weakref.WeakSet = weakref.WeakSet()


def report() -> list[tuple[str, dict]]:
    """(name, describe()) of every live site that has run, for benchmarks and tests."""
    return [(s.name, d) for s in list(_live) if (d := s.describe())]


def calls_by_way() -> dict[str, int]:
    """Measured calls of every live site, summed per way (benchmarks print what ran)."""
    out: dict[str, int] = {}
    for site in list(_live):
        for w, n in site.calls.items():
            out[NAMES[w]] = out.get(NAMES[w], 0) + n
    return out
