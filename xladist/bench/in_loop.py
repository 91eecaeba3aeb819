"""``xladist bench collectives --in-loop``: an all-reduce inside a compiled while loop.

The program is a while loop of K iterations (K is a parameter, so K=1 and K=large are the
same compiled module and share the kernel cache) whose body all-reduces an f32 buffer. It
runs through the real runtime -- ``xladist.run`` on the cpu backend, one device per rank --
and the per-iteration time is (T(K) - T(1)) / (K - 1): everything paid once per run
(compile-cache lookup, communicator setup, the output exchange) cancels. Next to it, raw
mpi4py does the same op in a Python loop of K ``Allreduce`` calls on preallocated buffers.
Both are timed in the same run, alternating, best of ``--repeats``.

The launch, the rank environment and the size syntax are harness.py's, as for the
collectives table (collectives.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from xladist.environment import check_count
from xladist.errors import InputError

from .harness import MAX_SIZE, bench_main, parse_size

__all__ = ["loop_module", "main"]

DEFAULT_SIZES = "8,512,8K,64K,512K,4M"
REDUCERS = ("sum", "max")


def loop_module(count: int, reducer: str) -> str:
    """HLO text: `x` all-reduced `k` times in a while loop; returns the last result."""
    op = {"sum": "add", "max": "maximum"}[reducer]
    return f"""HloModule bench_in_loop
red {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] {op}(a, b)
}}
cond {{
  p = (s32[], s32[], f32[{count}]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, k), direction=LT
}}
body {{
  p = (s32[], s32[], f32[{count}]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  x = f32[{count}] get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  r = f32[{count}] all-reduce(x), replica_groups={{}}, to_apply=red
  ROOT t = (s32[], s32[], f32[{count}]) tuple(i1, k, r)
}}
ENTRY e {{
  x = f32[{count}] parameter(0)
  k = s32[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], s32[], f32[{count}]) tuple(zero, k, x)
  w = (s32[], s32[], f32[{count}]) while(init), condition=cond, body=body
  ROOT out = f32[{count}] get-tuple-element(w), index=2
}}
"""


EPILOG = """\
examples:
  xladist bench collectives --in-loop -n 2              sum and max, 8 B to 4 MiB
  xladist bench collectives --in-loop --ranks 4 --sizes 8,64K --reducer sum
                                                       4 ranks, two sizes, sum only
  xladist bench collectives --in-loop -n 2 --iters 100 --repeats 2
                                                       K = 100 iterations, 2 rounds
  xladist bench collectives --in-loop -n 2 --mpiexec /opt/mpich/bin/mpiexec
                                                       start the ranks with this mpiexec
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xladist bench collectives --in-loop",
                                description=__doc__.split("\n")[0], epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--in-loop", action="store_true", help="this mode (required)")
    p.add_argument("-n", "--ranks", type=int, default=2, help="MPI ranks (default 2)")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"comma-separated message sizes (default {DEFAULT_SIZES})")
    p.add_argument("--reducer", default="sum,max",
                   help="comma-separated subset of sum,max (default both)")
    p.add_argument("--iters", type=int, default=0,
                   help="loop trip count K (default: scaled to the size)")
    p.add_argument("--repeats", type=int, default=3,
                   help="alternating rounds; the best of each is shown (default 3)")
    p.add_argument("--mpiexec", default=None, help="launcher used when not under MPI")
    return p


def _iters_for(nbytes: int, requested: int) -> int:
    if requested:
        return requested
    return int(min(2000, max(20, 1e8 / nbytes)))


def _check(args) -> str | None:
    try:
        check_count(args.ranks, "-n")
        check_count(args.repeats, "--repeats")
    except InputError as e:
        return str(e)
    if args.iters < 0 or args.iters == 1:
        return f"--iters must be 0 (scaled) or >= 2, got {args.iters}"
    sizes = [s for s in args.sizes.split(",") if s.strip()]
    if not sizes:
        return f"--sizes {args.sizes!r}: no sizes"
    for s in sizes:
        try:
            if parse_size(s) > MAX_SIZE:
                return f"--sizes: {s} is over the limit"
        except argparse.ArgumentTypeError as e:
            return f"--sizes: {e}"
    bad = [r for r in args.reducer.split(",") if r.strip() not in REDUCERS]
    if bad:
        return f"--reducer {args.reducer!r}: unknown {', '.join(bad)}; choose from sum, max"
    return None


def _run(args) -> int:
    from mpi4py import MPI

    from xladist.hlo.parser import parse_module
    from xladist.runtime.api import run

    comm = MPI.COMM_WORLD.Dup()
    # The loop's trip count is an argument, so the deadlock check cannot prove the program
    # and each collective would first exchange its signature (docs/collectives.md); a
    # loop with a constant trip count is proven and pays nothing, which these rows measure.
    os.environ["XLADIST_SIGNATURES"] = "off"
    n, rank = comm.Get_size(), comm.Get_rank()
    out = sys.stdout if rank == 0 else None

    def say(line=""):
        if out:
            print(line, file=out, flush=True)

    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    say(f"# xladist bench collectives --in-loop: {n} ranks; load average {load}; per "
        f"iteration = (T(K) - T(1)) / (K - 1) through xladist.run (cpu backend), raw = a "
        f"Python loop of K mpi4py Allreduce on preallocated buffers / K; best of "
        f"{args.repeats} alternating rounds, slowest rank")
    say(f"# {'reducer':>7} {'size':>8} {'K':>5} | {'xladist(us)':>11} {'raw(us)':>9} "
        f"{'diff(us)':>9} {'ratio':>6} | {'T(1) ms':>8} {'#wrong':>6}")
    wrong_total = 0
    for reducer in [r.strip() for r in args.reducer.split(",") if r.strip()]:
        mpi_op = {"sum": MPI.SUM, "max": MPI.MAX}[reducer]
        for size_text in [s for s in args.sizes.split(",") if s.strip()]:
            nbytes = parse_size(size_text)
            count = max(1, nbytes // 4)
            k = _iters_for(count * 4, args.iters)
            module = parse_module(loop_module(count, reducer))
            # Small integers, exact under both reducers. A sum grows n-fold per round, so
            # the result is checked at K=1 and the sum loop is timed on zeros; max is
            # idempotent and is checked at K too.
            pattern = (np.arange(count) % 7).astype(np.float32)
            xs = np.stack([pattern + d for d in range(n)])
            want = xs.sum(0) if reducer == "sum" else xs.max(0)
            timing_x = np.zeros((n, count), np.float32) if reducer == "sum" else xs

            def xla(trips, x=timing_x, module=module):
                comm.Barrier()
                t0 = time.perf_counter()
                outs = run(module, [x, np.full(n, trips, np.int32)], n=n,
                          check=False, verify=False)
                dt = time.perf_counter() - t0
                return comm.allreduce(dt, MPI.MAX), outs

            sbuf = timing_x[rank].copy()
            rbuf = np.empty_like(sbuf)

            def raw(trips, sbuf=sbuf, rbuf=rbuf, mpi_op=mpi_op):
                allreduce = comm.Allreduce
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(trips):
                    allreduce(sbuf, rbuf, mpi_op)
                return comm.allreduce(time.perf_counter() - t0, MPI.MAX)

            # Correctness at K=1 (and warm-up: the first run compiles into the cache).
            _, outs = xla(1, xs)
            wrong = sum(int(np.count_nonzero(outs[d][0] != want)) for d in range(n))
            if reducer == "max":
                _, outs = xla(k, xs)
                wrong += sum(int(np.count_nonzero(outs[d][0] != want)) for d in range(n))
            wrong = comm.allreduce(wrong, MPI.MAX)
            wrong_total += wrong
            raw(min(k, 20))
            t1 = tk = tr = float("inf")
            for rep in range(args.repeats):
                order = ("x", "r") if rep % 2 == 0 else ("r", "x")
                for which in order:
                    if which == "x":
                        t1 = min(t1, xla(1)[0])
                        tk = min(tk, xla(k)[0])
                    else:
                        tr = min(tr, raw(k) / k)
            per = max(tk - t1, 0.0) / (k - 1)
            say(f"  {reducer:>7} {size_text:>8} {k:>5} | {per * 1e6:>11.2f} {tr * 1e6:>9.2f} "
                f"{(per - tr) * 1e6:>9.2f} {per / tr:>6.2f} | {t1 * 1e3:>8.2f} {wrong:>6}")
    return 1 if wrong_total else 0


def main(argv: list[str] | None = None, launch=None) -> int:
    return bench_main(argv, launch, _parser, _check, _run, "xladist.bench.in_loop")


if __name__ == "__main__":
    sys.exit(main())
