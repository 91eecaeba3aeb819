"""Build the training program with the builder API and write it as HLO text.

    python examples/train_mlp/build.py            # -> examples/train_mlp/train_mlp.hlo

The builder code lives in xladist/examples/train_mlp.py (so an installed xladist can
build it too); this script only writes the module next to itself.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from xladist.examples.train_mlp import Config, build_module


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("train_mlp.hlo")
    out.write_text(build_module(Config()).to_text())
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
