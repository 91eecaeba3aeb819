"""Running a computation's thunks: in order, except while a split call waits for a
late helper.

A split call (parallel.run_blocks) on the pool ends when its last block ends. On a busy
machine the helper holding that block is often descheduled in the middle of it -- its
core's other process runs out its time slice -- and the caller, its own blocks done,
slept until then: ~3 ms per step of benchmarks/compute.py's MLP step under background
load, a quarter of its CPU time, with the process one runnable thread short meanwhile
(issue 31). So a kernel's or a dot's split call may return with its last blocks still
running (parallel.Join, only where those blocks write the thunk's final results), and
the executor goes on with a thunk that touches none of the pending calls' buffers:
the next one in order if it can, else one of the next WINDOW that touches neither the
pending calls' buffers nor those of the thunks it overtakes. A pending call is joined
before the first thunk that reads or writes what it writes or reads, before any thunk
whose buffers are not known here (control flow, collectives, custom calls, dynamic
buffers: a "barrier"), and before the computation returns or raises.

Every thunk computes what it computed in order -- it moves only past thunks it shares
no buffer byte with (arena regions overlap-checked, since dead regions are reused) --
so results are the same bits; only time moves. Without a late helper nothing is left
pending and the loop is the plain in-order one.
"""

from __future__ import annotations

from time import perf_counter_ns

from .parallel import deferrals

WINDOW = 8  # how far ahead a thunk may be taken while a call is pending
# Calls left pending, thunks run while one was (`beside`; `ahead` of their turn among
# them), and joins that had to wait: what tests and benchmarks read to see it at work.
counts = {"pending": 0, "beside": 0, "ahead": 0, "waited": 0}


class Plan:
    """Per thunk, the buffer regions it reads and writes (None: a barrier), and whether
    its split calls may be left pending; clashes are computed when first asked."""

    __slots__ = ("regions", "deferrable", "_clash")

    def __init__(self, thunks):
        # Thunk.ordered: its reads and writes lists are every buffer it touches.
        self.regions = [_regions(t) if t.ordered else None for t in thunks]
        # Thunk.defers: its split calls write its final results (a kernel; a dot, whose
        # dot_into says so per call); others never ask to (run_blocks's `defer`).
        self.deferrable = [r is not None and t.defers for t, r in zip(thunks, self.regions)]
        self._clash: dict = {}

    def clash(self, a: int, b: int) -> bool:
        """Whether thunks a and b may not change order (either writes what the other
        reads or writes); True for a barrier."""
        key = (a, b) if a < b else (b, a)
        got = self._clash.get(key)
        if got is None:
            ra, rb = self.regions[a], self.regions[b]
            got = ra is None or rb is None or _touch(ra[1], rb[0] + rb[1]) or \
                _touch(rb[1], ra[0])
            self._clash[key] = got
        return got


def _regions(thunk):
    """(reads, writes) as lists of regions: ("arena", lo, hi) for a temp in the arena,
    ("buf", id) for a buffer of its own, ("params",) for every parameter at once (a
    donated parameter may be written in place, and two arguments may be one array);
    None when a slot is filled while running (it may alias anything)."""
    out = []
    for slots in (thunk.reads, thunk.writes):
        regs = []
        for s in slots:
            if s.kind == "temp":
                regs.append(("arena", s.offset, s.offset + s.nbytes) if s.offset >= 0
                            else ("buf", s.id))
            elif s.kind == "param":
                regs.append(("params",))
            elif s.kind == "out":
                regs.append(("buf", s.id))
            elif s.kind != "const":  # constants are never written
                return None
        out.append(regs)
    return out[0], out[1]


def _touch(writes, others) -> bool:
    for w in writes:
        for o in others:
            if w[0] != o[0]:
                continue
            if w[0] == "arena":
                if w[1] < o[2] and o[1] < w[2]:
                    return True
            elif w == o:
                return True
    return False


def run(thunks, plan: Plan, frame, tracer, where: list) -> None:
    """Run `thunks` on `frame`; where[0] is the thunk running (or being joined), for the
    caller's error report."""
    outer = deferrals.pending, deferrals.allowed, deferrals.joiner
    pending: list = []
    deferrals.pending = pending

    def join_all() -> None:  # OpenBLAS's threading is about to change (run_blocks)
        running = where[0]
        _join(thunks, pending, where, None)
        where[0] = running
    deferrals.joiner = join_all
    try:
        deferrable = plan.deferrable
        for i, t in enumerate(thunks):
            where[0] = t
            deferrals.allowed = deferrable[i]
            _step(t, frame, tracer)
            if pending:
                deferrals.allowed = False
                counts["pending"] += len(pending)
                for j in pending:
                    j.owner = i
                _rest(thunks, plan, frame, tracer, where, pending, i + 1)
                break
    except BaseException:
        deferrals.allowed = False
        _abandon(pending)
        raise
    finally:
        deferrals.pending, deferrals.allowed, deferrals.joiner = outer


def _step(t, frame, tracer) -> None:
    if tracer is None:
        t.run(frame)
    else:
        t0 = perf_counter_ns()
        t.run(frame)
        tracer.instruction(t.trace_slice, t0, perf_counter_ns())


def _rest(thunks, plan: Plan, frame, tracer, where, pending: list, start: int) -> None:
    """The thunks from `start` on, with calls pending (see the module's docstring)."""
    n = len(thunks)
    done = bytearray(n)
    i = start
    while i < n:
        if done[i]:
            i += 1
            continue
        k = i
        if pending:
            pending[:] = [j for j in pending if not _ended(thunks, j, where)]
        if pending and any(plan.clash(j.owner, i) for j in pending):
            k = _ahead(plan, i, done, pending)
            if k is None:
                _join(thunks, pending, where, i if plan.regions[i] is not None else None, plan)
                k = i
            else:
                counts["ahead"] += 1
        if pending:
            counts["beside"] += 1
        t = where[0] = thunks[k]
        deferrals.allowed = plan.deferrable[k]
        before = len(pending)
        _step(t, frame, tracer)
        deferrals.allowed = False
        counts["pending"] += len(pending) - before
        for j in pending[before:]:
            j.owner = k
        done[k] = 1
    _join(thunks, pending, where, None)


def _ahead(plan: Plan, i: int, done, pending) -> int | None:
    """The first of the next WINDOW thunks after i not yet run that may run now: it
    clashes with no pending call and with none of the thunks it overtakes."""
    for k in range(i + 1, min(len(done), i + 1 + WINDOW)):
        if done[k]:
            continue
        if plan.regions[k] is None:
            return None  # nothing moves past a barrier
        if any(plan.clash(j.owner, k) for j in pending):
            continue
        if any(not done[m] and plan.clash(m, k) for m in range(i, k)):
            continue
        return k
    return None


def _ended(thunks, join, where) -> bool:
    """Finish `join` if its last block has ended (no wait)."""
    if not join.ready():
        return False
    where[0] = thunks[join.owner]
    join.finish()
    return True


def _join(thunks, pending: list, where, before, plan: Plan | None = None) -> None:
    """Finish the pending calls: all of them, or (`before` a thunk index) those that
    clash with that thunk."""
    keep = []
    for j in pending:
        if before is not None and not plan.clash(j.owner, before):
            keep.append(j)
            continue
        where[0] = thunks[j.owner]
        if not j.ready():
            counts["waited"] += 1
        j.finish()
    pending[:] = keep


def _abandon(pending: list) -> None:
    """Something raised: still wait for every pending call's blocks (they write buffers
    the caller may free), raising nothing more."""
    for j in pending:
        try:
            j.finish()
        except BaseException:  # noqa: BLE001 -- the first error is the one raised
            pass
    pending.clear()
