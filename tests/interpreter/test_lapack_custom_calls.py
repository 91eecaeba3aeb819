"""jax's CPU LAPACK custom-calls (xladist/semantics/lapack.py) on both backends, checked
against properties and numpy.linalg rather than against scipy's LAPACK itself: the solve
satisfies op(a) x = b, the factor rebuilds the matrix, the eigen/singular values are
numpy's. The HLO is what jax 0.10 emits (typed FFI, backend_config bytes as chars)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import xladist

BACKENDS = ["interpreter", "cpu"]


def _run(backend, params, result, call, *args):
    """One custom-call instruction `call` (its text after `=`) over parameters `params`."""
    decls = "\n".join(f"  p{i} = {t} parameter({i})" for i, t in enumerate(params))
    ops = ", ".join(f"p{i}" for i in range(len(params)))
    text = f"HloModule m\nENTRY main {{\n{decls}\n  ROOT r = {result} custom-call({ops}), " \
           f"{call}, api_version=API_VERSION_TYPED_FFI\n}}\n"
    return xladist.compile(xladist.parse_hlo(text), backend=backend)(*args)


def _cfg(**chars):
    return "backend_config={" + ", ".join(f"{k} = {ord(v)} : ui8" for k, v in chars.items()) \
        + "}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_trsm_every_side_uplo_transpose_and_diagonal(backend):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((4, 4)) + 4 * np.eye(4)).astype(np.float32)
    for side, uplo, trans, diag in itertools.product("LR", "LU", "NT", "NU"):
        b = rng.standard_normal((4, 3) if side == "L" else (3, 4)).astype(np.float32)
        (x,) = _run(backend, ["f32[4,4]", f"f32[{b.shape[0]},{b.shape[1]}]"],
                    f"f32[{b.shape[0]},{b.shape[1]}]",
                    'custom_call_target="lapack_strsm_ffi", '
                    + _cfg(diag=diag, side=side, trans_x=trans, uplo=uplo), a, b)
        t = np.tril(a) if uplo == "L" else np.triu(a)
        if diag == "U":
            np.fill_diagonal(t, 1.0)
        op = t.T if trans == "T" else t
        back = op @ x if side == "L" else x @ op
        np.testing.assert_allclose(back, b, rtol=1e-4, atol=1e-4,
                                   err_msg=f"side={side} uplo={uplo} trans={trans} diag={diag}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_potrf_batched_keeps_the_other_triangle_and_reports_info(backend):
    rng = np.random.default_rng(1)
    m = rng.standard_normal((2, 3, 3))
    a = (m @ m.transpose(0, 2, 1) + 3 * np.eye(3)).astype(np.float64)
    a[1] = -np.eye(3)  # not positive definite: LAPACK stops at column 1
    factor, info = _run(backend, ["f64[2,3,3]"], "(f64[2,3,3], s32[2])",
                        'custom_call_target="lapack_dpotrf_ffi", ' + _cfg(uplo="L"), a)
    np.testing.assert_allclose(np.tril(factor[0]), np.linalg.cholesky(a[0]), rtol=1e-12)
    np.testing.assert_array_equal(np.triu(factor[0], 1), np.triu(a[0], 1))
    np.testing.assert_array_equal(info, [0, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_getrf_pivots_are_one_based_and_rebuild_the_matrix(backend):
    a = np.array([[1.0, 2, 3], [4, 5, 6], [7, 8, 10]], np.float32)
    lu, piv, info = _run(backend, ["f32[3,3]"], "(f32[3,3], s32[3], s32[])",
                         'custom_call_target="lapack_sgetrf_ffi", backend_config={}', a)
    assert info == 0 and piv[0] == 3  # row 3 (1-based) has the largest first entry
    perm = np.arange(3)
    for i, p in enumerate(piv - 1):
        perm[[i, p]] = perm[[p, i]]
    lower = np.tril(lu, -1) + np.eye(3)
    np.testing.assert_allclose(lower @ np.triu(lu), a[perm], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_geqrf_then_ungqr_gives_q_with_q_r_equal_a(backend):
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))).astype(np.complex64)
    h, tau = _run(backend, ["c64[4,3]"], "(c64[4,3], c64[3])",
                  'custom_call_target="lapack_cgeqrf_ffi", backend_config={}', a)
    (q,) = _run(backend, ["c64[4,3]", "c64[3]"], "c64[4,3]",
                'custom_call_target="lapack_cungqr_ffi", backend_config={}', h, tau)
    np.testing.assert_allclose(q @ np.triu(h[:3]), a, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(q.conj().T @ q, np.eye(3), atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_syevd_values_ascending_and_vectors(backend):
    rng = np.random.default_rng(3)
    m = rng.standard_normal((4, 4))
    a = (m + m.T).astype(np.float32)
    v, w, info = _run(backend, ["f32[4,4]"], "(f32[4,4], f32[4], s32[])",
                      'custom_call_target="lapack_ssyevd_ffi", ' + _cfg(mode="V", uplo="L"), a)
    assert info == 0
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a @ v, v * w, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["A", "S", "N"])
@pytest.mark.parametrize("routine", ["gesdd", "gesvd"])
def test_svd_modes(backend, mode, routine):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 4, 3))
    u_cols = 4 if mode in "AN" else 3
    _, s, u, vt, info = _run(
        backend, ["f64[2,4,3]"], f"(f64[2,4,3], f64[2,3], f64[2,4,{u_cols}], f64[2,3,3], s32[2])",
        f'custom_call_target="lapack_d{routine}_ffi", ' + _cfg(mode=mode), a)
    np.testing.assert_array_equal(info, [0, 0])
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    if mode != "N":
        np.testing.assert_allclose(u[..., :3] * s[:, None] @ vt, a, atol=1e-12)
    else:
        np.testing.assert_array_equal(vt, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_geev_real_unpacks_conjugate_pairs_and_refuses_non_finite(backend):
    rot = np.array([[[0.0, -2.0, 1.0], [2.0, 0.0, 0.5], [0.0, 0.0, 3.0]],
                    [[1.0, 2.0, 0.0], [0.0, np.inf, 1.0], [0.0, 0.0, 1.0]]], np.float32)
    wr, wi, vl, vr, info = _run(
        backend, ["f32[2,3,3]"], "(f32[2,3], f32[2,3], c64[2,3,3], c64[2,3,3], s32[2])",
        'custom_call_target="lapack_sgeev_ffi", ' + _cfg(compute_left="V", compute_right="V"),
        rot)
    np.testing.assert_array_equal(info, [0, -4])  # jaxlib: a non-finite matrix is not factored
    w = wr[0] + 1j * wi[0]
    np.testing.assert_allclose(np.sort_complex(w), np.sort_complex(np.linalg.eigvals(rot[0])),
                               atol=1e-5)
    assert wi[0, 0] == -wi[0, 1] != 0  # a conjugate pair, in LAPACK's order
    np.testing.assert_allclose(rot[0] @ vr[0], vr[0] * w, atol=1e-5)
    np.testing.assert_allclose(vl[0].conj().T @ rot[0], w[:, None] * vl[0].conj().T, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vr[0], axis=0), 1.0, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_geev_complex_right_vectors_only(backend):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    w, vl, vr, info = _run(
        backend, ["c128[3,3]"], "(c128[3], c128[3,3], c128[3,3], s32[])",
        'custom_call_target="lapack_zgeev_ffi", ' + _cfg(compute_left="N", compute_right="V"), a)
    assert info == 0
    np.testing.assert_allclose(np.sort_complex(w), np.sort_complex(np.linalg.eigvals(a)),
                               atol=1e-12)
    np.testing.assert_allclose(a @ vr, vr * w, atol=1e-12)
    np.testing.assert_array_equal(vl, 0)


def test_an_unregistered_jaxlib_target_is_refused_by_name():
    # jax's tridiagonal_solve(..., perturb_singular=True) on CPU: not a LAPACK routine.
    with pytest.raises(xladist.UnsupportedError, match="tridiagonal_solve_perturbed_ffi"):
        _run("cpu", ["f32[3]", "f32[3]", "f32[3]", "f32[3,1]"], "f32[3,1]",
             'custom_call_target="tridiagonal_solve_perturbed_ffi", backend_config={}',
             *[np.ones(3, np.float32)] * 3, np.ones((3, 1), np.float32))


def _householder_q(h, tau, below):
    """Q = H(0) H(1) ... from LAPACK's reflectors: v_i has 1 at row i + below, then the
    entries of column i under it (gehrd, sytrd lower: below = 1; geqrf: below = 0)."""
    n = h.shape[0]
    q = np.eye(n, dtype=h.dtype)
    for i, t in enumerate(tau):
        v = np.zeros(n, h.dtype)
        v[i + below] = 1
        v[i + below + 1:] = h[i + below + 1:, i]
        q = q @ (np.eye(n) - t * np.outer(v, v.conj()))
    return q


@pytest.mark.parametrize("backend", BACKENDS)
def test_gtsv_solves_the_batched_tridiagonal_system_and_keeps_the_unused_ends(backend):
    rng = np.random.default_rng(6)
    dl, d, du = rng.standard_normal((3, 2, 5))
    d = d + 4
    b = rng.standard_normal((2, 5, 3))
    dl_out, d_out, du_out, x, info = _run(
        backend, ["f64[2,5]"] * 3 + ["f64[2,5,3]"],
        "(f64[2,5], f64[2,5], f64[2,5], f64[2,5,3], s32[2])",
        'custom_call_target="lapack_dgtsv_ffi", backend_config={}', dl, d, du, b)
    np.testing.assert_array_equal(info, [0, 0])
    for k in range(2):
        a = np.diag(d[k]) + np.diag(dl[k, 1:], -1) + np.diag(du[k, :-1], 1)
        np.testing.assert_allclose(a @ x[k], b[k], atol=1e-12)
    # dl[0] and du[n-1] lie outside the matrix: LAPACK never sees them
    np.testing.assert_array_equal(dl_out[:, 0], dl[:, 0])
    np.testing.assert_array_equal(du_out[:, -1], du[:, -1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gehrd_reflectors_rebuild_the_matrix(backend):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((5, 5))
    h, tau, info = _run(backend, ["f64[5,5]"], "(f64[5,5], f64[4], s32[])",
                        'custom_call_target="lapack_dgehrd_ffi", '
                        'backend_config={high = 5 : i32, low = 1 : i32}', a)
    assert info == 0
    q = _householder_q(h, tau, below=1)
    hess = np.triu(h, -1)
    np.testing.assert_allclose(q @ hess @ q.T, a, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_hetrd_tridiagonal_has_the_matrix_eigenvalues(backend, uplo):
    rng = np.random.default_rng(8)
    z = rng.standard_normal((2, 4, 4)) + 1j * rng.standard_normal((2, 4, 4))
    a = (z + z.conj().transpose(0, 2, 1)).astype(np.complex64)
    c, d, e, tau, info = _run(backend, ["c64[2,4,4]"],
                              "(c64[2,4,4], f32[2,4], f32[2,3], c64[2,3], s32[2])",
                              'custom_call_target="lapack_chetrd_ffi", ' + _cfg(uplo=uplo), a)
    np.testing.assert_array_equal(info, [0, 0])
    for k in range(2):
        t = np.diag(d[k]) + np.diag(e[k], 1) + np.diag(e[k], -1)
        np.testing.assert_allclose(np.linalg.eigvalsh(t), np.linalg.eigvalsh(a[k]), atol=1e-4)
    if uplo == "L":
        q = _householder_q(c[0].astype(np.complex128), tau[0], below=1)
        t = np.diag(d[0]) + np.diag(e[0], 1) + np.diag(e[0], -1)
        np.testing.assert_allclose(q @ t @ q.conj().T, a[0], atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gees_real_schur_form_vectors_and_eigenvalues(backend):
    rot = np.array([[0.0, -2.0, 1.0], [2.0, 0.0, 0.5], [0.0, 0.0, 3.0]])
    a = np.stack([rot, np.random.default_rng(9).standard_normal((3, 3))])
    t, vs, wr, wi, sdim, info = _run(
        backend, ["f64[2,3,3]"], "(f64[2,3,3], f64[2,3,3], f64[2,3], f64[2,3], s32[2], s32[2])",
        'custom_call_target="lapack_dgees_ffi", ' + _cfg(mode="V", sort="N"), a)
    np.testing.assert_array_equal(info, [0, 0])
    np.testing.assert_array_equal(sdim, [0, 0])
    for k in range(2):
        np.testing.assert_allclose(vs[k] @ t[k] @ vs[k].T, a[k], atol=1e-12)
        np.testing.assert_allclose(np.tril(t[k], -2), 0, atol=1e-12)  # quasi-triangular
        np.testing.assert_allclose(np.sort_complex(wr[k] + 1j * wi[k]),
                                   np.sort_complex(np.linalg.eigvals(a[k])), atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gees_complex_without_vectors(backend):
    rng = np.random.default_rng(10)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    t, vs, w, sdim, info = _run(backend, ["c128[3,3]"],
                                "(c128[3,3], c128[3,3], c128[3], s32[], s32[])",
                                'custom_call_target="lapack_zgees_ffi", '
                                + _cfg(mode="N", sort="N"), a)
    assert info == 0
    np.testing.assert_allclose(np.tril(t, -1), 0)
    np.testing.assert_allclose(np.sort_complex(np.diag(t)), np.sort_complex(w))
    np.testing.assert_allclose(np.sort_complex(w), np.sort_complex(np.linalg.eigvals(a)),
                               atol=1e-12)
    np.testing.assert_array_equal(vs, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_geqp3_pivots_are_one_based_and_rebuild_the_permuted_matrix(backend):
    a = np.array([[1.0, 10.0, 2.0], [0.0, 20.0, 1.0], [1.0, 5.0, 3.0], [2.0, 0.0, 0.0]])
    qr, jpvt, tau = _run(backend, ["f64[4,3]", "s32[3]"], "(f64[4,3], s32[3], f64[3])",
                         'custom_call_target="lapack_dgeqp3_ffi", backend_config={}',
                         a, np.zeros(3, np.int32))
    assert sorted(jpvt) == [1, 2, 3] and jpvt[0] == 2  # column 1 has the largest norm
    q = _householder_q(np.pad(qr, ((0, 0), (0, 1))), tau, below=0)
    r = np.triu(np.pad(qr, ((0, 0), (0, 1))))[:, :3]
    np.testing.assert_allclose(q @ r, a[:, jpvt - 1], atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("left,transpose", [(True, True), (True, False), (False, True),
                                            (False, False)])
def test_unmqr_applies_q_on_either_side(backend, left, transpose):
    rng = np.random.default_rng(12)
    a = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))
    h, tau = np.linalg.qr(a, mode="raw")  # numpy's geqrf, its reflectors transposed
    h = h.T.copy()
    q = _householder_q(np.pad(h, ((0, 0), (0, 1))), tau, below=0)
    c = rng.standard_normal((4, 2) if left else (2, 4)) + 0j
    shape = "c128[4,2]" if left else "c128[2,4]"
    cfg = "backend_config={left = %s, transpose = %s}" % (str(left).lower(),
                                                        str(transpose).lower())
    (out,) = _run(backend, ["c128[4,3]", "c128[3]", shape], shape,
                  'custom_call_target="lapack_zunmqr_ffi", ' + cfg, h, tau, c)
    op = q.conj().T if transpose else q
    np.testing.assert_allclose(out, op @ c if left else c @ op, atol=1e-12)
