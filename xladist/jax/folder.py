"""The folder xladist.jax.export writes: file names, config.toml, meta.json.

    module.hlo     the per-device module XLA compiled (one SPMD program, num_partitions=N)
    inputs.npz     arg0.. every argument cut into device shards, leading device axis
    expected.npz   out0.. jax's own per-device results (export(..., expected=True))
    config.toml    `xladist run --config config.toml` runs it and writes outputs.npz
    meta.json      mesh, specs and, per argument and result, each device's block
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError

MODULE, INPUTS, EXPECTED, CONFIG, META, OUTPUTS = (
    "module.hlo", "inputs.npz", "expected.npz", "config.toml", "meta.json", "outputs.npz")


def config_text(n: int) -> str:
    """A run configuration (xladist/runtime/config.py keys; paths relative to the folder)."""
    return (f"# Written by xladist.jax.export. Run: xladist run --config config.toml\n"
            f"# then xladist.jax.assemble(FOLDER, FOLDER/{OUTPUTS}) gives the global results.\n"
            f'module = "{MODULE}"\nranks = {n}\ninputs = "{INPUTS}"\noutputs = "{OUTPUTS}"\n')


def write_meta(folder, meta: dict) -> None:
    (Path(folder) / META).write_text(json.dumps(meta, indent=1) + "\n")


def read_meta(path) -> dict:
    """meta.json of an exported folder (`path` is the folder or the file)."""
    file = Path(path) / META if Path(path).is_dir() else Path(path)
    try:
        return json.loads(file.read_text())
    except OSError as e:
        raise InputError(f"cannot read {file}: {e.strerror} (is this a folder written by "
                         f"xladist.jax.export?)") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{file}: not valid JSON: {e}") from None
