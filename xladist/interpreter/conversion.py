"""convert, bitcast-convert, reduce-precision and stochastic-convert: the rules live in
xladist/semantics/conversion.py (shared with the deadlock check's folder); registered here."""

from __future__ import annotations

from ..semantics.conversion import (
    bitcast_convert_rule,
    convert_rule,
    reduce_precision_rule,
    stochastic_convert_rule,
)
from .registry import register

register("convert")(convert_rule)
register("bitcast-convert")(bitcast_convert_rule)
register("reduce-precision")(reduce_precision_rule)
register("stochastic-convert")(stochastic_convert_rule)
