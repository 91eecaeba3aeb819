"""The deadlock check on send/recv grouped in one async computation (xladist/hlo/async_groups.py):
the async-start issues every transfer of the group, the async-done waits for each as a
send-done / recv-done would. Each verdict is also the independent reference checker's
(reference.py: the real interpreter on a recording device), and each program's header comment
says what it must be (docs/reference/collective-semantics.md 20-21a, F.23).
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

import xladist
from xladist.analysis.deadlock import check_module
from xladist.analysis.deadlock import trace as trace_mod
from xladist.errors import UnsupportedError
from xladist.hlo.collective_groups import DeviceAssignment

from .reference import reference_check
from .test_programs import DATA, load


def _both(name: str, n: int | None = None):
    """(the check's report, the reference's problem kinds) on the module's own devices."""
    module = load(name, n)
    da = DeviceAssignment.default(module.replica_count, 1)
    ref = reference_check(module, da, {d: [np.zeros(4, np.float32)] for d in da.devices})
    return check_module(module, budget=None), ref


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", ["async_group_exchange", "async_group_loop"])
def test_grouped_ring_is_proven(name, n):
    report, ref = _both(name, n)
    assert ref == set()
    assert report.ok and report.problems == [], report.to_text()
    assert "proven deadlock-free" in report.to_text()


@pytest.mark.parametrize("n", [2, 4])
def test_grouped_ring_in_a_loop_is_proven_by_induction(n):
    """The loop traced by induction (one period, not every iteration), as for long loops."""
    with mock.patch.object(trace_mod, "UNROLL_BELOW", 0):
        report, _ = _both("async_group_loop", n)
    assert report.ok and report.problems == [], report.to_text()
    assert "proven deadlock-free" in report.to_text()


def test_grouped_ring_waits_at_the_done():
    """Each transfer of a group ends with a wait at the async-done: 8 issues and 8 waits on
    4 devices (devices 0 and 3 send once and receive once, 1 and 2 likewise)."""
    report, _ = _both("async_group_exchange", 4)
    assert "16 communication events" in report.to_text(), report.to_text()


def test_group_with_a_host_send_proves_its_device_transfers():
    """A host transfer in a group waits for no device (fails before: a KeyError, the check
    looked for the host send's device handle)."""
    module = load("async_group_with_host_send")
    report = check_module(module, budget=None)
    assert report.ok and report.problems == [], report.to_text()
    assert "8 communication events" in report.to_text(), report.to_text()   # 4 per device


def test_group_whose_partner_is_missing_is_refused():
    report, ref = _both("async_group_missing_partner")
    assert ref == {"unmatched"}
    assert not report.ok
    (p,) = report.errors
    assert p.kind == "unmatched", report.to_text()
    assert "fwd_send" in report.to_text() and "never issues a matching recv" in report.to_text()


def test_group_done_waiting_for_a_later_recv_is_a_deadlock():
    """Fails where the async-done was taken to wait for nothing: the check proved it."""
    report, ref = _both("async_group_waits_for_later_recv")
    assert ref == {"deadlock"}
    (p,) = report.errors
    assert p.kind == "deadlock" and p.devices == [0, 1], report.to_text()
    text = report.to_text()
    assert "done (line" in text and "to issue its recv with no channel_id" in text, text


def test_a_group_its_done_cannot_complete_is_refused():
    """A send the wrapped root does not return could never be completed by the async-done."""
    text = (DATA / "async_group_missing_partner.hlo").read_text().replace(
        "tuple(%fwd_send, %bwd_send, %bwd_recv)", "tuple(%fwd_send, %bwd_recv, %bwd_recv)")
    module = xladist.parse_hlo(text)
    with pytest.raises(UnsupportedError, match=r"bwd_send in the async computation "
                                               r"wrapped_send_recv must be an element of its "
                                               r"root tuple \(once\)"):
        xladist.compile(module, "interpreter")
