"""A dynamic entry parameter (`f32[?,4]`, `f32[<=4]`) is refused by every backend (the padder
takes dynamic sizes from set-dimension-size only); a run says so before it reads any input.
Before: the inputs were held against the parameter's dims first, and an unbounded dimension
showed up as `expected dims [-1, 4]`, which no array can have (found feeding hand-written
modules covering the HLO text format's corners through `xladist run`)."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from tests.cli_util import xladist_cli
from xladist.errors import UnsupportedError

UNBOUNDED = """HloModule m

ENTRY main {
  x = f32[?,4] parameter(0)
  ROOT y = f32[?,4] negate(x)
}
"""

REFUSAL = ("instruction x (parameter): dynamic entry parameters are not supported; pass the "
           "padded array and its size and use set-dimension-size")


@pytest.mark.parametrize("n", [1, 2])
def test_cli_refuses_a_dynamic_entry_parameter_before_reading_inputs(tmp_path, n):
    module = tmp_path / "m.hlo"
    module.write_text(UNBOUNDED)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.zeros((n, 3, 4), np.float32))
    r = xladist_cli("run", "-n", n, "--inputs", inputs, module, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"xladist run: error: {REFUSAL}"


def test_api_refuses_a_dynamic_entry_parameter_before_reading_inputs():
    with pytest.raises(UnsupportedError) as e:
        xladist.run(xladist.parse_hlo(UNBOUNDED), [np.zeros((1, 3, 4), np.float32)], n=1)
    assert str(e.value) == REFUSAL
