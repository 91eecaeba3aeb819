"""Control flow and calls (operation semantics: While, Conditional, Call, Fusion, async
ops, CustomCall).

- while: run `condition` on the state; while it is true, state = body(state);
- conditional: the pred form runs true_computation(operand 1) or
  false_computation(operand 2); the indexed form runs branch_computations[i](operand
  i + 1) where an index outside [0, N) selects the last branch, as XLA does;
- call and fusion evaluate the called computation (a fusion's kind and backend_config
  are scheduling hints only);
- async-start runs the wrapped computation at once (docs/reference/hlo-text-format.md section 8) and
  holds ((operands...), result, context...); async-update passes the value through;
  async-done yields the result; an async group of sends and recvs (hlo/async_groups.py) is
  issued by the start, and the done waits for every transfer and puts the received data in
  place;
- copy-start/copy-done: (dest, src, u32 context), then dest;
- custom-call dispatches on custom_call_target through semantics/custom_calls.CUSTOM_CALLS.
"""

from __future__ import annotations

import numpy as np

from ..errors import ExecutionError, UnsupportedError, XlaDistError
from ..hlo.async_groups import group_start, transfer_group
from ..hlo.ir import describe
from ..semantics.custom_calls import lookup, target_raised, target_returned
from ..semantics.values import zeros_value
from .registry import register



def _truth(value) -> bool:
    return bool(np.asarray(value).reshape(()))


@register("while")
def while_rule(instr, args, ev):
    cond = instr.attrs["condition"]
    body = instr.attrs["body"]
    state = args[0]
    while _truth(ev.call(cond, [state])):
        state = ev.call(body, [state])
    return state


@register("conditional")
def conditional_rule(instr, args, ev):
    selector = args[0]
    branches = instr.attrs.get("branch_computations")
    if branches:
        index = int(np.asarray(selector).reshape(()))
        if not 0 <= index < len(branches):
            index = len(branches) - 1  # XLA: an out-of-range index runs the last branch
        return ev.call(branches[index], [args[1 + index]])
    true_comp = instr.attrs.get("true_computation")
    false_comp = instr.attrs.get("false_computation")
    if true_comp is None or false_comp is None:
        raise UnsupportedError(f"{describe(instr)}: conditional has neither "
                               f"branch_computations nor true/false computations")
    if _truth(selector):
        return ev.call(true_comp, [args[1]])
    return ev.call(false_comp, [args[2]])


@register("call")
def call_rule(instr, args, ev):
    return ev.call(instr.attrs["to_apply"], args)


@register("fusion")
def fusion_rule(instr, args, ev):
    return ev.call(instr.attrs["calls"], args)


@register("async-start")
def async_start_rule(instr, args, ev):
    result = ev.call(instr.attrs["calls"], args)
    contexts = tuple(zeros_value(s) for s in instr.shape.tuple_shapes[2:])
    return (tuple(args), result) + contexts


@register("async-update")
def async_update_rule(instr, args, ev):
    return args[0]


@register("async-done")
def async_done_rule(instr, args, ev):
    result = args[0][1]
    start = group_start(instr)
    group = transfer_group(start) if start is not None else ()
    if not group:
        return result
    parts = list(result) if group[0][0] is not None else [result]
    for k, op in group:
        k = 0 if k is None else k
        data, context, token = parts[k]
        if op.opcode == "send":
            ev.device.send_done(instr, context.handle)
        else:
            data = ev.device.recv_done(instr, data.handle)
        parts[k] = (data, np.zeros((), np.uint32), token)
    return tuple(parts) if group[0][0] is not None else parts[0]


@register("copy-start")
def copy_start_rule(instr, args, ev):
    x = args[0]
    return (x, x, np.zeros((), instr.shape.tuple_shapes[2].dtype))


@register("copy-done")
def copy_done_rule(instr, args, ev):
    return args[0][0]


@register("custom-call")
def custom_call_rule(instr, args, ev):
    """The user's function, whose failure or wrong value is the user's error (named as the
    cpu backend names it), not an internal interpreter error."""
    from .evaluator import _normalize, value_matches
    fn = lookup(instr)
    target = instr.attrs.get("custom_call_target")
    try:
        value = _normalize(fn(instr, args))
    except XlaDistError:
        raise
    except Exception as e:
        raise ExecutionError(target_raised(target, e)) from e
    why = value_matches(value, instr.shape)
    if why:
        raise ExecutionError(target_returned(target, f"a wrong value ({why})",
                                             instr.shape.to_text()))
    return value
