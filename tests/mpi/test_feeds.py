"""Per-rank feeds inside an MPI job: `xladist.run(..., infeed=lambda, outfeed=callback)`
called on every rank (the in-place path: the Python feeds live in each rank itself).

Every rank's items differ; expected values come from numpy over all ranks' items.
Passes at any world size (run with -n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

from xladist.runtime.api import run

pytestmark = pytest.mark.mpi

# Token chain: an array infeed, an empty-tuple infeed (takes no item), a tuple infeed;
# the array is all-reduced; two outfeeds (an array, then a tuple) in token order.
CHAIN = """HloModule chain_mpi

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  t0 = token[] after-all()
  a = (f32[2,3], token[]) infeed(t0)
  a.d = f32[2,3] get-tuple-element(a), index=0
  a.t = token[] get-tuple-element(a), index=1
  e = ((), token[]) infeed(a.t)
  e.t = token[] get-tuple-element(e), index=1
  b = ((s32[4], f32[2,3]{0,1}), token[]) infeed(e.t)
  b.d = (s32[4], f32[2,3]{0,1}) get-tuple-element(b), index=0
  b.t = token[] get-tuple-element(b), index=1
  b.i = s32[4] get-tuple-element(b.d), index=0
  b.f = f32[2,3]{0,1} get-tuple-element(b.d), index=1
  total = f32[2,3] all-reduce(a.d), replica_groups={}, to_apply=sum
  mine = f32[2,3] add(total, b.f)
  o1 = token[] outfeed(mine, b.t), outfeed_shape=f32[2,3]{1,0}
  dep = s32[4] add-dependency(b.i, o1)
  pair = (s32[4], f32[2,3]) tuple(dep, total)
  o2 = token[] outfeed(pair, o1), outfeed_shape=(s32[4]{0}, f32[2,3]{1,0})
  ROOT r = (f32[2,3], token[]) tuple(mine, o2)
}
"""


def items(rank):
    rng = np.random.default_rng(100 + rank)
    a = rng.normal(size=(2, 3)).astype(np.float32)
    b = (np.arange(4, dtype=np.int32) + 10 * rank, rng.normal(size=(2, 3)).astype(np.float32))
    return a, b


def test_chain_with_per_rank_items_and_tuple_outfeeds():
    comm = MPI.COMM_WORLD
    n, me = comm.size, comm.rank
    got = []
    outs = run(CHAIN, n=n, timeout=60,
               infeed=lambda rank, replica, partition: list(items(rank)),
               outfeed=lambda rank, replica, partition, x: got.append((rank, x)))
    total = sum(items(r)[0] for r in range(n))
    _, b = items(me)
    assert [r for r, _ in got] == [me, me]  # each rank's callback sees its own items
    np.testing.assert_allclose(got[0][1], total + b[1], rtol=1e-5)
    np.testing.assert_array_equal(got[1][1][0], b[0])
    np.testing.assert_allclose(got[1][1][1], total, rtol=1e-5)
    for r in range(n):  # every rank receives every device's outputs
        np.testing.assert_allclose(outs[r][0], total + items(r)[1][1], rtol=1e-5)


def test_rank_list_of_iterables_and_outfeed_npz(tmp_path_factory):
    comm = MPI.COMM_WORLD
    n, me = comm.size, comm.rank
    folder = comm.bcast(str(tmp_path_factory.mktemp("feeds")) if me == 0 else None)
    per_rank = [list(items(r)) for r in range(n)]
    run(CHAIN, n=n, timeout=60, infeed=per_rank, outfeed=folder + "/out{rank}.npz",
        prefetch=1)
    comm.Barrier()
    total = sum(items(r)[0] for r in range(n))
    with np.load(f"{folder}/out{(me + 1) % n}.npz") as f:  # a neighbour's file
        other = items((me + 1) % n)
        assert sorted(f.files) == ["item0", "item1_0", "item1_1"]
        np.testing.assert_allclose(f["item0"], total + other[1][1], rtol=1e-5)
        np.testing.assert_array_equal(f["item1_0"], other[1][0])
