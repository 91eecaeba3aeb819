"""`xladist run` without --outputs prints each result under its label, the array indented
two spaces as a whole with numpy's row alignment (outputs_text, xladist/io.py), on one device
and per device alike.

Before: the first row started at column 0 and the later rows at column 3
("[[0. 1.]\\n   [2. 3.]]"), array2string's prefix applied to rows 2.. only."""

from __future__ import annotations

import numpy as np

from tests.cli_util import xladist_cli

MODULE = """HloModule twice

ENTRY e {
  p = f32[2,3] parameter(0)
  ROOT r = f32[2,3] add(p, p)
}
"""

X = np.array([[0, 1, 2], [3, 4, 5]], np.float32) / 4

# 2 * X: what numpy prints for it, written out by hand under the label.
BLOCK = ("out0: float32[2, 3]\n"
         "  [[0.  0.5 1. ]\n"
         "   [1.5 2.  2.5]]\n")


def test_one_device(tmp_path):
    (tmp_path / "m.hlo").write_text(MODULE)
    np.savez(tmp_path / "in.npz", arg0=X)
    proc = xladist_cli("run", tmp_path / "m.hlo", "--inputs", tmp_path / "in.npz")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == BLOCK


def test_two_devices(tmp_path):
    (tmp_path / "m.hlo").write_text(MODULE)
    np.savez(tmp_path / "in.npz", arg0=np.stack([X, X]))
    proc = xladist_cli("run", tmp_path / "m.hlo", "-n", "2", "--inputs", tmp_path / "in.npz",
                       "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"device 0:\n{BLOCK}device 1:\n{BLOCK}"


def test_scalars_and_three_dimensions():
    from xladist.io import outputs_text
    assert outputs_text([np.int32(7), np.arange(8, dtype=np.int8).reshape(2, 2, 2)]) == (
        "out0: int32[]\n"
        "  7\n"
        "out1: int8[2, 2, 2]\n"
        "  [[[0 1]\n"
        "    [2 3]]\n"
        "\n"
        "   [[4 5]\n"
        "    [6 7]]]\n")
