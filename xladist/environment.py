"""The XLADIST_* environment variables that hold numbers, and XLADIST_CACHE_DIR: read and
checked in one place.

A value that is not what the variable takes (`XLADIST_THREADS=abc`, a negative timeout, a
port beyond 65535) is an InputError naming the variable and what it takes: from `check()`,
which the launching process calls before any rank starts (xladist/runtime/run_args.py,
launcher.rank_environment), and from `setting()` wherever the value is used -- never a
ValueError's traceback from a rank, never a silent fall back to the default.
docs/environment.md lists them all. The rules these settings share with the options and
keywords that take the same kind of number are here too: `check_seconds` (a wait) and
`check_count` (a count: devices, ranks, replicas, items read ahead).
"""

from __future__ import annotations

import math
import operator
import os
from pathlib import Path

from .errors import InputError

# The longest wait (a timeout, a budget) xladist takes, in seconds: about 31 years. Longer
# ones overflow the operating system's timers (threading waits, select: time_t), which
# ended a run with OverflowError tracebacks from its ranks; 0 is how to say "no deadline".
MAX_SECONDS = 1e9


def check_seconds(value, what: str, zero: str = "", *, positive: bool = False) -> float:
    """`value` is a number of seconds from 0 to MAX_SECONDS (InputError naming `what`
    otherwise); `zero` says what 0 means, e.g. " (0: no deadline)"; `positive`: 0 is
    refused too (a wait that must end: `xladist conformance --timeout`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what} must be a number, got {value!r}")
    if positive and not value > 0:  # also NaN
        raise InputError(f"{what} must be a number of seconds > 0, got {value}")
    if not value >= 0:  # also NaN
        raise InputError(f"{what} must be a number of seconds >= 0{zero}, got {value}")
    if value > MAX_SECONDS:
        raise InputError(f"{what} must be at most {MAX_SECONDS:.0f} seconds (31 years)"
                         f"{zero}, got {value}")
    return float(value)


def check_count(value, what: str) -> int:
    """`value` is a whole number >= 1 -- an int or a numpy integer, not a bool (n=True is
    no count), a float (1.5, 2.0) or a string ("2") -- returned as an int; InputError
    naming `what` otherwise. The one rule for a count a user gives."""
    try:
        count = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        count = None
    if count is None or count < 1:
        raise InputError(f"{what} must be a whole number >= 1, got {value!r}")
    return count


# name: (whole number?, least value, greatest value or None, what it takes)
_NUMBERS = {
    "XLADIST_THREADS": (True, 1, None, "a whole number of threads >= 1"),
    "XLADIST_COMPILE_JOBS": (True, 1, None, "a whole number of processes >= 1"),
    "XLADIST_VECTOR_WIDTH": (True, 1, None, "a vector width in bits, a whole number >= 1"),
    "XLADIST_COLLECTIVE_TIMEOUT": (False, 0, MAX_SECONDS,
                                   "a number of seconds >= 0 (0: no deadline), at most 1e9"),
    "XLADIST_HEARTBEAT_TIMEOUT": (False, 0, MAX_SECONDS,
                                  "a number of seconds >= 0 (0: off), at most 1e9"),
    "XLADIST_REGISTER_TIMEOUT": (False, 0, MAX_SECONDS, "a number of seconds >= 0, at most 1e9"),
    "XLADIST_COORD_PORT": (True, 0, 65535, "a TCP port number, 0 (any free one) to 65535"),
    "XLADIST_CACHE_MAX_MB": (False, 0, None, "a size in MiB >= 0 (0: no bound)"),
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


SIGNATURES = ("unproven", "always", "off")


def signatures() -> str:
    """When the members of each collective compare its signature before its call
    (runtime/signatures.py), from XLADIST_SIGNATURES: `unproven` (unset: in runs the
    deadlock check did not prove), `always`, or `off` (never: the program is trusted, as
    XLA trusts it). InputError for another value."""
    raw = os.environ.get("XLADIST_SIGNATURES", "").strip().lower()
    if raw and raw not in SIGNATURES:
        raise InputError(f"environment variable XLADIST_SIGNATURES={raw!r}: expected one of "
                         f"{', '.join(SIGNATURES)}")
    return raw or "unproven"


CACHE_OFF = ("", "off", "none", "0")


def cache_dir() -> Path | None:
    """The compiled-kernel cache directory: XLADIST_CACHE_DIR, default ~/.cache/xladist;
    None when the variable turns the cache off (empty, `off`, `none`, `0`)."""
    env = os.environ.get("XLADIST_CACHE_DIR")
    if env is not None and env.strip().lower() in CACHE_OFF:
        return None
    return Path(env) if env else Path.home() / ".cache" / "xladist"


def check_cache_dir() -> None:
    """InputError when the kernel cache directory cannot be one: it, or the nearest of its
    parents that exists, is a file. Otherwise every kernel of every process would warn
    that its entry cannot be read (a missing directory is created when an entry is
    written; one that cannot be written only makes runs slower)."""
    d = cache_dir()
    if d is None:
        return
    there = d
    while not there.exists() and there.parent != there:
        there = there.parent
    if there.exists() and not there.is_dir():
        what = f"{there} is a file" if there == d else f"{there}, a part of it, is a file"
        raw = os.environ.get("XLADIST_CACHE_DIR")
        name = (f"environment variable XLADIST_CACHE_DIR={raw!r}" if raw
                else f"the kernel cache directory {d} (XLADIST_CACHE_DIR is not set)")
        raise InputError(f"{name}: {what}, not a directory; name a directory (created "
                         f"when missing) or set XLADIST_CACHE_DIR=off to run without the "
                         f"kernel cache")


def check() -> None:
    """Every numeric XLADIST_* variable set here takes its value, XLADIST_SIGNATURES is
    one of its words, and XLADIST_CACHE_DIR
    names a directory (InputError otherwise). Before ranks start,
    runtime/launcher.check_environment calls it with the check of XLADIST_TARGET_CPU
    (compiler/target.py: a CPU name only LLVM can judge)."""
    for name in _NUMBERS:
        setting(name)
    signatures()
    check_cache_dir()
