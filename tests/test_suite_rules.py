"""Rules the test suite keeps about itself (docs/testing.md)."""

from __future__ import annotations

import re

from tests.paths import TESTS


def test_only_jax_may_be_skipped_for_a_missing_import():
    """A failed import of xladist or of a hard dependency must fail the run. Before, 12
    ``pytest.importorskip`` calls on xladist's own modules and numpy turned a broken import
    into a quiet skip; jax, the one optional dependency, goes through tests/optional.py,
    whose skip reason says it is optional."""
    call = re.compile(r"\bimportorskip\(")
    offenders = [f"{p.relative_to(TESTS)}:{n}"
                 for p in sorted(TESTS.rglob("*.py")) if p.name != "optional.py"
                 and p.name != "test_suite_rules.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if call.search(line)]
    assert not offenders, f"importorskip outside tests/optional.py: {offenders}"
