"""`xladist aot MODULE --name NAME -o DIR`: a module as an object file and a C header.

Writes DIR/NAME.o (object code for the target: this host unless --triple/--target-cpu),
DIR/NAME.h (the C API: NAME_run, NAME_temp_bytes, argument and result sizes, each argument
and result named with its shape and element type) and DIR/NAME.ldflags (extra linker flags,
one line; empty: the object needs only libc and libm). See xladist/compiler/aot/program.py for what
compiles and examples/aot/ for a C program that links one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError

HELP = "compile a single-device module ahead of time into NAME.o + NAME.h for a C program"

EPILOG = """\
examples:
  xladist aot step.hlo --name step -o build/      build/step.o, step.h, step.ldflags
  xladist aot step.hlo --name step -o build/ --target-cpu x86-64-v3
  xladist aot step.hlo --name step -o build/ --triple aarch64-unknown-linux-gnu
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="MODULE", help="HLO text file")
    parser.add_argument("--name", required=True, help="C name prefix of the API (NAME_run, ...)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--target-cpu", metavar="CPU",
                        help="LLVM CPU name (default: this host's CPU and features)")
    parser.add_argument("--triple", metavar="TRIPLE", help="target triple (default: this host's)")


def run(args) -> int:
    from xladist.compiler.aot import AotProgram
    from xladist.hlo.parser import parse_file
    from xladist.hlo.verifier import verify_module

    module = parse_file(args.file)
    verify_module(module)
    if module.replica_count * module.num_partitions > 1:
        raise InputError(f"{module.name} runs on {module.replica_count * module.num_partitions} "
                         f"devices; ahead-of-time compilation takes single-device programs")
    program = AotProgram(module, args.name)
    obj = program.compile(args.target_cpu, args.triple)
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.name}.o").write_bytes(obj)
        (out / f"{args.name}.h").write_text(program.header())
        (out / f"{args.name}.ldflags").write_text("\n")
    except OSError as e:
        raise InputError(f"cannot write to {out}: {e}") from None
    print(f"wrote {out / args.name}.o ({len(obj)} bytes), {args.name}.h, {args.name}.ldflags; "
          f"temp {program.temp} bytes")
    return 0
