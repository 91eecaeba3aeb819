"""Fuzzing every subcommand with bad values: never a traceback, always a message (issue 18).

For each subcommand, hypothesis builds argument lists that combine valid flags with at least
one bad value - missing paths, folders, empty files, random bytes, truncated or pickled npz,
non-UTF-8 text, wrong dtypes and shapes, negative, huge or non-numeric numbers, unknown
keys and names - and runs `xladist.cli.main(argv)` in this process. Every example must
end with exit code 0, 1 or 2, print no "Traceback", name what was wrong (the option or the
file) when it fails, finish within TIME_LIMIT_S, and leave no child process behind. Since
each example holds a bad value, no example may start MPI ranks: `launcher.launch` refuses
to run while the fuzz is on, so a bad value that slips past the checks fails the test.

A few examples run as real subprocesses too (`xladist ...` as a user types it).

Examples per subcommand: XLADIST_FUZZ_EXAMPLES (default 15, about 20 s in all on 2 busy
cores); e.g. `XLADIST_FUZZ_EXAMPLES=300 python -m pytest tests/cli/test_cli_fuzz.py`.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cli_util import PSUM_MODULE, ROOT, cli_env
from xladist.cli import main

EXAMPLES = int(os.environ.get("XLADIST_FUZZ_EXAMPLES", "15"))
TIME_LIMIT_S = 30.0
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])



def _make_files(d: Path) -> dict[str, Path]:
    """Good files, and one bad file for every way a source can be wrong."""
    d.mkdir(parents=True, exist_ok=True)
    f = {"module": d / "m.hlo", "inputs": d / "in.npz", "dir": d / "a_folder",
         "missing": d / "missing.npz", "empty": d / "empty.bin", "random": d / "random.bin",
         "truncated": d / "truncated.npz", "pickled": d / "pickled.npz",
         "latin1": d / "latin1.txt", "wrong_dtype": d / "wrong_dtype.npz",
         "wrong_shape": d / "wrong_shape.npz", "extra_key": d / "extra_key.npz",
         "npy": d / "plain.npy", "zip_text": d / "zip_text.npz", "not_hlo": d / "not_hlo.hlo",
         "cfg_unknown": d / "unknown.toml", "cfg_type": d / "type.toml",
         "cfg_bad_inputs": d / "bad_inputs.toml", "cfg_binary": d / "binary.toml",
         "file_as_dir": d / "plainfile"}
    f["module"].write_text(PSUM_MODULE)
    np.savez(f["inputs"], arg0=np.arange(8, dtype=np.float32).reshape(2, 4))
    f["dir"].mkdir(exist_ok=True)
    f["empty"].write_bytes(b"")
    f["random"].write_bytes(np.random.default_rng(18).bytes(512))
    data = f["inputs"].read_bytes()
    f["truncated"].write_bytes(data[: len(data) * 2 // 3])
    np.savez(f["pickled"], arg0=np.array([{"x": 1}, [2]], dtype=object))
    f["latin1"].write_bytes("r\xe9sum\xe9 = 'caf\xe9'\n".encode("latin-1"))
    np.savez(f["wrong_dtype"], arg0=np.zeros((2, 4), np.float64))
    np.savez(f["wrong_shape"], arg0=np.zeros((3, 5), np.float32))
    np.savez(f["extra_key"], arg0=np.zeros((2, 4), np.float32), arg7=np.zeros(1))
    np.save(f["npy"], np.zeros(3))
    with zipfile.ZipFile(f["zip_text"], "w") as z:
        z.writestr("notes.txt", "not an array")
    f["not_hlo"].write_text("this is not HLO { at all\n")
    f["cfg_unknown"].write_text('modul = "m.hlo"\nranks = 2\n')
    f["cfg_type"].write_text('module = "m.hlo"\nranks = "two"\n')
    f["cfg_bad_inputs"].write_text('module = "m.hlo"\nranks = 2\ninputs = "pickled.npz"\n')
    f["cfg_binary"].write_bytes(b"\x00\xff\xfe\x80 module")
    f["file_as_dir"].write_text("a file, not a folder")
    return f


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _make_files(tmp_path_factory.mktemp("fuzz"))


BAD_SOURCES = ["dir", "missing", "empty", "random", "truncated", "pickled", "latin1", "npy",
               "zip_text"]
BAD_INPUTS = BAD_SOURCES + ["wrong_dtype", "wrong_shape", "extra_key"]
BAD_CONFIGS = ["cfg_unknown", "cfg_type", "cfg_bad_inputs", "cfg_binary", "random", "dir",
               "missing", "empty"]
BAD_INTS = ["-1", "0", "-999999999999", "abc", "1e3", "", "2.5"]
BAD_FLOATS = ["-1", "-0.5", "nan", "abc", ""]


def _bad_destination(files, name: str, template: bool = False) -> str:
    """A place nothing can be written: a missing folder, a folder, under a file."""
    placeholder = "{rank}" if template else ""
    return {"no_folder": str(files["dir"] / "no" / "such" / f"o{placeholder}.npz"),
            "is_folder": str(files["dir"]),
            "under_file": str(files["file_as_dir"] / f"o{placeholder}.npz")}[name]


def _source(files, draw, names) -> tuple[str, str]:
    name = draw(st.sampled_from(names))
    return name, str(files[name])


@st.composite
def run_argv(draw, files):
    """`xladist run` with one to three bad settings among valid ones."""
    bad: list[tuple[list[str], list[str]]] = []  # (argv piece, words a message may name)
    dest = st.sampled_from(["no_folder", "is_folder", "under_file"])
    choices = {
        "inputs": lambda: (lambda n, p: (["--inputs", p], ["--inputs", p]))(
            *_source(files, draw, BAD_INPUTS)),
        "module": lambda: (lambda n, p: ([p], ["MODULE", p]))(
            *_source(files, draw, BAD_SOURCES + ["not_hlo"])),
        "config": lambda: (lambda n, p: (["--config", p], ["--config", p, "modul", "ranks",
                                                          "pickled"]))(
            *_source(files, draw, BAD_CONFIGS)),
        "outputs": lambda: (lambda p: (["--outputs", p], ["--outputs", p]))(
            _bad_destination(files, draw(dest))),
        "trace": lambda: (lambda p: (["--trace", p], ["--trace", p]))(
            _bad_destination(files, draw(dest))),
        "outfeed": lambda: (lambda p: (["--outfeed", p], ["--outfeed", p]))(
            _bad_destination(files, draw(st.sampled_from(["is_folder", "under_file"])),
                             template=True)),
        "infeed": lambda: (lambda n, p: (["--infeed", p], ["--infeed", p]))(
            *_source(files, draw, BAD_SOURCES)),
        "infeed_template": lambda: (["--infeed", str(files["dir"] / "in{rank}{oops}.npz")],
                                    ["--infeed"]),
        "hostfile": lambda: (lambda n, p: (["--hostfile", p], ["--hostfile", p]))(
            *_source(files, draw, ["dir", "missing", "empty", "latin1"])),
        "n": lambda: (lambda v: (["-n", v], ["-n", "N", "devices"]))(
            draw(st.sampled_from(BAD_INTS + ["3", "99999999"]))),
        "timeout": lambda: (lambda v: (["--timeout", v], ["--timeout"]))(
            draw(st.sampled_from(BAD_FLOATS))),
        "prefetch": lambda: (lambda v: (["--prefetch", v], ["--prefetch"]))(
            draw(st.sampled_from(BAD_INTS))),
        "replica_count": lambda: (lambda v: (["--replica-count", v], ["--replica-count",
                                                                      "replica"]))(
            draw(st.sampled_from(BAD_INTS + ["3"]))),
        "assignment": lambda: (lambda v: (["--device-assignment", v],
                                          ["--device-assignment", "device"]))(
            draw(st.sampled_from(["0,0", "x", "0;", "5,7", "-1;0", "0,1;2"]))),
        "backend": lambda: (["--backend", "gpu"], ["gpu"]),
        "unknown_flag": lambda: (["--no-such-flag"], ["--no-such-flag"]),
    }
    for key in draw(st.lists(st.sampled_from(sorted(choices)), min_size=1, max_size=3,
                             unique=True)):
        bad.append(choices[key]())
    argv = ["run"]
    if not any(piece[0] in ("--config",) or not piece[0].startswith("-") for piece, _ in bad):
        argv += [str(files["module"]), "-n", "2"]
    good = draw(st.lists(st.sampled_from(["-q", "--stats", "--no-verify", "--strict",
                                          "--no-check", "--backend=interpreter",
                                          "--inputs-good"]), max_size=3, unique=True))
    for g in good:
        argv += ["--inputs", str(files["inputs"])] if g == "--inputs-good" else [g]
    for piece, _ in bad:
        argv += piece
    return argv, [w for _, words in bad for w in words]


@st.composite
def module_command_argv(draw, files, command: str):
    """check / fmt / explain: a bad FILE, or a good one with bad numbers or flags."""
    bad_file = draw(st.booleans())
    name = draw(st.sampled_from(BAD_SOURCES + ["not_hlo"])) if bad_file else "module"
    argv = [command, str(files[name])]
    words = [str(files[name]), "FILE", "MODULE"]
    extra = {"check": ["--json", "--strict", "--no-deadlock-check"],
             "fmt": ["--short", "--check", "--no-metadata"],
             "explain": ["--json", "--no-buffers"]}[command]
    argv += draw(st.lists(st.sampled_from(extra), max_size=2, unique=True))
    if command == "check" and (not bad_file or draw(st.booleans())):
        v = draw(st.sampled_from(BAD_INTS + ["3", "99999999"]))
        argv += ["-n", v]
        words += ["-n", "devices", v]
    if not bad_file and len(argv) == 2 or draw(st.booleans()):
        argv.append("--no-such-flag")
        words.append("--no-such-flag")
    return argv, words


@st.composite
def bench_argv(draw, files):
    choices = {
        "n": (lambda v: (["-n", v], ["-n"]))(draw(st.sampled_from(BAD_INTS))),
        "sizes": (lambda v: (["--sizes", v], ["--sizes", "size"]))(
            draw(st.sampled_from(["", "0", "-8", "8X", "1T", "99999999G", ",,", "abc"]))),
        "ops": (lambda v: (["--ops", v], ["--ops"]))(
            draw(st.sampled_from(["", "all-sum", "all-reduce,nope", ","]))),
        "iters": (["--iters", "-3"], ["--iters"]),
        "repeats": (lambda v: (["--repeats", v], ["--repeats"]))(
            draw(st.sampled_from(["0", "-1", "x"]))),
        "mpiexec": (lambda n, p: (["--mpiexec", p], ["--mpiexec", p]))(
            *_source(files, draw, ["missing", "dir", "empty"])),
        "what": ([], ["collectives", "choice"]),
    }
    keys = draw(st.lists(st.sampled_from(sorted(choices)), min_size=1, max_size=3,
                         unique=True))
    argv = ["bench"] + ([] if "what" in keys else ["collectives"])
    if "what" in keys:
        argv.append(draw(st.sampled_from(["compute", "collective", "--sizes"])))
    words = []
    for k in keys:
        piece, w = choices[k]
        argv += piece
        words += w
    return argv, words


@st.composite
def demo_argv(draw, files):
    dest = st.sampled_from(["no_folder", "is_folder", "under_file"])
    choices = {
        "n": (lambda v: (["-n", v], ["-n"]))(draw(st.sampled_from(BAD_INTS))),
        "steps": (lambda v: (["--steps", v], ["--steps"]))(draw(st.sampled_from(BAD_INTS))),
        "timeout": (lambda v: (["--timeout", v], ["--timeout"]))(
            draw(st.sampled_from(BAD_FLOATS))),
        "trace": (lambda p: (["--trace", p], ["--trace", p]))(
            _bad_destination(files, draw(dest))),
        "hostfile": (lambda n, p: (["--hostfile", p], ["--hostfile", p]))(
            *_source(files, draw, ["dir", "missing", "empty", "latin1"])),
        "backend": (["--backend", "tpu"], ["tpu"]),
    }
    keys = draw(st.lists(st.sampled_from(sorted(choices)), min_size=1, max_size=3,
                         unique=True))
    # Valid flags first: a later bad value overrides them.
    argv = ["demo", *draw(st.lists(st.sampled_from(["-q", "-n2", "--steps=2"]), max_size=2,
                                   unique=True))]
    words = []
    for k in keys:
        argv += choices[k][0]
        words += choices[k][1]
    return argv, words


@st.composite
def ops_argv(draw, files):
    v = draw(st.sampled_from(["--family", "--no-such-flag", "--json=1", "extra"]))
    if v == "--family":
        name = draw(st.sampled_from(["nosuchfamily", "", "élément", "x" * 200]))
        return ["ops", "--family", name], ["--family", "family", name[:20]]
    return ["ops", v], [v.split("=")[0]]


# ---- running one example ---------------------------------------------------------------
def _children() -> set[int]:
    """Live child processes of this process (from /proc)."""
    me, out = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(entry))
    return out


@pytest.fixture
def no_launch(monkeypatch):
    """Every example holds a bad value, so none may start ranks."""
    from xladist.runtime import launcher

    def refuse(n, argv, **kwargs):
        raise AssertionError(f"a bad argument got as far as starting {n} ranks: {argv}")
    monkeypatch.setattr(launcher, "launch", refuse)


def run_in_process(argv: list[str]) -> tuple[int, str, str, float]:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: usage errors (2) and --help (0)
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue(), time.monotonic() - t0


def check_example(argv: list[str], words: list[str]) -> None:
    before = _children()
    code, out, err, took = run_in_process(argv)
    shown = f"argv: {argv}\nexit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert code in (0, 1, 2), shown
    assert "Traceback" not in out + err, shown
    assert took < TIME_LIMIT_S, shown
    assert _children() <= before, f"processes left behind\n{shown}"
    if code != 0:  # (check --json reports on stdout)
        said = err if "--json" not in argv else out + err
        assert said.strip(), f"failed without a message\n{shown}"
        assert any(w and w in said for w in words), f"the message names none of {words}\n" \
                                                    f"{shown}"


# ---- the fuzz tests, one per subcommand ---------------------------------------------------
@FUZZ
@given(data=st.data())
def test_fuzz_run(files, no_launch, data):
    check_example(*data.draw(run_argv(files)))


@FUZZ
@given(data=st.data())
def test_fuzz_check_fmt_explain(files, no_launch, data):
    command = data.draw(st.sampled_from(["check", "fmt", "explain"]))
    check_example(*data.draw(module_command_argv(files, command)))


@FUZZ
@given(data=st.data())
def test_fuzz_bench(files, no_launch, data):
    check_example(*data.draw(bench_argv(files)))


@FUZZ
@given(data=st.data())
def test_fuzz_demo(files, no_launch, data):
    check_example(*data.draw(demo_argv(files)))


@FUZZ
@given(data=st.data())
def test_fuzz_ops(files, no_launch, data):
    check_example(*data.draw(ops_argv(files)))


# ---- a few as real subprocesses ----------------------------------------------------------
@pytest.mark.parametrize("case", ["run", "check", "bench", "demo"])
def test_bad_values_in_a_real_process(files, case):
    argv, word = {
        "run": (["run", files["module"], "-n", 2, "--inputs", files["truncated"],
                 "--outputs", files["file_as_dir"] / "o.npz"], str(files["truncated"])),
        "check": (["check", files["latin1"], "--json"], "not UTF-8"),
        "bench": (["bench", "collectives", "-n", 2, "--sizes", "8X"], "--sizes"),
        "demo": (["demo", "-n", 2, "--trace", files["dir"]], "--trace"),
    }[case]
    cmd = [sys.executable, "-m", "xladist", *map(str, argv)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        leftover = _session_alive(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 2, err
    assert "Traceback" not in out + err and word in out + err
    assert not leftover, "processes of the command outlived it"


def _session_alive(sid: int) -> bool:
    """Any process left in the session the command ran in."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                return True
    return False
