"""Write benchmarks/transformer_step.hlo: a 2-device transformer-block training step as XLA:CPU
compiled it, the module parse_print.py times (issue 28: "parse + verify a 250 KB module").

    python benchmarks/gen_transformer_step.py [--layers 3] [-o PATH]

The step is compile_scaling.py's (attention, layer norm, gelu MLP; jax.grad and an SGD
update; batch 4, 32 tokens, width 64), jitted by xladist.jax for the mesh {d: 2}: the batch
split over d (data parallel), the MLP weights w1/w2 split over d (tensor parallel), the
rest replicated. The file is XLA's per-device SPMD module (fusions, metadata, the stack
frame table): what `xladist run` parses. With 3 layers it is ~230 KB. Needs jax; the output
is committed, so the benchmark does not.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("-o", "--output", default=str(HERE / "transformer_step.hlo"))
    args = ap.parse_args(argv)
    import xladist.jax as xj
    xj.ensure_devices(2)
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from compile_scaling import params, step_function

    step = step_function(jax, jnp)
    ps, x = params(args.layers, jnp)
    leaves, tree = jax.tree_util.tree_flatten(ps)
    names = [k for p in ps for k in sorted(p)]   # the order tree_flatten gives dict leaves

    def fn(*a):
        return jax.tree_util.tree_leaves(step(jax.tree_util.tree_unflatten(tree, a[:-1]),
                                              a[-1]))

    split = {"w1": P(None, "d"), "w2": P("d", None)}
    weights = [split.get(k, P()) for k in names]
    with tempfile.TemporaryDirectory() as tmp:
        folder = xj.export(fn, *leaves, x, mesh_shape={"d": 2}, in_specs=weights + [P("d")],
                           out_specs=weights, path=Path(tmp) / "step", expected=False)
        text = (folder / "module.hlo").read_text()
    Path(args.output).write_text(text)
    print(f"wrote {args.output}: {len(text) / 1e3:.0f} KB, {text.count(chr(10))} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
