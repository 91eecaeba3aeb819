"""Token-level reading of HLO values: shapes, layouts, literals, attribute values.

`TokenCursor` walks the token lists of lexer.tokenize and knows how to read every
value syntax of docs/reference/hlo-text-format.md sections 3, 4.6 and 5; parser.py builds modules,
computations and instructions on top of it. Each attribute kind of opcodes.py has
one reader method, listed in `KIND_READERS`.
"""

from __future__ import annotations

import re

from ..errors import HloParseError
from . import lexer as lx
from .attrs import (ConvDimensionNumbers, Literal, PaddingConfig, RawAttr, ReplicaGroups,
                    SliceSpec, Window, WindowDim)
from .collective_groups import iota_replica_groups, mesh_axes_replica_groups
from .ir import Computation
from .lexer import (ATTR, DIMLABELS, DXD, EOF, FLOAT, IDENT, INT, INTLIST, INTLISTS, LABEL, NAME, NUMBERS,
                    OTHER, PAD, PUNCT, SHAPE, SPECIAL, STRING)
from .literals import LiteralValueError, build_array
from .shape import PRIMITIVE_TYPES, UNBOUNDED, Layout, Shape

# Nesting limit for tuple shapes / tuple literals / layouts' P(...): deeper text is
# certainly not from XLA, and the limit keeps recursion far from Python's own.
MAX_DEPTH = 64

_OPEN = {"{": "}", "(": ")", "[": "]"}
_CLOSE = frozenset("})]")
_SCALAR_KINDS = frozenset({INT, FLOAT, SPECIAL, IDENT})


_PAIRS_TEXT = re.compile(r"\{\{-?\d+,-?\d+\}(?:,\{-?\d+,-?\d+\})*\}")


def _split_intlists(text: str) -> tuple[tuple[int, ...], ...]:
    """The value of an INTLISTS token `{{0,1},{1,2}}`. Pairs (the big case: permute rings
    over thousands of devices) are recognised by one C-level match and converted in one
    map, regrouped by zip: a tuple and a generator per pair cost seconds at 16,384."""
    if _PAIRS_TEXT.fullmatch(text):
        flat = map(int, text[2:-2].replace("},{", ",").split(","))
        return tuple(zip(flat, flat))
    return tuple(tuple(map(int, g.split(","))) for g in text[2:-2].split("},{"))


# A NUMBERS token without its numbers and spaces: its braces and commas, to compare with
# `_braces(dims)`; and what separates its numbers.
_NOT_BRACES = str.maketrans("", "", "0123456789.eE+- \t\n\r\f\v")
_BETWEEN_NUMBERS = re.compile(r"[\s{},]+")


def _braces(dims: tuple[int, ...]) -> str:
    """The braces and commas of an array literal of `dims` written out: (2, 3) -> {{,,},{,,}}."""
    text = "{" + "," * (dims[-1] - 1) + "}" if dims[-1] else "{}"
    for d in reversed(dims[:-1]):
        text = "{" + ",".join([text] * d) + "}"
    return text


class TokenCursor:
    """A position in the token lists of one text, with readers for value syntaxes."""

    def __init__(self, text: str, filename: str | None):
        self.text = text
        self.filename = filename
        self.lines = lx.LineIndex(text)
        self.i = 0
        self.kinds, self.texts, self.starts = lx.tokenize(text, self.lines, filename)
        self.comps: dict[str, Computation] = {}
        self.shape_cache: dict[str, Shape] = {}

    # ---- errors and small helpers ---------------------------------------------
    def error(self, message: str, i: int | None = None) -> HloParseError:
        i = self.i if i is None else min(i, len(self.starts) - 1)
        return self.lines.error(message, self.starts[i], self.filename)

    def found(self, i: int | None = None) -> str:
        i = self.i if i is None else i
        if self.kinds[i] == EOF:
            return "end of input"
        t = self.texts[i]
        if t == "\ufeff":  # invisible in most editors: name it
            return ("a byte-order mark (U+FEFF), which is not HLO text (xladist drops one "
                    "only where it starts the text)")
        return repr(t if len(t) <= 40 else t[:37] + "...")

    def at(self, p: str) -> bool:
        return self.kinds[self.i] == PUNCT and self.texts[self.i] == p

    def expect(self, p: str, context: str) -> None:
        if self.kinds[self.i] != PUNCT or self.texts[self.i] != p:
            raise self.error(f"expected '{p}' {context}, found {self.found()}")
        self.i += 1

    def end_of(self, j: int) -> int:
        return self.starts[j] + len(self.texts[j])

    def line_of(self, j: int) -> int:
        return self.lines.line_of(self.starts[j])

    # ---- shapes -----------------------------------------------------------------
    def shape(self, what: str, depth: int = 0) -> Shape:
        kinds, texts = self.kinds, self.texts
        i = self.i
        k = kinds[i]
        if k == SHAPE:
            t = texts[i]
            s = self.shape_cache.get(t)
            if s is None:
                s = self.shape_cache[t] = self.shape_from_token(t, i)
            self.i = i + 1
            if t[-1] == "]" and (
                    kinds[i + 1] == INTLIST or (kinds[i + 1] == PUNCT and texts[i + 1] == "{" and (
                        kinds[i + 2] == INT or (kinds[i + 2] == PUNCT and texts[i + 2] == ":")))):
                s = s.with_layout(self.layout(s))
            return s
        if depth > MAX_DEPTH:
            raise self.error(f"shape nested more than {MAX_DEPTH} levels deep")
        if k == PUNCT and texts[i] == "(":
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
        if k == IDENT and kinds[i + 1] == PUNCT:
            t = texts[i]
            if t in PRIMITIVE_TYPES and texts[i + 1] == "[":
                return self.array_shape()
            if t == "b" and texts[i + 1] == "(":
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

    def make_array(self, tname, dims, dynamic, m2m, i) -> Shape:
        ptype = PRIMITIVE_TYPES[tname]
        if not ptype.is_array_type and dims:
            raise self.error(f"{tname} shapes have no dimensions, found {tname}[...]", i)
        shape = Shape(ptype, tuple(dims), None,
                      tuple(dynamic) if any(dynamic) else (False,) * len(dims))
        if m2m:
            if sorted(m2m) != list(range(len(dims))):
                raise self.error(f"layout {{{','.join(map(str, m2m))}}} is not a permutation of "
                                 f"the {len(dims)} dimension(s) of {shape.to_text(False)}", i)
            shape = shape.with_layout(Layout(tuple(m2m)))
        return shape

    def array_shape(self) -> Shape:
        """TYPE '[' dims ']' [layout], written with spaces or comments inside."""
        kinds, texts = self.kinds, self.texts
        i = self.i
        tname = texts[i]
        self.i += 2
        dims, dynamic = [], []
        if not self.at("]"):
            while True:
                k, t = kinds[self.i], texts[self.i]
                if k == INT and not t.startswith("-"):
                    dims.append(int(t))
                    dynamic.append(False)
                elif k == OTHER and t == "?":
                    dims.append(UNBOUNDED)
                    dynamic.append(True)
                elif k == PUNCT and t == "<=" and kinds[self.i + 1] == INT:
                    self.i += 1
                    dims.append(int(texts[self.i]))
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
        j = self.i + 1
        if kinds[self.i] == INTLIST or (self.at("{") and (
                kinds[j] == INT or (kinds[j] == PUNCT and texts[j] == ":"))):
            return base.with_layout(self.layout(base))
        return base

    def layout(self, shape: Shape) -> Layout:
        kinds, texts = self.kinds, self.texts
        start = self.i
        if kinds[start] == INTLIST:
            m2m = tuple(int(x) for x in texts[start][1:-1].split(","))
            self.i += 1
            extras = {}
        else:
            self.i += 1
            m2m = []
            while kinds[self.i] == INT:
                m2m.append(int(texts[self.i]))
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
        kinds, texts = self.kinds, self.texts
        out: dict = {}

        def paren_int(field):
            self.expect("(", f"after layout field {field}")
            if kinds[self.i] != INT:
                raise self.error(f"expected an integer in layout field {field}(...), found "
                                 f"{self.found()}")
            value = int(texts[self.i])
            self.i += 1
            self.expect(")", f"to close layout field {field}(...)")
            return value

        def paren_type(field):
            self.expect("(", f"after layout field {field}")
            if kinds[self.i] != IDENT or texts[self.i] not in PRIMITIVE_TYPES:
                raise self.error(f"expected a primitive type in layout field {field}(...), "
                                 f"found {self.found()}")
            value = texts[self.i]
            self.i += 1
            self.expect(")", f"to close layout field {field}(...)")
            return value

        while not self.at("}"):
            i = self.i
            t = texts[i]
            if kinds[i] not in (IDENT, OTHER):
                raise self.error(f"expected a layout field (T, L, E, S, ...) found {self.found()}")
            self.i += 1
            if t == "T":
                tiles = []
                while self.at("("):
                    self.i += 1
                    tile = []
                    while True:
                        if kinds[self.i] == INT:
                            tile.append(int(texts[self.i]))
                        elif kinds[self.i] == OTHER and texts[self.i] == "*":
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
                    if kinds[self.i] != INT:
                        raise self.error(f"expected a dimension in SC(...), found {self.found()}")
                    dim = int(texts[self.i])
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
                out["dim_level_types"] = self.text[self.starts[start] + 1:self.starts[self.i - 1]]
            else:
                raise self.error(f"unknown layout field '{t}'", i)
        return out

    def int_run(self, what: str) -> list[int]:
        """INT (',' INT)* — at least one."""
        out = []
        while True:
            if self.kinds[self.i] != INT:
                raise self.error(f"expected an integer in {what}, found {self.found()}")
            out.append(int(self.texts[self.i]))
            self.i += 1
            if not self.at(","):
                return out
            self.i += 1

    # ---- literals ---------------------------------------------------------------
    def literal(self, shape: Shape, name: str, depth: int) -> Literal:
        kinds, texts = self.kinds, self.texts
        i = self.i
        if kinds[i] == PUNCT and texts[i] == "{" and kinds[i + 1] == PUNCT \
                and texts[i + 1] == "..." and kinds[i + 2] == PUNCT and texts[i + 2] == "}":
            self.i = i + 3
            return Literal(shape, None)
        if depth > MAX_DEPTH:
            raise self.error(f"constant {name} is nested more than {MAX_DEPTH} levels deep")
        if kinds[i] == NUMBERS:
            value = self.numbers_literal(shape)
            if value is not None:
                self.i = i + 1
                return Literal(shape, value)
            self.split_token(i)  # the general path below reads it and names what is wrong
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

    def numbers_literal(self, shape: Shape):
        """The array of a NUMBERS token whose braces nest as `shape`'s dims and whose
        numbers all read as its element type, in time linear in its text; None otherwise."""
        if not shape.is_array or shape.rank == 0 or shape.is_dynamic or \
                shape.element_type.is_complex:
            return None
        text = self.texts[self.i]
        if text.translate(_NOT_BRACES) != _braces(shape.dims):
            return None
        items = _BETWEEN_NUMBERS.split(text)[1:-1]
        if len(items) != shape.size or any(t[0] == "+" for t in items):
            return None  # XLA's numbers have no leading '+'
        try:
            return build_array(shape.element_type, shape.dims, items)
        except LiteralValueError:
            return None

    def split_token(self, i: int) -> None:
        """Replace composite token i by the tokens of its text, lexed alone."""
        kinds, texts, starts = lx.tokenize(self.texts[i], None, self.filename)
        base = self.starts[i]
        self.kinds[i:i + 1] = kinds[:-1]  # without its EOF
        self.texts[i:i + 1] = texts[:-1]
        self.starts[i:i + 1] = [base + s for s in starts[:-1]]

    def scalar_item(self, items, where, is_complex, name) -> None:
        kinds, texts = self.kinds, self.texts
        if is_complex:
            where.append(self.i)
            self.expect("(", f"to open a complex value (re, im) in constant {name}")
            parts = []
            for n in range(2):
                if n:
                    self.expect(",", f"between the parts of a complex value in constant {name}")
                if kinds[self.i] not in _SCALAR_KINDS:
                    raise self.error(f"expected a number in constant {name}, found "
                                     f"{self.found()}")
                parts.append(texts[self.i])
                self.i += 1
            self.expect(")", f"to close a complex value (re, im) in constant {name}")
            items.append((parts[0], parts[1]))
            return
        if kinds[self.i] not in _SCALAR_KINDS:
            raise self.error(f"expected a value in constant {name}, found {self.found()}")
        items.append(texts[self.i])
        where.append(self.i)
        self.i += 1

    def array_items(self, shape, level, items, where, is_complex, name) -> None:
        kinds, texts = self.kinds, self.texts
        dims = shape.dims
        innermost = level == len(dims) - 1
        open_i = self.i
        if innermost and kinds[open_i] == INTLIST and not is_complex:
            values = texts[open_i][1:-1].split(",")
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
        kinds, texts = self.kinds, self.texts
        stack = []
        j = self.i
        while True:
            k = kinds[j]
            if k == PUNCT:
                t = texts[j]
                if t in _OPEN:
                    stack.append(j)
                elif t in _CLOSE:
                    if not stack or _OPEN[texts[stack[-1]]] != t:
                        raise self.error(f"unbalanced '{t}'" + (
                            f": expected '{_OPEN[texts[stack[-1]]]}'" if stack else ""), j)
                    stack.pop()
                    if not stack:
                        self.i = j + 1
                        return
            elif k == EOF:
                raise self.error(f"expected '{_OPEN[texts[stack[-1]]]}' to match the "
                                 f"'{texts[stack[-1]]}' on line {self.line_of(stack[-1])}, found "
                                 "end of input", j)
            j += 1

    def raw_value(self, what: str) -> str:
        """A value kept as text: a bracketed group, a string or a token, plus anything
        glued to it without spaces (`[2,2]<=[4]`)."""
        kinds, texts = self.kinds, self.texts
        start = self.i
        while True:
            k, t = kinds[self.i], texts[self.i]
            if k == EOF or (k == PUNCT and (t == "," or t in _CLOSE)):
                if self.i == start:
                    raise self.error(f"expected a value for {what}, found {self.found()}")
                break
            if k == PUNCT and t in _OPEN:
                self.skip_balanced()
            else:
                self.i += 1
            if self.starts[self.i] != self.end_of(self.i - 1):
                break
        return self.text[self.starts[start]:self.end_of(self.i - 1)]

    # ---- typed attribute values (one method per opcodes.py kind) -------------------
    def v_int(self, what: str) -> int:
        if self.kinds[self.i] != INT:
            raise self.error(f"{what} expects an integer, found {self.found()}")
        self.i += 1
        return int(self.texts[self.i - 1])

    def v_bool(self, what: str) -> bool:
        t = self.texts[self.i]
        if self.kinds[self.i] != IDENT or t not in ("true", "false"):
            raise self.error(f"{what} expects true or false, found {self.found()}")
        self.i += 1
        return t == "true"

    def v_float(self, what: str) -> float:
        if self.kinds[self.i] not in (INT, FLOAT, SPECIAL) or "(" in self.texts[self.i]:
            raise self.error(f"{what} expects a number, found {self.found()}")
        self.i += 1
        return float(self.texts[self.i - 1])

    def v_word(self, what: str) -> str:
        if self.kinds[self.i] != IDENT:
            raise self.error(f"{what} expects a word like kLoop or LT, found {self.found()}")
        self.i += 1
        return self.texts[self.i - 1]

    def v_string(self, what: str) -> str:
        if self.kinds[self.i] != STRING:
            raise self.error(f"{what} expects a quoted string, found {self.found()}")
        try:
            value = lx.unquote(self.texts[self.i])
        except ValueError as e:
            raise self.error(f"{what}: {e}") from None
        self.i += 1
        return value

    def v_ints(self, what: str) -> tuple[int, ...]:
        kinds, texts = self.kinds, self.texts
        i = self.i
        if kinds[i] == INTLIST:
            self.i = i + 1
            return tuple(map(int, texts[i][1:-1].split(",")))
        if kinds[i] == PUNCT and texts[i] == "{":
            if kinds[i + 1] == PUNCT and texts[i + 1] == "}":
                self.i = i + 2
                return ()
            if kinds[i + 1] == INT:
                self.i = i + 1
                values = self.int_run(what)
                if self.at("}"):
                    self.i += 1
                    return tuple(values)
        raise self.error(f"{what} expects an integer list like {{0,1}}, found {self.found()}")

    def v_intss(self, what: str) -> tuple[tuple[int, ...], ...]:
        kinds, texts = self.kinds, self.texts
        i = self.i
        if kinds[i] == INTLISTS:
            self.i = i + 1
            return _split_intlists(texts[i])
        # Fast path for the common `{{0,1},{1,2},...}` (one INTLIST token per inner list):
        # permute pairs over thousands of devices come to millions of tokens, so no
        # method call per element. Anything else (spaces, errors) takes the general path.
        if kinds[i] == PUNCT and texts[i] == "{" and kinds[i + 1] == INTLIST:
            out = []
            j = i + 1
            while kinds[j] == INTLIST:
                out.append(tuple(map(int, texts[j][1:-1].split(","))))
                j += 1
                if kinds[j] != PUNCT:
                    break
                if texts[j] == "}":
                    self.i = j + 1
                    return tuple(out)
                if texts[j] != ",":
                    break
                j += 1
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
        if self.kinds[self.i] == IDENT and self.texts[self.i] == "mesh" and self.at_next("["):
            return self.mesh_replica_groups(what)
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
        if self.kinds[self.i] == IDENT and self.texts[self.i] == "T" and self.at_next("("):
            self.i += 2
            perm = self.int_run(what)
            self.expect(")", f"to close T(...) in {what}")
        try:
            return ReplicaGroups.from_iota(gs[0], gs[1], dims, perm)
        except ValueError as e:
            raise self.error(f"{what}: {e}", start) from None

    def mesh_replica_groups(self, what: str) -> ReplicaGroups:
        """XLA's mesh-axes form, printed for Shardy-partitioned collectives:
        `mesh['a'=2,'b'=4], device_ids=([2,4]T(1,0)) {'b','a':(1)2}` - the mesh's axes (names
        quoted or bare), its device ids when not iota (an iota `[dims]T(perm)` or a list),
        then the grouped axes, each a name with an optional `:(pre_size)size` sub-axis."""
        start = self.i
        self.i += 2
        names: list[str] = []
        sizes: list[int] = []
        while True:
            if self.kinds[self.i] == ATTR:                    # bare name: `axis_0=`
                names.append(self.texts[self.i][:-1])
                self.i += 1
            elif self.kinds[self.i] in (STRING, IDENT):
                names.append(self.texts[self.i])
                self.i += 1
                self.expect("=", f"after mesh axis {names[-1]} in {what}")
            else:
                raise self.error(f"expected a mesh axis name in {what}, found {self.found()}")
            sizes.append(self.v_int(f"the size of mesh axis {names[-1]} in {what}"))
            if not self.at(","):
                break
            self.i += 1
        self.expect("]", f"to close the mesh axes of {what}")
        text = "mesh[" + ",".join(f"{n}={z}" for n, z in zip(names, sizes)) + "]"
        device_ids = None
        if self.at(",") and self.kinds[self.i + 1] == ATTR \
                and self.texts[self.i + 1] == "device_ids=":
            self.i += 2
            self.expect("(", f"to open the mesh device_ids of {what}")
            device_ids, ids_text = self.mesh_device_ids(what, sizes)
            self.expect(")", f"to close the mesh device_ids of {what}")
            text += f", device_ids=({ids_text})"
        self.expect("{", f"to open the grouped mesh axes of {what}")
        axes: list[tuple[int, tuple[int, int] | None]] = []
        refs: list[str] = []
        while not self.at("}"):
            if self.kinds[self.i] == LABEL:                   # bare name with sub-axis: `a:`
                name, sub = self.texts[self.i][:-1], True
                self.i += 1
            elif self.kinds[self.i] in (STRING, IDENT):
                name = self.texts[self.i]
                self.i += 1
                sub = self.at(":")
                self.i += sub
            else:
                raise self.error(f"expected a mesh axis name in the groups of {what}, found "
                                 f"{self.found()}")
            if name not in names:
                raise self.error(f"{what}: {name} is not an axis of the mesh "
                                 f"({', '.join(names)})", self.i - 1)
            info = None
            ref = name
            if sub:
                self.expect("(", f"to open the sub-axis pre-size of {name} in {what}")
                pre = self.v_int(f"the sub-axis pre-size of {name} in {what}")
                self.expect(")", f"to close the sub-axis pre-size of {name} in {what}")
                info = (pre, self.v_int(f"the sub-axis size of {name} in {what}"))
                ref += f":({info[0]}){info[1]}"
            axes.append((names.index(name), info))
            refs.append(ref)
            if not self.at(","):
                break
            self.i += 1
        self.expect("}", f"to close the grouped mesh axes of {what}")
        try:
            groups = mesh_axes_replica_groups(sizes, device_ids, axes)
        except ValueError as e:
            raise self.error(f"{what}: {e}", start) from None
        return ReplicaGroups(tuple(tuple(g) for g in groups),
                             mesh=text + " {" + ",".join(refs) + "}")

    def mesh_device_ids(self, what: str, sizes: list[int]) -> tuple[list[int], str]:
        """`[dims]T(perm)` (an iota reshaped and transposed) or an explicit id list."""
        if not self.at("["):
            ids = self.int_run(f"the mesh device_ids of {what}")
            return ids, ",".join(map(str, ids))
        self.i += 1
        dims = self.int_run(f"the mesh device_ids of {what}")
        self.expect("]", f"to close the mesh device_ids dimensions of {what}")
        perm = None
        if self.kinds[self.i] == IDENT and self.texts[self.i] == "T" and self.at_next("("):
            self.i += 2
            perm = self.int_run(f"T(...) of the mesh device_ids of {what}")
            self.expect(")", f"to close T(...) in the mesh device_ids of {what}")
        total = 1
        for n in dims:
            total *= n
        try:
            ids = iota_replica_groups(1, total, dims, perm)[0]
        except ValueError as e:
            raise self.error(f"{what}: mesh device_ids: {e}") from None
        text = f"[{','.join(map(str, dims))}]"
        return ids, text + (f"T({','.join(map(str, perm))})" if perm else "")

    def at_next(self, p: str) -> bool:
        return self.kinds[self.i + 1] == PUNCT and self.texts[self.i + 1] == p

    def v_pairs(self, what: str):
        start = self.i
        pairs = self.v_intss(what)
        if set(map(len, pairs)) <= {2}:   # one C-level pass: thousands of pairs are common
            return pairs
        for p in pairs:
            if len(p) != 2:
                raise self.error(f"{what} expects {{source,target}} pairs, found "
                                 f"{{{','.join(map(str, p))}}}", start)
        return pairs

    def v_window(self, what: str) -> Window:
        kinds, texts = self.kinds, self.texts
        start = self.i
        self.expect("{", f"to open {what} (like {{size=3x3 stride=2x2}})")
        fields: dict[str, list] = {}
        while not self.at("}"):
            i = self.i
            if kinds[i] != ATTR:
                raise self.error(f"expected a window field like size= in {what}, found "
                                 f"{self.found()}")
            key = texts[i][:-1]
            self.i += 1
            k, t = kinds[self.i], texts[self.i]
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
        if self.kinds[self.i] != DIMLABELS:
            raise self.error(f"{what} expects labels like b01f_01io->b01f, found {self.found()}")
        try:
            value = ConvDimensionNumbers.from_text(self.texts[self.i])
        except ValueError as e:
            raise self.error(f"{what}: {e}") from None
        self.i += 1
        return value

    def v_padding(self, what: str) -> PaddingConfig:
        if self.kinds[self.i] != PAD:
            raise self.error(f"{what} expects low_high[_interior] per dimension like 0_1x2_2, "
                             f"found {self.found()}")
        dims = []
        for d in self.texts[self.i].split("x"):
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
                    if self.kinds[self.i] != INT:
                        raise self.error(f"expected an integer in {what}, found {self.found()}")
                    parts.append(int(self.texts[self.i]))
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

    def nested_computation(self, what: str) -> Computation:
        """A body written in place of a computation's name; the module parser takes it."""
        raise self.error(f"{what} expects a computation name, found {self.found()}")

    def v_computation(self, what: str) -> Computation:
        k, t = self.kinds[self.i], self.texts[self.i]
        if k == PUNCT and t == "{":
            return self.nested_computation(what)
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

    def v_literal(self, what: str) -> RawAttr:
        """`literal=` of custom-call: a shape then its value (`f32[] 0.1`,
        `s32[2]{0} {1, 2}`), or a parenthesized tuple of such (`( s32[1]{0} {4}, pred[]
        true )`). The value is checked against the shape and kept as its text."""
        start = self.i
        self.shaped_literal(what, 0)
        return RawAttr(self.text[self.starts[start]:self.end_of(self.i - 1)])

    def shaped_literal(self, what: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise self.error(f"{what} is nested more than {MAX_DEPTH} levels deep")
        if self.at("("):
            self.i += 1
            if not self.at(")"):
                while True:
                    self.shaped_literal(what, depth + 1)
                    if not self.at(","):
                        break
                    self.i += 1
            self.expect(")", f"to close the tuple value of {what}")
            return
        shape = self.shape(f"for {what}")
        self.literal(shape, what, depth + 1)


# Attribute kind (opcodes.py) -> TokenCursor method that reads a value of that kind.
KIND_READERS = {
    "int": "v_int", "bool": "v_bool", "float": "v_float", "word": "v_word",
    "string": "v_string", "ints": "v_ints", "intss": "v_intss",
    "replica_groups": "v_replica_groups", "pairs": "v_pairs", "window": "v_window",
    "dim_labels": "v_dim_labels", "padding": "v_padding", "slice": "v_slice",
    "computation": "v_computation", "computations": "v_computations", "shape": "v_shape",
    "shapes": "v_shapes", "words": "v_words", "raw": "v_raw",
    "literal": "v_literal",
}
