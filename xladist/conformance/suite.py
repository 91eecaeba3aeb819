"""The built-in suite: which cases exist for a device count, and the programs that hold them.

A case is one collective (or channel transfer, or feed round trip) with its operands; its
name says everything that defines it and is what `--select` matches (shell-style, the whole
name):

    n4/2x2/reversed/all-reduce/ar_cr_rev_s8_layout_sel_async
    |  |   |        |          instruction: op, group mode + groups, type, shape, reducer, form
    |  |   |        operation
    |  |   device assignment: default (XLA's placer), reversed, flat (device = r * P + p)
    |  replicas x partitions
    devices

`units(n, plan)` lists the programs to run for one device count, each holding up to
MAX_CASES cases of one (configuration, assignment, operation); a unit builds its Program
(program.py) deterministically from its case list, so the ranks and the checking side
build the same module, and a case selected alone gets the same inputs it had among others.

Plans: the default one keeps a run on two cores to a few minutes -- the first configuration
gets the whole product of types x shapes x reducers on its largest-group variant, every other
(variant, sync/async) block half the types with shapes and reducers rotating, so every
variant still meets every type, shape and reducer; `full=True` is the whole product on
every configuration and device assignment, every element type.
"""

from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .checks import ERROR, FAIL, PASS, Verdict, digest, first_difference
from .emit import ASYNC_OPS, KINDS, OPS, REDUCES, Emitter, case_name, row_of, variants
from .groups import default_assignment
from .program import Program
from .values import ALL_TYPES, DEFAULT_TYPES, reducers_for

SEED = 4242
MAX_CASES = 120  # per program: a failure to compile or run costs at most this many re-runs
DEVICE_COUNTS = (2, 3, 4, 8)


@dataclass(frozen=True)
class Plan:
    """What to run: `full` (the whole product), `select` (shell patterns over case names;
    empty = all), `xla` (XLA's own collective tests too)."""

    full: bool = False
    select: tuple[str, ...] = ()
    xla: bool = True

    def wants(self, name: str) -> bool:
        return not self.select or any(fnmatch.fnmatchcase(name, p) for p in self.select)


@dataclass(frozen=True)
class CaseInfo:
    """A case's identity and its place in the report."""

    name: str
    row: str
    column: str
    mode: str
    n: int
    config: str = ""  # "2x2/reversed", or the XLA source file


@dataclass
class Job:
    """What the ranks run for one unit: the module, every device's arguments and infeed
    items, the device assignment (None: XLA's default) and the (replicas, partitions) to
    run it as when the module's header does not say (None: its header's)."""

    text: str
    inputs: list
    device_assignment: list | None = None
    infeed: list | None = None
    counts: tuple[int, int] | None = None
    outfeed: bool = False  # whether the ranks must collect outfeed items


def flat_items(items) -> list[np.ndarray]:
    """Outfeed items (arrays or tuples of arrays) as a flat list of arrays."""
    out = []
    for item in items:
        out.extend(flat_items(item) if isinstance(item, (tuple, list)) else [np.asarray(item)])
    return out


@dataclass(frozen=True)
class Spec:
    """One generated case."""

    op: str
    vid: str
    dt: str
    kind: str
    red: str | None
    sync: bool


def configs_for(n: int, full: bool) -> list[tuple[int, int]]:
    """(replica_count, num_partitions) pairs for n devices; the first gets the most cases."""
    if full:
        return [(r, n // r) for r in range(1, n + 1) if n % r == 0]
    out = [(2, n // 2)] if n >= 4 and n % 2 == 0 else []
    return list(dict.fromkeys(out + [(1, n), (n, 1)]))


def assignments_for(R: int, P: int, first: bool, full: bool) -> list[tuple[str, list]]:
    """Device assignments [replica][partition] -> device: XLA's default and ones that are
    not the identity, so that device ids, replica ids and flattened ids all differ."""
    n = R * P
    default = default_assignment(R, P)
    out = [("default", default)]
    if full or first:
        out.append(("reversed", [[n - 1 - d for d in row] for row in default]))
    if full and R > 1 and P > 1:
        out.append(("flat", [[r * P + p for p in range(P)] for r in range(R)]))
    return out


def _combos(op: str, block: int, sync: bool, whole: bool, types):
    """(type, shape kind, reducer) triples of one (variant, sync) block."""
    reduces = op in REDUCES
    if whole:
        for j, (dt, kind) in enumerate(itertools.product(types, KINDS)):
            reds = reducers_for(dt) if reduces else [None]
            if reduces and not sync and kind != "edge":  # async: reducers rotate
                reds = [reds[j % len(reds)]]
            for red in reds:
                yield dt, kind, red
        return
    half = block % 2  # sync and async blocks of a variant take complementary type halves
    for j in range((len(types) + 1 - half) // 2):
        dt = types[2 * j + half]
        kind = KINDS[(block + j) % len(KINDS)]
        red = None
        if reduces:
            reds = reducers_for(dt)
            red = reds[(block // 2 + j) % len(reds)]
        yield dt, kind, red


def _specs(op: str, R: int, P: int, whole_primary: bool, full: bool) -> list[Spec]:
    types = ALL_TYPES if full else DEFAULT_TYPES
    vs = variants(op, R, P)
    if not vs:
        return []
    da = default_assignment(R, P)
    sizes = [max(map(len, v.device_groups(da))) if v.mode not in ("channel", "feeds") else 0
             for v in vs]
    primary = max(range(len(vs)), key=lambda k: sizes[k])
    out, block = [], 0
    for k, v in enumerate(vs):
        for sync in ((True, False) if op in ASYNC_OPS else (True,)):
            whole = full or (whole_primary and k == primary)
            for dt, kind, red in _combos(op, block, sync, whole, types):
                out.append(Spec(op, v.vid, dt, kind, red, sync))
            block += 1
    return out


@dataclass
class Unit:
    """One program of generated cases (module doc)."""

    key: str
    n: int
    R: int
    P: int
    da_label: str
    da: list
    op: str
    specs: list[Spec] = field(default_factory=list)

    @property
    def prefix(self) -> str:
        return f"n{self.n}/{self.R}x{self.P}/{self.da_label}/{self.op}/"

    @cached_property
    def _variants(self) -> dict:
        return {v.vid: v for v in variants(self.op, self.R, self.P)}

    def name(self, s: Spec) -> str:
        return self.prefix + case_name(s.op, self._variants[s.vid], s.dt, s.kind, s.red, s.sync)

    @cached_property
    def cases(self) -> list[CaseInfo]:
        return [CaseInfo(self.name(s), row_of(s.op, s.red, s.sync), s.dt,
                         self._variants[s.vid].mode, self.n, f"{self.R}x{self.P}/{self.da_label}")
                for s in self.specs]

    def alone(self, index: int) -> Unit:
        """The unit of one of its cases."""
        return Unit(f"{self.key}:{index}", self.n, self.R, self.P, self.da_label, self.da,
                    self.op, [self.specs[index]])

    @cached_property
    def program(self) -> Program:
        name = f"conformance_{self.op.replace('-', '_')}_{self.R}x{self.P}_{self.da_label}"
        prog = Program(name, self.R, self.P, SEED, self.da)
        em = Emitter(prog, self.op, self.prefix)
        last_sync = True
        for s in self.specs:
            if s.sync != last_sync:
                em.flush()
                last_sync = s.sync
            em.emit(self._variants[s.vid], s.dt, s.kind, s.red, s.sync)
        em.flush()
        return prog


    def job(self) -> Job:
        prog = self.program
        return Job(prog.text(), prog.per_device_inputs(),
                   None if prog.identity_assignment else prog.da, prog.infeeds(),
                   outfeed=prog.outfeed_count > 0)

    def error_verdict(self, kind: str, text: str) -> list[Verdict]:
        """Every case's verdict when every rank raised `text` (kind: "unsupported" or
        "error")."""
        return [Verdict(c.name, kind, text) for c in self.cases]

    def judge(self, outputs, outfeeds) -> list[Verdict]:
        """Every case's verdict: each device's leaves (and outfeed items) against the
        reference run of the same program (reference.py); members of a group must also
        hold the same bits (every rank computes the same result, ARCHITECTURE rule 4)."""
        from .reference import reference_run
        prog = self.program
        try:
            want, want_fed = reference_run(prog.text(), prog.per_device_inputs(), prog.n,
                                           device_assignment=prog.da, infeed=prog.infeeds())
        except Exception as e:  # noqa: BLE001 - a suite defect, reported per case
            return [Verdict(c.name, ERROR, f"the reference could not run this program: "
                            f"{type(e).__name__}: {e}") for c in prog.checks]
        return judge_checks(prog.checks, prog.n, outputs, outfeeds, want, want_fed)


def judge_checks(checks, n, outputs, outfeeds, want, want_fed) -> list[Verdict]:
    """Verdicts of a program's checks (program.Check) given what the backend and the
    reference returned per device."""
    for d in range(n):
        if len(outputs[d]) != len(want[d]):
            why = f"device {d} returned {len(outputs[d])} results, expected {len(want[d])}"
            return [Verdict(c.name, FAIL, why, d) for c in checks]
    fed = [flat_items(x) for x in outfeeds] if outfeeds is not None else [[] for _ in range(n)]
    want_fed = [flat_items(x) for x in want_fed]
    from . import recorded
    out = []
    for c in checks:
        ref_values = [v for d in range(n) for v in want[d][c.first_leaf:c.first_leaf + c.leaves]]
        xla, why_xla = recorded.check(c.name, digest(ref_values, c.exact))
        if xla == "disagrees":
            out.append(Verdict(c.name, ERROR, why_xla))
            continue
        problem = None
        for d in range(n):
            got = outputs[d][c.first_leaf:c.first_leaf + c.leaves] \
                + fed[d][c.first_item:c.first_item + c.items]
            exp = want[d][c.first_leaf:c.first_leaf + c.leaves] \
                + want_fed[d][c.first_item:c.first_item + c.items]
            if len(got) != len(exp):
                problem = (d, f"device {d}: {len(got)} values (results and outfeed items), "
                              f"expected {len(exp)}")
                break
            for k, (g, w) in enumerate(zip(got, exp)):
                why = first_difference(g, w, exact=c.exact)
                if why:
                    what = "result" if k < c.leaves else "outfeed item"
                    k = k if k < c.leaves else k - c.leaves
                    problem = (d, f"device {d}, {what} {k}: {why}")
                    break
            if problem:
                break
        for group in c.shared_by if problem is None else ():
            for k in range(c.leaves):
                blobs = {np.asarray(outputs[d][c.first_leaf + k]).tobytes() for d in group}
                if len(blobs) > 1:
                    problem = (group[0], f"devices {group}, result {k}: members of one group "
                                         "hold different bits")
                    break
        out.append(Verdict(c.name, PASS, xla=xla) if problem is None
                   else Verdict(c.name, FAIL, problem[1], problem[0], xla=xla))
    return out


def generated_units(n: int, plan: Plan) -> list[Unit]:
    out = []
    for ci, (R, P) in enumerate(configs_for(n, plan.full)):
        for label, da in assignments_for(R, P, ci == 0, plan.full):
            whole = ci == 0 and label == "default"
            for op in OPS:
                unit = Unit("", n, R, P, label, da, op)
                unit.specs = [s for s in _specs(op, R, P, whole, plan.full)
                              if plan.wants(unit.name(s))]
                for k in range(0, len(unit.specs), MAX_CASES):
                    part = Unit(f"{unit.prefix}{k // MAX_CASES}", n, R, P, label, da, op,
                                unit.specs[k:k + MAX_CASES])
                    out.append(part)
    return out


def units(n: int, plan: Plan) -> list:
    """Every unit to run on n devices: the generated programs, then XLA's cases (xla.py)."""
    out: list = generated_units(n, plan)
    if plan.xla:
        from . import xla
        out += xla.units(n, plan)
    return out
