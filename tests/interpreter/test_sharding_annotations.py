"""The custom-calls jax writes into its text before SPMD partitioning (jax 0.10, Shardy):
annotations that are the identity on one device, on both backends. A jit with
out_shardings writes `xla.sdy.FuncResultSharding` on each result and shard_alike writes
`xla.sdy.ShardingGroup`; both were refused as unregistered targets (found by a sweep of JAX
programs). A shape-changing one (shard_map's `xla.sdy.GlobalToLocalShape` on 2 devices)
means the module is not partitioned, and the error says what to run instead. The modules
are jax's own text (jax.jit(f).lower(x).as_text(dialect="hlo"))."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.errors import XlaDistError

BACKENDS = ["interpreter", "cpu"]

# jax.jit(lambda x: x * 2, in_shardings=NamedSharding(mesh2, P("d")),
#         out_shardings=NamedSharding(mesh2, P()))
OUT_SHARDINGS = r"""HloModule jit__lambda, entry_computation_layout={(f32[8]{0})->f32[8]{0}}, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["d"=2]>}}
ENTRY main.1 {
  x.1 = f32[8]{0} parameter(0), sharding={devices=[2]<=[2]}, frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{\"d\"}]>"}
  constant.1 = f32[] constant(2)
  broadcast.1 = f32[8]{0} broadcast(constant.1), dimensions={}
  mul.2 = f32[8]{0} multiply(x.1, broadcast.1)
  mul.3 = f32[8]{0} custom-call(mul.2), custom_call_target="xla.sdy.FuncResultSharding", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.sharding="#sdy.sharding_per_value<[<@mesh, [{}]>]>"}
  tuple.1 = (f32[8]{0}) tuple(mul.3)
  ROOT get-tuple-element.1 = f32[8]{0} get-tuple-element(tuple.1), index=0, sharding={replicated}
}
"""

# jax.jit(lambda x: shard_alike(x * 2, x + 1))
SHARD_ALIKE = r"""HloModule jit__lambda, entry_computation_layout={(f32[8]{0})->(f32[8]{0}, f32[8]{0})}
ENTRY main.1 {
  x.1 = f32[8]{0} parameter(0)
  constant.3 = f32[] constant(2)
  broadcast.3 = f32[8]{0} broadcast(constant.3), dimensions={}
  mul.1 = f32[8]{0} multiply(x.1, broadcast.3)
  shard_alike.2 = () custom-call(mul.1), custom_call_target="xla.sdy.ShardingGroup", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.sharding_group_id="0 : i64"}
  constant.2 = f32[] constant(1)
  broadcast.2 = f32[8]{0} broadcast(constant.2), dimensions={}
  add.1 = f32[8]{0} add(x.1, broadcast.2)
  shard_alike.3 = () custom-call(add.1), custom_call_target="xla.sdy.ShardingGroup", custom_call_has_side_effect=true, frontend_attributes={xla.sdy.sharding_group_id="0 : i64"}
  ROOT tuple.1 = (f32[8]{0}, f32[8]{0}) tuple(mul.1, add.1)
}
"""

# shard_map's boundary on a 2-device mesh, before partitioning (shapes change).
GLOBAL_TO_LOCAL = r"""HloModule jit_f
ENTRY main.3 {
  x.1 = f32[8]{0} parameter(0)
  shard_map.5 = f32[4]{0} custom-call(x.1), custom_call_target="xla.sdy.GlobalToLocalShape", custom_call_has_side_effect=true
  ROOT shard_map.7 = f32[8]{0} custom-call(shard_map.5), custom_call_target="xla.sdy.LocalToGlobalShape", custom_call_has_side_effect=true
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_func_result_sharding_is_the_identity(backend):
    x = np.arange(8, dtype=np.float32)
    (got,) = xladist.compile(xladist.parse_hlo(OUT_SHARDINGS), backend=backend)(x)
    np.testing.assert_array_equal(got, x * 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sharding_group_has_no_effect(backend):
    x = np.arange(8, dtype=np.float32)
    got = xladist.compile(xladist.parse_hlo(SHARD_ALIKE), backend=backend)(x)
    np.testing.assert_array_equal(got[0], x * 2)
    np.testing.assert_array_equal(got[1], x + 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shape_changing_boundary_says_the_module_is_not_partitioned(backend):
    with pytest.raises(XlaDistError) as e:
        xladist.compile(xladist.parse_hlo(GLOBAL_TO_LOCAL), backend=backend)(
            np.arange(8, dtype=np.float32))
    msg = str(e.value)
    assert "shard_map.5" in msg and "xla.sdy.GlobalToLocalShape" in msg
    assert "not partitioned" in msg and ".compile().as_text()" in msg


# jax.shard_map(lambda a: (a * 2, a + 1), in_specs=P(), out_specs=(P(), P())) on a 4-device
# mesh, before partitioning: a replicated boundary keeps the shapes, and the boundary of
# several results is one call, operand i as element i of its tuple.
SEVERAL_RESULTS = r"""HloModule jit_f
body.2 {
  shard_map.2 = f32[8]{0} parameter(0)
  constant.1 = f32[] constant(2)
  broadcast.1 = f32[8]{0} broadcast(constant.1), dimensions={}
  mul.1 = f32[8]{0} multiply(shard_map.2, broadcast.1)
  constant.2 = f32[] constant(1)
  broadcast.2 = f32[8]{0} broadcast(constant.2), dimensions={}
  add.1 = f32[8]{0} add(shard_map.2, broadcast.2)
  ROOT tuple.1 = (f32[8]{0}, f32[8]{0}) tuple(mul.1, add.1)
}

ENTRY main.3 {
  a.1 = f32[8]{0} parameter(0)
  shard_map.9 = f32[8]{0} custom-call(a.1), custom_call_target="xla.sdy.GlobalToLocalShape", custom_call_has_side_effect=true
  shard_map.10 = (f32[8]{0}, f32[8]{0}) call(shard_map.9), to_apply=body.2
  shard_map.11 = f32[8]{0} get-tuple-element(shard_map.10), index=0
  shard_map.12 = f32[8]{0} get-tuple-element(shard_map.10), index=1
  shard_map.13 = (f32[8]{0}, f32[8]{0}) custom-call(shard_map.11, shard_map.12), custom_call_target="xla.sdy.LocalToGlobalShape", custom_call_has_side_effect=true
  shard_map.14 = f32[8]{0} get-tuple-element(shard_map.13), index=0
  shard_map.15 = f32[8]{0} get-tuple-element(shard_map.13), index=1
  ROOT tuple.3 = (f32[8]{0}, f32[8]{0}) tuple(shard_map.14, shard_map.15)
}
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_boundary_of_several_results_passes_each_on(backend):
    """It was refused as `changes the shape f32[8] -> (f32[8], f32[8])` (found running jax's
    text of a replicated shard_map with two results): each operand is its result."""
    from xladist.semantics.custom_calls import check_registered
    module = xladist.parse_hlo(SEVERAL_RESULTS)
    check_registered(module)  # nothing to refuse before a run either
    x = np.arange(8, dtype=np.float32)
    got = xladist.compile(module, backend=backend)(x)
    np.testing.assert_array_equal(got[0], x * 2)
    np.testing.assert_array_equal(got[1], x + 1)
