"""The launching process and rank 0 of a conformance job (xladist/conformance/protocol.py)."""

import io

import ml_dtypes
import numpy as np
import pytest

from xladist.conformance import protocol


@pytest.mark.parametrize("items", [
    [[0], [1], [2], [3]], [[5]], [[0], [1], [2, 0], [2, 1], [3], [4], [7]], [], [[3, 2]]])
def test_work_lists_round_trip(items):
    text = protocol.encode_work(items)
    assert protocol.decode_work(text) == items
    assert len(text) < 40


def test_records_carry_arrays_of_every_type():
    buf = io.BytesIO()
    say = protocol.writer(buf)
    outputs = [[np.array([1.5, np.nan], ml_dtypes.bfloat16), np.zeros((0, 3), np.int8)]]
    say({"event": "done", "item": [3], "outputs": outputs})
    lines = buf.getvalue().splitlines(keepends=True)
    assert len(lines) == 1 and lines[0].startswith(protocol.MARK)
    record = protocol.read_line(lines[0])
    got = record["outputs"][0]
    assert got[0].dtype == outputs[0][0].dtype and got[0].tobytes() == outputs[0][0].tobytes()
    assert got[1].shape == (0, 3)
    assert protocol.read_line(b"a backend printing something\n") is None


def test_a_record_after_a_backends_print_without_a_newline_is_read():
    """A backend's print(..., end="") on rank 0 puts its text before the next record on the
    same line: the record is still read, and the text kept apart for the job's log."""
    buf = io.BytesIO()
    buf.write(b"chatty backend: running")
    protocol.writer(buf)({"event": "end"})
    text, record = protocol.split_line(buf.getvalue())
    assert record == {"event": "end"} and text == b"chatty backend: running"
    assert protocol.read_line(buf.getvalue()) == {"event": "end"}
    assert protocol.split_line(b"only a print\n") == (b"only a print\n", None)
