"""The scheduler: data and control order, channel chains, collectives kept out of chains.

Expected orders are written out by hand from the rules in xladist/analysis/schedule.py (recv, send,
recv-done, send-done for a channel with one recv and one send in the computation, as XLA's
P2PSchedulePreparation; chains serialized; earliest text position first otherwise). A module
with is_scheduled=true keeps its order when the dependencies allow it: the deadlock check
judges that order (XLA runs scheduled modules as written).
"""

from __future__ import annotations


import pytest

import xladist
from xladist.analysis.schedule import (
    ScheduleError,
    channel_chains,
    check_order,
    schedule_computation,
    schedule_module,
)
from tests.analysis.deadlock.test_core import IR, add_computation, module
from xladist.analysis.deadlock import check_module
from xladist.hlo.attrs import ReplicaGroups
from tests.paths import TESTS

ALL = ReplicaGroups(())


def names(order):
    return [i.name for i in order]


def _p2p(e: IR, channel, data, tok, kind, name):
    pairs = "{{0,1},{1,0}}"
    if kind == "recv":
        return e("recv", ["f32[4]", "u32[]", "token[]"], tok, channel_id=channel, pairs=pairs,
                 name=name)
    if kind == "send":
        return e("send", ["f32[4]", "u32[]", "token[]"], data, tok, channel_id=channel,
                 pairs=pairs, name=name)
    if kind == "recv-done":
        return e("recv-done", ["f32[4]", "token[]"], data, channel_id=channel, name=name)
    return e("send-done", "token[]", data, channel_id=channel, name=name)


def test_send_written_first_is_scheduled_after_its_recv():
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    tok = e("after-all", "token[]", name="tok")
    s = _p2p(e, 1, x, tok, "send", "s1")
    r = _p2p(e, 1, None, tok, "recv", "r1")
    _p2p(e, 1, s, None, "send-done", "sd1")
    _p2p(e, 1, r, None, "recv-done", "rd1")
    order = schedule_computation(e.comp)
    assert names(order) == ["x", "tok", "r1", "s1", "rd1", "sd1"]


def test_two_interleaved_channels_become_two_serial_chains():
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    tok = e("after-all", "token[]", name="tok")
    r1 = _p2p(e, 1, None, tok, "recv", "r1")
    r2 = _p2p(e, 2, None, tok, "recv", "r2")
    s1 = _p2p(e, 1, x, tok, "send", "s1")
    s2 = _p2p(e, 2, x, tok, "send", "s2")
    _p2p(e, 1, r1, None, "recv-done", "rd1")
    _p2p(e, 2, r2, None, "recv-done", "rd2")
    _p2p(e, 1, s1, None, "send-done", "sd1")
    _p2p(e, 2, s2, None, "send-done", "sd2")
    chains = channel_chains(e.comp)
    assert [names(c.members) for c in chains] == [["r1", "s1", "rd1", "sd1"],
                                                   ["r2", "s2", "rd2", "sd2"]]
    order = names(schedule_computation(e.comp))
    assert order == ["x", "tok", "r1", "s1", "rd1", "sd1", "r2", "s2", "rd2", "sd2"]
    # The text order interleaves the chains: a given schedule may (issue 30 item 7; XLA runs
    # collective_ops_test.cc SendRecv_TwoConcurrentChains that way), the deadlock check
    # judges it.
    check_order(e.comp)


def test_a_channel_with_two_exchanges_or_one_kind_of_end_forms_no_chain():
    """XLA's P2PSchedulePreparation chains only a channel with one recv and one send in the
    computation; the others keep the order of their dependencies (issue 30 item 8: a
    pipelined loop without channel ids whose sends come before their recvs)."""
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    tok = e("after-all", "token[]", name="tok")
    s1 = _p2p(e, None, x, tok, "send", "s1")
    sd1 = _p2p(e, None, s1, None, "send-done", "sd1")
    r1 = e("recv", ["f32[4]", "u32[]", "token[]"], tok, pairs="{{1,0}}", name="r1",
           preds=[sd1])
    rd1 = _p2p(e, None, r1, None, "recv-done", "rd1")
    s2 = e("send", ["f32[4]", "u32[]", "token[]"], x, tok, pairs="{{1,0}}", name="s2",
           preds=[rd1])
    sd2 = _p2p(e, None, s2, None, "send-done", "sd2")
    r2 = _p2p(e, None, None, tok, "recv", "r2")
    r2.control_predecessors = [sd2]
    _p2p(e, None, r2, None, "recv-done", "rd2")
    assert channel_chains(e.comp) == []
    order = ["x", "tok", "s1", "sd1", "r1", "rd1", "s2", "sd2", "r2", "rd2"]
    assert names(schedule_computation(e.comp)) == order
    e2 = IR("main")
    x = e2("parameter", "f32[4]", param=0, name="x")
    tok = e2("after-all", "token[]", name="tok")
    s = _p2p(e2, 1, x, tok, "send", "s1")
    r = _p2p(e2, 2, None, tok, "recv", "r2")
    _p2p(e2, 1, s, None, "send-done", "sd1")
    _p2p(e2, 2, r, None, "recv-done", "rd2")
    assert channel_chains(e2.comp) == []
    assert names(schedule_computation(e2.comp)) == ["x", "tok", "s1", "r2", "sd1", "rd2"]


def test_independent_collective_is_moved_out_of_the_chain():
    add = add_computation()
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    tok = e("after-all", "token[]", name="tok")
    r = _p2p(e, 1, None, tok, "recv", "r1")
    e("all-reduce", "f32[4]", x, replica_groups=ALL, to_apply=add.comp, name="ar")
    s = _p2p(e, 1, x, tok, "send", "s1")
    _p2p(e, 1, r, None, "recv-done", "rd1")
    _p2p(e, 1, s, None, "send-done", "sd1")
    assert names(schedule_computation(e.comp)) == ["x", "tok", "r1", "s1", "rd1", "sd1", "ar"]


def test_collective_needed_by_the_chain_goes_before_it():
    add = add_computation()
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    tok = e("after-all", "token[]", name="tok")
    r = _p2p(e, 1, None, tok, "recv", "r1")
    ar = e("all-reduce", "f32[4]", x, replica_groups=ALL, to_apply=add.comp, name="ar")
    s = _p2p(e, 1, ar, tok, "send", "s1")  # the send's data is the all-reduce's result
    _p2p(e, 1, r, None, "recv-done", "rd1")
    _p2p(e, 1, s, None, "send-done", "sd1")
    assert names(schedule_computation(e.comp)) == ["x", "tok", "ar", "r1", "s1", "rd1", "sd1"]


def test_collective_forced_inside_a_chain_is_an_error_naming_it():
    add = add_computation()
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    tok = e("after-all", "token[]", name="tok")
    r = _p2p(e, 1, None, tok, "recv", "r1")
    # ar must follow r1 (control predecessor) and precede s1 (its data): inside the chain.
    ar = e("all-reduce", "f32[4]", x, replica_groups=ALL, to_apply=add.comp, name="ar",
           preds=[r])
    s = _p2p(e, 1, ar, tok, "send", "s1")
    _p2p(e, 1, r, None, "recv-done", "rd1")
    _p2p(e, 1, s, None, "send-done", "sd1")
    with pytest.raises(ScheduleError) as err:
        schedule_computation(e.comp)
    msg = str(err.value)
    assert "ar (line" in msg and "has to run inside channel 1 chain r1" in msg
    assert err.value.exit_code == 2


def test_send_needing_its_own_recv_done_is_a_cycle_naming_the_edges():
    e = IR("main")
    tok = e("after-all", "token[]", name="tok")
    r = _p2p(e, 1, None, tok, "recv", "r1")
    rd = _p2p(e, 1, r, None, "recv-done", "rd1")
    data = e("get-tuple-element", "f32[4]", rd, index=0, name="data")
    s = _p2p(e, 1, data, tok, "send", "s1")
    _p2p(e, 1, s, None, "send-done", "sd1")
    with pytest.raises(ScheduleError) as err:
        schedule_computation(e.comp)
    msg = str(err.value)
    assert "cycle" in msg
    assert "s1 (line" in msg and "must run before rd1" in msg
    assert "rd1 (line" in msg and "must run before data" in msg


def test_control_predecessor_defined_later_in_text_runs_first():
    e = IR("main")
    a = e("constant", "f32[]", value=1.0, name="a")
    b = e("constant", "f32[]", value=2.0, name="b")
    a.control_predecessors = [b]
    e("add", "f32[]", a, b, name="c")
    assert names(schedule_computation(e.comp)) == ["b", "a", "c"]
    with pytest.raises(ScheduleError, match="runs a .* before b"):
        check_order(e.comp)


def test_async_start_precedes_done_and_compute_overlaps():
    add = add_computation()
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    start = e("all-reduce-start", "f32[4]", x, replica_groups=ALL, to_apply=add.comp,
              name="start")
    work = e("multiply", "f32[4]", x, x, name="work")
    done = e("all-reduce-done", "f32[4]", start, name="done")
    e("add", "f32[4]", done, work, name="out")
    assert names(schedule_computation(e.comp)) == ["x", "start", "work", "done", "out"]


def test_scheduled_module_keeps_its_order_and_unscheduled_is_scheduled():
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    tok = e("after-all", "token[]", name="tok")
    s = _p2p(e, 1, x, tok, "send", "s1")
    r = _p2p(e, 1, None, tok, "recv", "r1")
    _p2p(e, 1, r, None, "recv-done", "rd1")
    _p2p(e, 1, s, None, "send-done", "sd1")
    m = module(e, num_partitions=2)
    assert names(schedule_module(m)[e.comp]) == ["x", "tok", "r1", "s1", "rd1", "sd1"]
    assert check_module(m).ok
    m.is_scheduled = True
    assert names(schedule_module(m)[e.comp]) == ["x", "tok", "s1", "r1", "rd1", "sd1"]
    # Issuing the send first is fine: only the dones wait.
    assert check_module(m).ok


def test_a_scheduled_order_that_hangs_is_the_checks_to_refuse():
    """send-done before the recv is even posted, on both devices of an exchange: the
    scheduler keeps the given order (dependencies allow it), the check finds the cycle."""
    e = IR("main")
    x = e("parameter", "f32[4]", param=0, name="x")
    tok = e("after-all", "token[]", name="tok")
    s = _p2p(e, 1, x, tok, "send", "s1")
    _p2p(e, 1, s, None, "send-done", "sd1")
    r = _p2p(e, 1, None, tok, "recv", "r1")
    _p2p(e, 1, r, None, "recv-done", "rd1")
    m = module(e, num_partitions=2)
    m.is_scheduled = True
    assert names(schedule_module(m)[e.comp]) == ["x", "tok", "s1", "sd1", "r1", "rd1"]
    report = check_module(m)
    assert [p.kind for p in report.problems] == ["deadlock"], report.to_text()


CORPUS = TESTS / "data" / "corpus" / "jax"


@pytest.mark.parametrize("case", sorted(p.name for p in CORPUS.iterdir() if p.is_dir()))
def test_corpus_schedule_is_kept(case):
    """XLA's own schedules (is_scheduled=true) pass the check and the scheduler reproduces them."""
    m = xladist.load_hlo(CORPUS / case / "module.hlo")
    assert m.is_scheduled
    for comp, order in schedule_module(m).items():
        assert order == comp.instructions
        assert schedule_computation(comp) == comp.instructions


def test_an_async_group_done_waits_across_devices_so_it_leaves_a_chain():
    """The async-done of a send/recv group (xladist/hlo/async_groups.py) waits for its
    transfers: like any cross-device op it goes before or after a channel chain, never inside
    it (before, it was taken as local and stayed where the text put it, inside the chain)."""
    t3 = "(f32[4], u32[], token[])"
    pairs = 'frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,0}}"}'
    text = f"""HloModule m, replica_count=2
group {{
  a = f32[4] parameter(0)
  t = token[] parameter(1)
  s = {t3} send(a, t), {pairs}
  r = {t3} recv(t), {pairs}
  ROOT g = ({t3}, {t3}) tuple(s, r)
}}
ENTRY e {{
  x = f32[4] parameter(0)
  t = token[] after-all()
  start = ((f32[4], token[]), ({t3}, {t3}), s32[]) async-start(x, t), calls=group
  recv.1 = {t3} recv(t), channel_id=1, {pairs}
  send.1 = {t3} send(x, t), channel_id=1, {pairs}
  done = ({t3}, {t3}) async-done(start)
  recv-done.1 = (f32[4], token[]) recv-done(recv.1), channel_id=1
  send-done.1 = token[] send-done(send.1), channel_id=1
  got = f32[4] get-tuple-element(recv-done.1), index=0
  r = {t3} get-tuple-element(done), index=1
  rd = f32[4] get-tuple-element(r), index=0
  ROOT out = f32[4] add(got, rd)
}}
"""
    m = xladist.parse_hlo(text)
    xladist.verify(m)
    order = names(schedule_module(m)[m.entry])
    chain = [order.index(n) for n in ("recv.1", "send.1", "recv-done.1", "send-done.1")]
    assert chain == sorted(chain)
    assert not chain[0] < order.index("done") < chain[-1], order
    assert check_module(m, budget=None).ok
