"""Per-iteration cost of a collective-permute, a send/recv pair on a ring (channel 1) or an
all-gather inside a while loop: the native driver (xladist/compiler/native/collectives.py,
channels.py) against the Python executor
(XLADIST_NATIVE_COLLECTIVES=0, switched in-process) and a raw mpi4py loop on the same bytes.
Last row: the data-parallel MLP step of the demo as a loop (xladist/examples/train_mlp.py
build_step_loop: 5 dots, 4 all-reduces, kernels; native/blas.py), native against Python
(no raw column).

    mpiexec -n 2 python benchmarks/native_loop_p2p_gather.py [K]

Per iteration = (T(K) - T(1)) / (K - 1) through xladist.run (cpu backend, check off), best
of 3 alternating rounds, slowest rank; raw = K mpi4py Sendrecv/Allgather calls on
preallocated buffers / K. Prints the load average: timings on a shared machine are noisy,
compare the columns of one run only.
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

import xladist
from xladist.compiler import parallel
from xladist.compiler.native import loop as native_loop


def permute_module(count: int, n: int) -> str:
    t = f"f32[{count}]"
    pairs = ",".join(f"{{{r},{(r + 1) % n}}}" for r in range(n))
    return _module(t, t, f"collective-permute(x), source_target_pairs={{{pairs}}}")


def channel_module(count: int, n: int) -> str:
    """The permute's loop with x <- recv-done(recv) after send(x) on a ring, channel 1."""
    t = f"f32[{count}]"
    pairs = ",".join(f"{{{r},{(r + 1) % n}}}" for r in range(n))
    attr = f'frontend_attributes={{_xla_send_recv_source_target_pairs="{{{pairs}}}"}}'
    text = _module(t, t, "copy(x)")
    return text.replace(
        f"  g1 = {t} copy(x)\n",
        f"  tok = token[] after-all()\n"
        f"  r = ({t}, u32[], token[]) recv(tok), channel_id=1, {attr}\n"
        f"  s = ({t}, u32[], token[]) send(x, tok), channel_id=1, {attr}\n"
        f"  rd = ({t}, token[]) recv-done(r), channel_id=1\n"
        f"  sd = token[] send-done(s), channel_id=1\n"
        f"  g1 = {t} get-tuple-element(rd), index=0\n").replace(
        "HloModule bench", f"HloModule bench, num_partitions={n}")


def gather_module(count: int, n: int) -> str:
    return _module(f"f32[{count}]", f"f32[{count * n}]",
                   "all-gather(x), dimensions={0}, replica_groups={}")


def _module(t: str, g: str, op: str) -> str:
    """(i, k, x, g): g <- op(x), x <- -x, k times; for a permute x <- op(x) instead."""
    same = t == g
    state = f"(s32[], s32[], {t}, {g})"
    # A permute's x moves on and g stays; a gather's x is negated, which costs a kernel over x
    # per iteration on both paths (kept so the figures compare with earlier runs; a leaf
    # handed back unchanged next to the gather would run natively too since inplace.py
    # gives it its source).
    nxt = "g1, gp" if same else "xn, g1"
    return f"""HloModule bench
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
  x = {t} get-tuple-element(p), index=2
  gp = {g} get-tuple-element(p), index=3
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  g1 = {g} {op}
  xn = {t} negate(x)
  ROOT t = {state} tuple(i1, k, {nxt})
}}
ENTRY e {{
  x = {t} parameter(0)
  k = s32[] parameter(1)
  zero = s32[] constant(0)
  fz = f32[] constant(0)
  g0 = {g} broadcast(fz), dimensions={{}}
  init = {state} tuple(zero, k, x, g0)
  w = {state} while(init), condition=cond, body=body
  ROOT out = {g} get-tuple-element(w), index={2 if same else 3}
}}
"""


def main() -> int:
    comm = MPI.COMM_WORLD.Dup()
    # The loop's trip count is an argument, so the deadlock check cannot prove the program
    # and each collective would first exchange its signature (docs/collectives.md); a
    # loop with a constant trip count is proven and pays nothing, which these rows measure.
    os.environ["XLADIST_SIGNATURES"] = "off"
    n, rank = comm.Get_size(), comm.Get_rank()
    k_small = int(sys.argv[1]) if len(sys.argv) > 1 else 2000

    def say(line=""):
        if rank == 0:
            print(line, flush=True)

    say(f"# {n} ranks; load average {', '.join(f'{v:.2f}' for v in os.getloadavg())}; "
        f"per iteration (us) = (T(K) - T(1)) / (K - 1), best of 3, slowest rank")
    say(f"# {'op':>18} {'bytes':>7} {'K':>5} | {'native':>8} {'python':>8} {'raw':>8} | "
        f"{'py/nat':>6} {'nat-raw':>7} {'same':>4}")
    for opname, make in (("collective-permute", permute_module), ("send/recv", channel_module),
                         ("all-gather", gather_module)):
        for count in (2, 16384):  # 8 B and 64 KiB per rank
            k = k_small if count < 1024 else max(2, k_small // 4)
            module = xladist.parse_hlo(make(count, n))
            x = np.stack([np.arange(count, dtype=np.float32) + r for r in range(n)])

            def xla(trips, native, module=module, x=x):
                native_loop.COLLECTIVES = native
                comm.Barrier()
                t0 = time.perf_counter()
                outs = xladist.run(module, [x, np.full(n, trips, np.int32)], n=n, check=False,
                                   verify=False)
                return comm.allreduce(time.perf_counter() - t0, MPI.MAX), outs

            send = x[rank].copy()
            recv = np.empty(count * (n if opname == "all-gather" else 1), np.float32)
            right, left = (rank + 1) % n, (rank - 1) % n

            def raw(trips, send=send, recv=recv, gather=opname == "all-gather", right=right,
                    left=left):
                comm.Barrier()
                t0 = time.perf_counter()
                for _ in range(trips):
                    if gather:
                        comm.Allgather(send, recv)
                    else:
                        comm.Sendrecv(send, right, 0, recv, left, 0)
                return comm.allreduce(time.perf_counter() - t0, MPI.MAX) / trips

            same = xla(3, True)[1][rank][0].tobytes() == xla(3, False)[1][rank][0].tobytes()
            same = comm.allreduce(int(same), MPI.MIN)
            best = {True: [np.inf, np.inf], False: [np.inf, np.inf]}
            r = np.inf
            for rep in range(3):
                for native in ((True, False) if rep % 2 == 0 else (False, True)):
                    b = best[native]
                    b[0] = min(b[0], xla(1, native)[0])
                    b[1] = min(b[1], xla(k, native)[0])
                r = min(r, raw(k))
            nat, py = ((best[v][1] - best[v][0]) / (k - 1) * 1e6 for v in (True, False))
            say(f"  {opname:>18} {count * 4:>7} {k:>5} | {nat:>8.2f} {py:>8.2f} {r * 1e6:>8.2f}"
                f" | {py / nat:>6.1f} {nat - r * 1e6:>7.2f} {'yes' if same else 'NO':>4}")
    mlp_row(comm, k_small, say)
    native_loop.COLLECTIVES = True
    return 0


def mlp_row(comm, k_small: int, say) -> None:
    from xladist.examples import train_mlp
    n, rank = comm.Get_size(), comm.Get_rank()
    cfg = train_mlp.Config(replicas=n, steps=1)
    module = train_mlp.build_step_loop(cfg)
    params, batches = train_mlp.make_data(cfg)
    args = [np.stack([p] * n) for p in params] + \
        [np.stack([batches[r][0][i] for r in range(n)]) for i in (0, 1)]
    k = max(2, k_small // 2)

    def xla(trips, native):
        native_loop.COLLECTIVES = native
        comm.Barrier()
        t0 = time.perf_counter()
        outs = xladist.run(module, args + [np.full(n, trips, np.int32)], n=n, check=False,
                           verify=False)
        return comm.allreduce(time.perf_counter() - t0, MPI.MAX), outs

    same = all(a.tobytes() == b.tobytes() for a, b in
               zip(xla(3, True)[1][rank], xla(3, False)[1][rank]))
    same = comm.allreduce(int(same), MPI.MIN)
    best = {True: [np.inf, np.inf], False: [np.inf, np.inf]}
    for rep in range(3):
        for native in ((True, False) if rep % 2 == 0 else (False, True)):
            b = best[native]
            b[0] = min(b[0], xla(1, native)[0])
            b[1] = min(b[1], xla(k, native)[0])
    nat, py = ((best[v][1] - best[v][0]) / (k - 1) * 1e6 for v in (True, False))
    grad_bytes = sum(p.nbytes for p in params)
    say(f"  {'mlp step':>18} {grad_bytes:>7} {k:>5} | {nat:>8.2f} {py:>8.2f} {'-':>8}"
        f" | {py / nat:>6.1f} {'-':>7} {'yes' if same else 'NO':>4}")
    say(f"# load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}; "
        f"OpenBLAS threads {parallel.blas_info()}")


if __name__ == "__main__":
    sys.exit(main())
