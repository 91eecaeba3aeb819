"""Classes of devices (xladist/analysis/deadlock/classes.py) give the verdict of checking each device.

Hypothesis generates programs whose control depends on the replica id: a conditional on
`replica_id < R/2` choosing all-reduces over groups inside each half, a conditional on
`replica_id % 2` choosing the sending or receiving end of a channel, a pipeline whose first
and last stages differ from the middle ones, an inner loop whose trip count is
`replica_id % 2 + 1` -- each also in a broken form (groups that cross the classes, shapes
that differ, a pipeline that wraps around, a loop whose collective spans devices with other
trip counts) -- mixed with the generators of deadlock/test_induction / test_symmetry
(seeded deadlocks, mismatches, unmatched ends).  The default check (symmetry, then classes,
then every device) must give exactly the problems of engine="unroll", and must have proven
every program made of valid kinds by classes, not by tracing every device.
"""

from __future__ import annotations

import time
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xladist
from xladist.analysis.deadlock import check_module
from xladist.analysis.deadlock import classes as classes_mod

from .test_induction import GROUPS, _verdict
from .test_symmetry import PAIRS, _SymGen

# Eight replicas, for classes of more than one device (the other generators use 2 and 4).
GROUPS.setdefault(8, ["{}", "{{0,1,2,3},{4,5,6,7}}", "{{0,4},{1,5},{2,6},{3,7}}",
                      "{{0},{1},{2},{3},{4},{5},{6},{7}}"])


def _pairs(pairs) -> str:
    return "{" + ",".join(f"{{{s},{t}}}" for s, t in pairs) + "}"


class _ClassGen(_SymGen):
    def comp(self, body: list[str]) -> str:
        name = self.fresh("%c")
        self.comps.append(f"{name} (a: f32[4]) -> f32[4] {{\n  %a = f32[4]{{0}} parameter(0)\n  "
                          + "\n  ".join(body) + "\n}\n")
        return name

    def ar(self, groups: str, src: str = "%a", root: bool = True, shape: str = "f32[4]") -> str:
        return (f"{'ROOT %r' if root else '%q'} = {shape}{{0}} all-reduce({src}), "
                f"replica_groups={groups}, to_apply=%add")

    def chan(self, send: bool, pairs: str, shape: str = "f32[4]") -> list[str]:
        """The lines of one end of channel self.channel on `pairs`; value %d (recv) or %a."""
        attrs = f'channel_id={self.channel}, frontend_attributes={{{PAIRS}="{pairs}"}}'
        if send:
            v = "%a" if shape == "f32[4]" else "%sl"
            pre = [] if shape == "f32[4]" else [f"%sl = {shape}{{0}} slice(%a), slice={{[0:2]}}"]
            return pre + ["%t = token[] after-all()",
                          f"%s = ({shape}{{0}}, u32[], token[]) send({v}, %t), {attrs}",
                          f"%sd = token[] send-done(%s), channel_id={self.channel}"]
        return ["%t = token[] after-all()",
                f"%rv = ({shape}{{0}}, u32[], token[]) recv(%t), {attrs}",
                f"%rd = ({shape}{{0}}, token[]) recv-done(%rv), channel_id={self.channel}"]

    def conditional(self, lines, x, index_lines, branches) -> str:
        v = self.fresh("%v")
        lines += index_lines
        lines.append(f"{v} = f32[4]{{0}} conditional({self.idx}, " + ", ".join([x] * len(branches))
                     + "), branch_computations={" + ", ".join(branches) + "}")
        return v

    def rid_index(self, expr: str) -> list[str]:
        """s32 index lines from the replica id: `expr` in {half, parity, stage}."""
        R = self.R
        rid, r, idx = self.fresh("%rid"), self.fresh("%r"), self.fresh("%idx")
        self.idx = idx
        out = [f"{rid} = u32[] replica-id()", f"{r} = s32[] convert({rid})"]
        if expr == "half":
            h, lt = self.fresh("%h"), self.fresh("%lt")
            return out + [f"{h} = s32[] constant({R // 2})",
                          f"{lt} = pred[] compare({r}, {h}), direction=GE",
                          f"{idx} = s32[] convert({lt})"]
        if expr == "parity":
            two = self.fresh("%two")
            return out + [f"{two} = s32[] constant(2)", f"{idx} = s32[] remainder({r}, {two})"]
        # stage: 0 first, 1 middle, 2 last
        z, last, one, two, f, l, m = (self.fresh(p) for p in
                                      ("%z", "%last", "%one", "%two", "%f", "%l", "%m"))
        return out + [f"{z} = s32[] constant(0)", f"{last} = s32[] constant({R - 1})",
                      f"{one} = s32[] constant(1)", f"{two} = s32[] constant(2)",
                      f"{f} = pred[] compare({r}, {z}), direction=EQ",
                      f"{l} = pred[] compare({r}, {last}), direction=EQ",
                      f"{m} = s32[] select({l}, {two}, {one})",
                      f"{idx} = s32[] select({f}, {z}, {m})"]

    def op(self, kind, x, lines, counter, group):
        R = self.R
        lo = "{" + ",".join("{" + ",".join(map(str, range(s, s + R // 2))) + "}"
                            for s in (0, R // 2)) + "}"   # the two halves
        one_each = "{" + ",".join(f"{{{d}}}" for d in range(R)) + "}"
        if kind in ("half", "half_bad"):
            a = self.comp([self.ar(lo)])
            b = self.comp([self.ar(one_each if kind == "half" else "{}")])
            return self.conditional(lines, x, self.rid_index("half"), [a, b])
        if kind in ("parity_chan", "parity_chan_bad"):
            self.channel += 1
            pairs = _pairs((d, d + 1) for d in range(0, R, 2))
            send = self.comp(self.chan(True, pairs) + ["ROOT %o = f32[4]{0} copy(%a)"])
            shape = "f32[4]" if kind == "parity_chan" else "f32[2]"
            tail = ("ROOT %o = f32[4]{0} get-tuple-element(%rd), index=0" if shape == "f32[4]"
                    else "ROOT %o = f32[4]{0} copy(%a)")
            recv = self.comp(self.chan(False, pairs, shape) + [tail])
            return self.conditional(lines, x, self.rid_index("parity"), [send, recv])
        if kind in ("pipeline", "pipeline_bad"):
            self.channel += 1
            chain = [(d, d + 1) for d in range(R - 1)]
            pairs = _pairs(chain + ([(R - 1, 0)] if kind == "pipeline_bad" else []))
            first = self.comp(self.chan(True, pairs) + ["ROOT %o = f32[4]{0} copy(%a)"])
            # A middle stage receives from the previous stage and sends its own input on
            # (the channel's order is recv, send, recv-done, send-done).
            mid = self.comp(self.chan(False, pairs) + self.chan(True, pairs)[1:] + [
                "%d = f32[4]{0} get-tuple-element(%rd), index=0",
                "ROOT %o = f32[4]{0} add(%d, %a)"])
            # Broken: the last stage also sends on to the first, which never receives.
            last = mid if kind == "pipeline_bad" else self.comp(self.chan(False, pairs) + [
                "ROOT %o = f32[4]{0} get-tuple-element(%rd), index=0"])
            return self.conditional(lines, x, self.rid_index("stage"), [first, mid, last])
        if kind in ("id_loop", "id_loop_bad"):
            return self.id_loop(lines, x, one_each if kind == "id_loop" else "{}")
        if kind in UNIFORM:   # trip count: the all-reduce max of the replica ids over groups
            over, body = {"pmax_loop": ("{}", one_each), "pmax_half_loop": (lo, lo),
                          "pmax_half_loop_bad": (lo, "{}")}[kind]
            return self.id_loop(lines, x, body, over)
        return super().op(kind, x, lines, counter, group)

    def id_loop(self, lines, x, groups, pmax_over=None) -> str:
        """A loop of replica_id % 2 + 1 iterations (or, with `pmax_over`, of the all-reduce
        max of the replica ids over those groups) around an all-reduce over `groups`."""
        body, cond = self.fresh("%lb"), self.fresh("%lc")
        self.comps.append(
            f"{body} (p: (s32[], f32[4], s32[])) -> (s32[], f32[4], s32[]) {{\n"
            "  %p = (s32[], f32[4]{0}, s32[]) parameter(0)\n"
            "  %i = s32[] get-tuple-element(%p), index=0\n"
            "  %y = f32[4]{0} get-tuple-element(%p), index=1\n"
            "  %l = s32[] get-tuple-element(%p), index=2\n"
            "  %c1 = s32[] constant(1)\n  %i2 = s32[] add(%i, %c1)\n"
            f"  %y2 = f32[4]{{0}} all-reduce(%y), replica_groups={groups}, to_apply=%add\n"
            "  ROOT %t = (s32[], f32[4]{0}, s32[]) tuple(%i2, %y2, %l)\n}\n")
        self.comps.append(
            f"{cond} (p: (s32[], f32[4], s32[])) -> pred[] {{\n"
            "  %p = (s32[], f32[4]{0}, s32[]) parameter(0)\n"
            "  %i = s32[] get-tuple-element(%p), index=0\n"
            "  %l = s32[] get-tuple-element(%p), index=2\n"
            "  ROOT %lt = pred[] compare(%i, %l), direction=LT\n}\n")
        rid, r, two, m, one, n, z, t0, w, v = (self.fresh(p) for p in (
            "%rid", "%r", "%two", "%m", "%one", "%n", "%z", "%t0", "%w", "%v"))
        lines += [f"{rid} = u32[] replica-id()", f"{r} = s32[] convert({rid})",
                  f"{two} = s32[] constant(2)", f"{m} = s32[] remainder({r}, {two})",
                  f"{one} = s32[] constant(1)",
                  f"{n} = s32[] add({m}, {one})" if pmax_over is None else
                  f"{n} = s32[] all-reduce({r}), replica_groups={pmax_over}, to_apply=%max",
                  f"{z} = s32[] constant(0)",
                  f"{t0} = (s32[], f32[4]{{0}}, s32[]) tuple({z}, {x}, {n})",
                  f"{w} = (s32[], f32[4]{{0}}, s32[]) while({t0}), condition={cond}, body={body}",
                  f"{v} = f32[4]{{0}} get-tuple-element({w}), index=1"]
        return v


UNIFORM = ["pmax_loop", "pmax_half_loop", "pmax_half_loop_bad"]
GOOD = ["half", "parity_chan", "pipeline", "id_loop", "ar", "ar_iddata", "permute", "chan"]
BAD = ["half_bad", "parity_chan_bad", "pipeline_bad", "id_loop_bad", "chan_deadlock",
       "cond_replica_shape", "chan_late"]


def _check_both(text: str):
    module = xladist.parse_hlo(text)
    return check_module(module, budget=None), check_module(module, budget=None,
                                                            engine="unroll")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replicas=st.sampled_from([2, 4, 8]),
       prologue=st.lists(st.tuples(st.sampled_from(GOOD * 3 + BAD), st.integers(0, 3)),
                         min_size=1, max_size=3),
       body=st.lists(st.tuples(st.sampled_from(GOOD * 3 + BAD), st.integers(0, 3)),
                     min_size=1, max_size=2),
       n=st.integers(0, 4))
def test_classes_give_the_verdict_of_every_device(replicas, prologue, body, n):
    text = _ClassGen(replicas).module(prologue, body, "const", n)
    fast, slow = _check_both(text)
    assert _verdict(fast) == _verdict(slow), (text, fast.to_text(), slow.to_text())
    used = {k for k, _ in prologue} | ({k for k, _ in body} if n else set())
    if not used & set(BAD):
        # Valid programs are proven without tracing every device.
        assert fast.ok and not fast.problems, (text, fast.to_text())
        assert fast.symmetric or fast.classes, (text, fast.to_text())
        assert fast.events == slow.events or n > 2


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replicas=st.sampled_from([2, 4, 8]),
       prologue=st.lists(st.tuples(st.sampled_from(GOOD + UNIFORM + BAD[:4]),
                                   st.integers(0, 3)), min_size=1, max_size=3))
def test_uniform_trip_counts_by_classes_give_the_verdict_of_every_device(replicas, prologue):
    """Trip counts from all-reduce results, enumerated (check.py `_Choices`) with one choice
    per key across all classes.  The reference is the per-device check with induction
    (symmetry=False): unrolling cannot take a trip count from data, and test_induction
    compares that path with unrolling count by count."""
    module = xladist.parse_hlo(_ClassGen(replicas).module(prologue, [("ar", 0)], "const", 1))
    fast = check_module(module, budget=None)
    slow = check_module(module, budget=None, symmetry=False)
    assert _verdict(fast) == _verdict(slow), (fast.to_text(), slow.to_text())
    # A trip count per half is a key per half, and induction needs every device to shorten
    # its loops alike: with two keys enumerated, not proven on either path (a warning).
    if not {k for k, _ in prologue} - set(GOOD + ["pmax_loop"]):
        assert fast.ok and not fast.problems and (fast.classes or fast.symmetric), fast.to_text()


def test_the_generator_seeds_every_kind_of_problem_across_classes():
    seen = set()
    for kind in BAD[:4]:
        fast, slow = _check_both(_ClassGen(4).module([("ar", 0), (kind, 0)], [("ar", 0)],
                                                     "const", 1))
        assert _verdict(fast) == _verdict(slow) and not fast.ok, kind
        seen |= {p.kind for p in fast.problems}
    assert {"mismatch", "unmatched"} <= seen, seen


def test_valid_id_dependent_programs_take_the_class_path():
    for kind, classes in [("half", 2), ("parity_chan", 2), ("pipeline", 3), ("id_loop", 2)]:
        fast, slow = _check_both(_ClassGen(8).module([(kind, 0)], [("ar", 0)], "const", 3))
        assert fast.ok and not fast.problems and fast.classes == classes, (kind, fast.classes)
        assert _verdict(slow) == _verdict(fast)


def test_too_many_classes_fall_back_to_every_device():
    text = _ClassGen(8).module([("pipeline", 0)], [("ar", 0)], "const", 1)
    with mock.patch.object(classes_mod, "MAX_CLASSES", 2):
        report = check_module(xladist.parse_hlo(text))
    assert report.ok and report.classes is None and not report.symmetric


def _uniform_loop_module(parts: int, groups_in_body: str) -> str:
    """A loop whose trip count is the all-reduce max of each device's partition id (the
    same on every device), and before it a conditional on partition-id < P/2."""
    half = parts // 2
    return f"""HloModule u, num_partitions={parts}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%max (a: s32[], b: s32[]) -> s32[] {{
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %s = s32[] maximum(%a, %b)
}}

%lo (a: f32[4]) -> f32[4] {{
  %a = f32[4]{{0}} parameter(0)
  ROOT %r = f32[4]{{0}} all-reduce(%a), channel_id=1, replica_groups=[2,{half}]<=[{parts}], use_global_device_ids=true, to_apply=%add
}}

%hi (a: f32[4]) -> f32[4] {{
  %a = f32[4]{{0}} parameter(0)
  ROOT %r = f32[4]{{0}} copy(%a)
}}

%cond (p: (s32[], f32[4], s32[])) -> pred[] {{
  %p = (s32[], f32[4]{{0}}, s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %l = s32[] get-tuple-element(%p), index=2
  ROOT %lt = pred[] compare(%i, %l), direction=LT
}}

%body (p: (s32[], f32[4], s32[])) -> (s32[], f32[4], s32[]) {{
  %p = (s32[], f32[4]{{0}}, s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %y = f32[4]{{0}} get-tuple-element(%p), index=1
  %l = s32[] get-tuple-element(%p), index=2
  %c1 = s32[] constant(1)
  %i2 = s32[] add(%i, %c1)
  %y2 = f32[4]{{0}} all-reduce(%y), channel_id=2, replica_groups={groups_in_body}, use_global_device_ids=true, to_apply=%add
  ROOT %t = (s32[], f32[4]{{0}}, s32[]) tuple(%i2, %y2, %l)
}}

ENTRY %main (x: f32[4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %pid = u32[] partition-id()
  %h = u32[] constant({half})
  %lt = pred[] compare(%pid, %h), direction=LT
  %y = f32[4]{{0}} conditional(%lt, %x, %x), true_computation=%lo, false_computation=%hi
  %ps = s32[] convert(%pid)
  %n = s32[] all-reduce(%ps), channel_id=3, replica_groups=[1,{parts}]<=[{parts}], use_global_device_ids=true, to_apply=%max
  %z = s32[] constant(0)
  %t0 = (s32[], f32[4]{{0}}, s32[]) tuple(%z, %y, %n)
  %w = (s32[], f32[4]{{0}}, s32[]) while(%t0), condition=%cond, body=%body
  ROOT %o = f32[4]{{0}} get-tuple-element(%w), index=1
}}
"""


def test_trip_count_from_a_pmax_after_an_id_conditional():
    # The reference here is the per-device check with induction (symmetry=False), whose
    # uniform trip counts test_induction compares with unrolling count by count.
    for body_groups, ok in [(f"[{4},2]<=[8]", True), ("[2,4]<=[8]", True)]:
        module = xladist.parse_hlo(_uniform_loop_module(8, body_groups))
        fast = check_module(module, budget=None)
        slow = check_module(module, budget=None, symmetry=False)
        assert _verdict(fast) == _verdict(slow), (fast.to_text(), slow.to_text())
        assert fast.ok is ok and fast.classes == 2, fast.to_text()


def test_class_cost_grows_less_than_the_device_count():
    times = {}
    for parts in (64, 4096):
        module = xladist.parse_hlo(_uniform_loop_module(parts, f"[{parts // 2},2]<=[{parts}]"))
        t = time.perf_counter()
        report = check_module(module)
        times[parts] = time.perf_counter() - t
        assert report.ok and report.classes == 2, report.to_text()
        assert len(report.events) == parts
    assert times[4096] < 2.0, times


def _permute_by_parity(parts: int, channel: bool) -> str:
    """2 replicas x `parts` partitions: even replicas permute forward around the partitions,
    odd ones backward.  With a channel the pairs apply inside each replica (one class per
    group); without one, inside each partition: both replicas meet, with other pairs."""
    fwd = "{" + ",".join(f"{{{i},{(i + 1) % parts}}}" for i in range(parts)) + "}"
    bwd = "{" + ",".join(f"{{{(i + 1) % parts},{i}}}" for i in range(parts)) + "}"
    ch = ", channel_id=1" if channel else ""
    pairs = (fwd, bwd) if channel else ("{{0,1},{1,0}}", "{{0,0},{1,1}}")
    return f"""HloModule pp, replica_count=2, num_partitions={parts}

%fwd (a: f32[4]) -> f32[4] {{
  %a = f32[4]{{0}} parameter(0)
  ROOT %r = f32[4]{{0}} collective-permute(%a){ch}, source_target_pairs={pairs[0]}
}}

%bwd (a: f32[4]) -> f32[4] {{
  %a = f32[4]{{0}} parameter(0)
  ROOT %r = f32[4]{{0}} collective-permute(%a){ch}, source_target_pairs={pairs[1]}
}}

ENTRY %main (x: f32[4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %rid = u32[] replica-id()
  %two = u32[] constant(2)
  %par = u32[] remainder(%rid, %two)
  ROOT %y = f32[4]{{0}} conditional(%par, %x, %x), branch_computations={{%fwd, %bwd}}
}}
"""


def test_replica_parity_choosing_permute_pairs():
    for channel in (True, False):
        module = xladist.parse_hlo(_permute_by_parity(4, channel))
        fast = check_module(module, budget=None)
        slow = check_module(module, budget=None, engine="unroll")
        assert _verdict(fast) == _verdict(slow), (fast.to_text(), slow.to_text())
        if channel:
            assert fast.ok and fast.classes == 2
        else:
            assert {p.kind for p in fast.problems} == {"mismatch"} and fast.classes is None
