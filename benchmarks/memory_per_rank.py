"""Peak resident memory of every rank and of the launching process, as N grows.

    python benchmarks/memory_per_rank.py [N ...]          (default 2 4 8)

One replicated all-reduce of S = 16 MiB per device, run as `xladist run -n N --inputs
in.npz --outputs out.npz` (inputs with a device axis: N x S on disk). Each process reports
its VmHWM (peak resident set) when it exits, through a sitecustomize.py this script puts on
the processes' PYTHONPATH; the outputs are checked. launch/README.md's memory table is this
script's output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
S = 16 << 20

_SITE = '''import atexit, os
def _hwm():
    with open("/proc/self/status") as f:
        kb = next(int(l.split()[1]) for l in f if l.startswith("VmHWM"))
    who = "rank" + os.environ["PMI_RANK"] if "PMI_RANK" in os.environ else "launcher"
    with open(os.environ["XLADIST_MEM_RECORD"], "a") as f:
        f.write(f"{who} {kb}\\n")
if os.environ.get("XLADIST_MEM_RECORD"):
    atexit.register(_hwm)
'''


def main(sizes: list[int]) -> None:
    elems = S // 4
    work = Path(tempfile.mkdtemp(prefix="xladist-memory-"))
    (work / "site").mkdir()
    (work / "site" / "sitecustomize.py").write_text(_SITE)
    module = work / "m.hlo"
    module.write_text(f"""HloModule memory
%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}
ENTRY %main (x: f32[{elems}]) -> f32[{elems}] {{
  %x = f32[{elems}]{{0}} parameter(0)
  ROOT %p = f32[{elems}]{{0}} all-reduce(%x), replica_groups={{}}, to_apply=%add
}}
""")
    print(f"load average {os.getloadavg()[0]:.2f}")
    print("| N ranks | rank 0 | any other rank (max) | launching process |")
    print("|---|---|---|---|")
    for n in sizes:
        np.savez(work / "in.npz", arg0=np.ones((n, elems), np.float32))
        record = work / f"hwm{n}.txt"
        env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{work / 'site'}",
                   XLADIST_MEM_RECORD=str(record), XLADIST_PROGRESS="off")
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "xladist", "run", str(module), "-n",
                               str(n), "--inputs", str(work / "in.npz"), "--outputs",
                               str(work / "out.npz")], env=env, capture_output=True,
                              text=True, check=False)
        seconds = time.monotonic() - t0
        if proc.returncode != 0:
            sys.exit(proc.stderr)
        with np.load(work / "out.npz") as z:
            assert z["out0"].shape == (n, elems) and (z["out0"] == n).all()
        rows = dict(line.split() for line in record.read_text().splitlines())
        ranks = {int(k[4:]): int(v) / 1024 for k, v in rows.items() if k.startswith("rank")}
        others = max(mb for r, mb in ranks.items() if r != 0)
        print(f"| {n} | {ranks[0]:.0f} MiB | {others:.0f} MiB | "
              f"{int(rows['launcher']) / 1024:.0f} MiB |  ({seconds:.1f} s, load "
              f"{os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2, 4, 8])
