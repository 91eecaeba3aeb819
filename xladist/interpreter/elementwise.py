"""Element-wise unary and binary ops: the rules live in xladist/semantics/elementwise.py
(XLA:CPU's corner cases, shared with the deadlock check's folder); registered here."""

from __future__ import annotations

from ..semantics.elementwise import BINARY, UNARY, binary_rule, unary_rule
from .registry import register

register(*UNARY)(unary_rule)
register(*BINARY)(binary_rule)
