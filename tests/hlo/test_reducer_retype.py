"""A collective whose to_apply is in another float type than its operands (xladist/hlo/reducers.py).

XLA:CPU widens an f8 all-reduce to f16 and keeps its to_apply in f8 (a JAX pmax/psum of f8 in
shard_map gives `f16[2,4] all-reduce(...), to_apply=%region (f8e4m3fn[], f8e4m3fn[]) ->
f8e4m3fn[]`); XLA reduces in the operand's type. The verifier refused such modules; the
corpus case jax_extra/f8_collectives_mesh4 runs one on both backends.
"""

from __future__ import annotations

import pytest

import xladist
from xladist.errors import VerifierError
from xladist.hlo.reducers import reducer_for

_TEXT = """HloModule m, num_partitions=2

%r (a: f8e4m3fn[], b: f8e4m3fn[]) -> f8e4m3fn[] {
  %a = f8e4m3fn[] parameter(0)
  %b = f8e4m3fn[] parameter(1)
  ROOT %s = f8e4m3fn[] OP
}

ENTRY %main (x: f16[4]) -> f16[4] {
  %x = f16[4] parameter(0)
  ROOT %ar = f16[4] all-reduce(%x), channel_id=1, replica_groups={{0,1}}, use_global_device_ids=true, to_apply=%r
}
"""


def test_a_narrow_float_reducer_applies_in_the_operand_type():
    module = xladist.parse_hlo(_TEXT.replace("OP", "add(%a, %b)"))
    xladist.verify(module)
    ar = module.entry.root
    comp = reducer_for(ar)
    assert comp is not ar.attrs["to_apply"]
    assert [p.shape.element_type.name for p in comp.parameters] == ["f16", "f16"]
    assert comp.root.opcode == "add" and comp.root.shape.element_type.name == "f16"
    assert reducer_for(ar) is comp  # made once


def test_a_reducer_with_a_constant_of_its_type_is_still_refused():
    text = _TEXT.replace("ROOT %s = f8e4m3fn[] OP",
                         "%c = f8e4m3fn[] constant(1)\n  %t = f8e4m3fn[] add(%a, %c)\n"
                         "  ROOT %s = f8e4m3fn[] add(%t, %b)")
    with pytest.raises(VerifierError, match="must be a binary scalar computation"):
        xladist.verify(xladist.parse_hlo(text))
