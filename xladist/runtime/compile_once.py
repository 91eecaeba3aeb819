"""Compile once per launch: the launching process compiles, the N ranks only load.

Without this every rank of `xladist run -n N` runs codegen and LLVM on the same module at
the same time (N compiles on a machine with fewer cores than ranks), and the per-host
kernel cache (compiler/jit.py) only helps the *next* run. Here the launcher compiles the
module exactly as a rank will (same module text, same schedule: xladist.analysis.schedule's, so the
kernel names and thus the cache key are the same) and hands the ranks the object code
through the kernel cache:
  * caching on (the default): the object lands in the user's cache, every rank hits it;
  * caching off (XLADIST_CACHE_DIR=off): the object goes to a cache directory private to
    this job, the ranks get XLADIST_CACHE_DIR pointing there, and it is removed afterwards.
A module the launcher cannot compile is left to the ranks: they report the error with
their rank, as before. XLADIST_COMPILE_ONCE=0 turns this off (for measuring it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading

from xladist.errors import XlaDistError

ENV = "XLADIST_COMPILE_ONCE"
CACHE_ENV = "XLADIST_CACHE_DIR"


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "no", "false")


@contextlib.contextmanager
def compiled_for_ranks(module, backend: str | None, background: bool = True):
    """Compile `module` here; yields the environment additions the ranks need ({} when
    nothing is compiled). The job-private cache, if one was made, is removed on exit.

    `background`: compile in a thread while mpiexec starts the ranks (their Python and MPI
    start-up takes longer than the compile), so the launch waits for nothing; a rank that
    gets to its compile before the object is stored misses the cache and compiles itself,
    as it would without this (the cache writes whole files by rename, so it never sees half
    an object)."""
    if backend != "cpu" or not enabled():
        yield {}
        return
    from xladist.compiler import kernel_cache
    private = None
    env: dict[str, str] = {}
    old = os.environ.get(CACHE_ENV)
    if kernel_cache.cache_dir() is None:
        # This process uses the job's private cache until the job ends (set here, in the
        # main thread, since the compile may run in another).
        private = tempfile.mkdtemp(prefix="xladist-code-")
        env[CACHE_ENV] = os.environ[CACHE_ENV] = private
    worker = threading.Thread(target=_compile, args=(module,), daemon=True,
                              name="xladist-compile-once")
    try:
        if background:
            worker.start()
        else:
            worker.run()
        yield env
    finally:
        if background:
            worker.join()
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
            if old is None:
                os.environ.pop(CACHE_ENV, None)
            else:
                os.environ[CACHE_ENV] = old


def _compile(module) -> None:
    from xladist.compiler.program import CpuProgram

    from xladist.analysis.schedule import schedule_module
    try:
        CpuProgram(module, schedule_module(module))  # stores the object in the kernel cache
    except XlaDistError:
        pass  # the ranks compile and report it themselves, with their rank
