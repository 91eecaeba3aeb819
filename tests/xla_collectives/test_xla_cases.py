"""XLA's own collective tests (xladist.conformance.xla_cases) run for real under MPI.

Every case runs through the conformance kit (`xladist conformance`'s own machinery:
xladist/conformance/xla.py makes each case a unit, runner.py runs the cases of one device
count and backend in one MPI job, with `xladist.run` inside it, and judges every device's
outputs against the values XLA's test states). A case that aborts its job fails alone: the
kit starts a new job for the cases after it.

Cases with a known xladist gap (`case.gap`, e.g. "issue 30 item 6: ...") are strict xfails:
they must fail until the gap closes, and then the mark must go. Cases on 8 devices
oversubscribe the machine's cores and are marked slow; cases tagged "huge" (2^31-element
buffers) run only with XLADIST_XLA_HUGE=1. Skipped XLA tests and the reasons are in README.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xladist.conformance import runner
from xladist.conformance.suite import Plan
from xladist.conformance.xla import HUGE_ENV, PREFIX
from xladist.conformance.xla_cases import CASES

HERE = Path(__file__).resolve().parent
BACKENDS = ("interpreter", "cpu")
CASE_TIMEOUT_S = 60.0    # xladist.run's deadline for any wait on another rank

BY_NAME = {c.name: c for c in CASES}


def _params():
    out = []
    for case in CASES:
        for backend in BACKENDS:
            marks = []
            if case.n > 4:
                marks.append(pytest.mark.slow)
            if case.gap:
                marks.append(pytest.mark.xfail(strict=True, reason=case.gap))
            if "huge" in case.tags:
                marks += [pytest.mark.slow, pytest.mark.skipif(
                    not os.environ.get(HUGE_ENV),
                    reason=f"needs several GiB per rank; {HUGE_ENV}=1 runs it")]
            out.append(pytest.param(case.name, backend, marks=marks,
                                    id=f"{backend}-{case.name}"))
    return out


@pytest.fixture(scope="session")
def xla_results(request):
    """(case name, backend) -> the kit's verdict; each (device count, backend) runs once,
    for the cases selected in this session."""
    cache: dict = {}

    def get(name: str, backend: str):
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
            plan = Plan(select=tuple(PREFIX + w for w in wanted))
            result = runner.run_count(n, runner.Options(backend=backend, plan=plan,
                                                        timeout=CASE_TIMEOUT_S))
            for verdict in result.verdicts:
                cache[(verdict.case.removeprefix(PREFIX), backend)] = verdict
        return cache[(name, backend)]
    return get


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name, backend", _params())
def test_xla_case(name, backend, xla_results):
    case = BY_NAME[name]
    verdict = xla_results(name, backend)
    assert verdict.status == "pass", (
        f"{case.test} ({case.source}) on {case.n} devices, backend {backend}: "
        f"{verdict.status}: {verdict.detail}")


def test_readme_lists_every_skipped_test():
    """Each XLA test left out is in README.md with its reason (and nothing else is)."""
    from xladist.conformance.xla_cases import SKIPPED
    text = (HERE / "README.md").read_text()
    for test, reason in SKIPPED.items():
        assert f"**{test}**: {reason}" in text, test
    assert text.count("**") // 2 == len(SKIPPED)
