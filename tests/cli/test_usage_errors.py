"""Usage errors are said by the command that was given, with its usage (cli41).

Before: `xladist run m.hlo -n 2 --bogus` (or a second MODULE, `xladist fmt a.hlo b.hlo`)
printed the top-level `usage: xladist [-h] [--version] COMMAND ...` and
`xladist: error: unrecognized arguments: --bogus`: not the command's options, and not
`xladist run: error:` as every other error of the command.
"""

from __future__ import annotations

import pytest

from xladist.cli import main


@pytest.mark.parametrize("argv, command, usage, unknown", [
    (["run", "m.hlo", "-n", "2", "--bogus"], "run", "usage: xladist run [-h]", "--bogus"),
    (["fmt", "a.hlo", "b.hlo"], "fmt", "usage: xladist fmt [-h]", "b.hlo"),
    (["check", "m.hlo", "--json", "-x"], "check", "usage: xladist check [-h]", "-x"),
    (["ops", "extra"], "ops", "usage: xladist ops [-h]", "extra"),
])
def test_an_unknown_argument_is_named_by_its_command(capsys, argv, command, usage, unknown):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert err.endswith(f"\nxladist {command}: error: unrecognized arguments: {unknown}\n"), err


def test_an_unknown_option_without_a_command_is_named_at_the_top(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: xladist [-h] [--version] COMMAND")
    assert err.endswith("\nxladist: error: unrecognized arguments: --bogus\n")
