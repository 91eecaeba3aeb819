"""Writing the suite's collectives into programs, with each device's expected values.

For one operation the variants are its group modes x replica groups (empty, explicit
reversed, iota with a transpose, subgroups, ragged for all-reduce, non-covering for
collective-broadcast) or its source-target pairs (ring, chain, swap, none); an `Emitter`
writes one case per (variant, element type, shape kind, reducer, sync/async), keeping two
async ones in flight, and records a closure computing every device's expected leaves from
ALL devices' inputs with the rules of docs/reference/collective-semantics.md (A.1-A.7, B.8,
C.10-C.16, D.18-21a, E.21-22, F.23), through groups.py, never through xladist's own group
code. Instruction names carry the ids: `ar_fid_rev_s8_layout_sel_async`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .groups import (CP, CR, CRP, FID, expand, id_count, iota_groups, pair_sources,
                     send_recv_by_partition)
from .program import Check, Program, Ty, group_attr, tuple_text
from .values import dtype, fold, make_input

LONG = 40_001  # elements: odd, and large enough for the runtime's chunked/large paths
KINDS = ("scalar", "zero", "layout", "tuple", "edge")
EDGE_LEN = 12  # elements per member of an edge-values operand (>= the scenarios of a type)
FLAG_OPS = ("all-reduce", "all-gather", "reduce-scatter")
OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "all-to-all-tuple",
       "ragged-all-to-all", "collective-permute", "collective-broadcast", "send-recv",
       "infeed-outfeed")
SHORT = {"all-reduce": "ar", "all-gather": "ag", "reduce-scatter": "rs", "all-to-all": "a2a",
         "all-to-all-tuple": "a2at", "ragged-all-to-all": "ra2a", "collective-permute": "cp",
         "collective-broadcast": "cb", "send-recv": "sr", "infeed-outfeed": "feed"}
MODE_SHORT = {CR: "cr", CP: "cp", CRP: "crp", FID: "fid"}
REDUCES = ("all-reduce", "reduce-scatter")
# Ops written in an async form too (start/done, or async-start/update/done around the op).
ASYNC_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "all-to-all-tuple",
             "collective-permute", "collective-broadcast")
ASYNC_ROW = "async start/done"
RED_NAMES = {"add": "add", "multiply": "multiply", "maximum": "maximum", "minimum": "minimum",
             "and": "and", "or": "or", "sel": "select"}


def row_of(op: str, red: str | None, sync: bool) -> str:
    """The case's row in the matrix."""
    if not sync:
        return ASYNC_ROW
    if op == "all-reduce":
        return f"all-reduce {RED_NAMES[red]}"
    return {"all-to-all-tuple": "all-to-all (tuple)", "send-recv": "send/recv",
            "infeed-outfeed": "infeed/outfeed"}.get(op, op)


ROWS = ([f"all-reduce {RED_NAMES[r]}" for r in RED_NAMES] + [
    "all-gather", "reduce-scatter", "all-to-all", "all-to-all (tuple)", "ragged-all-to-all",
    "collective-permute", "collective-broadcast", "send/recv", "infeed/outfeed", ASYNC_ROW])


# ---- variants: group mode x replica groups (or pairs) --------------------------------------
@dataclass
class Variant:
    vid: str
    mode: str
    groups: list[list[int]]            # in id space; [] = the empty list (all ids)
    attr: str                          # replica_groups / source_target_pairs text
    explicit_false: bool = False       # print use_global_device_ids=false
    pairs: list[tuple[int, int]] | None = None

    def device_groups(self, da) -> list[list[int]]:
        return expand(self.mode, self.groups, da, cover=not self.vid.endswith("_partial"))


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
    if n >= 4 and n % 2 == 0:
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


def _pair_variants(mode: str, n: int, m: str) -> list[Variant]:
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
    if op == "infeed-outfeed":
        return [Variant("feed", "feeds", [], "")]
    if op == "send-recv":
        by_partition = send_recv_by_partition(R, P)
        return [v for v in _pair_variants("channel", P if by_partition else R, "ch")
                if v.pairs]  # a channel nobody uses says nothing
    modes = [CR, CRP, FID] if op in FLAG_OPS else [CR, CP]
    if op == "collective-permute":
        return [v for mode in modes for v in _pair_variants(mode, id_count(mode, R, P),
                                                            MODE_SHORT[mode])]
    return [v for mode in modes for v in _group_variants(op, mode, R, P)]


def case_name(op: str, v: Variant, dt: str, kind: str, red: str | None, sync: bool) -> str:
    """The instruction's name, also the last part of the case's name."""
    return "_".join(x for x in (SHORT[op], v.vid, dt, kind, red,
                                "sync" if sync else "async") if x)


# ---- emitting one case ----------------------------------------------------------------------
class Emitter:
    """Writes cases of one op into a Program, two async ones in flight at a time. `prefix`
    makes the full case names (`n4/2x2/default/all-reduce/` + instruction name)."""

    def __init__(self, prog: Program, op: str, prefix: str = ""):
        self.prog, self.op, self.prefix = prog, op, prefix
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

    def emit(self, v: Variant, dt: str, kind: str, red: str | None, sync: bool,
             values: str | None = None) -> Check:
        """One case. `values`: the operands' values kind (values.py); by default small
        integers, or the edge values for kind "edge"."""
        prog = self.prog
        name = case_name(self.op, v, dt, kind, red, sync)
        if values is None:
            values = "edge" if kind == "edge" else "small"
            if red is not None:
                values += f":{red}"
        if self.op in ("send-recv", "infeed-outfeed"):
            groups, where = [], {}
        else:
            groups = v.device_groups(prog.da)
            where = {d: (g, g.index(d)) for g in groups for d in g}
        self.case = Check(self.prefix + name, row_of(self.op, red, sync), dt, v.mode,
                          exact="reduce" if self.op in REDUCES else "bits")
        self.key, self.values = self.case.name, values
        getattr(self, "_" + self.op.replace("-", "_"))(name, v, dt, kind, red, sync, groups,
                                                         where, len(groups[0]) if groups else 1)
        self.flush(keep=0 if sync else 1)
        return self.case

    # Each op: operand types for the shape kind, the HLO line(s), the expected leaves.
    def _params(self, tys):
        return [self.prog.param(t, f"{self.key}:{k}", self.values) for k, t in enumerate(tys)]

    def _same_shape(self, dt, kind, tuple_tys):
        """An op whose result has its operands' shapes: the operand types for the shape kind
        (`tuple_tys` for "tuple"), their parameters, the operands' text, the result type."""
        tys = {"scalar": [Ty(dt, ())], "zero": [Ty(dt, (0, 3))],
               "layout": [Ty(dt, (2, 3), (0, 1))], "tuple": tuple_tys,
               "long": [Ty(dt, (LONG,))], "edge": [Ty(dt, (EDGE_LEN,))]}[kind]
        ps = self._params(tys)
        res = tys[0].text() if len(tys) == 1 else tuple_text(tys)
        return tys, ps, ", ".join(p for p, _ in ps), res

    def _result(self, name, res_text, leaves, expected, shared_by=()):
        self.case.leaves = leaves
        self.case.expected = expected
        self.case.shared_by = list(shared_by)
        self.prog.add_check(self.case, name, res_text)

    def _async_pair(self, name, start_ty, done_ty, opcode, ops_text, attrs):
        self.prog.lines.append(f"  %{name}.s = {start_ty} {opcode}-start({ops_text}), {attrs}")
        self.pending.append(f"  %{name} = {done_ty} {opcode}-done(%{name}.s)")

    def _all_reduce(self, name, v, dt, kind, red, sync, groups, where, g):
        tys, ps, ops, res = self._same_shape(dt, kind, [Ty(dt, (3,)), Ty(dt, (2, 2))])
        attrs = f"{self.attrs(v)}, to_apply={self.prog.reducer(red, dt)}"
        if sync:
            self.prog.lines.append(f"  %{name} = {res} all-reduce({ops}), {attrs}")
        else:
            self._async_pair(name, res, res, "all-reduce", ops, attrs)
        prog = self.prog

        def expected(d):
            members = where[d][0]
            return [fold(red, dt, [prog.operand(m, i) for m in members]) for _, i in ps]
        self._result(name, res, len(tys), expected, groups)

    def _all_gather(self, name, v, dt, kind, red, sync, groups, where, g):
        tys, dim = {"scalar": ([Ty(dt, (1,))], 0), "zero": ([Ty(dt, (0, 2))], 1),
                    "layout": ([Ty(dt, (2, 3), (0, 1))], 1),
                    "tuple": ([Ty(dt, (2,)), Ty(dt, (1, 3))], 0),
                    "edge": ([Ty(dt, (EDGE_LEN,))], 0)}[kind]
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
            return [np.concatenate([prog.operand(m, i) for m in members], axis=dim)
                    for _, i in ps]
        self._result(name, res, len(tys), expected, groups)

    def _reduce_scatter(self, name, v, dt, kind, red, sync, groups, where, g):
        tys, dim = {"scalar": ([Ty(dt, (g,))], 0), "zero": ([Ty(dt, (0, g))], 1),
                    "layout": ([Ty(dt, (2, 2 * g), (0, 1))], 1),
                    "tuple": ([Ty(dt, (g,)), Ty(dt, (2 * g, 2))], 0),
                    "edge": ([Ty(dt, (EDGE_LEN * g,))], 0)}[kind]
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
            return [np.split(fold(red, dt, [prog.operand(m, i) for m in members]), g,
                             axis=dim)[pos] for _, i in ps]
        self._result(name, res, len(tys), expected)

    def _all_to_all(self, name, v, dt, kind, red, sync, groups, where, g):
        ty, dim = {"scalar": (Ty(dt, (g,)), 0), "zero": (Ty(dt, (0, g)), 1),
                   "layout": (Ty(dt, (2 * g, 3), (0, 1)), 0),
                   "tuple": (Ty(dt, (2, g, 2)), 1), "edge": (Ty(dt, (EDGE_LEN * g,)), 0)}[kind]
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
            return [np.concatenate([np.split(prog.operand(m, i), g, axis=dim)[pos]
                                    for m in members], axis=dim)]
        self._result(name, ty.text(), 1, expected)

    def _all_to_all_tuple(self, name, v, dt, kind, red, sync, groups, where, g):
        ty = {"scalar": Ty(dt, ()), "zero": Ty(dt, (0, 2)), "layout": Ty(dt, (2, 3), (0, 1)),
              "tuple": Ty(dt, (2,)), "edge": Ty(dt, (EDGE_LEN,))}[kind]
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
            return [prog.operand(m, ps[pos][1]) for m in members]
        self._result(name, res, g, expected)

    def _ragged_all_to_all(self, name, v, dt, kind, red, sync, groups, where, g):
        # Member i sends size(i, j) rows to member j; chunks sit back to back in the input
        # and land in j's output after one untouched row, in sender order (C.16).
        def size(i, j):
            return (i + 2 * j + 1) % 3

        rows_in = max(sum(size(i, j) for j in range(g)) for i in range(g)) + 1
        rows_out = max(1 + sum(size(i, j) for i in range(g)) for j in range(g)) + 1
        tail = {"scalar": (), "zero": (0,), "layout": (3,), "tuple": (2, 2), "edge": ()}[kind]
        layout = (0, 1) if kind == "layout" else None
        x_ty = Ty(dt, (rows_in * (EDGE_LEN if kind == "edge" else 1), *tail), layout)
        out_ty = Ty(dt, (rows_out * (EDGE_LEN if kind == "edge" else 1), *tail), layout)
        unit = EDGE_LEN if kind == "edge" else 1  # rows per counted row
        meta_dt = "s64" if kind == "tuple" else "s32"
        mt = dtype(meta_dt)

        def pos_of(d):
            return where[d][1]

        def in_off(i, j):
            return unit * sum(size(i, k) for k in range(j))

        def out_off(i, j):
            return unit * (1 + sum(size(k, j) for k in range(i)))

        metas = {
            "in_off": lambda d: np.array([in_off(pos_of(d), j) for j in range(g)], mt),
            "send": lambda d: np.array([unit * size(pos_of(d), j) for j in range(g)], mt),
            "out_off": lambda d: np.array([out_off(pos_of(d), j) for j in range(g)], mt),
            "recv": lambda d: np.array([unit * size(i, pos_of(d)) for i in range(g)], mt)}
        (px, ix), (po, io) = self._params([x_ty, out_ty])
        meta_ty = Ty(meta_dt, (g,))
        mps = [self.prog.param(meta_ty, f"{self.key}:{k}", given=f) for k, f in metas.items()]
        ops = ", ".join([px, po] + [p for p, _ in mps])
        self.prog.lines.append(f"  %{name} = {out_ty.text()} ragged-all-to-all({ops}), "
                               f"{self.attrs(v)}")
        prog = self.prog

        def expected(d):
            members, pos = where[d]
            out = prog.operand(d, io).copy()
            for i, m in enumerate(members):
                rows = unit * size(i, pos)
                src = prog.operand(m, ix)[in_off(i, pos):in_off(i, pos) + rows]
                out[out_off(i, pos):out_off(i, pos) + rows] = src
            return [out]
        self._result(name, out_ty.text(), 1, expected)

    def _collective_permute(self, name, v, dt, kind, red, sync, groups, where, g):
        # an async tuple form of these has one array (its start's shape cannot hold more)
        tuple_tys = [Ty(dt, (2,)), Ty(dt, (1, 3))] if sync else [Ty(dt, (4,))]
        tys, ps, ops, res = self._same_shape(dt, kind, tuple_tys)
        attrs = self.attrs(v)
        if sync:
            self.prog.lines.append(f"  %{name} = {res} collective-permute({ops}), {attrs}")
        else:
            start = f"({res}, {res}, u32[], u32[])"
            self._async_pair(name, start, res, "collective-permute", ops, attrs)
        prog = self.prog
        sources = pair_sources(v.pairs, v.mode != CR, prog.da)

        def expected(d):
            src = sources.get(d)
            return [np.zeros(t.dims, dtype(dt)) if src is None else prog.operand(src, i)
                    for (_, i), t in zip(ps, tys)]
        self._result(name, res, len(tys), expected)

    def _collective_broadcast(self, name, v, dt, kind, red, sync, groups, where, g):
        # an async tuple form of these has one array (its start's shape cannot hold more)
        tuple_tys = [Ty(dt, (2,)), Ty(dt, (1, 3))] if sync else [Ty(dt, (4,))]
        tys, ps, ops, res = self._same_shape(dt, kind, tuple_tys)
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
                return [np.zeros(t.dims, dtype(dt)) for t in tys]
            root = where[d][0][0]
            return [prog.operand(root, i) for _, i in ps]
        self._result(name, res, len(tys), expected, groups)

    def _send_recv(self, name, v, dt, kind, red, sync, groups, where, g):
        ty = {"scalar": Ty(dt, ()), "zero": Ty(dt, (0, 3)), "layout": Ty(dt, (2, 3), (0, 1)),
              "tuple": Ty(dt, (4,)), "edge": Ty(dt, (EDGE_LEN,))}[kind]
        (p, i), = self._params([ty])
        prog = self.prog
        ch = prog.next_channel()
        tok = f"%{name}.t"
        fa = ("frontend_attributes={_xla_send_recv_source_target_pairs=\""
              + group_attr([list(q) for q in v.pairs]) + "\"}")
        t = ty.text()
        prog.lines += [
            f"  {tok} = token[] after-all()",
            f"  %{name}.r = ({t}, u32[], token[]) recv({tok}), channel_id={ch}, {fa}",
            f"  %{name}.s = ({t}, u32[], token[]) send({p}, {tok}), channel_id={ch}, {fa}",
            f"  %{name}.rd = ({t}, token[]) recv-done(%{name}.r), channel_id={ch}",
            f"  %{name}.sd = token[] send-done(%{name}.s), channel_id={ch}",
            f"  %{name} = {t} get-tuple-element(%{name}.rd), index=0"]
        sources = pair_sources(v.pairs, send_recv_by_partition(prog.R, prog.P), prog.da)

        def expected(d):  # a recv no pair targets yields zeros (D.21a)
            src = sources.get(d)
            return [np.zeros(ty.dims, dtype(dt)) if src is None else prog.operand(src, i)]
        self._result(name, t, 1, expected)

    def _infeed_outfeed(self, name, v, dt, kind, red, sync, groups, where, g):
        tys = {"scalar": [Ty(dt, ())], "zero": [Ty(dt, (0, 3))],
               "layout": [Ty(dt, (2, 3), (0, 1))], "tuple": [Ty(dt, (2,)), Ty(dt, (1, 3))],
               "edge": [Ty(dt, (EDGE_LEN,))]}[kind]
        prog = self.prog
        (p, i), = self._params([tys[0]])  # outfed back
        fed_ty = tys[0].text() if len(tys) == 1 else tuple_text(tys)

        key, values = self.key, self.values

        def item(d):
            arrays = [make_input(prog.seed, d, f"{key}:in{k}", t.dims, dt, values)
                      for k, t in enumerate(tys)]
            return arrays[0] if len(arrays) == 1 else tuple(arrays)
        for d in range(prog.n):
            prog.infeed_items.setdefault(d, []).append(item(d))
        tok = prog.next_token()
        prog.lines += [
            f"  %{name}.in = ({fed_ty}, token[]) infeed({tok})",
            f"  %{name}.it = token[] get-tuple-element(%{name}.in), index=1",
            f"  %{name} = {fed_ty} get-tuple-element(%{name}.in), index=0",
            f"  %{name}.out = token[] outfeed({p}, %{name}.it), "
            f"outfeed_shape={tys[0].text()}"]
        prog.token = f"%{name}.out"
        self.case.first_item, self.case.items = prog.outfeed_count, 1
        prog.outfeed_count += 1

        def expected(d):
            got = item(d)
            return (list(got) if isinstance(got, tuple) else [got]) + [prog.operand(d, i)]
        self._result(name, fed_ty, len(tys), expected)
