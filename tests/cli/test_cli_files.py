"""Files a user names: checked before launch, results that survive the end of a run, one
mpiexec for every launching command (xladist/files.py, xladist/runtime/run_args.py,
xladist/collectives/mpiexec.py; issue 18).

The first tests are the rows of the issue, as a user would type them (real subprocesses,
real MPI jobs where the command launches one); the rest check the pieces in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xladist
from xladist.runtime.launcher import find_mpiexec
from tests.cli_util import ROOT, cli_env, xladist_cli
from tests.cli.test_feeds_cli import check_outfeed, expected_accs, loop_text, read_outfeed
from xladist import files
from xladist.cli import main
from xladist.errors import InputError, OutputError

CASE = ROOT / "tests" / "data" / "corpus" / "jax" / "psum_basic_mesh4"
RUN = ("run", CASE / "module.hlo", "-n", 4, "--backend", "interpreter", "-q")


def bad_files(d: Path) -> dict[str, Path]:
    """One file per way a source can be wrong."""
    d.mkdir(exist_ok=True)
    out = {"missing": d / "missing.npz", "directory": d}
    (d / "empty.npz").write_bytes(b"")
    out["empty"] = d / "empty.npz"
    (d / "random.npz").write_bytes(np.random.default_rng(0).bytes(300))
    out["random"] = d / "random.npz"
    np.savez(d / "pickled.npz", arg0=np.array([{"a": 1}, None], dtype=object))
    out["pickled"] = d / "pickled.npz"
    np.savez(d / "good.npz", arg0=np.zeros((4, 10), np.float32))
    data = (d / "good.npz").read_bytes()
    (d / "truncated.npz").write_bytes(data[: len(data) // 2])
    out["truncated"] = d / "truncated.npz"
    (d / "latin1.txt").write_bytes("caf\xe9 = 1\n".encode("latin-1"))
    out["not utf-8"] = d / "latin1.txt"
    return out


# ---- the rows ------------------------------------------------------------------
@pytest.mark.slow
def test_outputs_and_trace_in_a_missing_folder_stop_before_any_rank_starts(tmp_path):
    for flag, name in (("--outputs", "out.npz"), ("--trace", "t.json")):
        dest = tmp_path / "no" / "such" / name
        proc = xladist_cli(*RUN, "--inputs", CASE / "inputs.npz", flag, dest, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert f"{flag} {dest}: the folder {dest.parent} does not exist" in proc.stderr
        assert "device 0" not in proc.stdout  # nothing ran


@pytest.mark.parametrize("kind", ["random", "pickled", "truncated", "empty", "directory"])
@pytest.mark.slow
def test_bad_inputs_are_one_line_naming_the_option_and_file(tmp_path, kind):
    bad = bad_files(tmp_path / "bad")[kind]
    proc = xladist_cli(*RUN, "--inputs", bad, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--inputs {bad}" in lines[0], proc.stderr


def test_binary_config_is_refused_naming_the_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b"\xbf\x00\xffmodule = 1")
    proc = xladist_cli("run", "--config", cfg, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--config {cfg}: not UTF-8 text" in proc.stderr


# A PATH of system folders only: not this venv (not activated), nor pyenv's shims.
BARE_PATH = "/usr/bin:/bin"


@pytest.mark.slow
def test_bench_finds_the_wheels_mpiexec_without_the_venv_on_path():
    """The venv's `xladist` called by its full path, the venv not activated."""
    if shutil.which("mpiexec", path=BARE_PATH):
        pytest.skip("a system mpiexec on PATH would hide the difference")
    script = Path(sys.executable).parent / "xladist"
    command = [script] if script.exists() else [sys.executable, "-m", "xladist"]
    env = cli_env(PATH=BARE_PATH)
    proc = subprocess.run([*command, "bench", "collectives", "-n", "2", "--sizes", "8", "--ops",
                           "all-reduce", "--repeats", "1", "--iters", "2"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "all-reduce" in proc.stdout and "mpiexec" not in proc.stderr


def test_find_mpiexec_looks_next_to_python_then_path_then_honours_an_explicit_one(
        monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    found = Path(find_mpiexec())
    assert found.name in ("mpiexec", "mpiexec.hydra", "mpirun") and os.access(found, os.X_OK)
    assert find_mpiexec(str(found)) == str(found)
    with pytest.raises(InputError, match="--mpiexec .*not an executable"):
        find_mpiexec(str(tmp_path / "nope"))


# ---- results survive the end of a run ---------------------------------------------------
def _rescued_paths(stderr: str) -> dict[str, Path]:
    """{wanted file name: where it was saved} from the 'saved it as' lines."""
    out = {}
    for line in stderr.splitlines():
        if "saved it as" in line:
            saved = Path(line.split("saved it as ")[1].removesuffix(" instead"))
            out[saved.name] = saved
    return out


def _remove_rescue_folders(saved: dict[str, Path]) -> None:
    """Remove the folders results were rescued into -- only folders xladist made (never a
    parent such as /tmp itself)."""
    for folder in {p.parent for p in saved.values()}:
        if folder.name.startswith("xladist-rescued-"):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_results_written_after_their_folder_vanished_are_saved_elsewhere(tmp_path):
    """Rank 0's infeed function replaces the destination folder by a file during the run;
    outputs, trace and every rank's outfeed are saved elsewhere, said so, exit 1."""
    n, steps = 2, 3
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(n, steps))
    dest = tmp_path / "dest"
    dest.mkdir()
    proc = xladist_cli("run", module, "-n", n, "-q", "--prefetch", 1, "--infeed-fn",
                       "tests.feeds_fns:steps_then_block_dir", "--outfeed", dest / "o{rank}.npz",
                       "--outputs", dest / "out.npz", "--trace", dest / "t.json",
                       "--backend", "interpreter", timeout=180,
                       XLADIST_TEST_BLOCK_DIR=str(dest))
    saved = _rescued_paths(proc.stderr)
    try:
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr and dest.is_file()
        assert set(saved) == {"out.npz", "t.json", "o0.npz", "o1.npz"}, proc.stderr
        with np.load(saved["out.npz"]) as z:
            want = expected_accs(n, steps)[-1]
            np.testing.assert_allclose(z["out0"], np.stack([want] * n), rtol=1e-6)
        for r in range(n):
            check_outfeed(read_outfeed(saved[f"o{r}.npz"]), n, steps)
        events = json.loads(saved["t.json"].read_text())["traceEvents"]
        assert {e.get("pid") for e in events} >= {0, 1}
    finally:
        _remove_rescue_folders(saved)


def test_one_device_run_saves_its_results_in_a_fresh_folder(tmp_path, monkeypatch, capsys):
    """No job directory (one device, no mpiexec): a new xladist-rescued-* folder."""
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(1, 3))
    dest = tmp_path / "dest"
    dest.mkdir()
    monkeypatch.setenv("XLADIST_TEST_BLOCK_DIR", str(dest))
    code = main(["run", str(module), "-q", "--prefetch", "1", "--infeed-fn",
                 "tests.feeds_fns:steps_then_block_dir", "--outfeed", str(dest / "o{rank}.npz"),
                 "--outputs", str(dest / "out.npz"), "--backend", "interpreter"])
    err = capsys.readouterr().err
    saved = _rescued_paths(err)
    try:
        assert code == 1 and set(saved) == {"out.npz", "o0.npz"}, err
        assert saved["out.npz"].parent.name.startswith("xladist-rescued-")
        with np.load(saved["out.npz"]) as z:
            np.testing.assert_allclose(z["out0"], [expected_accs(1, 3)[-1]], rtol=1e-6)
        check_outfeed(read_outfeed(saved["o0.npz"]), 1, 3)
    finally:
        _remove_rescue_folders(saved)


def test_python_api_says_where_it_rescued_results(tmp_path, monkeypatch):
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(2, 3))
    dest = tmp_path / "dest"
    dest.mkdir()
    monkeypatch.setenv("XLADIST_TEST_BLOCK_DIR", str(dest))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the ranks import tests.feeds_fns
    with pytest.raises(OutputError, match="could not be written where asked") as info:
        xladist.run(str(module), None, n=2, backend="interpreter", prefetch=1, timeout=60,
                    infeed_fn="tests.feeds_fns:steps_then_block_dir",
                    outfeed=str(dest / "o{rank}.npz"), trace=str(dest / "t.json"),
                    job_timeout=120)
    folder = Path(str(info.value).split("saved in ")[1].split(":")[0])
    try:
        assert sorted(p.name for p in folder.iterdir()) == ["o0.npz", "o1.npz", "t.json"]
        for r in range(2):
            check_outfeed(read_outfeed(folder / f"o{r}.npz"), 2, 3)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_failed_run_whose_trace_is_lost_too_still_says_why_it_failed(tmp_path,
                                                                      monkeypatch):
    # Rank 1's infeed raises; the trace's folder is replaced by a file during the run and
    # no rescue folder can be made. Before: xladist.run raised only the trace's
    # OutputError -- the run's failure (which rank, which instruction, why) was hidden
    # behind it, as if only the trace had gone. Now the ExecutionError of the failure,
    # with what could not be kept added.
    import errno

    from tests.feeds_fns import item
    from xladist.errors import ExecutionError

    def no_room():
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files, "rescue_dir", no_room)
    dest = tmp_path / "dest"
    dest.mkdir()

    def feed(rank, rep, part):
        for k in range(10):
            if rank == 0 and k == 2 and dest.is_dir():
                shutil.rmtree(dest)
                dest.write_text("not a folder any more")
            if rank == 1 and k == 3:
                raise ValueError("shard 1 is corrupt at record 3")
            yield item(rank, k)
    with pytest.raises(ExecutionError) as info:
        xladist.run(loop_text(2, 5), None, n=2, backend="interpreter", timeout=60,
                    prefetch=1, infeed=feed, outfeed=lambda *a: None,
                    trace=str(dest / "t.json"), job_timeout=180)
    text = str(info.value)
    assert "rank 1 (replica 1, partition 0) | in (line 21): the infeed source (in the " \
        "launching process) raised ValueError: shard 1 is corrupt at record 3" in text, text
    assert text.endswith(f"(and some results could not be kept: cannot write --trace "
                         f"{dest / 't.json'}: Not a directory; making a folder to save it "
                         f"in failed too: No space left on device)"), text


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_trace_events_arriving_after_the_temp_folder_went_are_kept(tmp_path, monkeypatch):
    # The launching process's temp folder (where the service keeps each rank's trace events
    # until the run ends) is replaced by a file during the run. Before: the OSError of the
    # events' file, in the service's thread of the rank, counted as that rank's connection
    # ending: "rank 0 ... ended without a word: killed by a signal", the job ended, the
    # trace lost. Now the events stay in memory and the whole trace is written.
    import tempfile
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(2, 3))
    scratch = tmp_path / "scratch"
    (scratch / "tmp").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch / "tmp"))  # this process only
    monkeypatch.setenv("XLADIST_TEST_BLOCK_DIR", str(scratch))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the ranks import tests.feeds_fns
    got = []
    outs = xladist.run(str(module), None, n=2, backend="interpreter", prefetch=1,
                       timeout=60, infeed_fn="tests.feeds_fns:steps_then_block_dir",
                       outfeed=lambda rank, replica, partition, x: got.append((rank, x)),
                       trace=str(tmp_path / "t.json"), job_timeout=180)
    assert scratch.is_file()  # the infeed function did replace it
    np.testing.assert_allclose(outs[1][0], expected_accs(2, 3)[-1], rtol=1e-6)
    for r in range(2):
        check_outfeed([(int(i), acc) for rank, (i, acc) in got if rank == r], 2, 3)
    doc = json.loads((tmp_path / "t.json").read_text())
    assert {e["pid"] for e in doc["traceEvents"]} == {0, 1}
    assert "note" not in doc["otherData"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_outputs_arriving_after_the_temp_folder_went_are_written(tmp_path, monkeypatch,
                                                                 capsys):
    # The launching process's temp folder (where arriving outputs wait for the run's end)
    # is replaced by a file during the run. Before: "xladist run: error: --outputs: the
    # launching host could not keep the outputs (output 0 of device 0: Not a directory;
    # ...)", exit 1, the results of a run that had succeeded lost. Now they are written.
    import tempfile
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(2, 3))
    scratch, good = tmp_path / "scratch", tmp_path / "good"
    (scratch / "tmp").mkdir(parents=True)
    good.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch / "tmp"))  # this process only
    monkeypatch.setenv("XLADIST_TEST_BLOCK_DIR", str(scratch))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the ranks import tests.feeds_fns
    code = main(["run", str(module), "-n", "2", "-q", "--prefetch", "1", "--infeed-fn",
                 "tests.feeds_fns:steps_then_block_dir", "--outfeed", str(good / "o{rank}.npz"),
                 "--outputs", str(good / "out.npz"), "--backend", "interpreter",
                 "--timeout", "60"])
    err = capsys.readouterr().err
    assert code == 0 and err == "" and scratch.is_file(), err
    with np.load(good / "out.npz") as z:
        np.testing.assert_allclose(z["out0"], np.stack([expected_accs(2, 3)[-1]] * 2),
                                   rtol=1e-6)


def _run_blocking(tmp_path, monkeypatch, outfeed: Path, outputs: Path) -> int:
    """`xladist run` (in this process) of a 2-rank loop writing `outfeed` and `outputs`,
    whose folder tmp_path/dest rank 0's infeed function replaces by a file during the run,
    with no rescue folder possible (a disk full for every folder); its exit code."""
    import errno

    def no_room():
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(files, "rescue_dir", no_room)
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(2, 3))
    for folder in ("dest", "good"):
        (tmp_path / folder).mkdir()
    monkeypatch.setenv("XLADIST_TEST_BLOCK_DIR", str(tmp_path / "dest"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the ranks import tests.feeds_fns
    return main(["run", str(module), "-n", "2", "-q", "--prefetch", "1", "--infeed-fn",
                 "tests.feeds_fns:steps_then_block_dir", "--outfeed", str(outfeed),
                 "--outputs", str(outputs), "--backend", "interpreter", "--timeout", "60"])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_outfeed_that_could_be_neither_written_nor_rescued_fails_the_run(
        tmp_path, monkeypatch, capsys):
    # The outfeed's folder is replaced by a file during the run, and no rescue folder can
    # be made (a disk full for every folder). Before: the service recorded the failure and
    # nobody looked at it: nothing said, exit 0, the items gone. Now the run says which
    # files were lost and why, exit 1; the outputs are still written.
    dest, good = tmp_path / "dest", tmp_path / "good"
    code = _run_blocking(tmp_path, monkeypatch, dest / "o{rank}.npz", good / "out.npz")
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    for r in range(2):
        assert (f"cannot write --outfeed {dest / f'o{r}.npz'}: Not a directory; making a "
                f"folder to save it in failed too: No space left on device") in err, err
    with np.load(good / "out.npz") as z:
        np.testing.assert_allclose(z["out0"], np.stack([expected_accs(2, 3)[-1]] * 2),
                                   rtol=1e-6)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_per_device_outputs_that_could_be_neither_written_nor_rescued_fail_the_run(
        tmp_path, monkeypatch, capsys):
    # `--outputs 'dest/out{device}.npz'`, dest replaced by a file during the run, no rescue
    # folder possible. Before: "xladist: internal error in the coordination service while
    # serving rank 0: OutputError: ..." for each rank. Now the usual one-line error naming
    # each file and both reasons, exit 1; the outfeed files are still written.
    dest, good = tmp_path / "dest", tmp_path / "good"
    code = _run_blocking(tmp_path, monkeypatch, good / "o{rank}.npz", dest / "out{device}.npz")
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "internal error" not in err, err
    assert err.startswith("xladist run: error: cannot write --outputs (device "), err
    for d in range(2):
        assert (f"cannot write --outputs (device {d}) {dest / f'out{d}.npz'}: Not a "
                f"directory; making a folder to save it in failed too: No space left on "
                f"device") in err, err
    for r in range(2):
        check_outfeed(read_outfeed(good / f"o{r}.npz"), 2, 3)


def test_a_run_whose_temporary_folder_cannot_be_made_says_so_before_any_rank_starts(
        tmp_path, monkeypatch, capsys):
    # Before: tempfile.mkdtemp's FileNotFoundError, as a Python traceback from the CLI.
    import tempfile
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(2, 3))
    gone = tmp_path / "gone"
    monkeypatch.setattr(tempfile, "tempdir", str(gone))  # this process's temp folder, removed
    monkeypatch.delenv("TMPDIR", raising=False)
    code = main(["run", str(module), "-n", "2", "-q", "--infeed-fn", "tests.feeds_fns:steps",
                 "--outputs", str(tmp_path / "out.npz"), "--backend", "interpreter"])
    err = capsys.readouterr().err
    assert code == 1 and err == (
        f"xladist run: error: cannot make a temporary folder in {gone} for the outputs while "
        f"the ranks run: No such file or directory (TMPDIR is not set); set TMPDIR to a "
        f"writable folder with room\n"), err
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_outfeed_file_whose_writer_failed_fails_the_run_naming_the_rank(
        tmp_path, monkeypatch, capsys):
    # Rank 1's --outfeed file cannot be made (MemoryError while its archive is written, in
    # the launching process). Before: xladist run never looked at the failures its feeds
    # recorded (job.errors): no o1.npz, nothing said, exit 0. Now one line names the rank
    # and what failed, exit 1; the other files are written.
    from xladist.runtime.feeds import pipeline
    close = pipeline.NpzSink.close

    def failing(self, *, failed):
        if self.path.endswith("o1.npz"):
            raise MemoryError("no memory for the npz archive")
        close(self, failed=failed)
    monkeypatch.setattr(pipeline.NpzSink, "close", failing)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the ranks import tests.feeds_fns
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(2, 3))
    code = main(["run", str(module), "-n", "2", "-q", "--infeed-fn", "tests.feeds_fns:steps",
                 "--outfeed", str(tmp_path / "o{rank}.npz"), "--outputs",
                 str(tmp_path / "out.npz"), "--backend", "interpreter", "--timeout", "60"])
    err = capsys.readouterr().err
    assert code == 1 and err == ("xladist run: error: rank 1's outfeed: MemoryError: no "
                                 "memory for the npz archive; items may be missing from "
                                 "it\n"), err
    check_outfeed(read_outfeed(tmp_path / "o0.npz"), 2, 3)
    with np.load(tmp_path / "out.npz") as z:
        np.testing.assert_allclose(z["out0"], np.stack([expected_accs(2, 3)[-1]] * 2),
                                   rtol=1e-6)


def test_deliver_falls_back_to_a_fresh_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(files, "_fallback_dir", None)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder was expected")
    where = files.deliver(blocked / "r.bin", lambda f: f.write(b"result"), "--outputs")
    assert where.parent.name.startswith("xladist-rescued-") and where.name == "r.bin"
    assert where.parent.parent == tmp_path and where.read_bytes() == b"result"
    assert where in [Path(w) for _, _, w in files.rescued()]
    err = capsys.readouterr().err
    assert f"cannot write --outputs {blocked / 'r.bin'}" in err and str(where) in err
    # A write that succeeds replaces the file whole and leaves no temporary behind.
    ok = tmp_path / "ok.bin"
    ok.write_bytes(b"old")
    assert files.deliver(ok, lambda f: f.write(b"new"), "--outputs") == ok
    assert ok.read_bytes() == b"new" and sorted(
        p.name for p in tmp_path.iterdir() if p != where.parent) == ["blocked", "ok.bin"]


def test_deliver_whose_rescue_folder_cannot_be_made_raises_output_error(tmp_path,
                                                                       monkeypatch):
    # Before: a rescue folder that could not be made (a disk full for every folder) raised
    # NotADirectoryError / OSError out of deliver: a traceback from the CLI, and not the
    # OutputError that xladist.run promises.
    import tempfile
    monkeypatch.setattr(files, "_fallback_dir", None)
    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "file" / "tmp"))
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder was expected")
    before = len(files.rescued())
    with pytest.raises(OutputError) as info:
        files.deliver(blocked / "r.bin", lambda f: f.write(b"result"), "--outputs")
    assert str(info.value).startswith(f"cannot write --outputs {blocked / 'r.bin'}: ")
    assert "making a folder to save it in failed too: Not a directory" in str(info.value)
    assert len(files.rescued()) == before


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.npz"
    target.write_bytes(b"previous")

    def fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")
    with pytest.raises(OutputError, match="No space left on device"):
        files.write_atomic(target, fail, "--outputs")
    assert target.read_bytes() == b"previous" and os.listdir(tmp_path) == ["out.npz"]


# ---- the Python API raises xladist's errors -----------------------------------------------
def test_python_api_raises_xladist_errors_for_bad_files(tmp_path):
    bad = bad_files(tmp_path / "bad")
    module = xladist.load_hlo(CASE / "module.hlo")
    shapes = [p.shape for p in module.entry.parameters]
    from xladist.io import read_inputs, read_outputs
    for kind, path in bad.items():
        for call in (lambda: xladist.load_hlo(path), lambda: read_inputs(path, shapes),
                     lambda: read_outputs(path), lambda: xladist.run(module, path, n=4)):
            with pytest.raises(InputError, match=str(path)):
                call()
    with pytest.raises(InputError, match="trace .*does not exist"):
        xladist.run(module, CASE / "inputs.npz", n=4, trace=tmp_path / "no" / "t.json")
    with pytest.raises(InputError, match="n must be a whole number"):
        xladist.run(module, CASE / "inputs.npz", n="4")
    with pytest.raises(InputError, match="compile takes a parsed module"):
        xladist.compile(str(CASE / "module.hlo"))


def test_a_pickled_npz_is_never_unpickled(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))
    np.savez(tmp_path / "evil.npz", arg0=np.array([Evil()], dtype=object))
    with pytest.raises(InputError, match="Python objects"):
        files.load_npz(tmp_path / "evil.npz", "--inputs")
    assert not marker.exists()


def test_feed_templates_are_checked_for_every_rank(tmp_path):
    from tests.cli.test_feeds_cli import write_feeds
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(2, 2))
    infeed = write_feeds(tmp_path, 2, [2, 2])
    (tmp_path / "in" / "rank1.npz").write_bytes(b"garbage")
    proc = xladist_cli("run", module, "-n", 2, "--infeed", infeed, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--infeed '{infeed}' for rank 1 (replica 1, partition 0): " \
           f"{tmp_path / 'in' / 'rank1.npz'}: not an npz file" in proc.stderr


def test_a_per_rank_destination_two_ranks_would_share_is_refused(tmp_path, capsys):
    # Before: `xladist run -n 2 --outfeed o.npz` (no {rank}) ran, both ranks' items were
    # written to o.npz, one after the other, and one rank's were lost: exit 0, nothing said.
    # The same for xladist.run's outfeed path, and --host-send without {rank}/{channel}.
    from tests.cli.test_channels_cli import HOST_LOOP
    module = tmp_path / "loop.hlo"
    module.write_text(loop_text(2, 2))
    code = main(["run", str(module), "-n", "2", "--infeed-fn", "tests.feeds_fns:steps",
                 "--outfeed", str(tmp_path / "o.npz"), "--backend", "interpreter"])
    err = capsys.readouterr().err
    assert code == 2 and err == (
        f"xladist run: error: --outfeed '{tmp_path / 'o.npz'}': rank 0 (replica 0, partition "
        f"0) and rank 1 (replica 1, partition 0) would both write {tmp_path / 'o.npz'}, and "
        f"one's data would be lost; put {{rank}} in the path\n"), err
    with pytest.raises(InputError, match=r"^outfeed '.*o\.npz': rank 0 .* would both write"):
        xladist.run(loop_text(2, 2), None, n=2, backend="interpreter",
                    infeed_fn="tests.feeds_fns:steps", outfeed=str(tmp_path / "o.npz"))
    host = tmp_path / "host.hlo"
    host.write_text(HOST_LOOP)
    code = main(["run", str(host), "-n", "2", "--host-send", str(tmp_path / "s{channel}.npz")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(
        f"xladist run: error: --host-send '{tmp_path / 's{channel}.npz'}': rank 0 (channel 8) "
        f"and rank 1 (channel 8) would both write {tmp_path / 's8.npz'}"), err
    assert not list(tmp_path.glob("*.npz"))


_NARROW = """HloModule narrow, num_partitions=2

ENTRY %main (x: f8e4m3fn[4], y: s4[4]) -> (f8e4m3fn[4], s4[4], f8e5m2[4], bf16[4]) {
  %x = f8e4m3fn[4] parameter(0)
  %y = s4[4] parameter(1)
  %a = f8e4m3fn[4] negate(%x)
  %b = s4[4] negate(%y)
  %c = f8e5m2[4] convert(%x)
  %d = bf16[4] convert(%x)
  ROOT %t = (f8e4m3fn[4], s4[4], f8e5m2[4], bf16[4]) tuple(%a, %b, %c, %d)
}
"""


@pytest.mark.slow
def test_ml_dtypes_travel_through_npz_as_unsigned_bits(tmp_path):
    """f8/f4/s4 and the other ml_dtypes types are read from and written to npz as their
    unsigned bit patterns, like bf16: numpy writes those types with a descriptor ('<f1') that
    np.load refuses, so an f8 result made an npz nobody could read and no f8 input could be
    given (found running a JAX f8 all_gather/ppermute program)."""
    import ml_dtypes

    from xladist.io import decode, encode
    x = np.array([[1, 2, 3, -0.5], [4, 5, 6, 7]], ml_dtypes.float8_e4m3fn)
    y = np.array([[1, -2, 3, -7], [7, 0, -1, 2]], ml_dtypes.int4)
    np.savez(tmp_path / "in.npz", arg0=encode(x), arg1=encode(y))
    with np.load(tmp_path / "in.npz") as z:
        assert z["arg0"].dtype == np.uint8 and z["arg1"].dtype == np.uint8
    out = tmp_path / "out.npz"
    proc = xladist_cli("run", _write(tmp_path), "-n", 2,
                       "--inputs", tmp_path / "in.npz", "--outputs", out, "-q",
                       "--backend", "interpreter", timeout=240)
    assert proc.returncode == 0, proc.stderr
    module = xladist.parse_hlo(_NARROW)
    leaves = [s for _, s in module.entry.root.shape.leaves() if s.is_array]
    with np.load(out) as z:  # readable by numpy alone
        got = [decode(z[f"out{i}"], s) for i, s in enumerate(leaves)]
    assert [g.dtype for g in got] == [s.dtype for s in leaves]
    np.testing.assert_array_equal(got[0].astype(np.float32), -x.astype(np.float32))
    np.testing.assert_array_equal(got[1].astype(np.int8), -y.astype(np.int8))
    np.testing.assert_array_equal(got[2].astype(np.float32), x.astype(np.float32))
    np.testing.assert_array_equal(got[3].astype(np.float32), x.astype(np.float32))


def _write(tmp_path):
    path = tmp_path / "narrow.hlo"
    path.write_text(_NARROW)
    return path
