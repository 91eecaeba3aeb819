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
# and that must fail one row, not the whole pytest session. One process answers every row's
# question in turn (a module path in, a JSON verdict out) instead of one process per row;
# its compile fills the session's kernel cache, from which the cluster's compile of the same
# module then loads (runtime/compile_once.py computes the same key). A probe that crashed or
# did not answer within JOB_TIMEOUT_S fails its row, and the next row starts a new one.
_PROBE = """
import json, sys, traceback
import xladist
for line in sys.stdin:
    try:
        xladist.compile(xladist.load_hlo(line.rstrip("\\n")), backend="cpu")
        verdict = {"ok": True}
    except xladist.UnsupportedError as e:
        verdict = {"unsupported": str(e)}
    except Exception:
        verdict = {"error": traceback.format_exc()}
    print(json.dumps(verdict), flush=True)
"""
_cpu_verdicts: dict[Path, str | None] = {}


class _Prober:
    def __init__(self):
        self.proc = None

    def ask(self, module: Path) -> dict:
        import json
        import selectors
        if self.proc is None or self.proc.poll() is not None:
            import tempfile
            self.stderr = tempfile.TemporaryFile("w+")  # a pipe nobody reads could fill up
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _PROBE], cwd=ROOT, env=dict(os.environ,
                                                                   PYTHONPATH=str(ROOT)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                text=True, bufsize=1)
        try:
            self.proc.stdin.write(f"{module}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died: said below
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(JOB_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        self.close()  # crashed (EOF) or no answer in time
        self.stderr.seek(0)
        return {"error": f"the probe process ended (exit {self.proc.returncode}) or did "
                         f"not answer in {JOB_TIMEOUT_S} s:\n{self.stderr.read()[-3000:]}"}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def cpu_probe():
    prober = _Prober()
    yield prober
    prober.close()


def _cpu_skip_reason(folder: Path, prober: _Prober) -> str | None:
    """Why the cpu backend cannot run this module yet (None: it compiles)."""
    if folder not in _cpu_verdicts:
        verdict = prober.ask(folder / "module.hlo")
        assert "error" not in verdict, (f"compiling {folder.name} with the cpu backend "
                                        f"failed:\n{verdict['error']}")
        _cpu_verdicts[folder] = (f"cpu backend cannot compile {folder.name} yet: "
                                 f"{verdict['unsupported']}") if "unsupported" in verdict \
            else None
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


def _skip_if_cpu_cannot(folder: Path, backend: str, prober: _Prober) -> None:
    if backend == "cpu":
        reason = _cpu_skip_reason(folder, prober)
        if reason:
            pytest.skip(reason)


@pytest.mark.slow  # ~120 cluster calls of 2-8 ranks (a cluster per rank count)
@pytest.mark.timeout(JOB_TIMEOUT_S + 30)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("folder", CASES, ids=[f"{p.parent.name}/{p.name}" for p in CASES])
def test_corpus_case(folder: Path, backend: str, cluster_run, cpu_probe):
    meta = cu.meta(folder)
    _skip_if_cpu_cannot(folder, backend, cpu_probe)
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
def test_corpus_case_through_the_cli(name: str, backend: str, tmp_path: Path, cpu_probe):
    folder = cu.CORPUS / name
    meta = cu.meta(folder)
    _skip_if_cpu_cannot(folder, backend, cpu_probe)
    n = meta["num_devices"]
    out = tmp_path / "out.npz"
    proc = run_cli(folder / "module.hlo", n, folder / "inputs.npz", out, "--backend", backend,
                   "--timeout", str(COLLECTIVE_TIMEOUT_S))
    assert proc.returncode == 0, (f"{folder.name} ({backend}, -n {n}) exited "
                                  f"{proc.returncode}:\n{proc.stderr[-4000:]}")
    with np.load(out) as got_npz:
        got = {k: got_npz[k] for k in got_npz.files}
    _check_outputs(folder, meta, got, backend)
