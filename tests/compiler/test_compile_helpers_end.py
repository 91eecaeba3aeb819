"""Compile helpers (xladist/compiler/compile_pool.py, llvm_worker.py) end with the process
that started them, whatever ends it, also in the middle of a compile; and a helper killed
by a signal is reported as killed, by the signal's name, naming the unit it held.

A unit that takes LLVM seconds (many loops in one function) keeps a helper busy long
enough to end its parent in the middle; the checks poll with deadlines well under that."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from xladist.compiler import compile_pool
from xladist.compiler.target import host_target

from tests.paths import ROOT

# LLVM's time grows faster than the loop count: ~2.5 s for 200 loops on an idle core here,
# ~10x that for 500 (the exact pipeline), so a helper given this is busy for many seconds.
SLOW_LOOPS = 500


def slow_ir(n: int = SLOW_LOOPS) -> str:
    lines = ["define void @f(ptr %p, i64 %n) {", "entry:", "  br label %l0"]
    for i in range(n):
        prev = "entry" if i == 0 else f"l{i - 1}"
        after = f"l{i + 1}" if i + 1 < n else "done"
        lines += [f"l{i}:", f"  %i{i} = phi i64 [0, %{prev}], [%j{i}, %l{i}]",
                  f"  %q{i} = getelementptr double, ptr %p, i64 %i{i}",
                  f"  %v{i} = load double, ptr %q{i}",
                  f"  %w{i} = fmul double %v{i}, {i}.5",
                  f"  store double %w{i}, ptr %q{i}",
                  f"  %j{i} = add i64 %i{i}, 1",
                  f"  %c{i} = icmp slt i64 %j{i}, %n",
                  f"  br i1 %c{i}, label %l{i}, label %{after}"]
    return "\n".join(lines + ["done:", "  ret void", "}", ""])


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its new parent to reap it does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _ends_within(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while _running(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return not _running(pid)


# A parent that starts one helper, prints its pid and hands it the slow unit.
_PARENT = """
import sys
from xladist.compiler import compile_pool
from xladist.compiler.target import host_target
sys.path.insert(0, sys.argv[1])
from tests.compiler.test_compile_helpers_end import slow_ir
helper = compile_pool._Helper()
helper.ready.wait(120)
print(helper.proc.pid, flush=True)
helper.run(0, compile_pool.Job("the slow unit", slow_ir(), True), host_target())
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_helper_ends_with_its_parent_in_the_middle_of_a_compile(sig):
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(ROOT)], cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              stdout=subprocess.PIPE, text=True)
    helper = None
    try:
        helper = int(parent.stdout.readline())
        time.sleep(0.5)  # the helper has the unit and compiles it (seconds)
        parent.send_signal(sig)
        parent.wait(timeout=30)
        # Before: the helper finished the unit (tens of seconds) before it saw its pipe end.
        assert _ends_within(helper, 5), "the helper outlived its parent"
    finally:
        parent.kill()
        parent.wait()
        if helper is not None and _running(helper):
            os.kill(helper, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_helper_killed_while_compiling_is_reported_as_killed():
    helper = compile_pool._Helper()
    try:
        assert helper.ready.wait(120) and helper.alive()
        run = compile_pool._Run([compile_pool.Job("the slow unit", slow_ir(), True)],
                                host_target())
        killer = threading.Timer(0.5, os.kill, (helper.proc.pid, signal.SIGKILL))
        killer.start()
        run.feed(helper)
        killer.join()
        (error,) = run.errors.values()
        assert isinstance(error, compile_pool.CompileError)
        # Before: "ended (exit code -9)".
        assert "was killed by SIGKILL" in str(error) and "the slow unit" in str(error)
    finally:
        helper.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_cancelled_compile_stops_and_kills_the_helpers_compiling_for_it(monkeypatch):
    # Two equal slow units: this thread compiles one, the helper the other. cancel() kills
    # the helper at once; compile_jobs raises Cancelled once this thread's unit is done.
    monkeypatch.setenv(compile_pool.ENV, "2")
    assert compile_pool.start_helpers(compile_pool.MIN_UNITS, wait=120) == 1
    (helper,) = compile_pool._helpers(1, compile_pool.MIN_UNITS)
    jobs = [compile_pool.Job(f"slow unit {i}", slow_ir(200), True) for i in range(2)]
    event = threading.Event()
    outcome: list = []

    def compile_them() -> None:
        with compile_pool.cancellable(event):
            try:
                outcome.append(compile_pool.compile_jobs(jobs, host_target()))
            except BaseException as e:  # noqa: BLE001 -- looked at below
                outcome.append(e)

    worker = threading.Thread(target=compile_them)
    worker.start()
    time.sleep(0.5)
    compile_pool.cancel(event)
    assert _ends_within(helper.proc.pid, 5), "the helper went on compiling"
    worker.join(120)
    assert isinstance(outcome[0], compile_pool.Cancelled), outcome
    with compile_pool.cancellable(event), pytest.raises(compile_pool.Cancelled):
        compile_pool.compile_jobs(jobs, host_target())  # set before: nothing starts
