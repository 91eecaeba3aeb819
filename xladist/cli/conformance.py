"""`xladist conformance`: the built-in collective conformance suite against a backend and MPI.

Runs every collective, channel and feed over every element type, group mode, kind of
replica groups and device assignment (xladist/conformance/suite.py), plus XLA's own
collective tests (xladist/conformance/xla.py), on N MPI ranks with the chosen backend; the
expected values come from the reference (every device run by the interpreter in one
process, xladist/conformance/reference.py). Prints a matrix of operations x element
types, a line per group mode and device count, and every failure with the command that
reproduces it alone. Exit 0 only when every case that ran passed (docs/conformance.md).
"""

from __future__ import annotations

import argparse
import sys
import time

HELP = "check a backend and MPI against XLA's collective semantics"

EPILOG = """\
examples:
  xladist conformance                       the default suite on 2 and 4 ranks, cpu backend
  xladist conformance -n 2 --backend interpreter
  xladist conformance -n 2 4 --backend mybackend --junit report.xml
                                            a backend from an installed package, for CI
  xladist conformance -n 8 --full --json all.json
                                            the whole matrix: every type, configuration
                                            and device assignment (long)
  xladist conformance -n 4 --select '*/all-to-all/*s8*'
                                            only the cases whose names match
  xladist conformance -n 4 --list           the case names, without running anything
  xladist conformance -n 4 --hostfile hosts --mpiexec /opt/mpich/bin/mpiexec
                                            ranks on other hosts, with another MPI
  xladist conformance -n 2 --no-xla --timeout 20
                                            without XLA's own tests; a wait for another
                                            rank over 20 s ends the case's job

Cells: ok (all passed), F<k> (k failed), ns (the backend does not support it), ok~ (passed,
some not supported), gap (a known xladist gap). Every failure names the case, the device and
the first differing element, and prints the command that reproduces it alone.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--num-devices", dest="counts", type=int, action="extend",
                        nargs="+", metavar="N", help="device counts (MPI ranks) to run: "
                                                     "-n 2 4 or -n 2 -n 4 (default: 2 and 4)")
    parser.add_argument("--backend", default="cpu",
                        help="backend to check: cpu, interpreter, or one an installed "
                             "package registers (docs/BACKENDS.md); default cpu")
    parser.add_argument("--mpiexec", metavar="PATH",
                        help="the mpiexec to start ranks with (default: the mpich wheel's)")
    parser.add_argument("--hostfile", metavar="FILE", help="hosts for the ranks (mpiexec -f)")
    parser.add_argument("--select", action="append", default=[], metavar="PATTERN",
                        help="run only cases whose name matches this shell pattern (the "
                             "whole name: use *); repeat for several")
    parser.add_argument("--full", action="store_true",
                        help="the whole matrix: every element type, configuration, device "
                             "assignment and shape for every variant (hours on 2 cores)")
    parser.add_argument("--no-xla", dest="xla", action="store_false",
                        help="leave out XLA's own collective tests")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="a wait for another rank longer than this ends the case's job "
                             "(default 60)")
    parser.add_argument("--junit", metavar="FILE", help="write JUnit XML for CI systems")
    parser.add_argument("--json", metavar="FILE", help="write every case's result as JSON")
    parser.add_argument("--list", action="store_true",
                        help="print the names of the cases that would run, and exit")


def run(args) -> int:
    from xladist.backends import check_backend
    from xladist.collectives.mpiexec import find_mpiexec
    from xladist.conformance import report, runner
    from xladist.conformance.suite import DEVICE_COUNTS, Plan, units
    from xladist.files import check_destination, check_source

    from xladist.environment import check_count
    counts = [check_count(n, "-n") for n in dict.fromkeys(args.counts or
                                                          runner.default_counts())]
    plan = Plan(full=args.full, select=tuple(args.select), xla=args.xla)
    # An unknown backend is an error before any job starts -- and before a --list, whose
    # names would otherwise stand for a run that cannot happen.
    check_backend(args.backend)
    if args.list:
        for n in counts:
            for unit in units(n, plan):
                for case in unit.cases:
                    print(case.name)
        return 0
    if args.mpiexec:
        find_mpiexec(args.mpiexec)
    if args.hostfile:
        check_source(args.hostfile, "--hostfile")
    for path, what in ((args.junit, "--junit"), (args.json, "--json")):
        if path:
            check_destination(path, what)
    from ..environment import check_seconds
    # A case's job must end (0 would be no deadline), and not beyond the timers' range.
    check_seconds(args.timeout, "--timeout", positive=True)
    unusual = [n for n in counts if n not in DEVICE_COUNTS]
    if unusual:
        print(f"xladist conformance: note: the suite is written for {DEVICE_COUNTS} devices; "
              f"{unusual} runs what fits", file=sys.stderr)
    options = runner.Options(backend=args.backend, plan=plan, mpiexec=args.mpiexec,
                             hostfile=args.hostfile, timeout=args.timeout)
    start = time.monotonic()
    progress = runner.stderr_progress()
    results = runner.run(counts, options, progress)
    if progress is not None:
        sys.stderr.write("\r\x1b[K")
    seconds = time.monotonic() - start
    print(report.text(results, options, seconds), flush=True)
    if args.junit:
        report.write_junit(args.junit, results, options, seconds)
    if args.json:
        report.write_json(args.json, results, options, seconds)
    totals = report.totals(results)
    if not any(totals.values()):
        hint = ""
        if args.select:
            # The pattern as a path part: 'all-gather/*' -> '*/all-gather/*' (stripping only
            # '*' suggested '*/all-gather//*', which matches nothing either).
            part = args.select[0].strip("*/")
            hint = (f" --select {' '.join(repr(p) for p in args.select)} (a pattern matches "
                    f"the whole name, as '*/{part}/*' would; --list shows the names)")
        print(f"xladist conformance: no case matched{hint}", file=sys.stderr)
        return 1
    failed = sum(totals[s] for s in ("fail", "error", "gap-closed"))
    if not totals["pass"]:
        print("xladist conformance: no case passed", file=sys.stderr)
        return 1
    return 1 if failed else 0
