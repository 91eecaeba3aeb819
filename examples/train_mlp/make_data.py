"""Generate the example's data: initial parameters and one infeed file per rank.

    python examples/train_mlp/make_data.py [FOLDER]     # default examples/train_mlp/data

writes FOLDER/inputs.npz (arg0..arg3: w1, b1, w2, b2 with a leading device axis of 4,
the same values on every replica) and FOLDER/feeds/rank{r}.npz (item{k}_0 = x and
item{k}_1 = y of step k; every rank gets different batches, labelled by a fixed random
teacher MLP).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from xladist.examples.train_mlp import Config, write_example


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("data")
    paths = write_example(folder, Config())
    print(f"wrote {paths['inputs']} and {paths['infeed']} for {Config().replicas} ranks")


if __name__ == "__main__":
    main()
