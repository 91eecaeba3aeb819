"""How the kit compares (xladist/conformance/checks.py) and what a failure says."""

import ml_dtypes
import numpy as np
import pytest

from xladist.conformance.checks import first_difference


def _f32(*bits):
    return np.array(bits, np.uint32).view(np.float32)


def test_equal_arrays_match_and_empty_ones_too():
    a = np.arange(6, dtype=np.int8).reshape(2, 3)
    assert first_difference(a, a.copy()) is None
    assert first_difference(np.zeros((0, 3)), np.zeros((0, 3))) is None


def test_type_and_dims_are_named():
    assert "element type int16, expected int8" in first_difference(np.zeros(2, np.int16),
                                                                   np.zeros(2, np.int8))
    assert "dims [3], expected [2]" in first_difference(np.zeros(3), np.zeros(2))


def test_the_first_differing_element_with_its_bits_and_the_count():
    want = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = want.copy()
    got[1, 2] = -0.0
    got[2, 0] = 5
    why = first_difference(got, want)
    assert why.startswith("element [1,2]: got -0.0 (0x80000000), expected 6.0 (0x40c00000)")
    assert "(2 of 12 elements differ)" in why


def test_nan_payloads_and_signs_count_for_data_movement():
    quiet, payload = _f32(0x7FC00000), _f32(0x7FC00005)
    assert first_difference(quiet, payload) == (
        "element [0]: got nan (0x7fc00000), expected nan (0x7fc00005)")
    assert first_difference(np.float32([0.0]), np.float32([-0.0])) is not None


def test_a_reduction_may_return_any_nan_where_nan_is_expected():
    want = _f32(0x7FC00005, 0x3F800000)
    assert first_difference(_f32(0xFFC00000, 0x3F800000), want, exact="reduce") is None
    # ... but not a number where NaN is expected, nor NaN where a number is
    assert first_difference(_f32(0x3F800000, 0x3F800000), want, exact="reduce")
    assert first_difference(_f32(0x7FC00005, 0x7FC00000), want, exact="reduce")
    # the sign of zero still counts for real reductions
    assert first_difference(np.float32([0.0]), np.float32([-0.0]), exact="reduce")


def test_bf16_and_complex_reductions():
    bf = np.array([1.0, np.nan], ml_dtypes.bfloat16)
    assert first_difference(bf, bf.copy()) is None
    assert "0x3f80" in first_difference(np.array([2.0, np.nan], ml_dtypes.bfloat16), bf)
    c = np.array([complex(0.0, -0.0)], np.complex64)
    assert first_difference(c, np.array([0j], np.complex64))  # bits differ
    assert first_difference(c, np.array([0j], np.complex64), exact="reduce") is None


@pytest.mark.parametrize("got,ok", [(1.0 + 1e-6, True), (1.1, False), (np.nan, False)])
def test_tolerances_compare_values(got, ok):
    why = first_difference(np.float32([got]), np.float32([1.0]), tolerance=(1e-5, 0))
    assert (why is None) == ok
