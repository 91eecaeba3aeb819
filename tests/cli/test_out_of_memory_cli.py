"""A buffer that cannot be allocated is an error naming it (and the rank), never a traceback
(errors.out_of_memory). 3.6 TiB is refused by numpy at once, so nothing is touched."""

from __future__ import annotations

import re

import numpy as np
import pytest

import xladist
from tests.cli_util import xladist_cli
from xladist.errors import ExecutionError

HUGE = """HloModule m{counts}
ENTRY e {{
  p = f32[] parameter(0)
  b = f32[100000,100000,100] broadcast(p), dimensions={{}}
  ROOT n = f32[100000,100000,100] {root}
}}
"""
ALLOC = r"Unable to allocate 3\.64 TiB"


# Before: the cpu backend's result buffer and the interpreter's result raised numpy's
# _ArrayMemoryError out of `xladist run -n 1` with a traceback; on ranks, "rank 1: internal
# error: MemoryError" followed by the traceback's last lines.
@pytest.mark.parametrize("backend, n, where", [
    ("cpu", 1, r"rank 0 \(replica 0, partition 0\): out of memory for the result n "
               r"\(f32\[100000,100000,100\]\): "),
    ("interpreter", 1, r"rank 0 \(replica 0, partition 0\) \| n = f32\[100000,100000,100\] "
                       r"negate\(b\) in computation e: out of memory: "),
    ("cpu", 2, r"rank \d \(replica \d, partition 0\): out of memory for the result n "
               r"\(f32\[100000,100000,100\]\): "),
])
def test_run_names_the_buffer(tmp_path, backend, n, where):
    f = tmp_path / "huge.hlo"
    f.write_text(HUGE.format(counts=f", replica_count={n}" if n > 1 else "",
                             root="negate(b)"))
    np.savez(tmp_path / "in.npz", arg0=np.ones(n, np.float32))
    proc = xladist_cli("run", f, "-n", n, "--backend", backend, "--inputs",
                       tmp_path / "in.npz", "--timeout", 60)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    # One line per rank that failed: with two ranks both may run out of memory and say so
    # before the job ends, or the first failure ends the other rank first.
    lines = proc.stderr.strip().splitlines()
    assert 1 <= len(lines) <= n, proc.stderr
    for line in lines:
        assert re.match(r"xladist run: error: " + where + ALLOC, line), line


def test_an_interpreter_rule_names_its_instruction():
    # `add` of two broadcast views allocates inside the rule: the instruction is named.
    m = xladist.parse_hlo(HUGE.format(counts="", root="add(b, b)"))
    with pytest.raises(ExecutionError, match=r"^rank 0 \(replica 0, partition 0\) \| n = "
                                                 r".* add\(b, b\).*: out of memory: " + ALLOC):
        xladist.compile(m, backend="interpreter")(np.float32(1))
