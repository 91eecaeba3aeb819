"""Data-parallel training of a small MLP: the infeed/outfeed example (issue 6).

Every replica runs the same program: a while loop that per step
  1. takes a batch (x, y) from its own infeed (one tuple item per step),
  2. computes the mean-squared-error loss of a tanh MLP and its gradients,
  3. all-reduces the gradients and divides by the replica count (the mean over replicas),
  4. applies plain SGD and outfeeds its own batch's loss (a f32[] item per step).
The parameters are entry arguments (the same initial values on every replica) and the
trained parameters are the results, identical on every replica.

    module = build_module(replicas=4)           # an xladist Module
    write_example(folder, replicas=4)           # train_mlp.hlo, inputs.npz, feeds/rank{r}.npz
    reference(params, batches, lr)              # numpy: the losses every rank should outfeed

Sizes are small on purpose: 4 ranks finish in a few seconds on 2 cores with the
interpreter backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Config:
    replicas: int = 4
    steps: int = 30
    batch: int = 16      # per replica and step
    d_in: int = 8
    hidden: int = 16
    d_out: int = 2
    lr: float = 0.1
    seed: int = 0


def loss_and_grads(b, x, y, w1, b1, w2, b2):
    """MSE of out = tanh(x w1 + b1) w2 + b2 against y, and d loss / d (w1, b1, w2, b2),
    written with builder `b` on its ops (tests/builder/test_builder_numeric.py checks the gradients
    against jax.grad and finite differences)."""
    h = b.tanh(b.add(x @ w1, b1, broadcast_dimensions=(1,)))
    out = b.add(h @ w2, b2, broadcast_dimensions=(1,))
    diff = out - y
    n = float(y.dims[0] * y.dims[1])
    loss = b.reduce_sum(diff * diff) / n
    dout = diff * (2.0 / n)
    over_batch = (((0,), (0,)), ((), ()))
    dw2 = b.dot_general(h, dout, over_batch)
    db2 = b.reduce_sum(dout, [0])
    dh = b.dot_general(dout, w2, (((1,), (1,)), ((), ())))
    dpre = dh * (1.0 - h * h)
    dw1 = b.dot_general(x, dpre, over_batch)
    db1 = b.reduce_sum(dpre, [0])
    return loss, [dw1, db1, dw2, db2]


def param_shapes(cfg: Config) -> list[tuple[str, tuple[int, ...]]]:
    return [("w1", (cfg.d_in, cfg.hidden)), ("b1", (cfg.hidden,)),
            ("w2", (cfg.hidden, cfg.d_out)), ("b2", (cfg.d_out,))]


def build_module(cfg: Config = Config()):
    """The training program for `cfg.replicas` replicas (module header replica_count)."""
    from xladist.builder import XlaBuilder
    b = XlaBuilder("train_mlp")
    params = [b.parameter(i, ("f32", shape), name=name)
              for i, (name, shape) in enumerate(param_shapes(cfg))]
    batch_shape = [("f32", (cfg.batch, cfg.d_in)), ("f32", (cfg.batch, cfg.d_out))]

    def body(sb, step, token, w1, b1, w2, b2):
        (x, y), token = sb.infeed(batch_shape, token)
        loss, grads = loss_and_grads(sb, x, y, w1, b1, w2, b2)
        summed = list(sb.all_reduce(grads, "add"))
        token = sb.outfeed(loss, token)
        scale = cfg.lr / cfg.replicas  # mean over replicas, times the learning rate
        new = [p - g * scale for p, g in zip([w1, b1, w2, b2], summed)]
        return [step + 1, token, *new]

    state = b.while_loop(lambda sb, step, *rest: sb.lt(step, cfg.steps), body,
                         [b.constant_r0(0, "s32"), b.after_all(), *params])
    return b.build(list(state)[2:], replica_count=cfg.replicas)


def build_step_loop(cfg: Config = Config()):
    """K data-parallel SGD steps on one fixed batch per replica, without feeds: entry
    parameters w1, b1, w2, b2, x, y and the step count k (s32[]); one all-reduce per
    gradient. The loop body is kernels, dots and all-reduces only, so it runs as one
    native driver (compiler/native/loop.py; benchmarks/native_loop_p2p_gather.py times it)."""
    from xladist.builder import XlaBuilder
    b = XlaBuilder("mlp_steps")
    shapes = [s for _, s in param_shapes(cfg)] + [(cfg.batch, cfg.d_in), (cfg.batch, cfg.d_out)]
    names = [n for n, _ in param_shapes(cfg)] + ["x", "y"]
    ins = [b.parameter(i, ("f32", s), name=n) for i, (n, s) in enumerate(zip(names, shapes))]
    k = b.parameter(len(ins), ("s32", ()), name="k")

    def body(sb, step, k, x, y, w1, b1, w2, b2):
        _loss, grads = loss_and_grads(sb, x, y, w1, b1, w2, b2)
        summed = [sb.all_reduce(g, "add") for g in grads]
        scale = cfg.lr / cfg.replicas
        new = [p - g * scale for p, g in zip([w1, b1, w2, b2], summed)]
        return [step + 1, k, x, y, *new]

    state = b.while_loop(lambda sb, step, k, *rest: sb.lt(step, k), body,
                         [b.constant_r0(0, "s32"), k, ins[4], ins[5], *ins[:4]])
    return b.build(list(state)[4:], replica_count=cfg.replicas)


def make_data(cfg: Config = Config()):
    """(initial params, batches[rank][step] = (x, y)): a teacher MLP labels random inputs;
    every rank gets its own shard."""
    rng = np.random.default_rng(cfg.seed)
    teacher = [rng.normal(size=s).astype(np.float32) for _, s in param_shapes(cfg)]
    params = [(rng.normal(size=s) * (0.3 if len(s) == 2 else 0.0)).astype(np.float32)
              for _, s in param_shapes(cfg)]
    w1, b1, w2, b2 = teacher
    batches = []
    for _ in range(cfg.replicas):
        mine = []
        for _ in range(cfg.steps):
            x = rng.normal(size=(cfg.batch, cfg.d_in)).astype(np.float32)
            y = (np.tanh(x @ w1 + b1) @ w2 + b2).astype(np.float32)
            mine.append((x, y))
        batches.append(mine)
    return params, batches


def reference(params, batches, lr: float):
    """numpy (float64) data-parallel SGD: losses[rank][step] and the final parameters."""
    ps = [p.astype(np.float64) for p in params]
    n, steps = len(batches), len(batches[0])
    losses = [[0.0] * steps for _ in range(n)]
    for s in range(steps):
        total = [np.zeros_like(p) for p in ps]
        for r in range(n):
            x, y = (a.astype(np.float64) for a in batches[r][s])
            w1, b1, w2, b2 = ps
            h = np.tanh(x @ w1 + b1)
            diff = h @ w2 + b2 - y
            losses[r][s] = float(np.mean(diff ** 2))
            dout = 2 * diff / diff.size
            dpre = (dout @ w2.T) * (1 - h * h)
            for t, g in zip(total, [x.T @ dpre, dpre.sum(0), h.T @ dout, dout.sum(0)]):
                t += g
        ps = [p - lr * t / n for p, t in zip(ps, total)]
    return losses, ps


def write_example(folder, cfg: Config = Config()) -> dict[str, str]:
    """Write train_mlp.hlo, inputs.npz (arg0..3 with a device axis) and
    feeds/rank{r}.npz (item{k}_0 = x, item{k}_1 = y) under `folder`; returns the paths."""
    from xladist.runtime.feeds.npz import write_items
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hlo = folder / "train_mlp.hlo"
    hlo.write_text(build_module(cfg).to_text())
    params, batches = make_data(cfg)
    np.savez(folder / "inputs.npz", **{f"arg{i}": np.stack([p] * cfg.replicas)
                                       for i, p in enumerate(params)})
    for r, mine in enumerate(batches):
        write_items(str(folder / "feeds" / f"rank{r}.npz"), mine)
    return {"module": str(hlo), "inputs": str(folder / "inputs.npz"),
            "infeed": str(folder / "feeds" / "rank{rank}.npz")}
