"""`xladist --help` lists every command by loading each command's module: none of them
may import numpy or the HLO IR for it (a command imports what it runs when it runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import contextlib, io, sys
from xladist.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["--help"])
    except SystemExit as e:
        assert e.code in (0, None), e.code
assert "xladist" in out.getvalue() and " run " in out.getvalue(), out.getvalue()
print(",".join(m for m in ("numpy", "xladist.hlo.ir", "xladist.hlo.dynamic_padder",
                           "xladist.hlo.shape_inference") if m in sys.modules))
"""


def test_help_lists_every_command_without_importing_numpy_or_the_ir():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"`xladist --help` imported {proc.stdout.strip()}"
