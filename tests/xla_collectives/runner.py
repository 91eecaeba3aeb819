"""Runs XLA's transcribed collective tests (xladist.conformance.xla_cases) inside one MPI job.

    mpiexec -n K python tests/xla_collectives/runner.py JOB.json

JOB.json: {"cases": [name, ...], "backend": "cpu" | "interpreter", "timeout": seconds,
"results": path}. Every case has K devices. Each one goes through `xladist.run` as a user's
script under mpiexec would call it (parse, verify, the deadlock check, compile, run on this
rank, outputs exchanged); rank 0 compares every device's outputs with the case's expected
values and appends one JSON line per case to `results`: first {"name", "status":
"started"}, then {"name", "status": "pass" | "fail" | "error", "detail"}. A case that
kills the job (a rank aborting it) leaves only its "started" line; the pytest side
(test_xla_cases.py) records that and starts a new job for the cases after it.

Errors every rank raises alike (a parse, verifier or deadlock-check refusal) are caught and
recorded, and the job goes on with the next case.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def cases_by_name() -> dict:
    from xladist.conformance.xla_cases import CASES
    return {c.name: c for c in CASES}


def to_numpy(a) -> np.ndarray:
    """A case's Array as a numpy array of its HLO element type (values written out and
    repeated to fill the dims, or made by the Array's function)."""
    from xladist.hlo.shape import primitive_type
    dtype = primitive_type(a.type).dtype
    if a.make is not None:
        out = np.asarray(a.make())
        return out.astype(dtype) if out.dtype != dtype else out
    count = int(np.prod(a.dims, dtype=np.int64))
    values = [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
              and dtype.kind not in "iub" and not np.issubdtype(type(v), np.complexfloating)
              and not isinstance(v, complex) else v for v in a.values]
    flat = np.array(values, dtype=dtype) if values else np.zeros(0, dtype)
    if flat.size != count:
        flat = np.resize(flat, count)
    return flat.reshape(a.dims)


def compare(case, outputs) -> str | None:
    """None when every checked device's outputs match; else what differs."""
    for d, want in enumerate(case.expected):
        if want is None:
            continue
        got = outputs[d]
        if len(got) != len(want):
            return f"device {d}: {len(got)} outputs, expected {len(want)}"
        for i, w in enumerate(want):
            if w is None:
                continue
            problem = _differs(to_numpy(w), np.asarray(got[i]), case.tolerance)
            if problem:
                return f"device {d} output {i}: {problem}"
    return None


def _differs(want: np.ndarray, got: np.ndarray, tolerance) -> str | None:
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if tolerance is not None and want.dtype.kind in "fcV":
        rtol, atol = tolerance
        ok = np.allclose(got.astype(np.complex128 if want.dtype.kind == "c" else np.float64),
                         want.astype(np.complex128 if want.dtype.kind == "c" else np.float64),
                         rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = np.array_equal(got, want, equal_nan=want.dtype.kind in "fc")
    if ok:
        return None
    return f"got {got.tolist()}, expected {want.tolist()}"


def run_case(case, backend: str, timeout: float):
    """Run one case on this rank (inside the MPI job); returns every device's outputs and
    outfeed items (all ranks get them)."""
    import xladist
    from mpi4py import MPI

    from xladist.runtime.config import override_device_counts
    module = xladist.parse_hlo(case.module)
    # XLA's tests give the counts in the run configuration. The default reading of a
    # module without counts (n replicas) is what most of them use and is what this suite
    # checks; other configurations are passed like `xladist run --num-partitions`.
    if (case.replica_count or case.n, case.num_partitions or 1) != (case.n, 1):
        override_device_counts(module, case.replica_count, case.num_partitions)
    inputs = [[to_numpy(a) for a in row] for row in case.inputs] if case.inputs else \
        [[] for _ in range(case.n)]
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    options = {}
    if case.infeed:
        options["infeed"] = [iter([tuple(to_numpy(a) for a in item) if isinstance(item, tuple)
                                   else to_numpy(item) for item in items])
                             for items in case.infeed]
    mine: list = []
    if case.outfeed:
        options["outfeed"] = lambda r, replica, partition, item: mine.append(item)
    outputs = xladist.run(module, inputs, n=case.n, backend=backend, timeout=timeout, **options)
    fed = comm.allgather(mine) if case.outfeed else None
    del rank
    return outputs, fed


def compare_outfeed(case, fed) -> str | None:
    for d, want in enumerate(case.outfeed):
        if want is None:
            continue
        got = fed[d]
        if len(got) != len(want):
            return f"device {d}: {len(got)} outfeed items, expected {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            gs = g if isinstance(g, (tuple, list)) else (g,)
            ws = w if isinstance(w, tuple) else (w,)
            for g1, w1 in zip(gs, ws):
                problem = _differs(to_numpy(w1), np.asarray(g1), case.tolerance)
                if problem:
                    return f"device {d} outfeed item {k}: {problem}"
    return None


def main(job_path: str) -> int:
    from mpi4py import MPI
    job = json.loads(Path(job_path).read_text())
    rank = MPI.COMM_WORLD.Get_rank()
    table = cases_by_name()
    out = open(job["results"], "a") if rank == 0 else None

    def record(**fields):
        if out is not None:
            out.write(json.dumps(fields) + "\n")
            out.flush()

    for name in job["cases"]:
        case = table[name]
        record(name=name, status="started")
        try:
            outputs, fed = run_case(case, job["backend"], job["timeout"])
        except Exception as e:  # noqa: BLE001 - every rank raised it alike: record, go on
            message = f"{type(e).__name__}: {e}"
            if case.refused is not None and case.refused in str(e):
                record(name=name, status="pass", detail=f"refused as documented: {message}")
            else:
                record(name=name, status="error", detail=message)
            continue
        if case.refused is not None:
            record(name=name, status="fail",
                   detail=f"ran, but xladist documents refusing it ({case.refused!r})")
            continue
        problem = compare(case, outputs) or (compare_outfeed(case, fed) if case.outfeed
                                              else None)
        record(name=name, status="fail" if problem else "pass", detail=problem or "")
    if out is not None:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
