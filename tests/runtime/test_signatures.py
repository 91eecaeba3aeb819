"""Devices that disagree on one collective are refused at run time too (reference 21b,
xladist/runtime/signatures.py): in a run the deadlock check did not prove, with an error naming
both devices and both instructions -- not the garbage of one type reduced as another."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.errors import ExecutionError, InputError
from xladist.environment import signatures
from xladist.hlo.collective_groups import collective_terms
from xladist.runtime.signatures import signature

# Device 0 takes the branch with an f32 all-reduce, device 1 the one with an s32 all-reduce
# of the same bytes (a conditional on replica-id: the data decides nothing here).
# The two reducers every module here takes (the loop tests name lines counted after them:
# keep them as they are).
REDUCERS = """add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
add_i {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
"""

BRANCHES = """HloModule branches, replica_count=2
""" + REDUCERS + """
on_f {
  p = (f32[4]) parameter(0)
  x = f32[4] get-tuple-element(p), index=0
  r = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=add_f
  ROOT t = (f32[4]) tuple(r)
}

on_other {
  p = (f32[4]) parameter(0)
  x = f32[4] get-tuple-element(p), index=0
  OTHER
  ROOT t = (f32[4]) tuple(rf)
}

ENTRY main {
  x = f32[4] parameter(0)
  id = u32[] replica-id()
  zero = u32[] constant(0)
  first = pred[] compare(id, zero), direction=EQ
  tx = (f32[4]) tuple(x)
  c = (f32[4]) conditional(first, tx, tx), true_computation=on_f, false_computation=on_other
  ROOT out = f32[4] get-tuple-element(c), index=0
}
"""

S32 = """xi = s32[4] bitcast-convert(x)
  ri = s32[4] all-reduce(xi), replica_groups={{0,1}}, to_apply=add_i
  rf = f32[4] bitcast-convert(ri)"""
SAME = """rf = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=add_f"""
MAX = """rf = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=max_f"""
GATHER = """g = f32[8] all-gather(x), dimensions={0}, replica_groups={{0,1}}
  rf = f32[4] slice(g), slice={[0:4]}"""

X = np.array([[1.5, -2, 3, 4], [10, 20, 30, 40]], np.float32)


def _module(other: str) -> str:
    text = BRANCHES.replace("OTHER", other)
    if "max_f" in other:
        text = text.replace("on_f {", "max_f {\n  a = f32[] parameter(0)\n  b = f32[] "
                            "parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}\n\non_f {")
    return text


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("other, theirs", [
    (S32, "all-reduce(s32[4]) to_apply=add (s32[]) (ri, line"),
    (MAX, "all-reduce(f32[4]) to_apply=maximum (f32[]) (rf, line"),
    (GATHER, "all-gather(f32[4]) dimensions={0} (g, line"),
], ids=["type", "reducer", "opcode"])
def test_devices_that_disagree_on_a_collective_are_refused_naming_both(backend, other, theirs):
    module = xladist.parse_hlo(_module(other))
    with pytest.raises(ExecutionError) as e:  # before: the f32/s32 pair finished with garbage
        xladist.run(module, [X], n=2, check=False, backend=backend, timeout=60)
    text = str(e.value)
    assert "device 0 issues all-reduce(f32[4]) to_apply=add (f32[]) (r, line " in text
    assert f"device 1 issues {theirs}" in text  # whichever rank's error came first
    assert "XLA leaves undefined" in text and "not proven" in text


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_devices_that_issue_alike_in_different_branches_still_meet(backend):
    """Two instructions with one signature pair legitimately (the names differ, the rule
    does not look at them): the exchange refuses nothing that is right."""
    module = xladist.parse_hlo(_module(SAME))
    outs = xladist.run(module, [X], n=2, check=False, backend=backend, timeout=60)
    for d in range(2):
        np.testing.assert_array_equal(outs[d][0], X.sum(axis=0))


def test_the_runtime_and_the_check_compare_the_same_terms():
    """One rule (hlo/collective_groups.collective_terms): the reducer is its root op, not its
    computation's name; a -start keeps its suffix; dimensions are carried."""
    module = xladist.parse_hlo(_module(SAME))
    on_f, on_other = (module.computation(n) for n in ("on_f", "on_other"))
    r = next(i for i in on_f.instructions if i.opcode == "all-reduce")
    rf = next(i for i in on_other.instructions if i.opcode == "all-reduce")
    assert collective_terms(r) == collective_terms(rf) == ("all-reduce", "add (f32[])", None)
    x = np.zeros(4, np.float32)
    assert signature(r, [x]) == signature(rf, [x]) == "all-reduce(f32[4]) to_apply=add (f32[])"
    # A dynamic dimension is compared at its size at this call.
    assert signature(r, [np.zeros(3, np.float32)]) == "all-reduce(f32[3]) to_apply=add (f32[])"


def test_xladist_signatures_takes_its_words_and_refuses_others(monkeypatch):
    for word, want in [("", "unproven"), ("always", "always"), ("OFF", "off")]:
        monkeypatch.setenv("XLADIST_SIGNATURES", word)
        assert signatures() == want
    monkeypatch.setenv("XLADIST_SIGNATURES", "sometimes")
    with pytest.raises(InputError, match="XLADIST_SIGNATURES='sometimes': expected one of "
                                         "unproven, always, off"):
        signatures()


# A loop whose trip count is data (so the check cannot prove the program): device 0 runs
# K0 iterations, device 1 K1. With K0 < K1 device 0's s32 collective after the loop meets
# device 1's f32 collective of iteration K0 + 1, inside the loop -- which the cpu backend
# runs natively (compiler/native/loop.py), exchanging natively (emit_agreement).
LOOP = """HloModule loop, replica_count=2
""" + REDUCERS + """cond {
  p = (s32[], s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, k), direction=LT
}
body {
  p = (s32[], s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  x = f32[4] get-tuple-element(p), index=2
  one = s32[] constant(1)
  j = s32[] add(i, one)
  INSIDE
  ROOT t = (s32[], s32[], f32[4]) tuple(j, k, r)
}
ENTRY main {
  x = f32[4] parameter(0)
  k = s32[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], s32[], f32[4]) tuple(zero, k, x)
  w = (s32[], s32[], f32[4]) while(init), condition=cond, body=body
  y = f32[4] get-tuple-element(w), index=2
  yi = s32[4] bitcast-convert(y)
  AFTER
  ROOT out = f32[4] bitcast-convert(ri)
}
"""
IN_REDUCE = "r = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=add_f"
AFTER_REDUCE = "ri = s32[4] all-reduce(yi), replica_groups={{0,1}}, to_apply=add_i"
IN_PERMUTE = "r = f32[4] collective-permute(x), source_target_pairs={{0,1},{1,0}}"
AFTER_PERMUTE = "ri = s32[4] collective-permute(yi), source_target_pairs={{0,1},{1,0}}"


def _loop(inside: str, after: str):
    return xladist.parse_hlo(LOOP.replace("INSIDE", inside).replace("AFTER", after))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
@pytest.mark.parametrize("inside, after, theirs", [
    (IN_REDUCE, AFTER_REDUCE, "all-reduce(f32[4]) to_apply=add (f32[]) (r, line 25)"),
    (IN_PERMUTE, AFTER_PERMUTE, "collective-permute(f32[4]) (r, line 25)"),
], ids=["all-reduce", "collective-permute"])
def test_a_loop_that_runs_longer_on_one_device_is_refused_where_they_part(
        backend, inside, after, theirs):
    kind = after.split()[3].split("(")[0]
    with pytest.raises(ExecutionError) as e:
        xladist.run(_loop(inside, after), [np.ones((2, 4), np.float32),
                                           np.array([3, 5], np.int32)],
                    n=2, backend=backend, timeout=60)
    text = str(e.value)
    assert f"device 0 issues {kind}(s32[4])" in text and f"device 1 issues {theirs}" in text
    if backend == "cpu":  # the loop ran natively and its driver made the exchange
        assert "(in iteration 4 of w)" in text


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["cpu", "interpreter"])
def test_an_unproven_loop_whose_devices_agree_runs_and_is_right(backend):
    """The check cannot prove a trip count that is data; the devices agree at run time and
    the answer is numpy's (the exchange changes no value)."""
    x = np.array([[1, 2, 3, 4], [0.5, 0, -1, 8]], np.float32)
    outs = xladist.run(_loop(IN_REDUCE, AFTER_REDUCE), [x, np.array([3, 3], np.int32)],
                       n=2, backend=backend, timeout=60)
    y = x.sum(axis=0) * 4  # three all-reduces of two devices: x0 + x1, then doubled twice
    want = (y.view(np.int32) * np.int32(2)).view(np.float32)
    for d in range(2):
        np.testing.assert_array_equal(outs[d][0], want)
