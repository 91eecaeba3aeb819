"""Thunks running while a split call's late block is pending (compiler/overlap.py,
parallel.Join): the results are those of running every thunk in order.

Two judges: a model whose deferred writes land only when the call is joined and whose
deferred reads happen then too (any thunk moved across a buffer it shares, or a join
missed, changes the final bytes), against the same thunks run in order; and real
programs whose helpers are held inside a block, against one thread and the interpreter.
"""

from __future__ import annotations

import threading
import time
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xladist
from xladist.compiler import overlap, parallel
from xladist.compiler.buffers import Slot

# ---- the model ---------------------------------------------------------------------------


class _Memory:
    def __init__(self):
        self.arena = np.zeros(64, np.uint8)
        self.bufs: dict[int, int] = {}  # out/own slots: one byte each
        self.params = 7

    def read(self, slot: Slot) -> bytes:
        if slot.kind == "temp" and slot.offset >= 0:
            return self.arena[slot.offset:slot.offset + slot.nbytes].tobytes()
        if slot.kind == "param":
            return bytes([self.params])
        return bytes([self.bufs.get(slot.id, 0)])

    def write(self, slot: Slot, value: int) -> None:
        if slot.kind == "temp" and slot.offset >= 0:
            self.arena[slot.offset:slot.offset + slot.nbytes] = value
        elif slot.kind == "param":
            self.params = value
        else:
            self.bufs[slot.id] = value


class _Join:
    """A pending call whose reads and writes happen when it is joined."""

    def __init__(self, thunk, mem, ready_after: int):
        self.thunk, self.mem, self.polls, self.owner = thunk, mem, ready_after, None

    def ready(self) -> bool:
        self.polls -= 1
        return self.polls < 0

    def finish(self) -> None:
        if self.thunk is not None:
            self.thunk.effect(self.mem)
            self.thunk = None


class _Thunk:
    instr = None

    def __init__(self, idx, reads, writes, ordered, defers, late):
        self.idx, self.reads, self.writes = idx, reads, writes
        self.ordered, self.defers, self.late = ordered, defers, late
        self.mem = None

    def effect(self, mem) -> None:
        value = zlib.crc32(bytes([self.idx]) + b"".join(mem.read(s) for s in self.reads)) & 0xFF
        for s in self.writes:
            mem.write(s, value)

    def run(self, frame) -> None:
        if self.defers and self.late is not None and parallel.deferrals.allowed:
            parallel.deferrals.pending.append(_Join(self, self.mem, self.late))
        else:
            self.effect(self.mem)


def _slot(kind: str, ident: int, offset: int = -1, nbytes: int = 1) -> Slot:
    return Slot(ident, kind, None, nbytes, offset)


_slots = st.one_of(
    st.builds(lambda o, n: ("temp", o, n), st.integers(0, 56), st.integers(1, 8)),
    st.builds(lambda i: ("out", i), st.integers(0, 3)),
    st.builds(lambda i: ("own", i), st.integers(0, 2)),
    st.just(("param",)),
)
# (reads, writes, a barrier when 0, polls until a deferred call reads as ended or None:
# not deferred)
_thunk = st.tuples(st.lists(_slots, max_size=3), st.lists(_slots, min_size=1, max_size=2),
                   st.integers(0, 9), st.one_of(st.none(), st.integers(0, 3)))


def _build(spec):
    ids = iter(range(100, 10_000))
    thunks = []
    for idx, (reads, writes, barrier_die, late) in enumerate(spec):
        def make(d):
            if d[0] == "temp":
                return _slot("temp", next(ids), d[1], d[2])
            if d[0] == "out":
                return _slot("out", d[1])
            if d[0] == "own":
                return _slot("temp", 50 + d[1])  # a buffer of its own (offset -1)
            return _slot("param", 0)
        thunks.append(_Thunk(idx, [make(d) for d in reads], [make(d) for d in writes],
                             ordered=barrier_die != 0, defers=True, late=late))
    return thunks


def _run(thunks, deferring: bool) -> _Memory:
    mem = _Memory()
    for t in thunks:
        t.mem = mem
        t.late = t.late if deferring else None
    overlap.run(thunks, overlap.Plan(thunks), None, None, [None])
    return mem


@settings(max_examples=400, deadline=None)
@given(st.lists(_thunk, min_size=1, max_size=14))
def test_moved_and_pending_thunks_leave_the_bytes_of_the_order(spec):
    mem = _run(_build(spec), deferring=True)
    ref = _run(_build(spec), deferring=False)
    assert mem.arena.tobytes() == ref.arena.tobytes()
    assert mem.bufs == ref.bufs and mem.params == ref.params
    assert parallel.deferrals.pending is None  # nothing left pending outside a run


def test_an_independent_thunk_runs_while_a_call_is_pending():
    """The order the model's thunks took: the second reads what the pending first writes,
    the third shares nothing and goes ahead; the barrier waits for everything."""
    out = [_slot("out", i) for i in range(4)]
    order = []

    class Logged(_Thunk):
        def effect(self, mem):
            order.append(self.idx)
            super().effect(mem)

    thunks = [Logged(0, [], [out[0]], True, True, 5),
              Logged(1, [out[0]], [out[1]], True, True, None),
              Logged(2, [], [out[2]], True, True, None),
              Logged(3, [], [out[3]], False, True, None)]
    before = dict(overlap.counts)
    _run(thunks, deferring=True)
    assert order == [2, 0, 1, 3]
    assert overlap.counts["ahead"] - before["ahead"] == 1
    assert overlap.counts["pending"] - before["pending"] == 1


def test_a_barrier_is_never_overtaken_and_joins_first():
    out = [_slot("out", i) for i in range(3)]
    order = []

    class Logged(_Thunk):
        def effect(self, mem):
            order.append(self.idx)
            super().effect(mem)

    thunks = [Logged(0, [], [out[0]], True, True, 9),
              Logged(1, [], [out[1]], False, False, None),  # a barrier (control flow, ...)
              Logged(2, [], [out[2]], True, True, None)]
    _run(thunks, deferring=True)
    assert order == [0, 1, 2]


# ---- real programs, helpers held inside a block --------------------------------------------

MLP = """HloModule mlp
ENTRY main {
  x = f32[64,96] parameter(0)
  w1 = f32[96,128] parameter(1)
  w2 = f32[128,32] parameter(2)
  h = f32[64,128] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[64,128] tanh(h)
  y = f32[64,32] dot(t, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g = f32[96,128] dot(x, t), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  e = f32[64,128] exponential(h)
  s = f32[64,128] multiply(e, t)
  gw = f32[96,128] subtract(w1, g)
  ROOT r = (f32[64,32], f32[96,128], f32[64,128]) tuple(y, gw, s)
}
"""


@pytest.fixture
def late_helpers(monkeypatch):
    """Blocks claimed in Python (so a helper can be held), every split call on the pool,
    and every helper held 20 ms inside the first block it claims of each call, as a
    descheduled helper is; the caller starts once the helper has its block: the caller
    finishes its blocks first and the call is left pending."""
    monkeypatch.setattr(parallel, "NATIVE_CLAIM", False)
    monkeypatch.setattr(parallel, "DYNAMIC", False)
    original = parallel._Task.work
    claimed: dict = {}
    lock = threading.Lock()

    def event(task) -> threading.Event:
        with lock:
            return claimed.setdefault(id(task), threading.Event())

    def work(self):
        if threading.current_thread().name != "xladist-compute":
            event(self).wait(2.0)
            with lock:
                claimed.pop(id(self), None)
            return original(self)
        i = next(self.claim)
        event(self).set()
        if i >= len(self.blocks):
            return
        time.sleep(0.02)
        try:
            self.fn(self.argv, *self.blocks[i])
        except BaseException as e:  # noqa: BLE001 -- as _Task.work
            self.error = self.error or e
        if next(self.finished) == len(self.blocks):
            self.done.release()
        original(self)
    monkeypatch.setattr(parallel._Task, "work", work)
    monkeypatch.setattr(parallel, "_pool", None)  # workers started under the patch
    yield
    parallel.set_threads(None)


def _split_blocks(monkeypatch):
    """Small products and kernels split too (the thresholds are for speed, not bits)."""
    from xladist.compiler import blas_blocks
    from xladist.compiler.codegen import split
    monkeypatch.setattr(blas_blocks, "BLOCK_MACS", 1 << 16)
    monkeypatch.setattr(blas_blocks, "MIN_ROWS", 8)
    monkeypatch.setattr(split, "BLOCK_WORK", 1 << 10)
    monkeypatch.setattr(split, "MIN_WORK", 1 << 8)
    monkeypatch.setattr(split, "MIN_WORK_CHEAP", 1 << 8)


def test_a_program_with_late_helpers_gives_the_bits_of_one_thread(late_helpers, monkeypatch):
    _split_blocks(monkeypatch)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((64, 96), (96, 128), (128, 32))]
    module = xladist.parse_hlo(MLP)
    parallel.set_threads(1)
    one = [np.array(v) for v in xladist.compile(module, backend="cpu")(*args)]
    parallel.set_threads(2)
    exe = xladist.compile(module, backend="cpu")
    before = dict(overlap.counts)
    got = [[np.array(v) for v in exe(*args)] for _ in range(3)]
    assert overlap.counts["pending"] > before["pending"], "no call was left pending"
    assert overlap.counts["beside"] > before["beside"], "nothing ran beside a pending call"
    for g in got:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(g, one))
    ref = xladist.compile(module, backend="interpreter")(*args)
    for a, b in zip(got[0], ref):
        np.testing.assert_allclose(a, np.array(b), rtol=2e-5, atol=2e-5)
