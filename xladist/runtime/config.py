"""Run configurations: `xladist run --config FILE.toml`.

A config is a flat TOML table whose keys are the rows of SCHEMA (one row per setting:
type, help, default, and the `xladist run` option it stands for). Options given on the
command line win over the file; the file wins over the defaults. Relative paths in the
file resolve against the file's folder, so a config works from any current directory.
Unknown keys and values of the wrong type are errors that name the key and the file
(exit 2). Example (configs/psum_basic_mesh4.toml):

    module = "../tests/data/corpus/jax/psum_basic_mesh4/module.hlo"
    ranks = 4
    inputs = "../tests/data/corpus/jax/psum_basic_mesh4/inputs.npz"
    timeout = 60

Every rank re-reads the same file (an `xladist run` job re-runs its own command line under
mpiexec), so on a cluster the config, like the module, must be at the same path on every
host.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xladist.environment import check_count
from xladist.errors import InputError
from xladist.files import read_text
from xladist.hlo.collective_groups import run_device_counts


class ConfigError(InputError):
    """A config file that cannot be used (exit 2)."""


@dataclass(frozen=True)
class Key:
    type: str          # str, path, int, float, bool, assignment (list of lists of ints)
    help: str
    default: object
    dest: str          # the attribute of `xladist run`'s parsed arguments it sets
    option: str        # the command-line option that overrides it
    invert: bool = False  # a bool stored inverted in `dest` (verify -> no_verify)
    # What a path names, for the checks before a run (xladist/runtime/run_args.py): "hlo", "npz",
    # "text" (sources), "out" (a destination), "out_dirs" (a per-rank destination whose
    # folders are created), "program" (an executable: a path, or a name looked up on PATH); "template" when {rank}-style placeholders are filled in.
    file: str | None = None
    template: bool = False


# The one table of run settings. Defaults equal `xladist run`'s (a test checks it).
SCHEMA: dict[str, Key] = {
    "module": Key("path", "HLO text file to run", None, "module", "MODULE", file="hlo"),
    "ranks": Key("int", "number of MPI ranks, one device each", 1, "num_devices", "-n"),
    # The run's counts, where the module header does not declare them (it must agree where it
    # does); a count left open is the device total divided by the other.
    "replica_count": Key("int", "replicas (rows of the device assignment)", None,
                         "replica_count", "--replica-count"),
    "num_partitions": Key("int", "partitions (columns of the device assignment)", None,
                          "num_partitions", "--num-partitions"),
    "device_assignment": Key("assignment", "device id of [replica][partition], e.g. "
                             "[[0, 1], [2, 3]]; default device = partition x replicas + "
                             "replica", None, "device_assignment", "--device-assignment"),
    "inputs": Key("path", "npz of entry arguments arg0.. (leading device axis), or one npz per "
                  "device without it ({device} in the path is filled in)", None,
                  "inputs", "--inputs", file="npz"),
    "outputs": Key("path", "npz to write the outputs out0.. to (default: print); with "
                   "{device} in the path, one npz per device", None,
                   "outputs", "--outputs", file="out"),
    "infeed": Key("path", "npz of each rank's infeed items ({rank}, {replica}, {partition} "
                  "in the path are filled in)", None, "infeed", "--infeed", file="npz",
                  template=True),
    "infeed_fn": Key("str", "infeed source function 'package.module:function' called as "
                     "f(rank, replica, partition) -> iterable of items", None, "infeed_fn",
                     "--infeed-fn"),
    "outfeed": Key("path", "npz to write each rank's outfeed items to (same templates)",
                   None, "outfeed", "--outfeed", file="out_dirs", template=True),
    "prefetch": Key("int", "infeed items each rank reads ahead of the program", 8,
                    "prefetch", "--prefetch"),
    "backend": Key("str", "cpu (LLVM, default) or interpreter (numpy reference)", "cpu",
                   "backend", "--backend"),
    "threads": Key("int", "compute threads per rank (default: the cores of the rank's CPU "
                   "affinity mask shared among the ranks on its node; also XLADIST_THREADS)",
                   None, "threads", "--threads"),
    "timeout": Key("float", "deadline in seconds of every wait for another rank", 300.0,
                   "timeout", "--timeout"),
    "trace": Key("path", "Chrome/Perfetto trace JSON to write (one track per rank)", None,
                 "trace", "--trace", file="out"),
    "hostfile": Key("path", "MPICH hostfile for a multi-host run", None, "hostfile",
                    "--hostfile", file="text"),
    "mpiexec": Key("path", "the MPI launcher that starts the ranks (default: the mpich "
                   "wheel's mpiexec, else the one on PATH)", None, "mpiexec", "--mpiexec",
                   file="program"),
    "host_recv": Key("path", "npz per rank and channel with the data of recvs from the host "
                     "({rank}, {channel} filled in)", None, "host_recv", "--host-recv",
                     file="npz", template=True),
    "host_send": Key("path", "npz per rank and channel to write sends to the host to", None,
                     "host_send", "--host-send", file="out_dirs", template=True),
    "verify": Key("bool", "run the verifier before running (default true)", True,
                  "no_verify", "--no-verify", invert=True),
    "check": Key("bool", "prove the program cannot deadlock before starting (default true)",
                 True, "no_check", "--no-check", invert=True),
    "strict": Key("bool", "refuse programs the deadlock check cannot prove", False, "strict",
                  "--strict"),
    "check_budget": Key("float", "seconds the deadlock check may take before it says it "
                        "cannot prove the program within the budget", 10.0, "check_budget",
                        "--check-budget"),
    "stats": Key("bool", "print each rank's compute / collective wait / infeed wait split",
                 False, "stats", "--stats"),
    "quiet": Key("bool", "no progress line", False, "quiet", "--quiet"),
}

_TYPE_NAMES = {"str": "a string", "path": "a path string", "int": "an integer",
               "float": "a number", "bool": "true or false",
               "assignment": "an array of arrays of integers (replicas x partitions)"}


def _toml_type(value) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(value), type(value).__name__)


def _check(key: str, value, file: Path):
    spec = SCHEMA[key]
    t = spec.type
    ok = {"str": isinstance(value, str), "path": isinstance(value, str),
          "int": isinstance(value, int) and not isinstance(value, bool),
          "float": isinstance(value, (int, float)) and not isinstance(value, bool),
          "bool": isinstance(value, bool),
          "assignment": isinstance(value, list) and bool(value)
          and all(isinstance(r, list) and r and all(isinstance(d, int)
                                                    and not isinstance(d, bool) for d in r)
                  for r in value)}[t]
    if not ok:
        raise ConfigError(f"{file}: key {key!r} must be {_TYPE_NAMES[t]}, got "
                          f"{_toml_type(value)} {value!r}")
    if t == "path":
        if spec.file == "program" and "/" not in value:
            return value  # a bare name is looked up on PATH, as on the command line
        return str((file.parent / value).resolve()) if value else value
    if t == "float":
        return float(value)
    if t == "int":
        try:
            check_count(value, f"{file}: key {key!r}")
        except InputError as e:
            raise ConfigError(str(e)) from None
    if t == "assignment" and len({len(r) for r in value}) != 1:
        raise ConfigError(f"{file}: key {key!r}: every replica row needs the same number "
                          f"of partitions, got rows of {[len(r) for r in value]}")
    return value


def load(path) -> dict:
    """The settings in a config file, checked, paths made absolute: {key: value}."""
    import tomllib  # here: a run without --config never reads TOML
    file = Path(path)
    try:
        raw = tomllib.loads(read_text(file, "--config", kind="TOML"))
    except InputError as e:
        raise ConfigError(str(e)) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{file}: not valid TOML: {e}") from None
    out = {}
    for key, value in raw.items():
        if key not in SCHEMA:
            import difflib
            close = difflib.get_close_matches(key, SCHEMA, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{file}: unknown key {key!r}{hint}; known keys: "
                              f"{', '.join(SCHEMA)}")
        out[key] = _check(key, value, file)
    return out


def explicit_options(add_arguments, argv: list[str]) -> set[str]:
    """The dests that `argv` (a subcommand's arguments) sets explicitly.

    Parsed again by the same option definitions with every default suppressed, so
    abbreviations and `--opt=value` forms count exactly as argparse counts them.
    """
    import argparse  # (here and below: a rank reads no command line)
    p = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    add_arguments(p)
    for action in p._actions:
        action.default = argparse.SUPPRESS
    ns, _ = p.parse_known_args(argv)
    return set(vars(ns))


def apply(args, add_arguments, argv: list[str]) -> dict:
    """Fill `args` from `args.config`, except what `argv` set on the command line.

    Returns the settings read from the file.
    """
    settings = load(args.config)
    given = explicit_options(add_arguments, argv)
    args._config_keys = set()  # what the file set: messages name it there (run_args.setting_name)
    for key, value in settings.items():
        spec = SCHEMA[key]
        if not hasattr(args, spec.dest):
            raise ConfigError(f"{args.config}: key {key!r}: this `xladist run` has no "
                              f"{spec.option} option yet")
        if spec.dest in given:
            continue
        setattr(args, spec.dest, (not value) if spec.invert else value)
        args._config_keys.add(key)
    return settings


def parse_assignment(text: str) -> list[list[int]]:
    """`--device-assignment "0,1;2,3"`: rows are replicas, columns partitions."""
    import argparse
    try:
        rows = [[int(d) for d in row.split(",")] for row in text.split(";")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected device ids as 'r0p0,r0p1;r1p0,r1p1', got {text!r}") from None
    if len({len(r) for r in rows}) != 1:
        raise argparse.ArgumentTypeError(f"every replica row needs the same number of "
                                         f"partitions: {text!r}")
    return rows


def override_device_counts(module, replica_count: int | None,
                           num_partitions: int | None) -> None:
    """Give the module the counts the run sets (--replica-count, --num-partitions), as XLA's
    HloModuleConfig does; a count its header declares must agree (InputError otherwise). A
    count neither sets is filled from the device total when the run starts
    (collective_groups.run_device_counts)."""
    run_device_counts(module, None, replica_count=replica_count,
                      num_partitions=num_partitions)  # checks them against the header
    for key, value in (("replica_count", replica_count), ("num_partitions", num_partitions)):
        if value is not None:
            setattr(module, key, value)
            module.declared_counts = module.declared_counts | {key}
            module.counts_from_run = module.counts_from_run | {key}


def describe_schema() -> str:
    """The table as text, for `xladist run --help`."""
    width = max(len(k) for k in SCHEMA)
    lines = []
    for key, spec in SCHEMA.items():
        default = "" if spec.default is None else f" (default {spec.default!r})"
        lines.append(f"  {key:<{width}}  {spec.help}{default}; option {spec.option}")
    return "\n".join(lines)
