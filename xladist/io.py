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
import struct
import zipfile

import numpy as np

from .errors import InputError
from .files import fill_template, load_npz, write_atomic
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


def byte_view(a: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array as a writable memoryview (also for the ml_dtypes
    types, which the buffer protocol refuses)."""
    return memoryview(a.reshape(-1).view(np.uint8))


# ---- npz members read in place ---------------------------------------------------------------
class NpzArray:
    """One array of an npz file, known by its header: dtype, dims, and where its bytes are,
    so that a part of it (one device's row) can be read without the rest. A compressed or
    Fortran-ordered member, or one of an open file, is loaded whole on first use."""

    def __init__(self, path, name: str, dtype, shape, offset: int | None, load):
        self.path, self.name = path, name
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)
        self.offset = offset     # where the C-ordered data starts in the file, or None
        self._load = load
        self._whole = None

    def whole(self) -> np.ndarray:
        if self._whole is None:
            self._whole = np.ascontiguousarray(self._load())
        return self._whole

    def part_bytes(self, start: int, nbytes: int, chunk: int = 1 << 22):
        """The bytes [start, start + nbytes) of the array's data, in pieces of `chunk`."""
        if self.offset is None:
            view = byte_view(self.whole())
            for k in range(start, start + nbytes, chunk):
                yield view[k:min(k + chunk, start + nbytes)]
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            end = start + nbytes
            while start < end:
                piece = os.pread(fd, min(chunk, end - start), self.offset + start)
                if not piece:
                    raise InputError(f"{self.path}: array {self.name} is cut short")
                yield piece
                start += len(piece)
        finally:
            os.close(fd)

    def read_part(self, start: int, dims, dtype=None) -> np.ndarray:
        out = np.empty(dims, dtype or self.dtype)
        view, at = byte_view(out), 0
        for piece in self.part_bytes(start, out.nbytes):
            view[at:at + len(piece)] = piece
            at += len(piece)
        return out


def npz_arrays(source, what: str) -> dict[str, NpzArray]:
    """The arrays of an npz file (a path, or an open binary file) by name, headers only."""
    from .files import NPZ_ERRORS, check_npz, load_npz
    if not isinstance(source, (str, bytes, os.PathLike)):
        arrays = load_npz(source, what)
        return {k: NpzArray(None, k, a.dtype, a.shape, None, lambda a=a: a)
                for k, a in arrays.items()}
    check_npz(source, what)
    path = os.fsdecode(source)
    out = {}
    try:
        with zipfile.ZipFile(path) as z, open(path, "rb") as f:
            for info in z.infolist():
                name = info.filename[:-4]
                with z.open(info) as m:
                    version = np.lib.format.read_magic(m)
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0) else
                            np.lib.format.read_array_header_2_0)
                    shape, fortran, dtype = read(m)
                    header = m.tell()
                offset = None
                if info.compress_type == zipfile.ZIP_STORED and not fortran:
                    # The member's bytes sit in the file as they are: after its local header.
                    f.seek(info.header_offset)
                    local = f.read(30)
                    n, k = struct.unpack("<HH", local[26:30])
                    offset = info.header_offset + 30 + n + k + header
                out[name] = NpzArray(path, name, dtype, shape, offset,
                                     lambda name=name: _load_member(path, name, what))
    except InputError:
        raise
    except NPZ_ERRORS as e:
        raise InputError(f"{what} {path}: a damaged npz file ({type(e).__name__}: {e})") \
            from None
    return out


def _load_member(path, name, what):
    from .files import load_npz
    return load_npz(path, what)[name]


# ---- inputs -----------------------------------------------------------------------------------
DEVICE_FIELD = "{device}"


class Inputs:
    """A run's inputs, checked against the entry's parameters from the files' headers alone,
    and read one device at a time: `device(d)` reads only device d's rows (a rank holds its
    own device's inputs, never everyone's), `parts(d)` gives them as byte streams for the
    network (xladist/runtime/service/jobs.py).

    `source`: an npz path (arrays `arg{i}` with a leading device axis of num_devices, or
    without one for one device -- see `device_axis`), an open binary file, or a path
    template with `{device}`: one npz file per device, its arrays without the device axis
    (for data too big for one file)."""

    def __init__(self, source, shapes: list[Shape], *, num_devices: int = 1,
                 device_axis: bool | None = True, names: list[str] | None = None,
                 what: str = "inputs"):
        self.source, self.shapes, self.n, self.what = source, list(shapes), num_devices, what
        self.names = names or [None] * len(shapes)
        self.per_device = isinstance(source, str) and DEVICE_FIELD in source
        if self.per_device:
            self.files = [self._check(npz_arrays(self.path_of(d), what), self.path_of(d), 1,
                                      False) for d in range(num_devices)]
        else:
            self.files = [self._check(npz_arrays(source, what), source, num_devices,
                                      device_axis)]

    def path_of(self, device: int) -> str:
        return fill_template(self.source, self.what, device=device)

    def _check(self, arrays: dict[str, NpzArray], source, num_devices: int,
               device_axis: bool | None) -> list:
        """Per parameter: None (a token) or (member, dtype, row dims, has a device axis)."""
        expected = {f"arg{i}" for i, s in enumerate(self.shapes) if not s.is_token}
        extra = sorted(set(arrays) - expected, key=_key_order)
        what = self.what
        if extra:
            n = len(self.shapes)
            takes = ("no parameters" if n == 0 else "1 parameter: arg0" if n == 1
                     else f"{n} parameters: arg0..arg{n - 1}")
            raise InputError(f"{what} {source}: arrays the module does not take: "
                             f"{', '.join(extra)} (the module has {takes})")
        out = []
        for i, shape in enumerate(self.shapes):
            label = _param_label(i, self.names[i], shape)
            if shape.is_token:
                out.append(None)
                continue
            if shape.is_tuple:
                raise InputError(f"{label} is a tuple; npz inputs hold arrays only")
            key = f"arg{i}"
            if key not in arrays:
                raise InputError(f"{what} {source}: no array {key!r} for {label}")
            member = arrays[key]
            dims = tuple(shape.dims)
            with_axis = (num_devices,) + dims
            if device_axis is None and num_devices == 1 and member.shape == dims:
                axis = False
            elif device_axis is False:
                if member.shape != dims:
                    raise InputError(f"{key} for {label}: expected dims {list(dims)}, got "
                                     f"{list(member.shape)}")
                axis = False
            else:
                if member.shape != with_axis:
                    if device_axis is None and num_devices == 1:
                        wanted = f"{list(dims)} (or {list(with_axis)} with the device axis)"
                    else:
                        wanted = f"{list(with_axis)} (device axis first)"
                    hint = "" if member.shape != dims else \
                        f" (it lacks the leading device axis of size {num_devices})"
                    raise InputError(f"{key} for {label}: expected dims {wanted}, got "
                                     f"{list(member.shape)}{hint}")
                axis = True
            bits = bits_dtype(shape.dtype)
            if member.dtype != shape.dtype and not (bits is not None and member.dtype == bits):
                npz = f"{bits} bit patterns or " if bits is not None else ""
                raise InputError(f"{key} for {label}: expected element type {npz}"
                                 f"{shape.dtype}, got {member.dtype}; convert it explicitly")
            out.append((member, np.dtype(shape.dtype), dims, axis))
        return out

    def _rows(self, device: int) -> list:
        """Per parameter: None (a token) or (member, dtype, dims, first byte of the row)."""
        members, row = (self.files[device], 0) if self.per_device else (self.files[0], device)
        out = []
        for entry in members:
            if entry is None:
                out.append(None)
                continue
            member, dtype, dims, axis = entry
            nbytes = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
            out.append((member, dtype, dims, row * nbytes if axis else 0))
        return out

    def parts(self, device: int) -> list:
        """Device `device`'s arguments as (dtype, dims, byte pieces) -- None for a token."""
        return [None if r is None else
                (r[1], r[2], r[0].part_bytes(r[3], int(np.prod(r[2], dtype=np.int64)) *
                                             r[1].itemsize))
                for r in self._rows(device)]

    def device(self, device: int) -> list:
        """Device `device`'s argument list (tokens as TOKEN), reading only its rows."""
        from .semantics.values import TOKEN
        return [TOKEN if r is None else r[0].read_part(r[3], r[2], r[1])
                for r in self._rows(device)]


def read_inputs(source, shapes: list[Shape], *, num_devices: int = 1,
                device_axis: bool | None = True, names: list[str] | None = None,
                what: str = "inputs") -> list[list]:
    """Read `arg{i}` arrays for parameters of `shapes`; returns one argument list per device.

    `device_axis`: True = every array has a leading axis of size num_devices; False = no
    device axis (only with num_devices == 1); None = accept either when num_devices == 1.
    `source` may also be a `{device}` template of per-device files (class Inputs).
    Errors (an unreadable or damaged file, missing, extra, wrongly shaped or typed arrays)
    are InputErrors naming the parameter; `what` names the file's option in messages.
    """
    inputs = Inputs(source, shapes, num_devices=num_devices, device_axis=device_axis,
                    names=names, what=what)
    return [inputs.device(d) for d in range(num_devices)]


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


def outputs_text(outputs) -> str:
    """One device's outputs as `xladist run` prints them without --outputs: each under its
    label `outN: dtype[dims]`, indented two spaces as a whole (numpy's bracket alignment
    kept on every row), long arrays summarized. Ends with a newline."""
    lines = []
    with np.printoptions(threshold=200, edgeitems=4):
        for i, a in enumerate(outputs):
            a = np.asarray(a)
            lines.append(f"out{i}: {a.dtype}{list(a.shape)}")
            # prefix: the width of what precedes the first row, which rows 2.. are aligned to
            lines.append("  " + np.array2string(a, prefix="  "))
    return "".join(line + "\n" for line in lines)


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
