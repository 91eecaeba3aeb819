"""A signal that ends a launching process leaves nothing of its job behind, whenever it
arrives: mpiexec, its ranks and the compile helpers (xladist/compiler/compile_pool.py) go
with it. Processes are found by a marker in their environment, which every one of them
inherits; each test polls for them to go, with a deadline, instead of sleeping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cli_util import gone
from tests.paths import ROOT


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _env(marker: str, **extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), XLADIST_PROGRESS="off",
                XLADIST_TEST_MARKER=marker, **extra)


# The launcher gets SIGTERM at the worst moment: mpiexec exists but subprocess.Popen has not
# returned it yet (the test of the whole CLI, test_launch.py, hits this window now and then
# when a compile helper is the third marked process it waits for).
_SIGTERM_IN_POPEN = """
import os, signal, subprocess, sys
from xladist.runtime import launcher
real = subprocess.Popen._execute_child
def late(self, *args, **kwargs):
    real(self, *args, **kwargs)
    if os.path.basename(self.args[0]).startswith("mpiexec"):
        os.kill(os.getpid(), signal.SIGTERM)
subprocess.Popen._execute_child = late
launcher.launch(2, ["-c", "import time; time.sleep(120)"], capture=True)
"""


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sigterm_while_mpiexec_starts_leaves_no_rank(tmp_path):
    marker = f"sigterm-popen-{tmp_path.name}-{os.getpid()}"
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_IN_POPEN], cwd=ROOT,
                          env=_env(marker), capture_output=True, text=True, timeout=60)
    left = gone(marker, 20)
    _kill(left)
    assert left == [], f"still running after the launcher ended: {left}"
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr


@pytest.mark.timeout(60)
def test_a_rank_whose_launcher_is_gone_gives_up_at_once():
    # A launcher killed (SIGKILL) while its ranks start: their connection is refused. The
    # service listened before any rank learnt its address, so a refusal means it is gone;
    # before, a rank retried for CONNECT_TIMEOUT_S (60 s) and mpiexec lived on meanwhile.
    import socket

    from xladist.runtime.service.client import Client, ServiceError
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed below: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ServiceError, match="cannot reach the coordination service"):
        Client(f"127.0.0.1:{port}", "token", 0, 2).start()
    assert time.monotonic() - t0 < 10
