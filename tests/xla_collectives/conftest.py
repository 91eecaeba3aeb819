"""A summary after the XLA cases run: per XLA source file and backend, the XLA tests whose
cases all passed (and the cases behind them)."""

from __future__ import annotations

from collections import Counter, defaultdict

_OUTCOMES = ("passed", "failed", "xfailed", "xpassed", "skipped", "error")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    from xladist.conformance.xla_cases import CASES
    by_name = {c.name: c for c in CASES}
    cases: Counter = Counter()
    tests: dict = defaultdict(set)
    for outcome in _OUTCOMES:
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            if "test_xla_case[" not in nodeid or getattr(report, "when", "call") == "teardown":
                continue
            backend, name = nodeid.split("test_xla_case[", 1)[1][:-1].split("-", 1)
            case = by_name.get(name)
            if case is not None:
                cases[(case.source, backend, outcome)] += 1
                tests[(case.source, backend, case.test)].add(outcome)
    if not cases:
        return
    per_test: Counter = Counter()
    for (source, backend, _), outcomes in tests.items():
        worst = next(o for o in ("failed", "error", "xpassed", "xfailed", "skipped", "passed")
                     if o in outcomes)
        per_test[(source, backend, worst)] += 1
    write = terminalreporter.write_line
    write("")
    write("XLA tests per source file (an XLA test passes when all its cases pass):")
    for backend in ("interpreter", "cpu"):
        for source in sorted({s for s, _, _ in cases}):
            parts = [f"{per_test[(source, backend, o)]} {o}" for o in _OUTCOMES
                     if per_test[(source, backend, o)]]
            if parts:
                n = sum(cases[(source, backend, o)] for o in _OUTCOMES)
                write(f"  {backend:<11} {source}: " + ", ".join(parts) + f" ({n} cases)")
