"""coverage() -> {opcode: "yes" | reason}: the cpu column of `xladist ops`.

Read from the compiler's own tables, so it cannot drift from the code: an
opcode is "yes" when the fusion planner gives it a kind that has an emitter
(elemental rule, kernel root, library thunk, control or device thunk).
"""

from __future__ import annotations

from ..hlo.opcodes import OPCODES


def coverage() -> dict[str, str]:
    from .codegen.elemental import EMIT_RULES
    from .devices import DEVICE_RUNNERS
    from .emit import CONTROL_UNSUPPORTED
    from .fusion import ALIAS, ROOT_KERNELS
    from .library import LIBRARY_THUNKS, UNSUPPORTED

    control = {"while", "conditional", "fusion", "call", "async-start"}
    aliases = ALIAS | {"constant", "copy-done"}
    out = {}
    for op in OPCODES:
        if op in EMIT_RULES or op in ROOT_KERNELS or op in aliases or op in control \
                or op in LIBRARY_THUNKS or op in DEVICE_RUNNERS:
            out[op] = "yes"
        elif op in UNSUPPORTED:
            out[op] = UNSUPPORTED[op]
        elif op in CONTROL_UNSUPPORTED:
            out[op] = CONTROL_UNSUPPORTED[op]
        else:
            out[op] = "no emitter or library thunk in the cpu backend"
    return out
