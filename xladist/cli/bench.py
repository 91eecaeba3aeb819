"""`xladist bench collectives|compute ...`: the benchmarks, each against its alternative.

collectives: xladist's collectives vs the same operations done directly with mpi4py, in
the same run (xladist/collectives/bench.py). compute: the cpu backend vs numpy and, when
installed, jax.jit (benchmarks/compute.py in a checkout).
"""

from __future__ import annotations

import argparse

from ..errors import InputError

HELP = "benchmark collectives (vs raw mpi4py) or compute kernels (vs numpy/jax)"

EPILOG = """\
examples:
  xladist bench collectives -n 2                      all ops, 8 B to 64 MiB
  xladist bench collectives -n 2 --sizes 8,1M,16M --ops all-reduce,all-gather
  xladist bench collectives -n 2 --in-loop            an all-reduce in a compiled while loop
  xladist bench collectives --help                    every option of the collectives table
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["collectives"],
                        help="which benchmark: collectives (example: xladist bench collectives)")
    parser.add_argument("options", nargs=argparse.REMAINDER,
                        help="options of that benchmark (example: -n 2 --sizes 8,1M)")


def run(args) -> int:
    if args.what == "collectives" and "--in-loop" in args.options:
        from xladist.runtime.bench_loop import main
        return main(list(args.options), relaunch=_launch)
    if args.what == "collectives":
        from xladist.collectives.bench import main
        return main(list(args.options), relaunch=_launch)
    raise InputError(f"unknown benchmark {args.what!r}")


def _launch(bench_args, argv: list[str], module: str = "xladist.collectives.bench") -> int:
    """The benchmark's ranks, started like every other job (xladist/runtime/launcher.py: the same
    mpiexec, a process group that Ctrl-C or a timeout stops as a whole)."""
    from xladist.collectives.bench import rank_env
    from xladist.runtime import launcher
    proc = launcher.launch(bench_args.ranks, ["-m", module, *argv],
                           env=rank_env(), mpiexec=bench_args.mpiexec)
    return proc.returncode
