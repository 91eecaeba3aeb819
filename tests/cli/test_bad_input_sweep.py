"""Defects found by a sweep of bad input through every entry point (badinput38): each test
is a case that printed a traceback, ran on wrong data, or raised a non-xladist error.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

import xladist
from tests.cli_util import PSUM_MODULE, xladist_cli
from xladist import files
from xladist.errors import InputError

ONE_DEVICE = """HloModule one

ENTRY main {
  x = f32[2,4] parameter(0)
  ROOT r = f32[2,4] negate(x)
}
"""


def cut_member_npz(path: Path, array: np.ndarray, cut: int) -> Path:
    """A well-formed zip whose arg0.npy member lacks its last `cut` bytes of data: what a
    writer that died mid-array, or a hand-made archive, leaves."""
    buf = io.BytesIO()
    np.save(buf, array)
    data = buf.getvalue()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("arg0.npy", data[:len(data) - cut])
    return path


# ---- an npz member cut short is refused, not read past its end ---------------------------
def test_an_npz_member_cut_short_is_refused_naming_the_array(tmp_path):
    """Before: the inputs reader reads a stored member in place, so a member shorter than
    its header's dims got the zip's central directory bytes as data, and `xladist run`
    printed results of garbage with exit 0."""
    bad = cut_member_npz(tmp_path / "cut.npz", np.arange(8, dtype=np.float32).reshape(2, 4), 8)
    with pytest.raises(InputError, match=r"array 'arg0' is cut short: its header says "
                                         r"float32 \[2, 4\] \(32 bytes\), the file holds 24"):
        files.check_npz(bad, "--inputs")
    module = xladist.parse_hlo(ONE_DEVICE)
    from xladist.io import read_inputs
    with pytest.raises(InputError, match="cut short"):
        read_inputs(str(bad), [p.shape for p in module.entry.parameters])
    # a whole member still reads
    good = cut_member_npz(tmp_path / "good.npz", np.arange(8, dtype=np.float32).reshape(2, 4), 0)
    files.check_npz(good, "--inputs")
    np.testing.assert_array_equal(
        read_inputs(str(good), [p.shape for p in module.entry.parameters],
                    device_axis=None)[0][0], np.arange(8, dtype=np.float32).reshape(2, 4))


@pytest.mark.slow
def test_run_with_an_npz_member_cut_short_exits_2_before_running(tmp_path):
    module = tmp_path / "one.hlo"
    module.write_text(ONE_DEVICE)
    bad = cut_member_npz(tmp_path / "cut.npz", np.arange(8, dtype=np.float32).reshape(1, 2, 4), 4)
    proc = xladist_cli("run", module, "--inputs", bad, "--backend", "interpreter", timeout=120)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip() == (f"xladist run: error: --inputs {bad}: array 'arg0' is cut "
                                   f"short: its header says float32 [1, 2, 4] (32 bytes), the "
                                   f"file holds 28 of them")
    assert proc.stdout == ""


# ---- `xladist compile` reads and writes files as every other command does ------------------
def test_compile_checks_its_module_and_output_as_every_command_does(tmp_path, capsys):
    """Before: `xladist compile latin1.hlo -o m.xlx` ended in a UnicodeDecodeError traceback
    (exit 1), a parse error named `<text>` instead of the file, and a bad -o was found only
    after compiling, as `cannot write ...` (compile.py opened the files itself)."""
    from xladist.cli import main
    latin1 = tmp_path / "latin1.hlo"
    latin1.write_bytes(ONE_DEVICE.replace("one", "caf\xe9").encode("latin-1"))
    assert main(["compile", str(latin1), "-o", str(tmp_path / "m.xlx")]) == 2
    assert capsys.readouterr().err == (f"xladist compile: error: MODULE {latin1}: not UTF-8 "
                                       f"text (byte 0xe9 at offset 13); expected HLO text\n")
    broken = tmp_path / "broken.hlo"
    broken.write_text(ONE_DEVICE[:-3])
    assert main(["compile", str(broken), "-o", str(tmp_path / "m.xlx")]) == 2
    assert capsys.readouterr().err.startswith(f"xladist compile: error: {broken}:5:30: "
                                              "expected '}' to close computation main")
    good = tmp_path / "good.hlo"
    good.write_text(ONE_DEVICE)
    missing = f"the folder {tmp_path / 'no'} does not exist (create it first)"
    for out, says in ((tmp_path / "no" / "m.xlx", missing),
                      (tmp_path, "is a directory; give a file name")):
        assert main(["compile", str(good), "-o", str(out)]) == 2
        assert capsys.readouterr().err == f"xladist compile: error: -o {out}: {says}\n"
    assert not list(tmp_path.glob("*.xlx"))


def test_aot_checks_its_output_folder_before_compiling(tmp_path, capsys, monkeypatch):
    """Before: `xladist aot m.hlo --name m -o FILE` (an existing file) compiled, then said
    `cannot write to FILE: [Errno 17] File exists: 'FILE'`; the three outputs were written in
    place, so a build reading them could see half an object."""
    from xladist.cli import main
    good = tmp_path / "good.hlo"
    good.write_text(ONE_DEVICE)
    compiled = []
    from xladist.compiler.aot import AotProgram
    real = AotProgram.compile
    monkeypatch.setattr(AotProgram, "compile",
                        lambda self, *a: compiled.append(1) or real(self, *a))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert main(["aot", str(good), "--name", "m", "-o", str(a_file)]) == 2
    assert capsys.readouterr().err == (f"xladist aot: error: -o {a_file / 'm.o'}: {a_file} "
                                       "is not a folder\n")
    assert not compiled
    out = tmp_path / "new" / "build"  # folders made on the way
    assert main(["aot", str(good), "--name", "m", "-o", str(out)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == ["m.h", "m.ldflags", "m.o"]
    assert (out / "m.o").read_bytes()[:4] == b"\x7fELF" and compiled == [1]


@pytest.mark.parametrize("name, says", [
    ("o.{devce}.npz", "{devce} is not a placeholder it takes (it takes only {device})"),
    ("o.{name}.npz", "{name} is not a placeholder it takes (it takes only {device})"),
    ("o.{}.npz", "{} is not a placeholder it takes (it takes only {device})"),
    ("o{.npz", "a { or } that opens or closes no placeholder (it takes only {device}; "
               "write {{ or }} for a brace in the name)"),
])
def test_outputs_with_an_unknown_placeholder_is_refused(tmp_path, capsys, name, says):
    """Before: `--outputs 'o.{devce}.npz'` wrote a file literally named o.{devce}.npz;
    then it was refused as "only the placeholders {device} can be used (KeyError:
    'devce')": a Python exception's name, the bad placeholder only quoted. Now the
    message names the bad placeholder as written and the one --outputs takes."""
    from xladist.cli import main
    good = tmp_path / "good.hlo"
    good.write_text(ONE_DEVICE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    out = tmp_path / name
    assert main(["run", str(good), "-n", "1", "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"xladist run: error: --outputs {str(out)!r}: {says}\n", err
    assert not list(tmp_path.glob("o*"))


def test_python_api_refuses_a_bool_where_a_count_or_seconds_go(tmp_path):
    """Before: xladist.run(m, [x], n=True) ran on one device (True taken as 1)."""
    m = xladist.parse_hlo(ONE_DEVICE)
    x = np.ones((2, 4), np.float32)
    with pytest.raises(InputError, match=r"^n must be a whole number >= 1, got True$"):
        xladist.run(m, [x[None]], n=True)
    with pytest.raises(InputError, match=r"^timeout must be a number, got False$"):
        xladist.run(m, [x[None]], n=1, timeout=False)


# ---- a timeout beyond the operating system's timers is refused ----------------------------


@pytest.mark.parametrize("value", ["1e309", "inf", "1e11"])
def test_a_timeout_beyond_the_timers_range_is_refused_before_launch(tmp_path, capsys, value):
    """Before: `xladist run m.hlo -n 2 --timeout 1e11` (or `inf`, `1e309`, `timeout = inf`
    in a config, `xladist demo --timeout 1e309`) started the ranks, whose deadline thread
    and coordination socket died with `OverflowError: timestamp out of range for platform
    time_t` tracebacks (exit 1, or 0 for demo); `xladist conformance --timeout nan` ran
    every case to "no case passed"."""
    from xladist.cli import main
    module = tmp_path / "psum.hlo"
    module.write_text(PSUM_MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    want = (f"--timeout must be at most 1000000000 seconds (31 years) (0: no deadline), "
            f"got {float(value)}")
    assert main(["run", str(module), "-n", "2", "--inputs", str(tmp_path / "in.npz"),
                 "--timeout", value]) == 2
    assert capsys.readouterr().err == f"xladist run: error: {want}\n"
    assert main(["demo", "-n", "2", "--timeout", value]) == 2
    assert capsys.readouterr().err == f"xladist demo: error: {want}\n"
    with pytest.raises(InputError, match="timeout must be at most 1000000000 seconds"):
        xladist.run(xladist.parse_hlo(PSUM_MODULE), [np.ones((2, 4), np.float32)], n=2,
                    timeout=float(value))
    with pytest.raises(InputError, match="timeout must be at most 1000000000 seconds"):
        xladist.Cluster(n=2, timeout=float(value))


def test_conformance_refuses_a_nan_timeout():
    from xladist.cli import main
    assert main(["conformance", "-n", "2", "--timeout", "nan", "--select", "*"]) == 2


def test_timeout_variables_beyond_the_timers_range_are_refused(monkeypatch):
    from xladist import environment
    monkeypatch.setenv("XLADIST_COLLECTIVE_TIMEOUT", "1e20")
    with pytest.raises(InputError, match="XLADIST_COLLECTIVE_TIMEOUT='1e20'"):
        environment.setting("XLADIST_COLLECTIVE_TIMEOUT")
    assert environment.check_seconds(1e9, "--timeout") == 1e9


# ---- the Python API checks where the ranks run before it starts them ---------------------
def test_python_api_checks_hostfile_and_mpiexec_before_any_rank_starts(tmp_path):
    """Before: `xladist.run(m, x, n=1, hostfile="hosts")` with no such file launched
    mpiexec and raised ExecutionError holding MPICH's banner (`HYDU_parse_hostfile ...
    unable to open host file`); `xladist.Cluster(n=1, hostfile=...)` accepted it and failed
    only at start. `xladist run --hostfile` checks it before launch (run_args)."""
    module = xladist.parse_hlo(ONE_DEVICE)
    x = np.ones((1, 2, 4), np.float32)
    binary = tmp_path / "hosts.bin"
    binary.write_bytes(b"\xff\xfe")
    cases = [(dict(hostfile=tmp_path / "nope"), "hostfile .*nope: does not exist"),
             (dict(hostfile=tmp_path), "is a directory, not a file"),
             (dict(hostfile=str(binary)), "not UTF-8 text"),
             (dict(hostfile=5), "hostfile must be a path, got int"),
             (dict(mpiexec=str(tmp_path / "mpiexec")), "mpiexec .*: not an executable program")]
    for kw, says in cases:
        with pytest.raises(InputError, match=says):
            xladist.run(module, [x], n=1, **kw)
        with pytest.raises(InputError, match=says):
            xladist.Cluster(n=1, **kw)


# ---- the Python API raises xladist's errors for arguments of the wrong kind ----------------
def test_python_api_names_arguments_of_the_wrong_kind(tmp_path):
    """Before: AttributeError ('NoneType' object has no attribute 'replica_count') from
    xladist.run(None) and xladist.verify(None), TypeError / ValueError from deep inside for
    a device assignment that is not a table, inputs or hosts of the wrong kind, and a path
    that is None, an int or holds a NUL byte (load_hlo, load_executable)."""
    module = xladist.parse_hlo(ONE_DEVICE)
    x = [np.ones((1, 2, 4), np.float32)]
    cases = [
        (lambda: xladist.run(None, x), "a module to run is a parsed module, .*got NoneType"),
        (lambda: xladist.run(5, x), "got int"),
        (lambda: xladist.verify(None), "verify takes a parsed module"),
        (lambda: xladist.verify(ONE_DEVICE), "verify takes a parsed module.*got str"),
        (lambda: xladist.run(module, 5), "inputs are one array per parameter.*got int"),
        (lambda: xladist.run(module, x, device_assignment=[0]),
         r"device assignment must be a list over replicas .*got \[0\]"),
        (lambda: xladist.run(module, x, device_assignment="0"), "device assignment must be"),
        (lambda: xladist.run(module, x, device_assignment=[[0.5]]), "device assignment must be"),
        (lambda: xladist.run(module, x, hosts=5), "hosts= takes host names"),
        (lambda: xladist.load_hlo(None), "module file must be a path, got NoneType"),
        (lambda: xladist.load_hlo("a\x00b"), r"module file 'a\\x00b': not a usable path"),
        (lambda: xladist.load_executable(None), "executable must be a path, got NoneType"),
        (lambda: xladist.load_executable(tmp_path / "nope.xlx"),
         "cannot read .*nope.xlx: No such file"),
    ]
    for call, says in cases:
        with pytest.raises(InputError, match=says):
            call()


# ---- a batch list's line cannot hold another --batch -------------------------------------
def test_a_batch_line_with_its_own_batch_is_refused(tmp_path, capsys):
    """Before: `xladist run --batch runs.txt -n 2` whose line was `m.hlo --inputs in.npz
    --batch other.txt` ran m.hlo and ignored --batch other.txt without a word (exit 0)."""
    from xladist.cli import main
    module = tmp_path / "psum.hlo"
    module.write_text(PSUM_MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.ones((2, 4), np.float32))
    runs = tmp_path / "runs.txt"
    runs.write_text(f"{module} --inputs {tmp_path / 'in.npz'} --batch {runs}\n")
    assert main(["run", "--batch", str(runs), "-n", "2"]) == 2
    assert capsys.readouterr().err == (f"xladist run: error: {runs}:1: --batch on a line of a "
                                       f"batch list: a line is one run (list the other list's "
                                       f"lines here instead)\n")


# ---- export-jax checks -o and --args before the function runs ----------------------------
def test_export_jax_checks_its_folder_and_args_before_the_function_runs(tmp_path, capsys,
                                                                       monkeypatch):
    """Before: `xladist export-jax m:f --args a.npz --mesh data=2 -o FILE` traced and ran f
    with jax, then blamed it: `m:f failed while jax traced, lowered or ran it:
    FileExistsError: [Errno 17] File exists` (and xladist.jax.export raised the
    FileExistsError); --args was read by np.load directly (`cannot read it as npz: [Errno
    2] ...`), not by files.py as every other npz."""
    from xladist.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fns_badinput.py").write_text("def f(x):\n    return x * 2\n")
    np.savez(tmp_path / "a.npz", arg0=np.ones((4, 4), np.float32))
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    argv = ["export-jax", "fns_badinput:f", "--mesh", "data=2", "--no-expected"]
    assert main([*argv, "--args", "a.npz", "-o", str(a_file)]) == 2
    assert capsys.readouterr().err == (f"xladist export-jax: error: -o {a_file}: is a file; "
                                       f"give a folder (made if missing)\n")
    assert main([*argv, "--args", "missing.npz", "-o", "out"]) == 2
    assert capsys.readouterr().err == ("xladist export-jax: error: --args missing.npz: "
                                       "does not exist\n")
    np.savez(tmp_path / "obj.npz", arg0=np.array([None, 1], dtype=object))
    assert main([*argv, "--args", "obj.npz", "-o", "out"]) == 2
    assert "--args obj.npz: array 'arg0' holds Python objects" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- a custom-call target's wrong value or exception: the same on both backends ----------
CUSTOM = """HloModule cc

ENTRY main {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="%s"
}
"""


def _float64_zeros(instr, args):
    return np.zeros(4, np.float64)


def _raises(instr, args):
    raise ValueError("exploded")


@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_a_custom_call_target_is_held_to_its_result_type_on_every_backend(backend):
    """Before: on the cpu backend a target returning float64 where f32[4] was expected was
    converted without a word (the interpreter refused it); on the interpreter, a target
    that raised or returned a wrong value was an 'internal interpreter error'."""
    from xladist.errors import ExecutionError
    from xladist.semantics.custom_calls import CUSTOM_CALLS, register_custom_call
    x = np.arange(4, dtype=np.float32)
    try:
        register_custom_call("badinput_f64", _float64_zeros)
        register_custom_call("badinput_raises", _raises)
        exe = xladist.compile(xladist.parse_hlo(CUSTOM % "badinput_f64"), backend=backend)
        with pytest.raises(ExecutionError, match="custom-call target 'badinput_f64' returned "
                                                 ".*float64.* where f32\\[4\\] was expected"
                           ) as e:
            exe(x)
        assert "internal" not in str(e.value)
        exe = xladist.compile(xladist.parse_hlo(CUSTOM % "badinput_raises"), backend=backend)
        with pytest.raises(ExecutionError, match="custom-call target 'badinput_raises' raised "
                                                 "ValueError: exploded") as e:
            exe(x)
        assert "internal" not in str(e.value)
    finally:
        CUSTOM_CALLS.pop("badinput_f64", None)
        CUSTOM_CALLS.pop("badinput_raises", None)
