"""The conformance suite's own reading of group modes, device assignments and peers.

Written from docs/reference/collective-semantics.md (group modes A.1-A.5, device assignment
A.7, iota groups B.8, permute pairs C.14, broadcast C.15, channel peers D.20-21a) and
deliberately NOT from xladist/hlo/collective_groups.py, which the verifier, the deadlock check
and the MPI runtime share: the suite is the oracle they are checked against, and a bug shared
by both would otherwise pass unnoticed. Plain Python and numpy, no xladist imports.

A device assignment here is a table ``da[replica][partition] -> device id``.
"""

from __future__ import annotations

import numpy as np

CR, CP, CRP, FID = "cross_replica", "cross_partition", "cross_replica_and_partition", \
    "flattened_id"
MODES = (CR, CP, CRP, FID)


def default_assignment(R: int, P: int) -> list[list[int]]:
    """XLA's default placer: device = partition * R + replica (A.7)."""
    return [[p * R + r for p in range(P)] for r in range(R)]


def logical_ids(da: list[list[int]]) -> dict[int, tuple[int, int]]:
    """device -> (replica, partition)."""
    return {d: (r, p) for r, row in enumerate(da) for p, d in enumerate(row)}


def mode_of(has_channel: bool, flag: bool | None, has_flag: bool) -> str:
    """A.1/A.2: the mode from (channel_id present, use_global_device_ids). all-reduce,
    all-gather and reduce-scatter have a real flag (has_flag; absent means false); the others
    (all-to-all, ragged-all-to-all, collective-permute, collective-broadcast) have none."""
    if not has_flag:
        return CP if has_channel else CR
    if not has_channel:
        if flag:
            raise ValueError("use_global_device_ids=true needs a channel_id")
        return CR
    return FID if flag else CRP


def iota_groups(G: int, S: int, dims, perm) -> list[list[int]]:
    """`[G,S]<=[dims]T(perm)`: iota, reshape to dims, transpose, cut into G groups of S."""
    a = np.arange(int(np.prod(dims))).reshape(tuple(dims))
    if perm is not None:
        a = a.transpose(tuple(perm))
    return a.reshape(G, S).tolist()


def id_count(mode: str, R: int, P: int) -> int:
    return {CR: R, CP: P, CRP: R, FID: R * P}[mode]


def expand(mode: str, groups: list[list[int]], da: list[list[int]],
           cover: bool = True) -> list[list[int]]:
    """Device groups, each in member (collective rank) order (A.3-A.5). `cover=False`:
    groups need not name every id (collective-broadcast, C.15)."""
    R, P = len(da), len(da[0])
    if not groups:
        if mode == FID:
            raise ValueError("flattened-id collectives need explicit replica_groups (A.5)")
        groups = [list(range(id_count(mode, R, P)))]
    if cover:
        ids = sorted(i for g in groups for i in g)
        if ids != list(range(id_count(mode, R, P))):
            raise ValueError(f"replica_groups {groups} do not name every {mode} id once")
    if mode == CR:
        return [[da[r][p] for r in g] for p in range(P) for g in groups]
    if mode == CP:
        return [[da[r][p] for p in g] for r in range(R) for g in groups]
    if mode == CRP:  # XLA's order: replica-major, then every partition (A.4)
        return [[da[r][p] for r in g for p in range(P)] for g in groups]
    return [[da[f // P][f % P] for f in g] for g in groups]


def member_of(device: int, groups: list[list[int]]) -> tuple[list[int], int] | None:
    """(group, position) of `device`, None when it is in no group."""
    for g in groups:
        if device in g:
            return g, g.index(device)
    return None


def pair_sources(pairs, by_partition: bool, da: list[list[int]]) -> dict[int, int]:
    """target device -> source device of collective-permute pairs (C.14) and send/recv peers
    (D.20). `by_partition`: the ids are partition ids applying in every replica (a permute
    with a channel); otherwise replica ids applying in every partition."""
    R, P = len(da), len(da[0])
    out = {}
    for s, t in pairs:
        for other in range(R if by_partition else P):
            if by_partition:
                out[da[other][t]] = da[other][s]
            else:
                out[da[t][other]] = da[s][other]
    return out


def send_recv_by_partition(R: int, P: int) -> bool:
    """D.20: send/recv peers name partition ids, except in a module of one partition and
    several replicas, where they name replica ids."""
    return P > 1 or R == 1
