"""`xladist.Cluster`: ranks that stay up, for many runs from one Python process.

    with xladist.Cluster(n=4, hosts=...) as c:
        out = c.run(module, inputs)            # the same result as xladist.run(module, inputs, n=4)
        step = c.compile(module)               # placed, compiled and kept on every rank
        for batch in batches:
            out = step.run(batch)              # only the inputs travel

`xladist.run` starts mpiexec and N interpreters for every call; a cluster starts them once
(`python -m xladist.runtime.cluster_rank`, launcher.py) and keeps the job's coordination
service (service/) open: each call is one `order` message to every rank, with that rank's
inputs; the rank takes the module from the service (on a load), runs, and answers with one
message: `call-done` with its outputs (streamed as a one-shot job's rank streams them,
rank_main.py), or `call-failed`. The service knows from the order and the answer what the
rank is doing (computing, finished), so the rank does not say so.

What a call's failure leaves behind:
* refused input (n against the module, argument count, dtypes and dims, settings, the
  deadlock check): raised here before any rank hears of the call; the cluster is unchanged;
* a rank's exception (the module does not compile, a run-time error at an instruction):
  every rank that failed says so with its rank and instruction; when all ranks have
  answered within FAILED_GRACE_S (counted from the last outfeed item this process took,
  while it still takes the call's items: _Calls._grace_left) the cluster stays usable. A
  rank that is still inside the call then is waiting for one that gave up (in a
  collective): the cluster is stopped and says so -- its MPI state is no longer known;
* a hang: the watchdog's report (service: every rank's position), the job ends, and the
  cluster says it is no longer usable; so does a rank that died (named with its signal).
`close()` (the `with` block's end, or interpreter exit) ends the ranks and waits for mpiexec;
ranks that do not go within CLOSE_WAIT_S are stopped with their process group. A cluster
nobody refers to any more (a test's or a function's cluster never closed) ends its ranks the
same way when Python collects it: nothing the ranks are served by (the launch thread, the
atexit hook) refers to the Cluster itself (_Launch holds what they share).
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
import time
import weakref

from xladist.errors import ExecutionError, InputError

from . import launcher
from .device import device_counts
from .api import _source, check_call, host_list, is_xlx, rank_options, resolve

# After one rank failed a call, how long the others have to finish or fail it too before
# the cluster is taken to be stuck (a rank waiting in a collective for the failed one).
FAILED_GRACE_S = 5.0
# How long close() waits for the ranks to go before it stops their process group.
CLOSE_WAIT_S = 30.0
PREFIX = "xladist.Cluster"
CLOSED = "it was closed"  # why a cluster its user closed is no longer usable
# A rank that takes nothing of its order for this long is gone (wire: a deadline on progress).
SEND_TIMEOUT_S = 60.0


class ClusterEnded(ExecutionError):
    """The cluster's job has ended (a hang, a dead rank, close()); start a new Cluster."""


class Cluster:
    """N ranks started once; see the module docstring.

    `n`: ranks (devices). `hosts` / `hostfile` / `mpiexec`: where and how, as for
    xladist.run. Defaults for every call (each call may override them): `backend`,
    `timeout` (a wait for another rank longer than this ends the job with the hang report),
    `verify`, `check` / `strict` (the deadlock check before a module is sent). `keep`: how
    many modules `run` keeps loaded on the ranks (given as text or a path, with the same
    settings, a module runs again without being sent, checked or compiled again; the least
    recently run is released first; 0: every run loads and releases its module).
    """

    def __init__(self, n: int, *, hosts=None, hostfile=None, mpiexec: str | None = None,
                 backend: str = "cpu", timeout: float = 300.0, verify: bool = True,
                 check: bool = True, strict: bool = False, keep: int = 8):
        from xladist.environment import check_count
        self.n = n = check_count(n, "n")
        self.defaults = dict(backend=backend, timeout=timeout, verify=verify, check=check,
                             strict=strict)
        from types import SimpleNamespace

        from xladist.backends import check_backend

        from .run_args import check_files, check_numbers
        # the defaults every call gets, checked as a call's own (run_args), before ranks start
        check_numbers(SimpleNamespace(timeout=timeout), options=False)
        check_backend(backend)
        # where the ranks run: a hostfile and an mpiexec, as a call of xladist.run checks them
        check_files(SimpleNamespace(hostfile=_path(hostfile), mpiexec=_path(mpiexec)), None, [],
                    options=False)
        self._where = dict(hosts=host_list(hosts), hostfile=hostfile, mpiexec=mpiexec)
        self._ids = itertools.count(1)
        # Handles the user let go of (no reference left), still loaded on the ranks: freed
        # before the next load (_free_dropped).
        self._dropped: list[_Dropped] = []
        self.keep = keep
        self._kept: dict[tuple, Compiled] = {}   # run(text): loaded modules, least recent first
        # _kept's lookups with their run, and loads with their evictions, from any thread:
        # without it a thread ran a kept module that another one had just evicted (and freed
        # on the ranks: `internal error: KeyError`). Taken before _lock, never inside it.
        self._keep_lock = threading.RLock()
        self._lock = threading.Lock()      # one call at a time
        self._calls = None
        self._service = None
        self._thread = None
        self._mpiexec = _Launch()          # mpiexec's process and result (the launch thread's)
        self._ended: str | None = None     # why the cluster is no longer usable
        self._busy = False
        self.started = False
        self._pid = os.getpid()            # the process whose threads talk to the ranks

    # ---- start and end ---------------------------------------------------------------------
    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> Cluster:
        """Launch the ranks and wait until every one is ready for orders."""
        if self.started:
            return self
        if launcher.under_mpi():
            raise InputError(f"{PREFIX} starts its own ranks under mpiexec: create it from a "
                             "plain Python process, not inside an MPI job (there, every rank "
                             "calls xladist.run itself)")
        from .service import Service
        self.started = True
        self._pid = os.getpid()
        self._calls = _Calls(self.n)
        self._service = Service(self.n, job=self._calls, code=self._calls.codes,
                                defer_lost=True, prints=True, emit=lambda text: None,
                                timeout_setting="timeout=")  # as the hang report names it
        self._thread = threading.Thread(
            target=_launch, name="xladist-cluster-launch", daemon=True,
            args=(self._mpiexec, self.n, self._service, self._calls, self._where))
        self._thread.start()
        # At exit: close() (a weak reference: the hook must not keep the cluster alive).
        # Collected before then: its ranks are sent away without waiting here (a
        # collection runs on whatever thread allocates).
        self._close_at_exit = _closer(weakref.ref(self))
        atexit.register(self._close_at_exit)
        self._collected = weakref.finalize(self, _end_collected, self._mpiexec, self._service,
                                           self._calls, self._thread, self._pid)
        self._collected.atexit = False
        try:
            ready = self._calls.wait_ready()
        except BaseException:  # Ctrl-C while the ranks start: no `with` block to end them
            self._stop_now("its start was interrupted")
            raise
        if not ready:
            self._gone_error("while starting")  # raises
        return self

    def _stop_now(self, why: str) -> None:
        """Stop the ranks' process group now (also if mpiexec is only about to start)."""
        self._ended = self._ended or why
        self._mpiexec.stop()
        self._thread.join(CLOSE_WAIT_S)

    @property
    def usable(self) -> bool:
        return self.started and self._ended is None and self._thread.is_alive()

    @property
    def pids(self) -> dict[int, tuple[str, int]]:
        """rank -> (host, pid) of the running ranks."""
        ranks = self._service.ranks if self._service is not None else {}
        return {r: (s.host, s.pid) for r, s in sorted(ranks.items())}

    def close(self) -> None:
        """End the ranks (their process group is stopped if they do not go); idempotent."""
        if not self.started or self._thread is None:
            return
        atexit.unregister(self._close_at_exit)
        self._collected.detach()
        if self._thread.is_alive():
            if not self._busy and self._ended is None:
                for st in list(self._service.ranks.values()):
                    st.conn.send("order", end=True, timeout=2.0)
                self._thread.join(CLOSE_WAIT_S)
            if self._thread.is_alive():
                self._stop_now(CLOSED)
        self._ended = self._ended or CLOSED
        self._calls.codes.close()

    def _gone_error(self, doing: str, lost: str = ""):
        """The job ended: the reason, once, as a ClusterEnded (raised); `lost`: what of
        the call's results could not be kept (JobHost.finish_failed)."""
        if self._ended is None:
            result = self._mpiexec.result
            if isinstance(result, BaseException):
                detail = f"{type(result).__name__}: {result}"
            elif result is not None:
                detail = launcher.clean_stderr(result.stderr).strip() or \
                    "\n".join(self._service.messages) or \
                    launcher.never_started(result, self._service, self.n, "mpiexec=") or ""
                detail = f"(exit {result.returncode})" + (f":\n{detail}" if detail else "")
            else:
                detail = "\n".join(self._service.messages)
            self._ended = f"its {self.n}-rank job ended {doing}"
            raise ClusterEnded(f"{PREFIX}: {self._ended} {detail}".rstrip() + lost)
        # A later call: the reason was said (by ClusterEnded or KeyboardInterrupt) when the
        # cluster ended, or the user closed it; say which, and what to do now.
        why = (f"{CLOSED} (by close(), or at the end of its `with` block)"
               if self._ended == CLOSED else self._ended)
        raise ClusterEnded(f"{PREFIX}: this cluster is no longer usable: {why}; its ranks "
                           f"have ended. Start a new Cluster to run more (`with "
                           f"xladist.Cluster(n={self.n}) as c:`)" + lost)

    def _usable_or_raise(self) -> None:
        if not self.started:
            raise ClusterEnded(f"{PREFIX}: the cluster is not started: use it in a `with` "
                               "block, or call start()")
        if os.getpid() != self._pid:
            # A forked child has none of the threads that serve the ranks: the job runs on
            # for the parent, so "the job ended" would be wrong.
            raise ClusterEnded(f"{PREFIX}: this cluster was started by process {self._pid}; "
                               f"this process ({os.getpid()}) is a fork of it and cannot use "
                               "its ranks: start a Cluster of its own here")
        if self._ended is not None or not self._thread.is_alive():
            self._gone_error("before this call")

    # ---- calls ---------------------------------------------------------------------------
    def compile(self, module, *, device_assignment=None, **options) -> Compiled:
        """Place and compile `module` (what run takes: an ir.Module, HLO text, a path, a
        `.xlx` file -- loaded, not compiled -- or an Executable) on every rank, once; the
        handle's `run(inputs)` then sends only the inputs."""
        handle = self._prepare(module, device_assignment, options)
        self._load(handle)
        return handle

    def _load(self, handle: Compiled, inputs=None, feeds: dict | None = None):
        """Load `handle` on every rank (and run it on `inputs`, if given, with `feeds`); a
        load that failed on some rank is released on the others."""
        self._free_dropped()
        try:
            outputs = self._call(handle, load=True, inputs=inputs, feeds=feeds)
        except ClusterEnded:
            raise
        except BaseException:
            if self.usable:
                self._call(handle, free=True)
            raise
        handle._dropped = weakref.finalize(handle, self._dropped.append,
                                           _Dropped(handle.id, handle.module, handle.options))
        handle._dropped.atexit = False
        return outputs

    def _free_dropped(self) -> None:
        """Release on the ranks every loaded module whose handle nobody holds any more: a
        loop of `step = c.compile(...)` without free() kept them all, each with its
        communicators, until MPI had none left (2048: ~500 modules of four groups)."""
        while self.usable:
            try:
                dropped = self._dropped.pop()
            except IndexError:  # none left (another thread's load may have taken the last)
                return
            self._call(dropped, free=True)

    def run(self, module, inputs=None, *, device_assignment=None, infeed=None, outfeed=None,
            infeed_fn: str | None = None, prefetch: int = 8, **options):
        """Run `module` (an ir.Module, HLO text, a path, a `.xlx` file, an Executable, or a
        handle from compile) with `inputs` as xladist.run takes them; returns
        outputs[device][i] as xladist.run does. `infeed`, `outfeed`, `infeed_fn`,
        `prefetch`: this call's feeds, as xladist.run takes them (served by this process,
        docs/feeds.md)."""
        feeds = dict(infeed=infeed, outfeed=outfeed, infeed_fn=infeed_fn, prefetch=prefetch)
        if isinstance(module, Compiled):
            if options or device_assignment is not None:
                raise InputError("a compiled handle runs with the settings it was compiled "
                                 "with; pass them to Cluster.compile")
            return module.run(inputs, **feeds)
        key = self._key(module, device_assignment, options) if self.keep > 0 else None
        if key is not None:
            with self._keep_lock:
                kept = self._kept_handle(key)
                if kept is not None:
                    return kept.run(inputs, **feeds)
        handle = self._prepare(module, device_assignment, options)
        per_device = handle.inputs(inputs)
        served = handle.feeds(feeds)
        if key is None:
            return self._call(handle, load=True, inputs=per_device, free=True, feeds=served)
        with self._keep_lock:
            kept = self._kept_handle(key)  # loaded by another thread while this one prepared
            if kept is not None:
                return self._call(kept, inputs=per_device, feeds=served)
            outputs = self._load(handle, per_device, served)
            self._kept[key] = handle
            while len(self._kept) > self.keep:
                self._kept.pop(next(iter(self._kept))).free()
            return outputs

    def _kept_handle(self, key):
        """The kept module of `key`, now the most recently used (last); None if not kept.
        Under _keep_lock."""
        handle = self._kept.pop(key, None)
        if handle is not None:
            self._kept[key] = handle
        return handle

    def _key(self, given, device_assignment, options):
        """What identifies a module given as text or a path, with its settings, among the
        modules kept loaded (None: a Module object, not kept)."""
        if not isinstance(given, (str, os.PathLike)):
            return None
        if is_xlx(given):  # the file's bytes: another file written there is another module
            import hashlib
            try:
                with open(given, "rb") as f:
                    text, filename = hashlib.sha256(f.read()).hexdigest(), os.fspath(given)
            except OSError:
                return None  # _prepare says why it cannot be read
        else:
            text, filename = _source(given, None)
        da = tuple(map(tuple, device_assignment)) if device_assignment is not None else None
        return text, filename, da, tuple(sorted({**self.defaults, **options}.items()))

    def run_checked(self, module, text: str, options: dict, *, inputs, outputs,
                    checked=None) -> None:
        """One load-run-release of a module whose run the caller has checked itself
        (`xladist run --batch`: its files, inputs and the deadlock check, as `xladist run`
        checks them): `text` is what the ranks parse, `options` api.rank_options, `inputs`
        an io.Inputs or per-device lists (None: no array parameters), `outputs` a
        service/outputs.Outputs that writes or prints them."""
        handle = Compiled(self, next(self._ids), module, text, checked, options)
        self._call(handle, load=True, inputs=inputs, run=True, free=True, outputs=outputs)

    def _prepare(self, given, device_assignment, options) -> Compiled:
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise InputError(f"{PREFIX}: unknown settings {sorted(unknown)} (it takes "
                             f"{sorted(self.defaults)} and device_assignment)")
        self._usable_or_raise()
        settings = {**self.defaults, **options}
        here = not launcher.ranks_elsewhere(self._where["hostfile"], self._where["hosts"])
        module, _, xlx = resolve(given, settings["backend"], here=here)  # a .xlx: ranks load it
        counts = device_counts(module, self.n, setting="n=")  # n against the module's counts
        checked = check_call(module, self.n, device_assignment=device_assignment,
                             check=settings["check"], strict=settings["strict"], prefix=PREFIX,
                             verify_counts=counts if settings["verify"] and xlx is None
                             else None,  # here, once: the ranks skip it
                             timeout=settings["timeout"], backend=settings["backend"],
                             hostfile=self._where["hostfile"], hosts=self._where["hosts"])
        text, filename = (None, os.fspath(given)) if xlx else _source(given, module)
        return Compiled(self, next(self._ids), module, text, checked, rank_options(
            counts, backend=settings["backend"], timeout=settings["timeout"],
            verify=False, source=filename, device_assignment=device_assignment,
            module=module), xlx=xlx)

    def _call(self, handle: Compiled, *, load: bool = False, inputs=None, free: bool = False,
              run: bool | None = None, outputs=None, feeds: dict | None = None):
        """One order to every rank; their outputs (when it runs: `inputs` given, or `run`),
        or the call's error. `outputs`: where they go (service/outputs.py; default:
        returned). `feeds`: the call's feeds (api.served_feeds), served while it runs."""
        from .api import _callback_errors
        from .service.jobs import JobHost
        from .service.outputs import Outputs
        with self._lock:
            self._usable_or_raise()
            if getattr(handle, "freed", False):  # by another thread, after run's own look
                if free and not (load or run or inputs is not None):
                    return None  # freed twice: once is enough
                raise InputError(f"{PREFIX}: this handle of {handle.module.name} was freed")
            if free and isinstance(handle, Compiled):
                handle.freed = True  # here, under the lock: no order for it follows
            run = inputs is not None if run is None else run
            job = JobHost(self.n, module_text=handle.text if load else None,
                          xlx=handle.xlx if load else None,
                          packed=handle.packed if load else None,
                          inputs=inputs if run else None,
                          outputs=(outputs or Outputs(self.n, "memory")) if run else None,
                          options=handle.options, **(feeds if run and feeds else {}))
            spec = job.describe()
            fed = {k: spec[k] for k in ("infeed", "infeed_fn", "outfeed", "prefetch")} \
                if run and (spec["infeed"] or spec["infeed_fn"] or spec["outfeed"]) else None
            call = next(self._ids)
            if load:  # a .xlx has its code: nothing to compile
                self._calls.codes.add(handle.id, handle.module,
                                      None if handle.xlx else handle.options["backend"])
            self._service.checked = handle.checked
            self._busy = True
            try:
                self._calls.begin(call, job)
                for r, st in sorted(self._service.ranks.items()):
                    # This rank's inputs go with its order (described as a reply to its
                    # `inputs` request would describe them).
                    described, arrays, _ = job.request(st, "inputs", {"device": r}, None) \
                        if run else ({}, (), None)
                    st.mark("computing")  # the rank does not say so itself (cluster_rank)
                    st.conn.send("order", arrays=arrays, timeout=SEND_TIMEOUT_S, call=call,
                                 handle=handle.id, load=load, run=run, free=free,
                                 inputs=described, feeds=fed)
                answers = self._calls.wait(call, FAILED_GRACE_S)
            except BaseException:
                # Interrupted (Ctrl-C) while the ranks run the call: their state is unknown.
                self._stop_now("a call was interrupted")
                job.abandon()  # no result; its temporary folders go (`xladist run --batch`)
                raise
            finally:
                self._busy = False
                if free or (load and not self._calls.all_done(call)):
                    self._calls.codes.drop(handle.id)
            # Every item the ranks outfed reaches this call's consumer before the call
            # returns or raises (also a failed rank's, which waits for it at most
            # feeds.host.FAILED_CLOSE_S): at most the run's deadline, as for a one-shot job.
            if answers is None:
                job.drain_outfeeds()
                self._gone_error(f"during a call of {handle.module.name}",
                                 job.finish_failed())
            failed = {r: a for r, a in answers.items() if a[0] == "failed"}
            if len(answers) < self.n:  # some rank is still inside the call: stuck
                self._stop(handle, answers, failed, job)
            job.drain_outfeeds()
            self._calls.feeding = None
            if failed:
                lost = job.finish_failed()
                texts = [failed[r][1] for r in sorted(failed)]
                raise ExecutionError(f"{PREFIX}: {texts[0]}" + "".join(
                    f"\n{PREFIX}: {t}" for t in texts[1:]) + _callback_errors(job) +
                    lost + "\n(the cluster is still usable: every rank finished this call)")
            result = job.finish(False) if run else None
            outfed = [x for x in job.errors if x[1] == "outfeed"]
            if outfed:  # every rank finished; this process's callback did not take it all
                rank, _, e = outfed[0]
                raise ExecutionError(f"{PREFIX}: {job.outfeed_failed(rank, e)}\n(the cluster "
                                     "is still usable: every rank finished this call)",
                                     rank=rank) from e
            return result

    def _stop(self, handle, answers, failed, job) -> None:
        """Some rank failed a call and another has not come back from it: stop the job
        (then the items its ranks outfed still reach the call's consumer)."""
        waiting = sorted(set(range(self.n)) - set(answers))
        said = "\n".join(f"{PREFIX}: {text}" for _, text in failed.values())
        from .service.report import ranks_text
        self._ended = (f"{ranks_text(sorted(failed))} failed a call of {handle.module.name} "
                       f"and {ranks_text(waiting)} did not finish it within "
                       f"{FAILED_GRACE_S:g} s (waiting for the failed ones, in a collective): "
                       "the cluster was stopped")
        self._stop_now(self._ended)
        job.drain_outfeeds()
        lost = job.finish_failed()
        raise ClusterEnded(f"{said}\n{PREFIX}: {self._ended}{lost}")


class Compiled:
    """A module placed and compiled on every rank of a cluster (Cluster.compile)."""

    def __init__(self, cluster: Cluster, ident: int, module, text: str | None, checked,
                 options, xlx: bytes | None = None):
        from xladist.hlo.packed import pack
        self.cluster, self.id, self.module, self.text = cluster, ident, module, text
        self.xlx = xlx  # a .xlx file's bytes: the ranks load its code, not the text
        # (packed before any compile here can touch the module)
        self.packed = pack(module) if xlx is None else None
        self.checked, self.options = checked, options
        self.freed = False
        self._dropped = None  # weakref.finalize: tells the cluster when nobody holds this

    def inputs(self, inputs):
        """`inputs` as the ranks get them, checked here (dims, element types) first."""
        from .api import _per_device
        return _per_device(self.module, inputs, self.cluster.n)

    def feeds(self, feeds: dict) -> dict | None:
        """A call's feeds (Cluster.run's infeed, outfeed, infeed_fn, prefetch), checked
        here and made ready to serve (api.served_feeds); None without any."""
        from .api import _check_files, served_feeds
        if feeds["infeed"] is None and feeds["outfeed"] is None and feeds["infeed_fn"] is None:
            return None
        da = self.options.get("device_assignment")
        _check_files(self.module, self.cluster.n, da, infeed=feeds["infeed"],
                     outfeed=feeds["outfeed"], prefetch=feeds["prefetch"])
        return served_feeds(self.module, self.cluster.n, da, **feeds)

    def run(self, inputs=None, *, infeed=None, outfeed=None, infeed_fn: str | None = None,
            prefetch: int = 8):
        """Run on every rank with `inputs` (and this call's feeds, as Cluster.run)."""
        if self.freed:
            raise InputError(f"{PREFIX}: this handle of {self.module.name} was freed")
        per_device = self.inputs(inputs)
        served = self.feeds(dict(infeed=infeed, outfeed=outfeed, infeed_fn=infeed_fn,
                                 prefetch=prefetch))
        return self.cluster._call(self, inputs=per_device, feeds=served)

    def free(self) -> None:
        """Release the module on every rank (a closed cluster has already)."""
        if self.freed:
            return
        if self._dropped is not None:
            self._dropped.detach()
        if self.cluster.usable:
            # Marked freed under the cluster's lock (Cluster._call): a run another thread
            # started after that raises "was freed" and sends no rank an order; before, it
            # could reach the ranks after the free (`internal error: KeyError`).
            self.cluster._call(self, free=True)
        self.freed = True


class _Launch:
    """What the launch thread shares with its cluster: mpiexec's process once started, the
    launcher's result once it ended (a CompletedProcess or the exception), and whether the
    ranks are to be stopped. Not the Cluster: the thread would keep it alive."""

    def __init__(self):
        self.lock = threading.Lock()
        self.popen = None
        self.result = None
        self.stopping = False

    def started(self, popen) -> None:
        with self.lock:
            self.popen = popen
            stop = self.stopping
        if stop:
            launcher.stop_group(popen)

    def stop(self) -> None:
        """Stop the ranks' process group now, or as soon as mpiexec has started."""
        with self.lock:
            self.stopping = True
            popen = self.popen
        if popen is not None:
            launcher.stop_group(popen)


def _launch(state: _Launch, n: int, service, calls, where: dict) -> None:
    """The launch thread: the ranks' whole job."""
    try:
        state.result = launcher.launch(
            n, ["-m", "xladist.runtime.cluster_rank"], capture=True, service=service,
            on_start=state.started, env={"XLADIST_RANK_PREFIX": PREFIX}, **where)
    except BaseException as e:  # noqa: BLE001 -- said by the next call
        state.result = e
    finally:
        calls.job_ended()


def _closer(ref):
    def close_at_exit() -> None:
        cluster = ref()
        if cluster is not None:
            cluster.close()
    return close_at_exit


def _end_collected(state: _Launch, service, calls, thread, pid: int) -> None:
    """A cluster collected without close(): the end order to every rank, and a thread that
    waits for the job as close() does (stopping the process group after CLOSE_WAIT_S).
    Before, nothing referred to such a cluster but its own launch thread and atexit hook,
    which kept it, mpiexec, its ranks, 7 threads and 8 descriptors until the interpreter's
    exit: a test suite whose fixtures forgot close() had a job per test running. A forked
    child's copy is the parent's cluster: its collection there ends nothing."""
    if os.getpid() != pid:
        return
    if thread.is_alive():
        for st in list(service.ranks.values()):  # (a rank gone: False, the wait ends it)
            st.conn.send("order", end=True, timeout=2.0)

    def wait() -> None:
        thread.join(CLOSE_WAIT_S)
        if thread.is_alive():
            state.stop()
            thread.join(CLOSE_WAIT_S)
        calls.codes.close()
    threading.Thread(target=wait, name="xladist-cluster-collected", daemon=True).start()


class _Dropped:
    """What a free order needs of a handle that was dropped (Cluster._free_dropped)."""

    text = xlx = packed = checked = None

    def __init__(self, ident: int, module, options):
        self.id, self.module, self.options = ident, module, options


class _Codes:
    """The service's code store for a cluster: one compile_once.CodeStore per live module."""

    def __init__(self):
        self.target = None
        self.stores: dict[int, object] = {}
        self._lock = threading.Lock()

    def decide(self, target) -> None:
        self.target = target

    def add(self, handle: int, module, backend: str) -> None:
        from .compile_once import CodeStore
        store = CodeStore(module, backend)
        if self.target is not None:
            store.decide(self.target)
        with self._lock:
            self.stores[handle] = store

    def get(self, key: str):
        with self._lock:
            stores = list(self.stores.values())
        for store in stores:
            obj = store.get(key)
            if obj is not None:
                return obj
        return None

    def drop(self, handle: int) -> None:
        with self._lock:
            store = self.stores.pop(handle, None)
        if store is not None:
            store.close()

    def close(self) -> None:
        for handle in list(self.stores):
            self.drop(handle)


class _Calls:
    """The service's job object for a cluster: the current call's JobHost serves the ranks'
    requests and takes their outputs; `call-done` / `call-failed` / `cluster-ready` come
    here."""

    def __init__(self, n: int):
        self.n = n
        self.codes = _Codes()
        self.job = None
        self.feeding = None  # the job of the call whose outfeed may still be arriving
        self.call = None
        self.answers: dict[int, dict[int, tuple[str, str]]] = {}
        self.ready: set[int] = set()
        self.ended = False
        self._cond = threading.Condition()

    # what the service calls
    def request(self, st, what, meta, payload):
        if self.job is None:
            raise LookupError(f"no call is under way to serve {what!r}")
        return self.job.request(st, what, meta, payload)

    def receive_outputs(self, st, meta, size, seen) -> None:
        """A rank's outputs, which come with its `call-done`."""
        job = self.job
        if job is None or meta.get("call") != self.call:  # a call given up (_stop)
            from .wire import copy_payload
            copy_payload(st.conn.sock, size, lambda piece: seen())  # the stream stays in step
            return
        job.receive_outputs(st, meta, size, seen)

    def serve_feed(self, conn, meta) -> None:
        job = self.job
        if job is None:
            conn.send("refused", reason="no call of the cluster is under way")
            return
        job.serve_feed(conn, meta)

    def on_message(self, st, op, meta, payload) -> None:
        if op == "cluster-ready":
            with self._cond:
                self.ready.add(st.rank)
                self._cond.notify_all()
        elif op in ("call-done", "call-failed"):
            st.mark("finished")
            with self._cond:
                got = self.answers.get(int(meta["call"]))
                if got is None:  # a call given up (wait() returned without it): dropped
                    return
                got[st.rank] = ("done", "") if op == "call-done" else ("failed", meta["text"])
                if len(got) == self.n or op == "call-failed":  # what wait() waits for
                    self._cond.notify_all()
        elif self.job is not None:
            self.job.on_message(st, op, meta, payload)

    # what the cluster calls
    def job_ended(self) -> None:
        with self._cond:
            self.ended = True
            self._cond.notify_all()

    def wait_ready(self) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: len(self.ready) == self.n or self.ended)
            return len(self.ready) == self.n and not self.ended

    def begin(self, call: int, job) -> None:
        with self._cond:
            self.call, self.job, self.feeding = call, job, job
            self.answers[call] = {}

    def all_done(self, call: int) -> bool:
        got = self.answers.get(call, {})
        return len(got) == self.n and all(a[0] == "done" for a in got.values())

    def _grace_left(self, first_failure: float, grace: float) -> float:
        """How long the ranks that have not answered still get after the first failure:
        `grace` from that failure -- or, while this process is still taking the call's
        outfeed items (a slow callback: a rank that waits for it to take its last items is
        not stuck), from the last item taken, none running out while one is in hand; at
        most the run's deadline after the failure (JobHost.deadline_s)."""
        now = time.monotonic()
        job = self.job
        if job is None:
            return first_failure + grace - now
        quiet = job.outfeed_quiet_since()
        left = grace if quiet is None else max(first_failure, quiet) + grace - now
        cap = job.deadline_s
        return left if cap is None else min(left, first_failure + cap - now)

    def drain_outfeeds(self) -> None:
        """The job is over (Service.close): the call under way, if any, gets its outfeed
        items as a one-shot job does (JobHost.drain_outfeeds)."""
        job = self.feeding
        if job is not None:
            job.drain_outfeeds()

    def wait(self, call: int, grace: float):
        """Every rank's answer {rank: (status, text)}; fewer when a rank failed and the
        others did not answer within the grace (`_grace_left`); None when the job ended."""
        with self._cond:
            first_failure = None
            while True:
                got = self.answers[call]
                if len(got) == self.n:
                    break
                if self.ended:
                    return None
                if first_failure is None and any(a[0] == "failed" for a in got.values()):
                    first_failure = time.monotonic()
                if first_failure is not None:
                    left = self._grace_left(first_failure, grace)
                    if left <= 0:
                        break
                    self._cond.wait(left)
                else:
                    self._cond.wait()
            self.job = None
            return dict(self.answers.pop(call))


def _path(value):
    """A PathLike as the str run_args checks; anything else as given."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value
