"""Run one HLO text module on XLA:CPU through jax (parsed by XLA's own HLO parser), for the
tools that record XLA's outputs as test data. jax is needed only by these tools."""

from __future__ import annotations

import numpy as np


def xla_runner():
    """(jax version, run(text, args) -> (first output or tuple of outputs, optimized HLO)).

    The module compiles with the options `jax.jit` gives XLA (jax's get_compile_options):
    a bare CompileOptions() carries the proto's defaults, not XLA's -- fast math on
    (max/min that drop a NaN, |1 + nan i| = sqrt 2) and a garbage optimization level --
    so its results are not what a jax user's XLA:CPU computes."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jaxlib._hlo as hlo
    from jax._src import compiler
    from jax._src.lib import xla_client as xc
    client = jax.devices("cpu")[0].client
    options = compiler.get_compile_options(num_replicas=1, num_partitions=1)

    def run(text, args):
        module = hlo.hlo_module_from_text(text)
        mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        exe = client.compile_and_load(mlir, client.devices()[:1], options)
        outs = exe.execute([jax.device_put(a) for a in args])
        first = np.asarray(outs[0]) if len(outs) == 1 else tuple(np.asarray(o) for o in outs)
        return first, exe.hlo_modules()[0].to_string()
    return jax.__version__, run
