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

import numpy as np

from ..errors import InputError

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
                        help="arguments arg0.. (required when the module has parameters)")
    parser.add_argument("--outputs", metavar="OUT.npz",
                        help="write results out0.. here (default: print them)")
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


def load_module(path: str):
    if path.endswith(".xlx"):
        return serialized(path).module
    from ..hlo.parser import parse_file
    return parse_file(path, "MODULE")


@functools.lru_cache(maxsize=4)
def serialized(path: str):
    """A `.xlx` file of `xladist compile` (validated once per process)."""
    from ..compiler.serialized import SerializedExecutable
    return SerializedExecutable(path)


def precompiled_options(args) -> dict:
    """Backend options that run a `.xlx` module without compiling ({} for HLO text)."""
    if not args.module.endswith(".xlx"):
        return {}
    if args.backend != "cpu":
        raise InputError(f"{args.module} holds cpu code; it runs with --backend cpu only")
    return serialized(args.module).options()


def run_single(module, inputs: list, backend: str = "cpu", *, verify: bool = True,
               **options) -> list[np.ndarray]:
    """Run `module` on one device with `inputs` (one array per entry parameter);
    returns the flattened outputs."""
    from ..backends import compile as compile_module
    exe = compile_module(module, backend=backend, verify=verify, **options)
    return exe(*inputs)


def _check_device_count(module, n: int) -> None:
    if n < 1:
        raise InputError(f"-n must be at least 1, got {n}")
    from xladist.runtime.device import device_counts
    device_counts(module, n)  # the one rule: the header's counts, the rest from n


def _apply_config(args) -> None:
    """--config FILE fills what the command line did not set; MODULE is then required."""
    if getattr(args, "config", None):
        from xladist.runtime import config
        argv = list(args._argv)
        argv = argv[argv.index("run") + 1:] if "run" in argv else argv
        config.apply(args, add_arguments, argv)
    if args.module is None:
        raise InputError("no module to run: give MODULE or --config FILE with "
                         "module = \"path/to/module.hlo\"")


def load_run_module(args):
    """The module with the run's replica/partition counts applied."""
    from xladist.runtime.config import override_device_counts
    module = load_module(args.module)
    override_device_counts(module, getattr(args, "replica_count", None),
                           getattr(args, "num_partitions", None))
    return module


def run(args) -> int:
    from xladist.runtime import launcher
    _apply_config(args)
    if getattr(args, "threads", None) is not None:
        from ..compiler import parallel
        parallel.set_threads(args.threads)  # checked here, before any rank starts
    if launcher.under_mpi():
        return _run_as_rank(args)
    from ..io import read_inputs
    module = load_run_module(args)
    _check_device_count(module, args.num_devices)
    from xladist.runtime import run_args
    run_args.check(args, module)  # every option and file, before anything runs (exit 2)
    from xladist.runtime import feeds
    placements = feeds.check_args(args, module)  # e.g. --infeed-fn imports
    if args.num_devices > 1 or args.hostfile or args.trace or args.stats:
        # Validate everything a rank would refuse before starting any rank (exit 2).
        _read_per_device(module, args)
        _deadlock_check(module, args)
        code = _launch(args, module)
        if code != 0:  # ranks killed by another's abort left their outfeed logs
            feeds.recover_outfeeds(feeds.from_args(args), placements)
        return code
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
    """--outputs, atomically; rescued to the job directory when that fails (xladist/files.py)."""
    from ..files import deliver
    from ..io import npz_path, output_arrays
    arrays = output_arrays(per_device, device_axis=True)
    deliver(npz_path(path), lambda f: np.savez(f, **arrays), "--outputs")


def _read_per_device(module, args) -> list[list]:
    from ..io import read_inputs
    params = module.entry.parameters
    shapes = [p.shape for p in params]
    n = args.num_devices
    if args.inputs:
        return read_inputs(args.inputs, shapes, num_devices=n,
                           device_axis=None if n == 1 else True,
                           names=[p.name for p in params], what="--inputs")
    if any(not s.is_token for s in shapes):
        raise InputError(f"module {module.name} has {len(shapes)} parameters; pass --inputs "
                         f"IN.npz with arrays arg0..arg{len(shapes) - 1}")
    from ..semantics.values import TOKEN
    return [[TOKEN] * len(shapes) for _ in range(n)]


def _launch(args, module) -> int:
    """Start `mpiexec -n N` on this same command; ranks print their own errors. The module
    is compiled here once and the ranks load it (xladist/runtime/compile_once.py)."""
    from xladist.runtime import compile_once, launcher, progress
    argv = ["-m", "xladist", *args._argv]
    precompiled = args.module.endswith(".xlx")
    with compile_once.compiled_for_ranks(module, None if precompiled else args.backend) \
            as code_env:
        proc = launcher.launch(args.num_devices, argv, hostfile=args.hostfile,
                               env={**progress.launch_env(args.quiet), **code_env},
                               mpiexec=args.mpiexec)
    if proc.returncode != 0 and args.trace:
        from xladist.runtime.trace import merge_partials
        if merge_partials(args.trace):
            print(f"xladist run: wrote the failed run's partial trace to {args.trace}",
                  file=sys.stderr)
    if proc.returncode == 255 and args.hostfile:
        print(f"xladist run: mpiexec could not start ranks on the hosts of {args.hostfile}: "
              f"every host needs passwordless ssh from here and this same Python at "
              f"{sys.executable} (see launch/README.md)", file=sys.stderr)
    return proc.returncode


def _run_as_rank(args) -> int:
    """One rank of an MPI job: run this rank's device; rank 0 writes or prints outputs."""
    from xladist.runtime.feeds import from_args as feeds_from_args
    from xladist.runtime.rank import execute_on_this_rank, report_and_abort, world
    comm = world()
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        if args.num_devices not in (1, size):
            raise InputError(f"-n {args.num_devices} does not match the MPI job's {size} ranks")
        args.num_devices = size
        module = load_run_module(args)
        _check_device_count(module, size)
        per_device = _read_per_device(module, args)
        if rank == 0 and not os.environ.get("XLADIST_CHECKED"):
            _deadlock_check(module, args)  # started by hand under mpiexec: check here, once
        tracer, shown = _watchers(args, rank)
        with shown:
            result = execute_on_this_rank(module, per_device, backend=args.backend,
                                          timeout=args.timeout, verify=not args.no_verify,
                                          gather_to=0, trace=args.trace, tracer=tracer,
                                          device_assignment=args.device_assignment,
                                          feeds=feeds_from_args(args),
                                          host=_host_files(args),
                                          compile_options=precompiled_options(args))
        if args.stats:
            _print_stats(comm, result.tracer)
    except BaseException as e:  # noqa: BLE001 - a failing rank must take the job down
        report_and_abort(e, rank, prefix="xladist run")
        return 1
    if rank == 0:
        if args.outputs:
            _write_outputs(args.outputs, result.all_outputs)
        else:
            for d, outs in enumerate(result.all_outputs):
                print(f"device {d}:")
                _print_outputs(outs)
    return 0


def _deadlock_check(module, args) -> None:
    """xladist.runtime.precheck before any rank runs (raises DeadlockError, exit 1, with the report);
    tells the ranks about to start that it was done."""
    if getattr(args, "no_check", False):
        return
    from xladist.runtime.precheck import CHECKED_ENV, precheck
    precheck(module, args.num_devices, device_assignment=args.device_assignment,
             strict=args.strict, budget=getattr(args, "check_budget", 10.0))
    os.environ[CHECKED_ENV] = "1"  # inherited by the ranks mpiexec starts


def _host_files(args):
    """The host end of host-transfer channels: .npz files (xladist/runtime/channels_host.py)."""
    if not (args.host_recv or args.host_send):
        return None
    from xladist.runtime.channels_host import FileHost
    return FileHost(args.host_recv, args.host_send)


def _watchers(args, rank: int):
    """The rank's Tracer (None when nothing needs one) and rank 0's progress line."""
    from xladist.runtime import progress
    from xladist.runtime.trace import Tracer
    how = progress.mode(args.quiet) if rank == 0 else "off"
    tracer = None
    if args.trace or args.stats or how != "off":
        tracer = Tracer(rank, record=bool(args.trace))
    return tracer, progress.Progress(tracer, how)


def _print_stats(comm, tracer) -> None:
    from xladist.collectives import deadline
    from xladist.runtime.trace import format_summary
    with deadline.waiting("gathering per-rank timings on rank 0"):
        summaries = comm.gather(tracer.summary(), root=0)
    if comm.Get_rank() == 0:
        print(format_summary(summaries), file=sys.stderr)


def _print_outputs(outputs) -> None:
    with np.printoptions(threshold=200, edgeitems=4):
        for i, a in enumerate(outputs):
            print(f"out{i}: {a.dtype}{list(a.shape)}")
            print(np.array2string(np.asarray(a), prefix="  "), file=sys.stdout)
