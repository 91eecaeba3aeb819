"""Named infeed functions for `--infeed-fn tests.feeds_fns:NAME` (tests/test_feeds_cli.py).

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
