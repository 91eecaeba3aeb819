"""ir.Module -> HLO text, in the style of XLA's own dumps (docs/reference/hlo-text-format.md 4.4, 5, 9).

The canonical style is the long one of the corpus `module.hlo` files: `%` sigils,
no operand shapes, program shapes (without layouts) in computation headers,
`/*index=N*/` before every 5th operand, attributes in schema order (opcodes.py),
then sharding, frontend_attributes, control-predecessors, statistics,
result_accuracy, origin, metadata, backend_config. `sigils=False` gives XLA's
short parsable style (no `%`, no program shapes, no operand index comments).

Printing is canonical: print(parse(print(m))) == print(m). Array shapes without a
layout are printed with the default one, as XLA does after parsing.
"""

from __future__ import annotations

from .attrs import Literal
from .ir import Computation, Instruction, Module
from .lexer import quote, unquote
from .literals import format_literal
from .opcodes import OPCODES
from .shape import UNBOUNDED, Shape

__all__ = ["print_module", "print_instruction", "print_computation", "shape_text"]

# Module header attributes in XLA's print order; the typed ones live in Module fields.
_HEADER_BEFORE_LAYOUT = ("input_output_alias", "buffer_donor", "alias_passthrough_params")
_HEADER_AFTER_LAYOUT = ("allow_spmd_sharding_propagation_to_parameters",
                        "allow_spmd_sharding_propagation_to_output")
_ASYNC_OPS = {"async-start": "-start", "async-update": "-update", "async-done": "-done"}


def shape_text(shape: Shape, layout: bool = True) -> str:
    """`f32[2,3]{1,0}`; arrays without a layout get the default one (like XLA)."""
    if shape.is_tuple:
        parts = []
        for i, s in enumerate(shape.tuple_shapes):
            prefix = f"/*index={i}*/" if i and i % 5 == 0 else ""
            parts.append(prefix + shape_text(s, layout))
        return "(" + ", ".join(parts) + ")"
    dims = []
    for d, dyn in zip(shape.dims, shape.dynamic):
        dims.append("?" if d == UNBOUNDED else f"<={d}" if dyn else str(d))
    text = f"{shape.element_type.name}[{','.join(dims)}]"
    if layout and shape.is_array:
        lay = shape.layout
        if lay is None:
            if shape.dims:
                text += "{" + ",".join(str(d) for d in range(len(shape.dims) - 1, -1, -1)) + "}"
        elif shape.dims or lay.has_extras:
            text += lay.to_text()
    if shape.buffer:
        text = f"b({text})"
    return text


class _Printer:
    def __init__(self, sigils: bool, operand_shapes: bool, metadata: bool,
                 large_constants: bool):
        self.sigil = "%" if sigils else ""
        self.long = sigils
        self.operand_shapes = operand_shapes
        self.metadata = metadata
        self.large_constants = large_constants
        # Shapes are shared between instructions by the parser: cache texts by identity
        # (the dict also keeps each shape alive, so ids stay unique while printing).
        self._shapes: dict[int, tuple[Shape, str]] = {}

    def shape(self, s: Shape) -> str:
        hit = self._shapes.get(id(s))
        if hit is None:
            hit = self._shapes[id(s)] = (s, shape_text(s))
        return hit[1]

    # ---- module / computation ---------------------------------------------------
    def module(self, m: Module) -> str:
        head = ["HloModule " + m.name]
        if m.is_scheduled:
            head.append("is_scheduled=true")
        for key in _HEADER_BEFORE_LAYOUT:
            if key in m.header_attrs:
                head.append(f"{key}={m.header_attrs[key]}")
        if m.entry_computation_layout is not None:
            params, result = m.entry_computation_layout
            ps = [(f"/*index={i}*/" if i and i % 5 == 0 else "") + shape_text(p)
                  for i, p in enumerate(params)]
            head.append("entry_computation_layout={(" + ", ".join(ps) + ")->"
                        + shape_text(result) + "}")
        for key in _HEADER_AFTER_LAYOUT:
            if key in m.header_attrs:
                head.append(f"{key}={m.header_attrs[key]}")
        if m.replica_count != 1:
            head.append(f"replica_count={m.replica_count}")
        if m.num_partitions != 1:
            head.append(f"num_partitions={m.num_partitions}")
        if m.frontend_attributes:
            head.append("frontend_attributes=" + _frontend_attributes_text(m.frontend_attributes))
        done = set(_HEADER_BEFORE_LAYOUT) | set(_HEADER_AFTER_LAYOUT)
        for key, value in m.header_attrs.items():
            if key not in done:
                # XLA ends the (multi-line) recovery table with a newline of its own.
                head.append(f"{key}={value}" + ("\n" if key == "origin_recovery_table" else ""))
        out = [", ".join(head), "\n\n"]
        if self.metadata and m.stack_frames:
            out.append(m.stack_frames)
            out.append("\n\n\n")
        for comp in m.computations:
            if comp.is_async_wrapper:
                continue
            out.append(self.computation(comp, comp.is_entry or comp is m.entry))
            out.append("\n\n")
        return "".join(out)

    def computation(self, c: Computation, is_entry: bool) -> str:
        head = ("ENTRY " if is_entry else "") + self.sigil + c.name
        if self.long and c.root is not None:
            params = ", ".join(f"{p.name}: {shape_text(p.shape, False)}" for p in c.parameters)
            head += f" ({params}) -> {shape_text(c.root.shape, False)}"
        lines = [head + " {"]
        root = c.root
        for instr in c.instructions:
            lines.append(("  ROOT " if instr is root else "  ") + self.instruction(instr))
        lines.append("}")
        text = "\n".join(lines)
        if c.execution_thread is not None:
            text += ", execution_thread=" + quote(c.execution_thread)
        return text

    # ---- instruction -------------------------------------------------------------
    def instruction(self, instr: Instruction) -> str:
        sigil = self.sigil
        opcode = instr.opcode
        attrs = instr.attrs
        wrapped = None
        if opcode in _ASYNC_OPS:
            calls = attrs.get("calls")
            if isinstance(calls, Computation) and calls.is_async_wrapper and calls.root:
                wrapped = calls.root
                opcode = wrapped.opcode + _ASYNC_OPS[instr.opcode]
        head = f"{sigil}{instr.name} = {self.shape(instr.shape)} {opcode}("
        if instr.opcode == "parameter":
            body = str(instr.parameter_number)
        elif instr.opcode == "constant":
            body = self.constant(instr)
        else:
            parts = []
            long = self.long
            for i, op in enumerate(instr.operands):
                text = sigil + op.name
                if self.operand_shapes:
                    text = self.shape(op.shape) + " " + text
                if long and i and i % 5 == 0:
                    text = f"/*index={i}*/" + text
                parts.append(text)
            body = ", ".join(parts)
        out = [head, body, ")"]
        if wrapped is not None:
            own = OPCODES[instr.opcode].attrs
            # async_execution_thread first, the wrapped op's attributes, then the rest.
            self.attrs(out, [a for a in own if a.name == "async_execution_thread"], attrs)
            if instr.opcode == "async-start":
                self.attrs(out, OPCODES[wrapped.opcode].attrs, wrapped.attrs)
                self.raw_attrs(out, wrapped.attrs, OPCODES[wrapped.opcode])
            self.attrs(out, [a for a in own if a.name not in ("async_execution_thread", "calls")],
                       attrs)
            self.raw_attrs(out, attrs, OPCODES[instr.opcode])
        else:
            info = OPCODES.get(opcode)
            if info is not None:
                self.attrs(out, info.attrs, attrs)
            self.raw_attrs(out, attrs, info)
        self.common(out, instr)
        return "".join(out)

    def constant(self, instr: Instruction) -> str:
        lit = instr.literal
        if not isinstance(lit, Literal):
            return "{...}"
        if not self.large_constants and large_constant(instr.shape):
            return "{...}"
        shape = instr.shape
        return format_literal(lit, shape)

    def attrs(self, out: list, specs, attrs: dict) -> None:
        for spec in specs:
            if spec.name in attrs:
                out.append(f", {spec.name}={self.value(spec.kind, attrs[spec.name])}")

    def raw_attrs(self, out: list, attrs: dict, info) -> None:
        """Attributes unknown to the schema (kept as RawAttr), in the order they came."""
        known = {a.name for a in info.attrs} if info is not None else set()
        for key, value in attrs.items():
            if key not in known:
                out.append(f", {key}={self.value('', value)}")

    def common(self, out: list, instr: Instruction) -> None:
        if instr.sharding is not None:
            out.append(", sharding=" + instr.sharding)
        if instr.frontend_attributes:
            out.append(", frontend_attributes="
                       + _frontend_attributes_text(instr.frontend_attributes))
        if instr.control_predecessors:
            out.append(", control-predecessors={" + ", ".join(
                self.sigil + p.name for p in instr.control_predecessors) + "}")
        if instr.statistics is not None:
            out.append(", statistics=" + instr.statistics)
        if instr.result_accuracy is not None:
            out.append(", result_accuracy=" + instr.result_accuracy)
        if instr.origin is not None:
            out.append(", origin=" + instr.origin)
        if self.metadata and instr.metadata:
            out.append(", metadata={" + instr.metadata + "}")
        config = _backend_config_text(instr.backend_config)
        if config:
            out.append(", backend_config=" + config)

    def value(self, kind: str, v) -> str:
        """An attribute value in XLA's spelling, by its opcodes.py kind."""
        fn = _VALUE_TEXT.get(kind)
        if fn is not None:
            try:
                return fn(self, v)
            except (TypeError, AttributeError, ValueError):
                pass  # a value of an unexpected type (builder-made): fall back below
        return _generic_text(self, v)


def _list(values, sep: str = ",") -> str:
    return "{" + sep.join(str(x) for x in values) + "}"


def _generic_text(p: _Printer, v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Computation):
        return p.sigil + v.name
    if isinstance(v, Shape):
        return p.shape(v)
    if isinstance(v, float):
        return "%g" % v
    if hasattr(v, "to_text"):
        return v.to_text()
    if isinstance(v, (list, tuple)):
        return "{" + ",".join(_generic_text(p, x) for x in v) + "}"
    return str(v)


# Attribute kind (opcodes.py) -> text of a value of that kind.
_VALUE_TEXT = {
    "int": lambda p, v: str(int(v)),
    "bool": lambda p, v: "true" if v else "false",
    "float": lambda p, v: "%g" % v,
    "word": lambda p, v: str(v),
    "string": lambda p, v: quote(v),
    "ints": lambda p, v: _list(int(x) for x in v),
    "words": lambda p, v: _list(v),
    "intss": lambda p, v: "{" + ",".join(_list(int(x) for x in g) for g in v) + "}",
    "pairs": lambda p, v: "{" + ",".join(_list(int(x) for x in g) for g in v) + "}",
    "replica_groups": lambda p, v: v.to_text(),
    "window": lambda p, v: v.to_text() if v.dims else "{}",
    "dim_labels": lambda p, v: v.to_text(),
    "padding": lambda p, v: v.to_text(),
    "slice": lambda p, v: v.to_text(),
    "computation": lambda p, v: p.sigil + v.name,
    "computations": lambda p, v: _list((p.sigil + c.name for c in v), ", "),
    "shape": lambda p, v: p.shape(v),
    "shapes": lambda p, v: _list((p.shape(s) for s in v), ", "),
    "raw": lambda p, v: v.to_text(),
    "literal": lambda p, v: v.to_text(),
}


def _is_brace_dict(value: str) -> bool:
    """Whether a value scans as one `{...}` (XLA's LexesAsJsonDict): braces balanced outside
    quoted strings, the first '{' closed by the last character."""
    if not (value.startswith("{") and value.endswith("}")):
        return False
    depth = 0
    quote_char = None
    escaped = False
    for n, ch in enumerate(value):
        if quote_char:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote_char:
                quote_char = None
        elif ch in "\"'":
            quote_char = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and n != len(value) - 1:
                return False
    return depth == 0 and quote_char is None


def _dict_or_quoted(value: str) -> str:
    """A frontend attribute value or backend_config as XLA prints it: raw when it scans as
    one brace dict, else a double-quoted C-escaped string."""
    return value if _is_brace_dict(value) else quote(value)


def _frontend_attributes_text(attrs: dict[str, str]) -> str:
    """`{k="v",k2={...}}` of an instruction or the module header: keys sorted."""
    return "{" + ",".join(f"{k}={_dict_or_quoted(attrs[k])}" for k in sorted(attrs)) + "}"


def _backend_config_text(text: str | None) -> str:
    """backend_config (kept as written: `{...}` or a quoted string) in XLA's spelling: a
    quoted value that scans as a brace dict prints raw, one that does not is re-quoted with
    double quotes, an empty one is not printed."""
    if not text or text[0] not in "\"'":
        return text or ""
    try:
        value = unquote(text)
    except ValueError:
        return text
    return _dict_or_quoted(value) if value else ""


def large_constant(shape) -> bool:
    """A constant that `large_constants=False` prints as `{...}` (as XLA's printer does)."""
    return shape.is_tuple or shape.size > 10


def print_module(module: Module, *, sigils: bool = True, operand_shapes: bool = False,
                 metadata: bool = True, large_constants: bool = True) -> str:
    """The module as HLO text.

    sigils: long style with `%` names and program shapes (False: XLA's short style).
    operand_shapes: write each operand's shape before its name (older dump style).
    metadata: print metadata={...} and the stack frame table.
    large_constants: print every constant in full (False: `{...}` for arrays of more
    than 10 elements and tuples, as XLA's default dumps do — such text cannot run).
    """
    return _Printer(sigils, operand_shapes, metadata, large_constants).module(module)


def print_computation(comp: Computation, *, sigils: bool = True, operand_shapes: bool = False,
                      metadata: bool = True, large_constants: bool = True) -> str:
    p = _Printer(sigils, operand_shapes, metadata, large_constants)
    return p.computation(comp, comp.is_entry)


def print_instruction(instr: Instruction, *, sigils: bool = True, operand_shapes: bool = False,
                      metadata: bool = True, large_constants: bool = True) -> str:
    """One instruction as a line of HLO text, without indentation or ROOT."""
    return _Printer(sigils, operand_shapes, metadata, large_constants).instruction(instr)
