"""runtime/fast_exit.exit_now: a finished process ends without the interpreter's teardown,
but only after what a normal exit does that matters -- non-daemon threads, atexit handlers,
buffered output -- and with the code it was given."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import ROOT

_PROCESS = """
import atexit, sys, threading, time
from pathlib import Path
out = Path(sys.argv[1])
def late():
    time.sleep(0.3)
    (out / "thread").write_text("done")
threading.Thread(target=late).start()
atexit.register(lambda: (out / "atexit").write_text("ran"))
sys.stdout.write("buffered, no newline")
from xladist.runtime.fast_exit import exit_now
exit_now(3)
"""


def test_exit_now_finishes_threads_atexit_and_output_first(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _PROCESS, str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered, no newline"
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"
