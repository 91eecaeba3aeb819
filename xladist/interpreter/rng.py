"""Random numbers: `rng-bit-generator` (bit-exact with XLA: semantics/rng.py computes the
bits), `rng` and `rng-get-and-update-state` (implementation-defined values, deterministic
here)."""

from __future__ import annotations

import weakref
import zlib

import numpy as np

from ..errors import UnsupportedError
from ..hlo.ir import describe
from ..semantics.rng import rng_bit_generator, rng_values, state_problem
from .registry import register


@register("rng-bit-generator")
def _eval_rng_bit_generator(instr, args, ev):
    state_shape, data_shape = instr.shape.tuple_shapes
    algorithm = instr.attrs.get("algorithm", "rng_default")
    problem = state_problem(algorithm, state_shape.element_type.name, state_shape.dims)
    if problem:
        raise UnsupportedError(f"{describe(instr)}: {problem}")
    return rng_bit_generator(args[0], algorithm, data_shape.dtype, data_shape.dims)


# ---- rng and rng-get-and-update-state: values are implementation-defined ----------
#
# A deterministic stream per (evaluator, instruction): the seed is a CRC of the
# instruction name and a call counter, so a while loop draws fresh numbers each trip
# while two runs of one program give identical results.

_CALL_COUNTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _counter(ev, key: str) -> int:
    try:
        counts = _CALL_COUNTS.setdefault(ev, {})
    except TypeError:  # evaluator not weak-referenceable: fall back to a fixed stream
        return 0
    n = counts.get(key, 0)
    counts[key] = n + 1
    return n


def _generator(instr, ev) -> np.random.Generator:
    n = _counter(ev, "rng:" + instr.name)
    seed = zlib.crc32(instr.name.encode()) ^ (n * 0x9E3779B1)
    return np.random.Generator(np.random.PCG64(seed & 0xFFFFFFFF))


@register("rng")
def _eval_rng(instr, args, ev):
    if len(args) != 2:
        raise UnsupportedError(f"{instr.name}: rng takes 2 scalar operands, got {len(args)}")
    try:
        return rng_values(instr.attrs.get("distribution"), _generator(instr, ev), args[0],
                          args[1], instr.shape.dims, instr.shape.dtype)
    except UnsupportedError as e:
        raise UnsupportedError(f"{instr.name}: {e}") from None


@register("rng-get-and-update-state")
def _eval_rng_get_and_update_state(instr, args, ev):
    """Returns the current u64[2] state and advances it by `delta` (XLA:CPU keeps one
    global counter); the counter lives on the evaluator (`ev.rng_state`)."""
    lo = int(getattr(ev, "rng_state", 0) or 0)
    try:
        ev.rng_state = (lo + int(instr.attrs.get("delta", 0))) & 0xFFFFFFFFFFFFFFFF
    except AttributeError:  # an evaluator without room for state: a fixed stream
        pass
    return np.array([lo, 0], dtype=np.uint64)
