"""`xladist export-jax pkg.module:fn`: a JAX function as a folder `xladist run` can run.

The function is imported (the current folder is on the import path), called on the global
arrays of --args under the mesh and specs given, jitted for that many CPU devices and
written by xladist.jax.export (README "From JAX"). Everything that can be checked without
jax (mesh and spec syntax, the arrays file, argument counts, dimensions the specs do not
divide) is checked first.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import InputError, XlaDistError

HELP = "lower a JAX function for a mesh of CPU devices into a folder `xladist run` runs"

EPILOG = """\
examples:
  xladist export-jax mymodel:step --args args.npz --mesh data=2,model=2 --in-specs "None,model; model,None; data,None; data,None" --out-specs "(); None,model; model,None" -o step_2x2
                                    a data- and tensor-parallel step on a 2x2 mesh
  xladist export-jax mymodel:forward --args x.npz --mesh data=4 --in-specs data -o fwd --no-expected
                                    every argument split over data; no jax run for expected.npz
  xladist run --config step_2x2/config.toml
                                    run it; then in Python
                                    xladist.jax.assemble("step_2x2", "step_2x2/outputs.npz")

specs (one per argument/result, separated by ';', or a single one for all):
  data,None        P('data', None): dimension 0 split over mesh axis data
  data+model       P(('data', 'model')): dimension 0 split over both axes
  ()               P(): the whole array on every device
  P('data', None)  the Python literal form is accepted too
--args holds arg0, arg1, ... the function's global arguments (np.savez(f, arg0=..)).
Needs jax: pip install 'xladist[jax]'.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("function", metavar="MODULE:FUNCTION",
                        help="the function, e.g. mypkg.model:train_step")
    parser.add_argument("--args", metavar="ARGS.npz",
                        help="npz of the global arguments arg0, arg1, ... (none if omitted)")
    parser.add_argument("--mesh", required=True, metavar="AXIS=SIZE,...",
                        help="mesh axes in row-major order, e.g. data=2,model=2")
    parser.add_argument("--in-specs", default="()", metavar="SPECS",
                        help="one spec per argument separated by ';', or one for all "
                             "(default '()': replicated)")
    parser.add_argument("--out-specs", default="()", metavar="SPECS",
                        help="one spec per result separated by ';', or one for all "
                             "(default '()': replicated)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="folder to write (created if missing)")
    parser.add_argument("--no-expected", action="store_true",
                        help="do not run the function with jax for expected.npz")


def _read_args(path: str | None) -> list:
    if path is None:
        return []
    from ..files import load_npz
    arrays = load_npz(path, "--args")
    wanted = [f"arg{i}" for i in range(len(arrays))]
    if sorted(arrays) != sorted(wanted):
        raise InputError(f"--args {path}: expected arrays named arg0..arg{len(arrays) - 1}, "
                         f"got {', '.join(sorted(arrays))}")
    return [arrays[k] for k in wanted]


def run(args) -> int:
    from ..jax import export, specs
    from ..jax.lowering import import_jax
    mesh = specs.parse_mesh(args.mesh)
    arrays = _read_args(args.args)
    for i, (a, s) in enumerate(zip(arrays, specs.spec_list(args.in_specs, len(arrays),
                                                           "--in-specs"))):
        specs.check(s, mesh, a.shape, f"--in-specs item {i} (for arg{i})")
    specs.parse_specs(args.out_specs, "--out-specs")  # syntax now; counts once jax traced
    from ..jax.lowering import check_folder
    check_folder(args.output, "-o")  # before the function runs: a bad -o is not its fault
    import_jax()  # say so before the function's own `import jax` fails
    sys.path.insert(0, os.getcwd())  # as `python -m`: modules in the current folder import
    from xladist.runtime.feeds import load_function
    try:
        fn = load_function(args.function, option="export-jax")
        folder = export(fn, *arrays, mesh_shape=mesh, in_specs=args.in_specs,
                        out_specs=args.out_specs, path=args.output,
                        expected=not args.no_expected)
    except XlaDistError:
        raise
    except Exception as e:  # noqa: BLE001 -- the user's module or jax failed: say which
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise InputError(f"{args.function} failed while jax traced, lowered or ran it: "
                         f"{type(e).__name__}: {first} (call xladist.jax.export from Python "
                         f"for the full traceback)") from None
    files = "module.hlo, inputs.npz, config.toml, meta.json" + (
        "" if args.no_expected else ", expected.npz")
    print(f"wrote {folder}/: {files} ({specs.mesh_size(mesh)} devices)\n"
          f"run it: xladist run --config {folder}/config.toml")
    return 0
