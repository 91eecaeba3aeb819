"""The suite's operands (xladist/conformance/values.py): deterministic, keyed by case, and --
the property the kit's bit-exact checks rest on -- edge values whose reduction gives the same
bits in every order and over every subset of members."""

import itertools

import numpy as np
import pytest

from xladist.conformance.checks import first_difference
from xladist.conformance.emit import EDGE_LEN
from xladist.conformance.values import (ALL_TYPES, FloatBits, dtype, edge_input, fold, kind,
                                        make_input, reducers_for)


def test_inputs_are_deterministic_and_differ_between_devices_and_cases():
    a = make_input(1, 0, "case:0", (3, 4), "bf16")
    assert np.array_equal(a, make_input(1, 0, "case:0", (3, 4), "bf16"))
    assert not np.array_equal(a, make_input(1, 1, "case:0", (3, 4), "bf16"))
    assert not np.array_equal(a, make_input(1, 0, "case:1", (3, 4), "bf16"))


@pytest.mark.parametrize("dt", ALL_TYPES)
def test_every_type_gets_operands_of_its_own_type(dt):
    for values in ("small", "edge"):
        for red in [None] + reducers_for(dt):
            x = make_input(3, 1, "k", (2, 7), dt, values + (f":{red}" if red else ""))
            assert x.dtype == dtype(dt) and x.shape == (2, 7)


@pytest.mark.parametrize("dt", [t for t in ALL_TYPES if kind(t) != "pred"])
@pytest.mark.parametrize("values", ["small", "edge"])
def test_reductions_of_the_operands_do_not_depend_on_the_order(dt, values):
    """Every order and every subset of up to 8 members folds to the same bits (any NaN where
    the result is NaN): so a backend may reduce in any order and still has to match."""
    rng = np.random.default_rng(0)
    for red in reducers_for(dt):
        xs = [make_input(5, d, "k", (EDGE_LEN * 2,), dt, f"{values}:{red}") for d in range(8)]
        for size in (2, 3, 4, 8):
            members = list(rng.choice(8, size, replace=False))
            orders = list(itertools.permutations(members))
            want = fold(red, dt, [xs[m] for m in members])
            for order in [orders[k] for k in rng.choice(len(orders), min(24, len(orders)),
                                                        replace=False)]:
                got = fold(red, dt, [xs[m] for m in order])
                why = first_difference(got, want, exact="reduce")
                assert why is None, f"{dt} {values} {red} members {order}: {why}"


def _bits(a):
    return {bytes(row) for row in a.reshape(-1).view(np.uint8).reshape(a.size, -1)}


@pytest.mark.parametrize("dt", ["f16", "bf16", "f32", "f64", "f8e5m2", "f8e4m3"])
def test_movement_values_hold_what_implementations_lose(dt):
    """NaNs with payloads, a negative and a signalling NaN, +-inf, -0 and subnormals: data
    movement must carry each bit for bit."""
    fb = FloatBits(dt)
    x = np.concatenate([edge_input(d, (EDGE_LEN,), dt, None) for d in range(4)])
    with np.errstate(invalid="ignore"):
        f = x.astype(np.float64)
        nans = {b for b in _bits(x)
                if np.isnan(np.frombuffer(b, x.dtype).astype(np.float64))[0]}
    assert len(nans) >= 3, dt  # payloads and signs differ
    assert np.isinf(f).any() and (np.signbit(f) & (f == 0)).any()
    assert ((f != 0) & (np.abs(f) < fb.tiny)).any()


def test_edge_sums_tie_to_even_in_bf16():
    # 1 + half an ulp rounds to 1; (1 + ulp) + half an ulp rounds up to 1 + 2 ulp (even)
    xs = [edge_input(d, (EDGE_LEN,), "bf16", "add") for d in range(2)]
    s = fold("add", "bf16", xs).astype(np.float64)
    assert 1.0 in s and 1.0 + 2 ** -6 in s
