"""Tokenizer for XLA's HLO text (docs/reference/hlo-text-format.md section 1).

The whole text is cut into tokens in one pass of a single compiled regular
expression; the parser then walks three parallel lists (kinds, texts, start
offsets). Whitespace and `/* */` / `//` comments are skipped by the same
expression, so comments may sit anywhere between tokens.

Besides XLA's token classes, composite tokens exist purely for speed, since
they make up most of a real module's text:
  SHAPE    an array shape with an optional plain layout, `f32[4,2]{1,0}`;
  INTLIST  a brace list of integers without spaces, `{1,0}`;
  INTLISTS a brace list of such lists, `{{0,1},{1,2}}`, only right after
           `source_target_pairs=` or `replica_groups=`: over thousands of devices these
           are millions of tokens otherwise (the parser's v_intss splits the text);
  BRACED   a whole `{...}` value right after `metadata=` or `backend_config=`, kept as text
           by the parser: metadata is a quarter to a third of a JAX module's bytes;
  NUMBERS  a whole array literal of plain decimal numbers right after `constant(`,
           `{1, 2.5e-3}` or `{ {1, 2}, {3, 4} }` (no inf, nan or complex parts): a
           10^6-element literal was 2 x 10^6 tokens otherwise, 6.7 s to parse (the parser's
           literal() checks its braces against the shape and reads it with numpy).
Anything that does not fit them (spaces inside, layout extras such as
`{1,0:T(8,128)}`) is lexed piece by piece and handled by the parser's general path.
"""

from __future__ import annotations

import bisect
import re

from ..errors import HloParseError
from .shape import PRIMITIVE_TYPES

# Words XLA's lexer reads as keywords or element types, never as a name: a module or
# computation named by one is refused by XLA's parser ("expects name"), and so is an
# instruction named by a type ("illegal instruction name"). Names xladist makes up avoid
# them (builder/core.py `_sanitize`, as XLA's NameUniquer appends '_').
KEYWORDS = frozenset({"true", "false", "inf", "nan", "HloModule", "ENTRY", "ROOT", "maximal",
                      "replicated", "manual", "unreduced", "unknown", "last_tile_dim_replicate",
                      "shard_as", "shard_like"})


def is_reserved_word(name: str) -> bool:
    """Whether XLA's HLO lexer reads `name` as a keyword or an element type, not a name."""
    return name in KEYWORDS or name in PRIMITIVE_TYPES


def is_identifier(text: str) -> bool:
    """Whether `text` lexes as one identifier (an attribute name, a frontend attribute's
    key): a letter or '_', then letters, digits, '_', '.' and '-'."""
    return _IDENTIFIER.fullmatch(text) is not None


# Token kinds (small ints: the parser compares them in its hot loops).
EOF = 0
SHAPE = 1       # f32[4,2]{1,0}   (text kept whole)
NAME = 2        # %add.3          (text keeps the '%')
ATTR = 3        # dimensions=     (text keeps the '=')
LABEL = 4       # p0:             (text keeps the ':')
DIMLABELS = 5   # b01f_01io->b01f
SPECIAL = 6     # inf, -inf, nan, -nan, nan(0x7)
IDENT = 7       # add, ROOT, kLoop, f32 (when not followed by '[')
FLOAT = 8       # 1.5, 1e-05, -0.5
DXD = 9         # 3x3
PAD = 10        # 0_1x2_2, 1_1_0
INTLIST = 11    # {1,0}
INT = 12        # 42, -1
STRING = 13     # "..." or '...' (text keeps the quotes and escapes)
INTLISTS = 14   # {{0,1},{1,2}} right after source_target_pairs= or replica_groups=
PUNCT = 15      # { } ( ) [ ] , = : -> <= ...
OTHER = 16      # any other single character (# * + ~ < > @ ...), legal only in raw text
BRACED = 17     # {op_name="a" source_line=3} right after metadata= or backend_config=
NUMBERS = 18    # {1, 2.5, -3e-05} or {{1, 2}, {3, 4}} right after constant(

KIND_NAMES = {EOF: "end of input", SHAPE: "shape", NAME: "name", ATTR: "attribute name",
              LABEL: "parameter name", DIMLABELS: "dim labels", SPECIAL: "float value",
              IDENT: "identifier", FLOAT: "float", DXD: "window sizes", PAD: "padding",
              INTLIST: "integer list", INT: "integer", STRING: "string",
              INTLISTS: "list of integer lists", PUNCT: "punctuation",
              OTHER: "character", BRACED: "braced value", NUMBERS: "array literal"}

# An identifier: letters, digits, '_', '.', and '-' when not the start of '->'. Written
# "unrolled" with possessive runs: sre steps a per-character alternation one character at a
# time, which made identifiers (a third of a module's tokens) the lexer's slowest part.
_ID = r"[A-Za-z_][A-Za-z0-9_.]*+(?:-(?!>)[A-Za-z0-9_.]*+)*+"
_IDENTIFIER = re.compile(_ID)
_TYPES = "|".join(sorted(PRIMITIVE_TYPES, key=len, reverse=True))
# Possessive: a comment is never given back to the token alternatives (else text
# ending in `// done` would backtrack into a token 'e').
_SKIP = r"(?:\s+|//[^\n\r]*|/\*.*?\*/)*+"
# The body of a BRACED token: plain characters and double-quoted strings, with braces nested
# one level (`profile_type={1}`). Quotes of the other kind and '/' (a comment may start
# there) are not plain, so text holding them takes the general path, token by token.
_PLAIN = r"""[^{}"'/]*+(?:"[^"\\]*+(?:\\.[^"\\]*+)*+"[^{}"'/]*+)*+"""

# STRING is written "unrolled" (runs of plain characters between escapes) because
# sre steps a repeated alternation `(?:[^"\\]|\\.)*` one character at a time and saves
# backtracking state per step: ~140 ns a character and more on big inputs, which made
# the 200 KB `_xla_send_recv_source_target_pairs="{{0,1},...}"` strings of a
# 16,384-device module most of its tokenizing time. A single-class run is ~6 ns a character.
# Alternatives are tried left to right: the frequent ones first (punctuation is ~40% of a
# module's tokens, so it is tried before anything else, except '{', which the composite
# INTLIST, INTLISTS and BRACED tokens start with), and the more specific before the general
# (shape before name=, dim labels and special floats before identifiers). Each group is a
# token kind; _GROUP_KINDS maps group numbers to kinds (punctuation has two groups).
_MASTER = re.compile(
    _SKIP + "(?:"
    r"(->|<=|\.\.\.|[}()\[\],=:])"                                           # 1 PUNCT
    rf"|(%{_ID})"                                                            # 2 NAME
    rf"|((?:{_TYPES})\[[0-9,<=?]*\](?:\{{\d+(?:,\d+)*\}})?)"                  # 3 SHAPE
    rf"|({_ID}=)"                                                            # 4 ATTR
    rf"|({_ID}:)"                                                            # 5 LABEL
    r"|([0-9bf?]{2,}_[0-9io?]{2,}->[0-9bf?]{2,}(?![A-Za-z0-9_.]))"           # 6 DIMLABELS
    r"|(-?(?:inf|nan)(?:\(0x[0-9a-fA-F]+\))?(?![A-Za-z0-9_.\-]))"            # 7 SPECIAL
    rf"|({_ID})"                                                             # 8 IDENT
    r"|(-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+))"  # 9 FLOAT
    r"|(\d+(?:x\d+)+)"                                                       # 10 DXD
    r"|(-?\d+_-?\d+(?:_-?\d+)?(?:x-?\d+_-?\d+(?:_-?\d+)?)*)"                 # 11 PAD
    r"|(\{-?\d+(?:,-?\d+)*\})"                                               # 12 INTLIST
    r"|(-?\d+)"                                                              # 13 INT
    r"|(\"[^\"\\]*(?:\\.[^\"\\]*)*\"|'[^'\\]*(?:\\.[^'\\]*)*')"              # 14 STRING
    r"|(?:(?<=source_target_pairs=)|(?<=replica_groups=))"
    r"(\{\{-?\d+(?:,-?\d+)*\}(?:,\{-?\d+(?:,-?\d+)*\})*\})"                     # 15 INTLISTS
    r"|(?:(?<=metadata=)|(?<=backend_config=))"
    rf"(\{{{_PLAIN}(?:\{{{_PLAIN}\}}{_PLAIN})*+\}})"                            # 16 BRACED
    # (possessive, then checked: a lazy-then-greedy run backtracked quadratically over a
    # literal it could not take, e.g. one whose last number is nan)
    r"|(?<=constant\()(?=[^)]*?\d)(\{[-+.,\deE\s{}]*+)(?<=\})(?=\))"            # 17 NUMBERS
    r"|(\{)"                                                                 # 18 PUNCT
    r"|(\S)"                                                                 # 19 OTHER
    r"|(\Z))",       # end of text: only whitespace/comments left; stops the scan
    re.S)
_END_GROUP = 20
_GROUP_KINDS = (None, PUNCT, NAME, SHAPE, ATTR, LABEL, DIMLABELS, SPECIAL, IDENT, FLOAT, DXD,
                PAD, INTLIST, INT, STRING, INTLISTS, BRACED, NUMBERS, PUNCT, OTHER)


class LineIndex:
    """Maps character offsets to (line, column, line text), 1-based, for messages."""

    def __init__(self, text: str):
        self.text = text
        self.newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(self, offset: int) -> int:
        return bisect.bisect_left(self.newlines, offset) + 1

    def locate(self, offset: int) -> tuple[int, int, str]:
        line = self.line_of(offset)
        begin = self.newlines[line - 2] + 1 if line > 1 else 0
        end = self.newlines[line - 1] if line - 1 < len(self.newlines) else len(self.text)
        return line, offset - begin + 1, self.text[begin:end]

    def error(self, message: str, offset: int, filename: str | None = None) -> HloParseError:
        # Past the last text (an error at the end of input, after a final newline or blank
        # lines): just after that text, on its line, where the missing token belongs --
        # not on an empty line past it, with no line to show.
        offset = min(offset, len(self.text.rstrip()))
        line, col, line_text = self.locate(offset)
        return HloParseError(message, line, col, line_text, filename)


def tokenize(text: str, lines: LineIndex | None = None, filename: str | None = None):
    """Cut `text` into tokens: returns (kinds, texts, starts), terminated by an EOF token.

    Raises HloParseError for an unterminated string or comment.
    """
    kinds: list[int] = []
    texts: list[str] = []
    starts: list[int] = []
    add_kind, add_text, add_start = kinds.append, texts.append, starts.append
    group_kinds = _GROUP_KINDS
    # Every position matches (OTHER takes any character, the last group the end), so
    # finditer never skips text.
    for m in _MASTER.finditer(text):
        g = m.lastindex
        if g == _END_GROUP:
            break
        add_kind(group_kinds[g])
        add_text(m.group(g))
        add_start(m.start(g))
    # A lone quote or '/*' can only come out as OTHER: report them precisely.
    for j, k in enumerate(kinds):
        if k == OTHER:
            t = texts[j]
            if t in "\"'":
                raise (lines or LineIndex(text)).error(
                    f"unterminated string starting with {t}", starts[j], filename)
            if t == "/" and text.startswith("/*", starts[j]):
                raise (lines or LineIndex(text)).error(
                    "unterminated comment: '/*' without '*/'", starts[j], filename)
    add_kind(EOF)
    add_text("")
    add_start(len(text))
    return kinds, texts, starts


# ---- strings -----------------------------------------------------------------
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", '"': b'"', "'": b"'", "\\": b"\\",
            "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v", "?": b"?"}
_ESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", re.S)


def unquote(token: str) -> str:
    """The value of a quoted string token, C escapes resolved (XLA uses absl::CUnescape).

    Escapes produce bytes (`\\303\\251` is UTF-8 for e-acute), so the result is decoded
    as UTF-8; bytes that are not valid UTF-8 survive as surrogate escapes.
    Raises ValueError for an unknown escape.
    """
    body = token[1:-1]
    if "\\" not in body:
        return body
    out = bytearray()
    pos = 0
    for m in _ESCAPE_RE.finditer(body):
        out += body[pos:m.start()].encode("utf-8", "surrogateescape")
        esc = m.group(1)
        if esc[0] == "x":
            out.append(int(esc[1:], 16))
        elif esc[0] in "01234567":
            value = int(esc, 8)
            if value > 255:
                raise ValueError(f"octal escape \\{esc} is larger than a byte")
            out.append(value)
        elif esc in _ESCAPES:
            out += _ESCAPES[esc]
        else:
            raise ValueError(f"unknown escape sequence \\{esc}")
        pos = m.end()
    out += body[pos:].encode("utf-8", "surrogateescape")
    return out.decode("utf-8", "surrogateescape")


_PRINTABLE = frozenset(range(0x20, 0x7F))
_C_ESCAPE = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord('"'): '\\"',
             ord("'"): "\\'", ord("\\"): "\\\\"}


def quote(value: str) -> str:
    """`value` as a double-quoted string with absl::CEscape's rules (octal for other bytes)."""
    if value.isascii() and value.isprintable() and not any(c in value for c in "\"'\\"):
        return '"' + value + '"'
    parts = []
    for b in value.encode("utf-8", "surrogateescape"):
        esc = _C_ESCAPE.get(b)
        if esc is not None:
            parts.append(esc)
        elif b in _PRINTABLE:
            parts.append(chr(b))
        else:
            parts.append(f"\\{b:03o}")
    return '"' + "".join(parts) + '"'
