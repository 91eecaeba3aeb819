"""The deadlock check's simulation core on IR built by hand (no parser needed).

Also home of `IR`, a tiny helper the other deadlock/schedule tests use to build modules.
Expected outcomes are worked out by hand from the channel rules of docs/reference/collective-semantics.md
(21a: unmatched ends complete at once; unbuffered channels; G.24 same order everywhere).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import xladist

from xladist.hlo.collective_groups import DeviceAssignment
from xladist.analysis.deadlock import check_module
from xladist.hlo.attrs import Literal, ReplicaGroups
from xladist.hlo.ir import Computation, Instruction, Module
from xladist.hlo.shape import Shape

PAIRS = "_xla_send_recv_source_target_pairs"


def shape(text: str) -> Shape:
    """`f32[4]`, `u32[]`, `token[]` or a list of those for a tuple."""
    if isinstance(text, (list, tuple)):
        return Shape.tuple_of(shape(t) for t in text)
    if text == "token[]":
        return Shape.token()
    ty, dims = text[:-1].split("[")
    return Shape.array(ty, tuple(int(d) for d in dims.split(",") if d))


class IR:
    """Builds one computation; every instruction gets the next line number."""

    lines = itertools.count(1)

    def __init__(self, name: str):
        self.comp = Computation(name)

    def __call__(self, opcode, shp, *operands, name=None, pairs=None, value=None, param=None,
                 preds=(), **attrs) -> Instruction:
        n = len(self.comp.instructions)
        instr = Instruction(name or f"{opcode}.{self.comp.name}.{n}", opcode, shape(shp),
                            operands, attrs, parameter_number=param)
        if value is not None:
            instr.literal = Literal(instr.shape, np.asarray(value, instr.shape.dtype))
        if pairs is not None:
            instr.frontend_attributes[PAIRS] = pairs
        instr.control_predecessors = list(preds)
        instr.line = next(IR.lines)
        self.comp.add(instr)
        self.comp.root = instr
        return instr

    # Common idioms ----------------------------------------------------------------------------
    def p2p(self, channel: int, pairs: str, data: Instruction, token: Instruction, order="rsRS"):
        """recv/send/recv-done/send-done of one channel in `order` (r, s, R, S)."""
        ops = {}
        for c in order:
            if c == "r":
                ops[c] = self("recv", [data.shape.to_text(False), "u32[]", "token[]"], token,
                              channel_id=channel, pairs=pairs)
            elif c == "s":
                ops[c] = self("send", [data.shape.to_text(False), "u32[]", "token[]"], data,
                              token, channel_id=channel, pairs=pairs)
            elif c == "R":
                ops[c] = self("recv-done", [data.shape.to_text(False), "token[]"], ops["r"],
                              channel_id=channel)
            else:
                ops[c] = self("send-done", "token[]", ops["s"], channel_id=channel)
        return ops


def module(entry: IR, *others: IR, name="m", num_partitions=1, replica_count=1) -> Module:
    m = Module(name)
    m.num_partitions, m.replica_count = num_partitions, replica_count
    for c in others:
        m.add_computation(c.comp)
    m.add_computation(entry.comp, entry=True)
    return m


def add_computation() -> IR:
    add = IR("add")
    a = add("parameter", "f32[]", param=0)
    b = add("parameter", "f32[]", param=1)
    add("add", "f32[]", a, b)
    return add


def partitions(n: int) -> DeviceAssignment:
    return DeviceAssignment.default(1, n)


def ring(n: int) -> str:
    return "{" + ",".join(f"{{{i},{(i + 1) % n}}}" for i in range(n)) + "}"


# ---- valid programs ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 4])
def test_ring_of_send_recv_is_proven(n):
    e = IR("main")
    x = e("parameter", "f32[4]", param=0)
    tok = e("after-all", "token[]")
    e.p2p(1, ring(n), x, tok)
    report = check_module(module(e, num_partitions=n))
    assert report.ok, report.to_text()
    assert report.problems == []
    # recv, send, recv-done, send-done on every device
    assert all(count == 4 for count in report.events.values())
    assert "proven deadlock-free" in report.to_text()


def test_all_reduce_over_everyone_is_proven():
    add = add_computation()
    e = IR("main")
    x = e("parameter", "f32[4]", param=0)
    e("all-reduce", "f32[4]", x, replica_groups=ReplicaGroups(()), to_apply=add.comp)
    report = check_module(module(e, add, replica_count=4))
    assert report.ok and report.events == {0: 1, 1: 1, 2: 1, 3: 1}


# ---- invalid programs -------------------------------------------------------------------------

def _branching_exchange():
    """Device 0 and device 1 each wait for the other's data before sending their own."""
    b0 = IR("stage0")  # device 0: receive on channel 1 from device 1, then send on channel 2
    p = b0("parameter", "f32[4]", param=0)
    t = b0("after-all", "token[]")
    r = b0("recv", ["f32[4]", "u32[]", "token[]"], t, channel_id=1, pairs="{{1,0}}",
           name="recv.a")
    rd = b0("recv-done", ["f32[4]", "token[]"], r, channel_id=1, name="recv-done.a")
    d = b0("get-tuple-element", "f32[4]", rd, index=0)
    s = b0("send", ["f32[4]", "u32[]", "token[]"], d, t, channel_id=2, pairs="{{0,1}}",
           name="send.a")
    b0("send-done", "token[]", s, channel_id=2, name="send-done.a")
    b0("tuple", [], )
    b1 = IR("stage1")  # device 1: receive on channel 2 from device 0, then send on channel 1
    p = b1("parameter", "f32[4]", param=0)
    t = b1("after-all", "token[]")
    r = b1("recv", ["f32[4]", "u32[]", "token[]"], t, channel_id=2, pairs="{{0,1}}",
           name="recv.b")
    rd = b1("recv-done", ["f32[4]", "token[]"], r, channel_id=2, name="recv-done.b")
    d = b1("get-tuple-element", "f32[4]", rd, index=0)
    s = b1("send", ["f32[4]", "u32[]", "token[]"], d, t, channel_id=1, pairs="{{1,0}}",
           name="send.b")
    b1("send-done", "token[]", s, channel_id=1, name="send-done.b")
    b1("tuple", [])
    e = IR("main")
    x = e("parameter", "f32[4]", param=0)
    pid = e("partition-id", "u32[]")
    idx = e("convert", "s32[]", pid)
    e("conditional", [], idx, x, x, branch_computations=[b0.comp, b1.comp], name="cond.1")
    del p
    return module(e, b0, b1, num_partitions=2)


def test_two_devices_waiting_on_recv_done_is_a_deadlock_cycle():
    report = check_module(_branching_exchange())
    assert not report.ok
    (p,) = report.problems
    assert p.kind == "deadlock"
    assert sorted(p.devices) == [0, 1]
    assert {i["name"] for i in p.instructions} == {"recv-done.a", "recv-done.b"}
    text = report.to_text()
    assert "device 0 waits at recv-done.a" in text
    assert "which waits at recv-done.b" in text
    assert "branch 1 of cond.1" in text
    assert report.exit_code == 1


def test_send_without_matching_recv_is_unmatched():
    e = IR("main")
    x = e("parameter", "f32[4]", param=0)
    tok = e("after-all", "token[]")
    ops = e.p2p(3, "{{0,1}}", x, tok, order="sS")
    report = check_module(module(e, num_partitions=2))
    kinds = [p.kind for p in report.problems]
    assert kinds == ["unmatched"], report.to_text()
    p = report.problems[0]
    assert p.devices == [0, 1]
    assert p.instructions[0]["name"] == ops["s"].name
    assert "never issues a matching recv" in p.message


def test_mismatched_shapes_name_both_devices_and_the_field():
    add = add_computation()
    big, small = IR("big"), IR("small")
    for comp, dims in ((small, "f32[4]"), (big, "f32[8]")):
        p = comp("parameter", dims, param=0)
        comp("all-reduce", dims, p, replica_groups=ReplicaGroups(()), channel_id=1,
             to_apply=add.comp, name=f"all-reduce.{comp.comp.name}")
    e = IR("main")
    x4 = e("parameter", "f32[4]", param=0)
    x8 = e("parameter", "f32[8]", param=1)
    pid = e("partition-id", "u32[]")
    zero = e("constant", "u32[]", value=0)
    pred = e("compare", "pred[]", pid, zero, direction="EQ")
    e("conditional", [], pred, x4, x8, true_computation=small.comp, false_computation=big.comp)
    # Branch operands are positional: true gets operand 1, false operand 2.
    report = check_module(module(e, add, small, big, num_partitions=2))
    (p,) = report.problems
    assert p.kind == "mismatch" and p.field == "shapes"
    assert p.devices == [0, 1]
    text = p.to_text()
    assert "all-reduce.small" in text and "all-reduce.big" in text
    assert "[4]" in text and "[8]" in text and "<-- differs" in text


def test_device_assignment_changes_partition_count():
    e = IR("main")
    x = e("parameter", "f32[4]", param=0)
    tok = e("after-all", "token[]")
    e.p2p(1, "{{0,1},{1,0}}", x, tok)
    m = module(e, num_partitions=2)
    report = check_module(m, device_assignment=partitions(4))
    assert report.ok and report.num_devices == 4
    # devices 2 and 3 are in no pair: their channel ends complete at once (21a)
    assert report.events[2] == 0 and report.events[0] == 4


def test_branch_on_loop_counter_is_followed_each_iteration():
    """for i in 0..2: if i % 2 == 0: all-reduce -- folded per iteration: 2 all-reduces."""
    add = add_computation()
    with_ar, without = IR("with_ar"), IR("without")
    p = with_ar("parameter", "f32[4]", param=0)
    with_ar("all-reduce", "f32[4]", p, replica_groups=ReplicaGroups(()), to_apply=add.comp,
            name="ar.even")
    q = without("parameter", "f32[4]", param=0)
    without("copy", "f32[4]", q)
    body = IR("body")
    st = body("parameter", ["s32[]", "f32[4]"], param=0)
    i = body("get-tuple-element", "s32[]", st, index=0)
    v = body("get-tuple-element", "f32[4]", st, index=1)
    two = body("constant", "s32[]", value=2)
    zero = body("constant", "s32[]", value=0)
    rem = body("remainder", "s32[]", i, two)
    even = body("compare", "pred[]", rem, zero, direction="EQ")
    w = body("conditional", "f32[4]", even, v, v, true_computation=with_ar.comp,
             false_computation=without.comp, name="if_even")
    one = body("constant", "s32[]", value=1)
    i1 = body("add", "s32[]", i, one)
    body("tuple", ["s32[]", "f32[4]"], i1, w)
    cond = IR("cond")
    cs = cond("parameter", ["s32[]", "f32[4]"], param=0)
    ci = cond("get-tuple-element", "s32[]", cs, index=0)
    three = cond("constant", "s32[]", value=3)
    cond("compare", "pred[]", ci, three, direction="LT")
    e = IR("main")
    x = e("parameter", "f32[4]", param=0)
    z = e("constant", "s32[]", value=0)
    init = e("tuple", ["s32[]", "f32[4]"], z, x)
    e("while", ["s32[]", "f32[4]"], init, condition=cond.comp, body=body.comp, name="loop")
    report = check_module(module(e, add, with_ar, without, body, cond, replica_count=2))
    assert report.ok, report.to_text()
    ctxs = [ev.ctx for ev in report.traces[1].events]
    assert ctxs == [("iteration 1 of loop", "branch 0 of if_even"),
                    ("iteration 3 of loop", "branch 0 of if_even")]


@pytest.mark.parametrize("pairs, message", [
    (None, 'a device-to-device recv needs the frontend attribute ' + PAIRS
     + '="{{source,target},...}" to name its peers'),
    ("{{0,5}}", PAIRS + ": recv source_target_pairs={{0,5}} (2 partition ids: "
     "a module with several partitions names partition ids): partition id 5 is out of range "
     "[0, 2)"),
])
def test_channel_without_valid_peers_is_refused_naming_the_instruction(pairs, message):
    from xladist.errors import InputError

    e = IR("main")
    x = e("parameter", "f32[4]", param=0)
    tok = e("after-all", "token[]")
    ops = e.p2p(1, pairs, x, tok)
    with pytest.raises(InputError) as info:
        check_module(module(e, num_partitions=2))
    text = str(info.value)
    assert message in text and ops["r"].name in text, text


def test_a_collective_the_check_does_not_model_is_named_as_such():
    """collective-reduce (XLA 2025, no published semantics) has no trace rule. The report
    once said 'collective-reduce runs add, which communicates', blaming its scalar
    reducer; found running XLA's hlo_to_mhlo import test through `xladist check -n 2`."""
    text = ("HloModule m, replica_count=2\nadd {\n  a = f32[] parameter(0)\n"
            "  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n"
            "  x = f32[8] parameter(0)\n  ROOT r = f32[8] collective-reduce(x), "
            "replica_groups={{0,1}}, to_apply=add\n}\n")
    report = check_module(xladist.parse_hlo(text), symmetry=False)
    (p,) = report.problems
    assert p.kind == "unproven", report.to_text()
    assert "collective-reduce is a collective the check does not model" in p.message, p.message
    assert "which communicates" not in p.message
    # and the report's first line says so, not "control depends on data"
    head = report.to_text().splitlines()[0]
    assert head.endswith("(a collective the check does not model)"), head
