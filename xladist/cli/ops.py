"""`xladist ops`: the coverage matrix, every opcode x phase, "yes" or why not.

Each column reads its phase's own tables, so the matrix cannot drift from the code:
- parse: the opcode has a row in hlo/opcodes.OPCODES (always "yes" here);
- verify: hlo/shape_inference.SHAPE_RULES, else its UNSUPPORTED reason;
- interpreter: interpreter.EVAL_RULES, else interpreter.UNSUPPORTED's reason;
- cpu: xladist.compiler.coverage() -> {opcode: "yes" | reason};
- the opcodes hlo.dynamic_padder rewrites into static ones before any backend runs
  (set-dimension-size, dynamic-reshape) count as "yes" for the interpreter and cpu;
- runtime: "yes" for ops that stay on the device; collectives, p2p and feeds from the MPI
  runtime's xladist.runtime.op_coverage.coverage().
"""

from __future__ import annotations

import argparse
import json

HELP = "print which opcodes each phase supports (parse, verify, interpreter, cpu, runtime)"

EPILOG = """\
examples:
  xladist ops                       the whole matrix
  xladist ops --family collective   only one opcode family
  xladist ops --missing             only rows where some phase says no
  xladist ops --json                {opcode: {phase: "yes" | reason}}
"""

PHASES = ("parse", "verify", "interpreter", "cpu", "runtime")

# Families whose ops need other devices or the host: the MPI runtime decides them.
DEVICE_FAMILIES = ("collective", "collective_async", "p2p", "feed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the matrix as JSON")
    from ..hlo.opcodes import FAMILIES
    parser.add_argument("--family", choices=FAMILIES, metavar="FAMILY",
                        help="only opcodes of this family: " + ", ".join(FAMILIES))
    parser.add_argument("--missing", action="store_true",
                        help="only opcodes that some phase does not support")


def _table_column(rules, unsupported, missing_reason):
    from ..hlo.dynamic_padder import REWRITTEN  # (the module and its imports: only here)

    def cell(op):
        if op in rules or op in REWRITTEN:
            return "yes"
        return unsupported.get(op, missing_reason)
    return cell


def _coverage_column(table):
    from ..hlo.dynamic_padder import REWRITTEN

    def cell(op):
        if op in REWRITTEN:
            return "yes"
        return table.get(op, "not listed by the phase's coverage()")
    return cell


def coverage_matrix() -> dict[str, dict[str, str]]:
    """{opcode: {phase: "yes" | reason}} for every opcode in OPCODES."""
    from .. import interpreter
    from ..compiler.coverage import coverage as cpu_coverage
    from ..hlo import shape_inference as si
    from ..hlo.opcodes import OPCODES
    from ..runtime.op_coverage import coverage as runtime_coverage

    verify = _table_column(si.SHAPE_RULES, si.UNSUPPORTED, "no shape rule")
    interp = _table_column(interpreter.EVAL_RULES, interpreter.UNSUPPORTED,
                           "no interpreter rule")
    cpu = _coverage_column(cpu_coverage())
    runtime = _coverage_column(runtime_coverage())

    matrix = {}
    for op, info in OPCODES.items():
        matrix[op] = {
            "parse": "yes",
            "verify": verify(op),
            "interpreter": interp(op),
            "cpu": cpu(op),
            "runtime": runtime(op) if info.family in DEVICE_FAMILIES else "yes",
        }
    return matrix


def run(args) -> int:
    from ..hlo.opcodes import OPCODES
    matrix = coverage_matrix()
    rows = [op for op in matrix
            if (args.family is None or OPCODES[op].family == args.family)
            and (not args.missing or any(v != "yes" for v in matrix[op].values()))]
    if args.json:
        print(json.dumps({op: matrix[op] for op in rows}, indent=1))
        return 0
    width = max([len(op) for op in rows] + [6])
    print(f"{'opcode':<{width}}  " + "  ".join(f"{p:<11}" for p in PHASES))
    notes: dict[str, int] = {}  # reason -> footnote number (reasons repeat across rows)
    for op in rows:
        cells = []
        for p in PHASES:
            v = matrix[op][p]
            if v == "yes":
                cells.append(f"{'yes':<11}")
            else:
                k = notes.setdefault(v, len(notes) + 1)
                cells.append(f"{'no [' + str(k) + ']':<11}")
        print(f"{op:<{width}}  " + "  ".join(cells))
    total = len(rows)
    summary = "  ".join(f"{p} {sum(matrix[o][p] == 'yes' for o in rows)}/{total}"
                        for p in PHASES)
    print(f"\n{summary}")
    if notes:
        print("\nreasons:")
        for reason, k in notes.items():
            print(f"  [{k}] {reason}")
    return 0
