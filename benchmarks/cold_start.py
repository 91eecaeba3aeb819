"""Cold start of an N-rank `xladist run`: every rank compiling vs compiled once by the launcher.

    python benchmarks/cold_start.py [-n 8] [--repeat 2]

Runs benchmarks/mlp_train_step.hlo (one training step of a 2-layer MLP: dots, reduces,
elementwise) on N ranks with an empty kernel cache each time, with XLADIST_COMPILE_ONCE=0
(before: N ranks compile) and =1 (after: the launcher compiles, ranks load;
xladist/runtime/compile_once.py), alternating, and prints wall times and their ratio. The machine
is shared: the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "benchmarks" / "mlp_train_step.hlo"
SHAPES = [(512, 1024), (1024,), (1024, 128), (128,), (256, 512), (256, 128)]


def run_once(n: int, inputs: str, once: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="xladist-cold-") as cache:
        env = dict(os.environ, XLADIST_CACHE_DIR=cache, XLADIST_COMPILE_ONCE="1" if once else "0")
        cmd = [sys.executable, "-m", "xladist", "run", str(MODULE), "-n", str(n),
               "--replica-count", str(n), "--inputs", inputs, "--outputs",
               os.path.join(cache, "out.npz"), "--quiet"]
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, timeout=600, cwd=ROOT)
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as d:
        inputs = os.path.join(d, "in.npz")
        np.savez(inputs, **{f"arg{i}": rng.standard_normal((a.n, *s), dtype=np.float32)
                            for i, s in enumerate(SHAPES)})
        times = {False: [], True: []}
        for _ in range(a.repeat):
            for once in (False, True):
                times[once].append(run_once(a.n, inputs, once))
    before, after = min(times[False]), min(times[True])
    print(f"cold start, {a.n} ranks, {MODULE.name}, fresh kernel cache, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}, best of {a.repeat}")
    print(f"  every rank compiles (XLADIST_COMPILE_ONCE=0): {before:6.2f} s")
    print(f"  launcher compiles once, ranks load          : {after:6.2f} s")
    print(f"  ratio before/after                          : {before / after:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
