"""`xladist run MODULE -n N --inputs in.npz --outputs out.npz`: run a module.

The single-device path lives here (`run_single`); multi-device runs (N > 1) go through
the MPI runtime, which is wired in separately. Argument parsing (`add_arguments`, `run`)
is kept apart from execution so the runtime can reuse `run_single` and the npz helpers.

Exit codes: 0 success, 1 execution failure, 2 invalid input (bad module, bad inputs,
unsupported backend or op).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import TYPE_CHECKING

from ..errors import InputError, XlaDistError

if TYPE_CHECKING:  # numpy is imported where it is used: `xladist --help` does not load it
    import numpy as np

HELP = "run an HLO module on N devices and write its outputs"

EPILOG = """\
examples:
  xladist run module.hlo --inputs in.npz --outputs out.npz
  xladist run module.hlo -n 1 --backend interpreter --inputs in.npz
                                        the numpy reference; print the outputs
  xladist run module.hlo                a module without parameters
  xladist run module.hlo -n 4 --inputs in.npz --trace trace.json --stats
                                        4 ranks; a Perfetto timeline and per-rank times
  xladist run --config configs/psum_basic_mesh4.toml --timeout 30
                                        settings from a TOML file; flags override it
  xladist run module.hlo -n 4 --hostfile launch/hostfile.example --inputs in.npz
                                        ranks on the hosts listed in the hostfile
  xladist run module.hlo -n 2 --inputs in.npz --mpiexec /opt/mpich/bin/mpiexec
                                        start the ranks with this mpiexec
  xladist run m.hlo -n 4 --replica-count 2 --num-partitions 2 --device-assignment "0,2;1,3"
                                        a 2 x 2 run with a custom device assignment
  xladist run train.hlo -n 4 --infeed 'data/rank{rank}.npz' --outfeed 'out/rank{rank}.npz'
                                        per-rank infeed items in, outfeed items out
  xladist run train.hlo -n 4 --infeed-fn mypkg.data:batches --prefetch 16
                                        items from FN(rank, replica, partition), 16 ahead
  xladist run module.hlo -n 2 --inputs in.npz --threads 4
                                        4 compute threads per rank (kernels and BLAS)
  xladist run module.hlo -n 2 --inputs in.npz --no-verify -q
                                        skip the verifier, no progress line
  xladist run module.hlo -n 4 --inputs in.npz --strict
                                        refuse what the deadlock check cannot prove
  xladist run module.hlo -n 4 --inputs in.npz --check-budget 60
                                        give the deadlock check up to 60 s (default 10)
  xladist run module.hlo -n 4 --inputs in.npz --no-check --timeout 20
                                        no deadlock proof first; a hang ends after 20 s
  xladist run m.hlo -n 2 --host-recv 'host/rank{rank}_ch{channel}.npz'
                                        data for recvs from the host, per rank and channel
  xladist run m.hlo -n 2 --host-send 'out/rank{rank}_ch{channel}.npz'
                                        write what each rank sends to the host
  xladist run m.hlo -n 8 --inputs 'in.{device}.npz' --outputs 'out.{device}.npz'
                                        one input and one output file per device
  xladist run --batch runs.txt -n 2     every line of runs.txt (MODULE and flags) on the
                                        same 2 ranks, started once

npz format: inputs arg0, arg1, ... (one per entry parameter), outputs out0, out1, ...
(one per flattened result). With -n N every array has a leading device axis of size N
(row d = device d); with -n 1 inputs may also omit it. bf16 arrays are uint16 bit
patterns.

Runs longer than a second show a progress line on stderr (rank 0: loop iterations,
outfeed items, elapsed; plain log lines every 5 s when stderr is not a terminal);
--quiet silences it. Open a --trace file at https://ui.perfetto.dev.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("module", metavar="MODULE", nargs="?",
                        help="HLO text file, or a .xlx file of `xladist compile` (runs "
                             "without compiling); or `module` in the --config file")
    parser.add_argument("--batch", metavar="LIST",
                        help="run every line of LIST (MODULE and flags, as for one run) on "
                             "the same N ranks, started once (xladist/cli/batch.py)")
    parser.add_argument("--config", metavar="FILE.toml",
                        help="read settings from a TOML run configuration (keys: "
                             "xladist/runtime/config.py SCHEMA; see configs/); options given here "
                             "override it")
    parser.add_argument("-n", "--num-devices", type=int, default=1, metavar="N",
                        help="number of devices (MPI ranks); default 1")
    parser.add_argument("--backend", default="cpu",
                        help="cpu (native code via LLVM, default) or interpreter (numpy "
                             "reference)")
    parser.add_argument("--inputs", metavar="IN.npz",
                        help="arguments arg0.. (required when the module has parameters); "
                             "'in.{device}.npz': one file per device, without the device axis")
    parser.add_argument("--outputs", metavar="OUT.npz",
                        help="write results out0.. here (default: print them); "
                             "'out.{device}.npz': one file per device")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip the verifier (for modules it does not understand yet)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="compute threads per rank (kernels and BLAS; default: the cores "
                             "of the rank's CPU affinity mask shared among the ranks on its "
                             "node; also XLADIST_THREADS)")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                        help="deadline of every wait for another rank (default 300); when "
                             "it passes, the job reports where each rank waits and aborts")
    parser.add_argument("--hostfile", metavar="FILE",
                        help="MPICH hostfile passed to mpiexec (-f) for multi-host runs")
    parser.add_argument("--mpiexec", metavar="PATH",
                        help="the MPI launcher that starts the ranks (default: the mpich "
                             "wheel's mpiexec, else the one on PATH)")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the deadlock check that runs before any rank starts (a "
                             "hang is then ended by --timeout, with a report)")
    parser.add_argument("--check-budget", type=float, default=10.0, metavar="S",
                        help="seconds the deadlock check may take; past it the check says it "
                             "cannot prove the program within the budget (a warning, refused "
                             "with --strict; default 10)")
    parser.add_argument("--strict", action="store_true",
                        help="refuse to run a program the deadlock check cannot prove "
                             "(control that depends on data around communication)")
    parser.add_argument("--host-recv", metavar="PATTERN",
                        help="data for recvs from the host (is_host_transfer=true): one .npz "
                             "per rank and channel, e.g. 'host/rank{rank}_ch{channel}.npz'; "
                             "the k-th recv on a channel takes the file's k-th array")
    parser.add_argument("--host-send", metavar="PATTERN",
                        help="write what each rank sends to the host, one .npz per rank and "
                             "channel (arrays in send order), e.g. 'out/rank{rank}_ch{channel}.npz'")
    feeds = parser.add_argument_group(
        "infeed and outfeed (xladist/runtime/feeds/)",
        "PATH may use {rank}, {replica} and {partition}; items are item0, item1, ... and "
        "a tuple item's elements item{k}_0, item{k}_1, ...")
    feeds.add_argument("--infeed", metavar="PATH.npz",
                       help="each rank's infeed items, e.g. 'feeds/rank{rank}.npz'")
    feeds.add_argument("--infeed-fn", metavar="PKG.MOD:FN",
                       help="each rank's infeed: FN(rank, replica, partition) -> iterable of "
                            "items (arrays, or tuples of arrays), imported in every rank")
    feeds.add_argument("--outfeed", metavar="PATH.npz",
                       help="write each rank's outfeed items here, e.g. 'out/rank{rank}.npz' "
                            "(also after a failure: nothing outfed is lost)")
    feeds.add_argument("--prefetch", type=int, default=8, metavar="N",
                       help="infeed items each rank reads ahead of the program (default 8)")
    parser.add_argument("--trace", metavar="TRACE.json",
                        help="write a Chrome/Perfetto timeline: one track per rank, every "
                             "instruction, collective, send/recv and feed wait")
    parser.add_argument("--stats", action="store_true",
                        help="print per-rank time split (compute, collective wait, infeed "
                             "wait) at the end")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress line while the job runs")
    parser.add_argument("--replica-count", type=int, metavar="R",
                        help="replicas, where the module header does not declare them "
                             "(default: the devices not taken by partitions)")
    parser.add_argument("--num-partitions", type=int, metavar="P",
                        help="partitions, where the module header does not declare them "
                             "(default: the devices not taken by replicas)")
    from xladist.runtime.config import parse_assignment
    parser.add_argument("--device-assignment", type=parse_assignment, metavar="IDS",
                        help="device id per replica (rows, ';') and partition (columns, ','),"
                             " e.g. \"0,2;1,3\"; default: partition x replicas + replica")


def load_module(path: str, name: str = "MODULE", *, here: bool = True):
    """MODULE (`name`: how errors call it): HLO text, or a `.xlx` file (`here`: its code
    must run on this host)."""
    if path.endswith(".xlx"):
        return serialized(path, here).module
    from ..hlo.parser import parse_file
    return parse_file(path, name)


@functools.lru_cache(maxsize=4)
def serialized(path: str, here: bool = True):
    """A `.xlx` file of `xladist compile` (validated once per process; `here`: for this
    host's CPU too -- not when the ranks run on the hosts of a --hostfile, where each rank
    checks its own)."""
    from ..compiler.serialized import SerializedExecutable
    return SerializedExecutable(path, here=here)


def _here(args) -> bool:
    """Whether this process's host runs the module's code (launcher.ranks_elsewhere)."""
    from xladist.runtime import launcher
    return launcher.under_mpi() or not launcher.ranks_elsewhere(getattr(args, "hostfile", None))


def precompiled_options(args) -> dict:
    """Backend options that run a `.xlx` module without compiling ({} for HLO text)."""
    if not args.module.endswith(".xlx"):
        return {}
    if args.backend != "cpu":
        raise InputError(f"{args.module} holds cpu code; it runs with --backend cpu only")
    return serialized(args.module, _here(args)).options()


def run_single(module, inputs: list, backend: str = "cpu", *, verify: bool = True,
               **options) -> list[np.ndarray]:
    """Run `module` on one device with `inputs` (one array per entry parameter);
    returns the flattened outputs."""
    from ..backends import compile as compile_module
    exe = compile_module(module, backend=backend, verify=verify, **options)
    return exe(*inputs)


def _check_device_count(module, n: int) -> None:
    from xladist.runtime.device import device_counts
    device_counts(module, n)  # the one rule: the header's counts, the rest from n


def read_config(args) -> None:
    """--config FILE fills what the command line did not set (once: config.apply records
    what it set in args._config_keys)."""
    if getattr(args, "config", None) and not hasattr(args, "_config_keys"):
        from xladist.runtime import config
        argv = list(args._argv)
        argv = argv[argv.index("run") + 1:] if "run" in argv else argv
        config.apply(args, add_arguments, argv)


def _apply_config(args) -> None:
    """--config FILE fills what the command line did not set; MODULE is then required.
    Every number of the run (-n, --replica-count, --prefetch, --timeout, ...) is then
    checked and named as its option, before the module is read (run_args.check_numbers)."""
    read_config(args)
    if args.module is None:
        raise InputError("no module to run: give MODULE or --config FILE with "
                         "module = \"path/to/module.hlo\"")
    from xladist.runtime.run_args import check_numbers
    check_numbers(args)


def load_run_module(args):
    """The module with the run's replica/partition counts applied."""
    from xladist.runtime.config import override_device_counts
    from xladist.runtime.run_args import setting_name
    module = load_module(args.module, setting_name("module", args=args), here=_here(args))
    override_device_counts(module, getattr(args, "replica_count", None),
                           getattr(args, "num_partitions", None))
    return module


def run(args) -> int:
    from xladist.runtime import launcher
    if getattr(args, "batch", None):
        from .batch import run_batch
        return run_batch(args)
    _apply_config(args)
    if getattr(args, "threads", None) is not None:
        from ..compiler import parallel
        parallel.set_threads(args.threads)  # checked here, before any rank starts
    if launcher.under_mpi():
        return _run_as_rank(args)
    launcher.check_not_an_srun_task()  # (also without -n, where no launch checks it)
    from ..io import read_inputs
    module = load_run_module(args)
    _check_device_count(module, args.num_devices)
    from xladist.runtime import run_args
    run_args.check(args, module)  # every option and file, before anything runs (exit 2)
    from xladist.runtime import feeds
    feeds.check_args(args, module)  # e.g. --infeed-fn imports
    _check_targets(module)
    if args.num_devices > 1 or args.hostfile or args.trace or args.stats:
        # Validate everything a rank would refuse before starting any rank (exit 2): the
        # inputs from their files' headers (the ranks read them later, one row each).
        inputs = _open_inputs(module, args)
        _verify_once(module, args)
        checked = _deadlock_check(module, args)
        return _launch(args, module, inputs, checked)
    params = module.entry.parameters
    shapes = [p.shape for p in params]
    if args.inputs:
        per_device = read_inputs(args.inputs, shapes, num_devices=args.num_devices,
                                 device_axis=None, names=[p.name for p in params],
                                 what="--inputs")
    elif any(not s.is_token for s in shapes):
        raise InputError(f"module {module.name} has {len(shapes)} parameters; pass --inputs "
                         f"IN.npz with arrays arg0..arg{len(shapes) - 1}")
    else:
        per_device = [[None] * len(shapes)]
    from xladist.runtime.feeds import from_args, running_single
    with running_single(from_args(args), module) as device:
        outputs = run_single(module, per_device[0], args.backend, verify=not args.no_verify,
                             **precompiled_options(args),
                             **({"device": device} if device is not None else {}))
    if args.outputs:
        _write_outputs(args.outputs, [outputs])
    else:
        _print_outputs(outputs)
    return 0


def _write_outputs(path, per_device) -> None:
    """--outputs, atomically; rescued to a fresh folder when that fails (xladist/files.py)."""
    import numpy as np

    from ..files import deliver
    from ..io import npz_path, output_arrays
    arrays = output_arrays(per_device, device_axis=True)
    deliver(npz_path(path), lambda f: np.savez(f, **arrays), "--outputs")


def _open_inputs(module, args):
    """The run's inputs (io.Inputs: checked from the files' headers, read one device at a
    time), or None for a module without array parameters."""
    from ..io import Inputs
    params = module.entry.parameters
    shapes = [p.shape for p in params]
    n = args.num_devices
    if args.inputs:
        return Inputs(args.inputs, shapes, num_devices=n,
                      device_axis=None if n == 1 else True,
                      names=[p.name for p in params], what="--inputs")
    if any(not s.is_token for s in shapes):
        raise InputError(f"module {module.name} has {len(shapes)} parameters; pass --inputs "
                         f"IN.npz with arrays arg0..arg{len(shapes) - 1}")
    return None


def _job(args, module, inputs):
    """The run as the coordination service serves it to the ranks (runtime/service/jobs.py):
    every file is read and written on this host, by this process."""
    from xladist.runtime.service.outputs import Outputs

    from ..io import DEVICE_FIELD
    n = args.num_devices
    if args.outputs:
        outputs = Outputs(n, "devices" if DEVICE_FIELD in args.outputs else "npz", args.outputs)
    else:
        outputs = Outputs(n, "print")
    try:
        return _job_host(args, module, inputs, outputs)
    except BaseException:
        outputs.discard()  # (its temporary folder: a SIGTERM while the module is packed)
        raise


def _job_host(args, module, inputs, outputs):
    from xladist.runtime.channels_host import FileHost
    from xladist.runtime.feeds import NpzSink, NpzSource
    from xladist.runtime.service.jobs import JobHost
    n = args.num_devices
    xlx = None
    if args.module.endswith(".xlx"):
        precompiled_options(args)  # checks it (cpu backend only)
        with open(args.module, "rb") as f:
            xlx = f.read()
    da = args.device_assignment
    options = {"backend": args.backend, "timeout": args.timeout,
               "verify": not args.no_verify and not getattr(args, "verified", False),
               "device_assignment": [list(r) for r in da] if da is not None else None,
               "threads": args.threads, "quiet": args.quiet,
               "source": args.module}  # what reports name (lines of text; a refused .xlx)
    from xladist.runtime.launcher import under_mpi
    if not under_mpi():  # ranks it starts: fresh processes (under mpiexec: the script's own)
        from xladist.runtime.forwarded_calls import references
        options["custom_calls"] = references(module, args.backend)
    if xlx is None:  # the file's own text
        from ..files import read_text
        from xladist.runtime.device import device_counts
        r, p = device_counts(module, n)  # resolved here: the ranks apply them as given
        options.update(replica_count=r, num_partitions=p)
        text = read_text(args.module, "MODULE", kind="HLO text")
    from xladist.hlo.packed import pack
    return JobHost(
        n, module_text=None if xlx is not None else text, xlx=xlx,
        packed=None if xlx is not None else pack(module),
        options=options, inputs=inputs, outputs=outputs, trace=args.trace, stats=args.stats,
        infeed=NpzSource(args.infeed) if args.infeed else None, infeed_fn=args.infeed_fn,
        outfeed=(lambda: NpzSink(args.outfeed)) if args.outfeed else None,
        prefetch=args.prefetch,
        host=FileHost(args.host_recv, args.host_send) if args.host_recv or args.host_send
        else None)


def _launch(args, module, inputs, checked) -> int:
    """Start `mpiexec -n N` ranks of xladist/runtime/rank_main.py, served by a coordination
    service in this process: it hands them the module, their inputs and compiled code (the
    module is compiled here once, xladist/runtime/compile_once.py), takes their outputs,
    trace and statistics, and writes them here, where the user asked."""
    from xladist.runtime import launcher
    # From the job's temporary folders on, a SIGTERM ends the run through its cleanup.
    with launcher.signals_raise():
        job = _job(args, module, inputs)
        try:
            proc, service = _start(args, module, job, checked)
            return _after(args, job, proc, service)
        except BaseException:
            job.abandon()  # its temporary folders go (written results stay)
            raise


def _start(args, module, job, checked):
    """mpiexec's whole run for `job`: (the CompletedProcess, the service)."""
    from xladist.runtime import compile_once, launcher, progress
    from xladist.runtime.service import Service
    precompiled = args.module.endswith(".xlx")
    code = compile_once.CodeStore(module, None if precompiled else args.backend)
    try:
        service = Service(args.num_devices, job=job, code=code, defer_lost=True,
                          checked=checked)
        env = {**progress.launch_env(args.quiet), "XLADIST_RANK_PREFIX": "xladist run"}
        proc = launcher.launch(args.num_devices, ["-m", "xladist.runtime.rank_main"],
                               hostfile=args.hostfile, env=env, mpiexec=args.mpiexec,
                               service=service)
    except BaseException:
        code.cancel()  # a signal or Ctrl-C: stop compiling for ranks that are gone
        raise
    finally:
        code.close()  # even when interrupted: LLVM in a thread must not outlive Python
    return proc, service


def _after(args, job, proc, service) -> int:
    """What the ended job says: its failures, results written, the exit code."""
    failed = proc.returncode != 0 or service.failed
    if proc.returncode != 0 and len(service.ranks) < args.num_devices and args.hostfile:
        print(f"xladist run: mpiexec could not start ranks on the hosts of {args.hostfile}: "
              f"every host needs passwordless ssh from here and this same Python at "
              f"{sys.executable} (see launch/README.md)", file=sys.stderr)
        unstarted = 0
    else:
        from . import ranks_never_started
        unstarted = ranks_never_started(proc, service, args.num_devices, "run")
    unsaid = _finish(job, failed or bool(unstarted))
    if failed and args.trace and job.trace_note:
        print(f"xladist run: wrote the failed run's partial trace to {args.trace}",
              file=sys.stderr)
    return unstarted or proc.returncode or (1 if failed or unsaid else 0)


def _finish(job, failed: bool) -> list[str]:
    """The job's results written (JobHost.finish; its OutputError goes on to main), and
    then what failed in this process's feeds that no rank and no result said -- an
    --outfeed file's writer that raised, items not taken by the deadline -- one line each,
    naming the rank (JobHost.outfeed_failures). Returns those lines: the run fails."""
    try:
        job.finish(failed)
    finally:
        unsaid = job.outfeed_failures()
        for line in unsaid:
            print(f"xladist run: error: {line}", file=sys.stderr)
    return unsaid


def _run_as_rank(args) -> int:
    """One rank of a job started by a bare `mpiexec` / `srun`: rank 0 reads the files and hosts
    the coordination service (the launching process's part); every rank then runs as a
    served rank (xladist/runtime/rank_main.py)."""
    from xladist.runtime.rank import report_and_abort, world
    from xladist.runtime.rank_main import serve
    from xladist.runtime.service import client as service_client
    comm = world()
    rank, size = comm.Get_rank(), comm.Get_size()
    _interrupt_ends_the_job(rank)
    from xladist.collectives import deadline
    deadline.ranks_exit_together()  # (every rank of this job exits when it ends)
    service = job = None
    refused = None
    if rank == 0:
        try:
            service, job = _host_job(args, size)
        except Exception as e:  # noqa: BLE001 -- said once below, after every rank knows
            refused = e
        except BaseException as e:  # noqa: BLE001 -- Ctrl-C, a signal: the job goes now
            report_and_abort(e, rank, prefix="xladist run")
    code = _agree_on_setup(comm, refused)
    if code:
        return _refused(refused, code)
    try:
        client = service_client.host_service(service, comm)
        serve(client, comm, bye=rank != 0)
        if rank == 0:
            _wait_for_the_ranks(client, service, size)
            service.close()  # (after the outfeed streams still arriving: drain_outfeeds)
            if _finish(job, service.failed):
                return 1
    except BaseException as e:  # noqa: BLE001 - a failing rank must take the job down
        report_and_abort(e, rank, prefix="xladist run")
        return 1
    return 0


def _interrupt_ends_the_job(rank: int) -> None:
    """Ctrl-C (SIGINT) or SIGTERM (a batch system's time limit, `timeout`) to mpiexec reaches
    every rank, but Python runs its handlers only once the main thread runs Python again: in
    a rank blocked in MPI, not before its wait's deadline (minutes), and SIGTERM's default
    action killed the ranks (mpiexec's banner, exit 15). So rank 0 alone takes them, in a
    thread woken by the signal itself (signal.set_wakeup_fd), and ends the job as `xladist
    run` ends for them (`rank 0: interrupted`, exit 130; `terminated`, 143: the service
    ends the others with it); the other ranks ignore them, so it is said once."""
    import signal
    if rank != 0:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        return
    import socket
    import threading
    woken, wake = socket.socketpair()
    wake.setblocking(False)
    signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # so that it wakes the thread

    def watch() -> None:
        from xladist.collectives import deadline
        from xladist.runtime.rank import report_and_abort
        while (got := woken.recv(64)):
            if signal.SIGINT in got:
                report_and_abort(KeyboardInterrupt(), rank, prefix="xladist run")
            if signal.SIGTERM in got:
                deadline.abort_job(f"xladist run: error: rank {rank}: terminated (SIGTERM)",
                                   128 + signal.SIGTERM, with_rank=False)
    threading.Thread(target=watch, name="xladist-interrupt", daemon=True).start()
    _interrupt_ends_the_job.keep = (woken, wake)  # the socket pair lives as long as the rank


def _wait_for_the_ranks(client, service, size: int) -> None:
    """Rank 0 of a bare launch, its own program done, waits until every other rank has
    ended, still connected to the service it hosts: a hang past this wait's deadline, a
    failure or Ctrl-C here is then the service's one report, and rank 0 exits with the
    others (server.EXIT_TOGETHER_S) -- said goodbye before, it printed a line of its own,
    exited first and left the others saying they lost the service."""
    from xladist.collectives import deadline
    from xladist.runtime.watchdog import Members
    deadline.watchdog.set_monitor(client)
    try:
        with deadline.waiting("receiving the outputs", Members(range(size), "all ranks")):
            service.wait_all_ended(but=0)
    finally:
        deadline.watchdog.set_monitor(None)
    client.bye()


def _agree_on_setup(comm, refused: BaseException | None) -> int:
    """Every rank of a bare launch learns whether rank 0 could set up the job (collective):
    0, else the exit code of rank 0's error. A job refused before any program runs then
    ends the normal way on every rank, with that code, and says why once (rank 0). A rank
    that exits alone while the others wait in MPI is, under MPICH's hydra, taken as a
    crash: its proxy kills the others (SIGKILL) and mpiexec exits 9 with its BAD
    TERMINATION banner -- or with the error's code, whichever came first."""
    from xladist.collectives import deadline
    from xladist.runtime.rank import failure_text
    code = 0 if refused is None else failure_text(refused, 0)[1]
    with deadline.waiting("learning from rank 0 whether the job could be set up"):
        return comm.bcast(code, root=0)


def _refused(error: BaseException | None, code: int) -> int:
    """The exit code of a bare launch that rank 0 refused; rank 0 says why (as a launching
    process does: `main` prints an XlaDistError), the other ranks say nothing."""
    if error is None:
        return code
    if isinstance(error, (XlaDistError, MemoryError)):
        raise error
    from xladist.runtime.rank import failure_text
    print(f"xladist run: error: {failure_text(error, 0)[0]}", file=sys.stderr)
    return code


def _host_job(args, size: int):
    """Rank 0 of a bare launch: the checks the launcher would make, then the service."""
    from xladist.runtime import compile_once, feeds, run_args
    from xladist.runtime.service import Service
    if args.num_devices not in (1, size):
        raise InputError(f"-n {args.num_devices} does not match the MPI job's {size} ranks")
    args.num_devices = size
    module = load_run_module(args)
    _check_device_count(module, size)
    run_args.check(args, module)
    feeds.check_args(args, module)
    _check_targets(module)
    inputs = _open_inputs(module, args)
    _verify_once(module, args)  # as a launcher does: once, before the check (in its words)
    checked = None
    if not os.environ.get("XLADIST_CHECKED"):
        checked = _deadlock_check(module, args)  # started by hand under mpiexec: check here
    job = _job(args, module, inputs)
    code = compile_once.CodeStore(module, None if args.module.endswith(".xlx") else args.backend)
    service = Service(size, job=job, code=code, prints=False, checked=checked)
    # This process is the job's host and a rank: if the job is aborted, what arrived so far
    # (trace events, outfeed items, host sends) is still written, here, before it goes.
    from xladist.collectives import deadline

    def save() -> None:
        job.close_outfeeds()
        _finish(job, True)
    deadline.on_abort(save)
    return service, job


def _check_targets(module) -> None:
    """Every custom-call target registered (UnsupportedError, exit 2), before any rank
    starts. This process's registry is the ranks': ranks it launches are fresh processes
    that have the built-ins and are forwarded the rest (an --infeed-fn module's, imported
    here by feeds.check_args: runtime/forwarded_calls.py), and under a bare mpiexec this
    is one of the ranks, whose script registered its targets on every rank. Also no dynamic
    entry parameter (refused by every backend), before the inputs are held against dims it
    has not."""
    from xladist.hlo.dynamic_padder import check_entry_parameters
    from xladist.semantics.custom_calls import check_registered
    check_registered(module)
    check_entry_parameters(module)


def _verify_once(module, args) -> None:
    """The module verified here, before any rank starts (runtime/api.verify_once): a bad
    module is refused once, without a launch; the ranks then skip their own look."""
    if args.module.endswith(".xlx") or args.no_verify:
        return
    from xladist.runtime.api import verify_once
    from xladist.runtime.device import device_counts
    verify_once(module, device_counts(module, args.num_devices))
    args.verified = True


def _deadlock_check(module, args) -> dict | None:
    """xladist.runtime.precheck before any rank runs (raises DeadlockError, exit 1, with the
    report); tells the ranks about to start that it was done. Returns its verdict for the
    coordination service (a hang after a proof is a checker defect: the report says so)."""
    if getattr(args, "no_check", False):
        return None
    from xladist.runtime.precheck import CHECKED_ENV, precheck, verdict
    report = precheck(module, args.num_devices, device_assignment=args.device_assignment,
                      strict=args.strict, budget=getattr(args, "check_budget", 10.0))
    os.environ[CHECKED_ENV] = "1"  # inherited by the ranks mpiexec starts
    return verdict(report, module, f"xladist check {args.module} -n {args.num_devices}")


def _print_outputs(outputs) -> None:
    from ..io import outputs_text
    sys.stdout.write(outputs_text(outputs))
