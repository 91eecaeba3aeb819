"""Compile once per launch (xladist/runtime/compile_once.py): `xladist run -n N` compiles in the
launching process and the ranks load that object over the network (the coordination
service) instead of compiling N times.

The ranks get the launcher's object only when they compute the same cache key (same module
text, same schedule, same kernel names, the job's target); a rank that missed would compile
and leave a second object in the cache, so counting objects proves the hand-over. Results
are checked against the corpus's expected outputs (computed by XLA).
"""

from __future__ import annotations

from pathlib import Path

import os
import pytest
import numpy as np

from tests.cli_util import xladist_cli
from tests.paths import ROOT

CASE = ROOT / "tests" / "data" / "corpus" / "jax" / "elementwise_reduce_mesh2"


def _run(tmp_path, cache: str, once: str):
    out = tmp_path / "out.npz"
    proc = xladist_cli("run", str(CASE / "module.hlo"), "-n", "2", "--inputs",
                       str(CASE / "inputs.npz"), "--outputs", str(out), cwd=ROOT, timeout=120,
                       XLADIST_PROGRESS="off", XLADIST_CACHE_DIR=cache,
                       XLADIST_COMPILE_ONCE=once)
    assert proc.returncode == 0, proc.stderr
    got, expected = np.load(out), np.load(CASE / "expected.npz")
    for k in expected.files:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-5)


def _objects(cache: Path) -> list[Path]:
    """The module's objects (not the runtime builtins' one, which every process keeps in its
    own host's cache: runtime_symbols.py)."""
    from xladist.compiler.runtime_symbols import builtins_cache_key
    return sorted(p for p in cache.rglob("*.o") if p.stem != builtins_cache_key())


@pytest.mark.slow
def test_ranks_load_the_launchers_object(tmp_path):
    cache = tmp_path / "kcache"
    _run(tmp_path, str(cache), "1")
    # One object: the launcher's; the ranks hit it (a different key would add a second).
    assert len(_objects(cache)) == 1


@pytest.mark.slow
def test_same_key_as_the_ranks_without_compile_once(tmp_path):
    # The ranks alone produce exactly the object the launcher would have produced.
    alone, once = tmp_path / "alone", tmp_path / "once"
    _run(tmp_path, str(alone), "0")
    _run(tmp_path, str(once), "1")
    assert [p.name for p in _objects(alone)] == [p.name for p in _objects(once)]


@pytest.mark.slow
def test_cache_off_the_ranks_still_get_the_launchers_code(tmp_path, monkeypatch):
    # No kernel cache anywhere: the object travels from the launching process only.
    import xladist
    from xladist.runtime import compile_once
    monkeypatch.setenv("XLADIST_CACHE_DIR", "off")
    served = []
    real = compile_once.CodeStore.get
    monkeypatch.setattr(compile_once.CodeStore, "get",
                        lambda self, key, timeout=600: served.append(real(self, key, timeout))
                        or served[-1])
    module = xladist.load_hlo(CASE / "module.hlo")
    inputs = np.load(CASE / "inputs.npz")
    outs = xladist.run(module, [inputs[k] for k in sorted(inputs.files)], n=2, timeout=60)
    expected = np.load(CASE / "expected.npz")["out0"]
    for d in range(2):
        np.testing.assert_allclose(outs[d][0], expected[d], rtol=1e-5, atol=1e-5)
    # Each rank asked for the module's object once and got it (kernels that are not the
    # module's, compiled once per process elsewhere, are not the launcher's to give).
    assert sum(obj is not None for obj in served) == 2, served


def test_a_rank_compiles_nothing_after_the_launcher(tmp_path, monkeypatch):
    # What a rank does (xladist/runtime/rank.py: the cpu backend with xladist.analysis.schedule's
    # order), with the launcher's store as its only source of code: it compiles nothing.
    import xladist
    from xladist.compiler import kernel_cache
    from xladist.runtime import compile_once
    from xladist.analysis.schedule import schedule_module
    from xladist.compiler.program import CpuProgram
    module = xladist.load_hlo(CASE / "module.hlo")
    monkeypatch.setenv("XLADIST_CACHE_DIR", "off")
    store = compile_once.CodeStore(module, "cpu")
    try:
        kernel_cache.set_remote(store.get)
        fresh = xladist.load_hlo(CASE / "module.hlo")  # a rank loads its own copy
        assert CpuProgram(fresh, schedule_module(fresh)).cached
    finally:
        kernel_cache.set_remote(None)
        store.close()
    assert store.targets == [None]  # compiled once, for this host


@pytest.mark.slow
def test_xladist_run_api_hands_its_object_to_the_ranks(tmp_path, monkeypatch):
    import xladist
    from xladist.runtime import compile_once
    cache = tmp_path / "kcache"
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(cache))
    compiled = []
    real = compile_once._compile
    monkeypatch.setattr(compile_once, "_compile",
                        lambda m, t: (compiled.append(m), real(m, t))[1])
    module = xladist.load_hlo(CASE / "module.hlo")
    inputs = np.load(CASE / "inputs.npz")
    per_device = [[inputs[k][d] for k in sorted(inputs.files, key=lambda s: int(s[3:]))]
                  for d in range(2)]
    outs = xladist.run(module, per_device, n=2, timeout=60)
    expected = np.load(CASE / "expected.npz")
    for d in range(2):
        for j, k in enumerate(sorted(expected.files, key=lambda s: int(s.lstrip("out")))):
            np.testing.assert_allclose(outs[d][j], expected[k][d], rtol=1e-5, atol=1e-5)
    # This process compiled, and the ranks used its key (else a second object).
    assert len(compiled) == 1 and len(_objects(cache)) == 1


def test_compiling_for_a_job_target_leaves_other_threads_and_the_environment_alone(monkeypatch):
    """The launching process compiles for a job's target in a background thread; a user's
    compile in another thread meanwhile keeps this host's target, and nothing is left in
    os.environ. (compile_once.targeting used to set XLADIST_JOB_TARGET for the whole
    process: the other thread compiled for the job's CPU, and two such blocks in two
    threads restored each other's value, leaving one behind.)"""
    import threading

    from xladist.compiler import target as tg
    from xladist.runtime.compile_once import targeting
    monkeypatch.delenv(tg.JOB_TARGET_ENV, raising=False)
    monkeypatch.delenv("XLADIST_TARGET_CPU", raising=False)
    own = tg.host_target().cpu
    job = {"cpu": "haswell" if own != "haswell" else "skylake", "features": "+avx2,+fma",
           "width": None}
    seen, inside, done = {}, threading.Event(), threading.Event()

    def compile_for_the_job():
        with targeting(job):
            seen["job"] = tg.host_target().cpu
            inside.set()
            done.wait(10)
        seen["after"] = tg.host_target().cpu
    t = threading.Thread(target=compile_for_the_job)
    t.start()
    assert inside.wait(10)
    seen["other thread"] = tg.host_target().cpu
    seen["env"] = os.environ.get(tg.JOB_TARGET_ENV)
    done.set()
    t.join(10)
    assert seen == {"job": job["cpu"], "other thread": own, "env": None, "after": own}
    assert tg.JOB_TARGET_ENV not in os.environ
