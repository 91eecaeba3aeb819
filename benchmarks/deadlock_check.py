"""Time the static deadlock check on a generated module: 1,000 collectives and channels, N=64.

    python benchmarks/deadlock_check.py [--ops 1000] [--devices 64] [--repeat 3]
    python benchmarks/deadlock_check.py --sweep trips     # 10^3..10^6 iterations, 2 replicas
    python benchmarks/deadlock_check.py --sweep devices   # 600 ops at 64..16,384 partitions, vs every device
    python benchmarks/deadlock_check.py --sweep classes   # ids feed control, 64..16,384 devices

The module (SPMD over N partitions) cycles through: an all-reduce over every device, an
all-reduce over groups of 8 (flattened ids, iota groups), an all-to-all, a collective-permute
ring, an async all-reduce overlapping a multiply, and a send/recv ring chain (recv, send,
recv-done, send-done counted as one channel exchange); a tenth of the ops sit in a while loop
of 10 iterations so the check also unrolls. Prints the generation, parse, schedule and check
times; the goal is a check under 2 s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xladist
from xladist.analysis.deadlock import check_module
from xladist.analysis.schedule import schedule_module

PAIRS = "_xla_send_recv_source_target_pairs"


def _ring(n: int) -> str:
    return "{" + ",".join(f"{{{i},{(i + 1) % n}}}" for i in range(n)) + "}"


def _ops(prefix: str, count: int, n: int, value: str, channel0: int) -> tuple[list[str], str]:
    """`count` communicating ops chained through one f32[64] value; returns lines and result."""
    lines, ch = [], channel0
    ring = _ring(n)
    for k in range(count):
        kind = k % 6
        v = f"%{prefix}{k}"
        ch += 1
        if kind == 0:
            lines.append(f"{v} = f32[64]{{0}} all-reduce({value}), channel_id={ch}, "
                         "replica_groups={}, to_apply=%add")
        elif kind == 1:
            lines.append(f"{v} = f32[64]{{0}} all-reduce({value}), channel_id={ch}, "
                         f"replica_groups=[{n // 8},8]<=[{n}], use_global_device_ids=true, "
                         "to_apply=%add")
        elif kind == 2:
            lines.append(f"{v} = f32[64]{{0}} all-to-all({value}), channel_id={ch}, "
                         "replica_groups={}, dimensions={0}")
        elif kind == 3:
            lines.append(f"{v} = f32[64]{{0}} collective-permute({value}), channel_id={ch}, "
                         f"source_target_pairs={ring}")
        elif kind == 4:
            lines += [f"{v}.s = f32[64]{{0}} all-reduce-start({value}), channel_id={ch}, "
                      "replica_groups={}, to_apply=%add",
                      f"{v}.w = f32[64]{{0}} multiply({value}, {value})",
                      f"{v}.d = f32[64]{{0}} all-reduce-done({v}.s)",
                      f"{v} = f32[64]{{0}} add({v}.d, {v}.w)"]
        else:
            fa = f'frontend_attributes={{{PAIRS}="{ring}"}}'
            lines += [f"{v}.t = token[] after-all()",
                      f"{v}.r = (f32[64]{{0}}, u32[], token[]) recv({v}.t), channel_id={ch}, {fa}",
                      f"{v}.s = (f32[64]{{0}}, u32[], token[]) send({value}, {v}.t), "
                      f"channel_id={ch}, {fa}",
                      f"{v}.rd = (f32[64]{{0}}, token[]) recv-done({v}.r), channel_id={ch}",
                      f"{v}.sd = token[] send-done({v}.s), channel_id={ch}",
                      f"{v} = f32[64]{{0}} get-tuple-element({v}.rd), index=0"]
        value = v
    return lines, value


def generate(ops: int = 1000, n: int = 64) -> str:
    """HLO text of the benchmark module."""
    in_loop = ops // 10 // 10          # ops in the body, run 10 times
    top = ops - in_loop * 10
    body, body_out = _ops("b", in_loop, n, "%bv", 10_000)
    entry, out = _ops("e", top, n, "%x", 0)
    ind = "\n  "
    return f"""HloModule deadlock_bench, num_partitions={n}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}}

%body (bs: (s32[], f32[64])) -> (s32[], f32[64]) {{
  %bs = (s32[], f32[64]{{0}}) parameter(0)
  %bi = s32[] get-tuple-element(%bs), index=0
  %bv = f32[64]{{0}} get-tuple-element(%bs), index=1
  {ind.join(body)}
  %one = s32[] constant(1)
  %bi1 = s32[] add(%bi, %one)
  ROOT %bnext = (s32[], f32[64]{{0}}) tuple(%bi1, {body_out})
}}

%cond (cs: (s32[], f32[64])) -> pred[] {{
  %cs = (s32[], f32[64]{{0}}) parameter(0)
  %ci = s32[] get-tuple-element(%cs), index=0
  %ten = s32[] constant(10)
  ROOT %more = pred[] compare(%ci, %ten), direction=LT
}}

ENTRY %main (x: f32[64]) -> f32[64] {{
  %x = f32[64]{{0}} parameter(0)
  {ind.join(entry)}
  %zero = s32[] constant(0)
  %init = (s32[], f32[64]{{0}}) tuple(%zero, {out})
  %loop = (s32[], f32[64]{{0}}) while(%init), condition=%cond, body=%body
  ROOT %result = f32[64]{{0}} get-tuple-element(%loop), index=1
}}
"""


def loop_module(trips: int, replicas: int = 2) -> str:
    """A while loop of `trips` iterations around one f32[4] all-reduce (no known_trip_count:
    the check derives the count from the condition)."""
    return f"""HloModule loop_bench, replica_count={replicas}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%cond (p: (s32[], f32[4])) -> pred[] {{
  %p = (s32[], f32[4]{{0}}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant({trips})
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}}

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {{
  %p = (s32[], f32[4]{{0}}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = f32[4]{{0}} get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %x2 = f32[4]{{0}} all-reduce(%x), replica_groups={{}}, to_apply=%add
  ROOT %t = (s32[], f32[4]{{0}}) tuple(%i2, %x2)
}}

ENTRY %main (x: f32[4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %z = s32[] constant(0)
  %t0 = (s32[], f32[4]{{0}}) tuple(%z, %x)
  %w = (s32[], f32[4]{{0}}) while(%t0), condition=%cond, body=%body
  ROOT %r = f32[4]{{0}} get-tuple-element(%w), index=1
}}
"""


def classes_module(n: int, blocks: int = 25) -> str:
    """SPMD over n devices (2 replicas x n/2 partitions) whose control depends on the ids,
    `blocks` times: `partition_id < P/2` picks all-reduces over groups of 8 or of 2 (inside
    each half), `replica_id % 2` picks a forward or backward collective-permute ring over the
    partitions, a send/recv pipeline over the partitions (in each replica) whose first and
    last stages differ from the middle ones, an all-reduce over everything; then a loop whose trip count
    is the all-reduce max of the partition ids, an all-reduce in its body."""
    P = n // 2
    fwd = "{" + ",".join(f"{{{i},{(i + 1) % P}}}" for i in range(P)) + "}"
    bwd = "{" + ",".join(f"{{{(i + 1) % P},{i}}}" for i in range(P)) + "}"
    chain = "{" + ",".join(f"{{{i},{i + 1}}}" for i in range(P - 1)) + "}"
    fa = f'frontend_attributes={{{PAIRS}="{chain}"}}'
    ar = ("f32[64]{{0}} all-reduce({x}), channel_id={ch}, replica_groups={g}, "
          "use_global_device_ids=true, to_apply=%add")

    def comp(name, lines):
        return (f"%{name} (a: f32[64]) -> f32[64] {{\n  %a = f32[64]{{0}} parameter(0)\n  "
                + "\n  ".join(lines) + "\n}\n")

    recv = ["%t = token[] after-all()",
            f"%rv = (f32[64]{{0}}, u32[], token[]) recv(%t), channel_id=9, {fa}",
            "%rd = (f32[64]{0}, token[]) recv-done(%rv), channel_id=9",
            "%d = f32[64]{0} get-tuple-element(%rd), index=0"]
    send = [f"%s = (f32[64]{{0}}, u32[], token[]) send(%a, %t), channel_id=9, {fa}",
            "%sd = token[] send-done(%s), channel_id=9"]
    permute = "ROOT %r = f32[64]{{0}} collective-permute(%a), channel_id={ch}, " \
              "source_target_pairs={pairs}"
    comps = [
        comp("lo", ["ROOT %r = " + ar.format(x="%a", ch=1, g=f"[{n // 8},8]<=[{n}]")]),
        comp("hi", ["ROOT %r = " + ar.format(x="%a", ch=2, g=f"[{n // 2},2]<=[{n}]")]),
        comp("fwd", [permute.format(ch=3, pairs=fwd)]),
        comp("bwd", [permute.format(ch=4, pairs=bwd)]),
        comp("first", ["%t = token[] after-all()"] + send + ["ROOT %o = f32[64]{0} copy(%a)"]),
        # recv, send, recv-done, send-done: the order the schedule gives one channel
        comp("mid", recv[:2] + send[:1] + recv[2:] + send[1:] +
             ["ROOT %o = f32[64]{0} add(%d, %a)"]),
        comp("last", recv + ["ROOT %o = f32[64]{0} copy(%d)"]),
    ]
    entry = ["%x = f32[64]{0} parameter(0)", "%pid = u32[] partition-id()",
             "%rid = u32[] replica-id()", f"%half = u32[] constant({P // 2})",
             "%low = pred[] compare(%pid, %half), direction=LT",
             "%two = u32[] constant(2)", "%par = u32[] remainder(%rid, %two)",
             "%zero = u32[] constant(0)", f"%lastid = u32[] constant({P - 1})",
             "%s0 = s32[] constant(0)", "%s1 = s32[] constant(1)", "%s2 = s32[] constant(2)",
             "%isf = pred[] compare(%pid, %zero), direction=EQ",
             "%isl = pred[] compare(%pid, %lastid), direction=EQ",
             "%ml = s32[] select(%isl, %s2, %s1)", "%stage = s32[] select(%isf, %s0, %ml)"]
    v = "%x"
    for b in range(blocks):
        entry += [(f"%h{b} = f32[64]{{0}} conditional(%low, {v}, {v}), "
                   "true_computation=%lo, false_computation=%hi"),
                  (f"%p{b} = f32[64]{{0}} conditional(%par, %h{b}, %h{b}), "
                   "branch_computations={%fwd, %bwd}"),
                  (f"%q{b} = f32[64]{{0}} conditional(%stage, %p{b}, %p{b}, %p{b}), "
                   "branch_computations={%first, %mid, %last}"),
                  f"%e{b} = " + ar.format(x=f"%q{b}", ch=5, g=f"[1,{n}]<=[{n}]")]
        v = f"%e{b}"
    entry += ["%ps = s32[] convert(%pid)",
              (f"%trips = s32[] all-reduce(%ps), channel_id=6, replica_groups=[1,{n}]<=[{n}], "
               "use_global_device_ids=true, to_apply=%max"),
              f"%init = (s32[], f32[64]{{0}}, s32[]) tuple(%s0, {v}, %trips)",
              "%loop = (s32[], f32[64]{0}, s32[]) while(%init), condition=%cond, body=%body",
              "ROOT %out = f32[64]{0} get-tuple-element(%loop), index=1"]
    return f"""HloModule classes_bench, replica_count=2, num_partitions={P}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}}

%max (a: s32[], b: s32[]) -> s32[] {{
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %m = s32[] maximum(%a, %b)
}}

{"".join(comps)}
%cond (p: (s32[], f32[64], s32[])) -> pred[] {{
  %p = (s32[], f32[64]{{0}}, s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %l = s32[] get-tuple-element(%p), index=2
  ROOT %lt = pred[] compare(%i, %l), direction=LT
}}

%body (p: (s32[], f32[64], s32[])) -> (s32[], f32[64], s32[]) {{
  %p = (s32[], f32[64]{{0}}, s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %y = f32[64]{{0}} get-tuple-element(%p), index=1
  %l = s32[] get-tuple-element(%p), index=2
  %c1 = s32[] constant(1)
  %i2 = s32[] add(%i, %c1)
  %y2 = {ar.format(x="%y", ch=7, g=f"[{n // 8},8]<=[{n}]")}
  ROOT %t = (s32[], f32[64]{{0}}, s32[]) tuple(%i2, %y2, %l)
}}

ENTRY %main (x: f32[64]) -> f32[64] {{
  {chr(10).join("  " + ln for ln in entry).lstrip()}
}}
"""


def _timed(module, **kw) -> tuple[float, object]:
    s = time.perf_counter()
    report = check_module(module, **kw)
    return time.perf_counter() - s, report


def _verdict(report) -> str:
    if any("within the budget" in p.message for p in report.problems):
        return "over budget"
    return "proven" if report.ok and not report.problems else "NOT proven"


def sweep_trips() -> None:
    """Induction against full unrolling (engine='unroll', the pre-induction algorithm) at
    growing trip counts; unrolling is measured only where it finishes in a minute."""
    print("| iterations | induction | unroll (reference) | ratio |")
    print("|---|---|---|---|")
    for trips in (1_000, 10_000, 100_000, 1_000_000):
        module = xladist.parse_hlo(loop_module(trips))
        fast, rf = _timed(module)
        if trips <= 10_000:
            slow, rs = _timed(module, engine="unroll", budget=60)
            ref = f"{slow:.3f} s ({_verdict(rs)})"
            ratio = f"{slow / max(fast, 1e-6):,.0f}x"
        else:
            ref, ratio = "not run", "-"
        print(f"| {trips:,} | {fast:.4f} s ({_verdict(rf)}) | {ref} | {ratio} |")


def _device_rows(make, counts, per_device_up_to):
    """Per device count: (n, parse s, check s, x of the first, the per-device reference
    text, report) for the module `make(n)`, the reference (symmetry=False: every device
    traced) only up to `per_device_up_to` devices."""
    base = None
    for n in counts:
        s = time.perf_counter()
        module = xladist.parse_hlo(make(n))
        parse = time.perf_counter() - s
        t, report = _timed(module)
        base = base or t
        if n <= per_device_up_to:
            slow, rs = _timed(module, symmetry=False)
            ref = f"{slow:.2f} s ({_verdict(rs)}, {slow / max(t, 1e-6):.0f}x slower)"
        else:
            ref = "not run"
        yield n, parse, t, t / base, ref, report


def sweep_devices(counts=(64, 256, 1024, 4096, 16384), per_device_up_to=1024) -> None:
    """600 ops at growing partition counts, default budget (10 s): the default check (one
    symbolic trace for all devices, symmetry.py) against tracing every device
    (symmetry=False, the path before symmetry), the latter only up to `per_device_up_to`."""
    print("| partitions | parse | check (symmetry) | x of 64 | every device traced | verdict |")
    print("|---|---|---|---|---|---|")
    for n, parse, t, x, ref, report in _device_rows(lambda n: generate(600, n), counts,
                                                     per_device_up_to):
        how = "symmetric" if report.symmetric else "per device"
        print(f"| {n:,} | {parse:.1f} s | {t:.2f} s | {x:.1f}x | {ref} | "
              f"{_verdict(report)} ({how}) |", flush=True)


def sweep_classes(counts=(64, 256, 1024, 4096, 16384), per_device_up_to=1024) -> None:
    """`classes_module` (control depends on the ids) at growing device counts, default
    budget: the default check (one trace per class of devices, classes.py) against tracing
    every device (symmetry=False), the latter only up to `per_device_up_to`."""
    print("| devices | parse | check (classes) | x of 64 | classes | every device traced "
          "| verdict |")
    print("|---|---|---|---|---|---|---|")
    for n, parse, t, x, ref, report in _device_rows(classes_module, counts, per_device_up_to):
        print(f"| {n:,} | {parse:.2f} s | {t:.3f} s | {x:.1f}x | {report.classes} | {ref} "
              f"| {_verdict(report)} |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sweep", choices=("trips", "devices", "classes"))
    args = ap.parse_args(argv)
    if args.sweep:
        load = os.getloadavg()[0]
        print(f"load average {load:.1f} on {os.cpu_count()} cores (timings are noisy)")
        {"trips": sweep_trips, "devices": sweep_devices, "classes": sweep_classes}[args.sweep]()
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        return 0
    t0 = time.perf_counter()
    text = generate(args.ops, args.devices)
    t1 = time.perf_counter()
    module = xladist.parse_hlo(text)
    t2 = time.perf_counter()
    schedule_module(module)
    t3 = time.perf_counter()
    best, report = float("inf"), None
    for _ in range(args.repeat):
        s = time.perf_counter()
        report = check_module(module)  # includes scheduling, as the CLI runs it
        best = min(best, time.perf_counter() - s)
    events = sum(report.events.values())
    print(f"module: {args.ops} collectives/channel exchanges, {args.devices} devices, "
          f"{len(text.splitlines())} lines")
    print(f"generate {t1 - t0:.3f} s | parse {t2 - t1:.3f} s | schedule {t3 - t2:.3f} s | "
          f"check (best of {args.repeat}, incl. schedule) {best:.3f} s")
    print(f"{events} communication events simulated ({events / best:,.0f}/s); "
          f"proven: {report.ok}")
    if not report.ok:
        print(report.to_text())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
