"""`xladist.run(module, inputs, n=N)`: run a module on N devices from Python.

Inside an MPI job of N ranks (the script was started with `mpiexec -n N`), every
rank runs its device directly and every rank gets all devices' outputs back. From a
plain Python process, the module and inputs are written to a temporary folder and
`mpiexec -n N` runs `python -m xladist.runtime.rank_main` on it; the outputs come back the
same way. Either way the result is a list over devices of lists of output arrays.
"""

from __future__ import annotations

import operator
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np

from xladist.errors import ExecutionError, InputError
from xladist.hlo.parser import parse_file, parse_module

from . import launcher
from .device import device_counts


def _as_module(module):
    if isinstance(module, (str, os.PathLike)):
        text = str(module)
        if "\n" not in text and Path(text).exists():
            return parse_file(text)
        return parse_module(text)
    return module


def _per_device(module, inputs, n: int) -> list[list]:
    """inputs: a list with one array per parameter, each with a leading device axis of N,
    or an npz path, or a list over devices of argument lists."""
    from xladist.semantics.values import TOKEN
    from xladist.io import decode, read_inputs
    params = module.entry.parameters
    shapes = [p.shape for p in params]
    if inputs is None:
        inputs = []
    if isinstance(inputs, (str, os.PathLike)):
        return read_inputs(inputs, shapes, num_devices=n, names=[p.name for p in params])
    inputs = list(inputs)
    if len(inputs) == n and n > 0 and all(isinstance(x, (list, tuple)) for x in inputs):
        return [list(x) for x in inputs]
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
            raise InputError(f"argument {i} ({p.name}: {shape.to_text(layout=False)}): expected "
                             f"dims {list(expected)} (device axis first), got {list(a.shape)}")
        for d in range(n):
            # np.array, not np.ascontiguousarray: that turns a 0-d row into shape [1].
            per_device[d].append(np.array(a[d], order="C"))
    return per_device


def run(module, inputs=None, n: int = 1, *, backend: str = "cpu",
        timeout: float = 300.0, device_assignment=None, verify: bool = True,
        job_timeout: float | None = None, trace: str | None = None, check: bool = True,
        strict: bool = False, host_send=None, host_recv=None,
        infeed=None, outfeed=None, infeed_fn: str | None = None, prefetch: int = 8
        ) -> list[list[np.ndarray]]:
    """Run `module` (an ir.Module, HLO text or a path) on n devices.

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
    """
    module = _as_module(module)
    try:
        count = operator.index(n)
    except TypeError:
        count = 0
    if count < 1:
        raise InputError(f"n must be a whole number of devices >= 1, got {n!r}")
    n = count
    counts = device_counts(module, n)  # validates n against the module first
    per_device = _per_device(module, inputs, n)
    _check_files(module, n, device_assignment, trace=trace, infeed=infeed, outfeed=outfeed,
                 prefetch=prefetch, timeout=timeout, backend=backend)
    if check:
        from .precheck import precheck
        quiet = launcher.under_mpi() and _world_rank() != 0
        precheck(module, n, device_assignment=device_assignment, strict=strict,
                 warn=(lambda text: None) if quiet else None, prefix="xladist.run")
    hosts = (host_send, host_recv) if host_send or host_recv else None
    feed_options = dict(infeed=infeed, outfeed=outfeed, infeed_fn=infeed_fn,
                        prefetch=prefetch, timeout=timeout)
    if launcher.under_mpi():
        from .feeds import make_feeds
        options_here = dict(feeds=make_feeds(**feed_options))
        from xladist.files import rescued
        from .channels_host import CallbackHost
        before = len(rescued())
        outputs = _run_here(module, per_device, backend=backend, timeout=timeout,
                            device_assignment=device_assignment, verify=verify, trace=trace,
                            **options_here, host=CallbackHost(*hosts) if hosts else None)
        if len(rescued()) > before:  # a trace or outfeed written elsewhere (said on stderr)
            from xladist.errors import OutputError
            raise OutputError("; ".join(f"{what} {wanted} is saved as {saved}"
                                        for what, wanted, saved in rescued()[before:]))
        return outputs
    if trace:
        trace = os.path.abspath(trace)  # the ranks run in the same folder, but be explicit
    return _run_spawned(_with_counts(module, counts), per_device, n, backend=backend,
                        timeout=timeout,
                        device_assignment=device_assignment, verify=verify,
                        job_timeout=job_timeout, trace=trace, hosts=hosts,
                        feed_options=feed_options)


def _with_counts(module, counts):
    """The module as the ranks must read it: the run's counts in its header. The printer writes
    counts other than 1, and one of them fixes the other for the ranks' -n (run_device_counts),
    so a run's counts reach them even where the module's own header was silent."""
    if (module.replica_count, module.num_partitions) == counts:
        return module
    import copy
    out = copy.copy(module)
    out.replica_count, out.num_partitions = counts
    out.declared_counts = frozenset(("replica_count", "num_partitions"))
    return out


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
    comm = world()
    result = execute_on_this_rank(module, per_device, gather_to=None, **options)
    with deadline.waiting("exchanging outputs between all ranks"):
        return comm.allgather(result.outputs)


def _run_spawned(module, per_device, n, *, job_timeout, feed_options, hosts=None, **options):
    from xladist.collectives.deadline import JOB_DIR_ENV
    from .feeds.host import spawned_feeds
    with tempfile.TemporaryDirectory(prefix="xladist-") as tmp:
        job = Path(tmp)
        (job / "module.hlo").write_text(module.to_text())
        relay = None
        if hosts:  # the callbacks stay here; ranks reach them over a socket in the job dir
            from .channels_host import HostRelay
            relay = HostRelay(job, *hosts)
            options["host"] = relay.client()
        # Python feeds stay in this process, served to the ranks over a socket.
        feeds = spawned_feeds(job, module, n, options.get("device_assignment"), **feed_options)
        options["feeds"] = feeds.rank_feeds
        with open(job / "job.pkl", "wb") as f:
            pickle.dump({"inputs": per_device, "options": options}, f)
        try:
            with _compiled_once(job, options) as code_env:
                proc = launcher.launch(n, ["-m", "xladist.runtime.rank_main", str(job)], capture=True,
                                       timeout=job_timeout,
                                       env={JOB_DIR_ENV: str(job), **code_env})
        finally:
            if relay is not None:
                relay.close()
        feeds.after_job(proc.returncode)  # every outfeed item is delivered before we go on
        rescued = _keep_rescued(job)
        out = job / "outputs.pkl"
        if proc.returncode != 0 or not out.exists():
            if options.get("trace"):
                from .trace import merge_partials
                merge_partials(options["trace"])
            detail = launcher.clean_stderr(proc.stderr).strip()
            raise ExecutionError(f"the {n}-rank job failed (exit {proc.returncode})"
                                 + (f":\n{detail}" if detail else "")
                                 + feeds.error_text() + rescued) from feeds.first_error()
        feeds.raise_errors()
        if rescued:
            from xladist.errors import OutputError
            raise OutputError(rescued.strip())
        with open(out, "rb") as f:
            return pickle.load(f)


def _compiled_once(job: Path, options: dict):
    """compile_once for the ranks of rank_main: the module as they parse it (module.hlo),
    unless the run changes how they compile (compile options, no schedule)."""
    from . import compile_once
    backend = options.get("backend", "cpu")
    if options.get("compile_options") or options.get("schedule") is False:
        backend = None
    module = parse_file(job / "module.hlo") if backend == "cpu" else None
    return compile_once.compiled_for_ranks(module, backend)


def _keep_rescued(job: Path) -> str:
    """Results a rank could not write where asked (xladist/files.py) are in the job's
    `rescued` folder, about to be deleted with it: move them out; returns a note saying
    where ("" when there are none)."""
    import shutil

    from xladist.files import RESCUE_SUBDIR
    rescued = job / RESCUE_SUBDIR
    if not rescued.is_dir() or not any(rescued.iterdir()):
        return ""
    keep = Path(tempfile.mkdtemp(prefix="xladist-rescued-"))
    names = []
    for f in sorted(rescued.iterdir()):
        shutil.move(str(f), keep / f.name)
        names.append(f.name)
    return (f"\nsome results could not be written where asked; they are saved in {keep}: "
            f"{', '.join(names)}")
