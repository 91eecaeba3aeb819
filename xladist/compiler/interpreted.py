"""Instructions the cpu backend runs with the interpreter's rule: those whose applied
computation (a reduce's or map's to_apply, a sort's comparator, a scatter's or
reduce-window's combiner, select-and-scatter's select and scatter) calls a custom-call
target. A target is a Python function (xladist.semantics.custom_calls): compiled code
cannot call it element by element, so such an instruction is not a kernel but a library
thunk that evaluates it as the interpreter does -- the same rule, the same calls of the
target on the same scalars in the same order, the same checks of what it returns and the
same errors, naming the custom-call. A collective whose reducer calls a target gets the
interpreter's reducer instead of a compiled one (`python_reducer`): the device context
reduces with it in Python, as it does for the interpreter backend.
"""

from __future__ import annotations

from ..hlo.ir import Computation, Instruction
from ..semantics.custom_calls import lookup

__all__ = ["calls_python", "evaluate", "python_reducer"]


def _custom_calls(comps, seen: set[int]):
    for comp in comps:
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for i in comp.instructions:
            if i.opcode == "custom-call":
                yield i
            yield from _custom_calls(i.called_computations(), seen)


def _targets(comps) -> list[Instruction]:
    """The custom-calls in `comps` and the computations they call, each looked up: a
    target nobody registered is refused now, at compile time, by name."""
    calls = list(_custom_calls(comps, set()))
    for c in calls:
        lookup(c)
    return calls


def calls_python(instr: Instruction) -> bool:
    """Whether `instr` applies a computation that calls a custom-call target (fusion.py:
    then it is a library thunk running `evaluate`, not a kernel)."""
    comps = instr.called_computations()
    return bool(comps) and bool(_targets(comps))


def python_reducer(comp: Computation | None):
    """A collective's reducer that calls a custom-call target: the interpreter's Reducer
    (a binary function on arrays, applied element by element as the interpreter applies
    it), which the device context runs in Python as it does for the interpreter backend;
    None when `comp` calls no target (then the reducer is compiled: emit.py)."""
    if comp is None or not _targets([comp]):
        return None
    from ..interpreter.device_ops import Reducer
    from ..interpreter.evaluator import Evaluator
    return Reducer(comp, Evaluator(None))


def evaluate(instr, args, outs) -> None:
    """LibraryThunk's fn: `instr` evaluated by the interpreter's rule on the operands'
    logical arrays, its result leaves written into `outs`."""
    from ..interpreter.evaluator import Evaluator
    value = Evaluator(None).evaluate(instr, args)
    leaves = list(value) if isinstance(value, tuple) else [value]
    for out, leaf in zip(outs, leaves):
        if out is not None:  # (a token leaf has no buffer)
            out[...] = leaf
