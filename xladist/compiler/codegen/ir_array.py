"""Indices and addressing of arrays in their physical layout.

A buffer is the bytes of an array in its layout's minor-to-major order, so the
element at multi-index i sits at sum(i[d] * stride[d]) with strides derived from
the layout. An `Index` names one element of an array shape; it can carry the
*linear* physical position too, which is valid for every array with the same
dims and layout: element-wise kernels then address all operands with one
induction variable and LLVM vectorizes the loop (XLA's IrArray::Index does the same).
"""

from __future__ import annotations

from llvmlite import ir

from ...hlo.shape import Shape
from .types import I64, load_element, storage_type, store_element


def physical_strides(dims, minor_to_major) -> list[int]:
    """Element strides per logical dimension for a dense layout."""
    strides = [0] * len(dims)
    step = 1
    for d in minor_to_major:
        strides[d] = step
        step *= dims[d]
    return strides


def layout_of(shape: Shape) -> tuple[int, ...]:
    return tuple(shape.minor_to_major()) if shape.rank else ()


def c64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


class Index:
    """One element of an array of `dims`.

    `multi` (one i64 per dimension) may be None when only the linear position is
    known; it is then computed on first use (div/mod by constants) and the access
    is recorded in `Index.multi_used`, which lets a kernel choose nested loops.
    """

    def __init__(self, builder: ir.IRBuilder, dims, multi=None, linear=None, layout=None):
        self.b = builder
        self.dims = tuple(dims)
        self._multi = list(multi) if multi is not None else None
        self.linear = linear
        self.layout = tuple(layout) if layout is not None else None
        self.tracker = None  # set by the kernel builder to observe delinearization

    @staticmethod
    def scalar(builder) -> Index:
        return Index(builder, (), [], c64(0), ())

    @property
    def multi(self) -> list[ir.Value]:
        if self._multi is None:
            if self.tracker is not None:
                self.tracker.multi_used = True
            self._multi = delinearize(self.b, self.linear, self.dims, self.layout)
        return self._multi

    def linear_for(self, shape: Shape):
        """The physical offset into an array of `shape` if this index's linear is valid."""
        if self.linear is None:
            return None
        if shape.dims == self.dims and (shape.rank <= 1 or layout_of(shape) == self.layout):
            return self.linear
        if shape.size == 1:
            return c64(0)
        return None

    def derive(self, dims, multi) -> Index:
        """A new index (of another shape) computed from this one; shares the tracker."""
        out = Index(self.b, dims, multi)
        out.tracker = self.tracker
        return out

    def with_linear(self, dims, linear, layout) -> Index:
        out = Index(self.b, dims, None, linear, layout)
        out.tracker = self.tracker
        return out


def delinearize(b: ir.IRBuilder, linear, dims, minor_to_major) -> list[ir.Value]:
    multi: list = [None] * len(dims)
    rest = linear
    order = list(minor_to_major)
    for k, d in enumerate(order):
        if dims[d] == 1:
            multi[d] = c64(0)
            continue
        if k == len(order) - 1 or all(dims[e] == 1 for e in order[k + 1:]):
            multi[d] = rest
            rest = None
            for e in order[k + 1:]:
                multi[e] = c64(0)
            break
        multi[d] = b.urem(rest, c64(dims[d]))
        rest = b.udiv(rest, c64(dims[d]))
    return [m if m is not None else c64(0) for m in multi]


def linearize(b: ir.IRBuilder, multi, dims, minor_to_major) -> ir.Value:
    """Physical offset of a multi-index."""
    strides = physical_strides(dims, minor_to_major)
    offset = None
    for d, s in enumerate(strides):
        if dims[d] == 1:
            continue
        term = multi[d] if s == 1 else b.mul(multi[d], c64(s))
        offset = term if offset is None else b.add(offset, term)
    return offset if offset is not None else c64(0)


def row_major_linear(b, multi, dims) -> ir.Value:
    return linearize(b, multi, dims, tuple(range(len(dims) - 1, -1, -1)))


def element_offset(b: ir.IRBuilder, shape: Shape, index: Index) -> ir.Value:
    lin = index.linear_for(shape)
    if lin is not None:
        return lin
    return linearize(b, index.multi, shape.dims, layout_of(shape))


def element_pointer(b: ir.IRBuilder, base: ir.Value, shape: Shape, index: Index) -> ir.Value:
    off = element_offset(b, shape, index)
    return b.gep(base, [off], inbounds=True, source_etype=storage_type(shape.element_type))


def read(b: ir.IRBuilder, base: ir.Value, shape: Shape, index: Index) -> ir.Value:
    return load_element(b, shape.element_type, element_pointer(b, base, shape, index))


def write(b: ir.IRBuilder, base: ir.Value, shape: Shape, index: Index, value) -> None:
    store_element(b, shape.element_type, value, element_pointer(b, base, shape, index))
