"""xladist.run checks its inputs and its module argument before any rank starts."""

import numpy as np
import pytest

import xladist
from xladist.errors import InputError
from xladist.runtime import api

PSUM = """HloModule m, replica_count=2

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  p = f32[4] parameter(0)
  ROOT r = f32[4] all-reduce(p), replica_groups={{0,1}}, to_apply=add
}
"""


@pytest.fixture
def no_launch(monkeypatch):
    def launched(*args, **kwargs):
        raise AssertionError("ranks were started for inputs that should have been refused")
    monkeypatch.setattr(api, "_run_spawned", launched)


@pytest.mark.parametrize("given, got", [
    (np.ones((2, 4), np.int32), "got a int32 array of dims"),
    (np.array([[object()] * 4] * 2), "got a object array of dims"),
])
def test_element_type_is_checked_before_launch(no_launch, given, got):
    # Before: only the dims were checked here; ranks started and one failed with
    # "rank 1: parameter 0 ..." (ExecutionError), an object array with an internal error.
    with pytest.raises(InputError, match=r"device 0: parameter 0 \(p: f32\[4\]\): expected "
                                         r"f32\[4\] \(float32\), " + got):
        xladist.run(PSUM, [given], n=2)


def test_per_device_argument_lists_are_checked_before_launch(no_launch):
    ok = np.ones(4, np.float32)
    with pytest.raises(InputError, match=r"device 1: parameter 0 .*got a float64 array"):
        xladist.run(PSUM, [[ok], [ok.astype(np.float64)]], n=2)
    with pytest.raises(InputError, match=r"takes 1 arguments, device 0 got 2"):
        xladist.run(PSUM, [[ok, ok], [ok, ok]], n=2)


def test_a_missing_module_file_is_named(no_launch, tmp_path):
    # Before: the path was parsed as HLO text: "<text>:1:1: expected a computation ... found '/'".
    missing = tmp_path / "nope.hlo"
    for given in (str(missing), missing):
        with pytest.raises(InputError, match=r"module file .*nope\.hlo: does not exist"):
            xladist.run(given, [np.ones((2, 4), np.float32)], n=2)


def test_every_input_error_names_the_module(no_launch, tmp_path):
    """A Cluster runs many modules: its input errors said `argument 0 (p: f32[4]): expected
    dims [2, 4] ...` or `device 0: parameter 0 ...` without saying of which module (only
    the count's said it). Now each names it, for Cluster.run / a handle's run (the
    handle's own check, Compiled.inputs) and xladist.run alike."""
    from types import SimpleNamespace

    from xladist.runtime.cluster import Compiled
    module = xladist.parse_hlo(PSUM.replace("HloModule m,", "HloModule psum_of_p,"))
    handle = Compiled(SimpleNamespace(n=2), 1, module, None, None, {})
    wrong = {  # what the module takes: one f32[4] per device
        "dims": [np.ones((2, 5), np.float32)], "device axis": [np.ones((3, 4), np.float32)],
        "dtype": [np.ones((2, 4), np.int32)], "count": [np.ones((2, 4), np.float32)] * 2,
        "per device": [[np.ones(4, np.float64)], [np.ones(4, np.float32)]],
        "not a list": 3, "npz": str(tmp_path / "missing.npz")}
    for what, given in wrong.items():
        for check in (handle.inputs, lambda g: xladist.run(module, g, n=2)):
            with pytest.raises(InputError) as e:
                check(given)
            assert "psum_of_p" in str(e.value), (what, str(e.value))


@pytest.mark.parametrize("header, n, says", [
    ("replica_count=2", 3, "run it with n=2 (or a multiple of 2 devices"),
    ("replica_count=2, num_partitions=2", 2, "= 4 devices; run it with n=4, not n=2"),
])
def test_a_wrong_device_count_is_told_in_the_callers_words(no_launch, monkeypatch, header, n,
                                                          says):
    """The count a module needs (its header's replica_count x num_partitions) against n.
    Before: xladist.run(text, inputs, n=3) said "run it with -n 2", the option of `xladist
    run`, to a Python caller, who has no -n; now xladist.run and xladist.Cluster name their
    keyword n= (the command's `-n 2` is pinned by tests/cli/test_count_options.py)."""
    text = PSUM.replace("replica_count=2", header).replace("replica_groups={{0,1}}",
                                                           "replica_groups={}")
    with pytest.raises(InputError) as e:
        xladist.run(text, [np.ones(4, np.float32)] * n, n=n)
    assert says in str(e.value) and "-n" not in str(e.value), str(e.value)
    cluster = xladist.Cluster(n)  # not started: the count is refused before any rank is asked
    monkeypatch.setattr(cluster, "_usable_or_raise", lambda: None)
    with pytest.raises(InputError) as e:
        cluster.compile(text)
    assert says in str(e.value) and "-n" not in str(e.value), str(e.value)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_job_past_its_job_timeout_is_an_execution_error_naming_it():
    """xladist.run(..., job_timeout=0.5) of a job that takes longer raised the launcher's
    own subprocess.TimeoutExpired (`Command '[.../mpiexec', '-n', '2', ...]' timed out
    after 0.5 seconds`): no XlaDistError, the CLI's and callers' `except` missed it. Now an
    ExecutionError naming the module and job_timeout; the ranks are stopped."""
    from xladist.errors import ExecutionError
    with pytest.raises(ExecutionError) as e:
        xladist.run(PSUM, [np.ones((2, 4), np.float32)], n=2, job_timeout=0.5)
    assert "the 2-rank job of m did not end within job_timeout=0.5 s" in str(e.value)
