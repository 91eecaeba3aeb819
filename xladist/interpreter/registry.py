"""The interpreter's rule table: one evaluation function per opcode.

Values flowing through the interpreter:
- an array value is a numpy array holding the *logical* values; its memory order
  follows the instruction's layout where it matters (see semantics/layout.py), so a
  `bitcast` reinterprets the physical buffer exactly as XLA does;
- a tuple value is a Python tuple of values;
- a token is the `TOKEN` sentinel (xladist.semantics.values).

An evaluation function has the signature

    fn(instr: Instruction, args: list[Value], ev: Evaluator) -> Value

where `ev.call(computation, args)` evaluates a called computation and
`ev.device` is the DeviceContext for collectives, feeds, channels and ids.
Families register together (all binary element-wise ops are one rule over a table
of numpy functions). `UNSUPPORTED` maps an opcode to the reason it has no rule.
"""

from __future__ import annotations

from typing import Callable


EVAL_RULES: dict[str, Callable] = {}
UNSUPPORTED: dict[str, str] = {}


def register(*opcodes: str):
    """Decorator: register one evaluation function for the given opcodes."""

    def wrap(fn):
        for op in opcodes:
            if op in EVAL_RULES:
                raise RuntimeError(f"interpreter rule for {op!r} registered twice")
            EVAL_RULES[op] = fn
        return fn

    return wrap
