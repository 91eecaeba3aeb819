"""One rank's life: place the device, prepare communicators, compile, run, gather.

`execute_on_this_rank` is what every rank of an MPI job calls (from the CLI or from
`xladist.run` inside mpiexec). Failures are turned into one printed report and an
MPI abort, so no rank is left waiting for a peer that died (ARCHITECTURE rule 3).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from xladist.collectives import deadline
from xladist.errors import ExecutionError, XlaDistError, out_of_memory

from . import watchdog
from .device import make_assignment, placement_for

DEFAULT_TIMEOUT_S = 300.0


@dataclass
class RankResult:
    """What a finished rank hands back: its outputs and, on rank 0, everybody's."""

    rank: int
    outputs: list[np.ndarray]
    all_outputs: list[list[np.ndarray]] | None = None
    outfeed: list = field(default_factory=list)
    tracer: object = None  # xladist.runtime.trace.Tracer of this rank, when the run was traced


def world():
    """MPI_COMM_WORLD; collective on a process's first call (node_shm)."""
    from mpi4py import MPI

    from .node_shm import unlink_when_mapped
    unlink_when_mapped(MPI.COMM_WORLD)
    return MPI.COMM_WORLD


_SHARED_SIZE: dict[int, tuple[int, int]] = {}


def _share_cores(comm) -> None:
    """Tell the compute pool how many ranks share this node's cores, and which one this
    is (once per
    communicator size: the split is collective, so every rank does it together)."""
    from mpi4py import MPI

    from xladist.compiler import parallel
    if comm.Get_size() not in _SHARED_SIZE:
        with deadline.waiting("finding the ranks that share this node"):
            node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        _SHARED_SIZE[comm.Get_size()] = (node.Get_size(), node.Get_rank())
        node.Free()
    parallel.set_local_ranks(*_SHARED_SIZE[comm.Get_size()])


def execute_on_this_rank(module, inputs, *, backend: str = "cpu",
                         timeout: float = DEFAULT_TIMEOUT_S, device_assignment=None,
                         feeds=None, verify: bool = True, gather_to: int | None = 0,
                         compile_options: dict | None = None, trace: str | None = None,
                         tracer=None, host=None, schedule: bool = True,
                         proven: bool = False) -> RankResult:
    """Run this rank's device of `module`.

    `inputs` is this rank's device's argument list (a rank holds its own device's inputs
    only). With `gather_to` set, that rank also receives every device's outputs (an MPI
    gather: for small results, such as the demo's; jobs stream their outputs to the
    coordination service instead, xladist/runtime/rank_main.py). `trace`: write a
    Perfetto timeline of all ranks there (xladist/runtime/trace.py); `tracer`: a Tracer to fill
    (for progress and timing summaries) instead of a new one. `host`: the host end of
    host-transfer channels (xladist/runtime/channels_host.py). `schedule`: run every computation in
    the order of xladist.analysis.schedule.schedule_module (the order the deadlock check proves), on
    backends that accept one. `proven`: the deadlock check proved this program for this job
    (else every collective's members compare signatures first: xladist/runtime/signatures.py).
    While this runs, a wait that passes `timeout` ends the job with
    the coordination service's report of where every rank is (xladist/runtime/watchdog.py).
    """
    comm = world()
    n = comm.Get_size()
    rank = comm.Get_rank()
    deadline.configure(timeout)
    ctx = device_context(module, comm, device_assignment, feeds=feeds, host=host,
                         proven=proven)
    placement, monitor = ctx.placement, ctx.monitor
    device, spans = ctx, _untraced
    if trace and tracer is None:
        from .trace import Tracer
        tracer = Tracer(rank)
    if tracer is not None:
        from .trace import TracedDevice
        tracer.watch(module, placement)
        if trace:  # collective: every rank traces or none (progress-only tracers don't)
            tracer.align(comm)
        device, spans = TracedDevice(ctx, tracer), tracer
    # What a failing rank keeps: its timeline (sent to the coordination service, which merges
    # what it gets; or, when this process writes the trace itself, a part file) and what it
    # already sent to the host (--host-send files).  A job aborted by a deadline or by another
    # thread never reaches the except below, so these are abort hooks; the except runs them
    # itself.
    forget_trace = deadline.on_abort(lambda: _save_trace(monitor, tracer, trace, True)) \
        if trace else None
    host_finish = getattr(host, "finish", None)
    forget_host = deadline.on_abort(host_finish) if host_finish else None
    try:
        monitor.starting(f"compiling the module ({backend} backend)")  # until mark()
        with spans.span("compile", backend=backend):
            exe = compile_for(module, device, backend=backend, verify=verify,
                              schedule=schedule, compile_options=compile_options)
        monitor.mark("computing")
        with spans.execute():
            outputs = exe(*inputs)
        monitor.mark("finished")
    except BaseException as error:
        _mark_failed(monitor, error)
        deadline.run_abort_hooks()
        if feeds is not None:  # deliver every item outfed so far before the job aborts
            feeds.abort()
        # A process that goes on after the error (xladist.run in a loop under MPI, the
        # conformance kit after a backend refused a program) must not keep this run's
        # communicators: MPICH has about 2,000 context ids. Freeing is local in MPICH, so
        # it cannot wait for a peer that is still inside a collective.
        ctx.cache.free()
        raise
    if feeds is not None:
        feeds.finish()
    release(ctx)
    if host_finish:
        forget_host()
        host_finish()
    result = RankResult(rank, outputs)
    if gather_to is not None:
        with deadline.waiting(f"gathering outputs on rank {gather_to}",
                              watchdog.Members(range(n), "all ranks")):
            gathered = comm.gather(outputs, root=gather_to)
        if rank == gather_to:
            result.all_outputs = gathered
    if trace:
        _save_trace(monitor, tracer, trace, False, comm, gather_to or 0)
        forget_trace()
    result.tracer = tracer
    deadline.watchdog.set_monitor(None)
    deadline.watchdog.loops.clear()
    return result


def _mark_failed(monitor, error: BaseException) -> None:
    """Tell the service this rank's run raised, so that a hang report of the ranks still
    waiting for it (its caller may go on: a script under mpiexec) names its error."""
    try:
        monitor.mark("failed", error=watchdog.failure(error))
    except Exception:  # noqa: BLE001, S110 -- a report aid must not hide the error itself
        pass


def device_context(module, comm, device_assignment=None, *, feeds=None, host=None,
                   proven: bool = False):
    """This rank's device of `module`, placed, its communicators and channels made and every
    collective planned (collective over all ranks: each calls it for the same module);
    `proven` as execute_on_this_rank's. The
    context carries `placement`, `monitor` (the rank's coordination-service client, whose
    watchdog now watches this module), `cache` and `channels`; `release` frees them."""
    from xladist.collectives import CommunicatorCache, MpiCommunicator

    from .mpi_context import MpiDeviceContext
    _share_cores(comm)
    assignment = make_assignment(module, comm.Get_size(), device_assignment)
    placement = placement_for(comm.Get_rank(), assignment)
    from .service import client as service_client
    monitor = service_client.for_rank(comm)
    watch(monitor, placement)
    cache = CommunicatorCache(MpiCommunicator(comm.Dup()))
    channels = None
    if any(i.family == "p2p" for i in module.all_instructions()):
        from xladist.collectives.p2p import Channels
        with deadline.waiting("creating the channels' communicator"):
            channels = Channels(comm.Dup(), placement, host=host)
    ctx = MpiDeviceContext(module, placement, cache, feeds=feeds, channels=channels,
                           proven=proven)
    ctx.monitor = monitor
    if feeds is not None:
        feeds.start(placement, module)  # checks the infeed order, starts the producer
    ctx.prepare()
    return ctx


def watch(monitor, placement) -> None:
    """The watchdog's hang reports name `placement` and go through `monitor` (once per run:
    a persistent rank runs many modules, each placed its own way)."""
    monitor.placed(placement)
    deadline.watchdog.loops.clear()
    deadline.watchdog.set_monitor(monitor)


def release(ctx) -> None:
    """The communicators and channels of a device_context (after its last run)."""
    if ctx.channels is not None:
        ctx.channels.close()
    ctx.cache.free()  # communicators are per run: a process running many programs reuses ids


def compile_for(module, device, *, backend: str, verify: bool = True, schedule: bool = True,
                compile_options: dict | None = None):
    """`module` compiled for `device` (a device_context, or a traced one around it)."""
    from xladist.backends import compile as compile_module
    options = _executor_options(module, backend, schedule)
    options.update(compile_options or {})
    return compile_module(module, backend=backend, verify=verify, device=device, **options)


def _save_trace(client, tracer, trace, partial: bool, comm=None, root: int = 0) -> None:
    """`trace` True: this rank's events go to the coordination service, which writes the
    job's trace on the launching host (also of a failed run: `partial`). A path: the ranks
    merge their events there themselves (a gather to `root`; after a failure each rank
    leaves `PATH.rank<r>.part` where it runs)."""
    if trace is True:
        from .rank_main import trace_blob
        client.send("trace", blob=trace_blob(tracer), partial=partial, timeout=10.0)
    elif partial:
        tracer.write_partial(trace)
    else:
        tracer.write_merged(comm, trace, root=root)


def _executor_options(module, backend: str, schedule: bool) -> dict:
    """The scheduled order and loop tracking, for backends whose executable accepts them.

    The interpreter takes `schedule` (computation -> instruction order) and `rules` (per-run
    rule overrides: the while rule that keeps the watchdog's iteration context); the cpu
    backend takes `schedule` and keeps the iteration context in its while thunk itself.
    """
    import inspect

    from xladist.backends import load_backend
    try:
        params = inspect.signature(load_backend(backend)).parameters
    except (TypeError, ValueError):
        return {}
    options = {}
    if schedule and "schedule" in params:
        from xladist.analysis.schedule import schedule_module
        options["schedule"] = schedule_module(module)
    if "rules" in params:
        options["rules"] = watchdog.loop_tracking_rules()
    return options


class _Untraced:
    """Stands in for a Tracer when the run is not traced: spans that do nothing."""

    @contextmanager
    def span(self, *args, **kwargs):
        yield

    execute = span


_untraced = _Untraced()


def report_and_abort(error: BaseException, rank: int, prefix: str = "xladist") -> None:
    """Print one rank's failure once and take the whole job down (no orphaned ranks)."""
    text, code = failure_text(error, rank)
    deadline.abort_job(f"{prefix}: error: {text}", code, with_rank=False)
    sys.exit(code)


def failure_text(error: BaseException, rank: int) -> tuple[str, int]:
    """What a rank says about its failure (named with its rank), and the exit code."""
    if isinstance(error, XlaDistError):
        text = str(error)
        if not isinstance(error, ExecutionError) or error.rank is None:
            text = f"rank {rank}: {text}"
        code = error.exit_code
    elif isinstance(error, MemoryError):  # not a bug: no traceback
        text, code = f"rank {rank}: {out_of_memory(error)}", 1
    elif isinstance(error, KeyboardInterrupt):  # Ctrl-C, forwarded by mpiexec: as cli.main
        text, code = f"rank {rank}: interrupted", 130
    else:
        import traceback
        text = f"rank {rank}: internal error: {type(error).__name__}: {error}\n" + "".join(
            traceback.format_exception(error)[-6:])
        code = 1
    return text, code
