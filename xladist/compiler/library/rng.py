"""rng-bit-generator as a library thunk: semantics/rng.py's bits, the ones the interpreter
computes too (bit-exact with XLA:CPU's RngBitGeneratorExpander + prng.cc)."""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...semantics.rng import rng_bit_generator, state_problem
from .core import library


@library("rng-bit-generator")
def _rng_bit_generator(instr, args, outs):
    state_shape = instr.operands[0].shape
    algorithm = instr.attrs.get("algorithm", "rng_default")
    problem = state_problem(algorithm, state_shape.element_type.name, state_shape.dims)
    if problem:
        raise UnsupportedError(f"instruction `{instr.name}` (rng-bit-generator): {problem}")
    new_state, data = outs
    state, bits = rng_bit_generator(args[0], algorithm, data.dtype, data.shape)
    np.copyto(new_state, state.view(new_state.dtype))
    np.copyto(data, bits)
