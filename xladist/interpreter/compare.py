"""compare, select and clamp: the rules live in xladist/semantics/compare.py (shared with
the deadlock check's folder); registered here."""

from __future__ import annotations

from ..semantics.compare import clamp_rule, compare_rule, select_rule
from .registry import register

register("compare")(compare_rule)
register("select")(select_rule)
register("clamp")(clamp_rule)
