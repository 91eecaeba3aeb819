"""MPICH's shared-memory segment of a node: unlinked as soon as every rank there maps it.

MPICH's MPI_Init creates one file per node, `/dev/shm/mpich_shm_<id>_0` (2 MB for 2 ranks,
4 MB for 4: the ranks' message cells), and removes it only in MPI_Finalize. A job whose
ranks end any other way -- a failing rank's MPI_Abort, the watchdog's end of a hung job, a
killed or crashed rank, Ctrl-C, a Cluster stopped -- left the file behind, and /dev/shm is
memory: a pytest suite or a session with hundreds of failing runs kept hundreds of MB of RAM
(a shared test machine had 3,900 such files, 9.3 GB). So every rank unlinks it at its start,
once every rank of its node has it mapped (the usual way of a segment shared by processes
that are all attached): the memory stays for as long as a rank maps it and the kernel frees
it when the last one ends, however it ends. MPI_Finalize's own removal of the file then finds
it gone, which MPICH ignores.

Only MPICH's file, and only a file that every rank of the node maps already: a segment that
another MPI library's ranks attach later (Open MPI's per-rank `vader_segment`s) is left to
its library.
"""

from __future__ import annotations

import os

_PREFIX = "/dev/shm/mpich_shm_"
_done: set[int] = set()


def mapped_segments(pid: int | str = "self") -> set[str]:
    """The MPICH shared-memory files process `pid` maps that still exist by name."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.read().splitlines()
    except OSError:  # not Linux, or the process ended
        return set()
    paths = (line.split(maxsplit=5)[5:] for line in lines if not line.endswith(" (deleted)"))
    return {path[0] for path in paths if path and path[0].startswith(_PREFIX)}


def unlink_when_mapped(comm) -> None:
    """Unlink the node's MPICH segments that every rank of this node maps (collective over
    `comm`, on its first call for it only; a rank alone on its node has nothing to share)."""
    if comm.py2f() in _done:
        return
    _done.add(comm.py2f())
    from mpi4py import MPI

    from xladist.collectives import deadline
    with deadline.waiting("finding the ranks that share this node"):
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        if node.Get_size() == 1:
            return
        with deadline.waiting("listing the node's MPICH shared memory with its other ranks"):
            everyone = node.allgather(mapped_segments())  # after every rank of the node mapped
        if node.Get_rank() == 0:
            for path in set.intersection(*everyone):
                try:
                    os.unlink(path)
                except OSError:  # gone already, or not ours to remove
                    pass
    finally:
        node.Free()
