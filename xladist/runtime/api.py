"""`xladist.run(module, inputs, n=N)`: run a module on N devices from Python.

Inside an MPI job of N ranks (the script was started with `mpiexec -n N`), every
rank runs its device directly and every rank gets all devices' outputs back. From a
plain Python process, `mpiexec -n N` (on this host, or on `hosts=` / `hostfile=`) starts
`python -m xladist.runtime.rank_main` ranks, and this process serves them through the
job's coordination service (xladist/runtime/service/): each rank receives the module and
its own device's inputs over the network and streams its outputs back, and the feed and
host-transfer callbacks run here, whatever host a rank is on. Nothing goes through a
folder. Either way the result is a list over devices of lists of output arrays.
"""

from __future__ import annotations

import operator
import os
import subprocess
from pathlib import Path

import numpy as np

from xladist.environment import check_count
from xladist.errors import ExecutionError, InputError
from xladist.hlo.parser import parse_file, parse_module

from . import launcher
from .device import device_counts


def _as_module(module):
    """The ir.Module of what run and Cluster take: a Module, HLO text, a path to HLO text
    or to a `.xlx` file, or an Executable (xladist.compile's, xladist.load_executable's)."""
    from xladist.executable import Executable
    if isinstance(module, Executable):
        return module.module
    if is_xlx(module):
        return resolve(module)[0]
    if isinstance(module, (str, os.PathLike)):
        if _names_file(module):
            return parse_file(os.fspath(module))
        return parse_module(str(module))
    from xladist.hlo.ir import Module
    if not isinstance(module, Module):
        raise InputError(f"a module to run is a parsed module, HLO text, a path to HLO text "
                         f"or to a .xlx file, or an Executable; got {type(module).__name__}")
    return module


def _names_file(given) -> bool:
    """Whether `given` (a str or PathLike) names a file rather than holding HLO text: a
    PathLike, or one line that is a file or has no '{' (HLO text always has a computation
    body), so that a mistyped path is "does not exist", not a parse error at its '/'."""
    if isinstance(given, os.PathLike):
        return True
    return "\n" not in given and (Path(given).exists() or "{" not in given)


def is_xlx(given) -> bool:
    """Whether `given` names a `.xlx` file of `xladist compile`."""
    return isinstance(given, (str, os.PathLike)) and "\n" not in str(given) and \
        str(given).endswith(".xlx")


def resolve(given, backend: str = "cpu", *, here: bool = True):
    """(module, SerializedExecutable or None, the `.xlx` file's bytes or None) of what run
    and Cluster take. A `.xlx` file is validated here (another xladist version is refused,
    and -- `here`: the ranks run on this host -- another CPU; it runs with backend cpu only)
    and its bytes are what the ranks load without compiling (each checks its own host's
    CPU); anything else is _as_module's."""
    if not is_xlx(given):
        return _as_module(given), None, None
    from xladist.compiler.serialized import SerializedExecutable
    if backend != "cpu":
        raise InputError(f"{os.fspath(given)} holds cpu code; it runs with backend='cpu' only, "
                         f"not {backend!r}")
    serial = SerializedExecutable(given, here=here)
    with open(given, "rb") as f:
        return serial.module, serial, f.read()


def _source(module, parsed) -> tuple[str, str | None]:
    """The text the ranks parse (the user's own, so reports name its lines; a Module
    object's canonical text) and the file it came from."""
    if isinstance(module, (str, os.PathLike)):
        if _names_file(module):
            from xladist.files import read_text
            text = os.fspath(module)
            return read_text(text, "module file", kind="HLO text"), text
        return str(module), None
    return parsed.to_text(), None


def per_device_inputs(module, inputs, n: int) -> list[list]:
    """Every device's argument list from `inputs` in any form `run` takes (an npz file read
    whole: for a reference that needs every device's rows at once)."""
    from xladist.io import Inputs
    per_device = _per_device(_as_module(module), inputs, n)
    if isinstance(per_device, Inputs):
        return [per_device.device(d) for d in range(n)]
    return per_device


def _per_device(module, inputs, n: int) -> list[list]:
    """inputs: a list with one array per parameter, each with a leading device axis of N,
    or an npz path (also a `{device}` template of per-device files: read one device at a
    time, io.Inputs), or a list over devices of argument lists. Rows are views of the
    caller's arrays, not copies. Every error names the module (a Cluster runs many)."""
    from xladist.semantics.values import TOKEN
    from xladist.hlo.dynamic_padder import check_entry_parameters
    from xladist.io import Inputs, decode
    check_entry_parameters(module)  # before the inputs are held against dims it has not
    params = module.entry.parameters
    shapes = [p.shape for p in params]
    if inputs is None:
        inputs = []
    if isinstance(inputs, (str, os.PathLike)):
        return Inputs(os.fspath(inputs), shapes, num_devices=n,
                      names=[p.name for p in params], what=f"inputs of {module.name}")
    try:
        inputs = list(inputs)
    except TypeError:
        raise InputError(f"inputs are one array per parameter of {module.name} (device "
                         f"axis first), a list "
                         f"over devices of argument lists, or an npz path; got "
                         f"{type(inputs).__name__}") from None
    if len(inputs) == n and n > 0 and all(isinstance(x, (list, tuple)) for x in inputs):
        return _conformed(module, [list(x) for x in inputs])
    arrays = [a for a in inputs]
    wanted = [s for s in shapes if not s.is_token]
    if len(arrays) != len(wanted):
        raise InputError(f"{module.name} takes {len(wanted)} array arguments, got "
                         f"{len(arrays)}")
    per_device: list[list] = [[] for _ in range(n)]
    it = iter(arrays)
    for i, (p, shape) in enumerate(zip(params, shapes)):
        if shape.is_token:
            for args in per_device:
                args.append(TOKEN)
            continue
        a = decode(np.asarray(next(it)), shape)
        expected = (n, *shape.dims)
        if a.shape != expected:
            raise InputError(f"{module.name} argument {i} ({p.name}: "
                             f"{shape.to_text(layout=False)}): expected dims {list(expected)} "
                             f"(device axis first), got {list(a.shape)}")
        for d in range(n):
            # A row of a C-ordered array is one already (no copy); 0-d rows stay 0-d.
            row = a[d]
            per_device[d].append(row if isinstance(row, np.ndarray) and row.flags.c_contiguous
                                 else np.array(row, order="C"))
    return _conformed(module, per_device)


def _conformed(module, per_device: list[list]) -> list[list]:
    """Every device's arguments checked against the parameters (count, element type, dims:
    executable.conform_argument, the one rule) here, before any rank hears of the run."""
    from xladist.executable import conform_parameter, exact_form
    from xladist.semantics.values import TOKEN
    params = module.entry.parameters
    exact = [exact_form(p.shape) for p in params]
    for d, args in enumerate(per_device):
        if len(args) != len(params):
            raise InputError(f"{module.name} takes {len(params)} arguments, "
                             f"device {d} got {len(args)}")
        per_device[d] = [TOKEN if p.shape.is_token else conform_parameter(
            a, p, e, f"{module.name}, device {d}: ") for a, p, e in zip(args, params, exact)]
    return per_device


def run(module, inputs=None, n: int = 1, *, backend: str = "cpu",
        timeout: float = 300.0, device_assignment=None, verify: bool = True,
        job_timeout: float | None = None, trace: str | None = None, check: bool = True,
        strict: bool = False, host_send=None, host_recv=None,
        infeed=None, outfeed=None, infeed_fn: str | None = None, prefetch: int = 8,
        hosts=None, hostfile=None, mpiexec: str | None = None) -> list[list[np.ndarray]]:
    """Run `module` on n devices: an ir.Module, HLO text, a path to HLO text, a `.xlx`
    file of `xladist compile` (its code runs, nothing is compiled), or an Executable (its
    module runs, compiled by the ranks' `backend`).

    `inputs`: one array per entry parameter with a leading device axis of size n (row d
    for device d), or a list over devices of argument lists, or an npz path.
    Returns `outputs[d][i]`: flattened result i of device d. `trace`: path of a
    Chrome/Perfetto timeline with one track per rank (xladist/runtime/trace.py).

    Feeds (xladist/runtime/feeds/): `infeed` is `f(rank, replica, partition) -> iterable of
    items` (arrays, or tuples of arrays for tuple infeeds), a list with one iterable per
    rank, or an npz path template such as "feeds/rank{rank}.npz"; `infeed_fn` names such a
    function as "package.module:function" (imported in the ranks); `outfeed` is
    `g(rank, replica, partition, item)`, called in program order, or an npz path template.
    From a plain Python process the callables run here, in this process, and items stream
    to and from the ranks (xladist/runtime/feeds/host.py). `prefetch`: items each rank reads ahead.

    Before any rank starts, the deadlock check (xladist/runtime/precheck.py) refuses a program that
    would hang (DeadlockError with the report); `check=False` skips it, `strict=True` also
    refuses what it cannot prove. `timeout`: a wait for another rank longer than this ends
    the job with a report of where every rank is (xladist/runtime/watchdog.py).
    Host transfers (`is_host_transfer=true` channels): `host_send(rank, channel_id, array)`
    receives what a device sends to the host, `host_recv(rank, channel_id) -> array` supplies
    what a device receives from it; both are called in this process, one call at a time.
    `job_timeout`: seconds the whole job may take from a plain process (default: no
    limit); past it every rank is stopped and ExecutionError says so.

    Where the ranks run (from a plain process): `hosts` -- host names, or "name:slots", or a
    {name: slots} dict, ranks filling them in order -- or `hostfile` (MPICH's format, see
    launch/README.md); default this host, or what the batch system gives mpiexec.
    `mpiexec`: the launcher to start them with (default: the mpich wheel's).
    """
    given = module
    if launcher.under_mpi():
        # MPI up before anything is read: a rank that fails here (a module path its host
        # lacks) left the ranks of other hosts in MPI_Init, which has no deadline, for ever;
        # now they wait in their first collective, which has one.
        _world_rank()
    here = launcher.under_mpi() or not launcher.ranks_elsewhere(hostfile, hosts)
    module, serial, xlx = resolve(given, backend, here=here)  # a .xlx: the ranks load its code
    n = check_count(n, "n")
    quiet = launcher.under_mpi() and _world_rank() != 0
    counts = device_counts(module, n, setting="n=")  # validates n against the module first
    per_device = _per_device(module, inputs, n)
    checked = check_call(
        module, n, device_assignment=device_assignment, check=check, strict=strict,
        verify_counts=counts if verify and xlx is None else None,
        prefix="xladist.run", quiet=quiet, trace=trace, infeed=infeed, outfeed=outfeed,
        prefetch=prefetch, timeout=timeout, backend=backend,
        **({} if launcher.under_mpi() else dict(hostfile=hostfile, hosts=hosts,
                                                 mpiexec=mpiexec)))
    verify = verify and xlx is not None  # verified by check_call: the ranks skip their look
    transfers = (host_send, host_recv) if host_send or host_recv else None
    feed_options = dict(infeed=infeed, outfeed=outfeed, infeed_fn=infeed_fn,
                        prefetch=prefetch, timeout=timeout)
    if launcher.under_mpi():
        if not isinstance(per_device, list):  # an npz file: every rank reads its own row
            per_device = [per_device.device(d) if d == _world_rank() else None
                          for d in range(n)]
        from .feeds import make_feeds
        options_here = dict(feeds=make_feeds(**feed_options))
        from xladist.files import rescued
        from .channels_host import CallbackHost
        before = len(rescued())
        if serial is not None:  # run the file's code, compile nothing
            options_here["compile_options"] = serial.options()
        outputs = _run_here(module, per_device, backend=backend, timeout=timeout,
                            device_assignment=device_assignment, verify=verify, trace=trace,
                            **options_here, proven=bool(checked and checked.get("proven")),
                            host=CallbackHost(*transfers) if transfers else None)
        if len(rescued()) > before:  # a trace or outfeed written elsewhere (said on stderr)
            from xladist.errors import OutputError
            raise OutputError("; ".join(f"{what} {wanted} is saved as {saved}"
                                        for what, wanted, saved in rescued()[before:]))
        return outputs
    return _run_spawned(module, per_device, n, counts=counts, backend=backend, timeout=timeout,
                        device_assignment=device_assignment, verify=False,
                        job_timeout=job_timeout, trace=trace, transfers=transfers,
                        feed_options=feed_options, hosts=host_list(hosts),
                        hostfile=hostfile, mpiexec=mpiexec, checked=checked,
                        module_source=(None, os.fspath(given)) if xlx else
                        _source(given, module), xlx=xlx)


def check_call(module, n: int, *, device_assignment, check: bool, strict: bool,
               prefix: str, quiet: bool = False, verify_counts=None, **settings):
    """What can be refused about a run of `module` before any rank hears of it, but its
    inputs (`_per_device`) and n (`device_counts`), in `xladist run`'s order: the settings
    (`_check_files`, which loads the backend and the targets its plugin registers), every
    custom-call runnable, the verifier with the run's (replica_count, num_partitions)
    `verify_counts` unless None, and the deadlock check unless `check` is False. Returns
    the check's verdict (for the hang report), or None."""
    _check_files(module, n, device_assignment, **settings)
    from xladist.semantics.custom_calls import check_registered
    # A target registered nowhere, or a sharding annotation that changes a shape (a module
    # before SPMD partitioning): refused here, not by every rank, and before the verifier,
    # whose look at an unpartitioned module's collectives would ask for other counts.
    check_registered(module)
    if verify_counts is not None:
        # Before the deadlock check, whose look at the same groups would refuse a bad module
        # in other words (an InputError); the ranks then skip their own look.
        verify_once(module, verify_counts)
    checked = None
    if check:
        from .precheck import precheck, verdict
        report = precheck(module, n, device_assignment=device_assignment, strict=strict,
                          warn=(lambda text: None) if quiet else None, prefix=prefix)
        checked = verdict(report, module, f"{prefix}(..., n={n})")
    return checked


def host_list(hosts) -> list[str] | None:
    """`hosts=` as mpiexec's -hosts list: names, "name:slots", or {name: slots}."""
    if hosts is None:
        return None
    if isinstance(hosts, str):
        hosts = [h for h in hosts.replace(",", " ").split() if h]
    try:
        if isinstance(hosts, dict):
            hosts = [f"{name}:{operator.index(slots)}" for name, slots in hosts.items()]
        hosts = [str(h) for h in hosts]
    except TypeError:
        raise InputError(f"hosts= takes host names (a list, or one string separated by commas "
                         f"or spaces), 'name:slots' or a {{name: slots}} dict; got "
                         f"{hosts!r}") from None
    if not hosts:
        raise InputError("hosts= names no host")
    return hosts


def _check_files(module, n, device_assignment, **settings) -> None:
    """The settings (npz templates, the trace, numbers, the backend) checked like
    `xladist run`'s, before any rank starts (xladist/runtime/run_args.py); callables pass
    untouched."""
    from types import SimpleNamespace

    from .run_args import check as check_run
    given = {k: v for k, v in settings.items()
             if not (k in ("infeed", "outfeed") and not isinstance(v, (str, os.PathLike)))}
    given = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in given.items()}
    check_run(SimpleNamespace(num_devices=n, device_assignment=device_assignment, **given),
              module, options=False)


def _world_rank() -> int:
    from .rank import world
    return world().Get_rank()


def _run_here(module, per_device, **options):
    from xladist.collectives import deadline

    from .rank import execute_on_this_rank, world
    from .service import client as service_client
    from .watchdog import Members
    comm = world()
    result = execute_on_this_rank(module, per_device[comm.Get_rank()], gather_to=None,
                                  **options)
    # A wait of this run too: when a rank is still in its program past the deadline, the
    # job's one report (the coordination service's) says so, not a line of each rank here.
    deadline.watchdog.set_monitor(service_client.current())
    try:
        with deadline.waiting("exchanging outputs", Members(range(comm.Get_size()),
                                                            "all ranks")):
            return comm.allgather(result.outputs)
    finally:
        deadline.watchdog.set_monitor(None)


def _run_spawned(module, per_device, n, *, job_timeout, feed_options, transfers=None,
                 hosts=None, hostfile=None, mpiexec=None, checked=None, module_source=None,
                 counts=None, xlx: bytes | None = None, **options):
    """Ranks of xladist/runtime/rank_main.py under mpiexec, served by a coordination service
    in this process (service/jobs.py): module, inputs, callbacks and outputs all travel over
    its connections."""
    from .channels_host import CallbackHost
    from .compile_once import CodeStore
    from .service import Service
    from .service.jobs import JobHost
    from .service.outputs import Outputs
    da = options["device_assignment"]
    text, filename = module_source or (module.to_text(), None)
    from xladist.hlo.packed import pack
    job = JobHost(
        n, module_text=None if xlx else text, xlx=xlx, packed=None if xlx else pack(module),
        inputs=per_device, outputs=Outputs(n, "memory"),
        trace=options["trace"], **served_feeds(module, n, da, **feed_options),
        host=CallbackHost(*transfers) if transfers else None,
        options=rank_options(counts, backend=options["backend"], timeout=options["timeout"],
                             verify=options["verify"], source=filename,
                             device_assignment=da, module=module))
    code = CodeStore(module, None if xlx else options["backend"])  # a .xlx: nothing to compile
    service = Service(n, job=job, code=code, defer_lost=True, prints=True,
                      emit=lambda text: None, checked=checked,
                      timeout_setting="timeout=")  # as the hang report names it
    from xladist.files import rescued
    before = len(rescued())
    try:
        proc = launcher.launch(n, ["-m", "xladist.runtime.rank_main"], capture=True,
                               timeout=job_timeout, hosts=hosts, hostfile=hostfile,
                               mpiexec=mpiexec, service=service)
    except BaseException as e:
        code.cancel()  # a signal or Ctrl-C: stop compiling for ranks that are gone
        job.abandon()
        if isinstance(e, subprocess.TimeoutExpired):  # the launcher stopped every rank
            raise ExecutionError(f"the {n}-rank job of {module.name} did not end within "
                                 f"job_timeout={job_timeout:g} s: it was stopped, every "
                                 f"rank with it") from None
        raise
    finally:
        code.close()  # even when interrupted: LLVM in a thread must not outlive Python
    failed = proc.returncode != 0 or service.failed
    lost = job.finish_failed() if failed else ""
    outputs = None if failed else job.finish(False)
    errors = list(job.errors)
    if failed or outputs is None:
        detail = launcher.clean_stderr(proc.stderr).strip() or \
            launcher.never_started(proc, service, n, "mpiexec=") or ""  # not an MPI launcher
        note = getattr(job, "trace_note", None)
        trace_note = f"\n(the trace {options['trace']} is partial: {note})" \
            if options.get("trace") and note else ""
        raise ExecutionError(f"the {n}-rank job failed (exit {proc.returncode})"
                             + (f":\n{detail}" if detail else "")
                             + _callback_errors(job) + trace_note + lost) \
            from (errors[0][2] if errors else None)
    failed_out = [x for x in errors if x[1] == "outfeed"]
    if failed_out:
        rank, _, e = failed_out[0]
        raise ExecutionError(job.outfeed_failed(rank, e), rank=rank) from e
    kept = rescued()[before:]
    if kept:  # written here, by this process, elsewhere than asked (xladist/files.py)
        from xladist.errors import OutputError
        folders = sorted({str(Path(saved).parent) for _, _, saved in kept})
        raise OutputError(f"some results could not be written where asked; they are saved "
                          f"in {', '.join(folders)}: "
                          f"{', '.join(Path(saved).name for _, _, saved in kept)}")
    return outputs


def served_feeds(module, n: int, device_assignment, *, infeed=None, outfeed=None,
                 infeed_fn: str | None = None, prefetch: int = 8, timeout=None) -> dict:
    """A job's feeds as the coordination service serves them (JobHost's infeed, infeed_fn,
    outfeed, prefetch): the source and the sink factory made here, in the launching
    process, and checked before any rank hears of them (both an infeed and an infeed
    function, prefetch < 1, an infeed npz file some rank lacks: InputError). `timeout`
    (taken with the other feed options) is the ranks' own deadline: not used here."""
    from .feeds.pipeline import Feeds, check_paths, make_sink, make_source, placements_of
    source = make_source(infeed, infeed_fn)  # refuses both at once
    served = source if infeed_fn is None else None
    check_count(prefetch, "prefetch")
    check_paths(Feeds(served, None), placements_of(module, n, device_assignment))
    sink = (lambda: make_sink(outfeed)) if outfeed is not None else None
    if outfeed is not None:
        make_sink(outfeed)  # refuses what is neither a path template nor a callable
    return dict(infeed=served, infeed_fn=infeed_fn, outfeed=sink, prefetch=prefetch)


def verify_once(module, counts) -> None:
    """Verify `module` here, with the run's (replica_count, num_partitions), before any
    rank hears of it: a bad module is refused once, before the launch, instead of by every
    rank after it. The ranks then run it with verify=False (the verifier only reads the
    module, so their copy needs no second look)."""
    from xladist.hlo.collective_groups import config_counts
    from xladist.hlo.verifier import verify_module
    verify_module(module, counts=config_counts(module, *counts))


def rank_options(counts, *, backend: str, timeout: float, verify: bool, source: str | None,
                 device_assignment, module) -> dict:
    """The settings a served rank runs `module` with (JobHost's `options`, JSON), with the
    custom-call targets this process registered for it (forwarded_calls.references:
    UnsupportedError, before any rank hears of the run, for one the ranks cannot import)."""
    from .forwarded_calls import references
    da = device_assignment
    return {"backend": backend, "timeout": timeout, "verify": verify, "quiet": True,
            "source": source, "custom_calls": references(module, backend),
            # The run's counts, resolved here (a header may declare only one, or none: the
            # ranks must not resolve them again from their own -n).
            "replica_count": counts[0], "num_partitions": counts[1],
            "device_assignment": [list(r) for r in da] if da is not None else None}


def _callback_errors(job) -> str:
    """Failures of this process's outfeed consumers (the ranks' report names the infeed
    ones)."""
    return "".join(f"\n(in this process: {job.outfeed_failed(rank, e)})"
                   for rank, what, e in list(job.errors) if what == "outfeed")
