"""What runs before the first step, against module size: generated modules, each phase timed.

    python benchmarks/startup_scaling.py [--cases chain,lin,calls,fan,literal,loop]
        [--sizes 100,1000,10000] [--phases parse,print,verify,check,unpack,cold,warm]

Each case is a family of generated modules (`CASES`), one per size:
  chain    element-wise ops, each using the two before it (f32[8]);
  lin      single-use element-wise ops in a row (one fusion chain);
  calls    an entry calling that many computations of its own;
  fan      one parameter used by that many instructions;
  literal  an f32[size] constant added to the input;
  loop     a while loop of `size` iterations around an all-reduce, 2 replicas (the check
           and the compile must not grow with it);
  nested   that loop inside a loop of `size` iterations (not in the default --cases: the
           check still grows with both trip counts, 1,000 x 1,000 runs out of its 10 s).
Phases: `xladist.parse_hlo`, printing (`to_text`), the verifier, the deadlock check
(check_module on the module's devices), unpacking the form the launcher ships its ranks
(hlo/packed.py), `xladist.compile` into a fresh kernel cache (cold) and again (warm).
One process, one run per cell (the parse runs once before the table, so imports are not
counted); seconds. `xladist run` adds launching, imports and MPI start-up on top
(benchmarks/warm_run.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ADD = "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n" \
      "  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n"


def _entry(name: str, body: list[str], params: str = "x: f32[8]", out: str = "f32[8]",
           header: str = "") -> str:
    body[-1] = body[-1].replace("  %", "  ROOT %", 1)
    return (f"HloModule {name}\n\n{header}ENTRY %main ({params}) -> {out} {{\n"
            + "\n".join(body) + "\n}\n")


def chain(n: int) -> str:
    ops = ["add", "multiply", "subtract", "maximum"]
    body = ["  %v0 = f32[8] parameter(0)"] + [
        f"  %v{i} = f32[8] negate(%v{i - 1})" if i % 3 == 0 else
        f"  %v{i} = f32[8] {ops[i % 4]}(%v{i - 1}, %v{max(0, i - 2)})" for i in range(1, n)]
    return _entry("chain", body)


def lin(n: int) -> str:
    body = ["  %v0 = f32[8] parameter(0)"] + [
        f"  %v{i} = f32[8] {'negate' if i % 2 else 'exponential'}(%v{i - 1})"
        for i in range(1, n)]
    return _entry("lin", body)


def calls(n: int) -> str:
    comps = "".join(f"%f{i} (p: f32[8]) -> f32[8] {{\n  %p = f32[8] parameter(0)\n"
                    f"  ROOT %r = f32[8] negate(%p)\n}}\n\n" for i in range(n))
    body = ["  %v0 = f32[8] parameter(0)"] + [
        f"  %v{i + 1} = f32[8] call(%v{i}), to_apply=%f{i}" for i in range(n)]
    return _entry("calls", body, header=comps)


def fan(n: int) -> str:
    body = ["  %x = f32[8] parameter(0)"] + [f"  %m{i} = f32[8] multiply(%x, %x)"
                                             for i in range(n)]
    body += [f"  %t = ({', '.join(['f32[8]'] * n)}) tuple("
             + ", ".join(f"%m{i}" for i in range(n)) + ")",
             "  %r = f32[8] get-tuple-element(%t), index=0"]
    return _entry("fan", body)


def literal(n: int) -> str:
    values = ", ".join(f"{v:.6g}" for v in np.linspace(-1, 1, n, dtype=np.float32))
    return _entry("literal", [f"  %x = f32[{n}] parameter(0)",
                              f"  %c = f32[{n}] constant({{{values}}})",
                              f"  %a = f32[{n}] add(%x, %c)"],
                  params=f"x: f32[{n}]", out=f"f32[{n}]")


def loop(n: int, outer: int = 0) -> str:
    t = "(s32[], f32[8])"
    inner = (f"%wcond (t: {t}) -> pred[] {{\n  %t = {t} parameter(0)\n"
             f"  %i = s32[] get-tuple-element(%t), index=0\n  %n = s32[] constant({outer})\n"
             f"  ROOT %lt = pred[] compare(%i, %n), direction=LT\n}}\n\n"
             f"%wbody (t: {t}) -> {t} {{\n  %t = {t} parameter(0)\n"
             f"  %i = s32[] get-tuple-element(%t), index=0\n"
             f"  %v = f32[8] get-tuple-element(%t), index=1\n  %one = s32[] constant(1)\n"
             f"  %i1 = s32[] add(%i, %one)\n  %z = s32[] constant(0)\n"
             f"  %t0 = {t} tuple(%z, %v)\n  %w = {t} while(%t0), condition=%cond, body=%body\n"
             f"  %s = f32[8] get-tuple-element(%w), index=1\n"
             f"  ROOT %r = {t} tuple(%i1, %s)\n}}\n\n") if outer else ""
    names = "condition=%wcond, body=%wbody" if outer else "condition=%cond, body=%body"
    return (f"HloModule loop, replica_count=2\n\n{ADD}"
            f"%cond (t: {t}) -> pred[] {{\n  %t = {t} parameter(0)\n"
            f"  %i = s32[] get-tuple-element(%t), index=0\n  %n = s32[] constant({n})\n"
            f"  ROOT %lt = pred[] compare(%i, %n), direction=LT\n}}\n\n"
            f"%body (t: {t}) -> {t} {{\n  %t = {t} parameter(0)\n"
            f"  %i = s32[] get-tuple-element(%t), index=0\n"
            f"  %v = f32[8] get-tuple-element(%t), index=1\n  %one = s32[] constant(1)\n"
            f"  %i1 = s32[] add(%i, %one)\n"
            f"  %s = f32[8] all-reduce(%v), to_apply=%add, replica_groups={{}}\n"
            f"  ROOT %r = {t} tuple(%i1, %s)\n}}\n\n{inner}"
            f"ENTRY %main (x: f32[8]) -> f32[8] {{\n  %x = f32[8] parameter(0)\n"
            f"  %z = s32[] constant(0)\n  %t0 = {t} tuple(%z, %x)\n"
            f"  %w = {t} while(%t0), {names}, "
            f"backend_config={{\"known_trip_count\":{{\"n\":\"{n}\"}}}}\n"
            f"  ROOT %o = f32[8] get-tuple-element(%w), index=1\n}}\n")


CASES = {"chain": chain, "lin": lin, "calls": calls, "fan": fan, "literal": literal,
         "loop": loop, "nested": lambda n: loop(n, outer=n)}
PHASES = ["parse", "print", "verify", "check", "unpack", "cold", "warm"]


def measure(text: str, phases: list[str]) -> dict[str, float]:
    import xladist
    from xladist.analysis.deadlock import check_module
    from xladist.hlo.packed import pack, unpack
    from xladist.hlo.verifier import verify_module
    out: dict[str, float] = {}

    def timed(name, fn):
        t0 = time.perf_counter()
        result = fn()
        out[name] = time.perf_counter() - t0
        return result

    module = timed("parse", lambda: xladist.parse_hlo(text))
    if "print" in phases:
        timed("print", module.to_text)
    report = timed("verify", lambda: verify_module(module))
    if "check" in phases:
        timed("check", lambda: check_module(module, report.num_devices))
    if "unpack" in phases:
        data = pack(module)
        timed("unpack", lambda: unpack(data))
    if "cold" in phases or "warm" in phases:
        old = os.environ.get("XLADIST_CACHE_DIR")
        with tempfile.TemporaryDirectory(prefix="xladist-startup-") as cache:
            os.environ["XLADIST_CACHE_DIR"] = cache
            try:
                timed("cold", lambda: xladist.compile(module))
                timed("warm", lambda: xladist.compile(module))
            finally:
                if old is None:
                    del os.environ["XLADIST_CACHE_DIR"]
                else:
                    os.environ["XLADIST_CACHE_DIR"] = old
    return {k: v for k, v in out.items() if k in phases}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(c for c in CASES if c != "nested"))
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--phases", default=",".join(PHASES))
    args = ap.parse_args(argv)
    phases = args.phases.split(",")
    import xladist
    xladist.parse_hlo(chain(3))  # the parser's imports, outside the table
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores; seconds")
    print("| case | size | KB | " + " | ".join(phases) + " |")
    print("|---|---|---|" + "---|" * len(phases))
    for case in args.cases.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            text = CASES[case](size)
            row = measure(text, phases)
            cells = " | ".join(f"{row[p]:.3f}" if p in row else "" for p in phases)
            print(f"| {case} | {size:,} | {len(text) / 1024:.0f} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
