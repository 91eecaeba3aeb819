"""Ending the launching process of `xladist run` without Python's interpreter teardown.

After a warm `xladist run` the launching process's teardown (freeing each module and object,
the parsed module's thousands of instructions, the compiler's modules, LLVM's library) was
0.1-0.27 s of the command's wall time at load 5-7 (docs/benchmarks.md, "Warm run"), and
nothing needs it. `exit_now` first does what a normal exit does that matters, in its order
-- non-daemon threads finish, the atexit handlers run, the standard streams are flushed --
and then ends the process.

Only for a process whose work ended normally (its files are written and closed by then:
xladist/files.py), and not for an MPI rank: ranks that called MPI_Finalize and then
os._exit were now and then killed by mpiexec (SIGKILL, 2 of 8 runs of 4 ranks on 2 cores,
tests/runtime/test_faults_mpi.py), so a rank ends the normal way.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading


def exit_now(code: int):
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # as Python's own exit says that its output was lost
    os._exit(code)
