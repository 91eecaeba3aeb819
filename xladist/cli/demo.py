"""`xladist demo`: data-parallel training of a small MLP on N ranks, watched as it runs.

Everything comes from the installed package: the training program is built with the
builder (xladist/examples/train_mlp.py), the data is generated in every rank from one
seed, batches reach each rank through its infeed, the gradients are all-reduced every
step, and each step's loss comes back through the outfeed. Rank 0 prints its loss per
step as it arrives; at the end it prints the steps, the time per step and, per rank, the
split of the run into compute, collective wait and infeed wait (xladist/runtime/trace.py), and
checks the losses of every rank against a float64 numpy replay of the same training.
"""

from __future__ import annotations

import os
import sys
import time

HELP = "train a small MLP data-parallel on N ranks and show where the time goes"

EPILOG = """\
examples:
  xladist demo                          4 ranks, 30 steps, cpu (LLVM) backend
  xladist demo -n 2 --steps 10          2 ranks, 10 steps
  xladist demo --backend interpreter    the numpy reference instead of compiled code
  xladist demo --trace demo.json        also write a Perfetto timeline (ui.perfetto.dev)
  xladist demo -q --timeout 60          no live status line; give up on a 60 s wait
  xladist demo -n 4 --hostfile launch/hostfile.example
                                        ranks on the hosts of an MPICH hostfile
  xladist demo -n 2 --mpiexec /opt/mpich/bin/mpiexec
                                        start the ranks with this mpiexec

Each step, every rank takes its own batch from its infeed, computes the MSE loss and
gradients of a tanh MLP, all-reduces the gradients (mean over ranks), updates the
parameters with SGD and outfeeds its loss. The losses of all ranks are checked against a
numpy replay of the same data-parallel training.
"""

# Losses computed in f32 by the program vs the float64 replay.
RTOL = 2e-3


def add_arguments(parser) -> None:
    parser.add_argument("-n", "--num-devices", type=int, default=4, metavar="N",
                        help="number of ranks (data-parallel replicas); default 4")
    parser.add_argument("--steps", type=int, default=None, metavar="S",
                        help="training steps (default 30)")
    parser.add_argument("--backend", default="cpu",
                        help="cpu (LLVM, default) or interpreter (numpy reference)")
    parser.add_argument("--trace", metavar="TRACE.json",
                        help="write a Chrome/Perfetto timeline with one track per rank")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help="deadline of every wait for another rank (default 120)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no live status line (loss lines and summary still print)")
    parser.add_argument("--hostfile", metavar="FILE",
                        help="MPICH hostfile passed to mpiexec (-f) for multi-host runs")
    parser.add_argument("--mpiexec", metavar="PATH",
                        help="the MPI launcher that starts the ranks (default: the mpich "
                             "wheel's mpiexec, else the one on PATH)")


def run(args) -> int:
    from xladist.runtime import launcher

    from ..environment import check_count, check_seconds
    check_count(args.num_devices, "-n")
    if args.steps is not None:
        check_count(args.steps, "--steps")
    check_seconds(args.timeout, "--timeout", " (0: no deadline)")
    if not launcher.under_mpi():  # the files, checked once before any rank starts
        from ..files import check_destination
        if args.trace:
            check_destination(args.trace, "--trace")
        if args.hostfile:
            launcher.hostfile_text(args.hostfile, "--hostfile")
        if args.mpiexec:
            from xladist.collectives.mpiexec import find_mpiexec
            find_mpiexec(args.mpiexec)
        from ..backends import check_backend
        check_backend(args.backend)  # UnsupportedError (exit 2) here, not in every rank
    if launcher.under_mpi():
        return _run_as_rank(args)
    from xladist.runtime import progress
    argv = ["-m", "xladist", *args._argv]
    proc = launcher.launch(args.num_devices, argv, hostfile=args.hostfile,
                           env=progress.launch_env(args.quiet), mpiexec=args.mpiexec)
    from . import ranks_never_started
    return ranks_never_started(proc, proc.service, args.num_devices, "demo") or proc.returncode


def _config(args, replicas: int):
    from dataclasses import replace

    from ..examples.train_mlp import Config
    cfg = Config(replicas=replicas)
    return cfg if args.steps is None else replace(cfg, steps=args.steps)


def _run_as_rank(args) -> int:
    import numpy as np

    from xladist.runtime import progress
    from xladist.runtime.feeds import make_feeds
    from xladist.runtime.rank import execute_on_this_rank, report_and_abort, world
    from xladist.runtime.trace import Tracer

    from ..examples import train_mlp
    comm = world()
    rank, size = comm.Get_rank(), comm.Get_size()
    if args.trace:  # the launching folder's (a rank on another host starts elsewhere)
        from xladist.runtime.launcher import LAUNCH_DIR_ENV
        args.trace = os.path.join(os.environ.get(LAUNCH_DIR_ENV, ""), args.trace)
    try:
        cfg = _config(args, size)
        module = train_mlp.build_module(cfg)
        params, batches = train_mlp.make_data(cfg)
        # Every rank checks the module it built (the same on all): a proven run's
        # collectives take their native paths (xladist/runtime/signatures.py).
        from xladist.runtime.precheck import precheck, proven
        sure = proven(precheck(module, size, prefix="xladist demo",
                               warn=None if rank == 0 else (lambda text: None)))
        tracer = Tracer(rank, record=bool(args.trace))
        how = progress.mode(args.quiet) if rank == 0 else "off"
        # The loss lines are themselves the log; only a terminal gets the live line too.
        shown = progress.Progress(tracer, how if how == "tty" else "off",
                                  label="xladist demo")
        losses: list[float] = []
        t0 = time.monotonic()

        def on_loss(r, replica, partition, item):
            losses.append(float(np.asarray(item)))
            if r == 0:
                shown.println(f"step {len(losses):>4}  loss {losses[-1]:.5f}  "
                              f"({time.monotonic() - t0:.1f} s)")

        feeds = make_feeds(infeed=lambda r, replica, partition: batches[r], outfeed=on_loss)
        if rank == 0:
            _print_header(cfg, args, size)
        with shown:
            result = execute_on_this_rank(module, list(params), backend=args.backend,
                                          timeout=args.timeout, feeds=feeds, tracer=tracer,
                                          trace=args.trace, gather_to=0, proven=sure)
        report = _gather_report(comm, tracer, losses)
        if rank == 0:
            _print_summary(cfg, params, batches, report, result, args)
    except BaseException as e:  # noqa: BLE001 - a failing rank must take the job down
        report_and_abort(e, rank, prefix="xladist demo")
        return 1
    return 0


def _gather_report(comm, tracer, losses):
    from xladist.collectives import deadline
    with deadline.waiting("gathering per-rank timings and losses on rank 0"):
        return comm.gather((tracer.summary(), losses), root=0)


def _print_header(cfg, args, size: int) -> None:
    print(f"xladist demo: data-parallel MLP training on {size} rank(s), {args.backend} "
          f"backend\n  model {cfg.d_in} -> {cfg.hidden} (tanh) -> {cfg.d_out}, batch "
          f"{cfg.batch} per rank, {cfg.steps} steps, SGD lr {cfg.lr}; gradients all-reduced "
          f"every step\n  loss of rank 0's batch per step:", flush=True)


def _print_summary(cfg, params, batches, report, result, args) -> None:
    import numpy as np

    from xladist.runtime.trace import format_summary

    from ..examples.train_mlp import reference
    summaries = [s for s, _ in report]
    all_losses = [lo for _, lo in report]
    print()
    print(format_summary(summaries, steps=cfg.steps))
    # Rank 0's host: its ranks and its cores. All ranks against this host's cores said
    # "4 ranks share 2 cores" of 2 hosts with 2 ranks on 2 cores each.
    from xladist.compiler.parallel import available_cores, local_ranks
    here, cores = local_ranks(), available_cores()
    if here > cores:
        where = " on rank 0's host" if here < len(summaries) else ""
        print(f"({here} ranks share {cores} cores{where}: a rank's waits include the time "
              f"its peers spend computing)")
    ref_losses, ref_params = reference(params, batches, cfg.lr)
    got = np.array(all_losses, dtype=np.float64)
    want = np.array(ref_losses, dtype=np.float64)
    worst = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-6)))
    final = result.all_outputs[0]
    same = all(all(np.array_equal(a, b) for a, b in zip(outs, final))
               for outs in result.all_outputs)
    params_ok = all(np.allclose(a, b, rtol=RTOL, atol=1e-5) for a, b in zip(final, ref_params))
    ok = got.shape == want.shape and worst <= RTOL and same and params_ok
    print(f"loss (mean over ranks): step 1 {got[:, 0].mean():.5f} -> step {cfg.steps} "
          f"{got[:, -1].mean():.5f}")
    print(f"check vs a numpy replay of the same training: losses of all {len(all_losses)} "
          f"ranks within {worst:.1e} (tolerance {RTOL:g}), final parameters "
          f"{'match' if params_ok else 'DIFFER'}, identical on every rank: "
          f"{'yes' if same else 'NO'} -> {'OK' if ok else 'MISMATCH'}")
    if args.trace and os.path.exists(args.trace):  # (else rescued, and said so: files.py)
        print(f"timeline: {args.trace} (open it at https://ui.perfetto.dev)")
    sys.stdout.flush()
    if not ok:
        raise AssertionError("the demo's training diverged from the numpy replay")
