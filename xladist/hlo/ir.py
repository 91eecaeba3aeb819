"""The HLO IR: modules, computations and instructions.

Plain Python objects with no behaviour beyond navigation; phases (parser,
printer, verifier, interpreter, compiler) keep their own rule tables keyed by
`Instruction.opcode` (see opcodes.py).

Conventions every phase relies on:
- `Instruction.attrs` holds the opcode-specific attributes by name with the typed
  values documented in opcodes.py; keys appear only when the text (or builder)
  set them. Attributes unknown to our schema are kept as `attrs.RawAttr` values
  and reprinted verbatim.
- `parameter` stores its number in `parameter_number`, `constant` its value in
  `literal` (an attrs.Literal).
- Called computations are attribute values of kind computation/computations
  (to_apply, body, condition, calls, branch_computations, ...);
  `called_computations()` lists them in schema order.
- Async wrappers: a generic `async-start`/`-update`/`-done` has `attrs["calls"]`
  pointing at the wrapped computation. When the text used the sugared form
  (`all-to-all-start(...)`), the parser synthesizes that computation and marks it
  `is_async_wrapper=True`; the printer then prints the sugar and omits it.
"""

from __future__ import annotations

from typing import Any, Iterator

from .opcodes import OPCODES
from .shape import Shape


def describe(instr) -> str:
    """`name = shape opcode(...)` plus the computation: how runtime errors (both backends,
    the device contexts) name an instruction."""
    comp = instr.parent.name if instr.parent is not None else "?"
    ops = ", ".join(o.name for o in instr.operands)
    return f"{instr.name} = {instr.shape} {instr.opcode}({ops}) in computation {comp}"


class Instruction:
    __slots__ = ("name", "opcode", "shape", "operands", "attrs", "parameter_number",
                 "literal", "control_predecessors", "metadata", "frontend_attributes",
                 "backend_config", "sharding", "statistics", "result_accuracy", "origin",
                 "parent", "line", "__weakref__")

    def __init__(self, name: str, opcode: str, shape: Shape, operands=(), attrs=None, *,
                 parameter_number: int | None = None, literal=None):
        self.name = name
        self.opcode = opcode
        self.shape = shape
        self.operands: list[Instruction] = list(operands)
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.parameter_number = parameter_number
        self.literal = literal
        self.control_predecessors: list[Instruction] = []
        # Raw texts of the attributes runtimes ignore; printed back verbatim.
        self.metadata: str | None = None          # text inside metadata={...}
        self.frontend_attributes: dict[str, str] = {}  # key -> value text (unquoted)
        self.backend_config: str | None = None    # full value text, e.g. '{...}' or '"x"'
        self.sharding: str | None = None          # full value text, e.g. '{replicated}'
        self.statistics: str | None = None
        self.result_accuracy: str | None = None
        self.origin: str | None = None
        self.parent: Computation | None = None
        self.line: int | None = None              # 1-based source line, for messages

    # ---- navigation -----------------------------------------------------
    @property
    def info(self):
        return OPCODES.get(self.opcode)

    @property
    def family(self) -> str | None:
        info = OPCODES.get(self.opcode)
        return info.family if info else None

    def operand(self, i: int) -> "Instruction":
        return self.operands[i]

    def called_computations(self) -> list["Computation"]:
        out: list[Computation] = []
        info = OPCODES.get(self.opcode)
        names = [a.name for a in info.attrs if a.kind in ("computation", "computations")] \
            if info else []
        for key in names or list(self.attrs):
            v = self.attrs.get(key)
            if isinstance(v, Computation):
                out.append(v)
            elif isinstance(v, (list, tuple)) and v and all(isinstance(c, Computation) for c in v):
                out.extend(v)
        return out

    @property
    def is_root(self) -> bool:
        return self.parent is not None and self.parent.root is self

    def get(self, key: str, default=None):
        return self.attrs.get(key, default)

    def to_text(self, **kwargs) -> str:
        """This instruction as one line of HLO text (see printer.print_instruction)."""
        from .printer import print_instruction
        return print_instruction(self, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.opcode} {self.name}: {self.shape}>"


class Computation:
    def __init__(self, name: str, instructions=(), root: Instruction | None = None, *,
                 is_entry: bool = False):
        self.name = name
        self.instructions: list[Instruction] = []
        self.root: Instruction | None = None
        self.is_entry = is_entry
        self.is_async_wrapper = False       # synthesized for sugared async ops; not printed
        self.execution_thread: str | None = None
        self.module: Module | None = None
        self.line: int | None = None
        for instr in instructions:
            self.add(instr)
        if root is not None:
            self.root = root

    def add(self, instr: Instruction) -> Instruction:
        instr.parent = self
        self.instructions.append(instr)
        return instr

    @property
    def parameters(self) -> list[Instruction]:
        """Parameters in parameter-number order."""
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: i.parameter_number)

    @property
    def num_parameters(self) -> int:
        return sum(1 for i in self.instructions if i.opcode == "parameter")

    def parameter(self, n: int) -> Instruction:
        for i in self.instructions:
            if i.opcode == "parameter" and i.parameter_number == n:
                return i
        raise IndexError(f"computation {self.name} has no parameter {n}")

    def instruction(self, name: str) -> Instruction:
        for i in self.instructions:
            if i.name == name:
                return i
        raise KeyError(f"computation {self.name} has no instruction {name!r}")

    def users(self) -> dict[Instruction, list[Instruction]]:
        """Each instruction's users in this computation, once each, in instruction order."""
        out: dict[Instruction, list[Instruction]] = {i: [] for i in self.instructions}
        for i in self.instructions:
            for op in i.operands:
                users = out.get(op)
                # i is the last user appended if it was appended at all (add(x, x)): not a
                # scan of the list, which made a value with n users cost n^2/2 comparisons
                # (10,000 users: 8 s).
                if users is not None and (not users or users[-1] is not i):
                    users.append(i)
        return out

    def called_computations(self) -> list["Computation"]:
        """Every computation an instruction of this one calls, once each, in first-call
        order (a dict, not a list scan: an entry calling 5,000 computations made the
        verifier quadratic)."""
        seen: dict[int, Computation] = {}
        for i in self.instructions:
            for c in i.called_computations():
                seen.setdefault(id(c), c)
        return list(seen.values())

    def program_shape(self) -> tuple[list[Shape], Shape]:
        return [p.shape for p in self.parameters], self.root.shape

    def __repr__(self) -> str:
        return f"<computation {self.name}: {len(self.instructions)} instructions>"


class Module:
    """An HLO module. `computations` is in text order (callees before callers)."""

    def __init__(self, name: str):
        self.name = name
        self.computations: list[Computation] = []
        self.entry: Computation | None = None
        # Header attributes, typed where the runtime needs them.
        self.is_scheduled = False
        self.replica_count = 1
        self.num_partitions = 1
        # Which of the two the header wrote (even as 1): a run fills only the others
        # (collective_groups.run_device_counts).
        self.declared_counts: frozenset[str] = frozenset()
        # Which of those a run set (--replica-count / --num-partitions, config.py), so that a
        # count error says which count came from the module and which from the run.
        self.counts_from_run: frozenset[str] = frozenset()
        self.entry_computation_layout: tuple[list[Shape], Shape] | None = None
        # Other header attributes in text order: name -> value text (kept verbatim),
        # e.g. input_output_alias, buffer_donor, allow_spmd_sharding_propagation_to_output.
        self.header_attrs: dict[str, str] = {}
        # `frontend_attributes={k="v",...}` of the header, as an instruction's.
        # input_output_alias entries (output index, parameter, parameter index, kind) and
        # buffer_donor entries (parameter, parameter index), as the header lists them (the
        # text is kept in header_attrs for printing); checked by the verifier.
        self.input_output_alias: list[tuple[tuple[int, ...], int, tuple[int, ...], str]] = []
        self.buffer_donors: list[tuple[int, tuple[int, ...]]] = []
        self.frontend_attributes: dict[str, str] = {}
        self.stack_frames: str | None = None  # raw text of the FileNames..StackFrames sections

    def add_computation(self, comp: Computation, *, entry: bool = False) -> Computation:
        comp.module = self
        self.computations.append(comp)
        if entry:
            comp.is_entry = True
            self.entry = comp
        return comp

    def computation(self, name: str) -> Computation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(f"module {self.name} has no computation {name!r}")

    @property
    def num_devices(self) -> int:
        return self.replica_count * self.num_partitions

    def all_instructions(self) -> Iterator[Instruction]:
        for c in self.computations:
            yield from c.instructions

    def to_text(self, **kwargs) -> str:
        """XLA's canonical text for this module (see printer.print_module)."""
        from .printer import print_module
        return print_module(self, **kwargs)

    def __repr__(self) -> str:
        return f"<HloModule {self.name}: {len(self.computations)} computations>"

    __str__ = to_text  # print(module) shows its HLO text, as XLA's ToString; repr stays short


def expect_module(value, call: str) -> "Module":
    """`value` if it is a parsed Module; else InputError saying what `call` takes (the
    Python API's functions that take only a parsed module: compile, verify)."""
    if not isinstance(value, Module):
        from ..errors import InputError
        raise InputError(f"{call} takes a parsed module (xladist.load_hlo(path) or "
                         f"xladist.parse_hlo(text)), got {type(value).__name__}")
    return value
