"""Collective conformance through the real runtime: HLO programs run by `xladist.run` under MPI.

Run as `mpiexec -n N python -m pytest --with-mpi tests/mpi/test_conformance.py` (N = 2 or 4;
tests/test_mpi_suites.py does both), with both backends (interpreter and cpu). For every (replica_count, num_partitions) that the world
size allows (R=N,P=1 / R=1,P=N / R=2,P=N/2) and every collective, ONE module holds many
collectives: every group mode the op has (cross-replica, cross-partition,
cross-replica-and-partition, flattened-id) x replica groups (empty, explicit reversed, iota with
transpose, subgroups, ragged for all-reduce, non-covering for collective-broadcast) x sync and
async forms (all-reduce-start/done, all-gather-start/done, collective-permute-start/done,
async-start/update/done around reduce-scatter, all-to-all and collective-broadcast) x dtypes
(pred s8 u8 s32 s64 f16 bf16 f32 f64 c64) x shapes (scalar, zero-size, {0,1} layout,
tuple/variadic) x reducers (add multiply maximum minimum, and/or on pred, a select-based one).

Coverage plan, to stay fast: on the first configuration, the primary group variant (the
largest group) runs the full dtype x shape x reducer product, sync and async; every other
(variant, sync) block runs half the dtypes (the sync and async blocks of a variant take
complementary halves), with shape and reducer rotating, so every variant sees every dtype,
shape and reducer. Instruction names carry the ids, e.g. `ar_fid_rev_s8_layout_sel_async`.

Every device's result is checked against conformance_helpers' reference computed from ALL
devices' inputs, and results that members of a group must share are compared byte for byte
across the group (xladist.run in MPI allgathers every device's outputs).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from tests.mpi.conformance_helpers import (
    CP,
    CR,
    CRP,
    DTYPES,
    FID,
    Program,
    Ty,
    expand,
    fold,
    group_attr,
    id_count,
    iota_groups,
    permute_sources,
    reducers_for,
    same,
    tuple_text,
)

pytestmark = pytest.mark.mpi

WORLD = MPI.COMM_WORLD.Get_size()
SEED = 4242
COLLECTIVE_TIMEOUT_S = 60.0
KINDS = ("scalar", "zero", "layout", "tuple")
LONG = 40_001  # elements: odd, and large enough for the runtime's chunked/large paths
DT_NAMES = list(DTYPES)
FLAG_OPS = ("all-reduce", "all-gather", "reduce-scatter")
OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "all-to-all-tuple",
       "collective-permute", "collective-broadcast")
SHORT = {"all-reduce": "ar", "all-gather": "ag", "reduce-scatter": "rs", "all-to-all": "a2a",
         "all-to-all-tuple": "a2at", "collective-permute": "cp", "collective-broadcast": "cb"}
MODE_SHORT = {CR: "cr", CP: "cp", CRP: "crp", FID: "fid"}


def configs_for(n: int) -> list[tuple[int, int]]:
    """(replica_count, num_partitions) pairs; the first one gets the full product."""
    out = [(2, n // 2)] if n >= 4 and n % 2 == 0 else []
    out += [(1, n), (n, 1)]
    return list(dict.fromkeys(out))


CONFIGS = configs_for(WORLD)


# ---- variants: group mode x replica groups (or permute pairs) -----------------------------
@dataclass
class Variant:
    vid: str
    mode: str
    groups: list[list[int]]            # in id space; [] = the empty list (all ids)
    attr: str                          # replica_groups / source_target_pairs text
    explicit_false: bool = False       # print use_global_device_ids=false
    pairs: list[tuple[int, int]] | None = None

    def device_groups(self, R: int, P: int) -> list[list[int]]:
        return expand(self.mode, self.groups, R, P)


def _group_variants(op: str, mode: str, R: int, P: int) -> list[Variant]:
    n = id_count(mode, R, P)
    m = MODE_SHORT[mode]
    out = []
    if mode != FID:  # empty groups mean all ids, except for flattened ids (an error)
        out.append(Variant(f"{m}_empty", mode, [], "{}"))
    if n == 1:
        return out
    rev = [list(range(n))[::-1]]
    out.append(Variant(f"{m}_rev", mode, rev, group_attr(rev)))
    if n >= 4:
        text = f"[2,{n // 2}]<=[{n // 2},2]T(1,0)"
        out.append(Variant(f"{m}_iota", mode, iota_groups(2, n // 2, (n // 2, 2), (1, 0)), text))
        sub = [[i + 1, i] for i in range(0, n, 2)]
    else:
        out.append(Variant(f"{m}_iota", mode, iota_groups(1, n, (n,), None), f"[1,{n}]<=[{n}]"))
        sub = [[i] for i in range(n)]
    out.append(Variant(f"{m}_sub", mode, sub, group_attr(sub),
                       explicit_false=op in FLAG_OPS and mode != FID))
    if op == "all-reduce" and n >= 4:  # all-reduce alone may have groups of unequal size
        ragged = [[n - 2], [i for i in range(n) if i != n - 2][::-1]]
        out.append(Variant(f"{m}_ragged", mode, ragged, group_attr(ragged)))
    if op == "collective-broadcast":  # groups need not cover: the others get zeros
        part = [[1, 0]] if n > 2 else [[1]]
        out.append(Variant(f"{m}_partial", mode, part, group_attr(part)))
    return out


def _permute_variants(mode: str, R: int, P: int) -> list[Variant]:
    n = id_count(mode, R, P)
    m = MODE_SHORT[mode]
    if n == 1:
        named = {"self": [(0, 0)], "none": []}
    else:
        named = {"ring": [(i, (i + 1) % n) for i in range(n)],
                 "chain": [(i, i + 1) for i in range(n - 1)],
                 "swap": [(0, 1), (1, 0)] + [(i, i) for i in range(2, n - 1)],
                 "none": []}
    return [Variant(f"{m}_{k}", mode, [], group_attr([list(p) for p in v]), pairs=v)
            for k, v in named.items()]


def variants(op: str, R: int, P: int) -> list[Variant]:
    modes = [CR, CRP, FID] if op in FLAG_OPS else [CR, CP]
    if op == "collective-permute":
        return [v for mode in modes for v in _permute_variants(mode, R, P)]
    return [v for mode in modes for v in _group_variants(op, mode, R, P)]


# ---- emitting one collective ------------------------------------------------------------------
class Emitter:
    """Writes collectives of one op into a Program, two async ones in flight at a time."""

    def __init__(self, prog: Program, op: str):
        self.prog, self.op = prog, op
        self.pending: list[str] = []  # done lines not yet written

    def flush(self, keep: int = 0) -> None:
        while len(self.pending) > keep:
            self.prog.lines.append(self.pending.pop(0))

    def attrs(self, v: Variant) -> str:
        parts = []
        if v.mode != CR:
            parts.append(f"channel_id={self.prog.next_channel()}")
        if self.op == "collective-permute":
            parts.append(f"source_target_pairs={v.attr}")
            return ", ".join(parts)
        parts.append(f"replica_groups={v.attr}")
        if self.op in FLAG_OPS and v.mode == FID:
            parts.append("use_global_device_ids=true")
        elif v.explicit_false:
            parts.append("use_global_device_ids=false")
        return ", ".join(parts)

    def emit(self, v: Variant, dt: str, kind: str, red: str | None, sync: bool) -> None:
        prog = self.prog
        name = "_".join(x for x in (SHORT[self.op], v.vid, dt, kind, red,
                                    "sync" if sync else "async") if x)
        groups = v.device_groups(prog.R, prog.P)
        where = {d: (g, g.index(d)) for g in groups for d in g}
        g = len(groups[0])
        getattr(self, "_" + self.op.replace("-", "_"))(name, v, dt, kind, red, sync, groups,
                                                         where, g)
        self.flush(keep=0 if sync else 1)

    # Each op: operand types for the shape kind, the HLO line(s), the expected leaves.
    def _params(self, tys):
        return [self.prog.param(t) for t in tys]

    def _async_pair(self, name, start_ty, done_ty, opcode, ops_text, attrs):
        self.prog.lines.append(f"  %{name}.s = {start_ty} {opcode}-start({ops_text}), {attrs}")
        self.pending.append(f"  %{name} = {done_ty} {opcode}-done(%{name}.s)")

    def _all_reduce(self, name, v, dt, kind, red, sync, groups, where, g):
        tys = {"scalar": [Ty(dt, ())], "zero": [Ty(dt, (0, 3))],
               "layout": [Ty(dt, (2, 3), (0, 1))], "tuple": [Ty(dt, (3,)), Ty(dt, (2, 2))],
               "long": [Ty(dt, (LONG,))]}[kind]
        ps = self._params(tys)
        ops = ", ".join(p for p, _ in ps)
        res = tys[0].text() if len(tys) == 1 else tuple_text(tys)
        attrs = f"{self.attrs(v)}, to_apply={self.prog.reducer(red, dt)}"
        if sync:
            self.prog.lines.append(f"  %{name} = {res} all-reduce({ops}), {attrs}")
        else:
            self._async_pair(name, res, res, "all-reduce", ops, attrs)
        prog = self.prog

        def expected(d):
            members = where[d][0]
            return [fold(red, dt, [prog.inputs(m)[i] for m in members]) for _, i in ps]
        prog.result(name, res, len(tys), expected, groups)

    def _all_gather(self, name, v, dt, kind, red, sync, groups, where, g):
        tys, dim = {"scalar": ([Ty(dt, (1,))], 0), "zero": ([Ty(dt, (0, 2))], 1),
                    "layout": ([Ty(dt, (2, 3), (0, 1))], 1),
                    "tuple": ([Ty(dt, (2,)), Ty(dt, (1, 3))], 0)}[kind]
        outs = [Ty(dt, tuple(s * g if k == dim else s for k, s in enumerate(t.dims)), t.layout)
                for t in tys]
        ps = self._params(tys)
        ops = ", ".join(p for p, _ in ps)
        res = outs[0].text() if len(outs) == 1 else tuple_text(outs)
        attrs = f"{self.attrs(v)}, dimensions={{{dim}}}"
        if sync:
            self.prog.lines.append(f"  %{name} = {res} all-gather({ops}), {attrs}")
        else:
            ins = tys[0].text() if len(tys) == 1 else tuple_text(tys)
            self._async_pair(name, f"({ins}, {res})", res, "all-gather", ops, attrs)
        prog = self.prog

        def expected(d):
            members = where[d][0]
            return [np.concatenate([prog.inputs(m)[i] for m in members], axis=dim)
                    for _, i in ps]
        prog.result(name, res, len(tys), expected, groups)

    def _reduce_scatter(self, name, v, dt, kind, red, sync, groups, where, g):
        tys, dim = {"scalar": ([Ty(dt, (g,))], 0), "zero": ([Ty(dt, (0, g))], 1),
                    "layout": ([Ty(dt, (2, 2 * g), (0, 1))], 1),
                    "tuple": ([Ty(dt, (g,)), Ty(dt, (2 * g, 2))], 0)}[kind]
        outs = [Ty(dt, tuple(s // g if k == dim else s for k, s in enumerate(t.dims)), t.layout)
                for t in tys]
        ps = self._params(tys)
        ops = ", ".join(p for p, _ in ps)
        res = outs[0].text() if len(outs) == 1 else tuple_text(outs)
        attrs = f"{self.attrs(v)}, dimensions={{{dim}}}, to_apply={self.prog.reducer(red, dt)}"
        if sync:
            self.prog.lines.append(f"  %{name} = {res} reduce-scatter({ops}), {attrs}")
        else:  # the generic async form around a named computation, with an async-update
            wrap = f"wrap_{name}"
            wps = ", ".join(f"{wrap}.p{k}: {t.text()}" for k, t in enumerate(tys))
            body = "\n".join(f"  %{wrap}.p{k} = {t.text()} parameter({k})"
                             for k, t in enumerate(tys))
            wops = ", ".join(f"%{wrap}.p{k}" for k in range(len(tys)))
            self.prog.comps[wrap] = (f"%{wrap} ({wps}) -> {res} {{\n{body}\n"
                                     f"  ROOT %{wrap}.rs = {res} reduce-scatter({wops}), "
                                     f"{attrs}\n}}\n")
            start = f"({tuple_text(tys)}, {res}, s32[])"
            self.prog.lines.append(f"  %{name}.s = {start} async-start({ops}), calls=%{wrap}")
            self.prog.lines.append(f"  %{name}.u = {start} async-update(%{name}.s)")
            self.pending.append(f"  %{name} = {res} async-done(%{name}.u)")
        prog = self.prog

        def expected(d):
            members, pos = where[d]
            return [np.split(fold(red, dt, [prog.inputs(m)[i] for m in members]), g,
                             axis=dim)[pos] for _, i in ps]
        prog.result(name, res, len(tys), expected)

    def _all_to_all(self, name, v, dt, kind, red, sync, groups, where, g):
        ty, dim = {"scalar": (Ty(dt, (g,)), 0), "zero": (Ty(dt, (0, g)), 1),
                   "layout": (Ty(dt, (2 * g, 3), (0, 1)), 0),
                   "tuple": (Ty(dt, (2, g, 2)), 1)}[kind]
        (p, i), = self._params([ty])
        attrs = f"{self.attrs(v)}, dimensions={{{dim}}}"
        if sync:
            self.prog.lines.append(f"  %{name} = {ty.text()} all-to-all({p}), {attrs}")
        else:  # the printed sugar of async-start/update/done around all-to-all
            start = f"(({ty.text()}), {ty.text()})"
            self.prog.lines.append(f"  %{name}.s = {start} all-to-all-start({p}), {attrs}")
            self.prog.lines.append(f"  %{name}.u = {start} all-to-all-update(%{name}.s)")
            self.pending.append(f"  %{name} = {ty.text()} all-to-all-done(%{name}.u)")
        prog = self.prog

        def expected(d):
            members, pos = where[d]
            return [np.concatenate([np.split(prog.inputs(m)[i], g, axis=dim)[pos]
                                    for m in members], axis=dim)]
        prog.result(name, ty.text(), 1, expected)

    def _all_to_all_tuple(self, name, v, dt, kind, red, sync, groups, where, g):
        ty = {"scalar": Ty(dt, ()), "zero": Ty(dt, (0, 2)), "layout": Ty(dt, (2, 3), (0, 1)),
              "tuple": Ty(dt, (2,))}[kind]
        ps = self._params([ty] * g)
        ops = ", ".join(p for p, _ in ps)
        res = tuple_text([ty] * g)
        attrs = self.attrs(v)
        if sync:
            self.prog.lines.append(f"  %{name} = {res} all-to-all({ops}), {attrs}")
        else:
            start = f"({res}, {res})"
            self.prog.lines.append(f"  %{name}.s = {start} all-to-all-start({ops}), {attrs}")
            self.pending.append(f"  %{name} = {res} all-to-all-done(%{name}.s)")
        prog = self.prog

        def expected(d):
            members, pos = where[d]  # element j: what member j sent to position pos
            return [prog.inputs(m)[ps[pos][1]] for m in members]
        prog.result(name, res, g, expected)

    def _collective_permute(self, name, v, dt, kind, red, sync, groups, where, g):
        tys = {"scalar": [Ty(dt, ())], "zero": [Ty(dt, (0, 3))],
               "layout": [Ty(dt, (2, 3), (0, 1))],
               "tuple": [Ty(dt, (2,)), Ty(dt, (1, 3))] if sync else [Ty(dt, (4,))]}[kind]
        ps = self._params(tys)
        ops = ", ".join(p for p, _ in ps)
        res = tys[0].text() if len(tys) == 1 else tuple_text(tys)
        attrs = self.attrs(v)
        if sync:
            self.prog.lines.append(f"  %{name} = {res} collective-permute({ops}), {attrs}")
        else:
            start = f"({res}, {res}, u32[], u32[])"
            self._async_pair(name, start, res, "collective-permute", ops, attrs)
        prog = self.prog
        sources = permute_sources(v.pairs, v.mode != CR, prog.R, prog.P)

        def expected(d):
            src = sources.get(d)
            return [np.zeros(t.dims, DTYPES[dt]) if src is None else prog.inputs(src)[i]
                    for (_, i), t in zip(ps, tys)]
        prog.result(name, res, len(tys), expected)

    def _collective_broadcast(self, name, v, dt, kind, red, sync, groups, where, g):
        tys = {"scalar": [Ty(dt, ())], "zero": [Ty(dt, (0, 3))],
               "layout": [Ty(dt, (2, 3), (0, 1))],
               "tuple": [Ty(dt, (2,)), Ty(dt, (1, 3))] if sync else [Ty(dt, (4,))]}[kind]
        ps = self._params(tys)
        ops = ", ".join(p for p, _ in ps)
        res = tys[0].text() if len(tys) == 1 else tuple_text(tys)
        attrs = self.attrs(v)
        if sync:
            self.prog.lines.append(f"  %{name} = {res} collective-broadcast({ops}), {attrs}")
        else:
            start = f"(({res}), {res})"
            self.prog.lines.append(
                f"  %{name}.s = {start} collective-broadcast-start({ops}), {attrs}")
            self.pending.append(f"  %{name} = {res} collective-broadcast-done(%{name}.s)")
        prog = self.prog

        def expected(d):
            if d not in where:  # in no group: zeros (C.15)
                return [np.zeros(t.dims, DTYPES[dt]) for t in tys]
            root = where[d][0][0]
            return [prog.inputs(root)[i] for _, i in ps]
        prog.result(name, res, len(tys), expected, groups)


# ---- the programs -----------------------------------------------------------------------------
def _combos(op: str, block: int, sync: bool, full: bool):
    """(dtype, shape kind, reducer) triples of one (variant, sync) block."""
    reduces = op in ("all-reduce", "reduce-scatter")
    if full:
        for j, (dt, kind) in enumerate(itertools.product(DT_NAMES, KINDS)):
            reds = reducers_for(dt) if reduces else [None]
            if reduces and not sync:  # async: reducers rotate
                reds = [reds[j % len(reds)]]
            for red in reds:
                yield dt, kind, red
        return
    half = block % 2  # sync and async blocks of a variant take complementary dtype halves
    for j in range(len(DT_NAMES) // 2):
        dt = DT_NAMES[2 * j + half]
        kind = KINDS[(block + j) % len(KINDS)]
        red = None
        if reduces:
            reds = reducers_for(dt)
            red = reds[(block // 2 + j) % len(reds)]
        yield dt, kind, red


def build(op: str, R: int, P: int, full: bool) -> Program:
    prog = Program(f"conformance_{SHORT[op]}_r{R}p{P}", R, P, SEED)
    em = Emitter(prog, op)
    vs = variants(op, R, P)
    # The primary variant (largest group, first in text order) gets the full product.
    primary = max(range(len(vs)), key=lambda k: max(map(len, vs[k].device_groups(R, P))))
    block = 0
    for k, v in enumerate(vs):
        for sync in (True, False):
            for dt, kind, red in _combos(op, block, sync, full and k == primary):
                em.emit(v, dt, kind, red, sync)
            em.flush()
            block += 1
    return prog


def check_outputs(prog: Program, outs: list[list[np.ndarray]]) -> list[str]:
    """Every device's leaves against the reference; shared results byte-identical."""
    problems = []
    assert len(outs) == prog.n, f"outputs for {len(outs)} devices, expected {prog.n}"
    for d in range(prog.n):
        assert len(outs[d]) == prog.num_leaves, \
            f"device {d}: {len(outs[d])} output leaves, expected {prog.num_leaves}"
    for c in prog.checks:
        for d in range(prog.n):
            for k, want in enumerate(c.expected(d)):
                why = same(outs[d][c.first_leaf + k], want)
                if why:
                    problems.append(f"{c.name} leaf {k}, device {d}: {why}")
        for group in c.shared_by:
            for k in range(len(c.expected(group[0]))):
                blobs = {outs[d][c.first_leaf + k].tobytes() for d in group}
                if len(blobs) > 1:
                    problems.append(f"{c.name} leaf {k}: devices {group} differ in bits")
    return problems


_PARAMS = [(R, P, op) for R, P in CONFIGS for op in OPS]
BACKENDS = ("interpreter", "cpu")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("R,P,op", _PARAMS, ids=[f"R{R}xP{P}-{op}" for R, P, op in _PARAMS])
def test_collective_conformance(R, P, op, backend):
    full = (R, P) == CONFIGS[0]
    prog = build(op, R, P, full)
    text = prog.text()
    outs = xladist.run(text, prog.per_device_inputs(), n=WORLD, timeout=COLLECTIVE_TIMEOUT_S,
                       backend=backend)
    problems = check_outputs(prog, outs)
    assert not problems, (f"{len(problems)} wrong results in {prog.name} "
                          f"({len(prog.checks)} collectives):\n" + "\n".join(problems[:15]))
    # Not vacuous: many collectives, and some over groups of several devices.
    assert len(prog.checks) >= 40
    assert any(len(g) > 1 for v in variants(op, R, P) for g in v.device_groups(R, P))


# Tolerances of an inexact sum of WORLD normal samples against the float64 sum.
INEXACT_TOL = {"f16": 2e-2, "bf16": 1e-1, "f32": 1e-5, "f64": 1e-12, "c64": 1e-5}


def test_inexact_sums_bit_identical_across_members():
    """Sums whose value depends on the addition order (normal samples, a long vector) must
    still be bit-identical on every member of a group (ARCHITECTURE rule 4), in every
    flattened-id group variant, sync and async, and close to the float64 sum."""
    prog = Program(f"conformance_inexact_r1p{WORLD}", 1, WORLD, SEED, exact=False)
    em = Emitter(prog, "all-reduce")
    for v in variants("all-reduce", 1, WORLD):
        if v.mode == FID:
            for dt in INEXACT_TOL:
                for sync in (True, False):
                    em.emit(v, dt, "long", "add", sync)
    em.flush()
    outs = xladist.run(prog.text(), prog.per_device_inputs(), n=WORLD,
                       timeout=COLLECTIVE_TIMEOUT_S)
    problems = []
    for c in prog.checks:
        dt = c.name.split("_")[3]
        for group in c.shared_by:
            got = [outs[d][c.first_leaf] for d in group]
            if len({g.tobytes() for g in got}) > 1:
                problems.append(f"{c.name}: devices {group} differ in bits")
            # The reference in complex128: only the operands matter, not the order.
            want = sum(np.asarray(prog.inputs(d)[c.params[0]], np.complex128)
                       for d in group)
            scale = np.abs(want).max()
            err = np.abs(got[0].astype(np.complex128) - want).max() / scale
            if not err <= INEXACT_TOL[dt]:
                problems.append(f"{c.name}: relative error {err:.3g} > {INEXACT_TOL[dt]}")
    assert not problems, "\n".join(problems[:15])
    assert len(prog.checks) >= 10


def test_runs_release_their_communicators(monkeypatch):
    """Each run's communicators are freed at its end: MPICH has ~2,000 context ids per
    process, so a process that calls xladist.run in a loop would otherwise run out."""
    from xladist.collectives import CommunicatorCache

    caches = []
    prepare = CommunicatorCache.prepare

    def recording(self, groupings):
        caches.append(self)
        return prepare(self, groupings)

    monkeypatch.setattr(CommunicatorCache, "prepare", recording)
    prog = build("all-reduce", 1, WORLD, full=False)
    for _ in range(2):
        xladist.run(prog.text(), prog.per_device_inputs(), n=WORLD,
                    timeout=COLLECTIVE_TIMEOUT_S)
    assert len(caches) == 2 and caches[0] is not caches[1]
    for cache in caches:
        assert len(cache) == 0
        assert cache.world.comm == MPI.COMM_NULL
