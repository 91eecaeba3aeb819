"""Shape and data-movement ops (operation semantics: Broadcast, Reshape, Transpose, Rev,
Slice, DynamicSlice, DynamicUpdateSlice, ConcatenateInDim, Pad, Iota, Tuple,
GetTupleElement, ...), constants, parameters and the token plumbing.

Values are logical arrays (semantics/layout.py), so reshape is numpy's row-major reshape, and copy
(even one that changes the layout) returns the same value. Only `bitcast` reinterprets
memory: it goes through layout.bitcast. Rules return read-only views where numpy makes
them (broadcast, transpose, slices); values are never written in place.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..hlo.ir import describe
from ..hlo.shape import Shape
from ..semantics import layout
from ..semantics.dtypes import F32, kind_of
from ..semantics.values import TOKEN, constant_literal
from .registry import register



@register("parameter")
def parameter_rule(instr, args, ev):
    return ev.parameter_value(instr)


def literal_value(literal, shape: Shape):
    """The interpreter value of an attrs.Literal (tuples recursively)."""
    if shape.is_tuple:
        return tuple(literal_value(lit, s) for lit, s in zip(literal.value, shape.tuple_shapes))
    if shape.is_token:
        return TOKEN
    return read_only(np.asarray(literal.value, dtype=shape.dtype).reshape(shape.dims))


def read_only(value):
    """A read-only view of `value` (tuples recursively): how the interpreter holds arrays
    that are not its own -- a constant's literal data, the caller's arguments -- so that a
    result that is one of them (ROOT a constant, a parameter, a reshape of either) is
    copied by flatten_result instead of handed out. Before, changing such a result changed
    the module's constant for every later call, or the caller's input array."""
    if isinstance(value, tuple):
        return tuple(read_only(v) for v in value)
    if isinstance(value, np.ndarray):
        value = value.view()
        value.flags.writeable = False
    return value


@register("constant")
def constant_rule(instr, args, ev):
    return literal_value(constant_literal(instr), instr.shape)


@register("broadcast")
def broadcast_rule(instr, args, ev):
    x = args[0]
    dims = tuple(instr.attrs.get("dimensions", ()))
    out = instr.shape.dims
    # Put the operand's dimensions in increasing target order, then insert size-1 dims.
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order) if x.ndim else x
    target = sorted(dims)
    expanded = [1] * len(out)
    for k, d in enumerate(target):
        expanded[d] = x.shape[k]
    return np.broadcast_to(x.reshape(expanded), out)


@register("reshape")
def reshape_rule(instr, args, ev):
    return np.reshape(args[0], instr.shape.dims)


@register("transpose")
def transpose_rule(instr, args, ev):
    # Result dimension i is operand dimension dimensions[i].
    return np.transpose(args[0], tuple(instr.attrs["dimensions"]))


@register("reverse")
def reverse_rule(instr, args, ev):
    dims = tuple(instr.attrs["dimensions"])
    return np.flip(args[0], axis=dims) if dims else args[0]


@register("slice")
def slice_rule(instr, args, ev):
    spec = instr.attrs["slice"]
    return args[0][tuple(slice(a, b, s) for a, b, s in spec.dims)]


def _start_indices(instr, operands, rank):
    """Start indices from either form: one scalar per dimension, or one s32[rank] vector."""
    if len(operands) == 1 and operands[0].ndim == 1:
        return [int(v) for v in operands[0]]
    if len(operands) != rank:
        raise UnsupportedError(f"{describe(instr)}: expected {rank} start indices, got "
                               f"{len(operands)}")
    return [int(v) for v in operands]


def _clamp_starts(starts, dims, sizes):
    # XLA clamps each start into [0, dim - size] so the window stays inside the operand.
    return [min(max(s, 0), d - z) for s, d, z in zip(starts, dims, sizes)]


@register("dynamic-slice")
def dynamic_slice_rule(instr, args, ev):
    x = args[0]
    sizes = tuple(instr.attrs["dynamic_slice_sizes"])
    starts = _clamp_starts(_start_indices(instr, args[1:], x.ndim), x.shape, sizes)
    return x[tuple(slice(s, s + z) for s, z in zip(starts, sizes))]


@register("dynamic-update-slice")
def dynamic_update_slice_rule(instr, args, ev):
    x, update = args[0], args[1]
    starts = _clamp_starts(_start_indices(instr, args[2:], x.ndim), x.shape, update.shape)
    out = np.array(x, copy=True)
    out[tuple(slice(s, s + z) for s, z in zip(starts, update.shape))] = update
    return out


@register("concatenate")
def concatenate_rule(instr, args, ev):
    return np.concatenate(args, axis=instr.attrs["dimensions"][0])


@register("pad")
def pad_rule(instr, args, ev):
    x, value = args
    config = instr.attrs["padding"].dims
    # First pad with the non-negative parts (edges and interior), then crop negative edges.
    sizes, places = [], []
    for n, (lo, hi, interior) in zip(x.shape, config):
        dilated = n + (n - 1) * interior if n else 0
        sizes.append(max(lo, 0) + dilated + max(hi, 0))
        places.append(slice(max(lo, 0), max(lo, 0) + dilated, interior + 1))
    out = np.full(sizes, value, dtype=instr.shape.dtype)
    out[tuple(places)] = x
    crop = tuple(slice(max(-lo, 0), size - max(-hi, 0))
                 for size, (lo, hi, _) in zip(sizes, config))
    return out[crop]


def iota_array(shape: Shape, dimension: int) -> np.ndarray:
    dims = shape.dims
    n = dims[dimension]
    dtype = shape.dtype
    values = np.arange(n, dtype=np.int64)
    kind = kind_of(dtype)
    if kind == "float":
        values = values.astype(np.float64).astype(F32).astype(dtype)
    elif kind == "complex":
        values = values.astype(dtype)
    elif kind == "pred":
        values = values != 0
    else:
        values = values.astype(dtype)  # wraps like XLA's integer iota
    expanded = [1] * len(dims)
    expanded[dimension] = n
    return np.broadcast_to(values.reshape(expanded), dims)


@register("iota")
def iota_rule(instr, args, ev):
    return iota_array(instr.shape, int(instr.attrs["iota_dimension"]))


@register("copy")
def copy_rule(instr, args, ev):
    # Logical values do not depend on layout: a layout-changing copy is the identity here.
    return args[0]


@register("bitcast")
def bitcast_rule(instr, args, ev):
    src = instr.operands[0].shape
    try:
        return layout.bitcast(args[0], src, instr.shape)
    except ValueError as e:
        raise UnsupportedError(f"{describe(instr)}: {e}") from None


@register("tuple")
def tuple_rule(instr, args, ev):
    return tuple(args)


@register("get-tuple-element")
def get_tuple_element_rule(instr, args, ev):
    return args[0][int(instr.attrs["index"])]


@register("get-dimension-size")
def get_dimension_size_rule(instr, args, ev):
    # Shapes are static on this runtime: the size is the (bound of the) dimension.
    d = instr.attrs["dimensions"][0]
    return np.array(instr.operands[0].shape.dims[d], dtype=instr.shape.dtype)


@register("opt-barrier", "domain")
def identity_rule(instr, args, ev):
    return args[0]


@register("after-all")
def after_all_rule(instr, args, ev):
    return TOKEN


@register("add-dependency")
def add_dependency_rule(instr, args, ev):
    return args[0]
