"""Serialized executables (xladist/compiler/serialized.py, `xladist compile`): a `.xlx` file
runs without compiling, with the results of the interpreter / XLA's expected outputs; a
damaged file or one made for another CPU or version is refused with a clear error."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

import xladist
from xladist.analysis.schedule import schedule_module
from xladist.compiler import jit, serialized
from xladist.compiler.runtime_symbols import builtins_cache_key
from xladist.errors import InputError, UnsupportedError
from tests.cli_util import xladist_cli
from tests.paths import ROOT

CASE = ROOT / "tests" / "data" / "corpus" / "jax" / "elementwise_reduce_mesh2"
MLP = ROOT / "benchmarks" / "mlp_train_step.hlo"


@pytest.fixture
def mlp_xlx(tmp_path):
    path = tmp_path / "step.xlx"
    serialized.write_executable(path, MLP.read_text(), schedule_module)
    return path


def _mlp_args(module):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in module.entry.parameters]


def test_load_executable_runs_without_compiling(mlp_xlx, monkeypatch):
    monkeypatch.setenv("XLADIST_CACHE_DIR", "off")

    def no_compile(*a, **k):
        raise AssertionError("load_executable compiled")
    monkeypatch.setattr(jit, "compile_ir", no_compile)
    exe = xladist.load_executable(mlp_xlx)
    args = _mlp_args(exe.module)
    expected = xladist.compile(xladist.load_hlo(MLP), backend="interpreter")(*args)
    for g, e in zip(exe(*args), expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def _rewrite(path, edit, edit_code=lambda code: code):
    """The file with its JSON header (and object code) edited and a valid checksum again."""
    data = path.read_bytes()
    payload = data[serialized._HEAD.size:]
    (hlen,) = struct.unpack_from("<I", payload)
    header = json.loads(payload[4:4 + hlen])
    edit(header)
    h = json.dumps(header).encode()
    payload = struct.pack("<I", len(h)) + h + edit_code(payload[4 + hlen:])
    path.write_bytes(serialized._HEAD.pack(serialized.MAGIC, serialized.FORMAT, len(payload),
                                           hashlib.sha256(payload).digest()) + payload)


def test_other_cpu_features_refused(mlp_xlx):
    def edit(h):
        h["target"]["cpu_features"] += ",+madeup-feature"
    _rewrite(mlp_xlx, edit)
    with pytest.raises(UnsupportedError, match=r"CPU features: the file has \+madeup-feature"):
        xladist.load_executable(mlp_xlx)


def test_a_file_for_a_named_cpu_says_how_to_run_it(tmp_path, monkeypatch):
    """A file compiled with XLADIST_TARGET_CPU=x86-64 (a portable one) is refused without the
    setting with a message saying so, and runs with it. Before, the host that wrote it said
    'compiled for another machine' and listed its ~1,800 characters of CPU features."""
    import platform
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("an x86 CPU name")
    path = tmp_path / "m.xlx"
    text = """HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  ROOT y = f32[8] multiply(x, x)
}"""
    monkeypatch.setenv("XLADIST_TARGET_CPU", "x86-64")
    serialized.write_executable(path, text)
    monkeypatch.delenv("XLADIST_TARGET_CPU")
    with pytest.raises(UnsupportedError) as info:
        xladist.load_executable(path)
    said = str(info.value)
    assert "XLADIST_TARGET_CPU=x86-64 set" in said and len(said) < 500, said
    monkeypatch.setenv("XLADIST_TARGET_CPU", "x86-64")
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(xladist.load_executable(path)(x)[0], x * x)


def test_other_version_refused(mlp_xlx):
    def edit(h):
        h["target"]["xladist"] = "0.0.1"
    _rewrite(mlp_xlx, edit)
    with pytest.raises(UnsupportedError, match="xladist version: file '0.0.1'"):
        xladist.load_executable(mlp_xlx)


def test_other_kernel_plan_refused(mlp_xlx):
    def edit(h):
        h["fingerprint"] += " c9_kernel_from_elsewhere"
    _rewrite(mlp_xlx, edit)
    with pytest.raises(UnsupportedError, match="made for other kernels"):
        xladist.load_executable(mlp_xlx)


@pytest.mark.parametrize("damage", ["flip", "truncate", "magic", "version", "empty"])
def test_damaged_file_is_an_input_error(mlp_xlx, damage):
    data = bytearray(mlp_xlx.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncate":
        data = data[:len(data) - 100]
    elif damage == "magic":
        data[0:3] = b"ELF"
    elif damage == "version":
        data[9] = 99
    else:
        data = bytearray()
    mlp_xlx.write_bytes(bytes(data))
    with pytest.raises(InputError, match="not a valid xladist executable"):
        xladist.load_executable(mlp_xlx)



# A file whose checksum holds but whose content no `xladist compile` writes (another
# writer, a hand edit re-summed). Before, each was a Python traceback from deep inside the
# load (exit 1): "TypeError: expected string or bytes-like object, got 'int'" (the parser),
# "AttributeError: 'str' object has no attribute 'get'" (the target check), "'list' object
# has no attribute 'items'" (the schedule), and "ValueError: truncated object code" on
# rank 0 (jit.unpack_objects, when the ranks loaded the code).
@pytest.mark.parametrize("what", ["text_int", "target_str", "schedule_list", "schedule_order",
                                  "header_list", "code_truncated", "code_empty"])
def test_well_summed_but_malformed_file_is_an_input_error(mlp_xlx, what):
    def edit(h):
        if what == "text_int":
            h["module_text"] = 5
        elif what == "target_str":
            h["target"] = "x86_64"
        elif what == "schedule_list":
            h["schedule"] = [1]
        elif what == "schedule_order":  # an order that is not a list of names
            h["schedule"] = {name: 5 for name in h["schedule"]}
        elif what == "header_list":
            h.clear()

    def edit_code(code):
        return code[:len(code) // 2] if what == "code_truncated" else \
            b"" if what == "code_empty" else code
    if what == "header_list":  # a JSON list, not an object
        _rewrite(mlp_xlx, edit, edit_code)
        data = mlp_xlx.read_bytes()
        payload = data[serialized._HEAD.size:]
        (hlen,) = struct.unpack_from("<I", payload)
        h = b"[1, 2]"
        payload = struct.pack("<I", len(h)) + h + payload[4 + hlen:]
        mlp_xlx.write_bytes(serialized._HEAD.pack(serialized.MAGIC, serialized.FORMAT,
                                                  len(payload),
                                                  hashlib.sha256(payload).digest()) + payload)
    else:
        _rewrite(mlp_xlx, edit, edit_code)
    with pytest.raises(InputError, match="not a valid xladist executable"):
        xladist.load_executable(mlp_xlx)

@pytest.mark.slow
def test_cli_compile_then_run_on_two_ranks(tmp_path):
    xlx, out, cache = tmp_path / "m.xlx", tmp_path / "out.npz", tmp_path / "kcache"
    proc = xladist_cli("compile", str(CASE / "module.hlo"), "-o", str(xlx), cwd=ROOT,
                       timeout=120, XLADIST_CACHE_DIR="off")
    assert proc.returncode == 0, proc.stderr
    proc = xladist_cli("run", str(xlx), "-n", "2", "--inputs", str(CASE / "inputs.npz"),
                       "--outputs", str(out), cwd=ROOT, timeout=120, XLADIST_PROGRESS="off",
                       XLADIST_CACHE_DIR=str(cache))
    assert proc.returncode == 0, proc.stderr
    got, expected = np.load(out), np.load(CASE / "expected.npz")
    for k in expected.files:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-5)
    # Neither the launcher nor a rank compiled the module (a compile would have filled the
    # cache); the runtime builtins' object, which every process that loads code keeps in its
    # host's cache (runtime_symbols.py), is not the module's.
    assert not [p for p in cache.rglob("*.o") if p.stem != builtins_cache_key()]


def test_cli_damaged_file_exit_2(tmp_path):
    bad = tmp_path / "bad.xlx"
    bad.write_bytes(b"XLADIST\x00X" + bytes(60))
    proc = xladist_cli("run", str(bad), "-n", "1", cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert "not a valid xladist executable" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_python_run_and_cluster_take_a_xlx_and_compile_nothing(tmp_path, monkeypatch):
    """xladist.run and xladist.Cluster take a `.xlx` path as `xladist run` does: the ranks
    load its code (no process compiles the module), with XLA's expected results; an
    Executable runs as its module; a .xlx with another backend, or a damaged one, is
    refused before any rank starts."""
    xlx, cache = tmp_path / "m.xlx", tmp_path / "kcache"
    proc = xladist_cli("compile", str(CASE / "module.hlo"), "-o", str(xlx), cwd=ROOT,
                       timeout=120, XLADIST_CACHE_DIR="off")
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("XLADIST_CACHE_DIR", str(cache))
    module = xladist.load_hlo(CASE / "module.hlo")
    with np.load(CASE / "inputs.npz") as npz:
        args = [npz[f"arg{p.parameter_number}"] for p in module.entry.parameters]
    with np.load(CASE / "expected.npz") as npz:  # out{i}: result i, device axis first
        expected = [npz[f"out{i}"] for i in range(len(npz.files))]
    n = args[0].shape[0]

    def check(outs):
        assert len(outs) == n
        for d in range(n):
            for g, w in zip(outs[d], expected, strict=True):
                np.testing.assert_allclose(g, w[d], rtol=1e-5, atol=1e-5)
    one_shot = xladist.run(str(xlx), args, n=n)
    check(one_shot)
    with xladist.Cluster(n=n) as c:
        for outs in (c.run(xlx, args), c.compile(str(xlx)).run(args)):
            for a, b in zip(outs, one_shot):
                assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not [p for p in cache.rglob("*.o") if p.stem != builtins_cache_key()]
    from_exe = xladist.run(xladist.compile(module), args, n=n)
    for a, b in zip(from_exe, one_shot):
        assert all(np.array_equal(u, v) for u, v in zip(a, b))
    with pytest.raises(InputError, match="holds cpu code.*backend='cpu' only"):
        xladist.run(str(xlx), args, n=n, backend="interpreter")
    bad = tmp_path / "bad.xlx"
    bad.write_bytes(b"XLADIST\x00X" + bytes(60))
    with pytest.raises(InputError, match="not a valid xladist executable"):
        xladist.run(str(bad), args, n=n)
