"""The kit's reference (xladist/conformance/reference.py: every device run by the
interpreter in one process) against the semantics document's own closures (emit.py, written
from docs/reference/collective-semantics.md through groups.py), for every program of the
default plan at every device count the suite knows and a sample of the full matrix; and the
reference's own behaviour on programs that mismatch or hang."""

import numpy as np
import pytest

import xladist
from xladist.conformance.checks import first_difference
from xladist.conformance.reference import reference_run
from xladist.conformance.suite import Plan, flat_items, units
from xladist.errors import ExecutionError
from xladist.hlo.verifier import verify_module


def _closure_problems(unit) -> list[str]:
    prog = unit.program
    outs, fed = reference_run(prog.text(), prog.per_device_inputs(), prog.n,
                              device_assignment=prog.da, infeed=prog.infeeds())
    problems = []
    for c in prog.checks:
        for d in range(prog.n):
            got = outs[d][c.first_leaf:c.first_leaf + c.leaves] \
                + flat_items(fed[d])[c.first_item:c.first_item + c.items]
            want = c.expected(d)
            assert len(got) == len(want), c.name
            for k, (g, w) in enumerate(zip(got, want)):
                why = first_difference(g, w, exact=c.exact)
                if why:
                    problems.append(f"{c.name} device {d} value {k}: {why}")
    return problems


def _units(n, full=False, every=1):
    return units(n, Plan(full=full, xla=False))[::every]


@pytest.mark.parametrize("n", [2, 3, 4, pytest.param(8, marks=pytest.mark.slow)])
def test_reference_agrees_with_the_semantics_closures(n):
    checked = 0
    for unit in _units(n):
        verify_module(xladist.parse_hlo(unit.program.text()))
        problems = _closure_problems(unit)
        assert not problems, "\n".join(problems[:10])
        checked += len(unit.cases)
    assert checked > 2000


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4])
def test_reference_agrees_on_a_sample_of_the_full_matrix(n):
    """Every element type, configuration and device assignment appears in the sample."""
    sample = _units(n, full=True, every=23)
    seen = set()
    for unit in sample:
        problems = _closure_problems(unit)
        assert not problems, "\n".join(problems[:10])
        seen |= {(c.column, c.config) for c in unit.cases}
    assert len({col for col, _ in seen}) >= 20
    assert any("reversed" in c for _, c in seen)
    assert n == 2 or any("flat" in c for _, c in seen)  # r * P + p needs R, P > 1


def test_a_recv_without_its_send_ends_with_the_deadline():
    text = """HloModule m, num_partitions=2
ENTRY e {
  t = token[] after-all()
  r = (f32[2], u32[], token[]) recv(t), channel_id=1, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1}}"}
  d = (f32[2], token[]) recv-done(r), channel_id=1
  ROOT x = f32[2] get-tuple-element(d), index=0
}"""
    with pytest.raises(ExecutionError, match=r"device 1.*still waiting.*send from device 0"):
        reference_run(text, [[], []], 2, timeout=0.5)


def test_devices_that_issue_different_collectives_on_one_group_are_an_error():
    text = """HloModule m, replica_count=2
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
t {
  x = f32[2] parameter(0)
  ROOT a = f32[2] all-reduce(x), replica_groups={}, to_apply=sum
}
f {
  y = f32[2] parameter(0)
  ROOT g = f32[2] collective-permute(y), source_target_pairs={{0,1},{1,0}}
}
ENTRY e {
  p = f32[2] parameter(0)
  id = u32[] replica-id()
  z = u32[] constant(0)
  c = pred[] compare(id, z), direction=EQ
  ROOT r = f32[2] conditional(c, p, p), true_computation=t, false_computation=f
}
"""
    x = np.ones(2, np.float32)
    with pytest.raises(ExecutionError, match="different collectives on one group"):
        reference_run(text, [[x], [x]], 2, timeout=5)


def test_reference_follows_a_device_assignment():
    text = """HloModule m, replica_count=2, num_partitions=2
ENTRY e {
  r = u32[] replica-id()
  p = u32[] partition-id()
  ten = u32[] constant(10)
  a = u32[] multiply(r, ten)
  ROOT s = u32[] add(a, p)
}"""
    outs, _ = reference_run(text, [[]] * 4, 4, device_assignment=[[3, 1], [2, 0]])
    # device 3 is (replica 0, partition 0), device 0 is (replica 1, partition 1)
    assert [int(o[0]) for o in outs] == [11, 1, 10, 0]
