"""Feed items: what the host hands an infeed and what an outfeed hands the host.

An item is the data part of one infeed or outfeed (docs/reference/collective-semantics.md E.21-22):
- an array leaf is a numpy array of *logical* values (as everywhere in the interpreter;
  the infeed's layout decides where the bytes sit on the device), or a `bytes`-like
  buffer holding the leaf in the layout's memory order (XLA's host-buffer contract:
  its size must be exactly the leaf's byte size);
- a tuple-shaped infeed takes a tuple (or list) with one leaf per element.
The ml_dtypes leaves may also be given as their npz encoding (xladist/io.py decode: bf16 as
uint16 bit patterns, f8 / f4 / s4 / u4 ... as uint8, one element per byte), which is how an
npz --outfeed file holds them, so items round-trip.
No casting: the element type and dims must match the infeed's shape exactly, and the
error says what was expected and what was given.

A "tree" describes an item's structure for files and the wire: None for an array leaf,
"b" for a raw byte buffer, a list of trees for a tuple.
"""

from __future__ import annotations

import numpy as np

from xladist.hlo.shape import Shape, primitive_type_of_dtype
from xladist.io import decode

RAW = (bytes, bytearray, memoryview)


class ItemMismatch(ValueError):
    """An item that does not fit the infeed's shape; the message says expected vs given."""


def type_text(a) -> str:
    """An item (or part of one) in HLO shape notation: f32[4,3], (f32[4], s32[]), bytes[12]."""
    if isinstance(a, (tuple, list)):
        return "(" + ", ".join(type_text(v) for v in a) + ")"
    if isinstance(a, RAW):
        return f"bytes[{memoryview(a).nbytes}]"
    if isinstance(a, (np.ndarray, np.generic)):
        try:
            name = primitive_type_of_dtype(a.dtype).name
        except ValueError:
            name = str(a.dtype)
        return f"{name}[{','.join(str(d) for d in np.shape(a))}]"
    return f"a {type(a).__name__}"


def shape_text(shape: Shape) -> str:
    """A shape as errors print it: layouts only where they are not the default."""
    if shape.is_tuple:
        return "(" + ", ".join(shape_text(s) for s in shape.tuple_shapes) + ")"
    return shape.to_text(layout=shape.is_array and not shape.has_default_layout())


def is_empty_tuple(shape: Shape) -> bool:
    return shape.is_tuple and not shape.tuple_shapes


def conform(item, shape: Shape):
    """`item` as an interpreter value of `shape`, or ItemMismatch naming what differs."""
    try:
        return _conform(item, shape, ())
    except ItemMismatch as e:
        detail = f" ({e})" if str(e) else ""
        raise ItemMismatch(f"expected {shape_text(shape)}, given {type_text(item)}{detail}") \
            from None


def _mismatch(path, what: str) -> ItemMismatch:
    where = f"element {'.'.join(str(i) for i in path)}: " if path else ""
    return ItemMismatch(where + what)


def _conform(item, shape: Shape, path):
    if shape.is_tuple:
        n = len(shape.tuple_shapes)
        if not isinstance(item, (tuple, list)):
            raise _mismatch(path, f"a tuple of {n} is expected, not an array")
        if len(item) != n:
            raise _mismatch(path, f"{len(item)} elements given, {n} expected")
        return tuple(_conform(v, s, path + (i,))
                     for i, (v, s) in enumerate(zip(item, shape.tuple_shapes)))
    if isinstance(item, (tuple, list)):
        raise _mismatch(path, "an array is expected, not a tuple")
    if isinstance(item, RAW):
        buf = memoryview(item).cast("B")
        if buf.nbytes != shape.nbytes:
            raise _mismatch(path, f"a raw buffer must hold the {shape.nbytes} bytes of "
                                  f"{shape_text(shape)}, it holds {buf.nbytes}")
        from xladist.semantics.layout import from_bytes
        return from_bytes(buf, shape)
    if not isinstance(item, (np.ndarray, np.generic)):
        raise _mismatch(path, f"a numpy array is expected, not {type(item).__name__}; "
                              "convert it explicitly")
    a = decode(np.asarray(item), shape)  # ml_dtypes bit patterns, the npz encoding
    if a.dtype != shape.dtype or a.shape != tuple(shape.dims):
        if not path:
            raise ItemMismatch("")
        raise _mismatch(path, f"expected {shape_text(shape)}, given {type_text(a)}")
    return a


def tree_of(item):
    """(tree, leaves) of an item; leaves are arrays (raw buffers become uint8 arrays)."""
    if isinstance(item, (tuple, list)):
        trees, leaves = [], []
        for v in item:
            t, ls = tree_of(v)
            trees.append(t)
            leaves.extend(ls)
        return trees, leaves
    if isinstance(item, RAW):
        return "b", [np.frombuffer(memoryview(item).cast("B"), np.uint8)]
    return None, [np.asarray(item)]


def from_tree(tree, leaves):
    """Inverse of tree_of: the item for `tree` built from an iterator of leaves."""
    leaves = iter(leaves)

    def build(t):
        if isinstance(t, list):
            return tuple(build(s) for s in t)
        leaf = next(leaves)
        return leaf.tobytes() if t == "b" else leaf
    return build(tree)


def copy_item(item):
    """A private copy of an item, so a producer that reuses its buffers cannot change an
    item that is already queued (XLA copies host buffers at transfer time too)."""
    if isinstance(item, (tuple, list)):
        return tuple(copy_item(v) for v in item)
    if isinstance(item, RAW):
        return bytes(item)
    if isinstance(item, np.ndarray):
        return np.array(item, copy=True, order="K")
    return item


def owned(value):
    """An outfeed value as arrays the host may keep (backends may pass views of buffers
    they reuse)."""
    if isinstance(value, tuple):
        return tuple(owned(v) for v in value)
    return np.array(value, copy=True)
