"""HLO text -> ir.Module (hlo-text-format.md sections 1-6, 10, 11).

Accepts both of XLA's print styles and any mix: `%` sigils or not, operand shapes
or not, program shapes in computation headers or not, comments anywhere,
instructions spread over several lines, header-less modules. Attribute values are
parsed by the kind that opcodes.py gives them (one parser per kind in `_KIND`);
attributes unknown to the schema are kept as `attrs.RawAttr` text.

Every malformed input raises `HloParseError` with the line, the column of the
offending token and the line's text; no other exception leaves `parse_module`.
"""

from __future__ import annotations

from ..errors import HloParseError
from . import lexer as lx
from .attrs import (ConvDimensionNumbers, Literal, PaddingConfig, RawAttr, ReplicaGroups,
                    SliceSpec, Window, WindowDim)
from .ir import Computation, Instruction, Module
from .lexer import (ATTR, DIMLABELS, DXD, EOF, FLOAT, IDENT, INT, INTLIST, LABEL, NAME, OTHER,
                    PAD, PUNCT, SHAPE, SPECIAL, STRING)
from .literals import LiteralValueError, build_array
from .opcodes import ASYNC_SUGAR_SUFFIXES, COMMON_ATTRS, OPCODES
from .shape import PRIMITIVE_TYPES, UNBOUNDED, Layout, Shape

__all__ = ["parse_module"]

# Nesting limit for tuple shapes / tuple literals / layouts' P(...): deeper text is
# certainly not from XLA, and the limit keeps recursion far from Python's own.
MAX_DEPTH = 64

_SCHEMAS = {name: {a.name: a for a in info.attrs} for name, info in OPCODES.items()}
_COMMON = frozenset(COMMON_ATTRS)
_OPEN = {"{": "}", "(": ")", "[": "]"}
_CLOSE = frozenset("})]")
_SCALAR_KINDS = frozenset({INT, FLOAT, SPECIAL, IDENT})
_KEYWORDS = frozenset({"ROOT", "ENTRY", "HloModule"})
_TOKEN_TYPE = PRIMITIVE_TYPES["token"]


def parse_module(text: str, filename: str | None = None) -> Module:
    """Parse HLO module text (either print style) into an `ir.Module`.

    Raises HloParseError (with line, column and the line's text) for anything
    malformed. `filename` only appears in error messages.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise HloParseError(f"the text is not UTF-8 ({e.reason})", 1, 1, "",
                                filename) from None
    p = _Parser(text, filename)
    try:
        return p.parse()
    except HloParseError:
        raise
    except RecursionError:
        raise p.error("the text is nested too deeply") from None
    except (IndexError, KeyError, ValueError, TypeError, AttributeError, OverflowError) as e:
        # A bug in this parser; still report where it happened, as a parse error.
        raise p.error(f"internal parser error ({type(e).__name__}: {e}); "
                      f"please report this input") from e


def _split_sugar(opcode: str):
    """`all-to-all-start` -> ('all-to-all', '-start') when the rest is a known opcode."""
    for suffix in ASYNC_SUGAR_SUFFIXES:
        if opcode.endswith(suffix) and opcode[:-len(suffix)] in OPCODES:
            return opcode[:-len(suffix)], suffix
    return None


class _Parser:
    def __init__(self, text: str, filename: str | None):
        self.text = text
        self.filename = filename
        self.lines = lx.LineIndex(text)
        self.i = 0
        self.K, self.V, self.S = lx.tokenize(text, self.lines, filename)
        self.comps: dict[str, Computation] = {}
        self.shape_cache: dict[str, Shape] = {}
        self.wrappers: list[Computation] = []

    # ---- errors and small helpers ---------------------------------------------
    def error(self, message: str, i: int | None = None) -> HloParseError:
        i = self.i if i is None else min(i, len(self.S) - 1)
        return self.lines.error(message, self.S[i], self.filename)

    def found(self, i: int | None = None) -> str:
        i = self.i if i is None else i
        if self.K[i] == EOF:
            return "end of input"
        t = self.V[i]
        return repr(t if len(t) <= 40 else t[:37] + "...")

    def at(self, p: str) -> bool:
        return self.K[self.i] == PUNCT and self.V[self.i] == p

    def expect(self, p: str, context: str) -> None:
        if self.K[self.i] != PUNCT or self.V[self.i] != p:
            raise self.error(f"expected '{p}' {context}, found {self.found()}")
        self.i += 1

    def end_of(self, j: int) -> int:
        return self.S[j] + len(self.V[j])

    def line_of(self, j: int) -> int:
        return self.lines.line_of(self.S[j])

    # ---- module -------------------------------------------------------------
    def parse(self) -> Module:
        K, V = self.K, self.V
        if K[0] == IDENT and V[0] == "HloModule":
            self.i = 1
            if K[1] == NAME:
                name = V[1][1:]
            elif K[1] == IDENT:
                name = V[1]
            else:
                raise self.error(f"expected the module name after HloModule, found {self.found()}")
            self.i = 2
            module = Module(name)
            seen: set[str] = set()
            while self.at(","):
                self.i += 1
                self.header_attr(module, seen)
        else:
            module = Module("")
        if K[self.i] == IDENT and V[self.i] == "FileNames":
            self.stack_frames(module)
        while K[self.i] != EOF:
            self.computation(module)
        user = [c for c in module.computations if not c.is_async_wrapper]
        if not user:
            raise self.error("expected at least one computation (like 'ENTRY main { ... }'), "
                             f"found {self.found()}")
        if module.entry is None:
            module.entry = user[-1]
            user[-1].is_entry = True
        if not module.name:
            module.name = module.entry.name
        return module

    def header_attr(self, module: Module, seen: set[str]) -> None:
        i = self.i
        if self.K[i] != ATTR:
            raise self.error("expected a module attribute like entry_computation_layout=... "
                             f"after ',', found {self.found()}")
        key = self.V[i][:-1]
        if key in seen:
            raise self.error(f"module attribute {key} is given twice")
        seen.add(key)
        self.i = i + 1
        what = f"module attribute {key}"
        if key == "is_scheduled":
            module.is_scheduled = self.v_bool(what)
        elif key in ("replica_count", "num_partitions"):
            value = self.v_int(what)
            if value < 1:
                raise self.error(f"{key} must be at least 1, found {value}", self.i - 1)
            setattr(module, key, value)
        elif key == "entry_computation_layout":
            self.expect("{", f"to open {key}")
            params, result = self.program_shape(key)
            self.expect("}", f"to close {key}")
            module.entry_computation_layout = (params, result)
        else:
            module.header_attrs[key] = self.raw_value(what)

    def program_shape(self, what: str):
        self.expect("(", f"to open the parameter shapes of {what}")
        params = []
        if not self.at(")"):
            while True:
                params.append(self.shape(f"in {what}"))
                if not self.at(","):
                    break
                self.i += 1
        self.expect(")", f"after the parameter shapes of {what}")
        self.expect("->", f"between parameter and result shapes of {what}")
        return params, self.shape(f"as the result of {what}")

    def stack_frames(self, module: Module) -> None:
        """FileNames / FunctionNames / FileLocations / StackFrames, kept as raw text."""
        K, V = self.K, self.V
        start = self.S[self.i]
        for section, item in (("FileNames", STRING), ("FunctionNames", STRING),
                              ("FileLocations", "{"), ("StackFrames", "{")):
            if K[self.i] != IDENT or V[self.i] != section:
                raise self.error(f"expected the {section} section of the stack frame table, "
                                 f"found {self.found()}")
            self.i += 1
            while K[self.i] == INT:
                self.i += 1
                if item == STRING:
                    if K[self.i] != STRING:
                        raise self.error(f"expected a quoted name after the id in {section}, "
                                         f"found {self.found()}")
                    self.i += 1
                else:
                    if not self.at("{"):
                        raise self.error(f"expected '{{' after the id in {section}, "
                                         f"found {self.found()}")
                    self.skip_balanced()
        module.stack_frames = self.text[start:self.end_of(self.i - 1)]

    # ---- computations ---------------------------------------------------------
    def computation(self, module: Module) -> None:
        K, V = self.K, self.V
        i = first = self.i
        is_entry = K[i] == IDENT and V[i] == "ENTRY"
        if is_entry:
            i += 1
        if K[i] == NAME:
            name = V[i][1:]
        elif K[i] == IDENT and V[i] not in _KEYWORDS:
            name = V[i]
        else:
            raise self.error("expected a computation (like '%name (p: f32[]) -> f32[] {' or "
                             f"'ENTRY main {{'), found {self.found(i)}", i)
        if name in self.comps:
            raise self.error(f"computation {name} is defined twice (first on line "
                             f"{self.comps[name].line})", i)
        if is_entry and module.entry is not None:
            raise self.error(f"second ENTRY computation {name}; {module.entry.name} is already "
                             "the entry", first)
        self.i = i + 1
        declared = None
        if self.at("("):
            declared = self.signature(name)
        self.expect("{", f"to open the body of computation {name}")
        comp = Computation(name)
        comp.line = self.line_of(first)
        symbols: dict[str, Instruction] = {}
        params: dict[int, Instruction] = {}
        while not (K[self.i] == PUNCT and V[self.i] == "}"):
            if K[self.i] == EOF:
                raise self.error(f"expected '}}' to close computation {name}, "
                                 "found end of input")
            self.instruction(comp, symbols, params)
        if not comp.instructions:
            raise self.error(f"computation {name} has no instructions")
        self.i += 1
        if comp.root is None:
            comp.root = comp.instructions[-1]
        if declared is not None and not declared.compatible(comp.root.shape):
            raise self.error(f"computation {name} declares result shape "
                             f"{declared.to_text(False)} but its root {comp.root.name} has shape "
                             f"{comp.root.shape.to_text(False)}", first)
        if self.at(",") and K[self.i + 1] == ATTR and V[self.i + 1] == "execution_thread=":
            self.i += 2
            comp.execution_thread = self.v_string(f"execution_thread of computation {name}")
        for w in self.wrappers:
            module.add_computation(w)
        self.wrappers = []
        module.add_computation(comp, entry=is_entry)
        self.comps[name] = comp

    def signature(self, cname: str) -> Shape:
        """`(p0: f32[2], p1: s32[]) -> f32[2]`; returns the declared result shape."""
        K, V = self.K, self.V
        self.i += 1
        if not self.at(")"):
            while True:
                k = K[self.i]
                if k == LABEL:
                    self.i += 1
                elif k in (NAME, IDENT) and K[self.i + 1] == PUNCT and V[self.i + 1] == ":":
                    self.i += 2
                else:
                    raise self.error("expected a parameter like 'p0: f32[2]' in the signature "
                                     f"of computation {cname}, found {self.found()}")
                self.shape(f"for a parameter of computation {cname}")
                if not self.at(","):
                    break
                self.i += 1
        self.expect(")", f"to close the parameter list of computation {cname}")
        self.expect("->", f"after the parameters of computation {cname}")
        return self.shape(f"as the result of computation {cname}")

    # ---- instructions ----------------------------------------------------------
    def instruction(self, comp: Computation, symbols: dict, params: dict) -> None:
        K, V = self.K, self.V
        i = first = self.i
        is_root = K[i] == IDENT and V[i] == "ROOT"
        if is_root:
            i += 1
        k = K[i]
        name_i = i
        if k == NAME or (k == IDENT and V[i] not in _KEYWORDS):
            name = V[i][1:] if k == NAME else V[i]
            i += 1
            if K[i] != PUNCT or V[i] != "=":
                raise self.error(f"expected '=' after instruction name {V[name_i]}, "
                                 f"found {self.found(i)}", i)
            i += 1
        elif k == ATTR:  # `x=f32[] ...` written without spaces
            name = V[i][:-1]
            i += 1
        else:
            raise self.error("expected an instruction (like '%x = f32[] add(%a, %b)') or '}' "
                             f"to close computation {comp.name}, found {self.found(i)}", i)
        if name in symbols:
            raise self.error(f"instruction {name} is defined twice in computation {comp.name}",
                             name_i)
        self.i = i
        shape = self.shape(f"as the result of {name} (after '=')")
        i = self.i
        if K[i] != IDENT:
            raise self.error(f"expected the opcode of {name} after its shape, found "
                             f"{self.found(i)}", i)
        opcode = V[i]
        op_i = i
        sugar = None
        if opcode not in OPCODES:
            sugar = _split_sugar(opcode)
            if sugar is None:
                raise self.error(f"unknown opcode '{opcode}'", i)
        i += 1
        if K[i] != PUNCT or V[i] != "(":
            raise self.error(f"expected '(' after opcode {opcode} of {name}, found "
                             f"{self.found(i)}", i)
        self.i = i + 1
        instr = Instruction(name, opcode, shape)
        instr.line = self.line_of(first)
        if opcode == "parameter":
            if K[self.i] != INT:
                raise self.error(f"expected the parameter number in parameter {name}, found "
                                 f"{self.found()}")
            n = int(V[self.i])
            if n < 0:
                raise self.error(f"parameter number of {name} must not be negative")
            if n in params:
                raise self.error(f"parameter number {n} of {name} is already used by "
                                 f"{params[n].name} in computation {comp.name}")
            params[n] = instr
            instr.parameter_number = n
            self.i += 1
            self.expect(")", f"after the parameter number of {name}")
        elif opcode == "constant":
            instr.literal = self.literal(shape, name, 0)
            self.expect(")", f"after the value of constant {name}")
        else:
            instr.operands = self.operands(name, symbols, comp)
        if sugar is None:
            info = OPCODES[opcode]
            if info.arity is not None and len(instr.operands) != info.arity and \
                    opcode not in ("parameter", "constant"):
                raise self.error(f"{opcode} {name} takes {info.arity} operand"
                                 f"{'s' if info.arity != 1 else ''}, found "
                                 f"{len(instr.operands)}", op_i)
            self.attributes(instr, _SCHEMAS[opcode], instr.attrs, None, symbols, comp)
            self.check_required(instr, _SCHEMAS[opcode], instr.attrs, name_i)
        else:
            self.async_sugar(instr, sugar, op_i, name_i, symbols, comp)
        comp.add(instr)
        symbols[name] = instr
        if is_root:
            if comp.root is not None:
                raise self.error(f"computation {comp.name} has two ROOT instructions "
                                 f"({comp.root.name} and {name})", first)
            comp.root = instr

    def operands(self, name: str, symbols: dict, comp: Computation) -> list:
        K, V = self.K, self.V
        ops: list[Instruction] = []
        i = self.i
        if K[i] == PUNCT and V[i] == ")":
            self.i = i + 1
            return ops
        while True:
            k = K[i]
            declared = None
            if k == SHAPE or (k == PUNCT and V[i] == "(") or (
                    k == IDENT and V[i] in PRIMITIVE_TYPES and V[i + 1] == "["):
                self.i = i
                declared = self.shape(f"for an operand of {name}")
                i = self.i
                k = K[i]
                if k == IDENT and K[i + 1] == PUNCT and V[i + 1] == "(":
                    raise self.error(f"nested instructions as operands are not supported (in "
                                     f"{name}); give the operand its own line", i)
            if k == NAME:
                op = symbols.get(V[i][1:])
            elif k == IDENT:
                op = symbols.get(V[i])
            else:
                raise self.error(f"expected an operand name in the operands of {name}, found "
                                 f"{self.found(i)}", i)
            if op is None:
                raise self.error(f"operand {V[i]} of {name} is not defined in computation "
                                 f"{comp.name}", i)
            if declared is not None and not declared.compatible(op.shape):
                raise self.error(f"operand {V[i]} of {name} is written with shape "
                                 f"{declared.to_text(False)} but {op.name} has shape "
                                 f"{op.shape.to_text(False)}", i)
            ops.append(op)
            i += 1
            if K[i] == PUNCT:
                t = V[i]
                if t == ",":
                    i += 1
                    continue
                if t == ")":
                    self.i = i + 1
                    return ops
            raise self.error(f"expected ')' after operands of {name}, found {self.found(i)}", i)

    def attributes(self, instr, schema, attrs, extra, symbols, comp) -> None:
        """`, key=value` pairs: common ones go to Instruction fields, the rest by kind.

        `extra` is a second (schema, attrs) target used by async sugar: attributes of
        the wrapped op are stored on the wrapped instruction.
        """
        K, V = self.K, self.V
        name = instr.name
        while K[self.i] == PUNCT and V[self.i] == ",":
            self.i += 1
            i = self.i
            if K[i] != ATTR:
                raise self.error(f"expected an attribute like dimensions={{0}} after ',' in "
                                 f"{name}, found {self.found(i)}", i)
            key = V[i][:-1]
            self.i = i + 1
            if key in _COMMON:
                if key == "control-predecessors":
                    seen = bool(instr.control_predecessors)
                elif key == "frontend_attributes":
                    seen = bool(instr.frontend_attributes)
                else:
                    seen = getattr(instr, key) is not None
                if seen:
                    raise self.error(f"attribute {key} is given twice on {name}", i)
                self.common_attr(instr, key, symbols, comp)
                continue
            target, spec = attrs, schema.get(key)
            if spec is None and extra is not None and key in extra[0]:
                target, spec = extra[1], extra[0][key]
            if key in target:
                raise self.error(f"attribute {key} is given twice on {name}", i)
            what = f"attribute {key} of {name}"
            if spec is None:
                target[key] = RawAttr(self.raw_value(what))
            else:
                target[key] = getattr(self, _KIND[spec.kind])(what)

    def check_required(self, instr, schema, attrs, name_i) -> None:
        for spec in schema.values():
            if spec.required and spec.name not in attrs:
                raise self.error(f"missing required attribute {spec.name} on {instr.name}",
                                 name_i)

    def common_attr(self, instr: Instruction, key: str, symbols: dict, comp) -> None:
        what = f"attribute {key} of {instr.name}"
        if key == "metadata":
            if not self.at("{"):
                raise self.error(f"{what} expects {{...}}, found {self.found()}")
            start = self.i
            self.skip_balanced()
            instr.metadata = self.text[self.S[start] + 1:self.S[self.i - 1]]
        elif key == "frontend_attributes":
            instr.frontend_attributes = self.frontend_attributes(what)
        elif key == "control-predecessors":
            for ref_i, ref in self.name_list(what):
                pred = symbols.get(ref)
                if pred is None:
                    raise self.error(f"control predecessor {self.V[ref_i]} of {instr.name} is "
                                     f"not defined in computation {comp.name}", ref_i)
                instr.control_predecessors.append(pred)
        else:  # sharding, statistics, result_accuracy, origin, backend_config
            setattr(instr, key, self.raw_value(what))

    def frontend_attributes(self, what: str) -> dict:
        self.expect("{", f"to open {what}")
        out: dict[str, str] = {}
        if not self.at("}"):
            while True:
                i = self.i
                if self.K[i] != ATTR:
                    raise self.error(f"expected key=value in {what}, found {self.found()}")
                key = self.V[i][:-1]
                self.i += 1
                if self.K[self.i] == STRING:
                    out[key] = self.v_string(what)
                elif self.at("{"):
                    start = self.i
                    self.skip_balanced()
                    out[key] = self.text[self.S[start]:self.end_of(self.i - 1)]
                else:
                    raise self.error(f"expected a quoted value or {{...}} for {key} in {what}, "
                                     f"found {self.found()}")
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}", f"to close {what}")
        return out

    def name_list(self, what: str) -> list[tuple[int, str]]:
        self.expect("{", f"to open {what}")
        out = []
        if not self.at("}"):
            while True:
                k = self.K[self.i]
                if k not in (NAME, IDENT):
                    raise self.error(f"expected a name in {what}, found {self.found()}")
                out.append((self.i, self.V[self.i][1:] if k == NAME else self.V[self.i]))
                self.i += 1
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}", f"to close {what}")
        return out

    # ---- async sugar -------------------------------------------------------------
    def async_sugar(self, instr, sugar, op_i, name_i, symbols, comp) -> None:
        """`all-to-all-start(...)` = async-start calling a synthesized computation."""
        base, suffix = sugar
        name = instr.name
        instr.opcode = "async" + suffix
        if suffix == "-start":
            info = OPCODES[base]
            if info.arity is not None and len(instr.operands) != info.arity:
                raise self.error(f"{base} (in {base}{suffix} {name}) takes {info.arity} "
                                 f"operands, found {len(instr.operands)}", op_i)
            wrapped_attrs: dict = {}
            own = {k: v for k, v in _SCHEMAS["async-start"].items() if k != "calls"}
            self.attributes(instr, own, instr.attrs, (_SCHEMAS[base], wrapped_attrs), symbols,
                            comp)
            self.check_required(instr, _SCHEMAS[base], wrapped_attrs, name_i)
            shape = instr.shape
            if not shape.is_tuple or len(shape.tuple_shapes) < 2:
                raise self.error(f"{base}{suffix} {name} must have a tuple shape "
                                 "((operands...), result, ...)", name_i)
            wrapped = Computation(f"{name}.wrapped_computation")
            wrapped.is_async_wrapper = True
            wrapped.line = instr.line
            ps = []
            for n, op in enumerate(instr.operands):
                p = Instruction(f"param_{n}", "parameter", op.shape, parameter_number=n)
                p.line = instr.line
                ps.append(wrapped.add(p))
            root = Instruction(f"{name}.wrapped", base, shape.tuple_shapes[1], ps,
                               wrapped_attrs)
            root.line = instr.line
            wrapped.root = wrapped.add(root)
            instr.attrs["calls"] = wrapped
            self.wrappers.append(wrapped)
            return
        if len(instr.operands) != 1:
            raise self.error(f"{base}{suffix} {name} takes 1 operand, found "
                             f"{len(instr.operands)}", op_i)
        own = {k: v for k, v in _SCHEMAS["async" + suffix].items() if k != "calls"}
        self.attributes(instr, own, instr.attrs, None, symbols, comp)
        src = instr.operands[0]
        calls = src.attrs.get("calls") if src.opcode in ("async-start", "async-update") else None
        if not isinstance(calls, Computation) or calls.root is None \
                or calls.root.opcode != base:
            raise self.error(f"{base}{suffix} {name} expects the result of a {base}-start or "
                             f"{base}-update as its operand, found {src.name} ({src.opcode})",
                             op_i)
        instr.attrs["calls"] = calls

    # ---- shapes -----------------------------------------------------------------
    def shape(self, what: str, depth: int = 0) -> Shape:
        K, V = self.K, self.V
        i = self.i
        k = K[i]
        if k == SHAPE:
            t = V[i]
            s = self.shape_cache.get(t)
            if s is None:
                s = self.shape_cache[t] = self.shape_from_token(t, i)
            self.i = i + 1
            if t[-1] == "]" and (
                    K[i + 1] == INTLIST or (K[i + 1] == PUNCT and V[i + 1] == "{" and (
                        K[i + 2] == INT or (K[i + 2] == PUNCT and V[i + 2] == ":")))):
                s = s.with_layout(self.layout(s))
            return s
        if depth > MAX_DEPTH:
            raise self.error(f"shape nested more than {MAX_DEPTH} levels deep")
        if k == PUNCT and V[i] == "(":
            self.i += 1
            elems = []
            if not self.at(")"):
                while True:
                    elems.append(self.shape(what, depth + 1))
                    if not self.at(","):
                        break
                    self.i += 1
            self.expect(")", "to close a tuple shape")
            return Shape.tuple_of(elems)
        if k == IDENT and K[i + 1] == PUNCT:
            t = V[i]
            if t in PRIMITIVE_TYPES and V[i + 1] == "[":
                return self.array_shape()
            if t == "b" and V[i + 1] == "(":
                self.i += 2
                inner = self.shape(what, depth + 1)
                self.expect(")", "to close a buffer shape b(...)")
                if not inner.is_array:
                    raise self.error("a buffer shape b(...) must wrap an array shape", i)
                return Shape(inner.element_type, inner.dims, inner.layout, inner.dynamic,
                             buffer=True)
        raise self.error(f"expected a shape {what}, found {self.found(i)}", i)

    def shape_from_token(self, t: str, i: int) -> Shape:
        tname, _, rest = t.partition("[")
        dims_text, _, layout_text = rest.partition("]")
        dims, dynamic = [], []
        if dims_text:
            for d in dims_text.split(","):
                if d.isdigit():
                    dims.append(int(d))
                    dynamic.append(False)
                elif d == "?":
                    dims.append(UNBOUNDED)
                    dynamic.append(True)
                elif d.startswith("<=") and d[2:].isdigit():
                    dims.append(int(d[2:]))
                    dynamic.append(True)
                else:
                    raise self.error(f"malformed dimension '{d}' in shape {t}", i)
        return self.make_array(tname, dims, dynamic, layout_text and tuple(
            int(x) for x in layout_text[1:-1].split(",")), i)

    def make_array(self, tname, dims, dynamic, m2m, i, extras=None) -> Shape:
        ptype = PRIMITIVE_TYPES[tname]
        if not ptype.is_array_type and dims:
            raise self.error(f"{tname} shapes have no dimensions, found {tname}[...]", i)
        layout = None
        if m2m or extras:
            m2m = tuple(m2m or ())
            if sorted(m2m) != list(range(len(dims))) and (m2m or dims):
                raise self.error(f"layout {{{','.join(map(str, m2m))}}} is not a permutation of "
                                 f"the {len(dims)} dimension(s) of {tname}[...]", i)
            layout = Layout(m2m, **(extras or {}))
        return Shape(ptype, tuple(dims), layout,
                     tuple(dynamic) if any(dynamic) else (False,) * len(dims))

    def array_shape(self) -> Shape:
        """TYPE '[' dims ']' [layout], written with spaces or comments inside."""
        K, V = self.K, self.V
        i = self.i
        tname = V[i]
        self.i += 2
        dims, dynamic = [], []
        if not self.at("]"):
            while True:
                k, t = K[self.i], V[self.i]
                if k == INT and not t.startswith("-"):
                    dims.append(int(t))
                    dynamic.append(False)
                elif k == OTHER and t == "?":
                    dims.append(UNBOUNDED)
                    dynamic.append(True)
                elif k == PUNCT and t == "<=" and K[self.i + 1] == INT:
                    self.i += 1
                    dims.append(int(V[self.i]))
                    dynamic.append(True)
                else:
                    raise self.error(f"expected a dimension size in shape {tname}[...], found "
                                     f"{self.found()}")
                self.i += 1
                if not self.at(","):
                    break
                self.i += 1
        self.expect("]", f"to close the dimensions of shape {tname}[...]")
        base = self.make_array(tname, dims, dynamic, None, i)
        if K[self.i] == INTLIST or (self.at("{") and (
                K[self.i + 1] == INT or (K[self.i + 1] == PUNCT and V[self.i + 1] == ":"))):
            return base.with_layout(self.layout(base))
        return base

    def layout(self, shape: Shape) -> Layout:
        K, V = self.K, self.V
        start = self.i
        if K[start] == INTLIST:
            m2m = tuple(int(x) for x in V[start][1:-1].split(","))
            self.i += 1
            extras = {}
        else:
            self.i += 1
            m2m = []
            while K[self.i] == INT:
                m2m.append(int(V[self.i]))
                self.i += 1
                if not self.at(","):
                    break
                self.i += 1
            extras = {}
            if self.at(":"):
                self.i += 1
                extras = self.layout_extras()
            self.expect("}", "to close the layout")
        if sorted(m2m) != list(range(shape.rank)):
            raise self.error(f"layout {{{','.join(map(str, m2m))}}} is not a permutation of the "
                             f"{shape.rank} dimension(s) of {shape.to_text(False)}", start)
        return Layout(tuple(m2m), **extras)

    def layout_extras(self) -> dict:
        """The fields after ':' in a layout: D T L # * E S SC P M (section 3.3)."""
        K, V = self.K, self.V
        out: dict = {}

        def paren_int(field):
            self.expect("(", f"after layout field {field}")
            if K[self.i] != INT:
                raise self.error(f"expected an integer in layout field {field}(...), found "
                                 f"{self.found()}")
            value = int(V[self.i])
            self.i += 1
            self.expect(")", f"to close layout field {field}(...)")
            return value

        def paren_type(field):
            self.expect("(", f"after layout field {field}")
            if K[self.i] != IDENT or V[self.i] not in PRIMITIVE_TYPES:
                raise self.error(f"expected a primitive type in layout field {field}(...), "
                                 f"found {self.found()}")
            value = V[self.i]
            self.i += 1
            self.expect(")", f"to close layout field {field}(...)")
            return value

        while not self.at("}"):
            i = self.i
            t = V[i]
            if K[i] not in (IDENT, OTHER):
                raise self.error(f"expected a layout field (T, L, E, S, ...) found {self.found()}")
            self.i += 1
            if t == "T":
                tiles = []
                while self.at("("):
                    self.i += 1
                    tile = []
                    while True:
                        if K[self.i] == INT:
                            tile.append(int(V[self.i]))
                        elif K[self.i] == OTHER and V[self.i] == "*":
                            tile.append(-1)
                        else:
                            raise self.error(f"expected a tile size in T(...), found "
                                             f"{self.found()}")
                        self.i += 1
                        if not self.at(","):
                            break
                        self.i += 1
                    self.expect(")", "to close a tile T(...)")
                    tiles.append(tuple(tile))
                if not tiles:
                    raise self.error(f"expected '(' after layout field T, found {self.found()}")
                out["tiles"] = tuple(tiles)
            elif t == "L":
                out["tail_padding_alignment"] = paren_int(t)
            elif t == "#":
                out["index_type"] = paren_type(t)
            elif t == "*":
                out["pointer_type"] = paren_type(t)
            elif t == "E":
                out["element_size_in_bits"] = paren_int(t)
            elif t == "S":
                out["memory_space"] = paren_int(t)
            elif t == "M":
                out["dynamic_shape_metadata_prefix_bytes"] = paren_int(t)
            elif t == "SC":
                configs = []
                while self.at("("):
                    self.i += 1
                    if K[self.i] != INT:
                        raise self.error(f"expected a dimension in SC(...), found {self.found()}")
                    dim = int(V[self.i])
                    self.i += 1
                    self.expect(":", "after the dimension in SC(dim:indices)")
                    idx = self.int_run("SC(...)")
                    self.expect(")", "to close SC(...)")
                    configs.append((dim, tuple(idx)))
                out["split_configs"] = tuple(configs)
            elif t == "P":
                self.expect("(", "after layout field P")
                out["physical_shape"] = self.shape("in layout field P(...)", MAX_DEPTH // 2)
                self.expect(")", "to close layout field P(...)")
            elif t == "D":
                if not self.at("("):
                    raise self.error(f"expected '(' after layout field D, found {self.found()}")
                start = self.i
                self.skip_balanced()
                out["dim_level_types"] = self.text[self.S[start] + 1:self.S[self.i - 1]]
            else:
                raise self.error(f"unknown layout field '{t}'", i)
        return out

    def int_run(self, what: str) -> list[int]:
        """INT (',' INT)* — at least one."""
        out = []
        while True:
            if self.K[self.i] != INT:
                raise self.error(f"expected an integer in {what}, found {self.found()}")
            out.append(int(self.V[self.i]))
            self.i += 1
            if not self.at(","):
                return out
            self.i += 1

    # ---- literals ---------------------------------------------------------------
    def literal(self, shape: Shape, name: str, depth: int) -> Literal:
        K, V = self.K, self.V
        i = self.i
        if K[i] == PUNCT and V[i] == "{" and K[i + 1] == PUNCT and V[i + 1] == "..." \
                and K[i + 2] == PUNCT and V[i + 2] == "}":
            self.i = i + 3
            return Literal(shape, None)
        if depth > MAX_DEPTH:
            raise self.error(f"constant {name} is nested more than {MAX_DEPTH} levels deep")
        if shape.is_tuple:
            self.expect("(", f"to open the tuple value of constant {name}")
            elems = []
            for n, sub in enumerate(shape.tuple_shapes):
                if n:
                    self.expect(",", f"between tuple elements of constant {name}")
                elems.append(self.literal(sub, name, depth + 1))
            self.expect(")", f"to close the tuple value of constant {name} "
                        f"({len(shape.tuple_shapes)} elements)")
            return Literal(shape, tuple(elems))
        if not shape.is_array:
            raise self.error(f"constant {name} has shape {shape}; only array and tuple constants "
                             "are supported")
        if shape.is_dynamic:
            raise self.error(f"constant {name} has dynamic dimensions ({shape}); constants need "
                             "static shapes")
        items: list = []
        where: list[int] = []
        is_complex = shape.element_type.is_complex
        if shape.rank == 0:
            self.scalar_item(items, where, is_complex, name)
        else:
            self.array_items(shape, 0, items, where, is_complex, name)
        try:
            value = build_array(shape.element_type, shape.dims, items)
        except LiteralValueError as e:
            raise self.error(f"constant {name}: {e}", where[e.index] if where else i) from None
        return Literal(shape, value)

    def scalar_item(self, items, where, is_complex, name) -> None:
        K, V = self.K, self.V
        if is_complex:
            where.append(self.i)
            self.expect("(", f"to open a complex value (re, im) in constant {name}")
            parts = []
            for n in range(2):
                if n:
                    self.expect(",", f"between the parts of a complex value in constant {name}")
                if K[self.i] not in _SCALAR_KINDS:
                    raise self.error(f"expected a number in constant {name}, found "
                                     f"{self.found()}")
                parts.append(V[self.i])
                self.i += 1
            self.expect(")", f"to close a complex value (re, im) in constant {name}")
            items.append((parts[0], parts[1]))
            return
        if K[self.i] not in _SCALAR_KINDS:
            raise self.error(f"expected a value in constant {name}, found {self.found()}")
        items.append(V[self.i])
        where.append(self.i)
        self.i += 1

    def array_items(self, shape, level, items, where, is_complex, name) -> None:
        K, V = self.K, self.V
        dims = shape.dims
        innermost = level == len(dims) - 1
        open_i = self.i
        if innermost and K[open_i] == INTLIST and not is_complex:
            values = V[open_i][1:-1].split(",")
            items.extend(values)
            where.extend([open_i] * len(values))
            count = len(values)
            self.i += 1
        else:
            self.expect("{", f"to open dimension {level} of constant {name} "
                        f"({shape.to_text(False)})")
            count = 0
            if not self.at("}"):
                while True:
                    if innermost:
                        self.scalar_item(items, where, is_complex, name)
                    else:
                        self.array_items(shape, level + 1, items, where, is_complex, name)
                    count += 1
                    if not self.at(","):
                        break
                    self.i += 1
            self.expect("}", f"to close dimension {level} of constant {name}")
        if count != dims[level]:
            raise self.error(f"constant {name}: dimension {level} has {count} element"
                             f"{'s' if count != 1 else ''} but the shape "
                             f"{shape.to_text(False)} needs {dims[level]}", open_i)

    # ---- raw text values -------------------------------------------------------
    def skip_balanced(self) -> None:
        """Skip from an opening bracket to its partner (strings are single tokens)."""
        K, V = self.K, self.V
        stack = []
        j = self.i
        while True:
            k = K[j]
            if k == PUNCT:
                t = V[j]
                if t in _OPEN:
                    stack.append(j)
                elif t in _CLOSE:
                    if not stack or _OPEN[V[stack[-1]]] != t:
                        raise self.error(f"unbalanced '{t}'" + (
                            f": expected '{_OPEN[V[stack[-1]]]}'" if stack else ""), j)
                    stack.pop()
                    if not stack:
                        self.i = j + 1
                        return
            elif k == EOF:
                raise self.error(f"expected '{_OPEN[V[stack[-1]]]}' to match the "
                                 f"'{V[stack[-1]]}' on line {self.line_of(stack[-1])}, found "
                                 "end of input", j)
            j += 1

    def raw_value(self, what: str) -> str:
        """A value kept as text: a bracketed group, a string or a token, plus anything
        glued to it without spaces (`[2,2]<=[4]`)."""
        K, V = self.K, self.V
        start = self.i
        while True:
            k, t = K[self.i], V[self.i]
            if k == EOF or (k == PUNCT and (t == "," or t in _CLOSE)):
                if self.i == start:
                    raise self.error(f"expected a value for {what}, found {self.found()}")
                break
            if k == PUNCT and t in _OPEN:
                self.skip_balanced()
            else:
                self.i += 1
            if self.S[self.i] != self.end_of(self.i - 1):
                break
        return self.text[self.S[start]:self.end_of(self.i - 1)]

    # ---- typed attribute values (one method per opcodes.py kind) -------------------
    def v_int(self, what: str) -> int:
        if self.K[self.i] != INT:
            raise self.error(f"{what} expects an integer, found {self.found()}")
        self.i += 1
        return int(self.V[self.i - 1])

    def v_bool(self, what: str) -> bool:
        t = self.V[self.i]
        if self.K[self.i] != IDENT or t not in ("true", "false"):
            raise self.error(f"{what} expects true or false, found {self.found()}")
        self.i += 1
        return t == "true"

    def v_float(self, what: str) -> float:
        if self.K[self.i] not in (INT, FLOAT, SPECIAL) or "(" in self.V[self.i]:
            raise self.error(f"{what} expects a number, found {self.found()}")
        self.i += 1
        return float(self.V[self.i - 1])

    def v_word(self, what: str) -> str:
        if self.K[self.i] != IDENT:
            raise self.error(f"{what} expects a word like kLoop or LT, found {self.found()}")
        self.i += 1
        return self.V[self.i - 1]

    def v_string(self, what: str) -> str:
        if self.K[self.i] != STRING:
            raise self.error(f"{what} expects a quoted string, found {self.found()}")
        try:
            value = lx.unquote(self.V[self.i])
        except ValueError as e:
            raise self.error(f"{what}: {e}") from None
        self.i += 1
        return value

    def v_ints(self, what: str) -> tuple[int, ...]:
        K, V = self.K, self.V
        i = self.i
        if K[i] == INTLIST:
            self.i = i + 1
            return tuple(int(x) for x in V[i][1:-1].split(","))
        if K[i] == PUNCT and V[i] == "{":
            if K[i + 1] == PUNCT and V[i + 1] == "}":
                self.i = i + 2
                return ()
            if K[i + 1] == INT:
                self.i = i + 1
                values = self.int_run(what)
                if self.at("}"):
                    self.i += 1
                    return tuple(values)
        raise self.error(f"{what} expects an integer list like {{0,1}}, found {self.found()}")

    def v_intss(self, what: str) -> tuple[tuple[int, ...], ...]:
        self.expect("{", f"to open {what} (a list of integer lists like {{{{0,1}},{{2,3}}}})")
        out = []
        if not self.at("}"):
            while True:
                out.append(self.v_ints(what))
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}", f"to close {what}")
        return tuple(out)

    def v_replica_groups(self, what: str) -> ReplicaGroups:
        if not self.at("["):
            return ReplicaGroups(self.v_intss(what))
        start = self.i
        self.i += 1
        gs = self.int_run(what)
        self.expect("]", f"after [groups,size] in {what}")
        if len(gs) != 2:
            raise self.error(f"{what}: the iota form needs [num_groups,group_size], found "
                             f"{len(gs)} number(s)", start)
        self.expect("<=", f"in the iota form of {what} ([G,S]<=[dims])")
        self.expect("[", f"in the iota form of {what} ([G,S]<=[dims])")
        dims = self.int_run(what)
        self.expect("]", f"to close the iota dimensions of {what}")
        perm = None
        if self.K[self.i] == IDENT and self.V[self.i] == "T" and self.at_next("("):
            self.i += 2
            perm = self.int_run(what)
            self.expect(")", f"to close T(...) in {what}")
        try:
            return ReplicaGroups.from_iota(gs[0], gs[1], dims, perm)
        except ValueError as e:
            raise self.error(f"{what}: {e}", start) from None

    def at_next(self, p: str) -> bool:
        return self.K[self.i + 1] == PUNCT and self.V[self.i + 1] == p

    def v_pairs(self, what: str):
        start = self.i
        pairs = self.v_intss(what)
        for p in pairs:
            if len(p) != 2:
                raise self.error(f"{what} expects {{source,target}} pairs, found "
                                 f"{{{','.join(map(str, p))}}}", start)
        return pairs

    def v_window(self, what: str) -> Window:
        K, V = self.K, self.V
        start = self.i
        self.expect("{", f"to open {what} (like {{size=3x3 stride=2x2}})")
        fields: dict[str, list] = {}
        while not self.at("}"):
            i = self.i
            if K[i] != ATTR:
                raise self.error(f"expected a window field like size= in {what}, found "
                                 f"{self.found()}")
            key = V[i][:-1]
            self.i += 1
            k, t = K[self.i], V[self.i]
            if key == "pad":
                if k not in (PAD,):
                    raise self.error(f"window pad expects low_high per dimension like 1_1x0_0, "
                                     f"found {self.found()}")
                fields[key] = [tuple(int(x) for x in d.split("_")) for d in t.split("x")]
                if any(len(d) != 2 for d in fields[key]):
                    raise self.error(f"window pad expects low_high per dimension, found {t}")
            elif key in ("size", "stride", "lhs_dilate", "rhs_dilate", "rhs_reversal"):
                if k == INT or k == DXD:
                    fields[key] = [int(x) for x in t.split("x")]
                else:
                    raise self.error(f"window {key} expects sizes like 3x3, found {self.found()}")
            else:
                raise self.error(f"unknown window field {key}= in {what}", i)
            self.i += 1
        self.i += 1
        if not fields:
            return Window(())
        if "size" not in fields:
            raise self.error(f"{what} has no size=", start)
        n = len(fields["size"])
        for key, values in fields.items():
            if len(values) != n:
                raise self.error(f"{what}: {key} has {len(values)} dimension(s) but size has "
                                 f"{n}", start)
        dims = []
        for d in range(n):
            lo, hi = fields["pad"][d] if "pad" in fields else (0, 0)
            dims.append(WindowDim(
                size=fields["size"][d],
                stride=fields["stride"][d] if "stride" in fields else 1,
                padding_low=lo, padding_high=hi,
                window_dilation=fields["rhs_dilate"][d] if "rhs_dilate" in fields else 1,
                base_dilation=fields["lhs_dilate"][d] if "lhs_dilate" in fields else 1,
                window_reversal=bool(fields["rhs_reversal"][d]) if "rhs_reversal" in fields
                else False))
        return Window(tuple(dims))

    def v_dim_labels(self, what: str) -> ConvDimensionNumbers:
        if self.K[self.i] != DIMLABELS:
            raise self.error(f"{what} expects labels like b01f_01io->b01f, found {self.found()}")
        try:
            value = ConvDimensionNumbers.from_text(self.V[self.i])
        except ValueError as e:
            raise self.error(f"{what}: {e}") from None
        self.i += 1
        return value

    def v_padding(self, what: str) -> PaddingConfig:
        if self.K[self.i] != PAD:
            raise self.error(f"{what} expects low_high[_interior] per dimension like 0_1x2_2, "
                             f"found {self.found()}")
        dims = []
        for d in self.V[self.i].split("x"):
            parts = [int(x) for x in d.split("_")]
            dims.append((parts[0], parts[1], parts[2] if len(parts) > 2 else 0))
        self.i += 1
        return PaddingConfig(tuple(dims))

    def v_slice(self, what: str) -> SliceSpec:
        self.expect("{", f"to open {what} (like {{[0:2], [1:5:2]}})")
        dims = []
        if not self.at("}"):
            while True:
                self.expect("[", f"to open a dimension of {what}")
                parts = []
                while True:
                    if self.K[self.i] != INT:
                        raise self.error(f"expected an integer in {what}, found {self.found()}")
                    parts.append(int(self.V[self.i]))
                    self.i += 1
                    if not self.at(":") or len(parts) == 3:
                        break
                    self.i += 1
                if len(parts) < 2:
                    raise self.error(f"{what} expects [start:limit] or [start:limit:stride], "
                                     f"found {self.found()}")
                self.expect("]", f"to close a dimension of {what}")
                dims.append((parts[0], parts[1], parts[2] if len(parts) == 3 else 1))
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}", f"to close {what}")
        return SliceSpec(tuple(dims))

    def v_computation(self, what: str) -> Computation:
        k, t = self.K[self.i], self.V[self.i]
        if k not in (NAME, IDENT):
            raise self.error(f"{what} expects a computation name, found {self.found()}")
        comp = self.comps.get(t[1:] if k == NAME else t)
        if comp is None:
            raise self.error(f"computation {t} used by {what} is not defined; computations must "
                             "be defined before they are used")
        self.i += 1
        return comp

    def v_computations(self, what: str) -> list[Computation]:
        self.expect("{", f"to open {what}")
        out = []
        if not self.at("}"):
            while True:
                out.append(self.v_computation(what))
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}", f"to close {what}")
        return out

    def v_shape(self, what: str) -> Shape:
        return self.shape(f"for {what}")

    def v_shapes(self, what: str) -> tuple[Shape, ...]:
        self.expect("{", f"to open {what}")
        out = []
        if not self.at("}"):
            while True:
                out.append(self.shape(f"in {what}"))
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}", f"to close {what}")
        return tuple(out)

    def v_words(self, what: str) -> tuple[str, ...]:
        self.expect("{", f"to open {what} (like {{default,high}})")
        out = []
        if not self.at("}"):
            while True:
                out.append(self.v_word(what))
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}", f"to close {what}")
        return tuple(out)

    def v_raw(self, what: str) -> RawAttr:
        return RawAttr(self.raw_value(what))


# Attribute kind (opcodes.py) -> _Parser method that reads a value of that kind.
_KIND = {
    "int": "v_int", "bool": "v_bool", "float": "v_float", "word": "v_word",
    "string": "v_string", "ints": "v_ints", "intss": "v_intss",
    "replica_groups": "v_replica_groups", "pairs": "v_pairs", "window": "v_window",
    "dim_labels": "v_dim_labels", "padding": "v_padding", "slice": "v_slice",
    "computation": "v_computation", "computations": "v_computations", "shape": "v_shape",
    "shapes": "v_shapes", "words": "v_words", "raw": "v_raw",
}
