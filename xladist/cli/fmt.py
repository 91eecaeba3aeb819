"""`xladist fmt FILE`: parse HLO text and print it in canonical form."""

from __future__ import annotations

import sys


HELP = "print an HLO module in canonical text form (checks that it parses)"
EPILOG = """examples:
  xladist fmt module.hlo              long style: %names, program shapes, metadata
  xladist fmt --short module.hlo      XLA's short style: no %, no metadata
  cat module.hlo | xladist fmt -      read standard input
  xladist fmt --check module.hlo      exit 1 if the file is not already canonical
  xladist fmt --operand-shapes m.hlo  add(f32[4] %x, f32[4] %y): shapes before operands
  xladist fmt --no-metadata m.hlo     drop metadata={...} and the stack frame table

A parse error prints FILE:LINE:COL, the line and a caret, and exits with status 2.
"""


def add_arguments(parser) -> None:
    parser.add_argument("file", metavar="FILE", help="HLO text file, or - for standard input")
    parser.add_argument("--short", action="store_true",
                        help="short style: no %% sigils, no program shapes, no metadata")
    parser.add_argument("--operand-shapes", action="store_true",
                        help="write each operand's shape before its name")
    parser.add_argument("--no-metadata", action="store_true",
                        help="leave out metadata={...} and the stack frame table")
    parser.add_argument("--check", action="store_true",
                        help="print nothing; exit 1 if FILE differs from its canonical form")


def run(args) -> int:
    from ..hlo.parser import parse_text
    from ..hlo.printer import print_module

    from . import read_module_text
    text, name = read_module_text(args.file)
    module = parse_text(text, filename=name)
    out = print_module(module, sigils=not args.short, operand_shapes=args.operand_shapes,
                       metadata=not (args.short or args.no_metadata))
    if args.check:
        if out != text:
            print(f"{name}: not in canonical form", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(out)
    return 0
