"""An XlaBuilder-style Python API that builds HLO modules (xladist.hlo.ir objects).

    from xladist.builder import XlaBuilder
    b = XlaBuilder("axpy")
    a = b.parameter(0, ("f32", []), name="a")
    x = b.parameter(1, "f32[4]", name="x")
    y = b.parameter(2, "f32[4]", name="y")
    module = b.build(a * x + y)          # the scalar `a` is broadcast implicitly
    print(module.to_text())

Element-wise binary ops apply XLA's broadcasting semantics (broadcasting.py); result
shapes come from xladist.hlo.shape_inference. Op families are mixins defined in the
sibling modules; `XlaBuilder` joins them.
"""

from __future__ import annotations

from .broadcasting import BroadcastError
from .collectives import CollectiveMixin, replica_groups
from .control import ControlMixin
from .core import BuilderCore, BuilderError, XlaOp, as_shape, as_type
from .elementwise import BINARY_OPS, UNARY_OPS, ElementwiseMixin
from .linalg import LinalgMixin, conv_dimension_numbers
from .reductions import ReductionMixin, make_window
from .shaping import ShapingMixin

__all__ = [
    "BINARY_OPS",
    "UNARY_OPS",
    "BroadcastError",
    "BuilderError",
    "XlaBuilder",
    "XlaOp",
    "as_shape",
    "as_type",
    "conv_dimension_numbers",
    "make_window",
    "replica_groups",
]


class XlaBuilder(ElementwiseMixin, ShapingMixin, ReductionMixin, LinalgMixin, ControlMixin,
                 CollectiveMixin, BuilderCore):
    """Builds one computation; `create_subbuilder` makes the computations it calls and
    `build()` returns the Module (or, for a sub-builder, its Computation)."""
