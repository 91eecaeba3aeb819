"""HLO programs holding many collectives at once, each a named case with its own check.

A `Program` is written as HLO text: parameters, helper computations (reducers, wrapped async
bodies), entry lines, and a root tuple of every case's result. Each case records where its
leaves are in the flattened outputs (or which outfeed items are its own), how to compare
them, and a numpy closure giving every device's expected leaves straight from the
semantics document (emit.py writes them); the kit's expected values come from the
reference run (reference.py), and tests check the two against each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .groups import default_assignment, logical_ids
from .values import make_input


# ---- reducers as HLO ------------------------------------------------------------------------

def reducer_hlo(red: str, dt: str) -> tuple[str, str]:
    """(computation name, text) of a scalar reducer; "sel" is a select-based max (for pred
    select(a, a, b), an or) that the runtime must apply as a computation, not an MPI builtin."""
    name = f"red_{red}_{dt}"
    a, b = f"%{name}.a", f"%{name}.b"
    lines = [f"%{name} ({name}.a: {dt}[], {name}.b: {dt}[]) -> {dt}[] {{",
             f"  {a} = {dt}[] parameter(0)", f"  {b} = {dt}[] parameter(1)"]
    if red == "sel" and dt == "pred":
        lines.append(f"  ROOT %{name}.r = pred[] select({a}, {a}, {b})")
    elif red == "sel":
        lines.append(f"  %{name}.c = pred[] compare({a}, {b}), direction=GT")
        lines.append(f"  ROOT %{name}.r = {dt}[] select(%{name}.c, {a}, {b})")
    else:
        lines.append(f"  ROOT %{name}.r = {dt}[] {red}({a}, {b})")
    return name, "\n".join(lines) + "\n}\n"


# ---- types ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ty:
    dt: str
    dims: tuple[int, ...]
    layout: tuple[int, ...] | None = None

    def text(self) -> str:
        d = ",".join(map(str, self.dims))
        lay = "" if self.layout is None else "{" + ",".join(map(str, self.layout)) + "}"
        return f"{self.dt}[{d}]{lay}"


def tuple_text(tys) -> str:
    return "(" + ", ".join(t.text() if isinstance(t, Ty) else t for t in tys) + ")"


def group_attr(groups) -> str:
    if isinstance(groups, str):
        return groups  # an iota form, already text
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


# ---- cases --------------------------------------------------------------------------------------

@dataclass
class Check:
    """One case of a program.

    name: the case's full name (what --select matches); row / column / mode: its cell in the
    matrix and its group-mode line. Results: `leaves` outputs from `first_leaf`; outfeed: the
    device's outfeed items [first_item, first_item + items). `expected(device)` gives the
    expected leaves (or items) from the semantics document; `shared_by`: groups whose members
    must hold identical bits; `exact`: "bits" (every bit, NaN payloads included) or "reduce"
    (bits, except that where the expectation is NaN any NaN is accepted)."""

    name: str
    row: str
    column: str
    mode: str
    first_leaf: int = 0
    leaves: int = 0
    first_item: int = 0
    items: int = 0
    expected: Callable[[int], list[np.ndarray]] | None = None
    shared_by: list[list[int]] = field(default_factory=list)
    exact: str = "bits"
    params: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Operand:
    ty: Ty
    key: str
    values: str = "small"
    given: Callable[[int], np.ndarray] | None = None  # device -> array, instead of values


class Program:
    """An HLO module under construction (module doc). `da`: the device assignment table
    [replica][partition] -> device (XLA's default when None); it is passed to the run."""

    def __init__(self, name: str, R: int, P: int, seed: int, da=None):
        self.name, self.R, self.P, self.seed = name, R, P, seed
        self.da = da if da is not None else default_assignment(R, P)
        self.ids = logical_ids(self.da)
        self.params: list[Operand] = []
        self.comps: dict[str, str] = {}
        self.lines: list[str] = []
        self.roots: list[tuple[str, str]] = []  # (instruction, type text)
        self.checks: list[Check] = []
        self.num_leaves = 0
        self._operands: list[int] = []  # parameters made since the last result
        self.channel = 0
        self.token: str | None = None  # the feeds' token chain
        self.infeed_items: dict[int, list] = {}  # device -> items, in program order
        self.outfeed_count = 0
        self._inputs: dict[int, list[np.ndarray]] = {}

    @property
    def n(self) -> int:
        return self.R * self.P

    @property
    def identity_assignment(self) -> bool:
        return self.da == default_assignment(self.R, self.P)

    def next_channel(self) -> int:
        self.channel += 1
        return self.channel

    def param(self, ty: Ty, key: str, values: str = "small", given=None) -> tuple[str, int]:
        i = len(self.params)
        self.params.append(Operand(ty, key, values, given))
        self._operands.append(i)
        self.lines.append(f"  %p{i} = {ty.text()} parameter({i})")
        return f"%p{i}", i

    def operand(self, device: int, index: int) -> np.ndarray:
        return self.inputs(device)[index]

    def reducer(self, red: str, dt: str) -> str:
        name, text = reducer_hlo(red, dt)
        self.comps.setdefault(name, text)
        return f"%{name}"

    def next_token(self) -> str:
        """A token for the next feed op, chained after the previous one (E.21, E.22)."""
        if self.token is None:
            self.token = "%tok0"
            self.lines.append("  %tok0 = token[] after-all()")
        return self.token

    def add_check(self, check: Check, name: str | None = None, ty_text: str | None = None
                  ) -> Check:
        """Record a case; with `name` its result joins the root tuple as `ty_text`."""
        if name is not None:
            self.roots.append((name, ty_text))
            check.first_leaf = self.num_leaves
            self.num_leaves += check.leaves
        check.params = self._operands
        self._operands = []
        self.checks.append(check)
        return check

    def inputs(self, device: int) -> list[np.ndarray]:
        if device not in self._inputs:
            self._inputs[device] = [
                op.given(device) if op.given is not None else
                make_input(self.seed, device, op.key, op.ty.dims, op.ty.dt, op.values)
                for op in self.params]
        return self._inputs[device]

    def per_device_inputs(self) -> list[list[np.ndarray]]:
        return [self.inputs(d) for d in range(self.n)]

    def infeeds(self) -> list[list] | None:
        if not self.infeed_items:
            return None
        return [list(self.infeed_items.get(d, [])) for d in range(self.n)]

    def text(self) -> str:
        header = f"HloModule {self.name}, replica_count={self.R}, num_partitions={self.P}\n\n"
        root_ty = tuple_text([t for _, t in self.roots])
        body = "\n".join(self.lines)
        root = ", ".join(f"%{n}" for n, _ in self.roots)
        return (header + "\n".join(self.comps.values()) + "\n"
                + f"ENTRY %main {{\n{body}\n  ROOT %out = {root_ty} tuple({root})\n}}\n")
