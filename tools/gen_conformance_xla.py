"""Record XLA:CPU's outputs for the conformance suite's programs, as digests, into
xladist/conformance/data/xla_cpu.json (read by xladist/conformance/recorded.py: the kit checks
its reference against them, tests/conformance/test_recorded.py too).

    pip install jax            # jax 0.10.2 wrote the committed file
    python tools/gen_conformance_xla.py            # n = 2, 3, 4, 8
    python tools/gen_conformance_xla.py -n 4 -v    # one device count, disagreements in full

What XLA:CPU runs: every unit of the default plan whose module has one partition (XLA:CPU
compiles several partitions only through its SPMD partitioner), with XLA's default device
assignment and the reversed one, and only the ops XLA:CPU has thunks for (all-reduce,
all-gather, reduce-scatter, all-to-all, collective-permute, their async forms:
docs/reference/collective-semantics.md H.30) -- not collective-broadcast, ragged-all-to-all,
send/recv or feeds. A program XLA refuses as a whole is split into its cases, and the cases
XLA refuses alone are listed under "refused" with XLA's message. Each case's digest covers
every device's values (checks.digest: any NaN alike in reductions). The tool also runs the
kit's reference and prints every case where it disagrees with XLA, with the first differing
element; the file records XLA's side only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "xladist" / "conformance" / "data" / "xla_cpu.json.gz"
XLA_OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "all-to-all-tuple",
           "collective-permute")


class XlaCpuWorker:
    """XlaCpu in a child process: XLA aborts the process on some programs (a CHECK failure),
    so each program runs there, and a crash costs the child only (it is started again)."""

    def __init__(self):
        import multiprocessing
        self.ctx = multiprocessing.get_context("spawn")
        self.proc = None
        self.version = None

    def _start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_serve, args=(child,), daemon=True)
        self.proc.start()
        self.version = self.conn.recv()

    def run(self, text, inputs, da):
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send((text, inputs, da))
        try:
            ok, value = self.conn.recv()
        except EOFError:
            self.proc.join()
            self.proc = None
            raise RuntimeError("XLA:CPU aborted the process (a CHECK failure; its message is "
                               "on the tool's stderr)") from None
        if not ok:
            raise RuntimeError(value)
        return value


def _serve(conn):
    xla = XlaCpu()
    conn.send(xla.version)
    while True:
        try:
            text, inputs, da = conn.recv()
        except EOFError:
            return
        try:
            conn.send((True, xla.run(text, inputs, da)))
        except Exception as e:  # noqa: BLE001 - sent back as XLA's refusal
            conn.send((False, f"{type(e).__name__}: {e}"))


class XlaCpu:
    def __init__(self):
        os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
        import jax
        jax.config.update("jax_enable_x64", True)
        import jaxlib._hlo as hlo
        from jax._src.lib import xla_client as xc
        self.jax, self.hlo, self.xc = jax, hlo, xc
        self.client = jax.devices("cpu")[0].client
        self.version = jax.__version__

    def run(self, text: str, inputs, da) -> list[list[np.ndarray]]:
        """Every device's flattened outputs of a one-partition module, device d = da[r][0]."""
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        jax, xc = self.jax, self.xc
        module = self.hlo.hlo_module_from_text(text)
        mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
        order = [row[0] for row in da]
        opts = xc.CompileOptions()
        opts.executable_build_options.num_replicas = len(order)
        opts.executable_build_options.num_partitions = 1
        opts.device_assignment = xc.DeviceAssignment.create(np.array(order)[:, None])
        byid = {d.id: d for d in self.client.devices()}
        devs = [byid[i] for i in order]
        exe = self.client.compile_and_load(mlir, devs, opts)
        sharding = NamedSharding(Mesh(np.array(devs), ("r",)), PartitionSpec("r"))
        args = [jax.device_put(np.stack([inputs[d][i] for d in order]), sharding)
                for i in range(len(inputs[0]))]
        leaves = exe.execute_sharded(args).disassemble_into_single_device_arrays()
        out = [[None] * len(leaves) for _ in order]
        for k, per_device in enumerate(leaves):
            for r, a in enumerate(per_device):
                out[order[r]][k] = np.asarray(a).reshape(np.asarray(a).shape)
        return out


def case_values(check, outs):
    return [v for d in range(len(outs))
            for v in outs[d][check.first_leaf:check.first_leaf + check.leaves]]


def xla_text(unit) -> str:
    """The unit's module in forms XLA's importer takes, with the same parameters and values:
    async forms as their sync op (F.23; XLA:CPU runs them synchronously anyway, and the
    StableHLO import refuses several), and an array all-to-all's empty groups written out
    (A.5). Run with the unit's own inputs (ValueError when the parameters differ)."""
    import dataclasses
    synced = dataclasses.replace(unit, specs=[dataclasses.replace(s, sync=True)
                                              for s in unit.specs])
    if [p.ty for p in synced.program.params] != [p.ty for p in unit.program.params]:
        raise ValueError("the sync form of this program takes other parameters")
    text = synced.program.text()
    if unit.op == "all-to-all":
        everyone = "{{" + ",".join(map(str, range(unit.R))) + "}}"
        text = "\n".join(line.replace("replica_groups={}", f"replica_groups={everyone}")
                         if "all-to-all(" in line and "channel_id" not in line else line
                         for line in text.splitlines())
    return text


def _kinds(got: np.ndarray, ref: np.ndarray, red, exact: str) -> set[str]:
    """Why XLA:CPU's value differs from the reference's, element by element: the known ways
    XLA:CPU's runtime departs from IEEE arithmetic and bit-exact data movement."""
    from xladist.conformance.checks import _is_float
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return {"other"}
    if not _is_float(ref.dtype):
        return {"other"} if not np.array_equal(got, ref) else set()
    wide = np.complex128 if ref.dtype.kind == "c" else np.float64
    with np.errstate(invalid="ignore"):
        g, r = got.astype(wide).reshape(-1), ref.astype(wide).reshape(-1)
    gb = np.ascontiguousarray(got).reshape(-1).view(np.uint8).reshape(g.size, -1)
    rb = np.ascontiguousarray(ref).reshape(-1).view(np.uint8).reshape(r.size, -1)
    out = set()
    import ml_dtypes
    part = {"complex64": np.float32, "complex128": np.float64}.get(ref.dtype.name, ref.dtype)
    tiny = float(ml_dtypes.finfo(part).smallest_normal)
    for k in np.flatnonzero((gb != rb).any(axis=1)):
        a, b = g[k], r[k]
        if np.isnan(a) and np.isnan(b):
            if exact == "bits":  # a reduction may return any NaN
                out.add("a NaN payload or sign is not kept")
        elif np.isnan(b) and red in ("minimum", "maximum"):
            out.add("min/max drop a NaN")
        elif a == 0 and b == 0:
            if not (exact == "reduce" and ref.dtype.kind == "c"):  # compared as values
                out.add("the sign of a zero sum is lost")
        elif a == 0 and abs(b) < tiny:
            out.add("subnormals are flushed to zero")
        else:
            out.add("other")
    return out


def record_unit(xla, unit, verbose, recorded, refused, disagree):
    from xladist.conformance.checks import digest, first_difference
    from xladist.conformance.reference import reference_run
    prog = unit.program
    try:
        outs = xla.run(xla_text(unit), prog.per_device_inputs(), prog.da)
    except Exception as e:  # noqa: BLE001 - XLA refused the program: try its cases alone
        if len(unit.specs) > 1:
            for k in range(len(unit.specs)):
                record_unit(xla, unit.alone(k), verbose, recorded, refused, disagree)
            return
        refused[unit.cases[0].name] = str(e).splitlines()[0][:200]
        return
    want, _ = reference_run(prog.text(), prog.per_device_inputs(), prog.n,
                            device_assignment=prog.da)
    for c in prog.checks:
        got = case_values(c, outs)
        recorded[c.name] = digest(got, c.exact)
        ref = case_values(c, want)
        if digest(ref, c.exact) != recorded[c.name]:
            why = next((f"value {k}: {w}" for k, (g, r) in enumerate(zip(got, ref))
                        if (w := first_difference(g, r, exact=c.exact))), "?")
            red = next((s.red for s in unit.specs if unit.name(s) == c.name), None)
            kinds = set().union(*(_kinds(np.asarray(g), np.asarray(r), red, c.exact)
                                  for g, r in zip(got, ref)))
            disagree[c.name] = (", ".join(sorted(kinds)), why)


def main(argv=None) -> int:
    from xladist.conformance.suite import DEVICE_COUNTS, Plan, generated_units
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, action="append", help="device counts (default 2 3 4 8)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    xla = XlaCpuWorker()
    recorded: dict[str, str] = {}
    refused: dict[str, str] = {}
    disagree: dict[str, tuple[str, str]] = {}
    for n in args.n or DEVICE_COUNTS:
        units = [u for u in generated_units(n, Plan(xla=False)) if u.P == 1 and u.op in XLA_OPS]
        for k, unit in enumerate(units):
            print(f"n={n}: {unit.key} ({k + 1}/{len(units)})", file=sys.stderr)
            record_unit(xla, unit, args.verbose, recorded, refused, disagree)
    OUT.parent.mkdir(exist_ok=True)
    doc = {"jax": xla.version, "tool": "tools/gen_conformance_xla.py", "cases": recorded,
           "refused": refused, "deviations": {k: v[0] for k, v in disagree.items()}}
    with gzip.open(OUT, "wt") as f:
        json.dump(doc, f, indent=0, sort_keys=True)
    from collections import Counter
    kinds = Counter(k for k, _ in disagree.values())
    print(f"{len(recorded)} cases recorded, {len(refused)} refused by XLA:CPU, "
          f"{len(disagree)} where XLA:CPU departs from the reference -> "
          f"{OUT.relative_to(ROOT)}")
    for kind, count in kinds.most_common():
        print(f"  {count:5d}  {kind}")
    for name, (kind, why) in list(disagree.items())[:None if args.verbose else 20]:
        print(f"  {name}: {kind}: {why}")
    return 1 if any("other" in k for k in kinds) else 0


if __name__ == "__main__":
    sys.exit(main())
