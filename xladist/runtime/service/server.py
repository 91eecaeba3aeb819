"""The coordination service: one small TCP server per job (docs/ARCHITECTURE.md "The
coordination service" describes the protocol).

Who hosts it: the launching process (`xladist run`, `xladist.run`, `xladist demo`: its
address reaches the ranks in XLADIST_COORD), or, for ranks started by a bare `mpiexec` /
`srun`, a thread of rank 0 (its address goes to the others in one MPI broadcast).

What it does:
* ranks connect when they start and say who they are (rank, host, pid, CPU); when all have,
  it answers each with the job-wide decisions (the code's target, hostinfo.job_target);
* ranks heartbeat every HEARTBEAT_S and publish their position when a wait outlives ~1 s;
* the first rank whose deadline passes tells it; it then asks every rank where it is right
  now, writes THE report of the job (one per job, whatever the hosts or folders) and ends
  the job (every rank aborts);
* a rank whose connection ends without a goodbye died; one that stops heartbeating for
  `heartbeat_timeout` is stuck: either is named (device, replica, partition, host, pid, last
  position) and the job ends;
* a failing rank's last words come here before it aborts MPI, so they reach the user even
  when MPICH drops the rank's stderr;
* requests (`req`): the job, a rank's inputs, compiled code, host transfers -- served by the
  job and code objects the host gave it (jobs.py, code.py); outputs, traces and statistics
  stream in (a message with `outputs` -- all of a rank's, read in pieces --, `trace`,
  `stats`); infeed and outfeed streams come on connections of their own (feeds/host.py).

Every send to a rank has a deadline (SEND_TIMEOUT_S): a rank that stopped reading cannot block
the service. Nothing a peer sends is unpickled.
"""

from __future__ import annotations

import itertools
import os
import secrets
import selectors
import socket
import sys
import threading
import time
from types import SimpleNamespace

from ...errors import InputError
from ...version import __version__
from .. import wire
from ..watchdog import format_report, record, waits_for_finished
from . import report as texts
from .protocol import ADDRESS_ENV, HEARTBEAT_S, PROTOCOL, TOKEN_ENV, heartbeat_timeout

# How long the service waits for every rank to connect before it names the missing ones.
REGISTER_TIMEOUT_ENV, DEFAULT_REGISTER_TIMEOUT_S = "XLADIST_REGISTER_TIMEOUT", 120.0
SEND_TIMEOUT_S = 10.0
# A rank died: how long MPICH has to end the job itself before the service does.
LOST_GRACE_S = 3.0
# How long the report waits for the ranks to say where they are (their last published
# position stands in for a rank that does not answer).
WHERE_WAIT_S = 1.5
# Ending a job: how long the ranks still connected have to run their abort hooks (save their
# trace, host-transfer files) before any of them aborts. MPI_Abort from the first rank done
# kills the others wherever they are, so without this phase a rank's events were lost when
# another rank finished saving first. Below client.ACK_WAIT_S: a failing rank's
# acknowledgement waits for this phase.
SAVE_WAIT_S = 4.0
# Ending a job: every rank still connected (the failing one too) exits this long after the
# service told the first one, all at the same moment -- the time for the last `abort` to
# arrive. Under MPICH's hydra the first rank to exit gets every rank still running killed
# (SIGKILL), and mpiexec then exits 9 after its BAD TERMINATION banner instead of with the
# code the ranks exit with (1 run in 2-3 of `mpiexec -n 4`, when each went as it was told).
EXIT_TOGETHER_S = 0.5
# A rank waits for one whose program has finished (_check_finished_peers): how long after
# its news the service asks every rank again before it reports the hang.
FINISHED_GRACE_S = 2.0
HOST_ENV, PORT_ENV, BIND_ENV = "XLADIST_COORD_HOST", "XLADIST_COORD_PORT", "XLADIST_COORD_BIND"


def _seconds(env: str, default: float) -> float:
    from xladist.environment import setting
    return setting(env, default)


def advertised_host() -> str:
    """The name other hosts reach this one by: XLADIST_COORD_HOST, else this host's name
    when it resolves to an address other than loopback, else the address of the interface
    that routes outward, else the name."""
    explicit = os.environ.get(HOST_ENV, "").strip()
    if explicit:
        return explicit
    name = socket.gethostname()
    try:
        addr = socket.gethostbyname(name)
        if not addr.startswith("127."):
            return name
    except OSError:
        pass
    try:  # no packet is sent: connecting a UDP socket only picks the outgoing interface
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
    except OSError:
        return name


class Conn:
    """One accepted connection: sends are serialized and have a deadline."""

    def __init__(self, sock):
        self.sock = sock
        self.lock = threading.Lock()
        self.open = True

    def send(self, op: str, arrays=(), blob=None, timeout: float = SEND_TIMEOUT_S,
             wait: bool = True, **fields) -> bool:
        """Send a message; False when the peer is gone. `wait=False`: skip it when another
        send is under way (a ping is pointless while an array streams to the rank)."""
        if not self.open:
            return False
        if not self.lock.acquire(blocking=wait):
            return True
        try:
            wire.send_msg(self.sock, op, timeout, arrays, blob, **fields)
            return True
        except (OSError, ValueError):
            self.open = False
            return False
        finally:
            self.lock.release()

    def close(self) -> None:
        self.open = False
        wire.close(self.sock)


class RankState:
    __slots__ = ("busy", "conn", "ended", "host", "last_heard", "pid", "place", "rank",
                 "record", "said", "target")

    def __init__(self, rank, host, pid, target, conn):
        self.rank, self.host, self.pid, self.target, self.conn = rank, host, pid, target, conn
        self.place: dict = {}
        self.record: dict = {"state": "starting", "loops": [], "updated": time.time()}
        self.last_heard = time.monotonic()
        self.busy = 0           # requests being served: the rank waits on us, not stuck
        self.ended = None       # None, "bye", "failed", "lost", "stalled"
        self.said = None        # its last words ("failed")

    def who(self) -> dict:
        rec = {"rank": self.rank, "host": self.host, "pid": self.pid}
        rec.update(self.place)
        return rec

    def mark(self, state: str) -> None:
        """What the rank is doing, known here without its word: a cluster's rank given an
        order is 'computing', one that answered it 'finished' (its long waits are still
        published by the rank itself, `pos`)."""
        where = SimpleNamespace(rank=self.rank, **self.place) if self.place else None
        self.record = dict(record(where, {"state": state, "loops": []},
                                  finished=state == "finished"), host=self.host, pid=self.pid)


class Service:
    """The service of one job of `size` ranks (see the module docstring).

    `job`: serves `req` job/inputs/host and collects outputs, traces, stats (jobs.JobHost),
    or None for coordination only. `code`: compiled code by key (code.CodeStore) or None.
    `prints`: the service prints the ranks' failure messages (it is the launching process,
    whose stderr is the user's); else they print their own. `defer_lost`: a dead or stuck
    rank is recorded, not printed: the launcher prints it once mpiexec has said which
    signal ended it. `emit(text)`: where reports go (default stderr). `checked`: the deadlock
    check's verdict ({"proven": bool, "module": Module}: precheck.verdict) for the hang report's last line.
    """

    def __init__(self, size: int, *, job=None, code=None, prints: bool = True,
                 defer_lost: bool = False, emit=None, checked: dict | None = None,
                 heartbeat: float | None = None, timeout_setting: str = "--timeout"):
        wire.check_byte_order()
        self.size = int(size)
        self.job = job
        self.code = code
        self.prints = prints
        self.defer_lost = defer_lost
        self._emit = emit
        self.checked = checked or {}
        # How the job's user set the deadline, as the hang report names it (the Python
        # API's callers set `timeout=`).
        self.timeout_setting = timeout_setting
        self.heartbeat_timeout = heartbeat_timeout() if heartbeat is None else heartbeat
        self.register_timeout = _seconds(REGISTER_TIMEOUT_ENV, DEFAULT_REGISTER_TIMEOUT_S)
        self._started = time.monotonic()
        self.token = secrets.token_hex(16)
        self.ranks: dict[int, RankState] = {}
        self.messages: list[str] = []   # everything emitted, in order (xladist.run's error)
        self.lost: list[dict] = []      # ranks that died or got stuck (see defer_lost)
        self.hang_report: str | None = None
        self.failures: list[tuple[int, str]] = []
        self.target = None               # the job's code target (welcome)
        self.target_why = ""
        # Set when the service ends the job; the launcher then stops mpiexec if the ranks
        # do not go by themselves (a stopped process ignores MPI_Abort's signals).
        self.ending = threading.Event()
        # The exit code the job was ended with (a rank's failure, a hang report): the
        # launcher's, whatever code mpiexec reports for ranks its proxies killed then.
        self.end_code: int | None = None
        self._exit_at = 0.0                # when the ranks it ended exit (_end_job)
        self._probing = False              # _confirm_finished_peers under way
        self._failing = False            # a failure or report is under way: ends are expected
        self._stop = threading.Event()   # set by close(): the monitor's sleep ends at once
        self.on_end = None               # called once when the service ends the job
        self.closed = False
        self._lock = threading.RLock()
        self._registered = threading.Condition(self._lock)
        self._where: dict[int, dict] = {}
        self._where_cond = threading.Condition(self._lock)
        self._where_id = itertools.count(1)
        self._saved: set[int] = set()   # ranks that ran their abort hooks (_save_all)
        self._saving = False              # _save_all has begun ...
        self._save_over = threading.Event()  # ... and ended
        self._threads: list[threading.Thread] = []
        self._conns: list[Conn] = []
        self._listen()
        self._spawn(self._accept, "xladist-service-accept")
        self._spawn(self._monitor, "xladist-service-monitor")

    # ---- the listener -------------------------------------------------------------------------
    def _listen(self) -> None:
        bind = os.environ.get(BIND_ENV, "").strip() or "0.0.0.0"
        from xladist.environment import setting
        port = setting(PORT_ENV, 0)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((bind, port))
        except OSError as e:
            from xladist.errors import InputError
            raise InputError(f"the coordination service cannot listen on {bind}:{port} "
                             f"({e.strerror or e}); set {PORT_ENV} to a free port, or 0 for "
                             "any") from None
        self.listener.listen(min(4096, 3 * self.size + 16))
        self.port = self.listener.getsockname()[1]
        self.address = f"{advertised_host()}:{self.port}"
        self._wake_r, self._wake_w = socket.socketpair()

    def env(self) -> dict[str, str]:
        """What the ranks need to reach this service."""
        return {ADDRESS_ENV: self.address, TOKEN_ENV: self.token}

    def _spawn(self, target, name, *args) -> threading.Thread:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            # Only the threads still running: a cluster's service lives for thousands of
            # calls, and each load and each call's feeds open connections of their own.
            self._threads = [u for u in self._threads if u.is_alive()]
            self._threads.append(t)
        t.start()
        return t

    def _accept(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            sel.register(self.listener, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
        except (ValueError, OSError):  # closed before this thread began (a launch refused
            sel.close()                # at once): a traceback on stderr, before
            return
        while not self.closed:
            for key, _ in sel.select():
                if key.fileobj is self._wake_r:
                    sel.close()
                    return
                try:
                    sock, _ = self.listener.accept()
                except OSError:
                    continue
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._spawn(self._serve, "xladist-service-conn", sock)
        sel.close()

    # ---- one connection ---------------------------------------------------------------------
    def _serve(self, sock) -> None:
        conn = Conn(sock)
        with self._lock:
            self._conns.append(conn)
        try:
            self._serve_conn(conn)
        finally:
            conn.close()
            with self._lock:  # closed: close() has nothing left to do for it
                self._conns.remove(conn)

    def _serve_conn(self, conn) -> None:
        sock = conn.sock
        sock.settimeout(SEND_TIMEOUT_S)  # the hello must come at once
        try:
            hello = wire.recv(sock)
        except (OSError, ValueError):
            return
        if hello is None or hello[0] != wire.HELLO or hello[1].get("token") != self.token:
            conn.send("refused", reason="not a rank of this job (wrong or missing token)")
            return
        meta = hello[1]
        sock.settimeout(None)  # from here, liveness is the heartbeat monitor's business
        role = meta.get("role")
        if role == "rank":
            self._serve_rank(conn, meta)
        elif role in ("feed-in", "feed-out") and self.job is not None:
            self.job.serve_feed(conn, meta)
        else:
            conn.send("refused", reason=f"no service for {role!r}")

    def _serve_rank(self, conn, meta) -> None:
        rank = meta.get("rank")
        if meta.get("protocol") != PROTOCOL:
            # Another xladist on that host (ranks on other hosts run their own install):
            # its messages would not be understood, so say it now, by name.
            conn.send("refused", reason=(
                f"rank {rank} on {meta.get('host', '?')} runs xladist "
                f"{meta.get('version', '(an older one)')} (coordination protocol "
                f"{meta.get('protocol')}), the launching process xladist {__version__} "
                f"(protocol {PROTOCOL}): install the same xladist on every host"))
            return
        if not isinstance(rank, int) or not 0 <= rank < self.size or meta.get("size") != self.size:
            conn.send("refused", reason=f"rank {rank} of {meta.get('size')} does not belong "
                                        f"to this job of {self.size} ranks")
            return
        st = RankState(rank, meta.get("host", "?"), meta.get("pid"), meta.get("target"), conn)
        with self._lock:
            if rank in self.ranks and self.ranks[rank].ended is None:
                conn.send("refused", reason=f"rank {rank} is already connected")
                return
            self.ranks[rank] = st
            if len(self.ranks) == self.size:
                self._welcome_all()
        try:
            while True:
                head = wire.recv_header(conn.sock)
                if head is None:
                    break
                st.last_heard = time.monotonic()
                self._on_message(st, *head)
        except (OSError, ValueError):
            pass
        except Exception as e:  # noqa: BLE001 -- a bug here must not look like a dead rank
            self._on_failed(st, f"xladist: internal error in the coordination service while "
                                f"serving rank {st.rank}: {type(e).__name__}: {e}", 1)
        self._on_end(st)  # then _serve closes our side: the rank's wait to close ends

    def _welcome_all(self) -> None:
        """All ranks are here: decide the job-wide settings and tell everyone."""
        from ..hostinfo import TargetError, job_target
        infos = {r: s.target for r, s in self.ranks.items() if s.target}
        hosts = {r: s.host for r, s in self.ranks.items()}
        error = None
        # A rank whose host cannot run the CPU XLADIST_TARGET_CPU names (its own check,
        # target.check_target_cpu: the launcher checks only the name when the ranks run on
        # the hosts of a hostfile).
        refused = sorted((r, i["refused"]) for r, i in infos.items() if "refused" in i)
        if refused:
            r, why = refused[0]
            where: dict[str, list[int]] = {}
            for q, _ in refused:
                where.setdefault(hosts[q], []).append(q)
            error = f"xladist: rank {r} on {hosts[r]}: {why}" + (
                "; refused on " + ", ".join(
                    f"{h} (rank{'s' if len(qs) > 1 else ''} {', '.join(map(str, qs))})"
                    for h, qs in where.items()) if len(refused) > 1 else "")
        elif len(infos) == self.size:
            try:
                self.target, self.target_why = job_target(infos, hosts)
            except TargetError as e:
                error = str(e)
        if self.code is not None and self.target is not None and error is None:
            self.code.decide(self.target)
        if error is not None:
            # Said once, here, and the job ends with an input error's code: every rank
            # raising it printed it once per rank, and a launcher whose ranks never got
            # further took them for ranks its mpiexec could not start. Also where this
            # service is rank 0 of a bare `mpiexec xladist run` (which says nothing else
            # itself): there every rank printed `rank R: xladist: rank 2 on nodeB: ...`.
            self.end_code = InputError.exit_code
            self._failing = True
            self.emit(error)
            if not self.prints:  # the ranks abort at once: let mpiexec carry the line first
                from xladist.collectives.deadline import ABORT_FLUSH_S
                time.sleep(ABORT_FLUSH_S)
        # Rank 0 last where it hosts this service (a bare launch): told of an error, it
        # ends this process, and with it the welcomes still to send.
        for s in sorted(self.ranks.values(), key=lambda s: (not self.prints and s.rank == 0)):
            s.conn.send("welcome", target=self.target, target_why=self.target_why,
                        prints=self.prints or error is not None, job=self.job is not None,
                        error=error)
        self._registered.notify_all()

    # ---- messages from a rank -----------------------------------------------------------------
    def _on_message(self, st: RankState, kind, meta, size) -> None:
        op = meta.get("op")
        if "outputs" in meta and self.job is not None:
            # The rank's outputs (rank_main._send_outputs): each array read in pieces to
            # where it goes; then the message is taken as any other.
            self.job.receive_outputs(st, meta, size, self._reader(st))
            payload = None
        else:
            payload = wire.recv_payload(st.conn.sock, meta, size)
        if op == "hb":
            return
        if op == "pos":
            st.record = dict(meta["rec"], host=st.host, pid=st.pid)
            self._check_finished_peers()
        elif op == "placed":
            st.place = {k: meta[k] for k in ("device", "replica", "partition")}
        elif op == "here":
            with self._lock:
                self._where[st.rank] = dict(meta["rec"], host=st.host, pid=st.pid)
                self._where_cond.notify_all()
        elif op == "saved":
            with self._lock:
                self._saved.add(st.rank)
                self._registered.notify_all()
        elif op == "deadline":
            st.record = dict(meta["rec"], host=st.host, pid=st.pid)
            self._spawn(self._report_hang, "xladist-service-report", st.rank,
                        float(meta.get("deadline_s", 0)))
        elif op == "failed":
            # Recorded, then acknowledged (the rank aborts right after: its end is no death),
            # then the others are ended.
            self._on_failed(st, meta.get("text", ""), int(meta.get("code", 1)),
                            ack=lambda **how: st.conn.send("ack", id=meta.get("id"), **how))
        elif op == "req":
            self._spawn(self._request, "xladist-service-req", st, meta, payload)
        elif op == "bye":
            with self._lock:
                st.ended = "bye"
                self._registered.notify_all()
        elif self.job is not None:
            self.job.on_message(st, op, meta, payload)

    def _reader(self, st: RankState):
        """A progress hook for long payloads: a rank streaming a big output is alive."""
        def seen() -> None:
            st.last_heard = time.monotonic()
        return seen

    def _request(self, st: RankState, meta: dict, payload) -> None:
        st.busy += 1
        try:
            what = meta.get("what")
            try:
                if what == "code":
                    blob = self.code.get(meta["key"]) if self.code is not None else None
                    reply = ({"found": blob is not None}, (), blob)
                elif self.job is not None:
                    reply = self.job.request(st, what, meta, payload)
                    if what == "job":  # the ranks skip what the check proved (signatures.py)
                        reply[0]["spec"]["proven"] = bool((self.checked or {}).get("proven"))
                else:
                    raise LookupError(f"this service serves no {what!r}")
                fields, arrays, blob = reply
                st.conn.send("rep", arrays=arrays, blob=blob, id=meta.get("id"), ok=True,
                             **fields)
            except Exception as e:  # noqa: BLE001 -- the rank reports it as its own failure
                st.conn.send("rep", id=meta.get("id"), ok=False,
                             error=f"{type(e).__name__}: {e}" if not getattr(e, "plain", False)
                             else str(e))
        finally:
            st.busy -= 1
            st.last_heard = time.monotonic()

    def _on_failed(self, st: RankState, text: str, code: int, ack=None) -> None:
        with self._lock:
            st.ended = "failed"
            st.said = text
            self.failures.append((st.rank, text))
            first = not self._failing
            self._failing = True
            self._registered.notify_all()
        if text:
            self._say(text)
        # Before the ack, whichever failure this is (the first, or one during a hang
        # report or another's failure): the failing rank aborts right after it.
        self._save_all(but=st.rank)
        # The others are told to go before the failing rank: all exit together
        # (EXIT_TOGETHER_S).
        at = self._end_job(code, but=st.rank) if first else self._exit_at
        if ack is not None:
            ack(after=max(0.0, at - time.monotonic()))

    def _on_end(self, st: RankState) -> None:
        """A rank's connection ended: normal after its goodbye or a failure, else it died."""
        with self._lock:
            self._registered.notify_all()
            if st.ended is not None:
                return
            st.ended = "lost"
            expected = self._failing or self.closed
        if not expected:
            self._lost(st, "lost")

    def _lost(self, st: RankState, how: str) -> None:
        """A rank died or got stuck. Printed at once -- or, with defer_lost, kept for the
        launcher, which learns from mpiexec which process really died first (when MPICH
        takes the others down, their connections end too, a moment later)."""
        with self._lock:
            info = dict(st.who(), how=how, record=st.record, at=time.monotonic(),
                        silent_s=time.monotonic() - st.last_heard)
            self.lost.append(info)
            first = len(self.lost) == 1
            if not self.defer_lost:
                if self._failing:
                    return
                self._failing = True
        if first and not self.defer_lost:
            self.emit(texts.lost_rank(info))
            self._end_job(1, but=st.rank)
        elif first:
            # MPICH ends a job whose process died, and says which signal it was (the
            # launcher reads that); the service ends it only if MPICH does not.
            timer = threading.Timer(LOST_GRACE_S, self._end_job, args=(1, st.rank))
            timer.daemon = True
            timer.start()

    # ---- the monitor: heartbeats both ways, stuck ranks ----------------------------------------
    def _monitor(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            now = time.monotonic()
            # Also when no rank connected: MPI's start-up holds every rank until all have
            # started, so one host whose ranks never start keeps all of them away.
            if (len(self.ranks) < self.size and not self._failing
                    and 0 < self.register_timeout < now - self._started):
                self._never_connected()
            for st in list(self.ranks.values()):
                if st.ended is not None:
                    continue
                st.conn.send("ping", timeout=HEARTBEAT_S, wait=False)
                quiet = now - st.last_heard
                if (self.heartbeat_timeout > 0 and quiet > self.heartbeat_timeout
                        and st.busy == 0 and not self.ending.is_set()):
                    with self._lock:
                        st.ended = "stalled"
                    self._lost(st, "stalled")

    def _never_connected(self) -> None:
        with self._lock:
            if self._failing:
                return
            self._failing = True
            missing = [r for r in range(self.size) if r not in self.ranks]
            hosts = sorted({s.host for s in self.ranks.values()})
        within = (f"the coordination service at {self.address} within "
                  f"{self.register_timeout:g} s ({REGISTER_TIMEOUT_ENV})")
        if not self.ranks:
            self.emit(f"xladist: none of the {self.size} ranks connected to {within}. A rank "
                      "connects once MPI has started every rank of the job: a host whose "
                      "ranks never started (unreachable, ssh waiting for a password, no "
                      "srun in a Slurm allocation) keeps them all waiting; or the ranks' "
                      f"hosts cannot reach this one on TCP port {self.port}. The job was "
                      "ended.")
        else:
            self.emit(f"xladist: {texts.ranks_text(missing)} never connected to {within}, "
                      f"while {len(self.ranks)} did (from {', '.join(hosts)}): were they "
                      f"started, and can their hosts reach this one on TCP port {self.port}? "
                      "The job was ended.")
        self._end_job(1)

    # ---- the hang report ---------------------------------------------------------------------
    def _report_hang(self, first: int, timeout: float) -> None:
        with self._lock:
            if self._failing or self.ending.is_set():
                return
            self._failing = True
        records, _ = self._positions_now()
        # The headline names the wait the deadline passed in, even when it ended between
        # the deadline and the question (a partner just late): the rank's own record.
        fired = self.ranks[first].record if first in self.ranks else None
        self._say_hang(format_report(records, first, timeout, self.size, fired=fired,
                                     setting=self.timeout_setting),
                       records)

    def _positions_now(self) -> tuple[dict[int, dict], bool]:
        """Every rank's position, asked now (the last one it published, or the service's
        own record, for a rank that does not answer within WHERE_WAIT_S); and whether
        every rank still connected answered."""
        with self._lock:
            self._where.clear()
            ask = next(self._where_id)
            live = [s for s in self.ranks.values() if s.ended is None]
        for s in live:
            s.conn.send("where", id=ask, timeout=1.0)
        end = time.monotonic() + WHERE_WAIT_S
        with self._lock:
            while len(self._where) < len(live) and time.monotonic() < end:
                self._where_cond.wait(end - time.monotonic())
            answered = all(s.rank in self._where for s in live)
            records = {}
            for r, s in self.ranks.items():
                rec = self._where.get(r) or dict(s.record, host=s.host, pid=s.pid, **s.place)
                rec.setdefault("rank", r)
                records[r] = rec
        return records, answered

    def _say_hang(self, text: str, records: dict[int, dict]) -> None:
        line = texts.proven_line(self.checked, records)
        if line:
            text += "\n" + line
        self.hang_report = text
        self.emit(text)
        self._end_job(1)

    def _check_finished_peers(self) -> None:
        """A rank waits in its program for a rank whose program (of the same run) has
        finished (watchdog.waits_for_finished): that wait cannot end, so the job is reported
        now rather than at the deadline -- once fresh positions, asked FINISHED_GRACE_S
        later, still say so (the ranks' published news lags: a wait a rank served before it
        finished ends a moment after its end was published)."""
        with self._lock:
            if self._probing or self._failing or self.ending.is_set():
                return
            records = {r: dict(s.record, **s.place) for r, s in self.ranks.items()}
            found = waits_for_finished(records) if len(records) == self.size else None
            if found is None or self._deadline_first(records[found[0]]):
                return
            self._probing = True
        self._spawn(self._confirm_finished_peers, "xladist-service-probe")

    @staticmethod
    def _deadline_first(rec: dict) -> bool:
        """Whether the waiting rank's own deadline passes before the service could confirm
        (the deadline's report then comes as it always did)."""
        timeout = float(rec.get("timeout", 0.0))
        left = rec.get("since", time.time()) + timeout - time.time()
        return timeout > 0 and left < FINISHED_GRACE_S + WHERE_WAIT_S + 1.0

    def _confirm_finished_peers(self) -> None:
        try:
            if self._stop.wait(FINISHED_GRACE_S):
                return
            records, answered = self._positions_now()
            found = waits_for_finished(records) if answered else None
            with self._lock:
                if found is None or self._failing or self.ending.is_set():
                    return
                self._failing = True
            b, done = found
            timeout = float(records[b].get("timeout", 0.0))
            self._say_hang(format_report(records, b, timeout, self.size, finished=done,
                                         setting=self.timeout_setting),
                           records)
        finally:
            self._probing = False

    # ---- ending ---------------------------------------------------------------------------------
    def _end_job(self, code: int, but: int | None = None) -> float:
        """Every rank still connected aborts the job (its abort hooks save what they can), at
        the moment returned (time.monotonic: EXIT_TOGETHER_S)."""
        if self.closed:
            return self._exit_at
        first = not self.ending.is_set()
        if first:
            self.end_code = code
            self._save_all(but)
            self._exit_at = time.monotonic() + EXIT_TOGETHER_S
        self.ending.set()
        if first and self.on_end is not None:
            self.on_end()
        # Rank 0 last: under a bare mpiexec its process hosts this service, which ends with
        # it; a rank not yet told would take that for the service lost, and say so.
        for s in sorted(self.ranks.values(), key=lambda s: -s.rank):
            if s.rank != but and s.ended is None:
                s.conn.send("abort", code=code, timeout=2.0,
                            after=max(0.0, self._exit_at - time.monotonic()))
        return self._exit_at

    def _save_all(self, but: int | None) -> None:
        """Every rank still connected (but `but`, which saved before it failed) runs its
        abort hooks and says so, for at most SAVE_WAIT_S; only then does any rank abort. A
        second caller (a failure and a hang report at once) waits for the first one's phase
        instead of sending `abort` in the middle of it."""
        with self._lock:
            begun, self._saving = self._saving, True
            live = [s for s in self.ranks.values() if s.ended is None and s.rank != but]
        if begun:
            self._save_over.wait(SAVE_WAIT_S + 1.0)
            return
        try:
            for s in live:
                s.conn.send("save", timeout=1.0)
            with self._lock:
                self._registered.wait_for(
                    lambda: all(s.rank in self._saved or s.ended is not None for s in live),
                    SAVE_WAIT_S)
        finally:
            self._save_over.set()

    def _say(self, text: str) -> None:
        """A failure's words: printed here when the service prints them (it is the
        launching process), else kept in `messages` for whoever reports the job."""
        if self.prints:
            self.emit(text)
        else:
            self.messages.append(text)

    def emit(self, text: str) -> None:
        self.messages.append(text)
        if self._emit is not None:
            self._emit(text)
            return
        try:
            sys.stderr.write(text.rstrip("\n") + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def wait_all_ended(self, timeout: float | None = None, but: int | None = None) -> bool:
        """Until every rank (but `but`) has said goodbye, failed or gone (rank 0 of a bare
        launch waits so before it writes the results)."""
        with self._lock:
            return self._registered.wait_for(
                lambda: len(self.ranks) == self.size and
                all(s.ended is not None for s in self.ranks.values() if s.rank != but),
                timeout)

    @property
    def failed(self) -> bool:
        return bool(self.hang_report or self.lost or self.failures)

    def close(self) -> None:
        """Stop serving (after the job): connections are closed, threads end."""
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        for st in list(self.ranks.values()):  # not a death: the job's host is done with it
            if st.ended is None:
                st.conn.send("closing", timeout=1.0)
        drain = getattr(self.job, "drain_outfeeds", None)
        if drain is not None:  # outfed items still on their way to the user: not dropped
            drain()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self.listener.close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close()
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            if t is not threading.current_thread():
                t.join(timeout=2.0)
        self._wake_r.close()
        self._wake_w.close()
