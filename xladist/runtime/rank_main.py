"""Entry point of each rank started by `xladist.run` from a plain Python process.

    mpiexec -n N python -m xladist.runtime.rank_main JOB_DIR

JOB_DIR holds module.hlo and job.pkl ({"inputs": per-device argument lists,
"options": run options}); rank 0 writes outputs.pkl (a list over devices of output
lists). A failing rank reports and aborts the job (xladist.runtime.rank.report_and_abort).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    job = Path(argv[0])
    from .rank import execute_on_this_rank, report_and_abort, world
    rank = world().Get_rank()
    try:
        from xladist.hlo.parser import parse_file
        module = parse_file(job / "module.hlo")
        with open(job / "job.pkl", "rb") as f:
            spec = pickle.load(f)
        result = execute_on_this_rank(module, spec["inputs"], gather_to=0, **spec["options"])
    except BaseException as e:  # noqa: BLE001 - every failure must take the job down
        report_and_abort(e, rank, prefix="xladist.run")
        return 1
    if rank == 0:
        tmp = job / "outputs.pkl.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(result.all_outputs, f)
        tmp.rename(job / "outputs.pkl")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
