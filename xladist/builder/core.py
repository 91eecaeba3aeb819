"""The builder's core: XlaOp values, instruction creation, sub-computations, module assembly.

Op families live in sibling modules as mixins of XlaBuilder (elementwise.py, shaping.py,
reductions.py, linalg.py, control.py, collectives.py); everything they create goes through
`XlaBuilder._add`, which asks shape inference (xladist.hlo.shape_inference.infer_shape)
for the result shape, names the instruction `<base>.<id>` with one id counter per module
(as XLA's builder does) and gives array shapes their default layout.
"""

from __future__ import annotations

import inspect
import operator
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from ..hlo.attrs import Literal
from ..hlo.ir import Computation, Instruction, Module
from ..hlo.lexer import is_identifier, is_reserved_word
from ..hlo.shape import PrimitiveType, Shape, primitive_type, primitive_type_of_dtype
from ..semantics.dtypes import int_limits

if TYPE_CHECKING:
    from . import XlaBuilder


class BuilderError(ValueError):
    """Misuse of the builder: ops from another builder, a missing root, a reused builder..."""


ShapeLike = Any  # Shape | ("f32", [2, 3]) | "f32[2,3]" | list of ShapeLike (a tuple shape)

_SHAPE_TEXT = re.compile(r"^\s*([a-z][a-z0-9]*)\[([0-9,<=\s]*)\]\s*$")


def as_shape(spec: ShapeLike) -> Shape:
    """A Shape from a Shape, ("f32", [2, 3]), "f32[2,3]", or a list of those (a tuple)."""
    if isinstance(spec, Shape):
        return spec
    if isinstance(spec, str):
        m = _SHAPE_TEXT.match(spec)
        if not m:
            raise BuilderError(f"cannot read shape {spec!r}; write it like 'f32[2,3]' or "
                               "pass a Shape")
        name, body = m.groups()
        parts = [d.strip() for d in body.split(",") if d.strip()]
        if not all(p.removeprefix("<=").isdigit() for p in parts):
            raise BuilderError(f"cannot read shape {spec!r}; dimensions are N or <=N (bounded "
                               "dynamic)")
        dims = [int(p.removeprefix("<=")) for p in parts]
        if name == "token":
            return Shape.token()
        try:
            t = primitive_type(name)
        except ValueError:
            raise BuilderError(f"cannot read shape {spec!r}: {name!r} is not an HLO element "
                               f"type ({_TYPE_NAMES})") from None
        return Shape.array(t, dims, dynamic=[p.startswith("<=") for p in parts])
    if (isinstance(spec, tuple) and len(spec) == 2
            and isinstance(spec[0], (str, PrimitiveType, np.dtype, type))):
        return Shape.array(as_type(spec[0]), spec[1])
    if isinstance(spec, (list, tuple)):
        return Shape.tuple_of(as_shape(s) for s in spec)
    raise BuilderError(f"cannot make a shape from {spec!r}")


def as_type(t) -> PrimitiveType:
    """An element type from 'f32', a PrimitiveType or a numpy dtype."""
    if isinstance(t, PrimitiveType):
        return t
    if isinstance(t, str):
        try:
            return primitive_type(t)
        except ValueError:
            pass
    try:
        return primitive_type_of_dtype(t)
    except (TypeError, ValueError):
        raise BuilderError(f"unknown element type {t!r}: give an HLO type name "
                           f"({_TYPE_NAMES}) or a numpy dtype that has one") from None


_TYPE_NAMES = "f32, f16, bf16, f64, s8..s64, u8..u64, pred, c64, ..."


def _ints(values) -> tuple[int, ...]:
    """Sizes, dimension numbers, indices as ints; anything but an integer (a float 2.5,
    which int() would truncate to 2) is refused."""
    values = list(values)
    out = []
    for v in values:
        try:
            out.append(operator.index(v))
        except TypeError:
            raise BuilderError(f"expected integers (sizes, dimension numbers, indices), got "
                               f"{v!r} in {values!r}") from None
    return tuple(out)


def _fits(value, t: PrimitiveType) -> bool:
    """Whether a Python number keeps its value as a `t` (floats may round: 0.1 is fine
    in f32; an integer type takes integral values in its range; pred takes 0/1)."""
    if t.is_complex or not t.is_array_type:
        return True
    if isinstance(value, complex):
        if value.imag != 0:
            return False
        value = value.real
    if t.is_float:
        return True
    if t.kind == "pred":
        return value in (0, 1)
    if t.is_integer:
        if isinstance(value, float) and not value.is_integer():
            return False
        lo, hi = int_limits(t.dtype)
        return lo <= value <= hi
    return True


def _sanitize(name: str) -> str:
    """`name` as an HLO name XLA's parser reads back: other characters become '_', and a
    keyword or element type (`f32`, `token`, `nan`, `ROOT`) gets a '_' after it, as XLA's
    NameUniquer does."""
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
    if not name or not (name[0].isalpha() or name[0] == "_"):
        name = "_" + name
    return name + "_" if is_reserved_word(name) else name


class _ModuleState:
    """What a builder and all its sub-builders share: ids, names, cached reducers."""

    def __init__(self):
        self.next_id = 1
        self.computation_names: set[str] = set()
        self.reducers: dict[tuple[str, str], Computation] = {}
        self.next_channel_id = 1

    def take_id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    def computation_name(self, name: str) -> str:
        base = _sanitize(name)
        name, k = base, 1
        while name in self.computation_names:
            name = f"{base}.{k}"
            k += 1
        self.computation_names.add(name)
        return name


class XlaOp:
    """A value under construction: one instruction of one builder.

    Supports `+ - * / % ** @`, unary `-`, `~`, `& | ^ << >>` (with Python scalars taking
    the other operand's element type) and comparisons through methods (`x.lt(y)`), since
    `==` keeps Python identity semantics. A tuple-shaped op can be indexed (`t[1]`) and
    unpacked (`a, b = t`) into get-tuple-element ops.
    """

    __slots__ = ("builder", "instruction")

    def __init__(self, builder: XlaBuilder, instruction: Instruction):
        self.builder = builder
        self.instruction = instruction

    # ---- queries ---------------------------------------------------------
    @property
    def shape(self) -> Shape:
        return self.instruction.shape

    @property
    def element_type(self) -> PrimitiveType:
        return self.instruction.shape.element_type

    @property
    def dtype(self) -> np.dtype:
        return self.instruction.shape.dtype

    @property
    def dims(self) -> tuple[int, ...]:
        return self.instruction.shape.dims

    @property
    def rank(self) -> int:
        return self.instruction.shape.rank

    @property
    def name(self) -> str:
        return self.instruction.name

    def __repr__(self) -> str:
        return (f"<XlaOp {self.instruction.name}: {self.shape.to_text(layout=False)} "
                f"in {self.builder.name}>")

    def __bool__(self):
        raise TypeError(f"{self!r} is a value of the program being built and has no Python "
                        "truth value; use select/conditional/while_loop")

    # ---- tuples -----------------------------------------------------------
    def __getitem__(self, index):
        if not self.shape.is_tuple:
            raise TypeError(f"{self!r} is not a tuple; use builder.slice / dynamic_slice to "
                            "index arrays")
        return self.builder.get_tuple_element(self, index)

    def __len__(self) -> int:
        if not self.shape.is_tuple:
            raise TypeError(f"{self!r} is not a tuple")
        return len(self.shape.tuple_shapes)

    def __iter__(self):
        if not self.shape.is_tuple:
            raise TypeError(f"{self!r} is not a tuple and cannot be unpacked")
        return iter([self[i] for i in range(len(self.shape.tuple_shapes))])

    # ---- conveniences mirroring builder methods --------------------------
    def reshape(self, *dims):
        if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
            dims = dims[0]
        return self.builder.reshape(self, dims)

    def transpose(self, permutation):
        return self.builder.transpose(self, permutation)

    def astype(self, element_type):
        return self.builder.convert(self, element_type)

    @property
    def T(self):
        return self.builder.transpose(self, tuple(range(self.rank))[::-1])


def _binary_operator(method: str, reflected: bool = False):
    def op(self, other):
        b = self.builder
        other = b._coerce(other, like=self)
        return getattr(b, method)(other, self) if reflected else getattr(b, method)(self, other)
    op.__name__ = method
    return op


# Python operators -> builder methods (shift right picks arithmetic or logical by signedness).
for _py, _method in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                     ("mod", "rem"), ("pow", "pow"), ("matmul", "dot"), ("and", "and_"),
                     ("or", "or_"), ("xor", "xor"), ("lshift", "shift_left"),
                     ("rshift", "shift_right")):
    setattr(XlaOp, f"__{_py}__", _binary_operator(_method))
    setattr(XlaOp, f"__r{_py}__", _binary_operator(_method, reflected=True))
# Comparison methods on values: x.lt(y) == builder.lt(x, y).
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(XlaOp, _cmp, _binary_operator(_cmp))
XlaOp.__neg__ = lambda self: self.builder.neg(self)
XlaOp.__invert__ = lambda self: self.builder.not_(self)
XlaOp.__abs__ = lambda self: self.builder.abs(self)


class BuilderCore:
    """Instruction creation, parameters, constants, sub-builders and `build`."""

    def __init__(self, name: str = "main", *, _state: _ModuleState | None = None,
                 _parent: BuilderCore | None = None):
        self.name = name
        self._state = _state or _ModuleState()
        self._parent = _parent
        self._instructions: list[Instruction] = []
        self._built: Computation | None = None
        self._frontend_attributes: dict[str, str] = {}

    @contextmanager
    def frontend_attributes(self, attributes: dict[str, str]) -> Iterator[None]:
        """Attach frontend attributes to every op created inside the block (XLA's
        FrontendAttributesScope), e.g. `_xla_send_recv_pipeline`; blocks nest."""
        for key in attributes:
            if not is_identifier(str(key)):
                # HLO text writes a key bare (`frontend_attributes={key="value"}`): any other
                # key would print text that neither XLA's parser nor ours reads back.
                raise BuilderError(f"computation {self.name}: frontend attribute key "
                                   f"{str(key)!r} is not an HLO attribute name (a letter or "
                                   "'_', then letters, digits, '_', '.', '-')")
        saved = self._frontend_attributes
        self._frontend_attributes = {**saved, **{str(k): str(v) for k, v in attributes.items()}}
        try:
            yield
        finally:
            self._frontend_attributes = saved

    # ---- creation ----------------------------------------------------------
    def _check_operand(self, op, opcode: str) -> Instruction:
        if not isinstance(op, XlaOp):
            if isinstance(op, np.ndarray):
                what = f"a numpy array of {op.dtype} {list(op.shape)}"
            else:
                text = repr(op)
                what = f"{type(op).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
            raise BuilderError(f"{opcode} in computation {self.name}: operand {what} is not an "
                               "XlaOp (wrap values with constant()/constant_r0())")
        if op.builder is not self:
            raise BuilderError(
                f"{opcode} in computation {self.name}: operand {op.name} belongs to computation "
                f"{op.builder.name}; values cross into a sub-computation only as its parameters")
        return op.instruction

    def _operand(self, value, opcode: str) -> XlaOp:
        """`value` as an operand of `opcode`: an XlaOp of this builder, else BuilderError.
        Methods that read an operand's shape before `_add` take it through here."""
        self._check_operand(value, opcode)
        return value

    def _operands(self, values, opcode: str) -> list[XlaOp]:
        """One operand or a list/tuple of them (variadic ops), each checked by `_operand`."""
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        return [self._operand(v, opcode) for v in values]

    def _add(self, opcode: str, operands: Sequence[XlaOp] = (), attrs: dict | None = None, *,
             declared: Shape | None = None, name: str | None = None, **fields) -> XlaOp:
        """Append one instruction; its shape comes from shape inference (or `declared`)."""
        if self._built is not None:
            raise BuilderError(f"computation {self.name} was already built; start a new builder")
        instrs = [self._check_operand(o, opcode) for o in operands]
        attrs = {k: v for k, v in (attrs or {}).items() if v is not None}
        if declared is not None:
            self._check_dims(declared, opcode)
        if opcode in ("parameter", "constant"):
            shape = declared
        else:
            shape = self._infer(opcode, [i.shape for i in instrs], attrs, declared)
        ident = self._state.take_id()
        instr = Instruction(f"{_sanitize(name or opcode)}.{ident}", opcode,
                            shape.with_default_layouts(), instrs, attrs, **fields)
        instr.frontend_attributes.update(self._frontend_attributes)
        self._instructions.append(instr)
        return XlaOp(self, instr)

    def _check_dims(self, shape: Shape, opcode: str) -> None:
        """A shape asked for by the caller has sizes >= 0: a negative size would be taken
        as an unbounded dynamic dimension ('?' in HLO text), which the builder never makes."""
        if shape.is_tuple:
            for s in shape.tuple_shapes:
                self._check_dims(s, opcode)
        elif shape.is_array and any(d < 0 for d in shape.dims):
            raise BuilderError(f"{opcode} in computation {self.name}: dimension sizes "
                               f"{list(shape.dims)} of the {shape.element_type.name} result "
                               "must not be negative")

    def instruction(self, opcode: str, operands: Sequence[XlaOp] = (), shape=None,
                    **attrs) -> XlaOp:
        """One instruction of any opcode, by its HLO name: for ops this builder has no method
        for, and for callers that state an instruction's exact result shape (tests).

        `attrs` are typed attribute values as xladist/hlo/opcodes.py documents them. The
        result shape comes from shape inference: `shape` is required where it cannot be
        derived (convert, reshape, bitcast, ...) and must otherwise have the inferred
        element types and dimensions. Its layout is kept (HLO text may give any result
        layout); without one the result gets the default layout.
        """
        from ..hlo.opcodes import OPCODES
        if opcode not in OPCODES:
            raise BuilderError(f"computation {self.name}: unknown opcode {opcode!r}")
        if opcode in ("parameter", "constant"):
            # Their number or value is no attribute: a parameter without one failed in
            # build() with a bare TypeError, a constant printed as elided data, `{...}`.
            method = "parameter(number, shape)" if opcode == "parameter" else "constant(value)"
            raise BuilderError(f"computation {self.name}: a {opcode} is made by "
                               f"builder.{method}, not instruction()")
        info = OPCODES[opcode]
        unknown = [k for k in attrs if info.attr(k) is None]
        if unknown:
            # Printed as written, an unknown attribute is text XLA's parser refuses
            # ('unexpected attribute "foo"'), and a misspelt optional one was ignored.
            known = ", ".join(a.name for a in info.attrs) or "none"
            raise BuilderError(f"{opcode} in computation {self.name}: no attribute "
                               f"{', '.join(unknown)} (its attributes: {known})")
        if shape is None:
            return self._add(opcode, operands, attrs)
        declared = as_shape(shape)
        shapes = [self._check_operand(o, opcode).shape for o in operands]
        inferred = self._infer(opcode, shapes, {k: v for k, v in attrs.items() if v is not None},
                               declared)
        if inferred.without_layout() != declared.without_layout():
            raise BuilderError(f"{opcode} in computation {self.name}: the result shape given, "
                               f"{declared.to_text()}, is not the inferred "
                               f"{inferred.without_layout().to_text()}")
        op = self._add(opcode, operands, attrs, declared=declared)
        op.instruction.shape = declared.with_default_layouts()
        return op

    def _infer(self, opcode, shapes, attrs, declared) -> Shape:
        from ..hlo.shape_inference import infer_shape
        try:
            return infer_shape(opcode, shapes, attrs, declared)
        except ValueError as e:
            # Say where, keeping the error's class (ShapeError) for callers that catch it.
            try:
                err = type(e)(f"{e} (building in computation {self.name})")
            except TypeError:  # an error class with another constructor: keep it as it is
                raise e from None
            raise err from None

    def _coerce(self, value, like: XlaOp | None = None) -> XlaOp:
        """An XlaOp for `value`; Python numbers take `like`'s element type (weak typing)."""
        if isinstance(value, XlaOp):
            return value
        if isinstance(value, (bool, int, float, complex)) and like is not None:
            t = like.element_type
            if not _fits(value, t):
                raise BuilderError(
                    f"computation {self.name}: the Python number {value!r} used with "
                    f"{like.name} ({like.shape.to_text(layout=False)}) takes its element type "
                    f"{t.name}, which cannot hold it exactly; convert the operand or pass "
                    f"constant_r0({value!r}, <type>)")
            return self.constant_r0(value, t)
        return self.constant(value)

    # ---- leaves ------------------------------------------------------------
    def parameter(self, number: int, shape: ShapeLike, name: str | None = None) -> XlaOp:
        """Parameter `number` of this computation (numbers must end up 0..n-1)."""
        for i in self._instructions:
            if i.opcode == "parameter" and i.parameter_number == number:
                raise BuilderError(f"computation {self.name} already has parameter {number} "
                                   f"({i.name})")
        return self._add("parameter", declared=as_shape(shape), name=name or "parameter",
                         parameter_number=int(number))

    def constant(self, value, dtype=None) -> XlaOp:
        """A constant from a numpy array / Python value (element type from its dtype)."""
        arr = np.asarray(value, dtype=as_type(dtype).dtype if dtype is not None else None)
        if arr.dtype == np.float64 and dtype is None and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)  # Python floats: f32 like jax's default, not f64
        elif arr.dtype == np.int64 and dtype is None and not isinstance(value, np.ndarray):
            arr = arr.astype(np.int32)
        t = primitive_type_of_dtype(arr.dtype)
        shape = Shape.array(t, arr.shape)
        arr = np.array(arr, order="C")  # ascontiguousarray would make scalars rank 1
        return self._add("constant", declared=shape, literal=Literal(shape, arr))

    def constant_r0(self, value, element_type) -> XlaOp:
        """A scalar constant of the given element type."""
        t = as_type(element_type)
        return self.constant(np.asarray(value).astype(t.dtype), t)

    def zeros(self, shape: ShapeLike) -> XlaOp:
        """A zero of the shape's element type broadcast to its dims."""
        s = as_shape(shape)
        zero = self.constant_r0(0, s.element_type)
        return self.broadcast_in_dim(zero, s.dims, ()) if s.dims else zero

    # ---- sub-computations ------------------------------------------------------
    def create_subbuilder(self, name: str) -> XlaBuilder:
        """A builder for a computation this one calls (ids and names stay module-unique)."""
        return type(self)(name, _state=self._state, _parent=self)

    def _root_op(self, root) -> Instruction:
        if root is None:
            if not self._instructions:
                raise BuilderError(f"computation {self.name} is empty: nothing to return")
            return self._instructions[-1]
        if isinstance(root, (list, tuple)):
            root = self.tuple(*root)
        return self._check_operand(root, "root")

    def build_computation(self, root=None) -> Computation:
        """Finish this builder as one Computation; root defaults to the last op added.

        A list/tuple root is returned as an HLO tuple.
        """
        if self._built is not None:
            return self._built
        root_instr = self._root_op(root)
        numbers = sorted(i.parameter_number for i in self._instructions
                         if i.opcode == "parameter")
        if numbers != list(range(len(numbers))):
            raise BuilderError(f"computation {self.name}: parameter numbers {numbers} must be "
                               f"0..{len(numbers) - 1} without gaps")
        comp = Computation(self._state.computation_name(self.name), self._instructions,
                           root_instr)
        self._built = comp
        return comp

    def build(self, root=None, *, replica_count: int = 1, num_partitions: int = 1):
        """Finish the builder. A sub-builder returns its Computation; the top builder
        returns the Module: entry plus every called computation, callees first, with
        `entry_computation_layout` set."""
        if self._parent is not None:
            return self.build_computation(root)
        entry = self.build_computation(root)
        module = Module(_sanitize(self.name))
        for comp in _callee_first(entry):
            module.add_computation(comp, entry=comp is entry)
        module.replica_count = int(replica_count)
        module.num_partitions = int(num_partitions)
        module.entry_computation_layout = (
            [p.shape.with_default_layouts() for p in entry.parameters],
            entry.root.shape.with_default_layouts())
        return module

    def _computation(self, fn, param_shapes: Sequence[Shape], name: str,
                     unpack: bool = False, *, op: str | None = None) -> Computation:
        """A called computation from a Computation or a Python callable.

        A callable receives (sub_builder, *parameters) and returns an XlaOp or a list of
        them (made a tuple). With `unpack`, one tuple parameter is passed as its elements.
        `op` names the instruction that calls it, for errors.
        """
        if isinstance(fn, Computation):
            return fn
        what = f"{op} in computation {self.name}" if op else name
        if not callable(fn):
            raise BuilderError(f"{what}: {name} must be a Computation or a callable, "
                               f"got {fn!r}")
        shapes = list(param_shapes)
        if unpack and len(shapes) == 1 and shapes[0].is_tuple:
            shapes = list(shapes[0].tuple_shapes)
        self._check_callable(fn, shapes, f"{what}: {name}")
        sub = self.create_subbuilder(name)
        params = [sub.parameter(i, s, name="p") for i, s in enumerate(param_shapes)]
        if unpack and len(params) == 1 and params[0].shape.is_tuple:
            params = list(params[0])
        out = fn(sub, *params)
        if out is None:
            # build_computation would take the last op added as the root: a missing
            # `return` would silently compute something else.
            label = getattr(fn, "__qualname__", None) or repr(fn)
            raise BuilderError(f"{what}: {name}: the callable {label} returned None; it "
                               "must return the computation's result (an XlaOp, or a list "
                               "of them for a tuple)")
        return sub.build_computation(out)

    @staticmethod
    def _check_callable(fn, shapes: Sequence[Shape], what: str) -> None:
        """Refuse a callable that cannot take (sub_builder, *values of `shapes`), before it
        is called: its TypeError would name neither the op nor the values it gets."""
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # no signature to read (some builtins): just call it
            return
        try:
            signature.bind(None, *shapes)
        except TypeError as e:
            label = getattr(fn, "__qualname__", None) or repr(fn)
            values = ", ".join(s.to_text(layout=False) for s in shapes)
            raise BuilderError(
                f"{what}: the callable {label}{signature} is called with the sub-builder and "
                f"{len(shapes)} value(s) ({values}) and cannot take them: {e}") from None

    def next_channel_id(self) -> int:
        """A channel id not yet handed out by this module's builders."""
        c = self._state.next_channel_id
        self._state.next_channel_id += 1
        return c


def _callee_first(entry: Computation) -> list[Computation]:
    """Every computation reachable from entry, each after the computations it calls."""
    order: list[Computation] = []
    seen: set[int] = set()

    def visit(c: Computation):
        if id(c) in seen:
            return
        seen.add(id(c))
        for callee in c.called_computations():
            visit(callee)
        order.append(c)

    visit(entry)
    names: set[str] = set()
    for c in order:
        # Computations built by unrelated builders may share a name; keep module names unique.
        base, k = c.name, 1
        while c.name in names:
            c.name = f"{base}.{k}"
            k += 1
        names.add(c.name)
    return order


