"""Random inputs for a module (DIR/argI.bin), or with --check: compare DIR/resultJ.bin
with the reference interpreter on those inputs (exit 1 if they differ)."""

import sys
from pathlib import Path

import numpy as np

import xladist


def main(hlo: str, data: str, check: bool = False) -> int:
    module = xladist.load_hlo(hlo)
    d = Path(data)
    d.mkdir(parents=True, exist_ok=True)
    params = module.entry.parameters
    if not check:
        rng = np.random.default_rng(0)
        for i, p in enumerate(params):
            a = rng.standard_normal(p.shape.dims).astype(p.shape.dtype)
            (d / f"arg{i}.bin").write_bytes(a.tobytes())
        return 0
    args = [np.frombuffer((d / f"arg{i}.bin").read_bytes(), p.shape.dtype).reshape(p.shape.dims)
            for i, p in enumerate(params)]
    expected = xladist.compile(module, backend="interpreter")(*args)
    for j, e in enumerate(expected):
        got = np.frombuffer((d / f"result{j}.bin").read_bytes(), e.dtype).reshape(e.shape)
        if not np.allclose(got, e, rtol=1e-5, atol=1e-6):
            print(f"result {j} differs from the interpreter", file=sys.stderr)
            return 1
    print(f"{len(expected)} results match the interpreter")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], "--check" in sys.argv[3:]))
