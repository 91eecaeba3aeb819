"""`xladist bench --help` tells the truth: every benchmark it names runs (it once offered
"compute kernels (vs numpy/jax)", a mode the command refused as an invalid choice)."""

import re

import pytest

from xladist.cli import main


def _help(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    return capsys.readouterr().out


def test_every_benchmark_the_help_names_is_accepted(capsys, monkeypatch):
    text = _help(capsys, ["bench", "--help"])
    named = set(re.findall(r"xladist bench (\w+)", text))
    named |= {line.split()[0] for line in text.split("benchmarks:")[1].split("\n\n")[0]
              .splitlines()[1:] if line.startswith("  ") and not line.startswith("   ")}
    assert named == {"collectives"}
    summary = _help(capsys, ["--help"])
    bench_line = next(line for line in summary.splitlines() if line.strip().startswith("bench"))
    assert "compute" not in bench_line
    # What is named starts: the option check runs (a bad size is refused before any launch).
    from xladist.runtime import launcher

    def refuse(*args, **kwargs):
        raise AssertionError("no ranks may start for a refused option")
    monkeypatch.setattr(launcher, "launch", refuse)
    for name in named:
        assert main(["bench", name, "--sizes", "0"]) == 2
        assert main(["bench", name, "--in-loop", "--sizes", "0"]) == 2
    assert "--sizes" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["bench"], "xladist bench: error: the following arguments are required: "
                "{collectives}\n"),
    (["bench", "compute"], "xladist bench: error: argument {collectives}: invalid choice: "
                           "'compute' (choose from 'collectives')\n"),
])
def test_a_missing_or_unknown_benchmark_is_named_as_the_usage_names_it(capsys, argv, says):
    """Before: `xladist bench` said "the following arguments are required: what, options"
    (argparse's internal names, and the options are not required: `xladist bench
    collectives` runs with its defaults); `xladist bench compute` said "argument what"."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(says) and "usage: xladist bench [-h] {collectives} ..." in err, err


def test_the_collectives_help_names_its_in_loop_mode(capsys):
    """Before: `xladist bench collectives --help` never mentioned --in-loop (documented in
    docs/commands.md and `xladist bench --help`), so its reader could not find that table."""
    text = _help(capsys, ["bench", "collectives", "--help"])
    assert "xladist bench collectives -n 2 --in-loop" in text
    assert "xladist bench collectives --in-loop --help" in text
    assert "--in-loop" in _help(capsys, ["bench", "collectives", "--in-loop", "--help"])
