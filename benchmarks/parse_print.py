"""Parse, verify and print speed of the HLO text layer, in MB/s against plain tokenizing.

    python benchmarks/parse_print.py [--file PATH | --instructions N] [--repeat R]

Without --file: a generated module of N instructions (default 10,000) mixing what real
dumps contain: parameters, constants, broadcasts, element-wise ops, dots, reduces with a
to_apply region, fusions, tuples and get-tuple-elements, most with metadata. With --file:
that module, e.g. benchmarks/transformer_step.hlo (a 2-device transformer training step as
XLA compiled it, written by gen_transformer_step.py; issue 28's "250 KB module").

Phases: `plain tokens`, one regular-expression pass cutting the same bytes into words and
punctuation (the floor a regex tokenizer cannot beat); `lexer`, xladist's tokenizer
(hlo/lexer.py); `parse` (lexer included); `verify` (verify_module at the module's device
count); `parse+verify`; `print`. Prints the median of R runs per phase and the load average.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xladist.hlo.lexer import tokenize  # noqa: E402
from xladist.hlo.parser import parse_module  # noqa: E402
from xladist.hlo.printer import print_module  # noqa: E402
from xladist.hlo.verifier import verify_module  # noqa: E402

# Words (identifiers, numbers, %names) and single punctuation characters: no token kinds,
# no strings, no comments -- the least work that still looks at every byte as tokens.
_PLAIN_TOKENS = re.compile(r"[\w.%-]+|\S")


def generate(n: int) -> str:
    """HLO text with about `n` instructions in the entry computation (long style)."""
    meta = 'metadata={op_name="jit(step)/mul" source_file="model.py" source_line=17}'
    lines = [
        "HloModule bench, entry_computation_layout={(f32[64,64]{1,0}, f32[64,64]{1,0})"
        "->f32[64,64]{1,0}}",
        "",
        "%add_f32 (a: f32[], b: f32[]) -> f32[] {",
        "  %a = f32[] parameter(0)",
        "  %b = f32[] parameter(1)",
        "  ROOT %s = f32[] add(%a, %b)",
        "}",
        "",
        "%fused_mul (p0: f32[64,64], p1: f32[64,64]) -> f32[64,64] {",
        "  %p0 = f32[64,64]{1,0} parameter(0)",
        "  %p1 = f32[64,64]{1,0} parameter(1)",
        "  %m = f32[64,64]{1,0} multiply(%p0, %p1)",
        "  ROOT %t = f32[64,64]{1,0} tanh(%m)",
        "}",
        "",
        "ENTRY %main (x: f32[64,64], y: f32[64,64]) -> f32[64,64] {",
        "  %x = f32[64,64]{1,0} parameter(0)",
        "  %y = f32[64,64]{1,0} parameter(1)",
    ]
    prev, other = "x", "y"
    k = 0
    # One block = 10 instructions; the last value of a block feeds the next one.
    while k * 10 < n:
        b = f"b{k}"
        lines += [
            f"  %c.{b} = f32[] constant(0.5)",
            f"  %bc.{b} = f32[64,64]{{1,0}} broadcast(%c.{b}), dimensions={{}}",
            f"  %mul.{b} = f32[64,64]{{1,0}} multiply(%{prev}, %bc.{b}), {meta}",
            f"  %add.{b} = f32[64,64]{{1,0}} add(%mul.{b}, %{other}), {meta}",
            f"  %dot.{b} = f32[64,64]{{1,0}} dot(%add.{b}, %{other}), lhs_contracting_dims={{1}},"
            f" rhs_contracting_dims={{0}}, {meta}",
            f"  %red.{b} = f32[64]{{0}} reduce(%dot.{b}, %c.{b}), dimensions={{1}}, "
            f"to_apply=%add_f32, {meta}",
            f"  %fus.{b} = f32[64,64]{{1,0}} fusion(%dot.{b}, %add.{b}), kind=kLoop, "
            f"calls=%fused_mul, {meta}",
            f"  %tup.{b} = (f32[64,64]{{1,0}}, f32[64]{{0}}) tuple(%fus.{b}, %red.{b})",
            f"  %gte.{b} = f32[64,64]{{1,0}} get-tuple-element(%tup.{b}), index=0",
            f"  %neg.{b} = f32[64,64]{{1,0}} negate(%gte.{b}), {meta}",
        ]
        prev = f"neg.{b}"
        k += 1
    lines[-1] = "  ROOT" + lines[-1][1:]
    lines += ["}", ""]
    return "\n".join(lines) + "\n"


def median_of(repeat: int, fn):
    times = []
    result = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", help="an HLO text file (default: a generated module)")
    ap.add_argument("--instructions", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    text = Path(args.file).read_text() if args.file else generate(args.instructions)
    load = os.getloadavg()
    t_plain, _ = median_of(args.repeat, lambda: sum(1 for _ in _PLAIN_TOKENS.finditer(text)))
    t_lex, _ = median_of(args.repeat, lambda: tokenize(text))
    t_parse, module = median_of(args.repeat, lambda: parse_module(text))
    devices = module.replica_count * module.num_partitions
    t_verify, _ = median_of(args.repeat, lambda: verify_module(module, num_devices=devices))
    t_both, _ = median_of(args.repeat,
                          lambda: verify_module(parse_module(text), num_devices=devices))
    t_print, printed = median_of(args.repeat, lambda: print_module(module))
    count = sum(len(c.instructions) for c in module.computations)
    if not args.file:
        assert printed == text, "printing the generated module did not reproduce it"
    mb = len(text.encode()) / 1e6
    print(f"{args.file or 'generated module'}: {count} instructions, {mb * 1e3:.0f} KB, "
          f"median of {args.repeat}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'phase':<14} {'ms':>8} {'MB/s':>7}")
    for phase, t in (("plain tokens", t_plain), ("lexer", t_lex), ("parse", t_parse),
                     ("verify", t_verify), ("parse+verify", t_both), ("print", t_print)):
        print(f"{phase:<14} {t * 1e3:8.1f} {mb / t:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
