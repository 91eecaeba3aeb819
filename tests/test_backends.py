"""Pluggable backends: a package registers one through the `xladist.backends` entry-point
group (docs/BACKENDS.md). tests/backend_plugin/ is such a package with its dist-info (no pip
call): on sys.path, `--backend toy` finds it; results are compared with XLA's expected
outputs from the corpus, and the plugin's own counter proves its code ran."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import xladist
from xladist import backends
from xladist.errors import UnsupportedError
from tests.cli_util import xladist_cli

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "tests" / "backend_plugin"
CASE = ROOT / "tests" / "data" / "corpus" / "jax" / "elementwise_reduce_mesh2"

MODULE = """HloModule m

ENTRY main {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  a = f32[3] add(x, y)
  ROOT m = f32[3] multiply(a, y)
}
"""


@pytest.fixture
def plugin_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN))
    yield
    backends.BACKENDS.pop("toy", None)
    sys.modules.pop("xladist_toy_backend", None)


def test_entry_point_backend_runs_a_module(plugin_on_path):
    exe = xladist.compile(xladist.parse_hlo(MODULE), backend="toy")
    assert exe.backend == "toy"
    before = type(exe).adds
    x, y = np.float32([1, 2, 3]), np.float32([4, 5, 6])
    (got,) = exe(x, y)
    np.testing.assert_array_equal(got, (x + y) * y)
    assert type(exe).adds == before + 1  # the plugin's own add rule ran


def test_unknown_backend_lists_the_plugins(plugin_on_path):
    with pytest.raises(UnsupportedError, match=r"backend 'nope' is not available.*toy"):
        xladist.compile(xladist.parse_hlo(MODULE), backend="nope")


def test_without_the_package_the_backend_is_unknown():
    with pytest.raises(UnsupportedError, match="backend 'toy' is not available"):
        xladist.compile(xladist.parse_hlo(MODULE), backend="toy")


@pytest.mark.slow
def test_cli_runs_a_collective_module_on_two_ranks_with_the_plugin(tmp_path):
    out = tmp_path / "out.npz"
    proc = xladist_cli("run", str(CASE / "module.hlo"), "-n", "2", "--backend", "toy",
                       "--inputs", str(CASE / "inputs.npz"), "--outputs", str(out),
                       cwd=ROOT, timeout=120, XLADIST_PROGRESS="off",
                       PYTHONPATH=os.pathsep.join([str(ROOT), str(PLUGIN)]))
    assert proc.returncode == 0, proc.stderr
    got, expected = np.load(out), np.load(CASE / "expected.npz")
    for k in expected.files:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-5)


def test_compile_verifies_with_the_runs_counts_not_the_headers():
    """Issue 30 item 1: a module without counts runs as the run says. The executable's
    verifier takes the counts from the device context the runtime passes (here 2 replicas);
    compiled on its own, the same module is one device and its all-gather over 2 is refused."""
    from xladist.errors import VerifierError
    from xladist.semantics.device import DeviceContext

    text = """HloModule m
ENTRY e {
  p = f32[1] parameter(0)
  ROOT g = f32[2] all-gather(p), dimensions={0}, replica_groups={{0,1}}
}
"""
    module = xladist.parse_hlo(text)

    class TwoReplicas(DeviceContext):
        replica_count, num_partitions = 2, 1

    xladist.compile(module, backend="interpreter", device=TwoReplicas())
    with pytest.raises(VerifierError, match="replica id 1 is out of range"):
        xladist.compile(module, backend="interpreter")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_async_group_its_done_cannot_complete_is_refused(backend):
    """An async-start wrapping sends/recvs (XLA's 'async group') runs on both backends, its
    async-done completing the transfers the wrapped root returns (tests/mpi/
    test_async_p2p_groups.py runs them); a send the root does not return could never be
    completed: refused at compile, naming the async-start and the send."""
    text = """HloModule m, replica_count=2
group {
  d = f32[2] parameter(0)
  t = token[] parameter(1)
  s = (f32[2], u32[], token[]) send(d, t), frontend_attributes={_xla_send_recv_source_target_pairs={{0,1}}}
  ROOT g = ((f32[2], u32[], token[])) tuple(s)
}
ENTRY e {
  p = f32[2] parameter(0)
  t = token[] after-all()
  a = ((f32[2], token[]), ((f32[2], u32[], token[])), s32[]) async-start(p, t), calls=group
  ROOT r = ((f32[2], u32[], token[])) async-done(a)
}
"""
    xladist.compile(xladist.parse_hlo(text), backend=backend)
    broken = text.replace("ROOT g = ((f32[2], u32[], token[])) tuple(s)",
                          "g = ((f32[2], u32[], token[])) tuple(s)\n  ROOT x = f32[2] copy(d)")
    broken = broken.replace("((f32[2], u32[], token[])), s32[]) async-start",
                            "f32[2], s32[]) async-start")
    broken = broken.replace("ROOT r = ((f32[2], u32[], token[])) async-done",
                            "ROOT r = f32[2] async-done")
    with pytest.raises(UnsupportedError, match=r"a \(line \d+\): send s in the async "
                                               r"computation group must be an element of "
                                               r"its root tuple"):
        xladist.compile(xladist.parse_hlo(broken), backend=backend)


def test_checking_a_builtin_backends_name_does_not_import_it():
    """A launcher checks the backend before its ranks start; the cpu backend's import
    (codegen, llvmlite) is the ranks' to pay: the check does not load it, and an unknown
    name is still refused with the known ones listed."""
    import subprocess
    code = ("import sys\nfrom xladist.backends import check_backend\n"
            "from xladist.errors import UnsupportedError\n"
            "check_backend('cpu'); check_backend('interpreter')\n"
            "assert 'xladist.compiler.program' not in sys.modules, 'cpu backend imported'\n"
            "assert 'xladist.interpreter.executable' not in sys.modules\n"
            "try:\n    check_backend('nonesuch')\nexcept UnsupportedError as e:\n"
            "    assert 'cpu' in str(e) and 'interpreter' in str(e), e\nelse:\n"
            "    raise SystemExit('nonesuch accepted')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert proc.returncode == 0, proc.stderr
