"""The train_mlp example's documented steps run as written (cli41).

Before: the steps in configs/train_mlp.toml's comment and in examples/train_mlp/README.md
(make_data.py, then `xladist run` with `--outputs examples/train_mlp/out/params.npz`)
ended in `--outputs .../out/params.npz: the folder .../out does not exist (create it
first)`, exit 2, on a fresh checkout: `--outputs` wants an existing folder (errors.md),
and out/ is made only by --outfeed, later. Each step is run here, in a copy of the
example, exactly as the file states it (`xladist` as `python -m xladist`).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.cli_util import cli_env
from tests.paths import ROOT


def _config_steps() -> list[str]:
    text = (ROOT / "configs" / "train_mlp.toml").read_text()
    return [m[1] for m in re.finditer(r"^#   (.+)$", text, re.MULTILINE)]


def _readme_steps() -> list[str]:
    text = (ROOT / "examples" / "train_mlp" / "README.md").read_text()
    block = text.split("## Run it", 1)[1].split("```", 2)[1]
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["configs/train_mlp.toml", "examples/train_mlp/README.md"])
def test_the_documented_steps_run_as_written(tmp_path, where):
    shutil.copytree(ROOT / "examples" / "train_mlp", tmp_path / "examples" / "train_mlp",
                    ignore=shutil.ignore_patterns("data", "out", "__pycache__"))
    (tmp_path / "configs").mkdir()
    shutil.copy(ROOT / "configs" / "train_mlp.toml", tmp_path / "configs")
    steps = _config_steps() if where.startswith("configs") else _readme_steps()
    assert any(s.startswith("xladist run") for s in steps), steps
    for step in steps:
        argv = shlex.split(step, comments=True)
        if argv[0] == "xladist":
            argv = [sys.executable, "-m", "xladist", *argv[1:]]
        elif argv[0] == "python":
            argv[0] = sys.executable
        proc = subprocess.run(argv, cwd=tmp_path, env=cli_env(XLADIST_PROGRESS="off"),
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, (step, proc.stdout, proc.stderr)
    assert (tmp_path / "examples" / "train_mlp" / "out" / "params.npz").is_file()
