"""fft, cholesky and triangular-solve against direct formulas and numpy.linalg."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.interpreter.support import S, instr, run
from xladist.semantics.linalg import cholesky, triangular_solve


def dft_matrix(n, inverse=False):
    k = np.arange(n)
    sign = 1 if inverse else -1
    m = np.exp(sign * 2j * np.pi * np.outer(k, k) / n)
    return m / n if inverse else m


def test_fft_1d_matches_dft_definition():
    rng = np.random.RandomState(0)
    x = (rng.randn(3, 8) + 1j * rng.randn(3, 8)).astype(np.complex64)
    ins = instr("fft", S("c64", 3, 8), [S("c64", 3, 8)], fft_type="FFT", fft_length=(8,))
    got = run(ins, x)
    assert got.dtype == np.complex64
    np.testing.assert_allclose(got, x.astype(np.complex128) @ dft_matrix(8).T, rtol=1e-5,
                               atol=1e-5)


def test_ifft_2d_inverts_fft():
    rng = np.random.RandomState(1)
    x = rng.randn(2, 4, 6) + 1j * rng.randn(2, 4, 6)
    fwd = instr("fft", S("c128", 2, 4, 6), [S("c128", 2, 4, 6)], fft_type="FFT",
                fft_length=(4, 6))
    inv = instr("fft", S("c128", 2, 4, 6), [S("c128", 2, 4, 6)], fft_type="IFFT",
                fft_length=(4, 6))
    y = run(fwd, x)
    ref = np.einsum("ij,bjk,lk->bil", dft_matrix(4), x, dft_matrix(6))
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run(inv, y), x, rtol=1e-12, atol=1e-12)


def test_rfft_and_irfft_shapes_and_values():
    rng = np.random.RandomState(2)
    x = rng.randn(5, 6, 10).astype(np.float32)
    r = instr("fft", S("c64", 5, 6, 6), [S("f32", 5, 6, 10)], fft_type="RFFT",
              fft_length=(6, 10))
    y = run(r, x)
    full = np.einsum("ij,bjk,lk->bil", dft_matrix(6), x.astype(np.float64), dft_matrix(10))
    np.testing.assert_allclose(y, full[..., :6], rtol=1e-4, atol=1e-4)
    ir = instr("fft", S("f32", 5, 6, 10), [S("c64", 5, 6, 6)], fft_type="IRFFT",
               fft_length=(6, 10))
    back = run(ir, y)
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, x, rtol=1e-4, atol=1e-4)


def test_fft_3d():
    rng = np.random.RandomState(3)
    x = rng.randn(2, 3, 4) + 0j
    ins = instr("fft", S("c128", 2, 3, 4), [S("c128", 2, 3, 4)], fft_type="FFT",
                fft_length=(2, 3, 4))
    ref = np.zeros_like(x)
    for k in itertools.product(range(2), range(3), range(4)):
        for n in itertools.product(range(2), range(3), range(4)):
            phase = sum(a * b / m for a, b, m in zip(k, n, (2, 3, 4)))
            ref[k] += x[n] * np.exp(-2j * np.pi * phase)
    np.testing.assert_allclose(run(ins, x), ref, rtol=1e-12, atol=1e-12)


def test_fft_matches_corpus_case():
    # tests/data/corpus/single/fft_complex: XLA:CPU's outputs for five fft instructions
    # (read off its module.hlo); the whole-module run belongs to the corpus test.
    import json
    from pathlib import Path

    from xladist.semantics.fft import fft
    case = Path(__file__).parent.parent / "data" / "corpus" / "single" / "fft_complex"
    meta = json.loads((case / "case.json").read_text())
    z = np.load(case / "inputs.npz")["arg0"]
    expected = np.load(case / "expected.npz")
    outs = [fft(z, "FFT", (8,), np.complex64), fft(z, "IFFT", (8,), np.complex64),
            fft(z, "FFT", (4, 8), np.complex64), fft(z, "FFT", (2, 4, 8), np.complex64),
            fft(z.transpose(1, 0, 2), "IFFT", (2, 8), np.complex64).transpose(1, 0, 2)]
    for i, got in enumerate(outs):
        np.testing.assert_allclose(got, expected[f"out{i}"], rtol=meta["rtol"],
                                   atol=meta["atol"], err_msg=f"out{i}")


# ---- cholesky ----------------------------------------------------------------------------

def _spd(rng, batch, n, dtype=np.float64):
    a = rng.randn(*batch, n, n)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def test_cholesky_lower_reads_only_lower_triangle():
    rng = np.random.RandomState(4)
    a = _spd(rng, (3,), 5)
    poisoned = a + np.triu(np.full((5, 5), 1e6), 1)  # garbage above the diagonal
    ins = instr("cholesky", S("f64", 3, 5, 5), [S("f64", 3, 5, 5)], lower=True)
    l_ = run(ins, poisoned)
    np.testing.assert_allclose(l_ @ np.swapaxes(l_, -1, -2), a, rtol=1e-10)
    np.testing.assert_array_equal(np.triu(l_, 1), 0)


def test_cholesky_upper():
    rng = np.random.RandomState(5)
    a = _spd(rng, (), 4)
    poisoned = a + np.tril(np.full((4, 4), -1e6), -1)
    u = cholesky(poisoned, lower=False)
    np.testing.assert_allclose(u.T @ u, a, rtol=1e-10)
    np.testing.assert_array_equal(np.tril(u, -1), 0)


def test_cholesky_complex_and_not_positive_definite():
    rng = np.random.RandomState(6)
    b = rng.randn(3, 3) + 1j * rng.randn(3, 3)
    a = (b @ b.conj().T + 3 * np.eye(3)).astype(np.complex64)
    l_ = cholesky(a, lower=True)
    np.testing.assert_allclose(l_ @ l_.conj().T, a, rtol=1e-5, atol=1e-5)
    bad = np.array([[[1.0, 2.0], [2.0, 1.0]], [[4.0, 0.0], [0.0, 9.0]]], np.float32)
    out = cholesky(bad, lower=True)
    assert np.isnan(out[0]).all()
    np.testing.assert_allclose(out[1], [[2, 0], [0, 3]])


# ---- triangular-solve ----------------------------------------------------------------------

@pytest.mark.parametrize("left_side,lower,unit,transpose", list(itertools.product(
    [True, False], [True, False], [True, False], ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"])))
def test_triangular_solve_all_combinations(left_side, lower, unit, transpose):
    rng = np.random.RandomState(7)
    n, m = 4, 3
    a = rng.randn(2, n, n) + 1j * rng.randn(2, n, n) + 4 * np.eye(n)
    b = rng.randn(2, n, m) + 1j * rng.randn(2, n, m) if left_side else \
        rng.randn(2, m, n) + 1j * rng.randn(2, m, n)
    x = triangular_solve(a, b, left_side=left_side, lower=lower, unit_diagonal=unit,
                         transpose_a=transpose)
    # Reference: the matrix XLA reads, then an ordinary solve.
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t = t - np.diagonal(t, axis1=-2, axis2=-1)[..., None] * np.eye(n) + np.eye(n)
    op = {"NO_TRANSPOSE": t, "TRANSPOSE": np.swapaxes(t, -1, -2),
          "ADJOINT": np.swapaxes(t, -1, -2).conj()}[transpose]
    if left_side:
        np.testing.assert_allclose(op @ x, b, rtol=1e-10, atol=1e-10)
    else:
        np.testing.assert_allclose(x @ op, b, rtol=1e-10, atol=1e-10)


def test_triangular_solve_instruction_f32():
    a = np.array([[2.0, 99.0], [1.0, 4.0]], np.float32)  # 99 is outside the lower triangle
    b = np.array([[2.0], [9.0]], np.float32)
    ins = instr("triangular-solve", S("f32", 2, 1), [S("f32", 2, 2), S("f32", 2, 1)],
                left_side=True, lower=True, unit_diagonal=False, transpose_a="NO_TRANSPOSE")
    x = run(ins, a, b)
    assert x.dtype == np.float32
    np.testing.assert_allclose(x, [[1.0], [2.0]])


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_a_singular_triangular_solve_is_not_an_error(backend):
    """A zero on the diagonal: XLA:CPU returns the rows it can solve and NaN after them (its
    expander; checked with jax 0.10.2: [[1, 0.5], [nan, nan], [nan, nan]]). Both backends run
    semantics/linalg.py's trsm, which gives the solvable row exactly and no finite value
    after it; the cpu backend's own scipy solve_triangular raised 'singular matrix'."""
    import xladist
    text = ("HloModule t\nENTRY e {\n a = f32[3,3] parameter(0)\n b = f32[3,2] parameter(1)\n"
            " ROOT r = f32[3,2] triangular-solve(a, b), left_side=true, lower=true, "
            "unit_diagonal=false, transpose_a=NO_TRANSPOSE\n}\n")
    a = np.array([[2, 0, 0], [1, 0, 0], [1, 1, 4]], np.float32)
    b = np.array([[2, 1], [3, 1], [4, 1]], np.float32)
    (x,) = xladist.compile(xladist.parse_hlo(text), backend=backend)(a, b)
    np.testing.assert_array_equal(x[0], [1.0, 0.5])
    assert not np.isfinite(x[1:]).any()


@pytest.mark.parametrize("op", ["cholesky", "triangular-solve"])
def test_both_backends_give_the_same_bits(op):
    """One implementation (semantics/linalg.py) for both backends: the interpreter's own
    substitution and numpy cholesky differed from the cpu backend's scipy in the last bits."""
    import xladist
    rng = np.random.RandomState(8)
    m = rng.randn(4, 6, 6).astype(np.float32)
    if op == "cholesky":
        text = ("HloModule c\nENTRY e {\n a = f32[4,6,6] parameter(0)\n"
                " ROOT r = f32[4,6,6] cholesky(a), lower=false\n}\n")
        args = [m @ np.swapaxes(m, -1, -2) + 6 * np.eye(6, dtype=np.float32)]
    else:
        text = ("HloModule t\nENTRY e {\n a = f32[4,6,6] parameter(0)\n b = f32[4,3,6] "
                "parameter(1)\n ROOT r = f32[4,3,6] triangular-solve(a, b), left_side=false, "
                "lower=true, unit_diagonal=false, transpose_a=ADJOINT\n}\n")
        args = [m + 4 * np.eye(6, dtype=np.float32), rng.randn(4, 3, 6).astype(np.float32)]
    module = xladist.parse_hlo(text)
    (got,) = xladist.compile(module, backend="interpreter")(*args)
    (want,) = xladist.compile(module, backend="cpu")(*args)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("left_side", [True, False])
def test_triangular_solve_with_an_empty_right_hand_side(backend, left_side):
    """b with no columns (or rows): the empty solution. Both backends raised "cannot reshape
    array of size 0 into shape (3,0)" from semantics/linalg.py (found by a sweep of
    size-0 dimensions); cholesky of a batch of empty matrices shares the same reshape."""
    import xladist
    b_shape = "f32[3,0]" if left_side else "f32[0,3]"
    text = ("HloModule t\nENTRY e {\n a = f32[3,3] parameter(0)\n b = " + b_shape +
            " parameter(1)\n ROOT r = " + b_shape + " triangular-solve(a, b), left_side=" +
            ("true" if left_side else "false") + ", lower=true, transpose_a=NO_TRANSPOSE\n}\n")
    a = np.tril(np.ones((3, 3), np.float32)) + np.eye(3, dtype=np.float32)
    b = np.zeros((3, 0) if left_side else (0, 3), np.float32)
    (x,) = xladist.compile(xladist.parse_hlo(text), backend=backend)(a, b)
    assert x.shape == b.shape and x.dtype == np.float32
    c = cholesky(np.zeros((2, 0, 0), np.float32))
    assert c.shape == (2, 0, 0)
