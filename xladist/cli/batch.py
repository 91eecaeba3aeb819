"""`xladist run --batch LIST -n N`: many runs in one launch (an xladist.Cluster).

Each line of LIST that is not empty or a `#` comment holds the arguments of one
`xladist run` (MODULE and its flags, shell-quoted: `psum.hlo --inputs in.npz --outputs
out.npz`, or `--config run.toml`); flags given on the command line with --batch are every
line's defaults. Relative paths are relative to the current folder, as on the command
line. All lines are parsed, with their configs, before the ranks start (a malformed line
exits 2 and nothing runs); each line is then checked as `xladist run` checks it (module,
counts, files, inputs, the deadlock check) and run on the same N ranks. A line that fails is reported with its
line number and the rest still run, as long as the cluster stays usable; when it does not
(a hang, a dead rank) the lines not run are named. Exit: 0 when every line succeeded, else
the highest exit code of the failed lines.

Not in a batch yet (refused, naming the line): feeds, host transfers, --trace, --stats,
--threads, .xlx modules, another -n, --hostfile / --mpiexec on a line (give them with
--batch).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from ..errors import InputError, XlaDistError

# Per-line flags a batch does not offer yet: dest -> the flag.
NOT_IN_BATCH = {"infeed": "--infeed", "infeed_fn": "--infeed-fn", "outfeed": "--outfeed",
                "host_recv": "--host-recv", "host_send": "--host-send", "trace": "--trace",
                "stats": "--stats", "threads": "--threads", "hostfile": "--hostfile",
                "mpiexec": "--mpiexec"}
PREFIX = "xladist run --batch"


class _LineParser(argparse.ArgumentParser):
    def error(self, message):
        raise InputError(message)


def _lines(path: str) -> list[tuple[int, list[str]]]:
    from ..files import read_text
    got = []
    for number, line in enumerate(read_text(path, "--batch", kind="list").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            got.append((number, shlex.split(line)))
        except ValueError as e:
            raise InputError(f"{path}:{number}: {e}") from None
    if not got:
        raise InputError(f"{path} lists no run")
    return got


def _parse(args, path: str, number: int, argv: list[str]):
    from .run import add_arguments
    parser = _LineParser(prog=f"{path}:{number}", add_help=False)
    add_arguments(parser)
    base = {k: v for k, v in vars(args).items()
            if k not in ("module", "config", "batch") and not k.startswith("_")}
    parser.set_defaults(**base)
    try:
        line = parser.parse_args(argv)
    except InputError as e:
        raise InputError(f"{path}:{number}: {e}") from None
    line._argv = ["run", *argv]
    if line.batch is not None:
        raise InputError(f"{path}:{number}: --batch on a line of a batch list: a line is one "
                         f"run (list the other list's lines here instead)")
    from .run import read_config
    try:
        read_config(line)  # what its --config sets is part of the line
        _same_ranks(line, args)
        if line.module and line.module.endswith(".xlx"):
            raise InputError(f"{line.module}: a .xlx module is not offered in a batch yet")
    except InputError as e:
        raise InputError(f"{path}:{number}: {e}") from None
    return line


def _same_ranks(line, base) -> None:
    """A line runs on the batch's ranks: its -n (or its config's `ranks`) must be -n's."""
    if line.num_devices != base.num_devices:
        from xladist.runtime.run_args import setting_name
        raise InputError(f"{setting_name('ranks', args=line)} {line.num_devices} differs "
                         f"from the batch's -n {base.num_devices} (one batch, one set of "
                         f"ranks)")


def _refuse_unoffered(args, where: str, base=None) -> None:
    """Settings a batch does not offer: on the command line (base None) every one but where
    the ranks run; on a line (or in its config), anything not given with --batch."""
    for dest, flag in NOT_IN_BATCH.items():
        value = getattr(args, dest, None)
        if base is None and dest in ("hostfile", "mpiexec"):
            continue
        if value != (getattr(base, dest, None) if base is not None else None) \
                and value is not False:
            raise InputError(f"{where}: {flag} is not offered in a batch yet (run that "
                             "module on its own)")


def run_batch(args) -> int:
    from xladist.runtime.cluster import Cluster, ClusterEnded
    if args.module:
        raise InputError("give MODULE or --batch LIST, not both")
    if args.config:
        raise InputError("--config goes on the lines of a --batch list, one per run")
    _refuse_unoffered(args, "--batch")
    from xladist.runtime.run_args import check_numbers
    check_numbers(args)  # -n and the rest named as options (not Cluster's keyword n)
    runs = []
    for number, argv in _lines(args.batch):
        line = _parse(args, args.batch, number, argv)
        _refuse_unoffered(line, f"{args.batch}:{number}", base=args)
        runs.append((number, line))
    worst = 0
    from xladist.runtime.launcher import signals_raise
    # A SIGTERM (`timeout`, a batch system) ends the batch as Ctrl-C does: the cluster's
    # ranks stopped, the running line's temporary folder removed, exit 143.
    with signals_raise(), Cluster(args.num_devices, hostfile=args.hostfile,
                                  mpiexec=args.mpiexec) as cluster:
        for i, (number, line) in enumerate(runs):
            where = f"{args.batch}:{number}"
            try:
                _run_line(cluster, line, where)
            except ClusterEnded as e:
                print(f"{PREFIX}: {where}: {e}", file=sys.stderr)
                rest = [str(k) for k, _ in runs[i + 1:]]
                if rest:
                    print(f"{PREFIX}: not run (the cluster ended): line"
                          f"{'s' if len(rest) > 1 else ''} {', '.join(rest)}", file=sys.stderr)
                return max(worst, e.exit_code)
            except XlaDistError as e:
                print(f"{PREFIX}: {where}: error: {e}", file=sys.stderr)
                worst = max(worst, e.exit_code)
    return worst


def _run_line(cluster, line, where: str) -> None:
    """One line, checked as `xladist run` checks a run, then run on the cluster."""
    from xladist.io import DEVICE_FIELD
    from xladist.runtime import run_args
    from xladist.runtime.api import rank_options
    from xladist.runtime.device import device_counts
    from xladist.runtime.service.outputs import Outputs

    from ..files import read_text
    from .run import (_apply_config, _check_targets, _deadlock_check, _open_inputs,
                      load_run_module)
    _apply_config(line)  # (its config is read already) a module, and the run's numbers
    n = line.num_devices
    module = load_run_module(line)
    counts = device_counts(module, n)
    run_args.check(line, module)
    _check_targets(module)
    inputs = _open_inputs(module, line)
    checked = _deadlock_check(module, line)
    options = rank_options(counts, backend=line.backend, timeout=line.timeout,
                           verify=not line.no_verify, source=line.module,
                           device_assignment=line.device_assignment, module=module)
    text = read_text(line.module, "MODULE", kind="HLO text")
    # Last: its temporary folder is the call's to remove (Cluster._call), so nothing that
    # can still refuse the line comes after it.
    if line.outputs:
        outputs = Outputs(n, "devices" if DEVICE_FIELD in line.outputs else "npz",
                          line.outputs)
    else:
        print(f"== {where}: {line.module}", flush=True)
        outputs = Outputs(n, "print")
    cluster.run_checked(module, text, options, inputs=inputs, outputs=outputs,
                        checked=checked)
