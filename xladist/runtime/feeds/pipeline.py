"""Per-rank infeed and outfeed: host data pipelines for replicated programs (issue 6).

Every rank has its own infeed stream and its own outfeed stream (docs/reference/collective-semantics.md
section E). One `Feeds` object per rank serves both; the DeviceContext of the run
(`MpiDeviceContext`, or `SingleDeviceContext` for -n 1) forwards `infeed(instr)` and
`outfeed(instr, data)` to it, and the rank calls `start(placement, module)` before the
program runs and `finish()` after it (or `abort()` when it failed).

Infeed: a producer thread per rank pulls items from a *source* and puts them into a
bounded `queue.Queue` (`prefetch` items deep). When the queue is full the producer
blocks (backpressure: a source is never read further ahead than that); the device side
blocks in `queue.get(timeout=...)` — a real blocking wait, no polling — with the run's
deadline (`--timeout`; 0 waits forever). Items are checked against the infeed's shape on
the device side, where the instruction is known. Infeeds take items in the total order
that their tokens give (order.py refuses modules without one); an empty-tuple
infeed takes no item and is not counted (E.22a).

Outfeed: each outfeed's data goes to a *sink* synchronously, in program order, as an
owned copy. No item is ever dropped: a callback has been called before the program goes
on; the npz writer appends every item to a crash-safe log at once (npz.py), writes
the file on `finish()` and on `abort()` (a rank that fails flushes before the job is
aborted), and the launcher turns the log of a rank killed by another rank's abort into
the file after the job.

Sources: a Python iterable per rank (a callable `f(rank, replica, partition) ->
iterable`, or a list with one iterable per rank), a user function named
`package.module:function` with the same signature (imported in the rank itself), or an
npz file per rank (a path template with {rank}, {replica}, {partition}). Sinks: a
callback `g(rank, replica, partition, item)` or an npz path template.

`xladist.run` from a plain Python process starts the ranks under mpiexec, where a lambda
cannot follow. There the *launching process* hosts the Python sources and callbacks
(host.py) through the job's coordination service, over TCP: each rank, on whatever host,
connects once for its infeed and once for its outfeed, and items stream as raw array
bytes with a small JSON header. The launcher's producer runs ahead of the rank only as
far as the socket buffer and the rank's prefetch queue allow (blocking sends:
backpressure across the process boundary), and outfeed items cross the socket before the
rank's program goes on, so a rank that dies has already delivered them. npz paths are
served the same way (read and written on the launching host); named functions need no
host: the ranks import them. (`xladist.run` called in every rank of an `mpiexec` job has
no launching process: each rank opens its own npz paths.)

Errors name the rank (replica, partition), the infeed instruction and the item index:
"infeed exhausted on rank 1 at infeed.3 (item 17)", a shape, dtype or tuple mismatch
(expected vs given), a deadline passed on an empty queue, or the exception the source
raised. The rank reports it once and the job is aborted (xladist/runtime/rank.py).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import queue
import sys
import threading
import traceback

from xladist.environment import check_count
from xladist.errors import ExecutionError, InputError, OutputError

from . import npz
from .items import ItemMismatch, conform, copy_item, is_empty_tuple, owned

DEFAULT_PREFETCH = 8


# ---- sources -------------------------------------------------------------------------
class IterableSource:
    """Python iterables in this process: `factory(rank, replica, partition) -> iterable`,
    or a list/tuple with one iterable per rank."""

    copies = True

    def __init__(self, factory):
        self.factory = factory

    def open(self, placement):
        if callable(self.factory):
            return self.factory(placement.rank, placement.replica, placement.partition)
        per_rank = list(self.factory)
        if not 0 <= placement.rank < len(per_rank):
            raise InputError(f"the infeed list has {len(per_rank)} iterables, one per rank; "
                             f"there is none for rank {placement.rank}")
        return per_rank[placement.rank]

    def describe(self) -> str:
        return "the infeed iterable"


def _import_as_ranks_do(mod_name: str):
    """Import `mod_name` with the current folder on sys.path, as the ranks have it (they run
    `python -m ...` in the launching folder). The launcher's check must find what they
    find, also when it runs as pip's `xladist` script, whose sys.path[0] is its bin/ folder
    instead; the folder is taken off again, so a Python caller's sys.path stays its own."""
    try:
        here = os.getcwd()
    except OSError:  # the folder was removed: nothing to add
        return importlib.import_module(mod_name)
    added = here not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        return importlib.import_module(mod_name)
    finally:
        if added:
            sys.path.remove(here)


def load_function(spec: str, option: str = "--infeed-fn"):
    """The callable named by `package.module:function` (dots after ':' walk attributes);
    errors name `option`, the flag that gave it."""
    mod_name, sep, attr = str(spec).partition(":")
    if not sep or not mod_name or not attr:
        raise InputError(f"{option} {spec!r}: expected package.module:function")
    try:
        obj = _import_as_ranks_do(mod_name)
    except ImportError as e:
        from xladist.runtime.launcher import outside_launch_dir
        raise InputError(f"{option} {spec!r}: cannot import {mod_name}{outside_launch_dir()}: "
                         f"{e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(f"{option} {spec!r}: {mod_name} has no attribute {attr}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InputError(f"{option} {spec!r} is not callable")
    return obj


class FunctionSource:
    """`package.module:function`, imported where it runs (picklable: only the name)."""

    copies = True

    def __init__(self, spec: str):
        self.spec = spec

    def open(self, placement):
        fn = load_function(self.spec)
        return fn(placement.rank, placement.replica, placement.partition)

    def describe(self) -> str:
        return f"the infeed function {self.spec}"


class NpzSource:
    """One npz file per rank (npz.py format), read lazily item by item."""

    copies = False  # np.load hands out fresh arrays

    def __init__(self, template: str):
        self.template = str(template)
        self.path = None

    def open(self, placement):
        self.path = npz.format_path(self.template, placement)
        return npz.read_items(self.path)

    def describe(self) -> str:
        return f"the infeed file {self.path or self.template}"


# ---- sinks ---------------------------------------------------------------------------
class CallbackSink:
    """`callback(rank, replica, partition, item)` in this process, called in order."""

    what = "the outfeed callback"  # what failed, in an error (JobHost.outfeed_failed)

    def __init__(self, callback):
        self.callback = callback
        self.placement = None

    def open(self, placement) -> None:
        self.placement = placement

    def write(self, item) -> None:
        p = self.placement
        self.callback(p.rank, p.replica, p.partition, item)

    def close(self, *, failed: bool) -> None:
        pass


class NpzSink:
    """One npz file per rank, written on close; every item is also logged on arrival.

    The items are kept in memory, and close delivers them, or rescues them to a fresh
    folder when the destination cannot be written any more (npz.write_items). The log only
    guards against a killed process, so a log that cannot be opened or appended to (its
    folder removed or replaced since the run's start, a full disk) is dropped, not an error:
    the items still reach the user through close."""

    what = "the outfeed file"

    def __init__(self, template: str):
        self.template = str(template)
        self.path = None
        self.items: list = []
        self.log = None
        self.opened = False

    def open(self, placement) -> None:
        self.path = npz.format_path(self.template, placement)
        self.items = []
        self.opened = True
        try:
            self.log = npz.PartLog(self.path)
        except OutputError:
            self.log = None

    def write(self, item) -> None:
        self.items.append(item)  # first: a failed log must not lose the item
        if self.log is None:
            return
        try:
            self.log.append(item)
        except OSError:
            log, self.log = self.log, None
            try:
                log.close(remove=True)
            except OSError:
                pass  # (its descriptor may be what failed)

    def close(self, *, failed: bool) -> None:
        if not self.opened:
            return
        self.opened = False
        npz.write_items(self.path, self.items)  # raises only when the rescue failed too
        if self.log is not None:  # after: the log is the last copy while that can fail
            self.log.close(remove=True)
            self.log = None

    def recover(self, placements) -> None:
        """After a failed job: write the file of every rank that left only a log."""
        for p in placements:
            npz.recover(npz.format_path(self.template, p))


# ---- the infeed queue -------------------------------------------------------------------
class _End:
    """The source has no more items."""


class _Failure:
    """The source raised; carries its exception as text (it may have to cross processes)."""

    def __init__(self, error: BaseException):
        self.error = error
        self.text = f"{type(error).__name__}: {error}"
        remote = getattr(error, "remote_text", None)
        if remote:
            self.text = remote


class Prefetcher:
    """The producer thread and bounded queue of one rank's infeed."""

    def __init__(self, source, placement, depth: int):
        depth = check_count(depth, "prefetch")
        self.source = source
        self.placement = placement
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._produce, daemon=True,
                                       name=f"xladist-infeed-rank{placement.rank}")
        self.thread.start()

    def _produce(self) -> None:
        copy = getattr(self.source, "copies", True)
        try:
            for item in self.source.open(self.placement):
                if not self._put(copy_item(item) if copy else item):
                    return
        except BaseException as e:  # noqa: BLE001 - any failure of user code is reported
            self._put(_Failure(e))
            return
        self._put(_End())

    def _put(self, item) -> bool:
        # Blocks while the queue is full (backpressure); wakes now and then only to notice
        # a stop, since Queue.put cannot be interrupted otherwise.
        while not self._stop.is_set():
            try:
                self.queue.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def get(self, timeout: float | None):
        return self.queue.get(timeout=timeout)

    def stop(self) -> None:
        self._stop.set()
        close = getattr(self.source, "close", None)
        if close is not None:
            close()  # unblocks a producer waiting on a socket
        try:
            while True:
                self.queue.get_nowait()
        except queue.Empty:
            pass
        self.thread.join(timeout=1.0)


# ---- one rank's feeds -----------------------------------------------------------------------
class Feeds:
    """Infeed source and outfeed sink of one rank; see the module docstring.

    Picklable until `start()` (the spawned ranks of `xladist.run` receive it that way),
    as long as the source and sink are (npz paths, named functions, sockets).
    """

    def __init__(self, infeed=None, outfeed=None, *, prefetch: int = DEFAULT_PREFETCH,
                 timeout: float | None = None):
        self.source = infeed
        self.sink = outfeed
        self.prefetch = int(prefetch)
        self.timeout = timeout
        self.placement = None
        self.taken = 0      # items consumed by infeeds so far (the next item's index)
        self.outfed = 0     # items outfed so far
        self._pre: Prefetcher | None = None
        self._ended = None  # the _End or _Failure that ended the infeed stream
        self._done = False

    def __getstate__(self):
        if self.placement is not None:
            raise TypeError("a started Feeds object cannot be pickled")
        return self.__dict__

    # ---- life cycle --------------------------------------------------------------------
    def start(self, placement, module=None) -> None:
        """Check the module's infeed order, open the sink and start the producer."""
        self.placement = placement
        if module is not None:
            from .order import check_infeed_order
            check_infeed_order(module)
        if self.timeout is None:
            from xladist.collectives import deadline
            self.timeout = deadline.watchdog.timeout_s
        if self.sink is not None:
            self.sink.open(placement)
        if self.source is not None:
            self._pre = Prefetcher(self.source, placement, self.prefetch)

    def finish(self) -> None:
        """The program ended: write the outfeed and stop the producer."""
        self._close(failed=False)

    def abort(self) -> None:
        """The program failed: deliver every outfeed item so far, stop the producer.
        Never raises (the original failure is what gets reported)."""
        try:
            self._close(failed=True)
        except BaseException:  # noqa: BLE001 - report the first failure, not this one
            traceback.print_exc()

    def _close(self, *, failed: bool) -> None:
        if self._done:
            return
        self._done = True
        try:
            if self.sink is not None:
                self.sink.close(failed=failed)
        finally:
            if self._pre is not None:
                self._pre.stop()

    # ---- device side -------------------------------------------------------------------
    def _error(self, instr, message: str) -> ExecutionError:
        p = self.placement
        where = f"{instr.name} (line {instr.line})" if instr.line else instr.name
        return ExecutionError(message, rank=p.rank, replica=p.replica, partition=p.partition,
                              instruction=where)

    def infeed(self, instr):
        """The data of `instr`'s next item (blocks with the deadline on an empty queue)."""
        shape = instr.shape.tuple_shapes[0]
        if is_empty_tuple(shape):
            return ()  # takes no item (E.22a)
        k, r = self.taken, self.placement.rank
        if self._pre is None:
            raise self._error(instr, f"{instr.name} wants infeed item {k} on rank {r}, but "
                                     "this run has no infeed source (pass --infeed FILE or "
                                     "--infeed-fn pkg.mod:fn, or infeed= to xladist.run or to a "
                                     "Cluster call)")
        item = self._ended
        if item is None:
            try:
                item = self._pre.get(self.timeout or None)
            except queue.Empty:
                raise self._error(
                    instr, f"infeed timed out on rank {r} at {instr.name} (item {k}): "
                           f"{self.source.describe()} produced nothing for {self.timeout:g} s "
                           "(the deadline; raise it with --timeout)") from None
        if isinstance(item, _End):
            self._ended = item
            raise self._error(instr, f"infeed exhausted on rank {r} at {instr.name} "
                                     f"(item {k}): {self.source.describe()} ended after {k} "
                                     f"items, but the program asks for more")
        if isinstance(item, _Failure):
            self._ended = item
            raise self._error(instr, f"{self.source.describe()} raised {item.text} "
                                     f"(on rank {r}, producing item {k} for {instr.name})")
        self.taken = k + 1
        try:
            return conform(item, shape)
        except ItemMismatch as e:
            raise self._error(instr, f"infeed item {k} on rank {r} does not fit "
                                     f"{instr.name}: {e}") from None

    def outfeed(self, instr, data) -> None:
        if self.sink is None:
            raise self._error(instr, f"{instr.name} outfeeds item {self.outfed} on rank "
                                     f"{self.placement.rank}, but this run has no outfeed "
                                     "sink (pass --outfeed FILE, or outfeed= to xladist.run or "
                                     "to a Cluster call)")
        try:
            self.sink.write(owned(data))
        except ExecutionError:
            raise
        except Exception as e:
            raise self._error(instr, f"the outfeed sink failed on item {self.outfed}: "
                                     f"{type(e).__name__}: {e}") from e
        self.outfed += 1


# ---- building Feeds from user options -----------------------------------------------------
def make_source(infeed=None, infeed_fn=None):
    """A source from `infeed` (npz path template, callable, list over ranks) or a named
    function."""
    if infeed is not None and infeed_fn is not None:
        raise InputError("give either an infeed (file or iterable) or an infeed function, "
                         "not both")
    if infeed_fn is not None:
        return FunctionSource(infeed_fn)
    if infeed is None:
        return None
    if isinstance(infeed, (str, bytes)) or hasattr(infeed, "__fspath__"):
        return NpzSource(str(infeed))
    if callable(infeed) or isinstance(infeed, (list, tuple)):
        return IterableSource(infeed)
    raise InputError(f"infeed must be an npz path template, a callable (rank, replica, "
                     f"partition) -> iterable, or a list of iterables per rank; got "
                     f"{type(infeed).__name__}")


def make_sink(outfeed=None):
    if outfeed is None:
        return None
    if isinstance(outfeed, str) or hasattr(outfeed, "__fspath__"):
        return NpzSink(str(outfeed))
    if callable(outfeed):
        return CallbackSink(outfeed)
    raise InputError(f"outfeed must be an npz path template or a callable (rank, replica, "
                     f"partition, item); got {type(outfeed).__name__}")


def make_feeds(infeed=None, outfeed=None, *, infeed_fn=None, prefetch=DEFAULT_PREFETCH,
               timeout=None) -> Feeds | None:
    """Feeds for the options of `xladist run` / `xladist.run`, or None without any."""
    source, sink = make_source(infeed, infeed_fn), make_sink(outfeed)
    if source is None and sink is None:
        return None
    return Feeds(source, sink, prefetch=prefetch, timeout=timeout)


def check_paths(feeds: Feeds | None, placements) -> None:
    """Before a launch: every rank's infeed file is a readable npz (InputError otherwise,
    xladist/files.py)."""
    if feeds is None or not isinstance(feeds.source, NpzSource):
        return
    for p in placements:
        path = npz.format_path(feeds.source.template, p)
        npz.check_items(path, f"infeed file for rank {p.rank} (replica {p.replica}, "
                              f"partition {p.partition})")


def recover_outfeeds(feeds: Feeds | None, placements) -> None:
    """After a failed job: finish the npz outfeed files of ranks that were killed."""
    if feeds is not None and isinstance(feeds.sink, NpzSink):
        feeds.sink.recover(placements)


# ---- the command line (xladist/cli/run.py) ------------------------------------------------
def from_args(args) -> Feeds | None:
    """Feeds for `xladist run`'s --infeed/--infeed-fn/--outfeed/--prefetch/--timeout."""
    return make_feeds(getattr(args, "infeed", None), getattr(args, "outfeed", None),
                      infeed_fn=getattr(args, "infeed_fn", None),
                      prefetch=getattr(args, "prefetch", None) or DEFAULT_PREFETCH,
                      timeout=getattr(args, "timeout", None))


def placements_of(module, n: int, device_assignment=None) -> list:
    from ..device import make_assignment, placement_for
    assignment = make_assignment(module, n, device_assignment)
    return [placement_for(r, assignment) for r in range(n)]


def check_args(args, module) -> list:
    """Before launching: the feed options are valid and every rank's infeed file exists.
    Returns the placements of the run's ranks."""
    feeds = from_args(args)  # --prefetch was checked with the other numbers (run_args.py)
    placements = placements_of(module, args.num_devices,
                               getattr(args, "device_assignment", None))
    check_paths(feeds, placements)
    if feeds is not None and isinstance(feeds.source, FunctionSource):
        load_function(feeds.source.spec)  # fails here (exit 2) rather than in every rank
    return placements


@contextlib.contextmanager
def running_single(feeds: Feeds | None, module, *, replica: int = 0, partition: int = 0):
    """A one-device run's DeviceContext with `feeds` started around the block (None
    without feeds); the outfeed is written whether the block succeeds or fails."""
    if feeds is None:
        yield None
        return
    from xladist.semantics.single_device import SingleDeviceContext
    placement = placements_of(module, 1)[0]
    check_paths(feeds, [placement])
    feeds.start(placement, module)
    try:
        yield SingleDeviceContext(feeds=feeds, replica_id=replica, partition_id=partition)
    except BaseException:
        feeds.abort()
        raise
    feeds.finish()
