"""Starting N ranks: find the `mpiexec` that the `mpich` wheel installed and run it.

`xladist run -n N` outside MPI re-executes itself under `mpiexec -n N`; inside an
mpiexec job (PMI_RANK set) each rank runs directly. The rank environment is tuned
here once, from measured facts on small machines:
- glibc's mmap/trim thresholds raised: MPICH maps and unmaps a 32 MiB scratch
  buffer on every large all-reduce/reduce-scatter; keeping it on the heap made
  those 1.5-2x faster;
- BLAS loads single-threaded: with more ranks than cores, threaded BLAS oversubscribes;
  each rank then sets its BLAS threads to its compute thread count
  (xladist/compiler/parallel.py: its cores shared among the ranks on its node); which
  OpenBLAS kernel runs is each rank's choice for its own host (runtime/hostinfo.py).

Every launch hosts the job's coordination service (xladist/runtime/service/) in this
process: the ranks find it through XLADIST_COORD. It writes the hang report, names a rank
that died or got stuck, and delivers failing ranks' last words; when it ends the job and the
ranks do not go within END_GRACE_S (a stopped process ignores MPI_Abort's signals), the
launcher stops mpiexec's process group. After the job, a rank that died is named with the
signal mpiexec reported for it, and MPICH's own failure lines are shown only when xladist has
nothing better to say.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from xladist.collectives.mpiexec import find_mpiexec

# Variables that tell a process it was started by an MPI launcher (Hydra/PMI, OpenMPI, Slurm).
_MPI_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")

RANK_ENV_DEFAULTS = {
    "MALLOC_MMAP_THRESHOLD_": "1073741824",
    "MALLOC_TRIM_THRESHOLD_": "1073741824",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # OpenBLAS's workers, after a product a rank ran on them (blas_blocks.py's WHOLE
    # way), sleep at once instead of spinning ~0.1 s on a core the rank's pool (or
    # another rank) computes on: 2^4 cycles, OpenBLAS's minimum, against 2^28.
    "OPENBLAS_THREAD_TIMEOUT": "4",
}


def under_mpi() -> bool:
    """True when this process is one rank of an MPI job."""
    return any(v in os.environ for v in _MPI_ENV)


def mpi_world_size() -> int | None:
    for key in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        if key in os.environ:
            return int(os.environ[key])
    return None


def ranks_elsewhere(hostfile=None, hosts=None) -> bool:
    """Whether the ranks run on the hosts of a hostfile or host list, which need not be
    this one (a login node): this process then checks what the ranks will run -- the CPU of
    XLADIST_TARGET_CPU, a `.xlx` file's CPU -- by name only, and each rank on its own host."""
    return bool(hostfile or hosts)


def check_not_an_srun_task() -> None:
    """InputError when this process is one of several tasks that `srun` started without an
    MPI plugin (`--mpi=none`, a cluster's MpiDefault): srun sets SLURM_STEP_NUM_TASKS, and
    --mpi=pmi2 / pmix would set PMI_RANK / PMIX_RANK (under_mpi). Each task then took itself
    for the launching process: `srun -n 4 xladist run m.hlo -n 4` started four whole jobs of
    four ranks (each writing the same --outputs; inside the allocation each mpiexec's own
    srun waits for CPUs the step holds), and without -n each task ran the module alone. A
    batch script or `salloc` shell is no srun step (no SLURM_STEP_NUM_TASKS)."""
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS", "")
    if under_mpi() or not tasks.isdigit() or int(tasks) <= 1:
        return
    from xladist.errors import InputError
    raise InputError(
        f"this process is task {os.environ.get('SLURM_PROCID', '?')} of the {tasks} tasks "
        f"srun started (SLURM_STEP_NUM_TASKS={tasks}), without an MPI plugin (no PMI_RANK or "
        f"PMIX_RANK): every task would run the whole job by itself. Start the tasks as MPI "
        f"ranks (`srun --mpi=pmi2 ...`), or run `xladist run -n {tasks} ...` once, from the "
        f"batch script or `srun -n 1`")


def check_environment(*, elsewhere: bool = False) -> None:
    """What the ranks inherit, checked here (InputError, exit 2): not a task of an srun
    without MPI (check_not_an_srun_task), the numeric XLADIST_* variables
    (xladist/environment.py) and XLADIST_TARGET_CPU (a CPU LLVM knows, and one this host
    runs -- unless the ranks run `elsewhere`, on the hosts of a hostfile: a login node need
    not run the code of the compute nodes' CPU, which each rank checks on its host)."""
    check_not_an_srun_task()
    from xladist.environment import check, target_cpu
    check()
    cpu = target_cpu()
    if cpu is not None:  # (the compiler is imported only then: 0.3 s)
        from xladist.compiler.target import check_target_cpu
        check_target_cpu(cpu, here=not elsewhere)


def rank_environment(extra: dict[str, str] | None = None, *,
                     elsewhere: bool = False) -> dict[str, str]:
    check_environment(elsewhere=elsewhere)  # every launch: a bad XLADIST_* value stops it here
    env = dict(os.environ)
    for k, v in RANK_ENV_DEFAULTS.items():
        env.setdefault(k, v)
    # Ranks must import this checkout's packages even when started from elsewhere.
    root = str(Path(__file__).resolve().parents[2])  # the folder holding xladist/
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env[LAUNCH_DIR_ENV] = os.getcwd()  # where relative paths given to the ranks point
    # A relative kernel cache folder is the launching folder's, for every rank: ranks on
    # other hosts start in START_DIR and stay there where their host lacks this folder, and
    # put the cache in / (or failed to write it there, silently slower).
    from xladist.environment import cache_dir
    if env.get("XLADIST_CACHE_DIR") and (cache := cache_dir()) is not None:
        env["XLADIST_CACHE_DIR"] = str(cache.absolute())
    if extra:
        env.update(extra)
    return env


# Ranks on other hosts start in "/", which every host has: mpiexec's proxies change to
# mpiexec's own folder by default, and stop on a host that lacks it (MPICH: `unable to
# change wdir to ...`) -- a folder on the launching host's local disk or /tmp. This Python
# then moves the rank to that folder where its host has it (a shared file system: the
# user's modules and relative paths as before) and runs the rank's program there.
START_DIR = "/"
LAUNCH_DIR_ENV = "XLADIST_LAUNCH_DIR"  # the launching process's folder (rank_environment)
_ENTER = ("import os, sys\n"
          f"try:\n    os.chdir(os.environ['{LAUNCH_DIR_ENV}'])\n"
          "except (OSError, KeyError):\n    pass\n"
          "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n")


def outside_launch_dir() -> str:
    """For a rank's error about a module it cannot import: ` on HOST, which has no DIR (the
    launching folder)` when this rank runs under a launcher but not in its folder (_ENTER
    found none on this host), else "". The launcher imported the module from its folder,
    so a bare `No module named 'mod'` on a rank read as a contradiction."""
    want = os.environ.get(LAUNCH_DIR_ENV)
    try:
        if not under_mpi() or not want or os.getcwd() == want:
            return ""
    except OSError:
        return ""
    from .hostinfo import host_name
    return (f" on {host_name()}, which has no {want} (the launching folder: a module the "
            f"launching process finds there must be installed on every host or sit in a "
            f"folder all hosts share)")


def mpiexec_command(n: int, argv: list[str], *, hostfile: str | None = None,
                    hosts: list[str] | None = None, mpiexec_args: list[str] | None = None,
                    mpiexec: str | None = None) -> list[str]:
    """`mpiexec -n N [-f HOSTFILE | -hosts a:2,b:2] python ARGV` (hosts: `name` or
    `name:slots`, ranks filling them in order, as a hostfile's lines). Ranks on other hosts
    -- a hostfile's, a host list's, a Slurm allocation's -- start in START_DIR and enter
    this process's folder where their host has it (_ENTER)."""
    if mpiexec is None:
        check_slurm_launcher()
    cmd = [find_mpiexec(mpiexec), "-n", str(n)]
    if hostfile:
        cmd += ["-f", hostfile]
    if hosts:
        cmd += ["-hosts", ",".join(hosts)]
    cmd += list(mpiexec_args or [])
    if ranks_elsewhere(hostfile, hosts) or slurm_allocation():
        return cmd + ["-wdir", START_DIR, sys.executable, "-S", "-c", _ENTER, *argv]
    return cmd + [sys.executable, *argv]


# What makes MPICH's mpiexec (Hydra) take a Slurm allocation's nodes and start its proxies
# with srun (its slurm resource manager's query_native_int): one of each group set.
SLURM_ALLOCATION = (("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
                    ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"), ("SLURM_TASKS_PER_NODE",))


def slurm_allocation() -> list[str] | None:
    """The variables that make this a Slurm allocation to MPICH's mpiexec (one of each of
    SLURM_ALLOCATION's groups), or None."""
    named = [next((k for k in group if os.environ.get(k)), None) for group in SLURM_ALLOCATION]
    return None if None in named else named


def check_slurm_launcher() -> None:
    """InputError when the mpich wheel's mpiexec would start the ranks with an srun that is
    not there: inside a Slurm allocation (SLURM_ALLOCATION) Hydra runs srun -- also with a
    hostfile, also for one node -- and when srun is missing (a container inside the job, a
    login shell without Slurm's bin folder) it says so among its debug lines and then waits
    forever."""
    import shutil
    named = slurm_allocation()
    if named is None or shutil.which("srun") is not None:
        return
    from xladist.errors import InputError
    raise InputError(
        f"this is a Slurm allocation ({', '.join(named)} are set), where mpiexec starts the "
        f"ranks with srun, but srun is not on PATH (mpiexec would wait forever): put Slurm's "
        f"bin folder on PATH, or unset SLURM_TASKS_PER_NODE (`env -u SLURM_TASKS_PER_NODE "
        f"...`) to start the ranks on this host, or on the hosts of a hostfile over ssh")


# A hostfile line as MPICH's mpiexec takes it: one host, its slots, its interface.
_HOST_LINE = re.compile(r"(?P<host>[^\s:]+)(:(?P<slots>[^\s:]*)(:\S*)?)?")


def hostfile_text(path, what: str = "hostfile") -> str:
    """The text of a hostfile as mpiexec gets it (InputError naming the line otherwise):
    read as xladist reads text (UTF-8, a leading byte-order mark dropped), a `#` comment
    dropped -- also one after a host, which MPICH refuses -- and every other line one
    `host`, `host:slots` or `host:slots:interface`, slots a whole number >= 1. MPICH's
    mpiexec stopped at `node slots=2` (OpenMPI's form) with a line about the token that
    xladist then blamed on ssh, died of SIGFPE without a word at `node:0` or `node:x`, and
    ran everything on this host, silently, when no line named a host."""
    from xladist.errors import InputError
    from xladist.files import read_text
    text = read_text(path, what, kind="hostfile text")
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        m = _HOST_LINE.fullmatch(entry)
        slots = m and m.group("slots")
        if m is None or (slots is not None and not (slots.isdigit() and int(slots) >= 1)):
            raise InputError(f"{what} {path}, line {number}: {entry!r} is not a host line of "
                             f"MPICH's mpiexec: one `host`, `host:slots` (slots a whole number "
                             f">= 1) or `host:slots:interface` per line, `#` for comments")
        lines.append(entry + "\n")
    if not lines:
        raise InputError(f"{what} {path} names no host (MPICH's mpiexec would run every rank "
                         f"on this host)")
    return "".join(lines)


@contextlib.contextmanager
def hostfile_as_read(hostfile: str | None):
    """The hostfile to give mpiexec: the user's own file, or -- when its text as mpiexec must
    get it (hostfile_text) is not the file's bytes -- a copy of that text, kept for the
    job's life. MPICH reads a hostfile's bytes as they are: the mark a Windows editor writes
    first became part of the first host's name (`ssh: Could not resolve hostname
    \\357\\273\\277node01`), and a comment after a host stopped it."""
    if not hostfile:
        yield hostfile
        return
    path = os.fspath(hostfile)
    text = hostfile_text(path)
    if text.encode("utf-8") == Path(path).read_bytes():
        yield path
        return
    from xladist.files import temp_folder
    folder = temp_folder("xladist-hostfile-", f"the text of the hostfile {path}")
    try:
        copy = folder / "hostfile"
        try:
            copy.write_text(text, encoding="utf-8")
        except OSError as e:  # a full disk
            from xladist.errors import OutputError
            raise OutputError(f"cannot write the text of the hostfile {path} to {copy} (for "
                              f"mpiexec): {e.strerror or e}; set TMPDIR to a writable folder "
                              f"with room") from None
        yield str(copy)
    finally:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)


# MPICH's own line after MPI_Abort: our ranks have already said what went wrong.
_MPICH_NOISE = re.compile(r"^(Abort\(\d+\) on node \d+.*MPI_Abort.*|\s*)$")
# MPICH's launcher reporting a failure its own way (its banner on stdout, the proxies' and
# mpiexec's error lines on stderr): held back, and shown only when xladist cannot explain.
_MPICH_REPORT = re.compile(r"^(=+$|=   |\[(proxy|mpiexec)[:@]|YOUR APPLICATION TERMINATED|"
                           r"This typically refers to a problem|Please see the FAQ page)")
_BANNER_PID = re.compile(r"PID (\d+) RUNNING AT (\S+)")
_BANNER_CODE = re.compile(r"EXIT CODE: (\d+)")
_BANNER_SIGNAL = re.compile(r"EXIT STRING: .*\(signal (\d+)\)")
# After the service ends a job, how long the ranks get to go before mpiexec is stopped.
END_GRACE_S = 5.0


def clean_stderr(text: str | None) -> str:
    """stderr of a job without MPICH's abort boilerplate."""
    return "\n".join(line for line in (text or "").splitlines()
                     if not _MPICH_NOISE.match(line))


def launch(n: int, argv: list[str], *, hostfile: str | None = None,
           hosts: list[str] | None = None, env: dict[str, str] | None = None,
           timeout: float | None = None, capture: bool = False, mpiexec: str | None = None,
           service=None, on_start=None) -> subprocess.CompletedProcess:
    """Run `python argv...` on n ranks and wait; Ctrl-C and timeouts kill the whole job.

    `service`: the job's coordination service (xladist/runtime/service/), made by the caller
    when it serves a job; else a plain one is made here for the run. Without `capture`, the
    ranks' output passes through (minus MPICH's boilerplate) and the service's reports go to
    stderr; with it they are in the result's stderr. The result carries the service as
    `.service`. The job runs in its own process group so that nothing is orphaned.
    `on_start(popen)` is called once mpiexec runs (a persistent cluster, which launches from
    a thread, keeps it to stop the group: stop_group).
    """
    from .service import Service
    own = service is None
    if own:
        service = Service(n, defer_lost=True, prints=True,
                          emit=(lambda text: None) if capture else None)
    env = rank_environment({**(env or {}), **service.env()},
                           elsewhere=ranks_elsewhere(hostfile, hosts))
    try:
        with hostfile_as_read(hostfile) as hostfile:
            cmd = mpiexec_command(n, argv, hostfile=hostfile, hosts=hosts, mpiexec=mpiexec)
            proc = _launch(cmd, env, timeout, capture, service, on_start)
    finally:
        service.close()
    proc.returncode = job_exit_code(proc.returncode, service)
    proc.service = service
    return proc


def job_exit_code(returncode: int, service) -> int:
    """A job's exit code: mpiexec's, or -- when the service ended the job -- the code it
    ended it with, as MPI_Abort(code) gave it. Under MPICH's hydra a rank ends the job by
    exiting (deadline.abort_job), and mpiexec then reports the signal its proxies stopped
    the other ranks with (9 or 15)."""
    if returncode != 0 and service.end_code is not None:
        return service.end_code
    return returncode


def never_started(proc, service, n: int, option: str = "--mpiexec") -> str | None:
    """After a job: None when all n ranks reached its coordination service, or the service
    already said why some did not. Else the words for a launcher that started none or only
    some of them (not an MPI launcher, one that failed silently, or one that exited 0
    without running anything): the job did not run. `option`: how the caller named it."""
    missing = [r for r in range(n) if r not in service.ranks]
    if not missing or service.messages:
        return None
    from .service.report import ranks_text
    launcher = proc.args[0] if isinstance(proc.args, (list, tuple)) else proc.args
    return (f"{launcher} exited with status {proc.returncode}, but {ranks_text(missing)} of "
            f"{n} never started, so the job did not run. Is it an MPI launcher that takes "
            f"`-n N PROGRAM` ({option})?")


@contextlib.contextmanager
def started(n: int, argv: list[str], *, hostfile: str | None = None,
            env: dict[str, str] | None = None, mpiexec: str | None = None):
    """`python argv...` on n ranks, running: yields the Popen (stdout and stderr are binary
    pipes for the caller to read). The job has its coordination service, made here, as
    `launch` gives one; `proc.abort_notes()` is what it said (a failing rank's last words, a
    hang report, a rank that died), which MPICH may have dropped from stderr. Leaving the
    block, or a signal that stops us, stops the job's whole process group."""
    from .service import Service
    service = Service(n, defer_lost=True, prints=True, emit=lambda text: None)
    env = rank_environment({**(env or {}), **service.env()}, elsewhere=ranks_elsewhere(hostfile))
    try:
        with hostfile_as_read(hostfile) as hostfile, _stop_on_signals() as armed:
            cmd = mpiexec_command(n, argv, hostfile=hostfile, mpiexec=mpiexec)
            proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
            armed(proc)
            service.on_end = lambda: _stop_later(proc)
            proc.service = service
            proc.abort_notes = lambda: list(service.messages) + _explain(
                service, "", proc.returncode or 0)
            try:
                yield proc
            finally:
                _kill_group(proc)
                for stream in (proc.stdout, proc.stderr):
                    stream.close()
    finally:
        service.close()


def _launch(cmd, env, timeout, capture, service, on_start=None) -> subprocess.CompletedProcess:
    kwargs = dict(env=env, start_new_session=True, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
    held: list[str] = []     # MPICH's report lines, held back
    seen = {"stdout": bytearray(), "stderr": bytearray()}
    with _stop_on_signals() as armed:
        proc = subprocess.Popen(cmd, **kwargs)
        try:  # from here on, a signal (SIGTERM from a batch system) stops the whole group
            armed(proc)
            if on_start is not None:
                on_start(proc)
            # When the service ends the job, the ranks abort; a stopped one does not: stop all.
            service.on_end = lambda: _stop_later(proc)
            pumps = [threading.Thread(target=_pump, args=(stream, sink, held, seen[name],
                                                          capture), daemon=True)
                     for name, stream, sink in (("stdout", proc.stdout, _out(sys.stdout)),
                                                ("stderr", proc.stderr, _out(sys.stderr)))]
            for t in pumps:
                t.start()
            proc.wait(timeout=timeout)
            for t in pumps:
                t.join(timeout=5)
        except BaseException:
            _kill_group(proc)
            raise
    out = bytes(seen["stdout"]).decode(errors="replace")
    err = bytes(seen["stderr"]).decode(errors="replace")
    words = _explain(service, "\n".join(held), proc.returncode)
    if not words and not service.messages and held and proc.returncode != 0:
        words = ["\n".join(held)]  # nothing better to say: MPICH's own report
    if capture:
        err = clean_stderr(err)
        extra = [m for m in service.messages if m not in err] + words
        err = "\n".join([err.rstrip("\n"), *extra]).strip("\n") + ("\n" if extra or err else "")
    else:
        for text in words:
            sys.stderr.write(text.rstrip("\n") + "\n")
        sys.stderr.flush()
    return subprocess.CompletedProcess(cmd, proc.returncode, out if capture else None,
                                       err if capture else None)


def _explain(service, mpich: str, returncode: int) -> list[str]:
    """The service's deferred words: the rank that died (named with the signal mpiexec
    reported for it) or got stuck."""
    from .service import report
    if not service.lost:
        return []
    pid = _BANNER_PID.search(mpich)
    code = _BANNER_CODE.search(mpich)
    sig = _BANNER_SIGNAL.search(mpich)
    lost = service.lost
    if pid is not None:
        match = [i for i in lost if str(i.get("pid")) == pid.group(1)]
        lost = match or lost
    info = min(lost, key=lambda i: i["at"])
    signum = int(sig.group(1)) if sig else int(code.group(1)) if code and pid and \
        str(info.get("pid")) == pid.group(1) and info.get("how") == "lost" else None
    return [report.lost_rank(info, sig=signum)]


def _stop_later(proc) -> None:
    def stop() -> None:
        if proc.poll() is None:
            _kill_group(proc)
    timer = threading.Timer(END_GRACE_S, stop)
    timer.daemon = True
    timer.start()


def _out(stream):
    return getattr(stream, "buffer", None) or _TextSink(stream)


@contextlib.contextmanager
def _stop_on_signals():
    """SIGTERM / SIGHUP to the launching process (`timeout`, a batch system, a closed
    terminal) stop the job too: the ranks run in their own session and would outlive us.

    Yields `armed(proc)`, to call as soon as Popen returned mpiexec: a signal that arrives
    before (while Popen forks and execs) is held until then, because an exception raised
    inside Popen loses the process it started -- mpiexec and its ranks ran on, orphaned.
    Ctrl-C (the default SIGINT handler) is held the same way."""
    held: list[int] = []
    state = {"armed": threading.current_thread() is not threading.main_thread()}

    def armed(proc) -> None:
        state["armed"] = True
        if held:
            _kill_group(proc)
            _raise_for(held[0])

    if state["armed"]:
        yield armed
        return

    def stop(signum, frame):
        if not state["armed"]:
            held.append(signum)
            return
        _raise_for(signum)

    sigs = [signal.SIGTERM, signal.SIGHUP]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        sigs.append(signal.SIGINT)
    old = {s: signal.signal(s, stop) for s in sigs}
    try:
        yield armed
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    if held and not state["armed"]:  # Popen failed: the signal still ends us
        _raise_for(held[0])


@contextlib.contextmanager
def signals_raise():
    """Inside the block SIGTERM and SIGHUP raise SystemExit(128 + signal) (in the main
    thread), as Ctrl-C raises KeyboardInterrupt, so that the launching process's cleanup
    runs. Their default action ends the process on the spot: a SIGTERM (`timeout`, a batch
    system) while `xladist run` set up its job before mpiexec's start (the compile, the
    service) or wrote its outputs left its xladist-outputs-* / xladist-trace-* folder in
    TMPDIR. launch() holds them while mpiexec starts (_stop_on_signals) as before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, lambda signum, frame: _raise_for(signum))
           for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _raise_for(signum: int):
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


# How much forwarded output `_pump` keeps.
_SEEN_BYTES = 1 << 20


def _pump(stream, out, held: list[str], seen: bytearray, capture: bool) -> None:
    """Copy the ranks' output to ours as it arrives (unless `capture`), minus MPICH's abort
    lines and its failure report (held back in `held`); the last `_SEEN_BYTES` are kept in
    `seen`.

    Raw bytes, not text lines: a progress line redrawn with `\r` (xladist/runtime/progress.py)
    has no newline and must pass at once; text mode would also turn each `\r` into a newline.
    The pipe is closed at its end: the Popen outlives the job where its caller keeps it
    (a Cluster, until it is closed), and each ended job would keep two descriptors.
    """
    with stream:
        _copy(stream.fileno(), out, held, seen, capture)


def _copy(fd: int, out, held: list[str], seen: bytearray, capture: bool) -> None:
    pending = b""
    while chunk := os.read(fd, 65536):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            text = line.decode(errors="replace")
            if _MPICH_REPORT.match(text):
                held.append(text)
                continue
            seen += line + b"\n"
            del seen[:-_SEEN_BYTES]
            if not capture and not _MPICH_NOISE.match(text):
                out.write(line + b"\n")
        if pending.startswith(b"\r") and not capture:  # an in-place status update: now
            out.write(pending)
            pending = b""
        if not capture:
            out.flush()
    if pending:
        seen += pending
        if not capture:
            out.write(pending)
            out.flush()


class _TextSink:
    """Bytes in, text out: for a sys.stderr without a buffer (replaced by a test harness)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data.decode(errors="replace"))

    def flush(self) -> None:
        self.stream.flush()


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a job started by `launch` (SIGTERM, then SIGKILL, to its process group)."""
    _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue
