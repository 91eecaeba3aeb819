"""The XLADIST_* environment variables that hold numbers: read and checked in one place.

A value that is not what the variable takes (`XLADIST_THREADS=abc`, a negative timeout, a
port beyond 65535) is an InputError naming the variable and what it takes: from `check()`,
which the launching process calls before any rank starts (xladist/runtime/run_args.py,
launcher.rank_environment), and from `setting()` wherever the value is used -- never a
ValueError's traceback from a rank, never a silent fall back to the default.
docs/environment.md lists them all.
"""

from __future__ import annotations

import math
import os

from .errors import InputError

# name: (whole number?, least value, greatest value or None, what it takes)
_NUMBERS = {
    "XLADIST_THREADS": (True, 1, None, "a whole number of threads >= 1"),
    "XLADIST_COMPILE_JOBS": (True, 1, None, "a whole number of processes >= 1"),
    "XLADIST_VECTOR_WIDTH": (True, 1, None, "a vector width in bits, a whole number >= 1"),
    "XLADIST_COLLECTIVE_TIMEOUT": (False, 0, None, "a number of seconds >= 0 (0: no deadline)"),
    "XLADIST_HEARTBEAT_TIMEOUT": (False, 0, None, "a number of seconds >= 0 (0: off)"),
    "XLADIST_REGISTER_TIMEOUT": (False, 0, None, "a number of seconds >= 0"),
    "XLADIST_COORD_PORT": (True, 0, 65535, "a TCP port number, 0 (any free one) to 65535"),
}


def setting(name: str, default=None):
    """The value of the numeric variable `name`, or `default` when it is unset or empty;
    InputError when it is set to something the variable does not take."""
    whole, least, most, what = _NUMBERS[name]
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = None
    if value is None or math.isnan(value) or value < least or (most is not None
                                                                and value > most):
        raise InputError(f"environment variable {name}={raw!r}: expected {what}")
    return value


def target_cpu() -> str | None:
    """The CPU XLADIST_TARGET_CPU names, or None for the host (unset, empty or `host`).
    Whether LLVM knows it is compiler/target.check_cpu's to say."""
    cpu = os.environ.get("XLADIST_TARGET_CPU", "").strip()
    return cpu if cpu and cpu != "host" else None


def check() -> None:
    """Every numeric XLADIST_* variable set here takes its value (InputError otherwise).
    Before ranks start, runtime/launcher.check_environment calls it with the check of
    XLADIST_TARGET_CPU (compiler/target.py: a CPU name only LLVM can judge)."""
    for name in _NUMBERS:
        setting(name)
