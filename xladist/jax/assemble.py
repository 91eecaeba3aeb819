"""Putting result shards back together from meta.json: pure Python, no jax.

meta.json (written by xladist.jax.export) lists per result its global shape, dtype, spec and,
for each device d, the block it holds as [start, stop] per dimension. A block held by several
devices (a replicated or partly replicated result) is taken once, after checking that every
copy is the same (bit for bit; NaN equals NaN): the ranks run the same program, so copies that
differ mean the program is not what the specs claim.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..errors import ExecutionError, InputError
from ..io import bits_dtype
from .folder import read_meta


def dtype_of(name: str) -> np.dtype:
    """numpy dtype of a meta.json dtype name (bfloat16 and the f8 types via ml_dtypes)."""
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def _equal_mask(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise bit-for-value equality, NaN equal to NaN (bf16/f8 compared as f64)."""
    if a.dtype.kind in "iub":
        return a == b
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    a, b = a.astype(wide), b.astype(wide)
    return (a == b) | (np.isnan(a) & np.isnan(b))


def assemble_one(result: dict, shards: list[np.ndarray], label: str) -> np.ndarray:
    """One global array from its per-device shards (shards[d] for device d)."""
    shape = tuple(result["global_shape"])
    dtype = dtype_of(result["dtype"])
    index = result["index"]
    if len(shards) != len(index):
        raise InputError(f"{label}: {len(shards)} device shards, meta.json describes "
                         f"{len(index)} devices")
    out = np.zeros(shape, dtype)
    owner: dict[tuple, int] = {}  # block -> the first device that supplied it
    for d, (block, shard) in enumerate(zip(index, shards)):
        shard = np.asarray(shard)
        if shard.dtype == bits_dtype(dtype):
            shard = shard.view(dtype)  # npz keeps bf16, f8, int4, ... as their unsigned bits
        where = tuple(slice(a, b) for a, b in block)
        want = tuple(b - a for a, b in block)
        if shard.shape != want or shard.dtype != dtype:
            raise InputError(f"{label}: device {d}'s shard is {shard.dtype}{list(shard.shape)}, "
                             f"meta.json expects {dtype}{list(want)}")
        key = tuple(map(tuple, block))
        if key in owner:
            first = owner[key]
            same = _equal_mask(out[where], shard)
            if not same.all():
                diff = np.argwhere(~same)[0].tolist()
                raise ExecutionError(
                    f"{label} ({result.get('spec', '?')}) is replicated on devices {first} and "
                    f"{d}, but their copies differ (first at block index {diff}: "
                    f"{out[where][tuple(diff)]!r} vs {shard[tuple(diff)]!r}); the program "
                    f"does not produce what out_specs claims")
            continue
        owner[key] = d
        out[where] = shard
    return out



def assemble_outputs(meta: dict, per_device: list[list[np.ndarray]]) -> list[np.ndarray]:
    """Global results from per_device[d][i] (result i of device d), in meta.json's order."""
    results = meta["outputs"]
    for d, outs in enumerate(per_device):
        if len(outs) != len(results):
            raise InputError(f"device {d} returned {len(outs)} results, meta.json describes "
                             f"{len(results)}")
    return [assemble_one(r, [outs[i] for outs in per_device], f"result {i} ({r['name']})")
            for i, r in enumerate(results)]


def assemble(path, outputs_npz) -> list[np.ndarray]:
    """The global results of an `xladist run` of an exported folder.

    `path`: the folder xladist.jax.export wrote (or its meta.json); `outputs_npz`: the
    `--outputs` file of `xladist run --config path/config.toml` (out0, out1, ... each with a
    leading device axis). Returns one numpy array per flattened result of the function.
    """
    meta = read_meta(path)
    n = meta["num_devices"]
    try:
        with np.load(outputs_npz, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except OSError as e:
        raise InputError(f"cannot read outputs {outputs_npz}: {e}") from None
    names = [r["name"] for r in meta["outputs"]]
    missing = [k for k in names if k not in arrays]
    if missing:
        raise InputError(f"{outputs_npz} lacks {', '.join(missing)} (meta.json describes "
                         f"{len(names)} results: {', '.join(names)})")
    for k in names:
        if arrays[k].ndim == 0 or arrays[k].shape[0] != n:
            raise InputError(f"{outputs_npz}: {k} has shape {list(arrays[k].shape)}; expected a "
                             f"leading device axis of size {n}")
    per_device = [[arrays[k][d] for k in names] for d in range(n)]
    return assemble_outputs(meta, per_device)
