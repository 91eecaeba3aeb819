"""The deadlock check's verdicts against real runs under mpiexec (slow).

A sample of generated programs (tests/analysis/deadlock/programs.py) runs for real with
`xladist run -n N --no-check --timeout S`:

* a program the check proves completes, on the cpu backend and on the interpreter, with the
  same results -- and, run without the check, its ranks compare every collective's
  signature first (xladist/runtime/signatures.py): a program proven although its devices
  disagree on a collective fails here naming both, instead of finishing with garbage;
* a program the check refuses hangs (the watchdog ends it with its report) or fails --
  unless every problem the check reports names the MPI behaviour a run could get through by
  (`Problem.relies_on`: a collective member leaving early, undefined results of a mismatched
  collective), which the op semantics do not promise: a fair alarm, counted by rule.

A second sample is of programs with a branch or loop decided by an all-reduce over groups
of devices (`programs(decided_by_groups=True)`), half the size: each group decides alone,
so items crossing the groups really hang where the groups decide apart.

The samples are the same on every run (derandomized); XLADIST_SOUNDNESS_EXAMPLES raises
them (a tenth of it runs here, at least 24); XLADIST_SOUNDNESS_RUNS sets the first.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

import xladist
from xladist.analysis.deadlock import check_module
from tests.cli_util import xladist_cli

from .programs import programs
from .test_induction import out_of_step

RUNS = int(os.environ.get("XLADIST_SOUNDNESS_RUNS", "0")) or max(
    24, int(os.environ.get("XLADIST_SOUNDNESS_EXAMPLES", "0")) // 10)
GROUP_RUNS = max(1, RUNS // 2)
TIMEOUT = 4          # --timeout: every wait's deadline in the run
TALLY: collections.Counter = collections.Counter()


def _inputs(R, P, ms):
    n = R * P
    return [np.arange(2 * n, dtype=np.float32).reshape(n, 2), np.asarray(ms, np.int32)]


def _run_on_cluster(cluster_run, text, R, P, ms, backend):
    """A proven program's output 0 stacked over devices, from the session's cluster
    (tests/cluster_fixture.py): it must complete, so it needs no launch of its own."""
    outs = cluster_run(text, _inputs(R, P, ms), n=R * P, backend=backend, check=False,
                       timeout=TIMEOUT)
    return np.stack([o[0] for o in outs])


def _run(tmp, text, R, P, ms, backend):
    path = tmp / "module.hlo"
    path.write_text(text)
    n = R * P
    x, m = _inputs(R, P, ms)
    np.savez(tmp / "in.npz", arg0=x, arg1=m)
    out = tmp / f"out_{backend}.npz"
    proc = xladist_cli("run", path, "-n", n, "--backend", backend, "--no-check",
                       "--timeout", TIMEOUT, "--inputs", tmp / "in.npz", "--outputs", out,
                       "-q", timeout=240)
    return proc, (np.load(out)["out0"] if proc.returncode == 0 else None)


def _hangs(tmp, text: str, n: int, **arrays) -> str:
    """stderr of `xladist run -n N --no-check` of `text` with the inputs `arrays` (a row
    per device), which must fail: the watchdog's report, without a traceback."""
    path = tmp / "module.hlo"
    path.write_text(text)
    np.savez(tmp / "in.npz", **arrays)
    proc = xladist_cli("run", path, "-n", n, "--no-check", "--timeout", TIMEOUT, "-q",
                       "--inputs", tmp / "in.npz", timeout=240)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


def _sample(runs):
    return settings(max_examples=runs, deadline=None, derandomize=True, database=None,
                    phases=[Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@pytest.mark.timeout(300 + 40 * RUNS)
@_sample(RUNS)
@given(programs())
def test_verdicts_hold_under_mpiexec(tmp_path_factory, cluster_run, program):
    _verdict_holds(tmp_path_factory, cluster_run, program)


@pytest.mark.slow
@pytest.mark.timeout(300 + 40 * GROUP_RUNS)
@_sample(GROUP_RUNS)
@given(programs(decided_by_groups=True))
def test_verdicts_hold_under_mpiexec_where_groups_of_devices_decide(tmp_path_factory,
                                                                     cluster_run, program):
    """`lax.cond(psum(x, 'row') > 0, ...)`: items within the deciding groups complete,
    items crossing them hang where the groups decide apart."""
    _verdict_holds(tmp_path_factory, cluster_run, program)


def _verdict_holds(tmp_path_factory, cluster_run, program) -> None:
    """The assertions of the module docstring for one program; what happened goes to the
    tally (by kind, for programs decided by groups of devices)."""
    label = f"decided by groups, items {program.decided}: " if program.decided else ""
    TALLY.update(label + what for what in _verdict(tmp_path_factory, cluster_run, program))


def _verdict(tmp_path_factory, cluster_run, program) -> list[str]:
    text, R, P, ms, _ = program
    module = xladist.parse_hlo(text)
    xladist.verify(module)
    report = check_module(module, budget=None)
    if report.ok and not report.problems:
        # A run that does not finish raises here (the watchdog's report after TIMEOUT, or
        # the rank's error), naming the program: the cluster's next call starts a new one.
        try:
            got = _run_on_cluster(cluster_run, text, R, P, ms, "interpreter")
        except xladist.XlaDistError as e:
            pytest.fail(f"proven, but the run did not finish:\n{e}\n{text}")
        try:
            native = _run_on_cluster(cluster_run, text, R, P, ms, "cpu")
        except xladist.XlaDistError as e:
            pytest.fail(f"proven, but the cpu run did not finish:\n{e}")
        np.testing.assert_allclose(native, got, rtol=1e-5, atol=1e-5)
        return ["proven: completed, same results on both backends"]
    proc, _ = _run(tmp_path_factory.mktemp("run"), text, R, P, ms, "interpreter")
    assert "Traceback" not in proc.stderr, proc.stderr
    if report.ok:
        ran = "completed" if proc.returncode == 0 else "stopped"
        return [f"{report.verdict}: the run {ran}"]
    if proc.returncode != 0:
        hung = "the deadline" in proc.stderr
        assert hung or "error" in proc.stderr, proc.stderr
        return [f"refused: the run {'hung (watchdog report)' if hung else 'failed'}"]
    rules = [p.relies_on for p in report.errors]
    assert all(rules), (f"the check refused a program that completes, naming no rule it "
                        f"relies on:\n{report.to_text()}\n{text}")
    return [f"refused, completed anyway (fair alarm): {rule[:60]}..." for rule in set(rules)]


def teardown_module(module):
    """The tally, for the record (pytest -s shows it)."""
    for what, count in sorted(TALLY.items()):
        print(f"{count:4d}  {what}")


FAIR = """HloModule fair_alarm, replica_count=3

%permute (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  ROOT %cp = f32[2]{0} collective-permute(%a), source_target_pairs={{0,1}}
}

%skip (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  ROOT %o = f32[2]{0} copy(%a)
}

ENTRY %main (x: f32[2], m: s32[]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  %m = s32[] parameter(1)
  %id = u32[] replica-id()
  %two = u32[] constant(2)
  %p = pred[] compare(%id, %two), direction=LT
  ROOT %y = f32[2]{0} conditional(%p, %x, %x), true_computation=%permute, false_computation=%skip
}
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_fair_alarm_names_its_rule_and_the_run_completes(tmp_path):
    """Replica 2 never reaches a collective-permute whose pairs do not name it: the op
    semantics have every member of the permute's group meet it (refused), while the MPI
    runtime moves data only between replicas 0 and 1 (the run completes)."""
    report = check_module(xladist.parse_hlo(FAIR), budget=None)
    (p,) = report.errors
    assert p.kind == "unmatched" and "collective-permute" in p.relies_on, report.to_text()
    proc, out = _run(tmp_path, FAIR, 3, 1, [0, 0, 0], "interpreter")
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(out, [[0, 0], [0, 1], [4, 5]])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_devices_out_of_step_in_a_loop_really_hang(tmp_path):
    """The loop test_induction.py's induction once proved (3 traced iterations in step):
    the check now refuses it with a cycle, and a run without the check hangs until the
    watchdog ends it."""
    text = out_of_step(40)
    report = check_module(xladist.parse_hlo(text))
    assert [p.kind for p in report.errors] == ["deadlock"], report.to_text()
    err = _hangs(tmp_path, text, 4, arg0=np.ones((4, 4), np.float32))
    # The cycle the check names, at the iterations it names.
    assert "v1 (line 32) over devices [0, 1] (iteration 3 of wa): rank 0 waits there; rank 1 " \
        "never arrived" in err, err
    assert "v1 (line 32, iteration 3 of wa)" in report.to_text(), report.to_text()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_all_reduce_reached_as_different_collectives_really_decides_apart(tmp_path):
    """test_uniform.py's APART: replica 0 pairs %F's all-reduce with replica 1's all-reduce
    of z, so the two replicas branch apart on it and replica 0 waits alone."""
    from .test_uniform import APART
    err = _hangs(tmp_path, APART, 2, arg0=np.array([1, 0], np.float32),
                 arg1=np.array([-5, 0], np.float32))
    assert "rank 1 never arrived" in err, err
    assert check_module(xladist.parse_hlo(APART)).verdict != "proven"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_devices_out_of_step_in_one_run_of_a_called_loop_really_hang(tmp_path):
    """test_induction.py's out_of_step_runs: the first of three runs of one loop skews, the
    second rebalances; the check refuses it and a run without the check hangs."""
    from .test_induction import out_of_step_runs
    text = out_of_step_runs(40)
    assert check_module(xladist.parse_hlo(text)).errors
    err = _hangs(tmp_path, text, 4, arg0=np.ones((4, 4), np.float32))
    assert "rank 0 waits there; rank 1 never arrived" in err, err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_counter_wrapping_around_in_a_loop_really_hangs(tmp_path):
    """test_induction.py's WRAP_UNIFORM run 39 times (the max of m): the remainders of the
    wrapped counter send replica 0 to an all-reduce replica 1 never reaches."""
    from .test_induction import WRAP_UNIFORM
    assert check_module(xladist.parse_hlo(WRAP_UNIFORM)).verdict != "proven"
    err = _hangs(tmp_path, WRAP_UNIFORM, 2, arg0=np.array([1, 2], np.float32),
                 arg1=np.array([39, 0], np.int32))
    assert "(iteration 27 of w): rank 0 waits there; rank 1 never arrived" in err, err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_devices_entering_a_loop_apart_really_hang(tmp_path):
    """test_induction.py's entered_apart: in step in the loop, but the replicas enter it
    several all-reduces apart; the check refuses it and a run without the check hangs."""
    from .test_induction import ENTERING, entered_apart
    text = entered_apart(*ENTERING[0], 40)
    assert check_module(xladist.parse_hlo(text)).errors
    err = _hangs(tmp_path, text, 4, arg0=np.ones((4, 4), np.float32))
    assert "never arrived" in err, err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_all_reduce_paired_with_another_instruction_really_runs_the_loop_apart(tmp_path):
    """test_reference.py's CLASH with m = (0, 1): replica 0's %t meets replica 1's constant
    all-reduce, so the loop runs 5 times on replica 0 and 6 on replica 1, as the reference
    (pairing by order of issue) says; an oracle valuing %t by instruction saw no problem."""
    from .test_reference import CLASH
    err = _hangs(tmp_path, CLASH, 2, arg0=np.zeros((2, 2), np.float32),
                 arg1=np.array([0, 1], np.int32))
    assert "(iteration 6 of w): rank 1 waits there; rank 0 never arrived" in err, err


DEAD_CONDITIONAL = """HloModule dead_conditional, replica_count=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%none (p: f32[2]) -> f32[2] {
  ROOT %p = f32[2] parameter(0)
}

%ar (p: f32[2]) -> f32[2] {
  %p = f32[2] parameter(0)
  ROOT %r = f32[2] all-reduce(%p), replica_groups={{0,1}}, to_apply=%add
}

ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2] parameter(0)
  %id = u32[] replica-id()
  %zero = u32[] constant(0)
  %first = pred[] compare(%id, %zero), direction=EQ
  %unused = f32[2] conditional(%first, %x, %x), true_computation=%none, false_computation=%ar
  %t = f32[2] all-reduce(%x), replica_groups={{0,1}}, to_apply=%add
  ROOT %after = f32[2] conditional(%first, %t, %t), true_computation=%ar, false_computation=%none
}
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_a_conditional_whose_result_is_unused_still_communicates(cluster_run, backend):
    """Replica 1 all-reduces in a conditional whose result nothing uses, replica 0 does
    not; the check proves the program with that all-reduce paired with replica 0's %t.
    The cpu backend dropped the conditional as dead code, so replica 1's %t met replica
    0's last all-reduce instead and the run hung (rank 1 finished, rank 0 waiting). Each
    replica's two all-reduces pair in order of issue: x0+x1, then (x0+x1)+x1."""
    assert check_module(xladist.parse_hlo(DEAD_CONDITIONAL), 2).ok
    x = np.array([[1.0, 2.0], [10.0, 20.0]], np.float32)
    outs = cluster_run(DEAD_CONDITIONAL, [x], n=2, backend=backend, check=False,
                       timeout=TIMEOUT)
    want = x[0] + 2 * x[1]
    for d in range(2):
        np.testing.assert_array_equal(outs[d][0], want)
