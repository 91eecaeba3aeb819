"""Hand-written multi-device programs that once failed under `xladist run`, run as a user
would (mpiexec through the CLI), each result checked against numpy or each refusal
against its message."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cli_util import xladist_cli

# XLA's in-place collective-permute: input, output, input and output start indices, with
# slice_sizes (XLA's CollectivePermuteInPlaceUpdate test, made small).
IN_PLACE_PERMUTE = """HloModule in_place, replica_count=2
ENTRY e {
  x = f32[4,2] parameter(0)
  o = f32[4,2] parameter(1)
  z = s32[] constant(0)
  two = s32[] constant(2)
  i = (s32[], s32[]) tuple(z, z)
  j = (s32[], s32[]) tuple(two, z)
  ROOT cp = f32[4,2] collective-permute(x, o, i, j), source_target_pairs={{0,1},{1,0}}, slice_sizes={{2,2}}
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("n", [1, 2])
def test_in_place_collective_permute_is_refused_before_any_rank_starts(tmp_path, backend, n):
    """Both backends crashed on every rank with an internal error ("setting an array element
    with a sequence", "the collective-permute rule returned a wrong value") after the module
    had verified; now the verifier names the instruction and the way to write it."""
    module = tmp_path / "m.hlo"
    text = IN_PLACE_PERMUTE if n == 2 else IN_PLACE_PERMUTE.replace(
        "replica_count=2", "replica_count=1").replace("{{0,1},{1,0}}", "{{0,0}}")
    module.write_text(text)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.zeros((n, 4, 2), np.float32), arg1=np.ones((n, 4, 2), np.float32))
    proc = xladist_cli("run", module, "-n", n, "--inputs", inputs, "--backend", backend,
                       "--timeout", 20, "-q", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "internal" not in proc.stderr
    assert "%cp" in proc.stderr and "in-place form" in proc.stderr
    assert "rank" not in proc.stderr  # refused before any rank ran
