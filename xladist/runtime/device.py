"""Device assignment: which (replica, partition) each MPI rank plays.

XLA's default placer gives device = partition * replica_count + replica, and xladist
runs device d on MPI rank d. A run config may give a custom assignment table
[replica][partition] -> device id. `replica-id` / `partition-id` return the logical
coordinates, never the device id (docs/reference/collective-semantics.md A.7).
"""

from __future__ import annotations

import operator

from dataclasses import dataclass

from xladist.hlo.collective_groups import DeviceAssignment, GroupError, run_device_counts
from xladist.errors import InputError

__all__ = ["DeviceAssignment", "Placement", "placement_for"]


@dataclass(frozen=True)
class Placement:
    """What one rank runs: its device and that device's logical coordinates."""

    rank: int
    device: int
    replica: int
    partition: int
    assignment: DeviceAssignment

    @property
    def replica_count(self) -> int:
        return self.assignment.replica_count

    @property
    def num_partitions(self) -> int:
        return self.assignment.num_partitions

    def describe(self) -> str:
        return f"rank {self.rank} (replica {self.replica}, partition {self.partition})"


def device_counts(module, n: int, setting: str = "-n") -> tuple[int, int]:
    """(replica_count, num_partitions) for running `module` on n ranks: the header's counts,
    the rest from n (a module declaring neither runs as n replicas); the one rule is
    xladist.hlo.collective_groups.run_device_counts. `setting`: how the reader gave n
    (`-n`, or `n=` of xladist.run and xladist.Cluster), for its message."""
    return run_device_counts(module, n, setting=setting)


def make_assignment(module, n: int, table=None) -> DeviceAssignment:
    r, p = device_counts(module, n)
    if table is None:
        return DeviceAssignment.default(r, p)
    try:  # whole numbers in rows: not a flat list, strings, floats (DeviceAssignment int()s)
        table = [[operator.index(d) for d in row] for row in table]
    except TypeError:
        raise InputError(f"device assignment must be a list over replicas of lists over "
                         f"partitions of device ids, e.g. [[0, 1], [2, 3]]; got {table!r}") \
            from None
    try:
        da = DeviceAssignment(table)
    except GroupError as e:
        raise InputError(f"device assignment: {e}") from None
    if (da.replica_count, da.num_partitions) != (r, p):
        raise InputError(f"device assignment is {da.replica_count} replicas x "
                         f"{da.num_partitions} partitions, but the run has {r} x {p}")
    if sorted(da.devices) != list(range(n)):
        raise InputError(f"device assignment must use device ids 0..{n - 1} (one per rank), "
                         f"got {sorted(da.devices)}")
    return da


def placement_for(rank: int, assignment: DeviceAssignment) -> Placement:
    """Rank r plays device r."""
    replica, partition = assignment.logical_id(rank)
    return Placement(rank, rank, replica, partition, assignment)
