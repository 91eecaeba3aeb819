"""Record what XLA:CPU returns for complex element-wise HLO ops at special values, into
tests/data/complex_special_xla.npz (read by tests/compiler/test_units.py).

    pip install jax            # jax 0.10.2 wrote the committed table
    python tools/gen_complex_special.py [--show-hlo OP]

The grid: every complex number whose real and imaginary parts are both in
{0, -0, 1, -2.5, 1e30, inf, -inf, nan} (64 values), for c64 and c128. Unary ops run on the
64 values; binary ops (multiply, divide, power, add, subtract) on all 64 x 64 pairs
(a = grid repeated, b = grid tiled).

Each op is one hand-written HLO module `ROOT r = op(a[, b])`, parsed by XLA's own HLO parser
(jaxlib._hlo.hlo_module_from_text), converted to StableHLO and compiled and run by XLA:CPU --
so the table holds what XLA gives for that HLO opcode, whatever jax's own lowering of
jnp.sinh and friends would emit. (XLA:CPU expands complex exp, log, sqrt, ... into real ops
before emitting code; `--show-hlo exponential` prints the optimized module.) XLA:CPU rejects
complex sinh and cosh ("UNIMPLEMENTED: unary complex op"); jax never emits them (it lowers
jnp.sinh/cosh of complex through chlo into exp, multiply, ...), and the table records them as
absent.

Keys: `x.c64` / `x.c128` (the grid), `<op>.<type>` (XLA's results; f32/f64 for abs),
`meta` (a JSON string: jax version, grid, ops, ops XLA rejected). jax is needed only here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from xla_cpu import xla_runner

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "complex_special_xla.npz"

PARTS = [0.0, -0.0, 1.0, -2.5, 1e30, np.inf, -np.inf, np.nan]
UNARY = ["exponential", "exponential-minus-one", "log", "log-plus-one", "sine", "cosine",
         "tan", "sinh", "cosh", "tanh", "sign", "sqrt", "rsqrt", "abs", "negate"]
BINARY = ["multiply", "divide", "power", "add", "subtract"]
TYPES = {"c64": np.complex64, "c128": np.complex128}
REAL = {"c64": "f32", "c128": "f64"}


def grid(dt) -> np.ndarray:
    return np.array([complex(a, b) for a in PARTS for b in PARTS], dt)


def pairs(dt) -> tuple[np.ndarray, np.ndarray]:
    g = grid(dt)
    return np.repeat(g, g.size), np.tile(g, g.size)


def hlo_text(op: str, t: str, n: int) -> str:
    out = (REAL[t] if op == "abs" else t) + f"[{n}]"
    if op in BINARY:
        return (f"HloModule {op.replace('-', '_')}\nENTRY e {{\n a = {t}[{n}] parameter(0)\n"
                f" b = {t}[{n}] parameter(1)\n ROOT r = {out} {op}(a, b)\n}}\n")
    return (f"HloModule {op.replace('-', '_')}\nENTRY e {{\n a = {t}[{n}] parameter(0)\n"
            f" ROOT r = {out} {op}(a)\n}}\n")


def inputs(op: str, t: str) -> list[np.ndarray]:
    dt = TYPES[t]
    return list(pairs(dt)) if op in BINARY else [grid(dt)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show-hlo", metavar="OP", help="print XLA's optimized module for OP (c64)")
    opts = ap.parse_args()
    version, run = xla_runner()
    if opts.show_hlo:
        print(run(hlo_text(opts.show_hlo, "c64", 64 * (64 if opts.show_hlo in BINARY else 1)),
                  inputs(opts.show_hlo, "c64"))[1])
        return
    table = {f"x.{t}": grid(dt) for t, dt in TYPES.items()}
    rejected = {}
    for op in UNARY + BINARY:
        for t in TYPES:
            args = inputs(op, t)
            try:
                table[f"{op}.{t}"], _ = run(hlo_text(op, t, args[0].size), args)
            except Exception as e:  # noqa: BLE001 -- XLA's refusal is the datum
                rejected[f"{op}.{t}"] = str(e).splitlines()[0][:200]
    meta = {"tool": "tools/gen_complex_special.py", "jax_version": version,
            "backend": "XLA:CPU", "parts": [repr(p) for p in PARTS], "unary": UNARY,
            "binary": BINARY, "binary_layout": "a = repeat(grid, 64), b = tile(grid, 64)",
            "rejected": rejected}
    table["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(OUT, **table)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes): {len(table) - 3} results; "
          f"XLA rejected {sorted(rejected)}")


if __name__ == "__main__":
    main()
