"""What the MPI runtime runs: {opcode: "yes" | reason} for every op that needs another
device or the host (families collective, collective_async, p2p, feed). Read by
`xladist ops`; a test keeps it in step with the opcode table."""

from __future__ import annotations

from xladist.hlo.opcodes import OPCODES

DEVICE_FAMILIES = ("collective", "collective_async", "p2p", "feed")

# Each row names the component that runs the op on every rank.
_RUNS = {
    # collectives/<family>.py through xladist/runtime/mpi_context.py (blocking and *-start forms)
    "all-reduce": "xladist.collectives.all_reduce", "all-reduce-start": "xladist.collectives.all_reduce",
    "all-reduce-done": "xladist.collectives.all_reduce",
    "all-gather": "xladist.collectives.all_gather", "all-gather-start": "xladist.collectives.all_gather",
    "all-gather-done": "xladist.collectives.all_gather",
    "reduce-scatter": "xladist.collectives.reduce_scatter",
    "all-to-all": "xladist.collectives.all_to_all",
    "collective-permute": "xladist.collectives.permute",
    "collective-permute-start": "xladist.collectives.permute",
    "collective-permute-done": "xladist.collectives.permute",
    "collective-broadcast": "xladist.collectives.broadcast",
    "ragged-all-to-all": "xladist.collectives.ragged_all_to_all",
    # local to one device: a copy needs no peer
    "copy-start": "interpreter/compiler (local copy)",
    "copy-done": "interpreter/compiler (local copy)",
    # channels: xladist/collectives/p2p.py
    "send": "xladist.collectives.p2p", "send-done": "xladist.collectives.p2p",
    "recv": "xladist.collectives.p2p", "recv-done": "xladist.collectives.p2p",
    # host pipelines: xladist/runtime/feeds/
    "infeed": "xladist.runtime.feeds", "outfeed": "xladist.runtime.feeds",
}

_REASONS: dict[str, str] = {}


def coverage() -> dict[str, str]:
    out = {}
    for name, info in OPCODES.items():
        if info.family not in DEVICE_FAMILIES:
            continue
        out[name] = "yes" if name in _RUNS else _REASONS.get(
            name, "not run by the MPI runtime")
    return out
