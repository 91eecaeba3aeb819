"""Per-rank timeline: what each rank ran and waited for, as one Chrome/Perfetto trace.

A `Tracer` lives on each rank for one run. Two cheap hooks feed it:
- the interpreter's Evaluator calls `tracer.instruction(instr, t0, t1)` after every
  instruction it evaluates (only when the device it runs on carries a tracer; nested
  computations give nested slices, so a while loop contains its iterations' instructions);
- `TracedDevice` wraps the rank's DeviceContext and times every call that waits on another
  device or the host: collectives (with bytes and device group), send/recv, infeed, outfeed.
Both backends reach other devices only through the DeviceContext, so the waits are traced
for both; the cpu backend reports one slice per thunk instead of per instruction (named
after its kind and fused instructions) and one per while-loop iteration.

Clocks: `align(comm)` puts a barrier at the start and takes every rank's origin right after
it, so timestamps (microseconds since the origin) of different ranks line up to within the
barrier's exit skew (tens of microseconds on one host). At the end `write_merged` gathers
every rank's events on rank 0, which writes the Trace Event Format file
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
one process (pid) per rank named "rank r (replica i, partition j)", one thread (tid 0)
named after its device, and `ph: "X"` complete events.

Under `xladist run` and `xladist.run` the ranks send their events to the job's coordination
service, which writes PATH on the launching host, also after a failure (what arrived, naming
the ranks whose events are missing). A rank given a path itself (`xladist demo`, a bare
`mpiexec`) gathers on rank 0; when it fails, `write_partial` saves what it has to
`PATH.rank<r>.part` on its own host -- on an exception, and from `deadline.on_abort` when its
deadline passes or another thread aborts the job; `merge_partials` merges such parts.

The same timings give the per-rank split that `xladist demo` prints (`summary()`):
wall time of the run, time waiting in collectives, in infeed, in outfeed and in send/recv,
and compute = the rest.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections import defaultdict

import numpy as np

from xladist.collectives import deadline
from xladist.files import deliver

# A rank keeps at most this many instruction slices, and as many wait slices again;
# beyond them slices are counted in `dropped` / `dropped_waits` instead (the waits' totals
# in summary() count every wait), so a long loop cannot exhaust memory or make a trace
# that Perfetto refuses to open. Waits were once kept without a bound: a loop with one
# all-reduce per step kept ~300 bytes per step on each rank and in the launching process
# (and ~140 bytes per step in the file), 10^6 steps ~ 300 MB each.
MAX_EVENTS = 200_000

# Wait kinds: the category of their slices and a key of summary()["wait_s"].
WAIT_KINDS = ("collective", "infeed", "outfeed", "send/recv")

_now = time.perf_counter_ns


class Tracer:
    """One rank's timeline and counters (see the module docstring).

    `record=False` keeps only the wait totals and counters (for progress and the demo
    summary): no slices, and no per-instruction hook (TracedDevice does not offer the
    tracer to the Evaluator), so it costs one clock read per wait and nothing per
    instruction.
    """

    def __init__(self, rank: int = 0, *, record: bool = True, max_events: int = MAX_EVENTS):
        self.rank = rank
        self.record = record
        self.max_events = max_events
        self.origin_ns = _now()
        self.events: list[tuple] = []     # (name, cat, t0_ns, t1_ns, args or None)
        self.dropped = 0
        self.waits_kept = 0
        self.dropped_waits = 0
        self.wait_ns: dict[str, int] = defaultdict(int)
        self.wait_calls: dict[str, int] = defaultdict(int)
        self.run_ns = 0
        self.iterations = 0               # iterations of the entry computation's while loops
        self.outfeed_items = 0
        self._loops: list = []            # the entry's top-level while loops (watch)
        self._trip_count: int | None = None
        self._trips_known = False
        self.placement = None
        self._loop_roots: set[int] = set()

    # ---- setup -------------------------------------------------------------------------
    def align(self, comm) -> None:
        """Barrier, then take the clock origin: ranks' timestamps share a zero."""
        with deadline.waiting("the barrier that aligns trace clocks"):
            comm.Barrier()
        self.origin_ns = _now()

    def watch(self, module, placement=None) -> None:
        """Count iterations of the while loops at the top of the entry computation."""
        self.placement = placement
        loops = [i for i in module.entry.instructions if i.opcode == "while"]
        self._loop_roots = {id(i.attrs["body"].root) for i in loops if "body" in i.attrs}
        self._loops, self._trips_known = loops, False

    @property
    def trip_count(self) -> int | None:
        """The known_trip_count of the entry's one top-level loop (None: none, several, or
        not recorded). Worked out when first asked -- by the progress line, drawn from the
        first second on in its own thread -- not in watch(): importing the deadlock
        analysis costs 35-75 ms, which rank 0 alone (the one with a progress line) spent
        between setting up its device and its first step, so every rank waited that long
        for it at its first collective."""
        if not self._trips_known:
            from xladist.analysis.deadlock.facts import known_trip_count
            trips = [known_trip_count(i) for i in self._loops]
            self._trip_count = trips[0] if len(trips) == 1 else None
            self._trips_known = True
        return self._trip_count

    # ---- hooks -------------------------------------------------------------------------
    def instruction(self, instr, t0: int, t1: int) -> None:
        """Called by the Evaluator after each instruction (times from perf_counter_ns)."""
        if id(instr) in self._loop_roots:
            self.iterations += 1
        if not self.record:
            return
        if len(self.events) - self.waits_kept >= self.max_events:
            self.dropped += 1
            return
        self.events.append((instr.name, "instruction", t0, t1, instr))

    def wait(self, kind: str, name: str, t0: int, t1: int, args: dict | None = None) -> None:
        """A call that waited on another device or the host (always counted; its slice
        kept while fewer than max_events waits were)."""
        self.wait_ns[kind] += t1 - t0
        self.wait_calls[kind] += 1
        if self.record:
            if self.waits_kept >= self.max_events:
                self.dropped_waits += 1
                return
            self.waits_kept += 1
            self.events.append((name, kind, t0, t1, args))

    def add_waits(self, kind: str, ns: int, calls: int) -> None:
        """Waits counted elsewhere (a native while loop times its MPI calls itself): they
        count in summary(), and make no slices."""
        self.wait_ns[kind] += int(ns)
        self.wait_calls[kind] += int(calls)

    def span(self, name: str, cat: str = "run", **args):
        """`with tracer.span("compile"): ...` records one slice."""
        return _Span(self, name, cat, args, False)

    def execute(self, **args):
        """The span of running the program: its length is summary()["wall_s"]."""
        return _Span(self, "execute", "run", args, True)

    # ---- results -----------------------------------------------------------------------
    def summary(self) -> dict:
        """Per-rank totals in seconds: wall, compute (the rest) and each wait kind."""
        waits = {k: self.wait_ns.get(k, 0) / 1e9 for k in WAIT_KINDS}
        wall = self.run_ns / 1e9
        return {"rank": self.rank, "wall_s": wall,
                "compute_s": max(0.0, wall - sum(waits.values())), "wait_s": waits,
                "calls": {k: self.wait_calls.get(k, 0) for k in WAIT_KINDS},
                "iterations": self.iterations, "outfeed_items": self.outfeed_items}

    def trace_events(self) -> list[dict]:
        """This rank's metadata and complete events in Trace Event Format."""
        pid = self.rank
        p = self.placement
        where = f" (replica {p.replica}, partition {p.partition})" if p is not None else ""
        device = p.device if p is not None else self.rank
        out = [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
             "args": {"name": f"rank {self.rank}{where}"}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
             "args": {"sort_index": self.rank}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": 0,
             "args": {"name": f"device {device}"}},
        ]
        origin = self.origin_ns
        for name, cat, t0, t1, args in self.events:
            ev = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": 0,
                  "ts": (t0 - origin) / 1e3, "dur": (t1 - t0) / 1e3}
            if cat == "instruction":
                ev["args"] = {"opcode": args.opcode,
                              "computation": args.parent.name if args.parent else "?"}
            elif args:
                ev["args"] = args
            out.append(ev)
        for n, what in ((self.dropped, "instruction"), (self.dropped_waits, "wait")):
            if n:
                out.append({"ph": "i", "s": "p", "name": f"{n} {what} slices dropped (over "
                            f"{self.max_events})", "pid": pid, "tid": 0,
                            "ts": (_now() - origin) / 1e3})
        return out

    def write_merged(self, comm, path: str, root: int = 0) -> None:
        """Gather every rank's events on `root`, which writes `path` (collective call)."""
        with deadline.waiting(f"gathering trace events on rank {root}"):
            parts = comm.gather(self.trace_events(), root=root)
        if comm.Get_rank() == root:
            write_trace(path, [e for part in parts for e in part],
                        ranks=comm.Get_size())

    def write_partial(self, path: str) -> str:
        """After a failure: this rank's events alone, in `PATH.rank<r>.part`."""
        part = f"{path}.rank{self.rank}.part"
        data = json.dumps(self.trace_events()).encode()
        return str(deliver(part, lambda f: f.write(data), "--trace (this rank's part)"))


class _Span:
    __slots__ = ("args", "cat", "is_run", "name", "t0", "tracer")

    def __init__(self, tracer, name, cat, args, is_run):
        self.tracer, self.name, self.cat, self.args = tracer, name, cat, args
        self.is_run = is_run

    def __enter__(self):
        self.t0 = _now()
        return self

    def __exit__(self, *exc):
        t1 = _now()
        tr = self.tracer
        if self.is_run:
            tr.run_ns += t1 - self.t0
        if tr.record:
            tr.events.append((self.name, self.cat, self.t0, t1, self.args or None))
        return False


def write_trace(path: str, events: list[dict], ranks: int | None = None,
                note: str | None = None) -> None:
    """Write a Trace Event Format JSON object file (atomically: no half-written trace;
    rescued to a fresh folder, with a message, when `path` cannot be written:
    xladist/files.py `deliver`)."""
    doc = {"traceEvents": events, "displayTimeUnit": "ms",
           "otherData": {"producer": "xladist", "ranks": ranks}}
    if note:
        doc["otherData"]["note"] = note
    data = json.dumps(doc, separators=(",", ":")).encode()
    # Atomic; when the folder is gone by now, the trace goes to the job directory instead.
    deliver(path, lambda f: f.write(data), "--trace")


def write_trace_parts(path: str, parts: list, ranks: int | None = None,
                      note: str | None = None) -> None:
    """Write a trace from files that each hold one rank's events as a JSON list (what ranks
    send the coordination service), streamed: never all ranks' events in memory at once.
    A part may also be the list's bytes themselves (events that could not go to a file)."""
    other = {"producer": "xladist", "ranks": ranks}
    if note:
        other["note"] = note
    tail = ('],"displayTimeUnit":"ms","otherData":' +
            json.dumps(other, separators=(",", ":")) + "}").encode()

    def write(f) -> None:
        f.write(b'{"traceEvents":[')
        first = True
        for part in parts:
            if isinstance(part, bytes):
                body = part.strip()
            else:
                with open(part, "rb") as src:
                    body = src.read().strip()
            body = body[1:-1].strip() if body.startswith(b"[") else body
            if not body:
                continue
            if not first:
                f.write(b",")
            f.write(body)
            first = False
        f.write(tail)
    deliver(path, write, "--trace")


def merge_partials(path: str) -> bool:
    """Merge the `PATH.rank<r>.part` files a failed run left into PATH; True if any."""
    parts = sorted(glob.glob(f"{glob.escape(path)}.rank*.part"))
    if not parts:
        return False
    events = []
    for part in parts:
        try:
            with open(part) as f:
                events.extend(json.load(f))
        except (OSError, ValueError):
            continue
        os.remove(part)
    write_trace(path, events, note=f"partial: the run failed; {len(parts)} rank(s) saved "
                                   f"their events before the job was aborted")
    return True


def _nbytes(args) -> int:
    total = 0
    for a in args:
        if isinstance(a, np.ndarray):
            total += a.nbytes
        elif isinstance(a, (tuple, list)):
            total += _nbytes(a)
    return total


class TracedDevice:
    """A DeviceContext that times every call of the one it wraps into `tracer`.

    Everything else (ids, plans, attributes) is forwarded unchanged, so both backends use it
    as they would use the wrapped context. The Evaluator finds `tracer` on it (and then
    reports every instruction) only when the tracer records slices.
    """

    def __init__(self, inner, tracer: Tracer):
        self._inner = inner
        self._tracer = tracer
        self.tracer = tracer if tracer.record else None

    # Collectives bound once for loops skip `collective` and so the timeline: not here.
    bound_collective = None

    def native_waits(self, ns: int, calls: int) -> None:
        """A native while loop's time in MPI calls (compiler/native/loop.py): collective wait
        in the summary (its calls include send/recv waits, counted with them)."""
        self._tracer.add_waits("collective", ns, calls)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _group(self, instr):
        plan = getattr(self._inner, "plans", {}).get(instr)
        return list(plan.group) if plan is not None else None

    def _collective_args(self, instr, args) -> dict:
        return {"opcode": instr.opcode, "bytes": _nbytes(args), "group": self._group(instr)}

    # Collectives: a sync op and a *-start send and (for the sync op) wait; a *-done waits.
    def collective(self, instr, args, reducer=None):
        t0 = _now()
        try:
            return self._inner.collective(instr, args, reducer)
        finally:
            self._tracer.wait("collective", instr.name, t0, _now(),
                             self._collective_args(instr, args))

    def collective_start(self, instr, args, reducer=None):
        t0 = _now()
        try:
            return self._inner.collective_start(instr, args, reducer)
        finally:
            self._tracer.wait("collective", instr.name, t0, _now(),
                             self._collective_args(instr, args))

    def collective_done(self, instr, handle):
        t0 = _now()
        try:
            return self._inner.collective_done(instr, handle)
        finally:
            self._tracer.wait("collective", instr.name, t0, _now(),
                             {"opcode": instr.opcode, "group": self._group(instr)})

    def send(self, instr, data):
        return self._timed("send/recv", instr, self._inner.send, instr, data,
                           args={"opcode": "send", "bytes": _nbytes([data]),
                                 "channel_id": instr.attrs.get("channel_id")})

    def send_done(self, instr, handle):
        return self._timed("send/recv", instr, self._inner.send_done, instr, handle)

    def recv(self, instr):
        return self._timed("send/recv", instr, self._inner.recv, instr,
                           args={"opcode": "recv", "channel_id": instr.attrs.get("channel_id")})

    def recv_done(self, instr, handle):
        return self._timed("send/recv", instr, self._inner.recv_done, instr, handle)

    def infeed(self, instr):
        return self._timed("infeed", instr, self._inner.infeed, instr)

    def outfeed(self, instr, data):
        self._tracer.outfeed_items += 1
        return self._timed("outfeed", instr, self._inner.outfeed, instr, data,
                           args={"bytes": _nbytes([data])})

    def _timed(self, kind, instr, fn, *call_args, args=None):
        t0 = _now()
        try:
            return fn(*call_args)
        finally:
            self._tracer.wait(kind, instr.name, t0, _now(), args or {"opcode": instr.opcode})


def format_summary(summaries: list[dict], *, steps: int | None = None) -> str:
    """The per-rank table that `xladist demo` and `xladist run --stats` print."""
    lines = []
    wall = max((s["wall_s"] for s in summaries), default=0.0)
    if steps:
        lines.append(f"{steps} steps in {wall:.2f} s: {1e3 * wall / steps:.1f} ms per step")
    heads = ("compute", "collective wait", "infeed wait", "other waits")
    lines.append(f"{'rank':>4}  {'wall':>8}  " + "  ".join(f"{h:>15}" for h in heads))
    for s in summaries:
        w = s["wall_s"] or 1e-12
        waits = s["wait_s"]
        cells = (s["compute_s"], waits["collective"], waits["infeed"],
                 waits["outfeed"] + waits["send/recv"])
        lines.append(f"{s['rank']:>4}  {s['wall_s']:>6.2f} s  " + "  ".join(
            f"{c:>7.2f} s {100 * c / w:>4.0f}%" for c in cells))
    return "\n".join(lines)
