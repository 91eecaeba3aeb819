"""Writes conv.* and switch.* here (tests/analysis/deadlock/test_uniform_results.py): two jax
shard_map programs on 4 devices whose control reads a value every device holds alike, a
while loop on a pmax its body carries and a switch on an all-gather, lowered by
xladist.jax.export with jax's results. Run: python tests/data/deadlock/jax_uniform/make.py"""

import shutil
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import xladist.jax as xj

xj.ensure_devices(4)
ND = 4
HERE = Path(__file__).parent


def conv(a):
    def cond(c):
        return c[1] > 0.3

    def step(c):
        v = c[0] * 0.5
        return v, lax.pmax(jnp.max(jnp.abs(v)), "d")
    return lax.while_loop(cond, step, (a, jnp.float32(1.0)))[0]


def switch(a):
    g = lax.all_gather(jnp.sum(a).astype(jnp.int32), "d")
    return lax.switch(g[0] % 3, [lambda v: lax.psum(v, "d"), lambda v: lax.pmax(v, "d"),
                                 lambda v: v * 2], a)


x = np.arange(4 * ND * 3, dtype=np.float32).reshape(4 * ND, 3) / 10
for name, f in [("conv", conv), ("switch", switch)]:
    with tempfile.TemporaryDirectory() as tmp:
        out = xj.export(jax.shard_map(f, in_specs=P("d"), out_specs=P("d"), check_vma=False),
                        x, mesh_shape={"d": ND}, in_specs=[P("d")], out_specs=[P("d")],
                        path=Path(tmp) / name)
        shutil.copy(out / "module.hlo", HERE / f"{name}.hlo")
        shutil.copy(out / "inputs.npz", HERE / f"{name}.inputs.npz")
        shutil.copy(out / "expected.npz", HERE / f"{name}.expected.npz")
