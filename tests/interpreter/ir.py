"""IR for the interpreter tests, built with xladist.builder (no tests here).

    c = Comp()
    x = c.param("f32[4]")
    y = c.op("add", "f32[4]", x, x)
    m = c.module(y)                      # entry computation with root y
    run(m, np.arange(4, dtype=np.float32))

Every instruction goes through XlaBuilder.instruction: shape inference checks the result
shape a test writes down (its layout is kept, so layout-sensitive rules see it).
`op1(opcode, out_shape, *arrays, **attrs)` runs one instruction over parameters bound to
the arrays and returns its value.

`RawComp` / `op1(..., raw=True)` build IR that shape inference refuses, for the tests of
the interpreter's own guards (an op on a type XLA does not define it for, a bitcast that
changes the buffer size, instructions out of order): nothing else may use them.
"""

from __future__ import annotations

import re

import numpy as np

from xladist.builder import XlaBuilder
from xladist.builder.core import XlaOp
from xladist.hlo.attrs import Literal
from xladist.hlo.ir import Computation, Instruction, Module
from xladist.hlo.shape import Layout, Shape, primitive_type_of_dtype
from xladist.interpreter import Evaluator

_ARRAY = re.compile(r"(\w+)\[([^\]]*)\](?:\{([\d,]*)\})?")


def S(text: str) -> Shape:
    """A shape from text: `f32[2,3]`, `f32[2,3]{0,1}`, `(f32[], s32[4])`, `token[]`."""
    text = text.strip()
    if text.startswith("("):
        inner = text[1:-1]
        parts, depth, cur = [], 0, ""
        for ch in inner:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch in "([{"
            depth -= ch in ")]}"
            cur += ch
        if cur.strip():
            parts.append(cur)
        return Shape.tuple_of(S(p) for p in parts)
    m = _ARRAY.fullmatch(text)
    if not m:
        raise ValueError(f"bad shape text {text!r}")
    ty, dims, layout = m.groups()
    if ty == "token":
        return Shape.token()
    dims = tuple(int(d) for d in dims.split(",") if d.strip())
    lay = Layout(tuple(int(d) for d in layout.split(",") if d)) if layout is not None else None
    return Shape.array(ty, dims, lay)


def shape_of(a) -> Shape:
    a = np.asarray(a)
    return Shape.array(primitive_type_of_dtype(a.dtype), a.shape)


class Comp:
    """Builds one computation with XlaBuilder; names are the builder's (`p0.1`, `add.3`)."""

    def __init__(self, name: str = "main"):
        self.b = XlaBuilder(name)
        self._params = 0
        self._mine: set[int] = set()

    def _own(self, op: XlaOp) -> Instruction:
        self._mine.add(id(op.instruction))
        return op.instruction

    def _op(self, instr: Instruction) -> XlaOp:
        if id(instr) not in self._mine:
            raise ValueError(f"{instr.name} was not made by this Comp ({self.b.name})")
        return XlaOp(self.b, instr)

    def param(self, shape) -> Instruction:
        shape = S(shape) if isinstance(shape, str) else shape
        n = self._params
        self._params += 1
        return self._own(self.b.parameter(n, shape, name=f"p{n}"))

    def const(self, value, shape=None) -> Instruction:
        value = np.asarray(value)
        shape = (S(shape) if isinstance(shape, str) else shape) or shape_of(value)
        return self._own(self.b.constant(value.astype(shape.dtype), shape.element_type))

    def op(self, opcode, shape, *operands, **attrs) -> Instruction:
        """`shape` None: the inferred one (needed where S cannot write it, e.g. `f32[<=2]`)."""
        shape = S(shape) if isinstance(shape, str) else shape
        ops = [self._op(o) for o in operands]
        return self._own(self.b.instruction(opcode, ops, shape, **attrs))

    def done(self, root: Instruction) -> Computation:
        return self.b.build_computation(self._op(root))

    def module(self, root: Instruction, *called: Computation, name: str = "test") -> Module:
        m = Module(name)
        for c in called:
            m.add_computation(c)
        m.add_computation(self.done(root), entry=True)
        return m


class RawComp(Comp):
    """Builds one computation from Instruction objects, without shape inference (see the
    module docstring: only for IR the builder refuses)."""

    def __init__(self, name: str = "main"):
        self.comp = Computation(name)
        self._n = 0
        self._params = 0

    def _name(self, opcode):
        self._n += 1
        return f"{opcode}.{self._n}"

    def param(self, shape) -> Instruction:
        shape = S(shape) if isinstance(shape, str) else shape
        i = Instruction(f"p{self._params}", "parameter", shape,
                        parameter_number=self._params)
        self._params += 1
        return self.comp.add(i)

    def const(self, value, shape=None) -> Instruction:
        value = np.asarray(value)
        shape = (S(shape) if isinstance(shape, str) else shape) or shape_of(value)
        value = value.astype(shape.dtype)
        return self.comp.add(Instruction(self._name("constant"), "constant", shape,
                                         literal=Literal(shape, value)))

    def op(self, opcode, shape, *operands, **attrs) -> Instruction:
        shape = S(shape) if isinstance(shape, str) else shape
        return self.comp.add(Instruction(self._name(opcode), opcode, shape, operands, attrs))

    def done(self, root: Instruction) -> Computation:
        self.comp.root = root
        return self.comp


def run(module, *args, device=None):
    return Evaluator(module, device).run(list(args))


def op1(opcode, out_shape, *arrays, raw=False, **attrs):
    """Evaluate `opcode` once over parameters bound to `arrays` (`raw`: see RawComp)."""
    c = RawComp() if raw else Comp()
    params = [c.param(shape_of(a)) for a in arrays]
    root = c.op(opcode, out_shape, *params, **attrs)
    return run(c.module(root), *[np.asarray(a) for a in arrays])


def scalar_binary(opcode: str, dtype: str, name: str = "f") -> Computation:
    """`(a, b) -> opcode(a, b)` on scalars of `dtype` (reducers, combiners)."""
    c = Comp(name)
    a, b = c.param(f"{dtype}[]"), c.param(f"{dtype}[]")
    return c.done(c.op(opcode, f"{dtype}[]", a, b))


def bits(a, width=None):
    """Bit patterns of a float array, for exact comparisons (sign of zero, NaN payload)."""
    a = np.asarray(a)
    return a.view(np.dtype(f"uint{width or a.dtype.itemsize * 8}"))
