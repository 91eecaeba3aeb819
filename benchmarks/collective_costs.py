"""What one warm collective call costs besides moving bytes: xladist against raw mpi4py.

Counts, per call, over K warm calls of each collective (float32, 2+ ranks):

* ``alloc``: the peak of Python-traced memory (numpy reports its buffers to tracemalloc)
  above the level before the calls -- a fresh result or staging buffer shows up here;
* ``faults``: minor page faults of the process (``getrusage``), i.e. fresh pages touched;
* ``pycalls``: Python and C functions entered by the interpreter (``sys.setprofile``)
  for one call -- the Python around the MPI call;
* ``us``: the slowest rank's mean time per call (noisy on a shared machine: compare
  within one run only).

Two ways of using the result: ``dropped`` (the caller lets it go at once: the benchmark's
case) and ``held`` (the previous result still referenced during the next call: what an
executor or a loop carry does).  Raw is mpi4py into preallocated buffers, held or not.

Run: ``mpiexec -n 2 python benchmarks/collective_costs.py [--sizes 64K,1M,4M] [-k 40]``
(the xladist launcher's malloc settings are worth setting, as `xladist bench` does:
``MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824``).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

OPS = ("all-gather", "reduce-scatter", "collective-permute", "all-reduce")


def _cases(op, nbytes, comm, xcomm, reducer):
    """(raw call, xladist call) of ``op`` with ``nbytes`` as `xladist bench collectives`
    sizes it (all-gather: the output; the others: the operand)."""
    from mpi4py import MPI

    import xladist.collectives as C
    n, r = comm.Get_size(), comm.Get_rank()
    count = max(nbytes // 4 // n * n, n)
    x = (np.arange(count) % 7).astype(np.float32) + r
    if op == "all-gather":
        part = x[:count // n].copy()
        rbuf = np.empty(count, np.float32)
        return (lambda: comm.Allgather([part, MPI.BYTE], [rbuf, MPI.BYTE]),
                lambda: C.all_gather(xcomm, part, 0, label="costs"))
    if op == "reduce-scatter":
        rbuf = np.empty(count // n, np.float32)
        return (lambda: comm.Reduce_scatter_block(x, rbuf, MPI.SUM),
                lambda: C.reduce_scatter(xcomm, x, reducer, 0, label="costs"))
    if op == "collective-permute":
        dest, src = (r + 1) % n, (r - 1) % n
        rbuf = np.empty_like(x)
        return (lambda: comm.Sendrecv([x, MPI.BYTE], dest, 0, [rbuf, MPI.BYTE], src, 0),
                lambda: C.collective_permute(xcomm, x, dest, src, label="costs"))
    rbuf = np.empty_like(x)
    return (lambda: comm.Allreduce(x, rbuf, MPI.SUM),
            lambda: C.all_reduce(xcomm, x, reducer, label="costs"))


def _measure(fn, k: int, held: bool, comm):
    from mpi4py import MPI

    keep = [fn(), fn()]  # warm
    calls = []

    def prof(frame, event, arg):
        if event in ("call", "c_call"):
            calls.append(1)
    sys.setprofile(prof)
    keep[1] = fn()
    sys.setprofile(None)
    pycalls = len(calls) - 1  # setprofile(None) itself
    if not held:
        keep = [None, None]

    def loop():
        for _ in range(k):
            if held:
                keep[0] = keep[1]
                keep[1] = fn()  # keep[0] (the previous result) is still referenced meanwhile
            else:
                fn()
    comm.Barrier()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    loop()
    dt = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    # Allocations in a second pass: tracing slows every Python allocation down.
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    loop()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (comm.allreduce((peak - base), MPI.MAX), comm.allreduce(faults / k, MPI.MAX),
            pycalls, comm.allreduce(dt / k, MPI.MAX))


def main(argv=None) -> int:
    from mpi4py import MPI

    from xladist.bench.collectives import _reducers
    from xladist.bench.harness import parse_size
    from xladist.collectives import MpiCommunicator
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64K,1M,4M")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("-k", type=int, default=40, help="warm calls measured per row")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD.Dup()
    xcomm = MpiCommunicator(MPI.COMM_WORLD.Dup(), devices=list(range(comm.Get_size())))
    reducer = _reducers()["sum"][1]  # the compiled f32 add, as in a program's run
    say = print if comm.Get_rank() == 0 else (lambda *a, **k: None)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    say(f"# collective_costs: {comm.Get_size()} ranks, {args.k} warm calls per row; load "
        f"average {load}; alloc = peak traced bytes above the start (max over ranks), "
        "faults = minor page faults per call")
    say(f"# {'op':18} {'size':>5} {'use':7} | {'raw alloc':>10} {'faults':>6} {'pycalls':>7} "
        f"{'us':>8} | {'xla alloc':>10} {'faults':>6} {'pycalls':>7} {'us':>8}")
    for op in args.ops.split(","):
        for size in args.sizes.split(","):
            nbytes = parse_size(size)
            raw, xla = _cases(op, nbytes, comm, xcomm, reducer)
            for held in (False, True):
                ra, rf, rc, rt = _measure(raw, args.k, held, comm)
                xa, xf, xc, xt = _measure(xla, args.k, held, comm)
                say(f"  {op:18} {size:>5} {'held' if held else 'dropped':7} | {ra:>10} "
                    f"{rf:>6.2f} {rc:>7} {rt * 1e6:>8.1f} | {xa:>10} {xf:>6.2f} {xc:>7} "
                    f"{xt * 1e6:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
