"""Defects left from the bad-input sweep (leftovers39, leftovers40): each test is a case
that failed before its fix."""

from __future__ import annotations

import re

import numpy as np
import pytest

import xladist
from xladist.errors import HloParseError, InputError

ONE_DEVICE = """HloModule one

ENTRY main {
  x = f32[2,4] parameter(0)
  ROOT r = f32[2,4] negate(x)
}
"""
BOM = b"\xef\xbb\xbf"


# ---- a file that starts with a UTF-8 byte-order mark -------------------------------------
def test_a_file_starting_with_a_byte_order_mark_loads_everywhere(tmp_path, capsys,
                                                                 monkeypatch):
    """Before: a module file saved by a Windows editor with a BOM was `1:1: expected a
    computation ..., found '\\ufeff'` for `xladist check`, `run`, `fmt`, `xladist.load_hlo`
    and `xladist.run(path)`; a --config file with one was `not valid TOML`."""
    import io
    import sys

    from xladist.cli import main
    from xladist.runtime import config
    path = tmp_path / "bom.hlo"
    path.write_bytes(BOM + ONE_DEVICE.encode())
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out.startswith("OK: one")
    assert main(["fmt", str(path)]) == 0
    assert capsys.readouterr().out.startswith("HloModule one\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(BOM + ONE_DEVICE.encode())))
    assert main(["check", "-"]) == 0
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.savez(tmp_path / "in.npz", arg0=x)
    np.testing.assert_array_equal(  # the same bits as numpy, through the CLI's run
        _cli_run(main, path, tmp_path, capsys), -x)
    assert xladist.load_hlo(path).name == "one"
    assert xladist.parse_hlo(BOM + ONE_DEVICE.encode()).name == "one"
    [[out]] = xladist.run(str(path), [x[None]], n=1)
    np.testing.assert_array_equal(out, -x)
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(BOM + b"backend = 'interpreter'\n")
    assert config.load(cfg)["backend"] == "interpreter"


def _cli_run(main, path, tmp_path, capsys):
    out = tmp_path / "out.npz"
    assert main(["run", str(path), "-n", "1", "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(out), "-q"]) == 0, capsys.readouterr().err
    with np.load(out) as data:
        return data[data.files[0]][0]  # device 0


@pytest.mark.parametrize("bad, where", [
    ("HloModule one\n\nENTRY main {\n  x = f32[2,4] parameter(0)\n  ROOT r = f32[2,4] "
     "negate(y)\n}\n", (5, 28)),           # an error on a later line
    ("HloModule one 7\n", (1, 15)),        # an error on the BOM's own line
])
def test_errors_after_a_byte_order_mark_keep_their_line_and_column(tmp_path, bad, where):
    """The mark is not a column: an error's line:column is the one without it, as an
    editor shows it."""
    plain, marked = tmp_path / "plain.hlo", tmp_path / "marked.hlo"
    plain.write_text(bad)
    marked.write_bytes(BOM + bad.encode())
    errors = []
    for p in (plain, marked):
        with pytest.raises(HloParseError) as e:
            xladist.load_hlo(p)
        errors.append(e.value)
    assert (errors[0].line, errors[0].column) == where
    assert (errors[1].line, errors[1].column) == where
    assert errors[1].line_text == errors[0].line_text


@pytest.mark.parametrize("bad, where", [
    (None, None),                          # no error: the module parses
    ("HloModule one\n\nENTRY main {\n  x = f32[2,4] parameter(0)\n  ROOT r = f32[2,4] "
     "negate(y)\n}\n", (5, 28)),           # an error on a later line
    ("HloModule one 7\n", (1, 15)),        # an error on the mark's own line
], ids=["parses", "error-later-line", "error-first-line"])
def test_a_string_starting_with_a_byte_order_mark_parses_as_its_file_does(tmp_path, bad,
                                                                          where):
    """Before: `xladist.parse_hlo(open(path, encoding="utf-8").read())` of a file a Windows
    editor saved was `<text>:1:1: expected a computation ..., found a byte-order mark
    (U+FEFF)`, while `xladist.load_hlo(path)` of the same file worked: the leading mark was
    dropped from bytes and files only. Now a string gets the same rule, and an error's
    line:column is the one without the mark, as for the file."""
    text = bad or ONE_DEVICE
    path = tmp_path / "marked.hlo"
    path.write_bytes(BOM + text.encode())
    as_read = path.read_text(encoding="utf-8")
    assert as_read.startswith("\ufeff")  # what the user hands parse_hlo
    if bad is None:
        module = xladist.parse_hlo(as_read)
        assert module.name == "one" and module.to_text() == xladist.load_hlo(path).to_text()
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_array_equal(xladist.compile(module, backend="interpreter")(x)[0], -x)
        return
    errors = []
    for parse in (lambda: xladist.load_hlo(path), lambda: xladist.parse_hlo(as_read)):
        with pytest.raises(HloParseError) as e:
            parse()
        errors.append(e.value)
    assert (errors[0].line, errors[0].column) == where
    assert (errors[1].line, errors[1].column) == where
    assert errors[1].line_text == errors[0].line_text == text.splitlines()[where[0] - 1]


def test_a_second_byte_order_mark_in_a_string_is_named():
    """Only the first character may be the mark: a second one (or one anywhere else) stays
    an error at its own line:column, naming it."""
    with pytest.raises(HloParseError, match="found a byte-order mark .U.FEFF., which is "
                                            "not HLO text") as e:
        xladist.parse_hlo("\ufeff\ufeff" + ONE_DEVICE)
    assert (e.value.line, e.value.column) == (1, 1)
    with pytest.raises(HloParseError, match="found a byte-order mark") as e:
        xladist.parse_hlo("\ufeff" + ONE_DEVICE.replace("  ROOT", "  \ufeffROOT"))
    assert (e.value.line, e.value.column) == (5, 3)


def test_a_byte_order_mark_inside_the_text_is_named(tmp_path, capsys):
    """Only the file's first bytes may be a mark; elsewhere it stays an error, named
    (before: `found '\\ufeff'`, an invisible character)."""
    from xladist.cli import main
    path = tmp_path / "mid.hlo"
    path.write_bytes(ONE_DEVICE.replace("negate(x)", "negate(x)\ufeff").encode())
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"xladist check: error: {path}:5:30: expected an instruction ")
    assert "found a byte-order mark (U+FEFF), which is not HLO text" in err
    twice = tmp_path / "twice.hlo"
    twice.write_bytes(BOM + BOM + ONE_DEVICE.encode())
    with pytest.raises(HloParseError, match="1:1: .*found a byte-order mark") as e:
        xladist.load_hlo(twice)
    assert e.value.line == 1 and e.value.column == 1
    with pytest.raises(InputError, match=r"not UTF-8 text \(byte 0xff at offset 4\)"):
        bad = tmp_path / "bad.hlo"
        bad.write_bytes(BOM + b"H\xff")
        xladist.load_hlo(bad)


# ---- n: one rule for xladist.run and xladist.Cluster -------------------------------------
@pytest.mark.parametrize("n", [0, -1, 1.5, "2", True, 2.0, np.float64(1.0)])
def test_run_and_cluster_refuse_a_count_that_is_not_one_in_the_same_words(n):
    """Before: two copies of the rule in their own words ('a whole number of devices' for
    run, 'of ranks' for Cluster), and np.int64(1) ran with xladist.run but was refused by
    Cluster."""
    module = xladist.parse_hlo(ONE_DEVICE)
    x = np.ones((1, 2, 4), np.float32)
    says = rf"^n must be a whole number >= 1, got {re.escape(repr(n))}$"
    with pytest.raises(InputError, match=says):
        xladist.run(module, [x], n=n)
    with pytest.raises(InputError, match=says):
        xladist.Cluster(n=n)


def test_run_and_cluster_take_the_same_counts():
    module = xladist.parse_hlo(ONE_DEVICE)
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 4)
    for n in (1, np.int64(1)):
        [[out]] = xladist.run(module, [x], n=n)
        np.testing.assert_array_equal(out, -x[0])
        cluster = xladist.Cluster(n=n)  # not started: the count is checked on creation
        assert cluster.n == 1 and type(cluster.n) is int
        cluster.close()
    with pytest.raises(InputError, match=r"^prefetch must be a whole number >= 1, got 1.5$"):
        xladist.run(module, [x], n=1, prefetch=1.5)  # before: ran


def test_the_commands_refuse_a_count_below_one_in_the_same_words(tmp_path, capsys):
    from xladist.cli import main
    path = tmp_path / "one.hlo"
    path.write_text(ONE_DEVICE)
    for argv in (["check", str(path), "-n", "0"], ["run", str(path), "-n", "0"],
                 ["demo", "-n", "0"], ["conformance", "-n", "2", "0", "--list"]):
        assert main(argv) == 2
        assert capsys.readouterr().err == (f"xladist {argv[0]}: error: -n must be a whole "
                                           f"number >= 1, got 0\n")


# ---- xladist conformance --timeout: one check ----------------------------------------------
@pytest.mark.parametrize("value, says", [
    ("0", "must be a number of seconds > 0, got 0.0"),
    ("-1", "must be a number of seconds > 0, got -1.0"),
    ("nan", "must be a number of seconds > 0, got nan"),
    ("1e11", "must be at most 1000000000 seconds (31 years), got 100000000000.0"),
])
def test_conformance_timeout_is_checked_once_in_the_words_of_every_timeout(capsys, value,
                                                                          says):
    """Before: a positivity check of its own came first ('--timeout 0: give a positive
    number of seconds'), then environment.check_seconds for the range: two checks in two
    forms."""
    from xladist.cli import main
    assert main(["conformance", "-n", "2", "--timeout", value, "--select", "*"]) == 2
    assert capsys.readouterr().err == f"xladist conformance: error: --timeout {says}\n"
