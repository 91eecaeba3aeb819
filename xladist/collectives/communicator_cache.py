"""One sub-communicator per distinct device group, created collectively when a program is
loaded (``split`` over the world communicator, in text order), and the map between device
ids and world ranks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xladist.hlo.collective_groups import GroupError

from .communicator import CollectiveError, Communicator
from .mpi_communicator import MpiCommunicator, _mpi

__all__ = ["CommunicatorCache"]


class CommunicatorCache:
    """One communicator per distinct ordered device group, created collectively by ``prepare``.

    ``world`` is the communicator over all ranks (an MpiCommunicator over a duplicate of
    COMM_WORLD by default, so our traffic never matches user messages on COMM_WORLD).
    ``device_to_rank`` maps global device ids to world ranks; by default rank = device id.
    """

    def __init__(self, world: Communicator | None = None,
                 device_to_rank: Mapping[int, int] | Sequence[int] | None = None):
        if world is None:
            MPI = _mpi()
            world = MpiCommunicator(MPI.COMM_WORLD.Dup())
        self.world = world
        if device_to_rank is None:
            rank_of = {d: d for d in range(world.size)}
        elif isinstance(device_to_rank, Mapping):
            rank_of = {int(d): int(r) for d, r in device_to_rank.items()}
        else:
            rank_of = {d: int(r) for d, r in enumerate(device_to_rank)}
        device_of: dict[int, int] = {}
        for d, r in rank_of.items():
            if not 0 <= r < world.size:
                raise GroupError(f"device {d} maps to rank {r}, but the world has "
                                 f"{world.size} ranks")
            if r in device_of:
                raise GroupError(f"devices {device_of[r]} and {d} both map to rank {r}; "
                                 "xladist runs one device per rank")
            device_of[r] = d
        self._rank_of = rank_of
        self._device_of = device_of
        # group tuple -> communicator, or None when this rank is not a member.
        self._comms: dict[tuple[int, ...], Communicator | None] = {}
        self.world.devices = [device_of.get(r) for r in range(world.size)]

    @property
    def device(self) -> int | None:
        """The device this rank plays (None if the mapping leaves this rank out)."""
        return self._device_of.get(self.world.rank)

    def rank_of(self, device: int) -> int:
        try:
            return self._rank_of[device]
        except KeyError:
            raise GroupError(f"device {device} is not mapped to any rank (known devices: "
                             f"{sorted(self._rank_of)})") from None

    def device_of(self, rank: int) -> int:
        try:
            return self._device_of[rank]
        except KeyError:
            raise GroupError(f"rank {rank} plays no device") from None

    def prepare(self, groupings: Sequence[Sequence[Sequence[int]]]) -> None:
        """Create the communicators of every device group, collectively over the world.

        ``groupings`` is a list of groupings, each the device groups of one collective (the
        output of :func:`xladist.hlo.collective_groups.device_groups`).  Every rank must pass the same list
        in the same order: each grouping that still has an uncached group costs one Split,
        with color = group index and key = position in the group, so the sub-communicator's
        rank order is the group's member order.
        """
        me = self.device
        for gi, grouping in enumerate(groupings):
            groups = [tuple(int(d) for d in g) for g in grouping]
            seen: dict[int, int] = {}
            for i, g in enumerate(groups):
                for d in g:
                    self.rank_of(d)
                    if d in seen:
                        raise GroupError(f"grouping #{gi} {[list(x) for x in groups]}: device "
                                         f"{d} is in groups {seen[d]} and {i}")
                    seen[d] = i
            new = list(dict.fromkeys(g for g in groups if g not in self._comms))
            if not new:
                continue  # same decision on every rank: the caches evolve identically
            color, key = None, 0
            for i, g in enumerate(new):
                if me in g:
                    color, key = i, g.index(me)
            comm = self.world.split(color, key, list(new[color]) if color is not None else None)
            for i, g in enumerate(new):
                self._comms[g] = comm if i == color else None

    def get(self, group: Sequence[int]) -> Communicator:
        """The communicator of a prepared group this rank belongs to."""
        key = tuple(int(d) for d in group)
        try:
            comm = self._comms[key]
        except KeyError:
            raise CollectiveError(
                f"no communicator for device group {list(key)}: call prepare() with every "
                "group the program uses, on all ranks, before running collectives") from None
        if comm is None:
            raise CollectiveError(f"device {self.device} (rank {self.world.rank}) is not a "
                                  f"member of device group {list(key)}")
        return comm

    def find(self, grouping: Sequence[Sequence[int]]) -> Communicator | None:
        """The communicator of the group in ``grouping`` that contains this rank's device, or
        None if it is in none of them (collective-broadcast then yields zeros)."""
        me = self.device
        for g in grouping:
            if me in g:
                return self.get(g)
        return None

    def free(self) -> None:
        """Release every sub-communicator and the world duplicate (every rank calls it, after
        the program's last collective). MPICH has about 2,000 context ids per process, so a
        process that runs many programs (xladist.run in a loop under MPI) must give them back.
        """
        comms = {id(c): c for c in self._comms.values() if c is not None}
        comms[id(self.world)] = self.world
        self._comms.clear()
        for comm in comms.values():
            if hasattr(comm, "free"):  # the in-process twin has nothing to release
                comm.free()

    def __len__(self) -> int:
        return len(self._comms)
