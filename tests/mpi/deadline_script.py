"""Run under mpiexec by test_deadline.py: misbehaving ranks that must not hang the job.

    python -m tests.mpi.deadline_script hang     # rank 1 never joins an all-reduce
    python -m tests.mpi.deadline_script raise    # rank 1 raises while rank 0 waits
    python -m tests.mpi.deadline_script hang-ordered   # as hang, in the native ordered
                                                       # reduce-scatter + all-gather
"""

import sys
import time

import numpy as np

from xladist.collectives import all_reduce, deadline
from xladist.collectives import CommunicatorCache


def main(mode: str) -> None:
    with deadline.abort_on_exception():
        cache = CommunicatorCache()
        n = cache.world.size
        cache.prepare([[list(range(n))]])
        comm = cache.get(list(range(n)))
        if comm.rank == 1:
            if mode == "raise":
                raise ValueError("boom: bad operand on purpose")
            time.sleep(600)  # never joins; the deadline on rank 0 must end the job
        if mode == "hang-ordered":
            # A compiled NaN-propagating max over 1 MiB: xladist/collectives/ordered.py's native call.
            from xladist.bench.collectives import _reducers
            _, red, _, _ = _reducers()["max"]
            all_reduce(comm, np.ones(1 << 18, np.float32), red, label="all-reduce.9")
        else:
            all_reduce(comm, np.ones(4), label="all-reduce.7")
        print("unreachable: the collective completed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
