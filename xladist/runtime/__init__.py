"""One rank's life in xladist: device assignment, executor, feeds, deadlock check, watchdog."""


def coverage() -> dict[str, str]:
    """{opcode: "yes" | reason} for the ops the MPI runtime carries (see op_coverage.py)."""
    from .op_coverage import coverage as _coverage
    return _coverage()
