"""Run-time hang report: when one rank's wait passes the deadline, say where EVERY rank is.

The deadline itself is xladist/collectives/deadline.py: before each blocking MPI wait a rank stores
*what* it waits in (two attribute stores), and a daemon thread fires when a wait outlives
`--timeout`.  The job-wide view comes from the coordination service
(xladist/runtime/service/): every rank is connected to it, publishes its position when a wait
has lasted more than ~1 s, and the rank whose deadline passes first tells the service, which
asks every rank where it is now (a thread of each rank answers while its main thread is
blocked in MPI), writes the one report of the job and ends it.  No file is involved, so the
ranks may be on any number of hosts.  This module holds what both ends share:

* `record(placement, position)`: a rank's position as the JSON the service keeps;
* `format_report(records, first, timeout)`: the report text;
* `loop_tracking_rules()`: the executor keeps `deadline.watchdog.loops`, so a position reads
  `all-reduce.7 (line 9) over devices [0,1,2,3] (iteration 5 of while.2)`.

Report (one block, printed by the service's host):

    xladist: rank 1 (replica 0, partition 1) waited 5.0 s (the deadline, --timeout 5) in
    psum (line 16) over devices [0, 1] (iteration 3 of data_loop). Where every rank is:
      rank 0 (replica 0, partition 0) on nodeA: finished its program
      rank 1 (replica 0, partition 1) on nodeB: psum (line 16) over devices [0, 1]
        (iteration 3 of data_loop), waiting 5.0 s
    never arrived:
      psum (line 16) over devices [0, 1] (iteration 3 of data_loop): rank 1 waits there;
        rank 0 never arrived

(host names appear when the job spans more than one host.)
"""

from __future__ import annotations

import json
import time

import numpy as np

from xladist.collectives import deadline
from xladist.errors import as_given

__all__ = ["Members", "describe_position", "failure", "format_report", "loop_tracking_rules",
           "record", "waits_for_finished"]

# A rank whose record is older than this (while it claims to wait or compute) may be stuck.
STALE_S = 3.0


class Members:
    """A `where` for waits that are not collectives (e.g. a final gather): the ranks that must
    arrive, and the text for messages."""

    __slots__ = ("devices", "text")

    def __init__(self, devices, text: str):
        self.devices = list(devices)
        self.text = text

    def __str__(self) -> str:
        return self.text


def record(placement, pos: dict, *, finished: bool = False, host: str | None = None,
           run: int | None = None) -> dict:
    """A rank's position (deadline.Watchdog.position) as the JSON record the service keeps;
    `run`: which of the process's runs it is in (service/client.py counts them)."""
    p = placement
    now = time.time()
    rec = {"state": pos["state"], "finished": finished, "loops": pos.get("loops", []),
           "updated": now}
    if run is not None:
        rec["run"] = run
    if p is not None:
        rec.update(rank=p.rank, device=p.device, replica=p.replica, partition=p.partition)
    if host is not None:
        rec["host"] = host
    if pos["state"] not in ("waiting", "failed") and finished:
        rec["state"] = "finished"
    if pos["state"] == "failed":
        rec["error"] = pos.get("error")
    if pos["state"] == "starting" and pos.get("doing"):
        rec["doing"] = pos["doing"]
    if pos["state"] == "waiting":
        where = pos.get("where")
        rec.update(what=pos["what"], where=None if where is None else str(where),
                   members=getattr(where, "devices", None),
                   p2p=bool(getattr(where, "p2p", False)),
                   since=now - pos["elapsed"])
    return rec


def failure(error: BaseException) -> str:
    """A run's error as a failed rank's record says it: the instruction and the message (the
    report names the rank itself), else the error's type and text."""
    from xladist.errors import ExecutionError
    if isinstance(error, ExecutionError) and error.instruction:
        return f"{error.instruction}: {error.message}"
    return f"{type(error).__name__}: {error}"


def _who(rec: dict, hosts: bool = False) -> str:
    text = f"rank {rec['rank']}"
    if "replica" in rec:
        text += f" (replica {rec['replica']}, partition {rec['partition']})"
    if hosts and rec.get("host"):
        text += f" on {rec['host']}"
    return text


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


def describe_position(rec: dict | None, rank: int, now: float, hosts: bool = False) -> str:
    if rec is None:
        return f"rank {rank}: no news (it never reached the coordination service)"
    state = rec.get("state")
    age = now - rec.get("updated", now)
    stale = f" (last heard {age:.1f} s ago)" if age > STALE_S and state != "finished" else ""
    who = _who(rec, hosts)
    if state == "waiting":
        done = " (its program finished)" if rec.get("finished") else ""
        return f"{who}: {_op(rec)}{done}, waiting {now - rec['since']:.1f} s{stale}"
    if state == "finished":
        return f"{who}: finished its program"
    if state == "starting":
        doing = f": {rec['doing']}" if rec.get("doing") else ""
        return f"{who}: starting{doing} (its program has not begun){stale}"
    if state == "failed":  # its run raised to a caller that went on (a script under mpiexec)
        return (f"{who}: failed: {rec.get('error')}; its caller went on, so it joins no "
                "later wait")
    ctx = _ctx(rec)
    return f"{who}: computing, not waiting for another rank{f' ({ctx})' if ctx else ''}{stale}"


def waits_for_finished(positions: dict[int, dict]) -> tuple[int, list[int]] | None:
    """(rank b, ranks a) when rank b waits inside its program (a collective, a channel) for
    ranks a whose programs -- of the same run -- have finished: they will not come to that
    wait any more, so it cannot end. None otherwise. A record without a run (a cluster's
    marks, kept by the service) never counts: its run is unknown. Only a pointer: the
    records are the ranks' last news, and a wait a finished rank did serve ends a moment
    after its end was published (the service confirms with fresh positions)."""
    rank_of = {rec["device"]: r for r, rec in positions.items() if "device" in rec}
    for b, rec in sorted(positions.items()):
        if (rec.get("state") != "waiting" or rec.get("finished") or not rec.get("members")
                or rec.get("run") is None):
            continue
        peers = rec["members"][1:2] if rec.get("p2p") else rec["members"]
        done = []
        for device in peers:
            a = rank_of.get(device)
            other = positions.get(a) if a is not None else None
            if (a != b and other is not None and other.get("run") == rec["run"]
                    and other.get("finished")):
                done.append(a)
        if done:
            return b, sorted(done)
    return None


def spans_hosts(positions: dict[int, dict]) -> bool:
    return len({rec.get("host") for rec in positions.values() if rec.get("host")}) > 1


def format_report(positions: dict[int, dict], me: int, timeout: float,
                  world_size: int | None = None, finished: list[int] | None = None,
                  fired: dict | None = None, setting: str = "--timeout") -> str:
    """The text printed when rank `me`'s deadline passes, from every rank's record (`fired`:
    `me`'s record as the deadline passed, for the headline when its wait has ended since);
    or, with `finished` (waits_for_finished), when `me` waits for those ranks, which have
    finished their programs, before its deadline. `setting`: how the reader set the
    deadline (`--timeout`, or `timeout=` of xladist.run and xladist.Cluster)."""
    now = time.time()
    hosts = spans_hosts(positions)
    mine = positions.get(me, {})
    if mine.get("state") != "waiting" and fired and fired.get("state") == "waiting":
        mine = dict(mine, **{k: v for k, v in fired.items() if k not in mine or k in (
            "state", "what", "where", "members", "p2p", "since", "loops")})
    who = _who(mine, hosts) if mine else f"rank {me}"
    where = _op(mine) if mine.get("state") == "waiting" else "a wait"
    waited = now - mine.get("since", now)
    given = as_given(setting, f"{timeout:g}")
    if finished:
        whose = "whose program has" if len(finished) == 1 else "whose programs have"
        head = (f"xladist: {who} has waited {waited:.1f} s in {where} for {_ranks(finished)}, "
                f"{whose} finished: the wait cannot end (said before the deadline, "
                f"{given}). Where every rank is:")
    else:
        head = (f"xladist: {who} waited {waited:.1f} s (the deadline, {given}) in {where}. "
                "Where every rank is:")
    lines = [head]
    n = max([me, *positions]) + 1
    n = max(n, world_size or 0, _world(positions))
    for r in range(n):
        lines.append("  " + describe_position(positions.get(r), r, now, hosts))
    rank_of = {rec["device"]: r for r, rec in positions.items() if "device" in rec}
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
            # A wait after the program (a final gather): a rank whose program finished and
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
