import sys
import xladist.jax as xj
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import numpy as np
xj.ensure_devices(4)
nd = 4
def sm(f, i, o):
    return jax.shard_map(f, in_specs=i, out_specs=o, check_vma=False)

def conv(a):
    def cond(c):
        return c[1] > 0.3
    def step(c):
        v, _ = c
        v = v * 0.5
        return v, lax.pmax(jnp.max(jnp.abs(v)), "d")
    return lax.while_loop(cond, step, (a, jnp.float32(1.0)))[0]

def switch(a):
    g = lax.all_gather(jnp.sum(a).astype(jnp.int32), "d")
    idx = g[0] % 3
    return lax.switch(idx, [lambda v: lax.psum(v, "d"), lambda v: lax.pmax(v, "d"), lambda v: v * 2], a)

x = np.arange(4 * nd * 3, dtype=np.float32).reshape(4 * nd, 3) / 10
for name, f in [("conv", conv), ("switch", switch)]:
    xj.export(sm(f, P("d"), P("d")), x, mesh_shape={"d": nd}, in_specs=[P("d")], out_specs=[P("d")], path=f"/tmp/s51/jx/{name}")
print("ok")
