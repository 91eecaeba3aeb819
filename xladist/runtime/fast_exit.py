"""Ending a finished process without Python's interpreter teardown.

After a warm `xladist run` the teardown of the launching process and of every rank (freeing
each module and object, the parsed module's thousands of instructions, the compiler's
modules, LLVM's and MPI's libraries unloading) was a fifth of a second or more of the
command's wall time (docs/benchmarks.md, "Warm run"), and nothing needs it. `exit_now` first
does what a normal exit does that matters, in its order -- non-daemon threads finish (a feed's
writer), the atexit handlers run (a rank's goodbye to the coordination service), MPI_Finalize
when MPI is up, the standard streams are flushed -- and then ends the process.

Only for a process whose work ended normally: its files are written and closed by then
(xladist/files.py). A failing rank aborts the job instead (rank.report_and_abort).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading


def exit_now(code: int, *, finalize_mpi: bool = False):
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    if finalize_mpi and "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI
        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # as Python's own exit says that its output was lost
    os._exit(code)
