"""Meshes, partition specs and the shard each device holds: pure Python, no jax.

A mesh is an ordered dict of axis name -> size (`{"data": 2, "model": 2}`); xladist's device
d is the device at flat row-major position d of that mesh (== XLA partition d). A spec is
what `jax.sharding.PartitionSpec` says, one entry per array dimension: None (the dimension
is whole on every device), one mesh axis, or several axes (major to minor) that split it
together. Dimensions past the spec's entries are whole. Here a spec is normalized to a
tuple of entries, each None or a tuple of axis names.

Text form (the CLI's `--in-specs`/`--out-specs`, README "From JAX"):
    "data,None"          P('data', None)
    "data+model,None"    P(('data', 'model'), None)
    "()"                 P()  (replicated)
    "P('data', None)"    the Python literal form, also "('data', None)"
    "data,None; model"   one spec per array, separated by ';'
"""

from __future__ import annotations

import ast
import math
import re

from ..environment import check_count
from ..errors import InputError

Spec = tuple  # tuple[None | tuple[str, ...], ...]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def parse_mesh(text: str) -> dict[str, int]:
    """`"data=2,model=2"` -> {"data": 2, "model": 2} (order kept: it is the mesh's order)."""
    mesh: dict[str, int] = {}
    for item in str(text).split(","):
        name, sep, size = item.strip().partition("=")
        name = name.strip()
        if not sep or not _NAME.match(name) or not size.strip().isdigit():
            raise InputError(f"mesh {text!r}: expected axis=size pairs separated by commas, "
                             f"e.g. data=2,model=2; cannot read {item.strip()!r}")
        if name in mesh:
            raise InputError(f"mesh {text!r}: axis {name!r} appears twice")
        mesh[name] = int(size)
    return check_mesh(mesh)


def check_mesh(mesh_shape) -> dict[str, int]:
    """A mesh_shape argument as an ordered {axis: size}, every size at least 1."""
    if not isinstance(mesh_shape, dict) or not mesh_shape:
        raise InputError(f"mesh_shape must be a non-empty dict of axis name -> size, e.g. "
                         f"{{'data': 2, 'model': 2}}; got {mesh_shape!r}")
    for name in mesh_shape:
        if not isinstance(name, str) or not _NAME.match(name):
            raise InputError(f"mesh axis names must be identifiers, got {name!r}")
    return {name: check_count(size, f"mesh axis {name!r}")
            for name, size in mesh_shape.items()}


def mesh_size(mesh_shape: dict[str, int]) -> int:
    return math.prod(mesh_shape.values())


def _entry(value, where: str):
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise InputError(f"{where}: a spec entry is None, an axis name or a tuple of axis names; "
                     f"got {value!r}")


def normalize(spec, where: str = "spec") -> Spec:
    """A PartitionSpec, tuple/list of entries, text or None (replicated) as a Spec."""
    if spec is None:
        return ()
    if isinstance(spec, str):
        return parse_spec(spec, where)
    try:
        entries = list(spec)  # PartitionSpec is a tuple of entries
    except TypeError:
        raise InputError(f"{where}: expected a PartitionSpec, got {spec!r}") from None
    return tuple(_entry(e, where) for e in entries)


def parse_spec(text: str, where: str = "spec") -> Spec:
    """One spec in the text form of the module docstring."""
    s = text.strip()
    if s.startswith(("P(", "PartitionSpec(", "(")):
        inner = s[s.index("(") + 1:]
        if not inner.endswith(")"):
            raise InputError(f"{where}: {text!r} has no closing parenthesis")
        inner = inner[:-1].strip()
        if not inner:
            return ()
        try:
            value = ast.literal_eval(f"({inner},)")
        except (ValueError, SyntaxError):
            raise InputError(f"{where}: cannot read {text!r} as a Python literal; write "
                             f"axis names quoted, e.g. P('data', None)") from None
        return tuple(_entry(e, where) for e in value)
    if not s:
        raise InputError(f"{where}: empty spec; write () for a replicated array")
    entries = []
    for item in s.split(","):
        item = item.strip()
        if item == "None":
            entries.append(None)
            continue
        names = tuple(n.strip() for n in item.split("+"))
        if not all(_NAME.match(n) for n in names):
            raise InputError(f"{where}: {item!r} in {text!r} is not an axis name, "
                             f"axis+axis or None")
        entries.append(names)
    return tuple(entries)


def parse_specs(text: str, where: str = "specs") -> list[Spec]:
    """`"data,None; model"` -> one Spec per ';'-separated item."""
    return [parse_spec(item, f"{where} item {i}") for i, item in enumerate(text.split(";"))]


def spec_list(specs, count: int, what: str) -> list[Spec]:
    """in_specs/out_specs as one Spec per array. A single PartitionSpec (or None, or a text
    with no ';') applies to all `count`; a list/tuple or a ';'-separated text has one per
    array. A dict is refused: iterated, its keys would be read as specs (out_specs' dict
    form is turned into a list before this)."""
    noun = "argument" if what.startswith(("in", "--in")) else "result"
    if isinstance(specs, str):
        items = parse_specs(specs, what)
        if len(items) == 1:
            return items * count
    elif specs is None or _is_single(specs):
        return [normalize(specs, what)] * count
    elif isinstance(specs, dict):
        raise InputError(f"{what} is a dict ({specs!r}); give one spec per {noun} as a list, "
                         f"or a single spec for all (only out_specs takes a dict, shaped "
                         f"like the function's results)")
    else:
        items = [normalize(s, f"{what}[{i}]") for i, s in enumerate(specs)]
    if len(items) != count:
        raise InputError(f"{what} has {len(items)} specs for {count} {noun}s; give one per "
                         f"{noun} or a single spec for all")
    return items


def _is_single(specs) -> bool:
    """One PartitionSpec (jax's class: `PartitionSpec`, named `P` since jax 0.8); a plain
    list/tuple holds one spec per array."""
    return type(specs).__name__ in ("PartitionSpec", "P")


def text(spec: Spec) -> str:
    """The spec as `P('data', None)`, jax's repr with P for PartitionSpec."""
    def one(e):
        if e is None:
            return "None"
        return repr(e[0]) if len(e) == 1 else "(" + ", ".join(map(repr, e)) + ")"
    return "P(" + ", ".join(one(e) for e in spec) + ")"


def check(spec: Spec, mesh_shape: dict[str, int], shape, where: str) -> None:
    """Refuse axes the mesh lacks, an axis used twice, more entries than dimensions and
    dimensions the spec's axes do not divide."""
    used = [a for e in spec if e for a in e]
    for a in used:
        if a not in mesh_shape:
            raise InputError(f"{where} {text(spec)} names mesh axis {a!r}, which the mesh "
                             f"{_mesh_text(mesh_shape)} does not have")
    if len(set(used)) != len(used):
        raise InputError(f"{where} {text(spec)} uses a mesh axis more than once")
    shape = tuple(shape)
    if len(spec) > len(shape):
        raise InputError(f"{where} {text(spec)} has {len(spec)} entries but the array has "
                         f"{len(shape)} dimensions {list(shape)}")
    for dim, e in enumerate(spec):
        parts = math.prod(mesh_shape[a] for a in e) if e else 1
        if shape[dim] % parts:
            axes = " x ".join(f"{a}={mesh_shape[a]}" for a in e)
            raise InputError(f"{where} {text(spec)} splits dimension {dim} (size "
                             f"{shape[dim]}) of an array of shape {list(shape)} into {parts} "
                             f"shards ({axes}), which does not divide it; pad the array or "
                             f"choose another spec")


def _mesh_text(mesh_shape) -> str:
    return ",".join(f"{a}={s}" for a, s in mesh_shape.items())


def coordinates(mesh_shape: dict[str, int], device: int) -> dict[str, int]:
    """Device d's position along every mesh axis (row-major: the last axis varies fastest)."""
    coords = {}
    for name in reversed(list(mesh_shape)):
        device, coords[name] = divmod(device, mesh_shape[name])
    return {name: coords[name] for name in mesh_shape}


def shard_index(shape, spec: Spec, mesh_shape: dict[str, int], device: int
                ) -> list[list[int]]:
    """[start, stop] per dimension of the block of a global array `shape` device d holds."""
    at = coordinates(mesh_shape, device)
    index = []
    for dim, size in enumerate(shape):
        e = spec[dim] if dim < len(spec) else None
        if not e:
            index.append([0, size])
            continue
        k = 0
        for a in e:  # major to minor
            k = k * mesh_shape[a] + at[a]
        chunk = size // math.prod(mesh_shape[a] for a in e)
        index.append([k * chunk, (k + 1) * chunk])
    return index
