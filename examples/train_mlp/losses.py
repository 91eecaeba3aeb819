"""Print the losses the ranks outfed, per step, and whether training reduced them.

    python examples/train_mlp/losses.py 'examples/train_mlp/out/rank{rank}.npz' [RANKS]
"""

import sys

import numpy as np


def main() -> int:
    template = sys.argv[1] if len(sys.argv) > 1 else "examples/train_mlp/out/rank{rank}.npz"
    ranks = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    per_rank = []
    for r in range(ranks):
        with np.load(template.format(rank=r)) as f:
            per_rank.append([float(f[f"item{k}"]) for k in range(len(f.files))])
    print("step " + " ".join(f"rank{r:<6}" for r in range(ranks)))
    for k in range(len(per_rank[0])):
        print(f"{k:4d} " + " ".join(f"{losses[k]:<10.5f}" for losses in per_rank))
    first = np.mean([losses[0] for losses in per_rank])
    last = np.mean([losses[-1] for losses in per_rank])
    print(f"mean loss: {first:.5f} at the first step, {last:.5f} at the last")
    return 0 if last < first else 1


if __name__ == "__main__":
    sys.exit(main())
