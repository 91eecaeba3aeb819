"""The deadlock check that `xladist run` and `xladist.run` do before any rank starts.

`precheck` runs xladist.analysis.deadlock.check_module once, in the launching process (or, for a job
started by hand under mpiexec, see the callers), and

* refuses a program with problems: raises DeadlockError carrying the report (exit 1);
* prints a "cannot prove" warning once and lets the run proceed -- unless `strict`, which
  makes it a problem;
* skips modules that never talk to another device.

`check=False` (`--no-check`) opts out; the run-time watchdog (xladist/runtime/watchdog.py) is then the
only guard, and ends a hang with a report after `--timeout`.  The launching process tells the
ranks it started that the check was done through CHECKED_ENV.

`verdict(report, module, how)` is what the check concluded, as data the job carries (the
hang report says whether the check had proven the program it watched hang).
"""

from __future__ import annotations

import sys

from xladist.errors import DeadlockError

__all__ = ["CHECKED_ENV", "precheck", "proven", "verdict"]

CHECKED_ENV = "XLADIST_CHECKED"

_HINT = "(--no-check / check=False skips the check; the run-time watchdog still ends a hang)"


def precheck(module, num_devices: int, *, device_assignment=None, strict: bool = False,
             warn=None, prefix: str = "xladist run", budget: float | None = 10.0):
    """Check `module` on `num_devices`; returns the Report (None if nothing communicates).

    `budget` bounds the check's seconds (None: unbounded); past it the check warns that it
    cannot prove the program within the budget (an error when strict).
    Raises DeadlockError (its `report` attribute holds the Report) when a problem is found.
    `warn(text)` prints warnings (default: stderr).
    """
    from xladist.analysis.deadlock import check_module
    from xladist.analysis.schedule import computation_communicates
    if module.entry is None or not any(computation_communicates(c)
                                       for c in module.computations):
        return None
    report = check_module(module, num_devices, device_assignment=device_assignment,
                          strict=strict, budget=budget)
    if not report.ok:
        err = DeadlockError(f"refusing to run: {report.to_text()}\n{_HINT}")
        err.report = report
        raise err
    if report.warnings:
        text = "\n".join(p.to_text() for p in report.warnings)
        (warn or _stderr)(f"{prefix}: warning: the deadlock check cannot prove that "
                          f"{module.name} finishes; running anyway (--strict refuses it):\n"
                          f"{text}")
    return report


def proven(report) -> bool:
    """True when the check proved the program deadlock-free: no problem and no part it could
    not prove (a module that never communicates is not "proven": nothing was checked)."""
    return report is not None and report.verdict == "proven"


def verdict(report, module=None, how: str = "") -> dict:
    """The check's conclusion as data for the job (the coordination service's `checked`):

      "verdict"      "proven"            no device can hang or desynchronize;
                     "assuming"          proven if the listed loops run as their
                                         known_trip_count says (the check could not fold their
                                         conditions; the runtime follows the conditions);
                     "not proven"        parts depend on data, or the budget ran out (`reasons`);
                     "refused"           problems were found (precheck raised; `reasons` are
                                         their texts);
                     "nothing to check"  the module never talks to another device (`report`
                                         is None);
      "assumptions"  the known_trip_counts an "assuming" verdict rests on;
      "reasons"      what kept it from "proven" otherwise;
      "proven"       verdict == "proven"; the run-time watchdog's report then ends with "the
                     check proved it: a checker defect" if the program hangs;
      "module"       the module, when proven (its text is saved with such a report: printed
                     then, not at every launch -- a 10^6-element literal takes seconds to
                     print); "how": the check's command, for that line.

    `report` is what `precheck` returned or the DeadlockError it raised carried (Report.summary()
    gives the first three keys for a report)."""
    out = (report.summary() if report is not None
           else {"verdict": "nothing to check", "assumptions": [], "reasons": []})
    sure = proven(report)
    out.update(proven=sure, how=how, module=module if sure else None)
    return out


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
