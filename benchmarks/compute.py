"""Compute benchmarks of the cpu backend, side by side with numpy and jax.jit.

    python benchmarks/compute.py [--quick] [--rows WORD,...] [--no-one-thread]
    python benchmarks/compute.py --company [--rows WORD,...] [--repeats N] [--warm N]

Every row is measured in one run, interleaving the contenders (one timed sample of
each per round, so load bursts hit all alike): median of `--repeats` samples after a
warm-up. Two columns of ratios xladist/jax.jit:
- default threading on every side, in this process (what a user sees): xladist with
  its compute pool (XLADIST_THREADS, else the cores of the affinity mask; OpenBLAS on
  one thread while xladist executes, xladist splitting large BLAS calls on its pool),
  numpy with OpenBLAS's own default threads, jax with XLA:CPU's default thread pools;
- one thread on every side, in a child process (`--one-thread`, started by this
  script): the process pinned to one core with sched_setaffinity (what `taskset -c 0`
  does, so no side can use a second core whatever its thread pools), XLADIST_THREADS=1,
  OPENBLAS_NUM_THREADS=1 and XLA_FLAGS="--xla_cpu_multi_thread_eigen=false
  intra_op_parallelism_threads=1" set before numpy and jax load. The child prints its
  affinity and thread settings, and checks that jax's process CPU time does not exceed
  its wall time (one core busy at most).
`--company` (issue 31) times the rows in three situations instead: quiet, right after
numpy and jax ran in the process (their pools still awake), and with one busy process
per core; each cell xladist / numpy / jax with wall and CPU per call, and the ways
xladist's split calls took (SITUATIONS, company()).
Both sides use the OpenBLAS kernel hostinfo.blas_coretype() names for this CPU
(set before numpy loads). The header prints the thread counts, OpenBLAS's kernel and the
load average: on a shared machine the ratios are noisy.
"""

from __future__ import annotations

import os
import sys

ONE_THREAD = "--one-thread" in sys.argv
if ONE_THREAD:
    os.environ["XLADIST_THREADS"] = "1"
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1").strip()
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass

import argparse
import contextlib
import json
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import xladist  # noqa: E402
from xladist.compiler import parallel  # noqa: E402
from xladist.runtime import hostinfo  # noqa: E402

try:  # measured ways (issue 31); absent when this script times an older checkout
    from xladist.compiler import choice
except ImportError:
    choice = None

if __name__ == "__main__" and hostinfo.blas_coretype() and \
        "OPENBLAS_CORETYPE" not in os.environ:
    # OpenBLAS reads it when it loads (numpy is loaded by now): start again with it set.
    # Only as a script: a program importing this module (`python -c`) has no argv to run.
    os.environ["OPENBLAS_CORETYPE"] = hostinfo.blas_coretype()
    os.execv(sys.executable, [sys.executable, *sys.argv])

try:  # jax is a reference only; the project never imports it
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
except ImportError:  # jax missing: numpy is the only reference
    jax = None


# Between two contenders' samples: XLA's pool threads keep spinning ~2-5 ms after each
# jax call (this process's runnable threads, sampled after a jax row-sum: 1.85 at 0-1 ms,
# 1.70 at 2 ms, 1.00 from 5 ms), and xladist, run next, read them as a busy machine
# (parallel._has_room) and stayed on one thread. OpenBLAS's workers spin ~0.1 s after
# numpy's multi-threaded matmul (its THREAD_TIMEOUT, 2^28 TSC cycles) and take most of a
# core from whoever runs next: xladist's matmul 512 took 4.2 ms in that window instead
# of 2.2 ms, split or not (quiet host). So after PAUSE the next sample also waits (at
# most QUIESCE seconds) until no other thread of this process is runnable. No contender
# is timed in another's wake.
PAUSE = 0.01
QUIESCE = 0.3
_seen: dict[int, tuple[float, bool]] = {}  # tid -> (CPU time, runnable) at the last look


def own_runnable() -> int:
    """Threads of this process other than the caller that are runnable now
    (/proc/self/task/TID/stat); a thread asleep at the last look whose CPU clock has
    not moved since is not read again."""
    global _seen
    me = threading.get_native_id()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return 0
    seen, n = {}, 0
    for tid in tids:
        if tid == me:
            continue
        try:  # the thread's CPU clock: CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED
            cpu = time.clock_gettime(((~tid) << 3) | 6)
        except (OSError, ValueError, OverflowError):
            continue
        last = _seen.get(tid)
        if last is not None and last[0] == cpu and not last[1]:
            seen[tid] = last
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        runnable = stat[stat.rindex(b")") + 2:][:1] == b"R"
        seen[tid] = (cpu, runnable)
        n += runnable
    _seen = seen
    return n


def quiesce() -> float:
    """Sleep PAUSE, then until this process's other threads are asleep (at most
    QUIESCE s); the seconds waited beyond PAUSE."""
    time.sleep(PAUSE)
    t0 = time.perf_counter()
    own_runnable()
    while time.perf_counter() - t0 < QUIESCE:
        time.sleep(0.005)
        if own_runnable() == 0:
            break
    return time.perf_counter() - t0


def interleaved_medians(fns: dict, repeats: int, min_time: float = 0.02):
    """Median seconds per call of every contender, and its process CPU time over wall
    time (the cores it kept busy). The samples are taken in turns, one of each per
    round, so a burst of load on a shared machine hits every contender alike. Each
    gets a warm-up (compiles, caches, page faults); fast calls are batched so timer
    resolution does not dominate; quiesce() before each sample."""
    got = interleaved(fns, repeats, min_time)
    return {k: v["s"] for k, v in got.items()}, {k: v["busy"] for k, v in got.items()}


def interleaved(fns: dict, repeats: int, min_time: float = 0.02, company: bool = False):
    """Per contender: median seconds per call `s`, process CPU seconds per call `cpu`
    and CPU over wall `busy`, sampled in turns (interleaved_medians). `company`: no
    quiesce; each sample is one call taken right after every other contender ran once
    (untimed), their thread pools still awake -- OpenBLAS's workers spin ~0.1 s after
    numpy's threaded matmul, XLA's a few ms after a jax call -- as in a process that
    uses all three in turns."""
    inner = {}
    for k, fn in fns.items():
        fn()
        t0 = time.perf_counter()
        fn()
        inner[k] = 1 if company else max(1, int(min_time / max(time.perf_counter() - t0, 1e-7)))
    samples = {k: [] for k in fns}
    cpu, wall = dict.fromkeys(fns, 0.0), dict.fromkeys(fns, 0.0)
    for _ in range(repeats):
        for k, fn in fns.items():
            if company:
                for other, g in fns.items():
                    if other != k:
                        g()
            else:
                quiesce()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(inner[k]):
                fn()
            w = time.perf_counter() - t0
            cpu[k] += time.process_time() - c0
            wall[k] += w
            samples[k].append(w / inner[k])
    return {k: {"s": statistics.median(samples[k]), "cpu": cpu[k] / (repeats * inner[k]),
                "busy": cpu[k] / wall[k] if wall[k] else None} for k in fns}


# ---- modules (HLO text) -----------------------------------------------------------

ADD = "add { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y) }\n"
MAX = "max { x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] maximum(x, y) }\n"


def chain_hlo(n: int) -> str:
    return f"""HloModule chain
ENTRY main {{
  a = f32[{n}] parameter(0)
  b = f32[{n}] parameter(1)
  c = f32[{n}] parameter(2)
  m = f32[{n}] multiply(a, b)
  s = f32[{n}] add(m, c)
  t = f32[{n}] tanh(s)
  h = f32[] constant(0.5)
  hb = f32[{n}] broadcast(h), dimensions={{}}
  u = f32[{n}] multiply(t, hb)
  ROOT r = f32[{n}] add(u, a)
}}
"""


def sum_hlo(n: int, m: int, axis: int) -> str:
    """Sum of an f32[n, m] over one axis: 1 a row sum, 0 a column sum."""
    return f"""HloModule sum{axis}
{ADD}
ENTRY main {{
  a = f32[{n},{m}] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{(n, m)[1 - axis]}] reduce(a, z), dimensions={{{axis}}}, to_apply=add
}}
"""


def softmax_hlo(n: int, m: int) -> str:
    return f"""HloModule softmax
{ADD}
{MAX}
ENTRY main {{
  x = f32[{n},{m}] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[{n}] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = f32[{n},{m}] broadcast(mx), dimensions={{0}}
  d = f32[{n},{m}] subtract(x, mb)
  e = f32[{n},{m}] exponential(d)
  z = f32[] constant(0)
  s = f32[{n}] reduce(e, z), dimensions={{1}}, to_apply=add
  sb = f32[{n},{m}] broadcast(s), dimensions={{0}}
  ROOT r = f32[{n},{m}] divide(e, sb)
}}
"""


def conv_hlo(b: int, h: int, w: int, ci: int, co: int) -> str:
    return f"""HloModule conv
ENTRY main {{
  x = f32[{b},{h},{w},{ci}] parameter(0)
  k = f32[3,3,{ci},{co}] parameter(1)
  ROOT y = f32[{b},{h},{w},{co}] convolution(x, k), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
}}
"""


def conv_numpy(x, k):
    """3x3 'same' convolution, NHWC x HWIO: the nine shifted matmuls."""
    b, h, w, _ = x.shape
    p = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((b, h, w, k.shape[3]), np.float32)
    for i in range(3):
        for j in range(3):
            out += p[:, i:i + h, j:j + w, :] @ k[i, j]
    return out


ADD8_HLO = """HloModule add8
ENTRY main {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  ROOT r = f32[8] add(a, b)
}
"""


def matmul_hlo(n: int) -> str:
    return f"""HloModule matmul
ENTRY main {{
  a = f32[{n},{n}] parameter(0)
  b = f32[{n},{n}] parameter(1)
  ROOT d = f32[{n},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""


def scan_hlo(n: int, m: int) -> str:
    """lax.scan / fori_loop stacking: n iterations, each writing one row of the carry
    with dynamic-update-slice (in place on the cpu backend: O(m) per iteration)."""
    carry = f"(s32[], f32[{n},{m}], f32[1,{m}])"
    return f"""HloModule scan_dus
body {{
  s = {carry} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  buf = f32[{n},{m}] get-tuple-element(s), index=1
  row = f32[1,{m}] get-tuple-element(s), index=2
  one.f = f32[] constant(1)
  b1 = f32[1,{m}] broadcast(one.f), dimensions={{}}
  row.1 = f32[1,{m}] add(row, b1)
  zero = s32[] constant(0)
  buf.1 = f32[{n},{m}] dynamic-update-slice(buf, row.1, i, zero)
  one = s32[] constant(1)
  i.1 = s32[] add(i, one)
  ROOT t = {carry} tuple(i.1, buf.1, row.1)
}}
cond {{
  c = {carry} parameter(0)
  k = s32[] get-tuple-element(c), index=0
  lim = s32[] constant({n})
  ROOT lt = pred[] compare(k, lim), direction=LT
}}
ENTRY main {{
  x = f32[1,{m}] parameter(0)
  z = f32[] constant(0)
  buf = f32[{n},{m}] broadcast(z), dimensions={{}}
  zero = s32[] constant(0)
  init = {carry} tuple(zero, buf, x)
  loop = {carry} while(init), condition=cond, body=body
  ROOT r = f32[{n},{m}] get-tuple-element(loop), index=1
}}
"""


def scan_numpy(x):
    n = x.shape[1]
    buf = np.zeros((n, n), np.float32)
    row = x
    for i in range(n):
        row = row + np.float32(1)
        buf[i] = row[0]
    return buf


def scan_jax(x):
    n = x.shape[1]

    def body(i, c):
        buf, row = c
        row = row + 1
        return jax.lax.dynamic_update_slice(buf, row, (i, 0)), row
    return jax.lax.fori_loop(0, n, body, (jnp.zeros((n, n), jnp.float32), x))[0]


MLP_PATH = Path(__file__).parent / "mlp_train_step.hlo"


def mlp_numpy(w1, b1, w2, b2, x, y):
    """The same training step written by hand (forward, backward, SGD)."""
    h_pre = x @ w1 + b1
    h = np.maximum(h_pre, 0)
    out = h @ w2 + b2
    diff = out - y
    loss = np.mean(diff * diff)
    g_out = diff * (2.0 / diff.size)
    g_w2 = h.T @ g_out
    g_b2 = g_out.sum(0)
    g_h = (g_out @ w2.T) * (h_pre > 0)
    g_w1 = x.T @ g_h
    g_b1 = g_h.sum(0)
    lr = np.float32(0.01)
    return loss, w1 - lr * g_w1, b1 - lr * g_b1, w2 - lr * g_w2, b2 - lr * g_b2


def mlp_jax(w1, b1, w2, b2, x, y):
    def loss(params):
        a1, c1, a2, c2 = params
        h = jnp.maximum(x @ a1 + c1, 0.0)
        return jnp.mean((h @ a2 + c2 - y) ** 2)
    val, g = jax.value_and_grad(loss)((w1, b1, w2, b2))
    return (val, *[p - 0.01 * gp for p, gp in zip((w1, b1, w2, b2), g)])


# ---- rows -------------------------------------------------------------------------

def compile_cpu(text: str):
    return xladist.compile(xladist.parse_hlo(text), backend="cpu")


def _jit(fn):
    if jax is None:
        return None
    j = jax.jit(fn)

    def run(*args):
        return jax.block_until_ready(j(*args))
    return run


def transformer_step(batch: int, tokens: int, width: int):
    """One transformer block's training step (attention, layer norm, gelu MLP; jax.grad
    and an SGD update; benchmarks/compile_scaling.py's step), made by jax: xladist gets
    the HLO jax lowers it to (before XLA's optimizations, what a JAX dump holds), jax
    runs it under jax.jit. (xladist executable, jax function, inputs as flat leaves)."""
    from benchmarks.compile_scaling import step_function
    rng = np.random.default_rng(0)
    shapes = {"wq": (width, width), "wk": (width, width), "wv": (width, width),
              "wo": (width, width), "w1": (width, 4 * width), "w2": (4 * width, width)}
    ps = [{k: (rng.standard_normal(s) * 0.05).astype(np.float32) for k, s in shapes.items()}]
    x = rng.standard_normal((batch, tokens, width)).astype(np.float32)
    step = step_function(jax, jnp)
    leaves, tree = jax.tree_util.tree_flatten((ps, x))
    exe = compile_cpu(jax.jit(step).lower(ps, x).as_text(dialect="hlo"))
    j = jax.jit(step)

    def run_jax(*flat):
        return jax.block_until_ready(j(*tree.unflatten(flat)))
    return exe, run_jax, tuple(leaves)


TRANSFORMER = "transformer block training step (8x128 tokens, width 256)"


def rows(quick: bool, want=lambda name: True):
    rng = np.random.default_rng(0)
    f32 = np.float32

    def chain(n):
        a, b, c = (rng.standard_normal(n).astype(f32) for _ in range(3))
        return (f"elementwise tanh(a*b+c)*0.5+a {n // (1 << 20)}M f32", compile_cpu(chain_hlo(n)),
                lambda a, b, c: np.tanh(a * b + c) * f32(0.5) + a,
                _jit(lambda a, b, c: jnp.tanh(a * b + c) * 0.5 + a), (a, b, c), "fast")

    # The cost of a call itself: what a loop of small steps pays on every step (argument
    # checks, buffers, the thunk list, the result), beside numpy's and jax.jit's dispatch.
    v = rng.standard_normal(8).astype(f32)
    yield ("call: f32[8] add", compile_cpu(ADD8_HLO), lambda a, b: a + b,
           _jit(lambda a, b: a + b), (v, v), "fast")
    s8 = rng.standard_normal((8, 8)).astype(f32)
    yield ("call: 8x8 f32 dot", compile_cpu(matmul_hlo(8)), lambda p, q: p @ q,
           _jit(lambda p, q: p @ q), (s8, s8), "blas")
    yield chain(1 << 20)
    yield chain((1 << 22) if quick else (1 << 24))
    n = 1024 if quick else 4096
    a = rng.standard_normal((n, n)).astype(f32)
    yield (f"row-sum {n}x{n} f32", compile_cpu(sum_hlo(n, n, 1)), lambda a: a.sum(axis=1),
           _jit(lambda a: jnp.sum(a, axis=1)), (a,), "fast")
    yield (f"column-sum {n}x{n} f32", compile_cpu(sum_hlo(n, n, 0)), lambda a: a.sum(axis=0),
           _jit(lambda a: jnp.sum(a, axis=0)), (a,), "fast")
    x = rng.standard_normal((1024, 4096)).astype(f32)

    def np_softmax(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    yield ("softmax 1024x4096 f32", compile_cpu(softmax_hlo(1024, 4096)), np_softmax,
           _jit(lambda x: jax.nn.softmax(x, axis=1)), (x,), "fast")
    for m in (512, 1024):
        p, q = (rng.standard_normal((m, m)).astype(f32) for _ in range(2))
        yield (f"matmul {m}x{m} f32", compile_cpu(matmul_hlo(m)), lambda p, q: p @ q,
               _jit(lambda p, q: p @ q), (p, q), "blas")
    x = rng.standard_normal((8, 56, 56, 64)).astype(f32)
    k = (rng.standard_normal((3, 3, 64, 64)) * 0.1).astype(f32)
    yield ("conv 3x3 NHWC 8x56x56x64->64 f32", compile_cpu(conv_hlo(8, 56, 56, 64, 64)),
           conv_numpy, _jit(lambda x, k: jax.lax.conv_general_dilated(
               x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))),
           (x, k), "blas")
    n = 256 if quick else 1000
    yield (f"scan: {n} x dynamic-update-slice of a row into {n}x{n} f32",
           compile_cpu(scan_hlo(n, n)), scan_numpy, _jit(scan_jax),
           (rng.standard_normal((1, n)).astype(f32),), "loop")
    w1 = (rng.standard_normal((512, 1024)) * 0.05).astype(f32)
    b1 = np.zeros(1024, f32)
    w2 = (rng.standard_normal((1024, 128)) * 0.05).astype(f32)
    b2 = np.zeros(128, f32)
    xb = rng.standard_normal((256, 512)).astype(f32)
    yb = rng.standard_normal((256, 128)).astype(f32)
    yield ("MLP training step (256x512->1024->128)", compile_cpu(MLP_PATH.read_text()),
           mlp_numpy, _jit(mlp_jax), (w1, b1, w2, b2, xb, yb), "module")
    if jax is not None and want(TRANSFORMER):
        exe, run_jax, leaves = transformer_step(8, 128, 256)
        yield (TRANSFORMER, exe, None, run_jax, leaves, "module")
    corpus = ROOT / "tests" / "data" / "corpus" / "single" / "reduce_window_pooling"
    module = xladist.load_hlo(corpus / "module.hlo")
    with np.load(corpus / "inputs.npz") as npz:
        args = tuple(npz[f"arg{p.parameter_number}"] for p in module.entry.parameters)
    interp = xladist.compile(module, backend="interpreter")
    yield ("corpus single/reduce_window_pooling (numpy col = interpreter)",
           xladist.compile(module, backend="cpu"), lambda *a: interp(*a), None, args, "module")


def compile_rows(repeats: int):
    text = MLP_PATH.read_text()
    cold = []
    for _ in range(max(3, repeats // 3)):
        with tempfile.TemporaryDirectory() as d:
            os.environ["XLADIST_CACHE_DIR"] = d
            t0 = time.perf_counter()
            compile_cpu(text)
            cold.append(time.perf_counter() - t0)
    with tempfile.TemporaryDirectory() as d:
        os.environ["XLADIST_CACHE_DIR"] = d
        compile_cpu(text)
        warm = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            exe = compile_cpu(text)
            warm.append(time.perf_counter() - t0)
            assert exe.program.cached
    os.environ.pop("XLADIST_CACHE_DIR", None)
    return statistics.median(cold), statistics.median(warm)


def check(got, want, name):
    got = got if isinstance(got, (list, tuple)) else [got]
    want = want if isinstance(want, (list, tuple)) else [want]
    for g, w in zip(got, want):
        if not np.allclose(np.asarray(g), np.asarray(w), rtol=2e-3, atol=2e-4):
            raise SystemExit(f"{name}: xladist result differs from the reference")


def header() -> list[str]:
    lines = [f"load average (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
             f"on {os.cpu_count()} cpus; affinity {len(os.sched_getaffinity(0))} cpus",
             f"xladist threads {parallel.thread_count()} (its BLAS calls on "
             f"{parallel.BLAS_THREADS} thread each); OpenBLAS for numpy " + ", ".join(
                 f"{b['core']} x{b['threads']}" for b in parallel.blas_info()) +
             f" (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')})"]
    if jax is not None:
        lines.append(f"jax {jax.__version__}; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    return lines


def measure(args, repeats: int) -> list[dict]:
    table = []
    for name, exe, np_fn, jax_fn, inputs, _kind in rows(args.quick, wanted(args)):
        if not wanted(args)(name):
            continue
        check_row(name, exe, np_fn, jax_fn, inputs)
        fns = {"x": lambda e=exe, a=inputs: e(*a)}
        if np_fn:
            fns["n"] = lambda f=np_fn, a=inputs: f(*a)
        if not ONE_THREAD:  # the same executable on one thread, in turns with the rest
            fns["x1"] = lambda e=exe, a=inputs: _one_thread(e, a)
        if jax_fn:  # jax gets device arrays: the transfer is not part of its compute
            j_inputs = [jax.device_put(x) for x in inputs]
            fns["j"] = lambda f=jax_fn, a=j_inputs: f(*a)
        t, busy = interleaved_medians(fns, repeats)
        t_x, t_n, t_j = t["x"], t.get("n"), t.get("j")
        t_x1 = t.get("x1")
        table.append({"name": name, "xladist_s": t_x, "numpy_s": t_n, "jax_s": t_j,
                      "xladist_over_xladist_1thread": t_x / t_x1 if t_x1 else None,
                      "jax_cores_busy": busy.get("j"),
                      "numpy_over_xladist": t_n / t_x if t_n else None,
                      "xladist_over_jax": (t_x / t_j) if t_j else None})
        if ONE_THREAD:
            print(f"  {name}: done", file=sys.stderr, flush=True)
    return table


def _time(seconds: float) -> str:
    """Nine columns: ms, or us below 0.1 ms (the call rows)."""
    return f"{seconds * 1e3:7.2f}ms" if seconds >= 1e-4 else f"{seconds * 1e6:7.2f}us"


def wanted(args):
    """Whether a row's name is selected by --rows."""
    words = args.rows.split(",") if args.rows else None
    return lambda name: words is None or any(w in name for w in words)


def check_row(name, exe, np_fn, jax_fn, inputs) -> None:
    """xladist's result against numpy's, or jax's where a row has no numpy version."""
    ours = exe(*inputs)
    if np_fn:
        check(ours, np_fn(*inputs), name)
    else:
        check(list(ours), jax.tree_util.tree_leaves(jax_fn(*inputs)), name)


def _one_thread(exe, inputs):
    parallel.set_threads(1)
    try:
        exe(*inputs)
    finally:
        parallel.set_threads(None)


def one_thread_table(args, repeats: int) -> dict:
    """The same rows in a child process with one thread on every side."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "one.json"
        cmd = [sys.executable, __file__, "--one-thread", "--json", str(out),
               "--repeats", str(repeats)] + (["--quick"] if args.quick else []) + \
            (["--rows", args.rows] if args.rows else [])
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=3600)
        print("one-thread child: " + proc.stdout.strip().replace("\n", "\n  "))
        if proc.returncode != 0:
            raise SystemExit("the one-thread child failed")
        return {r["name"]: r for r in json.loads(out.read_text())}


# ---- in company (issue 31) -------------------------------------------------------------
# A user's process rarely runs xladist alone: `xladist.jax` users have numpy and jax in
# it, and machines run other work. `--company` times every selected row, every side in
# turns, in three situations:
#   quiet            quiesce() before each sample (the main table's rounds);
#   after numpy+jax  each sample one call right after the other sides ran once, their
#                    pools still awake (interleaved(company=True));
#   background load  the quiet rounds with one busy process per core of the affinity
#                    mask, each pinned to its core.
SITUATIONS = ("quiet", "after numpy+jax", "background load")
# A hog spins until its parent is gone (its parent id is no longer the one it was given:
# a parent that died before the hog started counts too): a benchmark stopped by a signal
# (timeout's SIGTERM, a closed pipe) runs no `finally`, and hogs that outlived it kept
# two cores busy for every later measurement on the machine.
_HOG = ("import os, sys\nparent = int(sys.argv[2])\ntry:\n"
        "    os.sched_setaffinity(0, {int(sys.argv[1])})\nexcept OSError:\n    pass\n"
        "while os.getppid() == parent:\n    for _ in range(100000):\n        pass\n")


@contextlib.contextmanager
def background_load():
    """One busy process per core of this process's affinity mask, killed on leaving."""
    hogs = [subprocess.Popen([sys.executable, "-c", _HOG, str(c), str(os.getpid())])
            for c in sorted(os.sched_getaffinity(0))]
    try:
        time.sleep(0.5)  # started, and seen by the load samples (parallel._has_room)
        yield len(hogs)
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait(10)


def _side(got: dict | None) -> str:
    if got is None:
        return f"{'-':>27}"
    return f"{got['s'] * 1e3:8.2f}ms ({got['cpu'] * 1e3:7.2f} CPU, {got['busy']:.1f}c)"


def company(args, repeats: int) -> list[dict]:
    """The --company table (see SITUATIONS): per row and situation each side's median
    wall time per call, CPU time per call and cores busy (CPU / wall), xladist over the
    faster of numpy and jax, and which ways xladist's split calls ran (choice.py)."""
    want = wanted(args)
    print("\n".join(header()))
    print(f"threads: xladist {parallel.thread_count()} (its pool, or OpenBLAS's threads for a "
          f"large product where measured faster); numpy: OpenBLAS's default "
          f"({', '.join(str(b['threads']) for b in parallel.blas_info())}); jax: XLA:CPU's "
          f"default pools. Each cell: median wall per call (CPU per call, cores busy).")
    print(f"{'situation':<17} {'xladist':>27} {'numpy':>27} {'jax.jit':>27} "
          f"{'x/min':>6}  xladist ways (calls)")
    table = []
    for name, exe, np_fn, jax_fn, inputs, _kind in rows(args.quick, want):
        if not want(name):
            continue
        check_row(name, exe, np_fn, jax_fn, inputs)
        fns = {"x": lambda e=exe, a=inputs: e(*a)}
        if np_fn:
            fns["n"] = lambda f=np_fn, a=inputs: f(*a)
        if jax_fn:
            j_inputs = [jax.device_put(x) for x in inputs]
            fns["j"] = lambda f=jax_fn, a=j_inputs: f(*a)
        print(name, flush=True)
        row = {"name": name}
        for situation in SITUATIONS:
            loaded = situation == "background load"
            with background_load() if loaded else contextlib.nullcontext():
                # Untimed rounds taken as the samples are (quiesced, or in company):
                # xladist's call sites learn their ways per regime (choice.py), and a
                # quiet call after a pause runs in another regime than one right after
                # numpy's, so warming up without the pauses left the quiet row's
                # site to time its ways inside the samples.
                if args.warm:
                    interleaved(fns, args.warm, company=situation == "after numpy+jax")
                before = choice.calls_by_way() if choice else {}
                load = os.getloadavg()[0]
                got = interleaved(fns, repeats, company=situation == "after numpy+jax")
            after = choice.calls_by_way() if choice else {}
            ways = {w: n - before.get(w, 0) for w, n in after.items() if n > before.get(w, 0)}
            others = [got[k]["s"] for k in ("n", "j") if k in got]
            ratio = got["x"]["s"] / min(others) if others else None
            row[situation] = {"load": load, "ways": ways, "xladist_over_min": ratio,
                              **{side: got.get(k) for k, side in
                                 (("x", "xladist"), ("n", "numpy"), ("j", "jax"))}}
            print(f"  {situation:<15} {_side(got['x'])} {_side(got.get('n'))} "
                  f"{_side(got.get('j'))} {f'{ratio:5.2f}x' if ratio else '     -'}  "
                  f"{', '.join(f'{w} {n}' for w, n in ways.items()) or '-'}"
                  f"  (load {load:.1f})", flush=True)
        table.append(row)
    print("growth under background load (wall per call, loaded / quiet):")
    for row in table:
        q, b = row["quiet"], row["background load"]
        grow = {side: b[side]["s"] / q[side]["s"] for side in ("xladist", "numpy", "jax")
                if q.get(side) and b.get(side)}
        print(f"  {row['name'][:60]:<60} " +
              "  ".join(f"{side} {g:.2f}x" for side, g in grow.items()))
        row["growth"] = grow
    print("\n".join(header()[:1]) + "  (after)")
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--json", help="also write the table as JSON to this file")
    ap.add_argument("--rows", help="only the rows whose names contain one of these "
                    "comma-separated words (e.g. matmul,MLP)")
    ap.add_argument("--one-thread", action="store_true",
                    help="(internal) measure with one thread on every side")
    ap.add_argument("--no-one-thread", action="store_true",
                    help="skip the one-thread column (no child process)")
    ap.add_argument("--warm", type=int, default=0,
                    help="--company: untimed calls of every side per situation before its "
                    "samples (steady state: xladist's call sites time every way first)")
    ap.add_argument("--company", action="store_true",
                    help="time the rows quiet, right after numpy and jax ran, and with "
                    "one busy process per core (SITUATIONS)")
    ap.add_argument("--sites", action="store_true",
                    help="--company: also print every call site's measured ways "
                    "(choice.report) at the end")
    args = ap.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 11)
    if args.company:
        table = company(args, repeats)
        if args.sites and choice:
            print("call sites (per regime: each way's median wall time of its last samples "
                  "(ms) and their count; the way chosen):")
            for name, regimes in sorted(choice.report(), key=lambda site: site[0]):
                for regime, ways in regimes.items():
                    print(f"  {name:<28} {regime:<22} " +
                          ", ".join(f"{w} {v}" for w, v in ways.items()))
        if args.json:
            Path(args.json).write_text(json.dumps(table, indent=1))
        return 0
    if args.one_thread:
        print("\n".join(header()))
        table = measure(args, repeats)
        busy = [r["jax_cores_busy"] for r in table if r["jax_cores_busy"]]
        if busy:  # the check that jax really ran on one core
            print(f"jax cores busy (CPU time / wall time) at most {max(busy):.2f}")
            if max(busy) > 1.1:
                raise SystemExit("jax used more than one core in the one-thread run")
        Path(args.json).write_text(json.dumps(table))
        return 0
    print("\n".join(header()))
    one = {} if args.no_one_thread else one_thread_table(args, repeats)
    print("columns: times at default threading; xla-d/jax; 1-thread: xladist/jax both "
          "on one thread (child); def/1t: xladist default over xladist on one thread, "
          "this process, in turns (how it degrades under load)")
    hdr = f"{'benchmark':<44} {'xladist':>9} {'numpy':>9} {'jax.jit':>9} " \
          f"{'xla-d/jax':>9} {'1-thread':>9} {'def/1t':>7}"
    print(hdr)
    print("-" * len(hdr))
    table = measure(args, repeats)
    for row in table:
        o = one.get(row["name"], {})
        row["one_thread_xladist_over_jax"] = o.get("xladist_over_jax")
        t_j = row["jax_s"]
        jt = _time(t_j) if t_j else f"{'-':>9}"
        jr = f"{row['xladist_over_jax']:8.2f}x" if t_j else f"{'-':>9}"
        if row["jax_cores_busy"]:
            jr += f" (jax {row['jax_cores_busy']:.1f} cores)"
        orr = f"{o['xladist_over_jax']:8.2f}x" if o.get("xladist_over_jax") else f"{'-':>9}"
        d1 = row["xladist_over_xladist_1thread"]
        nt = _time(row["numpy_s"]) if row["numpy_s"] else f"{'-':>9}"
        print(f"{row['name'][:44]:<44} {_time(row['xladist_s'])} "
              f"{nt} {jt} {jr} {orr} {d1:6.2f}x", flush=True)
    if args.rows:
        return 0
    cold, warm = compile_rows(repeats)
    table.append({"name": "MLP training step compile, cold", "xladist_s": cold})
    table.append({"name": "MLP training step compile, from cache", "xladist_s": warm})
    print(f"{'MLP training step compile, cold (target < 2 s)':<58} {cold * 1e3:8.1f}ms")
    print(f"{'MLP training step compile, from cache (target < 100 ms)':<58} {warm * 1e3:8.1f}ms")
    print("\n".join(header()[:1]) + "  (after)")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
