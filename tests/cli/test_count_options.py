"""Every count a command takes (-n, --replica-count, --num-partitions, --prefetch, --threads,
--steps, --repeats, a config file's keys, a --batch list's lines, --mesh sizes) is refused
in one wording, environment.check_count's `<name> must be a whole number >= 1, got <value>`,
naming it as the user wrote it: exit 2, one line, no traceback.

Before (leftovers40): `xladist run --replica-count 0` said `replica_count must be ...` (the
Python keyword: run_device_counts checked the counts while the module was read, before
the options were), a config file's `ranks = 0` said `must be at least 1`, `--threads 0`
`must be a whole number of threads >= 1`, `--batch LIST -n 0` named Cluster's keyword `n`,
`bench collectives --repeats 0` blamed --iters, and `--mesh data=0` said `needs a size of
at least 1`.
"""

from __future__ import annotations

import pytest

from tests.cli_util import xladist_cli
from tests.paths import ROOT

MESH2 = ROOT / "tests" / "data" / "corpus" / "jax" / "elementwise_reduce_mesh2" / "module.hlo"
M = str(MESH2)


def _refused(capsys, argv, expected):
    """`xladist ARGV` in this process: exit 2 and exactly one line, `xladist CMD: error:
    EXPECTED`."""
    from xladist.cli import main
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert err.splitlines()[-1].endswith(f": error: {expected}"), err
    assert err.splitlines()[-1].startswith(f"xladist {argv[0]}")
    return err


CASES = [
    (["run", M, "-n", "2", "--replica-count", "0"], "--replica-count must be a whole number "
                                                    ">= 1, got 0"),
    (["run", M, "-n", "2", "--num-partitions", "-1"], "--num-partitions must be a whole "
                                                      "number >= 1, got -1"),
    # the option before the module's counts (before: the module's num_partitions=2 against 1
    # device was the error shown)
    (["run", M, "--prefetch", "0"], "--prefetch must be a whole number >= 1, got 0"),
    (["run", M, "-n", "2", "--threads", "0"], "--threads must be a whole number >= 1, got 0"),
    (["run", M, "-n", "0"], "-n must be a whole number >= 1, got 0"),
    (["check", M, "--replica-count", "0"], "--replica-count must be a whole number >= 1, "
                                           "got 0"),
    (["check", M, "--num-partitions", "0"], "--num-partitions must be a whole number >= 1, "
                                            "got 0"),
    (["check", M, "-n", "0"], "-n must be a whole number >= 1, got 0"),
    (["demo", "-n", "0"], "-n must be a whole number >= 1, got 0"),
    (["demo", "--steps", "0"], "--steps must be a whole number >= 1, got 0"),
    (["conformance", "-n", "0"], "-n must be a whole number >= 1, got 0"),
    (["bench", "collectives", "-n", "0"], "-n must be a whole number >= 1, got 0"),
    (["bench", "collectives", "--repeats", "0"], "--repeats must be a whole number >= 1, "
                                                 "got 0"),
    (["export-jax", "pkg.mod:fn", "--mesh", "data=0", "-o", "unused"],
     "mesh axis 'data' must be a whole number >= 1, got 0"),
]


@pytest.mark.parametrize("argv, expected", CASES,
                         ids=[" ".join(a[:1] + a[2:]) for a, _ in CASES])
def test_a_count_option_below_one_is_named_as_typed(capsys, argv, expected):
    _refused(capsys, argv, expected)


@pytest.mark.parametrize("key", ["ranks", "replica_count", "num_partitions", "prefetch"])
def test_a_config_files_count_below_one_is_named_by_file_and_key(tmp_path, capsys, key):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'module = "{MESH2}"\n{key} = 0\n')
    _refused(capsys, ["run", "--config", str(cfg)],
             f"{cfg}: key {key!r} must be a whole number >= 1, got 0")


def test_a_batch_lists_counts_are_named_as_options(tmp_path, capsys):
    batch = tmp_path / "runs.txt"
    batch.write_text(f"{MESH2} --replica-count 0\n")
    _refused(capsys, ["run", "--batch", str(batch), "-n", "0"],
             "-n must be a whole number >= 1, got 0")  # before: `n must be ...`
    from xladist.cli import main
    assert main(["run", "--batch", str(batch), "-n", "2"]) == 2  # the line, not the cluster
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (f"xladist run --batch: {batch}:1: error: --replica-count "
                                    f"must be a whole number >= 1, got 0"), err


def test_replica_count_zero_from_the_shell():
    """The report's case as a user starts it: one line, exit 2, no traceback."""
    proc = xladist_cli("run", M, "-n", "2", "--replica-count", "0", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == "xladist run: error: --replica-count must be a whole number >= 1, " \
                          "got 0\n"


@pytest.mark.parametrize("n", [0, -2, True, 1.5])
def test_the_deadlock_checks_device_count_is_the_same_rule(n):
    """xladist.analysis.deadlock.check_module's num_devices: check_count's words (before:
    `the number of devices must be at least 1, not 0`, and True taken as 1 device)."""
    import xladist
    from xladist.analysis import deadlock
    from xladist.errors import InputError
    module = xladist.load_hlo(MESH2)
    with pytest.raises(InputError, match=rf"^num_devices must be a whole number >= 1, "
                                         rf"got {n!r}$".replace(".", r"\.")):
        deadlock.check_module(module, n)


def test_a_device_total_that_does_not_fit_says_which_count_the_run_gave(tmp_path, capsys):
    """A module declaring num_partitions=2 run with --replica-count 4 on 4 devices was told
    `module m is built for replica_count=4 x num_partitions=2`: the 4 replicas were the
    run's. Now each count is named by where it came from."""
    module = tmp_path / "m.hlo"
    module.write_text("HloModule m, num_partitions=2\nENTRY e {\n  ROOT x = f32[] constant(1)\n}\n")
    _refused(capsys, ["run", str(module), "-n", "4", "--replica-count", "4"],
             "module m declares num_partitions=2 and the run asks for replica_count=4: "
             "replica_count=4 x num_partitions=2 = 8 devices; run it with -n 8, not -n 4")
    module.write_text("HloModule m\nENTRY e {\n  ROOT x = f32[] constant(1)\n}\n")
    _refused(capsys, ["run", str(module), "-n", "4", "--replica-count", "4",
                      "--num-partitions", "2"],
             "the run asks for replica_count=4 and num_partitions=2 for module m: "
             "replica_count=4 x num_partitions=2 = 8 devices; run it with -n 8, not -n 4")
    module.write_text("HloModule m, replica_count=2, num_partitions=2\nENTRY e {\n"
                      "  ROOT x = f32[] constant(1)\n}\n")
    _refused(capsys, ["run", str(module), "-n", "8"],
             "module m is built for replica_count=2 x num_partitions=2 = 4 devices; run it "
             "with -n 4, not -n 8")
