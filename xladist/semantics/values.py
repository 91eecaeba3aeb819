"""How values travel between xladist's layers: an array is a numpy array of the logical
values, a tuple a Python tuple of values, and a token the `TOKEN` sentinel."""

from __future__ import annotations

import numpy as np

from ..hlo.shape import Shape


class _Token:
    __slots__ = ()

    def __repr__(self) -> str:
        return "TOKEN"


TOKEN = _Token()


def zeros_value(shape: Shape):
    """A value of `shape` filled with zeros (TOKEN for token leaves, None for opaque ones):
    what a device receives when nothing is sent to it (a collective-permute or recv no pair
    targets, a collective-broadcast outside every group) and an async op's context."""
    if shape.is_tuple:
        return tuple(zeros_value(s) for s in shape.tuple_shapes)
    if shape.is_token:
        return TOKEN
    if shape.is_opaque:
        return None
    return np.zeros(shape.dims, dtype=shape.dtype)
