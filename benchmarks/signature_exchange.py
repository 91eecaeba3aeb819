"""What the run-time signature exchange (xladist/runtime/signatures.py) costs a run the
deadlock check did not prove: per-iteration time of a while loop around one all-reduce,
whose trip count is an argument (so the check cannot prove it), with the exchange off
(XLADIST_SIGNATURES=off: what a proven program runs), on (the default for such a run: the
native loop driver exchanges a 16-byte digest before each all-reduce) and on the Python
executor (XLADIST_NATIVE_COLLECTIVES off: the exchange in Python), against raw mpi4py
(Allreduce of the same bytes; with the exchange: Allgather of 16 bytes, then Allreduce).

    mpiexec -n 2 python benchmarks/signature_exchange.py [K] [SIZES]

Per iteration = (T(K) - T(1)) / (K - 1) through xladist.run (cpu backend, check off, the
settings switched in-process), best of 3 alternating rounds, slowest rank. Prints the load
average: timings on a shared machine are noisy, compare the columns of one run only.
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import xladist
from xladist.bench.in_loop import loop_module
from xladist.compiler.native import loop as native_loop


def main() -> int:
    comm = MPI.COMM_WORLD.Dup()
    n = comm.Get_size()
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 20001
    sizes = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "4,4096").split(",")]
    say = print if comm.Get_rank() == 0 else (lambda *a, **kw: None)
    say(f"# {n} ranks, K={k}, load average {os.getloadavg()[0]:.2f} "
        f"(per iteration, microseconds; best of 3)")
    say("| f32 elements | raw mpi4py Allreduce | + Allgather(16 B) | xladist, off | "
        "xladist, exchange (native) | xladist, exchange (Python executor) | "
        "exchange / off |")
    say("|---|---|---|---|---|---|---|")
    for count in sizes:
        mod = xladist.parse_hlo(loop_module(count, "sum"))  # `xladist bench --in-loop`'s
        x = np.zeros((n, count), np.float32)

        def xla(trips, mode, native):
            os.environ["XLADIST_SIGNATURES"] = mode
            native_loop.COLLECTIVES = native
            comm.Barrier()
            t0 = time.perf_counter()
            xladist.run(mod, [x, np.full(n, trips, np.int32)], n=n, check=False,
                        verify=False)
            return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

        def raw(trips, exchange):
            s, r = np.zeros(count, np.float32), np.empty(count, np.float32)
            d, e = np.zeros(16, np.uint8), np.empty(16 * n, np.uint8)
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(trips):
                if exchange:
                    comm.Allgather(d, e)
                comm.Allreduce(s, r)
            return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

        columns = [lambda t: raw(t, False), lambda t: raw(t, True),
                   lambda t: xla(t, "off", True), lambda t: xla(t, "unproven", True),
                   lambda t: xla(t, "unproven", False)]
        best = [float("inf")] * len(columns)
        for f in columns:  # warm: compile into the cache
            f(1)
        for _ in range(3):
            for j, f in enumerate(columns):
                kk = k if j != 4 else max(2, k // 10)  # the Python executor is slower
                per = (f(kk) - f(1)) / (kk - 1) * 1e6
                best[j] = min(best[j], per)
        say(f"| {count} | " + " | ".join(f"{b:.2f}" for b in best) +
            f" | {best[3] / best[2]:.2f}x |")
    os.environ.pop("XLADIST_SIGNATURES", None)
    native_loop.COLLECTIVES = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
