"""What a compile from a warm kernel cache imports: planning and loading the object, not
codegen's emitters, the compile helpers, numpy.random (made at the first rng op) nor the
config or command-line readers; a rank's service client not the server -- what every rank
of a warm `xladist run` pays before its first step (docs/benchmarks.md, "Warm run"). The
result is still checked against numpy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Imported only for a cold compile (compile_pool, units: codegen/kernels/distinct.py; the
# emitters of scatter, sort and in-place kernels: kernels/special.py, kernels/inplace.py),
# an rng op, a non-glibc libc (ctypes.util, with subprocess), --config (tomllib), a command
# line (argparse) or a service hosted here (service/server.py, with secrets and hmac).
NOT_ON_A_CACHE_HIT = ("xladist.compiler.units", "xladist.compiler.compile_pool",
                      "xladist.compiler.codegen.kernels.distinct",
                      "xladist.compiler.codegen.kernels.special",
                      "xladist.compiler.codegen.kernels.inplace", "numpy.random",
                      "ctypes.util", "subprocess", "tomllib", "argparse",
                      "xladist.runtime.service.server", "secrets", "hmac")

CODE = """
import sys
import numpy as np
from xladist.hlo.parser import parse_module
text = '''HloModule warm
ENTRY %main (x: f32[8], y: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %y = f32[8]{0} parameter(1)
  %m = f32[8]{0} multiply(%x, %y)
  ROOT %r = f32[8]{0} add(%m, %x)
}
'''
import xladist.runtime.config, xladist.runtime.mpi_context  # a rank's own imports too
import xladist.runtime.service.client
from xladist.compiler.program import CpuExecutable
exe = CpuExecutable(parse_module(text))
x = np.arange(8, dtype=np.float32)
y = np.linspace(-1, 1, 8, dtype=np.float32)
(got,) = exe(x, y)  # the list of the result's leaves
assert np.allclose(got, x * y + x, rtol=1e-6, atol=0), got  # (numpy.testing imports subprocess)
print(exe.program.cached)
print(",".join(m for m in sys.argv[1:] if m in sys.modules))
"""


@pytest.mark.slow
def test_a_compile_from_a_warm_cache_imports_no_codegen(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XLADIST_CACHE_DIR": str(tmp_path)}

    def run():
        proc = subprocess.run([sys.executable, "-c", CODE, *NOT_ON_A_CACHE_HIT],
                              capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split("\n")[:2]

    cached, _ = run()  # cold: fills the cache
    assert cached == "False"
    cached, imported = run()
    assert cached == "True"
    assert imported == "", f"a cache hit imported {imported}"
