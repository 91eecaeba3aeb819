"""Literal values as the bytes of a buffer in the shape's physical layout."""

from __future__ import annotations

import numpy as np

from ...hlo.shape import Shape


def to_physical(shape: Shape, logical: np.ndarray) -> np.ndarray:
    """A C-contiguous array whose memory order is shape's minor-to-major order."""
    arr = np.asarray(logical, dtype=shape.dtype).reshape(shape.dims)
    if shape.rank > 1 and not shape.has_default_layout():
        major_to_minor = list(reversed(shape.minor_to_major()))
        arr = arr.transpose(major_to_minor)
    return np.ascontiguousarray(arr)


def physical_bytes(shape: Shape, logical) -> bytes:
    return to_physical(shape, logical).tobytes()


def logical_view(shape: Shape, flat: np.ndarray) -> np.ndarray:
    """The logical array viewing a flat byte buffer laid out in shape's layout."""
    typed = flat.view(shape.dtype)
    if shape.rank > 1 and not shape.has_default_layout():
        major_to_minor = list(reversed(shape.minor_to_major()))
        phys = typed.reshape([shape.dims[d] for d in major_to_minor])
        inverse = np.argsort(major_to_minor)
        return phys.transpose(inverse)
    return typed.reshape(shape.dims)
