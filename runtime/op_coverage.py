"""What the MPI runtime runs: {opcode: "yes" | reason} for every op that needs another
device or the host (families collective, collective_async, p2p, feed). Read by
`xladist ops`; a test keeps it in step with the opcode table."""

from __future__ import annotations

from xladist.hlo.opcodes import OPCODES

DEVICE_FAMILIES = ("collective", "collective_async", "p2p", "feed")

# Each row names the component that runs the op on every rank.
_RUNS = {
    # collectives/<family>.py through runtime/mpi_context.py (blocking and *-start forms)
    "all-reduce": "collectives.all_reduce", "all-reduce-start": "collectives.all_reduce",
    "all-reduce-done": "collectives.all_reduce",
    "all-gather": "collectives.all_gather", "all-gather-start": "collectives.all_gather",
    "all-gather-done": "collectives.all_gather",
    "reduce-scatter": "collectives.reduce_scatter",
    "all-to-all": "collectives.all_to_all",
    "collective-permute": "collectives.permute",
    "collective-permute-start": "collectives.permute",
    "collective-permute-done": "collectives.permute",
    "collective-broadcast": "collectives.broadcast",
    "ragged-all-to-all": "collectives.ragged_all_to_all",
    # local to one device: a copy needs no peer
    "copy-start": "interpreter/compiler (local copy)",
    "copy-done": "interpreter/compiler (local copy)",
    # channels: collectives/p2p.py
    "send": "collectives.p2p", "send-done": "collectives.p2p",
    "recv": "collectives.p2p", "recv-done": "collectives.p2p",
    # host pipelines: runtime/feeds/
    "infeed": "runtime.feeds", "outfeed": "runtime.feeds",
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
