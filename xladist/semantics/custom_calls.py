"""The custom-call registry both backends run targets from: `register_custom_call(target,
fn)` (the interpreter's control.py rule and the cpu backend's CustomCallThunk read
CUSTOM_CALLS; `xladist.interpreter.register_custom_call` is the same function).

`fn(instr, args) -> value` receives the custom-call instruction (its attributes,
backend_config and result shape) and the operand values, and returns a value of exactly
instr.shape. A target nobody registered is refused before a module starts, naming the
target and the instruction: `lookup` (the backends, as they compile or prepare a module)
and `check_registered` (`xladist check`, and `xladist run` before it starts any rank)
say it in the same words.

Registered here:
- `TopK` (XLA's CPU runtime, runtime_topk.cc): operand [batch, n] or [n]; result
  (values [.., k], s32 indices [.., k]) with k from the result shape; the k largest in
  descending order under the total order -NaN < -inf < ... < -0 < +0 < ... < NaN,
  ties broken by the smaller index;
- `Sharding`, `SPMDFullToShardShape`, `SPMDShardToFullShape` when shapes are unchanged:
  annotations, the identity on one device;
- jax's CPU LAPACK targets `lapack_<s|d|c|z><routine>_ffi` (trsm, potrf, getrf, geqrf,
  orgqr/ungqr, syevd/heevd, gesdd, geev): see lapack.py.
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


def why_unregistered(instr) -> str:
    """Why custom-call `instr` cannot run: its target is not registered (and what is)."""
    return (f"custom-call target {instr.attrs.get('custom_call_target')!r} is not registered "
            f"(known: {', '.join(sorted(CUSTOM_CALLS))}); register one with "
            f"xladist.semantics.custom_calls.register_custom_call")


def unregistered(instr, original=None) -> str:
    """`why_unregistered` naming the instruction. `original`: the instruction as the module
    has it, where `instr` is a compiler's copy of it."""
    orig = original if original is not None else instr
    comp = orig.parent.name if orig.parent is not None else "?"
    return (f"instruction `{orig.name}` (custom-call) in computation {comp}: "
            f"{why_unregistered(instr)}")


def lookup(instr, original=None) -> Callable:
    """The function registered for custom-call `instr`'s target; UnsupportedError
    (`unregistered`) when there is none."""
    fn = CUSTOM_CALLS.get(instr.attrs.get("custom_call_target"))
    if fn is None:
        raise UnsupportedError(unregistered(instr, original))
    return fn


def check_registered(module) -> None:
    """UnsupportedError naming every custom-call of `module` whose target this process has
    not registered. The registry is per process: call it where the module will run (or in
    the process that starts fresh ranks, which register no more than it has)."""
    problems = [unregistered(i) for i in module.all_instructions()
                if i.opcode == "custom-call"
                and i.attrs.get("custom_call_target") not in CUSTOM_CALLS]
    if len(problems) == 1:
        raise UnsupportedError(problems[0])
    if problems:
        raise UnsupportedError(f"{len(problems)} custom-calls cannot run:\n  "
                               + "\n  ".join(problems))


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
