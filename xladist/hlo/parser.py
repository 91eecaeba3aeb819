"""HLO text -> ir.Module (docs/reference/hlo-text-format.md sections 1-6, 10, 11).

Accepts both of XLA's print styles and any mix: `%` sigils or not, operand shapes
or not, program shapes in computation headers or not, comments anywhere,
instructions spread over several lines, header-less modules. Attribute values are
parsed by the kind that opcodes.py gives them (one reader per kind, parse_values.py);
attributes unknown to the schema are kept as `attrs.RawAttr` text.

Every malformed input raises `HloParseError` with the line, the column of the
offending token and the line's text; no other exception leaves `parse_module`.
"""

from __future__ import annotations

import re

from ..errors import HloParseError
from .attrs import RawAttr
from .ir import Computation, Instruction, Module
from .lexer import (ATTR, BRACED, EOF, IDENT, INT, INTLISTS, LABEL, NAME, PUNCT, SHAPE, SPECIAL,
                    STRING)
from .opcodes import ASYNC_SUGAR_SUFFIXES, COMMON_ATTRS, OPCODES
from .parse_values import KIND_READERS, TokenCursor
from .shape import PRIMITIVE_TYPES, Shape
from .shape_inference import ShapeError, infer_shape

__all__ = ["parse_module", "parse_text"]

_SCHEMAS = {name: {a.name: a for a in info.attrs} for name, info in OPCODES.items()}
_COMMON = frozenset(COMMON_ATTRS)
_KEYWORDS = frozenset({"ROOT", "ENTRY", "HloModule"})
# Names XLA's short style prints bare although its lexer reads them as floats (`%inf` is
# printed `inf`): read as names where a name must stand, so the short style parses back.
_FLOAT_WORDS = frozenset({"inf", "nan"})


def parse_module(text: str, filename: str | None = None) -> Module:
    """Parse HLO module text (either print style) into an `ir.Module`.

    Raises HloParseError (with line, column and the line's text) for anything
    malformed. `filename` only appears in error messages. Text as a user hands it over:
    a leading byte-order mark is dropped (files.without_mark, as from a file: text read
    with encoding="utf-8" keeps it), bytes are decoded as a file's (files.utf8_text).
    """
    from ..files import utf8_text, without_mark
    if isinstance(text, (bytes, bytearray)):
        from ..errors import InputError
        try:
            text = utf8_text(bytes(text), "the text", "HLO text")  # a leading BOM dropped
        except InputError as e:
            raise HloParseError(str(e), 1, 1, "", filename) from None
    elif isinstance(text, str):
        text = without_mark(text)
    return parse_text(text, filename)


# The start of an MLIR module: location aliases (`#loc1 = loc("a")`, as_text(debug_info=
# True)), then `module @name`, `module attributes {...}` or a bare `func.func @main`.
_MLIR = re.compile(r"\s*(?:#loc\w* = loc\(.*\)\s*)*(?P<head>)"
                   r"(?:module\s+(?:@|attributes\b)|func\.func\s)")


def parse_text(text: str, filename: str | None = None) -> Module:
    """`parse_module` of text a reader has decoded already (files.read_text / utf8_text:
    its leading mark dropped once there): parsed as it is, so a second mark is the error
    it is in the file."""
    mlir = _MLIR.match(text)
    if mlir:
        # What jax.jit(f).lower(x).as_text() gives: found before the lexer meets MLIR's types.
        line = text.count("\n", 0, mlir.end("head")) + 1
        raise HloParseError(
            "this is MLIR (StableHLO) text, not HLO text: JAX's "
            "`jax.jit(f).lower(...).as_text()` prints StableHLO; give "
            "`.as_text(dialect=\"hlo\")` instead (or `.compile().as_text()` for the module "
            "XLA optimized)", line, 1, text.splitlines()[line - 1], filename)
    p = _Parser(text, filename)
    try:
        return p.parse()
    except HloParseError:
        raise
    except RecursionError:
        raise p.error("the text is nested too deeply") from None
    except Exception as e:  # noqa: BLE001 - a bug in this parser; still report where it was
        # Reported as a parse error at the current token so callers only ever see
        # HloParseError; the fuzz test fails on this message.
        raise p.error(f"internal parser error ({type(e).__name__}: {e}); "
                      f"please report this input") from e


def parse_file(path, what: str = "module file") -> Module:
    """Read and parse an HLO text file: InputError when it cannot be read (`what` names it
    in the message), HloParseError when it is not HLO."""
    from ..files import read_text
    return parse_text(read_text(path, what, kind="HLO text"), filename=str(path))


def _split_sugar(opcode: str):
    """`all-to-all-start` -> ('all-to-all', '-start') when the rest is a known opcode."""
    for suffix in ASYNC_SUGAR_SUFFIXES:
        if opcode.endswith(suffix) and opcode[:-len(suffix)] in OPCODES:
            return opcode[:-len(suffix)], suffix
    return None


class _Parser(TokenCursor):
    """Modules, computations and instructions; values are read by TokenCursor."""

    def __init__(self, text: str, filename: str | None):
        super().__init__(text, filename)
        self.wrappers: list[Computation] = []
        # Computations the parser named (a body written in place, an async op's wrapped
        # computation): never found by a name in the text, and renamed when the text later
        # defines a computation of that name (_rename_generated).
        self.generated: dict[str, Computation] = {}
        # Names made up for operands written inline, per computation (a later written name
        # that collides takes precedence: the made-up one is renamed).
        self.inline_names: set[str] = set()
        self.inline_count = 0

    # ---- module -------------------------------------------------------------
    def parse(self) -> Module:
        kinds, texts = self.kinds, self.texts
        if kinds[0] == IDENT and texts[0] == "HloModule":
            self.i = 1
            if kinds[1] == NAME:
                name = texts[1][1:]
            elif kinds[1] == IDENT:
                name = texts[1]
            elif kinds[1] == LABEL:  # `HloModule name:` (XLA's lexer reads `name:` as a name)
                name = texts[1][:-1]
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
        if kinds[self.i] == IDENT and texts[self.i] == "FileNames":
            self.stack_frames(module)
        while kinds[self.i] != EOF:
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
        if self.kinds[i] != ATTR:
            raise self.error("expected a module attribute like entry_computation_layout=... "
                             f"after ',', found {self.found()}")
        key = self.texts[i][:-1]
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
            module.declared_counts = module.declared_counts | {key}
        elif key == "entry_computation_layout":
            self.expect("{", f"to open {key}")
            params, result = self.program_shape(key)
            self.expect("}", f"to close {key}")
            module.entry_computation_layout = (params, result)
        elif key in ("input_output_alias", "buffer_donor"):
            module.header_attrs[key] = self.aliasing(key, module)
        elif key == "frontend_attributes":
            module.frontend_attributes = self.frontend_attributes(what)
        else:
            module.header_attrs[key] = self.raw_value(what)

    def aliasing(self, key: str, module: Module) -> str:
        """Read `input_output_alias={ {0}: (0, {}, may-alias), ... }` or
        `buffer_donor={ (0, {}), ... }` as XLA's parser does (XLA rejects a malformed one:
        hlo_parser_test.cc AliasingWrongIndex, BufferDonor*) into module.input_output_alias /
        module.buffer_donors, and keep the text."""
        alias = key == "input_output_alias"
        start = self.i
        self.expect("{", f"to open {key}")
        if not self.at("}"):
            while True:
                output = ()
                if alias:
                    output = self.v_ints(f"the output shape index in {key}")
                    self.expect(":", f"after the output shape index in {key}")
                self.expect("(", f"to open a (parameter, shape index) pair in {key}")
                param = self.v_int(f"the parameter number in {key}")
                self.expect(",", f"after the parameter number in {key}")
                index = self.v_ints(f"the parameter shape index in {key}")
                kind = "may-alias"
                if alias and self.at(","):
                    self.i += 1
                    if self.texts[self.i] not in ("may-alias", "must-alias"):
                        raise self.error(f"expected may-alias or must-alias in {key}, "
                                         f"found {self.found()}")
                    kind = self.texts[self.i]
                    self.i += 1
                self.expect(")", f"to close a (parameter, shape index) pair in {key}")
                if alias:
                    module.input_output_alias.append((output, param, index, kind))
                else:
                    module.buffer_donors.append((param, index))
                if not self.at(","):
                    break
                self.i += 1
        self.expect("}", f"to close {key}")
        return self.text[self.starts[start]:self.end_of(self.i - 1)]

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
        kinds, texts = self.kinds, self.texts
        start = self.starts[self.i]
        for section, item in (("FileNames", STRING), ("FunctionNames", STRING),
                              ("FileLocations", "{"), ("StackFrames", "{")):
            if kinds[self.i] != IDENT or texts[self.i] != section:
                raise self.error(f"expected the {section} section of the stack frame table, "
                                 f"found {self.found()}")
            self.i += 1
            while kinds[self.i] == INT:
                self.i += 1
                if item == STRING:
                    if kinds[self.i] != STRING:
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
        kinds, texts = self.kinds, self.texts
        i = first = self.i
        is_entry = kinds[i] == IDENT and texts[i] == "ENTRY"
        if is_entry:
            i += 1
        if kinds[i] == NAME:
            name = texts[i][1:]
        elif kinds[i] == IDENT and texts[i] not in _KEYWORDS:
            name = texts[i]
        else:
            raise self.error("expected a computation (like '%name (p: f32[]) -> f32[] {' or "
                             f"'ENTRY main {{'), found {self.found(i)}", i)
        if name in self.generated:
            self._rename_generated(name)
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
        comp = self.body(name, first)
        if declared is not None and not declared.compatible(comp.root.shape):
            raise self.error(f"computation {name} declares result shape "
                             f"{declared.to_text(False)} but its root {comp.root.name} has shape "
                             f"{comp.root.shape.to_text(False)}", first)
        if self.at(",") and kinds[self.i + 1] == ATTR and texts[self.i + 1] == "execution_thread=":
            self.i += 2
            comp.execution_thread = self.v_string(f"execution_thread of computation {name}")
        for w in self.wrappers:
            module.add_computation(w)
        self.wrappers = []
        module.add_computation(comp, entry=is_entry)
        self.comps[name] = comp

    def body(self, name: str, first: int) -> Computation:
        """The instructions of computation `name` up to its closing '}' (the '{' is read)."""
        kinds, texts = self.kinds, self.texts
        comp = Computation(name)
        comp.line = self.line_of(first)
        symbols: dict[str, Instruction] = {}
        params: dict[int, Instruction] = {}
        outer_inline, self.inline_names = self.inline_names, set()
        while not (kinds[self.i] == PUNCT and texts[self.i] == "}"):
            if kinds[self.i] == EOF:
                raise self.error(f"expected '}}' to close computation {name}, "
                                 "found end of input")
            self.instruction(comp, symbols, params)
        if not comp.instructions:
            raise self.error(f"computation {name} has no instructions")
        self.i += 1
        if comp.root is None:
            comp.root = comp.instructions[-1]
        self.inline_names = outer_inline
        return comp

    def nested_computation(self, what: str) -> Computation:
        """A computation's body written where its name would go (`to_apply={ ... }`), as
        XLA's parser takes it and HloPrintOptions::Canonical prints it. It gets a fresh name
        and joins the module before the computation that uses it."""
        first = self.i
        self.i += 1
        comp = self.body(self._fresh("nested_computation"), first)
        self.generated[comp.name] = comp
        self.wrappers.append(comp)
        return comp

    def _fresh(self, base: str, avoid: tuple = ()) -> str:
        """`base`, or `base.1`, `base.2`, ...: a computation name not taken so far (nor in
        `avoid`)."""
        name, n = base, 0
        while name in self.comps or name in self.generated or name in avoid:
            n += 1
            name = f"{base}.{n}"
        return name

    def _rename_generated(self, name: str) -> None:
        """The text defines a computation called `name`, a name the parser gave one of its
        own: that one takes another (nothing in the text can refer to it by name), so the
        module's computations keep distinct names and print and parse back as they are."""
        comp = self.generated.pop(name)
        comp.name = self._fresh(name, avoid=(name,))
        self.generated[comp.name] = comp

    def signature(self, cname: str) -> Shape:
        """`(p0: f32[2], p1: s32[]) -> f32[2]`; returns the declared result shape."""
        kinds, texts = self.kinds, self.texts
        self.i += 1
        if not self.at(")"):
            while True:
                k = kinds[self.i]
                if k == LABEL:
                    self.i += 1
                elif k in (NAME, IDENT) and kinds[self.i + 1] == PUNCT and texts[self.i + 1] == ":":
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
        kinds, texts = self.kinds, self.texts
        i = first = self.i
        is_root = kinds[i] == IDENT and texts[i] == "ROOT"
        if is_root:
            i += 1
        k = kinds[i]
        name_i = i
        if k == NAME or (k == IDENT and texts[i] not in _KEYWORDS) or (
                k == SPECIAL and texts[i] in _FLOAT_WORDS):
            name = texts[i][1:] if k == NAME else texts[i]
            i += 1
            if kinds[i] != PUNCT or texts[i] != "=":
                raise self.error(f"expected '=' after instruction name {texts[name_i]}, "
                                 f"found {self.found(i)}", i)
            i += 1
        elif k == ATTR:  # `x=f32[] ...` written without spaces
            name = texts[i][:-1]
            i += 1
        else:
            raise self.error("expected an instruction (like '%x = f32[] add(%a, %b)') or '}' "
                             f"to close computation {comp.name}, found {self.found(i)}", i)
        if name in symbols:
            if name not in self.inline_names:
                raise self.error(f"instruction {name} is defined twice in computation "
                                 f"{comp.name}", name_i)
            self.rename_inline(symbols, name)   # the written name wins over a made-up one
        self.i = i
        instr = self.instruction_rhs(comp, symbols, params, name, name_i, first)
        comp.add(instr)
        symbols[name] = instr
        if is_root:
            if comp.root is not None:
                raise self.error(f"computation {comp.name} has two ROOT instructions "
                                 f"({comp.root.name} and {name})", first)
            comp.root = instr

    def instruction_rhs(self, comp: Computation, symbols: dict, params: dict, name: str,
                        name_i: int, first: int, shape=None, nested: bool = False
                        ) -> Instruction:
        """`[shape] opcode(operands)[, attributes]` after `name =`, or an operand written
        inline (`nested`; its shape, if written, already read). Without a shape the result
        shape is inferred from the operands and attributes, as XLA's parser does."""
        kinds, texts = self.kinds, self.texts
        i = self.i
        if shape is None and not nested and not (
                kinds[i] == IDENT and kinds[i + 1] == PUNCT and texts[i + 1] == "("
                and (texts[i] in OPCODES or _split_sugar(texts[i]))):
            shape = self.shape(f"as the result of {name} (after '=')")
            i = self.i
        if kinds[i] != IDENT:
            raise self.error(f"expected the opcode of {name} after its shape, found "
                             f"{self.found(i)}", i)
        opcode = texts[i]
        op_i = i
        sugar = None
        if opcode not in OPCODES:
            sugar = _split_sugar(opcode)
            if sugar is None:
                raise self.error(f"unknown opcode '{opcode}'", i)
        i += 1
        if kinds[i] != PUNCT or texts[i] != "(":
            raise self.error(f"expected '(' after opcode {opcode} of {name}, found "
                             f"{self.found(i)}", i)
        if shape is None and (sugar is not None or opcode in ("parameter", "constant")):
            raise self.error(f"{opcode} {name} needs its result shape written before the "
                             f"opcode (like 'f32[2] {opcode}(...)'): it cannot be inferred", op_i)
        self.i = i + 1
        instr = Instruction(name, opcode, shape)
        instr.line = self.line_of(first)
        if opcode == "parameter":
            if kinds[self.i] != INT:
                raise self.error(f"expected the parameter number in parameter {name}, found "
                                 f"{self.found()}")
            n = int(texts[self.i])
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
            instr.operands = self.operands(name, symbols, comp, params)
        if sugar is None:
            info = OPCODES[opcode]
            if info.arity is not None and len(instr.operands) != info.arity and \
                    opcode not in ("parameter", "constant"):
                raise self.error(f"{opcode} {name} takes {info.arity} operand"
                                 f"{'s' if info.arity != 1 else ''}, found "
                                 f"{len(instr.operands)}", op_i)
            self.attributes(instr, _SCHEMAS[opcode], instr.attrs, None, symbols, comp,
                            inline=nested)
            if opcode == "broadcast" and "dimensions" not in instr.attrs and \
                    instr.operands[0].shape is not None and \
                    instr.operands[0].shape.is_array and instr.operands[0].shape.rank == 0:
                # As XLA's parser: a scalar's broadcast dimensions can only be {}.
                instr.attrs["dimensions"] = ()
            self.check_required(instr, _SCHEMAS[opcode], instr.attrs, name_i)
        elif nested:
            raise self.error(f"{opcode} cannot be written inline as an operand; give it its "
                             "own line", op_i)
        else:
            self.async_sugar(instr, sugar, op_i, name_i, symbols, comp)
        if instr.shape is None:
            try:
                instr.shape = infer_shape(opcode, [o.shape for o in instr.operands], instr.attrs)
            except ShapeError as e:
                raise self.error(f"the result shape of {name} is not written and cannot be "
                                 f"inferred: {e}", op_i) from None
        return instr

    def rename_inline(self, symbols: dict, name: str) -> None:
        instr = symbols.pop(name)
        self.inline_names.discard(name)
        instr.name = self.fresh_inline_name(symbols, instr.opcode)
        symbols[instr.name] = instr
        self.inline_names.add(instr.name)

    def fresh_inline_name(self, symbols: dict, opcode: str) -> str:
        self.inline_count += 1
        name = f"{opcode}.inline.{self.inline_count}"
        while name in symbols:
            self.inline_count += 1
            name = f"{opcode}.inline.{self.inline_count}"
        return name

    def operands(self, name: str, symbols: dict, comp: Computation, params: dict) -> list:
        kinds, texts = self.kinds, self.texts
        ops: list[Instruction] = []
        i = self.i
        if kinds[i] == PUNCT and texts[i] == ")":
            self.i = i + 1
            return ops
        while True:
            k = kinds[i]
            declared = None
            if k == SHAPE or (k == PUNCT and texts[i] == "(") or (
                    k == IDENT and texts[i] in PRIMITIVE_TYPES and texts[i + 1] == "[") or (
                    k == IDENT and texts[i] == "b" and texts[i + 1] == "("):  # b(f32[4]) x
                self.i = i
                declared = self.shape(f"for an operand of {name}")
                i = self.i
                k = kinds[i]
            if k == IDENT and kinds[i + 1] == PUNCT and texts[i + 1] == "(":
                # An operand written inline (`add(x, s32[] constant(1))`): an instruction of
                # its own, made up a name, placed before the one that uses it.
                self.i = i
                inner = self.instruction_rhs(comp, symbols, params,
                                             self.fresh_inline_name(symbols, texts[i]), i, i,
                                             shape=declared, nested=True)
                comp.add(inner)
                symbols[inner.name] = inner
                self.inline_names.add(inner.name)
                ops.append(inner)
                i = self.i
                if kinds[i] == PUNCT and texts[i] in ",)":
                    i += 1
                    if texts[i - 1] == ",":
                        continue
                    self.i = i
                    return ops
                raise self.error(f"expected ')' after operands of {name}, found "
                                 f"{self.found(i)}", i)
            if k == NAME:
                op = symbols.get(texts[i][1:])
            elif k == IDENT or (k == SPECIAL and texts[i] in _FLOAT_WORDS):
                op = symbols.get(texts[i])
            else:
                raise self.error(f"expected an operand name in the operands of {name}, found "
                                 f"{self.found(i)}", i)
            if op is None:
                raise self.error(f"operand {texts[i]} of {name} is not defined in computation "
                                 f"{comp.name}", i)
            if declared is not None and not declared.compatible(op.shape):
                raise self.error(f"operand {texts[i]} of {name} is written with shape "
                                 f"{declared.to_text(False)} but {op.name} has shape "
                                 f"{op.shape.to_text(False)}", i)
            ops.append(op)
            i += 1
            if kinds[i] == PUNCT:
                t = texts[i]
                if t == ",":
                    i += 1
                    continue
                if t == ")":
                    self.i = i + 1
                    return ops
            raise self.error(f"expected ')' after operands of {name}, found {self.found(i)}", i)

    def attributes(self, instr, schema, attrs, extra, symbols, comp, inline=False) -> None:
        """`, key=value` pairs: common ones go to Instruction fields, the rest by kind.

        `extra` is a second (schema, attrs) target used by async sugar: attributes of
        the wrapped op are stored on the wrapped instruction. `inline`: an operand written
        inline, whose attributes end at a ',' that starts the next operand.
        """
        kinds, texts = self.kinds, self.texts
        name = instr.name
        while kinds[self.i] == PUNCT and texts[self.i] == ",":
            if inline and kinds[self.i + 1] != ATTR:
                return
            self.i += 1
            i = self.i
            if kinds[i] != ATTR:
                raise self.error(f"expected an attribute like dimensions={{0}} after ',' in "
                                 f"{name}, found {self.found(i)}", i)
            key = texts[i][:-1]
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
                target[key] = getattr(self, KIND_READERS[spec.kind])(what)

    def check_required(self, instr, schema, attrs, name_i) -> None:
        for spec in schema.values():
            if spec.required and spec.name not in attrs:
                raise self.error(f"missing required attribute {spec.name} on {instr.name}",
                                 name_i)

    def common_attr(self, instr: Instruction, key: str, symbols: dict, comp) -> None:
        what = f"attribute {key} of {instr.name}"
        if key == "metadata":
            if self.kinds[self.i] == BRACED:   # the whole {...} as one token (lexer.py)
                instr.metadata = self.texts[self.i][1:-1]
                self.i += 1
                return
            if not self.at("{"):
                raise self.error(f"{what} expects {{...}}, found {self.found()}")
            start = self.i
            self.skip_balanced()
            instr.metadata = self.text[self.starts[start] + 1:self.starts[self.i - 1]]
        elif key == "frontend_attributes":
            instr.frontend_attributes = self.frontend_attributes(what)
        elif key == "control-predecessors":
            for ref_i, ref in self.name_list(what):
                pred = symbols.get(ref)
                if pred is None:
                    raise self.error(f"control predecessor {self.texts[ref_i]} of {instr.name} is "
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
                if self.kinds[i] != ATTR:
                    raise self.error(f"expected key=value in {what}, found {self.found()}")
                key = self.texts[i][:-1]
                self.i += 1
                if self.kinds[self.i] == STRING:
                    out[key] = self.v_string(what)
                elif self.kinds[self.i] == INTLISTS:  # unquoted _xla_send_recv_source_target_pairs
                    out[key] = self.texts[self.i]
                    self.i += 1
                elif self.at("{"):
                    start = self.i
                    self.skip_balanced()
                    out[key] = self.text[self.starts[start]:self.end_of(self.i - 1)]
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
                k = self.kinds[self.i]
                if k not in (NAME, IDENT) and not (k == SPECIAL
                                                   and self.texts[self.i] in _FLOAT_WORDS):
                    raise self.error(f"expected a name in {what}, found {self.found()}")
                out.append((self.i, self.texts[self.i][1:] if k == NAME else self.texts[self.i]))
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
            # Never printed nor referenced by name; unique so module.computation() works.
            wname = self._fresh(f"{name}.wrapped_computation")
            wrapped = Computation(wname)
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
            self.generated[wname] = wrapped
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
            raise self.error(f"{base}{suffix} {name} expects the result of {base}-start or "
                             f"{base}-update as its operand, found {src.name} ({src.opcode})",
                             op_i)
        instr.attrs["calls"] = calls
