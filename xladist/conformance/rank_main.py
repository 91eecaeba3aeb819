"""The ranks' side of `xladist conformance`: run units of the suite inside one MPI job.

    mpiexec -n N python -m xladist.conformance.rank_main SPEC

SPEC (JSON): {"n", "backend", "timeout", "full", "select": [...], "xla", "work"}. Every rank
lists the same units (suite.units, deterministic) and runs the `work` items in order, each
through `xladist.run` as a user's script under mpiexec would (verify, the deadlock check,
compile, run this rank's device, outputs exchanged). Nothing is compared here: rank 0
writes one line per event on stdout (`protocol.py`), and the launching process checks the
results against the reference. Stdout, not a file: the ranks may run on other hosts.

An error every rank raises alike (an unsupported op or type, a refusal) is recorded and
the job goes on; for a unit of several cases each case is then run alone, so the error is
pinned on the case(s) that cause it. A rank that fails alone leaves its peers waiting until
their deadline ends the job; the launching process then starts a new job after that unit.
"""

from __future__ import annotations

import sys
import traceback

from . import protocol


def run_job(unit, backend: str, timeout: float):
    """(outputs of every device, outfeed items of every device or None) on every rank."""
    from mpi4py import MPI

    from xladist.hlo.parser import parse_module
    from xladist.runtime.api import run
    job = unit.job()
    module = parse_module(job.text)
    if job.counts is not None:
        module.replica_count, module.num_partitions = job.counts
    comm = MPI.COMM_WORLD
    mine: list = []
    options = {}
    if job.infeed is not None:
        options["infeed"] = [iter(items) for items in job.infeed]
    if job.outfeed:
        options["outfeed"] = lambda rank, replica, partition, item: mine.append(item)
    outputs = run(module, job.inputs, n=unit.n, backend=backend, timeout=timeout,
                  device_assignment=job.device_assignment, **options)
    fed = None
    if job.outfeed:
        from xladist.collectives import deadline
        with deadline.waiting("gathering the outfeed items on rank 0"):
            fed = comm.gather(mine, root=0)
    return outputs, fed


def _agree(comm, error):
    """Every rank's (error kind, text) or None, on every rank (under the deadline)."""
    from xladist.collectives import deadline
    with deadline.waiting("sharing how the case ended on every rank"):
        return comm.allgather(error)


def _describe(e: BaseException) -> tuple[str, str]:
    from xladist.errors import UnsupportedError, XlaDistError
    kind = "unsupported" if isinstance(e, UnsupportedError) else "error"
    if isinstance(e, XlaDistError):
        return kind, f"{type(e).__name__}: {e}"
    return kind, "".join(traceback.format_exception_only(e)).strip()


def run_item(table, item, spec, comm, say) -> None:
    unit = table[item[0]] if len(item) == 1 else table[item[0]].alone(item[1])
    say({"event": "start", "item": item})
    error = None
    try:
        outputs, fed = run_job(unit, spec["backend"], spec["timeout"])
    except Exception as e:  # noqa: BLE001 - shared with the other ranks below
        error = _describe(e)
    errors = _agree(comm, error)
    if not any(errors):
        say({"event": "done", "item": item, "outputs": outputs, "outfeeds": fed})
        return
    raised = [r for r, e in enumerate(errors) if e]
    kinds = {errors[r][0] for r in raised}
    first = errors[raised[0]]
    alike = len(raised) == len(errors)
    text = first[1] if alike else f"rank {raised[0]} (of ranks {raised}): {first[1]}"
    say({"event": "error", "item": item, "kind": first[0] if len(kinds) == 1 else "error",
         "text": text, "split": alike and len(item) == 1 and len(unit.cases) > 1})
    if alike and len(item) == 1 and len(unit.cases) > 1:
        for c in range(len(unit.cases)):
            run_item(table, [item[0], c], spec, comm, say)


def main(argv: list[str]) -> int:
    from xladist.runtime.rank import world

    from .suite import Plan, units
    spec = protocol.read_spec(argv[0])
    comm = world()
    say = protocol.writer(sys.stdout.buffer) if comm.Get_rank() == 0 else (lambda record: None)
    if comm.Get_size() != spec["n"]:
        say({"event": "fatal", "text": f"the job has {comm.Get_size()} ranks, the suite "
                                       f"wanted {spec['n']}"})
        return 2
    plan = Plan(full=spec["full"], select=tuple(spec["select"]), xla=spec["xla"])
    table = units(spec["n"], plan)
    for item in protocol.decode_work(spec["work"]):
        run_item(table, item, spec, comm, say)
    say({"event": "end"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
