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
