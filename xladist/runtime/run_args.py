"""Every setting of `xladist run` checked before any rank starts (exit 2 naming the option).

The settings are the rows of xladist/runtime/config.py SCHEMA, whether they came from the command
line or a config file, so one loop covers both: numbers in range, and every path by its
`file` role - sources opened and checked for their format (xladist/files.py), destinations'
folders present and writable,
the launcher (--mpiexec) an executable program. Per-rank templates are filled in for every rank of the run
({rank}, {replica}, {partition}; {channel} for the host-transfer files: every host channel
of the module), so a typo in one rank's file stops the run here, not in that rank after
the others have worked for an hour.
"""

from __future__ import annotations


from xladist.collectives.mpiexec import find_mpiexec
from xladist.environment import check_count, check_seconds
from xladist.errors import InputError
from xladist.files import check_destination, check_npz, fill_template

from .config import SCHEMA


def setting_name(key: str, options: bool = True, args=None) -> str:
    """How messages name a setting: the config file and key when `args`' value came from
    `--config` (config.apply), else its command-line option, or (for the Python API,
    `options=False`) its keyword."""
    if key in getattr(args, "_config_keys", ()):
        return f"{args.config}: key {key!r}"
    return SCHEMA[key].option if options else key


def check_numbers(args, *, options: bool = True) -> None:
    """-n, counts and --prefetch whole numbers >= 1 (environment.check_count); --timeout,
    --check-budget a number of seconds from 0 to environment.MAX_SECONDS (check_seconds)."""
    for key, spec in SCHEMA.items():
        value = getattr(args, spec.dest, None)
        if value is None or spec.type not in ("int", "float"):
            continue
        if spec.type == "int":
            check_count(value, setting_name(key, options, args))
        else:
            check_seconds(value, setting_name(key, options, args),
                          " (0: no deadline)" if key == "timeout" else "")


def _host_channels(module, opcode: str) -> list:
    return sorted({i.attrs.get("channel_id") for i in module.all_instructions()
                   if i.opcode == opcode and i.attrs.get("is_host_transfer", False)},
                  key=str)


def _paths(key: str, value: str, module, placements, name: str) -> dict[str, str]:
    """The files a setting names, each with how messages name it: the path itself, or its
    template filled in for every rank (and host channel)."""
    spec = SCHEMA[key]
    if key == "outputs" and "{" in value:
        # A misspelt placeholder ({devce}) is refused, not taken as part of the file name.
        fill_template(value, name, device=0)
    if key in ("inputs", "outputs") and "{device}" in value:  # one file per device
        return {fill_template(value, name, device=p.device):
                f"{name} {value!r} for device {p.device}:" for p in placements}
    if not spec.template:
        return {value: name}
    out: dict[str, str] = {}
    writers: dict[str, str] = {}  # a written file -> who writes it

    def one_writer(path: str, who: str, fields: str) -> None:
        """A file written per rank (and channel) is written by one of them only: two
        writing the same file would lose one's items without a word."""
        if spec.file not in ("out", "out_dirs"):
            return
        if path in writers:
            raise InputError(f"{name} {value!r}: {writers[path]} and {who} would both write "
                             f"{path}, and one's data would be lost; put {fields} in the "
                             "path")
        writers[path] = who
    if key in ("host_recv", "host_send"):
        channels = _host_channels(module, "recv" if key == "host_recv" else "send")
        for p in placements:
            for c in channels:
                path = fill_template(value, name, rank=p.rank, channel=c)
                one_writer(path, f"rank {p.rank} (channel {c})", "{rank} and {channel}")
                out.setdefault(path, f"{name} {value!r} for rank {p.rank}, channel {c}:")
        return out
    for p in placements:
        path = fill_template(value, name, rank=p.rank, replica=p.replica,
                             partition=p.partition)
        who = f"rank {p.rank} (replica {p.replica}, partition {p.partition})"
        one_writer(path, who, "{rank}")
        out.setdefault(path, f"{name} {value!r} for {who}:")
    return out


def check_files(args, module, placements, *, options: bool = True) -> None:
    """Every source readable and well-formed, every destination writable (InputError)."""
    for key, spec in SCHEMA.items():
        value = getattr(args, spec.dest, None)
        if not spec.file or value is None or spec.file == "hlo":  # the module: parsed already
            continue
        name = setting_name(key, options, args)
        if not isinstance(value, str):
            raise InputError(f"{name} must be a path, got {type(value).__name__}")
        for path, what in _paths(key, value, module, placements, name).items():
            if spec.file == "npz" and key == "infeed":
                from .feeds.npz import check_items
                check_items(path, what)  # also its keys: item0, item1, ... (names only)
            elif spec.file == "npz":
                check_npz(path, what)
            elif spec.file == "text":  # the hostfile
                from .launcher import hostfile_text
                hostfile_text(path, what)
            elif spec.file == "program":
                find_mpiexec(path, what)
            else:
                check_destination(path, what, create_dirs=spec.file == "out_dirs")


def check(args, module, *, options: bool = True) -> list:
    """All of the above for a run of `module` with `args`; returns the ranks' placements.
    `options`: messages name command-line options (else the Python API's keywords)."""
    from xladist.backends import check_backend

    from .feeds import placements_of
    check_numbers(args, options=options)
    from .launcher import check_environment, ranks_elsewhere
    # XLADIST_THREADS=abc and the like, which the ranks inherit
    check_environment(elsewhere=ranks_elsewhere(getattr(args, "hostfile", None),
                                                getattr(args, "hosts", None)))
    check_backend(getattr(args, "backend", None) or "cpu")  # UnsupportedError, exit 2
    placements = placements_of(module, args.num_devices,
                               getattr(args, "device_assignment", None))
    check_files(args, module, placements, options=options)
    return placements
