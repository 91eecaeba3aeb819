"""MPI collectives for xladist: groups, communicators, one module per collective family.

Layers, bottom up:

* group modes, replica groups -> device groups: :mod:`xladist.hlo.collective_groups` (pure
  Python, below this package; GroupError and GroupMode are re-exported here).
* :mod:`xladist.collectives.deadline` -- per-process watchdog; every blocking wait has a deadline.
* :mod:`xladist.collectives.communicator` -- the Communicator interface and its buffer pool;
  :mod:`~xladist.collectives.mpi_communicator` its MPI implementation,
  :mod:`~xladist.collectives.in_process` the in-process (threads-as-ranks) twin,
  :mod:`~xladist.collectives.communicator_cache` one communicator per device group.
* :mod:`xladist.collectives.reduction` -- Reducer = (kind, numpy fn); builtin MPI ops vs generic path.
* one module per family: all_reduce, all_gather, all_to_all, reduce_scatter, permute,
  broadcast; each has ``<op>(comm, x, ...)`` and ``<op>_start(...) -> Pending``;
  ragged_all_to_all (blocking only: HLO has no start form of it).

Importing this package does not import mpi4py (MPI initializes on first MPI use).
"""

from xladist.hlo.collective_groups import GroupError, GroupMode

from .all_gather import all_gather, all_gather_start
from .all_reduce import all_reduce, all_reduce_start
from .all_to_all import all_to_all, all_to_all_start
from .broadcast import collective_broadcast, collective_broadcast_start
from .communicator import CollectiveError, Communicator
from .communicator_cache import CommunicatorCache
from .in_process import InProcessCommunicator, in_process_world, run_in_threads
from .mpi_communicator import MpiCommunicator
from .permute import collective_permute, collective_permute_start
from .ragged_all_to_all import ragged_all_to_all
from .reduce_scatter import reduce_scatter, reduce_scatter_start
from .reduction import AND, MAX, MIN, OR, PROD, SUM, XOR, Reducer

__all__ = [
    "AND",
    "MAX",
    "MIN",
    "OR",
    "PROD",
    "SUM",
    "XOR",
    "CollectiveError",
    "Communicator",
    "CommunicatorCache",
    "GroupError",
    "GroupMode",
    "InProcessCommunicator",
    "MpiCommunicator",
    "Reducer",
    "all_gather",
    "all_gather_start",
    "all_reduce",
    "all_reduce_start",
    "all_to_all",
    "all_to_all_start",
    "collective_broadcast",
    "collective_broadcast_start",
    "collective_permute",
    "collective_permute_start",
    "in_process_world",
    "ragged_all_to_all",
    "reduce_scatter",
    "reduce_scatter_start",
    "run_in_threads",
]
