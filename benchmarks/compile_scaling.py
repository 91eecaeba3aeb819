"""Cold compile, xladist against XLA:CPU, on the same modules, side by side in one run.

    /path/to/python-with-jax benchmarks/compile_scaling.py [--steps transformer,mlp,conv]
        [--rounds 5] [--what-if] [--baseline PATH] [--layers 1,4,16] [--xladist PATH]

--steps (the default): the training steps of benchmarks/training_steps.py (a transformer
block data- and tensor-parallel, an MLP with Adam, a conv net), jitted for 2 devices. The
module is XLA's optimized per-device SPMD module (what `xladist.jax.export` writes and
`xladist run` compiles). Per round, in alternating order:
  * XLA:CPU: `jax.jit(step).lower(...).compile()` after `jax.clear_caches()` (a fresh
    lowering, no compile cache), in this process, XLA's default threads, with its CPU time
    (all its threads);
  * xladist: `xladist.compile(module)` with an empty kernel cache, in a fresh Python
    process each time (as `xladist run` compiles: its helper processes start inside the
    timed call), parse excluded, with its CPU time (this process and its helpers); then the
    same compile again in that process with the cache hot (warm: the object code loaded, no
    codegen, no LLVM), and a cold one with a new empty cache, the helpers running.
On a busy machine wall times move with the load; CPU times much less.
Medians over the rounds; the load average before and after (the machine is shared: times
move with it). --xladist PATH times another checkout's xladist (e.g. /work/main: before).
--what-if also times xladist with every unit compiled without loop unrolling, those that
compile_pool.pipeline_exact keeps on the exact pipeline (libm calls; fmuladd on a CPU
without FMA) included: not what xladist does, what those units cost.
--baseline PATH also times another checkout's xladist cold in a fresh process, as one more
side of the same alternating rounds (before/after a change, with XLA in the same run).

--layers: the older scaling table (compile time against repeated layers of a transformer
stack, batch 4, 32 tokens, width 64; parse + compile, one round).

Needs jax; without it, says so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

WIDTH, TOKENS, BATCH = 64, 32, 4

# Run in a fresh process by `xladist_fresh` (the cpu backend imported first, untimed):
# a cold compile (its helper processes start inside it, as in `xladist run`'s launcher), a
# warm one (cache hot), and a second cold one with a new empty cache (helpers running).
_CHILD = r"""
import json, os, sys, tempfile, time
import xladist
import xladist.compiler.program
try:
    from xladist.compiler.compile_pool import helper_pids
except ImportError:  # an xladist before compile units
    helper_pids = list
def cpu():  # this process and its helper processes, seconds
    t = time.process_time()
    for pid in helper_pids():
        try:
            f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            t += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return t
if sys.argv[2:] == ["what-if"]:  # not xladist: no unit on the exact pipeline
    from xladist.compiler import compile_pool
    compile_pool.pipeline_exact = lambda text, target: False
text = open(sys.argv[1]).read()
module = xladist.parse_hlo(text)
def compile_in(cache):
    os.environ["XLADIST_CACHE_DIR"] = cache
    c0, t0 = cpu(), time.perf_counter()
    exe = xladist.compile(module)
    return time.perf_counter() - t0, cpu() - c0, exe.program
with tempfile.TemporaryDirectory(prefix="xladist-compile-") as cache:
    cold, cold_cpu, prog = compile_in(cache)
    warm, _, again = compile_in(cache)
with tempfile.TemporaryDirectory(prefix="xladist-compile-") as cache:
    cold2, cold2_cpu, prog2 = compile_in(cache)
print(json.dumps({"cold": cold, "cold_cpu": cold_cpu, "warm": warm, "warm_cached": again.cached,
                  "cold2": cold2, "cold2_cpu": cold2_cpu,
                  "timings": prog.timings, "timings2": prog2.timings,
                  "stats": getattr(prog, "compile_stats", {}),
                  "stats2": getattr(prog2, "compile_stats", {}),
                  "kernels": len(prog.builder.kernels)}))
"""


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def xladist_fresh(path: Path, checkout: Path, what_if: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    env.pop("XLADIST_COMPILE_JOBS", None)
    argv = [sys.executable, "-c", _CHILD, str(path)] + (["what-if"] if what_if else [])
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True,
                         cwd=tempfile.gettempdir())
    return json.loads(out.stdout.strip().splitlines()[-1])


def xla_compile(jax, xj, case) -> tuple[float, float]:
    """(wall, cpu) seconds of XLA:CPU compiling the step from a fresh lowering."""
    fn, args, mesh, ins, outs = case
    jax.clear_caches()
    prep = xj.prepare(fn, *args, mesh_shape=mesh, in_specs=ins, out_specs=outs)
    c0, t0 = _cpu(), time.perf_counter()
    prep.lowered.compile()
    return time.perf_counter() - t0, _cpu() - c0


def steps_table(names: list[str], rounds: int, checkout: Path, what_if: bool,
                baseline: Path | None = None) -> None:
    import jax

    import training_steps
    from xladist.jax import lowering as xj
    print(f"load average (1/5/15 min) at the start: {_load()}; jax {jax.__version__}, "
          f"{os.cpu_count()} cores; xladist from {checkout}; {rounds} rounds, medians, "
          f"seconds")
    print("| step | HLO KB | kernels | XLA:CPU compile: wall (CPU) | xladist cold, fresh "
          "process: wall (CPU) | xladist / XLA: wall (CPU) | xladist cold, helpers up | "
          "xladist warm (cache hot) | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    details, what_ifs, baselines = [], [], []
    with tempfile.TemporaryDirectory(prefix="xladist-bench-") as tmp:
        for name in names:
            case = training_steps.make(name, jax)
            fn, args, mesh, ins, outs = case
            prep = xj.prepare(fn, *args, mesh_shape=mesh, in_specs=ins, out_specs=outs)
            text = xj.compile_text(prep)[0]
            path = Path(tmp) / f"{name}.hlo"
            path.write_text(text)
            xla, ours, relaxed, base, load0 = [], [], [], [], _load()
            sides = (["xla", "xladist"] + (["what-if"] if what_if else [])
                     + (["baseline"] if baseline else []))
            for r in range(rounds):
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    if side == "xla":
                        xla.append(xla_compile(jax, xj, case))
                    elif side == "xladist":
                        ours.append(xladist_fresh(path, checkout))
                    elif side == "baseline":
                        base.append(xladist_fresh(path, baseline))
                    else:
                        relaxed.append(xladist_fresh(path, checkout, what_if=True))
            t_xla = statistics.median(w for w, _ in xla)
            c_xla = statistics.median(c for _, c in xla)
            t_ours = statistics.median(o["cold"] for o in ours)
            c_ours = statistics.median(o["cold_cpu"] for o in ours)
            t_up = statistics.median(o["cold2"] for o in ours)
            warm = statistics.median(o["warm"] for o in ours)
            procs = max(o["stats"].get("processes", 1) for o in ours)
            st = ours[-1]["stats"]
            kern = f"{ours[-1]['kernels']}" + (f" ({st['units']} units, {st['exact']} exact)"
                                               if st else "")
            print(f"| {name} | {len(text) / 1024:.0f} | {kern} | {t_xla:.2f} ({c_xla:.2f}) | "
                  f"{t_ours:.2f} ({c_ours:.2f}), {procs} processes | {t_ours / t_xla:.2f}x "
                  f"({c_ours / c_xla:.2f}x) | {t_up:.2f} | {warm:.3f} | {load0} -> {_load()} |",
                  flush=True)
            if relaxed:
                what_ifs.append(f"{name}: {statistics.median(o['cold'] for o in relaxed):.2f} "
                                f"s ({statistics.median(o['cold_cpu'] for o in relaxed):.2f} "
                                f"CPU)")
            if base:
                b_cpu = statistics.median(o["cold_cpu"] for o in base)
                bst = base[-1]["stats"]
                baselines.append(
                    f"{name}: {statistics.median(o['cold'] for o in base):.2f} s ({b_cpu:.2f} "
                    f"CPU, {b_cpu / c_xla:.2f}x XLA's CPU)"
                    + (f", {bst['units']} units, {bst['exact']} exact" if bst else "")
                    + f"; this checkout's CPU / the baseline's: {c_ours / b_cpu:.2f}x")
            for which in ("timings", "timings2"):
                phases = {k: statistics.median(o[which].get(k, 0.0) for o in ours)
                          for k in ours[-1][which]}
                details.append((f"{name} ({'fresh' if which == 'timings' else 'helpers up'})",
                                phases))
    print()
    print("xladist cold compile by phase (medians, s; the rest of the cold time is verify "
          "and the dynamic-shape pass):")
    for n, ph in details:
        print(f"  {n}: " + ", ".join(f"{k} {v:.3f}" for k, v in ph.items()))
    if what_ifs:
        print("what if every unit got the pipeline without unrolling (not what xladist "
              "does), cold, fresh process: " + "; ".join(what_ifs))
    if baselines:
        print(f"baseline {baseline}, cold, fresh process, same rounds: " + "; ".join(baselines))
    print(f"load average at the end: {_load()}")


# ---- --layers: compile time against repeated layers ----------------------------------

def step_function(jax, jnp):
    def layer(p, x):
        q, k, v = x @ p["wq"], x @ p["wk"], x @ p["wv"]
        a = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / 8.0, axis=-1)
        x = x + (a @ v) @ p["wo"]
        x = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
        return x + jax.nn.gelu(x @ p["w1"]) @ p["w2"]

    def loss(ps, x):
        for p in ps:
            x = layer(p, x)
        return jnp.mean(x * x)

    def step(ps, x):
        g = jax.grad(loss)(ps, x)
        return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, ps, g)
    return step


def params(layers, jnp):
    rng = np.random.default_rng(0)
    shapes = {"wq": (WIDTH, WIDTH), "wk": (WIDTH, WIDTH), "wv": (WIDTH, WIDTH),
              "wo": (WIDTH, WIDTH), "w1": (WIDTH, 4 * WIDTH), "w2": (4 * WIDTH, WIDTH)}
    ps = [{k: jnp.asarray((rng.standard_normal(s) * 0.05).astype(np.float32))
           for k, s in shapes.items()} for _ in range(layers)]
    return ps, jnp.asarray(rng.standard_normal((BATCH, TOKENS, WIDTH)).astype(np.float32))


def kernel_counts(module) -> tuple[int, int]:
    from xladist.compiler.codegen.kernels.distinct import find_distinct
    from xladist.compiler.program import CpuProgram
    prog = CpuProgram(module, compile_code=False)
    found = find_distinct(prog.builder.kernels)
    return len(prog.builder.kernels), len(found.alone)


def xladist_cold(text: str) -> tuple[float, float, object]:
    import xladist
    with tempfile.TemporaryDirectory(prefix="xladist-compile-") as cache:
        old = os.environ.get("XLADIST_CACHE_DIR")
        os.environ["XLADIST_CACHE_DIR"] = cache
        try:
            t0 = time.perf_counter()
            module = xladist.parse_hlo(text)
            t1 = time.perf_counter()
            exe = xladist.compile(module)
            t2 = time.perf_counter()
            assert not exe.program.cached
        finally:
            if old is None:
                del os.environ["XLADIST_CACHE_DIR"]
            else:
                os.environ["XLADIST_CACHE_DIR"] = old
    return t1 - t0, t2 - t1, module


def layers_table(layer_counts: list[int]) -> None:
    import jax
    import jax.numpy as jnp
    print(f"load average (1/5/15 min): {_load()}; jax {jax.__version__}, "
          f"{os.cpu_count()} cores; times in seconds, cold (empty kernel cache)")
    print("| layers | form | HLO lines | kernels | distinct | xladist parse | "
          "xladist compile | jax compile | xladist/jax |")
    print("|---|---|---|---|---|---|---|---|---|")
    step = step_function(jax, jnp)
    for layers in layer_counts:
        lowered = jax.jit(step).lower(*params(layers, jnp))
        t0 = time.perf_counter()
        compiled = lowered.compile()
        tj = time.perf_counter() - t0
        for form, text in (("before opt", lowered.as_text(dialect="hlo")),
                           ("after opt", compiled.as_text())):
            tp, tc, module = xladist_cold(text)
            n, distinct = kernel_counts(module)
            print(f"| {layers} | {form} | {text.count(chr(10))} | {n} | {distinct} | "
                  f"{tp:.2f} | {tc:.2f} | {tj:.2f} | {(tp + tc) / tj:.1f}x |", flush=True)
    print(f"load average at the end: {_load()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", default=None,
                    help="comma-separated training_steps.py names (default: all)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", default=None, help="e.g. 1,4,16: the layer-scaling table")
    ap.add_argument("--xladist", default=str(ROOT), help="checkout whose xladist to time")
    ap.add_argument("--what-if", action="store_true",
                    help="also time xladist with every unit compiled without loop unrolling "
                         "(not what xladist does: what the exact pipeline's units cost)")
    ap.add_argument("--baseline", default=None,
                    help="also time this checkout's xladist in the same rounds (before/after)")
    args = ap.parse_args()
    try:
        import jax  # noqa: F401
    except ImportError:
        print("compile_scaling: jax is not installed; this benchmark compares with it")
        return 0
    from xladist.jax import ensure_devices
    ensure_devices(2)
    if args.layers:
        layers_table([int(x) for x in args.layers.split(",")])
        return 0
    import training_steps
    names = args.steps.split(",") if args.steps else list(training_steps.STEPS)
    steps_table(names, args.rounds, Path(args.xladist).resolve(), args.what_if,
                Path(args.baseline).resolve() if args.baseline else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
