"""Run the hand-written bounded-dynamic-shape programs (tools/dynamic_cases.py) on XLA:CPU and
write tests/data/corpus/dynamic/<case>/.

    pip install jax==0.4.30 jaxlib==0.4.30     # a jaxlib that still parses HLO text
    python tools/gen_dynamic_corpus.py [CASE ...]

XLA:CPU is reached through jaxlib's own client: `hlo_module_from_text` (the XLA HLO parser;
later jaxlibs no longer expose it) -> XlaComputation -> MLIR -> `client.compile` -> execute.
XLA returns a dynamic result in its padded buffer, so each case's `cuts` names the outputs that
hold the get-dimension-size of each dynamic dimension, and the buffer is cut with XLA's own
sizes (XLA packs the valid elements row-major at the front of the buffer). A case with a `reference` (dynamic-reshape: that jaxlib cannot lower it) gets its
expected values from that numpy function instead, and case.json's `expected_from` says so;
where XLA:CPU runs the program at some sizes (`xla_check`), the reference is checked against
it there.

Files per case (see tests/data/corpus/README.md, "dynamic/"): module.hlo (the program as
written, in xladist's canonical text, which XLA parses too), inputs.npz (`run{r}_arg{i}`, one run per size tuple; the sizes are the last
arguments), expected.npz (`run{r}_out{j}`, the flattened results cut to their dynamic sizes),
case.json (name, description, sizes, rtol, atol, num_outputs, generator versions).

JAX is needed only here; the tests read the committed files. Inputs come from a per-case seed
(crc32 of the name).
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dynamic_cases import CASES, Case  # noqa: E402

from xladist.hlo.parser import parse_module  # noqa: E402
from xladist.hlo.printer import print_module  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "corpus" / "dynamic"


def xla_cpu():
    import jax
    from jax._src.lib import xla_client as xc
    if not hasattr(xc._xla, "hlo_module_from_text"):
        raise SystemExit(f"jaxlib {jax.__version__} does not expose hlo_module_from_text; "
                         "pip install jax==0.4.30 jaxlib==0.4.30")
    client = jax.devices("cpu")[0].client
    return jax, xc, client


def run_on_xla(xc, client, text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    module = xc._xla.hlo_module_from_text(text)
    comp = xc.XlaComputation(module.as_serialized_hlo_module_proto())
    exe = client.compile(xc._xla.mlir.xla_computation_to_mlir_module(comp))
    device = client.devices()[0]
    outs = exe.execute([client.buffer_from_pyval(a, device) for a in args])
    return [np.asarray(o) for o in outs]


def inputs_for(case: Case, sizes: tuple[int, ...], rng) -> list[np.ndarray]:
    arrays = []
    for dtype, dims in case.args:
        if dtype == "idx5":  # indices into the first rows of a table (valid for n >= 5)
            arrays.append(rng.integers(0, 5, size=dims).astype(np.int32))
        elif dtype == "s32":
            arrays.append(rng.integers(-50, 50, size=dims).astype(np.int32))
        else:
            arrays.append(rng.uniform(-2, 2, size=dims).astype(dtype.replace("f", "float")))
    return arrays + [np.int32(s) for s in sizes]


def cut(outs: list[np.ndarray], cuts: dict) -> list[np.ndarray]:
    """XLA hands a dynamic result to the host packed row-major at its dynamic dims (at the
    front of the bounded buffer), so the value is the buffer's prefix, reshaped."""
    out = list(outs)
    for j, dims in cuts.items():
        shape = tuple(b if k is None else int(outs[k]) for k, b in zip(dims, outs[j].shape))
        out[j] = np.ascontiguousarray(outs[j].reshape(-1)[:int(np.prod(shape))].reshape(shape))
    return out


def generate(case: Case, xc, client, version: str) -> None:
    folder = OUT / case.name
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    # xladist's canonical text (what the corpus round-trip test expects), run by XLA as is
    text = print_module(parse_module(case.hlo), sigils=False)
    inputs, expected = {}, {}
    num_outputs = None
    for r, sizes in enumerate(case.sizes):
        args = inputs_for(case, sizes, rng)
        if case.reference is not None:
            outs = [np.asarray(o) for o in case.reference(*args)]
            if sizes in case.xla_check:
                xla = cut(run_on_xla(xc, client, text, args), case.cuts)
                for j, (a, b) in enumerate(zip(outs, xla)):
                    np.testing.assert_allclose(a, b, case.rtol, case.atol,
                                               err_msg=f"{case.name} {sizes} out{j}")
        else:
            outs = cut(run_on_xla(xc, client, text, args), case.cuts)
        num_outputs = len(outs)
        inputs.update({f"run{r}_arg{i}": a for i, a in enumerate(args)})
        expected.update({f"run{r}_out{j}": o for j, o in enumerate(outs)})
    (folder / "module.hlo").write_text(text)
    np.savez(folder / "inputs.npz", **inputs)
    np.savez(folder / "expected.npz", **expected)
    meta = {"name": case.name, "description": case.description,
            "sizes": [list(s) for s in case.sizes], "runs": len(case.sizes),
            "num_outputs": num_outputs, "rtol": case.rtol, "atol": case.atol,
            "expected_from": ("numpy reference: " + case.reference_why
                              if case.reference is not None else "XLA:CPU"),
            "xla_checked_sizes": [list(c) for c in case.xla_check],
            "generator": {"tool": "tools/gen_dynamic_corpus.py", "jax_version": version,
                          "backend": "XLA:CPU via jaxlib hlo_module_from_text"}}
    (folder / "case.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{case.name}: {len(case.sizes)} runs, {num_outputs} outputs")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    args = ap.parse_args(argv)
    jax, xc, client = xla_cpu()
    chosen = [c for c in CASES if not args.cases or c.name in args.cases]
    for case in chosen:
        generate(case, xc, client, jax.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
