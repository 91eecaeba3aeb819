"""More multi-device cases for tools/gen_corpus.py (which imports this module).

Kinds of program the first cases do not cover: 3-D meshes and collectives over one, several or
all mesh axes (with the axes named out of mesh order), gathers/scatters/all-to-alls over axis
tuples, non-ring and partial permutations with self pairs, axis_index arithmetic, collectives in
fori_loop / while conditions / uniformly predicated cond, bf16/f16/integer/bool collectives,
parallelism patterns (pipeline, tensor-parallel MLP, sequence parallel, ring attention, Adam
data-parallel, 2-D data+tensor-parallel training), and programs with no shard_map at all,
jitted with NamedShardings and partitioned by Shardy (JAX's default) or by the older GSPMD
partitioner: there XLA inserts the collectives (all-reduce / reduce-scatter / all-to-all /
collective-permute with iota replica groups and global device ids).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from gen_corpus import case, ints, normal

BF16 = ml_dtypes.bfloat16


# ---- shard_map: meshes and axis tuples ------------------------------------------------------

@case(description="2x2x2 mesh: psum over one axis ('b'), over two ('a','c'), over all three, "
                  "pmean over 'c', pmax over ('b','a') (axes out of mesh order) and pmin "
                  "over 'a'.",
      mesh_shape=(2, 2, 2), axis_names=("a", "b", "c"),
      in_specs=(P("a", "b", "c"),), out_specs=(P(),) * 6,
      make_inputs=lambda rng: [normal(rng, (4, 6, 4))], check_vma=False,
      rtol=1e-5, atol=1e-5)
def mesh3d_psum_axes_mesh2x2x2(x):
    return (lax.psum(x, "b"), lax.psum(x, ("a", "c")), lax.psum(x, ("a", "b", "c")),
            lax.pmean(x, "c"), lax.pmax(x, ("b", "a")), lax.pmin(x, "a"))


@case(description="2x2 mesh, integer and float reductions: int32 psum over ('y','x'), uint32 "
                  "psum over 'x', int32 pmin over 'y', f32 pmean over both axes, f32 pmax "
                  "over 'x' of a scalar.",
      mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"), P("x", "y"), P("x", "y")), out_specs=(P(),) * 5,
      make_inputs=lambda rng: [ints(rng, (4, 6)), ints(rng, (2, 4), 0, 1 << 30, np.uint32),
                               normal(rng, (4, 4))],
      check_vma=False)
def int_reductions_mesh2x2(i, u, x):
    return (lax.psum(i, ("y", "x")), lax.psum(u, "x"), lax.pmin(i, "y"),
            lax.pmean(x, ("x", "y")), lax.pmax(jnp.sum(x), "x"))


@case(description="2x2 mesh all_gather: untiled along dim 2 over 'y' ((2,3)->(2,3,2)), tiled "
                  "along dim 1 over ('x','y'), tiled bf16 along dim 0 over 'x'.",
      mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"), P("x", "y")), out_specs=(P(),) * 3,
      make_inputs=lambda rng: [normal(rng, (4, 6)), normal(rng, (4, 4), BF16)],
      check_vma=False)
def all_gather_axes_mesh2x2(x, b):
    return (lax.all_gather(x, "y", axis=2, tiled=False),
            lax.all_gather(x, ("x", "y"), axis=1, tiled=True),
            lax.all_gather(b, "x", axis=0, tiled=True))


@case(description="2x2 mesh psum_scatter: tiled along dim 1 over 'x', tiled along dim 0 over "
                  "('x','y'), untiled along dim 2 (size 2) over 'y'.",
      mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"), P("x", "y")), out_specs=(P(),) * 3,
      make_inputs=lambda rng: [normal(rng, (8, 8)), normal(rng, (6, 6, 2))],
      check_vma=False, rtol=1e-5, atol=1e-5)
def psum_scatter_axes_mesh2x2(x, z):
    return (lax.psum_scatter(x, "x", scatter_dimension=1, tiled=True),
            lax.psum_scatter(x, ("x", "y"), scatter_dimension=0, tiled=True),
            lax.psum_scatter(z, "y", scatter_dimension=2, tiled=False))


@case(description="2x2 mesh all_to_all: over 'y' split 0/concat 1, over ('x','y') split "
                  "1/concat 0, over 'x' split 2/concat 1 of a (4,4,2) block.",
      mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"),), out_specs=(P(),) * 3,
      make_inputs=lambda rng: [normal(rng, (8, 8, 2))], check_vma=False)
def all_to_all_axes_mesh2x2(x):
    return (lax.all_to_all(x, "y", 0, 1, tiled=True),
            lax.all_to_all(x, ("x", "y"), 1, 0, tiled=True),
            lax.all_to_all(x, "x", 2, 1, tiled=True))


@case(description="2x2 mesh ppermute: swap over 'x', a full reversal over ('x','y') "
                  "(0<->3, 1<->2), and a partial shift over 'y' (only 0->1).",
      mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"),), out_specs=(P(),) * 3,
      make_inputs=lambda rng: [normal(rng, (4, 6))], check_vma=False)
def ppermute_axes_mesh2x2(x):
    return (lax.ppermute(x, "x", [(0, 1), (1, 0)]),
            lax.ppermute(x * 2.0, ("x", "y"), [(0, 3), (1, 2), (2, 1), (3, 0)]),
            lax.ppermute(x + 1.0, "y", [(0, 1)]))


@case(description="ppermute on 4 devices: a 4-cycle in non-ring order 0->2->1->3->0, self "
                  "pairs with a swap (0->0, 1<->2; device 3 gets zeros), an xor-2 butterfly, "
                  "and an int32 broadcast-like fan-in-free pair 3->0.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P("d")), out_specs=(P("d"),) * 4,
      make_inputs=lambda rng: [normal(rng, (8, 3)), ints(rng, (4, 5))])
def ppermute_nonring_mesh4(x, i):
    return (lax.ppermute(x, "d", [(0, 2), (2, 1), (1, 3), (3, 0)]),
            lax.ppermute(x * 3.0, "d", [(0, 0), (1, 2), (2, 1)]),
            lax.ppermute(x - 1.0, "d", [(j, j ^ 2) for j in range(4)]),
            lax.ppermute(i, "d", [(3, 0)]))


@case(description="axis_index arithmetic on a 2x2 mesh: flat index from both axes and from "
                  "axis_index(('x','y')), a dynamic_slice of a replicated table at it, a "
                  "one-hot psum that gathers every device's row, parity-dependent signs.",
      mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"), P()), out_specs=(P(),) * 4,
      make_inputs=lambda rng: [normal(rng, (2, 6)), normal(rng, (4, 5))], check_vma=False)
def axis_index_compute_mesh2x2(x, table):
    flat = lax.axis_index("x") * 2 + lax.axis_index("y")
    flat2 = lax.axis_index(("x", "y"))
    row = lax.dynamic_slice_in_dim(table, flat, 1, axis=0)
    onehot = (jnp.arange(4) == flat2).astype(x.dtype)[:, None, None]
    gathered = lax.psum(onehot * x[None], ("x", "y"))
    signed = jnp.where(flat % 2 == 0, x, -x) * (flat2 + 1).astype(x.dtype)
    return jnp.stack([flat, flat2]), row, gathered, signed


# ---- shard_map: control flow ----------------------------------------------------------------

@case(description="2 devices: fori_loop of 3 steps (ppermute + psum in the body), then a "
                  "while_loop whose condition holds a pmax (data-dependent, uniform trip "
                  "count) and whose body holds a pmean.",
      mesh_shape=(2,), axis_names=("d",),
      in_specs=(P("d"),), out_specs=(P("d"), P("d"), P()),
      make_inputs=lambda rng: [normal(rng, (4, 3)) * 4.0], rtol=1e-5, atol=1e-5,
      check_vma=False)
def loops_collectives_mesh2(x):
    def body(_, v):
        return lax.ppermute(v, "d", [(0, 1), (1, 0)]) * 0.5 + lax.psum(v, "d") * 0.25
    y = lax.fori_loop(0, 3, body, x)

    def cond(carry):
        v, _ = carry
        return lax.pmax(jnp.max(jnp.abs(v)), "d") > 0.3

    def shrink(carry):
        v, k = carry
        return v * 0.5 + lax.pmean(v, "d") * 0.1, k + 1
    z, steps = lax.while_loop(cond, shrink, (y, jnp.int32(0)))
    return y, z, steps


@case(description="4 devices: lax.cond on a psum'd (uniform) predicate with all_gather in one "
                  "branch and a psum_scatter+all_gather in the other, then a scan whose body "
                  "conds on its step with a ppermute in one branch.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"),), out_specs=(P("d"), P("d")),
      make_inputs=lambda rng: [normal(rng, (8, 4))], check_vma=False, rtol=1e-5, atol=1e-5)
def cond_uniform_collectives_mesh4(x):
    pred = lax.psum(jnp.sum(x), "d") > 0
    a = lax.cond(pred,
                 lambda v: lax.all_gather(v, "d", axis=0, tiled=True)[::4] * 2.0,
                 lambda v: lax.all_gather(lax.psum_scatter(v, "d", scatter_dimension=1,
                                                           tiled=True), "d", axis=1,
                                          tiled=True), x)

    def step(c, t):
        c = lax.cond(t % 2 == 0, lambda v: lax.ppermute(v, "d", [(j, (j + 1) % 4)
                                                             for j in range(4)]),
                     lambda v: v + 1.0, c)
        return c, jnp.sum(c)
    b, _ = lax.scan(step, x, jnp.arange(3))
    return a, b


# ---- shard_map: element types ---------------------------------------------------------------

@case(description="4 devices, narrow floats: bf16 all_gather, bf16 psum_scatter, f16 ppermute, "
                  "f16 all_to_all, bf16 pmin, f16 pmean.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P("d")), out_specs=(P("d"),) * 6,
      make_inputs=lambda rng: [normal(rng, (16, 4), BF16), normal(rng, (16, 4), np.float16)],
      rtol=2e-2, atol=2e-2, check_vma=False)
def lowp_collectives_mesh4(b, h):
    return (lax.all_gather(b, "d", tiled=True), lax.psum_scatter(b, "d", tiled=True),
            lax.ppermute(h, "d", [(j, (j + 3) % 4) for j in range(4)]),
            lax.all_to_all(h, "d", 0, 1, tiled=True), lax.pmin(b, "d"), lax.pmean(h, "d"))


@case(description="4 devices, integer and bool collectives: int32 psum_scatter, uint8 "
                  "all_gather, bool all_gather and ppermute, int16 pmax, int8 all_to_all.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P("d"), P("d"), P("d")), out_specs=(P("d"),) * 6,
      make_inputs=lambda rng: [ints(rng, (16, 3)), ints(rng, (4, 5), 0, 255, np.uint8),
                               rng.random((4, 6)) < 0.5,
                               ints(rng, (8, 8), -30000, 30000, np.int16)],
      rtol=0.0, atol=0.0, check_vma=False)
def int_bool_collectives_mesh4(i, u, b, s):
    return (lax.psum_scatter(i, "d", tiled=True), lax.all_gather(u, "d", axis=1),
            lax.all_gather(b, "d", tiled=True), lax.ppermute(b, "d", [(0, 1), (1, 0), (2, 3)]),
            lax.pmax(s, "d"), lax.all_to_all(s.astype(jnp.int8), "d", 1, 0, tiled=True))


# ---- shard_map: parallelism patterns --------------------------------------------------------

@case(description="GPipe-style pipeline on 4 stages: 4 micro-batches enter stage 0, each "
                  "stage applies its own tanh layer and ppermutes the activation to the next "
                  "(7 steps of a fori_loop), the last stage collects the outputs; psum "
                  "replicates them.",
      mesh_shape=(4,), axis_names=("s",),
      in_specs=(P("s"), P("s"), P()), out_specs=(P(), P("s")),
      make_inputs=lambda rng: [normal(rng, (4, 6, 6)) * 0.5, normal(rng, (4, 6)) * 0.1,
                               normal(rng, (4, 2, 6))],
      rtol=1e-5, atol=1e-5, check_vma=False)
def pipeline_ppermute_mesh4(w, b, xs):
    n, m = 4, xs.shape[0]
    stage = lax.axis_index("s")

    def step(t, carry):
        state, outs = carry
        inp = jnp.where(stage == 0, xs[jnp.minimum(t, m - 1)], state)
        out = jnp.tanh(inp @ w[0] + b[0])
        k = jnp.clip(t - (n - 1), 0, m - 1)
        record = (stage == n - 1) & (t >= n - 1)
        outs = jnp.where(record, lax.dynamic_update_index_in_dim(outs, out, k, 0), outs)
        state = lax.ppermute(out, "s", [(j, j + 1) for j in range(n - 1)])
        return state, outs

    state, outs = lax.fori_loop(0, m + n - 1, step, (jnp.zeros_like(xs[0]), jnp.zeros_like(xs)))
    return lax.psum(outs, "s"), state


@case(description="Megatron tensor-parallel MLP on 4 devices: column-parallel W1, gelu, "
                  "row-parallel W2 with a psum; and the sequence-parallel form (all_gather of "
                  "the sequence shards in, psum_scatter out).",
      mesh_shape=(4,), axis_names=("t",),
      in_specs=(P(), P(None, "t"), P("t"), P("t", None), P(), P("t", None)),
      out_specs=(P(), P("t", None)),
      make_inputs=lambda rng: [normal(rng, (4, 8)), normal(rng, (8, 16)) * 0.3,
                               normal(rng, (16,)) * 0.1, normal(rng, (16, 8)) * 0.3,
                               normal(rng, (8,)) * 0.1, normal(rng, (8, 8))],
      rtol=1e-4, atol=1e-5)
def tp_mlp_mesh4(x, w1, b1, w2, b2, xs):
    h = jax.nn.gelu(x @ w1 + b1)
    y = lax.psum(h @ w2, "t") + b2
    full = lax.all_gather(xs, "t", tiled=True)
    hs = jax.nn.gelu(full @ w1 + b1)
    ys = lax.psum_scatter(hs @ w2, "t", scatter_dimension=0, tiled=True) + b2
    return y, ys


@case(description="Ring attention on 4 devices: Q/K/V sharded on the sequence; a fori_loop "
                  "of 4 steps rotates K and V with ppermute and folds each block in with an "
                  "online (running max) softmax.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P("d"), P("d")), out_specs=P("d"),
      make_inputs=lambda rng: [normal(rng, (8, 4)), normal(rng, (8, 4)), normal(rng, (8, 4))],
      check_vma=False, rtol=1e-4, atol=1e-5)
def ring_attention_mesh4(q, k, v):
    ring = [(j, (j + 1) % 4) for j in range(4)]
    scale = 1.0 / np.sqrt(q.shape[-1])

    def step(_, carry):
        k, v, m, l, o = carry
        s = (q @ k.T) * scale
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        p = jnp.exp(s - m_new[:, None])
        corr = jnp.exp(m - m_new)
        l = l * corr + jnp.sum(p, axis=-1)
        o = o * corr[:, None] + p @ v
        return lax.ppermute(k, "d", ring), lax.ppermute(v, "d", ring), m_new, l, o

    init = (k, v, jnp.full(q.shape[:1], -jnp.inf), jnp.zeros(q.shape[:1]), jnp.zeros_like(q))
    _, _, _, l, o = lax.fori_loop(0, 4, step, init)
    return o / l[:, None]


def _adam(p, g, m, v, t, lr=0.01, b1=0.9, b2=0.999, eps=1e-8):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat = m / (1 - b1 ** t)
    vhat = v / (1 - b2 ** t)
    return p - lr * mhat / (jnp.sqrt(vhat) + eps), m, v


@case(description="Data-parallel Adam step on 4 devices: per-device grads of a linear+tanh "
                  "model, pmean'd, global-norm clipping (psum-free: grads are replicated), "
                  "Adam moments and bias correction at step t (an int32 input), pmean'd loss.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P("d"), P(), P(), P(), P(), P()), out_specs=(P(),) * 6,
      make_inputs=lambda rng: [normal(rng, (16, 5)), normal(rng, (16, 3)),
                               normal(rng, (5, 3)) * 0.5, normal(rng, (5, 3)) * 0.01,
                               np.abs(normal(rng, (5, 3))) * 0.01, np.int32(3),
                               normal(rng, (3,)) * 0.1],
      rtol=1e-4, atol=1e-5, check_vma=False)
def dp_adam_step_mesh4(x, t, w, m, v, step, b):
    def loss_fn(params):
        w, b = params
        return jnp.mean((jnp.tanh(x @ w + b) - t) ** 2)

    loss, (gw, gb) = jax.value_and_grad(loss_fn)((w, b))
    gw, gb, loss = lax.pmean((gw, gb, loss), "d")
    norm = jnp.sqrt(jnp.sum(gw * gw) + jnp.sum(gb * gb))
    clip = jnp.minimum(1.0, 0.5 / (norm + 1e-6))
    tt = (step + 1).astype(jnp.float32)
    w2, m2, v2 = _adam(w, gw * clip, m, v, tt)
    return loss, w2, m2, v2, b - 0.01 * gb * clip, norm


@case(description="2x2 mesh ('d' data, 't' tensor) training step: tensor-parallel MLP "
                  "(W1 column-, W2 row-sharded over 't'), jax.grad through the shard_map "
                  "body (transposed collectives), grads pmean'd over 'd', SGD.",
      mesh_shape=(2, 2), axis_names=("d", "t"),
      in_specs=(P("d"), P("d"), P(None, "t"), P("t", None)),
      out_specs=(P(), P(None, "t"), P("t", None)),
      make_inputs=lambda rng: [normal(rng, (8, 4)), normal(rng, (8, 2)),
                               normal(rng, (4, 8)) * 0.5, normal(rng, (8, 2)) * 0.5],
      rtol=1e-4, atol=1e-5)
def dp_tp_train_mesh2x2(x, t, w1, w2):
    def loss_fn(w1, w2):
        h = jnp.tanh(x @ w1)
        y = lax.psum(h @ w2, "t")
        return jnp.mean((y - t) ** 2)

    loss, (g1, g2) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w1, w2)
    loss, g1, g2 = lax.pmean((loss, g1, g2), "d")
    return loss, w1 - 0.1 * g1, w2 - 0.1 * g2


@case(description="Collective matmul on 4 devices: x row-sharded, W column-sharded; a scan "
                  "rotates x blocks with ppermute while each step fills one row block of "
                  "x_full @ W_local (all-gather matmul without an all-gather).",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P(None, "d")), out_specs=P(None, "d"),
      make_inputs=lambda rng: [normal(rng, (8, 6)), normal(rng, (6, 8))],
      check_vma=False, rtol=1e-5, atol=1e-5)
def collective_matmul_mesh4(x, w):
    me = lax.axis_index("d")
    out = jnp.zeros((4 * x.shape[0], w.shape[1]), x.dtype)

    def step(carry, i):
        blk, out = carry
        src = (me - i) % 4  # whose rows we hold at step i
        out = lax.dynamic_update_slice_in_dim(out, blk @ w, src * x.shape[0], axis=0)
        return (lax.ppermute(blk, "d", [(j, (j + 1) % 4) for j in range(4)]), out), None

    (_, out), _ = lax.scan(step, (x, out), jnp.arange(4))
    return out


# ---- no shard_map: XLA's partitioner inserts the collectives --------------------------------

@case(description="Shardy, 4 devices: matmul sharded on the contracting dim with a "
                  "replicated result (all-reduce), and the same with a row-sharded result "
                  "(reduce-scatter).",
      partitioner="shardy", mesh_shape=(4,), axis_names=("d",),
      in_specs=(P(None, "d"), P("d", None)), out_specs=(P(), P("d", None)),
      make_inputs=lambda rng: [normal(rng, (8, 16)), normal(rng, (16, 6))],
      rtol=1e-5, atol=1e-5)
def shardy_matmul_contract_mesh4(x, w):
    y = x @ w
    return y, jnp.tanh(y)


@case(description="Shardy, 2x2 mesh: reductions of an array sharded over both axes: full "
                  "sum (replicated), max over dim 0 (sharded over 'y'), mean over dim 1 "
                  "(sharded over 'x'), int32 sum over dim 0.",
      partitioner="shardy", mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"), P("x", "y")), out_specs=(P(), P("y"), P("x"), P("y")),
      make_inputs=lambda rng: [normal(rng, (4, 6)), ints(rng, (4, 6))],
      rtol=1e-5, atol=1e-5)
def shardy_reductions_mesh2x2(x, i):
    return jnp.sum(x), jnp.max(x, axis=0), jnp.mean(x, axis=1), jnp.sum(i, axis=0)


@case(description="Shardy, 4 devices: reshards inserted by the partitioner: rows->columns "
                  "(all-to-all), sharded->replicated (all-gather), and a roll along the "
                  "sharded dim (collective-permute).",
      partitioner="shardy", mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d", None),), out_specs=(P(None, "d"), P(), P("d", None)),
      make_inputs=lambda rng: [normal(rng, (8, 8))])
def shardy_reshard_mesh4(x):
    return x * 2.0, x + 1.0, jnp.roll(x, 2, axis=0)


@case(description="Shardy, 2x2 mesh: P('x','y') -> P('y','x') (devices swap blocks), "
                  "P(('x','y'), None) -> P(None, ('y','x')), and a transpose of a 2-D "
                  "sharded array.",
      partitioner="shardy", mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"), P(("x", "y"), None)),
      out_specs=(P("y", "x"), P(None, ("y", "x")), P("x", "y")),
      make_inputs=lambda rng: [normal(rng, (4, 4)), normal(rng, (8, 4))])
def shardy_reshard_mesh2x2(x, z):
    return x - 1.0, z * 3.0, x.T


@case(description="Shardy, 4 devices: 1-D convolution (SAME) of a signal sharded on its "
                  "spatial dim (halo exchange), and a cumsum along the sharded dim.",
      partitioner="shardy", mesh_shape=(4,), axis_names=("d",),
      in_specs=(P(None, "d", None), P()), out_specs=(P(None, "d", None), P(None, "d")),
      make_inputs=lambda rng: [normal(rng, (2, 16, 3)), normal(rng, (3, 3, 4)) * 0.5],
      rtol=1e-5, atol=1e-5)
def shardy_conv_halo_mesh4(x, k):
    y = lax.conv_general_dilated(x, k, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))
    return y, jnp.cumsum(x[..., 0], axis=1)


@case(description="Shardy, 2x4 mesh (8 devices): MLP forward with the batch on 'd' and the "
                  "hidden dim on 't' (W1 column-, W2 row-sharded): the partitioner adds the "
                  "all-reduce over 't' subgroups.",
      partitioner="shardy", mesh_shape=(2, 4), axis_names=("d", "t"),
      in_specs=(P("d", None), P(None, "t"), P("t", None)), out_specs=P("d", None),
      make_inputs=lambda rng: [normal(rng, (4, 6)), normal(rng, (6, 8)) * 0.5,
                               normal(rng, (8, 4)) * 0.5],
      rtol=1e-5, atol=1e-5)
def shardy_mlp_mesh2x4(x, w1, w2):
    return jax.nn.relu(x @ w1) @ w2


@case(description="Shardy, 2x2 mesh: a whole training step (value_and_grad, SGD) of a "
                  "2-layer MLP with batch sharded on 'd' and hidden on 't'; the partitioner "
                  "makes the grad all-reduces.",
      partitioner="shardy", mesh_shape=(2, 2), axis_names=("d", "t"),
      in_specs=(P("d", None), P("d", None), P(None, "t"), P("t", None)),
      out_specs=(P(), P(None, "t"), P("t", None)),
      make_inputs=lambda rng: [normal(rng, (8, 4)), normal(rng, (8, 2)),
                               normal(rng, (4, 8)) * 0.5, normal(rng, (8, 2)) * 0.5],
      rtol=1e-4, atol=1e-5)
def shardy_train_step_mesh2x2(x, t, w1, w2):
    def loss_fn(w1, w2):
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - t) ** 2)
    loss, (g1, g2) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w1, w2)
    return loss, w1 - 0.1 * g1, w2 - 0.1 * g2


@case(description="Shardy, 2 devices: sort and argsort along a sharded dim, and a gather "
                  "(take) of rows of a row-sharded table by replicated indices.",
      partitioner="shardy", mesh_shape=(2,), axis_names=("d",),
      in_specs=(P("d"), P("d", None), P()), out_specs=(P("d"), P(), P()),
      make_inputs=lambda rng: [normal(rng, (8,)), normal(rng, (6, 3)),
                               rng.integers(0, 6, (4,)).astype(np.int32)])
def shardy_sort_take_mesh2(x, table, idx):
    return jnp.sort(x), jnp.argsort(x), jnp.take(table, idx, axis=0)


@case(description="GSPMD partitioner (jax_use_shardy_partitioner=False), 4 devices: "
                  "contracting-dim matmul to a row-sharded result, a full reduction and a "
                  "rows->columns reshard.",
      partitioner="gspmd", mesh_shape=(4,), axis_names=("d",),
      in_specs=(P(None, "d"), P("d", None)), out_specs=(P("d", None), P(), P(None, "d")),
      make_inputs=lambda rng: [normal(rng, (8, 16)), normal(rng, (16, 8))],
      rtol=1e-5, atol=1e-5)
def gspmd_matmul_reshard_mesh4(x, w):
    y = x @ w
    return y, jnp.max(x), w[:8] * 2.0


@case(description="GSPMD partitioner, 2x2 mesh: sums over one and both sharded axes, a "
                  "P('x','y') -> P('y','x') reshard, and a roll along a sharded dim.",
      partitioner="gspmd", mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"),), out_specs=(P("y"), P(), P("y", "x"), P("x", "y")),
      make_inputs=lambda rng: [normal(rng, (4, 8))], rtol=1e-5, atol=1e-5)
def gspmd_reshard_mesh2x2(x):
    return jnp.sum(x, axis=0), jnp.sum(x), x * 0.5, jnp.roll(x, 1, axis=1)


# ---- differential-testing additions (branch diff-multi) -------------------------------------

@case(description="2 devices: while_loop `k < psum(n)` (a uniform, data-dependent trip count; "
                  "XLA:CPU wraps the compare and the counter add in kLoop fusions) with an "
                  "all_gather along dim 1 in the body.",
      mesh_shape=(2,), axis_names=("d",),
      in_specs=(P("d"), P("d")), out_specs=(P("d"), P()),
      make_inputs=lambda rng: [normal(rng, (4, 3)), np.array([2, 3], np.int32)],
      rtol=1e-5, atol=1e-5, check_vma=False)
def while_psum_bound_gather_mesh2(x, n):
    total = lax.psum(n[0], "d")

    def body(c):
        v, k = c
        g = lax.all_gather(v, "d", axis=1, tiled=True)
        return g[:, :3] * 0.5 + g[:, 3:] * 0.25, k + 1
    return lax.while_loop(lambda c: c[1] < total, body, (x, jnp.int32(0)))


@case(description="4 devices, psum over bf16, f16, int8 (wraps), uint32 (wraps) and "
                  "complex64.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"),) * 5, out_specs=(P(),) * 5,
      make_inputs=lambda rng: [normal(rng, (4, 6), BF16), normal(rng, (4, 6), np.float16),
                               ints(rng, (4, 6), -128, 127, np.int8),
                               rng.integers(0, 2**32 - 1, (4, 6), dtype=np.uint32),
                               (normal(rng, (4, 6)) + 1j * normal(rng, (4, 6)))
                               .astype(np.complex64)],
      rtol=2e-2, atol=2e-2, check_vma=False)
def psum_dtypes_mesh4(b, h, i8, u, c):
    return (lax.psum(b, "d"), lax.psum(h, "d"), lax.psum(i8, "d"), lax.psum(u, "d"),
            lax.psum(c, "d"))


@case(description="4 devices, all_to_all of rank-3 blocks with split != concat: 2->0 and 0->2 "
                  "(f32), 1->2 (bf16), 2->1 (int32).",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P("d"), P("d")), out_specs=(P("d"),) * 4,
      make_inputs=lambda rng: [normal(rng, (16, 4, 8)), normal(rng, (16, 8, 4), BF16),
                               ints(rng, (8, 4, 4))], check_vma=False)
def all_to_all_rank3_mesh4(x, b, i):
    return (lax.all_to_all(x, "d", 2, 0, tiled=True), lax.all_to_all(x, "d", 0, 2, tiled=True),
            lax.all_to_all(b, "d", 1, 2, tiled=True), lax.all_to_all(i, "d", 2, 1, tiled=True))


@case(description="4 devices, fori_loop whose carry is a partial ppermute's result plus x "
                  "(device 0 receives zeros every iteration) and a single-pair 3->0 permute.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"),), out_specs=(P("d"), P("d")),
      make_inputs=lambda rng: [normal(rng, (8, 3))], rtol=1e-5, atol=1e-5, check_vma=False)
def loop_partial_permute_mesh4(x):
    def body(_, c):
        v, w = c
        v = lax.ppermute(v, "d", [(0, 1), (1, 2), (2, 3)]) + x
        w = lax.ppermute(w * 2.0, "d", [(3, 0)])
        return v, w + 1.0
    return lax.fori_loop(0, 5, body, (x, x))


@case(description="4 devices, jax.grad through a non-cyclic ppermute, an all_to_all and a "
                  "psum_scatter (their transposes: inverse permute, all_to_all back, "
                  "all_gather).",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P()), out_specs=(P(), P("d"), P()),
      make_inputs=lambda rng: [normal(rng, (16, 4)), normal(rng, (4, 4)) * 0.5],
      rtol=1e-4, atol=1e-5, check_vma=False)
def grad_transposes_mesh4(x, w):
    def loss(x, w):
        y = jnp.tanh(x @ w)
        y = lax.ppermute(y, "d", [(0, 1), (1, 2), (2, 3)])
        y = lax.all_to_all(y, "d", 0, 1, tiled=True)
        z = lax.psum_scatter(y * y, "d", scatter_dimension=1, tiled=True)
        return lax.psum(jnp.sum(z * jnp.arange(z.size).reshape(z.shape)), "d")
    l, (gx, gw) = jax.value_and_grad(loss, argnums=(0, 1))(x, w)
    return l, gx, lax.psum(gw, "d")


@case(description="Shardy, 4 devices: flip and a rotation by concatenation along the sharded "
                  "dim, and an uneven slice x[1:7] gathered to every device.",
      partitioner="shardy", mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"),), out_specs=(P("d"), P("d"), P()),
      make_inputs=lambda rng: [normal(rng, (8, 3))])
def shardy_flip_pad_mesh4(x):
    return jnp.flip(x, 0) * 1.0, jnp.concatenate([x[2:], x[:2]], 0) + 1.0, x[1:7] * 2.0


@case(description="4 devices, float8 collectives: all_gather and all_to_all of f8e4m3fn, "
                  "ppermute of f8e5m2, and pmax / psum / pmin, which XLA:CPU widens to f16 "
                  "all-reduces while keeping their to_apply computations in f8.",
      mesh_shape=(4,), axis_names=("d",),
      in_specs=(P("d"), P("d")), out_specs=(P("d"),) * 6,
      make_inputs=lambda rng: [normal(rng, (8, 4)).astype(ml_dtypes.float8_e4m3fn),
                               normal(rng, (8, 4)).astype(ml_dtypes.float8_e5m2)],
      rtol=0.13, atol=0.13, check_vma=False)
def f8_collectives_mesh4(a, b):
    return (lax.all_gather(a, "d", tiled=True), lax.ppermute(b, "d", [(0, 3), (3, 0), (1, 2)]),
            lax.all_to_all(a, "d", 1, 0, tiled=True), lax.pmax(a, "d"), lax.psum(b, "d"),
            lax.pmin(b, "d"))


@case(description="2x2 mesh: while_loop whose trip count is a psum over 'y' -- uniform within "
                  "each row, different between the rows (1 and 3 iterations) -- with a psum "
                  "and an all_gather over 'y' in the body. Runs on both backends; the static "
                  "check cannot prove it yet (a trip count uniform per group, not globally).",
      mesh_shape=(2, 2), axis_names=("x", "y"),
      in_specs=(P("x", "y"), P("x", "y")), out_specs=(P("x", "y"), P("x", "y")),
      make_inputs=lambda rng: [normal(rng, (4, 4)), np.array([[1, 0], [2, 1]], np.int32)],
      rtol=1e-5, atol=1e-5, check_vma=False)
def while_rowwise_trip_mesh2x2(x, k):
    n = lax.psum(k[0, 0], "y")

    def body(c):
        v, i = c
        v = lax.psum(v, "y") * 0.5 + lax.all_gather(v, "y", axis=1, tiled=True)[:, ::2]
        return v, i + 1
    v, i = lax.while_loop(lambda c: c[1] < n, body, (x, jnp.int32(0)))
    return v, jnp.full((1, 1), i)
