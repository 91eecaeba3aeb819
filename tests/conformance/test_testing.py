"""xladist.testing and its pytest plugin, from a plain process (runs go to ranks kept for the
process, or a job of their own); tests/mpi/test_plugin_example.py runs the documented
example inside an MPI job."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cli_util import ROOT, cli_env
from xladist import backends
from xladist.testing import _tolerance, assert_conforms, reference

BROKEN = Path(__file__).resolve().parent / "broken_backend"
GATHER = """HloModule gather, replica_count=2
ENTRY e {
  x = f32[3] parameter(0)
  ROOT g = f32[6] all-gather(x), replica_groups={}, dimensions={0}
}"""
NAN = np.array([0x7FC00005, 0x3F800000, 0xFFC00000], np.uint32).view(np.float32)


def test_reference_gives_every_device_its_result():
    x = np.stack([NAN, NAN + 1])
    want = reference(GATHER, [x], n=2)
    assert len(want) == 2
    for d in range(2):  # bits kept: payloads and signs of NaNs
        assert want[d][0].view(np.uint32).tolist() == np.concatenate(x).view(np.uint32).tolist()


def test_a_module_file_is_taken_as_xladist_run_takes_it(tmp_path):
    """A path not ending in .hlo (a pathlib.Path even) was parsed as HLO text: 'expected
    '{' to open the body of computation module.txt'. run_devices, reference and
    assert_conforms read a module as xladist.run does."""
    path = tmp_path / "gather.txt"
    path.write_text(GATHER)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for given in (path, str(path)):
        want = reference(given, [x], n=2)
        assert [w[0].tolist() for w in want] == [x.reshape(-1).tolist()] * 2
    from xladist.errors import InputError
    with pytest.raises(InputError, match="does not exist"):
        reference(tmp_path / "absent.txt", [x], n=2)


@pytest.mark.parametrize("tolerance,dtype,expected", [
    (None, np.float32, None), (True, np.float32, (1e-5, 1e-6)), (True, np.int32, None),
    ({"f16": (0.1, 0)}, np.float16, (0.1, 0)), ({"f16": (0.1, 0)}, np.float32, None),
    ((1e-3, 0), np.float64, (1e-3, 0))])
def test_tolerances_by_element_type(tolerance, dtype, expected):
    assert _tolerance(tolerance, np.dtype(dtype)) == expected


@pytest.fixture
def broken_backends(monkeypatch):
    monkeypatch.syspath_prepend(str(BROKEN))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(BROKEN)]))
    yield
    for name in ("broken-nan", "broken-ftz", "broken-no-a2a", "broken-crash"):
        backends.BACKENDS.pop(name, None)
    sys.modules.pop("xladist_broken_backend", None)


@pytest.mark.slow
def test_assert_conforms_passes_and_names_the_device_and_element(broken_backends):
    x = np.stack([NAN, NAN + 1])
    got = assert_conforms(GATHER, [x], n=2, backend="interpreter")
    assert got[1][0].view(np.uint32)[0] == 0x7FC00005
    with pytest.raises(AssertionError, match=r"broken-nan on 2 devices \(gather\) differs from "
                       r"the reference: device 0, result 0: element \[0\]: got nan "
                       r"\(0x7fc00000\), expected nan \(0x7fc00005\)"):
        assert_conforms(GATHER, [x], n=2, backend="broken-nan")


@pytest.mark.slow
def test_the_plugin_gives_fixtures_and_a_backend_option(tmp_path):
    (tmp_path / "test_mine.py").write_text(
        "def test_fixtures(xladist_backend, xladist_devices, xladist_run, xladist_reference):\n"
        "    import numpy as np\n"
        f"    module = '''{GATHER}'''\n"
        "    x = np.arange(6, dtype=np.float32).reshape(2, 3)\n"
        "    got = xladist_run(module, [x])\n"
        "    want = xladist_reference(module, [x])\n"
        "    assert xladist_backend == 'interpreter' and xladist_devices == 2\n"
        "    assert [g[0].tolist() for g in got] == [w[0].tolist() for w in want]\n"
        "\n"
        "def test_again(xladist_run):\n"
        "    import numpy as np\n"
        f"    module = '''{GATHER}'''\n"
        "    got = xladist_run(module, [np.ones((2, 3), np.float32)])\n"
        "    assert got[1][0].tolist() == [1.0] * 6\n"
        "\n"
        "def test_both_ran_on_one_kept_cluster():\n"
        "    from xladist.testing.clusters import shared\n"
        "    assert shared().started == 1 and shared().live[2].usable\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly",
                           "-p", "xladist.testing.plugin", "--xladist-backend", "interpreter",
                           str(tmp_path / "test_mine.py")], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout



@pytest.mark.slow
def test_fresh_jobs_option_starts_a_job_per_run_for_fixtures_and_direct_calls(tmp_path):
    (tmp_path / "test_fresh.py").write_text(
        "import numpy as np\n"
        "from xladist.testing import assert_conforms\n"
        "from xladist.testing.clusters import shared\n"
        "\n"
        "def test_runs(xladist_run):\n"
        f"    module = '''{GATHER}'''\n"
        "    x = np.ones((2, 3), np.float32)\n"
        "    assert xladist_run(module, [x])[1][0].tolist() == [1.0] * 6\n"
        "    assert_conforms(module, [x], n=2, backend='interpreter')\n"
        "    assert shared().started == 0\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "xladist.testing.plugin", "--xladist-fresh-jobs",
                           "--xladist-backend", "interpreter", str(tmp_path / "test_fresh.py")],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout

@pytest.mark.slow
def test_the_documented_example_runs_on_kept_ranks_without_with_mpi(tmp_path):
    """docs/conformance.md's example is marked `mpi(min_size=2)`; run by plain pytest (no
    --with-mpi) pytest-mpi skipped it ('need --with-mpi option to run'), so a user's suite
    passed having checked nothing. It runs on kept ranks now, min_size of them; an
    `mpi`-marked test without xladist fixtures is still pytest-mpi's to skip."""
    example = (ROOT / "tests" / "mpi" / "test_plugin_example.py").read_text()
    (tmp_path / "test_example.py").write_text(
        example + "\n\n@pytest.mark.mpi(min_size=4)\n"
                  "def test_four(xladist_devices, xladist_run):\n"
                  "    x = np.ones((xladist_devices, 8), np.float32)\n"
                  "    assert xladist_devices == 4 and xladist_run(MODULE, [x])[3][0][0] == 4\n"
                  "\n\n@pytest.mark.mpi(min_size=2)\n"
                  "def test_plain_mpi():\n"
                  "    from mpi4py import MPI\n"
                  "    assert MPI.COMM_WORLD.Get_size() == 2\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "-p", "xladist.testing.plugin", "--xladist-backend", "interpreter",
                           str(tmp_path / "test_example.py")], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed, 1 skipped" in proc.stdout, proc.stdout
    assert proc.stdout.count("need --with-mpi option to run") == 1  # test_plain_mpi


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_hang_inside_an_mpi_job_is_reported_not_swallowed_by_pytest(tmp_path):
    """`mpiexec -n 2 python -m pytest --with-mpi`: a hang aborts the job in the middle of a
    test, and pytest, capturing the test's output, never showed the hang report: the run
    ended with exit 1 and not a word about why. The plugin now stops capturing first."""
    from xladist.collectives.mpiexec import find_mpiexec
    loop = ROOT / "tests" / "data" / "deadlock" / "data_dependent_loop.hlo"
    (tmp_path / "test_hang.py").write_text(
        "import numpy as np\n"
        "def test_hangs(xladist_run):\n"
        "    x = np.arange(8, dtype=np.float32).reshape(2, 4)\n"
        f"    xladist_run({str(loop)!r}, [x, np.array([1, 2], np.int32)])\n")
    proc = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-m", "pytest", "-q",
                           "-p", "no:cacheprovider", "-p", "xladist.testing.plugin",
                           "--with-mpi", "--xladist-backend", "interpreter",
                           "--xladist-timeout", "3", str(tmp_path / "test_hang.py")],
                          cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode != 0
    assert "rank 1 waits there; rank 0 never arrived" in proc.stdout + proc.stderr, \
        proc.stdout + proc.stderr


@pytest.mark.parametrize("value", ["-1", "nan", "1e12"])
def test_a_bad_xladist_timeout_is_a_usage_error_naming_the_option(tmp_path, value):
    """Before: every test that ran something failed with 'timeout must be a number of
    seconds >= 0 ...', naming a keyword the user never wrote, and the others passed."""
    (tmp_path / "test_t.py").write_text("def test_t(xladist_run):\n    pass\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "xladist.testing.plugin", f"--xladist-timeout={value}",
                           str(tmp_path / "test_t.py")], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error
    assert "ERROR: --xladist-timeout must be" in proc.stderr, proc.stderr


def test_the_documented_example_is_the_one_that_runs():
    doc = (ROOT / "docs" / "conformance.md").read_text()
    example = (ROOT / "tests" / "mpi" / "test_plugin_example.py").read_text()
    assert f"```python\n{example}```" in doc
    assert len(example.strip().splitlines()) <= 12


# ---- from a plain process: ranks kept for the process (xladist/testing/clusters.py) ----

@pytest.mark.slow
@pytest.mark.timeout(300)
def test_runs_from_a_plain_process_share_one_kept_cluster(monkeypatch):
    """Two runs on 2 ranks start one cluster, not two jobs, and give the reference's bits;
    a run in another environment gets ranks started in it (as a fresh job would), and
    persistent=False a job of its own."""
    from xladist.testing import clusters
    from xladist.runtime import api
    monkeypatch.setattr(clusters, "_shared", [])
    jobs = []
    real_run = api.run
    monkeypatch.setattr(api, "run", lambda *a, **k: jobs.append(1) or real_run(*a, **k))
    try:
        x = np.stack([NAN, NAN + 1])
        assert_conforms(GATHER, [x], n=2, backend="interpreter")
        got = assert_conforms(GATHER, [x * 2], n=2, backend="cpu")
        np.testing.assert_array_equal(got[1][0], np.concatenate([x[0] * 2, x[1] * 2]))
        kept = clusters.shared()
        assert kept.started == 1 and jobs == []
        first = kept.live[2]
        # What xladist sets for a moment (a background compile's job target) is no change.
        from xladist.compiler.target import JOB_TARGET_ENV, job_target_text
        monkeypatch.setenv(JOB_TARGET_ENV, job_target_text("znver4", "+avx2", 512))
        assert_conforms(GATHER, [x], n=2, backend="interpreter")
        monkeypatch.delenv(JOB_TARGET_ENV)
        assert kept.started == 1 and kept.live[2] is first
        monkeypatch.setenv("XLADIST_TESTING_PROBE", "1")
        assert_conforms(GATHER, [x], n=2, backend="interpreter")
        assert kept.started == 2 and kept.live[2] is not first and not first.usable
        assert_conforms(GATHER, [x], n=2, backend="interpreter", persistent=False)
        assert kept.started == 2 and jobs == [1]
    finally:
        clusters.close_shared()
    assert not clusters.shared().live


OUTFEED = """HloModule of, replica_count=2
ENTRY e {
  x = f32[3] parameter(0)
  t = token[] after-all()
  two = f32[] constant(2)
  b = f32[3] broadcast(two), dimensions={}
  y = f32[3] multiply(x, b)
  o = token[] outfeed(y, t), outfeed_shape=f32[3]{0}
  ROOT r = f32[3] add(x, x)
}"""


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("persistent", [True, False])
def test_outfeeds_are_compared_from_a_plain_process_too(persistent):
    """outfeed=True used to need an MPI job ("outfeed=True needs an MPI job of n ranks");
    from a plain process the outfeed callbacks run here, for every rank, on kept ranks or in
    a job of its own, and assert_conforms compares every rank's items with the reference's."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = assert_conforms(OUTFEED, [x], n=2, backend="interpreter", outfeed=True,
                          persistent=persistent)
    for r in range(2):
        assert len(got.outfeeds[r]) == 1
        np.testing.assert_array_equal(got.outfeeds[r][0], x[r] * 2)


@pytest.mark.parametrize("tolerance", ["abc", (1e-5,), {"f32": 3}, (-1, 0), ("a", "b")])
def test_a_bad_tolerance_is_refused_before_anything_runs(tolerance, monkeypatch):
    # Before: "abc" ran the module on the devices, then failed with ValueError: too many
    # values to unpack (expected 2) from numpy's comparison.
    import xladist.testing as testing
    from xladist.errors import InputError

    def ran(*args, **kwargs):
        raise AssertionError("the module ran")
    monkeypatch.setattr(testing, "run_devices", ran)
    with pytest.raises(InputError, match="tolerance must be True, an \\(rtol, atol\\) pair"):
        assert_conforms("HloModule m\nENTRY e {\n  ROOT c = f32[] constant(1)\n}\n",
                        tolerance=tolerance)
