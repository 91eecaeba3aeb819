"""Calls of xladist executables from several Python threads at once.

Users call an executable again and again, from their own thread pools and test suites.
Found by the concurrency probe (several threads calling one cpu executable: 9 of 300
results wrong): a compiled computation runs in buffers of its own (its arena, each
kernel's argument vector), so two calls of one executable in flight together wrote
over each other's temporaries. The tests force the overlap: a custom call parks the
first call in the middle of its program until the second has run, or a time limit
passes (the second may, instead, wait for the first)."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import xladist
from xladist.builder import XlaBuilder
from xladist.semantics.custom_calls import CUSTOM_CALLS, register_custom_call

BACKENDS = ["interpreter", "cpu"]
PARK = "test.concurrent.park"


def _module():
    """t = 3x + 1 (a temporary), then the custom call (the identity), then t * c + x:
    t must still hold this call's values after the custom call."""
    b = XlaBuilder("parked")
    x = b.parameter(0, "f32[64]", name="x")
    t = x * 3.0 + 1.0
    c = b.custom_call(PARK, [t], "f32[64]")
    return b.build(t * c + x)


def _want(x):
    t = x * np.float32(3) + np.float32(1)
    return t * t + x


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_call_during_the_first_does_not_touch_its_values(backend):
    second_done = threading.Event()
    parked = []

    def park(instr, args):
        if not parked:  # the first call waits here for the second to have run
            parked.append(True)
            second_done.wait(1.0)
        return args[0].copy()
    register_custom_call(PARK, park)
    try:
        exe = xladist.compile(_module(), backend=backend)
        x1 = np.arange(64, dtype=np.float32)
        x2 = np.full(64, -5.0, np.float32)
        first = {}
        t = threading.Thread(target=lambda: first.setdefault("out", exe(x1)))
        t.start()
        while not parked:
            threading.Event().wait(0.001)
        out2 = exe(x2)
        second_done.set()
        t.join(10)
        np.testing.assert_array_equal(out2[0], _want(x2))
        np.testing.assert_array_equal(first["out"][0], _want(x1))
    finally:
        CUSTOM_CALLS.pop(PARK, None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_threads_calling_one_executable_and_several(backend):
    """Four threads, two executables (one with a split kernel and a product), each
    result against numpy."""
    def build(n, k):
        b = XlaBuilder(f"m{n}")
        x = b.parameter(0, f"f32[{n},{n}]", name="x")
        y = b.parameter(1, f"f32[{n},{n}]", name="y")
        z = b.dot(x, y) + x * float(k)
        return b.build([z, b.reduce_sum(z, [1])])
    exes = {16: xladist.compile(build(16, 2), backend=backend),
            96: xladist.compile(build(96, 3), backend=backend)}

    def call(i):
        n = 16 if i % 2 else 96
        k = 2 if n == 16 else 3
        x = np.full((n, n), i % 7 + 1, np.float32) * np.arange(n, dtype=np.float32)
        y = np.eye(n, dtype=np.float32) * np.float32(i % 5 + 1)
        z, s = exes[n](x, y)
        want = x @ y + x * np.float32(k)
        return np.allclose(z, want, rtol=1e-6) and np.allclose(s, want.sum(1), rtol=1e-5)
    with ThreadPoolExecutor(4) as pool:
        ok = list(pool.map(call, range(200)))
    assert ok.count(False) == 0


def test_a_call_from_inside_its_own_call_is_named_not_a_hang():
    """A custom-call target that calls the executable running it: with one call at a time
    that call would wait for itself for ever; it is an error naming the module."""
    inner = []

    def park(instr, args):
        if not inner:
            inner.append(True)
            exe(np.zeros(64, np.float32))
        return args[0].copy()
    register_custom_call(PARK, park)
    try:
        exe = xladist.compile(_module(), backend="cpu")
        with pytest.raises(xladist.errors.ExecutionError, match="called again from inside"):
            exe(np.zeros(64, np.float32))
        x = np.arange(64, dtype=np.float32)  # and the executable still works
        np.testing.assert_array_equal(exe(x)[0], _want(x))
    finally:
        CUSTOM_CALLS.pop(PARK, None)


def _in_child(check, seconds: int) -> int:
    """os.fork(); the child exits 0 when check() is true, 1 when false, 2 when it raised,
    and dies by SIGALRM after `seconds` (counted stuck); the parent gets its wait status."""
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # (a test timeout plugin's handler)
        signal.alarm(seconds)
        try:
            os._exit(0 if check() else 1)
        finally:
            os._exit(2)
    return os.waitpid(pid, 0)[1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_a_call_calls_the_executable():
    """A fork while another thread is inside a call (multiprocessing's fork start method
    in a threaded program): the child has no such thread, so the executable must not wait
    for it to finish its call."""
    release = threading.Event()
    parked = []

    def park(instr, args):
        if not parked:
            parked.append(True)
            release.wait(10)
        return args[0].copy()
    register_custom_call(PARK, park)
    try:
        exe = xladist.compile(_module(), backend="cpu")
        t = threading.Thread(target=exe, args=(np.ones(64, np.float32),))
        t.start()
        while not parked:
            threading.Event().wait(0.001)
        x = np.arange(64, dtype=np.float32)
        status = _in_child(lambda: np.array_equal(exe(x)[0], _want(x)), seconds=5)
        release.set()
        t.join(10)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        release.set()
        CUSTOM_CALLS.pop(PARK, None)


def _tanh_module(name: str):
    b = XlaBuilder(name)
    x = b.parameter(0, "f32[16]", name="x")
    return b.build(b.tanh(x) * 2.0)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_another_thread_compiles_compiles_too(monkeypatch, tmp_path):
    """A fork while another thread is inside LLVM (a thread compiling; xladist's own
    background GEMM build): llvmlite's lock, held by that thread, stayed held in the child
    for ever, and the child's first compile hung (8 of 10 forks beside a compiling
    thread). The fork now waits for LLVM's current call to end. Here the compiling thread
    is parked inside an llvmlite call (held there by the test) when the fork is asked for."""
    from xladist.compiler import llvm_worker
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path))
    inside, release = threading.Event(), threading.Event()
    real = llvm_worker.optimize

    def parked_optimize(*args, **kwargs):  # the parent's compiling thread, in LLVM's lock
        import llvmlite.binding.ffi as ffi
        with ffi.lib._lock:
            inside.set()
            release.wait(10)
        return real(*args, **kwargs)
    monkeypatch.setattr(llvm_worker, "optimize", parked_optimize)
    monkeypatch.setenv("XLADIST_COMPILE_JOBS", "1")
    t = threading.Thread(target=xladist.compile, args=(_tanh_module("parent_side"),))
    t.start()
    assert inside.wait(30)
    threading.Timer(0.3, release.set).start()  # the fork waits for it

    def child() -> bool:
        monkeypatch.setattr(llvm_worker, "optimize", real)
        x = np.linspace(-1, 1, 16, dtype=np.float32)
        got = xladist.compile(_tanh_module("child_side"))(x)[0]
        return np.allclose(got, np.tanh(x) * 2, rtol=1e-6)
    status = _in_child(child, seconds=20)
    release.set()
    t.join(30)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
