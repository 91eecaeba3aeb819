"""jax -> an xladist folder: jit with NamedShardings for N CPU devices, compile, cut, write.

The only module of xladist that uses jax, imported inside its functions (import_jax), so
importing this file does not load jax and the checks made before jax is needed (specs,
arity, ranks) work without it. folder.py says what is written.

Device order: xladist's device d is XLA partition d. The mesh is jax.devices("cpu")[:N]
reshaped row-major, and the SPMD partitioner gives partition p to the device at flat mesh
position p; a probe (axis_index under shard_map) checks that once per mesh, and every cut is
checked against jax's own `devices_indices_map`.
"""

from __future__ import annotations

import inspect
import os
import re
from dataclasses import dataclass
from functools import lru_cache, wraps
from pathlib import Path

import numpy as np

from ..errors import InputError, UnsupportedError
from ..semantics.dtypes import bits_of
from . import folder as F
from . import specs as S

# Host devices jax is given when xladist chooses: room for the usual 2/4/8-device meshes in
# one process (jax fixes the count when its CPU backend starts).
DEFAULT_HOST_DEVICES = 8
_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=(\d+)")

DEVICE_ORDER = ("Leading axis index d of every array == xladist device d == XLA partition d "
                "== flat row-major mesh position d (mesh devices are jax.devices('cpu')[:N]).")


def import_jax():
    try:
        import jax
    except ImportError:
        raise UnsupportedError("xladist.jax needs jax: pip install 'xladist[jax]' "
                               "(or pip install jax)") from None
    return jax


def ensure_devices(n: int) -> None:
    """Make jax see at least n CPU devices, or say exactly what to do.

    jax fixes its number of CPU devices when its backend starts (the first jax computation
    or jax.devices() call). Before that, xladist sets `jax_num_cpu_devices` to
    max(n, 8) unless XLA_FLAGS already forces enough; after it, nothing can change the count.
    """
    jax = import_jax()
    forced = _COUNT_FLAG.search(os.environ.get("XLA_FLAGS", ""))
    current = jax.config.jax_num_cpu_devices
    effective = current if current >= 0 else int(forced.group(1)) if forced else 1
    if effective < n:
        try:
            jax.config.update("jax_num_cpu_devices", max(n, DEFAULT_HOST_DEVICES))
        except RuntimeError:
            pass  # the backend already runs; reported below with what to do
    have = len(jax.devices("cpu"))
    if have < n:
        raise InputError(
            f"this mesh needs {n} CPU devices but jax already started its CPU backend with "
            f"{have}; the count is fixed once jax has run anything. Call "
            f"xladist.jax.ensure_devices({n}) (or jax.config.update('jax_num_cpu_devices', {n})) "
            f"right after `import jax`, before any jax computation, or start Python with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={n}")


@dataclass
class Prepared:
    """A function jitted and lowered for the mesh, with everything needed to write it."""

    fn: object
    host_args: list[np.ndarray]
    mesh_shape: dict[str, int]
    in_specs: list[tuple]
    out_specs: list[tuple]
    out_leaves: list  # jax.ShapeDtypeStruct per flattened result
    treedef: object
    mesh: object
    device_args: list
    lowered: object
    jitted: object  # jax.jit(fn, shardings): output_rows calls it for sub-byte arguments
    key_results: dict  # result leaf -> PRNG implementation: a typed key, as key data here

    @property
    def n(self) -> int:
        return S.mesh_size(self.mesh_shape)

    def partition_of(self) -> dict[int, int]:
        """jax device id -> xladist device (XLA partition)."""
        return {dev.id: p for p, dev in enumerate(self.mesh.devices.flat)}


def _host_array(a, i: int) -> np.ndarray:
    if isinstance(a, (dict, list, tuple)) or a is None:
        raise InputError(f"argument {i} is a {type(a).__name__}; xladist.jax takes arrays "
                         f"(pass the leaves of a pytree as separate arguments)")
    try:
        return np.asarray(a)
    except Exception as e:  # noqa: BLE001 -- anything numpy cannot hold
        raise InputError(f"argument {i} ({type(a).__name__}) is not an array: {e}") from None


def _check_arity(fn, count: int) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some wrappers: jax reports it
    try:
        sig.bind(*range(count))
    except TypeError as e:
        name = getattr(fn, "__qualname__", repr(fn))
        raise InputError(f"{name}{sig} cannot take {count} arguments: {e}") from None


@lru_cache(maxsize=None)
def _check_device_order(mesh) -> None:
    """Partition p (what axis_index computes from) runs on the device at flat position p."""
    jax = import_jax()
    from jax import lax
    from jax.sharding import PartitionSpec as P
    names = mesh.axis_names

    def probe():
        idx = jax.numpy.int32(0)
        for name in names:
            idx = idx * mesh.shape[name] + lax.axis_index(name)
        return idx[None]

    out = jax.jit(jax.shard_map(probe, mesh=mesh, in_specs=(), out_specs=P(names)))()
    position = {dev.id: p for p, dev in enumerate(mesh.devices.flat)}
    for shard in out.addressable_shards:
        got = int(np.asarray(shard.data)[0])
        if got != position[shard.device.id]:
            raise RuntimeError(f"xladist.jax: device {shard.device} runs partition {got}, not "
                               f"its mesh position {position[shard.device.id]}; the device "
                               f"order xladist assumes does not hold for this jax")


def prepare(fn, *args, mesh_shape, in_specs, out_specs) -> Prepared:
    """Check everything, build the mesh, jit `fn` with NamedShardings and lower it.

    `fn` runs under `jax.set_mesh(mesh)`, so a function that calls jax.shard_map itself
    leaves out `mesh=`."""
    mesh_shape = S.check_mesh(mesh_shape)
    _check_arity(fn, len(args))
    python_values = [(i, a) for i, a in enumerate(args) if _is_python_value(a)]
    fn, args, key_results = _without_typed_keys(fn, args)
    host = [_host_array(a, i) for i, a in enumerate(args)]
    ins = S.spec_list(in_specs, len(host), "in_specs")
    for i, (a, spec) in enumerate(zip(host, ins)):
        S.check(spec, mesh_shape, a.shape, f"in_specs[{i}]")
    n = S.mesh_size(mesh_shape)
    ensure_devices(n)
    jax = import_jax()
    # What jax makes of them (float64 -> float32, int64 -> int32 without jax_enable_x64):
    # inputs.npz must hold the module's parameter types.
    host = [a.astype(jax.dtypes.canonicalize_dtype(a.dtype), copy=False) for a in host]
    _check_python_ints(python_values, host)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices("cpu")[:n]).reshape(tuple(mesh_shape.values())),
                tuple(mesh_shape))
    _check_device_order(mesh)

    def sharding(spec):
        return NamedSharding(mesh, P(*[e if e is None or len(e) > 1 else e[0] for e in spec]))

    with jax.set_mesh(mesh):
        out_tree = _trace(jax, fn, host, python_values)
        leaves, treedef = jax.tree_util.tree_flatten(out_tree)
        outs = S.spec_list(_per_leaf(jax, out_specs, out_tree), len(leaves), "out_specs")
        for i, (leaf, spec) in enumerate(zip(leaves, outs)):
            S.check(spec, mesh_shape, leaf.shape, f"out_specs[{i}] (for result {i})")
        device_args = [jax.device_put(a, sharding(s)) for a, s in zip(host, ins)]
        jitted = jax.jit(fn, in_shardings=tuple(sharding(s) for s in ins),
                         out_shardings=jax.tree_util.tree_unflatten(
                             treedef, [sharding(s) for s in outs]),
                         keep_unused=True)  # argument i stays entry parameter i
        lowered = jitted.lower(*device_args)
    return Prepared(fn, host, mesh_shape, ins, outs, leaves, treedef, mesh, device_args,
                    lowered, jitted, key_results)


def _is_python_value(a) -> bool:
    return isinstance(a, (bool, int, float, complex, str)) and not isinstance(a, np.generic)


def _check_python_ints(python_values, host) -> None:
    """A Python int that its array type cannot hold (2**40 as int32 without
    jax_enable_x64) would wrap silently; jax's own call refuses it (OverflowError)."""
    for i, a in python_values:
        if isinstance(a, int) and not isinstance(a, bool) and int(host[i]) != a:
            raise InputError(f"argument {i} is the Python int {a}, which does not fit "
                             f"{host[i].dtype.name} (64-bit types need jax_enable_x64): it "
                             f"would wrap to {int(host[i])}; jax refuses it too")


def _trace(jax, fn, host, python_values):
    """jax.eval_shape of fn. Every argument is traced as an array (there are no static
    arguments), so a Python value the function uses as one (a shape, a slice bound, an
    `if`, a jit static_argnums argument) fails inside jax with a message about tracers
    and static_argnums that the caller cannot act on here: say what to do instead."""
    try:
        return jax.eval_shape(fn, *host)
    except Exception as e:  # noqa: BLE001 -- re-raised with the hint, or as it is
        if not python_values:
            raise
        name = getattr(fn, "__qualname__", repr(fn))
        which = ", ".join(f"argument {i} ({a!r}, a Python {type(a).__name__})"
                          for i, a in python_values)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise InputError(
            f"jax failed to trace {name} ({type(e).__name__}: {first}); {which} is traced "
            f"as an array like every argument (xladist.jax has no static arguments): if the "
            f"function needs it as a Python value (a shape, a slice bound, an `if`, a "
            f"static_argnums argument), bind it beforehand: "
            f"xladist.jax.run(functools.partial(fn, name=value), *arrays, ...)") from e


def _is_typed_key(a) -> bool:
    dtype = getattr(a, "dtype", None)
    if dtype is None or not str(dtype).startswith("key<"):
        return False
    jax = import_jax()
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _without_typed_keys(fn, args):
    """(fn, args, key_results) with jax's typed PRNG keys (`jax.random.key`) as their key
    data: a key array has no numpy form, and its data (uint32[..., 2] for threefry) is
    what the module computes with. The function gets its keys back (wrap_key_data with
    each argument's own implementation) and hands out the data of the keys it returns;
    `key_results` maps such a result leaf to its implementation, for `run` to wrap again.
    A function without key arguments is wrapped too: it may make keys and return them
    (`jax.random.key(seed)`, a split of wrapped key data). jax is imported only for a key
    argument or when the function runs: the checks before it work without jax."""
    impls = {i: import_jax().random.key_impl(a) for i, a in enumerate(args)
             if _is_typed_key(a)}
    args = [import_jax().random.key_data(a) if i in impls else a for i, a in enumerate(args)]
    key_results: dict[int, object] = {}

    @wraps(fn)  # (its name and module: meta.json, the host-callback refusal)
    def with_keys(*xs):
        jax = import_jax()
        xs = [jax.random.wrap_key_data(x, impl=impls[i]) if i in impls else x
              for i, x in enumerate(xs)]
        leaves, tree = jax.tree_util.tree_flatten(fn(*xs))
        for k, leaf in enumerate(leaves):
            if _is_typed_key(leaf):
                key_results[k] = jax.random.key_impl(leaf)
                leaves[k] = jax.random.key_data(leaf)
        return jax.tree_util.tree_unflatten(tree, leaves)
    return with_keys, args, key_results


def _per_leaf(jax, specs, tree):
    """out_specs given as a dict (jax's pytree form: `{"loss": P(), "w": P("model")}`,
    shaped like the results or a prefix of them; lists and tuples inside it are pytree
    nodes): one spec per result leaf in jax's leaf order. Other forms as they are
    (specs.spec_list reads them). Iterating a dict gave its keys, read as axis names."""
    if not isinstance(specs, dict):
        return specs

    def is_spec(s):
        return s is None or isinstance(s, str) or S._is_single(s)
    try:
        per = jax.tree_util.tree_map(
            lambda spec, sub: [spec] * len(jax.tree_util.tree_leaves(sub)), specs, tree,
            is_leaf=is_spec)
    except (ValueError, TypeError) as e:
        raise InputError(f"out_specs {specs!r} is not shaped like the function's results "
                         f"({jax.tree_util.tree_structure(tree)}): "
                         f"{' '.join(str(e).split())}") from None
    return jax.tree_util.tree_leaves(per, is_leaf=is_spec)


def _is_host_callback(target: str) -> bool:
    return "callback" in target and "python" in target


def refuse_host_callbacks(module, fn) -> None:
    """jax.debug.print / pure_callback / io_callback call back into this Python process; the
    ranks run the compiled module alone, so there is no host to call."""
    for instr in module.all_instructions():
        target = str(instr.attrs.get("custom_call_target", ""))
        if instr.opcode == "custom-call" and _is_host_callback(target):
            name = getattr(fn, "__qualname__", repr(fn))
            raise UnsupportedError(
                f"{name} uses a Python host callback (custom-call {instr.name}, target "
                f"{target!r}: jax.debug.print, jax.pure_callback or io_callback); xladist's "
                f"ranks run the compiled module without a Python host to call back into. "
                f"Remove the callback (print the results xladist returns instead)")


def module_text(compiled) -> str:
    """XLA's compiled module as text with the data of every constant. `compiled.as_text()`
    prints a constant of more than 10 elements as `{...}`, which cannot run (a mask or a
    table the function closes over: the job failed on its ranks); the module's own
    printer, told to print large constants, gives the same text with the data. Falls back
    to as_text() where jaxlib has no such printer (a constant left elided is then refused
    by name when the module runs)."""
    try:
        from jaxlib import _hlo
        options = _hlo.HloPrintOptions()
        options.print_large_constants = True
        modules = compiled.runtime_executable().hlo_modules()
        if len(modules) == 1:
            return modules[0].to_string(options)
    except (ImportError, AttributeError, TypeError):
        pass
    return compiled.as_text()


def compile_text(prep: Prepared):
    """(module text, compiled, parsed module): XLA's per-device module, host callbacks
    refused."""
    from ..hlo.parser import parse_module
    compiled = prep.lowered.compile()
    text = module_text(compiled)
    module = parse_module(text)
    refuse_host_callbacks(module, prep.fn)
    if module.num_partitions != prep.n or len(module.entry.parameters) != len(prep.host_args):
        raise RuntimeError(f"xladist.jax: XLA compiled {module.num_partitions} partitions and "
                           f"{len(module.entry.parameters)} parameters for {prep.n} devices "
                           f"and {len(prep.host_args)} arguments")
    return text, compiled, module


def input_rows(prep: Prepared) -> list[np.ndarray]:
    """Every argument cut into device shards, stacked in device order (checked against
    jax's own device -> index map)."""
    part = prep.partition_of()
    rows = []
    for i, (a, spec, dev) in enumerate(zip(prep.host_args, prep.in_specs, prep.device_args)):
        index = [S.shard_index(a.shape, spec, prep.mesh_shape, d) for d in range(prep.n)]
        for device, slices in dev.sharding.devices_indices_map(a.shape).items():
            theirs = [list(s.indices(size))[:2] for s, size in zip(slices, a.shape)]
            if theirs != index[part[device.id]]:
                raise RuntimeError(f"xladist.jax: argument {i}: jax puts {theirs} on partition "
                                   f"{part[device.id]}, xladist computed "
                                   f"{index[part[device.id]]}")
        rows.append(np.stack([a[tuple(slice(s, e) for s, e in blk)] for blk in index]))
    return rows


def output_rows(prep: Prepared, compiled) -> list[np.ndarray]:
    """jax's own per-device results of the compiled program, stacked in device order."""
    jax = import_jax()
    part = prep.partition_of()
    rows = []
    # jax's ahead-of-time call refuses sub-byte arguments (int4, uint4, float4_e2m1fn): it
    # compiled them for packed layouts but device_put gives them one byte per element
    # (jax 0.10.2: "Computation was compiled for input layouts that disagree"). jit's own
    # call relays them; it compiles the same lowering again, so only those take it.
    if any(bits_of(a.dtype) < 8 for a in prep.host_args):
        with jax.set_mesh(prep.mesh):
            results = prep.jitted(*prep.device_args)
    else:
        results = compiled(*prep.device_args)
    for leaf in jax.tree_util.tree_leaves(results):
        by = {part[s.device.id]: np.asarray(s.data) for s in leaf.addressable_shards}
        rows.append(np.stack([by[d] for d in range(prep.n)]))
    return rows


def _array_meta(name, shape, dtype, spec, mesh_shape, n) -> dict:
    index = [S.shard_index(shape, spec, mesh_shape, d) for d in range(n)]
    return {"name": name, "global_shape": list(shape), "dtype": np.dtype(dtype).name,
            "spec": S.text(spec), "local_shape": [b - a for a, b in index[0]],
            "index": index}


def meta(prep: Prepared) -> dict:
    jax = import_jax()
    n, ms = prep.n, prep.mesh_shape
    return {
        "format": "xladist.jax/1",
        "function": f"{getattr(prep.fn, '__module__', '?')}:"
                    f"{getattr(prep.fn, '__qualname__', repr(prep.fn))}",
        "num_devices": n,
        "mesh": {"axis_names": list(ms), "shape": list(ms.values()),
                 "device_ids": np.arange(n).reshape(tuple(ms.values())).tolist()},
        "device_order": DEVICE_ORDER,
        "inputs": [_array_meta(f"arg{i}", a.shape, a.dtype, s, ms, n)
                   for i, (a, s) in enumerate(zip(prep.host_args, prep.in_specs))],
        "outputs": [_array_meta(f"out{i}", leaf.shape, leaf.dtype, s, ms, n)
                    for i, (leaf, s) in enumerate(zip(prep.out_leaves, prep.out_specs))],
        "result_tree": str(prep.treedef),
        "jax": jax.__version__,
    }


def write(path, prep: Prepared, text: str, ins: list[np.ndarray],
          expected: list[np.ndarray] | None) -> Path:
    """The folder of folder.py's docstring."""
    from ..io import encode
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    (out / F.MODULE).write_text(text)
    np.savez(out / F.INPUTS, **{f"arg{i}": encode(r) for i, r in enumerate(ins)})
    if expected is not None:
        np.savez(out / F.EXPECTED, **{f"out{i}": encode(r) for i, r in enumerate(expected)})
    (out / F.CONFIG).write_text(F.config_text(prep.n))
    F.write_meta(out, meta(prep))
    return out


def check_folder(path, what: str) -> None:
    """Before jax traces anything: the export folder `path` can be made or written (not a
    file, nearest existing folder writable; InputError naming `what`)."""
    from ..files import check_destination
    if Path(path).exists() and not Path(path).is_dir():
        raise InputError(f"{what} {path}: is a file; give a folder (made if missing)")
    check_destination(Path(path) / F.MODULE, what, create_dirs=True)


def export(fn, *args, mesh_shape, in_specs, out_specs, path, expected=True) -> Path:
    check_folder(path, "path")
    prep = prepare(fn, *args, mesh_shape=mesh_shape, in_specs=in_specs, out_specs=out_specs)
    text, compiled, _ = compile_text(prep)
    outs = output_rows(prep, compiled) if expected else None
    return write(path, prep, text, input_rows(prep), outs)


def run(fn, *args, mesh_shape, in_specs, out_specs, n=None, backend="cpu", **run_options):
    import tempfile

    from ..runtime.api import run as xladist_run
    from .assemble import assemble_outputs
    mesh_shape = S.check_mesh(mesh_shape)
    size = S.mesh_size(mesh_shape)
    check_ranks(mesh_shape, n)
    jax = import_jax()
    with tempfile.TemporaryDirectory(prefix="xladist-jax-") as tmp:
        prep = prepare(fn, *args, mesh_shape=mesh_shape, in_specs=in_specs,
                       out_specs=out_specs)
        text, _, module = compile_text(prep)
        folder = write(tmp, prep, text, input_rows(prep), None)
        per_device = xladist_run(module, folder / F.INPUTS, n=size, backend=backend,
                                 **run_options)
        flat = assemble_outputs(F.read_meta(folder), per_device)
    flat = [jax.random.wrap_key_data(leaf, impl=prep.key_results[k])
            if k in prep.key_results else leaf for k, leaf in enumerate(flat)]
    return jax.tree_util.tree_unflatten(prep.treedef, flat)


def check_ranks(mesh_shape: dict[str, int], n) -> None:
    """xladist runs one device per rank: the ranks must be exactly the mesh's devices."""
    size = S.mesh_size(mesh_shape)
    if n is None or n == size:
        return
    mesh = ",".join(f"{a}={s}" for a, s in mesh_shape.items())
    if n < size:
        raise InputError(f"the mesh {mesh} has {size} devices but n={n} ranks were requested; "
                         f"xladist runs one device per rank: pass n={size} (or leave n out) "
                         f"or use a smaller mesh")
    raise InputError(f"n={n} ranks were requested for the mesh {mesh} of {size} devices; "
                     f"xladist runs one device per rank: pass n={size} (or leave n out) or "
                     f"make the mesh {n} devices")
