"""Buffers honour layouts: the physical byte order of a value, and back.

Representation chosen: a value (values.py) is a numpy array of *logical* values
(index [i, j, ...] is element (i, j, ...) of the HLO shape), with whatever strides numpy
chose. The layout never changes a logical value; it only decides the order in which
elements sit in memory. So the layout appears exactly where bytes are exchanged or
reinterpreted:

- `to_physical(array, shape)`: the elements in memory order, as a 1-D array. Memory
  order is major-to-minor = reversed(minor_to_major): the last dimension of
  minor_to_major varies slowest. For the default layout {rank-1, ..., 0} this is numpy's
  C order.
- `from_physical(flat, shape)`: the logical array for a buffer in memory order.
- `to_bytes` / `from_bytes`: the same as little-endian bytes (wire formats of the MPI
  runtime and of raw feed items, bitcast).
- `bitcast(array, src, dst)`: XLA's bitcast: the same bytes read with another shape,
  layout or (same total width) element type.

Layout extras (tiles, memory space, element size in bits, ...) never change values on
this runtime and are ignored; a bitcast on a tiled layout is therefore read as untiled.
"""

from __future__ import annotations

import numpy as np

from ..hlo.shape import Shape


def major_to_minor(shape: Shape) -> tuple[int, ...]:
    """Dimensions from slowest- to fastest-varying in memory."""
    mtm = shape.minor_to_major()
    if sorted(mtm) != list(range(shape.rank)):
        raise ValueError(f"layout {shape} is not a permutation of its {shape.rank} dimensions")
    return tuple(reversed(mtm))


def to_physical(array: np.ndarray, shape: Shape) -> np.ndarray:
    """The elements of a logical array in the memory order of `shape`'s layout (1-D)."""
    array = np.asarray(array)
    if array.ndim == 0:
        return array.reshape(1)
    return np.ascontiguousarray(np.transpose(array, major_to_minor(shape))).reshape(-1)


def from_physical(flat: np.ndarray, shape: Shape) -> np.ndarray:
    """The logical array whose memory image (in `shape`'s layout) is `flat`."""
    flat = np.asarray(flat).reshape(-1)
    if shape.rank == 0:
        return flat.reshape(())
    order = major_to_minor(shape)
    physical_dims = [shape.dims[d] for d in order]
    inverse = np.argsort(order)
    return np.transpose(flat.reshape(physical_dims), inverse)


def to_bytes(array: np.ndarray, shape: Shape) -> bytes:
    """Little-endian bytes of `array` laid out as `shape` says."""
    return to_physical(array, shape).astype(shape.dtype.newbyteorder("<"), copy=False).tobytes()


def from_bytes(data, shape: Shape) -> np.ndarray:
    """The logical array stored in `data` (little-endian bytes in `shape`'s layout)."""
    flat = np.frombuffer(data, dtype=shape.dtype.newbyteorder("<"), count=shape.size)
    return from_physical(flat.astype(shape.dtype, copy=True), shape)


def bitcast(array: np.ndarray, src: Shape, dst: Shape) -> np.ndarray:
    """XLA bitcast: reinterpret the physical buffer of `array` (shape src) as shape dst.

    Both shapes must have the same byte size; the element type may change
    (f32[] -> s32[]), as may dims and layout.
    """
    flat = to_physical(array, src)
    if src.nbytes != dst.nbytes:
        raise ValueError(f"bitcast from {src} ({src.nbytes} bytes) to {dst} ({dst.nbytes} "
                         f"bytes) changes the buffer size")
    if flat.dtype != dst.dtype:
        flat = np.ascontiguousarray(flat).view(dst.dtype)
    return from_physical(flat, dst)
