"""topk and sort on every float type, both backends, against XLA:CPU's own `topk` and its
stable `sort` with a TOTALORDER comparator (recorded by tools/gen_topk_xla.py into
tests/data/topk_xla_cpu.npz), and sort's TOTALORDER compare against topk: one ordering key
(semantics/order.total_order_key) serves both.

XLA:CPU widens bf16 and the 8-bit types before ordering them (in topk and in a TOTALORDER
compare alike), which costs two things the operation semantics do not promise: NaN payloads
of one sign tie (their order is by index), and values up to f16's smallest normal (2^-14)
of the 8-bit types tie with zero (its flush-to-zero). Those positions are compared as sets;
every other position bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import xladist

TABLE = np.load(Path(__file__).resolve().parent.parent / "data" / "topk_xla_cpu.npz")
TYPES = sorted({k.split(".")[1] for k in TABLE.files if k.startswith("x.")})
NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
         "f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2,
         "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "f8e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
         "f8e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz, "f8e3m4": ml_dtypes.float8_e3m4,
         "f8e4m3": ml_dtypes.float8_e4m3, "f8e8m0fnu": ml_dtypes.float8_e8m0fnu}


def _run(text, x, backend):
    return xladist.compile(xladist.parse_hlo(text), backend=backend)(x)


def _topk_module(t, n, k, largest):
    return (f"HloModule topk_{t}\nENTRY e {{\n a = {t}[{n}] parameter(0)\n"
            f" ROOT r = ({t}[{k}], s32[{k}]) topk(a), k={k}, "
            f"largest={'true' if largest else 'false'}\n}}\n")


def _loose(t, values):
    """Positions where XLA:CPU's widening decides the order (module docstring)."""
    f = values.astype(np.float64)
    loose = np.isnan(f)
    if np.dtype(NUMPY[t]).itemsize == 1:
        loose |= np.abs(f) <= 2.0 ** -14
    return loose


def _assert_order_matches(t, x, got_i, want_i, want_v, what):
    """got_i orders x as XLA's want_i does: bit for bit except where XLA:CPU's widening
    decides, where the same elements (NaNs of the same sign) fill the same run of positions.
    (XLA's values want_v carry its widening too: NaN payloads come back canonical; ours are
    the operand's bits, permuted.)"""
    same = ~np.isnan(want_v.astype(np.float64))
    np.testing.assert_array_equal(want_v[same].view(np.uint8), x[want_i][same].view(np.uint8))
    loose = _loose(t, x[want_i])
    strict = ~loose
    np.testing.assert_array_equal(got_i[strict], want_i[strict],
                                  err_msg=f"{t} {what} order differs from XLA:CPU's")
    np.testing.assert_array_equal(np.sort(got_i[loose]), np.sort(want_i[loose]))
    assert loose.sum() < x.size // 2


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize("t", TYPES)
def test_topk_matches_xla_cpu(t, largest, backend):
    dt = np.dtype(NUMPY[t])
    x = TABLE[f"x.{t}"].view(dt)
    side = "largest" if largest else "smallest"
    want_v = TABLE[f"values.{t}.{side}"].view(dt)
    want_i = TABLE[f"indices.{t}.{side}"]
    got_v, got_i = _run(_topk_module(t, x.size, x.size, largest), x, backend)
    np.testing.assert_array_equal(x[got_i].view(np.uint8), got_v.view(np.uint8))
    _assert_order_matches(t, x, got_i, want_i, want_v, "topk")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_topk_of_e8m0_puts_the_largest_exponent_first(backend):
    """f8e8m0fnu has no sign bit: 2^127 is its largest finite value (top-k once took the
    top bit for a sign and returned {1, 2})."""
    x = np.array([1, 2, 4, 2.0 ** 127], ml_dtypes.float8_e8m0fnu)
    v, i = _run(_topk_module("f8e8m0fnu", 4, 2, True), x, backend)
    assert v.astype(np.float64).tolist() == [2.0 ** 127, 4.0]
    assert i.tolist() == [3, 2]


def _sort_total_order_module(t, n):
    return (f"HloModule sort_{t}\n"
            f"gt {{\n a = {t}[] parameter(0)\n b = {t}[] parameter(1)\n"
            f" ia = s32[] parameter(2)\n ib = s32[] parameter(3)\n"
            f" ROOT c = pred[] compare(a, b), direction=GT, type=TOTALORDER\n}}\n"
            f"ENTRY e {{\n x = {t}[{n}] parameter(0)\n"
            f" i = s32[{n}] iota(), iota_dimension=0\n"
            f" ROOT s = ({t}[{n}], s32[{n}]) sort(x, i), dimensions={{0}}, is_stable=true, "
            f"to_apply=gt\n}}\n")


def _sort_module(t, n, direction):
    return _sort_total_order_module(t, n).replace("direction=GT", f"direction={direction}")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("direction", ["GT", "LT"])
@pytest.mark.parametrize("t", TYPES)
def test_sort_by_totalorder_matches_xla_cpu(t, direction, backend):
    """A stable sort of (x, iota) by `compare(a, b), direction=GT|LT, type=TOTALORDER`."""
    dt = np.dtype(NUMPY[t])
    x = TABLE[f"x.{t}"].view(dt)
    want_i = TABLE[f"sort_indices.{t}.{direction}"]
    want_v = TABLE[f"sort_values.{t}.{direction}"].view(dt)
    got_v, got_i = _run(_sort_module(t, x.size, direction), x, backend)
    np.testing.assert_array_equal(x[got_i].view(np.uint8), got_v.view(np.uint8))
    _assert_order_matches(t, x, got_i, want_i, want_v, f"sort {direction}")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("t", TYPES)
def test_sort_by_totalorder_and_topk_agree(t, backend):
    """A stable descending sort with a TOTALORDER comparator is topk(k = n), bit for bit,
    NaN payloads included: the compare and topk read one key."""
    dt = np.dtype(NUMPY[t])
    x = TABLE[f"x.{t}"].view(dt)
    _, sort_i = _run(_sort_total_order_module(t, x.size), x, backend)
    _, topk_i = _run(_topk_module(t, x.size, x.size, True), x, backend)
    np.testing.assert_array_equal(sort_i, topk_i)
