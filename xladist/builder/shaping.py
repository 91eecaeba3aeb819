"""Shape and data-movement ops: broadcast, reshape, transpose, slices, concatenate, pad,
iota, gather/scatter, tuples."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..hlo.attrs import PaddingConfig, SliceSpec
from ..hlo.shape import Shape
from .core import BuilderError, XlaOp, _ints, as_type


class ShapingMixin:
    # ---- broadcast / reshape / transpose -------------------------------------
    def broadcast_in_dim(self, operand: XlaOp, out_dims: Sequence[int],
                         broadcast_dimensions: Sequence[int]) -> XlaOp:
        """HLO `broadcast`: operand dim i becomes result dim broadcast_dimensions[i]."""
        operand = self._coerce(operand)
        return self._add("broadcast", [operand], {"dimensions": _ints(broadcast_dimensions)},
                         declared=Shape.array(operand.element_type, _ints(out_dims)))

    def broadcast(self, operand: XlaOp, sizes: Sequence[int]) -> XlaOp:
        """XLA Broadcast: new major dimensions `sizes` in front of the operand's."""
        operand = self._coerce(operand)
        sizes = _ints(sizes)
        dims = tuple(range(len(sizes), len(sizes) + operand.rank))
        return self.broadcast_in_dim(operand, sizes + operand.dims, dims)

    def reshape(self, operand: XlaOp, new_sizes: Sequence[int],
                dimensions: Sequence[int] | None = None) -> XlaOp:
        """Row-major reshape; `dimensions` first transposes (XLA Reshape's optional order).
        One size may be -1 and is then computed from the element count."""
        operand = self._operand(operand, "reshape")
        if dimensions is not None and _ints(dimensions) != tuple(range(operand.rank)):
            operand = self.transpose(operand, dimensions)
        sizes = list(_ints(new_sizes))
        if sizes.count(-1) > 1:
            raise BuilderError(f"reshape of {operand.shape.to_text(layout=False)} to {sizes}: "
                               "only one size may be -1")
        if -1 in sizes:
            known = int(np.prod([s for s in sizes if s != -1]))
            total = operand.shape.size
            if known == 0 or total % known:
                raise BuilderError(f"reshape of {operand.shape.to_text(layout=False)} to "
                                   f"{sizes}: {total} elements do not divide into {known}")
            sizes[sizes.index(-1)] = total // known
        return self._add("reshape", [operand],
                         declared=Shape.array(operand.element_type, sizes))

    def transpose(self, operand: XlaOp, permutation: Sequence[int]) -> XlaOp:
        return self._add("transpose", [operand], {"dimensions": _ints(permutation)})

    def rev(self, operand: XlaOp, dimensions: Sequence[int]) -> XlaOp:
        """HLO `reverse` along the given dimensions."""
        return self._add("reverse", [operand], {"dimensions": _ints(dimensions)})

    reverse = rev

    # ---- slicing -------------------------------------------------------------
    def slice(self, operand: XlaOp, start_indices: Sequence[int], limit_indices: Sequence[int],
              strides: Sequence[int] | None = None) -> XlaOp:
        strides = _ints(strides) if strides is not None else (1,) * len(start_indices)
        spec = SliceSpec(tuple(zip(_ints(start_indices), _ints(limit_indices), strides)))
        return self._add("slice", [operand], {"slice": spec})

    def slice_in_dim(self, operand: XlaOp, start: int, limit: int, stride: int = 1,
                     dimno: int = 0) -> XlaOp:
        """Slice one dimension, keeping the others whole."""
        operand = self._operand(operand, "slice")
        if not 0 <= dimno < operand.rank:
            raise BuilderError(f"slice_in_dim in computation {self.name}: dimno={dimno} is out "
                               f"of range for {operand.shape.to_text(layout=False)} (rank "
                               f"{operand.rank})")
        starts = [0] * operand.rank
        limits = list(operand.dims)
        strides = [1] * operand.rank
        starts[dimno], limits[dimno], strides[dimno] = start, limit, stride
        return self.slice(operand, starts, limits, strides)

    def _index_scalars(self, indices) -> list[XlaOp]:
        """Start indices as XlaOps: Python ints take the element type of the XlaOp indices
        given with them (XLA wants one integer type for all), s32 when there are none."""
        indices = list(indices)
        like = next((i for i in indices if isinstance(i, XlaOp)), None)
        t = like.element_type if like is not None else "s32"
        return [i if isinstance(i, XlaOp) else self.constant_r0(_ints([i])[0], t)
                for i in indices]

    def dynamic_slice(self, operand: XlaOp, start_indices, slice_sizes: Sequence[int]) -> XlaOp:
        """Slice at run-time start indices (one scalar per dimension; ints allowed)."""
        starts = self._index_scalars(start_indices)
        return self._add("dynamic-slice", [operand, *starts],
                         {"dynamic_slice_sizes": _ints(slice_sizes)})

    def dynamic_update_slice(self, operand: XlaOp, update: XlaOp, start_indices) -> XlaOp:
        starts = self._index_scalars(start_indices)
        return self._add("dynamic-update-slice", [operand, update, *starts])

    def concatenate(self, operands: Sequence[XlaOp], dimension: int) -> XlaOp:
        return self._add("concatenate", list(operands), {"dimensions": (int(dimension),)})

    concat_in_dim = concatenate

    def pad(self, operand: XlaOp, padding_value, padding_config) -> XlaOp:
        """Pad with `padding_value`; padding_config is (low, high[, interior]) per dimension
        (negative low/high crop) or a PaddingConfig."""
        operand = self._operand(operand, "pad")
        value = self._coerce(padding_value, like=operand)
        if not isinstance(padding_config, PaddingConfig):
            rows = []
            for i, p in enumerate(padding_config):
                p = _ints(p)
                if len(p) not in (2, 3):
                    raise BuilderError(f"pad in computation {self.name}: padding_config entry "
                                       f"{list(p)} of dimension {i} must be (low, high) or "
                                       "(low, high, interior)")
                rows.append((p[0], p[1], p[2] if len(p) > 2 else 0))
            padding_config = PaddingConfig(tuple(rows))
        return self._add("pad", [operand, value], {"padding": padding_config})

    def iota(self, element_type, dims, iota_dimension: int = 0) -> XlaOp:
        """Values 0, 1, 2, ... along `iota_dimension` of an array of `dims` (an int = rank 1)."""
        dims = (int(dims),) if isinstance(dims, (int, np.integer)) else _ints(dims)
        return self._add("iota", [], {"iota_dimension": int(iota_dimension)},
                         declared=Shape.array(as_type(element_type), dims))

    # ---- gather / scatter -------------------------------------------------------
    def gather(self, operand: XlaOp, start_indices: XlaOp, *, offset_dims: Sequence[int],
               collapsed_slice_dims: Sequence[int], start_index_map: Sequence[int],
               index_vector_dim: int, slice_sizes: Sequence[int],
               operand_batching_dims: Sequence[int] = (),
               start_indices_batching_dims: Sequence[int] = (),
               indices_are_sorted: bool = False) -> XlaOp:
        """XLA Gather (operation semantics 'Gather'), dimension numbers as keywords."""
        attrs = {"offset_dims": _ints(offset_dims),
                 "collapsed_slice_dims": _ints(collapsed_slice_dims),
                 "start_index_map": _ints(start_index_map),
                 "operand_batching_dims": _ints(operand_batching_dims) or None,
                 "start_indices_batching_dims": _ints(start_indices_batching_dims) or None,
                 "index_vector_dim": int(index_vector_dim),
                 "slice_sizes": _ints(slice_sizes),
                 "indices_are_sorted": True if indices_are_sorted else None}
        return self._add("gather", [operand, start_indices], attrs)

    def scatter(self, operands, scatter_indices: XlaOp, updates, computation, *,
                update_window_dims: Sequence[int], inserted_window_dims: Sequence[int],
                scatter_dims_to_operand_dims: Sequence[int], index_vector_dim: int,
                input_batching_dims: Sequence[int] = (),
                scatter_indices_batching_dims: Sequence[int] = (),
                indices_are_sorted: bool = False, unique_indices: bool = False) -> XlaOp:
        """XLA Scatter. `operands`/`updates` may be lists (variadic); `computation` combines
        (current..., update...) scalars: a Computation, a callable or 'add'/'max'/...."""
        ops = self._operands(operands, "scatter")
        ups = self._operands(updates, "scatter")
        comp = self._reducer(computation, [o.element_type for o in ops], "scatter_combiner",
                             op="scatter")
        attrs = {"update_window_dims": _ints(update_window_dims),
                 "inserted_window_dims": _ints(inserted_window_dims),
                 "scatter_dims_to_operand_dims": _ints(scatter_dims_to_operand_dims),
                 "input_batching_dims": _ints(input_batching_dims) or None,
                 "scatter_indices_batching_dims": _ints(scatter_indices_batching_dims) or None,
                 "index_vector_dim": int(index_vector_dim),
                 "indices_are_sorted": True if indices_are_sorted else None,
                 "unique_indices": True if unique_indices else None,
                 "to_apply": comp}
        return self._add("scatter", [*ops, scatter_indices, *ups], attrs)

    # ---- tuples ----------------------------------------------------------------
    def tuple(self, *elements) -> XlaOp:
        """An HLO tuple; `tuple(a, b)` or `tuple([a, b])`."""
        if len(elements) == 1 and isinstance(elements[0], (list, tuple)):
            elements = tuple(elements[0])
        return self._add("tuple", [self._coerce(e) for e in elements])

    def get_tuple_element(self, tuple_op: XlaOp, index: int) -> XlaOp:
        tuple_op = self._operand(tuple_op, "get-tuple-element")
        n = len(tuple_op.shape.tuple_shapes) if tuple_op.shape.is_tuple else 0
        if isinstance(index, (int, np.integer)) and -n <= index < 0:
            index += n
        return self._add("get-tuple-element", [tuple_op], {"index": int(index)})

    def get_dimension_size(self, operand: XlaOp, dimension: int) -> XlaOp:
        return self._add("get-dimension-size", [operand], {"dimensions": (int(dimension),)})

    def set_dimension_size(self, operand: XlaOp, size: XlaOp, dimension: int) -> XlaOp:
        """Make `dimension` dynamic with `size` (an s32[] value) valid elements, bounded by
        its static size (run through hlo.dynamic_padder)."""
        return self._add("set-dimension-size", [operand, self._coerce(size)],
                         {"dimensions": (int(dimension),)})

    def dynamic_reshape(self, operand: XlaOp, sizes, shape) -> XlaOp:
        """Reshape the valid elements (row-major) into `shape` (bounds, `<=` for dynamic
        dimensions) with one s32[] size per result dimension."""
        from .core import as_shape
        return self._add("dynamic-reshape", [operand] + [self._coerce(s) for s in sizes],
                         declared=as_shape(shape))

    def bitcast(self, operand: XlaOp, shape) -> XlaOp:
        """Reinterpret the operand's buffer as `shape` (same byte size; layouts matter)."""
        from .core import as_shape
        return self._add("bitcast", [operand], declared=as_shape(shape))
