"""How values travel between xladist's layers: an array is a numpy array of the logical
values, a tuple a Python tuple of values, and a token the `TOKEN` sentinel."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..hlo.attrs import ELIDED_CONSTANT
from ..hlo.ir import describe
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


def constant_literal(instr):
    """The literal of constant `instr`. A constant whose data the dump elided
    (`constant({...})`, XLA's long style for more than 10 elements) has no values: every
    backend refuses it with this UnsupportedError, before anything runs."""
    lit = instr.literal
    if lit is None or lit.elided:
        raise UnsupportedError(f"{describe(instr)}: {ELIDED_CONSTANT}")
    return lit
