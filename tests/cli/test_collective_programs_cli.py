"""Hand-written multi-device programs that once failed under `xladist run`, run as a user
would (mpiexec through the CLI), each result checked against numpy or each refusal
against its message."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cli_util import xladist_cli

# XLA's in-place collective-permute: input, output, input and output start indices, with
# slice_sizes (XLA's CollectivePermuteInPlaceUpdate test, made small).
IN_PLACE_PERMUTE = """HloModule in_place, replica_count=2
ENTRY e {
  x = f32[4,2] parameter(0)
  o = f32[4,2] parameter(1)
  z = s32[] constant(0)
  two = s32[] constant(2)
  i = (s32[], s32[]) tuple(z, z)
  j = (s32[], s32[]) tuple(two, z)
  ROOT cp = f32[4,2] collective-permute(x, o, i, j), source_target_pairs={{0,1},{1,0}}, slice_sizes={{2,2}}
}
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("n", [1, 2])
def test_in_place_collective_permute_is_refused_before_any_rank_starts(tmp_path, backend, n):
    """Both backends crashed on every rank with an internal error ("setting an array element
    with a sequence", "the collective-permute rule returned a wrong value") after the module
    had verified; now the verifier names the instruction and the way to write it."""
    module = tmp_path / "m.hlo"
    text = IN_PLACE_PERMUTE if n == 2 else IN_PLACE_PERMUTE.replace(
        "replica_count=2", "replica_count=1").replace("{{0,1},{1,0}}", "{{0,0}}")
    module.write_text(text)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.zeros((n, 4, 2), np.float32), arg1=np.ones((n, 4, 2), np.float32))
    proc = xladist_cli("run", module, "-n", n, "--inputs", inputs, "--backend", backend,
                       "--timeout", 20, "-q", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "internal" not in proc.stderr
    assert "%cp" in proc.stderr and "in-place form" in proc.stderr
    assert "rank" not in proc.stderr  # refused before any rank ran


# ---- unusual programs that run right: kept so they stay right -----------------------------------
# Each: (name, module text, inputs of device d, numpy reference over all devices' inputs,
# device assignment or None). 2 replicas x 2 partitions unless the header says otherwise;
# the default assignment puts (replica r, partition p) on device p*2 + r.

def _rp(d):
    return d % 2, d // 2


_FLAT_IOTA_T = """HloModule flat, replica_count=2, num_partitions=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[3] parameter(0)
  ROOT r = f32[3] all-reduce(x), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true, to_apply=sum
}"""


def _flat_iota_t(X):
    # flattened id f = r*2 + p; groups {0,2},{1,3} pair the two replicas of one partition:
    # devices p*2 and p*2 + 1
    return [[X[d][0] + X[d ^ 1][0]] for d in range(4)]


_CRP_ORDER = """HloModule crp, replica_count=2, num_partitions=2
ENTRY e {
  r = u32[] replica-id()
  p = u32[] partition-id()
  ten = u32[] constant(10)
  a = u32[] multiply(r, ten)
  s = u32[] add(a, p)
  s1 = u32[1] reshape(s)
  ROOT g = u32[4] all-gather(s1), channel_id=1, replica_groups={{1,0}}, dimensions={0}
}"""

_LOOP_PERMUTE_ZEROS = """HloModule loop, replica_count=4
cond {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  c = s32[] constant(3)
  ROOT lt = pred[] compare(i, c), direction=LT
}
body {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[3] get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  onef = f32[3] constant({1, 1, 1})
  a = f32[3] add(v, onef)
  nv = f32[3] collective-permute(a), source_target_pairs={{0,1},{1,2}}
  ROOT t = (s32[], f32[3]) tuple(i2, nv)
}
ENTRY e {
  x = f32[3] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[3]) tuple(z, x)
  w = (s32[], f32[3]) while(t), condition=cond, body=body
  ROOT g = f32[3] get-tuple-element(w), index=1
}"""


def _loop_permute_zeros(X):
    v = [X[d][0] for d in range(4)]
    for _ in range(3):
        z = np.zeros(3, np.float32)
        v = [z, v[0] + 1, v[1] + 1, z]
    return [[x] for x in v]


_CARRIED_AG_START = """HloModule carried, replica_count=2
cond {
  p = (s32[], (f32[2], f32[4]), f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  c = s32[] constant(3)
  ROOT lt = pred[] compare(i, c), direction=LT
}
body {
  p = (s32[], (f32[2], f32[4]), f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  st = (f32[2], f32[4]) get-tuple-element(p), index=1
  acc = f32[4] get-tuple-element(p), index=2
  g = f32[4] all-gather-done(st)
  acc2 = f32[4] add(acc, g)
  s2 = f32[2] slice(g), slice={[1:3]}
  st2 = (f32[2], f32[4]) all-gather-start(s2), replica_groups={}, dimensions={0}
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT t = (s32[], (f32[2], f32[4]), f32[4]) tuple(i2, st2, acc2)
}
ENTRY e {
  x = f32[2] parameter(0)
  z = s32[] constant(0)
  st = (f32[2], f32[4]) all-gather-start(x), replica_groups={}, dimensions={0}
  zz = f32[4] constant({0, 0, 0, 0})
  t = (s32[], (f32[2], f32[4]), f32[4]) tuple(z, st, zz)
  w = (s32[], (f32[2], f32[4]), f32[4]) while(t), condition=cond, body=body
  stl = (f32[2], f32[4]) get-tuple-element(w), index=1
  acc = f32[4] get-tuple-element(w), index=2
  last = f32[4] all-gather-done(stl)
  ROOT r = (f32[4], f32[4]) tuple(acc, last)
}"""


def _carried_ag_start(X):
    cur = [X[0][0], X[1][0]]
    acc = np.zeros(4, np.float32)
    for _ in range(3):
        g = np.concatenate(cur)
        acc = acc + g
        cur = [g[1:3], g[1:3]]
    return [[acc, np.concatenate(cur)]] * 2


_A2A_CROSSP_TUPLE = """HloModule a2a, replica_count=2, num_partitions=2
ENTRY e {
  a = s32[2] parameter(0)
  b = s32[2] parameter(1)
  ROOT r = (s32[2], s32[2]) all-to-all(a, b), channel_id=3, replica_groups={{1,0}}
}"""


def _a2a_crossp_tuple(X):
    # partition ids, member 0 is partition 1: element i is what member i sent to us
    out = []
    for d in range(4):
        r, p = _rp(d)
        me = [1, 0].index(p)
        out.append([X[(q * 2) + r][me] for q in (1, 0)])
    return out


PROGRAMS = [
    ("flattened ids, iota groups transposed", _FLAT_IOTA_T, 4,
     lambda d: [np.array([d, 1.5, -d], np.float32)], _flat_iota_t, None),
    # cross-replica-and-partition: XLA's replica-major member order, under an assignment
    # that is not the default (rows are replicas): devices 3,1 hold replica 0.
    ("all-gather member order, custom assignment", _CRP_ORDER, 4, lambda d: [],
     lambda X: [[np.array([10, 11, 0, 1], np.uint32)]] * 4, [[3, 1], [0, 2]]),
    ("permute in a loop, devices that receive nothing get zeros", _LOOP_PERMUTE_ZEROS, 4,
     lambda d: [np.full(3, d + 1.0, np.float32)], _loop_permute_zeros, None),
    ("all-gather-start carried across loop iterations", _CARRIED_AG_START, 2,
     lambda d: [np.array([d + 1, 10 * (d + 1)], np.float32)], _carried_ag_start, None),
    ("tuple all-to-all over partitions", _A2A_CROSSP_TUPLE, 4,
     lambda d: [np.array([d, j], np.int32) for j in range(2)], _a2a_crossp_tuple, None),
]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("n", [2, 4])
def test_unusual_programs_match_numpy_on_both_backends(n):
    import xladist
    chosen = [p for p in PROGRAMS if p[2] == n]
    with xladist.Cluster(n=n, timeout=60) as cluster:
        for name, text, _, inputs, reference, assignment in chosen:
            xs = [inputs(d) for d in range(n)]
            want = reference(xs)
            for backend in ("cpu", "interpreter"):
                got = cluster.run(text, xs, backend=backend, device_assignment=assignment)
                for d in range(n):
                    assert len(got[d]) == len(want[d]), (name, backend, d)
                    for g, w in zip(got[d], want[d]):
                        np.testing.assert_array_equal(g, w, err_msg=f"{name} {backend} device {d}")
