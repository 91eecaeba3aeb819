"""`xladist explain MODULE`: what the cpu backend made of a module.

Prints, per compiled computation, the thunk list in execution order: the thunk
kind (kernel / library / control / device), the kernel and its loop kind, the
instructions fused into it, and the buffers it reads and writes (slot id, shape,
bytes, where it lives: arena offset, parameter, result, static, dynamic).
Dynamic-update-slice and scatter kernels that update their operand's buffer in
place say so; a while loop lists the carry leaves its body updates in place.
"""

from __future__ import annotations

import argparse
import json
import os

HELP = "show the cpu backend's thunk list for a module (kernels, fusion, buffers)"

EPILOG = """\
examples:
  xladist explain module.hlo               thunk list of every computation
  xladist explain module.hlo --json        the same as JSON
  xladist explain module.hlo --ir          the LLVM IR of every kernel (before optimization)
  xladist explain module.hlo --no-buffers  kernels and fusion only
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="MODULE", help="HLO text file")
    parser.add_argument("--json", action="store_true", help="print the thunk lists as JSON")
    parser.add_argument("--ir", action="store_true", help="print the kernels' LLVM IR")
    parser.add_argument("--no-buffers", action="store_true", help="omit buffer lists")


def run(args) -> int:
    from xladist.compiler import CpuProgram
    from xladist.compiler.blas_blocks import llvm_gemm_info
    from xladist.compiler.parallel import blas_info, thread_count, worker_cpus
    from xladist.hlo.dynamic_padder import pad_dynamic
    from xladist.hlo.parser import parse_file
    from xladist.hlo.verifier import verify_module
    from xladist.semantics.custom_calls import check_partitioned

    module = parse_file(args.file, "MODULE")
    check_partitioned(module)  # before the verifier, whose hint would not help
    verify_module(module)
    module, _ = pad_dynamic(module)  # what the cpu backend compiles: the padded module
    program = CpuProgram(module)
    if args.ir:
        print(program.llvm_ir())
        return 0
    data = program.explain()
    if args.json:
        print(json.dumps({"module": module.name, "cached": program.cached,
                          "threads": thread_count(), "worker_cpus": worker_cpus(thread_count()),
                          "blas": blas_info(),
                          "llvm_gemm": llvm_gemm_info() if blas_info() else {},
                          "timings_s": program.timings, "computations": data}, indent=1))
        return 0
    t = program.timings
    source = "kernel cache" if program.cached else "compiled"
    print(f"module {module.name}: {sum(len(c['thunks']) for c in data)} thunks, "
          f"{len(program.builder.kernels)} kernels ({source}, "
          f"{t['total'] * 1e3:.1f} ms)")
    cpus = worker_cpus(thread_count())
    pinned = (f"; workers pinned to cores {', '.join(map(str, cpus))}, woken off the "
              f"caller's core" if cpus else "")
    print(f"compute threads: {thread_count()} (XLADIST_THREADS, or the cores of this "
          f"process's CPU affinity mask){pinned}")
    for b in blas_info():
        plural = "" if b["threads"] == 1 else "s"
        print(f"BLAS: {b['library']}, OpenBLAS kernel {b['core']} (OPENBLAS_CORETYPE="
              f"{os.environ.get('OPENBLAS_CORETYPE', 'unset')}), {b['threads']} thread{plural}; "
              f"large dots and convolutions split on the compute threads (or, a large "
              f"product where measured faster and giving the same bits, one call on "
              f"{thread_count()} OpenBLAS threads)")
    if blas_info():
        cuts = llvm_gemm_info()
        offered = [f"{name} (K cut {c['q']}, unroll {c['unroll']})"
                   for name, c in cuts.items() if c]
        print("LLVM GEMM: " + (f"offered for large {', '.join(offered)} products, their "
                               f"blocks summed as OpenBLAS sums them, where a check on "
                               f"random operands shows the same bits" if offered else
                               "not offered (no cut of K gives this BLAS's bits)"))
    print("split calls run on the pool or on the caller alone, whichever each call site "
          "measures faster in the current regime (compiler/choice.py); same results")
    for comp in data:
        print(f"\ncomputation {comp['computation']}  (arena {comp['arena_bytes']} B, "
              f"{comp['slots']} buffers)")
        for i, th in enumerate(comp["thunks"]):
            if "kernel" in th:
                fused = [f for f in th["fused"] if f != th["instruction"]]
                head = f"kernel  {th['kernel']} [{th['loop']}] root {th['instruction']}"
                if th.get("in_place"):
                    head += "  (in place: writes only the update into its operand's buffer)"
                print(f"  {i:3d} {head}")
                print(f"        split: {th['split']}")
                if fused:
                    print(f"        fuses: {', '.join(fused)}")
            else:
                print(f"  {i:3d} {th['kind']:<7} {th['what']} ({th['instruction']})")
                if "split" in th:
                    print(f"        split: {th['split']}")
            if not args.no_buffers:
                if th["reads"]:
                    print(f"        reads:  {'; '.join(th['reads'])}")
                if th["writes"]:
                    print(f"        writes: {'; '.join(th['writes'])}")
    return 0
