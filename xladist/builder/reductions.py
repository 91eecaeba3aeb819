"""Ops with a called scalar computation: reduce, reduce-window, select-and-scatter, map,
sort, top-k; plus the standard scalar reducers and window helpers."""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np

from ..hlo.attrs import Window, WindowDim
from ..hlo.ir import Computation
from ..hlo.shape import PrimitiveType, Shape
from .core import BuilderError, XlaOp, _ints, as_type

# Reducer kind -> (builder method combining two scalars, identity element picker).
# The identity lets reduce_<kind> helpers pick their init value per element type.
REDUCER_KINDS = {
    "add": ("add", lambda t: 0),
    "mul": ("mul", lambda t: 1),
    "max": ("max", lambda t: _lowest(t)),
    "min": ("min", lambda t: _highest(t)),
    "and": ("and_", lambda t: True if t.kind == "pred" else _all_ones(t)),
    "or": ("or_", lambda t: 0),
    "xor": ("xor", lambda t: 0),
}


def _all_ones(t: PrimitiveType):
    return ml_dtypes.iinfo(t.dtype).max if t.kind == "uint" else -1


def _lowest(t: PrimitiveType):
    return _extreme(t, highest=False)


def _highest(t: PrimitiveType):
    return _extreme(t, highest=True)


def _extreme(t: PrimitiveType, highest: bool):
    """The identity of max (lowest value) or min (highest value), as jax picks it: +-inf
    for floats that have it, else the largest finite (f8e4m3fn, the fnuz types, f4e2m1fn:
    inf would convert to NaN or saturate there); ml_dtypes.iinfo also knows s1-u4."""
    if t.kind == "pred":
        return highest
    if t.is_float:
        with np.errstate(invalid="ignore", over="ignore"):
            has_inf = np.isinf(np.float32(np.inf).astype(t.dtype).astype(np.float32))
        if has_inf:
            return np.inf if highest else -np.inf
        info = ml_dtypes.finfo(t.dtype)
        return info.max if highest else info.min
    info = ml_dtypes.iinfo(t.dtype)
    return info.max if highest else info.min


def padding_for(padding, in_dims: Sequence[int], window: Sequence[int],
                strides: Sequence[int], dilations: Sequence[int] | None = None):
    """(low, high) per dimension from "SAME"/"VALID" or an explicit list of pairs.

    SAME gives ceil(in/stride) outputs, splitting the padding low-first (as jax and
    XLA's MakePadding do); VALID pads nothing.
    """
    n = len(in_dims)
    if padding is None:
        return [(0, 0)] * n
    if isinstance(padding, str):
        kind = padding.upper()
        if kind == "VALID":
            return [(0, 0)] * n
        if kind != "SAME":
            raise BuilderError(f"padding {padding!r} is not 'SAME', 'VALID' or a list of pairs")
        dilations = dilations or [1] * n
        out = []
        for size, w, s, d in zip(in_dims, window, strides, dilations):
            eff = (w - 1) * d + 1
            total = max(0, (math.ceil(size / s) - 1) * s + eff - size)
            out.append((total // 2, total - total // 2))
        return out
    pairs = [tuple(int(x) for x in p) for p in padding]
    if len(pairs) != n:
        raise BuilderError(f"padding {pairs} has {len(pairs)} entries for {n} dimensions")
    return pairs


def make_window(window_dimensions, window_strides=None, padding=None, base_dilations=None,
                window_dilations=None, operand_dims=None) -> Window:
    """A Window attribute from per-dimension lists (defaults: stride 1, no padding)."""
    sizes = _ints(window_dimensions)
    n = len(sizes)
    strides = _ints(window_strides) if window_strides is not None else (1,) * n
    base = _ints(base_dilations) if base_dilations is not None else (1,) * n
    wdil = _ints(window_dilations) if window_dilations is not None else (1,) * n
    dims_in = operand_dims if operand_dims is not None else sizes
    if isinstance(padding, str):
        dims_in = [(d - 1) * b + 1 for d, b in zip(dims_in, base)]
    pads = padding_for(padding, dims_in, sizes, strides, wdil)
    return Window(tuple(WindowDim(size=s, stride=st, padding_low=lo, padding_high=hi,
                                  window_dilation=wd, base_dilation=bd)
                        for s, st, (lo, hi), bd, wd in zip(sizes, strides, pads, base, wdil)))


class ReductionMixin:
    # ---- reducers ---------------------------------------------------------------
    def scalar_reducer(self, kind: str, element_type) -> Computation:
        """The computation (a, b) -> a <kind> b on scalars; kind: add mul max min and or xor.

        One computation per (kind, type) and module, named like `add_f32`."""
        t = as_type(element_type)
        if kind not in REDUCER_KINDS:
            raise BuilderError(f"unknown reducer {kind!r}; use one of {sorted(REDUCER_KINDS)} "
                               "or pass a computation / callable")
        key = (kind, t.name)
        cached = self._state.reducers.get(key)
        if cached is not None:
            return cached
        sub = self.create_subbuilder(f"{kind}_{t.name}")
        a = sub.parameter(0, Shape.scalar(t), name="lhs")
        b = sub.parameter(1, Shape.scalar(t), name="rhs")
        comp = sub.build_computation(getattr(sub, REDUCER_KINDS[kind][0])(a, b))
        self._state.reducers[key] = comp
        return comp

    def _reducer(self, computation, types: Sequence[PrimitiveType], name: str, *,
                 op: str | None = None) -> Computation:
        """A (acc..., x...) -> acc computation from a name, a Computation or a callable;
        `op` names the instruction that calls it, for errors."""
        if isinstance(computation, str):
            if len(types) != 1:
                raise BuilderError(f"{op or name}: a named reducer ({computation!r}) combines one "
                                   f"value; {len(types)} operands need a computation")
            return self.scalar_reducer(computation, types[0])
        scalars = [Shape.scalar(t) for t in types]
        return self._computation(computation, scalars + scalars, name, op=op)

    # ---- reduce ---------------------------------------------------------------
    def reduce(self, operands, init_values, computation, dimensions: Sequence[int]) -> XlaOp:
        """XLA Reduce over `dimensions`; variadic when operands/init_values are lists (the
        computation then takes N accumulators then N inputs and returns a tuple)."""
        ops = self._operands(operands, "reduce")
        inits = list(init_values) if isinstance(init_values, (list, tuple)) else [init_values]
        inits = [self._coerce(v, like=o) for v, o in zip(inits, ops)]
        comp = self._reducer(computation, [o.element_type for o in ops], "reducer", op="reduce")
        return self._add("reduce", [*ops, *inits],
                         {"dimensions": _ints(dimensions), "to_apply": comp})

    def _reduce_kind(self, kind: str, operand: XlaOp, dimensions) -> XlaOp:
        operand = self._operand(operand, "reduce")
        if dimensions is None:
            dimensions = range(operand.rank)
        t = operand.element_type
        init = self.constant_r0(REDUCER_KINDS[kind][1](t), t)
        return self.reduce(operand, init, kind, dimensions)

    def reduce_sum(self, operand: XlaOp, dimensions=None) -> XlaOp:
        """Sum over `dimensions` (all when None)."""
        return self._reduce_kind("add", operand, dimensions)

    def reduce_prod(self, operand: XlaOp, dimensions=None) -> XlaOp:
        return self._reduce_kind("mul", operand, dimensions)

    def reduce_max(self, operand: XlaOp, dimensions=None) -> XlaOp:
        return self._reduce_kind("max", operand, dimensions)

    def reduce_min(self, operand: XlaOp, dimensions=None) -> XlaOp:
        return self._reduce_kind("min", operand, dimensions)

    def reduce_and(self, operand: XlaOp, dimensions=None) -> XlaOp:
        return self._reduce_kind("and", operand, dimensions)

    def reduce_or(self, operand: XlaOp, dimensions=None) -> XlaOp:
        return self._reduce_kind("or", operand, dimensions)

    # ---- windows ------------------------------------------------------------------
    def reduce_window(self, operands, init_values, computation, window_dimensions,
                      window_strides=None, padding=None, base_dilations=None,
                      window_dilations=None) -> XlaOp:
        """XLA ReduceWindow; padding is "SAME", "VALID" or (low, high) pairs."""
        ops = self._operands(operands, "reduce-window")
        inits = list(init_values) if isinstance(init_values, (list, tuple)) else [init_values]
        inits = [self._coerce(v, like=o) for v, o in zip(inits, ops)]
        comp = self._reducer(computation, [o.element_type for o in ops], "reducer",
                             op="reduce-window")
        window = make_window(window_dimensions, window_strides, padding, base_dilations,
                             window_dilations, ops[0].dims)
        return self._add("reduce-window", [*ops, *inits],
                         {"window": window, "to_apply": comp})

    def select_and_scatter(self, operand: XlaOp, select, window_dimensions, window_strides,
                           padding, source: XlaOp, init_value, scatter="add") -> XlaOp:
        """XLA SelectAndScatter: `select` (a, b) -> pred picks one element per window
        (e.g. "ge" for max-pool gradients), `scatter` adds source values there."""
        operand = self._operand(operand, "select-and-scatter")
        t = operand.element_type
        if isinstance(select, str):
            direction = select
            select = lambda sb, a, b: sb.compare(a, b, direction)
        select_comp = self._computation(select, [Shape.scalar(t)] * 2, "select",
                                        op="select-and-scatter")
        scatter_comp = self._reducer(scatter, [t], "scatter", op="select-and-scatter")
        window = make_window(window_dimensions, window_strides, padding,
                             operand_dims=operand.dims)
        init = self._coerce(init_value, like=operand)
        return self._add("select-and-scatter", [operand, source, init],
                         {"window": window, "select": select_comp, "scatter": scatter_comp})

    # ---- map / sort / top-k --------------------------------------------------------
    def map(self, operands, computation, dimensions: Sequence[int] | None = None) -> XlaOp:
        """Apply a scalar computation element-wise over same-shape operands."""
        ops = self._operands(operands, "map")
        comp = self._computation(computation, [Shape.scalar(o.element_type) for o in ops],
                                 "mapper", op="map")
        dims = _ints(dimensions) if dimensions is not None else tuple(range(ops[0].rank))
        return self._add("map", ops, {"dimensions": dims, "to_apply": comp})

    def sort(self, operands, comparator=None, dimension: int = -1,
             is_stable: bool = False) -> XlaOp:
        """XLA Sort along `dimension`. The comparator takes 2N scalars (lhs_0, rhs_0,
        lhs_1, rhs_1, ...) and returns pred; default: ascending by the first operand."""
        ops = self._operands(operands, "sort")
        if dimension < 0:
            dimension += ops[0].rank
        if comparator is None:
            comparator = lambda sb, a, b, *rest: sb.lt(a, b)
        params = []
        for o in ops:
            params += [Shape.scalar(o.element_type)] * 2
        comp = self._computation(comparator, params, "compare", op="sort")
        return self._add("sort", ops, {"dimensions": (int(dimension),),
                                       "is_stable": True if is_stable else None,
                                       "to_apply": comp})

    def top_k(self, operand: XlaOp, k: int, largest: bool = True) -> XlaOp:
        """(values, s32 indices) of the k largest (or smallest) entries of the last dim."""
        return self._add("topk", [operand], {"k": int(k), "largest": bool(largest)})
