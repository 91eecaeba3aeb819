"""The `xladist` command: one module per subcommand, registered in SUBCOMMANDS.

Each subcommand module defines HELP (one line), EPILOG (examples),
`add_arguments(parser)` and `run(args) -> int` (the exit code). Errors derived from
XlaDistError are printed without a traceback and exit with their exit_code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ..errors import OutputError, XlaDistError, out_of_memory
from ..files import read_text, rescued, utf8_text, without_mark

# name -> module under xladist.cli; imported lazily so `xladist fmt` never loads MPI.
SUBCOMMANDS = {
    "fmt": "fmt",
    "check": "check",
    "run": "run",
    "ops": "ops",
    "explain": "explain",
    "bench": "bench",
    "demo": "demo",
    "export-jax": "export_jax",
    "aot": "aot",
    "compile": "compile",
    "conformance": "conformance",
}


EPILOG = """\
examples:
  xladist demo                                  train a small MLP data-parallel on 4 ranks
  xladist run module.hlo -n 4 --inputs in.npz --outputs out.npz
                                                run on 4 devices (one MPI rank each)
  xladist run --config configs/psum_basic_mesh4.toml --trace trace.json
                                                settings from a file; a Perfetto timeline
  xladist check module.hlo -n 4                 verify and prove it cannot deadlock
  xladist fmt module.hlo                        print it in canonical HLO text
  xladist explain module.hlo                    the cpu backend's kernels and buffers
  xladist compile module.hlo -o m.xlx           compile once; `xladist run m.xlx` loads it
  xladist aot module.hlo --name f -o build/     f.o + f.h: the module as a C function
  xladist ops --missing                         which opcodes a phase does not support
  xladist conformance -n 4 --backend mine       check a backend and MPI against XLA's
                                                collective semantics
  xladist export-jax mymodel:step --mesh data=2 --args a.npz --in-specs data -o DIR
                                                a JAX function as a folder to run (needs jax)

Run `xladist COMMAND --help` for a command's options and examples.
"""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse sizes the help column without the subcommand names, so a long one
    (export-jax) would push its help to the next line; count them too."""

    def add_argument(self, action):
        super().add_argument(action)
        for sub in getattr(action, "_choices_actions", ()):
            self._action_max_length = max(self._action_max_length,
                                          len(sub.metavar or sub.dest) + self._current_indent + 2)


def read_module_text(path: str) -> tuple[str, str]:
    """The HLO text of FILE ('-': standard input) and the name to show in messages, for
    hlo.parser.parse_text (its leading byte-order mark dropped here); every problem with
    the file is an InputError naming it (xladist/files.py)."""
    if path == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        data = utf8_text(data, "standard input", "HLO text") if isinstance(data, bytes) \
            else without_mark(data)  # the one rule for a leading byte-order mark, either way
        return data, "<stdin>"
    return read_text(path, "FILE", kind="HLO text"), path


def ranks_never_started(proc, service, n: int, command: str) -> int:
    """After a launch (runtime/launcher.launch): 0 when all n ranks reached the job's
    coordination service, or the service already said why some did not. Else the launcher
    that did not start them is said (launcher.never_started) and the exit code is
    returned: its own, or 1 when it claimed success -- the run did not happen."""
    from ..runtime.launcher import never_started
    text = never_started(proc, service, n)
    if text is None:
        return 0
    print(f"xladist {command}: {text}", file=sys.stderr)
    return proc.returncode or 1


def _load(name: str):
    return importlib.import_module(f"xladist.cli.{SUBCOMMANDS[name]}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xladist",
        description="Run XLA HLO programs across MPI ranks, one device per rank.",
        formatter_class=_HelpFormatter,
        epilog=EPILOG,
    )
    from ..version import __version__
    parser.add_argument("--version", action="version", version=f"xladist {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        if only is not None and name != only:
            # Still list every command in --help, without importing its module.
            sub.add_parser(name, add_help=False)
            continue
        mod = _load(name)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP, epilog=mod.EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_module=mod, _parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")):
        from ..runtime.hostinfo import set_blas_coretype
        set_blas_coretype()  # a rank: this host's OpenBLAS kernel, before numpy loads it
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in SUBCOMMANDS else None)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's parser: its usage, `xladist run: error: ...`
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    args._argv = argv  # ranks re-run the same command under mpiexec
    if getattr(args, "_module", None) is None:
        parser.print_help()
        return 0 if not argv else 2
    before = len(rescued())
    try:
        code = int(args._module.run(args) or 0)
        # A result that could not be written where asked was saved elsewhere and said so
        # (xladist/files.py); the command still failed.
        return code or (OutputError.exit_code if len(rescued()) > before else 0)
    except XlaDistError as e:
        print(f"xladist {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except MemoryError as e:  # not a bug: no traceback (errors.out_of_memory's words)
        print(f"xladist {args.command}: error: {out_of_memory(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"xladist {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def entry() -> None:
    """The `xladist` command (and `python -m xladist`): `main`, then the process ends;
    the launching process of `xladist run` without Python's interpreter teardown
    (runtime/fast_exit.py)."""
    argv = sys.argv[1:]
    code = main(argv)
    from ..runtime.launcher import under_mpi
    if next((a for a in argv if not a.startswith("-")), None) != "run" or under_mpi():
        sys.exit(code)  # a rank (bare `mpiexec xladist run`) ends as MPI expects: fast_exit.py
    from ..runtime.fast_exit import exit_now
    exit_now(code)


if __name__ == "__main__":
    entry()
