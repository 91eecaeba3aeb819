"""What every `xladist bench` harness shares: the size syntax, the ranks' environment, the
launch under mpiexec when run outside MPI, and the entry that checks the options before any
rank starts (`bench_main`)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

_CHILD_FLAG = "XLADIST_BENCH_CHILD"
_RANK_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", _CHILD_FLAG)
RANK_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "1073741824",
    "MALLOC_TRIM_THRESHOLD_": "1073741824",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MPIR_CVAR_ASYNC_PROGRESS": "0",
}


def parse_size(text: str) -> int:
    """'8', '32K', '1M', '64MiB' -> bytes (binary units)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = 1
    if t and t[-1] in "KMG":
        mult = 1024 ** ("KMG".index(t[-1]) + 1)
        t = t[:-1]
    try:
        value = int(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 8, 32K, 1M)")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def fmt_size(b: int) -> str:
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return f"{b // m}{unit}"
    return str(b)


# The largest message a run may ask for: the ranks hold several buffers of it each.
MAX_SIZE = 1 << 30


def under_mpi() -> bool:
    return any(v in os.environ for v in _RANK_VARS)


def rank_env() -> dict[str, str]:
    """What the benchmark's ranks add to the environment: RANK_ENV (tuned for this machine,
    see collectives.py's docstring) and the flag that tells a rank it is one."""
    return {**RANK_ENV, _CHILD_FLAG: "1"}


def relaunch(args, argv, module: str) -> int:
    """`python -m <module>` outside MPI: the same command under mpiexec. (`xladist bench`
    launches through xladist/runtime/launcher.py instead: cli/bench.py.)"""
    from xladist.collectives.mpiexec import find_mpiexec
    from xladist.errors import XlaDistError

    env = dict(os.environ)
    env.update(rank_env())
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        mpiexec = find_mpiexec(args.mpiexec)
    except XlaDistError as e:
        print(f"xladist bench: error: {e}", file=sys.stderr)
        return 2
    cmd = [mpiexec, "-n", str(args.ranks), sys.executable, "-m", module, *argv]
    return subprocess.call(cmd, env=env)


def bench_main(argv, launch, parser, check, run, module: str) -> int:
    """Every benchmark's entry: parse, check the options before any rank starts, then
    either start the ranks (`launch(args, argv, module=module)`, default `relaunch`: `python
    -m module` under mpiexec) or, in a rank, run."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    problem = check(args)
    if problem:
        print(f"xladist bench: error: {problem}", file=sys.stderr)
        return 2
    if not under_mpi():
        return (launch or relaunch)(args, argv, module=module)
    from xladist.collectives import deadline
    from xladist.runtime.rank import world
    from xladist.runtime.service import client
    # Every rank reaches its job's coordination service, as the ranks of every other job do:
    # `xladist bench` then knows whether its launcher started them (cli/bench.py); world()
    # also unlinks MPICH's node segment once mapped, as every rank does (runtime/node_shm.py).
    client.for_rank(world())
    with deadline.abort_on_exception(traceback=True):
        return run(args)
