"""The conformance kit's suite through the real runtime, inside an MPI job.

Run as `mpiexec -n N python -m pytest --with-mpi tests/mpi/test_conformance.py` (N = 2 or 4;
tests/test_mpi_suites.py does both). Every unit of `xladist conformance`'s default plan for
this world size (xladist/conformance/suite.py: every collective, channel and feed, every group
mode, replica groups empty / explicit / iota / subgroups / ragged / non-covering, XLA's default
and a reversed device assignment, sync and async forms, ten element types, scalar / zero-size /
{0,1} layout / tuple / edge-value shapes, every reducer) runs with both backends through the
kit's own rank side (rank_main.run_job: `xladist.run` under MPI), and rank 0 judges every
device's result against the kit's reference (every device run by the interpreter in one
process, xladist/conformance/reference.py). tests/conformance/ checks that reference against
the semantics document's closures and against XLA:CPU's recorded outputs.

The two tests below check what the kit does not: order-dependent sums, and that runs give
their communicators back.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from xladist.conformance.emit import Emitter, variants
from xladist.conformance.groups import FID
from xladist.conformance.program import Program
from xladist.conformance.rank_main import run_job
from xladist.conformance.suite import SEED, Plan, units

pytestmark = pytest.mark.mpi

WORLD = MPI.COMM_WORLD.Get_size()
COLLECTIVE_TIMEOUT_S = 60.0
UNITS = units(WORLD, Plan(xla=False))
BACKENDS = ("interpreter", "cpu")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index", range(len(UNITS)), ids=[u.key for u in UNITS])
def test_suite_unit(index, backend):
    unit = UNITS[index]
    outputs, fed = run_job(unit, backend, COLLECTIVE_TIMEOUT_S)
    comm = MPI.COMM_WORLD
    verdicts = unit.judge(outputs, fed) if comm.Get_rank() == 0 else None
    verdicts = comm.bcast(verdicts, root=0)
    bad = [v for v in verdicts if v.status != "pass"]
    assert not bad, (f"{len(bad)} of {len(verdicts)} cases of {unit.key} failed:\n"
                     + "\n".join(f"{v.case}: {v.detail}" for v in bad[:15]))
    assert verdicts and len(verdicts) == len(unit.cases)


def test_the_plan_covers_this_world():
    """Not vacuous: every operation, more than one configuration, groups of several."""
    ops = {u.op for u in UNITS}
    assert len(ops) == 10 and len({(u.R, u.P) for u in UNITS}) >= 2
    assert sum(len(u.cases) for u in UNITS) > 2000
    assert any(u.da_label == "reversed" for u in UNITS)


# Tolerances of an inexact sum of WORLD normal samples against the float64 sum.
INEXACT_TOL = {"f16": 2e-2, "bf16": 1e-1, "f32": 1e-5, "f64": 1e-12, "c64": 1e-5}


def test_inexact_sums_bit_identical_across_members():
    """Sums whose value depends on the addition order (normal samples, a long vector) must
    still be bit-identical on every member of a group (ARCHITECTURE rule 4), in every
    flattened-id group variant, sync and async, and close to the float64 sum."""
    prog = Program(f"conformance_inexact_r1p{WORLD}", 1, WORLD, SEED)
    em = Emitter(prog, "all-reduce")
    for v in variants("all-reduce", 1, WORLD):
        if v.mode == FID:
            for dt in INEXACT_TOL:
                for sync in (True, False):
                    em.emit(v, dt, "long", "add", sync, values="inexact")
    em.flush()
    outs = xladist.run(prog.text(), prog.per_device_inputs(), n=WORLD,
                       timeout=COLLECTIVE_TIMEOUT_S)
    problems = []
    for c in prog.checks:
        dt = c.column
        for group in c.shared_by:
            got = [outs[d][c.first_leaf] for d in group]
            if len({g.tobytes() for g in got}) > 1:
                problems.append(f"{c.name}: devices {group} differ in bits")
            # The reference in complex128: only the operands matter, not the order.
            want = sum(np.asarray(prog.operand(d, c.params[0]), np.complex128) for d in group)
            scale = np.abs(want).max()
            err = np.abs(got[0].astype(np.complex128) - want).max() / scale
            if not err <= INEXACT_TOL[dt]:
                problems.append(f"{c.name}: relative error {err:.3g} > {INEXACT_TOL[dt]}")
    assert not problems, "\n".join(problems[:15])
    assert len(prog.checks) >= 10


@pytest.fixture
def caches(monkeypatch) -> list:
    """Every CommunicatorCache that prepares communicators in this test."""
    from xladist.collectives import CommunicatorCache

    made = []
    prepare = CommunicatorCache.prepare

    def recording(self, groupings):
        made.append(self)
        return prepare(self, groupings)

    monkeypatch.setattr(CommunicatorCache, "prepare", recording)
    return made


def test_runs_release_their_communicators(caches):
    """Each run's communicators are freed at its end: MPICH has ~2,000 context ids per
    process, so a process that calls xladist.run in a loop would otherwise run out."""
    unit = next(u for u in UNITS if u.op == "all-reduce" and u.P == WORLD)
    job = unit.job()
    for _ in range(2):
        xladist.run(job.text, job.inputs, n=WORLD, timeout=COLLECTIVE_TIMEOUT_S)
    assert len(caches) == 2 and caches[0] is not caches[1]
    for cache in caches:
        assert len(cache) == 0
        assert cache.world.comm == MPI.COMM_NULL


def test_a_run_the_backend_refuses_releases_its_communicators_too(monkeypatch, caches):
    """The kit goes on after a backend refuses a program (an UnsupportedError at compile,
    after the communicators were made): before the fix each refusal kept them."""
    from xladist import backends
    from xladist.errors import UnsupportedError

    def refuse(module, **options):
        raise UnsupportedError("this backend runs nothing")
    monkeypatch.setitem(backends.BACKENDS, "refuses", refuse)
    unit = next(u for u in UNITS if u.op == "all-reduce" and u.P == WORLD)
    job = unit.job()
    with pytest.raises(UnsupportedError, match="runs nothing"):
        xladist.run(job.text, job.inputs, n=WORLD, timeout=COLLECTIVE_TIMEOUT_S,
                    backend="refuses")
    assert len(caches) == 1 and len(caches[0]) == 0
    assert caches[0].world.comm == MPI.COMM_NULL
