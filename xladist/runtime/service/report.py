"""The service's words: a rank that died or got stuck, what a signal usually means, and the
line that turns a hang after a proof into a bug report."""

from __future__ import annotations

import os
import signal
import tempfile
import time

from ..watchdog import describe_position

# What a signal that ended a rank usually means, for the person reading the report.
SIGNAL_MEANING = {
    signal.SIGKILL: "often the out-of-memory killer (see `dmesg` or the batch system's log on "
                    "that host), or a batch system enforcing a limit",
    signal.SIGSEGV: "a crash (an invalid memory access) in native code",
    signal.SIGBUS: "a crash (a bad memory access, e.g. a file truncated while mapped)",
    signal.SIGILL: "an instruction this CPU does not have (code built for another CPU)",
    signal.SIGABRT: "an abort in native code (an assertion, or a double free)",
    signal.SIGFPE: "an arithmetic trap in native code",
    signal.SIGTERM: "asked to stop (a batch system's time limit, or `kill`)",
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGHUP: "its terminal or ssh session went away",
    signal.SIGPIPE: "it wrote to a connection whose other end was gone",
}


def ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def signal_text(sig: int) -> str:
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    meaning = SIGNAL_MEANING.get(sig)
    return f"signal {sig} ({name}{': ' + meaning if meaning else ''})"


def _who(info: dict) -> str:
    text = f"rank {info['rank']}"
    if "device" in info:
        text += (f" (device {info['device']}, replica {info['replica']}, partition "
                 f"{info['partition']})")
    return text + f" on {info.get('host', '?')}, pid {info.get('pid', '?')},"


def lost_rank(info: dict, *, sig: int | None = None, exit_code: int | None = None) -> str:
    """`xladist: rank 2 (device 2, ...) on nodeB, pid 812, was killed by signal 9 (SIGKILL:
    often the out-of-memory killer ...). Its last position: ...`"""
    who = _who(info)
    if info.get("how") == "stalled":
        what = (f"stopped sending heartbeats {info.get('silent_s', 0):.0f} s ago: it is stopped "
                "(SIGSTOP, a debugger), starved of CPU or swapping, or its host is unreachable")
    elif sig is not None:
        what = f"was killed by {signal_text(sig)}"
    elif exit_code is not None:
        what = f"exited with code {exit_code} without saying why"
    else:
        what = ("ended without a word: killed by a signal -- SIGKILL is often the "
                "out-of-memory killer -- or crashed")
    rec = info.get("record") or {}
    where = describe_position(dict(rec, **{k: info[k] for k in ("rank",) if k in info}),
                              info["rank"], time.time(), False).split(": ", 1)[-1]
    return f"xladist: {who} {what}. Its last position: {where}. The job was ended."


def proven_line(checked: dict, positions: dict[int, dict] | None = None) -> str | None:
    """The report's last line when the deadlock check had spoken for the program that hung.
    Proven: the check was wrong, and the module is saved so the case can be reported.
    Proven only assuming loop trip counts (precheck.verdict's "assuming"): the runtime follows
    each loop's condition, not its known_trip_count, so the likely cause is a false
    assumption -- named, so the user looks there before suspecting the checker.
    Only for a deadlock: when a rank of `positions` (every rank's last record) is still
    computing or starting, the wait outlasted its compute (a slow rank, a backend stuck in
    its own code), which no deadlock check speaks for: no line."""
    if positions and any(rec.get("state") not in ("waiting", "finished")
                         for rec in positions.values()):
        return None
    if checked and checked.get("verdict") == "assuming":
        assumed = "; ".join(checked.get("assumptions") or []) or "a known_trip_count"
        return ("xladist: the deadlock check proved this program deadlock-free only assuming "
                "loop trip counts it could not verify; the runtime follows each loop's "
                "condition, so this hang may mean an assumption is false: " + assumed)
    if not checked or not checked.get("proven"):
        return None
    module = checked.get("module")
    text = module.to_text() if module is not None else None  # only now: such hangs are rare
    saved = None
    if text:
        try:
            fd, saved = tempfile.mkstemp(prefix="xladist-proven-hang-", suffix=".hlo")
            with os.fdopen(fd, "w") as f:
                f.write(text)
        except OSError:
            saved = None
    where = f"the module is saved as {saved}" if saved else "the module could not be saved"
    return ("xladist: the deadlock check had proven this program deadlock-free, so this hang "
            f"is a defect of the checker: {where}; please report it with that file "
            f"({checked.get('how', 'xladist check')}).")
