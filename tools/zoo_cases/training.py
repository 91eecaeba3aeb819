"""The zoo's training-step cases (tools/gen_zoo_single.py): whole forward + backward passes
as users jit them, whose portable modules carry what autodiff writes -- transposed dots
with `{0,1}` layouts returned straight as gradients, reductions and broadcasts of
cotangents, optimizer updates fused with them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from zoo_cases import case, ints, normal


def _mlp_loss(w1, w2, x, y):
    h = jax.nn.gelu(x @ w1)
    return jnp.mean(jax.nn.log_softmax(h @ w2) * y)


@case("jax.value_and_grad of a two-layer gelu MLP with log_softmax: the loss and both weight "
      "gradients returned as they are (each a transposed dot in the root tuple).",
      lambda rng: [normal(rng, (16, 32)) * 0.3, normal(rng, (32, 8)) * 0.3,
                   normal(rng, (8, 16)), normal(rng, (8, 8))],
      rtol=1e-5, atol=1e-6)
def mlp_value_and_grad(w1, w2, x, y):
    return jax.value_and_grad(_mlp_loss, argnums=(0, 1))(w1, w2, x, y)


@case("one Adam step on a layernorm + attention block (causal mask, softmax, residual): "
      "gradients of every weight, first and second moments, bias-corrected update.",
      lambda rng: [normal(rng, (6, 8)), normal(rng, (8, 8)) * 0.3, normal(rng, (8, 8)) * 0.3,
                   normal(rng, (8, 8)) * 0.3, np.ones(8, np.float32),
                   np.zeros(8, np.float32)],
      rtol=1e-4, atol=1e-5)
def attention_adam_step(x, wq, wk, wv, g, b):
    params = (wq, wk, wv, g, b)

    def loss(p):
        wq, wk, wv, g, b = p
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        h = (x - mu) * lax.rsqrt(var + 1e-5) * g + b
        q, k, v = h @ wq, h @ wk, h @ wv
        s = q @ k.T / jnp.sqrt(8.0)
        s = jnp.where(jnp.tril(jnp.ones((6, 6), bool)), s, -1e9)
        out = jax.nn.softmax(s, axis=-1) @ v + x
        return jnp.sum(out ** 2) / out.size

    grads = jax.grad(loss)(params)
    m = jax.tree_util.tree_map(lambda gr: 0.1 * gr, grads)
    v = jax.tree_util.tree_map(lambda gr: 0.001 * gr * gr, grads)
    return jax.tree_util.tree_map(
        lambda p, mi, vi: p - 1e-2 * (mi / 0.1) / (jnp.sqrt(vi / 0.001) + 1e-8),
        params, m, v), grads


@case("a small conv net's SGD step: conv 3x3 (NHWC) + relu + global mean pool + dense, "
      "cross-entropy on integer labels; gradients of the kernel, bias and dense weight.",
      lambda rng: [normal(rng, (2, 6, 6, 3)), normal(rng, (3, 3, 3, 4)) * 0.3,
                   np.zeros(4, np.float32), normal(rng, (4, 5)) * 0.3,
                   ints(rng, (2,), 0, 5)],
      rtol=1e-4, atol=1e-5)
def convnet_sgd_step(x, k, bias, w, labels):
    def loss(k, bias, w):
        h = lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        h = jax.nn.relu(h + bias).mean(axis=(1, 2))
        logits = h @ w
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))

    l, (gk, gb, gw) = jax.value_and_grad(loss, argnums=(0, 1, 2))(k, bias, w)
    return l, k - 0.1 * gk, bias - 0.1 * gb, w - 0.1 * gw, gw


@case("embedding lookup + mean-squared loss: the embedding table's gradient (a scatter-add "
      "of repeated ids) and the table after one SGD step.",
      lambda rng: [normal(rng, (10, 4)), np.array([1, 3, 3, 0, 9, 1, 1], np.int32),
                   normal(rng, (7, 4))],
      rtol=1e-5, atol=1e-6)
def embedding_grad(table, ids, target):
    def loss(t):
        return jnp.mean((t[ids] - target) ** 2)

    g = jax.grad(loss)(table)
    return g, table - 0.5 * g
