"""Infeed throughput of one rank: items/s and GB/s for 4 KiB, 1 MiB and 16 MiB items.

    python benchmarks/feeds.py [--quick] [--repeats R]

Rows, per item size:
- numpy copy: `np.copyto` of the same bytes into a preallocated buffer -- the ceiling,
  since every path hands the device a private copy of each item;
- numpy new copy: `np.array(item)`, a copy into a fresh buffer per item, as a pipeline
  that keeps items immutable must make;
- iterable: xladist.runtime.feeds with a Python iterable source (the producer thread copies each
  item, the device side takes it from the bounded queue and checks it against the
  infeed's shape) -- what `xladist run` ranks and in-MPI `xladist.run` do per rank;
- npz file: the same with an npz source (each item read from an uncompressed .npz);
- socket: a lambda hosted by the launching process's coordination service
  (xladist/runtime/service/, feeds/host.py) streaming to a rank over TCP; here both ends share
  one process (and its GIL), so this is a lower bound for the real two-process case.
"per-item overhead" is the time per item minus the numpy new copy's. The benchmark runs in
the environment `xladist run` gives its ranks (xladist/runtime/launcher.py: malloc thresholds
that keep large buffers on the heap), re-executing itself if needed.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import xladist
from xladist.runtime.device import DeviceAssignment, Placement
from xladist.runtime.feeds import Feeds, IterableSource, NpzSource
from xladist.runtime.feeds.host import SocketSource
from xladist.runtime.service import Service
from xladist.runtime.service.jobs import JobHost
from xladist.runtime.feeds.npz import write_items

SIZES = [("4 KiB", 4 << 10, 20000), ("1 MiB", 1 << 20, 600), ("16 MiB", 16 << 20, 40)]
P0 = Placement(0, 0, 0, 0, DeviceAssignment.default(1, 1))


def infeed_instr(nbytes: int):
    n = nbytes // 4
    module = xladist.parse_hlo(f"""HloModule bench
ENTRY main {{
  t = token[] after-all()
  in = (f32[{n}], token[]) infeed(t)
  ROOT d = f32[{n}] get-tuple-element(in), index=0
}}
""")
    return next(i for i in module.entry.instructions if i.opcode == "infeed")


def time_copy(src: np.ndarray, count: int) -> float:
    dst = np.empty_like(src)
    t0 = time.perf_counter()
    for _ in range(count):
        np.copyto(dst, src)
    return time.perf_counter() - t0


def time_new_copy(src: np.ndarray, count: int) -> float:
    t0 = time.perf_counter()
    for _ in range(count):
        np.array(src)
    return time.perf_counter() - t0


def time_feeds(source, instr, count: int, prefetch: int = 8) -> float:
    feeds = Feeds(source, None, prefetch=prefetch, timeout=60)
    feeds.start(P0)
    t0 = time.perf_counter()
    for _ in range(count):
        feeds.infeed(instr)
    elapsed = time.perf_counter() - t0
    feeds.finish()
    return elapsed


def repeat(fn, repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer items (a smoke run)")
    ap.add_argument("--repeats", type=int, default=3, help="best of R runs (default 3)")
    args = ap.parse_args(argv)
    from xladist.runtime import launcher
    if any(os.environ.get(k) != v for k, v in launcher.RANK_ENV_DEFAULTS.items()):
        env = launcher.rank_environment()
        env.update(launcher.RANK_ENV_DEFAULTS)
        os.execve(sys.executable, [sys.executable, __file__, *(argv or sys.argv[1:])], env)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, nbytes, count in SIZES:
            if args.quick:
                count = max(4, count // 20)
            instr = infeed_instr(nbytes)
            item = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
            path = os.path.join(tmp, f"items{nbytes}.npz")
            write_items(path, [item] * min(count, 64))
            reps = -(-count // 64)

            def npz_items(r, rep, part, path=path, reps=reps):
                for _ in range(reps):
                    yield from NpzSource(path).open(P0)
            npz_source = IterableSource(npz_items)
            npz_source.copies = False  # np.load already returns fresh arrays

            def socket_run(item=item, count=count, instr=instr):
                job = JobHost(1, infeed=IterableSource(
                    lambda r, rep, part: (item for _ in range(count))))
                host = Service(1, job=job)
                try:
                    return time_feeds(SocketSource(host.address, host.token), instr, count)
                finally:
                    host.close()
            def iterable_run(item=item, count=count, instr=instr):
                source = IterableSource(lambda r, rep, part: (item for _ in range(count)))
                return time_feeds(source, instr, count)
            paths = {
                "numpy copy": functools.partial(time_copy, item, count),
                "numpy new copy": functools.partial(time_new_copy, item, count),
                "iterable": iterable_run,
                "npz file": functools.partial(time_feeds, npz_source, instr, count),
                "socket": socket_run,
            }
            # Interleaved repeats, best of each: load from other processes hits all alike.
            results = {name: float("inf") for name in paths}
            for _ in range(args.repeats):
                for name, fn in paths.items():
                    results[name] = min(results[name], fn())
            base = results["numpy new copy"] / count
            for name, secs in results.items():
                per = secs / count
                over = "" if name.startswith("numpy") else f"{(per - base) * 1e6:9.1f}"
                rows.append((label, name, count / secs, nbytes * count / secs / 1e9,
                             per * 1e6, over))
    print(f"{'item':>7} {'path':<14} {'items/s':>10} {'GB/s':>7} {'us/item':>9} "
          f"{'overhead us':>11}")
    for label, name, ips, gbs, us, over in rows:
        print(f"{label:>7} {name:<14} {ips:10.0f} {gbs:7.2f} {us:9.1f} {over:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
