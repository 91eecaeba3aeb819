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
    from xladist.files import check_destination, write_atomic
    from xladist.hlo.parser import parse_file
    from xladist.hlo.verifier import verify_module
    from xladist.semantics.custom_calls import check_partitioned

    out = Path(args.output)
    # Before compiling: the folder (made if missing) must be one we can write in.
    check_destination(out / f"{args.name}.o", "-o", create_dirs=True)
    module = parse_file(args.file)
    check_partitioned(module)  # before the verifier, whose hint would not help
    verify_module(module)
    if module.replica_count * module.num_partitions > 1:
        raise InputError(f"{module.name} runs on {module.replica_count * module.num_partitions} "
                         f"devices; ahead-of-time compilation takes single-device programs")
    program = AotProgram(module, args.name)
    obj = program.compile(args.target_cpu, args.triple)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"-o {out}: cannot create the folder ({e.strerror or e})") from None
    # Each file whole or not at all (a build reading them never sees half an object).
    for suffix, data in ((".o", obj), (".h", program.header().encode()), (".ldflags", b"\n")):
        write_atomic(out / f"{args.name}{suffix}", lambda f, d=data: f.write(d),
                     "ahead-of-time output")
    print(f"wrote {out / args.name}.o ({len(obj)} bytes), {args.name}.h, {args.name}.ldflags; "
          f"temp {program.temp} bytes")
    return 0
