"""Primitive types, layouts and shapes of XLA HLO (reference: docs/reference/hlo-text-format.md section 3).

A `Shape` is immutable and hashable. Array shapes carry an optional `Layout`
(minor_to_major plus the layout extras XLA prints: tiles, memory space, ...);
two shapes are `compatible` when they agree on everything but layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class PrimitiveType:
    """One row of XLA's PrimitiveType enum.

    kind is one of: pred, sint, uint, float, complex, token, opaque, tuple.
    """

    name: str
    kind: str
    bits: int
    np_name: str | None  # numpy / ml_dtypes dtype name, None for token/opaque/tuple

    def __reduce__(self):
        # One object per type: code compares them with `is` (Shape.is_tuple), so a copy
        # (a module unpickled by hlo/packed.py) must come back as the same object.
        return (_type_named, (self.name,))

    @cached_property
    def dtype(self) -> np.dtype:
        if self.np_name is None:
            raise TypeError(f"{self.name} has no numpy dtype")
        try:
            return np.dtype(self.np_name)
        except TypeError:
            return np.dtype(getattr(ml_dtypes, self.np_name))

    @property
    def is_array_type(self) -> bool:
        return self.kind not in ("token", "opaque", "tuple")

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("sint", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind in ("sint", "float", "complex")

    @property
    def is_floating_or_complex(self) -> bool:
        return self.kind in ("float", "complex")

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"PrimitiveType({self.name})"


# One row per type the text format knows; order follows xla_data.proto loosely.
_TYPE_ROWS = [
    ("pred", "pred", 8, "bool"),
    ("s1", "sint", 1, "int1"), ("s2", "sint", 2, "int2"), ("s4", "sint", 4, "int4"),
    ("s8", "sint", 8, "int8"), ("s16", "sint", 16, "int16"),
    ("s32", "sint", 32, "int32"), ("s64", "sint", 64, "int64"),
    ("u1", "uint", 1, "uint1"), ("u2", "uint", 2, "uint2"), ("u4", "uint", 4, "uint4"),
    ("u8", "uint", 8, "uint8"), ("u16", "uint", 16, "uint16"),
    ("u32", "uint", 32, "uint32"), ("u64", "uint", 64, "uint64"),
    ("f16", "float", 16, "float16"), ("bf16", "float", 16, "bfloat16"),
    ("f32", "float", 32, "float32"), ("f64", "float", 64, "float64"),
    ("f8e5m2", "float", 8, "float8_e5m2"), ("f8e4m3", "float", 8, "float8_e4m3"),
    ("f8e4m3fn", "float", 8, "float8_e4m3fn"),
    ("f8e4m3b11fnuz", "float", 8, "float8_e4m3b11fnuz"),
    ("f8e3m4", "float", 8, "float8_e3m4"), ("f8e5m2fnuz", "float", 8, "float8_e5m2fnuz"),
    ("f8e4m3fnuz", "float", 8, "float8_e4m3fnuz"), ("f8e8m0fnu", "float", 8, "float8_e8m0fnu"),
    ("f4e2m1fn", "float", 4, "float4_e2m1fn"),
    ("c64", "complex", 64, "complex64"), ("c128", "complex", 128, "complex128"),
    ("token", "token", 0, None), ("opaque", "opaque", 0, None),
]

PRIMITIVE_TYPES: dict[str, PrimitiveType] = {
    name: PrimitiveType(name, kind, bits, np_name) for name, kind, bits, np_name in _TYPE_ROWS
}
TUPLE = PrimitiveType("tuple", "tuple", 0, None)


def _type_named(name: str) -> PrimitiveType:
    return TUPLE if name == "tuple" else PRIMITIVE_TYPES[name]


def primitive_type(name: str) -> PrimitiveType:
    try:
        return PRIMITIVE_TYPES[name]
    except KeyError:
        raise ValueError(f"unknown primitive type {name!r}") from None


def primitive_type_of_dtype(dtype) -> PrimitiveType:
    """The HLO element type of a numpy dtype (bool -> pred, bfloat16 -> bf16, ...)."""
    dtype = np.dtype(dtype)
    for t in PRIMITIVE_TYPES.values():
        if t.np_name is not None and t.dtype == dtype:
            return t
    raise ValueError(f"numpy dtype {dtype} has no HLO element type")


@dataclass(frozen=True)
class Layout:
    """A dense layout: minor_to_major plus the extras XLA prints after ':'.

    The extras never change logical values on this runtime; they are kept so the
    printer reproduces them. Printed order: T, L, #, *, E, S, SC, P, M (and D first).
    """

    minor_to_major: tuple[int, ...]
    dim_level_types: str = ""            # raw text of D(...) without 'D(' ')', old printers
    tiles: tuple[tuple[int, ...], ...] = ()  # -1 encodes '*' (combined dimension)
    tail_padding_alignment: int = 1
    index_type: str = ""                 # primitive type name of #(...)
    pointer_type: str = ""               # primitive type name of *(...)
    element_size_in_bits: int = 0
    memory_space: int = 0
    split_configs: tuple[tuple[int, tuple[int, ...]], ...] = ()
    physical_shape: "Shape | None" = None
    dynamic_shape_metadata_prefix_bytes: int = 0

    @property
    def has_extras(self) -> bool:
        return bool(
            self.dim_level_types or self.tiles or self.tail_padding_alignment != 1
            or self.index_type or self.pointer_type or self.element_size_in_bits
            or self.memory_space or self.split_configs or self.physical_shape is not None
            or self.dynamic_shape_metadata_prefix_bytes
        )

    @property
    def major_to_minor(self) -> tuple[int, ...]:
        return tuple(reversed(self.minor_to_major))

    def is_default(self) -> bool:
        n = len(self.minor_to_major)
        return self.minor_to_major == tuple(range(n - 1, -1, -1)) and not self.has_extras

    def to_text(self) -> str:
        body = ",".join(str(d) for d in self.minor_to_major)
        extras = []
        if self.dim_level_types:
            extras.append(f"D({self.dim_level_types})")
        if self.tiles:
            extras.append("T" + "".join(
                "(" + ",".join("*" if d == -1 else str(d) for d in tile) + ")"
                for tile in self.tiles))
        if self.tail_padding_alignment != 1:
            extras.append(f"L({self.tail_padding_alignment})")
        if self.index_type:
            extras.append(f"#({self.index_type})")
        if self.pointer_type:
            extras.append(f"*({self.pointer_type})")
        if self.element_size_in_bits:
            extras.append(f"E({self.element_size_in_bits})")
        if self.memory_space:
            extras.append(f"S({self.memory_space})")
        if self.split_configs:
            extras.append("SC" + "".join(
                f"({dim}:" + ",".join(str(i) for i in idx) + ")"
                for dim, idx in self.split_configs))
        if self.physical_shape is not None:
            extras.append(f"P({self.physical_shape.to_text()})")
        if self.dynamic_shape_metadata_prefix_bytes:
            extras.append(f"M({self.dynamic_shape_metadata_prefix_bytes})")
        if extras:
            body += ":" + "".join(extras)
        return "{" + body + "}"


def default_layout(rank: int) -> Layout:
    return Layout(tuple(range(rank - 1, -1, -1)))


UNBOUNDED = -1  # dims value of a '?' dimension


@dataclass(frozen=True)
class Shape:
    """An HLO shape: an array (element_type, dims, layout), a tuple, a token or opaque.

    `dynamic[i]` marks a bounded dynamic dimension (`<=N`, dims[i] holds the bound);
    an unbounded dimension (`?`) has dims[i] == UNBOUNDED and dynamic[i] True.
    `buffer` marks XLA's newer `b(...)` buffer shape wrapping one array shape.
    """

    element_type: PrimitiveType
    dims: tuple[int, ...] = ()
    layout: Layout | None = None
    dynamic: tuple[bool, ...] = ()
    tuple_shapes: tuple["Shape", ...] = ()
    buffer: bool = False

    # ---- construction -------------------------------------------------
    @staticmethod
    def array(element_type: str | PrimitiveType, dims=(), layout: Layout | tuple | None = None,
              dynamic: tuple[bool, ...] | None = None) -> "Shape":
        t = primitive_type(element_type) if isinstance(element_type, str) else element_type
        dims = tuple(int(d) for d in dims)
        if isinstance(layout, tuple):
            layout = Layout(layout)
        dyn = tuple(dynamic) if dynamic is not None else (False,) * len(dims)
        if not any(dyn):
            dyn = (False,) * len(dims)
        return Shape(t, dims, layout, dyn)

    @staticmethod
    def scalar(element_type: str | PrimitiveType) -> "Shape":
        return Shape.array(element_type, ())

    @staticmethod
    def tuple_of(shapes) -> "Shape":
        return Shape(TUPLE, tuple_shapes=tuple(shapes))

    @staticmethod
    def token() -> "Shape":
        return Shape(PRIMITIVE_TYPES["token"])

    @staticmethod
    def opaque() -> "Shape":
        return Shape(PRIMITIVE_TYPES["opaque"])

    # ---- queries --------------------------------------------------------
    @property
    def is_tuple(self) -> bool:
        return self.element_type is TUPLE

    @property
    def is_token(self) -> bool:
        return self.element_type.kind == "token"

    @property
    def is_opaque(self) -> bool:
        return self.element_type.kind == "opaque"

    @property
    def is_array(self) -> bool:
        return self.element_type.is_array_type

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def size(self) -> int:
        """Number of elements of an array shape."""
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def dtype(self) -> np.dtype:
        return self.element_type.dtype

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_dynamic(self) -> bool:
        return any(self.dynamic)

    def effective_layout(self) -> Layout:
        """The layout, or the default descending one when none was given."""
        return self.layout if self.layout is not None else default_layout(self.rank)

    def minor_to_major(self) -> tuple[int, ...]:
        return self.effective_layout().minor_to_major

    def has_default_layout(self) -> bool:
        return self.layout is None or self.layout.minor_to_major == tuple(
            range(self.rank - 1, -1, -1))

    def leaves(self, index: tuple[int, ...] = ()) -> Iterator[tuple[tuple[int, ...], "Shape"]]:
        """(shape_index, leaf shape) pairs in depth-first order; non-tuples yield themselves."""
        if self.is_tuple:
            for i, s in enumerate(self.tuple_shapes):
                yield from s.leaves(index + (i,))
        else:
            yield index, self

    def subshape(self, index) -> "Shape":
        s = self
        for i in index:
            if not s.is_tuple or not 0 <= i < len(s.tuple_shapes):
                raise IndexError(f"shape index {tuple(index)} is not valid for {self}")
            s = s.tuple_shapes[i]
        return s

    # ---- comparison -----------------------------------------------------
    def compatible(self, other: "Shape", ignore_dynamic: bool = False) -> bool:
        """Equal ignoring layouts (and the buffer marker); dynamic-ness must match unless
        ignore_dynamic (XLA's ShapeUtil::Compatible, which the verifier uses, ignores it)."""
        if self.element_type != other.element_type:
            return False
        if self.is_tuple:
            return len(self.tuple_shapes) == len(other.tuple_shapes) and all(
                a.compatible(b, ignore_dynamic)
                for a, b in zip(self.tuple_shapes, other.tuple_shapes))
        return self.dims == other.dims and (ignore_dynamic or self.dynamic == other.dynamic)

    def static(self) -> "Shape":
        """The same shape with every bounded dynamic dimension made static at its bound."""
        if self.is_tuple:
            return Shape(TUPLE, tuple_shapes=tuple(s.static() for s in self.tuple_shapes))
        if not self.is_dynamic:
            return self
        return Shape(self.element_type, self.dims, self.layout, (False,) * len(self.dims),
                     (), self.buffer)

    @property
    def has_dynamic(self) -> bool:
        """Whether any array leaf has a dynamic dimension."""
        return any(s.is_dynamic for _, s in self.leaves())

    def same_dims(self, other: "Shape") -> bool:
        """Same dimensions (array shapes), element type ignored."""
        return self.dims == other.dims

    # ---- derivation ------------------------------------------------------
    def with_layout(self, layout: Layout | tuple | None) -> "Shape":
        if isinstance(layout, tuple):
            layout = Layout(layout)
        return Shape(self.element_type, self.dims, layout, self.dynamic, self.tuple_shapes,
                     self.buffer)

    def with_default_layouts(self) -> "Shape":
        """The same shape with every array given the default layout when it has none."""
        if self.is_tuple:
            return Shape.tuple_of(s.with_default_layouts() for s in self.tuple_shapes)
        if self.is_array and self.layout is None and self.rank > 0:
            return self.with_layout(default_layout(self.rank))
        return self

    def without_layout(self) -> "Shape":
        if self.is_tuple:
            return Shape.tuple_of(s.without_layout() for s in self.tuple_shapes)
        return Shape(self.element_type, self.dims, None, self.dynamic, (), self.buffer)

    def with_element_type(self, element_type: str | PrimitiveType) -> "Shape":
        t = primitive_type(element_type) if isinstance(element_type, str) else element_type
        return Shape(t, self.dims, self.layout, self.dynamic, self.tuple_shapes, self.buffer)

    def with_dims(self, dims, layout: Layout | None = None) -> "Shape":
        dims = tuple(int(d) for d in dims)
        return Shape(self.element_type, dims, layout, (False,) * len(dims))

    # ---- text -----------------------------------------------------------
    def to_text(self, layout: bool = True) -> str:
        """XLA's text form: `f32[2,3]{1,0}`, `(f32[], s32[4]{0})`, `token[]`.

        With layout=False (computation signatures) layouts are left out.
        """
        if self.is_tuple:
            parts = []
            for i, s in enumerate(self.tuple_shapes):
                prefix = f"/*index={i}*/" if i and i % 5 == 0 else ""
                parts.append(prefix + s.to_text(layout))
            return "(" + ", ".join(parts) + ")"
        dims = []
        for d, dyn in zip(self.dims, self.dynamic):
            if d == UNBOUNDED:
                dims.append("?")
            elif dyn:
                dims.append(f"<={d}")
            else:
                dims.append(str(d))
        text = f"{self.element_type.name}[{','.join(dims)}]"
        if layout and self.layout is not None and self.is_array:
            if self.rank > 0 or self.layout.has_extras:
                text += self.layout.to_text()
        if self.buffer:
            text = f"b({text})"
        return text

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"Shape({self.to_text()})"
