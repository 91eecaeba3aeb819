"""ragged-all-to-all over real MPI: the collective itself, and HLO programs through `xladist.run`
with both backends.

Run as `mpiexec -n N python -m pytest --with-mpi tests/mpi/test_ragged_all_to_all.py` (N = 2 or 4;
tests/test_mpi_suites.py does both).  Sizes and offsets are random per member (and per group);
every rank builds its whole group's operands from a shared seed, so each result is checked
against tests/mpi/ragged_cases.py's numpy reference computed from ALL members' inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from xladist.collectives.ragged_all_to_all import ragged_all_to_all
from tests.mpi.conftest import group_sets
from tests.mpi.ragged_cases import hlo_type, make_group, reference, rng_for, same

pytestmark = pytest.mark.mpi

WORLD = MPI.COMM_WORLD.Get_size()
TIMEOUT_S = 60.0
MAX_SIZE = 4
# (dtype, row shape, updates per peer, rank-2 metadata, index type)
ITEMS = [("f32", (), 1, False, "s32"), ("bf16", (3,), 2, False, "s64"),
         ("s8", (2, 3), 1, True, "s32"), ("f64", (2,), 3, True, "u32")]


# ---- the collective, group by group --------------------------------------------------------

@pytest.mark.parametrize("grouping", ["all", "reversed", "pairs", "singletons"])
def test_collective_matches_reference(cache, grouping):
    me = cache.device
    group = next(g for g in group_sets(WORLD)[grouping] if me in g)
    comm = cache.get(group)
    n, pos = len(group), group.index(me)
    checks = []
    # Run every case first and compare afterwards: a wrong result must not make this rank
    # skip collectives its peers still wait in.
    for dt, row, k, rank2, index in ITEMS:
        members = make_group(n, k, row, dt, rng_for("mpi", grouping, tuple(group), dt),
                             rank2=rank2, index=index)
        got = ragged_all_to_all(comm, *members[pos].operands(), label=f"ra2a.{dt}")
        checks.append((got, reference(members, pos), f"{grouping} {group} {dt}{row} k={k}"))
    for got, want, what in checks:
        assert same(got, want), f"device {me} (member {pos}) {what}:\n{got}\nwant\n{want}"


def test_bad_sizes_raise_on_the_ranks_that_see_them_and_nobody_hangs(cache):
    """Member 0 sends past its input (every member learns it sent nothing and raises); then,
    on the same communicator, member n-1 expects a row more than it gets (only it raises).
    Both complete their exchanges first, so the next collective still lines up."""
    comm = cache.get(list(range(WORLD)))
    n, me = comm.size, comm.rank
    members = make_group(n, 1, (2,), "f32", rng_for("mpi-bad", n))
    members[0].send_sizes[n - 1] = members[0].x.shape[0] + 1
    with pytest.raises(ValueError, match="member 0 .* sent nothing") as e:
        ragged_all_to_all(comm, *members[me].operands())
    if me == 0:
        assert f"runs past the input's {members[0].x.shape[0]} rows" in str(e.value)

    members = make_group(n, 1, (2,), "f32", rng_for("mpi-bad2", n))
    members[n - 1].recv_sizes[0] += 1
    if me == n - 1:
        with pytest.raises(ValueError, match=r"recv_sizes\[0\]=.*but member 0 .* sends"):
            ragged_all_to_all(comm, *members[me].operands())
    else:
        assert same(ragged_all_to_all(comm, *members[me].operands()), reference(members, me))
    # The communicator is still in step.
    assert MPI.COMM_WORLD.allreduce(1) == WORLD


@pytest.mark.parametrize("blocking", [True, False])
def test_alltoallv_primitive_moves_rows(cache, blocking):
    """The communicator primitive under the collective: member r sends (r + j) % 3 rows of
    [3] f32 to member j, from row 1 + 4j; member j stores what i sends at row 5i + 1."""
    comm = cache.get(list(range(WORLD))[::-1])
    n, me = comm.size, comm.rank
    send = np.arange(4 * n * 3, dtype=np.float32).reshape(4 * n, 3) + 1000 * me
    counts = [(me + j) % 3 for j in range(n)]
    recv = np.full((5 * n, 3), -1, np.float32)
    rcounts = [(i + me) % 3 for i in range(n)]
    args = (send, counts, [1 + 4 * j for j in range(n)], recv, rcounts,
            [5 * i + 1 for i in range(n)], 12, "alltoallv-test")
    if blocking:
        comm.alltoallv(*args)
    else:
        comm.ialltoallv(*args).wait()
    want = np.full((5 * n, 3), -1, np.float32)
    for i in range(n):
        theirs = np.arange(4 * n * 3, dtype=np.float32).reshape(4 * n, 3) + 1000 * i
        want[5 * i + 1:5 * i + 1 + rcounts[i]] = theirs[1 + 4 * me:1 + 4 * me + rcounts[i]]
    np.testing.assert_array_equal(recv, want)


# ---- HLO programs through the runtime --------------------------------------------------------

def _variants(n: int) -> list[tuple[str, list[list[int]]]]:
    """(replica_groups text, device groups) for ids 0..n-1 (device id == the id here): all,
    all reversed, and subgroups (reversed pairs, or singletons when n is odd or 2)."""
    sub = [[i + 1, i] for i in range(0, n, 2)] if n % 2 == 0 and n >= 4 else \
        [[i] for i in range(n)]
    rev = [list(range(n))[::-1]]

    def text(groups):
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"

    return [("{}", [list(range(n))]), (text(rev), rev), (text(sub), sub)]


def build(R: int, P: int):
    """One module of ragged-all-to-alls (every variant x item); per-device inputs; expected."""
    n = R * P
    channel = ", channel_id=1" if P > 1 else ""
    lines, roots, inputs, expected = [], [], [[] for _ in range(n)], [[] for _ in range(n)]
    for vi, (groups_text, groups) in enumerate(_variants(n)):
        for ii, (dt, row, k, rank2, index) in enumerate(ITEMS):
            size = len(groups[0])
            min_rows = 1 + size * k * MAX_SIZE  # same static shapes in every group
            per_group = {tuple(g): make_group(size, k, row, dt,
                                              rng_for("hlo", R, P, vi, ii, tuple(g)),
                                              rank2=rank2, index=index, max_size=MAX_SIZE,
                                              min_rows=min_rows)
                         for g in groups}
            first = next(iter(per_group.values()))[0].operands()
            names = []
            for a in first:
                i = len(inputs[0])
                lines.append(f"  %p{i} = {hlo_type(a)} parameter({i})")
                names.append(f"%p{i}")
                for g, members in per_group.items():
                    for pos, d in enumerate(g):
                        inputs[d].append(members[pos].operands()[len(names) - 1])
            name = f"ra_v{vi}_{dt}_k{k}"
            ty = hlo_type(first[1])
            lines.append(f"  %{name} = {ty} ragged-all-to-all({', '.join(names)}), "
                         f"replica_groups={groups_text}{channel}")
            roots.append((name, ty))
            for g, members in per_group.items():
                for pos, d in enumerate(g):
                    expected[d].append(reference(members, pos))
    text = (f"HloModule ragged_r{R}p{P}, replica_count={R}, num_partitions={P}\n\n"
            "ENTRY %main {\n" + "\n".join(lines)
            + f"\n  ROOT %out = ({', '.join(t for _, t in roots)}) "
            f"tuple({', '.join('%' + nm for nm, _ in roots)})\n}}\n")
    return text, inputs, expected, [nm for nm, _ in roots]


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("R,P", [(WORLD, 1), (1, WORLD)], ids=["cross_replica", "cross_partition"])
def test_hlo_program_matches_reference(R, P, backend):
    text, inputs, expected, names = build(R, P)
    outs = xladist.run(text, inputs, n=WORLD, timeout=TIMEOUT_S, backend=backend)
    problems = [f"{names[i]} device {d}:\n  got  {outs[d][i].tolist()}\n  want {w.tolist()}"
                for d in range(WORLD) for i, w in enumerate(expected[d])
                if not same(np.asarray(outs[d][i]), w)]
    assert not problems, f"{len(problems)} wrong results:\n" + "\n".join(problems[:6])
    assert len(names) == 3 * len(ITEMS)
