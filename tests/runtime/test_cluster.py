"""xladist.Cluster: ranks started once run many calls, checked against numpy on every
device's inputs; a call's failure leaves the cluster usable or says it is not; nothing is
left running after close (or after the job ended)."""

from __future__ import annotations

import os
import re
import signal
import time

import numpy as np
import pytest

import xladist
from xladist.errors import DeadlockError, ExecutionError, InputError
from xladist.runtime import cluster as cluster_module
from xladist.runtime.cluster import Cluster, ClusterEnded
from tests.cli.test_channels_cli import DATA
from tests.cli_util import marked

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # every test starts ranks

ALL_REDUCE = """HloModule psum, replica_count=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[4], w: f32[4,3]) -> (f32[4], f32[3]) {
  %x = f32[4]{0} parameter(0)
  %w = f32[4,3]{1,0} parameter(1)
  %r = f32[4]{0} all-reduce(%x), replica_groups={}, to_apply=%add
  %d = f32[3]{0} dot(%r, %w), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT %t = (f32[4]{0}, f32[3]{0}) tuple(%r, %d)
}
"""

# Every rank fails at the infeed (the cluster's calls have no feeds): a rank's exception.
NO_FEED = """HloModule feed, replica_count=2

ENTRY %main () -> f32[4] {
  %tok = token[] after-all()
  %in = (f32[4]{0}, token[]) infeed(%tok)
  ROOT %v = f32[4]{0} get-tuple-element(%in), index=0
}
"""


def _expected(x, w):
    r = x.sum(axis=0)
    return [[r, r @ w[d]] for d in range(x.shape[0])]


def _assert_outputs(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=1e-6)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, 4)).astype(np.float32), \
        rng.standard_normal((2, 4, 3)).astype(np.float32)


@pytest.fixture
def marker(monkeypatch, tmp_path):
    """A variable every rank (and mpiexec) inherits: who is still running afterwards."""
    value = f"xladist-cluster-test-{tmp_path.name}-{os.getpid()}"
    monkeypatch.setenv("XLADIST_TEST_MARKER", value)
    return f"XLADIST_TEST_MARKER={value}"


def _left(marker: str) -> list[int]:
    return [p for p in marked(marker) if p != os.getpid()]


def _gone(marker: str, within: float = 10.0) -> list[int]:
    end = time.monotonic() + within
    while (left := _left(marker)) and time.monotonic() < end:
        time.sleep(0.2)  # processes exit on their own: nothing to block on here
    return left


def test_many_calls_match_numpy_and_close_leaves_nothing(marker):
    with xladist.Cluster(n=2) as c:
        assert isinstance(c, Cluster) and c.usable
        assert len(_left(marker)) >= 2  # the ranks (and mpiexec) are up
        for seed in range(3):
            x, w = _inputs(seed)
            _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
        # A per-device list of argument lists, as xladist.run takes it.
        x, w = _inputs(7)
        _assert_outputs(c.run(ALL_REDUCE, [[x[0], w[0]], [x[1], w[1]]]), _expected(x, w))
        step = c.compile(ALL_REDUCE)
        for seed in range(10, 14):
            x, w = _inputs(seed)
            _assert_outputs(step.run([x, w]), _expected(x, w))
            _assert_outputs(c.run(step, [x, w]), _expected(x, w))
        # Another module between runs of the handle; then the handle again.
        loop = (DATA / "data_dependent_loop.hlo")
        xs = np.arange(8, dtype=np.float32).reshape(2, 4)
        got = c.run(loop, [xs, np.array([3, 3], np.int32)])
        for d in range(2):  # three all-reduces: the sum over devices, then doubled twice
            np.testing.assert_allclose(got[d][0], xs.sum(axis=0) * 2 ** 2)
        x, w = _inputs(99)
        _assert_outputs(step.run([x, w]), _expected(x, w))
        step.free()
        with pytest.raises(InputError, match="freed"):
            step.run([x, w])
    assert not c.usable
    assert _gone(marker) == []
    with pytest.raises(ClusterEnded, match="no longer usable"):
        c.run(ALL_REDUCE, [x, w])


def test_a_closed_cluster_says_so_and_what_to_do():
    """Before: a call after the `with` block said "this cluster is no longer usable (it was
    closed, as reported then); start a new Cluster" -- nothing had been reported. Now it
    says how it was closed, that its ranks have ended, and how to start a new one."""
    x, w = _inputs(5)
    with xladist.Cluster(n=2) as c:
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
    with pytest.raises(ClusterEnded) as info:
        c.run(ALL_REDUCE, [x, w])
    assert str(info.value) == (
        "xladist.Cluster: this cluster is no longer usable: it was closed (by close(), or at "
        "the end of its `with` block); its ranks have ended. Start a new Cluster to run more "
        "(`with xladist.Cluster(n=2) as c:`)"), str(info.value)


def test_same_results_as_one_shot_run():
    x, w = _inputs(3)
    once = xladist.run(ALL_REDUCE, [x, w], n=2)
    with xladist.Cluster(n=2) as c:
        again = c.run(ALL_REDUCE, [x, w])
    for a, b in zip(once, again):
        for u, v in zip(a, b):
            assert u.dtype == v.dtype and np.array_equal(u, v)


def test_bad_input_is_refused_before_anything_is_sent(monkeypatch):
    sent = []
    from xladist.runtime.service import server
    real = server.Conn.send

    def spy(self, op, *args, **kwargs):
        if op == "order":
            sent.append(kwargs)
        return real(self, op, *args, **kwargs)

    monkeypatch.setattr(server.Conn, "send", spy)
    x, w = _inputs(0)
    with xladist.Cluster(n=2) as c:
        step = c.compile(ALL_REDUCE)
        before = len(sent)
        with pytest.raises(InputError, match="float64"):
            c.run(ALL_REDUCE, [x.astype(np.float64), w])
        with pytest.raises(InputError, match=r"expected dims \[2, 4\]"):
            step.run([x[:1], w])
        with pytest.raises(InputError, match="takes 2 array arguments"):
            step.run([x])
        with pytest.raises(InputError):  # the module wants 4 replicas
            c.run(ALL_REDUCE.replace("replica_count=2", "replica_count=4"), [x, w])
        with pytest.raises(DeadlockError):  # unproven, and strict
            c.run(DATA / "data_dependent_loop.hlo", [x, np.array([1, 1], np.int32)],
                  strict=True)
        with pytest.raises(InputError, match="unknown settings"):
            c.run(ALL_REDUCE, [x, w], backend_options=1)
        assert len(sent) == before  # no rank heard of any of them
        _assert_outputs(step.run([x, w]), _expected(x, w))


def test_run_keeps_the_last_modules_loaded(monkeypatch):
    loads = []
    from xladist.runtime.service import server
    real = server.Conn.send

    def spy(self, op, *args, **kwargs):
        if op == "order" and kwargs.get("load"):
            loads.append(kwargs["handle"])
        return real(self, op, *args, **kwargs)

    monkeypatch.setattr(server.Conn, "send", spy)
    loop = DATA / "data_dependent_loop.hlo"
    xs = np.arange(8, dtype=np.float32).reshape(2, 4)
    other = ALL_REDUCE.replace("HloModule psum", "HloModule psum2")
    with xladist.Cluster(n=2, keep=2) as c:
        for seed in range(2):
            x, w = _inputs(seed)
            _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
        assert len(set(loads)) == 1  # loaded once (on both ranks), run twice
        got = c.run(loop, [xs, np.array([1, 1], np.int32)])
        np.testing.assert_allclose(got[1][0], xs.sum(axis=0))
        x, w = _inputs(5)
        _assert_outputs(c.run(other, [x, w]), _expected(x, w))  # evicts ALL_REDUCE
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
        assert len(set(loads)) == 4
        _assert_outputs(c.run(ALL_REDUCE, [x, w], timeout=60.0), _expected(x, w))
        assert len(set(loads)) == 5  # other settings: another load


def test_threads_running_modules_that_evict_each_other_get_their_results():
    # keep=1 and two threads, each with its own text: every load evicts the other's
    # module. Before, a thread found its module kept, and the other thread's load evicted
    # (freed) it before the run: `rank 0: internal error: KeyError: 37`.
    from concurrent.futures import ThreadPoolExecutor
    other = ALL_REDUCE.replace("HloModule psum", "HloModule psum2")
    x, w = _inputs(4)
    with xladist.Cluster(n=2, keep=1) as c:
        def calls(text):
            for _ in range(20):
                _assert_outputs(c.run(text, [x, w]), _expected(x, w))
        with ThreadPoolExecutor(2) as pool:
            for done in [pool.submit(calls, text) for text in (ALL_REDUCE, other)]:
                done.result()
        assert len(c._kept) == 1 and c.usable


def test_a_run_that_loses_the_race_with_free_says_freed_and_no_rank_waits():
    """h.run() in one thread and h.free() in another: run looked at `freed` before free
    set it, free's order reached the ranks first, and run's order then named a module the
    ranks had released: `rank 0: internal error: KeyError: 1` (1 in 200 races of two
    threads). Here the free falls exactly in that window (it runs while run checks its
    inputs): the run is refused as freed, no rank is sent it, and the cluster runs on."""
    x, w = _inputs(6)
    with xladist.Cluster(n=2) as c:
        step = c.compile(ALL_REDUCE)
        checked = step.inputs

        def inputs_then_free(inputs):
            per_device = checked(inputs)
            step.free()  # another thread's free, after run's look at `freed`
            return per_device
        step.inputs = inputs_then_free
        with pytest.raises(InputError, match="this handle of psum was freed"):
            step.run([x, w])
        step.free()  # again: nothing to do
        assert c.usable
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))


def test_a_deadline_passed_while_a_cluster_loads_is_the_jobs_one_report():
    """Cluster(timeout=0.001): the deadline passes in the load's first wait (the split of
    the node's ranks). Before, each rank said its own line -- `rank 0: timed out after 0.0
    s waiting in finding the ranks that share this node (deadline 0.001 s: ... or
    XLADIST_COLLECTIVE_TIMEOUT sets it)` -- as a one-shot job did before it set the
    monitor first; now the job's one report of where every rank is."""
    x, w = _inputs(2)
    for _ in range(3):  # (1 ms passes in the load's waits every time seen)
        with xladist.Cluster(n=2, timeout=0.001) as c:
            try:
                c.run(ALL_REDUCE, [x, w])
            except ClusterEnded as e:
                text = str(e)
                break
    else:
        pytest.skip("the deadline never passed")
    assert text.count("Where every rank is:") == 1, text
    assert "timed out after" not in text and "XLADIST_COLLECTIVE_TIMEOUT" not in text, text


def test_a_ranks_exception_is_reported_and_the_cluster_stays_usable():
    x, w = _inputs(1)
    with xladist.Cluster(n=2) as c:
        with pytest.raises(ExecutionError) as info:
            c.run(NO_FEED)
        text = str(info.value)
        for rank in (0, 1):  # each rank, with the instruction and its line
            assert f"rank {rank} (replica {rank}, partition 0) | in (line 5): infeed" in text
        assert "still usable" in text
        assert c.usable
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))


def test_a_hang_ends_the_cluster_with_the_report(marker):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with xladist.Cluster(n=2, timeout=3.0) as c:
        loop = c.compile(DATA / "data_dependent_loop.hlo", check=False)
        got = loop.run([x, np.array([2, 2], np.int32)])
        np.testing.assert_allclose(got[0][0], x.sum(axis=0) * 2)
        t0 = time.monotonic()
        with pytest.raises(ClusterEnded) as info:
            loop.run([x, np.array([1, 2], np.int32)])  # device 1 loops once more: a hang
        assert time.monotonic() - t0 < 60
        text = str(info.value)
        assert "rank 1 waits there; rank 0 never arrived" in text, text
        assert "(the deadline, timeout=3) in psum" in text, text  # not `--timeout 3`
        assert not c.usable
        with pytest.raises(ClusterEnded, match="no longer usable"):
            loop.run([x, np.array([2, 2], np.int32)])
    assert _gone(marker) == []


def test_a_dead_rank_ends_the_cluster_with_the_usual_report(marker):
    x, w = _inputs(2)
    with xladist.Cluster(n=2) as c:
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
        _, pid = c.pids[1]
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ClusterEnded) as info:
            c._thread.join(60)  # the job ends (MPICH, or the service after LOST_GRACE_S)
            c.run(ALL_REDUCE, [x, w])
        text = str(info.value)
        assert "rank 1" in text and "signal 9" in text, text
        with pytest.raises(ClusterEnded, match="no longer usable"):
            c.run(ALL_REDUCE, [x, w])
    assert _gone(marker) == []


def _mpich_segments(pid: int) -> set[str]:
    """The /dev/shm/mpich_shm_* files process `pid` maps, unlinked or not."""
    with open(f"/proc/{pid}/maps") as f:
        paths = {line.split(maxsplit=5)[5] for line in f.read().splitlines()
                 if len(line.split(maxsplit=5)) == 6}
    return {p.removesuffix(" (deleted)") for p in paths if p.startswith("/dev/shm/mpich_shm_")}


def test_a_killed_rank_leaves_no_shared_memory_file_behind(marker):
    """MPICH's node segment (2 MB of /dev/shm, which is RAM, per job) was removed only by
    MPI_Finalize: every job ended by a failure, a hang, a kill or Ctrl-C left it for good."""
    x, w = _inputs(4)
    with xladist.Cluster(n=2) as c:
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
        segments = set().union(*(_mpich_segments(pid) for _, pid in c.pids.values()))
        if not segments:
            pytest.skip("the MPI library maps no /dev/shm/mpich_shm_* segment")
        os.kill(c.pids[1][1], signal.SIGKILL)
        with pytest.raises(ClusterEnded, match="signal 9"):
            c._thread.join(60)
            c.run(ALL_REDUCE, [x, w])
    assert _gone(marker) == []
    assert [p for p in segments if os.path.exists(p)] == []


def test_clusters_that_ended_and_were_not_closed_keep_no_descriptors(marker):
    """A cluster that ended (a dead rank, a hang, Ctrl-C) stays referenced until close()
    or the interpreter's exit (atexit): it kept mpiexec's two output pipes open, two more
    descriptors for every such cluster of a long session."""
    x, w = _inputs(5)

    def ended():
        c = xladist.Cluster(n=2).start()
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
        os.kill(c.pids[1][1], signal.SIGKILL)
        with pytest.raises(ClusterEnded, match="signal 9"):
            c._thread.join(60)
            c.run(ALL_REDUCE, [x, w])
        return c

    kept = [ended()]  # the first one opens what the process keeps for good
    fds = len(os.listdir("/proc/self/fd"))
    kept += [ended() for _ in range(2)]
    assert len(os.listdir("/proc/self/fd")) == fds
    for c in kept:
        c.close()
    assert _gone(marker) == []


def test_a_rank_killed_during_a_call_ends_it(marker):
    import threading
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with xladist.Cluster(n=2, timeout=120.0) as c:
        loop = c.compile(DATA / "data_dependent_loop.hlo", check=False)
        _, pid = c.pids[0]
        timer = threading.Timer(2.0, os.kill, args=(pid, signal.SIGKILL))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(ClusterEnded) as info:
            loop.run([x, np.array([1, 2], np.int32)])  # rank 1 waits in the loop meanwhile
        assert time.monotonic() - t0 < 60  # not the ranks' 120 s deadline
        text = str(info.value)
        assert "during a call of data_dependent_loop" in text
        assert "rank 0" in text and "signal 9" in text, text
    assert _gone(marker) == []


# ---- a call's one message back: call-done with the outputs ------------------------------

BIG = """HloModule big, replica_count=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[1048577], y: s32[3]) -> (f32[1048577], s32[3]) {
  %x = f32[1048577]{0} parameter(0)
  %y = s32[3]{0} parameter(1)
  %r = f32[1048577]{0} all-reduce(%x), replica_groups={}, to_apply=%add
  %n = s32[3]{0} negate(%y)
  ROOT %t = (f32[1048577]{0}, s32[3]{0}) tuple(%r, %n)
}
"""


def test_outputs_larger_than_the_wires_pieces_come_back_with_each_call():
    """A rank's outputs travel with its call-done, one message (cluster_rank): an output
    of 4 MiB and 4 bytes (more than one of the wire's pieces) and a small one, call after
    call, are numpy's on every device."""
    from xladist.runtime import wire
    assert 1048577 * 4 > wire.CHUNK
    rng = np.random.default_rng(0)
    with xladist.Cluster(n=2) as c:
        step = c.compile(BIG)
        for call in range(3):
            x = rng.standard_normal((2, 1048577)).astype(np.float32)
            y = rng.integers(-9, 9, (2, 3)).astype(np.int32)
            got = step.run([x, y]) if call < 2 else c.run(BIG, [x, y])
            for d in range(2):
                np.testing.assert_allclose(got[d][0], x[0] + x[1], rtol=1e-6)
                np.testing.assert_array_equal(got[d][1], -y[d])


# One rank fails at an instruction or not, as its inputs say: a call of a handle fails on
# rank 1 alone while rank 0 finishes (and sends its outputs).
MAYBE_FEED = """HloModule maybe_feed, replica_count=2

%skip (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

%feed (q: f32[4]) -> f32[4] {
  %q = f32[4]{0} parameter(0)
  %tok = token[] after-all()
  %in = (f32[4]{0}, token[]) infeed(%tok)
  ROOT %v = f32[4]{0} get-tuple-element(%in), index=0
}

ENTRY %main (x: f32[4], c: pred[]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %c = pred[] parameter(1)
  ROOT %r = f32[4]{0} conditional(%c, %x, %x), true_computation=%feed, false_computation=%skip
}
"""


LOADED_MODULES = """HloModule probe, replica_count=2

ENTRY %main () -> f32[] {
  ROOT %n = f32[] custom-call(), custom_call_target="test.loaded_modules"
}
"""


def test_handles_nobody_holds_are_released_before_the_next_load():
    """`step = c.compile(...)` in a loop without free(): every module stayed loaded on the
    ranks with its communicators, and after ~500 (four groups each) MPI had none left
    ("Too many communicators")."""
    from tests import custom_call_fns
    from xladist.semantics.custom_calls import CUSTOM_CALLS, register_custom_call
    register_custom_call("test.loaded_modules", custom_call_fns.loaded_modules)
    try:
        with xladist.Cluster(n=2) as c:
            for seed in range(12):
                step = c.compile(ALL_REDUCE)
                x, w = _inputs(seed)
                _assert_outputs(step.run([x, w]), _expected(x, w))
            kept = c.compile(ALL_REDUCE)  # held, as `step` is: both stay
            loaded = c.run(LOADED_MODULES)  # (kept too, keep=8: it counts itself)
            assert [float(d[0]) for d in loaded] == [3.0, 3.0]
            _assert_outputs(kept.run([x, w]), _expected(x, w))
            _assert_outputs(step.run([x, w]), _expected(x, w))
    finally:
        CUSTOM_CALLS.pop("test.loaded_modules", None)


def test_a_rank_failing_alone_in_a_handles_call_is_named_and_the_cluster_stays_usable():
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with xladist.Cluster(n=2) as c:
        step = c.compile(MAYBE_FEED)
        got = step.run([x, np.array([False, False])])
        np.testing.assert_array_equal(got[1][0], -x[1])
        with pytest.raises(ExecutionError) as info:
            step.run([x, np.array([False, True])])  # rank 1 takes the infeed's branch
        text = str(info.value)
        assert "rank 1 (replica 1, partition 0) | in (line 11): infeed" in text, text
        assert "rank 0" not in text and "still usable" in text, text
        assert c.usable
        for _ in range(2):
            got = step.run([x + 1, np.array([False, False])])
            for d in range(2):
                np.testing.assert_array_equal(got[d][0], -(x[d] + 1))


# Computes for as long as its trip count says, without a collective (the interpreter: a
# few microseconds an iteration).
SPIN = """HloModule spin, replica_count=2

%cond (s: (s32[], f32[])) -> pred[] {
  %s = (s32[], f32[]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %lim = s32[] constant(0)
  ROOT %lt = pred[] compare(%i, %lim), direction=GT
}

%body (b: (s32[], f32[])) -> (s32[], f32[]) {
  %b = (s32[], f32[]) parameter(0)
  %i = s32[] get-tuple-element(%b), index=0
  %one = s32[] constant(1)
  %j = s32[] subtract(%i, %one)
  %v = f32[] get-tuple-element(%b), index=1
  %w = f32[] add(%v, %v)
  ROOT %t = (s32[], f32[]) tuple(%j, %w)
}

ENTRY %main (x: f32[], n: s32[]) -> f32[] {
  %x = f32[] parameter(0)
  %n = s32[] parameter(1)
  %init = (s32[], f32[]) tuple(%n, %x)
  %loop = (s32[], f32[]) while(%init), condition=%cond, body=%body
  ROOT %out = f32[] get-tuple-element(%loop), index=1
}
"""


def test_a_rank_killed_while_computing_is_named_with_this_calls_placement(marker):
    """A cluster's rank says neither where it runs (when it ran there last) nor that it
    computes (the service marks it from the order): killed in a call of a handle whose
    device assignment differs from the call before, it is named with this call's replica
    and as computing."""
    import threading
    x = np.ones(2, np.float32)
    with xladist.Cluster(n=2, backend="interpreter") as c:
        plain = c.compile(SPIN)
        swapped = c.compile(SPIN, device_assignment=[[1], [0]])  # rank 0 runs replica 1
        for step in (plain, swapped, plain, swapped, plain):
            np.testing.assert_array_equal(step.run([x, np.array([3, 3], np.int32)])[0][0], 8)
        _, pid = c.pids[0]
        timer = threading.Timer(2.0, os.kill, args=(pid, signal.SIGKILL))
        timer.start()
        with pytest.raises(ClusterEnded) as info:
            swapped.run([x, np.array([2 ** 30, 2 ** 30], np.int32)])  # minutes of work
        text = str(info.value)
        assert re.search(r"rank 0 \(device 0, replica 1, partition 0\) on \S+, pid \d+, was "
                         r"killed by signal 9", text), text
        assert "Its last position: computing, not waiting for another rank" in text, text
    assert _gone(marker) == []


def test_a_cluster_inside_an_mpi_job_is_refused(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "0")
    with pytest.raises(InputError, match="not inside an MPI job"):
        Cluster(2).start()


def test_a_cluster_not_closed_by_its_user_is_closed_at_exit(marker):
    c = Cluster(2).start()
    assert _left(marker)
    import atexit
    atexit.unregister(c._close_at_exit)  # what exit would run, run now
    c._close_at_exit()
    assert not c.usable
    assert _gone(marker) == []


def test_clusters_nobody_holds_end_their_ranks(marker):
    """A cluster its user let go of without close() (a test's or a function's) is collected
    and ends its ranks. Before, its launch thread and atexit hook held it: every such
    cluster kept mpiexec, its ranks, 7 threads and 8 descriptors until the interpreter's
    exit (four dropped clusters: 12 processes and 28 more threads)."""
    import gc
    import weakref
    x, w = _inputs(3)

    threads = []

    def used_and_dropped():
        c = Cluster(2).start()
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))  # kept: a cycle
        threads.append(c._thread)
        return weakref.ref(c)

    refs = [used_and_dropped() for _ in range(3)]
    gc.collect()
    assert [r() for r in refs] == [None, None, None], gc.get_referrers(*filter(None, (
        r() for r in refs)))
    assert _gone(marker, within=60) == []
    for t in threads:  # their launch threads end with their jobs
        t.join(60)
    assert not [t for t in threads if t.is_alive()]


def test_a_cluster_refuses_a_bad_n():
    with pytest.raises(InputError, match="n must be"):
        Cluster(0)
    with pytest.raises(ClusterEnded, match="not started"):
        Cluster(2).run(ALL_REDUCE)
    assert cluster_module.FAILED_GRACE_S > 0


@pytest.mark.parametrize("setting, error", [
    (dict(timeout=-1), "timeout must be a number of seconds >= 0"),
    (dict(timeout="abc"), "timeout must be a number, got 'abc'"),
    (dict(backend="gpu"), "backend 'gpu' is not available"),
])
def test_a_cluster_refuses_bad_defaults_before_its_ranks_start(setting, error):
    # Before: Cluster(2, timeout=-1) started two ranks (a second of work) and only the
    # first call said "timeout must be ...", for every call after it too.
    from xladist.errors import XlaDistError
    with pytest.raises(XlaDistError, match=re.escape(error)):
        Cluster(2, **setting)


def test_ctrl_c_during_a_call_stops_the_ranks(marker):
    import threading
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with xladist.Cluster(n=2, timeout=120.0) as c:
        loop = c.compile(DATA / "data_dependent_loop.hlo", check=False)
        # A real SIGINT, as a terminal's Ctrl-C sends (interrupt_main would only set a flag
        # that the blocked wait does not see).
        timer = threading.Timer(3.0, os.kill, args=(os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            loop.run([x, np.array([1, 2], np.int32)])  # hangs until the interrupt
        assert time.monotonic() - t0 < 60  # not the ranks' 120 s deadline
        assert not c.usable
        with pytest.raises(ClusterEnded, match="interrupted"):
            loop.run([x, np.array([2, 2], np.int32)])
    assert _gone(marker) == []


@pytest.mark.parametrize("after", [0.2, 1.5])
def test_ctrl_c_while_the_ranks_start_leaves_nothing(marker, after):
    import threading
    timer = threading.Timer(after, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    c = Cluster(2)
    try:
        with pytest.raises(KeyboardInterrupt):
            c.start()
            time.sleep(30)  # started before the signal (a fast machine): interrupted here
    finally:
        timer.cancel()
    c.close()
    assert not c.usable
    assert _gone(marker) == []


# ---- feeds on a cluster's calls --------------------------------------------------------

def test_calls_take_their_own_feeds_served_by_this_process(tmp_path):
    """Each call gets its own infeed (iterables, a named function, npz files) and outfeed
    (a callback, npz files), served while it runs, as xladist.run's feeds; the values are
    numpy's sums of every rank's items. A call whose infeed ends early fails naming the
    infeed, and the cluster stays usable; so does one whose outfeed callback raises."""
    from xladist.runtime.feeds.npz import read_items, write_items
    from tests.cli.test_feeds_cli import expected_accs, loop_text
    from tests.feeds_fns import item
    steps = 3
    with xladist.Cluster(n=2) as c:
        step = c.compile(loop_text(2, steps))
        for call in range(2):
            got = []
            shift = 100.0 * call
            outs = step.run(infeed=[[item(r, k) + shift for k in range(steps)] for r in range(2)],
                            outfeed=lambda rank, rep, part, it: got.append((rank, it)))
            want = [a + 2 * shift * (k + 1) for k, a in enumerate(expected_accs(2, steps))]
            for r in range(2):
                np.testing.assert_allclose(outs[r][0], want[-1])
                mine = [it for rank, it in got if rank == r]
                assert [int(i) for i, _ in mine] == list(range(steps))
                for (_, acc), w in zip(mine, want):
                    np.testing.assert_allclose(acc, w)
        # Files, through Cluster.run with a module given as text.
        for r in range(2):
            write_items(str(tmp_path / f"in{r}.npz"), [item(r, k) for k in range(steps)])
        c.run(loop_text(2, steps), infeed=str(tmp_path / "in{rank}.npz"),
              outfeed=str(tmp_path / "out{rank}.npz"))
        for r in range(2):
            accs = [np.asarray(x[1]) for x in read_items(str(tmp_path / f"out{r}.npz"))]
            np.testing.assert_allclose(np.stack(accs), np.stack(expected_accs(2, steps)))
        # A named function, imported in the ranks.
        def drop(rank, rep, part, it):
            pass
        outs = step.run(infeed_fn="tests.feeds_fns:steps", outfeed=drop)
        np.testing.assert_allclose(outs[1][0], expected_accs(2, steps)[-1])
        # An infeed that ends early: the call fails, the next one runs.
        with pytest.raises(ExecutionError, match=r"infeed"):
            step.run(infeed=[[item(r, 0)] for r in range(2)], outfeed=drop)
        assert c.usable

        def broken(rank, rep, part, it):
            raise RuntimeError("disk full")
        with pytest.raises(ExecutionError, match=r"outfeed callback for rank \d raised "
                                                 r"RuntimeError: disk full"):
            step.run(infeed_fn="tests.feeds_fns:steps", outfeed=broken)
        assert c.usable
        outs = step.run(infeed_fn="tests.feeds_fns:steps", outfeed=drop)
        np.testing.assert_allclose(outs[0][0], expected_accs(2, steps)[-1])
        # Refused before any rank hears of the call.
        with pytest.raises(InputError, match="prefetch"):
            step.run(infeed_fn="tests.feeds_fns:steps", prefetch=0)
        with pytest.raises(InputError, match="infeed"):
            step.run(infeed=str(tmp_path / "missing{rank}.npz"))
        assert c.usable



# Each rank infeeds and outfeeds alone (no collective), ten steps.
FEED_LOOP = """HloModule feedloop, replica_count=2
cond {
  p = (s32[], token[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], token[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  t = token[] get-tuple-element(p), index=1
  in = (f32[3], token[]) infeed(t)
  x = f32[3] get-tuple-element(in), index=0
  t1 = token[] get-tuple-element(in), index=1
  t2 = token[] outfeed(x, t1), outfeed_shape=f32[3]{0}
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT next = (s32[], token[]) tuple(i2, t2)
}
ENTRY main {
  zero = s32[] constant(0)
  t = token[] after-all()
  init = (s32[], token[]) tuple(zero, t)
  w = (s32[], token[]) while(init), condition=cond, body=body
  ROOT r = s32[] get-tuple-element(w), index=0
}
"""


def test_a_failed_call_delivers_every_item_to_a_slow_callback_and_stays_usable():
    # Rank 1's infeed raises at item 6; rank 0 runs its ten steps alone, and the callback
    # takes 1 s an item. Before: rank 1 waited 5 s for its items to be taken, answered,
    # and 5 s later the cluster took rank 0 -- which had finished and only waited for the
    # callback to take its last items -- to be stuck in a collective: ClusterEnded, the
    # cluster stopped, rank 0's last item lost (/work/scratch/lost42/r3.py). Now the call
    # raises rank 1's error after every item outfed reached the callback, and the cluster
    # stays usable.
    from tests.feeds_fns import item

    def infeed_of(rank):
        for k in range(10):
            if rank == 1 and k == 6:
                raise ValueError("shard 1 is corrupt")
            yield item(rank, k)
    got, returned = [], []

    def slow(rank, rep, part, x):
        time.sleep(1.0)
        got.append((rank, int(x[1]), bool(returned)))
    with xladist.Cluster(n=2, backend="interpreter", timeout=60) as c:
        with pytest.raises(ExecutionError) as info:
            c.run(FEED_LOOP, infeed=[infeed_of(0), infeed_of(1)], outfeed=slow)
        returned.append(True)
        assert not isinstance(info.value, ClusterEnded), info.value
        assert "ValueError: shard 1 is corrupt" in str(info.value)
        assert "the cluster is still usable" in str(info.value)
        assert sorted(got) == [(0, k, False) for k in range(10)] + \
            [(1, k, False) for k in range(6)]
        assert c.usable
        got.clear()
        assert c.run(FEED_LOOP, infeed=[[item(r, k) for k in range(10)] for r in range(2)],
                     outfeed=lambda r, rep, part, x: got.append(r)) == [[np.int32(10)]] * 2
        assert sorted(got) == [0] * 10 + [1] * 10


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_epochs_of_the_training_example_on_one_cluster():
    """examples/train_mlp/README.md's epochs loop: one compile, then one call per epoch with
    that epoch's infeed shards and a loss callback; every epoch's losses and parameters
    are numpy's float64 SGD from the previous epoch's parameters, and the loss falls."""
    from xladist.examples.train_mlp import Config, build_module, make_data, reference
    cfg = Config(replicas=2, steps=8)
    params, batches = make_data(Config(replicas=2, steps=3 * cfg.steps))
    means = []
    with xladist.Cluster(n=cfg.replicas) as c:
        step = c.compile(build_module(cfg))
        for epoch in range(3):
            shard = [b[epoch * cfg.steps:(epoch + 1) * cfg.steps] for b in batches]
            losses = {r: [] for r in range(cfg.replicas)}
            out = step.run([np.stack([p] * cfg.replicas) for p in params],
                           infeed=lambda rank, replica, partition: shard[rank],
                           outfeed=lambda rank, replica, partition, loss:
                               losses[rank].append(float(loss)))
            want_losses, want_params = reference(params, shard, cfg.lr)
            for r in range(cfg.replicas):
                np.testing.assert_allclose(losses[r], want_losses[r], rtol=1e-4, atol=1e-6)
                for g, w in zip(out[r], want_params):
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
            assert all(np.array_equal(a, b) for a, b in zip(out[0], out[1]))
            params = out[0]
            means.append(np.mean([losses[r] for r in losses]))
    assert means[-1] < means[0] / 2, means


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_is_told_the_cluster_is_its_parents():
    """A child forked from the process that started a cluster (multiprocessing's fork start
    method, os.fork in a test) has no connection to the ranks. Before, its call said the
    job had ended ('its 2-rank job ended before this call') while the ranks ran on for the
    parent. It is told whose ranks they are; the parent's cluster is untouched, also by
    the child's close()."""
    x, w = _inputs(3)
    with Cluster(n=2) as c:
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its error's text back to the parent, then a normal exit
            signal.alarm(30)
            os.close(read)
            try:
                c.run(ALL_REDUCE, [x, w])
                text = "no error"
            except BaseException as e:  # noqa: BLE001 -- the parent checks it
                text = f"{type(e).__name__}: {e}"
            os.write(write, text.encode())
            os.close(write)
            c.close()  # as the child's `with` block or atexit would
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            text = f.read()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert f"started by process {os.getpid()}" in text and "fork" in text, text
        assert c.usable
        _assert_outputs(c.run(ALL_REDUCE, [x, w]), _expected(x, w))
