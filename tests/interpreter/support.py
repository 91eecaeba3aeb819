"""Shared helpers for the numerics tests (no tests here).

- `StandInEvaluator`: a tiny evaluator for the scalar computations that reducers,
  comparators and scatter combiners use, with the two methods the interpreter's
  Evaluator provides (`call`, `call_vectorized`). It is deliberately independent of
  xladist's element-wise rules so the heavy ops are tested on their own.
- scalar computations (reducers, comparators) and one instruction over parameters,
  built with xladist.builder (shape inference checks every result shape written here).
- `run(instr, *args)`: evaluates one instruction through the registered rule.
"""

from __future__ import annotations

import numpy as np

from xladist.builder import XlaBuilder
from xladist.hlo.ir import Computation, Instruction
from xladist.hlo.shape import Shape, primitive_type_of_dtype

# Importing the families registers them.
from xladist.interpreter import (  # noqa: F401
    batchnorm,
    convolution,
    dot,
    fft_linalg,
    gather_scatter,
    reduce,
    registry,
    rng,
    sort,
)


def _total_order_key(x: np.ndarray) -> np.ndarray:
    """Floats as signed integers ordered like XLA's TOTALORDER comparison."""
    x = np.asarray(x)
    if x.dtype.kind != "f" and x.dtype.name not in ("bfloat16", "float16"):
        return x
    bits = x.dtype.itemsize * 8
    i = x.view(np.dtype(f"int{bits}")).astype(np.int64)
    return np.where(i < 0, -(i & ((1 << (bits - 1)) - 1)) - 1, i)


_CMP = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
        "GT": np.greater, "GE": np.greater_equal}

_BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
           "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum,
           "and": np.logical_and, "or": np.logical_or}


class StandInEvaluator:
    """Evaluates scalar computations element-wise over whole arrays."""

    def __init__(self):
        self.calls = 0

    def call(self, computation, args):
        out = self.call_vectorized(computation, [np.asarray(a) for a in args])
        return out

    def call_vectorized(self, computation, arrays):
        self.calls += 1
        env = {}
        with np.errstate(all="ignore"):
            for ins in computation.instructions:
                env[ins] = self._eval(ins, env, arrays)
        return env[computation.root]

    def fold_vectorized(self, computation, acc, rows):
        """The Evaluator's left fold, one call per row (no fast path to model)."""
        for row in rows:
            out = self.call_vectorized(computation, list(acc) + list(row))
            acc = list(out) if isinstance(out, tuple) else [out]
        return list(acc)

    def _eval(self, ins, env, arrays):
        ops = [env[o] for o in ins.operands]
        op = ins.opcode
        dt = ins.shape.dtype if ins.shape.is_array else None
        if op == "parameter":
            return arrays[ins.parameter_number]
        if op == "constant":
            return ins.literal.value
        if op in _BINARY:
            if op in ("and", "or") and dt != np.bool_:
                fn = np.bitwise_and if op == "and" else np.bitwise_or
                return fn(*ops).astype(dt)
            return _BINARY[op](*ops).astype(dt)
        if op == "compare":
            a, b = ops
            if ins.attrs.get("type") == "TOTALORDER":
                a, b = _total_order_key(a), _total_order_key(b)
            return _CMP[ins.attrs["direction"]](a, b)
        if op == "select":
            return np.where(*ops).astype(dt)
        if op == "negate":
            return np.negative(ops[0]).astype(dt)
        if op == "not":
            return np.logical_not(ops[0]) if dt == np.bool_ else np.invert(ops[0])
        if op == "convert":
            return ops[0].astype(dt)
        if op == "tuple":
            return tuple(ops)
        if op == "get-tuple-element":
            return ops[0][ins.attrs["index"]]
        raise NotImplementedError(f"stand-in evaluator has no {op}")


# ---- building computations and instructions -----------------------------------------

def S(type_name: str, *dims) -> Shape:
    return Shape.array(type_name, dims)


def type_name(dtype) -> str:
    return primitive_type_of_dtype(dtype).name


def binary(op: str, t: str, n: int = 1) -> Computation:
    """(a0..an-1, b0..bn-1) -> op applied pairwise; a tuple for n > 1."""
    b = XlaBuilder(f"{op}_{t}" if n == 1 else f"{op}_{t}_x{n}")
    ps = [b.parameter(i, S(t), name=f"p{i}") for i in range(2 * n)]
    outs = [b.instruction(op, [ps[i], ps[n + i]]) for i in range(n)]
    return b.build_computation(outs[0] if n == 1 else b.tuple(*outs))


def comparator(direction: str, types: list[str], key: int = 0,
               total_order: bool = False) -> Computation:
    """A sort comparator over len(types) operands comparing operand `key`."""
    b = XlaBuilder(f"cmp_{direction}")
    ps = [b.parameter(i, S(types[i // 2]), name=f"p{i}") for i in range(2 * len(types))]
    lt = b.instruction("compare", [ps[2 * key], ps[2 * key + 1]], direction=direction,
                       type="TOTALORDER" if total_order else None)
    return b.build_computation(lt)


def argmax_reducer(t: str, it: str = "s32") -> Computation:
    """(v0, i0, v1, i1) in XLA's variadic order (acc values..., x values...):
    params (a_v, a_i, b_v, b_i) -> larger value, lower index on ties."""
    b = XlaBuilder("argmax")
    av, ai = b.parameter(0, S(t), name="av"), b.parameter(1, S(it), name="ai")
    bv, bi = b.parameter(2, S(t), name="bv"), b.parameter(3, S(it), name="bi")
    gt = b.instruction("compare", [av, bv], direction="GT")
    eq = b.instruction("compare", [av, bv], direction="EQ")
    lt_i = b.instruction("compare", [ai, bi], direction="LT")
    pick = b.instruction("or", [gt, b.instruction("and", [eq, lt_i])])
    return b.build_computation(b.tuple(b.instruction("select", [pick, av, bv]),
                                       b.instruction("select", [pick, ai, bi])))


def instr(opcode: str, shape: Shape, operand_shapes, **attrs) -> Instruction:
    """One instruction over parameters of `operand_shapes`, built with XlaBuilder: shape
    inference checks `shape` (element type and dims; its layout is kept)."""
    b = XlaBuilder("entry")
    ops = [b.parameter(i, s, name=f"p{i}") for i, s in enumerate(operand_shapes)]
    op = b.instruction(opcode, ops, shape, **attrs)
    b.build_computation(op)
    return op.instruction


def run(ins: Instruction, *args, ev=None):
    ev = ev or StandInEvaluator()
    return registry.EVAL_RULES[ins.opcode](ins, [np.asarray(a) for a in args], ev)


def shape_of(a: np.ndarray) -> Shape:
    return Shape.array(type_name(a.dtype), a.shape)
