"""HLO programs and numpy references for the collective conformance suite.

The suite (tests/mpi/test_conformance.py) writes HLO text for many collectives at once, runs
it through the real runtime on every rank, and checks every device's result against a
reference computed here from ALL devices' inputs. Everything here is written from the rules
in docs/reference/collective-semantics.md (group modes A.1-A.5, iota groups B.8, op semantics C.10-C.15),
independently of xladist/hlo/collective_groups.py and the runtime: a bug shared by both would otherwise
pass unnoticed.

Inputs are small integers in every dtype, so sums and products are exact in any reduction
order and results can be compared exactly.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

DTYPES = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "s32": np.dtype(np.int32),
    "s64": np.dtype(np.int64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64),
}

# ---- reducers: HLO body and numpy meaning -------------------------------------------------
# "sel" is a select-based reducer (max written as select(a > b, a, b); for pred
# select(a, a, b), an or): the runtime must apply it as a computation, not an MPI builtin.
REDUCER_FNS: dict[str, Callable] = {
    "add": np.add,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "and": np.logical_and,
    "or": np.logical_or,
    "sel": lambda a, b: np.where(a > b, a, b),
    "sel_pred": lambda a, b: np.where(a, a, b),
}


def reducers_for(dt: str) -> list[str]:
    if dt == "pred":
        return ["and", "or", "sel"]
    if dt == "c64":
        return ["add", "multiply"]  # complex numbers have no order: no max/min/select
    return ["add", "multiply", "maximum", "minimum", "sel"]


def reducer_hlo(red: str, dt: str) -> tuple[str, str]:
    """(computation name, text) of a scalar reducer."""
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


def reduce_fn(red: str, dt: str) -> Callable:
    return REDUCER_FNS["sel_pred" if (red == "sel" and dt == "pred") else red]


def fold(red: str, dt: str, xs: list[np.ndarray]) -> np.ndarray:
    """Left fold in member order (exact for our small-integer inputs in any order)."""
    fn = reduce_fn(red, dt)
    acc = xs[0]
    with np.errstate(all="ignore"):
        for x in xs[1:]:
            acc = np.asarray(fn(acc, x)).astype(DTYPES[dt])
    return np.asarray(acc, DTYPES[dt])


# ---- inputs -----------------------------------------------------------------------------
def make_input(seed: int, device: int, index: int, dims: tuple[int, ...], dt: str,
               exact: bool = True) -> np.ndarray:
    """Parameter `index` of `device`, a pure function of its arguments: small integers, or
    (exact=False) normal samples, whose sums depend on the order of the additions."""
    rng = np.random.default_rng([seed, device, index, zlib.crc32(f"{dims}{dt}".encode())])
    dtype = DTYPES[dt]
    if not exact:
        x = rng.standard_normal(dims)
        if dt == "c64":
            x = x + 1j * rng.standard_normal(dims)
        return x.astype(dtype)
    if dt == "pred":
        return rng.integers(0, 2, dims).astype(bool)
    if dt == "u8":
        return rng.integers(0, 5, dims).astype(dtype)
    if dt == "c64":
        return (rng.integers(-3, 4, dims) + 1j * rng.integers(-3, 4, dims)).astype(dtype)
    return rng.integers(-3, 4, dims).astype(dtype)


# ---- device groups (docs/reference/collective-semantics.md A.3-A.7, B.8) -----------------------------------
CR, CP, CRP, FID = "cross_replica", "cross_partition", "cross_replica_and_partition", "flattened_id"


def device_of(r: int, p: int, R: int) -> int:
    """XLA's default placer: device = partition * replica_count + replica (A.7)."""
    return p * R + r


def iota_groups(G: int, S: int, dims: tuple[int, ...], perm: tuple[int, ...] | None):
    """`[G,S]<=[dims]T(perm)`: iota, reshape to dims, transpose, cut into G groups of S."""
    a = np.arange(int(np.prod(dims))).reshape(dims)
    if perm is not None:
        a = a.transpose(perm)
    return a.reshape(G, S).tolist()


def id_count(mode: str, R: int, P: int) -> int:
    return {CR: R, CP: P, CRP: R, FID: R * P}[mode]


def expand(mode: str, groups: list[list[int]], R: int, P: int) -> list[list[int]]:
    """Device groups, each in member (collective rank) order."""
    if not groups:
        groups = [list(range(id_count(mode, R, P)))]
    if mode == CR:
        return [[device_of(r, p, R) for r in g] for p in range(P) for g in groups]
    if mode == CP:
        return [[device_of(r, p, R) for p in g] for r in range(R) for g in groups]
    if mode == CRP:  # XLA's order: replica-major, then every partition (A.4)
        return [[device_of(r, p, R) for r in g for p in range(P)] for g in groups]
    return [[device_of(f // P, f % P, R) for f in g] for g in groups]


def permute_sources(pairs: list[tuple[int, int]], has_channel: bool, R: int, P: int
                    ) -> dict[int, int]:
    """target device -> source device. Ids are partition ids with a channel (pairs apply in
    every replica), replica ids without (pairs apply in every partition) (C.14)."""
    out = {}
    for s, t in pairs:
        for other in range(R if has_channel else P):
            if has_channel:
                out[device_of(other, t, R)] = device_of(other, s, R)
            else:
                out[device_of(t, other, R)] = device_of(s, other, R)
    return out


# ---- program text -------------------------------------------------------------------------
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


@dataclass
class Check:
    """One collective: its name, where its leaves are in the outputs, and the reference."""

    name: str
    first_leaf: int
    expected: Callable[[int], list[np.ndarray]]  # device -> expected leaves
    shared_by: list[list[int]] = field(default_factory=list)  # groups with equal results
    params: list[int] = field(default_factory=list)  # its operands' parameter numbers


class Program:
    """An HLO module under construction: parameters, helper computations, entry lines."""

    def __init__(self, name: str, R: int, P: int, seed: int, exact: bool = True):
        self.name, self.R, self.P, self.seed, self.exact = name, R, P, seed, exact
        self.params: list[Ty] = []
        self.comps: dict[str, str] = {}
        self.lines: list[str] = []
        self.roots: list[tuple[str, str]] = []  # (instruction, type text)
        self.checks: list[Check] = []
        self.num_leaves = 0
        self._operands: list[int] = []  # parameters made since the last result
        self.channel = 0
        self._inputs: dict[int, list[np.ndarray]] = {}

    @property
    def n(self) -> int:
        return self.R * self.P

    def next_channel(self) -> int:
        self.channel += 1
        return self.channel

    def param(self, ty: Ty) -> tuple[str, int]:
        i = len(self.params)
        self.params.append(ty)
        self._operands.append(i)
        self.lines.append(f"  %p{i} = {ty.text()} parameter({i})")
        return f"%p{i}", i

    def reducer(self, red: str, dt: str) -> str:
        name, text = reducer_hlo(red, dt)
        self.comps.setdefault(name, text)
        return f"%{name}"

    def result(self, name: str, ty_text: str, leaves: int, expected, shared_by=()) -> None:
        self.roots.append((name, ty_text))
        self.checks.append(Check(name, self.num_leaves, expected, list(shared_by),
                                 self._operands))
        self._operands = []
        self.num_leaves += leaves

    def inputs(self, device: int) -> list[np.ndarray]:
        if device not in self._inputs:
            self._inputs[device] = [make_input(self.seed, device, i, t.dims, t.dt, self.exact)
                                    for i, t in enumerate(self.params)]
        return self._inputs[device]

    def per_device_inputs(self) -> list[list[np.ndarray]]:
        return [self.inputs(d) for d in range(self.n)]

    def text(self) -> str:
        header = f"HloModule {self.name}, replica_count={self.R}, num_partitions={self.P}\n\n"
        root_ty = tuple_text([t for _, t in self.roots])
        body = "\n".join(self.lines)
        root = ", ".join(f"%{n}" for n, _ in self.roots)
        return (header + "\n".join(self.comps.values()) + "\n"
                + f"ENTRY %main {{\n{body}\n  ROOT %out = {root_ty} tuple({root})\n}}\n")


def group_attr(groups: list[list[int]] | str) -> str:
    if isinstance(groups, str):
        return groups  # an iota form, already text
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


def same(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when equal in dtype, dims and value (exactly); else what differs."""
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"dims {list(got.shape)}, expected {list(want.shape)}"
    if want.dtype.kind in "fc" or want.dtype == DTYPES["bf16"]:
        ok = np.array_equal(got.astype(np.complex128), want.astype(np.complex128))
    else:
        ok = np.array_equal(got, want)
    return None if ok else f"values\n    got  {got.tolist()}\n    want {want.tolist()}"
