"""A module printed by jax's `compiled.as_text()` (or an XLA dump without
--xla_dump_large_constants) has `constant({...})` for every constant of more than 10
elements. Both backends refuse it naming the constant and say where to get text that
keeps the data. The cpu backend said only "has elided data and cannot execute" and the
interpreter "re-dump with --xla_dump_large_constants", which a jax user who called
as_text() has no dump to redo (found by a sweep of JAX programs: a masked softmax's
gradient, whose pred[3,5] mask XLA:CPU kept as a constant)."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.errors import UnsupportedError

# jax.jit(lambda x: jnp.where(mask, x, 0.)).lower(x).compile().as_text(), mask pred[3,5]
TEXT = """HloModule jit_f, entry_computation_layout={(f32[3,5]{1,0})->f32[3,5]{1,0}}

%wrapped_select_computation (param_0: pred[3,5], param_1: f32[3,5], param_2: f32[]) -> f32[3,5] {
  %param_0 = pred[3,5]{1,0} parameter(0)
  %param_1 = f32[3,5]{1,0} parameter(1)
  %param_2 = f32[] parameter(2)
  %broadcast.1 = f32[3,5]{1,0} broadcast(%param_2), dimensions={}
  ROOT %select.1 = f32[3,5]{1,0} select(%param_0, %param_1, %broadcast.1)
}

ENTRY %main.1 (x.1: f32[3,5]) -> f32[3,5] {
  %x.1 = f32[3,5]{1,0} parameter(0)
  %constant.30 = pred[3,5]{1,0} constant({...})
  %constant.2 = f32[] constant(0)
  ROOT %wrapped_select = f32[3,5]{1,0} fusion(%constant.30, %x.1, %constant.2), kind=kLoop, calls=%wrapped_select_computation
}
"""


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_an_elided_constant_is_refused_with_where_to_get_its_data(backend):
    module = xladist.parse_hlo(TEXT)
    with pytest.raises(UnsupportedError) as e:
        xladist.compile(module, backend=backend)(np.ones((3, 5), np.float32))
    msg = str(e.value)
    assert "constant.30" in msg
    assert "--xla_dump_large_constants" in msg and 'as_text(dialect="hlo")' in msg
    assert "compiled.as_text()" in msg and "print_large_constants=True" in msg
