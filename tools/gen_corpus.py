"""Generate real-client multi-device cases with JAX, in the corpus format.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tools/gen_corpus.py [CASE ...]

Each case is a `jax.jit(jax.shard_map(prog, mesh, in_specs, out_specs))` program on N of the
8 host CPU devices. Written to tests/data/corpus/jax_extra/<case>/ in exactly the format of
tests/data/corpus/jax/ (see tests/data/corpus/README.md):

- module.hlo: `f.lower(*args).compile().as_text()`, the per-device SPMD module XLA:CPU ran;
- module.unoptimized.hlo: `f.lower(*args).as_text(dialect="hlo")`, for reference;
- inputs.npz / expected.npz: arg{i} / out{i} with a leading device axis, row d = the buffer
  that device d (== partition d) received / produced; bf16 as uint16 bits;
- case.json: the fields the tests read (num_devices, rtol, atol, out_tol, arrays...).

A case with a `reference` (programs XLA:CPU cannot execute, e.g. ragged-all-to-all): module.hlo
is the module XLA:CPU optimized before its thunk emitter refused the opcode (dumped with
xla_dump_to), and expected.npz comes from the case's numpy reference applied to the per-device
inputs; case.json's `expected_from` says so.

Jitting for the mesh, the device order, cutting the inputs into per-device rows and JAX's
per-device results are xladist.jax's (xladist/jax/lowering.py, the steps of
xladist.jax.export); this file adds the cases, the dump path for references and case.json.

JAX is needed only here: the generated data is committed, so the tests never import jax.
Inputs are drawn from a per-case seed (crc32 of the case name), so re-running reproduces the
same files for the same JAX version.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

NUM_HOST_DEVICES = 8
_FLAG = f"--xla_force_host_platform_device_count={NUM_HOST_DEVICES}"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# jax reads XLA_FLAGS when it starts its backend, so it is imported only now.
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from xladist.io import encode  # noqa: E402
from xladist.jax import lowering as xj  # noqa: E402  (xladist.jax.export's steps)
OUT_DIR = ROOT / "tests" / "data" / "corpus" / "jax_extra"

DEVICE_ORDER = ("Leading axis index d of every array == device id d == partition id d (mesh "
                "devices are jax.devices()[:N] in row-major mesh order; verified by an "
                "axis_index probe and the executable's device assignment).")

# numpy dtype name -> HLO element type
_HLO_TYPES = {"bool": "pred", "int8": "s8", "uint8": "u8", "int16": "s16", "int32": "s32",
              "int64": "s64", "uint32": "u32", "float16": "f16", "bfloat16": "bf16",
              "float32": "f32", "float64": "f64", "complex64": "c64",
              "float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2"}


@dataclass
class Case:
    """One program: mesh, specs, the per-device body and how to draw its global inputs."""

    name: str
    description: str
    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    prog: Callable
    in_specs: tuple
    out_specs: object
    make_inputs: Callable[[np.random.Generator], list[np.ndarray]]
    rtol: float = 1e-5
    atol: float = 1e-6
    check_vma: bool = True
    out_tol: dict = field(default_factory=dict)
    # per-device input rows -> per-device output rows, for programs XLA:CPU cannot execute
    reference: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None
    # "shard_map": `prog` is the per-device body. "shardy" / "gspmd": `prog` is a global
    # program, jitted with in/out NamedShardings from the specs and partitioned by that
    # partitioner (XLA inserts the collectives).
    partitioner: str = "shard_map"


CASES: dict[str, Case] = {}


def case(**kw):
    def register(fn):
        c = Case(name=fn.__name__, prog=fn, **kw)
        CASES[c.name] = c
        return fn
    return register


def normal(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def ints(rng, shape, lo=-50, hi=50, dtype=np.int32):
    return rng.integers(lo, hi, shape).astype(dtype)


# ---- the cases ------------------------------------------------------------------------------
# Each exercises something the owners' jax/ set does not: subgroups of a 2-D mesh, gathers and
# scatters along dim 1 (non-default layouts), all-to-all on other axes, partial permutations,
# bf16 and integer reductions, collectives under control flow, a training step.

@case(description="2x4 mesh: psum over 'c' (subgroups {0..3},{4..7}) and over 'r' "
                  "(subgroups {0,4},{1,5},..), and a psum over both axes.",
      mesh_shape=(2, 4), axis_names=("r", "c"),
      in_specs=(P("r", "c"),), out_specs=(P("r", None), P(None, "c"), P()),
      make_inputs=lambda rng: [normal(rng, (4, 12))], check_vma=False)
def psum_subgroups_mesh2x4(x):
    return lax.psum(x, "c"), lax.psum(x, "r"), lax.psum(x, ("r", "c"))


@case(description="all_gather along dim 1, tiled (3,2)->(3,8) and untiled (3,2)->(3,4,2), "
                  "and a gather of a transposed block (non-default layouts).",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P(None, "d"),), out_specs=(P(), P(), P()),
      make_inputs=lambda rng: [normal(rng, (3, 8))], check_vma=False)
def all_gather_dim1_mesh4(x):
    tiled = lax.all_gather(x, "d", axis=1, tiled=True)
    stacked = lax.all_gather(x, "d", axis=1, tiled=False)
    transposed = lax.all_gather(jnp.transpose(x) * 2.0, "d", axis=1, tiled=True)
    return tiled, stacked, transposed


@case(description="psum_scatter tiled along dim 1 (3,16)->(3,2) and untiled along dim 0 "
                  "(8,3)->(3,) on 8 devices.",
      mesh_shape=(8,), axis_names=("d",),
      in_specs=(P("d"), P("d")), out_specs=(P(None, "d"), P("d")),
      make_inputs=lambda rng: [normal(rng, (24, 16)), normal(rng, (64, 3))])
def psum_scatter_dims_mesh8(x, y):
    a = lax.psum_scatter(x, "d", scatter_dimension=1, tiled=True)
    b = lax.psum_scatter(y, "d", scatter_dimension=0, tiled=False)
    return a, b[None]


@case(description="all_to_all on 2 devices: split 1/concat 2 and split 0/concat 1 of a "
                  "(4,6,2) block, and split 2/concat 2 (an in-place exchange).",
      mesh_shape=(2,), axis_names=("d",),
      in_specs=(P("d"),), out_specs=(P("d"), P("d"), P("d")),
      make_inputs=lambda rng: [normal(rng, (8, 6, 2))])
def all_to_all_axes_mesh2(x):
    a = lax.all_to_all(x, "d", split_axis=1, concat_axis=2, tiled=True)
    b = lax.all_to_all(x, "d", split_axis=0, concat_axis=1, tiled=True)
    c = lax.all_to_all(x, "d", split_axis=2, concat_axis=2, tiled=True)
    return a, b, c


@case(description="int32 all_to_all on 8 devices: split 2/concat 0 of a (2,3,8) block, and "
                  "untiled (split 0 of size 8, concat 1).",
      mesh_shape=(8,), axis_names=("d",),
      in_specs=(P("d"),), out_specs=(P("d"), P("d")),
      make_inputs=lambda rng: [ints(rng, (16, 3, 8))], rtol=0.0, atol=0.0)
def all_to_all_int_mesh8(x):
    a = lax.all_to_all(x, "d", split_axis=2, concat_axis=0, tiled=True)
    b = lax.all_to_all(jnp.transpose(x, (2, 0, 1)), "d", split_axis=0, concat_axis=1)
    return a, b


@case(description="ppermute with non-cyclic pairs on 4 devices: {0->2,1->3} (devices 0,1 "
                  "get zeros), a shift without wrap (device 0 gets zeros), a swap {0<->3}.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"),), out_specs=(P("d"), P("d"), P("d")),
      make_inputs=lambda rng: [normal(rng, (8, 3))])
def ppermute_partial_mesh4(x):
    a = lax.ppermute(x, "d", perm=[(0, 2), (1, 3)])
    b = lax.ppermute(x * 2.0, "d", perm=[(0, 1), (1, 2), (2, 3)])
    c = lax.ppermute(x + 1.0, "d", perm=[(0, 3), (3, 0)])
    return a, b, c


@case(description="bf16 psum (XLA promotes the reducer to f32), bf16 pmax and an f16 psum "
                  "on 2 devices.",
      mesh_shape=(2,), axis_names=("d",),
      in_specs=(P("d"), P("d")), out_specs=(P(), P(), P()),
      make_inputs=lambda rng: [normal(rng, (2, 16), ml_dtypes.bfloat16),
                               normal(rng, (2, 5), np.float16)],
      rtol=1e-2, atol=1e-2, check_vma=False)
def psum_bf16_mesh2(x, h):
    return lax.psum(x, "d"), lax.pmax(x, "d"), lax.psum(h, "d")


@case(description="pmax/pmin of f32 and int32, an int8 psum (wraps) and pmean on 8 devices.",
      mesh_shape=(8,), axis_names=("d",),
      in_specs=(P("d"), P("d"), P("d")), out_specs=(P(), P(), P(), P(), P(), P()),
      make_inputs=lambda rng: [normal(rng, (8, 5)), ints(rng, (8, 4)),
                               ints(rng, (8, 6), -100, 100, np.int8)],
      rtol=1e-5, atol=1e-6, check_vma=False)
def pmax_pmin_mesh8(x, i, b):
    return (lax.pmax(x, "d"), lax.pmin(x, "d"), lax.pmax(i, "d"), lax.pmin(i, "d"),
            lax.psum(b, "d"), lax.pmean(x, "d"))


@case(description="2x2 mesh: lax.cond on the row index with psum('c') in one branch and "
                  "pmax('c') in the other, and a 3-way lax.switch whose index is a psum over "
                  "'c' (uniform within each 'c' group): the two rows run different branches.",
      mesh_shape=(2, 2), axis_names=("r", "c"),
      in_specs=(P("r", "c"), P("r", "c")), out_specs=(P("r", "c"), P("r", "c")),
      # k sums to 3 in row 0 (switch branch 0: psum on devices 0,1) and to 1 in row 1 (branch
      # 1: all_gather on devices 2,3). Branch 2's ppermute is never taken: its pairs span
      # both rows, and XLA:CPU makes all four devices rendezvous for it (a real hang).
      make_inputs=lambda rng: [normal(rng, (4, 6)), np.array([[1, 2], [1, 0]], np.int32)],
      check_vma=False)
def cond_switch_collectives_mesh2x2(x, k):
    row = lax.axis_index("r")
    a = lax.cond(row == 0, lambda v: lax.psum(v, "c"), lambda v: lax.pmax(v, "c") * 2.0, x)
    idx = lax.psum(k[0, 0], "c") % 3
    b = lax.switch(idx, [lambda v: lax.psum(v * v, "c"),
                         lambda v: lax.all_gather(v, "c", axis=0, tiled=True)[:2] + 1.0,
                         lambda v: lax.ppermute(v, "c", perm=[(0, 1), (1, 0)])], x)
    return a, b


@case(description="lax.scan of 4 steps on a 4-device ring: each step ppermutes the carry, "
                  "adds the local block and accumulates a psum (collectives inside a while).",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"),), out_specs=(P("d"), P()),
      make_inputs=lambda rng: [normal(rng, (4, 5))], rtol=1e-5, atol=1e-5, check_vma=False)
def scan_ring_mesh4(x):
    ring = [(j, (j + 1) % 4) for j in range(4)]

    def step(carry, _):
        c, acc = carry
        c = lax.ppermute(c, "d", perm=ring) + x
        acc = acc + lax.psum(jnp.sum(c), "d")
        return (c, acc), jnp.max(c)

    (c, acc), _ = lax.scan(step, (x, jnp.float32(0)), None, length=4)
    return c, acc


def _mlp_loss(params, x, t):
    w1, b1, w2 = params
    h = jax.nn.relu(x @ w1 + b1)
    y = h @ w2
    return jnp.mean((y - t) ** 2)


@case(description="Data-parallel MLP training step on 8 devices: per-device loss and grads, "
                  "grads pmean'd (all-reduce of a tuple), SGD update; replicated new params.",
      mesh_shape=(8,), axis_names=("d",),
      in_specs=(P("d"), P("d"), P(), P(), P()), out_specs=(P(), P(), P(), P()),
      make_inputs=lambda rng: [normal(rng, (32, 6)), normal(rng, (32, 2)),
                               normal(rng, (6, 16)) * 0.5, normal(rng, (16,)) * 0.1,
                               normal(rng, (16, 2)) * 0.5],
      rtol=1e-4, atol=1e-5, check_vma=False)
def mlp_train_step_dp_mesh8(x, t, w1, b1, w2):
    loss, grads = jax.value_and_grad(_mlp_loss)((w1, b1, w2), x, t)
    grads = lax.pmean(grads, "d")
    loss = lax.pmean(loss, "d")
    new = [p - 0.1 * g for p, g in zip((w1, b1, w2), grads)]
    return (loss, *new)


@case(description="Data-parallel MLP training step on 2 devices with a 2x2 batch split "
                  "(psum of the grads, then an int32 step counter psum).",
      mesh_shape=(2,), axis_names=("d",),
      in_specs=(P("d"), P("d"), P(), P(), P()), out_specs=(P(), P(), P(), P()),
      make_inputs=lambda rng: [normal(rng, (8, 4)), normal(rng, (8, 3)),
                               normal(rng, (4, 8)) * 0.5, normal(rng, (8,)) * 0.1,
                               normal(rng, (8, 3)) * 0.5],
      rtol=1e-4, atol=1e-5, check_vma=False)
def mlp_train_step_dp_mesh2(x, t, w1, b1, w2):
    loss, grads = jax.value_and_grad(_mlp_loss)((w1, b1, w2), x, t)
    grads = lax.psum(grads, "d")
    new = [p - 0.05 * g for p, g in zip((w1, b1, w2), grads)]
    return (lax.psum(loss, "d"), *new)


def _exclusive_cumsum(a):
    return jnp.cumsum(a) - a


def _np_exclusive_cumsum(a: np.ndarray) -> np.ndarray:
    return np.cumsum(a, axis=-1) - a


def _ragged_inputs(rng, n: int = 4, tokens: int = 6, hidden: int = 3):
    """Per device: tokens [T, H], bf16 values [2T], send sizes to each peer (sum <= T) and,
    for the second exchange, 2 updates per peer laid out by tests/mpi/ragged_cases.py."""
    from tests.mpi.ragged_cases import make_group
    sizes = np.stack([rng.multinomial(int(rng.integers(1, tokens + 1)), [1 / n] * n)
                      for _ in range(n)]).astype(np.int32)
    group = make_group(n, 2, (), "bf16", rng, index="s32", max_size=3, min_rows=1 + n * 2 * 3)
    return [normal(rng, (n * tokens, hidden)), sizes,
            np.concatenate([m.x for m in group]), np.concatenate([m.output for m in group]),
            *[np.stack([getattr(m, f) for m in group]) for f in
              ("input_offsets", "send_sizes", "output_offsets", "recv_sizes")]]


def _ragged_reference(ins: list[np.ndarray]) -> list[np.ndarray]:
    """numpy model of ragged_all_to_all_dispatch_mesh4, from tests/mpi/ragged_cases.py."""
    from tests.mpi.ragged_cases import Member, reference
    n = ins[0].shape[0]
    # Row d of every array is device d's buffer; metadata buffers are [1, n*k] there.
    x, bx, bout = ins[0], ins[2], ins[3]
    sizes, bio, bss, boo, brs = (a.reshape(n, -1) for a in (ins[1], *ins[4:]))
    recv = sizes.T                                          # recv[d, s] = sizes[s, d]
    lands = _np_exclusive_cumsum(recv)                      # lands[d, s]: where s's rows go
    tokens = [Member(x[d], np.zeros((n * x.shape[1], x.shape[2]), x.dtype),
                     _np_exclusive_cumsum(sizes[d]), sizes[d], lands[:, d], recv[d])
              for d in range(n)]
    values = [Member(bx[d], bout[d], bio[d], bss[d], boo[d], brs[d]) for d in range(n)]
    return [np.stack([reference(tokens, d) for d in range(n)]),
            np.stack([reference(values, d) for d in range(n)])]


@case(description="MoE-style token dispatch on 4 devices: send sizes in, input offsets by a "
                  "cumsum, recv sizes and output offsets by all_to_all, then "
                  "ragged_all_to_all of [T,3] f32 token rows; and a bf16 ragged_all_to_all "
                  "with 2 updates per peer and explicit offsets. XLA:CPU cannot run it: "
                  "expected outputs come from the numpy reference.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"),) * 8, out_specs=(P("d"), P("d")),
      make_inputs=_ragged_inputs, rtol=0.0, atol=0.0, check_vma=False,
      reference=_ragged_reference)
def ragged_all_to_all_dispatch_mesh4(x, sizes, bx, bout, bio, bss, boo, brs):
    send = sizes[0]
    recv = lax.all_to_all(send, "d", 0, 0, tiled=True)
    lands = lax.all_to_all(_exclusive_cumsum(recv), "d", 0, 0, tiled=True)
    out = jnp.zeros((4 * x.shape[0], x.shape[1]), x.dtype)  # room for every peer's tokens
    tokens = lax.ragged_all_to_all(x, out, _exclusive_cumsum(send), send, lands, recv,
                                   axis_name="d")
    values = lax.ragged_all_to_all(bx, bout, bio[0], bss[0], boo[0], brs[0], axis_name="d")
    return tokens, values


# More cases (3-D meshes, multi-axis collectives, parallelism patterns, programs partitioned by
# Shardy/GSPMD without shard_map) live in corpus_zoo_multi.py, which registers them through
# `case` above; it imports this module by name, so the script must be that module too.
sys.modules.setdefault("gen_corpus", sys.modules[__name__])
sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_zoo_multi  # noqa: E402,F401


# ---- generation -----------------------------------------------------------------------------
def _optimized_text(lowered) -> str:
    """The module XLA:CPU optimized, for a program its thunk emitter refuses to compile."""
    with tempfile.TemporaryDirectory() as dump:
        try:
            lowered.compile(compiler_options={"xla_dump_to": dump})
        except Exception as e:  # noqa: BLE001 -- expected: XLA:CPU has no thunk for it
            print(f"  XLA:CPU refused to compile (expected): {str(e).splitlines()[0]}")
        else:
            raise RuntimeError("XLA:CPU compiled a case marked as needing a reference; "
                               "drop its reference and record XLA's results instead")
        found = sorted(Path(dump).glob("*cpu_after_optimizations.txt"))
        if len(found) != 1:
            raise RuntimeError(f"expected one optimized module in the dump, got {found}")
        return found[0].read_text()


def _encode(a: np.ndarray) -> np.ndarray:
    return encode(a)


def _spec_text(spec) -> str:
    return repr(spec).replace("PartitionSpec", "P")


def _module_facts(text: str) -> dict:
    from xladist import parse_hlo
    module = parse_hlo(text)
    instrs = list(module.all_instructions())
    ops = sorted({i.opcode for i in instrs})
    collectives = sorted(o for o in ops if o.replace("-start", "").replace("-done", "") in (
        "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
        "collective-broadcast", "ragged-all-to-all") and not o.endswith("-done"))
    fusions = sorted({str(i.attrs.get("kind")) for i in instrs if i.opcode == "fusion"})
    kcustom = sorted({i.backend_config for i in instrs if i.opcode == "fusion"
                      and str(i.attrs.get("kind")) == "kCustom" and i.backend_config})
    targets = sorted({str(i.attrs.get("custom_call_target")) for i in instrs
                      if i.opcode == "custom-call"})
    layout = re.search(r"entry_computation_layout=\{(.*?)\}(?:, [a-z_]+=|$)",
                       text.splitlines()[0])
    return {"module": module, "ops": ops, "collectives": collectives,
            "fusion_kinds": [k.replace("kind.", "") for k in fusions],
            "kcustom_backend_configs": kcustom, "custom_call_targets": targets,
            "entry_computation_layout": layout.group(1) if layout else None}


def _program(c: Case):
    """The global function xladist.jax.export jits: a shard_map of the per-device body (its
    mesh is the one export sets with jax.set_mesh), or the global program itself."""
    if c.partitioner == "shard_map":
        return jax.shard_map(c.prog, in_specs=c.in_specs, out_specs=c.out_specs,
                             check_vma=c.check_vma)
    return c.prog


def generate(c: Case, out_root: Path = OUT_DIR) -> Path:
    """Jit, lower, cut and run the case with xladist.jax (the mesh, device order, shards and
    expected rows are export's), then write the corpus files and case.json."""
    assert c.partitioner in ("shard_map", "shardy", "gspmd"), c.partitioner
    seed = zlib.crc32(c.name.encode())
    host = c.make_inputs(np.random.default_rng(seed))
    out_specs = c.out_specs if isinstance(c.out_specs, P) else list(c.out_specs)
    shardy = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", c.partitioner != "gspmd")
    try:
        prep = xj.prepare(_program(c), *host, mesh_shape=dict(zip(c.axis_names, c.mesh_shape)),
                          in_specs=list(c.in_specs), out_specs=out_specs)
        ins = {f"arg{i}": rows for i, rows in enumerate(xj.input_rows(prep))}
        if c.reference is None:
            text, compiled, _ = xj.compile_text(prep)
            outs = {f"out{i}": rows for i, rows in enumerate(xj.output_rows(prep, compiled))}
        else:
            text = _optimized_text(prep.lowered)
            outs = {f"out{i}": a for i, a in enumerate(c.reference(list(ins.values())))}
        unoptimized = prep.lowered.as_text(dialect="hlo")
    finally:
        jax.config.update("jax_use_shardy_partitioner", shardy)
    return _write(c, prep.n, text, unoptimized, ins, outs, seed, out_root)


def _write(c: Case, n: int, text: str, unoptimized: str, ins: dict, outs: dict, seed: int,
           out_root: Path) -> Path:
    out_specs = jax.tree_util.tree_leaves(c.out_specs, is_leaf=lambda s: isinstance(s, P))
    if len(out_specs) == 1 and len(outs) > 1:
        out_specs = out_specs * len(outs)
    folder = out_root / c.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "module.hlo").write_text(text)
    (folder / "module.unoptimized.hlo").write_text(unoptimized)
    np.savez(folder / "inputs.npz", **{k: _encode(v) for k, v in ins.items()})
    np.savez(folder / "expected.npz", **{k: _encode(v) for k, v in outs.items()})

    facts = _module_facts(text)
    module = facts["module"]
    assert module.num_partitions == n, (module.num_partitions, n)
    params = module.entry.parameters
    arrays = {}
    for i, (k, v) in enumerate(ins.items()):
        arrays[k] = _array_meta(v, in_spec=_spec_text(c.in_specs[i]))
        arrays[k]["entry_param"] = params[i].name
    for i, (k, v) in enumerate(outs.items()):
        arrays[k] = _array_meta(v, out_spec=_spec_text(out_specs[i]))
    meta = {
        "name": c.name, "num_devices": n, "num_partitions": n, "replica_count": 1,
        "mesh": {"shape": list(c.mesh_shape), "axis_names": list(c.axis_names),
                 "device_ids": np.arange(n).reshape(c.mesh_shape).tolist()},
        "device_order": DEVICE_ORDER, "description": c.description,
        "ops": facts["ops"], "collectives": facts["collectives"],
        "dtypes": sorted({a["hlo_type"] for a in arrays.values()}),
        "rtol": c.rtol, "atol": c.atol, "x64": bool(jax.config.jax_enable_x64),
        "check_vma": c.check_vma, "partitioner": c.partitioner,
        "num_inputs": len(ins), "num_outputs": len(outs),
        "result_is_tuple": module.entry.root.shape.is_tuple,
        "entry_computation": module.entry.name,
        "entry_computation_layout": facts["entry_computation_layout"],
        "arrays": arrays,
        "custom_call_targets": facts["custom_call_targets"],
        "fusion_kinds": facts["fusion_kinds"],
        "kcustom_backend_configs": facts["kcustom_backend_configs"],
        "generator": {"tool": "tools/gen_corpus.py", "jax": jax.__version__,
                      "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__")
                      else jax.__version__, "numpy": np.__version__, "seed": seed,
                      "xla_flags": os.environ["XLA_FLAGS"]},
    }
    if c.out_tol:
        meta["out_tol"] = c.out_tol
    if c.reference is not None:
        meta["expected_from"] = (f"numpy reference tools/gen_corpus.py:{c.reference.__name__} "
                                 "(XLA:CPU cannot execute this module)")
    (folder / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    return folder


def _array_meta(rows: np.ndarray, **spec) -> dict:
    from xladist.io import bits_dtype
    name, bits = rows.dtype.name, bits_dtype(rows.dtype)
    return {"hlo_type": _HLO_TYPES[name], "local_shape": list(rows.shape[1:]),
            "npz_dtype": bits.name if bits is not None else name,
            "encoding": None if bits is None else "bf16_bits_as_uint16" if name == "bfloat16"
            else f"bits_as_{bits.name}", **spec}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help=f"cases to generate (default all: "
                                             f"{', '.join(CASES)})")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="output folder")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES.values():
            print(f"{c.name}: {c.description}")
        return 0
    unknown = [n for n in args.cases if n not in CASES]
    if unknown:
        ap.error(f"unknown cases: {', '.join(unknown)}")
    if len(jax.devices()) < NUM_HOST_DEVICES:
        ap.error(f"jax sees {len(jax.devices())} devices; run with XLA_FLAGS={_FLAG}")
    for name in args.cases or list(CASES):
        folder = generate(CASES[name], args.out)
        print(f"wrote {folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
