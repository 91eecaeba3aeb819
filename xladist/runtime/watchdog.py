"""Run-time hang report: when one rank's wait passes the deadline, print where EVERY rank is.

The deadline itself is xladist/collectives/deadline.py: before each blocking MPI wait a rank stores
*what* it waits in (two attribute stores), and a daemon thread aborts the job when a wait
outlives `--timeout`.  This module adds the job-wide view, without touching the hot path:

* the executor keeps `deadline.watchdog.loops` (`loop_tracking_rules`), so a position reads
  `all-reduce.7 (line 9) over devices [0,1,2,3] (iteration 5 of while.2)`;
* every rank's daemon publishes its position to `$XLADIST_JOB_DIR/positions/rank<R>.json`
  only when a wait has lasted more than ~1 s (and again when that wait ends); a rank also
  writes its state once when its program starts and once when it finishes;
* ranks blocked inside MPI cannot answer an MPI gather, so the rank whose deadline fires first
  (an O_EXCL lock file decides) reads the files, prints one report naming each rank's position
  and the ranks that never arrived where others wait, and aborts the job (MPI_Abort).  The
  others stay quiet and are taken down by the abort.

The job directory is created by the launcher (xladist/runtime/launcher.py) or, for a job started by
hand under mpiexec, by rank 0 (`job_dir`).  It is local disk: on several hosts each host sees
only its own ranks' files, and the report says that it heard nothing from the others.

Report (stderr, one block):

    xladist: rank 1 (replica 0, partition 1) waited 5.0 s (the deadline, --timeout 5) in
    psum (line 16) over devices [0, 1] (iteration 3 of data_loop). Where every rank is:
      rank 0 (replica 0, partition 0): gathering outputs on rank 0 (its program finished),
        waiting 5.0 s
      rank 1 (replica 0, partition 1): psum (line 16) over devices [0, 1] (iteration 3 of
        data_loop), waiting 5.0 s
    never arrived:
      psum (line 16) over devices [0, 1] (iteration 3 of data_loop): rank 1 waits there;
        rank 0 never arrived
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from xladist.collectives import deadline

__all__ = ["JobMonitor", "Members", "job_dir", "loop_tracking_rules"]

# A rank whose record is older than this (while it claims to wait or compute) may be dead.
STALE_S = 3.0
# A rank whose deadline fires while another one prints the report gives it this long.
LOSER_GRACE_S = 5.0


class Members:
    """A `where` for waits that are not collectives (e.g. the final gather): the ranks that must
    arrive, and the text for messages."""

    __slots__ = ("devices", "text")

    def __init__(self, devices, text: str):
        self.devices = list(devices)
        self.text = text

    def __str__(self) -> str:
        return self.text


def job_dir(comm) -> tuple[Path, bool]:
    """The job directory every rank of `comm` shares: $XLADIST_JOB_DIR, else one that rank 0
    creates and broadcasts (collective).  Returns (path, created_here)."""
    env = os.environ.get(deadline.JOB_DIR_ENV)
    if env:
        return Path(env), False
    path = tempfile.mkdtemp(prefix="xladist-job-") if comm.Get_rank() == 0 else None
    with deadline.waiting("sharing the job directory"):
        path = comm.bcast(path, root=0)
    return Path(path), comm.Get_rank() == 0


def remove_job_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


class JobMonitor:
    """The deadline's monitor on one rank: publishes positions, writes the report when it fires."""

    def __init__(self, directory: Path, placement, world_size: int):
        self.dir = Path(directory) / "positions"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.placement = placement
        self.world_size = world_size
        self.finished = False
        self._path = self.dir / f"rank{placement.rank}.json"

    # ---- publishing (daemon thread, or the main thread at start and finish) --------------------
    def _record(self, pos: dict) -> dict:
        p = self.placement
        now = time.time()
        rec = {"rank": p.rank, "device": p.device, "replica": p.replica,
               "partition": p.partition, "state": pos["state"], "finished": self.finished,
               "loops": pos.get("loops", []), "updated": now, "pid": os.getpid(),
               "world_size": self.world_size}
        if pos["state"] == "waiting":
            where = pos.get("where")
            rec.update(what=pos["what"], where=None if where is None else str(where),
                       members=getattr(where, "devices", None),
                       p2p=bool(getattr(where, "p2p", False)),
                       since=now - pos["elapsed"])
        return rec

    def publish(self, pos: dict) -> None:
        if pos["state"] != "waiting" and self.finished:
            pos = dict(pos, state="finished")
        rec = self._record(pos)
        tmp = self._path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(rec))
            os.replace(tmp, self._path)
        except OSError:
            pass  # the job directory is gone (the job is over): nothing to tell

    def mark(self, state: str) -> None:
        """The main thread's own news: 'computing' when the program starts, 'finished'."""
        if state == "finished":
            self.finished = True
        self.publish({"state": state, "loops": []})

    # ---- the report (daemon thread of the first rank whose deadline passes) -------------------
    def fire(self, pos: dict, timeout: float) -> str | None:
        self.publish(pos)
        try:
            fd = os.open(self.dir / "report.lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.close(fd)
        except FileExistsError:
            # Another rank is printing the report; its abort takes this rank down too.
            time.sleep(LOSER_GRACE_S)
            return None
        except OSError:
            pass  # no job directory any more: report what this rank knows
        return format_report(self.read_positions(), self.placement.rank, timeout)

    def read_positions(self) -> dict[int, dict]:
        out = {}
        for r in range(self.world_size):
            try:
                out[r] = json.loads((self.dir / f"rank{r}.json").read_text())
            except (OSError, ValueError):
                continue
        return out


def _who(rec: dict) -> str:
    return f"rank {rec['rank']} (replica {rec['replica']}, partition {rec['partition']})"


def _ctx(rec: dict) -> str:
    return ", ".join(f"iteration {k} of {name}" for name, k in rec.get("loops", []))


def _op(rec: dict) -> str:
    what, where = rec.get("what", "?"), rec.get("where")
    text = what if where is None or " over " in what else f"{what} over {where}"
    if rec.get("p2p"):
        text = f"{what} on {where}"
    ctx = _ctx(rec)
    return f"{text} ({ctx})" if ctx else text


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def describe_position(rec: dict | None, rank: int, now: float) -> str:
    if rec is None:
        return f"rank {rank}: no news (it has not started its program, or runs on another host)"
    state = rec.get("state")
    age = now - rec.get("updated", now)
    stale = f" (last heard {age:.1f} s ago)" if age > STALE_S and state != "finished" else ""
    if state == "waiting":
        done = " (its program finished)" if rec.get("finished") else ""
        return (f"{_who(rec)}: {_op(rec)}{done}, waiting {now - rec['since']:.1f} s{stale}")
    if state == "finished":
        return f"{_who(rec)}: finished its program"
    ctx = _ctx(rec)
    return f"{_who(rec)}: computing, not waiting for another rank{f' ({ctx})' if ctx else ''}{stale}"


def format_report(positions: dict[int, dict], me: int, timeout: float) -> str:
    """The text printed when rank `me`'s deadline passes, from every rank's published record."""
    now = time.time()
    n = max([me, *positions]) + 1
    mine = positions.get(me, {})
    head = (f"xladist: {_who(mine) if mine else f'rank {me}'} waited "
            f"{now - mine.get('since', now):.1f} s (the deadline, --timeout {timeout:g}) in "
            f"{_op(mine) if mine.get('state') == 'waiting' else 'a wait'}. "
            "Where every rank is:")
    lines = [head]
    n = max(n, _world(positions))
    for r in range(n):
        lines.append("  " + describe_position(positions.get(r), r, now))
    rank_of = {rec["device"]: r for r, rec in positions.items()}
    missing_lines = []
    groups: dict[tuple, list[int]] = {}
    for r, rec in sorted(positions.items()):
        if rec.get("state") != "waiting":
            continue
        members = rec.get("members")
        if not members:
            continue
        if rec.get("p2p"):
            peer = members[1]
            pr = rank_of.get(peer, peer)
            missing_lines.append(f"  {_op(rec)}: rank {r} waits for rank {pr}, which never "
                                 "arrived at the other end of the channel")
            continue
        key = (rec.get("what"), rec.get("where"), json.dumps(rec.get("loops", [])))
        groups.setdefault(key, []).append(r)
    for key, waiting in groups.items():
        rec = positions[waiting[0]]
        member_ranks = {rank_of.get(d, d) for d in rec["members"]}
        arrived = set(waiting)
        if rec.get("finished"):
            # A wait after the program (the final gather): a rank whose program finished and
            # that waits no more has been through it (a gather's leaves return at once).
            arrived |= {r for r in member_ranks
                        if positions.get(r, {}).get("state") == "finished"}
        absent = sorted(member_ranks - arrived)
        if absent:
            missing_lines.append(f"  {_op(rec)}: {_ranks(waiting)} "
                                 f"wait{'s' if len(waiting) == 1 else ''} there; "
                                 f"{_ranks(absent)} never arrived")
    if missing_lines:
        lines.append("never arrived:")
        lines.extend(missing_lines)
    return "\n".join(lines)


def _world(positions: dict[int, dict]) -> int:
    sizes = [rec.get("world_size", 0) for rec in positions.values()]
    return max(sizes, default=0)


def install(directory: Path, placement, world_size: int) -> JobMonitor:
    """Make this rank's deadline report job-wide; returns the monitor (call `mark`)."""
    mon = JobMonitor(directory, placement, world_size)
    deadline.watchdog.loops.clear()
    deadline.watchdog.set_monitor(mon)
    return mon


def uninstall() -> None:
    deadline.watchdog.set_monitor(None)
    deadline.watchdog.loops.clear()


# ---- loop context for the interpreter -----------------------------------------------------------

def _truth(value) -> bool:
    return bool(np.asarray(value).reshape(()))


def loop_tracking_rules() -> dict:
    """Evaluator rule overrides that keep `deadline.watchdog.loops` for loops that communicate.

    Loops without collectives, channels or feeds run the interpreter's own rule: no cost.  The
    condition evaluated before body k belongs to iteration k, as in the static check's reports.
    """
    from xladist.interpreter.registry import EVAL_RULES

    from xladist.analysis.schedule import computation_communicates
    base = EVAL_RULES["while"]
    wd = deadline.watchdog

    def while_rule(instr, args, ev):
        cond, body = instr.attrs["condition"], instr.attrs["body"]
        if not (computation_communicates(body) or computation_communicates(cond)):
            return base(instr, args, ev)
        entry = wd.enter_loop(instr.name)
        try:
            state = args[0]
            while True:
                entry[1] += 1
                if not _truth(ev.call(cond, [state])):
                    return state
                state = ev.call(body, [state])
        finally:
            wd.exit_loop()

    return {"while": while_rule}
