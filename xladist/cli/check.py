"""`xladist check FILE`: parse and verify an HLO module, then check it for cross-device deadlocks.

Exit codes: 0 the module is valid, 1 a problem was found (a deadlock, or a warning under
--strict: e.g. a custom-call target nobody registered, which `xladist run` refuses), 2 invalid
input (parse or verifier error, bad options). Parse and verifier errors are raised to the dispatcher, which prints them;
with --json they are printed as JSON instead.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import UnsupportedError, XlaDistError

HELP = "parse and verify an HLO module (shapes, attributes, collective groups, deadlocks)"

EPILOG = """\
examples:
  xladist check module.hlo                 verify; devices from replica_count x num_partitions
  xladist check module.hlo -n 4            verify for 4 devices (a module without a device
                                           count runs as 4 replicas)
  xladist check spmd.hlo -n 4 --num-partitions 4
                                           the run's counts where the header says nothing
                                           (as `xladist run` takes them)
  xladist check module.hlo -n 8 --replica-count 2
                                           2 replicas of 4 partitions
  xladist check module.hlo --json          machine-readable result on stdout
  xladist check module.hlo --strict        warnings (e.g. elided constants) count as problems
  xladist check module.hlo -n 1024 --check-budget 60
                                           give the deadlock check up to 60 s (default 10);
                                           past it: "cannot prove within the budget"
  xladist check module.hlo --no-deadlock-check
                                           verifier only (no cross-device schedule proof)

exit codes: 0 ok (warnings, e.g. a custom-call target nobody registered -- which
            `xladist run` refuses -- go to stderr), 1 problem found (warnings too under
            --strict), 2 invalid input (parse or verifier error, or a module before
            SPMD partitioning, refused in `xladist run`'s words)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="HLO text file ('-' reads stdin)")
    parser.add_argument("-n", "--num-devices", type=int, default=None, metavar="N",
                        help="number of devices the module will run on "
                             "(default: replica_count x num_partitions)")
    parser.add_argument("--replica-count", type=int, metavar="R",
                        help="replicas, where the module header does not declare them")
    parser.add_argument("--num-partitions", type=int, metavar="P",
                        help="partitions, where the module header does not declare them")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--strict", action="store_true",
                        help="treat warnings as problems (exit 1)")
    parser.add_argument("--no-deadlock-check", action="store_true",
                        help="skip the cross-device deadlock check")
    parser.add_argument("--check-budget", type=float, default=10.0, metavar="S",
                        help="seconds the deadlock check may take before it says it cannot "
                             "prove the program within the budget (default 10)")


def _text(item) -> str:
    to_text = getattr(item, "to_text", None)
    return to_text() if callable(to_text) else str(item)


def _deadlock_check(module, num_devices: int, has_channels: bool, skip: bool,
                    strict: bool, budget: float | None = None) -> dict:
    """Run xladist.analysis.deadlock.check_module; its Report has ok, errors, warnings, to_dict()."""
    if skip:
        return {"status": "skipped"}
    if not has_channels:
        return {"status": "not needed", "reason": "no collectives or channels"}
    from ..analysis import deadlock
    from ..errors import DeadlockError
    check = deadlock.check_module
    try:
        report = (check(module, num_devices, strict=strict) if budget is None
                  else check(module, num_devices, strict=strict, budget=budget))
    except DeadlockError as e:
        return {"status": "problem", "problems": [str(e)], "warnings": []}
    ok = bool(getattr(report, "ok", True))
    result = {
        "status": "ok" if ok else "problem",
        "problems": [] if ok else [_text(p) for p in getattr(report, "errors", [report])],
        "warnings": [_text(p) for p in getattr(report, "warnings", [])],
        "summary": _text(report).splitlines()[0] if report is not None else "",
    }
    to_dict = getattr(report, "to_dict", None)
    if callable(to_dict):
        result["report"] = to_dict()
    return result


def check_file(path: str, num_devices: int | None = None, *, deadlock: bool = True,
               strict: bool = False, budget: float | None = None,
               replica_count: int | None = None, num_partitions: int | None = None) -> dict:
    """Parse, verify and deadlock-check one file; returns the result as a dict.

    `replica_count` / `num_partitions`: the run's counts, as `xladist run` takes them.
    Raises HloParseError, VerifierError or InputError for invalid input, and
    UnsupportedError (`xladist run`'s message) for a module written before SPMD
    partitioning. A custom-call target this process has not registered is a warning: the
    module is valid HLO, but `xladist run` refuses it.
    """
    from ..hlo.parser import parse_text
    from ..hlo.verifier import verify_module
    from ..runtime.config import override_device_counts
    from ..semantics.custom_calls import check_partitioned, check_registered
    from . import read_module_text
    text, name = read_module_text(path)
    module = parse_text(text, filename=name)
    override_device_counts(module, replica_count, num_partitions)
    check_partitioned(module)  # before partitioning: refused as `xladist run` refuses it
    report = verify_module(module, num_devices=num_devices)
    try:
        check_registered(module)
        cannot_run = []
    except UnsupportedError as e:  # refused by `xladist run` (the same message)
        cannot_run = [f"xladist run refuses this module: {e}"]
    dl = _deadlock_check(module, report.num_devices, report.has_collectives, not deadlock,
                         strict, budget)
    warnings = list(report.warnings) + cannot_run + \
        [f"deadlock check: {w}" for w in dl.get("warnings", [])]
    return {
        "file": path,
        "module": module.name,
        "computations": report.computations,
        "instructions": report.instructions,
        "replica_count": report.replica_count,
        "num_partitions": report.num_partitions,
        "num_devices": report.num_devices,
        "has_collectives": report.has_collectives,
        "verified": True,
        "warnings": warnings,
        "deadlock_check": dl,
    }


def _exit_code(result: dict, strict: bool) -> int:
    if result["deadlock_check"].get("status") == "problem":
        return 1
    if strict and result["warnings"]:
        return 1
    return 0


def _print_text(result: dict, strict: bool) -> None:
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    dl = result["deadlock_check"]
    summary = (f"{result['module']} — {result['computations']} computations, "
               f"{result['instructions']} instructions, verified")
    if _exit_code(result, strict) == 0:
        print(f"OK: {summary}")
    else:
        print(f"FAIL: {summary}")
    if dl["status"] == "problem":
        print(f"deadlock check: {len(dl['problems'])} problem(s) on "
              f"{result['num_devices']} devices")
        for p in dl["problems"]:
            print("  " + p.replace("\n", "\n  "))
    elif dl.get("summary"):
        print(dl["summary"])
    elif dl["status"] != "not needed":
        print(f"deadlock check: {dl['status']}")
    if strict and result["warnings"]:
        print(f"--strict: {len(result['warnings'])} warning(s) count as problems")


def run(args) -> int:
    from ..runtime.run_args import check_numbers
    check_numbers(args)  # --check-budget, --replica-count, ... as `xladist run` checks them
    try:
        result = check_file(args.file, args.num_devices, deadlock=not args.no_deadlock_check,
                            strict=args.strict, budget=args.check_budget,
                            replica_count=args.replica_count,
                            num_partitions=args.num_partitions)
    except XlaDistError as e:
        if not args.json:
            raise
        print(json.dumps({"file": args.file, "verified": False, "error": str(e),
                          "error_type": type(e).__name__}, indent=2))
        return e.exit_code
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_text(result, args.strict)
    return _exit_code(result, args.strict)
