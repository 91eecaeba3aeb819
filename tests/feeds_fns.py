"""Named infeed functions for `--infeed-fn tests.feeds_fns:NAME` (tests/cli/test_feeds_cli.py).

Every function has the signature of an infeed source: (rank, replica, partition) ->
iterable of items. Items depend on the rank, so the tests can tell ranks apart.
"""

import numpy as np


def item(rank: int, k: int) -> np.ndarray:
    """Item k of `rank`: distinct on every rank and step."""
    return np.array([rank + 1, k, rank * 10 + k], np.float32)


def steps(rank, replica, partition):
    for k in range(1000):
        yield item(rank, k)


def raising_on_rank1(rank, replica, partition):
    for k in range(1000):
        if rank == 1 and k == 2:
            raise ValueError(f"shard {rank} is corrupt at record {k}")
        yield item(rank, k)


def steps_then_block_dir(rank, replica, partition):
    """`steps`, but before item 2 rank 0 replaces the folder $XLADIST_TEST_BLOCK_DIR with a
    plain file, so nothing can be written there any more (tests/cli/test_cli_files.py). With
    --prefetch 1, item 2 is produced only once the program took item 1: every rank is
    running by then."""
    import os
    import shutil
    for k in range(1000):
        target = os.environ.get("XLADIST_TEST_BLOCK_DIR")
        if rank == 0 and k == 2 and target and os.path.isdir(target):
            shutil.rmtree(target)
            with open(target, "w") as f:
                f.write("not a folder any more\n")
        yield item(rank, k)
