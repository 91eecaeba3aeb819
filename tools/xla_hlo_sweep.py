"""Parse and verify the HLO text modules written in XLA's single-device tests.

    python tools/xla_hlo_sweep.py PATH [PATH ...] [--json] [--show-ok] [--per-file]

PATH: XLA test sources (`*_test.cc` files, or folders searched for them), from a checkout of
openxla/xla you have: this tool fetches nothing, and no XLA text is kept in this repository
(each fix it leads to gets a minimal module of our own in tests/hlo/).

Every C++ raw string literal (`R"(...)"`, `R"hlo(...)hlo"`) holding `ENTRY` or `HloModule`
is taken as a module. Literals with placeholders filled by the test at run time
(`$0`, `%s`, `%d`, `%1$s`, `<<TYPE>>`, capitalized words a StrReplaceAll substitutes such as
`SHAPE`)
are reported as templated and not parsed. A literal a test joins to a shared prelude
(`absl::StrCat(kPrelude, R"(...)")`, with `kPrelude` a raw string of the same file) is parsed
with the prelude in front; other joins are parsed alone and may be refused for a computation
they do not hold -- read a refusal's text before taking it for a gap. Each module is parsed
(`parse_module`) and verified
(`verify_module` with its header's device counts), and the first error is reported with the
file and the line where the literal starts. Exit code 0 when every module parsed and
verified, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_RAW = re.compile(r'R"([^(\s]{0,16})\((.*?)\)\1"', re.S)
_TEMPLATED = re.compile(r"\$\d|%(?:\d+\$)?[sdf](?![\w.-])|<<[A-Z0-9_]+>>|\{\{[A-Z_]+\}\}")
# Capitalized words HLO text itself uses (keywords and enum values of attributes); any other
# (SHAPE, DATATYPE, REPLICA_GROUPS, ...) is a placeholder a test fills with StrReplaceAll.
_HLO_CAPS = frozenset({"ROOT", "ENTRY", "TOTALORDER", "FLOAT", "SIGNED", "UNSIGNED", "HIGH",
                       "HIGHEST", "DEFAULT", "EQ", "NE", "LT", "LE", "GT", "GE", "NCHW", "NHWC",
                       "PACKED_NIBBLE", "NO_TRANSPOSE", "TRANSPOSE", "ADJOINT", "FFT", "IFFT",
                       "RFFT", "IRFFT", "SCHEDULE_NONE", "SCHEDULE_LATEST",
                       "SCHEDULE_EARLIEST"})
# `const char* const kPrelude = R"(` / `constexpr char kPrelude[] = R"(`: a named raw string.
_NAMED = re.compile(r'(\w+)(?:\[\])?\s*=\s*$')
# `StrCat(kPrelude, R"(`: the literal is joined after the named prelude.
_JOINED = re.compile(r'StrCat\(\s*(\w+)\s*,\s*$')
_CAPS = re.compile(r"(?<![\w.%\"'])[A-Z][A-Z0-9_]{2,}(?![\w.\"'])")


# Names the text defines (module, computations, instructions): `HloModule CRS`, `ENTRY CRS {`,
# `ADD {`, `X = f32[] ...` may be capitalized without being placeholders.
_DEFINED = re.compile(r"(?:HloModule|ENTRY)\s+%?([\w.\-]+)"
                      r"|^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*="
                      r"|^\s*%?([\w.\-]+)\s*(?:\([^)]*\)\s*->[^{]*)?\{", re.M)


def _templated(text: str) -> bool:
    if _TEMPLATED.search(text):
        return True
    code = re.sub(r'"[^"\n]*"|//[^\n]*', "", text)   # strings and comments may say anything
    names = {n for m in _DEFINED.finditer(code) for n in m.groups() if n}
    return any(w not in _HLO_CAPS and w not in names and not w.startswith("API_VERSION")
               for w in _CAPS.findall(code))


def modules_in(path: Path):
    """(line, text, templated) for each raw string literal of `path` that holds a module."""
    source = path.read_text(errors="replace")
    named = {}
    for m in _RAW.finditer(source):
        text = m.group(2)
        before = source[max(0, m.start() - 200):m.start()]
        if name := _NAMED.search(before):
            named[name.group(1)] = text
        if joined := _JOINED.search(before):
            text = named.get(joined.group(1), "") + text
        if "ENTRY" not in text and "HloModule" not in text:
            continue
        if name and "ENTRY" not in text and re.search(
                r"StrCat\(\s*" + name.group(1) + r"\s*,", source):
            continue   # a prelude: parsed in front of each literal joined to it
        line = source.count("\n", 0, m.start()) + 1
        yield line, text, _templated(text)


def check(text: str) -> str | None:
    """None if the module parses and verifies; else the first line of the error."""
    from xladist.errors import XlaDistError
    from xladist.hlo.parser import parse_module
    from xladist.hlo.verifier import verify_module
    try:
        verify_module(parse_module(text))
    except XlaDistError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def files(paths) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*_test.cc")) if p.is_dir() else [p]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--json", action="store_true", help="one JSON record per module")
    ap.add_argument("--show-ok", action="store_true", help="list the modules that pass too")
    ap.add_argument("--per-file", action="store_true",
                    help="a line of counts for each file that holds a module")
    args = ap.parse_args(argv)
    totals = {"ok": 0, "failed": 0, "templated": 0}
    per_file = []
    for path in files(args.paths):
        counts = {"ok": 0, "failed": 0, "templated": 0}
        for line, text, templated in modules_in(path):
            error = None if templated else check(text)
            status = "templated" if templated else ("failed" if error else "ok")
            counts[status] += 1
            if args.json:
                print(json.dumps({"file": str(path), "line": line, "status": status,
                                  "error": error}))
            elif status == "failed" or (args.show_ok and status == "ok"):
                print(f"{path}:{line}: {status}" + (f": {error}" if error else ""))
        if any(counts.values()):
            per_file.append((path, counts))
        for k in totals:
            totals[k] += counts[k]
    if not args.json:
        if args.per_file:
            for path, c in per_file:
                print(f"{path}: {c['ok']} ok, {c['failed']} refused, {c['templated']} templated")
        print(f"{totals['ok']} modules parsed and verified, {totals['failed']} refused, "
              f"{totals['templated']} templated (not parsed)")
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
