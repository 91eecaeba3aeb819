"""rng-bit-generator bit-exactness (corpus + published ThreeFry/Philox vectors), rng."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.interpreter.support import S, StandInEvaluator, instr, run
from xladist.errors import VerifierError
from xladist.hlo.shape import Shape
from xladist.semantics.rng import philox4x32, rng_bit_generator, threefry2x32
from tests.optional import need_jax

CASE = Path(__file__).parent.parent / "data" / "corpus" / "single" / "rng_bit_generator_algorithms"


def _corpus():
    inputs = np.load(CASE / "inputs.npz")
    expected = np.load(CASE / "expected.npz")
    return inputs["arg0"], expected


# (algorithm, bits dtype, dims, state source, expected output index of the state)
# read off module.hlo: each rng-bit-generator's state feeds from the key or a prior state.
_CORPUS_CALLS = [
    ("rng_three_fry", np.uint32, (3, 5), "key", 0),
    ("rng_philox", np.uint32, (3, 5), "key", 2),
    ("rng_philox", np.uint8, (17,), "out2", 4),
    ("rng_three_fry", np.uint16, (2, 3), "key", 6),
    ("rng_default", np.uint32, (4,), "key", 8),
]


@pytest.mark.parametrize("algorithm,dtype,dims,source,out", _CORPUS_CALLS,
                         ids=[f"{a}-{np.dtype(d).name}-{'x'.join(map(str, s))}"
                              for a, d, s, _, _ in _CORPUS_CALLS])
def test_rng_bit_generator_matches_xla_corpus(algorithm, dtype, dims, source, out):
    key, expected = _corpus()
    state = (key if source == "key" else expected[source]).view(np.uint64)
    ins = instr("rng-bit-generator",
                Shape.tuple_of([S("u64", 2), Shape.array(np.dtype(dtype).name.replace(
                    "uint", "u"), dims)]), [S("u64", 2)], algorithm=algorithm)
    new_state, bits = run(ins, state)
    assert new_state.dtype == np.uint64 and new_state.shape == (2,)
    np.testing.assert_array_equal(new_state.view(np.uint32), expected[f"out{out}"])
    assert bits.dtype == dtype and bits.shape == dims
    np.testing.assert_array_equal(bits, expected[f"out{out + 1}"])


def test_corpus_case_is_what_the_table_says():
    # Guards the hand-read table above against the module text.
    text = (CASE / "module.hlo").read_text()
    assert text.count("rng-bit-generator(") == len(_CORPUS_CALLS)
    meta = json.loads((CASE / "case.json").read_text())
    assert meta["num_outputs"] == 2 * len(_CORPUS_CALLS)


def test_threefry2x32_known_answer_vectors():
    # Random123's published known-answer tests for threefry2x32_20.
    x0, x1 = threefry2x32(np.array([0], np.uint32), np.array([0], np.uint32), 0, 0)
    assert (int(x0[0]), int(x1[0])) == (0x6B200159, 0x99BA4EFE)
    m = 0xFFFFFFFF
    x0, x1 = threefry2x32(np.array([m], np.uint32), np.array([m], np.uint32), m, m)
    assert (int(x0[0]), int(x1[0])) == (0x1CB996FC, 0xBB002BE7)
    x0, x1 = threefry2x32(np.array([0x243F6A88], np.uint32), np.array([0x85A308D3], np.uint32),
                          0x13198A2E, 0x03707344)
    assert (int(x0[0]), int(x1[0])) == (0xC4923A9C, 0x483DF7A0)


def test_philox4x32_known_answer_vectors():
    # Random123's published known-answer tests for philox4x32_10.
    z = [np.array([0], np.uint32)] * 4
    out = philox4x32(z, 0, 0)
    assert [int(w[0]) for w in out] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    ctr = [np.array([v], np.uint32) for v in (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344)]
    out = philox4x32(ctr, 0xA4093822, 0x299F31D0)
    assert [int(w[0]) for w in out] == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_threefry_counter_wraps_and_state_advances_by_half_size():
    state = np.array([7, 2**64 - 2], np.uint64)
    new, _ = rng_bit_generator(state, "rng_three_fry", np.uint32, (4, 3))
    assert int(new[0]) == 7 and int(new[1]) == (2**64 - 2 + 6) % 2**64
    # 64-bit outputs: one counter per element.
    new64, _ = rng_bit_generator(state, "rng_three_fry", np.uint64, (4, 3))
    assert int(new64[1]) == (2**64 - 2 + 12) % 2**64


def test_philox_wide_state_carries_into_high_word():
    state = np.array([1, 2**64 - 1, 5], np.uint64)
    new, bits = rng_bit_generator(state, "rng_philox", np.uint32, (9,))
    assert [int(v) for v in new] == [1, 2, 6]  # 3 blocks: low wraps, high gets the carry
    assert bits.shape == (9,)


def test_signed_output_is_the_same_bits():
    state = np.array([3, 4], np.uint64)
    _, u = rng_bit_generator(state, "rng_philox", np.uint32, (5,))
    _, s = rng_bit_generator(state, "rng_philox", np.int32, (5,))
    np.testing.assert_array_equal(u.view(np.int32), s)


@pytest.mark.slow
def test_matches_jax_for_many_shapes():
    jax = need_jax()
    # u64 results need x64; jax's config is process-wide, so it is restored afterwards (left
    # on, it turned later tests' float64 arguments into f64 parameters: test_jax_export).
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        _compare_with_jax(jax)
    finally:
        jax.config.update("jax_enable_x64", x64)


def _compare_with_jax(jax):
    import jax.numpy as jnp
    algs = {"rng_three_fry": jax.lax.RandomAlgorithm.RNG_THREE_FRY,
            "rng_philox": jax.lax.RandomAlgorithm.RNG_PHILOX}
    rs = np.random.RandomState(1)
    for name, alg in algs.items():
        for dtype in (np.uint32, np.uint64, np.uint8, np.uint16):
            for dims in ((), (1,), (7,), (5, 3), (3, 1, 4)):
                state = rs.randint(0, 2**32, size=4).astype(np.uint32).view(np.uint64)
                js, jb = jax.lax.rng_bit_generator(jnp.asarray(state), dims, dtype=dtype,
                                                   algorithm=alg)
                ns, b = rng_bit_generator(state, name, dtype, dims)
                np.testing.assert_array_equal(ns, np.asarray(js), err_msg=f"{name} {dims}")
                np.testing.assert_array_equal(b, np.asarray(jb), err_msg=f"{name} {dims}")


def test_rng_uniform_is_in_range_and_deterministic():
    ins = instr("rng", S("f32", 1000), [S("f32"), S("f32")], distribution="rng_uniform")
    a = run(ins, np.float32(2), np.float32(3), ev=StandInEvaluator())
    b = run(ins, np.float32(2), np.float32(3), ev=StandInEvaluator())
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and a.min() >= 2 and a.max() < 3
    assert 2.4 < a.mean() < 2.6
    ev = StandInEvaluator()
    first, second = run(ins, np.float32(2), np.float32(3), ev=ev), \
        run(ins, np.float32(2), np.float32(3), ev=ev)
    assert not np.array_equal(first, second)  # a loop draws fresh numbers


def test_rng_uniform_integers_half_open():
    ins = instr("rng", S("s32", 500), [S("s32"), S("s32")], distribution="rng_uniform")
    a = run(ins, np.int32(-3), np.int32(2))
    assert a.dtype == np.int32 and set(np.unique(a)) == {-3, -2, -1, 0, 1}


def test_rng_normal_moments():
    ins = instr("rng", S("f64", 20000), [S("f64"), S("f64")], distribution="rng_normal")
    a = run(ins, np.float64(1.0), np.float64(2.0))
    assert abs(a.mean() - 1.0) < 0.1 and abs(a.std() - 2.0) < 0.1


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("algorithm", ["rng_three_fry", "rng_philox"])
def test_a_state_without_a_counter_is_refused_by_both_backends(backend, algorithm):
    """One state check (hlo/shape_inference/control.rng_state_problem, semantics/rng's
    state_problem) for the verifier and both backends: the cpu backend's own ThreeFry once
    indexed state[1] of a u64[1] state (an internal IndexError), and so did both backends'
    Philox until the verifier refused it, as XLA cannot run it either."""
    import xladist
    text = ("HloModule r\nENTRY e {\n s = u64[1] parameter(0)\n"
            f" ROOT r = (u64[1], u32[4]) rng-bit-generator(s), algorithm={algorithm}\n}}\n")
    with pytest.raises(VerifierError, match=rf"{algorithm} needs a u64\[2\].* state"):
        xladist.compile(xladist.parse_hlo(text), backend=backend)(np.array([1], np.uint64))


def _rng_module(t: str, n: int, dist: str) -> str:
    return (f"HloModule r\nENTRY e {{\n a = {t}[] parameter(0)\n b = {t}[] parameter(1)\n"
            f" ROOT r = {t}[{n}] rng(a, b), distribution={dist}\n}}\n")


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_rng_distributions_hold_on_both_backends(backend):
    """One rule for rng's distributions (semantics/rng.rng_values) on both backends. Found
    running XLA's hlo_to_mhlo import test (test_rng_normal) with a random sigma: the cpu
    backend's own copy of the rule failed `scale < 0` on a negative sigma (XLA computes
    mu + sigma * z, valid for any sign) and `low >= high` on an empty integer range, and
    both backends let an f16 uniform reach b, outside XLA's [a, b)."""
    import xladist

    def run_on(t, n, dist, a, b):
        m = xladist.parse_hlo(_rng_module(t, n, dist))
        return np.asarray(xladist.compile(m, backend=backend)(a, b)[0])

    z = run_on("f64", 20000, "rng_normal", np.float64(1.0), np.float64(-2.0))
    assert abs(z.mean() - 1.0) < 0.1 and abs(z.std() - 2.0) < 0.1
    same = run_on("s32", 50, "rng_uniform", np.int32(5), np.int32(5))
    np.testing.assert_array_equal(same, np.full(50, 5, np.int32))  # b <= a: a, as XLA:CPU
    h = run_on("f16", 200000, "rng_uniform", np.float16(0), np.float16(1))
    assert h.dtype == np.float16 and h.min() >= 0 and h.max() < 1  # [a, b) in f16 too
