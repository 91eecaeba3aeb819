"""Where a warm `xladist run -n 2` of the transformer step goes (issue 28 item 4), and the same
step from a persistent cluster.

    python benchmarks/warm_run.py [--module benchmarks/transformer_step.hlo] [--repeats 3]

"Warm": the kernel cache holds the module's code (one run first). The whole command's wall
time is measured as a user sees it (median of --repeats); its parts are measured one by one
in the same run, each the way the command does it:
- launch: `mpiexec -n 2 python -c pass` (mpiexec and two bare interpreters);
- imports, launching process: `python -c "import xladist.cli, ..."` of what `xladist run`
  loads before it launches (parser, verifier, deadlock check, launcher, service);
- imports, rank: what a rank loads (MPI, the runtime, the cpu backend), in a fresh
  interpreter, minus a bare interpreter's start;
- parse, check: parse + verify of the module text and the deadlock check (once, by the
  launcher); the ranks' load of the module the launcher parsed (hlo/packed.py: pack, then
  unpack);
- cache load: the compile with a warm kernel cache (schedule, kernel keys, loading the
  object), as compile_once and every rank do it;
- inputs, outputs: reading the inputs' npz and writing the outputs' npz;
- step: one step on 2 ranks, from a persistent cluster (Cluster.compile, handle.run: the
  step plus the call's overhead, whose size the tiny module's handle.run gives).
"rest" is the command's wall time minus the parts (MPI start-up and connection to the
service, the exchanges in between, process exit); parts done on several processes at once
are counted once. Sides alternate in each repeat; load averages are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import xladist  # noqa: E402
from xladist.runtime import launcher  # noqa: E402

LAUNCHER_IMPORTS = ("import xladist.cli, xladist.cli.run, xladist.hlo.parser, "
                    "xladist.hlo.verifier, xladist.runtime.precheck, xladist.runtime.api, "
                    "xladist.runtime.service.jobs, xladist.runtime.compile_once")
RANK_IMPORTS = ("from mpi4py import MPI; import xladist.runtime.rank_main, "
                "xladist.runtime.rank, xladist.runtime.mpi_context, "
                "xladist.compiler.program, xladist.backends, xladist.hlo.parser")


def _load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def _wall(cmd, env=None) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _inputs(module, n: int):
    rng = np.random.default_rng(0)
    return [(0.1 * rng.standard_normal((n, *p.shape.dims))).astype(p.shape.dtype)
            for p in module.entry.parameters]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", default=str(HERE / "transformer_step.hlo"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args(argv)
    n = 2
    from xladist.analysis.schedule import schedule_module
    from xladist.compiler.program import CpuProgram
    from xladist.hlo.packed import pack, unpack
    from xladist.hlo.parser import parse_module
    from xladist.hlo.verifier import verify_module
    from xladist.runtime.precheck import precheck
    text = Path(args.module).read_text()
    module = parse_module(text)
    arrays = _inputs(module, n)
    env = launcher.rank_environment({"XLADIST_PROGRESS": "off"})
    parts: dict[str, list[float]] = {k: [] for k in (
        "launch", "imports, launching process", "imports, rank", "parse + verify",
        "packed module (pack, rank load)",
        "deadlock check", "cache load", "inputs", "outputs", "step (cluster call)",
        "tiny cluster call")}
    total: list[float] = []
    print(f"module {args.module} ({len(text) // 1024} KB), n={n}; load average before: "
          f"{_load()}")
    # Without cached bytecode every process compiles each module it imports: the imports
    # then take 2-4x as long as from an installed package's .pyc files.
    print("bytecode: " + ("not written (PYTHONDONTWRITEBYTECODE): imports without a .pyc compile their source"
                          if sys.dont_write_bytecode and not sys.pycache_prefix else
                          f"cached ({sys.pycache_prefix or '__pycache__'})"))
    with tempfile.TemporaryDirectory(prefix="xladist-warm-") as tmp:
        inp, out = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(inp, **{f"arg{i}": a for i, a in enumerate(arrays)})
        cmd = [sys.executable, "-m", "xladist", "run", args.module, "-n", str(n),
               "--inputs", str(inp), "--outputs", str(out), "-q"]
        _wall(cmd, env)  # warm the kernel cache
        bare = [sys.executable, "-c", "pass"]
        mpiexec = [launcher.find_mpiexec(None), "-n", str(n), sys.executable, "-c", "pass"]
        tiny = ("HloModule tiny, replica_count=2\n%add (a: f32[], b: f32[]) -> f32[] {\n"
                "  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
                "  ROOT %s = f32[] add(%a, %b)\n}\nENTRY %main (x: f32[4]) -> f32[4] {\n"
                "  %x = f32[4]{0} parameter(0)\n"
                "  ROOT %r = f32[4]{0} all-reduce(%x), replica_groups={}, to_apply=%add\n}\n")
        with xladist.Cluster(n=n) as c:
            step = c.compile(args.module)
            small = c.compile(tiny)
            step.run(arrays)
            for _ in range(args.repeats):
                total.append(_wall(cmd, env))
                parts["launch"].append(_wall(mpiexec, env))
                start = _wall(bare, env)
                parts["imports, launching process"].append(
                    _wall([sys.executable, "-c", LAUNCHER_IMPORTS], env) - start)
                parts["imports, rank"].append(
                    _wall([sys.executable, "-c", RANK_IMPORTS], env) - start)
                parts["parse + verify"].append(
                    _timed(lambda: verify_module(parse_module(text))))
                parts["packed module (pack, rank load)"].append(
                    _timed(lambda: unpack(pack(module))))
                parts["deadlock check"].append(
                    _timed(lambda: precheck(module, n, warn=lambda t: None)))
                parts["cache load"].append(_timed(
                    lambda: CpuProgram(module, schedule_module(module))))
                parts["inputs"].append(_timed(lambda: [np.load(inp)[k] for k in
                                                       np.load(inp).files]))
                got = step.run(arrays)
                parts["outputs"].append(_timed(lambda: np.savez(
                    out, **{f"out{i}": np.stack([got[d][i] for d in range(n)])
                            for i in range(len(got[0]))})))
                for _ in range(args.calls):
                    parts["step (cluster call)"].append(_timed(lambda: step.run(arrays)))
                    parts["tiny cluster call"].append(_timed(lambda: small.run(
                        [np.zeros((n, 4), np.float32)])))
    med = {k: statistics.median(v) for k, v in parts.items()}
    whole = statistics.median(total)
    print(f"{'part of a warm `xladist run -n 2`':<36} {'median s':>9}")
    for k in ("launch", "imports, launching process", "imports, rank", "parse + verify",
              "packed module (pack, rank load)", "deadlock check", "cache load", "inputs", "step (cluster call)", "outputs"):
        print(f"{k:<36} {med[k]:>9.3f}")
    counted = sum(med[k] for k in ("launch", "imports, launching process", "imports, rank",
                                   "parse + verify", "packed module (pack, rank load)",
                                   "deadlock check", "cache load", "inputs",
                                   "step (cluster call)", "outputs"))
    print(f"{'rest (start-up, exchanges, exit)':<36} {whole - counted:>9.3f}")
    print(f"{'whole command, wall':<36} {whole:>9.3f}   ({len(total)} runs: "
          f"{', '.join(f'{t:.2f}' for t in total)})")
    print(f"persistent cluster: step call {1e3 * med['step (cluster call)']:.1f} ms, tiny call "
          f"{1e3 * med['tiny cluster call']:.1f} ms (medians of {len(parts['tiny cluster call'])})")
    print(f"load average after: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
