"""dot, ragged-dot and scaled-dot (operation semantics: DotGeneral, RaggedDot, ScaledDot).

Result dimension order is XLA's: batch dims, then lhs free dims, then rhs free
dims, each group in operand dimension order.

Numerics (the part XLA defines and the part it leaves to us):
- operands are first converted to the result element type (preferred_element_type:
  s8 x s8 -> s32, bf16 x bf16 -> f32 ...) when it is at least as precise as both, as
  XLA's OperandUpcaster does; a float result less precise than an operand (f32 x f32 ->
  bf16, f64 -> f32) is computed at the operand's precision, rounded to the operand's
  type and then to the result's (semantics.dtypes.product_operand_dtype and
  product_value, the rules both backends use);
- floats narrower than f32 (f16, bf16, f8*) accumulate in f32 and are rounded to
  the result type once at the end; f32/f64/c64/c128 accumulate in their own type;
- integers accumulate in 64 bits and wrap to the result width (two's complement),
  which equals XLA's wrapping accumulation in the result type; pred is OR-of-AND;
- `algorithm=dot_<in>_<in>_<acc>` and operand_precision are carried and ignored: the
  product is computed at the operands' own precision, as XLA:CPU does (jax 0.10.2 gives
  the f32 product for dot_bf16_bf16_f32) and as the HLO text reference allows for a CPU
  runtime (docs/xla-compatibility.md). Both backends follow this one rule: there is no
  rounding to apply.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..semantics.dequantize import dequantize
from ..semantics.dtypes import product_operand_dtype, product_value, store_as
from .registry import register


def accumulation_dtype(result: np.dtype) -> np.dtype:
    """The dtype a dot/convolution accumulates in for a result dtype."""
    result = np.dtype(result)
    if result == np.bool_:
        return np.dtype(np.int64)
    if result.kind == "i" or result.name in ("int4", "int2"):
        return np.dtype(np.int64)
    if result.kind == "u" or result.name in ("uint4", "uint2"):
        return np.dtype(np.uint64)
    if result.kind == "c":
        return result
    if result.kind == "f" and result.itemsize >= 4:
        return result
    return np.dtype(np.float32)  # f16, bf16, f8*, f4: accumulate in f32


def to_accumulation(x: np.ndarray, operand: np.dtype) -> np.ndarray:
    """Convert an operand to the type the product's operands take (product_operand_dtype
    of both operands and the result), then widen for accumulation."""
    operand = np.dtype(operand)
    x = np.asarray(x)
    if x.dtype != operand and not (operand == np.bool_ and x.dtype.kind in "iub"):
        x = x.astype(operand)
    return x.astype(accumulation_dtype(operand))


def from_accumulation(acc: np.ndarray, result: np.dtype, operand=None) -> np.ndarray:
    """The accumulated values as the result type; `operand` is the product's operand type
    (product_operand_dtype), which rounds first where it is not the result's."""
    result = np.dtype(result)
    if result == np.bool_:
        return acc != 0
    if operand is not None:
        acc = product_value(acc, operand, result)
    return store_as(acc, result)  # integer: wraps; float: one rounding (two: product_value)


def dot_general(lhs, rhs, lhs_contract=(), rhs_contract=(), lhs_batch=(), rhs_batch=(),
                result_dtype=None) -> np.ndarray:
    """DotGeneral on numpy arrays; the result in `result_dtype` (default: lhs dtype)."""
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    result_dtype = np.dtype(result_dtype or lhs.dtype)
    operand_dtype = product_operand_dtype(lhs.dtype, rhs.dtype, result_dtype)
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch]
    a = to_accumulation(lhs, operand_dtype).transpose(list(lhs_batch) + lhs_free
                                                     + list(lhs_contract))
    b = to_accumulation(rhs, operand_dtype).transpose(list(rhs_batch) + list(rhs_contract)
                                                     + rhs_free)
    batch = [lhs.shape[d] for d in lhs_batch]
    m = [lhs.shape[d] for d in lhs_free]
    n = [rhs.shape[d] for d in rhs_free]
    k = int(np.prod([lhs.shape[d] for d in lhs_contract], dtype=np.int64))
    nb = int(np.prod(batch, dtype=np.int64))
    a = a.reshape(nb, int(np.prod(m, dtype=np.int64)), k)
    b = b.reshape(nb, k, int(np.prod(n, dtype=np.int64)))
    with np.errstate(over="ignore", invalid="ignore"):
        acc = np.matmul(a, b)
    return from_accumulation(acc.reshape(batch + m + n), result_dtype, operand_dtype)


def _dims(instr, key):
    return tuple(instr.attrs.get(key, ()) or ())


def _dot_attrs(instr):
    return (_dims(instr, "lhs_contracting_dims"), _dims(instr, "rhs_contracting_dims"),
            _dims(instr, "lhs_batch_dims"), _dims(instr, "rhs_batch_dims"))


def _check_dims(instr, lhs, rhs, lc, rc, lb, rb):
    if len(lc) != len(rc) or len(lb) != len(rb):
        raise UnsupportedError(f"{instr.name}: dot needs as many lhs as rhs contracting "
                               f"and batch dims (got {lc}/{rc}, {lb}/{rb})")
    for a, b, what in ((lc, rc, "contracting"), (lb, rb, "batch")):
        for da, db in zip(a, b):
            if lhs.shape[da] != rhs.shape[db]:
                raise UnsupportedError(
                    f"{instr.name}: {what} dims differ in size: lhs dim {da} of "
                    f"{lhs.shape} vs rhs dim {db} of {rhs.shape}")


@register("dot")
def _eval_dot(instr, args, ev):
    lhs, rhs = args
    lc, rc, lb, rb = _dot_attrs(instr)
    _check_dims(instr, lhs, rhs, lc, rc, lb, rb)
    return dot_general(lhs, rhs, lc, rc, lb, rb, instr.shape.dtype)


def ragged_dot(lhs, rhs, group_sizes, lc, rc, lb, rb, ragged_dim, group_dim, result_dtype):
    """RaggedDot with a 1-D group_sizes [g]; the three modes of the operation semantics:

    1. ragged dim is an lhs free dim: rows of group i use rhs[i] (rhs has a group dim);
       rows past sum(group_sizes) are 0.
    2. ragged dim is an lhs contracting dim: out[i] contracts only group i's slice;
       the result has a leading group dim.
    3. ragged dim is a batch dim: an ordinary dot over every batch (XLA's
       RaggedDotRewriter emits the plain dot; jax agrees), group_sizes is not used.
    """
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    sizes = np.asarray(group_sizes).astype(np.int64).reshape(-1)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    pos = np.arange(lhs.shape[ragged_dim])
    shape1 = [1] * lhs.ndim
    shape1[ragged_dim] = -1

    def lhs_masked(mask):
        zero = np.zeros((), lhs.dtype)
        return np.where(mask.reshape(shape1), lhs, zero)

    if ragged_dim in lc:
        out = []
        for i in range(len(sizes)):
            mask = (pos >= starts[i]) & (pos < starts[i + 1])
            out.append(dot_general(lhs_masked(mask), rhs, lc, rc, lb, rb, result_dtype))
        return np.stack(out) if out else np.zeros((0,), result_dtype)
    if ragged_dim in lb:
        return dot_general(lhs, rhs, lc, rc, lb, rb, result_dtype)
    # Mode 1: drop rhs's group dim and renumber rhs dims past it.
    if group_dim is None:
        raise UnsupportedError("ragged-dot with a ragged non-contracting lhs dim needs "
                               "an rhs group dim")
    def renum(ds):
        return tuple(d - (d > group_dim) for d in ds)
    rc2, rb2 = renum(rc), renum(rb)
    lhs_free = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    out_axis = len(lb) + lhs_free.index(ragged_dim)
    out = None
    for i in range(len(sizes)):
        part = dot_general(lhs, np.take(rhs, i, axis=group_dim), lc, rc2, lb, rb2, result_dtype)
        if out is None:
            out = np.zeros_like(part)
        mask = (pos >= starts[i]) & (pos < starts[i + 1])
        shape = [1] * part.ndim
        shape[out_axis] = -1
        out = np.where(mask.reshape(shape), part, out)
    if out is None:  # no groups: all rows are outside every group
        rhs0 = np.zeros(np.delete(rhs.shape, group_dim), rhs.dtype)
        out = dot_general(lhs, rhs0, lc, rc2, lb, rb2, result_dtype)
    return out


@register("ragged-dot")
def _eval_ragged_dot(instr, args, ev):
    lhs, rhs, group_sizes = args
    lc, rc, lb, rb = _dot_attrs(instr)
    ragged = _dims(instr, "lhs_ragged_dims")
    groups = _dims(instr, "rhs_group_dims")
    if len(ragged) != 1:
        raise UnsupportedError(f"{instr.name}: ragged-dot needs exactly one lhs ragged "
                               f"dimension, got {ragged}")
    if np.ndim(group_sizes) != 1:
        raise UnsupportedError(f"{instr.name}: ragged-dot with group_sizes of shape "
                               f"{np.shape(group_sizes)} is not supported (only [g])")
    return ragged_dot(lhs, rhs, group_sizes, lc, rc, lb, rb, ragged[0],
                      groups[0] if groups else None, instr.shape.dtype)


# ---- scaled-dot ------------------------------------------------------------------------

@register("scaled-dot")
def _eval_scaled_dot(instr, args, ev):
    lhs, rhs, lhs_scale, rhs_scale = args
    lc, rc, lb, rb = _dot_attrs(instr)
    _check_dims(instr, lhs, rhs, lc, rc, lb, rb)
    return dot_general(dequantize(lhs, lhs_scale), dequantize(rhs, rhs_scale),
                       lc, rc, lb, rb, instr.shape.dtype)
