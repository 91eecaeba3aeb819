"""Random inputs for a module (DIR/argI.bin), or with --check: compare DIR/resultJ.bin
with the reference interpreter on those inputs (exit 1 if they differ). The files hold raw
bytes in the layouts NAME.h lists (a parameter or result `f32[2,3]{0,1}` is column-major)."""

import sys
from pathlib import Path

import numpy as np

import xladist
from xladist.semantics.layout import from_bytes, to_bytes


def same(got, want) -> bool:
    if want.dtype.kind in "fc" or "float" in want.dtype.name:
        return np.allclose(got.astype(np.complex128), want.astype(np.complex128), rtol=1e-5,
                           atol=1e-6, equal_nan=True)
    return np.array_equal(got, want)


def main(hlo: str, data: str, check: bool = False) -> int:
    module = xladist.load_hlo(hlo)
    d = Path(data)
    d.mkdir(parents=True, exist_ok=True)
    params = module.entry.parameters
    if not check:
        rng = np.random.default_rng(0)
        for i, p in enumerate(params):
            a = np.asarray(rng.standard_normal(p.shape.dims)).astype(p.shape.dtype)
            (d / f"arg{i}.bin").write_bytes(to_bytes(a, p.shape))
        return 0
    args = [from_bytes((d / f"arg{i}.bin").read_bytes(), p.shape) for i, p in enumerate(params)]
    expected = xladist.compile(module, backend="interpreter")(*args)
    leaves = [s for _, s in module.entry.root.shape.leaves() if s.is_array]
    for j, (e, shape) in enumerate(zip(expected, leaves)):
        got = from_bytes((d / f"result{j}.bin").read_bytes(), shape)
        if not same(got, e):
            print(f"result {j} differs from the interpreter", file=sys.stderr)
            return 1
    print(f"{len(expected)} results match the interpreter")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], "--check" in sys.argv[3:]))
