"""Per-rank infeed and outfeed pipelines.

`pipeline.py` holds the sources, sinks, the prefetching producer and `Feeds` (what a rank's
executable calls); `items.py` checks and copies items against an infeed's shape; `npz.py` is
the per-rank npz file format with its crash-safe outfeed log; `order.py` refuses modules
whose feeds are not ordered by tokens; `host.py` serves Python sources and sinks of the
launching process to the ranks over a local socket.
"""

from .pipeline import (
    DEFAULT_PREFETCH,
    CallbackSink,
    Feeds,
    FunctionSource,
    IterableSource,
    NpzSink,
    NpzSource,
    Prefetcher,
    check_args,
    check_paths,
    from_args,
    load_function,
    make_feeds,
    make_sink,
    make_source,
    placements_of,
    recover_outfeeds,
    running_single,
)

__all__ = [
    "DEFAULT_PREFETCH", "CallbackSink", "Feeds", "FunctionSource", "IterableSource", "NpzSink",
    "NpzSource", "Prefetcher", "check_args", "check_paths", "from_args", "load_function",
    "make_feeds", "make_sink", "make_source", "placements_of", "recover_outfeeds",
    "running_single",
]
