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


def loaded_modules(instr, args):
    """How many modules the cluster rank running it holds loaded (cluster_rank._Loaded), as
    f32[]: tests/runtime/test_cluster.py's count of handles dropped by their user."""
    import gc
    # (the rank runs cluster_rank as __main__: its class is not the module's import)
    return np.array(sum(type(o).__name__ == "_Loaded" and type(o).__module__ in (
        "__main__", "xladist.runtime.cluster_rank") for o in gc.get_objects()), np.float32)
