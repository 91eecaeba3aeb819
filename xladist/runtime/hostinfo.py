"""What a rank tells the coordination service about its host, and what the job decides
from all of them: the host name, the CPU the code may use, the OpenBLAS kernel.

No numpy here: `set_blas_coretype` must run before numpy loads OpenBLAS (OpenBLAS reads
OPENBLAS_CORETYPE once, when it is loaded), so rank entry points call it first.

One compile, one set of bits (`job_target`): a job whose ranks all report the same target
compiles for exactly that one (the host's own CPU and features: full speed); ranks that
differ -- an AVX-512 node and AVX2 nodes, or a node emulating an older CPU with
XLADIST_TARGET_CPU -- get the highest x86-64 micro-architecture level (x86-64-v2/v3/v4,
the psABI's feature sets) that every one of them runs. Every rank then loads the same
object code, so a replicated computation gives every replica the same bits (kernels
compiled for different CPUs differ: FMA contraction, vector width, polynomial order).
"""

from __future__ import annotations

import os
import socket

__all__ = ["blas_coretype", "cpu_flags", "host_name", "job_target", "set_blas_coretype",
           "target_info", "x86_level"]

HOST_ENV = "XLADIST_HOSTNAME"


def host_name() -> str:
    """This host's name as reports print it (XLADIST_HOSTNAME overrides it)."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


# ---- OpenBLAS --------------------------------------------------------------------------------
# OpenBLAS kernels by the CPU features they need, best first. Some OpenBLAS builds pick
# their AVX2 (Zen/Haswell) kernels on AVX-512 AMD CPUs: matmul 1024 f32 single-threaded
# measured 15.3 ms with the Zen kernel and 8.3 ms with OPENBLAS_CORETYPE=SKYLAKEX on a
# Zen 4 EPYC (XLA: 8.0 ms). A kernel the CPU cannot run dies with SIGILL, so it is only
# named when every feature is present -- on the host that runs it: each rank decides for
# its own host (the launching host's choice is never forced on another).
_CORETYPES = (("SKYLAKEX", {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"}),)


def cpu_flags() -> set[str]:
    """The `flags` of /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f
                         if line.startswith("flags")), set())
    except OSError:
        return set()


def blas_coretype(flags: set[str] | None = None) -> str | None:
    """The OPENBLAS_CORETYPE for a CPU with `flags` (default: this one), or None to keep
    OpenBLAS's own choice."""
    flags = cpu_flags() if flags is None else flags
    for name, needs in _CORETYPES:
        if needs <= flags:
            return name
    return None


def set_blas_coretype() -> None:
    """Choose this host's OpenBLAS kernel, unless the user did (before numpy is imported)."""
    if "OPENBLAS_CORETYPE" not in os.environ:
        name = blas_coretype()
        if name:
            os.environ["OPENBLAS_CORETYPE"] = name


# ---- the code's target -----------------------------------------------------------------------
# The x86-64 psABI micro-architecture levels, as LLVM names their features.
_LEVELS = (
    (2, {"cx16", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3", "sahf"}),
    (3, {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}),
    (4, {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
)
_LEVEL_CPUS = {"x86-64": 1, "x86-64-v2": 2, "x86-64-v3": 3, "x86-64-v4": 4}


def x86_level(cpu: str, features: str) -> int | None:
    """The x86-64 level a target runs (1..4), or None when it cannot be told (another
    architecture, or a named CPU whose features LLVM keeps to itself)."""
    if not features:
        return _LEVEL_CPUS.get(cpu)
    have = {f[1:] for f in features.split(",") if f.startswith("+")}
    level = 1
    for k, needs in _LEVELS:
        if not needs <= have:
            break
        level = k
    return level


def target_info() -> dict:
    """This rank's own target (the host, or XLADIST_TARGET_CPU): what it tells the service."""
    from xladist.compiler.target import own_target
    target, width = own_target()
    return {"triple": target.triple, "cpu": target.cpu, "features": target.features,
            "width": width, "level": x86_level(target.cpu, target.features)
            if target.triple.startswith("x86_64") else None}


class TargetError(ValueError):
    """Ranks whose CPUs share no target (different architectures)."""


def job_target(infos: dict[int, dict], hosts: dict[int, str]) -> tuple[dict, str]:
    """The one target every rank compiles for, from each rank's `target_info()`, and a line
    saying why. `hosts`: rank -> host name (for the messages)."""
    kinds = {(i["triple"], i["cpu"], i["features"], i["width"]) for i in infos.values()}
    first = next(iter(infos.values()))
    if len(kinds) == 1:
        return dict(first), f"{first['cpu']} (every host's own CPU)"
    triples = {i["triple"] for i in infos.values()}
    if len(triples) > 1:
        where = "; ".join(f"{t} on {', '.join(sorted({hosts[r] for r, i in infos.items() if i['triple'] == t}))}"
                          for t in sorted(triples))
        raise TargetError(f"the ranks run on different architectures ({where}): one job "
                          "runs one program, so its hosts must share an architecture")
    triple = first["triple"]
    if triple.startswith("x86_64"):
        levels = [i["level"] or 1 for i in infos.values()]
        level = min(levels)
        cpu = "x86-64" if level == 1 else f"x86-64-v{level}"
    else:
        cpu = "generic"
    mixed = sorted({f"{i['cpu']} on {hosts[r]}" for r, i in infos.items()})
    shown = ", ".join(mixed[:6]) + (f", and {len(mixed) - 6} more" if len(mixed) > 6 else "")
    return ({"triple": triple, "cpu": cpu, "features": "", "width": None, "level": None},
            f"{cpu}, which every host runs (the hosts differ: {shown})")
