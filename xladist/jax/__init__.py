"""From JAX to an xladist job: `xladist.jax.export`, `run`, `assemble` (README "From JAX").

jax is imported only when a function here needs it (`pip install 'xladist[jax]'`); spec
parsing and assembling results (specs.py, assemble.py) are pure Python. `import xladist`
never imports this package.

    export(fn, *args, mesh_shape, in_specs, out_specs, path, expected=True) -> Path
        jit fn with NamedShardings for prod(mesh_shape) CPU devices and write path/:
        module.hlo, inputs.npz, config.toml, meta.json (+ expected.npz); folder.py.
    run(fn, *args, mesh_shape, in_specs, out_specs, n=None, backend="cpu", **run_options)
        export to a temporary folder, run with xladist.run on prod(mesh_shape) ranks, and
        return fn's results (same pytree structure) as global numpy arrays.
    assemble(path, outputs_npz) -> list of global arrays from an `xladist run` output file.
    ensure_devices(n): give jax n CPU devices (before its backend starts).

Specs: jax.sharding.PartitionSpec, one per argument/result (a list) or a single one for
all; strings in the text form of specs.py ("data,None") are accepted too.
"""

from __future__ import annotations

from .assemble import assemble, assemble_outputs
from .specs import parse_mesh, parse_spec, parse_specs

__all__ = ["export", "run", "assemble", "assemble_outputs", "ensure_devices", "parse_mesh",
           "parse_spec", "parse_specs"]


def export(fn, *args, mesh_shape, in_specs, out_specs, path, expected: bool = True):
    """Write `fn` jitted for the mesh, its inputs cut per device, a run config, meta.json
    and (expected=True) jax's per-device results to folder `path`; returns it as a Path.

    fn: a function of global arrays (it may call jax.shard_map without mesh=: it runs under
    jax.set_mesh of the export's mesh). args: arrays (numpy or jax). mesh_shape: {axis:
    size}, row-major; device d is flat mesh position d. in_specs/out_specs: one
    PartitionSpec per argument / flattened result, or a single one for all.
    Raises InputError (specs that do not divide, wrong argument count, too few host
    devices) and UnsupportedError (Python host callbacks, jax missing)."""
    from .lowering import export as _export
    return _export(fn, *args, mesh_shape=mesh_shape, in_specs=in_specs,
                   out_specs=out_specs, path=path, expected=expected)


def run(fn, *args, mesh_shape, in_specs, out_specs, n: int | None = None,
        backend: str = "cpu", **run_options):
    """Run `fn` on prod(mesh_shape) MPI ranks with xladist and return its results as global
    numpy arrays, in fn's result structure. Replicated results are taken once, after
    checking that every device's copy is the same (ExecutionError if not). `n`, if given,
    must equal the mesh's size; run_options go to xladist.run (timeout, check, ...)."""
    from .lowering import run as _run
    return _run(fn, *args, mesh_shape=mesh_shape, in_specs=in_specs, out_specs=out_specs,
                n=n, backend=backend, **run_options)


def ensure_devices(n: int) -> None:
    """Make jax see at least n CPU devices; call right after `import jax` when your own
    code runs jax computations before the first export."""
    from .lowering import ensure_devices as _ensure
    _ensure(n)
