"""A job served by the coordination service: what the ranks ask for and what they hand in.

The launching side (`xladist run`'s launcher, `xladist.run` from a plain process, or rank 0
under a bare mpiexec) describes the run once, as a `JobHost`; every rank then takes it from
the service (xladist/runtime/rank_main.py), over the network:

* `job`: the module (HLO text, or a .xlx file's bytes) and the run's settings, as JSON;
* `inputs`: one device's arguments, read from the inputs where they are (a row of each npz
  array, or a device's own file) in pieces, or from the caller's arrays -- a rank gets only
  its own, and the launching host reads each row once;
* `host`: a host transfer (`is_host_transfer` send/recv) served by the callbacks or the
  .npz files of the launching process;
* infeed and outfeed streams on connections of their own (feeds/host.py), so the
  launching process's iterables, callbacks and files serve ranks on every host;
* `outputs` (every output of a rank in one message), `trace`, `stats`: results, written
  where the user asked (outputs.py) and statistics printed here.

Nothing the ranks send is unpickled; inputs and items are raw arrays described in JSON.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .. import wire
from ..feeds.items import from_tree, tree_of
from .outputs import Outputs, Traces


class JobHost:
    """One job as the service serves it (see the module docstring).

    `module_text` (or `xlx`: the bytes of a compiled .xlx file; `packed`: the module this
    process parsed, hlo/packed.py, which ranks load instead of parsing the text again),
    `n` ranks, `options`: the
    rank's settings (JSON: backend, timeout, verify, device_assignment, ...). `inputs`: an
    io.Inputs, a list over devices of argument lists, or None. `outputs`: an Outputs.
    `trace`: path of the merged trace or None. `stats`: collect per-rank time splits.
    `feeds`: (source, sink factory, prefetch) for served feeds -- source/sink objects of
    feeds/pipeline.py opened here, per rank -- plus `feed_fn` (a function the ranks import).
    `host`: an object with host_send/host_recv (channels_host.py) or None.
    """

    def __init__(self, n: int, *, module_text: str | None = None, xlx: bytes | None = None,
                 packed: bytes | None = None, options: dict | None = None, inputs=None, outputs: Outputs | None = None,
                 trace: str | None = None, stats: bool = False, infeed=None, outfeed=None,
                 infeed_fn: str | None = None, prefetch: int = 8, host=None):
        self.n = n
        self.module_text, self.xlx, self.packed = module_text, xlx, packed
        self.options = dict(options or {})
        self.inputs = inputs
        self.outputs = outputs
        self.traces = Traces(n, trace) if trace else None
        self.stats: dict[int, dict] = {} if stats else None
        self.infeed, self.outfeed, self.infeed_fn = infeed, outfeed, infeed_fn
        self.prefetch = prefetch
        self.host = host
        self.errors: list[tuple[int, str, BaseException]] = []  # user callbacks that raised
        self.outfeed_what = "the outfeed"  # its sinks' kind: callback or file
        self._user_lock = threading.Lock()  # callbacks of the user run one at a time
        self._streaming: dict[int, int] = {}  # rank -> its outfeed streams being taken
        self._streams_done = threading.Condition()
        self._in_hand = 0        # outfeed items the consumer (callback, file) holds now
        self._handed_at = 0.0    # when it last gave one back (time.monotonic)
        self._named_late: set[int] = set()  # ranks drain_outfeeds recorded
        self._said: set[int] = set()  # ids of the errors finish raised
        self._sinks: dict[int, tuple[int, _Watched]] = {}  # open sinks: id -> (rank, sink)
        self._finished = False
        self.trace_note = None

    # ---- what a rank asks --------------------------------------------------------------------
    def describe(self) -> dict:
        spec = dict(self.options)
        spec.update(
            xlx=self.xlx is not None, packed=self.xlx is None and self.packed is not None,
            trace=self.traces is not None,
            stats=self.stats is not None, outputs=self.outputs is not None,
            infeed="served" if self.infeed is not None else None, infeed_fn=self.infeed_fn,
            outfeed="served" if self.outfeed is not None else None, prefetch=self.prefetch,
            host_send=getattr(self.host, "host_send", None) is not None,
            host_recv=getattr(self.host, "host_recv", None) is not None)
        return spec

    def request(self, st, what: str, meta: dict, payload):
        if what == "job":
            blob = self.xlx if self.xlx is not None else self.packed if self.packed \
                is not None else (self.module_text or "").encode()
            return {"spec": self.describe()}, (), blob
        if what == "inputs":
            return self._inputs(int(meta["device"]))
        if what == "host":
            return self._host(st, meta, payload)
        raise LookupError(f"the service has no {what!r} for this job")

    def _inputs(self, device: int):
        if self.inputs is None:
            return {"tokens": [], "count": 0}, (), None
        if isinstance(self.inputs, list):
            from xladist.semantics.values import TOKEN
            args = self.inputs[device]
            tokens = [i for i, a in enumerate(args) if a is TOKEN]
            arrays = [np.asarray(a) for a in args if a is not TOKEN]
            return {"tokens": tokens, "count": len(args)}, arrays, None
        parts = self.inputs.parts(device)
        tokens = [i for i, p in enumerate(parts) if p is None]
        streams = [wire.Streamed(dtype, dims, pieces) for p in parts if p is not None
                   for dtype, dims, pieces in [p]]
        return {"tokens": tokens, "count": len(parts)}, streams, None

    def _host(self, st, meta: dict, payload):
        rank, channel = st.rank, meta.get("channel")
        with self._user_lock:
            if meta.get("dir") == "send":
                value = from_tree(meta["tree"], payload or [])
                self.host.host_send(rank, channel, value)
                return {}, (), None
            value = self.host.host_recv(rank, channel)
        tree, leaves = tree_of(value)
        return {"tree": tree}, leaves, None

    # ---- what a rank hands in ------------------------------------------------------------------
    def receive_outputs(self, st, meta: dict, size: int, seen) -> None:
        """All of a rank's outputs, one message (`outputs`: their count; their arrays on the
        stream, `size` bytes): each read to where it goes, then the device is done."""
        if self.outputs is None:  # not asked for: a defect of the rank's code
            wire.copy_payload(st.conn.sock, size, lambda piece: seen())  # stay in step
            raise RuntimeError(f"rank {st.rank} sent outputs to a job that takes none")
        device = st.place.get("device", st.rank)
        leaves = meta.get("leaves", [])
        for i, leaf in enumerate(leaves):
            self.outputs.receive(device, i, {"leaves": [leaf]}, wire.leaf_nbytes(leaf),
                                 st.conn.sock, seen)
        self.outputs.device_done(device, len(leaves))

    def on_message(self, st, op: str, meta: dict, payload) -> None:
        if op == "trace" and self.traces is not None:
            self.traces.receive(st.rank, payload or b"[]", bool(meta.get("partial")))
        elif op == "stats" and self.stats is not None:
            self.stats[st.rank] = meta["summary"]

    # ---- feeds ---------------------------------------------------------------------------------
    def serve_feed(self, conn, meta: dict) -> None:
        from ..feeds.host import consume, produce
        placement = _Placement(meta)
        if meta["role"] == "feed-in" and self.infeed is not None:
            produce(conn.sock, self.infeed, placement, self._fail("infeed"))
        elif meta["role"] == "feed-out" and self.outfeed is not None:
            rank = placement.rank
            made = self.outfeed()
            self.outfeed_what = getattr(made, "what", self.outfeed_what)
            sink = _Watched(made, self)
            with self._streams_done:
                self._streaming[rank] = self._streaming.get(rank, 0) + 1
                self._sinks[id(sink)] = (rank, sink)
            try:
                consume(conn.sock, sink, placement, self._user_lock, self._fail("outfeed"))
            finally:
                with self._streams_done:
                    self._sinks.pop(id(sink), None)
                    self._streaming[rank] -= 1
                    if not self._streaming[rank]:
                        del self._streaming[rank]
                    self._streams_done.notify_all()

    def drain_outfeeds(self) -> None:
        """The job is over (every rank has ended): let the outfeed streams still being
        taken -- items a rank sent before it failed or was killed, still in its socket
        while the callback or file takes the ones before -- reach the user before the
        service closes their connections. At most the run's deadline (`timeout`, 0: none);
        a rank whose items are still arriving then is recorded as an outfeed failure (once:
        the service's close and a cluster's call may both drain a call's streams)."""
        timeout = self.deadline_s
        with self._streams_done:
            if self._streams_done.wait_for(lambda: not self._streaming, timeout):
                return
            late = sorted(set(self._streaming) - self._named_late)
            self._named_late.update(late)
        from xladist.errors import ExecutionError
        for rank in late:
            self._fail("outfeed")(rank, ExecutionError(
                f"the outfeed consumer in this process did not take rank {rank}'s last "
                f"outfeed items within {timeout:g} s of the job's end (the deadline; raise "
                f"it with --timeout / timeout=): the items not taken by then are lost"))

    def close_outfeeds(self, wait: float = 5.0) -> None:
        """This process is about to be killed (rank 0 of a bare mpiexec launch, which hosts
        the job, in its abort hook): every outfeed sink still open is closed now, writing the
        items that arrived (an --outfeed file), as the end of its stream would have. Before,
        the process died with only the file's .part log. `wait`: for a callback under way."""
        with self._streams_done:
            sinks = list(self._sinks.values())
        failures = []
        for rank, sink in sinks:
            if not self._user_lock.acquire(timeout=wait):
                break  # a callback that does not return: the abort goes on
            try:
                sink.close(failed=True)
            except Exception as e:  # noqa: BLE001 - e.g. the file cannot be written
                failures.append((rank, e))
            finally:
                self._user_lock.release()
        for rank, e in failures:  # (not under the lock: recording takes it)
            self._fail("outfeed")(rank, e)

    @property
    def deadline_s(self) -> float | None:
        """The run's deadline (`timeout`; None: 0, no deadline): how long this process waits
        for the ranks' outfeed items after the end of their program."""
        return float(self.options.get("timeout") or 0) or None

    def _handing(self, delta: int) -> None:
        with self._streams_done:
            self._in_hand += delta
            self._handed_at = time.monotonic()

    def outfeed_quiet_since(self) -> float | None:
        """None while the outfeed consumer (the user's callback, an npz file) holds an item;
        else when it last gave one back (time.monotonic; 0.0: never). A rank whose items it
        is still taking is waiting for this process, not stuck (cluster._Calls.wait)."""
        with self._streams_done:
            return None if self._in_hand else self._handed_at

    def outfeed_failed(self, rank: int, e: BaseException) -> str:
        """A failure of this process's outfeed consumer for `rank`, as xladist.run and a
        Cluster's call say it: the user's callback raised, or the npz file could not be
        kept (the sinks' `what`)."""
        return f"{self.outfeed_what} for rank {rank} raised {type(e).__name__}: {e}"

    def _fail(self, what: str):
        def record(rank: int, error: BaseException) -> None:
            with self._user_lock:
                self.errors.append((rank, what, error))
        return record

    # ---- the end ---------------------------------------------------------------------------------
    def finish(self, failed: bool):
        """After the ranks have gone: outputs written (or returned), the trace, stats.
        Returns the outputs for Outputs(mode="memory"), else None. Once only (rank 0 of a
        bare launch also calls it from its abort hook). Every result is attempted; one
        that could be neither written nor rescued (files.deliver) -- also a `{device}`
        output file written when its device ended (Outputs.lost), and, after a success,
        an npz outfeed that could not -- is an OutputError at the end, naming them all."""
        if self._finished:
            return None
        self._finished = True
        from xladist.errors import OutputError
        lost: list[str] = []  # results that could be neither written nor rescued

        def attempt(step):
            """One result; the next ones are still written when it cannot be."""
            try:
                return step()
            except OutputError as e:
                lost.append(str(e))
                return None
        finish = getattr(self.host, "finish", None)
        if finish is not None:  # --host-send files: also what a failed run sent
            attempt(finish)
        note = attempt(lambda: self.traces.finish(failed)) if self.traces is not None \
            else None
        result = None
        if self.outputs is not None:
            if failed or self.outputs.missing():
                self.outputs.discard()
            else:
                result = attempt(self.outputs.finish)
            lost.extend(self.outputs.lost)  # `{device}` files, written as each device ended
        if self.stats and not failed:
            from ..trace import format_summary
            import sys
            print(format_summary([self.stats[r] for r in sorted(self.stats)]),
                  file=sys.stderr)
        self.trace_note = note
        if not failed:
            # An npz outfeed that could not be written or rescued (its rank was told its
            # items were taken: they were, and then lost here). After a failure the run's
            # error is raised instead, naming it (api._callback_errors; xladist run prints
            # outfeed_failures).
            with self._user_lock:
                said = [e for _, what, e in self.errors
                        if what == "outfeed" and isinstance(e, OutputError)]
                self._said.update(map(id, said))
            lost.extend(map(str, said))
        if lost:
            raise OutputError("; ".join(lost))
        return result

    def abandon(self) -> None:
        """The launch itself raised (Ctrl-C, a signal, no mpiexec): no result is written and
        the temporary folders of the outputs and the trace go (each interrupted `xladist run
        --outputs` or traced xladist.run left one in TMPDIR)."""
        self._finished = True
        if self.outputs is not None:
            self.outputs.discard()
        if self.traces is not None:
            self.traces.discard()

    def finish_failed(self) -> str:
        """`finish(failed=True)` for a caller that raises the run's own error (xladist.run,
        a Cluster's call): what could not be kept is added to that error, never raised in
        its place (the run's failure must not be hidden behind a lost trace)."""
        from xladist.errors import OutputError
        try:
            self.finish(True)
        except OutputError as e:
            return f"\n(and some results could not be kept: {e})"
        return ""

    def outfeed_failures(self) -> list[str]:
        """One line per failure of this process's outfeed consumers (`errors`: a callback
        or an npz file's writer that raised, items not taken by the deadline) that
        `finish` did not raise, naming the rank: for `xladist run`, which has no other way
        to say them (xladist.run and a Cluster's call put `errors` in their own error)."""
        from xladist.errors import XlaDistError
        with self._user_lock:
            errors = [(rank, e) for rank, what, e in self.errors
                      if what == "outfeed" and id(e) not in self._said]
        return [f"rank {rank}'s outfeed: " + (str(e) if isinstance(e, XlaDistError) else
                                              f"{type(e).__name__}: {e}; items may be "
                                              f"missing from it")
                for rank, e in errors]


class _Watched:
    """A rank's outfeed sink, telling its job while the consumer holds an item or writes
    the items' file (JobHost.outfeed_quiet_since)."""

    def __init__(self, sink, job: JobHost):
        self.sink, self.job = sink, job

    def open(self, placement) -> None:
        self.sink.open(placement)

    def write(self, item) -> None:
        self.job._handing(+1)
        try:
            self.sink.write(item)
        finally:
            self.job._handing(-1)

    def close(self, *, failed: bool) -> None:
        self.job._handing(+1)  # an npz file being written: the items are still in hand
        try:
            self.sink.close(failed=failed)
        finally:
            self.job._handing(-1)


class _Placement:
    """Who a feed connection serves (what sources and sinks are opened with)."""

    def __init__(self, meta: dict):
        self.rank = int(meta["rank"])
        self.replica = int(meta.get("replica", 0))
        self.partition = int(meta.get("partition", 0))
        self.device = int(meta.get("device", self.rank))
