"""The custom-call registry both backends run targets from: `register_custom_call(target,
fn)` (the interpreter's control.py rule and the cpu backend's CustomCallThunk read
CUSTOM_CALLS; `xladist.interpreter.register_custom_call` is the same function).

`fn(instr, args) -> value` receives the custom-call instruction (its attributes,
backend_config and result shape) and the operand values, and returns a value of exactly
instr.shape. A target nobody registered is refused before a module starts, naming the
target and the instruction: `lookup` (the backends, as they compile or prepare a module)
and `check_registered` (`xladist run`, `xladist.run`, `xladist.Cluster` before they start
any rank; `xladist check` warns with it)
say it in the same words.

The registry is per process. Ranks that xladist.run / xladist.Cluster start are fresh
processes: the launcher forwards every target the module uses that it registered beyond
the built-ins, as a reference to an importable function (xladist/runtime/forwarded_calls.py),
and each rank imports and registers it before it loads the module; `FORWARDED` is what a
served rank received (None in any other process), which its error for a target still
unknown names.

Registered here:
- `TopK` (XLA's CPU runtime, runtime_topk.cc): operand [batch, n] or [n]; result
  (values [.., k], s32 indices [.., k]) with k from the result shape; the k largest in
  descending order under the total order -NaN < -inf < ... < -0 < +0 < ... < NaN,
  ties broken by the smaller index;
- `Sharding`, `SPMDFullToShardShape`, `SPMDShardToFullShape` and Shardy's
  `xla.sdy.FuncResultSharding`, `xla.sdy.PropagationBarrier`, `xla.sdy.GlobalToLocalShape`,
  `xla.sdy.LocalToGlobalShape` (what jax 0.10's text before partitioning holds: a jit
  with out_shardings writes FuncResultSharding on each result) when shapes are unchanged:
  annotations, the identity on one device (shard_map's boundary of several arrays is one
  call: operand i is result i); `xla.sdy.ShardingGroup` (shard_alike): no result and no
  effect. A shape-changing one means the module is not partitioned: `check_registered`
  refuses it before any rank starts (`unpartitioned`), and `check_partitioned` before
  any verifier;
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
# A served rank's forwarded targets (target -> "module:qualname"); None outside such a rank.
FORWARDED: dict[str, str] | None = None


def register_custom_call(target: str, fn: Callable, *, replace: bool = False) -> Callable:
    """Make custom-call `target` executable by both backends. The same function again is
    no change (a module imported twice, or by a rank that was also forwarded it)."""
    if target in CUSTOM_CALLS and CUSTOM_CALLS[target] is not fn and not replace:
        raise RuntimeError(f"custom-call target {target!r} registered twice "
                           f"(pass replace=True to override)")
    CUSTOM_CALLS[target] = fn
    return fn


def why_unregistered(instr) -> str:
    """Why custom-call `instr` cannot run: its target is not registered (and what is)."""
    target = instr.attrs.get("custom_call_target")
    known = _known_targets()
    how = "xladist.interpreter.register_custom_call"  # the name the docs give it
    if FORWARDED is None:
        return (f"custom-call target {target!r} is not registered (known: {known}); register "
                f"one with {how}: in the process that calls xladist.run or xladist.Cluster "
                f"(it is forwarded to the ranks they start), or, under mpiexec, in the script "
                f"every rank runs")
    sent = ", ".join(f"{t!r} as {ref}" for t, ref in sorted(FORWARDED.items())) or "none"
    return (f"custom-call target {target!r} is not registered on this rank (known: {known}). "
            f"A rank started by xladist.run, xladist.Cluster or `xladist run` has the "
            f"built-in targets, those its backend registers, and those the launching "
            f"process had registered when it sent the module, forwarded by reference "
            f"(forwarded: {sent}); register it there with {how} before the call")


def _known_targets() -> str:
    """The registered targets for an error message: jax's LAPACK targets (60 of them, all
    built in) as their one pattern while they are registered as built, the others by name."""
    builtin_lapack = [t for t, fn in lapack.TARGETS.items() if CUSTOM_CALLS.get(t) is fn]
    names = sorted(set(CUSTOM_CALLS) - set(builtin_lapack))
    if builtin_lapack:
        names.append("lapack_<s|d|c|z><routine>_ffi (jax's LAPACK targets)")
    return ", ".join(names)


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


def target_raised(target, error: BaseException) -> str:
    """What a user's custom-call target raising `error` is called, by every backend."""
    return f"custom-call target {target!r} raised {type(error).__name__}: {error}"


def target_returned(target, got: str, expected) -> str:
    """What a custom-call target that returned the wrong kind of value (`got`: its dims,
    element type or kind) is called, by every backend."""
    return f"custom-call target {target!r} returned {got} where {expected} was expected"


def check_registered(module, *, only_unpartitioned: bool = False) -> None:
    """UnsupportedError naming every custom-call of `module` whose target this process has
    not registered, and every built-in sharding annotation that changes a shape (the
    module is not partitioned: refused before the verifier, whose look at its collectives'
    partition ids would ask for counts that do not help). The registry is per process:
    call it where the module will run (or in the process that starts fresh ranks, which
    register no more than it has). `only_unpartitioned`: raise (the same message) only
    for a module before partitioning (`check_partitioned`)."""
    problems, before_partitioning = [], False
    for i in module.all_instructions():
        if i.opcode != "custom-call":
            continue
        fn = CUSTOM_CALLS.get(i.attrs.get("custom_call_target"))
        if fn is None:
            problems.append(unregistered(i))
        elif fn is _annotation and (why := unpartitioned(i)):
            problems.append(why)
            before_partitioning = True
    if before_partitioning or not only_unpartitioned:
        _refuse(problems)


def check_partitioned(module) -> None:
    """UnsupportedError, in the words of `xladist run`'s refusal (`check_registered`), when
    `module` was written before SPMD partitioning. Every entry that verifies a module
    calls it before the verifier, whose look at the collectives' partition ids would ask
    for --num-partitions, which does not help; a target merely unregistered passes (what
    runs it refuses it)."""
    check_registered(module, only_unpartitioned=True)


def _refuse(problems: list[str]) -> None:
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


def _passes_on(instr) -> bool | None:
    """How sharding annotation `instr` keeps its operands' shapes: True for its one
    operand as its result, False for operand i as element i of its tuple result
    (shard_map's boundary of several arrays), None if it changes a shape."""
    operands = [o.shape for o in instr.operands]
    if len(operands) == 1 and operands[0].compatible(instr.shape):
        return True
    results = instr.shape.tuple_shapes if instr.shape.is_tuple else ()
    if len(results) == len(operands) and all(o.compatible(r)
                                              for o, r in zip(operands, results)):
        return False
    return None


def unpartitioned(instr) -> str | None:
    """Why sharding annotation `instr` cannot run -- it changes a shape: the module was
    written before SPMD partitioning (a shard_map over several devices) -- or None."""
    if _passes_on(instr) is not None:
        return None
    shapes = ", ".join(str(o.shape) for o in instr.operands)
    comp = instr.parent.name if instr.parent is not None else "?"
    return (f"custom-call {instr.name} ({instr.attrs.get('custom_call_target')}) in "
            f"computation {comp} changes the shape {shapes} -> {instr.shape}: the module is "
            f"not partitioned "
            f"(jax's `lower(...).as_text()` is the program before SPMD partitioning) and only "
            f"partitioned (per-device) modules can run; give XLA's partitioned module "
            f"(`jax.jit(f).lower(...).compile().as_text()`) or use xladist.jax.export / run")


def _annotation(instr, args):
    one = _passes_on(instr)
    if one is None:
        raise UnsupportedError(unpartitioned(instr))
    return args[0] if one else tuple(args)


def _sharding_group(instr, args):
    return ()  # shard_alike's grouping: a hint to the partitioner, no result


register_custom_call("TopK", _topk_call)
for _target in ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                "xla.sdy.FuncResultSharding", "xla.sdy.PropagationBarrier",
                "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape"):
    register_custom_call(_target, _annotation)
register_custom_call("xla.sdy.ShardingGroup", _sharding_group)
for _target, _fn in lapack.TARGETS.items():
    register_custom_call(_target, _fn)
# What every process has once this module is imported: nothing of it needs forwarding.
BUILTIN: dict[str, Callable] = dict(CUSTOM_CALLS)


def added(module) -> dict[str, Callable]:
    """The custom-call targets `module` uses whose function this process registered beyond
    (or instead of) the built-ins: what fresh ranks lack unless they are handed it."""
    used = {i.attrs.get("custom_call_target") for i in module.all_instructions()
            if i.opcode == "custom-call"}
    return {t: CUSTOM_CALLS[t] for t in sorted(used, key=str)
            if t in CUSTOM_CALLS and CUSTOM_CALLS[t] is not BUILTIN.get(t)}
