"""How compiling grows with module size: xladist's cold compile against jax's, same modules.

    /path/to/python-with-jax benchmarks/compile_scaling.py [--layers 1,4,16]

Every launch of `xladist run` on a new module (or with an empty kernel cache) pays the
compile before the first step, so it must grow with what a module contains that differs,
not with how often its layers repeat. For each layer count L this builds the training step
of an L-layer transformer block stack (attention, layer norm, gelu MLP; jax.grad and an SGD
update; batch 4, 32 tokens, width 64) with jax, and times, in this process:
- jax: `jax.jit(step).lower(...).compile()` (XLA:CPU, its default threads);
- xladist: parse + compile of the same function's HLO with an empty kernel cache, for the
  module before XLA's optimizations (`lowered.as_text(dialect="hlo")`, what a JAX
  "before_optimizations" dump holds) and after them (`compiled.as_text()`, fusions).
It prints the kernels each module has, how many of them are distinct, and the load
average (the machine is shared: times move with it). Needs jax; without it, says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import xladist
from xladist.compiler.codegen.kernels.distinct import emit_distinct_kernels
from xladist.compiler.program import CpuProgram

WIDTH, TOKENS, BATCH = 64, 32, 4


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
    from llvmlite import ir
    prog = CpuProgram(module, compile_code=False)
    aliases = emit_distinct_kernels(ir.Module(name="count"), prog.builder.kernels)
    repeats = {name for name in aliases if name in {k.name for k in prog.builder.kernels}}
    return len(prog.builder.kernels), len(prog.builder.kernels) - len(repeats)


def xladist_cold(text: str) -> tuple[float, float, object]:
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", default="1,4,16")
    args = ap.parse_args()
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("compile_scaling: jax is not installed; this benchmark compares with it")
        return 0
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average (1/5/15 min): {load}; jax {jax.__version__}, "
          f"{os.cpu_count()} cores; times in seconds, cold (empty kernel cache)")
    print("| layers | form | HLO lines | kernels | distinct | xladist parse | "
          "xladist compile | jax compile | xladist/jax |")
    print("|---|---|---|---|---|---|---|---|---|")
    step = step_function(jax, jnp)
    for layers in (int(x) for x in args.layers.split(",")):
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
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
