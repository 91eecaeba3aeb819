"""`xladist compile MODULE -o NAME.xlx`: compile once into a file that runs without compiling.

The file (xladist/compiler/serialized.py) holds the module text, the schedule every rank
uses (xladist.analysis.schedule), the thunk plan, the object code and what it was compiled for.
`xladist run NAME.xlx -n N` and `xladist.load_executable(NAME.xlx)` run it; a file made for
another CPU (features) or xladist version is refused, saying what differs.
"""

from __future__ import annotations

import argparse

from ..errors import UnsupportedError

HELP = "compile a module into a serialized executable (.xlx) that runs without compiling"

EPILOG = """\
examples:
  xladist compile step.hlo -o step.xlx          compile for this host
  xladist run step.xlx -n 4 --inputs in.npz     run it: no rank compiles
  xladist compile step.hlo --output step.xlx --backend cpu
                                                the default, and the only backend that
                                                writes files
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="MODULE", help="HLO text file")
    parser.add_argument("-o", "--output", required=True, metavar="NAME.xlx",
                        help="the executable file to write")
    parser.add_argument("--backend", default="cpu", help="backend (only cpu writes files)")


def run(args) -> int:
    from xladist.analysis.schedule import schedule_module
    from xladist.compiler.serialized import write_executable
    if args.backend != "cpu":
        raise UnsupportedError(f"backend {args.backend!r} cannot be serialized; only cpu can")
    from ..files import check_destination, read_text
    text = read_text(args.file, "MODULE", kind="HLO text")
    check_destination(args.output, "-o")  # before compiling, not after
    size = write_executable(args.output, text, schedule_module, filename=args.file)
    print(f"wrote {args.output} ({size} bytes)")
    return 0
