"""Record XLA:CPU's `topk` (largest=true and false) and its stable `sort` with a TOTALORDER
comparator (GT and LT) on every float type into tests/data/topk_xla_cpu.npz (read by
tests/interpreter/test_topk_float_types.py).

    pip install jax            # jax 0.10.2 wrote the committed table
    python tools/gen_topk_xla.py

Inputs: for the 8-bit float types every bit pattern (256 values); for f16, bf16, f32 and
f64 the specials: +-0, +-1, +-inf, +-NaN with two payloads each, +-max, +-the smallest
subnormal, a repeated 2 (ties). Each module is hand-written HLO text with one `topk` of
k = n, or one `sort` of (x, iota) whose comparator is `compare(x_a, x_b), type=TOTALORDER`,
parsed by XLA's own parser and run by XLA:CPU. Keys: `x.<type>` (the input),
`values.<type>.<largest|smallest>`, `indices.<type>.<...>`, `sort_values.<type>.<GT|LT>`,
`sort_indices.<type>.<GT|LT>`, and `meta` (JSON: jax version, what XLA refused with its
message). Float arrays are stored as their unsigned bit patterns
(npz cannot name the ml_dtypes types).
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

from xla_cpu import xla_runner

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "topk_xla_cpu.npz"

EIGHT_BIT = {"f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
             "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz",
             "f8e4m3b11fnuz": "float8_e4m3b11fnuz", "f8e3m4": "float8_e3m4",
             "f8e4m3": "float8_e4m3", "f8e8m0fnu": "float8_e8m0fnu"}
WIDE = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}


def specials(dt) -> np.ndarray:
    dt = np.dtype(dt)
    fi = ml_dtypes.finfo(dt)
    u = np.dtype(f"uint{dt.itemsize * 8}")
    vals = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan,
                     float(fi.max), -float(fi.max), float(fi.smallest_subnormal),
                     -float(fi.smallest_subnormal), 2.0, 2.0], dt)
    bits = vals.view(u)
    payloads = np.array([bits[6] | 1, bits[7] | 3], u).view(dt)
    return np.concatenate([vals, payloads])


def inputs() -> dict[str, np.ndarray]:
    xs = {t: np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, name))
          for t, name in EIGHT_BIT.items()}
    xs.update({t: specials(dt) for t, dt in WIDE.items()})
    return xs


def hlo_text(t: str, n: int, largest: bool) -> str:
    return (f"HloModule topk_{t}\nENTRY e {{\n a = {t}[{n}] parameter(0)\n"
            f" ROOT r = ({t}[{n}], s32[{n}]) topk(a), k={n}, "
            f"largest={'true' if largest else 'false'}\n}}\n")


def sort_text(t: str, n: int, direction: str) -> str:
    return (f"HloModule sort_{t}\n"
            f"cmp {{\n a = {t}[] parameter(0)\n b = {t}[] parameter(1)\n"
            f" ia = s32[] parameter(2)\n ib = s32[] parameter(3)\n"
            f" ROOT c = pred[] compare(a, b), direction={direction}, type=TOTALORDER\n}}\n"
            f"ENTRY e {{\n x = {t}[{n}] parameter(0)\n"
            f" i = s32[{n}] iota(), iota_dimension=0\n"
            f" ROOT s = ({t}[{n}], s32[{n}]) sort(x, i), dimensions={{0}}, is_stable=true, "
            f"to_apply=cmp\n}}\n")


def bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.dtype(f"uint{x.dtype.itemsize * 8}"))


def main() -> None:
    version, run = xla_runner()
    table, rejected = {}, {}
    for t, x in inputs().items():
        table[f"x.{t}"] = bits(x)
        # (module, key prefix of its values and indices, key of XLA's refusal)
        cases = [(hlo_text(t, x.size, side == "largest"), ("", f"{t}.{side}"), f"{t}.{side}")
                 for side in ("largest", "smallest")]
        cases += [(sort_text(t, x.size, d), ("sort_", f"{t}.{d}"), f"sort.{t}.{d}")
                  for d in ("GT", "LT")]
        for text, (prefix, suffix), refusal in cases:
            try:
                (values, indices), _ = run(text, [x])
            except Exception as e:  # noqa: BLE001 -- XLA's refusal is the datum
                rejected[refusal] = str(e).splitlines()[0][:200]
                continue
            table[f"{prefix}values.{suffix}"] = bits(values)
            table[f"{prefix}indices.{suffix}"] = indices
    meta = {"tool": "tools/gen_topk_xla.py", "jax_version": version, "backend": "XLA:CPU",
            "rejected": rejected}
    table["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(OUT, **table)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes); XLA rejected {sorted(rejected)}")


if __name__ == "__main__":
    main()
