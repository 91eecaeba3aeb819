"""Does calling a thunk back from the native loop driver pay (xladist/compiler/native/
callback.py)? Per-iteration cost of a while loop whose body holds an infeed or an outfeed
(called back in Python), kernels and an 8-byte all-reduce (native), against the same loop on
the Python executor (XLADIST_NATIVE_COLLECTIVES off, switched in-process).

    mpiexec -n 2 python benchmarks/native_loop_callbacks.py [K]

Per iteration = (T(K) - T(1)) / (K - 1) through xladist.run (cpu backend, check off), best of
3 alternating rounds, slowest rank. Prints the load average: timings on a shared machine are
noisy, compare the columns of one run only.
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import xladist
from xladist.compiler.native import loop as native_loop


def module(feed: str) -> str:
    """k iterations of: x <- infeed (or x kept), acc <- all-reduce(acc * 0.5 + x); an outfeed
    of acc when feed == "outfeed"."""
    state = "(s32[], s32[], token[], f32[2], f32[2])"
    if feed == "infeed":
        get = ("  fd = (f32[2], token[]) infeed(tok)\n"
               "  x1 = f32[2] get-tuple-element(fd), index=0\n"
               "  t1 = token[] get-tuple-element(fd), index=1\n")
        put = ""
    else:
        get = "  x1 = f32[2] add(x, x)\n  t1 = token[] after-all(tok)\n"
        put = "  t2 = token[] outfeed(s, t1), outfeed_shape=f32[2]\n"
    tok = "t2" if put else "t1"
    return f"""HloModule bench_callbacks
sum {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}}
cond {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, k), direction=LT
}}
body {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  tok = token[] get-tuple-element(p), index=2
  x = f32[2] get-tuple-element(p), index=3
  acc = f32[2] get-tuple-element(p), index=4
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
{get}  hf = f32[] constant(0.5)
  h = f32[2] broadcast(hf), dimensions={{}}
  m = f32[2] multiply(acc, h)
  y = f32[2] add(m, x1)
  s = f32[2] all-reduce(y), replica_groups={{}}, to_apply=sum
{put}  ROOT r = {state} tuple(i1, k, {tok}, x1, s)
}}
ENTRY e {{
  k = s32[] parameter(0)
  zero = s32[] constant(0)
  fz = f32[] constant(0)
  a = f32[2] broadcast(fz), dimensions={{}}
  t0 = token[] after-all()
  init = {state} tuple(zero, k, t0, a, a)
  w = {state} while(init), condition=cond, body=body
  ROOT out = f32[2] get-tuple-element(w), index=4
}}
"""


def main() -> int:
    comm = MPI.COMM_WORLD.Dup()
    # The loop's trip count is an argument, so the deadlock check cannot prove the program
    # and each collective would first exchange its signature (docs/collectives.md); a
    # loop with a constant trip count is proven and pays nothing, which these rows measure.
    os.environ["XLADIST_SIGNATURES"] = "off"
    n, rank = comm.Get_size(), comm.Get_rank()
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 2000

    def say(line=""):
        if rank == 0:
            print(line, flush=True)

    say(f"# {n} ranks; load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}; "
        f"per iteration (us) = (T(K) - T(1)) / (K - 1), best of 3, slowest rank")
    say(f"# {'loop':>32} {'K':>5} | {'native+cb':>9} {'python':>8} | {'py/nat':>6} {'same':>4}")
    for feed in ("infeed", "outfeed"):
        mod = xladist.parse_hlo(module(feed))
        items = [np.array([d + 1, t % 7], np.float32) for d in range(n) for t in range(k)]

        def xla(trips, native, mod=mod, feed=feed, items=items):
            native_loop.COLLECTIVES = native
            got = []

            def infeed(r, rep, part):
                return items[r * k:r * k + trips]

            def outfeed(r, rep, part, item):
                got.append(item)
            kw = {"infeed": infeed} if feed == "infeed" else {"outfeed": outfeed}
            comm.Barrier()
            t0 = time.perf_counter()
            outs = xladist.run(mod, [np.full(n, trips, np.int32)], n=n, check=False,
                               verify=False, **kw)
            return comm.allreduce(time.perf_counter() - t0, MPI.MAX), (outs, got)

        a, b = xla(5, True)[1], xla(5, False)[1]
        same = a[0][rank][0].tobytes() == b[0][rank][0].tobytes() and \
            [x.tobytes() for x in a[1]] == [x.tobytes() for x in b[1]]
        same = comm.allreduce(int(same), MPI.MIN)
        best = {True: [np.inf, np.inf], False: [np.inf, np.inf]}
        for rep in range(3):
            for native in ((True, False) if rep % 2 == 0 else (False, True)):
                best[native][0] = min(best[native][0], xla(1, native)[0])
                best[native][1] = min(best[native][1], xla(k, native)[0])
        nat, py = ((best[v][1] - best[v][0]) / (k - 1) * 1e6 for v in (True, False))
        what = f"{feed} + kernels + 8 B all-reduce"
        say(f"  {what:>32} {k:>5} | {nat:>9.2f} {py:>8.2f} | {py / nat:>6.1f} "
            f"{'yes' if same else 'NO':>4}")
    say(f"# load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    native_loop.COLLECTIVES = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
