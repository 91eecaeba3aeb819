"""What a send/recv wait and a size mismatch say about their channel: a send/recv without
channel_id (paired by its source-target pairs) names no channel, not "channel None"."""

from xladist.collectives.p2p import _Peer, _size_mismatch
from xladist.hlo.shape import Shape


def test_a_wait_names_its_channel_and_peer():
    assert str(_Peer(0, 1, 3, "to")) == "channel 3 to device 1"
    assert str(_Peer(2, 0, None, "from")) == "from device 0"


def test_a_size_mismatch_names_its_channel_only_when_there_is_one():
    shape = Shape.array("f32", (8,))
    assert _size_mismatch(0, 16, 1, shape, 32).startswith(
        "device 0 sent 16 bytes on channel 1, but this recv expects f32[8] (32 bytes)")
    assert _size_mismatch(0, 16, None, shape, 32).startswith(
        "device 0 sent 16 bytes, but this recv expects f32[8] (32 bytes)")
