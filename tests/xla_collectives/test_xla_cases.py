"""XLA's own collective tests (xladist.conformance.xla_cases) run for real under MPI.

Every case runs with `xladist.run` inside `mpiexec -n K` (K = the case's device count) on
both backends, and every device's outputs are compared with the values XLA's test states.
The cases of one device count and backend share one MPI job (runner.py): a job per case
would spend most of the suite starting interpreters. A case that aborts its job fails alone:
the cases after it run in a new job.

Cases with a known xladist gap (`case.gap`, e.g. "issue 30 item 6: ...") are strict xfails:
they must fail until the gap closes, and then the mark must go. Every case is marked slow
(it starts ranks); cases tagged "huge" (2^31-element buffers) run only with
XLADIST_XLA_HUGE=1. Skipped XLA tests and the reasons are in README.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from xladist.collectives.mpiexec import find_mpiexec
from xladist.conformance.xla_cases import CASES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BACKENDS = ("interpreter", "cpu")
CASE_TIMEOUT_S = 60.0    # xladist.run's deadline for any wait on another rank
JOB_START_S = 60.0       # interpreter start-up and imports, per job, on a loaded machine
PER_CASE_S = 30.0        # a generous bound per case (compiles included) before a job is killed

BY_NAME = {c.name: c for c in CASES}


def _params():
    out = []
    for case in CASES:
        for backend in BACKENDS:
            # Every case runs inside an mpiexec job: the slow tier (docs/testing.md).
            marks = [pytest.mark.slow]
            if case.gap:
                marks.append(pytest.mark.xfail(strict=True, reason=case.gap))
            if "huge" in case.tags:
                marks += [pytest.mark.skipif(
                    not os.environ.get("XLADIST_XLA_HUGE"),
                    reason="needs several GiB per rank; XLADIST_XLA_HUGE=1 runs it")]
            out.append(pytest.param(case.name, backend, marks=marks,
                                    id=f"{backend}-{case.name}"))
    return out


def _run_jobs(n: int, backend: str, names: list[str]) -> dict[str, dict]:
    """Results of `names` (all with n devices) on `backend`, in as many MPI jobs as it takes:
    a job that dies ends the case it was running, and the rest go on in a new one."""
    results: dict[str, dict] = {}
    remaining = list(names)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="xla-cases-") as tmp:
        while remaining:
            job = Path(tmp) / f"job{len(results)}.json"
            out = Path(tmp) / f"results{len(results)}.jsonl"
            job.write_text(json.dumps({"cases": remaining, "backend": backend,
                                       "timeout": CASE_TIMEOUT_S, "results": str(out)}))
            cmd = [find_mpiexec(), "-n", str(n), sys.executable, str(HERE / "runner.py"),
                   str(job)]
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            try:
                output, _ = proc.communicate(timeout=JOB_START_S + PER_CASE_S * len(remaining))
                how = f"the job exited with {proc.returncode}"
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                output, _ = proc.communicate()
                how = "the job hung and was killed"
            lines = out.read_text().splitlines() if out.exists() else []
            started = None
            for line in lines:
                r = json.loads(line)
                if r["status"] == "started":
                    started = r["name"]
                else:
                    results[r["name"]] = r
                    started = None
            done = [n_ for n_ in remaining if n_ in results]
            tail = "\n".join(output.splitlines()[-40:])
            if started is not None:   # the job died in this case: it fails, the rest go on
                results[started] = {"name": started, "status": "crashed",
                                    "detail": f"{how} while running it:\n{tail}"}
                done.append(started)
            elif len(done) < len(remaining):   # died before its first case
                for name in remaining:
                    results.setdefault(name, {"name": name, "status": "crashed",
                                              "detail": f"{how} before this case:\n{tail}"})
                break
            remaining = [n_ for n_ in remaining if n_ not in done]
    return results


@pytest.fixture(scope="session")
def xla_results(request):
    """(case name, backend) -> result; each (device count, backend) runs once, for the
    cases selected in this session."""
    cache: dict[tuple[str, str], dict] = {}

    def get(name: str, backend: str) -> dict:
        if (name, backend) not in cache:
            n = BY_NAME[name].n
            wanted = []
            for item in request.session.items:
                spec = getattr(item, "callspec", None)
                if spec is None or item.originalname != "test_xla_case":
                    continue
                other, other_backend = spec.params["name"], spec.params["backend"]
                if other_backend == backend and BY_NAME[other].n == n \
                        and (other, backend) not in cache:
                    wanted.append(other)
            if name not in wanted:
                wanted.append(name)
            for other, r in _run_jobs(n, backend, wanted).items():
                cache[(other, backend)] = r
        return cache[(name, backend)]
    return get


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name, backend", _params())
def test_xla_case(name, backend, xla_results):
    case = BY_NAME[name]
    r = xla_results(name, backend)
    assert r["status"] == "pass", (
        f"{case.test} ({case.source}) on {case.n} devices, backend {backend}: "
        f"{r['status']}: {r.get('detail', '')}")


def test_readme_lists_every_skipped_test():
    """Each XLA test left out is in README.md with its reason (and nothing else is)."""
    from xladist.conformance.xla_cases import SKIPPED
    text = (HERE / "README.md").read_text()
    for test, reason in SKIPPED.items():
        assert f"**{test}**: {reason}" in text, test
    assert text.count("**") // 2 == len(SKIPPED)
