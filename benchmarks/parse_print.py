"""Parse and print speed of the HLO text layer on a generated 10,000-instruction module.

    python benchmarks/parse_print.py [--instructions N] [--repeat R]

The module mixes what real dumps contain: parameters, constants, broadcasts,
element-wise ops, dots, reduces with a to_apply region, fusions, tuples and
get-tuple-elements, most with metadata. Prints the best of R runs per phase.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xladist.hlo.parser import parse_module  # noqa: E402
from xladist.hlo.printer import print_module  # noqa: E402


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


def best_of(repeat: int, fn):
    best = float("inf")
    result = None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instructions", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    text = generate(args.instructions)
    t_parse, module = best_of(args.repeat, lambda: parse_module(text))
    t_print, printed = best_of(args.repeat, lambda: print_module(module))
    count = sum(len(c.instructions) for c in module.computations)
    assert printed == text, "printing the generated module did not reproduce it"
    rows = [("parse", t_parse), ("print", t_print), ("parse+print", t_parse + t_print)]
    print(f"{count} instructions, {len(text) / 1e6:.2f} MB of text, best of {args.repeat}")
    print(f"{'phase':<12} {'seconds':>8} {'instr/s':>10}")
    for phase, t in rows:
        print(f"{phase:<12} {t:8.3f} {count / t:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
