"""The launching side of `xladist conformance`: jobs, results, verdicts.

For each device count, one MPI job runs every unit of the suite (rank_main.py), so the
suite pays one launch per device count, not one per case. Rank 0 streams each unit's
outputs back on stdout (protocol.py); they are judged here, against the reference run of
the same program (suite.py, reference.py) or XLA's stated values (xla.py), while the job
goes on. A job that dies (a rank crashed, a deadline aborted it, or nothing came back for
too long) ends the unit it was in: a unit of several cases is then re-run case by case in a
new job, so a crash is pinned on the case that causes it, and the job after it starts with
the next unit.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import protocol
from .checks import ERROR, Verdict
from .suite import Plan, units

JOB_START_S = 120.0   # imports and start-up of a job on a loaded machine, before its first unit
_STDERR_KEEP = 1 << 16


@dataclass
class Options:
    backend: str = "cpu"
    plan: Plan = field(default_factory=Plan)
    mpiexec: str | None = None
    hostfile: str | None = None
    timeout: float = 60.0  # xladist.run's deadline for any wait on another rank

    def unit_limit(self) -> float:
        """How long a unit may go without a word before its job is stopped (compiles
        included; the ranks' own deadline normally ends a hang much sooner)."""
        return 3 * self.timeout + 180.0


@dataclass
class Result:
    """Verdicts of one device count, with what the report needs to reproduce a case."""

    n: int
    verdicts: list[Verdict] = field(default_factory=list)
    cases: dict = field(default_factory=dict)  # name -> CaseInfo
    jobs: int = 0
    seconds: float = 0.0
    units: int = 0


def run(ns: list[int], options: Options, progress: Callable[[str], None] | None = None
        ) -> list[Result]:
    return [run_count(n, options, progress) for n in ns]


def run_count(n: int, options: Options, progress=None) -> Result:
    start = time.monotonic()
    table = units(n, options.plan)
    result = Result(n, units=len(table))
    for u in table:
        for c in u.cases:
            result.cases[c.name] = c
    work = [[u] for u in range(len(table))]
    while work:
        work = _one_job(n, table, work, options, result, progress)
        result.jobs += 1
    result.seconds = time.monotonic() - start
    return result


def _spec(n: int, options: Options, work) -> str:
    plan = options.plan
    return protocol.write_spec({"n": n, "backend": options.backend, "timeout": options.timeout,
                                "full": plan.full, "select": list(plan.select),
                                "xla": plan.xla, "work": protocol.encode_work(work)})


def _unit_of(table, item):
    return table[item[0]] if len(item) == 1 else table[item[0]].alone(item[1])


def _judge(unit, record) -> list[Verdict]:
    try:
        return unit.judge(record["outputs"], record["outfeeds"])
    except Exception as e:  # noqa: BLE001 - a defect of the kit: say so per case, go on
        import traceback
        where = traceback.extract_tb(e.__traceback__)[-1]
        return unit.error_verdict(ERROR, f"the kit failed to check this case (a defect of "
                                         f"the conformance kit): {type(e).__name__}: {e} "
                                         f"at {where.filename}:{where.lineno}")


def _reader(stream, out: queue.Queue) -> None:
    for line in iter(stream.readline, b""):
        out.put(line)
    out.put(None)


def _tail(buf: bytearray, lines: int = 30) -> str:
    from xladist.runtime.launcher import clean_stderr
    text = clean_stderr(bytes(buf).decode(errors="replace")).strip()
    return "\n".join(text.splitlines()[-lines:])


def _one_job(n, table, work, options: Options, result: Result, progress) -> list:
    """Run `work` in one job; returns the items still to run (after a dead job)."""
    from xladist.runtime.launcher import job_exit_code, never_started, started
    argv = ["-m", "xladist.conformance.rank_main", _spec(n, options, work)]
    lines: queue.Queue = queue.Queue()
    errbuf = bytearray()
    expected = [tuple(w) for w in work]  # in order; a unit split by the ranks gets its cases
    done: set = set()
    current = None
    how = code = None
    env = {"XLADIST_PROGRESS": "off"}
    held = threading.Lock()

    def keep(text: bytes) -> None:  # the job's log: its stderr and what else it printed
        with held:
            errbuf.extend(text)
            del errbuf[:-_STDERR_KEEP]
    with started(n, argv, hostfile=options.hostfile, mpiexec=options.mpiexec, env=env) as proc:
        threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()

        def keep_stderr():
            for chunk in iter(lambda: proc.stderr.read1(65536), b""):
                keep(chunk)
        threading.Thread(target=keep_stderr, daemon=True).start()
        limit = JOB_START_S + options.unit_limit()
        while True:
            try:
                line = lines.get(timeout=limit)
            except queue.Empty:
                how = f"nothing came back for {limit:.0f} s: the job was stopped"
                break
            if line is None:
                break
            text, record = protocol.split_line(line)
            if text:
                keep(text if record is None else text + b"\n")
            if record is None:
                continue
            limit = options.unit_limit()
            event = record["event"]
            item = tuple(record.get("item", ()))
            if event == "start":
                current = item
            elif event == "done":
                result.verdicts += _judge(_unit_of(table, item), record)
            elif event == "error" and record["split"]:
                at = expected.index(item) + 1
                expected[at:at] = [(item[0], c) for c in range(len(table[item[0]].cases))]
            elif event == "error":
                result.verdicts += _unit_of(table, item).error_verdict(record["kind"],
                                                                       record["text"])
            elif event == "fatal":
                how = record["text"]
            if event in ("done", "error"):
                done.add(item)
                current = None
                if progress is not None:
                    progress(f"n={n}: {len(result.verdicts)} cases checked")
            if event == "end":
                break
        if how is None:
            try:
                code = job_exit_code(proc.wait(timeout=60), proc.service)
            except Exception:  # noqa: BLE001 - a job that will not exit is stopped below
                how = "the job did not exit after its last case"
        notes = proc.abort_notes()
        if how is None and not done and current is None:
            how = never_started(proc, proc.service, n)  # not an MPI launcher (--mpiexec)
            if how is not None and not result.verdicts:  # nothing can run: say it once
                from xladist.errors import ExecutionError
                raise ExecutionError(how)
    if how is None and code == 0 and current is None and all(e in done for e in expected):
        return []
    why = how or f"the job exited with {code}"
    detail = _tail(errbuf)
    for note in notes:
        if note.strip() and note.strip() not in detail:
            detail = f"{detail}\n{note.strip()}" if detail else note.strip()
    pending = [list(e) for e in expected if e not in done and e != current]
    if current is None:  # it died outside any case: what is left cannot be trusted to run
        for item in pending:
            result.verdicts += _unit_of(table, item).error_verdict(
                ERROR, f"{why} before this case ran:\n{detail}")
        return []
    unit = _unit_of(table, list(current))
    if len(current) == 1 and len(unit.cases) > 1:
        return [[current[0], c] for c in range(len(unit.cases))] + pending
    result.verdicts += unit.error_verdict(ERROR, f"{why} while running it:\n{detail}")
    return pending


def default_counts() -> list[int]:
    """Device counts when -n is not given: 2 and 4 (4 ranks on two cores is still quick)."""
    return [2, 4]


def stderr_progress() -> Callable[[str], None] | None:
    if not sys.stderr.isatty() or os.environ.get("XLADIST_PROGRESS") == "off":
        return None

    def show(text: str) -> None:
        sys.stderr.write("\r" + text + "\x1b[K")
        sys.stderr.flush()
    return show
