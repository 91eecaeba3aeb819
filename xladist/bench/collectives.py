"""``xladist bench collectives``: xladist's collectives against raw mpi4py, nccl-tests style.

For all-reduce, all-gather, all-to-all, reduce-scatter and collective-permute at each message
size, times xladist's function and the same operation done directly with mpi4py buffer calls
on preallocated buffers, in the same run, and prints time, algorithm bandwidth, bus bandwidth
(nccl-tests' definitions), the number of wrong elements in xladist's result, and the ratio
xladist/raw.

Run ``xladist bench collectives [-n N] [--sizes 8,1K,64M] [--iters K]`` (or ``python -m
xladist.bench.collectives ...``). Outside mpiexec it starts its ranks under mpiexec with an
environment tuned for this machine (harness.RANK_ENV):

* ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` = 1 GiB: glibc otherwise mmaps and
  unmaps every large buffer -- MPICH's 32 MiB scratch of each large all-reduce/reduce-scatter
  and our fresh result arrays -- and page-faults them in again each call (measured 1.5-2x);
* BLAS/OpenMP single-threaded: with more ranks than cores extra threads only contend;
* MPICH's async progress thread stays off (far slower on an oversubscribed machine).

Size = bytes of the buffer nccl-tests names: all-reduce the buffer, all-gather the output,
reduce-scatter the input, all-to-all the send buffer, permute the buffer.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from xladist.environment import check_count
from xladist.errors import InputError

from .harness import MAX_SIZE, bench_main, fmt_size, parse_size, under_mpi

__all__ = ["DEFAULT_SIZES", "main"]

DEFAULT_SIZES = ("8,32,128,512,2K,8K,32K,128K,512K,1M,4M,16M,64M")
OPS = ("all-reduce", "all-gather", "all-to-all", "reduce-scatter", "collective-permute")


EPILOG = """\
examples:
  xladist bench collectives -n 2                       every op, 8 B to 64 MiB
  xladist bench collectives --ranks 4 --sizes 8,64K,4M  4 ranks, three sizes
  xladist bench collectives -n 2 --ops all-reduce,all-gather --iters 50 --repeats 3
                                                       two ops, 50 calls a round, 3 rounds
  xladist bench collectives -n 2 --reducer max --ops all-reduce
                                                       a non-builtin reducer (an MPI user op)
  xladist bench collectives -n 2 --aa --sizes 1M       + raw2/raw: raw MPI on other buffers
  xladist bench collectives -n 2 --mpiexec /opt/mpich/bin/mpiexec
                                                       start the ranks with this mpiexec
  xladist bench collectives -n 2 --in-loop             another table: an all-reduce in a
                                                       compiled while loop (its options:
                                                       xladist bench collectives --in-loop --help)
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="xladist bench collectives", description=__doc__.split(
        "\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, default=2, help="MPI ranks (default 2)")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"comma-separated message sizes in bytes (default {DEFAULT_SIZES})")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " +
                   ",".join(OPS))
    p.add_argument("--iters", type=int, default=0,
                   help="timed iterations per size (default: scaled to the size)")
    p.add_argument("--repeats", type=int, default=5,
                   help="alternating xladist/raw timing rounds; the best of each is shown")
    p.add_argument("--reducer", default="sum", choices=REDUCERS,
                   help="what all-reduce and reduce-scatter combine with: sum (float32, MPI "
                        "builtin), max (float32 maximum, NaN-propagating: an MPI user op), "
                        "bf16-sum, custom (a select-based computation); the raw column is "
                        "MPI's builtin sum/max on the same bytes (default sum)")
    p.add_argument("--aa", action="store_true",
                   help="also time the raw call on a second set of buffers in the same rounds "
                        "(column raw2/raw): how much raw MPI moves from itself on this machine")
    p.add_argument("--mpiexec", default=None,
                   help="launcher used when not under MPI (default: the mpich wheel's "
                        "mpiexec, else the one on PATH; xladist/collectives/mpiexec.py)")
    return p


# ------------------------------------------------------------------------------------------------

def _larger_magnitude(a, b):
    # A select-based custom reducer, as `select(compare(abs a, abs b, GE), a, b)` would be.
    return np.where(np.abs(a) >= np.abs(b), a, b)


_REDUCER_HLO = """HloModule bench_reducers
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
add_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] add(a, b)
}
max_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] maximum(a, b)
}
larger_magnitude {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  aa = f32[] abs(a)
  ab = f32[] abs(b)
  ge = pred[] compare(aa, ab), direction=GE
  ROOT r = f32[] select(ge, a, b)
}
ENTRY e {
  x = f32[4] parameter(0)
  y = bf16[4] parameter(1)
  s = f32[4] all-reduce(x), replica_groups={}, to_apply=add_f32
  h = bf16[4] all-reduce(y), replica_groups={}, to_apply=add_bf16
  m = f32[4] all-reduce(x), replica_groups={}, to_apply=max_f32
  c = f32[4] all-reduce(x), replica_groups={}, to_apply=larger_magnitude
  ROOT t = (f32[4], bf16[4], f32[4], f32[4]) tuple(s, h, m, c)
}
"""


# --reducer name -> (operand dtype, xladist reducer, raw builtin op name, raw wire dtype).
# The raw column is MPI's builtin op on the same bytes and element count: the speed a
# reducer MPI lacks (NaN-propagating max, bf16 sum, any computation) is held against.  The
# reducers carry the cpu backend's compiled kernels, as in a compiled program's run
# (xladist/runtime/mpi_context.py).
def _reducers():
    import ml_dtypes

    from xladist.collectives.reduction import Reducer
    from xladist.compiler.program import compiled_reducers
    from xladist.hlo.parser import parse_module

    k = compiled_reducers(parse_module(_REDUCER_HLO))

    def into(kernel):
        def run(a, b, out):
            if not kernel.combine_into(a, b, out):
                np.copyto(out, kernel(a, b), casting="unsafe")
        return run

    def compiled(kind, fn, name, kernel):
        # As the runtime builds it (xladist/runtime/mpi_context.py): the kernel for folds (from
        # Python and, by address, natively: xladist/collectives/ordered.py), and its native
        # MPI_User_function for MPI user ops.
        return Reducer(kind, fn, name, into(kernel), kernel.mpi_function,
                       kernel.kernel_address)

    return {
        # The compiled f32 add: from ordered.FLOAT_FROM the ordered path, as in a program.
        "sum": (np.dtype(np.float32), compiled("sum", np.add, "sum", k["add_f32"]), "SUM",
                np.dtype(np.float32)),
        "max": (np.dtype(np.float32), compiled("max", np.maximum, "max", k["max_f32"]),
                "MAX", np.dtype(np.float32)),
        "bf16-sum": (np.dtype(ml_dtypes.bfloat16),
                     compiled("sum", np.add, "sum", k["add_bf16"]), "SUM", np.dtype(np.int16)),
        "custom": (np.dtype(np.float32),
                   compiled(None, _larger_magnitude, "larger-magnitude",
                            k["larger_magnitude"]), "MAX", np.dtype(np.float32)),
    }


REDUCERS = ("sum", "max", "bf16-sum", "custom")


class _Case:
    """Buffers and the two implementations (xladist, raw mpi4py) of one op at one size."""

    def __init__(self, op: str, nbytes: int, comm, xcomm, reducer: str, reducers: dict):
        from mpi4py import MPI

        import xladist.collectives as C

        dtype, red, raw_op, wire = reducers[reducer]
        raw_op = getattr(MPI, raw_op)
        n, r = comm.Get_size(), comm.Get_rank()
        count = max(nbytes // dtype.itemsize, n)
        count -= count % n  # every op here needs a multiple of n elements
        self.op, self.count, self.n = op, count, n
        self.nbytes = count * dtype.itemsize
        self.dtype_name = "bf16" if reducer == "bf16-sum" else "float"
        pattern = (np.arange(count, dtype=np.int64) % 7).astype(dtype)
        # Small integers: every reducer here is exact on them, in any order.
        if reducer == "sum" or reducer == "bf16-sum":
            total = (pattern.astype(np.float64) * n + n * (n - 1) / 2).astype(dtype)
        else:
            total = (pattern.astype(np.float64) + (n - 1)).astype(dtype)
        mine = (pattern.astype(np.float64) + r).astype(dtype)
        if op == "all-reduce":
            x = mine
            self.expected = total
            rbuf = np.empty_like(x)
            xw, rw = x.view(wire), rbuf.view(wire)
            self.raw = lambda: comm.Allreduce(xw, rw, raw_op)
            self.xla = lambda: C.all_reduce(xcomm, x, red, label="bench")
            self.busbw = 2 * (n - 1) / n
        elif op == "all-gather":
            part = count // n
            x = pattern[:part] + r
            self.expected = np.concatenate([pattern[:part] + i for i in range(n)])
            rbuf = np.empty(count, dtype)
            self.raw = lambda: comm.Allgather([x, MPI.BYTE], [rbuf, MPI.BYTE])
            self.xla = lambda: C.all_gather(xcomm, x, 0, label="bench")
            self.busbw = (n - 1) / n
        elif op == "reduce-scatter":
            part = count // n
            x = mine
            self.expected = total[r * part:(r + 1) * part]
            rbuf = np.empty(part, dtype)
            xw, rw = x.view(wire), rbuf.view(wire)
            self.raw = lambda: comm.Reduce_scatter_block(xw, rw, raw_op)
            self.xla = lambda: C.reduce_scatter(xcomm, x, red, 0, label="bench")
            self.busbw = (n - 1) / n
        elif op == "all-to-all":
            part = count // n
            # element value encodes (sender, position) so misplaced blocks are caught
            x = pattern + 8 * r
            self.expected = np.concatenate(
                [(pattern + 8 * s)[r * part:(r + 1) * part] for s in range(n)])
            rbuf = np.empty(count, dtype)
            self.raw = lambda: comm.Alltoall([x, MPI.BYTE], [rbuf, MPI.BYTE])
            self.xla = lambda: C.all_to_all(xcomm, x, 0, label="bench")
            self.busbw = (n - 1) / n
        elif op == "collective-permute":
            dest, src = (r + 1) % n, (r - 1) % n
            x = pattern + r
            self.expected = pattern + src
            rbuf = np.empty_like(x)
            self.raw = lambda: comm.Sendrecv([x, MPI.BYTE], dest, 0, [rbuf, MPI.BYTE], src, 0)
            self.xla = lambda: C.collective_permute(xcomm, x, dest, src, label="bench")
            self.busbw = 1.0
        else:
            raise ValueError(f"unknown op {op!r}; choose from {', '.join(OPS)}")

    def wrong(self) -> int:
        got = self.xla()
        return int(np.count_nonzero(got != self.expected)) + abs(got.size - self.expected.size)


def _time(fn, iters: int, comm) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = (time.perf_counter() - t0) / iters
    # The slowest rank defines the collective's time.
    from mpi4py import MPI

    return comm.allreduce(dt, MPI.MAX)


def _iters_for(nbytes: int, requested: int) -> int:
    if requested:
        return requested
    # ~0.4 GB moved per round for big messages, many iterations for latency-bound ones.
    return int(min(2000, max(8, 4e8 / max(nbytes, 1))))


def _run(args) -> int:
    from mpi4py import MPI

    from xladist.collectives.mpi_communicator import MpiCommunicator

    comm = MPI.COMM_WORLD.Dup()
    xcomm = MpiCommunicator(MPI.COMM_WORLD.Dup(), devices=list(range(comm.Get_size())))
    n, rank = comm.Get_size(), comm.Get_rank()
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    out = sys.stdout if rank == 0 else None
    summary = []
    reducers = _reducers()

    def say(line=""):
        if out:
            print(line, file=out, flush=True)

    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    say(f"# xladist bench collectives: {n} ranks, reducer {args.reducer}; load average {load}; times are the slowest rank's "
        f"mean, best of {args.repeats} alternating rounds")
    say(f"# {MPI.Get_library_version().splitlines()[0].strip()}, mpi4py "
        f"{__import__('mpi4py').__version__}, numpy {np.__version__}")
    for op in ops:
        say()
        say(f"# {op}")
        say(f"# {'size':>8} {'count':>10} {'type':>6} | {'time(us)':>10} {'algbw':>7} "
            f"{'busbw':>7} {'#wrong':>6} | {'raw(us)':>10} {'algbw':>7} {'busbw':>7} | "
            f"{'ratio':>6}" + (f" {'raw2/raw':>8}" if args.aa else ""))
        for nbytes in sizes:
            case = _Case(op, nbytes, comm, xcomm, args.reducer, reducers)
            # --aa: the same raw call on a second set of buffers (other addresses), timed in
            # the same rounds: how far raw MPI moves from itself on this machine.
            other = _Case(op, nbytes, comm, xcomm, args.reducer, reducers) if args.aa else None
            fns = {"raw": case.raw, "xla": case.xla}
            if other is not None:
                fns["raw2"] = other.raw
            iters = _iters_for(case.nbytes, args.iters)
            for f in fns.values():  # warm-up: connections, caches, allocator
                for _ in range(min(iters, 20)):
                    f()
            best = dict.fromkeys(fns, float("inf"))
            for rep in range(args.repeats):
                # Reverse the order every other round so drifting load favours no one.
                for k in (list(fns)[::-1] if rep % 2 else list(fns)):
                    best[k] = min(best[k], _time(fns[k], iters, comm))
            best_raw, best_xla = best["raw"], best["xla"]
            wrong = comm.allreduce(case.wrong(), MPI.SUM)
            alg_x = case.nbytes / best_xla / 1e9
            alg_r = case.nbytes / best_raw / 1e9
            ratio = best_xla / best_raw
            aa = best["raw2"] / best_raw if other is not None else None
            say(f"  {fmt_size(case.nbytes):>8} {case.count:>10} {case.dtype_name:>6} | "
                f"{best_xla * 1e6:>10.2f} {alg_x:>7.3f} {alg_x * case.busbw:>7.3f} {wrong:>6} | "
                f"{best_raw * 1e6:>10.2f} {alg_r:>7.3f} {alg_r * case.busbw:>7.3f} | "
                f"{ratio:>6.3f}" + (f" {aa:>8.3f}" if aa is not None else ""))
            summary.append((op, case.nbytes, best_xla, best_raw, wrong, aa))
            del case, other
    if rank == 0:
        _verdict(summary, say, args.reducer)
    bad = any(row[4] for row in summary)  # wrong elements
    return 1 if bad else 0


def _verdict(summary, say, reducer: str = "sum") -> None:
    """Targets (at n=2): <= 1.10x raw from 1 MiB up (from 64 KiB for all-reduce and
    reduce-scatter with a reducer MPI has no builtin for), <= raw + 20 us at 8 B."""
    say()
    misses = []
    for op, nbytes, tx, tr, wrong, _aa in summary:
        if wrong:
            misses.append(f"{op} {fmt_size(nbytes)}: {wrong} wrong elements")
        reduces = op in ("all-reduce", "reduce-scatter") and reducer != "sum"
        if nbytes >= (1 << 16 if reduces else 1 << 20) and tx > 1.10 * tr:
            misses.append(f"{op} {fmt_size(nbytes)}: {tx / tr:.2f}x raw (target <= 1.10x)")
        if nbytes <= 8 and tx - tr > 20e-6:
            misses.append(f"{op} {fmt_size(nbytes)}: +{(tx - tr) * 1e6:.1f} us over raw "
                          "(target <= +20 us)")
    if misses:
        say("# targets missed: " + "; ".join(misses))
    else:
        say("# all targets met (<= 1.10x raw from 1 MiB, or 64 KiB for a non-builtin reducer; "
            "<= +20 us at 8 B; no wrong results)")
    spread = [aa for _op, nbytes, _tx, _tr, _w, aa in summary
              if aa is not None and nbytes >= 1 << 16]
    if spread:
        say(f"# raw against itself on other buffers (raw2/raw, from 64 KiB): "
            f"{min(spread):.2f}-{max(spread):.2f}x; a ratio inside that spread is within "
            "what raw MPI itself moves here")


def _check(args) -> str | None:
    """What is wrong with the options, before any rank starts (None: nothing)."""
    try:
        check_count(args.ranks, "-n")
        check_count(args.repeats, "--repeats")
    except InputError as e:
        return str(e)
    if args.iters < 0:
        return f"--iters must be >= 0 (0: scaled to the size), got {args.iters}"
    sizes = [s for s in args.sizes.split(",") if s.strip()]
    if not sizes:
        return f"--sizes {args.sizes!r}: no sizes"
    for s in sizes:
        try:
            size = parse_size(s)
        except argparse.ArgumentTypeError as e:
            return f"--sizes: {e}"
        if size > MAX_SIZE:
            return f"--sizes: {s} is over the limit of {fmt_size(MAX_SIZE)}"
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS]
    if unknown or not ops:
        return f"--ops {args.ops!r}: unknown {', '.join(unknown) or 'empty list'}; choose from " \
               f"{', '.join(OPS)}"
    if args.mpiexec and not under_mpi():
        from xladist.errors import XlaDistError

        from xladist.collectives.mpiexec import find_mpiexec
        try:
            find_mpiexec(args.mpiexec)
        except XlaDistError as e:
            return str(e)
    return None


def main(argv: list[str] | None = None, launch=None) -> int:
    """Run the benchmark; outside MPI `launch(args, argv, module=...)` (default: under
    mpiexec here) starts the ranks and returns the job's exit code."""
    return bench_main(argv, launch, _parser, _check, _run, "xladist.bench.collectives")


if __name__ == "__main__":
    sys.exit(main())
