"""npz files of program inputs and outputs, shared by the CLI and the runtime.

Format (the corpus format, tests/data/corpus/README.md):
- inputs: `arg0`, `arg1`, ... one array per entry parameter, in parameter order;
- outputs: `out0`, `out1`, ... one array per flattened result leaf;
- bf16 arrays are stored as uint16 bit patterns, the other ml_dtypes types (f8*, f4, s4,
  u4, ...) as uint8 bit patterns, one element per byte (numpy cannot round-trip them through
  npz); pred arrays are numpy bool;
- with a device axis, every array has a leading dimension of size N and row d belongs to
  device d.

Token parameters have no key (they are supplied automatically); tuple-shaped parameters
cannot be stored in npz and are refused.
"""

from __future__ import annotations

import os

import numpy as np

from .errors import InputError
from .files import load_npz, write_atomic
from .hlo.shape import Shape


def bits_dtype(dtype) -> np.dtype | None:
    """The unsigned integer type npz stores an ml_dtypes element type as (bfloat16 -> uint16,
    float8_* / float4_* / int4 / uint4 / int2 ... -> uint8: one element per byte, as numpy
    holds them), or None for numpy's own types, which npz holds as they are. npz cannot hold
    the ml_dtypes types themselves: numpy writes them with a descriptor ('<f1', '<V2') that
    np.load refuses."""
    dtype = np.dtype(dtype)
    if not getattr(dtype.type, "__module__", "").startswith("ml_dtypes"):
        return None  # (ml_dtypes gives some of its types kind 'f', others 'V')
    return np.dtype(f"uint{8 * dtype.itemsize}")


def encode(array: np.ndarray) -> np.ndarray:
    """An array as stored in npz: ml_dtypes types (bf16, f8, f4, s4, ...) -> their unsigned
    bits (bits_dtype), everything else unchanged."""
    array = np.asarray(array)
    bits = bits_dtype(array.dtype)
    return array if bits is None else array.view(bits)


def decode(array: np.ndarray, shape: Shape) -> np.ndarray:
    """An npz array as a value of `shape`'s element type (uint16 bits -> bf16, uint8 bits ->
    f8/f4/s4/u4...)."""
    array = np.asarray(array)
    if shape.is_array:
        bits = bits_dtype(shape.dtype)
        if bits is not None and array.dtype == bits:
            return array.view(shape.dtype)
    return array


def _param_label(i: int, name: str | None, shape: Shape) -> str:
    label = f"parameter {i}"
    if name:
        label += f" ({name}: {shape.to_text(layout=False)})"
    else:
        label += f" ({shape.to_text(layout=False)})"
    return label


def read_inputs(source, shapes: list[Shape], *, num_devices: int = 1,
                device_axis: bool | None = True, names: list[str] | None = None,
                what: str = "inputs") -> list[list]:
    """Read `arg{i}` arrays for parameters of `shapes`; returns one argument list per device.

    `device_axis`: True = every array has a leading axis of size num_devices; False = no
    device axis (only with num_devices == 1); None = accept either when num_devices == 1.
    Errors (an unreadable or damaged file, missing, extra, wrongly shaped or typed arrays)
    are InputErrors naming the parameter; `what` names the file's option in messages.
    """
    from .semantics.values import TOKEN
    names = names or [None] * len(shapes)
    arrays = load_npz(source, what)
    expected = {f"arg{i}" for i, s in enumerate(shapes) if not s.is_token}
    extra = sorted(set(arrays) - expected, key=_key_order)
    if extra:
        raise InputError(f"{what} {source}: arrays the module does not take: {', '.join(extra)} "
                         f"(the module has {len(shapes)} parameters: arg0..arg{len(shapes) - 1})")
    per_device: list[list] = [[] for _ in range(num_devices)]
    for i, shape in enumerate(shapes):
        label = _param_label(i, names[i], shape)
        if shape.is_token:
            for args in per_device:
                args.append(TOKEN)
            continue
        if shape.is_tuple:
            raise InputError(f"{label} is a tuple; npz inputs hold arrays only")
        key = f"arg{i}"
        if key not in arrays:
            raise InputError(f"{what} {source}: no array {key!r} for {label}")
        a = decode(arrays[key], shape)
        dims = tuple(shape.dims)
        with_axis = (num_devices,) + dims
        if device_axis is None and num_devices == 1 and a.shape == dims:
            rows = [a]
        elif device_axis is False:
            if a.shape != dims:
                raise InputError(f"{key} for {label}: expected dims {list(dims)}, got "
                                 f"{list(a.shape)}")
            rows = [a]
        else:
            if a.shape != with_axis:
                if device_axis is None and num_devices == 1:
                    wanted = f"{list(dims)} (or {list(with_axis)} with the device axis)"
                else:
                    wanted = f"{list(with_axis)} (device axis first)"
                hint = "" if a.shape != dims else \
                    f" (it lacks the leading device axis of size {num_devices})"
                raise InputError(f"{key} for {label}: expected dims {wanted}, got "
                                 f"{list(a.shape)}{hint}")
            rows = [a[d] for d in range(num_devices)]
        if a.dtype != shape.dtype:
            bits = bits_dtype(shape.dtype)
            npz = f"{bits} bit patterns or " if bits is not None else ""
            raise InputError(f"{key} for {label}: expected element type {npz}{shape.dtype}, "
                             f"got {arrays[key].dtype}; convert it explicitly")
        for args, row in zip(per_device, rows):
            args.append(np.array(row, copy=True))  # 0-d rows stay 0-d
    return per_device


def output_arrays(per_device: list[list[np.ndarray]], *, device_axis: bool = True
                  ) -> dict[str, np.ndarray]:
    """The npz arrays `out{i}`: result leaf i of every device, stacked on a leading device
    axis (device_axis=True) or, for one device, as is.

    Results with dynamic dimensions may differ in dims between devices: then `out{i}` holds
    each device's array zero-padded to the largest dims, and `out{i}_sizes` (int64
    [devices, rank]) each device's own dims, so row d is `out{i}[d][tuple(map(slice, sizes[d]))]`.
    """
    if not per_device:
        raise InputError("write_outputs needs at least one device's outputs")
    if not device_axis and len(per_device) != 1:
        raise InputError("outputs of several devices need the device axis")
    arrays = {}
    for i in range(len(per_device[0])):
        rows = [encode(outs[i]) for outs in per_device]
        if device_axis and len({r.shape for r in rows}) > 1:
            arrays[f"out{i}_sizes"] = np.array([r.shape for r in rows], dtype=np.int64)
            rows = _pad_to_largest(rows)
        arrays[f"out{i}"] = np.stack(rows) if device_axis else rows[0]
    return arrays


def _pad_to_largest(rows: list[np.ndarray]) -> list[np.ndarray]:
    largest = tuple(max(dims) for dims in zip(*(r.shape for r in rows)))
    return [np.pad(r, [(0, b - d) for d, b in zip(r.shape, largest)]) for r in rows]


def write_outputs(target, per_device: list[list[np.ndarray]], *, device_axis: bool = True
                  ) -> None:
    """Write `output_arrays(...)` to `target` (a path: atomically, OutputError when that
    fails; or an open binary file)."""
    arrays = output_arrays(per_device, device_axis=device_axis)
    if hasattr(target, "write"):
        np.savez(target, **arrays)
    else:
        write_atomic(npz_path(target), lambda f: np.savez(f, **arrays), "outputs")


def npz_path(target) -> str:
    """np.savez's naming, kept for atomic writes: a path without .npz gets it appended."""
    target = os.fspath(target)
    return target if str(target).endswith(".npz") else f"{target}.npz"


def read_outputs(source, what: str = "outputs") -> list[np.ndarray]:
    """`out0..` of an npz file in order (bf16/f8/... stay bits; `out{i}_sizes` skipped)."""
    data = load_npz(source, what)
    keys = sorted((k for k in data if k.startswith("out") and k[3:].isdigit()),
                  key=_key_order)
    return [data[k] for k in keys]


def _key_order(key: str):
    digits = "".join(c for c in key if c.isdigit())
    return (key.rstrip("0123456789"), int(digits) if digits else -1)
