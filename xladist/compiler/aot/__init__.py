"""Ahead-of-time compilation (`xladist aot`): a module's thunk list as one native driver
function in an object file, with a C header. program.py builds the object; dot.py,
conv.py and rng.py generate dot, convolution and rng-bit-generator as loops, since an
AOT object cannot call the runtime's BLAS or Python."""

from .program import AotProgram

__all__ = ["AotProgram"]
