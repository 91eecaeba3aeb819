"""Per-call overhead of a persistent cluster (xladist.Cluster) against one-shot xladist.run.

    python benchmarks/cluster_overhead.py [-n 2] [--rounds 5] [--calls 40]

The module is tiny (an all-reduce of f32[4] and nothing else: its step is microseconds), so
a call's wall time is its overhead. Rows (median wall time per call, from this process):
- handle.run: `c.compile(module)` once, then `handle.run(inputs)`: one order to every rank
  with its inputs, and one answer from each: call-done with its outputs;
- Cluster.run(text), kept: the same text again -- the cluster keeps the loaded module
  (Cluster(keep=8)), so this is handle.run plus reading the key;
- Cluster.run(text), keep=0: the module shipped with every call: the launching process
  checks it (deadlock check) and looks up its code, the ranks parse, place, plan and
  compile it (kernel cache hit, served by the launching process) and release it after;
- xladist.run: one-shot, mpiexec and N interpreters per call.
Sides alternate within each round (one one-shot run, `--calls` handle runs and kept runs,
`--calls // 4` keep=0 runs), all rounds in one cluster; the load average is printed before
and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import xladist  # noqa: E402

TINY = """HloModule tiny, replica_count={n}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %main (x: f32[4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  ROOT %r = f32[4]{{0}} all-reduce(%x), replica_groups={{}}, to_apply=%add
}}
"""


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args(argv)
    n = args.n
    text = TINY.format(n=n)
    x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
    want = x.sum(axis=0)
    times: dict[str, list[float]] = {"handle.run": [], "Cluster.run(text), kept": [],
                                     "Cluster.run(text), keep=0": [],
                                     "xladist.run (one-shot)": []}
    print(f"n={n}, {args.rounds} rounds; load average before: {_load()}")
    t0 = time.perf_counter()
    with xladist.Cluster(n=n) as c:
        start = time.perf_counter() - t0
        handle = c.compile(text)
        for _ in range(3):  # warm: the kernel cache, first-call imports on the ranks
            c.run(text, [x])
            handle.run([x])
        for _ in range(args.rounds):
            times["xladist.run (one-shot)"].append(_timed(lambda: xladist.run(text, [x], n=n)))
            for _ in range(args.calls):
                times["handle.run"].append(_timed(lambda: handle.run([x])))
            for _ in range(args.calls):
                times["Cluster.run(text), kept"].append(_timed(lambda: c.run(text, [x])))
            c.keep = 0
            for _ in range(max(1, args.calls // 4)):
                times["Cluster.run(text), keep=0"].append(_timed(lambda: c.run(text, [x])))
            c.keep = 8
        out = handle.run([x])
        assert all(np.array_equal(o[0], want) for o in out), "wrong result"
    print(f"cluster start (mpiexec, {n} ranks ready): {start:.2f} s")
    print(f"{'what':<28} {'calls':>6} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8}")
    for name, ts in times.items():
        ts = sorted(ts)
        print(f"{name:<28} {len(ts):>6} {1e3 * statistics.median(ts):>10.1f} "
              f"{1e3 * ts[len(ts) // 10]:>8.1f} {1e3 * ts[(9 * len(ts)) // 10]:>8.1f}")
    print(f"load average after: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
