"""The numpy reference interpreter: xladist's executable specification of every opcode.

Importing the package registers every rule family in `registry.EVAL_RULES`:
element-wise (elementwise, compare), conversion, shaping, control (custom calls from
semantics/custom_calls.py), device_ops, dot, convolution, reduce, sort, gather_scatter,
fft_linalg, rng and batchnorm.

Public names: Evaluator, check_supported, register_custom_call, EVAL_RULES, UNSUPPORTED.
The device interface (DeviceContext, SingleDeviceContext), TOKEN and the rules the cpu
backend and the collectives share with the interpreter live in xladist/semantics/.
"""

from __future__ import annotations

# Imported for their registrations in EVAL_RULES.
from . import (  # noqa: F401
    batchnorm,
    compare,
    control,
    conversion,
    convolution,
    device_ops,
    dot,
    elementwise,
    fft_linalg,
    gather_scatter,
    reduce,
    rng,
    shaping,
    sort,
)
from ..semantics.custom_calls import register_custom_call
from .evaluator import Evaluator, check_supported
from .registry import EVAL_RULES, UNSUPPORTED, register

# Opcodes no family implements, with the reason `xladist ops` shows. Applied only where
# no rule was registered, so a family that later implements one simply wins.
_NOT_IMPLEMENTED = {
    # hlo.dynamic_padder rewrites these away in xladist.compile(), before any backend runs
    "dynamic-reshape": "run through hlo.dynamic_padder (xladist.compile applies it)",
    "set-dimension-size": "run through hlo.dynamic_padder (xladist.compile applies it)",
    "shuffle": "shuffle is not implemented by the interpreter",
    "scan": "scan is not implemented by the interpreter (XLA lowers it to while loops)",
    "collective-reduce": "collective-reduce has no published semantics in XLA's operation "
                         "semantics",
    "rng-get-and-update-state": "only appears before XLA expands rng; rng-bit-generator "
                                "modules run",
}
for _op, _reason in _NOT_IMPLEMENTED.items():
    if _op not in EVAL_RULES:
        UNSUPPORTED.setdefault(_op, _reason)

__all__ = [
    "EVAL_RULES",
    "UNSUPPORTED",
    "Evaluator",
    "check_supported",
    "register",
    "register_custom_call",
]
