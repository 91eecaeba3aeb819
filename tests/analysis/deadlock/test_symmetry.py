"""Devices by symmetry (xladist/analysis/deadlock/symmetry.py) give the verdict of checking each device.

Hypothesis generates programs (tests/analysis/deadlock/test_induction.py's generator plus ops whose
data comes from the replica id, collective-permute rings and channels in a deadlocking
order) where the ids feed group choice, data and -- for the fallback -- control (conditionals
on the replica id that skip a collective or change its shape: seeded mismatches).  The
default check (symmetry, then induction) must give the problems of engine="unroll" (every
device traced and simulated separately), and must have used the one symbolic trace whenever
no control depends on an id and nothing is wrong.
"""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xladist
from xladist.analysis.deadlock import check_module

from .test_induction import GROUPS, _Gen, _verdict


class _SymGen(_Gen):
    def op(self, kind, x, lines, counter, group):
        if kind == "ar_iddata":  # the id feeds data only
            rid, f, b, a, v = (self.fresh(p) for p in ("%rid", "%f", "%b", "%a", "%v"))
            groups = GROUPS[self.R][group % len(GROUPS[self.R])]
            lines += [f"{rid} = u32[] replica-id()", f"{f} = f32[] convert({rid})",
                      f"{b} = f32[4]{{0}} broadcast({f}), dimensions={{}}",
                      f"{a} = f32[4]{{0}} add({x}, {b})",
                      f"{v} = f32[4]{{0}} all-reduce({a}), replica_groups={groups}, "
                      "to_apply=%add"]
            return v
        if kind == "permute":
            v = self.fresh("%v")
            ring = "{" + ",".join(f"{{{d},{(d + 1) % self.R}}}" for d in range(self.R)) + "}"
            lines.append(f"{v} = f32[4]{{0}} collective-permute({x}), source_target_pairs={ring}")
            return v
        if kind == "chan_late":
            # Every device waits for its recv on one channel before it sends on the other,
            # and the sends those recvs wait for come after: a cycle through all devices.
            self.channel += 2
            ring = "{" + ",".join(f"{{{d},{(d + 1) % self.R}}}" for d in range(self.R)) + "}"
            one = self.stage(self.channel - 1, self.channel, ring, ring)
            two = self.stage(self.channel, self.channel - 1, ring, ring)
            u, v = self.fresh("%v"), self.fresh("%v")
            lines += [f"{u} = f32[4]{{0}} call({x}), to_apply={one}",
                      f"{v} = f32[4]{{0}} call({u}), to_apply={two}"]
            return v
        return super().op(kind, x, lines, counter, group)


PAIRS = "_xla_send_recv_source_target_pairs"
SYMMETRIC = ["ar", "ar_iddata", "permute", "chan", "cond_parity"]
BROKEN = ["chan_late", "chan_deadlock", "cond_replica_skip", "cond_replica_shape"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replicas=st.sampled_from([2, 4]),
       prologue=st.lists(st.tuples(st.sampled_from(SYMMETRIC + BROKEN), st.integers(0, 3)),
                         max_size=3),
       body=st.lists(st.tuples(st.sampled_from(SYMMETRIC + BROKEN), st.integers(0, 3)),
                     min_size=1, max_size=3),
       n=st.integers(0, 5))
def test_symmetry_gives_the_verdict_of_every_device(replicas, prologue, body, n):
    text = _SymGen(replicas).module(prologue, body, "const", n)
    module = xladist.parse_hlo(text)
    fast = check_module(module, budget=None)
    slow = check_module(module, budget=None, engine="unroll")
    assert _verdict(fast) == _verdict(slow), (text, fast.to_text(), slow.to_text())
    # Outside the loop cond_parity has no counter and picks its branch by the replica id.
    kinds = {k if k != "cond_parity" else "by-id" for k, _ in prologue} | (
        {k for k, _ in body} if n else set())
    if not kinds & set(BROKEN + ["by-id"]):
        assert fast.symmetric, (text, fast.to_text())
        assert fast.ok and not fast.problems
        assert fast.events == slow.events or n > 2  # loops of >2 trips are shortened


def _partition_module(parts: int, skip_on_partition: bool) -> str:
    """600-op-style SPMD body over `parts` partitions, iota groups; optionally partition 1
    takes a branch with a different all-reduce (a mismatch only device 1 has)."""
    groups = f"[{parts // 2},2]<=[{parts}]"
    branch = ("%pid = u32[] partition-id()\n  %one = u32[] constant(1)\n"
              "  %is1 = pred[] compare(%pid, %one), direction=EQ\n"
              "  %y = f32[4]{0} conditional(%is1, %x, %x), true_computation=%odd, "
              "false_computation=%even\n" if skip_on_partition else
              "  %y = f32[4]{0} call(%x), to_apply=%even\n")
    comp = ("%{name} (a: f32[4]) -> f32[4] {{\n  %a = f32[4]{{0}} parameter(0)\n"
            "  ROOT %r = f32[{n}]{{0}} all-reduce(%{arg}), channel_id=1, replica_groups={g}, "
            "use_global_device_ids=true, to_apply=%add{extra}\n}}\n")
    even = comp.format(name="even", n=4, arg="a", g=groups, extra="")
    odd = ("%odd (a: f32[4]) -> f32[4] {\n  %a = f32[4]{0} parameter(0)\n"
           "  %s = f32[2]{0} slice(%a), slice={[0:2]}\n"
           f"  %q = f32[2]{{0}} all-reduce(%s), channel_id=1, replica_groups={groups}, "
           "use_global_device_ids=true, to_apply=%add\n  %z = f32[] constant(0)\n"
           "  ROOT %r = f32[4]{0} pad(%q, %z), padding=0_2\n}\n")
    return (f"HloModule p, num_partitions={parts}\n\n"
            "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
            "  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n"
            + even + odd +
            "ENTRY %main (x: f32[4]) -> f32[4] {\n  %x = f32[4]{0} parameter(0)\n  "
            + branch +
            f"  ROOT %o = f32[4]{{0}} all-reduce(%y), channel_id=2, replica_groups={groups}, "
            "use_global_device_ids=true, to_apply=%add\n}\n")


def test_a_partition_id_conditional_that_changes_a_collective_is_still_found():
    module = xladist.parse_hlo(_partition_module(8, True))
    fast = check_module(module)
    slow = check_module(module, engine="unroll")
    assert not fast.symmetric and not fast.ok
    assert _verdict(fast) == _verdict(slow)
    assert "mismatch" in {p.kind for p in fast.problems}


def test_many_devices_are_checked_once():
    times = {}
    for parts in (64, 4096):
        module = xladist.parse_hlo(_partition_module(parts, False))
        t = time.perf_counter()
        report = check_module(module)
        times[parts] = time.perf_counter() - t
        assert report.ok and not report.problems and report.symmetric, report.to_text()
        assert len(report.events) == parts
    assert times[4096] < 2.0, times
