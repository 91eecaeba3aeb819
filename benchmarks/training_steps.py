"""Three JAX training steps, jitted for 2 CPU devices, whose compile time the compile
benchmark measures (benchmarks/compile_scaling.py --steps) on xladist and on XLA:CPU.

- transformer: a 2-layer pre-norm transformer block stack (4-head causal attention, gelu
  MLP), batch data-parallel over `data` and the attention heads and MLP hidden units
  tensor-parallel over `model` (Megatron layout: q/k/v and w1 column-sharded, wo and w2
  row-sharded), one Adam step; mesh {data: 1, model: 2} by default.
- mlp: a 3-layer MLP, data-parallel over 2 devices, one Adam step.
- conv: a small conv net (two 3x3 convolutions, relu, pooling, a dense head), data-parallel
  over 2 devices, an SGD step with momentum.

Each `make(name, jax)` returns (fn, args, mesh_shape, in_specs, out_specs) for
xladist.jax's lowering (prepare / compile_text). Needs jax; CI does not run this file.
"""

from __future__ import annotations

import numpy as np

STEPS = ("transformer", "mlp", "conv")


def _adam(jax, jnp, params, grads, m, v, lr=1e-3, b1=0.9, b2=0.999, t=1):
    tm = jax.tree_util.tree_map
    m = tm(lambda mi, g: b1 * mi + (1 - b1) * g, m, grads)
    v = tm(lambda vi, g: b2 * vi + (1 - b2) * g * g, v, grads)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
    params = tm(lambda p, mi, vi: p - lr * (mi / c1) / (jnp.sqrt(vi / c2) + 1e-8), params, m, v)
    return params, m, v


def _normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def transformer(jax, *, layers=2, batch=8, tokens=64, width=256, heads=4,
                mesh_shape=None):
    jnp = jax.numpy
    from jax.sharding import PartitionSpec as P
    mesh_shape = mesh_shape or {"data": 1, "model": 2}
    rng = np.random.default_rng(0)
    hd = width // heads
    shapes = {"ln1": (width,), "wq": (width, width), "wk": (width, width),
              "wv": (width, width), "wo": (width, width), "ln2": (width,),
              "w1": (width, 4 * width), "w2": (4 * width, width)}
    specs = {"ln1": P(), "wq": P(None, "model"), "wk": P(None, "model"),
             "wv": P(None, "model"), "wo": P("model", None), "ln2": P(),
             "w1": P(None, "model"), "w2": P("model", None)}
    names = list(shapes)

    def norm(x, g):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g

    def block(p, x):
        h = norm(x, p["ln1"])
        b, t, _ = h.shape
        q, k, v = (jnp.reshape(h @ p[w], (b, t, heads, hd)) for w in ("wq", "wk", "wv"))
        s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(hd).astype(np.float32)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
        a = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(s, axis=-1), v)
        x = x + jnp.reshape(a, (b, t, width)) @ p["wo"]
        return x + jax.nn.gelu(norm(x, p["ln2"]) @ p["w1"]) @ p["w2"]

    def loss(ps, x, y):
        for p in ps:
            x = block(p, x)
        return jnp.mean((x - y) ** 2)

    def step(*flat):
        n = layers * len(names)
        ps = [dict(zip(names, flat[i * len(names):(i + 1) * len(names)]))
              for i in range(layers)]
        m = [dict(zip(names, flat[n + i * len(names):n + (i + 1) * len(names)]))
             for i in range(layers)]
        v = [dict(zip(names, flat[2 * n + i * len(names):2 * n + (i + 1) * len(names)]))
             for i in range(layers)]
        x, y = flat[3 * n:]
        lval, g = jax.value_and_grad(loss)(ps, x, y)
        ps, m, v = _adam(jax, jnp, ps, g, m, v)
        out = [lval]
        for tree in (ps, m, v):
            out += [d[k] for d in tree for k in names]
        return tuple(out)

    params = [_normal(rng, shapes[k], 0.02) if k[0] == "w" else np.ones(shapes[k], np.float32)
              for _ in range(layers) for k in names]
    zeros = [np.zeros_like(a) for a in params]
    x = _normal(rng, (batch, tokens, width))
    y = _normal(rng, (batch, tokens, width))
    pspecs = [specs[k] for _ in range(layers) for k in names]
    act = P("data", None, None)
    args = params + zeros + [z.copy() for z in zeros] + [x, y]
    in_specs = pspecs * 3 + [act, act]
    out_specs = [P()] + pspecs * 3
    return step, args, mesh_shape, in_specs, out_specs


def mlp(jax, *, batch=256, sizes=(512, 1024, 1024, 10)):
    jnp = jax.numpy
    from jax.sharding import PartitionSpec as P
    rng = np.random.default_rng(1)
    shapes = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        shapes += [(a, b), (b,)]

    def loss(ps, x, labels):
        h = x
        for i in range(0, len(ps), 2):
            h = h @ ps[i] + ps[i + 1]
            if i + 2 < len(ps):
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1))

    def step(*flat):
        n = len(shapes)
        ps, m, v = list(flat[:n]), list(flat[n:2 * n]), list(flat[2 * n:3 * n])
        x, labels = flat[3 * n:]
        lval, g = jax.value_and_grad(loss)(ps, x, labels)
        ps, m, v = _adam(jax, jnp, ps, g, m, v)
        return (lval, *ps, *m, *v)

    params = [_normal(rng, s, 0.05) for s in shapes]
    zeros = [np.zeros_like(a) for a in params]
    x = _normal(rng, (batch, sizes[0]))
    labels = rng.integers(0, sizes[-1], batch).astype(np.int32)
    args = params + zeros + [z.copy() for z in zeros] + [x, labels]
    rep = [P()] * (3 * len(shapes))
    return step, args, {"data": 2}, rep + [P("data", None), P("data")], [P()] + rep


def conv(jax, *, batch=16, image=16, channels=(3, 16, 32), classes=10):
    jnp = jax.numpy
    from jax import lax
    from jax.sharding import PartitionSpec as P
    rng = np.random.default_rng(2)
    shapes = []
    for a, b in zip(channels[:-1], channels[1:]):
        shapes += [(3, 3, a, b), (b,)]
    shapes += [(channels[-1], classes), (classes,)]

    def loss(ps, x, labels):
        h = x
        for i in range(0, len(ps) - 2, 2):
            h = lax.conv_general_dilated(h, ps[i], (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
            h = jax.nn.relu(h + ps[i + 1])
            h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = h.mean(axis=(1, 2)) @ ps[-2] + ps[-1]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(h), labels[:, None], 1))

    def step(*flat):
        n = len(shapes)
        ps, mom = list(flat[:n]), list(flat[n:2 * n])
        x, labels = flat[2 * n:]
        lval, g = jax.value_and_grad(loss)(ps, x, labels)
        mom = [0.9 * mi + gi for mi, gi in zip(mom, g)]
        ps = [p - 0.01 * mi for p, mi in zip(ps, mom)]
        return (lval, *ps, *mom)

    params = [_normal(rng, s, 0.1) for s in shapes]
    zeros = [np.zeros_like(a) for a in params]
    x = _normal(rng, (batch, image, image, channels[0]))
    labels = rng.integers(0, classes, batch).astype(np.int32)
    rep = [P()] * (2 * len(shapes))
    return (step, params + zeros + [x, labels], {"data": 2},
            rep + [P("data", None, None, None), P("data")], [P()] + rep)


def make(name: str, jax):
    return {"transformer": transformer, "mlp": mlp, "conv": conv}[name](jax)
