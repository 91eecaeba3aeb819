"""What a long run shows while it runs: one status line on rank 0.

    xladist run: 12.4 s | step 37/100 (3.0/s) | outfeed 37 | waiting 4 s in all-reduce.3

On a terminal the line is redrawn in place (`\\r`, at most 10 times a second) from the
first second on; when stderr is a file or a pipe, a plain log line is written every few
seconds instead, so logs stay readable. Short runs print nothing. `--quiet` turns it off.

The numbers come from what rank 0 keeps anyway: the iteration of its outermost loop
that communicates (the deadline watchdog's loop stack, kept for hang reports; for a
training loop, the step; the total when XLA recorded a known_trip_count; a cpu native
loop's is the cell its driver writes each iteration for the same reports) or, when the
run is traced, the Tracer's count of top-level loop iterations; outfeed items (rank 0's
counters-only Tracer, xladist/runtime/trace.py); and the wait rank 0 has been blocked in for more
than LONG_WAIT_S. A daemon thread draws the line: it sleeps on an Event
between updates and never touches MPI.

Ranks do not know whether the user's stderr is a terminal (mpiexec hands them pipes), so
`xladist run` tells them through XLADIST_PROGRESS (tty, log or off) when it starts the job.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from xladist.collectives import deadline

ENV = "XLADIST_PROGRESS"
MODES = ("tty", "log", "off")
TTY_INTERVAL_S = 0.1   # 10 Hz: smooth enough, and redraws cost nothing measurable
TTY_DELAY_S = 1.0      # runs shorter than this show no line at all
LOG_INTERVAL_S = 5.0   # one plain line per this many seconds when not on a terminal
LONG_WAIT_S = 2.0      # a wait of rank 0 this long is named on the line


def mode(quiet: bool = False, stream=None) -> str:
    """tty, log or off, for this process (see the module docstring)."""
    if quiet:
        return "off"
    forced = os.environ.get(ENV, "")
    if forced in MODES:
        return forced
    stream = sys.stderr if stream is None else stream
    try:
        return "tty" if stream.isatty() else "log"
    except (AttributeError, ValueError):
        return "log"


def launch_env(quiet: bool = False) -> dict[str, str]:
    """Environment for the ranks of a job started from this process."""
    env = {ENV: mode(quiet)}
    if env[ENV] == "tty":  # ranks cannot ask the terminal its width
        try:
            env["COLUMNS"] = str(os.get_terminal_size(sys.stderr.fileno()).columns)
        except (OSError, ValueError):
            pass
    return env


class Progress:
    """The status line; `with Progress(tracer, "tty"): run()`."""

    def __init__(self, tracer, how: str, *, label: str = "xladist run", stream=None,
                 interval: float | None = None, delay: float | None = None):
        self.tracer = tracer
        self.how = how
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        tty = how == "tty"
        self.interval = interval if interval is not None else (
            TTY_INTERVAL_S if tty else LOG_INTERVAL_S)
        self.delay = delay if delay is not None else (TTY_DELAY_S if tty else LOG_INTERVAL_S)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._shown = 0          # characters of the line on screen (tty)
        self._t0 = time.monotonic()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self) -> None:
        self._t0 = time.monotonic()
        if self.how == "off" or self.tracer is None:
            return
        self._thread = threading.Thread(target=self._run, name="xladist-progress",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            self._erase()

    def println(self, text: str, stream=None) -> None:
        """Print a line above the status line (which is redrawn at the next update)."""
        with self._lock:
            self._erase()
            print(text, file=stream or sys.stdout, flush=True)

    # ---- drawing -----------------------------------------------------------------------
    def status(self) -> str:
        tr = self.tracer
        elapsed = time.monotonic() - self._t0
        parts = [f"{self.label}: {elapsed:.1f} s"]
        step = _loop_iteration() or tr.iterations
        if step:
            total = f"/{tr.trip_count}" if tr.trip_count else ""
            rate = step / elapsed if elapsed > 0 else 0.0
            parts.append(f"step {step}{total} ({rate:.1f}/s)")
        if tr.outfeed_items:
            parts.append(f"outfeed {tr.outfeed_items}")
        waiting = _long_wait()
        if waiting:
            parts.append(waiting)
        return " | ".join(parts)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if time.monotonic() - self._t0 < self.delay:
                continue
            with self._lock:
                if self._stop.is_set():
                    return
                self._draw(self.status())

    def _draw(self, text: str) -> None:
        try:
            if self.how == "tty":
                width = _columns() - 1
                text = text[:width]
                self.stream.write("\r" + text + " " * max(0, self._shown - len(text)))
                self._shown = len(text)
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            self._stop.set()  # stderr went away: stop drawing, keep running

    def _erase(self) -> None:
        if self._shown:
            try:
                self.stream.write("\r" + " " * self._shown + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self._shown = 0


def _loop_iteration() -> int:
    """The iteration rank 0's outermost communicating loop is in (the watchdog keeps it for
    its reports at no extra cost), or 0."""
    loops = deadline.watchdog.loops
    try:
        return int(loops[0][1]) if loops else 0
    except (IndexError, TypeError, ValueError):  # popped while we looked: no loop now
        return 0


def _long_wait() -> str | None:
    """`waiting 3 s in all-reduce.60 (line 62)` when rank 0 has been blocked for a while
    (short waits would only flicker)."""
    cur = deadline.watchdog.waiting_now()
    if cur is None:
        return None
    what, _where, start = cur
    waited = time.monotonic() - start
    if waited < LONG_WAIT_S:
        return None
    return f"waiting {waited:.0f} s in {str(what).split(' over ')[0]}"


def _columns() -> int:
    try:
        return int(os.environ.get("COLUMNS", "")) or os.get_terminal_size(2).columns
    except (ValueError, OSError):
        return 100
