"""Random loop-heavy multi-device HLO programs for the deadlock check's soundness tests
(test_soundness_loops.py), the kinds tests/analysis/deadlock/programs.py does not write.

`program(seed)` gives (text, R, P, [m per device] x 2) on 2-4 devices (replicas,
partitions, or 2 x 2), threading `x: f32[2]` through items, each one of:

  guard     `if pred(i, id): leaf`, pred a period and an offset (`i % q` against
            `(id + c) % q`, the form induction.py's periods read), a threshold or an id
  twin      `if pred: leaf else a copy of leaf` (the same communication either way, apart
            in time when pred has a period: devices out of step in a loop)
  cbranch   a two-way branch on an all-reduce (sum or max) or an all-gather (over every
            device or halves) of replica-id / partition-id or of `m`
  loop      a while with a trip count from a constant, the ids (+ c, % q), or a max of `m`;
            nested, + the outer counter or + its remainder (inner trip counts per device)
  carried   `while c > 0` with `c = pmax(T_dev - i - 1)` computed in the body (over every
            device or a group), starting from a constant or a max of `m`
  async     an all-reduce-start, a loop (or a guard) and then its done: a pending
            collective spanning the loop

Leaves: an all-reduce (replica groups, global ids, cross-replica-and-partition with
channel_id, subgroups), a collective-permute, a send and/or recv whose channel is shared
with others (1 or 2: a send before a loop may pair with a recv inside it). Control depends on
constants, ids, counters, `m` and all-reduces / all-gathers of them: what
tests/analysis/deadlock/reference.py computes exactly.
"""
import random

X = "f32[2]{0}"
ST = f"(s32[], {X}, s32[])"       # i, x, T


class _Writer:
    def __init__(self, rng, R, P):
        self.r, self.R, self.P, self.n = rng, R, P, R * P
        self.comps, self.k, self.chan = [], 0, 0

    def f(self, s):
        self.k += 1
        return f"{s}{self.k}"

    def ch(self):
        self.chan += 1
        return self.chan

    # --- ids --------------------------------------------------------------
    def idexpr(self, L):
        """s32 value that varies per device."""
        which = ("replica-id" if self.P == 1 else "partition-id" if self.R == 1 else
                 self.r.choice(["replica-id", "partition-id"]))
        u, s = self.f("%u"), self.f("%sid")
        L += [f"{u} = u32[] {which}()", f"{s} = s32[] convert({u})"]
        return s, (self.R if which == "replica-id" else self.P)

    def c(self, L, v, ty="s32"):
        n = self.f("%c")
        L.append(f"{n} = {ty}[] constant({v})")
        return n

    def bin(self, L, op, a, b, ty="s32"):
        n = self.f("%e")
        L.append(f"{n} = {ty}[] {op}({a}, {b})")
        return n

    def pred_expr(self, L, i):
        """pred[] on (i, id): periods, offsets, thresholds."""
        sid, _ = self.idexpr(L)
        kind = self.r.choice(["mod", "mod", "ge", "eq", "const", "idonly"])
        a = self.c(L, self.r.randint(0, 2))
        t = self.bin(L, "multiply", sid, a)
        if i is not None:
            t = self.bin(L, "add", t, i)
        t = self.bin(L, "add", t, self.c(L, self.r.randint(0, 2)))
        p = self.f("%pr")
        if kind == "mod" and i is not None and self.r.random() < 0.7:
            # the form induction's periods read: counter % m against id arithmetic
            q = self.r.randint(2, 3)
            m = self.bin(L, "remainder", i, self.c(L, q))
            off = self.bin(L, "add", sid, self.c(L, self.r.randint(0, 2)))
            k = self.bin(L, "remainder", off, self.c(L, q))
            how = self.r.choice(["EQ", "NE", "LT"])
            L.append(f"{p} = pred[] compare({m}, {k}), direction={how}")
        elif kind == "mod":
            m = self.bin(L, "remainder", t, self.c(L, self.r.randint(2, 3)))
            L.append(f"{p} = pred[] compare({m}, {self.c(L, 0)}), direction=EQ")
        elif kind in ("ge", "eq"):
            bound = self.c(L, self.r.randint(1, 4) if kind == "ge" else self.r.randint(0, 3))
            L.append(f"{p} = pred[] compare({t}, {bound}), direction={kind.upper()}")
        elif kind == "idonly":
            L.append(f"{p} = pred[] compare({sid}, {self.c(L, self.r.randint(0, 1))}), "
                     "direction=EQ")
        else:
            L.append(f"{p} = pred[] constant({self.r.choice(['true', 'false'])})")
        return p

    # --- groups -----------------------------------------------------------
    def groups(self):
        ids = list(range(self.n if self.P > 1 else self.R))
        self.r.shuffle(ids)
        if self.r.random() < 0.5 or len(ids) < 2:
            return [sorted(ids)]
        cut = self.r.randint(1, len(ids) - 1)
        return [sorted(ids[:cut]), sorted(ids[cut:])]

    @staticmethod
    def gt(groups):
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"

    def ar_attrs(self):
        if self.P == 1:
            return f"replica_groups={self.gt(self.groups())}"
        mode = self.r.choice(["global", "global", "crp", "crp", "xr", "xp"])
        if mode == "xr":   # no channel: replicas within each partition
            ids = list(range(self.R))
            self.r.shuffle(ids)
            cut = self.r.randint(1, len(ids)) if len(ids) > 1 else 1
            gs = [sorted(ids[:cut])] + ([sorted(ids[cut:])] if ids[cut:] else [])
            return f"replica_groups={self.gt(gs)}"
        if mode == "xp":   # channel, no groups: every device
            return f"channel_id={self.ch()}, replica_groups={{}}"
        if mode == "crp" and self.R > 1 and self.r.random() < 0.5:   # replica 0 alone
            return f"channel_id={self.ch()}, replica_groups={self.gt([[0], range(1, self.R)])}"
        if mode == "global":
            return (f"channel_id={self.ch()}, replica_groups={self.gt(self.groups())}, "
                    "use_global_device_ids=true")
        # cross-replica-and-partition: replica groups, every partition of them
        return f"channel_id={self.ch()}, replica_groups={self.gt([range(self.R)])}"

    def perm(self):
        K = self.P if self.P > 1 else self.R
        t = list(range(K))
        self.r.shuffle(t)
        pairs = [(s, d) for s, d in enumerate(t) if s != d]
        if not pairs:
            pairs = [(0, 1)]
        return pairs

    # --- leaf computations (f32[2] -> f32[2]) ----------------------------
    def leaf(self):
        kind = self.r.choice(["ar", "ar", "cp", "sr", "send", "recv"])
        name = self.f("leaf")
        L = [f"%p = {X} parameter(0)"]
        if kind == "ar":
            L.append(f"ROOT %r = {X} all-reduce(%p), {self.ar_attrs()}, to_apply=%add")
        elif kind == "cp":
            ch = f"channel_id={self.ch()}, " if self.P > 1 else ""
            L.append(f"ROOT %r = {X} collective-permute(%p), {ch}"
                     f"source_target_pairs={self.gt(self.perm())}")
        else:
            pairs = self.perm()
            c = self.r.choice([1, 2, self.ch() + 10])
            fa = f'frontend_attributes={{_xla_send_recv_source_target_pairs="{self.gt(pairs)}"}}'
            L.append("%t = token[] after-all()")
            if kind in ("sr", "recv"):
                L += [f"%rv = ({X}, u32[], token[]) recv(%t), channel_id={c}, {fa}",
                      f"%rd = ({X}, token[]) recv-done(%rv), channel_id={c}"]
            if kind in ("sr", "send"):
                L += [f"%sv = ({X}, u32[], token[]) send(%p, %t), channel_id={c}, {fa}",
                      f"%sd = token[] send-done(%sv), channel_id={c}"]
            if kind in ("sr", "recv"):
                L += [f"%d = {X} get-tuple-element(%rd), index=0",
                      f"ROOT %r = {X} add(%p, %d)"]
            else:
                L += [f"ROOT %r = {X} copy(%p)"]
        self.comps.append(f"%{name} (p: {X}) -> {X} {{\n  " + "\n  ".join(L) + "\n}\n")
        return name

    def guarded(self, L, x, i):
        """`if pred(i, id): leaf(x)`."""
        p = self.pred_expr(L, i)
        leaf = self.leaf()
        v = self.f("%g")
        L.append(f"{v} = {X} conditional({p}, {x}, {x}), true_computation=%{leaf}, "
                 "false_computation=%ident")
        return v

    def coll_branch(self, L, x, i):
        """A branch whose index comes from a collective (all-reduce or all-gather of ids/m)."""
        sid, _ = self.idexpr(L)
        src = self.r.choice([sid, "%mm"])
        how = self.r.choice(["ar", "ag"])
        if how == "ar":
            a = self.f("%cr")
            L.append(f"{a} = s32[] all-reduce({src}), {self.ar_attrs()}, to_apply=%"
                     + self.r.choice(["addi", "max"]))
            idx = a
        else:
            v1, ag, sl, idx = self.f("%v1"), self.f("%ag"), self.f("%sl"), self.f("%ix")
            # Groups of one size (the result's): every device, or two halves.
            ids = list(range(self.R if self.P == 1 else self.n))
            self.r.shuffle(ids)
            gn = len(ids) if len(ids) % 2 or self.r.random() < 0.5 else len(ids) // 2
            gs = self.gt([sorted(ids[k:k + gn]) for k in range(0, len(ids), gn)])
            kk = self.r.randint(0, gn - 1)
            if self.P == 1:
                grp = f"replica_groups={gs}"
            else:
                grp = (f"channel_id={self.ch()}, replica_groups={gs}, "
                       "use_global_device_ids=true")
            L += [f"{v1} = s32[1] reshape({src})",
                  f"{ag} = s32[{gn}] all-gather({v1}), {grp}, dimensions={{0}}",
                  f"{sl} = s32[1] slice({ag}), slice={{[{kk}:{kk + 1}]}}",
                  f"{idx} = s32[] reshape({sl})"]
        m = self.bin(L, "remainder", idx, self.c(L, 2))
        b0, b1 = self.leaf(), self.leaf()
        v = self.f("%cb")
        L.append(f"{v} = {X} conditional({m}, {x}, {x}), branch_computations={{%{b0}, %{b1}}}")
        return v

    # --- loops ------------------------------------------------------------
    def trip(self, L):
        kind = self.r.choice(["const", "id", "id", "arm", "idmod"])
        if kind == "const":
            return self.c(L, self.r.randint(0, 5))
        if kind == "arm":
            a = self.f("%tm")
            L.append(f"{a} = s32[] all-reduce(%mm), {self.ar_attrs()}, to_apply=%max")
            return a
        sid, _ = self.idexpr(L)
        t = self.bin(L, "multiply", sid, self.c(L, self.r.randint(0, 2)))
        t = self.bin(L, "add", t, self.c(L, self.r.randint(0, 3)))
        if kind == "idmod":
            t = self.bin(L, "remainder", t, self.c(L, self.r.randint(2, 3)))
        return t

    def loop(self, L, x, depth, outer_i=None):
        cond, body = self.f("cond"), self.f("body")
        self.comps.append(f"%{cond} (s: {ST}) -> pred[] {{\n  %s = {ST} parameter(0)\n"
                          "  %i = s32[] get-tuple-element(%s), index=0\n"
                          "  %T = s32[] get-tuple-element(%s), index=2\n"
                          "  ROOT %lt = pred[] compare(%i, %T), direction=LT\n}\n")
        B = [f"%s = {ST} parameter(0)", "%i = s32[] get-tuple-element(%s), index=0",
             f"%x = {X} get-tuple-element(%s), index=1",
             "%T = s32[] get-tuple-element(%s), index=2",
             "%mm = s32[] constant(1)"]
        y = self.items(B, "%x", depth + 1, "%i")
        B += ["%one = s32[] constant(1)", "%i1 = s32[] add(%i, %one)",
              f"ROOT %n = {ST} tuple(%i1, {y}, %T)"]
        self.comps.append(f"%{body} (s: {ST}) -> {ST} {{\n  " + "\n  ".join(B) + "\n}\n")
        T = self.trip(L)
        if outer_i is not None and self.r.random() < 0.6:
            o = (outer_i if self.r.random() < 0.3 else
                 self.bin(L, "remainder", outer_i, self.c(L, self.r.randint(2, 3))))
            T = self.bin(L, "add", T, o)
        z, t, w, o = self.c(L, 0), self.f("%tu"), self.f("%w"), self.f("%lo")
        L += [f"{t} = {ST} tuple({z}, {x}, {T})",
              f"{w} = {ST} while({t}), condition=%{cond}, body=%{body}",
              f"{o} = {X} get-tuple-element({w}), index=1"]
        return o

    def async_loop(self, L, x, depth, i):
        """all-reduce-start, then items (a loop, maybe), then the done."""
        h, d, v = self.f("%h"), self.f("%d"), self.f("%v")
        L.append(f"{h} = {X} all-reduce-start({x}), {self.ar_attrs()}, to_apply=%add")
        y = (self.loop(L, x, depth, i) if depth < 2 and self.r.random() < 0.7 else
             self.guarded(L, x, i))
        L += [f"{d} = {X} all-reduce-done({h})", f"{v} = {X} add({d}, {y})"]
        return v

    def twin(self, L, x, i):
        """`if pred: leaf else copy-of-leaf`: the same communication either way."""
        p = self.pred_expr(L, i)
        leaf = self.leaf()
        text = self.comps[-1]
        other = self.f("twin")
        self.comps.append(text.replace(f"%{leaf} (", f"%{other} (", 1))
        v = self.f("%tw")
        L.append(f"{v} = {X} conditional({p}, {x}, {x}), true_computation=%{leaf}, "
                 f"false_computation=%{other}")
        return v

    def carried_loop(self, L, x, depth, outer_i=None):
        """while c > 0, c = max over a group of (T_dev - i - 1), computed in the body."""
        cond, body = self.f("ccond"), self.f("cbody")
        self.comps.append(f"%{cond} (s: {ST}) -> pred[] {{\n  %s = {ST} parameter(0)\n"
                          "  %c = s32[] get-tuple-element(%s), index=2\n"
                          "  %z = s32[] constant(0)\n"
                          "  ROOT %gt = pred[] compare(%c, %z), direction=GT\n}\n")
        B = [f"%s = {ST} parameter(0)", "%i = s32[] get-tuple-element(%s), index=0",
             f"%x = {X} get-tuple-element(%s), index=1", "%mm = s32[] constant(1)"]
        early = self.r.random() < 0.5
        if early:
            y = self.items(B, "%x", depth + 1, "%i")
        T = self.trip(B)
        B += ["%one = s32[] constant(1)", "%i1 = s32[] add(%i, %one)",
              f"%left = s32[] subtract({T}, %i1)",
              f"%cn = s32[] all-reduce(%left), {self.ar_attrs()}, to_apply=%max"]
        if not early:
            y = self.items(B, "%x", depth + 1, "%i")
        B += [f"ROOT %n = {ST} tuple(%i1, {y}, %cn)"]
        self.comps.append(f"%{body} (s: {ST}) -> {ST} {{\n  " + "\n  ".join(B) + "\n}\n")
        if self.r.random() < 0.5:
            c0 = self.c(L, self.r.randint(0, 1))
        else:
            c0 = self.f("%c0")
            L.append(f"{c0} = s32[] all-reduce(%mm), {self.ar_attrs()}, to_apply=%max")
        z, t, w, o = self.c(L, 0), self.f("%tu"), self.f("%w"), self.f("%lo")
        L += [f"{t} = {ST} tuple({z}, {x}, {c0})",
              f"{w} = {ST} while({t}), condition=%{cond}, body=%{body}",
              f"{o} = {X} get-tuple-element({w}), index=1"]
        return o

    def items(self, L, x, depth, i):
        kinds = ["guard", "twin", "twin", "cbranch", "cbranch", "async"]
        if depth < 2:
            kinds += ["loop", "carried", "carried"]
        for _ in range(self.r.randint(1, 3)):
            k = self.r.choice(kinds)
            if k == "guard":
                x = self.guarded(L, x, i)
            elif k == "cbranch":
                x = self.coll_branch(L, x, i)
            elif k == "twin":
                x = self.twin(L, x, i)
            elif k == "carried":
                x = self.carried_loop(L, x, depth, i)
            elif k == "loop":
                x = self.loop(L, x, depth, i)
            else:
                x = self.async_loop(L, x, depth, i)
        return x

    def module(self):
        E = [f"%x0 = {X} parameter(0)", "%mm = s32[] parameter(1)"]
        x = self.items(E, "%x0", 0, None)
        head = f"HloModule gen, replica_count={self.R}, num_partitions={self.P}"
        def red(nm, ty, op):
            return (f"%{nm} (a: {ty}[], b: {ty}[]) -> {ty}[] {{\n  %a = {ty}[] parameter(0)\n"
                    f"  %b = {ty}[] parameter(1)\n  ROOT %s = {ty}[] {op}(%a, %b)\n}}\n")
        return "\n".join([head, "", red("add", "f32", "add"), red("addi", "s32", "add"),
                          red("max", "s32", "maximum"),
                          f"%ident (p: {X}) -> {X} {{\n  ROOT %p = {X} parameter(0)\n}}\n",
                          *self.comps,
                          f"ENTRY %main (x0: {X}, mm: s32[]) -> {X} {{\n  " + "\n  ".join(E)
                          + f"\n  ROOT %out = {X} copy({x})\n}}\n"])


def program(seed: int):
    """(HLO text, replica_count, num_partitions, two lists of each device's m)."""
    rng = random.Random(seed)
    R, P = rng.choice([(2, 1), (3, 1), (4, 1), (1, 2), (1, 3), (2, 2), (2, 2), (2, 2), (1, 4)])
    g = _Writer(rng, R, P)
    text = g.module()
    ms = [[rng.randint(0, 3) for _ in range(R * P)] for _ in range(2)]
    return text, R, P, ms
