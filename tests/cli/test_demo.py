"""`xladist demo`: runs, prints a loss per step and the summary, and trains correctly.

The per-step losses that rank 0 prints are checked here against the float64 numpy replay
of the same data-parallel training (xladist.examples.train_mlp.reference), independently
of the demo's own check.
"""

from __future__ import annotations

import json
import re

import pytest
import numpy as np

from tests.cli_util import xladist_cli
from tests.paths import ROOT



def _demo(*args, timeout=150, cwd=ROOT):
    return xladist_cli("demo", *args, cwd=cwd, timeout=timeout, XLADIST_PROGRESS="log")


def _reference_losses(ranks: int, steps: int):
    from xladist.examples.train_mlp import Config, make_data, reference
    cfg = Config(replicas=ranks, steps=steps)
    params, batches = make_data(cfg)
    return reference(params, batches, cfg.lr)[0]


def test_demo_prints_losses_and_summary(tmp_path):
    ranks, steps = 2, 6
    trace = tmp_path / "demo.json"
    proc = _demo("-n", str(ranks), "--steps", str(steps), "--trace", str(trace))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    printed = [(int(m[1]), float(m[2])) for m in re.finditer(r"^step +(\d+) +loss ([\d.]+)",
                                                             out, re.MULTILINE)]
    assert [s for s, _ in printed] == list(range(1, steps + 1))
    want = _reference_losses(ranks, steps)[0]  # rank 0's batches
    np.testing.assert_allclose([v for _, v in printed], want, rtol=1e-3)
    assert re.search(rf"^{steps} steps in [\d.]+ s: [\d.]+ ms per step$", out, re.MULTILINE)
    assert "compute" in out and "collective wait" in out and "infeed wait" in out
    rows = re.findall(r"^ +(\d+) +[\d.]+ s +[\d.]+ s +\d+%", out, re.MULTILINE)
    assert rows == [str(r) for r in range(ranks)]
    assert "-> OK" in out
    # The timeline has both ranks, one all-reduce and one infeed per step on each.
    events = json.loads(trace.read_text())["traceEvents"]
    for r in range(ranks):
        mine = [e for e in events if e["pid"] == r and e["ph"] == "X"]
        assert sum(e["cat"] == "collective" for e in mine) == steps
        assert sum(e["cat"] == "infeed" for e in mine) == steps
        assert sum(e["cat"] == "outfeed" for e in mine) == steps


@pytest.mark.slow
def test_demo_default_is_four_ranks_under_30_s():
    import time
    t0 = time.monotonic()
    proc = _demo("-q")
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "on 4 rank(s)" in proc.stdout and "-> OK" in proc.stdout
    assert len(re.findall(r"^ +[0-3] +[\d.]+ s ", proc.stdout, re.MULTILINE)) == 4
    # The budget is 30 s on 2 free cores; a loaded test machine gets slack.
    assert took < 90, f"xladist demo took {took:.1f} s"


def test_demo_rejects_bad_arguments():
    proc = _demo("--steps", "0")
    assert proc.returncode == 2
    assert "--steps must be a whole number >= 1" in proc.stderr
