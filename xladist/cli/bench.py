"""`xladist bench collectives [--in-loop] ...`: the harnesses of xladist/bench/, started
like every other job (xladist/runtime/launcher.py)."""

from __future__ import annotations

import argparse

HELP = "benchmark xladist's collectives against raw mpi4py on this machine"

EPILOG = """\
benchmarks:
  collectives            each collective at each message size, xladist vs raw mpi4py
  collectives --in-loop  an all-reduce inside a compiled while loop (xladist.run), per
                         iteration, vs a loop of raw mpi4py Allreduce

examples:
  xladist bench collectives -n 2                      all ops, 8 B to 64 MiB
  xladist bench collectives -n 2 --sizes 8,1M,16M --ops all-reduce,all-gather
  xladist bench collectives -n 2 --in-loop            an all-reduce in a compiled while loop
  xladist bench collectives --help                    every option of the collectives table
  xladist bench collectives --in-loop --help          every option of the in-loop table

The compute benchmarks (the cpu backend against numpy and jax.jit) are scripts in a
checkout's benchmarks/ folder (python benchmarks/compute.py), not subcommands.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Metavars: argparse's errors name an argument by it ("required: {collectives}"), and
    # named them `what, options` before, as if the options were required too.
    parser.add_argument("what", choices=["collectives"], metavar="{collectives}",
                        help="which benchmark: collectives (example: xladist bench collectives)")
    options = parser.add_argument("options", nargs=argparse.REMAINDER, metavar="OPTIONS",
                                  help="options of that benchmark (example: -n 2 --sizes 8,1M)")
    options.required = False  # none: the benchmark's defaults


def run(args) -> int:
    if "--in-loop" in args.options:
        from ..bench.in_loop import main
    else:
        from ..bench.collectives import main
    return main(list(args.options), launch=_launch)


def _launch(bench_args, argv: list[str], module: str) -> int:
    """The benchmark's ranks, started like every other job (xladist/runtime/launcher.py: the same
    mpiexec, a process group that Ctrl-C or a timeout stops as a whole)."""
    from ..bench.harness import rank_env
    from ..runtime import launcher
    proc = launcher.launch(bench_args.ranks, ["-m", module, *argv],
                           env=rank_env(), mpiexec=bench_args.mpiexec)
    from . import ranks_never_started
    return ranks_never_started(proc, proc.service, bench_args.ranks, "bench") or \
        proc.returncode
