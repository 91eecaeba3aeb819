"""Per-rank feeds in real multi-rank jobs: `xladist run -n N --infeed/--outfeed/--infeed-fn`
and `xladist.run(infeed=lambda ..., outfeed=callback)` from this (non-MPI) process.

Expected values are computed with numpy from every rank's items. Failures must name the
rank, the infeed and the item, exit non-zero, stop every rank, be reported once, and
leave every item outfed before the failure in the outfeed files.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from xladist.runtime.api import run as xrun
from xladist.runtime.feeds.npz import write_items
from tests.cli_util import xladist_cli
from tests.feeds_fns import item
from xladist.errors import ExecutionError, InputError
from tests.paths import ROOT

JOB_TIMEOUT = 240

# Each step: take f32[3], all-reduce (sum over ranks) it into the accumulator, outfeed
# (step, acc). The all-reduce keeps the ranks in step, so a failing rank leaves the
# others waiting for it.
LOOP = """HloModule loop_ar, replica_count=NRANKS

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  p = (s32[], token[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(STEPS)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  p = (s32[], token[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  t = token[] get-tuple-element(p), index=1
  acc = f32[3] get-tuple-element(p), index=2
  in = (f32[3], token[]) infeed(t)
  x = f32[3] get-tuple-element(in), index=0
  t1 = token[] get-tuple-element(in), index=1
  xs = f32[3] all-reduce(x), replica_groups={}, to_apply=sum
  acc2 = f32[3] add(acc, xs)
  out = (s32[], f32[3]) tuple(i, acc2)
  t2 = token[] outfeed(out, t1), outfeed_shape=(s32[], f32[3]{0})
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT next = (s32[], token[], f32[3]) tuple(i2, t2, acc2)
}

ENTRY main {
  zero = s32[] constant(0)
  t = token[] after-all()
  z = f32[] constant(0)
  acc = f32[3] broadcast(z), dimensions={}
  init = (s32[], token[], f32[3]) tuple(zero, t, acc)
  w = (s32[], token[], f32[3]) while(init), condition=cond, body=body
  ROOT out = f32[3] get-tuple-element(w), index=2
}
"""


def loop_text(n: int, steps: int) -> str:
    return LOOP.replace("NRANKS", str(n)).replace("STEPS", str(steps))


def expected_accs(n: int, steps: int) -> list[np.ndarray]:
    """acc after each step: the running sum over steps of every rank's items."""
    return list(np.cumsum([sum(item(r, k) for r in range(n)) for k in range(steps)], axis=0))


def xladist_run(*args, timeout=JOB_TIMEOUT):
    return xladist_cli("run", *args, "-q", timeout=timeout)


def write_module(tmp_path, n, steps) -> Path:
    path = tmp_path / "loop.hlo"
    path.write_text(loop_text(n, steps))
    return path


def write_feeds(tmp_path, n, counts) -> str:
    for r in range(n):
        write_items(str(tmp_path / "in" / f"rank{r}.npz"), [item(r, k) for k in range(counts[r])])
    return str(tmp_path / "in" / "rank{rank}.npz")


def read_outfeed(path) -> list[tuple]:
    with np.load(path) as f:
        return [(int(f[f"item{k}_0"]), f[f"item{k}_1"]) for k in range(len(f.files) // 2)]


def check_outfeed(items, n, count):
    want = expected_accs(n, count)
    assert [i for i, _ in items] == list(range(count))
    for (_, acc), w in zip(items, want):
        np.testing.assert_allclose(acc, w, rtol=1e-6)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.slow
def test_npz_infeed_and_outfeed_per_rank(tmp_path, n):
    steps = 5
    module = write_module(tmp_path, n, steps)
    infeed = write_feeds(tmp_path, n, [steps + r for r in range(n)])  # extra items: unused
    proc = xladist_run(module, "-n", n, "--infeed", infeed, "--outfeed",
                       tmp_path / "out" / "rank{rank}.npz", "--outputs", tmp_path / "o.npz",
                       "--prefetch", 2)
    assert proc.returncode == 0, proc.stderr
    for r in range(n):
        check_outfeed(read_outfeed(tmp_path / "out" / f"rank{r}.npz"), n, steps)
    with np.load(tmp_path / "o.npz") as f:
        np.testing.assert_allclose(f["out0"], np.stack([expected_accs(n, steps)[-1]] * n),
                                   rtol=1e-6)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.slow
def test_exhausted_rank_stops_the_job_and_keeps_every_outfed_item(tmp_path, n):
    steps, short = 6, 3
    module = write_module(tmp_path, n, steps)
    infeed = write_feeds(tmp_path, n, [short if r == 1 else steps for r in range(n)])
    proc = xladist_run(module, "-n", n, "--infeed", infeed, "--outfeed",
                       tmp_path / "out" / "rank{rank}.npz", "--timeout", 60)
    assert proc.returncode != 0
    assert "infeed exhausted on rank 1 at in (item 3)" in proc.stderr
    assert proc.stderr.count("infeed exhausted") == 1, proc.stderr
    # Rank 1 outfed steps 0..2 and then failed. It could finish the all-reduce of step 2
    # only once every rank had entered it, so every rank had outfed steps 0 and 1 (and
    # maybe 2) when the abort killed it: the launcher turned their logs into the files.
    check_outfeed(read_outfeed(tmp_path / "out" / "rank1.npz"), n, short)
    for r in range(n):
        items = read_outfeed(tmp_path / "out" / f"rank{r}.npz")
        assert len(items) in (short - 1, short), (r, items)
        check_outfeed(items, n, len(items))
        assert not (tmp_path / "out" / f"rank{r}.npz.part").exists()


@pytest.mark.slow
def test_mismatched_item_names_rank_infeed_index_expected_and_given(tmp_path):
    n = 2
    module = write_module(tmp_path, n, 4)
    infeed = write_feeds(tmp_path, n, [4, 4])
    bad = [item(1, k) for k in range(4)]
    bad[2] = bad[2].astype(np.float64)
    write_items(str(tmp_path / "in" / "rank1.npz"), bad)
    proc = xladist_run(module, "-n", n, "--infeed", infeed, "--outfeed", tmp_path / "o{rank}.npz",
                       "--timeout", 60)
    assert proc.returncode == 1
    assert "rank 1 (replica 1, partition 0) | in (line 21): infeed item 2 on rank 1 does not " \
           "fit in: expected f32[3], given f64[3]" in proc.stderr


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.slow
def test_infeed_function_per_rank(tmp_path, n):
    steps = 4
    module = write_module(tmp_path, n, steps)
    proc = xladist_run(module, "-n", n, "--infeed-fn", "tests.feeds_fns:steps", "--outfeed",
                       tmp_path / "out{rank}.npz")
    assert proc.returncode == 0, proc.stderr
    for r in range(n):
        check_outfeed(read_outfeed(tmp_path / f"out{r}.npz"), n, steps)


@pytest.mark.slow
def test_infeed_function_that_raises_is_reported_once_with_rank(tmp_path):
    module = write_module(tmp_path, 2, 5)
    proc = xladist_run(module, "-n", 2, "--infeed-fn", "tests.feeds_fns:raising_on_rank1",
                       "--outfeed", tmp_path / "out{rank}.npz", "--timeout", 60)
    assert proc.returncode == 1
    msg = "raised ValueError: shard 1 is corrupt at record 2 (on rank 1, producing item 2"
    assert msg in proc.stderr
    assert proc.stderr.count("shard 1 is corrupt") == 1, proc.stderr
    check_outfeed(read_outfeed(tmp_path / "out1.npz"), 2, 2)  # steps 0, 1 before item 2



@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_bare_mpiexec_launch_writes_every_outfeed_file_when_a_rank_fails(tmp_path):
    # `mpiexec -n 2 xladist run ...`: rank 0 hosts the job (its files and the service).
    # Rank 1's infeed function raises at item 2. Before: rank 0 was aborted in the
    # all-reduce, never ended its own outfeed stream, and died with only out0.npz.part --
    # its items outfed before the failure not in out0.npz, nothing said. Now its abort hook
    # closes the outfeed files still open (JobHost.close_outfeeds): both files hold steps
    # 0 and 1.
    import os
    import signal
    import subprocess

    from tests.cli_util import cli_env
    from xladist.runtime.launcher import find_mpiexec
    module = write_module(tmp_path, 2, 5)
    proc = subprocess.Popen(
        [find_mpiexec(), "-n", "2", sys.executable, "-m", "xladist", "run", str(module),
         "--infeed-fn", "tests.feeds_fns:raising_on_rank1", "--outfeed",
         str(tmp_path / "out{rank}.npz"), "--timeout", "60", "-q"],
        cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and its ranks: nothing left running
        _, err = proc.communicate()
        pytest.fail(f"the bare launch did not end:\n{err}")
    assert proc.returncode != 0
    assert "shard 1 is corrupt at record 2" in err, err
    for r in range(2):
        check_outfeed(read_outfeed(tmp_path / f"out{r}.npz"), 2, 2)  # steps 0, 1
        assert not (tmp_path / f"out{r}.npz.part").exists()


def test_missing_infeed_file_is_refused_before_launch(tmp_path):
    module = write_module(tmp_path, 2, 1)
    proc = xladist_run(module, "-n", 2, "--infeed", tmp_path / "nope{rank}.npz")
    assert proc.returncode == 2
    assert "for rank 0 (replica 0, partition 0)" in proc.stderr
    assert "nope0.npz: does not exist" in proc.stderr



@pytest.mark.parametrize("keys, says", [
    (["x0"], "array 'x0' is not an item (keys are item0, item1, ..."),
    (["item0", "item2"], "items must be numbered 0, 1, ... without gaps: item 1 is missing"),
])
def test_infeed_file_with_keys_that_are_not_items_is_refused_before_launch(tmp_path, keys,
                                                                         says):
    # Before: the ranks started and rank 1 failed at its first infeed ("the infeed source
    # (in the launching process) raised InputError: ..."), exit 1.
    module = write_module(tmp_path, 2, 1)
    for r in range(2):
        np.savez(tmp_path / f"in{r}.npz", **{k: np.zeros(4, np.float32) for k in keys})
    proc = xladist_run(module, "-n", 2, "--infeed", tmp_path / "in{rank}.npz")
    assert proc.returncode == 2, proc.stderr
    assert "for rank 0 (replica 0, partition 0)" in proc.stderr and says in proc.stderr
    assert "raised" not in proc.stderr
    with pytest.raises(InputError, match=re.escape(says)):  # the Python API alike
        xrun(str(module), None, n=2, infeed=str(tmp_path / "in{rank}.npz"),
             outfeed=lambda *a: None)


@pytest.mark.slow
def test_single_device_cli(tmp_path):
    module = write_module(tmp_path, 1, 3)
    infeed = write_feeds(tmp_path, 1, [3])
    proc = xladist_run(module, "-n", 1, "--infeed", infeed, "--outfeed",
                       tmp_path / "out{rank}.npz")
    assert proc.returncode == 0, proc.stderr
    check_outfeed(read_outfeed(tmp_path / "out0.npz"), 1, 3)


# ---- xladist.run from a plain Python process: lambdas stay here ----------------------------------
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.slow
def test_python_api_lambda_infeed_and_callback_outfeed(n):
    steps = 4
    got: dict[int, list] = {}
    outs = xrun(loop_text(n, steps), n=n, timeout=60, job_timeout=JOB_TIMEOUT,
                infeed=lambda rank, replica, partition: (item(rank, k) for k in range(steps)),
                outfeed=lambda rank, replica, partition, x: got.setdefault(rank, []).append(x))
    assert sorted(got) == list(range(n))
    for r in range(n):
        check_outfeed(got[r], n, steps)
        np.testing.assert_allclose(outs[r][0], expected_accs(n, steps)[-1], rtol=1e-6)


@pytest.mark.slow
def test_python_api_source_that_raises_is_chained():
    def source(rank, replica, partition):
        for k in range(10):
            if rank == 0 and k == 2:
                raise KeyError("missing shard")
            yield item(rank, k)
    got = []
    with pytest.raises(ExecutionError) as e:
        xrun(loop_text(2, 3), n=2, timeout=60, job_timeout=JOB_TIMEOUT, infeed=source,
             outfeed=lambda rank, replica, partition, x: got.append((rank, x)))
    assert "raised KeyError: 'missing shard' (on rank 0, producing item 2" in str(e.value)
    assert isinstance(e.value.__cause__, KeyError)
    # Rank 0 outfed steps 0 and 1; it finished the all-reduce of step 1, so rank 1 had
    # outfed step 0 at least. Every one of those items was delivered here.
    mine = {r: [int(x[0]) for q, x in got if q == r] for r in (0, 1)}
    assert mine[0] == [0, 1] and mine[1] in ([0], [0, 1]), mine


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_python_api_delivers_every_item_outfed_before_a_failure_to_a_slow_callback():
    # Rank 1's infeed ends after 5 items: each rank outfeeds steps 0-4, then rank 1 fails
    # and rank 0 is killed with the job. The callback takes 1 s an item: when mpiexec has
    # ended, most items are still in the ranks' sockets on this side. Before: the service
    # closed those sockets when the job ended, so xladist.run raised with 3-5 of the 10
    # items delivered, dropped the rest, and called the callback once more after it had
    # returned. Now every item outfed before the failure reaches the callback first.
    import time
    steps, taken = 5, []
    returned = []

    def slow(rank, replica, partition, x):
        time.sleep(1.0)
        taken.append((rank, int(x[0]), bool(returned)))
    with pytest.raises(ExecutionError, match="infeed exhausted on rank 1"):
        try:
            xrun(loop_text(2, steps + 1), n=2, timeout=60, job_timeout=JOB_TIMEOUT,
                 infeed=lambda rank, replica, partition: [
                     item(rank, k) for k in range(steps + 1 if rank == 0 else steps)],
                 outfeed=slow)
        finally:
            returned.append(True)
    time.sleep(1.5)  # a callback still running would append now
    assert sorted((r, k) for r, k, _ in taken) == [(r, k) for r in (0, 1)
                                                   for k in range(steps)], taken
    assert not any(late for _, _, late in taken), taken


# ---- the example ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_train_mlp_example_loss_goes_down_at_4_ranks(tmp_path):
    from xladist.examples.train_mlp import Config, make_data, reference, write_example
    cfg = Config()
    paths = write_example(tmp_path, cfg)
    committed = (ROOT / "examples" / "train_mlp" / "train_mlp.hlo").read_text()
    assert Path(paths["module"]).read_text() == committed  # build.py output is up to date
    proc = xladist_run(paths["module"], "-n", 4, "--inputs", paths["inputs"], "--infeed",
                       paths["infeed"], "--outfeed", tmp_path / "out" / "rank{rank}.npz",
                       "--outputs", tmp_path / "params.npz")
    assert proc.returncode == 0, proc.stderr
    params, batches = make_data(cfg)
    want_losses, want_params = reference(params, batches, cfg.lr)
    for r in range(4):
        with np.load(tmp_path / "out" / f"rank{r}.npz") as f:
            losses = [float(f[f"item{k}"]) for k in range(cfg.steps)]
        np.testing.assert_allclose(losses, want_losses[r], rtol=2e-3)
    mean = np.mean(want_losses, axis=0)
    assert mean[-5:].mean() < 0.5 * mean[:5].mean()  # the loss goes down
    with np.load(tmp_path / "params.npz") as f:
        for i, w in enumerate(want_params):
            got = f[f"out{i}"]
            for r in range(4):
                np.testing.assert_allclose(got[r], w, rtol=2e-3, atol=1e-4)


def test_infeed_function_in_the_current_folder_with_the_console_script(tmp_path):
    """docs/feeds.md's `xladist run m.hlo --infeed-fn mypkg.data:shard`, with mypkg in the
    folder it is run from. The ranks import it (they run `python -m` there); so must the
    launcher's check, also when it is pip's `xladist` script, whose sys.path[0] is its
    bin/ folder -- before, it said `cannot import mypkg.data: No module named 'mypkg'`
    where `python -m xladist run` worked."""
    import subprocess
    from tests.cli_util import cli_env
    steps = 3
    module = write_module(tmp_path, 1, steps)
    pkg = tmp_path / "mypkg_docwalk"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "data.py").write_text((ROOT / "tests" / "feeds_fns.py").read_text())
    script = tmp_path / "bin" / "xladist"  # what pip writes for the console script
    script.parent.mkdir()
    script.write_text("import sys\nfrom xladist.cli import entry\nsys.exit(entry())\n")
    proc = subprocess.run(
        [sys.executable, str(script), "run", module.name, "--infeed-fn",
         "mypkg_docwalk.data:steps", "--outfeed", "out.npz", "-q"],
        cwd=tmp_path, env=cli_env(XLADIST_PROGRESS="off"), capture_output=True, text=True,
        timeout=JOB_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    check_outfeed(read_outfeed(tmp_path / "out.npz"), 1, steps)
