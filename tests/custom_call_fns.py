"""Custom-call targets a test registers in its own process, at the top level of a module the
ranks can import (tests/runtime/test_forwarded_calls.py): ranks that xladist.run or
xladist.Cluster start get them forwarded by module and name.

A target's function takes (instr, args) and returns a value of instr.shape."""

import numpy as np


def affine(instr, args):
    """2x + 1, in the operand's element type."""
    x = args[0]
    return (x * 2 + 1).astype(x.dtype)


class Targets:
    """A method of a top-level class is importable by its qualified name too."""

    @staticmethod
    def negate(instr, args):
        return np.negative(args[0])


def scalar_add(instr, args):
    """a + b in the operands' element type: a reducer's combiner as a target."""
    return (args[0] + args[1]).astype(args[0].dtype)
