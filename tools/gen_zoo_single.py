"""Generate the single-device "zoo": many small real JAX programs, in the single/ corpus format.

    python tools/gen_zoo_single.py [CASE ...] [--list]

Each case is `jax.jit(f)` of a small program on one CPU device, written to
tests/data/corpus/single_zoo/<case>/ in the format of tests/data/corpus/single/:

- module.hlo: `jax.jit(f).lower(*args).as_text(dialect="hlo")`, the portable unoptimized HLO;
- module.optimized.hlo: the module XLA:CPU compiled and ran, printed with every constant's data
  (`compiled.as_text()` elides large ones) and without metadata;
- inputs.npz / expected.npz: `arg{i}` / `out{i}` without a device axis (bf16 as uint16 bits);
- case.json: name, description, ops (of module.hlo), optimized_ops, dtypes, rtol, atol,
  out_tol, num_inputs, num_outputs, x64, arrays, custom_call_targets (of either module).

The zoo covers what the 20 hand-picked single/ cases do not: control flow from scan, fori and
while loops, cond/switch, cumulative ops, multi-operand sorts, top_k, argmax, gathers and
scatters in every mode, convolutions, pooling, FFTs, linear algebra, both PRNGs, jax.nn,
integer corner cases, complex, f16/bf16/f64/int8/uint32/bool, non-default layouts, and edge
values (NaN, inf, -0) in the inputs. The cases live in the zoo_cases package (its __init__, numeric.py, training.py).
On CPU jax lowers linear algebra to LAPACK custom-calls (lapack_*_ffi); case.json lists them
under custom_call_targets.

jax is needed only here: the data is committed (every case well under 100 KB). Inputs are drawn from a per-case seed (crc32
of the case name), so re-running reproduces the same files for the same JAX version.
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jax
import jax.numpy as jnp
import numpy as np
from zoo_cases import CASES, HLO_TYPES, Case, gc

OUT_DIR = gc.ROOT / "tests" / "data" / "corpus" / "single_zoo"


def optimized_text(compiled) -> str:
    """The module XLA:CPU ran, with every constant's data (`compiled.as_text()` elides large
    constants as `{...}`) and without metadata (source locations, most of the bytes)."""
    from jaxlib._hlo import HloPrintOptions
    opts = HloPrintOptions()
    opts.print_large_constants = True
    opts.print_metadata = False
    (module,) = compiled.runtime_executable().hlo_modules()
    return module.to_string(opts)


def _array_meta(a: np.ndarray) -> dict:
    name = a.dtype.name
    meta = {"hlo_type": HLO_TYPES[name], "shape": list(a.shape),
            "npz_dtype": "uint16" if name == "bfloat16" else name}
    if name == "bfloat16":
        meta["encoding"] = "bits:uint16"
    return meta


def generate(c: Case, out_root: Path = OUT_DIR) -> Path:
    jax.config.update("jax_enable_x64", c.x64)
    seed = zlib.crc32(c.name.encode())
    host = [np.asarray(a) for a in c.make_inputs(np.random.default_rng(seed))]
    args = [jnp.asarray(a) for a in host]
    for h, a in zip(host, args):
        assert a.dtype == h.dtype, f"{c.name}: {h.dtype} became {a.dtype} (x64={c.x64})"
    lowered = jax.jit(c.fn).lower(*args)
    text = lowered.as_text(dialect="hlo")
    compiled = lowered.compile()
    optimized = optimized_text(compiled)
    leaves = [np.asarray(o) for o in jax.tree_util.tree_leaves(compiled(*args))]
    ins = {f"arg{i}": a for i, a in enumerate(host)}
    outs = {f"out{i}": a for i, a in enumerate(leaves)}

    folder = out_root / c.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "module.hlo").write_text(text)
    (folder / "module.optimized.hlo").write_text(optimized)
    np.savez(folder / "inputs.npz", **{k: gc._encode(v) for k, v in ins.items()})
    np.savez(folder / "expected.npz", **{k: gc._encode(v) for k, v in outs.items()})

    facts = gc._module_facts(text)
    opt_facts = gc._module_facts(optimized)
    arrays = {k: _array_meta(v) for k, v in {**ins, **outs}.items()}
    meta = {
        "name": c.name, "description": c.description, "ops": facts["ops"],
        "optimized_ops": opt_facts["ops"],
        "dtypes": sorted({a["hlo_type"] for a in arrays.values()}),
        "rtol": c.rtol, "atol": c.atol, "out_tol": c.out_tol,
        "num_inputs": len(ins), "num_outputs": len(outs), "x64": c.x64,
        "custom_call_targets": sorted(set(facts["custom_call_targets"])
                                      | set(opt_facts["custom_call_targets"])),
        "arrays": arrays,
        "compare": "float/complex outputs: allclose(rtol, atol, equal_nan=True); "
                   "integer/pred outputs: exact",
        "generator": {"tool": "tools/gen_zoo_single.py", "jax": jax.__version__,
                      "numpy": np.__version__, "seed": seed},
    }
    (folder / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    jax.config.update("jax_enable_x64", False)
    return folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="cases to generate (default: all)")
    ap.add_argument("--out", type=Path, default=OUT_DIR, help="output folder")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    if args.list:
        for c in CASES.values():
            print(f"{c.name}: {c.description}")
        return 0
    unknown = [n for n in args.cases if n not in CASES]
    if unknown:
        ap.error(f"unknown cases: {', '.join(unknown)}")
    failed = []
    for name in args.cases or list(CASES):
        try:
            folder = generate(CASES[name], args.out)
        except Exception as e:  # noqa: BLE001 -- report every case that jax cannot build
            failed.append(name)
            print(f"FAILED {name}: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"wrote {folder} ({size // 1024} KB)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
