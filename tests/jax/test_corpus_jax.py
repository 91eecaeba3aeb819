"""The multi-device corpus: JAX-made SPMD modules run on N ranks over MPI.

Cases: tests/data/corpus/jax/ (made by the project's owners) and
tests/data/corpus/jax_extra/ (made by tools/gen_corpus.py). Each one runs on the session's
persistent N-rank cluster (tests/cluster_fixture.py: `xladist.Cluster`, the module loaded,
run and released per case; the same results as `xladist.run`, bit for bit), and every output
is compared with JAX's recorded per-device results: integers and preds bit-exact, floats
with np.allclose under case.json's rtol/atol (a per-output `out_tol` overrides), bf16
decoded from its uint16 bits first. A case whose case.json has `expected_from` records a
numpy reference's results instead, because XLA:CPU cannot execute it (ragged-all-to-all).
A few cases (CLI_CASES) also run through the CLI in a fresh process, exactly as a user would
(`xladist run MODULE -n N --inputs inputs.npz --outputs out.npz`), so the one-shot path with
its npz files stays checked against JAX too.

Rows are parametrized by backend. The `cpu` rows are skipped, with the reason, while
`xladist.compile(module, backend="cpu")` refuses the module (UnsupportedError) or the backend
does not exist; once it compiles, the row runs for real and must pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xladist
from xladist.io import decode

from tests import corpus_util as cu
from tests.cli_util import xladist_cli
from tests.paths import ROOT

SETS = ("jax", "jax_extra")
BACKENDS = ("interpreter", "cpu")
# A job of up to 8 ranks on 2 cores: slow to start, but never minutes.
JOB_TIMEOUT_S = 240
COLLECTIVE_TIMEOUT_S = 120


CASES = cu.case_folders(*SETS)


# The probe runs in its own process: a backend under construction may crash the interpreter,
# and that must fail one row, not the whole pytest session.
_PROBE = """
import sys
import xladist
try:
    xladist.compile(xladist.load_hlo(sys.argv[1]), backend="cpu")
except UnsupportedError as e:
    print(e)
    sys.exit(3)
"""
_cpu_verdicts: dict[Path, str | None] = {}


def _cpu_skip_reason(folder: Path) -> str | None:
    """Why the cpu backend cannot run this module yet (None: it compiles)."""
    if folder not in _cpu_verdicts:
        proc = subprocess.run([sys.executable, "-c", _PROBE, str(folder / "module.hlo")],
                              check=False, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                              text=True, timeout=JOB_TIMEOUT_S)
        if proc.returncode == 3:
            _cpu_verdicts[folder] = (f"cpu backend cannot compile {folder.name} yet: "
                                     f"{proc.stdout.strip()}")
        else:
            assert proc.returncode == 0, (f"compiling {folder.name} with the cpu backend "
                                          f"failed (exit {proc.returncode}):\n"
                                          f"{proc.stderr[-3000:]}")
            _cpu_verdicts[folder] = None
    return _cpu_verdicts[folder]


def run_cli(module: Path, n: int, inputs: Path, outputs: Path, *extra: str,
            timeout: float = JOB_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`xladist run` in a fresh process, as a user would start it."""
    return xladist_cli("run", module, "-n", n, "--inputs", inputs, "--outputs", outputs,
                       *extra, timeout=timeout)


def test_corpus_sets_present():
    names = {p.name for p in CASES}
    assert len([p for p in CASES if p.parent.name == "jax"]) == 10
    assert "psum_basic_mesh4" in names


# Cases that also run through the CLI (one launch each, a fresh process): a bf16 case and
# the README's mesh, on both backends between them.
CLI_CASES = [("jax/psum_basic_mesh4", "cpu"), ("jax_extra/psum_bf16_mesh2", "interpreter")]


def _check_outputs(folder: Path, meta: dict, got: dict, backend: str) -> None:
    """`got` {out<i>: array stacked over devices} against JAX's recorded results."""
    module = xladist.load_hlo(folder / "module.hlo")
    leaves = [s for _, s in module.entry.root.shape.leaves() if s.is_array]
    with np.load(folder / "expected.npz") as want_npz:
        got_keys = sorted(got, key=lambda k: int(k[3:]))
        want_keys = sorted(want_npz.files, key=lambda k: int(k[3:]))
        assert got_keys == want_keys == [f"out{i}" for i in range(meta["num_outputs"])]
        for key, shape in zip(want_keys, leaves):
            want = decode(want_npz[key], shape)
            cu.assert_output(decode(got[key], shape), want, meta, key,
                             f"{folder.name} {key} ({backend})")


def _skip_if_cpu_cannot(folder: Path, backend: str) -> None:
    if backend == "cpu":
        reason = _cpu_skip_reason(folder)
        if reason:
            pytest.skip(reason)


@pytest.mark.slow  # ~120 cluster calls of 2-8 ranks (a cluster per rank count)
@pytest.mark.timeout(JOB_TIMEOUT_S + 30)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("folder", CASES, ids=[f"{p.parent.name}/{p.name}" for p in CASES])
def test_corpus_case(folder: Path, backend: str, cluster_run):
    meta = cu.meta(folder)
    _skip_if_cpu_cannot(folder, backend)
    n = meta["num_devices"]
    outs = cluster_run(folder / "module.hlo", folder / "inputs.npz", n=n, backend=backend,
                       timeout=COLLECTIVE_TIMEOUT_S)
    assert len(outs) == n
    got = {f"out{i}": np.stack([outs[d][i] for d in range(n)])
           for i in range(len(outs[0]))}
    _check_outputs(folder, meta, got, backend)


@pytest.mark.slow  # one mpiexec job each
@pytest.mark.timeout(JOB_TIMEOUT_S + 30)
@pytest.mark.parametrize("name, backend", CLI_CASES)
def test_corpus_case_through_the_cli(name: str, backend: str, tmp_path: Path):
    folder = cu.CORPUS / name
    meta = cu.meta(folder)
    _skip_if_cpu_cannot(folder, backend)
    n = meta["num_devices"]
    out = tmp_path / "out.npz"
    proc = run_cli(folder / "module.hlo", n, folder / "inputs.npz", out, "--backend", backend,
                   "--timeout", str(COLLECTIVE_TIMEOUT_S))
    assert proc.returncode == 0, (f"{folder.name} ({backend}, -n {n}) exited "
                                  f"{proc.returncode}:\n{proc.stderr[-4000:]}")
    with np.load(out) as got_npz:
        got = {k: got_npz[k] for k in got_npz.files}
    _check_outputs(folder, meta, got, backend)
