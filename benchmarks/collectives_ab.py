"""Interleaved A/B of two trees' collectives against raw mpi4py, in the same processes.

``xladist bench collectives`` compares one tree with raw; on a shared machine the load
moves between two runs by more than the difference looked for.  Here each rank imports
this tree's ``collectives`` and a baseline tree's (``--baseline``, e.g. the main checkout;
its package is copied under another name, its imports being relative), and times raw
mpi4py, baseline and this tree on the same buffers in many short rounds, the order
rotating each round.  Printed per op and size: the minimum over rounds of each (the
least-disturbed round) and its ratio to raw, and the median of the per-round ratios.

Run: ``mpiexec -n 2 python benchmarks/collectives_ab.py --baseline /work/main``
(with the launcher's malloc settings, as `xladist bench` sets them:
``MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824``).
Sizes as `xladist bench collectives` (all-gather: the output; the others: the operand).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

OPS = ("all-gather", "reduce-scatter", "collective-permute", "all-reduce")


def _load_baseline(tree: str, rank: int, comm):
    """The baseline tree's collectives package, imported as ``collectives_baseline``."""
    tmp = os.path.join(tempfile.gettempdir(), f"xladist_ab_{os.getppid()}_{rank}")
    shutil.rmtree(tmp, ignore_errors=True)
    # xladist/collectives since the package move; a tree from before it has collectives/.
    src = next((p for p in (os.path.join(tree, "xladist", "collectives"),
                            os.path.join(tree, "collectives")) if os.path.isdir(p)), None)
    if src is None:
        raise SystemExit(f"--baseline {tree}: neither xladist/collectives nor collectives/ "
                         f"is there")
    shutil.copytree(src, os.path.join(tmp, "collectives_baseline"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    sys.path.insert(1, tmp)
    return importlib.import_module("collectives_baseline"), tmp


def _calls(C, Comm, op, x, part, xdest, xsrc, reducer, world):
    comm = Comm(world.Dup(), devices=list(range(world.Get_size())))
    if op == "all-gather":
        return lambda: C.all_gather(comm, part, 0, label="ab")
    if op == "reduce-scatter":
        return lambda: C.reduce_scatter(comm, x, reducer, 0, label="ab")
    if op == "collective-permute":
        return lambda: C.collective_permute(comm, x, xdest, xsrc, label="ab")
    return lambda: C.all_reduce(comm, x, reducer, label="ab")


def _raw(MPI, comm, op, x, part, rbuf, dest, src):
    """Raw mpi4py's form of ``op`` into the preallocated ``rbuf``."""
    if op == "all-gather":
        return lambda: comm.Allgather([part, MPI.BYTE], [rbuf, MPI.BYTE])
    if op == "reduce-scatter":
        out = rbuf[:x.size // comm.Get_size()]
        return lambda: comm.Reduce_scatter_block(x, out, MPI.SUM)
    if op == "collective-permute":
        return lambda: comm.Sendrecv([x, MPI.BYTE], dest, 0, [rbuf, MPI.BYTE], src, 0)
    return lambda: comm.Allreduce(x, rbuf, MPI.SUM)


def main(argv=None) -> int:
    from mpi4py import MPI

    from xladist.bench.collectives import _reducers
    from xladist.bench.harness import parse_size
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="another checkout (its xladist/collectives/)")
    p.add_argument("--sizes", default="64K,1M,4M")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--round-bytes", type=float, default=2e7,
                   help="bytes moved per timed round of one variant (short rounds: some "
                        "of them see a quiet machine)")
    args = p.parse_args(argv)
    import xladist.collectives as B
    from xladist.collectives import MpiCommunicator as BComm

    world = MPI.COMM_WORLD
    n, r = world.Get_size(), world.Get_rank()
    A, tmp = _load_baseline(args.baseline, r, world)
    reducer = _reducers()["sum"][1]  # the compiled f32 add, as in a program's run
    say = print if r == 0 else (lambda *a, **k: None)
    sync = world.Dup()

    def timed(fn, it):
        sync.Barrier()
        t0 = time.perf_counter()
        for _ in range(it):
            fn()
        return sync.allreduce((time.perf_counter() - t0) / it, MPI.MAX)

    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    say(f"# collectives_ab: {n} ranks, baseline {args.baseline} vs {ROOT}; load average "
        f"{load}; {args.rounds} rounds, order rotating; min = least-disturbed round")
    say(f"# {'op':18} {'size':>5} | {'raw min us':>10} | {'base min':>9} {'x raw':>6} "
        f"{'med':>6} | {'this min':>9} {'x raw':>6} {'med':>6} | {'this/base':>9}")
    for op in args.ops.split(","):
        for size in args.sizes.split(","):
            nbytes = parse_size(size)
            count = max(nbytes // 4 // n * n, n)
            x = (np.arange(count) % 7).astype(np.float32) + r
            part = x[:count // n].copy()
            dest, src = (r + 1) % n, (r - 1) % n
            rbuf = np.empty(count, np.float32)
            rcomm = world.Dup()
            raw = _raw(MPI, rcomm, op, x, part, rbuf, dest, src)
            variants = {"raw": raw,
                        "base": _calls(A, A.MpiCommunicator, op, x, part, dest, src, reducer,
                                       world),
                        "this": _calls(B, BComm, op, x, part, dest, src, reducer, world)}
            it = max(2, int(args.round_bytes / nbytes))
            for fn in variants.values():
                for _ in range(20):
                    fn()
            times = {k: [] for k in variants}
            names = list(variants)
            for rnd in range(args.rounds):
                k0 = rnd % len(names)
                for k in names[k0:] + names[:k0]:
                    times[k].append(timed(variants[k], it))
            want = {"all-gather": np.concatenate([x[:count // n] - r + i for i in range(n)])}
            if op in want:
                for k in ("base", "this"):
                    got = variants[k]()
                    assert np.array_equal(got, want[op]), f"{k} {op}: wrong result"
            raw_t = times["raw"]
            cells = []
            for k in ("base", "this"):
                t = times[k]
                med = statistics.median(a / b for a, b in zip(t, raw_t))
                cells.append(f"{min(t) * 1e6:>9.1f} {min(t) / min(raw_t):>6.2f} {med:>6.2f}")
            ab = statistics.median(a / b for a, b in zip(times["this"], times["base"]))
            say(f"  {op:18} {size:>5} | {min(raw_t) * 1e6:>10.1f} | {cells[0]} | {cells[1]} | "
                f"{ab:>9.2f}")
            rcomm.Free()
    say(f"# load average at the end {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
