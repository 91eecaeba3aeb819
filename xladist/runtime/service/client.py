"""A rank's end of the coordination service (server.py; the protocol is in
docs/ARCHITECTURE.md).

`for_rank(comm)` connects this process once: to XLADIST_COORD when the launching process
hosts the service, else to one that rank 0 starts and announces by one MPI broadcast (a bare
`mpiexec` / `srun` launch). The connection then carries, besides requests and replies:

* heartbeats, every HEARTBEAT_S, from a thread of their own -- and the service's pings the
  other way: a rank that hears nothing for the heartbeat timeout has lost the launching
  process (or rank 0) and ends the job saying so;
* the monitor of xladist/collectives/deadline.py: long waits are published (`publish`), a
  deadline that passes is told to the service (`fire`), which writes the job's one report;
* a reader thread that answers the service while the main thread is blocked in MPI: where
  it is right now (`where`), `save` and `abort` (the job is being ended: save, then go);
* the last words of a failing rank (`deadline.set_messenger`), delivered before MPI_Abort.
"""

from __future__ import annotations

import atexit
import itertools
import os
import queue
import socket
import threading
import time
from typing import TYPE_CHECKING

from xladist.collectives import deadline
from xladist.errors import XlaDistError
from xladist.version import __version__

from .. import wire
from ..hostinfo import host_name, target_info
from ..watchdog import record
from .protocol import ADDRESS_ENV, HEARTBEAT_S, PROTOCOL, TOKEN_ENV, heartbeat_timeout

if TYPE_CHECKING:
    from .server import Service

CONNECT_TIMEOUT_S = 60.0
# How long a rank waits for the others to connect (MPI_Init has already waited for them all).
WELCOME_TIMEOUT_S = 120.0
# After telling the service that its deadline passed, how long a rank waits for the service's
# report and abort before it reports on its own.
FIRE_WAIT_S = 10.0
ACK_WAIT_S = 5.0
# After its goodbye, how long a rank waits for the service to have read everything it sent
# (the service closes its side then; Client._close_after_the_service_read_all).
BYE_DRAIN_S = 30.0


class ServiceError(XlaDistError):
    """The service refused this rank or a request failed; the text says why (a rank's
    failure names the rank: runtime/rank.failure_text)."""

    plain = True


class Client:
    """This rank's connection to the service (see the module docstring)."""

    def __init__(self, address: str, token: str, rank: int, size: int, *, hosted=None):
        self.address, self.token, self.rank, self.size = address, token, rank, size
        self.hosted = hosted            # the Service, when this process hosts it (rank 0)
        self.host = host_name()
        self.placement = None
        self.run = 0                    # this process's runs so far (placed): in its records
        self._placed = None             # the placement the service was last told
        self.finished = False
        self.failure: str | None = None  # the error of a run that raised (mark "failed")
        # The start-up step this rank is in before its program begins (`starting`), None
        # once it has begun (any `mark`): a hang report says "starting: STEP" of it.
        self.setup: str | None = None
        self.closing = False
        self.service_closed = False
        self.welcome: dict | None = None
        self.target: dict | None = None
        self.prints = False
        self.has_job = False
        self._ids = itertools.count(1)
        self._replies: dict[int, list] = {}
        self._failing_ids: set[int] = set()  # `failed` messages waiting for their `ack`
        self._cond = threading.Condition()
        self._last_heard = time.monotonic()
        self._timeout = heartbeat_timeout()
        self.sock = None
        self._reader: threading.Thread | None = None
        self._send_lock = threading.Lock()
        # Orders of a persistent cluster (`order` messages: run this, end), for its rank loop
        # (xladist/runtime/cluster_rank.py), as (meta, payload); None once the service has
        # gone.
        self.orders: queue.SimpleQueue = queue.SimpleQueue()

    # ---- start ---------------------------------------------------------------------------------
    def start(self) -> Client:
        try:
            # Every address a rank gets is of a Service already listening (its constructor
            # listens before the address exists): refused = its process is gone (a
            # launcher killed by SIGKILL while the ranks start), so no 60 s of retries.
            self.sock = wire.connect(self.address, CONNECT_TIMEOUT_S, refused_is_final=True)
        except OSError as e:
            raise ServiceError(
                f"cannot reach the coordination service at {self.address} from "
                f"{self.host} ({e.strerror or e}): the launching host must accept TCP "
                f"connections from every host on that port (set XLADIST_COORD_HOST / "
                f"XLADIST_COORD_PORT, launch/README.md)") from None
        self.sock.settimeout(None)
        wire.send(self.sock, wire.HELLO, {
            "role": "rank", "token": self.token, "protocol": PROTOCOL, "version": __version__,
            "rank": self.rank,
            "size": self.size, "host": self.host, "pid": os.getpid(), "target": _target()})
        self._reader = threading.Thread(target=self._read, name="xladist-service-reader",
                                        daemon=True)
        self._reader.start()
        with self._cond:
            if not self._cond.wait_for(lambda: self.welcome is not None, WELCOME_TIMEOUT_S):
                raise ServiceError(f"the coordination service at "
                                   f"{self.address} did not hear from all {self.size} ranks "
                                   f"within {WELCOME_TIMEOUT_S:g} s")
        w = self.welcome
        if w.get("refused"):
            raise ServiceError(f"the coordination service at {self.address} refused this "
                               f"rank: {w['refused']}")
        if w.get("error"):
            if w.get("prints"):  # the service said it, once: go, with an input error's code
                from xladist.errors import InputError
                deadline.everyone_goes()
                deadline.abort_job("", InputError.exit_code, with_rank=False)
            raise ServiceError(w["error"])
        self.target = w.get("target")
        self.prints = bool(w.get("prints"))
        self.has_job = bool(w.get("job"))
        if self.target is not None:
            from xladist.compiler.target import JOB_TARGET_ENV, job_target_text
            os.environ[JOB_TARGET_ENV] = job_target_text(
                self.target["cpu"], self.target["features"], self.target["width"])
        deadline.set_messenger(self.failing)
        from xladist.compiler import kernel_cache
        kernel_cache.set_remote(self.fetch_code)
        threading.Thread(target=self._beat, name="xladist-service-heartbeat",
                         daemon=True).start()
        return self

    # ---- sending -----------------------------------------------------------------------------
    def send(self, op: str, arrays=(), blob=None, timeout: float | None = 30.0,
             **fields) -> bool:
        if self.sock is None:
            return False
        try:
            with self._send_lock:
                wire.send_msg(self.sock, op, timeout, arrays, blob, **fields)
            return True
        except (OSError, ValueError):
            return False

    def request(self, what: str, timeout: float | None = None, arrays=(), blob=None,
                **fields):
        """Ask the service; returns (meta, payload) of its reply. ServiceError when it
        says no; TimeoutError past `timeout` (None: wait as long as the service lives)."""
        ident = next(self._ids)
        with self._cond:
            self._replies[ident] = []
        if not self.send("req", arrays, blob, timeout=timeout or 60.0, id=ident, what=what,
                         **fields):
            raise ServiceError(f"lost the coordination service at {self.address} while "
                               f"asking for {what}")
        with self._cond:
            ok = self._cond.wait_for(lambda: self._replies.get(ident), timeout)
            got = self._replies.pop(ident, None)
        if not ok or not got:
            raise TimeoutError(f"the coordination service did not send {what} within "
                               f"{timeout:g} s")
        meta, payload = got[0]
        if meta.get("lost"):
            raise ServiceError(f"lost the coordination service at {self.address} while "
                               f"asking for {what}")
        if not meta.get("ok"):
            raise ServiceError(meta.get("error", f"the service could not serve {what}"))
        return meta, payload

    def fetch_code(self, key: str) -> bytes | None:
        """Object code the launching process compiled for this job (compile_once.py)."""
        from ..compile_once import WAIT_S
        meta, blob = self.request("code", WAIT_S, key=key)
        return blob if meta.get("found") else None

    # ---- the reader ----------------------------------------------------------------------------
    def _read(self) -> None:
        sock = self.sock
        try:
            while True:
                got = wire.recv(sock)
                if got is None:
                    break
                self._last_heard = time.monotonic()
                _kind, meta, payload = got
                self._on(meta, payload)
        except (OSError, ValueError):
            pass
        self._gone("the connection ended")

    def _on(self, meta: dict, payload) -> None:
        op = meta.get("op")
        if op in ("rep", "ack"):
            with self._cond:
                slot = self._replies.get(meta.get("id"))
                if slot is not None:
                    slot.append((meta, payload))
                self._cond.notify_all()
        elif op == "where":
            self.send("here", timeout=2.0, id=meta.get("id"), rec=self._where())
        elif op == "save":
            # The job is ending: save what the abort hooks save now, while no rank has
            # aborted yet (the service sends `abort` once every rank said so).
            deadline.run_abort_hooks()
            self.send("saved", timeout=2.0)
        elif op == "abort":
            # The service ended the job (and said why): save what the abort hooks save, go
            # -- when every rank goes (server.EXIT_TOGETHER_S).
            at = time.monotonic() + float(meta.get("after", 0.0))
            with self._cond:  # this rank's own failure, said meanwhile: its answer is this
                for ident in self._failing_ids:
                    self._replies.get(ident, []).append(({"after": at - time.monotonic()},
                                                         None))
                self._cond.notify_all()
            deadline.run_abort_hooks()
            deadline.everyone_goes()
            time.sleep(max(0.0, at - time.monotonic()))
            deadline.abort_job("", int(meta.get("code", 1)), with_rank=False)
        elif op == "closing":
            self.service_closed = True  # its end is the end of the job, not a failure
            self.orders.put(None)
        elif op == "order":
            self.orders.put((meta, payload))
        elif op in ("welcome", "refused"):
            with self._cond:
                self.welcome = meta if op == "welcome" else {"refused": meta.get("reason")}
                self._cond.notify_all()

    def _where(self) -> dict:
        if self.failure is not None:  # the main thread has left the run: not its position
            return self._record({"state": "failed", "error": self.failure})
        wd = deadline.watchdog
        cur = wd._resolved(wd.current)  # noqa: SLF001 -- the daemon's own reading of the cell
        return self._record(wd.position(cur))

    def _record(self, pos: dict) -> dict:
        """`pos` as the record the service keeps: with this rank's placement, its run and
        its deadline (for the report of a wait for a rank that finished, server.py). Not
        waiting before its program has begun: 'starting' (`starting`), not 'computing'."""
        if self.setup is not None and pos["state"] == "computing":
            pos = {"state": "starting", "doing": self.setup, "loops": []}
        return dict(record(self.placement, pos, finished=self.finished, run=self.run),
                    timeout=deadline.watchdog.timeout_s)

    def _gone(self, why: str) -> None:
        with self._cond:
            for slot in self._replies.values():
                slot.append(({"lost": True}, None))
            self._cond.notify_all()
            if self.welcome is None:
                self.welcome = {"refused": f"the service closed the connection ({why})"}
        self.orders.put(None)
        if self.closing or self.service_closed or \
                self.hosted is not None and self.hosted.closed:
            return
        if self.welcome.get("error") and self.welcome.get("prints"):
            # The service refused the job, said so and let every rank go: under a bare
            # mpiexec its host, rank 0, may end before this rank does (start() aborts).
            return
        deadline.abort_job(
            f"lost the coordination service at {self.address} ({why}): the process hosting "
            "it -- the launching process, or rank 0 under a bare mpiexec -- has ended or its "
            "host is unreachable", 1)

    def _beat(self) -> None:
        while not self.closing:
            time.sleep(HEARTBEAT_S)
            if self.closing:
                return
            self.send("hb", timeout=HEARTBEAT_S * 5)
            quiet = time.monotonic() - self._last_heard
            if self._timeout > 0 and quiet > self._timeout and not self.closing:
                self._gone(f"nothing heard for {quiet:.0f} s")
                return

    # ---- the deadline's monitor --------------------------------------------------------------
    def placed(self, placement) -> None:
        """A program placed on this rank starts (the service is told where, unless it was
        told so already: a cluster's rank runs one module many times)."""
        self.placement = placement
        self.run += 1
        self.finished = False
        self.failure = None
        where = dict(device=placement.device, replica=placement.replica,
                     partition=placement.partition)
        if where != self._placed:
            self._placed = where
            self.send("placed", **where)

    def publish(self, pos: dict) -> None:
        self.send("pos", timeout=2.0, rec=self._record(pos))

    def starting(self, step: str | None) -> None:
        """This rank's program has not begun: it is `step` ("compiling the module"); None:
        no more (a cluster's load ended). No message: the service hears it only when it
        asks where every rank is (`where`, for a hang report), which would otherwise call
        the rank 'computing'."""
        self.setup = step

    def mark(self, state: str, tell: bool = True, error: str | None = None) -> None:
        """The main thread's own news: 'computing' when the program starts, 'finished', or
        'failed' with its `error` (watchdog.failure) when the run raised: a caller that goes
        on (a script under mpiexec) leaves the others waiting, and the hang report must not
        call it 'computing'. `tell=False`: for this rank's own answers (`where`) only -- a
        cluster's service knows it from its order and the call's answer
        (server.RankState.mark)."""
        self.setup = None
        if state == "finished":
            self.finished = True
        self.failure = error if state == "failed" else None
        if tell:
            self.publish({"state": state, "loops": [], "error": error})

    def fire(self, pos: dict, timeout: float) -> str | None:
        """This rank's deadline passed: the service writes the report and ends the job (this
        process is aborted by the reader thread). Only when the service does not act, this
        rank's own view is returned for the watchdog to print."""
        self.send("deadline", timeout=5.0, deadline_s=timeout, rec=record(
            self.placement, pos, finished=self.finished))
        time.sleep(FIRE_WAIT_S)
        from ..watchdog import format_report
        mine = record(self.placement, pos, finished=self.finished, host=self.host)
        return (format_report({self.rank: mine}, self.rank, timeout, self.size) +
                f"\n(the coordination service at {self.address} did not answer: only this "
                "rank's position is known)")

    def failing(self, text: str, code: int) -> bool:
        """Deliver a failing rank's last words before it aborts the job; True when they are
        taken care of. A service that prints (the launching process) gets them; else this
        rank prints them itself first -- before the service, told of the failure, ends
        the job -- and the service only learns that this rank did not die silently."""
        if self.sock is None:
            return False
        if not self.prints:
            import sys
            try:
                sys.stderr.write(text.rstrip("\n") + "\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            time.sleep(deadline.ABORT_FLUSH_S)
        ident = next(self._ids)
        with self._cond:
            self._replies[ident] = []
            self._failing_ids.add(ident)
        if not self.send("failed", timeout=ACK_WAIT_S, id=ident, text=text, code=code):
            return not self.prints
        with self._cond:
            self._cond.wait_for(lambda: self._replies.get(ident), ACK_WAIT_S)
            got = self._replies.pop(ident, None)
        if got and not got[0][0].get("lost"):  # the others go too, at this moment
            deadline.everyone_goes()              # (server.EXIT_TOGETHER_S)
            time.sleep(max(0.0, float(got[0][0].get("after", 0.0))))
        return not self.prints or (bool(got) and not got[0][0].get("lost"))

    # ---- the end -----------------------------------------------------------------------------
    def bye(self) -> None:
        """This rank is done (its program and everything it hands over): it is not waited
        for any more. Called at exit at the latest, before MPI_Finalize."""
        if self.closing:
            return
        self.closing = True
        deadline.set_messenger(None)
        from xladist.compiler import kernel_cache
        kernel_cache.set_remote(None)
        self.send("bye", timeout=5.0)
        self._close_after_the_service_read_all()

    def _close_after_the_service_read_all(self) -> None:
        """Close this end only once the service has read everything sent on it. A socket
        closed with unread data in its receive buffer (a heartbeat or ping of the service's
        the reader had not taken yet) sends a reset instead of an end of stream, and the
        reset discards what the service had not read yet: this rank's last outputs and its
        goodbye. Under load that was 1 warm run in 10-15 ending "rank 1 ... ended without a
        word ... finished its program" with its results lost. So: end our sending side (the
        service reads to the end, then closes its side), let the reader take whatever comes
        until then, and close -- waiting at most BYE_DRAIN_S for a service that never does."""
        sock = self.sock
        if sock is None:
            return
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(BYE_DRAIN_S)
        try:
            sock.close()
        except OSError:
            pass


_client: Client | None = None


def current() -> Client | None:
    return _client


def _target() -> dict:
    """This rank's target_info(), or {"refused": why} when this host cannot run the CPU
    XLADIST_TARGET_CPU names: the service says so once, naming the rank and its host."""
    from xladist.errors import InputError
    try:
        return target_info()
    except InputError as e:
        return {"refused": str(e)}


def for_rank(comm) -> Client:
    """This process's connection to its job's service (made once; see the module doc)."""
    global _client
    if _client is not None:
        return _client
    rank, size = comm.Get_rank(), comm.Get_size()
    address, token = os.environ.get(ADDRESS_ENV), os.environ.get(TOKEN_ENV)
    hosted = None
    if not address:
        if rank == 0:
            from .server import Service  # only rank 0 of a bare launch hosts the service
            # (the deadline of a script's xladist.run under mpiexec: its timeout=)
            hosted = Service(size, prints=False, timeout_setting="timeout=")
            address, token = hosted.address, hosted.token
            atexit.register(hosted.close)  # after this rank's own goodbye (atexit: LIFO)
        with deadline.waiting("sharing the coordination service's address (rank 0 hosts it)"):
            address, token = comm.bcast((address, token), root=0)
    _client = Client(address, token or "", rank, size, hosted=hosted).start()
    atexit.register(_client.bye)  # before MPI_Finalize (registered earlier, so run later)
    return _client


def host_service(service: Service, comm) -> Client:
    """Rank 0 of a bare launch hosts `service` (one that serves a job); every rank connects.
    Collective: call it on every rank, with `service` None except on rank 0."""
    global _client
    rank = comm.Get_rank()
    address = token = None
    if rank == 0:
        address, token = service.address, service.token
    with deadline.waiting("sharing the coordination service's address (rank 0 hosts it)"):
        address, token = comm.bcast((address, token), root=0)
    _client = Client(address, token, rank, comm.Get_size(),
                     hosted=service if rank == 0 else None).start()
    atexit.register(_client.bye)
    return _client
