"""Conformance tests of your own: run a module on N ranks with any backend and compare every
device's outputs with the reference (docs/conformance.md).

    from xladist.testing import assert_conforms
    assert_conforms(module, inputs, n=4, backend="mine")

`run_devices` runs a module on n MPI ranks (inside an MPI job -- `mpiexec -n N python -m
pytest --with-mpi` -- on this job's ranks; from a plain process, on n ranks kept for the
process, clusters.py) and returns every device's outputs. `reference` gives what every
device should return: the module run for all devices by the interpreter in one process,
collectives evaluated from all members' values under
docs/reference/collective-semantics.md (xladist/conformance/reference.py).
`assert_conforms` compares the two bit for bit (NaN payloads and the sign of zero included),
or within a tolerance per element type when asked, and its AssertionError names the device,
the result and the first differing element. The pytest plugin (xladist/testing/plugin.py,
registered under the `pytest11` entry point) adds fixtures around them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_TOLERANCES", "Outputs", "assert_conforms", "reference", "run_devices"]

# (rtol, atol) per element type for `tolerance=True`: a few units in the last place of the
# type, for reductions whose order differs from the reference's left fold.
DEFAULT_TOLERANCES = {
    "f16": (2e-3, 1e-3), "bf16": (1.6e-2, 1e-2), "f32": (1e-5, 1e-6), "f64": (1e-12, 1e-14),
    "c64": (1e-5, 1e-6), "c128": (1e-12, 1e-14),
    "f8e4m3fn": (0.125, 0.02), "f8e4m3": (0.125, 0.02), "f8e4m3fnuz": (0.125, 0.02),
    "f8e4m3b11fnuz": (0.125, 0.02), "f8e5m2": (0.25, 0.05), "f8e5m2fnuz": (0.25, 0.05),
    "f8e3m4": (0.0625, 0.02), "f8e8m0fnu": (1.0, 0.0), "f4e2m1fn": (0.5, 0.5),
}


class Outputs(list):
    """Every device's flattened results, `outputs[d][i]`, and its outfeed items
    (`outputs.outfeeds[d]`, None when not collected)."""

    outfeeds: list | None = None


def _module(module):
    """A Module, HLO text, a path to either (str or PathLike, any suffix), an Executable:
    what xladist.run takes, read by its one rule (runtime/api.py)."""
    from xladist.runtime.api import _as_module
    return _as_module(module)


def _under_mpi() -> bool:
    from xladist.runtime.launcher import under_mpi
    return under_mpi()


def run_devices(module, inputs=None, n: int = 2, backend: str = "cpu", *,
                device_assignment=None, infeed=None, outfeed: bool = False,
                timeout: float = 60.0, persistent: bool | None = None) -> Outputs:
    """Run `module` on n devices with `backend` (module doc); `inputs` as xladist.run takes
    them: one array per parameter with a leading device axis, or a list over devices of
    argument lists. `infeed`: a list over devices of item lists; `outfeed=True` collects every
    rank's outfeed items (`outputs.outfeeds[rank]`, in program order).

    From a plain process a run goes to this process's kept n-rank cluster
    (xladist/testing/clusters.py: started by the first such run, every run loading and
    releasing its own module, its infeed served for that run), not to a new job: the same
    results, without an mpiexec start per run. `persistent=False`: a job of its own; None:
    clusters.KEEP (False in a pytest session run with --xladist-fresh-jobs)."""
    from xladist.runtime.api import run
    from . import clusters
    module = _module(module)
    if persistent is None:
        persistent = clusters.KEEP
    options: dict = {}
    if infeed is not None:
        options["infeed"] = [list(items) for items in infeed]
    by_rank: dict[int, list] = {}  # (inside an MPI job: this rank's own only)
    if outfeed:
        options["outfeed"] = lambda rank, replica, partition, item: \
            by_rank.setdefault(rank, []).append(item)
    under_mpi = _under_mpi()
    if persistent and not under_mpi:
        result = Outputs(clusters.shared().run(module, inputs, n=n, backend=backend,
                                               timeout=timeout,
                                               device_assignment=device_assignment,
                                               **options))
    else:
        result = Outputs(run(module, inputs, n=n, backend=backend, timeout=timeout,
                             device_assignment=device_assignment, **options))
    if outfeed and under_mpi:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        result.outfeeds = comm.allgather(by_rank.get(comm.Get_rank(), []))
    elif outfeed:  # the callbacks ran here, in this process, for every rank
        result.outfeeds = [by_rank.get(r, []) for r in range(n)]
    return result


def reference(module, inputs=None, n: int = 2, *, device_assignment=None, infeed=None,
              timeout: float = 60.0) -> Outputs:
    """What every device of `module` should return (module doc). Inside an MPI job rank 0
    computes it and every rank receives it."""
    from xladist.conformance.reference import reference_run
    from xladist.runtime.api import per_device_inputs
    module = _module(module)

    def compute():
        outs, fed = reference_run(module, per_device_inputs(module, inputs, n), n,
                                  device_assignment=device_assignment, infeed=infeed,
                                  timeout=timeout)
        result = Outputs(outs)
        result.outfeeds = fed
        return result
    if not _under_mpi():
        return compute()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    value = None
    if comm.Get_rank() == 0:
        try:
            value = compute()
        except Exception as e:  # noqa: BLE001 - every rank raises it
            value = e
    value = comm.bcast(value, root=0)
    if isinstance(value, Exception):
        raise value
    return value


def _check_tolerance(tolerance) -> None:
    """InputError, before anything runs, for a `tolerance` assert_conforms does not take."""
    from xladist.errors import InputError

    def pair(value) -> bool:
        try:
            rtol, atol = value
            return float(rtol) >= 0 and float(atol) >= 0
        except (TypeError, ValueError):
            return False
    if tolerance is None or isinstance(tolerance, bool):
        return
    pairs = tolerance.values() if isinstance(tolerance, dict) else [tolerance]
    if isinstance(tolerance, str) or not all(pair(p) for p in pairs):
        raise InputError(f"tolerance must be True, an (rtol, atol) pair of numbers >= 0 or a "
                         f"dict {{element type: (rtol, atol)}}, got {tolerance!r}")


def _tolerance(tolerance, dtype):
    if tolerance is None or tolerance is False:
        return None
    from xladist.hlo.shape import primitive_type_of_dtype
    name = primitive_type_of_dtype(dtype).name
    if tolerance is True:
        return DEFAULT_TOLERANCES.get(name)
    if isinstance(tolerance, dict):
        return tolerance.get(name)
    return tuple(tolerance)


def assert_conforms(module, inputs=None, *, n: int = 2, backend: str = "cpu",
                    tolerance=None, device_assignment=None, infeed=None,
                    outfeed: bool = False, timeout: float = 60.0,
                    persistent: bool | None = None) -> Outputs:
    """Run `module` on n devices with `backend` and assert that every device's outputs are
    the reference's: bit for bit by default; `tolerance=True` allows DEFAULT_TOLERANCES per
    element type (integers stay exact), a dict {element type: (rtol, atol)} chooses them, an
    (rtol, atol) pair applies to every floating type. `persistent`: as run_devices.
    Returns the backend's outputs."""
    from xladist.conformance.checks import first_difference
    _check_tolerance(tolerance)
    module = _module(module)
    got = run_devices(module, inputs, n, backend, device_assignment=device_assignment,
                      infeed=infeed, outfeed=outfeed, timeout=timeout, persistent=persistent)
    want = reference(module, inputs, n, device_assignment=device_assignment,
                     infeed=[list(x) for x in infeed] if infeed is not None else None,
                     timeout=timeout)
    where = f"{backend} on {n} devices ({module.name})"
    for d in range(n):
        if len(got[d]) != len(want[d]):
            raise AssertionError(f"{where}: device {d} returned {len(got[d])} results, "
                                 f"the reference {len(want[d])}")
        for i, (g, w) in enumerate(zip(got[d], want[d])):
            g, w = np.asarray(g), np.asarray(w)
            why = first_difference(g, w, tolerance=_tolerance(tolerance, w.dtype))
            if why:
                raise AssertionError(f"{where} differs from the reference: device {d}, "
                                     f"result {i}: {why}")
    if outfeed:
        from xladist.conformance.suite import flat_items
        for d in range(n):
            g, w = flat_items(got.outfeeds[d]), flat_items(want.outfeeds[d])
            if len(g) != len(w):
                raise AssertionError(f"{where}: device {d} outfed {len(g)} values, the "
                                     f"reference {len(w)}")
            for k, (a, b) in enumerate(zip(g, w)):
                why = first_difference(a, b, tolerance=_tolerance(tolerance, b.dtype))
                if why:
                    raise AssertionError(f"{where} differs from the reference: device {d}, "
                                         f"outfeed value {k}: {why}")
    return got
