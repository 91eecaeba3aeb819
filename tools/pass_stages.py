"""Every pass stage of an XLA:CPU compile computes the same function: check both backends on each.

    python tools/pass_stages.py [CASE ...] [--backends interpreter,cpu] [--keep DIR]
    python tools/pass_stages.py --multi [CASE ...]     # tools/gen_corpus.py's SPMD cases

For each zoo case (tools/zoo_cases/; default: all), jax compiles the case with
`--xla_dump_hlo_pass_re=.*`, which writes the module after every HLO pass: the portable
module, the module after inlining, algebraic simplification, layout assignment (copies,
bitcasts, non-default layouts), fusion (kLoop/kInput/kOutput fusions), scheduling, and so
on. Each distinct stage is a real XLA module computing the same function, so each must give
XLA's results on the case's inputs. This runs every distinct stage (after metadata is
stripped) through xladist's backends and compares with what XLA:CPU returned, under the
case's tolerances (tests/corpus_util.py's rule).

With --multi the cases are gen_corpus.py's multi-device programs: every distinct stage
after SPMD partitioning (per-device shapes, XLA's collectives, combiners, async forms)
runs on N ranks with `xladist.run` against JAX's per-device results.

It is a differential search, not a test: the dumps are large and need jax. A wrong stage is
reported as `case stage backend: message`, with the stage file kept for reproduction when
--keep is given. Exit 1 when any stage failed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

_METADATA = re.compile(r", metadata=\{[^{}]*\}")


def _stage_files(dump: Path) -> list[Path]:
    """The dump's pass-stage texts in pass order, one per distinct module text."""
    seen, out = set(), []
    for f in sorted(dump.glob("*.txt"), key=lambda p: p.name):
        if "buffer-assignment" in f.name or "memory-usage" in f.name or ".ir-" in f.name:
            continue
        text = f.read_text()
        if not text.lstrip().startswith("HloModule"):
            continue
        key = hashlib.sha256(_METADATA.sub("", text).encode()).hexdigest()
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _dump_into(dump: Path) -> None:
    """Make XLA dump every pass stage into `dump`: before jax starts its backend (it reads
    XLA_FLAGS once), so before the zoo modules import jax."""
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} "
                               "--xla_dump_hlo_pass_re=.* --xla_dump_hlo_as_text --xla_dump_large_constants"
                               ).strip()


def _jit(case):
    """Compile and run `case` (its stages land in the dump): (host inputs, XLA's outputs)."""
    import zlib

    import jax
    import jax.numpy as jnp
    import numpy as np
    jax.config.update("jax_enable_x64", case.x64)
    try:
        host = [np.asarray(a) for a in
                case.make_inputs(np.random.default_rng(zlib.crc32(case.name.encode())))]
        compiled = jax.jit(case.fn).lower(*[jnp.asarray(a) for a in host]).compile()
        outs = [np.asarray(o) for o in
                jax.tree_util.tree_leaves(compiled(*[jnp.asarray(a) for a in host]))]
    finally:
        jax.config.update("jax_enable_x64", False)
    return host, outs


def _try_stage(problems: list[str], what: str, f: Path, keep: Path | None, run) -> None:
    """Run `run()` (which asserts a stage's results); a failure is recorded as a finding
    `what: error` and, with --keep, the stage file is kept for reproduction."""
    try:
        run()
    except Exception as e:  # noqa: BLE001 -- every failure is a finding
        msg = " ".join(str(e).split())[:300]
        problems.append(f"{what}: {type(e).__name__}: {msg}")
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f.name).write_text(f.read_text())


def check_case(name: str, backends: list[str], dump: Path, keep: Path | None) -> list[str]:
    """Problems found in case `name` (empty: every stage on every backend matched)."""
    import corpus_util
    from zoo_cases import CASES

    import xladist
    case = CASES[name]
    meta = {"rtol": case.rtol, "atol": case.atol, "out_tol": case.out_tol}
    problems = []
    host, want = _jit(case)
    stages = [f for f in _stage_files(dump) if f".jit_{name}." in f.name]
    for f in stages:
        stage = f.name.split(f".jit_{name}.", 1)[1].removesuffix(".txt")
        module = xladist.parse_hlo(f.read_text(), filename=f.name)
        for backend in backends:
            def run(backend=backend, module=module):
                got = xladist.compile(module, backend=backend)(*host)
                assert len(got) == len(want), f"{len(got)} results, XLA gave {len(want)}"
                for i, (g, w) in enumerate(zip(got, want)):
                    corpus_util.assert_output(g, w, meta, f"out{i}", f"out{i}")
            _try_stage(problems, f"{name} {stage} {backend}", f, keep, run)
    print(f"{name}: {len(stages)} distinct stages x {len(backends)} backends, "
          f"{len(problems)} failed", flush=True)
    return problems


def check_multi_case(name: str, backends: list[str], dump: Path,
                     keep: Path | None) -> list[str]:
    """Problems found in gen_corpus case `name`'s post-partitioning stages on N ranks."""
    import zlib

    import corpus_util
    import gen_corpus as gc
    import numpy as np
    from jax.sharding import PartitionSpec as P

    import xladist
    from xladist.jax import lowering as xj
    case = gc.CASES[name]
    if case.reference is not None:
        return []  # XLA:CPU cannot run it: no per-stage reference
    host = case.make_inputs(np.random.default_rng(zlib.crc32(name.encode())))
    out_specs = case.out_specs if isinstance(case.out_specs, P) else list(case.out_specs)
    before = set(dump.glob("*.txt"))
    prep = xj.prepare(gc._program(case), *host,
                      mesh_shape=dict(zip(case.axis_names, case.mesh_shape)),
                      in_specs=list(case.in_specs), out_specs=out_specs)
    ins = xj.input_rows(prep)
    _, compiled, final = xj.compile_text(prep)
    want = xj.output_rows(prep, compiled)
    meta = {"rtol": case.rtol, "atol": case.atol, "out_tol": case.out_tol}
    local = [p.shape for p in final.entry.parameters]
    new = [f for f in _stage_files(dump) if f not in before]
    problems, ran = [], 0
    for f in new:
        module = xladist.parse_hlo(f.read_text(), filename=f.name)
        if [p.shape for p in module.entry.parameters] != local:
            continue  # before partitioning: global shapes
        ran += 1
        stage = f.name.split(".", 2)[2].removesuffix(".txt")
        for backend in backends:
            def run(backend=backend, module=module):
                got = xladist.run(module, ins, n=prep.n, backend=backend, timeout=120)
                for d in range(prep.n):
                    assert len(got[d]) == len(want), f"{len(got[d])} results, XLA gave {len(want)}"
                    for i, w in enumerate(want):
                        corpus_util.assert_output(got[d][i], w[d], meta, f"out{i}",
                                                  f"device {d} out{i}")
            _try_stage(problems, f"{name} {stage} {backend}", f, keep, run)
    print(f"{name}: {ran} distinct partitioned stages x {len(backends)} backends on "
          f"{prep.n} ranks, {len(problems)} failed", flush=True)
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="zoo cases (default: all)")
    ap.add_argument("--backends", default="interpreter,cpu")
    ap.add_argument("--keep", type=Path, default=None,
                    help="copy the stage files that failed into this folder")
    ap.add_argument("--multi", action="store_true",
                    help="tools/gen_corpus.py's multi-device cases instead of the zoo's")
    args = ap.parse_args(argv)
    tmp = tempfile.TemporaryDirectory()
    dump = Path(tmp.name)
    _dump_into(dump)
    if args.multi:
        import gen_corpus
        CASES, check = gen_corpus.CASES, check_multi_case
    else:
        from zoo_cases import CASES
        check = check_case
    names = args.cases or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown cases: {', '.join(unknown)}")
    problems = []
    for name in names:
        try:
            problems += check(name, args.backends.split(","), dump, args.keep)
        except Exception as e:  # noqa: BLE001 -- a case jax cannot build is reported
            problems.append(f"{name}: could not be built: {type(e).__name__}: {e}")
    for p in problems:
        print(p)
    print(f"{len(names)} cases, {len(problems)} failed stage runs")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
