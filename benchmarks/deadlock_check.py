"""Time the static deadlock check on a generated module: 1,000 collectives and channels, N=64.

    python benchmarks/deadlock_check.py [--ops 1000] [--devices 64] [--repeat 3]
    python benchmarks/deadlock_check.py --sweep trips     # 10^3..10^6 iterations, 2 replicas
    python benchmarks/deadlock_check.py --sweep devices   # 600 ops at 64..16,384 partitions, vs every device

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
from runtime.deadlock import check_module
from runtime.schedule import schedule_module

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


def sweep_devices(counts=(64, 256, 1024, 4096, 16384), per_device_up_to=1024) -> None:
    """600 ops at growing partition counts, default budget (10 s): the default check (one
    symbolic trace for all devices, symmetry.py) against tracing every device
    (symmetry=False, the path before symmetry), the latter only up to `per_device_up_to`."""
    print("| partitions | parse | check (symmetry) | x of 64 | every device traced | verdict |")
    print("|---|---|---|---|---|---|")
    base = None
    for n in counts:
        s = time.perf_counter()
        module = xladist.parse_hlo(generate(600, n))
        parse = time.perf_counter() - s
        t, report = _timed(module)
        base = base or t
        if n <= per_device_up_to:
            slow, rs = _timed(module, symmetry=False)
            ref = f"{slow:.2f} s ({_verdict(rs)}, {slow / max(t, 1e-6):.0f}x slower)"
        else:
            ref = "not run"
        how = "symmetric" if report.symmetric else "per device"
        print(f"| {n:,} | {parse:.1f} s | {t:.2f} s | {t / base:.1f}x | {ref} | "
              f"{_verdict(report)} ({how}) |", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sweep", choices=("trips", "devices"))
    args = ap.parse_args(argv)
    if args.sweep:
        load = os.getloadavg()[0]
        print(f"load average {load:.1f} on {os.cpu_count()} cores (timings are noisy)")
        sweep_trips() if args.sweep == "trips" else sweep_devices()
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
