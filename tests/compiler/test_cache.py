"""The kernel cache survives damaged entries: each way a file can be damaged gives one
warning, a recompile and a whole replacement entry, never a crash (a damaged object
loaded into MCJIT used to kill every later run with signal 11)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import xladist
from xladist.compiler import jit, kernel_cache
from xladist.compiler.program import CpuProgram

TEXT = "HloModule cache_me\nENTRY e {\n a = f32[5] parameter(0)\n ROOT n = f32[5] sine(a)\n}\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(tmp_path))
    return tmp_path


def _entry() -> tuple[str, object]:
    prog = CpuProgram(xladist.parse_hlo(TEXT))
    key = jit.cache_key(prog.fingerprint)
    return key, kernel_cache.entry_path(key)


def _run() -> np.ndarray:
    x = np.linspace(-3, 3, 5, dtype=np.float32)
    got = xladist.compile(xladist.parse_hlo(TEXT), backend="cpu")(x)[0]
    np.testing.assert_allclose(got, np.sin(x), rtol=1e-6)
    return got


def _damage(path, how: str, other_path=None) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "header only":
        path.write_bytes(data[: kernel_cache.HEADER_SIZE - 3])
    elif how == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(len(data)))
    elif how == "flipped payload byte":
        b = bytearray(data)
        b[kernel_cache.HEADER_SIZE + len(b) // 3] ^= 0x40
        path.write_bytes(bytes(b))
    elif how == "bare object (old format)":
        path.write_bytes(data[kernel_cache.HEADER_SIZE:])
    elif how == "other version":
        b = bytearray(data)
        b[8] = kernel_cache.FORMAT_VERSION + 1
        path.write_bytes(bytes(b))
    elif how == "foreign entry":  # another module's whole, valid entry under this name
        path.write_bytes(other_path.read_bytes())
    else:
        raise AssertionError(how)


DAMAGE = ["empty", "truncated", "header only", "random bytes", "flipped payload byte",
          "bare object (old format)", "other version", "foreign entry"]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_entry_warns_once_recompiles_and_is_replaced(cache, how):
    key, path = _entry()
    good = path.read_bytes()
    other = CpuProgram(xladist.parse_hlo(TEXT.replace("sine", "cosine")))
    other_path = kernel_cache.entry_path(jit.cache_key(other.fingerprint))
    _damage(path, how, other_path)
    assert path.read_bytes() != good
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = CpuProgram(xladist.parse_hlo(TEXT))
        _run()
    cache_warnings = [w for w in caught if issubclass(w.category, kernel_cache.KernelCacheWarning)]
    assert not prog.cached and len(cache_warnings) == 1, [str(w.message) for w in caught]
    assert str(path) in str(cache_warnings[0].message)
    # replaced by a whole entry: the next compile is a silent cache hit
    assert kernel_cache.decode(key, path.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernel_cache.KernelCacheWarning)
        assert CpuProgram(xladist.parse_hlo(TEXT)).cached
    assert not list(path.parent.glob("*.tmp"))


def test_entry_header_round_trip_and_every_field_checked():
    key = "ab" * 32
    blob = kernel_cache.encode(key, b"payload")
    assert kernel_cache.decode(key, blob) == b"payload"
    with pytest.raises(ValueError, match="another cache key"):
        kernel_cache.decode("cd" * 32, blob)
    with pytest.raises(ValueError, match="payload is 8 bytes"):
        kernel_cache.decode(key, blob + b"x")
    with pytest.raises(ValueError, match="checksum"):
        kernel_cache.decode(key, blob[:-1] + b"X")
    with pytest.raises(ValueError, match="not an xladist"):
        kernel_cache.decode(key, b"\x7fELF" + blob[4:])


_WRITER = """
import sys, numpy as np, xladist
text = sys.argv[1]
x = np.linspace(-3, 3, 5, dtype=np.float32)
for _ in range(3):
    got = xladist.compile(xladist.parse_hlo(text), backend="cpu")(x)[0]
    assert np.allclose(got, np.sin(x), rtol=1e-6)
print("ok")
"""


@pytest.mark.slow
def test_concurrent_processes_writing_the_same_entry(cache):
    """Four processes (as ranks do) compile and store the same entry at once; each
    runs correctly and the entry left behind is whole."""
    env = dict(os.environ, XLADIST_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, TEXT], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    key, path = _entry()
    assert kernel_cache.decode(key, path.read_bytes())
    assert not list(path.parent.glob("*.tmp"))


def test_an_unwritable_cache_only_costs_time(cache):
    os.chmod(cache, 0o500)
    try:
        _run()
        _run()
    finally:
        os.chmod(cache, 0o700)


def test_the_cache_key_hashes_every_rule_codegen_emits():
    """Codegen emits the complex formulas of the module scalar_ops imports them from: a
    change there must change the key, wherever that module lives (it moved from the
    interpreter to xladist/semantics/); so must every other semantics rule."""
    from pathlib import Path

    from xladist.compiler.codegen import scalar_ops
    from xladist.semantics import order
    hashed = jit.hashed_sources()
    assert Path(scalar_ops.cx.__file__).resolve() in hashed
    assert Path(order.__file__).resolve() in hashed
    assert Path(scalar_ops.__file__).resolve() in hashed


_BUILTINS_PROBE = """
import ctypes, sys
import llvmlite.binding as llvm
if sys.argv[1] == "no-llvm-codegen":  # this process must not compile the builtins itself
    def refuse(self, module):
        raise AssertionError("the builtins were compiled, not loaded from the cache")
    llvm.TargetMachine.emit_object = refuse
from xladist.compiler import runtime_symbols
import struct
# half -> float; the half travels in the low 16 bits of a float register (x86-64, aarch64)
widen = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(
    runtime_symbols.resolved()["__extendhfsf2"])
print(*(widen(struct.unpack("<f", struct.pack("<HH", bits, 0))[0]) for bits in (0x3C00, 0xC100)))
"""


def test_runtime_builtins_object_comes_from_the_cache_in_the_next_process(cache):
    """The builtins' object (runtime_symbols.py) is compiled by the first process and loaded
    by the next one from this host's cache; the loaded code converts as the compiled one."""
    from xladist.compiler.runtime_symbols import builtins_cache_key

    def probe(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _BUILTINS_PROBE, mode],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "XLADIST_CACHE_DIR": str(cache)})

    refused = probe("no-llvm-codegen")  # an empty cache: it must compile, and may not
    assert refused.returncode != 0 and "were compiled, not loaded" in refused.stderr
    first = probe("compile")
    assert first.returncode == 0, first.stderr
    assert kernel_cache.entry_path(builtins_cache_key()).exists()
    second = probe("no-llvm-codegen")
    assert second.returncode == 0, second.stderr
    assert first.stdout.split() == second.stdout.split() == ["1.0", "-2.5"]


def _key(i: int, shard: str = "ab") -> str:
    return shard + f"{i:062x}"


def test_the_cache_is_bounded_least_recently_used_first(cache, monkeypatch):
    """A stream of distinct modules grew the cache without bound (~5 KB per small module on
    disk). With XLADIST_CACHE_MAX_MB each `key[:2]` folder keeps at most 1/256 of it: a
    store evicts that folder's least recently used entries (a hit counts as a use), never
    one used in the last minute, never the one just written; old temporary files of
    crashed writers go too, a writer's fresh one stays."""
    monkeypatch.setenv("XLADIST_CACHE_MAX_MB", "0")  # filled without a bound first
    budget = 4 * (1 << 20) // kernel_cache.SHARDS
    payload = bytes(3000)
    size = len(kernel_cache.encode(_key(0), payload))
    for i in range(300):
        kernel_cache.store(_key(i), payload)
        path = kernel_cache.entry_path(_key(i))
        t = 1_000_000 + i  # written long ago, in this order
        os.utime(path, (t, t))
    folder = kernel_cache.entry_path(_key(0)).parent
    stale, fresh = folder / ".x.o.1.tmp", folder / ".x.o.2.tmp"
    stale.write_bytes(b"partial")
    os.utime(stale, (1_000_000, 1_000_000))
    fresh.write_bytes(b"partial")
    monkeypatch.setenv("XLADIST_CACHE_MAX_MB", "4")  # 16 KiB per folder
    # Entry 250 is read again (a hit): now the most recently used, it must survive.
    assert kernel_cache.load(_key(250)) == payload
    assert os.path.getmtime(kernel_cache.entry_path(_key(250))) > 1_000_300
    kernel_cache.store(_key(300), payload)  # prunes the folder it wrote into
    left = sorted(p.name for p in folder.glob("*.o"))
    assert sum((folder / n).stat().st_size for n in left) <= budget
    assert len(left) == budget // size, left
    assert _key(300) + ".o" in left and _key(250) + ".o" in left
    # the others kept are the most recently written ones
    assert _key(299) + ".o" in left and _key(0) + ".o" not in left
    assert not stale.exists() and fresh.exists()
    # another folder is pruned by its own stores only
    kernel_cache.store(_key(0, "cd"), payload)
    assert kernel_cache.load(_key(0, "cd")) == payload


def test_the_bound_never_evicts_what_was_used_in_the_last_minute(cache, monkeypatch):
    monkeypatch.setenv("XLADIST_CACHE_MAX_MB", "0.001")  # smaller than one entry
    for i in range(20):
        kernel_cache.store(_key(i), bytes(3000))
    # all were written just now: other processes may be about to read them
    assert len(list(kernel_cache.entry_path(_key(0)).parent.glob("*.o"))) == 20
    monkeypatch.setenv("XLADIST_CACHE_MAX_MB", "0")  # 0: no bound
    for i in range(20):
        path = kernel_cache.entry_path(_key(i))
        os.utime(path, (1_000_000, 1_000_000))
    kernel_cache.store(_key(99), bytes(3000))
    assert len(list(kernel_cache.entry_path(_key(0)).parent.glob("*.o"))) == 21


def test_the_cache_bound_is_checked_before_anything_runs(monkeypatch):
    from xladist import environment
    from xladist.errors import InputError

    monkeypatch.setenv("XLADIST_CACHE_MAX_MB", "-1")
    with pytest.raises(InputError, match="XLADIST_CACHE_MAX_MB='-1'.*MiB"):
        environment.check()
