"""The pytest plugin of xladist (entry point `pytest11`, loaded by any pytest run in an
environment where xladist is installed): fixtures for conformance tests of your own.

pytest-mpi's conventions: run the tests inside an MPI job with
`mpiexec -n N python -m pytest --with-mpi`, mark them `@pytest.mark.mpi(min_size=N)`.
Inside the job every fixture runs on the job's N ranks; without --with-mpi, runs go to ranks
kept for the session -- an `mpi`-marked test that takes an xladist fixture runs there, where
pytest-mpi alone would skip it for want of --with-mpi (xladist/testing/clusters.py: one
cluster per rank count, every run loading and releasing its own module, its feeds served
for that run; every run of a session with --xladist-fresh-jobs -- the fixtures' and
xladist.testing's own -- starts a job of its own). The same test works both ways.

Options: --xladist-backend NAME (default cpu, or $XLADIST_BACKEND), --xladist-timeout S,
--xladist-fresh-jobs.
Fixtures:
  xladist_backend   the backend name the tests check
  xladist_devices   N: the MPI world size inside a job, else the `mpi` mark's min_size, else 2
  xladist_run       run(module, inputs, n=None, backend=None, **options) -> every device's
                    outputs (xladist.testing.run_devices)
  xladist_reference reference(module, inputs, n=None, **options) -> what they should be
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("xladist", "xladist conformance")
    group.addoption("--xladist-backend", default=None, metavar="NAME",
                    help="backend the xladist fixtures run (default: $XLADIST_BACKEND or cpu)")
    group.addoption("--xladist-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="a wait for another rank longer than this fails the run (default 60)")
    group.addoption("--xladist-fresh-jobs", action="store_true", default=False,
                    help="without --with-mpi, start a job for every run instead of keeping "
                         "ranks for the session")


def _backend(config) -> str:
    return config.getoption("--xladist-backend") or os.environ.get("XLADIST_BACKEND") or "cpu"


FIXTURES = ("xladist_backend", "xladist_devices", "xladist_run", "xladist_reference")
_NEEDS_WITH_MPI = "need --with-mpi option to run"  # pytest-mpi's skip outside a job


def pytest_configure(config):
    from xladist.environment import check_seconds
    from xladist.errors import InputError
    from xladist.testing import clusters
    try:  # the rule every run's timeout meets, said once, naming the option
        check_seconds(config.getoption("--xladist-timeout"), "--xladist-timeout",
                      " (0: no deadline)")
    except InputError as e:
        raise pytest.UsageError(str(e)) from None
    clusters.KEEP = not config.getoption("--xladist-fresh-jobs")
    # The mark the fixtures read (xladist_devices), also when pytest-mpi is not installed.
    config.addinivalue_line("markers", "mpi(min_size=N): a test on N MPI ranks (pytest-mpi's "
                                       "mark; xladist_devices is N outside a job)")
    from xladist.runtime.launcher import under_mpi
    if under_mpi():
        from xladist.collectives import deadline
        deadline.on_abort(lambda: _uncapture(config))


def _uncapture(config) -> None:
    """Inside an MPI job a hang or a failed rank aborts the job -- this pytest process too --
    in the middle of a test, whose captured output (the hang report, the rank's error) pytest
    would never show: the job ended with no word. Before the abort, stop capturing and
    write what was captured where the user sees it."""
    from xladist.collectives import deadline
    if not deadline._aborting:
        # The hooks also run on an error this process may survive (a test's pytest.raises)
        # and when the job's service asks for a save before it aborts: keep waiting for the
        # abort itself (abort_job runs the hooks again), capture untouched.
        deadline.on_abort(lambda: _uncapture(config))
        return
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        return
    import sys
    try:
        capman.suspend_global_capture(in_=True)
        out, err = capman.read_global_capture()
    except Exception:  # noqa: BLE001 - an abort goes on whatever pytest's state
        return
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    sys.stderr.flush()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Without --with-mpi pytest-mpi skips every `mpi`-marked test; one that takes an xladist
    fixture runs on kept ranks instead (its min_size of them), as this module says."""
    if config.getoption("--with-mpi", default=False) or \
            config.getoption("--only-mpi", default=False):
        return
    for item in items:
        if item.get_closest_marker("mpi") is None or \
                not set(FIXTURES) & set(getattr(item, "fixturenames", ())):
            continue
        item.own_markers[:] = [m for m in item.own_markers
                               if not (m.name == "skip" and
                                       m.kwargs.get("reason") == _NEEDS_WITH_MPI)]


def pytest_unconfigure(config):
    from xladist.testing.clusters import close_shared
    close_shared()  # the session's kept ranks end with it


def pytest_report_header(config):
    return f"xladist: backend {_backend(config)}"


@pytest.fixture
def xladist_backend(request) -> str:
    return _backend(request.config)


@pytest.fixture
def xladist_devices(request) -> int:
    from xladist.runtime.launcher import mpi_world_size, under_mpi
    if under_mpi() and request.config.getoption("--with-mpi", default=False):
        return mpi_world_size() or 1
    mark = request.node.get_closest_marker("mpi")
    if mark is not None and mark.kwargs.get("min_size"):
        return int(mark.kwargs["min_size"])
    return 2


@pytest.fixture
def xladist_run(request, xladist_backend, xladist_devices):
    from xladist.testing import run_devices
    timeout = request.config.getoption("--xladist-timeout")

    def run(module, inputs=None, n=None, backend=None, **options):
        options.setdefault("timeout", timeout)
        return run_devices(module, inputs, n or xladist_devices, backend or xladist_backend,
                           **options)
    return run


@pytest.fixture
def xladist_reference(request, xladist_devices):
    from xladist.testing import reference
    timeout = request.config.getoption("--xladist-timeout")

    def ref(module, inputs=None, n=None, **options):
        options.setdefault("timeout", timeout)
        return reference(module, inputs, n or xladist_devices, **options)
    return ref
