"""Time the static deadlock check on a generated module: 1,000 collectives and channels, N=64.

    python benchmarks/deadlock_check.py [--ops 1000] [--devices 64] [--repeat 3]

The module (SPMD over N partitions) cycles through: an all-reduce over every device, an
all-reduce over groups of 8 (flattened ids, iota groups), an all-to-all, a collective-permute
ring, an async all-reduce overlapping a multiply, and a send/recv ring chain (recv, send,
recv-done, send-done counted as one channel exchange); a tenth of the ops sit in a while loop
of 10 iterations so the check also unrolls. Prints the generation, parse, schedule and check
times; the goal is a check under 2 s.
"""

from __future__ import annotations

import argparse
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1000)
    ap.add_argument("--devices", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
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
