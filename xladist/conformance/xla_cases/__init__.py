"""XLA's collective tests as data: `CASES` (every case), `SKIPPED` ({test: reason}).

One module per XLA source file; records.py has the record types. Imports nothing of
xladist (the cases ship in the wheel for a conformance kit; runners live elsewhere).
"""

from __future__ import annotations

from . import (all_gather_e2e, collective_ops, collective_ops_e2e, collective_pipeline_parallelism,
               p2p_ops_e2e, ragged_all_to_all_e2e, reduce_scatter_e2e, replicated_io_feed)
from .records import Array, Case

__all__ = ["Array", "Case", "CASES", "SKIPPED", "SOURCES"]

SOURCES = (collective_ops, collective_ops_e2e, all_gather_e2e, ragged_all_to_all_e2e,
           replicated_io_feed, collective_pipeline_parallelism, reduce_scatter_e2e, p2p_ops_e2e)

CASES: list[Case] = [c for m in SOURCES for c in m.CASES]
SKIPPED: dict[str, str] = {k: v for m in SOURCES for k, v in m.SKIPPED.items()}

_names = [c.name for c in CASES]
if len(set(_names)) != len(_names):
    raise ValueError("xla_cases: duplicate case names "
                     f"{sorted({n for n in _names if _names.count(n) > 1})}")
