"""Which send pairs with which recv (xladist/hlo/collective_groups.py SendRecvStreams).

The rule, worked out by hand: a channel_id carried by both a device-to-device send and a
device-to-device recv of the module is its own stream; every other send or recv (its channel
holds one kind of end only, as XLA's pipeliner writes sends on one channel and recvs on
another) is in the one PEER_ORDER stream, paired by peers and program order. Host transfers
take no part. Tags number the streams the same way on every rank.
"""

from __future__ import annotations

import xladist
from xladist.hlo.collective_groups import PEER_ORDER, SendRecvStreams

PAIRS = '_xla_send_recv_source_target_pairs="{{0,1}}"'


def _module(ends: list[tuple[str, int | None, bool]]) -> xladist.hlo.ir.Module:
    """A module with one send or recv per (opcode, channel_id, is_host_transfer)."""
    lines = ["%x = f32[2]{0} parameter(0)", "%t = token[] after-all()"]
    for k, (op, channel, host) in enumerate(ends):
        attrs = "" if channel is None else f", channel_id={channel}"
        attrs += ", is_host_transfer=true" if host else f", frontend_attributes={{{PAIRS}}}"
        if op == "send":
            lines += [f"%s{k} = (f32[2]{{0}}, u32[], token[]) send(%x, %t){attrs}",
                      f"%d{k} = token[] send-done(%s{k}){attrs.split(', frontend')[0]}"]
        else:
            lines += [f"%s{k} = (f32[2]{{0}}, u32[], token[]) recv(%t){attrs}",
                      f"%d{k} = (f32[2]{{0}}, token[]) recv-done(%s{k})"
                      f"{attrs.split(', frontend')[0]}"]
    lines.append("ROOT %out = f32[2]{0} copy(%x)")
    text = ("HloModule m, num_partitions=2\n\nENTRY %main (x: f32[2]) -> f32[2] {\n  "
            + "\n  ".join(lines) + "\n}\n")
    return xladist.parse_hlo(text)


def _by_name(module):
    streams = SendRecvStreams(module)
    return {i.name: (streams.key(i), streams.tag(i)) for i in module.entry.instructions
            if i.opcode in ("send", "recv")}


def test_a_channel_with_both_ends_is_its_own_stream():
    got = _by_name(_module([("send", 3, False), ("recv", 3, False)]))
    assert got == {"s0": (3, 1), "s1": (3, 1)}


def test_one_ended_channels_share_the_peer_order_stream():
    # XLA's pipeliner: the sends on channel 1, the recvs on channel 2.
    got = _by_name(_module([("send", 1, False), ("recv", 2, False)]))
    assert got == {"s0": (PEER_ORDER, 0), "s1": (PEER_ORDER, 0)}


def test_mixed_channels_and_no_channel_id():
    got = _by_name(_module([("send", 7, False), ("recv", 7, False), ("send", 1, False),
                            ("recv", 2, False), ("send", None, False), ("recv", None, False),
                            ("send", 5, False), ("recv", 5, True)]))
    # Streams 7 and None pair by channel (None first, then 7); 1, 2 and 5 (whose only recv
    # is a host transfer) pair by peers and order.
    assert got["s0"] == got["s1"] == (7, 2)
    assert got["s4"] == got["s5"] == (None, 1)
    assert got["s2"] == got["s3"] == got["s6"] == (PEER_ORDER, 0)
    assert got["s7"] == (PEER_ORDER, 0)   # the host recv is never asked; the rule is total


def test_describe_names_the_channel_and_the_rule():
    assert SendRecvStreams.describe(3) == "channel 3"
    assert SendRecvStreams.describe(None) == "no channel_id"
    text = SendRecvStreams.describe(PEER_ORDER, 2)
    assert text.startswith("channel 2 (") and "peers and program order" in text
