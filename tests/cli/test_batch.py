"""`xladist run --batch LIST -n N`: every line on the same ranks, results checked against
numpy; a failing line is named and the others run; a malformed list runs nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cli.test_channels_cli import DATA
from tests.cli_util import xladist_cli

LOOP = DATA / "data_dependent_loop.hlo"


def _setup(tmp_path):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.savez(tmp_path / "in.npz", arg0=x, arg1=np.array([2, 2], np.int32))
    np.savez(tmp_path / "in3.npz", arg0=2 * x, arg1=np.array([3, 3], np.int32))
    np.savez(tmp_path / "bad.npz", arg0=x.astype(np.float64), arg1=np.array([2, 2], np.int32))
    np.savez(tmp_path / "hang.npz", arg0=x, arg1=np.array([1, 2], np.int32))
    return x


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_batch_runs_every_line_on_one_launch(tmp_path):
    x = _setup(tmp_path)
    (tmp_path / "runs.txt").write_text(
        "# two runs, a bad one between them, and one printed\n"
        f"{LOOP} --inputs in.npz --outputs out1.npz\n"
        f"{LOOP} --inputs bad.npz --outputs never.npz\n"
        "\n"
        f"'{LOOP}' --inputs in3.npz --outputs out2.npz --timeout 60\n"
        f"{LOOP} --inputs in.npz\n")
    proc = xladist_cli("run", "--batch", "runs.txt", "-n", "2", timeout=240, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr  # the bad line's exit code
    assert "runs.txt:3: error: arg0 for parameter 0" in proc.stderr and "float64" in proc.stderr
    assert not (tmp_path / "never.npz").exists()
    # k all-reduces over 2 devices of the running value: sum over devices, doubled k-1 times
    for name, scale, k in (("out1.npz", 1, 2), ("out2.npz", 2, 3)):
        got = np.load(tmp_path / name)["out0"]
        want = scale * x.sum(axis=0) * 2 ** (k - 1)
        np.testing.assert_allclose(got, np.stack([want, want]))
    assert "== runs.txt:6:" in proc.stdout and "[ 8. 12. 16. 20.]" in proc.stdout


def test_a_malformed_list_runs_nothing(tmp_path):
    _setup(tmp_path)
    (tmp_path / "runs.txt").write_text(f"{LOOP} --inputs in.npz --outputs out.npz\n"
                                       f"{LOOP} --no-such-flag\n")
    proc = xladist_cli("run", "--batch", "runs.txt", "-n", "2", cwd=tmp_path)
    assert proc.returncode == 2
    assert "runs.txt:2:" in proc.stderr and "--no-such-flag" in proc.stderr
    assert not (tmp_path / "out.npz").exists()
    (tmp_path / "runs.txt").write_text(f"{LOOP} --inputs in.npz --trace t.json\n")
    proc = xladist_cli("run", "--batch", "runs.txt", "-n", "2", cwd=tmp_path)
    assert proc.returncode == 2 and "runs.txt:1: --trace is not offered" in proc.stderr
    (tmp_path / "runs.txt").write_text(f"{LOOP} -n 4 --inputs in.npz\n")
    proc = xladist_cli("run", "--batch", "runs.txt", "-n", "2", cwd=tmp_path)
    assert proc.returncode == 2 and "-n 4 differs from the batch's -n 2" in proc.stderr
    proc = xladist_cli("run", str(LOOP), "--batch", "runs.txt", "-n", "2", cwd=tmp_path)
    assert proc.returncode == 2 and "not both" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_hang_ends_the_batch_naming_the_lines_not_run(tmp_path):
    _setup(tmp_path)
    (tmp_path / "runs.txt").write_text(
        f"{LOOP} --inputs in.npz --outputs out1.npz\n"
        f"{LOOP} --inputs hang.npz --no-check --timeout 3\n"
        f"{LOOP} --inputs in.npz --outputs out3.npz\n")
    proc = xladist_cli("run", "--batch", "runs.txt", "-n", "2", timeout=240, cwd=tmp_path)
    assert proc.returncode == 1
    assert (tmp_path / "out1.npz").exists() and not (tmp_path / "out3.npz").exists()
    assert "rank 1 waits there; rank 0 never arrived" in proc.stderr, proc.stderr
    assert "not run (the cluster ended): line 3" in proc.stderr


@pytest.mark.parametrize("setting,said", [
    ("ranks = 4", "key 'ranks' 4 differs from the batch's -n 2"),
    ("trace = 't.json'", "--trace is not offered in a batch yet"),
    ("module = 'm.xlx'", "a .xlx module is not offered in a batch yet"),
])
def test_what_a_lines_config_sets_is_refused_before_anything_runs(tmp_path, setting, said):
    """`ranks = 4` in a line's --config, in a batch of -n 2, was checked only when the line
    ran: as a 4-device run ('arg0 ... expected dims [4, 4]'), exit 1, while the other lines
    ran. docs/cluster.md: another -n or a setting a batch does not offer exits 2 and nothing
    runs; a line's config is part of the line (and so is a .xlx module, from a config or
    not)."""
    _setup(tmp_path)
    module = "" if setting.startswith("module") else f"module = '{LOOP}'\n"
    (tmp_path / "run.toml").write_text(f"{module}inputs = 'in.npz'\n{setting}\n")
    (tmp_path / "runs.txt").write_text(f"{LOOP} --inputs in.npz --outputs out.npz\n"
                                       "--config run.toml\n")
    proc = xladist_cli("run", "--batch", "runs.txt", "-n", "2", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("xladist run: error: runs.txt:2: ") and said in proc.stderr, \
        proc.stderr
    assert not (tmp_path / "out.npz").exists() and not (tmp_path / "t.json").exists()
    assert "Traceback" not in proc.stderr
