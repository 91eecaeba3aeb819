"""f32 (or f64) GEMM on one core: the LLVM kernel (xladist/compiler/gemm_kernel.py) against numpy's
OpenBLAS and jax.jit (XLA:CPU), square products and the MLP benchmark's products.

    python benchmarks/gemm_kernels.py [--repeats N] [--rows WORD,...] [--no-2048]
                                      [--params "mc=144,kc=256"] [--f64]

The whole process is pinned to one core with sched_setaffinity (what `taskset -c 0`
does) before numpy or jax load, with OPENBLAS_NUM_THREADS=1, XLADIST_THREADS=1 and
XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1": no side
can use a second core whatever its thread pools; numpy's calls also run inside
parallel.blas_scope() (OpenBLAS on xladist's BLAS_THREADS = 1, as the dot path calls it).
Every row interleaves the contenders, one timed sample of each per round
(compute.interleaved_medians: warm-up, batching of fast calls, quiesce between
samples), median of --repeats rounds; every contender's result is checked against
float64 numpy first. The header prints the CPU, the vector width the kernel uses, the
thread settings, the load average (a shared machine: compare the ratios, and only
across runs) and the core's FMA peak measured here (fma_peak: what no GEMM can beat).

The MLP rows are the products of compute.py's training step (batch 256, 512 -> 1024 ->
128): forward x @ w1, h @ w2, and the backward products, whose transposed operands
every contender reads in place (a transposed view for numpy and the kernel, a
transpose inside the jitted function for XLA).
"""

from __future__ import annotations

import os
import sys

os.environ["XLADIST_THREADS"] = "1"
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false"
                           " intra_op_parallelism_threads=1").strip()
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import argparse  # noqa: E402
import ast  # noqa: E402
import ctypes  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
# compute.py: the house's interleaved timing, header, and OPENBLAS_CORETYPE re-exec.
from compute import header, interleaved_medians, jax  # noqa: E402

from xladist.compiler import gemm_kernel, jit, parallel, target  # noqa: E402


def shapes(big: bool):
    """(name, m, k, n, transpose a, transpose b): a is stored [k, m] when transposed,
    b [n, k]."""
    out = [(f"square {s}", s, s, s, False, False) for s in (256, 512, 1024)]
    if big:
        out.append(("square 2048", 2048, 2048, 2048, False, False))
    out += [("MLP fwd x@w1 256x512 @ 512x1024", 256, 512, 1024, False, False),
            ("MLP fwd h@w2 256x1024 @ 1024x128", 256, 1024, 128, False, False),
            ("MLP dw1 x^T@dh 512x256 @ 256x1024", 512, 256, 1024, True, False),
            ("MLP dh dy@w2^T 256x128 @ 128x1024", 256, 128, 1024, False, True),
            ("MLP dw2 h^T@dy 1024x256 @ 256x128", 1024, 256, 128, True, False),
            ("MLP dx dh@w1^T 256x1024 @ 1024x512", 256, 1024, 512, False, True)]
    return out


def fma_peak(dtype, chains: int = 12, steps: int = 5_000_000) -> float:
    """FLOP/s of `chains` independent vector FMA chains in registers (no memory
    traffic): the core's peak at the kernel's vector width, median of 7."""
    vw = gemm_kernel.vector_lanes(dtype)
    t = "float" if np.dtype(dtype) == np.float32 else "double"
    v = f"<{vw} x {t}>"
    sfx = f"v{vw}{'f32' if t == 'float' else 'f64'}"
    half, quarter = (f"<{', '.join([f'{t} {c}'] * vw)}>" for c in ("0.5", "0.25"))
    ir = ["define void @peak(i64 %n, ptr %out) {", "entry:", "  br label %loop", "loop:",
          "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    ir += [f"  %a{j} = phi {v} [{quarter}, %entry], [%f{j}, %loop]" for j in range(chains)]
    ir += [f"  %f{j} = call {v} @llvm.fma.{sfx}({v} %a{j}, {v} {half}, {v} {quarter})"
           for j in range(chains)]
    ir += ["  %i1 = add i64 %i, 1", "  %c = icmp slt i64 %i1, %n",
           "  br i1 %c, label %loop, label %done", "done:"]
    # `align`: without it LLVM takes the vector's own alignment (32 B for AVX) and emits an
    # aligned store, which faulted (SIGSEGV) whenever numpy placed `out` only 16 B aligned.
    esz = np.dtype(dtype).itemsize
    ir += [f"  %o{j} = getelementptr {v}, ptr %out, i64 {j}\n"
           f"  store {v} %f{j}, ptr %o{j}, align {esz}" for j in range(chains)]
    ir += ["  ret void", "}", f"declare {v} @llvm.fma.{sfx}({v}, {v}, {v})"]
    text = "\n".join(ir)
    code, _ = jit.get_code("xladist fma peak\n" + text, lambda: text)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(code.address("peak"))
    out = np.empty(chains * vw, dtype)
    fn(steps // 10, out.ctypes.data)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        fn(steps, out.ctypes.data)
        times.append(time.perf_counter() - t0)
    return 2 * chains * vw * steps / statistics.median(times)


def contenders(m, k, n, ta, tb, params, rng, dtype=np.float32):
    a_st = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b_st = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    a, b = (a_st.T if ta else a_st), (b_st.T if tb else b_st)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out_l, out_n = np.empty((m, n), dtype), np.empty((m, n), dtype)

    def llvm():
        return gemm_kernel.matmul(a, b, out=out_l, params=params)

    def openblas():
        with parallel.blas_scope():
            return np.matmul(a, b, out=out_n)

    fns = {"llvm": llvm, "openblas": openblas}
    if jax is not None:
        f = jax.jit(lambda x, y: (x.T if ta else x) @ (y.T if tb else y))
        ja, jb = jax.device_put(a_st), jax.device_put(b_st)
        assert f(ja, jb).dtype == dtype
        fns["jax"] = lambda: jax.block_until_ready(f(ja, jb))
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    for name, fn in fns.items():
        err = np.abs(np.asarray(fn(), np.float64) - ref)
        if not np.all(err <= 1e-5 * scale + 1e-30):
            raise SystemExit(f"{name} is wrong on {m}x{k} @ {k}x{n}: max error {err.max()}")
    return fns


def describe(params, dtype) -> list[str]:
    t = target.host_target()
    vb = gemm_kernel.vector_bytes()
    vw = gemm_kernel.vector_lanes(dtype)
    params = gemm_kernel.fitted(params, vw)  # the NC the kernel runs with
    name = np.dtype(dtype).name.replace("float", "f")
    return [f"cpu {t.cpu} ({'AVX-512' if vb == 64 else 'AVX2' if vb == 32 else '?'} + FMA "
            f"visible); kernel vectors of {vw} {name}, micro-tile {params.mr}x"
            f"{params.nv * vw}, MC {params.mc} KC {params.kc} NC {params.nc}, k unroll "
            f"{params.unroll}, prefetch A {params.prefetch_a} B {params.prefetch_b} C "
            f"{params.prefetch_c}",
            f"one-core FMA peak ({name}, 12 register chains): "
            f"{fma_peak(dtype) / 1e9:.1f} GFLOP/s",
            f"affinity {sorted(os.sched_getaffinity(0))}; OPENBLAS_NUM_THREADS="
            f"{os.environ['OPENBLAS_NUM_THREADS']}, xladist BLAS_THREADS "
            f"{parallel.BLAS_THREADS}; kernel: 1 thread (one call)"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--rows", help="only rows whose names contain one of these words")
    ap.add_argument("--no-2048", action="store_true", help="skip the 2048 square")
    ap.add_argument("--params", default="", help="gemm_kernel.Params overrides, "
                    "e.g. 'mc=144,kc=256,unroll=4'")
    ap.add_argument("--f64", action="store_true", help="f64 products instead of f32")
    ap.add_argument("--json", help="also write the table as JSON to this file")
    args = ap.parse_args(argv)
    dtype = np.float64 if args.f64 else np.float32
    if args.f64 and jax is not None:
        jax.config.update("jax_enable_x64", True)  # else jax computes f64 inputs in f32
    over = {kv.split("=")[0]: ast.literal_eval(kv.split("=")[1])
            for kv in args.params.split(",") if kv}
    params = dataclasses.replace(gemm_kernel.DEFAULT, **over)
    if not gemm_kernel.available():
        raise SystemExit("the LLVM GEMM kernel is not for this host (no FMA vectors)")
    print("\n".join(header() + describe(params, dtype)))
    names = ["llvm", "openblas"] + (["jax"] if jax is not None else [])
    title = f"product ({np.dtype(dtype).name}, one core)"
    hdr = (f"{title:<38}" + "".join(f"{n + ' ms':>12}" for n in names) +
           "".join(f"{n[:5] + ' GF/s':>11}" for n in names) +
           f"{'blas/llvm':>10}" + (f"{'jax/llvm':>9}" if jax is not None else ""))
    print(hdr + "\n" + "-" * len(hdr), flush=True)
    rng = np.random.default_rng(0)
    table = []
    for name, m, k, n, ta, tb in shapes(not args.no_2048):
        if args.rows and not any(r in name for r in args.rows.split(",")):
            continue
        fns = contenders(m, k, n, ta, tb, params, rng, dtype)
        t, _busy = interleaved_medians(fns, args.repeats)
        flops = 2.0 * m * n * k
        row = {"name": name, **{f"{c}_s": t[c] for c in names}}
        table.append(row)
        print(f"{name:<38}" + "".join(f"{t[c] * 1e3:12.3f}" for c in names) +
              "".join(f"{flops / t[c] / 1e9:11.1f}" for c in names) +
              f"{t['openblas'] / t['llvm']:9.3f}x" +
              (f"{t['jax'] / t['llvm']:8.3f}x" if jax is not None else ""), flush=True)
    print("ratios > 1: the LLVM kernel is faster. " + header()[0] + "  (after); FMA peak "
          f"again {fma_peak(dtype) / 1e9:.1f} GFLOP/s")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
