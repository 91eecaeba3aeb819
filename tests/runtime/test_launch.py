"""Starting jobs: `xladist run --hostfile`, the mpiexec command line, and what a run shows.

The hostfile runs use launch/hostfile.localhost (this machine twice), so they need no
cluster; a hostfile naming a host that does not exist proves the file really reaches
mpiexec. Results are checked against the corpus's expected outputs (computed by XLA).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from xladist.cli import SUBCOMMANDS
from xladist.errors import InputError
from xladist.runtime import launcher
from tests.cli_util import PSUM_MODULE, gone, marked, xladist_cli
from tests.paths import ROOT

CASE = ROOT / "tests" / "data" / "corpus" / "jax" / "elementwise_reduce_mesh2"
HOSTFILE = ROOT / "launch" / "hostfile.localhost"


def _xladist(*args, cwd=ROOT, timeout=120, progress="off"):
    return xladist_cli(*args, cwd=cwd, timeout=timeout, XLADIST_PROGRESS=progress)


def _check_outputs(path):
    got = np.load(path)
    expected = np.load(CASE / "expected.npz")
    assert sorted(got.files) == sorted(expected.files)
    for k in expected.files:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_hostfile_localhost_runs_corpus_case(tmp_path):
    out = tmp_path / "out.npz"
    proc = _xladist("run", str(CASE / "module.hlo"), "-n", "2", "--hostfile", str(HOSTFILE),
                    "--inputs", str(CASE / "inputs.npz"), "--outputs", str(out))
    assert proc.returncode == 0, proc.stderr
    _check_outputs(out)


@pytest.mark.slow
def test_hostfile_from_config(tmp_path):
    out = tmp_path / "out.npz"
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'module = "{CASE}/module.hlo"\ninputs = "{CASE}/inputs.npz"\nranks = 2\n'
                   f'hostfile = "{os.path.relpath(HOSTFILE, tmp_path)}"\n')
    proc = _xladist("run", "--config", str(cfg), "--outputs", str(out))
    assert proc.returncode == 0, proc.stderr
    _check_outputs(out)


@pytest.mark.slow
def test_hostfile_reaches_mpiexec(tmp_path):
    # A host that cannot exist: mpiexec fails to start a proxy there, which it could only
    # try if it read the file; xladist adds what to check.
    bad = tmp_path / "hosts"
    bad.write_text("no-such-host.invalid\nno-such-host.invalid\n")
    proc = _xladist("run", str(CASE / "module.hlo"), "-n", "2", "--hostfile", str(bad),
                    "--inputs", str(CASE / "inputs.npz"), timeout=90)
    assert proc.returncode != 0
    assert "no-such-host.invalid" in proc.stderr
    assert f"could not start ranks on the hosts of {bad}" in proc.stderr


def test_missing_hostfile_is_input_error(tmp_path):
    proc = _xladist("run", str(CASE / "module.hlo"), "-n", "2", "--hostfile",
                    str(tmp_path / "absent"), "--inputs", str(CASE / "inputs.npz"))
    assert proc.returncode == 2
    assert "hostfile" in proc.stderr and "does not exist" in proc.stderr


# A Slurm allocation of one node (this host), as an `salloc` shell or a batch script sets it.
SLURM = {"SLURM_JOB_ID": "77", "SLURM_NODELIST": "localhost", "SLURM_NNODES": "1",
         "SLURM_TASKS_PER_NODE": "2"}


def test_a_slurm_allocation_without_srun_is_refused_before_mpiexec_waits_forever(tmp_path):
    """Inside a Slurm allocation MPICH's mpiexec starts its proxies with srun (with a
    hostfile too, for one node too). Without srun on PATH (a container in the job, a shell
    without Slurm's bin folder) it printed its execvp error among held-back debug lines
    and waited forever: `xladist run -n 2` said nothing until killed. Now: exit 2 at once,
    saying why and what to do, no traceback."""
    import shutil
    if shutil.which("srun"):
        pytest.skip("srun is installed here")
    module = tmp_path / "psum.hlo"
    module.write_text(PSUM_MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    proc = xladist_cli("run", module, "-n", 2, "--inputs", tmp_path / "in.npz", cwd=tmp_path,
                       timeout=60, XLADIST_PROGRESS="off", **SLURM)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(
        "xladist run: error: this is a Slurm allocation (SLURM_NODELIST, SLURM_NNODES, "
        "SLURM_TASKS_PER_NODE are set), where mpiexec starts the ranks with srun, but srun is "
        "not on PATH"), proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_a_slurm_allocation_with_srun_or_an_explicit_mpiexec_is_not_refused(tmp_path,
                                                                             monkeypatch):
    for k, v in SLURM.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InputError, match="srun is not on PATH"):
        launcher.mpiexec_command(2, ["-c", "pass"])
    launcher.mpiexec_command(2, ["-c", "pass"], mpiexec=sys.executable)  # the user's choice
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    launcher.mpiexec_command(2, ["-c", "pass"])
    srun.unlink()
    monkeypatch.delenv("SLURM_TASKS_PER_NODE")  # not an allocation Hydra takes
    launcher.mpiexec_command(2, ["-c", "pass"])


# What srun sets in each of its tasks (here task 1 of 2 on one node) -- with --mpi=none, so
# no PMI_RANK / PMIX_RANK.
SRUN_TASK = {**SLURM, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "2",
             "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0"}


@pytest.mark.parametrize("n", [2, 1])
def test_a_task_of_srun_without_mpi_is_refused_before_it_starts_a_job_of_its_own(tmp_path, n):
    """`srun -n 2 xladist run m.hlo -n 2` where srun starts no MPI (`--mpi=none`, a
    cluster's MpiDefault): before, each task took itself for the launching process and ran
    a whole 2-rank job of its own -- two jobs writing the same --outputs (inside the
    allocation, each mpiexec's srun waits for the CPUs the step holds) -- and without -n each
    ran the module alone. Now each task stops at once (exit 2), saying how to start it."""
    from tests.cli_util import probe_mpiexec
    mpiexec, calls = probe_mpiexec(tmp_path)
    module = tmp_path / "psum.hlo"
    module.write_text(PSUM_MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    proc = xladist_cli("run", module, "-n", n, "--inputs", tmp_path / "in.npz", "--outputs",
                       tmp_path / "out.npz", "--mpiexec", mpiexec, cwd=tmp_path, timeout=60,
                       XLADIST_PROGRESS="off", **SRUN_TASK)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(
        "xladist run: error: this process is task 1 of the 2 tasks srun started "
        "(SLURM_STEP_NUM_TASKS=2), without an MPI plugin (no PMI_RANK or PMIX_RANK)"), \
        proc.stderr
    assert "srun --mpi=pmi2" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not calls.exists() and not (tmp_path / "out.npz").exists()


def test_srun_tasks_that_are_mpi_ranks_or_one_task_are_not_refused(monkeypatch):
    for k, v in SRUN_TASK.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(InputError, match="without an MPI plugin"):
        launcher.check_environment()  # every launch: xladist.run, Cluster, demo
    monkeypatch.setenv("PMI_RANK", "1")  # srun --mpi=pmi2: a rank
    launcher.check_not_an_srun_task()
    monkeypatch.delenv("PMI_RANK")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1")  # `srun -n 1 xladist run -n 4`
    launcher.check_not_an_srun_task()


def test_a_relative_kernel_cache_folder_is_the_launching_folders_on_every_host(
        tmp_path, monkeypatch):
    """XLADIST_CACHE_DIR=relcache: ranks on other hosts start in / and stay there where
    their host lacks the launching folder (tests/simhosts.py showed nodeB's ranks creating
    /relcache). Now every rank gets the launching folder's path; `off` stays off."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XLADIST_CACHE_DIR", "relcache")
    assert launcher.rank_environment()["XLADIST_CACHE_DIR"] == str(tmp_path / "relcache")
    for word in ("off", "0"):
        monkeypatch.setenv("XLADIST_CACHE_DIR", word)
        assert launcher.rank_environment()["XLADIST_CACHE_DIR"] == word
    monkeypatch.setenv("XLADIST_CACHE_DIR", "/abs/cache")
    assert launcher.rank_environment()["XLADIST_CACHE_DIR"] == "/abs/cache"


def test_mpiexec_command_passes_hostfile():
    cmd = launcher.mpiexec_command(2, ["-m", "xladist"], hostfile="hosts")
    i = cmd.index("-f")
    assert cmd[i + 1] == "hosts" and cmd[cmd.index("-n") + 1] == "2"


BOM = b"\xef\xbb\xbf"


def _marked_hostfile(tmp_path):
    """launch/hostfile.localhost as a Windows editor saves it: a UTF-8 byte-order mark
    first."""
    path = tmp_path / "hosts"
    path.write_bytes(BOM + HOSTFILE.read_bytes())
    return path


def test_a_hostfile_starting_with_a_byte_order_mark_gives_mpiexec_its_host_names(tmp_path):
    """Before: mpiexec got the user's file, whose mark MPICH read as part of the first host
    name (`ssh: Could not resolve hostname \\357\\273\\277localhost`), though xladist's
    own check of the file (files.read_text) drops it. Now mpiexec is given the hostfile's
    text as xladist reads it. A stand-in mpiexec shows the host lines of the file it is
    given."""
    hosts = tmp_path / "hosts"
    hosts.write_bytes(BOM + b"nodeA:2\nnodeB:2\n")
    fake = tmp_path / "mpiexec"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != -f ]; do shift; done\n'
                    'echo "given: $2"\ncat "$2"\n')
    fake.chmod(0o755)
    proc = launcher.launch(2, ["-c", "pass"], hostfile=str(hosts), mpiexec=str(fake),
                           capture=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    given, *lines = proc.stdout.splitlines()
    assert lines == ["nodeA:2", "nodeB:2"]  # before: "\ufeffnodeA:2"
    assert hosts.read_bytes().startswith(BOM)  # the user's file is left as it is
    assert not os.path.exists(given.removeprefix("given: "))  # the copy lives with the job
    plain = tmp_path / "plain"
    plain.write_bytes(b"nodeA:2\nnodeB:2\n")  # no mark: mpiexec reads the user's own file
    proc = launcher.launch(2, ["-c", "pass"], hostfile=str(plain), mpiexec=str(fake),
                           capture=True, timeout=30)
    assert proc.stdout.splitlines() == [f"given: {plain}", "nodeA:2", "nodeB:2"]



@pytest.mark.parametrize("text, given", [
    ("# our nodes\nnodeA:2   # the first\n\n  nodeB\t\nnodeC:1:ib0\n",
     "nodeA:2\nnodeB\nnodeC:1:ib0\n"),
    ("nodeA:2\r\nnodeB:2", "nodeA:2\nnodeB:2\n"),
])
def test_a_hostfile_reaches_mpiexec_as_lines_it_takes(tmp_path, text, given):
    """MPICH's mpiexec takes whole-line comments but not one after a host (`token # not
    supported at this time`); xladist gives it the host lines alone."""
    hosts = tmp_path / "hosts"
    hosts.write_bytes(text.encode())
    assert launcher.hostfile_text(hosts) == given
    with launcher.hostfile_as_read(str(hosts)) as path:
        assert Path(path).read_text() == given


@pytest.mark.parametrize("text, says", [
    ("nodeA slots=2\nnodeB slots=2\n", "line 1: 'nodeA slots=2' is not a host line"),
    ("nodeA:2\nnodeB:0\n", "line 2: 'nodeB:0' is not a host line"),
    ("nodeA:two\n", "line 1: 'nodeA:two' is not a host line"),
    ("# nobody yet\n\n", "names no host (MPICH's mpiexec would run every rank on this host)"),
])
def test_a_hostfile_mpiexec_would_misread_is_refused_naming_the_line(tmp_path, text, says):
    """Before, `xladist run --hostfile` gave mpiexec such a file: OpenMPI's `slots=2` (and a
    comment after a host) stopped MPICH's parser and xladist then said every host needs
    passwordless ssh; `node:0` and `node:two` killed mpiexec with SIGFPE, without a word
    (exit 136); a file of comments ran all ranks on this host. Now: exit 2, naming the file
    and line, before anything starts."""
    hosts = tmp_path / "hosts"
    hosts.write_text(text)
    with pytest.raises(InputError, match=re.escape(says)):
        launcher.hostfile_text(hosts)
    module = tmp_path / "psum.hlo"
    module.write_text(PSUM_MODULE)
    proc = xladist_cli("run", module, "-n", 2, "--hostfile", hosts, cwd=tmp_path, timeout=60,
                       XLADIST_PROGRESS="off")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"xladist run: error: --hostfile {hosts}"), proc.stderr
    assert says in proc.stderr and "ssh" not in proc.stderr, proc.stderr


def test_a_marked_hostfile_without_a_temporary_folder_is_a_clear_error(tmp_path,
                                                                       monkeypatch):
    # Before: the copy of a hostfile's text (its byte-order mark dropped) was made with
    # tempfile.mkstemp, whose FileNotFoundError (this process's temp folder removed or
    # full) was a Python traceback from `xladist run --hostfile`. Now it is the one error
    # of files.temp_folder, naming the folder and TMPDIR; the copy still goes with the job.
    import tempfile

    from xladist.errors import OutputError
    hosts = tmp_path / "hosts"
    hosts.write_bytes(BOM + b"nodeA:2\n")
    gone = tmp_path / "gone"
    monkeypatch.setattr(tempfile, "tempdir", str(gone))
    monkeypatch.setenv("TMPDIR", str(gone))
    with pytest.raises(OutputError) as info:
        with launcher.hostfile_as_read(str(hosts)):
            pass
    assert str(info.value) == (
        f"cannot make a temporary folder in {gone} for the text of the hostfile {hosts}: No "
        f"such file or directory (TMPDIR is {gone}); set TMPDIR to a writable folder with "
        f"room")
    gone.mkdir()
    with launcher.hostfile_as_read(str(hosts)) as given:
        assert Path(given).read_bytes() == b"nodeA:2\n"
    assert list(gone.iterdir()) == []


@pytest.mark.slow
def test_a_hostfile_starting_with_a_byte_order_mark_runs(tmp_path):
    """The same through `xladist run --hostfile` on this machine: before, mpiexec could not
    start ranks on the host `\\ufefflocalhost` (exit 1); now the case runs and gives XLA's
    outputs."""
    out = tmp_path / "out.npz"
    proc = _xladist("run", str(CASE / "module.hlo"), "-n", "2", "--hostfile",
                    str(_marked_hostfile(tmp_path)), "--inputs", str(CASE / "inputs.npz"),
                    "--outputs", str(out))
    assert proc.returncode == 0, proc.stderr
    _check_outputs(out)


@pytest.mark.slow
def test_progress_on_does_not_change_results(tmp_path):
    # Progress in log mode gives rank 0 alone a tracer: the run must still complete
    # (no collective that only rank 0 enters) and give the same numbers.
    out = tmp_path / "out.npz"
    proc = _xladist("run", str(CASE / "module.hlo"), "-n", "2",
                    "--inputs", str(CASE / "inputs.npz"), "--outputs", str(out),
                    progress="log", timeout=60)
    assert proc.returncode == 0, proc.stderr
    _check_outputs(out)


def test_forward_stderr_passes_status_updates_and_drops_mpich_noise(monkeypatch):
    import io
    r, w = os.pipe()
    sink = io.BytesIO()

    class Err:
        buffer = sink

    monkeypatch.setattr(sys, "stderr", Err)
    data = (b"\rstep 1\rstep 2 | outfeed 3"
            b"\r             \rrank 1: error: boom\n"
            b"Abort(1) on node 1: application called MPI_Abort(MPI_COMM_WORLD, 1)\n"
            b"last line without newline")
    os.write(w, data)
    os.close(w)
    seen, held = bytearray(), []
    with os.fdopen(r, "rb") as stream:
        launcher._pump(stream, sink, held, seen, capture=False)
    text = sink.getvalue()
    assert held == []
    assert bytes(seen) == data  # what the abort-note check compares against: unfiltered
    assert b"\rstep 1\rstep 2 | outfeed 3" in text     # \r updates pass unchanged
    assert b"rank 1: error: boom\n" in text
    assert b"MPI_Abort" not in text
    assert text.endswith(b"last line without newline")


# A rank that fails: `say` fails the usual way (deadline.abort_job: its last words go to the
# coordination service, which prints them); `silent` is the case where the rank's own stderr
# would be lost, made certain: it hands its words to the service and aborts without a print.
_ABORTING_RANK = """
import sys
from mpi4py import MPI
from xladist.collectives import deadline
from xladist.runtime.service import client
me = client.for_rank(MPI.COMM_WORLD)
if MPI.COMM_WORLD.Get_rank() == 1:
    if sys.argv[1] == "say":
        deadline.abort_job("the last words of rank 1")
    me.prints = True  # only the service may print them
    me.failing("rank 1: the last words of rank 1", 3)
    MPI.COMM_WORLD.Abort(3)
MPI.COMM_WORLD.Barrier()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("capture", [True, False], ids=["captured", "forwarded"])
@pytest.mark.parametrize("say", ["say", "silent"])
@pytest.mark.slow
def test_abort_message_reaches_the_user_exactly_once(tmp_path, capfd, capture, say):
    # MPICH's launcher may drop what a rank printed just before MPI_Abort; the launching
    # process's coordination service receives it before the abort and prints it, once.
    script = tmp_path / "abort.py"
    script.write_text(_ABORTING_RANK)
    proc = launcher.launch(2, [str(script), say], capture=capture, timeout=90,
                           env={"PYTHONPATH": str(ROOT)})
    err = proc.stderr if capture else capfd.readouterr().err
    assert proc.returncode != 0
    assert err.count("rank 1: the last words of rank 1") == 1, err
    assert "BAD TERMINATION" not in err and "[proxy" not in err, err  # MPICH's own words


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_started_job_keeps_what_its_service_heard(tmp_path):
    # launcher.started (the conformance runner's running job): the ranks' service is made
    # there, so a rank's last words reach proc.abort_notes() even when its stderr is lost.
    script = tmp_path / "abort.py"
    script.write_text(_ABORTING_RANK)
    with launcher.started(2, [str(script), "silent"], env={"PYTHONPATH": str(ROOT)}) as proc:
        proc.communicate(timeout=90)
        notes = proc.abort_notes()
    assert proc.returncode != 0
    assert ["rank 1: the last words of rank 1" in note for note in notes].count(True) == 1, notes


# Every registered command (aot, compile and conformance were once left out of a list here),
# and the benchmarks' own parsers, which `xladist bench collectives [--in-loop] --help` shows.
SUBS = [*SUBCOMMANDS, "bench collectives", "bench collectives --in-loop"]


def _subparser(sub):
    import argparse

    from xladist.cli import _load
    if sub.startswith("bench "):  # a benchmark's parser (xladist/cli/bench.py hands it on)
        import importlib
        mod = importlib.import_module("xladist.bench." + ("in_loop" if "--in-loop" in sub
                                                          else "collectives"))
        return mod, mod._parser()
    mod = _load(sub)
    p = argparse.ArgumentParser(prog=f"xladist {sub}")
    mod.add_arguments(p)
    return mod, p


@pytest.mark.parametrize("sub", SUBS)
def test_every_option_of_every_subcommand_has_an_example(sub):
    mod, parser = _subparser(sub)
    examples = mod.EPILOG.split("example", 1)[1]
    assert f"xladist {sub}" in examples
    lines = [ln for ln in examples.splitlines() if f"xladist {sub}" in ln]
    for action in parser._actions:
        if not action.option_strings or "-h" in action.option_strings:
            continue
        assert any(o in ln.split() or any(w.startswith(o + "=") for w in ln.split())
                   for o in action.option_strings for ln in lines), \
            f"xladist {sub}: no example uses {'/'.join(action.option_strings)}"


# An example line of an epilog: the command, then two or more spaces and what it does.
HELP_EXAMPLE = re.compile(r"^  (xladist \S.*?)(?:\s{2,}\S.*)?$")


@pytest.mark.parametrize("sub", ["", *SUBS])
def test_help_examples_are_commands_the_parser_takes(sub, capsys):
    """Each example in --help, copied up to the gap before its description, parses: an
    option misspelt there, or a description run into the command, fails."""
    import shlex

    from xladist.cli import EPILOG, build_parser
    text = EPILOG
    if sub:
        mod, parser = _subparser(sub)
        text = getattr(mod, "EPILOG", None) or parser.epilog or ""
    examples = [m.group(1) for ln in text.splitlines() if (m := HELP_EXAMPLE.match(ln))]
    assert examples
    bad = []
    for cmd in examples:
        argv = shlex.split(cmd)[1:]
        try:
            if argv[:2] == ["bench", "collectives"]:  # the benchmark's own parser
                harness = "bench collectives" + (" --in-loop" if "--in-loop" in argv else "")
                _subparser(harness)[1].parse_args(argv[2:])
            else:
                build_parser().parse_args(argv)
        except SystemExit as e:
            if e.code:
                bad.append(f"{cmd!r}: {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert not bad, f"xladist {sub} --help shows examples it refuses: {bad}"


@pytest.mark.parametrize("sub", SUBS)
def test_subcommand_help_runs(sub):
    _subparser(sub)
    proc = _xladist(*sub.split(), "--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "examples:" in proc.stdout


def test_top_level_help_lists_subcommands_and_examples():
    from xladist.cli import SUBCOMMANDS, _load
    proc = _xladist("--help", timeout=60)
    assert proc.returncode == 0
    built = []
    for sub in SUBCOMMANDS:
        try:
            _load(sub)
        except ModuleNotFoundError:
            continue
        built.append(sub)
        assert f"    {sub} " in proc.stdout, sub
    examples = proc.stdout.split("examples:", 1)[1]
    for sub in built:
        if sub != "bench":
            assert f"xladist {sub}" in examples, sub


@pytest.mark.slow
def test_sigterm_to_the_launcher_stops_every_rank(tmp_path):
    # A job killed from outside (timeout, a batch system) must not leave ranks behind.
    import signal
    import time

    from xladist.examples.train_mlp import Config, write_example
    paths = write_example(tmp_path / "data", Config(replicas=2, steps=400))
    marker = f"XLADIST_TEST_MARKER={tmp_path.name}-{os.getpid()}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), XLADIST_PROGRESS="off",
               XLADIST_TEST_MARKER=marker.split("=", 1)[1])
    proc = subprocess.Popen([sys.executable, "-m", "xladist", "run",
                             paths["module"],
                             "-n", "2", "--inputs", paths["inputs"], "--infeed",
                             paths["infeed"], "--outputs", tmp_path / "out.npz", "--no-check"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(marked(marker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # the launcher, mpiexec, its proxy and the ranks
        assert len(marked(marker)) >= 3, "the job did not start"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert gone(marker, 10) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM


def _mpiexec_wrapper(tmp_path) -> tuple[Path, Path]:
    """A launcher script that notes it was called, then runs the wheel's mpiexec: a run
    through it proves --mpiexec is the program that started the ranks."""
    from xladist.collectives.mpiexec import find_mpiexec
    marker = tmp_path / "called"
    script = tmp_path / "my-mpiexec"
    script.write_text(f'#!/bin/sh\nprintf "%s " "$@" > "{marker}"\nexec "{find_mpiexec()}" "$@"\n')
    script.chmod(0o755)
    return script, marker


@pytest.mark.slow
def test_run_with_explicit_mpiexec(tmp_path):
    script, marker = _mpiexec_wrapper(tmp_path)
    out = tmp_path / "out.npz"
    proc = _xladist("run", str(CASE / "module.hlo"), "-n", "2", "--mpiexec", str(script),
                    "--inputs", str(CASE / "inputs.npz"), "--outputs", str(out))
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text().startswith("-n 2 ")
    _check_outputs(out)


@pytest.mark.slow
def test_demo_with_explicit_mpiexec(tmp_path):
    script, marker = _mpiexec_wrapper(tmp_path)
    proc = _xladist("demo", "-n", "2", "--steps", "2", "-q", "--mpiexec", str(script),
                    timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert marker.read_text().startswith("-n 2 ")
    assert "-> OK" in proc.stdout


@pytest.mark.parametrize("sub", ["run", "demo"])
@pytest.mark.parametrize("bad", ["absent", "not-executable"])
def test_bogus_mpiexec_is_input_error(tmp_path, sub, bad):
    path = tmp_path / bad
    if bad == "not-executable":
        path.write_text("#!/bin/sh\n")
    args = [str(CASE / "module.hlo"), "--inputs", str(CASE / "inputs.npz")] \
        if sub == "run" else ["--steps", "1"]
    proc = _xladist(sub, *args, "-n", "2", "--mpiexec", str(path))
    assert proc.returncode == 2, proc.stderr
    assert f"--mpiexec {path}: not an executable program" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_ops_refuses_an_unknown_family(capsys):
    # Before: `xladist ops --family nosuch` printed an empty table and exited 0.
    from xladist.cli import main
    with pytest.raises(SystemExit) as e:
        main(["ops", "--family", "nosuch"])
    assert e.value.code == 2
    assert "--family: invalid choice: 'nosuch' (choose from 'elementwise_unary'" in \
        capsys.readouterr().err
    assert main(["ops", "--family", "feed"]) == 0
    assert capsys.readouterr().out.split()[6:8] == ["infeed", "yes"]


@pytest.mark.parametrize("argv, says", [
    (["--check-budget", "-1"], "--check-budget must be a number of seconds >= 0, got -1.0"),
    (["--check-budget", "nan"], "--check-budget must be a number of seconds >= 0, got nan"),
    (["--replica-count", "0"], "--replica-count must be a whole number >= 1, got 0"),
])
def test_check_refuses_bad_numbers_as_run_does(capsys, argv, says):
    # Before: `xladist check m.hlo --check-budget -1` ran the check (exit 0) where `xladist
    # run` refused the same option; and run's message offered "(0: no deadline)" for a
    # budget, where 0 means "give up at once".
    from xladist.cli import main
    from tests.cli.test_channels_cli import DATA
    module = sorted(DATA.glob("*.hlo"))[0]
    assert main(["check", str(module), *argv]) == 2
    assert capsys.readouterr().err.strip() == f"xladist check: error: {says}"
