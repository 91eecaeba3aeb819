"""Run configurations (xladist/runtime/config.py, `xladist run --config FILE`).

Every shipped config loads and names files that exist; the schema agrees with the
`xladist run` options it stands for; bad files fail with exit 2 naming the key and the
file; relative paths resolve against the file; flags override the file. End-to-end runs
compare against the corpus's expected outputs (computed by XLA, not by us).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pytest

from xladist.runtime import config
from tests.cli_util import xladist_cli
from xladist.cli import run as run_cli
from tests.paths import ROOT

CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
CORPUS = ROOT / "tests" / "data" / "corpus" / "jax"
GENERATED = ROOT / "examples" / "train_mlp" / "data"


def _xladist(*args, cwd=ROOT, timeout=120):
    return xladist_cli(*args, cwd=cwd, timeout=timeout, XLADIST_PROGRESS="off")


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    run_cli.add_arguments(p)
    return p


def test_configs_exist():
    names = {c.stem for c in CONFIGS}
    assert {"psum_basic_mesh4", "elementwise_reduce_mesh2", "train_mlp"} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_shipped_config_loads(path):
    settings = config.load(path)
    assert Path(settings["module"]).is_file(), settings["module"]
    for key in ("inputs", "infeed", "hostfile"):
        if key not in settings:
            continue
        f = Path(settings[key].format(rank=0))
        # The training example's data is generated (examples/train_mlp/make_data.py).
        assert f.is_file() or f.is_relative_to(GENERATED), (key, settings[key])
    from xladist import load_hlo
    module = load_hlo(settings["module"])
    ranks = settings.get("ranks", 1)
    assert module.num_devices in (1, ranks)


def test_schema_matches_run_options():
    parser = _run_parser()
    by_dest = {a.dest: a for a in parser._actions}
    for key, spec in config.SCHEMA.items():
        assert spec.dest in by_dest, f"{key}: no `xladist run` option with dest {spec.dest}"
        action = by_dest[spec.dest]
        if spec.option != "MODULE":
            assert spec.option in action.option_strings, (key, spec.option)
        default = action.default
        if spec.invert:
            default = not default
        assert spec.default == default, f"{key}: schema default {spec.default!r}, " \
                                        f"`xladist run` default {default!r}"


def _write(tmp_path, text, name="run.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("text,key,what", [
    ("module = 'm.hlo'\nrank = 4\n", "rank", "unknown key 'rank' (did you mean 'ranks'?)"),
    ("module = 'm.hlo'\nranks = '4'\n", "ranks", "must be an integer, got string '4'"),
    ("module = 'm.hlo'\nranks = true\n", "ranks", "must be an integer, got boolean True"),
    ("module = 'm.hlo'\ntimeout = 'soon'\n", "timeout", "must be a number"),
    ("module = 'm.hlo'\nverify = 1\n", "verify", "must be true or false, got integer 1"),
    ("module = 3\n", "module", "must be a path string, got integer 3"),
    ("module = 'm.hlo'\ndevice_assignment = [[0, 1], [2]]\n", "device_assignment",
     "same number of partitions"),
    ("module = 'm.hlo'\n[run]\nranks = 2\n", "run", "unknown key 'run'"),
])
def test_bad_config_names_key_and_file(tmp_path, text, key, what):
    path = _write(tmp_path, text)
    with pytest.raises(config.ConfigError) as e:
        config.load(path)
    msg = str(e.value)
    assert str(path) in msg and repr(key) in msg and what in msg, msg
    assert e.value.exit_code == 2


def test_bad_config_cli_exit_2(tmp_path):
    path = _write(tmp_path, "module = 'm.hlo'\nbackends = 'cpu'\n")
    proc = _xladist("run", "--config", str(path))
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: unknown key 'backends' (did you mean 'backend'?)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("line,what", [
    ("timeout = -1", "key 'timeout' must be a number of seconds >= 0"),
    ("check_budget = inf", "key 'check_budget' must be at most"),
    ("outputs = 'no/such/folder/out.npz'", "key 'outputs' "),
    ("inputs = 'absent.npz'", "key 'inputs' "),
])
def test_a_value_out_of_range_names_the_key_and_the_file_not_an_option(tmp_path, line, what):
    """Values of the right type that a run refuses (checked with the command line's, in
    run_args) were named as options the user never gave: `--timeout must be ...`."""
    _write(tmp_path, "HloModule one\nENTRY e { ROOT c = f32[] constant(1) }\n", "m.hlo")
    path = _write(tmp_path, f'module = "m.hlo"\n{line}\n')
    proc = _xladist("run", "--config", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: {what}" in proc.stderr, proc.stderr
    assert "--" not in proc.stderr.split("error:", 1)[1] and "Traceback" not in proc.stderr
    # the same value given as the option is named as the option
    option = config.SCHEMA[line.split()[0]].option
    value = line.split("=", 1)[1].strip().strip("'")
    proc = _xladist("run", "--config", str(path), option, value, cwd=tmp_path)
    assert proc.returncode == 2 and f"error: {option} " in proc.stderr, proc.stderr


def test_invalid_toml_and_missing_file(tmp_path):
    path = _write(tmp_path, "module = \n")
    with pytest.raises(config.ConfigError, match=f"{path}: not valid TOML"):
        config.load(path)
    with pytest.raises(config.ConfigError, match="--config .*absent.toml: does not exist"):
        config.load(tmp_path / "absent.toml")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xbf\x00\xff module")
    with pytest.raises(config.ConfigError, match="not UTF-8 text .*expected TOML"):
        config.load(binary)


def test_paths_resolve_against_the_file(tmp_path):
    sub = tmp_path / "cfg"
    sub.mkdir()
    path = _write(sub, "module = '../m.hlo'\ninputs = 'in/{rank}.npz'\n"
                       "outputs = '/abs/out.npz'\nbackend = 'cpu'\n")
    s = config.load(path)
    assert s["module"] == str(tmp_path / "m.hlo")
    assert s["inputs"] == str(sub / "in" / "{rank}.npz")
    assert s["outputs"] == "/abs/out.npz"
    assert s["backend"] == "cpu"  # not a path: unchanged


def test_flags_override_file(tmp_path):
    path = _write(tmp_path, "module = 'm.hlo'\nranks = 4\ntimeout = 9\nverify = false\n"
                            "backend = 'cpu'\n")
    parser = _run_parser()
    argv = ["--config", str(path), "-n", "2", "--time=5"]  # an abbreviation counts too
    args = parser.parse_args(argv)
    config.apply(args, run_cli.add_arguments, argv)
    assert args.num_devices == 2 and args.timeout == 5.0      # from the command line
    assert args.no_verify is True and args.backend == "cpu"   # from the file
    assert args.module == str(tmp_path / "m.hlo")


def test_explicit_module_wins(tmp_path):
    path = _write(tmp_path, "module = 'm.hlo'\n")
    argv = ["other.hlo", "--config", str(path)]
    args = _run_parser().parse_args(argv)
    config.apply(args, run_cli.add_arguments, argv)
    assert args.module == "other.hlo"


def test_device_assignment_option():
    assert config.parse_assignment("0,2;1,3") == [[0, 2], [1, 3]]
    with pytest.raises(argparse.ArgumentTypeError):
        config.parse_assignment("0,1;2")
    with pytest.raises(argparse.ArgumentTypeError):
        config.parse_assignment("a,b")


def test_run_psum_config_matches_corpus(tmp_path):
    out = tmp_path / "out.npz"
    proc = _xladist("run", "--config", "configs/psum_basic_mesh4.toml", "--outputs", str(out))
    assert proc.returncode == 0, proc.stderr
    expected = np.load(CORPUS / "psum_basic_mesh4" / "expected.npz")
    got = np.load(out)
    np.testing.assert_allclose(got["out0"], expected["out0"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_run_config_from_another_folder_with_override(tmp_path):
    # The file's outputs key is overridden on the command line; paths in the file still
    # resolve against the file, not against the current directory.
    cfg = _write(tmp_path, f"""
module = "{CORPUS}/elementwise_reduce_mesh2/module.hlo"
inputs = "{os.path.relpath(CORPUS / 'elementwise_reduce_mesh2' / 'inputs.npz', tmp_path)}"
ranks = 2
outputs = "from_file.npz"
""")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = _xladist("run", "--config", str(cfg), "--outputs", "from_flag.npz", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "from_file.npz").exists()
    got = np.load(elsewhere / "from_flag.npz")
    expected = np.load(CORPUS / "elementwise_reduce_mesh2" / "expected.npz")
    for k in expected.files:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-5)


def test_counts_from_config_must_agree_with_module(tmp_path):
    cfg = _write(tmp_path, f"""
module = "{CORPUS}/psum_basic_mesh4/module.hlo"
inputs = "{CORPUS}/psum_basic_mesh4/inputs.npz"
ranks = 4
replica_count = 2
num_partitions = 2
""")
    proc = _xladist("run", "--config", str(cfg))
    assert proc.returncode == 2
    assert "declares num_partitions=4; the run asks for num_partitions=2" in proc.stderr


@pytest.mark.slow
def test_train_mlp_config_with_feeds_overridden(tmp_path):
    # The example's config with its data paths overridden on the command line (data
    # generated here): each rank outfeeds the losses of the numpy replay.
    from xladist.examples.train_mlp import Config, make_data, reference, write_example
    cfg = Config()
    paths = write_example(tmp_path / "data", cfg)
    out = tmp_path / "out" / "rank{rank}.npz"
    proc = _xladist("run", "--config", "configs/train_mlp.toml", "--inputs", paths["inputs"],
                    "--infeed", paths["infeed"], "--outfeed", str(out),
                    "--outputs", str(tmp_path / "params.npz"), timeout=180)
    assert proc.returncode == 0, proc.stderr
    params, batches = make_data(cfg)
    losses, final = reference(params, batches, cfg.lr)
    for r in range(cfg.replicas):
        with np.load(str(out).format(rank=r)) as f:
            got = [float(f[f"item{k}"]) for k in range(cfg.steps)]
        np.testing.assert_allclose(got, losses[r], rtol=1e-3)
    with np.load(tmp_path / "params.npz") as f:
        for i, p in enumerate(final):
            np.testing.assert_allclose(f[f"out{i}"], np.stack([p] * cfg.replicas),
                                       rtol=1e-3, atol=1e-5)


@pytest.mark.slow
def test_mpiexec_from_config_is_checked_before_launch(tmp_path):
    """A relative path (with a slash) resolves against the config's folder; a bare name is
    a program looked up on PATH, as --mpiexec NAME is on the command line."""
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "elementwise_reduce_mesh2"
    head = f'module = "{case}/module.hlo"\ninputs = "{case}/inputs.npz"\nranks = 2\n'
    for value, shown in (("bin/no-such-launcher", tmp_path / "bin" / "no-such-launcher"),
                         ("no-such-launcher", "no-such-launcher")):
        path = _write(tmp_path, head + f'mpiexec = "{value}"\n')
        proc = _xladist("run", "--config", str(path))
        assert proc.returncode == 2, proc.stderr
        assert f"{path}: key 'mpiexec' {shown}: not an executable program" in proc.stderr, \
            proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_mpiexec_from_config_by_name_is_found_on_path(tmp_path):
    from xladist.collectives.mpiexec import find_mpiexec
    launcher = find_mpiexec(None, "mpiexec")
    case = ROOT / "tests" / "data" / "corpus" / "jax" / "elementwise_reduce_mesh2"
    path = _write(tmp_path, f'module = "{case}/module.hlo"\ninputs = "{case}/inputs.npz"\n'
                            f'ranks = 2\nmpiexec = "{Path(launcher).name}"\n'
                            f'outputs = "out.npz"\n')
    env_path = f"{Path(launcher).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = xladist_cli("run", "--config", str(path), cwd=tmp_path, timeout=120,
                       XLADIST_PROGRESS="off", PATH=env_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.npz").exists()
