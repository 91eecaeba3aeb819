"""Multi-device JAX sweep: sharding and collectives as JAX/XLA make them, run by xladist.

    python tools/jax_mesh_sweep.py [--x64] [--exact] [-k SUBSTR] [--work DIR] [--out FILE]

A search run by hand (jax needed), not part of the test suite. Each program is written as a
user writes it, on a mesh of 2 or 4 devices (1-D "d", 2x2 "x","y", and 1x2 / 4x1 with an
axis of size 1): jit with in/out shardings and with_sharding_constraint (XLA's partitioner
inserts the collectives: sums, argmax, cumsum, sort, top_k, matmuls with a sharded
contracting dimension, transposes and reshapes that need all-to-all, gathers, scatters,
uneven shardings), and jax.shard_map with psum/pmean/pmax/pmin, psum_scatter, all_gather,
all_to_all, ppermute (cycles, partial permutations), axis_index, axis_index_groups,
collectives over one axis of a 2x2 mesh, inside scan/fori_loop/while_loop/cond, and small
data-parallel / tensor-parallel training steps. Every program runs on each element type
it allows (f32, bf16, f16, s32, u8, pred, c64; with --x64 f64, s64, and s32/c64 again).

Per program x type: `xladist.jax.export` (jax jits it for the mesh; XLA:CPU's own
per-device results go to expected.npz), then the exported module.hlo and inputs.npz run on
an `xladist.Cluster` of the mesh's size with the cpu and interpreter backends, and every
device's every result is compared with XLA:CPU's bit for bit. A float difference is
reported as `nan(...)` (only where one side is NaN), `signed-zero`, or `ulps=N` (the
largest distance in units of the last place). `--exact` draws float inputs as small
integers, so that every sum is exact in any order: there, a sum, matmul or collective must
be bit-exact, and only programs with transcendental functions or divisions may differ.
Results are appended to --out (JSON lines; a run skips what the file already holds).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import zlib
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_F = "--xla_force_host_platform_device_count=8"
if _F not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _F).strip()

ap = argparse.ArgumentParser()
ap.add_argument("--x64", action="store_true")
ap.add_argument("-k", default="")
ap.add_argument("--dtypes", default="")
ap.add_argument("--out", default="jax_mesh_sweep.jsonl")
ap.add_argument("--work", default="jax_mesh_sweep", help="folder for the exported cases")
ap.add_argument("--exact", action="store_true",
                help="float inputs are small integers: every sum is exact in any order")
ap.add_argument("--backends", default="cpu,interpreter")
opts = ap.parse_args()

import jax  # noqa: E402
jax.config.update("jax_enable_x64", opts.x64)
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import xladist  # noqa: E402
import xladist.jax as xj  # noqa: E402
from xladist.io import decode  # noqa: E402

WORK = Path(opts.work)

DT = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16, "s32": np.int32,
      "u8": np.uint8, "pred": np.bool_, "c64": np.complex64, "f64": np.float64, "s64": np.int64}
BASE = ["f32", "bf16", "f16", "s32", "u8", "pred", "c64"]
X64 = ["f64", "s32", "c64", "s64"]  # s32/c64 again under x64 (index types differ)
FLOATS = {"f32", "bf16", "f16", "f64"}
REAL = ["f32", "bf16", "f16", "s32", "u8", "f64", "s64"]
NUM = ["f32", "bf16", "f16", "s32", "u8", "c64", "f64", "s64"]


class Skip(Exception):
    pass


def vals(rng, shape, dt, special=False):
    t = DT[dt]
    if dt == "pred":
        return rng.random(shape) < 0.5
    if dt == "u8":
        return rng.integers(0, 256, shape).astype(t)
    if dt in ("s32", "s64"):
        return rng.integers(-60, 60, shape).astype(t)
    if opts.exact and dt in ("c64", "f32", "f64", "bf16", "f16"):
        lim = {"bf16": 4, "f16": 16}.get(dt, 60)
        re_ = rng.integers(-lim, lim + 1, shape)
        if dt == "c64":
            return (re_ + 1j * rng.integers(-lim, lim + 1, shape)).astype(t)
        return re_.astype(t)
    if dt == "c64":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(t)
    a = (rng.standard_normal(shape) * 3).astype(t)
    if special and a.size >= 4:
        flat = a.reshape(-1)
        flat[1] = np.nan
        flat[2] = -0.0
        flat[3] = 0.0
    return a


def sm(body, in_specs, out_specs, check_vma=True):
    return lambda *a: jax.shard_map(body, in_specs=in_specs, out_specs=out_specs,
                                    check_vma=check_vma)(*a)


CASES = []


def case(name, mesh, dtypes):
    def deco(builder):
        CASES.append((name, mesh, dtypes, builder))
        return builder
    return deco


M2 = {"d": 2}
M4 = {"d": 4}
M22 = {"x": 2, "y": 2}


# ---------------- GSPMD (jit with shardings): the partitioner inserts collectives --------
for mesh in (M2, M4):
    nd = list(mesh.values())[0]

    @case(f"gspmd_sum_all_m{len(mesh) and list(mesh.values())[0]}", mesh, NUM + ["pred"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)
        return (lambda a: jnp.sum(a)), [x], [P("d", None)], [P()]

    @case(f"gspmd_sum_axis0_m{list(mesh.values())[0]}", mesh, NUM)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)
        return (lambda a: jnp.sum(a, axis=0)), [x], [P("d", None)], [P()]

    @case(f"gspmd_max_min_m{list(mesh.values())[0]}", mesh, REAL)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 4), dt, special=True)
        return (lambda a: (jnp.max(a), jnp.min(a, axis=0))), [x], [P("d", None)], [P(), P()]

    @case(f"gspmd_argmax_m{list(mesh.values())[0]}", mesh, REAL)
    def _(rng, dt, nd=nd):
        x = vals(rng, (3, 8), dt, special=True)
        return (lambda a: (jnp.argmax(a, axis=1), jnp.argmin(a))), [x], [P(None, "d")], \
            [P(), P()]

    @case(f"gspmd_cumsum_m{list(mesh.values())[0]}", mesh, NUM)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 2), dt)
        return (lambda a: jnp.cumsum(a, axis=0)), [x], [P("d", None)], [P("d", None)]

    @case(f"gspmd_sort_m{list(mesh.values())[0]}", mesh, REAL)
    def _(rng, dt, nd=nd):
        x = vals(rng, (2, 8), dt, special=True)
        return (lambda a: jnp.sort(a, axis=1)), [x], [P(None, "d")], [P(None, "d")]

    @case(f"gspmd_topk_m{list(mesh.values())[0]}", mesh, REAL)
    def _(rng, dt, nd=nd):
        x = vals(rng, (2, 8), dt)
        return (lambda a: lax.top_k(a, 3)), [x], [P(None, "d")], [P(), P()]

    @case(f"gspmd_matmul_contract_m{list(mesh.values())[0]}", mesh, NUM)
    def _(rng, dt, nd=nd):
        a = vals(rng, (3, 8), dt)
        b = vals(rng, (8, 2), dt)
        return (lambda u, v: u @ v), [a, b], [P(None, "d"), P("d", None)], [P()]

    @case(f"gspmd_transpose_m{list(mesh.values())[0]}", mesh, BASE)
    def _(rng, dt, nd=nd):
        x = vals(rng, (4, 8), dt)
        return (lambda a: a.T), [x], [P("d", None)], [P("d", None)]

    @case(f"gspmd_reshape_m{list(mesh.values())[0]}", mesh, BASE)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 4), dt)
        return (lambda a: a.reshape(4, 8)), [x], [P(None, "d")], [P("d", None)]

    @case(f"gspmd_wsc_m{list(mesh.values())[0]}", mesh, NUM)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 4), dt)

        def f(a):
            b = jax.lax.with_sharding_constraint(a * a, P(None, "d"))
            return b.sum(axis=1), b
        return f, [x], [P("d", None)], [P(), P("d", None)]

    @case(f"gspmd_mean_var_m{list(mesh.values())[0]}", mesh, ["f32", "bf16", "f16", "f64"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 4), dt)
        return (lambda a: (jnp.mean(a, axis=0), jnp.var(a))), [x], [P("d", None)], [P(), P()]


@case("gspmd_matmul_2x2", M22, NUM)
def _(rng, dt):
    a = vals(rng, (4, 6), dt)
    b = vals(rng, (6, 4), dt)
    return (lambda u, v: u @ v), [a, b], [P("x", "y"), P("y", None)], [P("x", None)]


@case("gspmd_matmul_2x2_out_sharded", M22, ["f32", "bf16", "s32"])
def _(rng, dt):
    a = vals(rng, (4, 6), dt)
    b = vals(rng, (6, 4), dt)
    return (lambda u, v: u @ v), [a, b], [P("x", None), P(None, "y")], [P("y", "x")]


@case("gspmd_reshard_2x2", M22, BASE)
def _(rng, dt):
    x = vals(rng, (4, 4, 2), dt)

    def f(a):
        b = jax.lax.with_sharding_constraint(jnp.transpose(a, (1, 0, 2)), P("y", "x", None))
        return b, b.reshape(16, 2)
    return f, [x], [P("x", "y", None)], [P(("x", "y"), None, None), P(("y", "x"), None)]


@case("gspmd_sum_2x2", M22, NUM)
def _(rng, dt):
    x = vals(rng, (4, 6), dt)
    return (lambda a: (a.sum(0), a.sum(1), a.sum())), [x], [P("x", "y")], [P("y"), P("x"), P()]


@case("gspmd_argmax_2x2", M22, REAL)
def _(rng, dt):
    x = vals(rng, (4, 6), dt, special=True)
    return (lambda a: (a.argmax(0), a.argmax(1), a.max())), [x], [P("x", "y")], [P(), P(), P()]


@case("gspmd_sort_2x2", M22, REAL)
def _(rng, dt):
    x = vals(rng, (4, 8), dt)
    return (lambda a: (jnp.sort(a, axis=0), jnp.argsort(a, axis=1))), [x], [P("x", "y")], \
        [P("x", "y"), P("x", "y")]


# ---------------- shard_map collectives -----------------------------------------------------
for mesh in (M2, M4):
    nd = list(mesh.values())[0]
    perm_cycle = [(i, (i + 1) % nd) for i in range(nd)]
    perm_partial = [(0, nd - 1)] if nd == 2 else [(0, 2), (3, 1)]

    @case(f"sm_psum_m{nd}", mesh, NUM)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)
        return sm(lambda a: lax.psum(a, "d"), P("d"), P()), [x], [P("d")], [P()]

    @case(f"sm_pmean_m{nd}", mesh, ["f32", "bf16", "f16", "c64", "f64"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)
        return sm(lambda a: lax.pmean(a, "d"), P("d"), P()), [x], [P("d")], [P()]

    @case(f"sm_pmax_pmin_m{nd}", mesh, REAL)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt, special=True)
        return sm(lambda a: (lax.pmax(a, "d"), lax.pmin(a, "d")), P("d"), (P(), P())), [x], \
            [P("d")], [P(), P()]

    @case(f"sm_psum_scatter_m{nd}", mesh, NUM)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 8), dt)

        def body(a):  # local (8/nd, 8)
            t0 = lax.psum_scatter(a, "d", scatter_dimension=1, tiled=True)
            t1 = lax.psum_scatter(a.reshape(a.shape[0], nd, -1), "d", scatter_dimension=1,
                                  tiled=False)
            return t0, t1
        return sm(body, P("d"), (P("d"), P("d"))), [x], [P("d")], [P("d"), P("d")]

    @case(f"sm_psum_scatter_dim0_m{nd}", mesh, ["f32", "s32", "bf16"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 8), dt)
        return sm(lambda a: lax.psum_scatter(a, "d", scatter_dimension=0, tiled=True),
                  P(None, "d"), P("d")), [x], [P(None, "d")], [P("d")]

    @case(f"sm_all_gather_m{nd}", mesh, BASE)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 4), dt)

        def body(a):
            return (lax.all_gather(a, "d", axis=0, tiled=True),
                    lax.all_gather(a, "d", axis=1, tiled=True),
                    lax.all_gather(a, "d", axis=1, tiled=False),
                    lax.all_gather(a, "d", axis=0, tiled=False))
        return sm(body, P("d"), (P(), P(), P(), P()), check_vma=False), [x], [P("d")], [P()] * 4

    @case(f"sm_all_to_all_m{nd}", mesh, BASE)
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 8, 4), dt)

        def body(a):  # (8/nd, 8, 4)
            r0 = lax.all_to_all(a, "d", split_axis=1, concat_axis=0, tiled=True)
            r1 = lax.all_to_all(a, "d", split_axis=0, concat_axis=2, tiled=True) \
                if a.shape[0] % nd == 0 else a
            r2 = lax.all_to_all(a.reshape(a.shape[0], nd, -1, 4), "d", split_axis=1,
                                concat_axis=1)
            return r0, r1, r2
        return sm(body, P("d"), (P("d"), P("d"), P("d")), check_vma=False), [x], [P("d")], \
            [P("d")] * 3

    @case(f"sm_ppermute_m{nd}", mesh, BASE)
    def _(rng, dt, perm_cycle=perm_cycle, perm_partial=perm_partial, nd=nd):
        x = vals(rng, (8, 3), dt)

        def body(a):
            return lax.ppermute(a, "d", perm_cycle), lax.ppermute(a, "d", perm_partial)
        return sm(body, P("d"), (P("d"), P("d"))), [x], [P("d")], [P("d"), P("d")]

    @case(f"sm_axis_index_m{nd}", mesh, ["f32", "s32", "u8", "bf16"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)

        def body(a):
            i = lax.axis_index("d")
            return a * i.astype(a.dtype) + (i * 3).astype(a.dtype), jnp.full((1,), i)
        return sm(body, P("d"), (P("d"), P("d"))), [x], [P("d")], [P("d"), P("d")]

    @case(f"sm_pbroadcast_m{nd}", mesh, ["f32", "s32", "bf16", "pred"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)
        return sm(lambda a: lax.pbroadcast(a, "d", nd - 1), P("d"), P("d")), [x], [P("d")], \
            [P("d")]

    @case(f"sm_scan_m{nd}", mesh, ["f32", "s32", "bf16", "f64"])
    def _(rng, dt, perm_cycle=perm_cycle, nd=nd):
        x = vals(rng, (8, 3), dt)

        def body(a):
            def step(c, _):
                c2 = lax.ppermute(c, "d", perm_cycle) + lax.psum(c, "d") // 4 \
                    if dt in ("s32", "u8") else lax.ppermute(c, "d", perm_cycle) * 0.5 + \
                    lax.pmean(c, "d") * 0.25
                return c2, lax.pmax(c2, "d")
            return lax.scan(step, a, None, length=3)
        return sm(body, P("d"), (P("d"), P()), check_vma=False), [x], [P("d")], [P("d"), P()]

    @case(f"sm_fori_m{nd}", mesh, ["f32", "s32", "bf16", "f64"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)

        def body(a):
            def step(i, c):
                return lax.psum(c, "d") - c * i.astype(c.dtype)
            return lax.fori_loop(0, 3, step, a)
        return sm(body, P("d"), P("d"), check_vma=False), [x], [P("d")], [P("d")]

    @case(f"sm_cond_m{nd}", mesh, ["f32", "s32", "bf16"])
    def _(rng, dt, perm_cycle=perm_cycle, nd=nd):
        x = vals(rng, (8, 3), dt)

        def body(a):
            s = lax.psum(jnp.sum(a), "d")
            return lax.cond(s > 0, lambda v: lax.psum(v, "d"),
                            lambda v: lax.ppermute(v, "d", perm_cycle), a)
        return sm(body, P("d"), P("d"), check_vma=False), [x], [P("d")], [P("d")]

    @case(f"sm_cond_local_m{nd}", mesh, ["f32", "s32"])
    def _(rng, dt, nd=nd):
        # predicate differs per device, no collective inside the branches
        x = vals(rng, (8, 3), dt)

        def body(a):
            i = lax.axis_index("d")
            return lax.cond(i % 2 == 0, lambda v: v * 2, lambda v: -v, a)
        return sm(body, P("d"), P("d")), [x], [P("d")], [P("d")]

    @case(f"dp_train_m{nd}", mesh, ["f32", "bf16", "f64"])
    def _(rng, dt, nd=nd):
        w = vals(rng, (4, 3), dt) * DT[dt](0.1)
        xx = vals(rng, (8, 4), dt)
        y = vals(rng, (8, 3), dt)

        def loss(w, a, b):
            return jnp.mean((jnp.tanh(a @ w) - b) ** 2)

        def body(w, a, b):
            l, g = jax.value_and_grad(loss)(w, a, b)
            g = lax.psum(g, "d")
            return lax.pmean(l, "d"), w - DT[dt](0.05) * g
        f = sm(body, (P(), P("d"), P("d")), (P(), P()))
        return f, [w, xx, y], [P(), P("d"), P("d")], [P(), P()]

    @case(f"dp_train_relu_m{nd}", mesh, ["f32", "bf16", "f64"])
    def _(rng, dt, nd=nd):
        w = vals(rng, (4, 3), dt)
        xx = vals(rng, (8, 4), dt)
        y = vals(rng, (8, 3), dt)

        def loss(w, a, b):
            return jnp.sum((jax.nn.relu(a @ w) - b) ** 2)

        def body(w, a, b):
            l, g = jax.value_and_grad(loss)(w, a, b)
            g = lax.psum(g, "d")
            return lax.psum(l, "d"), w - DT[dt](0.25) * g
        f = sm(body, (P(), P("d"), P("d")), (P(), P()))
        return f, [w, xx, y], [P(), P("d"), P("d")], [P(), P()]


# ---------------- 2x2 mesh: collectives over one axis ------------------------------------
@case("sm22_psum_axes", M22, NUM)
def _(rng, dt):
    x = vals(rng, (4, 6), dt)

    def body(a):
        return lax.psum(a, "x"), lax.psum(a, "y"), lax.psum(a, ("x", "y"))
    return sm(body, P("x", "y"), (P(None, "y"), P("x", None), P())), [x], [P("x", "y")], \
        [P(None, "y"), P("x", None), P()]


@case("sm22_pmax_pmin_axes", M22, REAL)
def _(rng, dt):
    x = vals(rng, (4, 6), dt, special=True)

    def body(a):
        return lax.pmax(a, "x"), lax.pmin(a, "y"), lax.pmean(a.astype(jnp.float32), "y")
    return sm(body, P("x", "y"), (P(None, "y"), P("x", None), P("x", None))), [x], \
        [P("x", "y")], [P(None, "y"), P("x", None), P("x", None)]


@case("sm22_all_gather_axes", M22, BASE)
def _(rng, dt):
    x = vals(rng, (4, 4), dt)

    def body(a):
        return (lax.all_gather(a, "x", axis=0, tiled=True),
                lax.all_gather(a, "y", axis=1, tiled=False),
                lax.all_gather(a, ("x", "y"), axis=0, tiled=True),
                lax.all_gather(a, ("y", "x"), axis=1, tiled=True))
    return sm(body, P("x", "y"), (P(None, "y"), P("x"), P(), P()), check_vma=False), [x], \
        [P("x", "y")], [P(None, "y"), P("x"), P(), P()]


@case("sm22_psum_scatter_axes", M22, ["f32", "s32", "bf16", "c64", "u8"])
def _(rng, dt):
    x = vals(rng, (4, 8), dt)

    def body(a):  # (2, 4)
        return (lax.psum_scatter(a, "x", scatter_dimension=1, tiled=True)[None],
                lax.psum_scatter(a, "y", scatter_dimension=0, tiled=True)[None],
                lax.psum_scatter(a.reshape(2, 2, 2), "y", scatter_dimension=1, tiled=False)[None],
                lax.psum_scatter(a, ("x", "y"), scatter_dimension=1, tiled=True)[None])
    o = P(("x", "y"))
    return sm(body, P("x", "y"), (o, o, o, o), check_vma=False), [x], [P("x", "y")], [o] * 4


@case("sm22_all_to_all_axes", M22, BASE)
def _(rng, dt):
    x = vals(rng, (4, 8), dt)

    def body(a):  # (2, 4)
        return (lax.all_to_all(a, "y", split_axis=1, concat_axis=0, tiled=True),
                lax.all_to_all(a, "x", split_axis=0, concat_axis=1, tiled=True))
    return sm(body, P("x", "y"), (P("x", "y"), P("x", "y")), check_vma=False), \
        [x], [P("x", "y")], [P("x", "y")] * 2


@case("sm22_all_to_all_both_axes", M22, ["f32", "s32", "pred"])
def _(rng, dt):
    x = vals(rng, (8, 8), dt)

    def body(a):  # (4, 4)
        return lax.all_to_all(a, ("x", "y"), split_axis=1, concat_axis=0, tiled=True)
    return sm(body, P(("x", "y")), P(("x", "y")), check_vma=False), [x], [P(("x", "y"))], \
        [P(("x", "y"))]


@case("sm22_ppermute_axes", M22, BASE)
def _(rng, dt):
    x = vals(rng, (4, 6), dt)

    def body(a):
        return (lax.ppermute(a, "x", [(0, 1), (1, 0)]), lax.ppermute(a, "y", [(1, 0)]),
                lax.ppermute(a, ("x", "y"), [(0, 3), (3, 2), (2, 1), (1, 0)]))
    return sm(body, P("x", "y"), (P("x", "y"),) * 3), [x], [P("x", "y")], [P("x", "y")] * 3


@case("sm22_axis_index", M22, ["s32", "f32"])
def _(rng, dt):
    x = vals(rng, (4, 6), dt)

    def body(a):
        ix, iy = lax.axis_index("x"), lax.axis_index("y")
        ixy = lax.axis_index(("x", "y"))
        return a + (ix * 10 + iy).astype(a.dtype), jnp.stack([ix, iy, ixy])[None, None]
    return sm(body, P("x", "y"), (P("x", "y"), P("x", "y"))), [x], [P("x", "y")], \
        [P("x", "y"), P("x", "y")]


@case("sm22_loops_one_axis", M22, ["f32", "s32", "bf16"])
def _(rng, dt):
    x = vals(rng, (4, 6), dt)

    def body(a):
        def step(c, _):
            c = lax.psum(c, "y") - lax.ppermute(c, "x", [(0, 1), (1, 0)])
            return c, lax.pmax(c, "x")
        c, ys = lax.scan(step, a, None, length=2)
        d = lax.fori_loop(0, 2, lambda i, v: lax.pmin(v, "y") + v, c)
        e = lax.cond(lax.psum(jnp.sum(d), ("x", "y")) > 0, lambda v: lax.psum(v, "x"),
                     lambda v: v, d)
        return e, ys
    return sm(body, P("x", "y"), (P("x", "y"), P(None, None, "y")), check_vma=False), [x], \
        [P("x", "y")], [P("x", "y"), P(None, None, "y")]


@case("dp_tp_train_2x2", M22, ["f32", "bf16", "f64"])
def _(rng, dt):
    w1 = vals(rng, (4, 8), dt) * DT[dt](0.3)
    w2 = vals(rng, (8, 2), dt) * DT[dt](0.3)
    xx = vals(rng, (8, 4), dt)
    y = vals(rng, (8, 2), dt)

    def step(w1, w2, a, b):
        def loss(w1, w2):
            return jnp.mean((jax.nn.relu(a @ w1) @ w2 - b) ** 2)
        l, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2)
        return l, w1 - 0.1 * g1, w2 - 0.1 * g2
    return step, [w1, w2, xx, y], [P(None, "y"), P("y", None), P("x", None), P("x", None)], \
        [P(), P(None, "y"), P("y", None)]


@case("sm22_dp_tp_train", M22, ["f32", "bf16"])
def _(rng, dt):
    w1 = vals(rng, (4, 8), dt) * DT[dt](0.3)
    w2 = vals(rng, (8, 2), dt) * DT[dt](0.3)
    xx = vals(rng, (8, 4), dt)
    y = vals(rng, (8, 2), dt)

    def body(w1, w2, a, b):
        def loss(w1, w2):
            h = jax.nn.relu(a @ w1)
            o = lax.psum(h @ w2, "y")
            return lax.pmean(jnp.mean((o - b) ** 2), "x")
        l, (g1, g2) = jax.value_and_grad(loss, argnums=(0, 1))(w1, w2)
        return l, w1 - 0.1 * g1, w2 - 0.1 * g2
    specs = (P(None, "y"), P("y", None), P("x", None), P("x", None))
    f = sm(body, specs, (P(), P(None, "y"), P("y", None)))
    return f, [w1, w2, xx, y], list(specs), [P(), P(None, "y"), P("y", None)]


# ---------------- round 2: more patterns ------------------------------------------------
for mesh in (M2, M4):
    nd = list(mesh.values())[0]

    @case(f"sm_psum_mixed_tuple_m{nd}", mesh, ["f32"])
    def _(rng, dt, nd=nd):
        a = vals(rng, (4 * nd, 2), "f32")
        b = vals(rng, (2 * nd,), "s32")
        c = vals(rng, (nd, 3), "bf16")
        d = vals(rng, (nd, 2), "u8")
        e = vals(rng, (nd, 2), "f16")

        def body(a, b, c, d, e):
            return lax.psum((a, b, c, d, e), "d")
        o = (P(),) * 5
        return sm(body, (P("d"),) * 5, o), [a, b, c, d, e], [P("d")] * 5, list(o)

    @case(f"sm_while_psum_cond_m{nd}", mesh, ["f32", "s32"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (2 * nd, 3), dt)

        def body(a):
            def cond(c):
                return lax.psum(c[1], "d") < 3 * nd + lax.axis_index("d") * 0

            def step(c):
                v, k = c
                return lax.ppermute(v, "d", [(i, (i + 1) % nd) for i in range(nd)]) + \
                    lax.pmax(v, "d"), k + 1
            return lax.while_loop(cond, step, (a, jnp.int32(0)))[0]
        return sm(body, P("d"), P("d"), check_vma=False), [x], [P("d")], [P("d")]

    @case(f"sm_bcast_from_src_m{nd}", mesh, ["f32", "s32", "bf16", "u8", "pred", "c64"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (2 * nd, 3), dt)

        def body(a):
            src = nd - 1
            g = lax.all_gather(a, "d")
            pick = g[src]
            if a.dtype == jnp.bool_:
                return pick, pick
            z = jnp.where(lax.axis_index("d") == src, a, jnp.zeros_like(a))
            return pick, lax.psum(z, "d")
        return sm(body, P("d"), (P("d"), P("d")), check_vma=False), [x], [P("d")], \
            [P("d"), P("d")]

    @case(f"sm_pred_collectives_m{nd}", mesh, ["pred"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (nd * nd, 3), "pred")

        def body(a):
            return (lax.pmax(a, "d"), lax.pmin(a, "d"),
                    lax.psum(a.astype(jnp.int32), "d"),
                    lax.all_to_all(a.reshape(nd, -1), "d", 0, 0, tiled=True))
        return sm(body, P("d"), (P("d"),) * 4, check_vma=False), [x], [P("d")], [P("d")] * 4

    @case(f"gspmd_gather_m{nd}", mesh, ["f32", "s32", "bf16", "u8", "pred"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)
        idx = rng.integers(-2, 10, (5,)).astype(np.int32)
        return (lambda a, i: (a[i], jnp.take(a, i, axis=0, mode="clip"))), [x, idx], \
            [P("d"), P()], [P(), P()]

    @case(f"gspmd_scatter_add_m{nd}", mesh, ["f32", "s32", "u8"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 3), dt)
        idx = rng.integers(0, 8, (6,)).astype(np.int32)
        u = vals(rng, (6, 3), dt)
        return (lambda a, i, v: a.at[i].add(v)), [x, idx, u], [P("d"), P(), P()], [P("d")]

    @case(f"gspmd_dynamic_slice_m{nd}", mesh, ["f32", "s32", "pred"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 4), dt)
        k = np.int32(3)
        return (lambda a, k: (lax.dynamic_slice_in_dim(a, k, 3, axis=0),
                              lax.dynamic_update_slice_in_dim(a, a[:2], k, axis=0))), \
            [x, k], [P("d"), P()], [P(), P("d")]

    @case(f"gspmd_concat_pad_roll_m{nd}", mesh, ["f32", "s32", "bf16", "pred", "u8"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 2), dt)
        y = vals(rng, (8, 2), dt)
        return (lambda a, b: (jnp.concatenate([a, b], axis=0), jnp.pad(a, ((1, 3), (0, 0))),
                              jnp.roll(a, 3, axis=0), a[::-1])), [x, y], [P("d"), P("d")], \
            [P("d"), P("d"), P("d"), P("d")]

    @case(f"gspmd_einsum_batch_m{nd}", mesh, ["f32", "bf16", "s32", "c64"])
    def _(rng, dt, nd=nd):
        a = vals(rng, (4, 3, 4), dt)
        b = vals(rng, (4, 4, nd), dt)
        return (lambda u, v: jnp.einsum("bij,bjk->bik", u, v)), [a, b], \
            [P("d"), P(None, None, "d")], [P("d")]

    @case(f"gspmd_cumprod_cummax_m{nd}", mesh, ["f32", "s32"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (8, 2), dt)
        return (lambda a: (lax.cummax(a, axis=0), jnp.cumprod(jnp.sign(a) + 0, axis=0))), [x], \
            [P("d")], [P("d"), P("d")]

    @case(f"gspmd_softmax_xent_m{nd}", mesh, ["f32", "bf16", "f64"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (4, 8), dt)
        lab = rng.integers(0, 8, (4,)).astype(np.int32)

        def f(a, l):
            ls = jax.nn.log_softmax(a.astype(jnp.float32), axis=1)
            return -jnp.mean(jnp.take_along_axis(ls, l[:, None], axis=1)), jax.nn.softmax(a, 1)
        return f, [x, lab], [P(None, "d"), P()], [P(), P(None, "d")]


@case("gspmd_conv_2x2", M22, ["f32", "bf16"])
def _(rng, dt):
    x = vals(rng, (4, 6, 6, 2), dt)
    w = vals(rng, (3, 3, 2, 4), dt)

    def f(a, k):
        return lax.conv_general_dilated(a, k, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return f, [x, w], [P("x", None, None, None), P(None, None, None, "y")], \
        [P("x", None, None, "y")]


@case("gspmd_conv_spatial_2x2", M22, ["f32"])
def _(rng, dt):
    x = vals(rng, (2, 8, 4, 2), dt)
    w = vals(rng, (3, 3, 2, 2), dt)

    def f(a, k):
        return lax.conv_general_dilated(a, k, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return f, [x, w], [P(None, ("x", "y"), None, None), P()], [P(None, ("x", "y"), None, None)]


@case("gspmd_layernorm_mlp_2x2", M22, ["f32", "bf16"])
def _(rng, dt):
    x = vals(rng, (4, 8), dt)
    w = vals(rng, (8, 8), dt) * DT[dt](0.2)

    def f(a, w):
        m = a.mean(-1, keepdims=True)
        v = ((a - m) ** 2).mean(-1, keepdims=True)
        h = (a - m) * lax.rsqrt(v + 1e-5)
        return jax.nn.gelu(h @ w)
    return f, [x, w], [P("x", "y"), P("y", None)], [P("x", "y")]


@case("sm22_ppermute_partial_groups", M22, ["f32", "s32", "pred", "u8"])
def _(rng, dt):
    x = vals(rng, (4, 4), dt)

    def body(a):
        return (lax.ppermute(a, "y", [(0, 1)]), lax.ppermute(a, "x", [(1, 0)]),
                lax.ppermute(a, ("x", "y"), [(0, 2), (1, 3)]),
                lax.ppermute(a, ("y", "x"), [(i, (i + 1) % 4) for i in range(4)]))
    return sm(body, P("x", "y"), (P("x", "y"),) * 4), [x], [P("x", "y")], [P("x", "y")] * 4


@case("sm22_axis_yx_collectives", M22, ["f32", "s32", "u8"])
def _(rng, dt):
    x = vals(rng, (4, 8), dt)

    def body(a):  # (2, 4)
        return (lax.psum(a, ("y", "x"))[None],
                lax.all_gather(a, ("y", "x"), axis=0, tiled=True)[None],
                lax.psum_scatter(a, ("y", "x"), scatter_dimension=1, tiled=True)[None],
                lax.all_to_all(a, ("y", "x"), 1, 1, tiled=True)[None],
                jnp.full((1, 1), lax.axis_index(("y", "x"))))
    o = P(("x", "y"))
    return sm(body, P("x", "y"), (o,) * 5, check_vma=False), [x], [P("x", "y")], [o] * 5


# ---------------- round 3 ----------------------------------------------------------------------
M12 = {"x": 1, "y": 2}
M41 = {"x": 4, "y": 1}


@case("sm_size1_axis_m1x2", M12, ["f32", "s32", "pred"])
def _(rng, dt):
    x = vals(rng, (2, 4), dt)

    def body(a):
        if a.dtype == jnp.bool_:
            return (lax.all_gather(a, "x", axis=0, tiled=True), lax.ppermute(a, "x", [(0, 0)]),
                    lax.all_to_all(a, ("x", "y"), 1, 1, tiled=True))
        return (lax.psum(a, "x") + lax.psum(a, "y"), lax.all_gather(a, "x", axis=0, tiled=True),
                lax.all_to_all(a, ("x", "y"), 1, 1, tiled=True))
    return sm(body, P("x", "y"), (P("x", "y"),) * 3, check_vma=False), [x], [P("x", "y")], \
        [P("x", "y")] * 3


@case("gspmd_size1_axis_m4x1", M41, ["f32", "s32"])
def _(rng, dt):
    x = vals(rng, (8, 4), dt)
    return (lambda a: (a.sum(0), a.T @ a, a.sum(1))), [x], [P("x", "y")], [P(), P(), P("x")]


for mesh in (M2, M4):
    nd = list(mesh.values())[0]

    @case(f"gspmd_uneven_wsc_m{nd}", mesh, ["f32", "s32", "bf16", "pred"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (7, 3), dt)

        def f(a):
            b = lax.with_sharding_constraint(a, P("d", None))
            c = b if b.dtype == jnp.bool_ else b * 2
            d = lax.with_sharding_constraint(c.T, P("d", None))  # (3, 7) over d
            r = d if d.dtype == jnp.bool_ else d.sum(0)
            return r, d
        return f, [x], [P()], [P(), P()]

    @case(f"gspmd_uneven_cumsum_m{nd}", mesh, ["f32", "s32"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (5, 3), dt)

        def f(a):
            b = lax.with_sharding_constraint(a, P("d", None))
            return jnp.cumsum(b, axis=0), jnp.sort(b, axis=0), jnp.argmax(b, axis=0)
        return f, [x], [P()], [P(), P(), P()]

    @case(f"sm_axis_index_groups_m{nd}", mesh, ["f32", "s32"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (2 * nd, 3), dt)
        groups = [[0, 1]] if nd == 2 else [[0, 2], [1, 3]]
        return sm(lambda a: lax.psum(a, "d", axis_index_groups=groups), P("d"), P("d"),
                  check_vma=False), [x], [P("d")], [P("d")]

    @case(f"sm_scalars_m{nd}", mesh, ["f32", "s32", "u8", "bf16"])
    def _(rng, dt, nd=nd):
        x = vals(rng, (nd,), dt)

        def body(a):
            s = a[0]
            return (lax.psum(s, "d")[None], lax.all_gather(s, "d"),
                    lax.ppermute(s, "d", [(i, (i + 1) % nd) for i in range(nd)])[None],
                    lax.pmax(s, "d")[None])
        return sm(body, P("d"), (P("d"), P(), P("d"), P("d")), check_vma=False), [x], \
            [P("d")], [P("d"), P(), P("d"), P("d")]

    @case(f"sm_random_m{nd}", mesh, ["f32"])
    def _(rng, dt, nd=nd):
        k = np.array([0, 7], np.uint32)
        x = vals(rng, (2 * nd, 3), dt)

        def body(key, a):
            kk = jax.random.fold_in(jax.random.wrap_key_data(key), lax.axis_index("d"))
            n = jax.random.normal(kk, a.shape)
            b = jax.random.bernoulli(kk, 0.3, a.shape)
            return lax.psum(a + n, "d"), lax.psum(b.astype(jnp.int32), "d")
        return sm(body, (P(), P("d")), (P(), P()), check_vma=False), [k, x], [P(), P("d")], \
            [P(), P()]


# sm_partial_manual_2x2 (shard_map axis_names={'x'} of a @ b with b P('x','y')) is left
# out: XLA:CPU aborts compiling it (hlo_instruction.cc: Invalid binary instruction opcode copy).


@case("sm_partial_manual_y_2x2", M22, ["f32", "s32"])
def _(rng, dt):
    x = vals(rng, (4, 8), dt)

    def f(a):
        def body(a):
            return lax.ppermute(a, "y", [(0, 1), (1, 0)]) + lax.psum(a, "y")
        return jax.shard_map(body, in_specs=P(None, "y"), out_specs=P(None, "y"),
                             axis_names={"y"}, check_vma=False)(a)
    return f, [x], [P("x", "y")], [P("x", "y")]


# ---------------------------------------------------------------------------------------------
def ulps(a, b):
    """Max distance in units of the last place between two float arrays (NaN==NaN)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype.kind == "c":
        return max(ulps(a.real, b.real), ulps(a.imag, b.imag))
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia = a.view(bits).astype(np.int64)
    ib = b.view(bits).astype(np.int64)
    m = np.int64(1) << (8 * a.dtype.itemsize - 1)
    ia = np.where(ia < 0, -(ia + m), ia)  # sign-magnitude to ordered ints; -0 -> 0
    ib = np.where(ib < 0, -(ib + m), ib)
    both_nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    d = np.where(both_nan, 0, np.abs(ia - ib))
    return int(d.max()) if d.size else 0


def compare(got, want):
    """'equal' (bit for bit), ('ulps', n) for floats, or a mismatch description."""
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    gb = np.ascontiguousarray(got).view(np.uint8)
    wb = np.ascontiguousarray(want).view(np.uint8)
    if np.array_equal(gb, wb):
        return "equal"
    if got.dtype.kind in "fc" or got.dtype == ml_dtypes.bfloat16:
        g64, w64 = got.astype(np.complex128), want.astype(np.complex128)
        diff = (gb.reshape(got.size, -1) != wb.reshape(want.size, -1)).any(axis=1).reshape(got.shape)
        gn, wn = np.isnan(g64[diff]), np.isnan(w64[diff])
        if (gn | wn).all():
            return f"nan({int(gn.sum())} got-nan, {int(wn.sum())} want-nan)"
        if (g64[diff] == w64[diff]).all():
            return "signed-zero"
        return f"ulps={ulps(got, want)}"
    bad = np.argwhere(got != want)
    return f"{len(bad)} differ, first at {bad[0].tolist()}: {got[tuple(bad[0])]} vs " \
           f"{want[tuple(bad[0])]}"


def main():
    done = set()
    out_path = Path(opts.out)
    if out_path.exists():
        for line in out_path.read_text().splitlines():
            r = json.loads(line)
            done.add((r["case"], r["dtype"], r["x64"]))
    clusters = {}
    dtypes_allowed = opts.dtypes.split(",") if opts.dtypes else None
    backends = opts.backends.split(",")
    with out_path.open("a") as log:
        for name, mesh, dtypes, builder in CASES:
            if opts.k and opts.k not in name:
                continue
            for dt in (X64 if opts.x64 else BASE):
                if dt not in dtypes or (dtypes_allowed and dt not in dtypes_allowed):
                    continue
                if (name, dt, opts.x64) in done:
                    continue
                rec = {"case": name, "dtype": dt, "x64": opts.x64, "mesh": mesh, "exact": opts.exact}
                rng = np.random.default_rng(zlib.crc32(f"{name}/{dt}".encode()))
                folder = WORK / f"{name}__{dt}{'_x64' if opts.x64 else ''}{'_exact' if opts.exact else ''}"
                t0 = time.time()
                try:
                    fn, args, ins, outs = builder(rng, dt)
                    xj.export(fn, *args, mesh_shape=mesh, in_specs=ins, out_specs=outs,
                              path=folder)
                except Exception as e:  # noqa: BLE001
                    rec["jax"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    print(name, dt, "JAX-REFUSED", rec["jax"], flush=True)
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    continue
                module = xladist.load_hlo(folder / "module.hlo")
                exp = np.load(folder / "expected.npz")
                nd = xj.specs.mesh_size(mesh)
                for be in backends:
                    key = nd
                    try:
                        if key not in clusters:
                            clusters[key] = xladist.Cluster(n=nd)
                            clusters[key].start()
                        res = clusters[key].run(module, folder / "inputs.npz", backend=be,
                                                timeout=120)
                        verdicts = []
                        for i, p in enumerate(module.entry.root.shape.tuple_shapes
                                              if module.entry.root.shape.is_tuple
                                              else [module.entry.root.shape]):
                            want = decode(exp[f"out{i}"], p)
                            got = np.stack([np.asarray(res[d][i]) for d in range(nd)])
                            verdicts.append(compare(got, want))
                        rec[be] = verdicts
                    except Exception as e:  # noqa: BLE001
                        rec[be] = f"ERROR {type(e).__name__}: {str(e)[:600]}"
                        if key in clusters and not getattr(clusters[key], "usable", True):
                            try:
                                clusters[key].close()
                            except Exception:  # noqa: BLE001
                                pass
                            del clusters[key]
                rec["secs"] = round(time.time() - t0, 1)
                print(name, dt, {b: rec[b] for b in backends}, rec["secs"], flush=True)
                log.write(json.dumps(rec) + "\n")
                log.flush()
    for c in clusters.values():
        c.close()
    counts = {}
    for line in out_path.read_text().splitlines():
        r = json.loads(line)
        for be in backends:
            v = "jax refused" if "jax" in r else r[be] if isinstance(r[be], str) else \
                "equal" if all(o == "equal" for o in r[be]) else \
                "differ: " + ",".join(sorted({o.split("=")[0].split("(")[0] for o in r[be]
                                             if o != "equal"}))
            v = "ERROR" if v.startswith("ERROR") else v
            counts[(be, v)] = counts.get((be, v), 0) + 1
    for (be, v), k in sorted(counts.items()):
        print(f"{be:12s} {v:30s} {k}")


if __name__ == "__main__":
    main()
