"""Random multi-device HLO programs for the deadlock check's soundness tests.

`programs()` (a hypothesis strategy of Program) writes a module of 2-5 devices in replica,
partition or mixed mode whose entry takes `x: f32[2]` (data) and `m: s32[]` (data that may
decide a trip count or a branch) and threads `x` through a list of items, each one of:

  ar         all-reduce over random groups (unequal sizes allowed, {{0},{1,2}})
  bcast      collective-broadcast over partial groups (random roots, devices in no group)
  permute    collective-permute over a random partial permutation
  ar_async   all-reduce-start ... all-reduce-done around another item
  wrap       a generic async-start wrapping an all-reduce (the runtime runs it at the start)
  p2p        a send and a recv with agreeing, disagreeing, partial or one-sided pairs, on one
             channel, on two (sends on c, recvs on c + 1: XLA's pipeliner) or none, in one
             computation in a random order or split over two called computations (recv
             first or send first), some with mismatched shapes
  pipe       a loop whose sends and recvs are issued in one iteration and completed in the
             next (their handles in the loop state)
  branch     a conditional on replica-id / partition-id (compared, % 2, looked up in a
             constant table), on `m`, on an all-reduce of `m` (compared, or % 2 as an s32
             index), or on a constant
  loop       a while loop whose trip count is a constant, id-dependent (id + c, or looked up),
             `m`, or an all-reduce max of `m`; with no, a true or a false known_trip_count

Items nest (branches and loops hold items) up to depth 2. An all-reduce of `m` that decides
a branch or a trip count is over every device or over a random partition of the devices
into groups (then each group decides alone, `lax.cond(psum(x, 'row') > 0, ...)`); the items
inside such a branch or loop either all keep their groups, pairs and broadcast groups within
those groups (no two groups meet there) or each draws whether to (crossing: the groups may
meet where they decided apart, a real hang). A permute's group is every id of a replica
(named in its pairs or not), so within groups that split them an all-reduce within them
stands in for it. `programs(decided_by_groups=True)` puts one such branch or loop in every
module; Program.decided says which kind a module is. Some modules are `is_scheduled`
(their text order is run as written). Values do not matter to the check; control depends on
ids, constants, counters, `m` and all-reduces of `m` only, which is what
tests/analysis/deadlock/reference.py computes exactly.
"""

from __future__ import annotations

import contextlib
import re
from typing import NamedTuple

from hypothesis import strategies as st

PAIRS = "_xla_send_recv_source_target_pairs"
X = "f32[2]{0}"
STATE = f"(s32[], {X}, s32[])"
LEAF = ["ar", "bcast", "permute", "ar_async", "wrap", "p2p", "p2p"]
NESTED = ["branch", "loop"]


def _groups_text(groups) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


class _Writer:
    """HLO text of one module being drawn."""

    def __init__(self, draw, R: int, P: int, decided_by_groups: bool = False):
        self.draw, self.R, self.P = draw, R, P
        # One entry item is a branch or loop decided by an all-reduce over groups.
        self.force = decided_by_groups
        self.n = R * P
        self.K = P if P > 1 else R          # ids of pairs, permutes, broadcasts
        self.comps: list[str] = []
        self.count = 0
        self.channel = 0
        self.scheduled = draw(st.booleans()) and draw(st.booleans())
        self.uniform_m = None                # the entry's all-reduce of m, if any
        # The device groups of the all-reduce of m deciding the branch or loop being written,
        # device -> its group, and whether every item inside stays within them.
        self.scope_groups: list[list[int]] | None = None
        self.scope: dict[int, int] = {}
        self.scope_strict = False
        # What the items inside such branches and loops did: "within" (groups, pairs and
        # broadcast groups inside one deciding group each), "crossing" (some did not).
        self.decided: set[str] = set()

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"%{stem}{self.count}"

    def next_channel(self) -> int:
        self.channel += 2
        return self.channel

    # ---- random pieces -----------------------------------------------------------------
    def perm(self, partial: bool = True, within: bool = False) -> list[tuple[int, int]]:
        """Source-target pairs: a random partial permutation of the K ids (no self pairs);
        `within`: only pairs inside one deciding group (maybe none)."""
        draw, K = self.draw, self.K
        targets = draw(st.permutations(range(K)))
        pairs = [(s, t) for s, t in enumerate(targets) if s != t]
        if partial and pairs:
            keep = draw(st.lists(st.booleans(), min_size=len(pairs), max_size=len(pairs)))
            pairs = [p for p, k in zip(pairs, keep) if k] or pairs[:1]
        return [p for p in pairs if self.inside(p)] if within else pairs

    def ar_ids(self) -> int:
        """How many ids an all-reduce's groups range over (replica ids, or global ids)."""
        return self.R if self.P == 1 else self.n

    def ar_device(self, i: int) -> int:
        """The device of all-reduce id i: a replica id, or a global id (replica * P +
        partition) placed as DeviceAssignment.default does (partition * R + replica)."""
        return i if self.P == 1 else (i % self.P) * self.R + i // self.P

    def ar_id(self, d: int) -> int:
        """The all-reduce id of device d (the inverse of ar_device)."""
        return d if self.P == 1 else (d % self.R) * self.P + d // self.R

    def within(self) -> bool:
        """Whether the next item's groups stay within the deciding all-reduce's groups."""
        return bool(self.scope) and (self.scope_strict or self.draw(st.booleans()))

    def mark(self, inside: bool) -> None:
        """Record an item written inside a branch or loop decided by groups."""
        if self.scope:
            self.decided.add("within" if inside else "crossing")

    def inside(self, ids) -> bool:
        """Whether ids of a permute, a send/recv or a broadcast (partition ids inside every
        replica, or replica ids when P == 1) name devices of one deciding group only (or no
        group decides)."""
        if not self.scope:
            return True
        for r in (range(self.R) if self.P > 1 else [0]):
            devices = {k * self.R + r if self.P > 1 else k for k in ids}
            if len({self.scope[d] for d in devices}) > 1:
                return False
        return True

    def partition(self, ids: int, split: bool = False) -> list[list[int]]:
        """Random groups covering 0..ids-1, of unequal sizes (`split`: at least two)."""
        draw = self.draw
        order = draw(st.permutations(range(ids)))
        cuts = sorted(set(draw(st.lists(st.integers(1, max(ids - 1, 1)), min_size=int(split),
                                        max_size=3))))
        groups, last = [], 0
        for c in cuts + [ids]:
            if c > last:
                groups.append(sorted(order[last:c]))
                last = c
        return groups

    def device_id(self, lines) -> str:
        """A u32 id that varies between devices: partition-id or replica-id."""
        v = self.fresh("id")
        which = ("partition-id" if self.R == 1 else "replica-id" if self.P == 1 else
                 self.draw(st.sampled_from(["partition-id", "replica-id"])))
        lines.append(f"{v} = u32[] {which}()")
        return v

    def const(self, lines, ty: str, value) -> str:
        v = self.fresh("c")
        lines.append(f"{v} = {ty}[] constant({value})")
        return v

    # ---- items -------------------------------------------------------------------------
    def items(self, lines, x: str, depth: int, counter: str | None) -> str:
        kinds = LEAF + (NESTED if depth < 2 else [])
        for kind in self.draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3)):
            x = getattr(self, f"item_{kind}")(lines, x, depth, counter)
        return x

    def _all_reduce(self, lines, x, op="all-reduce", groups=None) -> str:
        v = self.fresh("ar")
        if groups is None:
            groups = (self.refine(self.scope_groups) if self.within() else
                      self.partition(self.ar_ids()))
        self.mark(all(len({self.scope.get(self.ar_device(i)) for i in g}) == 1
                      for g in groups))
        if self.P == 1:
            attrs = f"replica_groups={_groups_text(groups)}"
        else:
            attrs = (f"channel_id={self.next_channel()}, replica_groups="
                     f"{_groups_text(groups)}, use_global_device_ids=true")
        lines.append(f"{v} = {X} {op}({x}), {attrs}, to_apply=%add")
        return v

    def refine(self, groups) -> list[list[int]]:
        """Each device group split at random: all-reduce groups within the given ones."""
        out = []
        for g in groups:
            ids = sorted(self.ar_id(d) for d in g)
            out += [sorted(ids[i] for i in part) for part in self.partition(len(ids))]
        return out

    def item_ar(self, lines, x, depth, counter):
        return self._all_reduce(lines, x)

    def item_bcast(self, lines, x, depth, counter):
        """Groups of one size (the verifier's rule), first member the root; ids left in no
        group receive zeros at once."""
        v = self.fresh("bc")
        channel = f"channel_id={self.next_channel()}, " if self.P > 1 else ""
        size = self.draw(st.integers(1, self.K))
        order = self.draw(st.permutations(range(self.K)))
        groups = [list(order[i:i + size]) for i in range(0, self.K - size + 1, size)]
        groups = groups[:self.draw(st.integers(1, len(groups)))]
        if self.within():
            groups = [g for g in groups if self.inside(g)] or [groups[0][:1]]
        self.mark(all(self.inside(g) for g in groups))
        lines.append(f"{v} = {X} collective-broadcast({x}), {channel}"
                     f"replica_groups={_groups_text(groups)}")
        return v

    def item_permute(self, lines, x, depth, counter):
        """Every id of a replica (a partition without a channel) meets a permute, named in
        its pairs or not: within deciding groups that split them, an all-reduce instead."""
        if self.within() and not self.inside(range(self.K)):
            return self._all_reduce(lines, x, groups=self.refine(self.scope_groups))
        self.mark(self.inside(range(self.K)))
        v = self.fresh("cp")
        channel = f"channel_id={self.next_channel()}, " if self.P > 1 else ""
        lines.append(f"{v} = {X} collective-permute({x}), {channel}"
                     f"source_target_pairs={_groups_text(self.perm())}")
        return v

    def item_ar_async(self, lines, x, depth, counter):
        start = self._all_reduce(lines, x, op="all-reduce-start")
        y = self.draw(st.sampled_from(["ar", "p2p", "permute"]))
        mid = getattr(self, f"item_{y}")(lines, x, depth, counter)
        done = self.fresh("ard")
        lines.append(f"{done} = {X} all-reduce-done({start})")
        v = self.fresh("sum")
        lines.append(f"{v} = {X} add({done}, {mid})")
        return v

    def item_wrap(self, lines, x, depth, counter):
        comp = self.fresh("wrapped")[1:]
        body: list[str] = []
        out = self._all_reduce(body, "%p")
        self.comps.append(f"%{comp} (p: f32[2]) -> f32[2] {{\n  %p = {X} parameter(0)\n  "
                          + "\n  ".join(body[:-1] + ["ROOT " + body[-1]]) + "\n}\n")
        del out
        start, done = self.fresh("as"), self.fresh("ad")
        lines.append(f"{start} = (({X}), {X}, u32[]) async-start({x}), calls=%{comp}")
        y = self.draw(st.sampled_from(["ar", "p2p"]))
        mid = getattr(self, f"item_{y}")(lines, x, depth, counter)
        lines.append(f"{done} = {X} async-done({start}), calls=%{comp}")
        v = self.fresh("sum")
        lines.append(f"{v} = {X} add({done}, {mid})")
        return v

    def _p2p_attrs(self):
        """(send attrs, recv attrs, recv shape) of one transfer."""
        draw = self.draw
        within = self.within()
        send_pairs = self.perm(within=within)
        how = draw(st.sampled_from(["agree", "agree", "disagree", "partial"]))
        recv_pairs = (send_pairs if how == "agree" else self.perm(within=within)
                      if how == "disagree" else send_pairs[:max(1, len(send_pairs) - 1)])
        self.mark(all(self.inside(p) for p in send_pairs + recv_pairs))
        chan = draw(st.sampled_from(["same", "same", "split", "none"]))
        c = self.next_channel()
        sc = "" if chan == "none" else f", channel_id={c}"
        rc = "" if chan == "none" else f", channel_id={c + 1 if chan == 'split' else c}"
        shape = "f32[3]{0}" if draw(st.integers(0, 9)) == 0 else X
        return (f'{sc}, frontend_attributes={{{PAIRS}="{_groups_text(send_pairs)}"}}', sc,
                f'{rc}, frontend_attributes={{{PAIRS}="{_groups_text(recv_pairs)}"}}', rc,
                shape)

    def _send(self, lines, x, attrs, done_attrs, tok):
        s, sd = self.fresh("s"), self.fresh("sd")
        lines += [f"{s} = ({X}, u32[], token[]) send({x}, {tok}){attrs}",
                  f"{sd} = token[] send-done({s}){done_attrs}"]

    def _recv(self, lines, x, attrs, done_attrs, tok, shape) -> str:
        r, rd, d = self.fresh("r"), self.fresh("rd"), self.fresh("d")
        lines += [f"{r} = ({shape}, u32[], token[]) recv({tok}){attrs}",
                  f"{rd} = ({shape}, token[]) recv-done({r}){done_attrs}",
                  f"{d} = {shape} get-tuple-element({rd}), index=0"]
        if shape != X:
            return x
        v = self.fresh("sum")
        lines.append(f"{v} = {X} add({x}, {d})")
        return v

    def item_p2p(self, lines, x, depth, counter):
        sa, sda, ra, rda, shape = self._p2p_attrs()
        sides = self.draw(st.sampled_from(["both", "both", "both", "send", "recv"]))
        layout = self.draw(st.sampled_from(["one", "one", "split_recv_first",
                                            "split_send_first"]))
        if sides != "both" or layout == "one":
            tok = self.fresh("tok")
            lines.append(f"{tok} = token[] after-all()")
            block: list[str] = []
            y = x
            if sides in ("both", "recv"):
                y = self._recv(block, x, ra, rda, tok, shape)
            if sides in ("both", "send"):
                self._send(block, x, sa, sda, tok)   # x: not waiting for the recv's data
            lines += self._shuffle(block) if self.scheduled else block
            return y
        recv_first = layout == "split_recv_first"
        for part in (["recv", "send"] if recv_first else ["send", "recv"]):
            comp = self.fresh("xfer")[1:]
            body = ["%t = token[] after-all()"]
            y = "%a"
            if part == "recv":
                y = self._recv(body, y, ra, rda, "%t", shape)
            else:
                self._send(body, y, sa, sda, "%t")
            self.comps.append(f"%{comp} (a: f32[2]) -> f32[2] {{\n  %a = {X} parameter(0)\n  "
                              + "\n  ".join(body) + f"\n  ROOT %o = {X} copy({y})\n}}\n")
            v = self.fresh("call")
            lines.append(f"{v} = {X} call({x}), to_apply=%{comp}")
            x = v
        return x

    def _shuffle(self, block: list[str]) -> list[str]:
        """The block's lines in a random order that keeps every definition before its uses
        (the text order is what a scheduled module runs)."""
        defined = {ln.split(" = ")[0]: ln for ln in block}
        uses = {ln: set(re.findall(r"%[\w.-]+", ln.split(" = ", 1)[1])) & set(defined)
                for ln in block}
        out, done = [], set()
        left = list(block)
        while left:
            ready = [ln for ln in left if uses[ln] <= done]
            pick = self.draw(st.sampled_from(ready))
            out.append(pick)
            left.remove(pick)
            done.add(pick.split(" = ")[0])
        return out

    def _index(self, lines, depth) -> tuple[str, str, list[list[int]] | None]:
        """(a conditional's index operand, 'pred' or 's32', the groups of the all-reduce
        deciding it when not every device)."""
        draw = self.draw
        kinds = ["cmp", "mod", "table", "const"] + (["data", "uniform", "uniform"]
                                                    if depth == 0 else [])
        kind = "uniform" if self.force else draw(st.sampled_from(kinds))
        p = self.fresh("p")
        if kind in ("cmp", "mod", "table"):
            i = self.device_id(lines)
            if kind == "cmp":
                c = self.const(lines, "u32", draw(st.integers(0, self.K)))
                lines.append(f"{p} = pred[] compare({i}, {c}), direction=LT")
                return p, "pred", None
            if kind == "mod":
                c = self.const(lines, "u32", 2)
                r = self.fresh("rem")
                lines += [f"{r} = u32[] remainder({i}, {c})", f"{p} = s32[] convert({r})"]
                return p, "s32", None
            ids = self.R if self.P == 1 else self.n
            table = draw(st.lists(st.integers(0, 1), min_size=ids, max_size=ids))
            t, s, si = self.fresh("tbl"), self.fresh("sl"), self.fresh("si")
            lines += [f"{t} = s32[{ids}]{{0}} constant({{{','.join(map(str, table))}}})",
                      f"{si} = s32[] convert({i})",
                      f"{s} = s32[1]{{0}} dynamic-slice({t}, {si}), dynamic_slice_sizes={{1}}",
                      f"{p} = s32[] reshape({s})"]
            return p, "s32", None
        if kind == "const":
            lines.append(f"{p} = pred[] constant({draw(st.sampled_from(['true', 'false']))})")
            return p, "pred", None
        m, groups = ("%m", None) if kind == "data" else self.uniform(lines, ["max", "addi"])
        if kind == "uniform" and draw(st.booleans()):
            c = self.const(lines, "s32", 2)
            lines.append(f"{p} = s32[] remainder({m}, {c})")
            return p, "s32", groups
        c = self.const(lines, "s32", draw(st.integers(0, 2)))
        lines.append(f"{p} = pred[] compare({m}, {c}), direction=GT")
        return p, "pred", groups

    def uniform(self, lines, reducers=("max",)) -> tuple[str, list[list[int]] | None]:
        """(an all-reduce of m, None) over every device (the entry's one, a max: the same on
        all), or (one over a random partition of the devices, its device groups): the same
        within each group. With partitions, its groups are global ids, or replica ids (no
        channel: one group per partition; a channel without global ids: every partition of
        the replicas). `reducers`: the s32 computations it may reduce with."""
        if self.force or self.draw(st.integers(0, 2)):
            self.force = False
            R, P = self.R, self.P
            # (With one replica, replica groups are each device alone, or all in one.)
            mode = "replica" if P == 1 else self.draw(st.sampled_from(
                ["global", "global", "replica"] + (["replica_and_partition"] if R > 1 else [])))
            groups = self.partition(self.n if mode == "global" else R, split=True)
            text = _groups_text(groups)
            if mode == "global":
                attrs = (f"channel_id={self.next_channel()}, replica_groups={text}, "
                         "use_global_device_ids=true")
                devices = [[self.ar_device(i) for i in g] for g in groups]
            elif mode == "replica":
                attrs = f"replica_groups={text}"
                devices = [[p * R + r for r in g] for g in groups for p in range(P)]
            else:
                attrs = f"channel_id={self.next_channel()}, replica_groups={text}"
                devices = [[p * R + r for r in g for p in range(P)] for g in groups]
            v, reducer = self.fresh("um"), self.draw(st.sampled_from(list(reducers)))
            lines.append(f"{v} = s32[] all-reduce(%m), {attrs}, to_apply=%{reducer}")
            return v, devices
        if self.uniform_m is None:
            self.uniform_m = "%um"
            if self.P == 1:
                lines.append("%um = s32[] all-reduce(%m), replica_groups={}, to_apply=%max")
            else:
                everyone = _groups_text([list(range(self.n))])
                lines.append(f"%um = s32[] all-reduce(%m), channel_id={self.next_channel()}, "
                             f"replica_groups={everyone}, use_global_device_ids=true, "
                             "to_apply=%max")
        return self.uniform_m, None

    @contextlib.contextmanager
    def deciding(self, groups):
        """Items written inside: in a branch or loop decided by an all-reduce over `groups`
        (None: nothing new, the enclosing decision holds), strictly within them or not."""
        saved = self.scope_groups, self.scope, self.scope_strict
        if groups is not None:
            self.scope_groups = groups
            self.scope = {d: k for k, g in enumerate(groups) for d in g}
            self.scope_strict = self.draw(st.booleans())
        try:
            yield
        finally:
            self.scope_groups, self.scope, self.scope_strict = saved

    def _branch_comp(self, depth, counter, filled: bool = False) -> str:
        """A branch's computation: items, or (unless `filled`) none."""
        comp = self.fresh("br")[1:]
        body: list[str] = []
        y = (self.items(body, "%a", depth + 1, None) if filled or self.draw(st.integers(0, 3))
             else "%a")
        self.comps.append(f"%{comp} (a: f32[2]) -> f32[2] {{\n  %a = {X} parameter(0)\n  "
                          + "\n  ".join(body) + f"\n  ROOT %o = {X} copy({y})\n}}\n")
        return comp

    def item_branch(self, lines, x, depth, counter):
        index, ty, groups = self._index(lines, depth)
        if counter is not None and self.draw(st.booleans()):
            c = self.const(lines, "s32", 2)      # the loop counter's parity
            index, ty, groups = self.fresh("par"), "s32", None
            lines.append(f"{index} = s32[] remainder({counter}, {c})")
        with self.deciding(groups):
            # (Decided by groups: items in one branch at least.)
            a = self._branch_comp(depth, counter, filled=groups is not None)
            b = self._branch_comp(depth, counter)
        v = self.fresh("cond")
        if ty == "pred":
            lines.append(f"{v} = {X} conditional({index}, {x}, {x}), true_computation=%{a}, "
                         f"false_computation=%{b}")
        else:
            lines.append(f"{v} = {X} conditional({index}, {x}, {x}), "
                         f"branch_computations={{%{a}, %{b}}}")
        return v

    def _trip(self, lines, depth) -> tuple[str, int | None, list[list[int]] | None]:
        """(the loop's bound, its value when the same on every device, the groups of the
        all-reduce deciding it when not every device)."""
        draw = self.draw
        kinds = ["const", "const", "id", "table"] + (["data", "uniform", "uniform"]
                                                      if depth == 0 else [])
        kind = "uniform" if self.force else draw(st.sampled_from(kinds))
        if kind == "const":
            n = draw(st.integers(0, 4))
            return self.const(lines, "s32", n), n, None
        if kind == "data":
            return "%m", None, None
        if kind == "uniform":
            lim, groups = self.uniform(lines)
            return lim, None, groups
        i = self.device_id(lines)
        si, v = self.fresh("si"), self.fresh("lim")
        lines.append(f"{si} = s32[] convert({i})")
        if kind == "id":
            c = self.const(lines, "s32", draw(st.integers(0, 2)))
            lines.append(f"{v} = s32[] add({si}, {c})")
            return v, None, None
        ids = self.R if self.P == 1 else self.n
        table = draw(st.lists(st.integers(0, 3), min_size=ids, max_size=ids))
        t, s = self.fresh("tbl"), self.fresh("sl")
        lines += [f"{t} = s32[{ids}]{{0}} constant({{{','.join(map(str, table))}}})",
                  f"{s} = s32[1]{{0}} dynamic-slice({t}, {si}), dynamic_slice_sizes={{1}}",
                  f"{v} = s32[] reshape({s})"]
        return v, None, None

    def item_loop(self, lines, x, depth, counter):
        lim, n, groups = self._trip(lines, depth)
        cond, body = self.fresh("cond")[1:], self.fresh("body")[1:]
        self.comps.append(f"%{cond} (p: {STATE}) -> pred[] {{\n  %p = {STATE} parameter(0)\n"
                          "  %i = s32[] get-tuple-element(%p), index=0\n"
                          "  %l = s32[] get-tuple-element(%p), index=2\n"
                          "  ROOT %lt = pred[] compare(%i, %l), direction=LT\n}\n")
        b: list[str] = ["%p = " + STATE + " parameter(0)",
                        "%i = s32[] get-tuple-element(%p), index=0",
                        f"%y = {X} get-tuple-element(%p), index=1",
                        "%l = s32[] get-tuple-element(%p), index=2",
                        "%one = s32[] constant(1)", "%i1 = s32[] add(%i, %one)"]
        with self.deciding(groups):
            y = self.items(b, "%y", depth + 1, "%i")
        b.append(f"ROOT %next = {STATE} tuple(%i1, {y}, %l)")
        self.comps.append(f"%{body} (p: {STATE}) -> {STATE} {{\n  " + "\n  ".join(b) + "\n}\n")
        known = self.draw(st.sampled_from(["none", "none", "true", "false"]))
        if known == "false":
            n = self.draw(st.integers(0, 4))    # a count the condition may not agree with
        attr = ("" if known == "none" or n is None else
                f', backend_config={{"known_trip_count":{{"n":"{n}"}}}}')
        z, t, w, v = self.fresh("z"), self.fresh("t"), self.fresh("w"), self.fresh("lo")
        lines += [f"{z} = s32[] constant(0)", f"{t} = {STATE} tuple({z}, {x}, {lim})",
                  f"{w} = {STATE} while({t}), condition=%{cond}, body=%{body}{attr}",
                  f"{v} = {X} get-tuple-element({w}), index=1"]
        return v

    def item_pipe(self, lines, x, depth, counter):
        """A pipelined transfer: send and recv before the loop, their dones in the next
        iteration (handles in the loop state), the last dones after it."""
        if depth > 0:
            return self.item_p2p(lines, x, depth, counter)
        sa, sda, ra, rda, _ = self._p2p_attrs()
        ctx = f"({X}, u32[], token[])"
        state = f"(s32[], {X}, {ctx}, {ctx})"
        n = self.draw(st.integers(0, 3))
        cond, body = self.fresh("pcond")[1:], self.fresh("pbody")[1:]
        self.comps.append(f"%{cond} (p: {state}) -> pred[] {{\n  %p = {state} parameter(0)\n"
                          "  %i = s32[] get-tuple-element(%p), index=0\n"
                          f"  %n = s32[] constant({n})\n"
                          "  ROOT %lt = pred[] compare(%i, %n), direction=LT\n}\n")
        self.comps.append(
            f"%{body} (p: {state}) -> {state} {{\n  %p = {state} parameter(0)\n"
            "  %i = s32[] get-tuple-element(%p), index=0\n"
            f"  %y = {X} get-tuple-element(%p), index=1\n"
            f"  %sc = {ctx} get-tuple-element(%p), index=2\n"
            f"  %rc = {ctx} get-tuple-element(%p), index=3\n"
            f"  %sd = token[] send-done(%sc){sda}\n"
            f"  %rd = ({X}, token[]) recv-done(%rc){rda}\n"
            f"  %d = {X} get-tuple-element(%rd), index=0\n"
            f"  %y1 = {X} add(%y, %d)\n"
            "  %t = token[] after-all(%sd)\n"
            f"  %s = {ctx} send(%y1, %t){sa}\n"
            f"  %r = {ctx} recv(%t){ra}\n"
            "  %one = s32[] constant(1)\n  %i1 = s32[] add(%i, %one)\n"
            f"  ROOT %next = {state} tuple(%i1, %y1, %s, %r)\n}}\n")
        tok, s, r, z, t, w = (self.fresh(k) for k in ("tok", "s", "r", "z", "t", "w"))
        sc, rc, sd, rd, d, v, y = (self.fresh(k) for k in ("sc", "rc", "sd", "rd", "d", "v",
                                                           "y"))
        lines += [f"{tok} = token[] after-all()", f"{s} = {ctx} send({x}, {tok}){sa}",
                  f"{r} = {ctx} recv({tok}){ra}", f"{z} = s32[] constant(0)",
                  f"{t} = {state} tuple({z}, {x}, {s}, {r})",
                  f"{w} = {state} while({t}), condition=%{cond}, body=%{body}",
                  f"{sc} = {ctx} get-tuple-element({w}), index=2",
                  f"{rc} = {ctx} get-tuple-element({w}), index=3",
                  f"{sd} = token[] send-done({sc}){sda}",
                  f"{rd} = ({X}, token[]) recv-done({rc}){rda}",
                  f"{d} = {X} get-tuple-element({rd}), index=0",
                  f"{y} = {X} get-tuple-element({w}), index=1",
                  f"{v} = {X} add({y}, {d})"]
        return v

    def module(self) -> str:
        entry = ["%x = f32[2]{0} parameter(0)", "%m = s32[] parameter(1)"]
        x = "%x"
        kinds = self.draw(st.lists(st.sampled_from(LEAF + NESTED + ["pipe"]), min_size=1,
                                   max_size=4))
        forced = None
        if self.force:
            forced = self.draw(st.integers(0, len(kinds)))
            kinds.insert(forced, self.draw(st.sampled_from(NESTED)))
        for k, kind in enumerate(kinds):
            self.force = k == forced
            x = getattr(self, f"item_{kind}")(entry, x, 0, None)
        header = f"HloModule gen, replica_count={self.R}, num_partitions={self.P}"
        if self.scheduled:
            header = header.replace("HloModule gen,", "HloModule gen, is_scheduled=true,")
        return "\n".join([
            header, "",
            "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
            "  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n",
            "%max (a: s32[], b: s32[]) -> s32[] {\n  %a = s32[] parameter(0)\n"
            "  %b = s32[] parameter(1)\n  ROOT %s = s32[] maximum(%a, %b)\n}\n",
            "%addi (a: s32[], b: s32[]) -> s32[] {\n  %a = s32[] parameter(0)\n"
            "  %b = s32[] parameter(1)\n  ROOT %s = s32[] add(%a, %b)\n}\n",
            *self.comps,
            "ENTRY %main (x: f32[2], m: s32[]) -> f32[2] {\n  " + "\n  ".join(entry)
            + f"\n  ROOT %out = {X} copy({x})\n}}\n"])


class Program(NamedTuple):
    text: str
    R: int                  # replica_count
    P: int                  # num_partitions
    ms: list[int]           # each device's m
    # Items in branches or loops decided by an all-reduce over groups of devices: "" (none),
    # "within" (all within the deciding groups), "crossing" (some cross them).
    decided: str


@st.composite
def programs(draw, decided_by_groups: bool = False) -> Program:
    """A Program: HLO text, replica_count, num_partitions, per-device m values, and what
    items decided by groups of devices do. `decided_by_groups`: one entry item at least is
    a branch or loop decided by an all-reduce over groups of devices."""
    mode = draw(st.sampled_from(["replica", "partition", "partition", "mixed"]))
    if mode == "mixed":
        R, P = 2, 2
    else:
        n = draw(st.integers(2, 5))
        R, P = (n, 1) if mode == "replica" else (1, n)
    w = _Writer(draw, R, P, decided_by_groups)
    text = w.module()
    ms = draw(st.lists(st.integers(0, 3), min_size=R * P, max_size=R * P))
    decided = "crossing" if "crossing" in w.decided else "within" if w.decided else ""
    return Program(text, R, P, ms, decided)
