"""The custom-call registry both backends run targets from: `register_custom_call(target,
fn)` (the interpreter's control.py rule and the cpu backend's CustomCallThunk read
CUSTOM_CALLS; `xladist.interpreter.register_custom_call` is the same function).

`fn(instr, args) -> value` receives the custom-call instruction (its attributes,
backend_config and result shape) and the operand values, and returns a value of exactly
instr.shape. A target nobody registered is refused by `evaluator.check_supported` before
a module starts, naming the target and the instruction.

Registered here:
- `TopK` (XLA's CPU runtime, runtime_topk.cc): operand [batch, n] or [n]; result
  (values [.., k], s32 indices [.., k]) with k from the result shape; the k largest in
  descending order under the total order -NaN < -inf < ... < -0 < +0 < ... < NaN,
  ties broken by the smaller index;
- `Sharding`, `SPMDFullToShardShape`, `SPMDShardToFullShape` when shapes are unchanged:
  annotations, the identity on one device;
- jax's CPU LAPACK targets `lapack_<s|d|c|z><routine>_ffi` (trsm, potrf, getrf, geqrf,
  geqp3, orgqr/ungqr, ormqr/unmqr, syevd/heevd, sytrd/hetrd, gesdd, gesvd, geev, gees,
  gehrd, gtsv): see lapack.py.
"""

from __future__ import annotations

from collections.abc import Callable


from ..errors import UnsupportedError
from . import lapack
from .order import top_k_total_order

CUSTOM_CALLS: dict[str, Callable] = {}


def register_custom_call(target: str, fn: Callable, *, replace: bool = False) -> Callable:
    """Make custom-call `target` executable by both backends."""
    if target in CUSTOM_CALLS and not replace:
        raise RuntimeError(f"custom-call target {target!r} registered twice "
                           f"(pass replace=True to override)")
    CUSTOM_CALLS[target] = fn
    return fn


def _topk_call(instr, args):
    shape = instr.shape
    if not shape.is_tuple or len(shape.tuple_shapes) != 2:
        raise UnsupportedError(f"TopK custom-call {instr.name} must return (values, indices), "
                               f"got {shape}")
    k = shape.tuple_shapes[0].dims[-1]
    values, indices = top_k_total_order(args[0], k)
    return values, indices.astype(shape.tuple_shapes[1].dtype)


def _annotation(instr, args):
    if len(args) != 1 or args[0].shape != tuple(instr.shape.dims):
        raise UnsupportedError(f"custom-call {instr.name} ({instr.attrs.get('custom_call_target')}"
                               f") changes the shape {instr.operands[0].shape} -> {instr.shape}; "
                               f"only partitioned (per-device) modules can run")
    return args[0]


register_custom_call("TopK", _topk_call)
for _target in ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"):
    register_custom_call(_target, _annotation)
for _target, _fn in lapack.TARGETS.items():
    register_custom_call(_target, _fn)
