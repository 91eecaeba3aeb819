"""Intra-op parallelism (compiler/parallel.py, codegen/split.py): large kernels run
in fixed blocks on the pool; the results are bit-identical for every thread count
and match numpy; small kernels run whole."""

from __future__ import annotations

import math
import os
import threading
import time

import numpy as np
import pytest

import xladist
from xladist.compiler import parallel
from xladist.compiler.codegen.split import MAX_BLOCKS, MIN_WORK, MIN_WORK_CHEAP
from xladist.errors import InputError

ADD = "add { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y) }\n"
MAX = "max { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] maximum(x, y) }\n"


def chain(shape):
    s = f"f32[{','.join(map(str, shape))}]"
    return (f"HloModule m\nENTRY main {{\n a = {s} parameter(0)\n b = {s} parameter(1)\n"
            f" m = {s} multiply(a, b)\n t = {s} tanh(m)\n ROOT r = {s} add(t, a)\n}}\n",
            lambda a, b: np.tanh(a * b) + a, 2)


def row_broadcast(n, m):
    # A multi-index kernel (nested loops): a + v broadcast along the rows, then exp.
    return (f"HloModule m\nENTRY main {{\n a = f32[{n},{m}] parameter(0)\n"
            f" v = f32[{m}] parameter(1)\n vb = f32[{n},{m}] broadcast(v), dimensions={{1}}\n"
            f" s = f32[{n},{m}] add(a, vb)\n ROOT e = f32[{n},{m}] exponential(s)\n}}\n",
            lambda a, v: np.exp(a + v), 2)


def transpose(n, m):
    return (f"HloModule m\nENTRY main {{\n a = f32[{n},{m}] parameter(0)\n"
            f" t = f32[{m},{n}] transpose(a), dimensions={{1,0}}\n"
            f" ROOT r = f32[{m},{n}] negate(t)\n}}\n", lambda a: -a.T, 1)


def row_sum(n, m):
    return (f"HloModule m\n{ADD}ENTRY main {{\n a = f32[{n},{m}] parameter(0)\n"
            f" z = f32[] constant(0)\n"
            f" ROOT r = f32[{n}] reduce(a, z), dimensions={{1}}, to_apply=add\n}}\n",
            lambda a: a.sum(axis=1), 1)


def col_sum(n, m):
    return (f"HloModule m\n{ADD}ENTRY main {{\n a = f32[{n},{m}] parameter(0)\n"
            f" z = f32[] constant(0)\n"
            f" ROOT r = f32[{m}] reduce(a, z), dimensions={{0}}, to_apply=add\n}}\n",
            lambda a: a.sum(axis=0), 1)


def reduce_dims(shape, dims):
    # A reduction whose reduced dims lie outside kept ones (column reductions).
    s = f"f32[{','.join(map(str, shape))}]"
    out = [n for i, n in enumerate(shape) if i not in dims]
    return (f"HloModule m\n{ADD}ENTRY main {{\n a = {s} parameter(0)\n"
            f" z = f32[] constant(0)\n ROOT r = f32[{','.join(map(str, out))}] reduce(a, z), "
            f"dimensions={{{','.join(map(str, dims))}}}, to_apply=add\n}}\n",
            lambda a: a.sum(axis=tuple(dims)), 1)


def softmax(n, m):
    return (f"""HloModule m
{ADD}{MAX}ENTRY main {{
  x = f32[{n},{m}] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[{n}] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = f32[{n},{m}] broadcast(mx), dimensions={{0}}
  d = f32[{n},{m}] subtract(x, mb)
  e = f32[{n},{m}] exponential(d)
  z = f32[] constant(0)
  s = f32[{n}] reduce(e, z), dimensions={{1}}, to_apply=add
  sb = f32[{n},{m}] broadcast(s), dimensions={{0}}
  ROOT r = f32[{n},{m}] divide(e, sb)
}}
""", lambda x: (lambda e: e / e.sum(1, keepdims=True))(np.exp(x - x.max(1, keepdims=True))), 1)


def dot(m, k, n, batch=None):
    pre, bd = (f"{batch},", "lhs_batch_dims={0}, rhs_batch_dims={0}, ") if batch else ("", "")
    c = 1 if batch else 0
    return (f"HloModule m\nENTRY main {{\n a = f32[{pre}{m},{k}] parameter(0)\n"
            f" b = f32[{pre}{k},{n}] parameter(1)\n ROOT d = f32[{pre}{m},{n}] dot(a, b), "
            f"{bd}lhs_contracting_dims={{{c + 1}}}, rhs_contracting_dims={{{c}}}\n}}\n",
            lambda a, b: np.matmul(a.astype(np.float64), b), 2)


def conv(nb, hw, ci, co):
    return (f"HloModule m\nENTRY main {{\n x = f32[{nb},{hw},{hw},{ci}] parameter(0)\n"
            f" k = f32[3,3,{ci},{co}] parameter(1)\n ROOT y = f32[{nb},{hw},{hw},{co}] "
            f"convolution(x, k), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f\n}}\n",
            _conv_ref, 2)


def _conv_ref(x, k):
    b, h, w, _ = x.shape
    p = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    return sum(p[:, i:i + h, j:j + w, :] @ k[i, j] for i in range(3) for j in range(3))


CASES = {
    "chain-1d": lambda: chain((300_001,)),
    "chain-3d": lambda: chain((7, 211, 301)),
    "row-broadcast": lambda: row_broadcast(515, 1021),
    # Kernels without an expensive op split only from MIN_WORK_CHEAP elements.
    "transpose": lambda: transpose(1100, 1001),
    "row-sum": lambda: row_sum(2053, 517),
    # Reduced dims inside the kept outermost one: each block initializes its slice.
    "reduce-middle": lambda: reduce_dims((8, 300, 700), (1,)),
    # BLAS calls split into blocks (blas_blocks.py): rows, columns, batches, images.
    "dot-rows": lambda: dot(520, 300, 300),
    "dot-columns": lambda: dot(100, 400, 1030),
    "dot-batched": lambda: dot(96, 128, 96, batch=20),
    "conv-images": lambda: conv(6, 30, 32, 32),
    # The direct kernel (conv_kernel.py): 29 positions a line, a tail after blocks of 4.
    "conv-tail": lambda: conv(6, 29, 16, 64),
    "softmax": lambda: softmax(257, 1100),
}


@pytest.fixture
def restore_threads(monkeypatch):
    # Hand blocks to the pool even when this (shared) machine has no idle core.
    monkeypatch.setattr(parallel, "DYNAMIC", False)
    yield
    parallel.set_threads(None)


def _inputs(text, nargs, seed=0):
    module = xladist.parse_hlo(text)
    rng = np.random.default_rng(seed)
    shapes = [p.shape.dims for p in module.entry.parameters]
    return module, [rng.standard_normal(s).astype(np.float32) for s in shapes[:nargs]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bit_identical_for_every_thread_count(case, restore_threads):
    text, ref, nargs = CASES[case]()
    module, args = _inputs(text, nargs)
    exe = xladist.compile(module, backend="cpu")
    splits = [e.get("split", "") for c in exe.program.explain() for e in c["thunks"]]
    assert any(" blocks of " in s for s in splits), f"nothing was split: {splits}"
    results = {}
    # Most threads first: a block left unwritten then shows (a later full run into the
    # same output buffer would hide it).
    for n in (16, 2, 1):
        parallel.set_threads(n)
        results[n] = np.array(exe(*args)[0])
    for n in (2, 16):
        assert results[n].tobytes() == results[1].tobytes(), f"{n} threads differ from 1"
    np.testing.assert_allclose(results[1], ref(*args), rtol=2e-5, atol=2e-4)


def test_large_kernels_split_small_ones_do_not(restore_threads):
    parallel.set_threads(2)
    big = xladist.compile(xladist.parse_hlo(CASES["softmax"]()[0]), backend="cpu")
    (t,) = big.program.builder.kernel_thunks
    assert t.blocks is not None and len(t.blocks) > 2
    assert t.split_text().startswith("2 threads:")
    # Blocks tile the outer dimension exactly, in order.
    assert t.blocks[0][0] == 0 and t.blocks[-1][1] == t.split[0]
    assert all(a[1] == b[0] for a, b in zip(t.blocks, t.blocks[1:]))
    small = xladist.compile(xladist.parse_hlo(chain((MIN_WORK // 2,))[0]), backend="cpu")
    (s,) = small.program.builder.kernel_thunks
    assert s.blocks is None and "below threshold" in s.split_text()
    # A large kernel gets larger blocks, never more than MAX_BLOCKS of them.
    huge = xladist.compile(xladist.parse_hlo(chain((1 << 23,))[0]), backend="cpu")
    (h,) = huge.program.builder.kernel_thunks
    assert len(h.blocks) == MAX_BLOCKS and h.blocks[-1][1] == 1 << 23
    # A memory-bound kernel of the same size stays whole (it would not pay).
    cheap = xladist.compile(xladist.parse_hlo(row_sum(MIN_WORK // 256, 512)[0]),
                            backend="cpu")
    assert cheap.program.builder.kernel_thunks[0].blocks is None
    assert MIN_WORK < MIN_WORK_CHEAP
    # A column sum stays whole (its column blocks measured slower, split.py), and is
    # still right on any thread count.
    text, ref, nargs = col_sum(601, 2053)
    module, args = _inputs(text, nargs)
    col = xladist.compile(module, backend="cpu")
    assert col.program.builder.kernel_thunks[0].blocks is None
    np.testing.assert_allclose(np.asarray(col(*args)[0]), ref(*args), rtol=2e-5, atol=2e-4)


def test_pool_threads_run_the_blocks(restore_threads):
    parallel.set_threads(2)
    text, _ref, nargs = CASES["chain-1d"]()
    module, args = _inputs(text, nargs)
    xladist.compile(module, backend="cpu")(*args)
    assert any(t.name == "xladist-compute" for t in threading.enumerate())


def _stuck_helper() -> threading.Event:
    """Keep every worker of the 2-thread pool busy (on a loaded machine: not scheduled)
    until the returned event is set."""
    pool = parallel._get_pool(2)
    release = threading.Event()
    stuck = [threading.Event() for _ in pool.inbox]

    class Blocker:
        def __init__(self, ev):
            self.ev = ev

        def work(self):
            self.ev.set()
            release.wait(30)

    for q, ev in zip(pool.inbox, stuck):
        q.put(Blocker(ev))
    assert all(ev.wait(10) for ev in stuck)
    return release


def test_caller_does_not_wait_for_a_helper_that_never_starts(restore_threads):
    # A helper busy elsewhere (on a loaded machine: not scheduled) must not hold up the
    # caller: it finishes every block itself and returns.
    parallel.set_threads(2)
    release = _stuck_helper()
    ran, finished = [], threading.Event()

    def call():
        parallel.run_blocks(lambda _a, lo, hi: ran.append((lo, hi)), None,
                            [(i, i + 1) for i in range(8)])
        finished.set()

    threading.Thread(target=call, daemon=True).start()
    try:
        assert finished.wait(10), "run_blocks waited for a helper that never started"
        assert sorted(ran) == [(i, i + 1) for i in range(8)]
    finally:
        release.set()


def test_compiled_kernels_claim_blocks_natively(restore_threads, monkeypatch):
    # A compiled kernel's blocks are taken by one native call per participant; a helper
    # that never starts does not hold the caller up, and the blocks are blocks_of's:
    # the result equals the Python claim loop's, bit for bit.
    parallel.set_threads(2)
    text, ref, nargs = CASES["row-sum"]()
    module, args = _inputs(text, nargs)
    exe = xladist.compile(module, backend="cpu")
    (t,) = exe.program.builder.kernel_thunks
    assert len(t.blocks) > 2 and t.blocks[-1][1] != len(t.blocks) * (t.blocks[0][1] - t.blocks[0][0])
    seen = []
    real = parallel._NativeTask.work

    def spy(self):
        seen.append(threading.current_thread().name)
        real(self)
    monkeypatch.setattr(parallel._NativeTask, "work", spy)
    native = np.array(exe(*args)[0])
    assert seen, "the compiled kernel's blocks were not claimed natively"
    monkeypatch.setattr(parallel, "NATIVE_CLAIM", False)
    python = np.array(exe(*args)[0])
    assert native.tobytes() == python.tobytes()
    np.testing.assert_allclose(native, ref(*args), rtol=2e-5, atol=2e-4)
    monkeypatch.setattr(parallel, "NATIVE_CLAIM", True)
    release = _stuck_helper()
    got, finished = [], threading.Event()

    def call():
        got.append(np.array(exe(*args)[0]))
        finished.set()

    threading.Thread(target=call, daemon=True).start()
    try:
        assert finished.wait(10), "the native claim loop waited for a helper that never started"
        assert got[0].tobytes() == native.tobytes()
    finally:
        release.set()


def test_thread_count_sources(monkeypatch, restore_threads):
    monkeypatch.setenv("XLADIST_THREADS", "3")
    assert parallel.thread_count() == 3
    parallel.set_threads(5)
    assert parallel.thread_count() == 5
    parallel.set_threads(None)
    monkeypatch.delenv("XLADIST_THREADS")
    parallel.set_local_ranks(parallel.available_cores() * 2)
    try:
        assert parallel.thread_count() == 1  # more ranks than cores: one thread each
    finally:
        parallel.set_local_ranks(1)
    assert parallel.thread_count() == parallel.available_cores()
    monkeypatch.setenv("XLADIST_THREADS", "zero")
    with pytest.raises(InputError, match="XLADIST_THREADS"):
        parallel.thread_count()
    monkeypatch.delenv("XLADIST_THREADS")


@pytest.mark.slow
def test_cli_threads_option_and_explain(tmp_path):
    from tests.cli_util import xladist_cli
    text, _ref, _n = CASES["softmax"]()
    hlo = tmp_path / "softmax.hlo"
    hlo.write_text(text)
    x = np.random.default_rng(0).standard_normal((257, 1100)).astype(np.float32)
    np.savez(tmp_path / "in.npz", arg0=x)
    outs = {}
    for n in (1, 3):
        r = xladist_cli("run", hlo, "--threads", n, "--inputs", tmp_path / "in.npz",
                        "--outputs", tmp_path / f"out{n}.npz")
        assert r.returncode == 0, r.stderr
        with np.load(tmp_path / f"out{n}.npz") as z:
            outs[n] = z[z.files[0]]
    assert outs[1].tobytes() == outs[3].tobytes()
    bad = xladist_cli("run", hlo, "--threads", 0)
    assert bad.returncode == 2 and "--threads" in bad.stderr and "Traceback" not in bad.stderr
    ex = xladist_cli("explain", hlo, "--no-buffers", XLADIST_THREADS="3")
    assert ex.returncode == 0, ex.stderr
    assert "compute threads: 3" in ex.stdout
    assert "split: 3 threads: " in ex.stdout
    if len(os.sched_getaffinity(0)) >= 2 and parallel._getcpu() is not None:
        # 3 workers on a mask of 2 or more cores: the slice wraps around it
        cores = sorted(os.sched_getaffinity(0))
        want = ", ".join(str(cores[i % len(cores)]) for i in range(3))
        assert f"workers pinned to cores {want}, woken off the caller's core" in ex.stdout
    unpinned = xladist_cli("explain", hlo, "--no-buffers", XLADIST_THREADS="3",
                           XLADIST_PIN_THREADS="0")
    assert unpinned.returncode == 0 and "pinned" not in unpinned.stdout


def test_blas_threads_are_one_during_executions_and_restored_after():
    """In a user's own process xladist runs OpenBLAS on one thread only while it executes
    (its pool splits large calls), and puts back the caller's setting after, so numpy's
    matmul outside xladist keeps its threads: blas_scope itself, then a dot (a BLAS
    library thunk) executed with the caller at 2 threads."""
    libs = parallel.blas_info()
    if not libs:
        pytest.skip("no OpenBLAS loaded in this process")
    set_all = [getattr(lib, f"{pre}openblas_set_num_threads{suf}")
               for lib, pre, suf, _p in parallel._openblas_libs()]
    before = [b["threads"] for b in libs]
    try:
        for put in set_all:
            put(2)
        with parallel.blas_scope():
            assert all(b["threads"] == parallel.BLAS_THREADS for b in parallel.blas_info())
        assert all(b["threads"] == 2 for b in parallel.blas_info())
        text = """HloModule d
ENTRY e {
  a = f32[64,64] parameter(0)
  b = f32[64,64] parameter(1)
  ROOT d = f32[64,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
        exe = xladist.compile(xladist.parse_hlo(text), backend="cpu")
        assert exe.program.uses_blas
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(exe(a, b)[0], a @ b, rtol=1e-4, atol=1e-4)
        assert all(b["threads"] == 2 for b in parallel.blas_info())  # restored
    finally:
        for put, n in zip(set_all, before):
            put(n)


def _this_thread_stack_bytes() -> int:
    import ctypes
    libc = ctypes.CDLL(None)
    libc.pthread_self.restype = ctypes.c_ulong
    libc.pthread_getattr_np.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    attr = ctypes.create_string_buffer(256)  # pthread_attr_t: 56 bytes on x86-64 glibc
    assert libc.pthread_getattr_np(libc.pthread_self(), attr) == 0
    size = ctypes.c_size_t()
    libc.pthread_attr_getstacksize(attr, ctypes.byref(size))
    libc.pthread_attr_destroy(attr)
    return size.value


def test_pool_workers_get_big_stacks_where_threads_default_to_small_ones():
    """Kernels keep a row on their stack (up to 64 KiB, twice when a trig kernel reruns
    its accurate version). musl gives new threads 128 KiB: the pool's workers get 8 MiB
    anyway, and the process's own default is left as it was."""
    threading.stack_size(128 << 10)  # what a musl libc (Alpine) gives
    try:
        pool = parallel._Pool(2)
        assert threading.stack_size() == 128 << 10
    finally:
        threading.stack_size(0)
    seen, done = [], threading.Event()

    class Probe:
        def work(self):
            seen.append(_this_thread_stack_bytes())
            done.set()

    pool.inbox[0].put(Probe())
    assert done.wait(10)
    assert seen[0] >= parallel.WORKER_STACK


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no affinity API")
def test_worker_cores_are_this_ranks_slice_of_the_mask(monkeypatch):
    monkeypatch.setattr(parallel, "PIN_WORKERS", True)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 6, 7, 8, 9, 10, 11})
    monkeypatch.setattr(parallel, "_local_index", 0)
    assert parallel.worker_cpus(4) == [4, 5, 6, 7]
    monkeypatch.setattr(parallel, "_local_index", 1)
    assert parallel.worker_cpus(4) == [8, 9, 10, 11]
    monkeypatch.setattr(parallel, "_local_index", 2)  # more threads than the mask: wraps
    assert parallel.worker_cpus(4) == [4, 5, 6, 7]
    assert parallel.worker_cpus(1) is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert parallel.worker_cpus(2) is None  # one core: nothing to pin apart
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(parallel, "PIN_WORKERS", False)
    assert parallel.worker_cpus(2) is None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or parallel._getcpu() is None
                    or len(os.sched_getaffinity(0)) < 2, reason="needs 2 cores")
def test_pinned_workers_and_the_caller_share_no_core(restore_threads, monkeypatch):
    """Each worker is pinned to its own core, and a call wakes the workers on the cores
    the caller is not on: the case where Linux had put the one helper on the caller's
    core (two blocks in turns on one core) cannot happen."""
    monkeypatch.setattr(parallel, "PIN_WORKERS", True)
    pool = parallel._Pool(2)
    assert len(pool.inbox) == 2 and len(set(pool.cpus)) == 2
    probes, done = [], threading.Event()

    class Probe:
        def work(self):
            probes.append((threading.get_native_id(), os.sched_getaffinity(0)))
            if len(probes) == 2:
                done.set()

    for q in pool.inbox:
        q.put(Probe())
    assert done.wait(10)
    assert sorted(min(mask) for _, mask in probes) == sorted(pool.cpus)
    assert all(len(mask) == 1 for _, mask in probes)
    mine = os.sched_getaffinity(0)
    for here in pool.cpus:  # the caller "on" each core in turn: the other worker helps
        monkeypatch.setattr(parallel, "_getcpu", lambda here=here: (lambda: here))
        helpers, took = [], threading.Event()

        def block(_a, lo, hi, helpers=helpers, took=took):
            if threading.current_thread().name == "xladist-compute":
                helpers.append(os.sched_getaffinity(0))
                took.set()
            else:  # the caller leaves blocks for the woken helper, however late it runs
                took.wait(10)

        task = parallel._Task(block, None, [(i, i + 1) for i in range(8)])
        pool.run(task, 2)
        assert helpers and all(mask == {c for c in pool.cpus if c != here}
                               for mask in helpers)
    assert os.sched_getaffinity(0) == mine  # the caller (the user's thread) is not pinned


def test_one_busy_sample_is_not_a_busy_core(monkeypatch):
    """A core counts as busy once two /proc/loadavg samples in a row show it; a single
    transient reading does not keep kernels on one thread."""
    monkeypatch.setattr(parallel, "DYNAMIC", True)
    monkeypatch.setattr(parallel, "LOAD_PERIOD", 0.0)
    monkeypatch.setattr(parallel, "_pool", None)
    monkeypatch.setattr(parallel, "_local_ranks", 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(parallel, "_load", {"next": 0.0, "running": 1.0, "last": 1,
                                            "fd": -1, "at": time.monotonic()})
    readings = []
    monkeypatch.setattr(os, "pread", lambda fd, n, off: b"0.5 0.5 0.5 %d/99 1\n" % readings.pop(0))
    readings[:] = [1, 3, 1, 1]  # one transient: room every time
    assert [parallel._has_room() for _ in range(4)] == [True] * 4
    readings[:] = [3, 3]  # two in a row: no room
    assert [parallel._has_room() for _ in range(2)] == [True, False]


@pytest.mark.parametrize("files, cgroup, want", [
    # cgroup v2, a container's own namespace: the quota at the mount's root
    ({"/sys/fs/cgroup/cpu.max": "150000 100000\n"}, "0::/\n", 1.5),
    ({"/sys/fs/cgroup/cpu.max": "max 100000\n"}, "0::/\n", None),
    # v2 on the host: the process's cgroup path, the tightest level on the way up
    ({"/sys/fs/cgroup/a/b/cpu.max": "400000 100000\n", "/sys/fs/cgroup/a/cpu.max":
      "200000 100000\n"}, "0::/a/b\n", 2.0),
    # v1: quota and period files of the cpu controller; -1 = no quota
    ({"/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_quota_us": "300000\n",
      "/sys/fs/cgroup/cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000\n"},
     "4:memory:/docker/x\n2:cpu,cpuacct:/docker/x\n", 3.0),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
      "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, "2:cpu:/\n", None),
    ({}, None, None),  # no /proc/self/cgroup (not Linux)
])
def test_a_cgroup_cpu_quota_caps_the_threads(monkeypatch, files, cgroup, want):
    """`docker run --cpus N` leaves every core in the affinity mask but throttles the
    container to N cores' time: the thread count follows the quota (rounded up)."""
    table = dict(files)
    if cgroup is not None:
        table["/proc/self/cgroup"] = cgroup
    monkeypatch.setattr(parallel, "_read", table.get)
    monkeypatch.setattr(parallel, "_cgroup_limit", [])
    monkeypatch.setattr(parallel, "_counted", dict(parallel._counted, next=0.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(parallel, "_local_ranks", 1)
    monkeypatch.setattr(parallel, "_explicit", None)
    monkeypatch.delenv("XLADIST_THREADS", raising=False)
    assert parallel.cgroup_cpu_limit() == want
    assert parallel.available_cores() == (64 if want is None else math.ceil(want))
    assert parallel.thread_count() == parallel.available_cores()


@pytest.mark.parametrize("blas_threads, said", [("1", "1 thread;"), ("2", "2 threads;")])
def test_explain_says_openblas_threads_in_words(tmp_path, blas_threads, said):
    """`xladist explain`'s BLAS line counts OpenBLAS's threads in English ("2 thread;"
    before)."""
    from tests.cli_util import xladist_cli
    (tmp_path / "m.hlo").write_text(
        "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] add(x, x)\n}\n")
    ex = xladist_cli("explain", tmp_path / "m.hlo", OPENBLAS_NUM_THREADS=blas_threads)
    assert ex.returncode == 0, ex.stderr
    blas = [ln for ln in ex.stdout.splitlines() if ln.startswith("BLAS: ")]
    if not blas:
        pytest.skip("no OpenBLAS loaded")
    assert "(OPENBLAS_CORETYPE=" in blas[0] and said in blas[0], blas[0]
