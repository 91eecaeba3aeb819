"""Library thunks: operations where a library is the right tool, as XLA:CPU calls
Eigen/oneDNN, registered by opcode in LIBRARY_THUNKS.

core.py  the table, dot, convolution, fft, linear algebra, topk, rng, batch-norm,
         custom calls
dot.py   ragged-dot and scaled-dot
rng.py   rng-bit-generator (bit-exact ThreeFry and Philox)
"""

from . import dot, rng  # noqa: F401  (register ragged-dot, scaled-dot, rng-bit-generator)
from .core import (
    LIBRARY_THUNKS,
    UNSUPPORTED,
    CustomCallThunk,
    DotThunk,
    custom_call_target,
    dot_into,
    library,
)

__all__ = ["LIBRARY_THUNKS", "UNSUPPORTED", "CustomCallThunk", "DotThunk", "custom_call_target",
           "dot_into", "library"]
