"""Deadlines for blocking collective calls: nothing hangs silently (ARCHITECTURE rule 3).

The main thread makes blocking MPI calls.  Before each one it stores *what* it is waiting in
(a tuple assignment: no lock, no syscall -- ``time.monotonic`` is served from the vDSO), and
clears it afterwards.  One daemon thread per process sleeps on a Condition with a timeout and,
when it wakes, checks whether the operation that is in progress has been running for longer
than the deadline; if so it prints ``rank R: timed out after T s waiting in <description>`` to
stderr and aborts the whole MPI job, so that no rank is left waiting forever.

The watchdog sleeps until the current operation's own deadline, or for half the deadline when
idle, so it wakes a handful of times per deadline period, never in a tight loop.  A hang is
reported between T and 1.5 T seconds after it starts.

Configuration: ``XLADIST_COLLECTIVE_TIMEOUT`` (seconds, default 300; 0 disables) or
:func:`configure`.

Two extensions serve the job-wide report of :mod:`xladist.runtime.watchdog`:

* ``watchdog.loops`` is the main thread's stack of ``[while name, iteration]`` entries, kept by
  the executor only around loops that communicate (one list append per loop, one integer
  increment per iteration), so a report can say ``iteration 5 of while.2``;
* ``watchdog.monitor`` (an object with ``publish(position)`` and ``fire(position)``), when set,
  is told by the daemon -- never by the waiting thread -- about waits that last longer than
  ``PUBLISH_AFTER_S``, about their end, and asked for the text to print when a deadline passes.

Native while loops (xladist/compiler/native/loop.py) run many waits without returning to
Python.  :meth:`Watchdog.begin_native` brackets the whole loop: the loop writes its iteration
and a *wait cell* (which all-reduce it is in, and a count of calls) into memory, and the daemon
reads them whenever it wakes.  A wait is timed from the moment the daemon first sees that cell
value, so a hang is still reported between T and 1.5 T after it starts, naming the
all-reduce and the iteration; a loop that keeps calling never times out.

A job's last words must reach the user.  MPICH's launcher sometimes drops what a rank wrote to
stderr just before ``MPI_Abort`` (measured: 7 of 40 two-rank aborts lost a 1.5 KiB message), so
:func:`abort_job` first hands its message to the *messenger* -- the rank's connection to the
coordination service (xladist/runtime/service/client.py), which delivers it to the launching
process before the abort, on whatever host that is -- and prints it itself only when the
messenger says the service does not.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Watchdog",
    "abort_job",
    "abort_on_exception",
    "configure",
    "on_abort",
    "run_abort_hooks",
    "set_messenger",
    "waiting",
    "watchdog",
]

DEFAULT_TIMEOUT_S = 300.0
# After printing, before MPI_Abort: time for the launcher to forward the message from a rank on
# another host, where the note file cannot help.  Paid only by a job that is failing anyway.
ABORT_FLUSH_S = 0.2
# The longest the on_abort hooks (saving a trace, host-transfer files) may delay an abort.
ABORT_HOOKS_S = 10.0
# A wait this long is published to the monitor; the daemon then re-checks every REFRESH_S so
# that the end of the wait is published promptly too.
PUBLISH_AFTER_S = 1.0
REFRESH_S = 1.0


def _env_timeout() -> float:
    from xladist.environment import setting
    return setting("XLADIST_COLLECTIVE_TIMEOUT", DEFAULT_TIMEOUT_S)


def _world_rank() -> int:
    """This process's rank in MPI_COMM_WORLD, without initializing MPI if nobody else has."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank()
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


_abort_lock = threading.Lock()
_aborting = False
# A second caller of abort_job (Ctrl-C's thread and the main thread's KeyboardInterrupt, a
# deadline and a failure at once) leaves the ending to the first, whose messenger may wait
# for the other ranks to go together (exiting first got them killed: mpiexec's 9); never
# set, so the wait is this bound, for a first caller that is stuck.
_ended = threading.Event()
ABORT_SECOND_WAIT_S = 30.0
# messenger(text, code) -> True when it delivered `text` to a process that prints it.
_messenger = None


def set_messenger(messenger) -> None:
    """Install (None: remove) the function that carries a failing rank's last words."""
    global _messenger
    _messenger = messenger


def abort_job(message: str, code: int = 1, *, with_rank: bool = True) -> None:
    """Print ``rank R: message`` (or just ``message``) once to stderr and abort every rank.

    Uses ``MPI_Abort`` on COMM_WORLD when MPI is up (mpiexec then kills the other ranks), else
    exits this process -- also under MPICH's hydra where the exit ends the job
    (_exit_ends_job: the message reached the job's coordination service, or
    everyone_goes() was called: the service told every rank to go, and the exit then
    holds hydra's PMI connection a moment, _hold_pmi_connection).  Safe to call from any
    thread (mpi4py initializes MPI with MPI_THREAD_MULTIPLE); only the first caller
    prints.
    """
    global _aborting
    with _abort_lock:
        first = not _aborting
        _aborting = True
    if not first:  # the first caller ends this process, when the job's ranks go (its messenger)
        _ended.wait(ABORT_SECOND_WAIT_S)
    run_abort_hooks()
    mpi = sys.modules.get("mpi4py.MPI")
    under_mpi = mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()
    delivered = False
    if first and message:
        prefix = f"rank {_world_rank()}: " if with_rank else ""
        if _messenger is not None:
            try:
                delivered = _messenger(f"{prefix}{message}", code)
            except Exception:  # noqa: BLE001 -- print it here instead
                delivered = False
        if not delivered:
            try:
                sys.stderr.write(f"{prefix}{message}\n")
                sys.stderr.flush()
            except Exception:  # noqa: BLE001, S110 -- stderr closed: still abort
                pass
            if under_mpi:
                time.sleep(ABORT_FLUSH_S)
    if under_mpi and (code == 0 or not _exit_ends_job(delivered or _everyone_goes)):
        mpi.COMM_WORLD.Abort(code)
    if under_mpi and _everyone_goes and _ranks_exit_together:
        _hold_pmi_connection()
    os._exit(code)


def _exit_ends_job(service_ends_it: bool) -> bool:
    """Whether this rank's non-zero exit ends the whole job, as MPI_Abort would, under MPICH's
    hydra (mpiexec from the mpich wheel): its proxy kills the other ranks on this host (~1 s)
    and ends its own way -- MPI_Abort made every host's proxy exit without removing the
    topology file it wrote for its ranks (/tmp/hydra_hwloc_xmlfile_*), one 5.5 KiB file left
    in /tmp per host per failed run. Ranks on other hosts (another proxy: Hydra's
    MPI_LOCALNRANKS counts this one's) go only when the job's coordination service ends
    them (`service_ends_it`): else they waited in MPI for ever (a bare `mpiexec -f hosts
    xladist run` whose rank 0 failed before the service was up), and MPI_Abort it is. Other
    launchers (Slurm's srun, Open MPI's mpirun) keep MPI_Abort: srun lets the other tasks of
    a job run on after one exits."""
    if not _under_hydra():
        return False
    return service_ends_it or os.environ.get("MPI_LOCALNRANKS") == os.environ.get("PMI_SIZE")


_everyone_goes = False
# Set by `xladist run` on a rank of a bare mpiexec launch (ranks_exit_together): only there
# does every rank of the job exit when the service ends it. A rank of a user's script under
# mpiexec may have gone on (its run raised to the script, which ended and waits in
# MPI_Finalize): with this rank's PMI connection held, hydra took its exit for a normal
# one and never ended that rank -- the job hung (2 runs in 5 of tests/runtime/
# test_watchdog.py's script whose rank 1 raised).
_ranks_exit_together = False


def ranks_exit_together() -> None:
    """This process is a rank of `xladist run` under a bare mpiexec: when the service ends
    the job, every rank exits, so an exit may hold hydra's PMI connection a moment
    (_hold_pmi_connection)."""
    global _ranks_exit_together
    _ranks_exit_together = True


def everyone_goes() -> None:
    """This rank's job is being ended on every rank at once (the coordination service told
    them all: service/client.py), so its exit may keep hydra's PMI connection open a moment
    (_hold_pmi_connection). Not for a rank that ends alone: there the proxy's taking its
    exit for a crash is what stops the others (held, the proxy reaped it first and stopped
    nobody: 60 s of tests/mpi/deadline_script.py raise)."""
    global _everyone_goes
    _everyone_goes = True


# How long a rank that ends the job by exiting keeps its connection to hydra's proxy open.
PMI_HOLD_S = 0.5


def _hold_pmi_connection() -> None:
    """Keep this rank's PMI connection (PMI_FD) open for PMI_HOLD_S after it exits, in a
    `sleep` that holds the descriptor. Hydra's proxy takes a rank's PMI connection closing
    without MPI_Finalize for a crash and kills (SIGKILL) the job's ranks still running on
    its host; mpiexec then exits 9 after its BAD TERMINATION banner, whatever code the
    ranks exit with. The ranks of a job being ended all exit at about the same moment
    (service/server.EXIT_TOGETHER_S), but one woken a few milliseconds late on a loaded
    host was still killed: measured, a rank exiting 150 ms before the others made mpiexec
    exit 9 in 2 runs of 4, 0 of 4 with the connection held."""
    fd = os.environ.get("PMI_FD", "")
    if not fd.isdigit() or not _under_hydra():
        return
    try:
        import subprocess
        subprocess.Popen(["sleep", str(PMI_HOLD_S)], pass_fds=(int(fd),),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    except (OSError, ValueError):  # no `sleep`, no descriptor: exit as before
        pass


def _under_hydra() -> bool:
    """Whether this rank's parent is MPICH's hydra proxy."""
    try:
        with open(f"/proc/{os.getppid()}/comm", "rb") as f:
            return f.read().strip() == b"hydra_pmi_proxy"
    except OSError:
        return False


_abort_hooks: list = []


def on_abort(hook):
    """Run ``hook()`` (once, from whichever thread) before this process aborts the job or its
    deadline passes -- e.g. to save this rank's trace.  Returns a function that unregisters it."""
    with _abort_lock:
        _abort_hooks.append(hook)

    def remove() -> None:
        with _abort_lock:
            if hook in _abort_hooks:
                _abort_hooks.remove(hook)
    return remove


def run_abort_hooks() -> None:
    """Run and drop the registered hooks, for at most ABORT_HOOKS_S: a failing or stuck hook
    never stops the abort or hides the failure being reported."""
    with _abort_lock:
        hooks = list(_abort_hooks)
        _abort_hooks.clear()
    if not hooks:
        return

    def run_all() -> None:
        for hook in hooks:
            try:
                hook()
            except Exception as e:  # noqa: BLE001 -- the failure being reported matters more
                try:
                    sys.stderr.write(f"xladist: while saving state for the abort: "
                                     f"{type(e).__name__}: {e}\n")
                except Exception:  # noqa: BLE001, S110 -- stderr closed
                    pass
    worker = threading.Thread(target=run_all, name="xladist-abort-hooks", daemon=True)
    worker.start()
    worker.join(ABORT_HOOKS_S)


class Watchdog:
    """Per-process deadline for the operation the main thread is blocked in."""

    def __init__(self, timeout_s: float | None = None):
        # None: XLADIST_COLLECTIVE_TIMEOUT, read at first use (a bad value is an InputError
        # then, not at import).
        self._timeout_s = None if timeout_s is None else float(timeout_s)
        # (what, where, start) or None.  One attribute so the daemon never sees a torn update.
        self.current: tuple[str, object, float] | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._generation = 0
        # [[while name, iteration], ...] of the main thread, outermost first (see module doc).
        self.loops: list[list] = []
        self.monitor = None

    @property
    def timeout_s(self) -> float:
        if self._timeout_s is None:
            self._timeout_s = _env_timeout()
        return self._timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self._timeout_s = float(value)

    # -- hot path -------------------------------------------------------------------------------
    def begin(self, what: str, where: object = None):
        """Mark the start of a wait; returns a token for :meth:`end`.

        ``where`` is formatted with ``str()`` only if the deadline fires, so callers can pass a
        communicator object instead of building a string on every call.
        """
        prev = self.current
        self.current = (what, where, time.monotonic())
        if self._thread is None and self.timeout_s > 0:
            self._start_thread()
        return prev

    def end(self, token) -> None:
        self.current = token

    def begin_native(self, name: str, cells, places):
        """Bracket a native while loop (see the module doc): ``cells`` is the int64 array the
        loop writes (compiler/native/collectives.py: iteration, wait cell), ``places`` the
        ``{step: (what, where)}`` of each step the wait cell may name.  Returns a token
        for :meth:`end_native`."""
        self.loops.append(_NativeLoopEntry(name, cells))
        prev = self.current
        self.current = _NativeWaits(cells, places)
        if self._thread is None and self.timeout_s > 0:
            self._start_thread()
        return prev

    def end_native(self, token) -> None:
        self.current = token
        self.exit_loop()

    def waiting_now(self):
        """(what, where, start) of the wait this process is in now, or None: for readers
        outside the watchdog (runtime/progress.py), whom a native loop's bracket would
        otherwise reach unresolved."""
        return self._resolved(self.current)

    def _resolved(self, cur):
        """A native loop's bracket as the (what, where, start) it waits in now, or None
        while it computes; any other `current` as is."""
        return cur.waiting() if type(cur) is _NativeWaits else cur

    # -- daemon --------------------------------------------------------------------------------
    def _start_thread(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="xladist-deadline",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        published = None  # the `current` tuple last published to the monitor as a long wait
        with self._cond:
            while True:
                timeout = self.timeout_s
                mon = self.monitor
                cur = self._resolved(self.current)
                now = time.monotonic()
                if published is not None and cur is not published:
                    published = None
                    self._publish(mon, None, 0.0)  # that wait is over
                if timeout <= 0:
                    self._cond.wait()
                    continue
                # With a monitor, wake every REFRESH_S so long waits are published promptly.
                sleep = min(timeout / 2, REFRESH_S) if mon is not None else timeout / 2
                if cur is not None:
                    elapsed = now - cur[2]
                    if elapsed >= timeout:
                        self._fire(cur, elapsed)
                        return
                    # Wake right at this operation's deadline (plus a hair for clock rounding).
                    sleep = timeout - elapsed + 0.01
                    if mon is not None:
                        after = min(PUBLISH_AFTER_S, timeout / 2)
                        if elapsed >= after:
                            self._publish(mon, cur, elapsed)
                            published = cur
                            sleep = min(sleep, REFRESH_S)
                        else:
                            sleep = min(sleep, after - elapsed + 0.01)
                self._cond.wait(sleep)

    def position(self, cur=None, elapsed: float | None = None) -> dict:
        """What the main thread is doing: a dict for the monitor (see xladist.runtime.watchdog)."""
        if cur is None:
            return {"state": "computing", "loops": [list(e) for e in list(self.loops)]}
        what, where, start = cur
        if elapsed is None:
            elapsed = time.monotonic() - start
        return {"state": "waiting", "what": what, "where": where, "elapsed": elapsed,
                "loops": [list(e) for e in list(self.loops)]}

    def _publish(self, mon, cur, elapsed: float) -> None:
        if mon is None:
            return
        try:
            mon.publish(self.position(cur, elapsed))
        except Exception:  # noqa: BLE001, S110 -- a report aid must never kill the deadline
            pass

    def _fire(self, cur, elapsed: float) -> None:
        # Every rank whose deadline passes saves its state now: only one of them wins the
        # report below, and the others are taken down by its abort without another word.
        run_abort_hooks()
        mon = self.monitor
        if mon is not None:
            try:
                message = mon.fire(self.position(cur, elapsed), self.timeout_s)
            except Exception as e:  # noqa: BLE001 -- fall back to this rank's own message
                message = f"{self._message(cur, elapsed)}\n(job report failed: {e})"
            abort_job(message, with_rank=False)
            return
        abort_job(self._message(cur, elapsed))

    def _message(self, cur, elapsed: float) -> str:
        what, where, _ = cur
        desc = what if where is None else f"{what} over {where}"
        ctx = self.loop_context()
        if ctx:
            desc += f" ({ctx})"
        return (f"timed out after {elapsed:.1f} s waiting in {desc} "
                f"(deadline {self.timeout_s:g} s: `--timeout`, `timeout=` or "
                "XLADIST_COLLECTIVE_TIMEOUT sets it)")

    # -- loop context (main thread only) ---------------------------------------------------------
    def enter_loop(self, name: str) -> list:
        """Push a loop; bump ``entry[1]`` at the start of each iteration; then `exit_loop`."""
        entry = [name, 0]
        self.loops.append(entry)
        return entry

    def exit_loop(self) -> None:
        if self.loops:
            self.loops.pop()

    def loop_context(self) -> str:
        """``iteration 5 of while.2, iteration 1 of while.7`` (outermost first), or ''."""
        return ", ".join(f"iteration {k} of {name}" for name, k in list(self.loops))

    # The daemon is woken only by a change: a persistent rank (runtime/cluster_rank.py)
    # configures the same deadline and monitor for each of its many calls.
    def configure(self, timeout_s: float) -> None:
        with self._cond:
            if self._timeout_s != float(timeout_s):
                self.timeout_s = float(timeout_s)
                self._cond.notify_all()

    def set_monitor(self, monitor) -> None:
        """Install (or, with None, remove) the job-wide monitor; see the module docstring."""
        with self._cond:
            if self.monitor is not monitor:
                self.monitor = monitor
                self._cond.notify_all()

    def describe_current(self) -> str | None:
        cur = self._resolved(self.current)
        if cur is None:
            return None
        what, where, start = cur
        desc = what if where is None else f"{what} over {where}"
        ctx = self.loop_context()
        if ctx:
            desc += f" ({ctx})"
        return f"{desc} (for {time.monotonic() - start:.1f} s)"


# The wait cell's layout, shared with compiler/native/collectives.py (CELL_*, WAIT_STEPS).
_CELL_ITERATION, _CELL_WAIT, _WAIT_STEPS = 0, 1, 1 << 16


class _NativeLoopEntry:
    """A ``loops`` entry whose iteration the native loop itself keeps in ``cells`` (one
    store per iteration that the driver makes anyway): read as ``[name, iteration]`` like
    any other entry -- unpacked by the reports, indexed by the progress line
    (runtime/progress.py), which before saw no step for a native loop."""

    __slots__ = ("cells", "name")

    def __init__(self, name: str, cells):
        self.name, self.cells = name, cells

    def __iter__(self):
        return iter((self.name, int(self.cells[_CELL_ITERATION])))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, k):
        return (self.name, int(self.cells[_CELL_ITERATION]))[k]


class _NativeWaits:
    """The `current` of a native loop: resolves to the wait it is in (what, where, start),
    one tuple per call, so the daemon's deadline and publishing work as for any wait."""

    __slots__ = ("cells", "places", "seen")

    def __init__(self, cells, places):
        self.cells, self.places = cells, places
        self.seen = (None, None)  # (wait cell value, its tuple)

    def waiting(self):
        word = int(self.cells[_CELL_WAIT])  # one aligned 8-byte load: never torn
        step = word % _WAIT_STEPS
        if not step:
            return None
        if self.seen[0] != word:
            what, where = self.places[step - 1]
            self.seen = (word, (what, where, time.monotonic()))
        return self.seen[1]


watchdog = Watchdog()


def configure(timeout_s: float) -> None:
    """Set the per-wait deadline in seconds for this process (0 disables)."""
    watchdog.configure(timeout_s)


@contextlib.contextmanager
def waiting(what: str, where: object = None):
    """``with waiting("all-reduce.7 over group [0,1,2,3]"): comm.Allreduce(...)``.

    If the body has not finished after the deadline, the job is aborted with a message naming
    ``what`` (and ``where``, when given).
    """
    token = watchdog.begin(what, where)
    try:
        yield
    finally:
        watchdog.end(token)


class abort_on_exception(contextlib.ContextDecorator):
    """Turn an exception on one rank into a job-wide abort, so no other rank is orphaned.

    Use as ``with abort_on_exception(): ...`` or as a decorator.  Prints ``rank r: <error>``
    once (type and message; set ``traceback=True`` for the full traceback) and calls MPI Abort.
    ``SystemExit(0)`` and ``KeyboardInterrupt`` pass through unchanged.
    """

    def __init__(self, traceback: bool = False, code: int = 1):
        self.traceback = traceback
        self.code = code

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or exc_type is KeyboardInterrupt:
            return False
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            return False
        if self.traceback:
            import traceback as _tb

            sys.stderr.write("".join(_tb.format_exception(exc_type, exc, tb)))
        msg = str(exc)
        abort_job(f"{exc_type.__name__}: {msg}" if msg else exc_type.__name__, self.code)
        return False
