"""cholesky and triangular-solve (operation semantics: Cholesky, TriangularSolve), the one
implementation both backends call, with the LAPACK / BLAS routines scipy ships (the ones
jax's own CPU lowering calls, lapack.py), one matrix at a time over the leading
batch dimensions. Floats narrower than f32 (f16, bf16) are computed in f32 and rounded at
the end.

- cholesky: ?potrf reads only the `lower` (default) or upper triangle of each matrix; the
  other triangle of the result is zero (as XLA's CholeskyExpander leaves it). A matrix
  that is not positive definite, or has a non-finite entry in the triangle read, yields
  all-NaN (XLA: implementation-defined; XLA:CPU leaves NaN from the failing column on).
- triangular-solve: ?trsm solves op(a) x = b (left_side) or x op(a) = b, op in
  NO_TRANSPOSE / TRANSPOSE / ADJOINT; only the `lower` or upper triangle of a is read, and
  its diagonal is taken as 1 with unit_diagonal. trsm does not test for a singular
  matrix: a zero on the diagonal gives infinities and NaN, as XLA:CPU's expander does (its
  values differ: implementation-defined), never an error. x op(a) = b is solved as
  op(a)^T x^T = b^T.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from .dtypes import compute_dtype

# scipy's BLAS/LAPACK routine prefix per compute type.
_PREFIX = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}
TRANSPOSE = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")


def _routine(module, dtype: np.dtype, name: str):
    prefix = _PREFIX.get(np.dtype(dtype).name)
    if prefix is None:
        raise UnsupportedError(f"{name} is not defined for {np.dtype(dtype).name} matrices")
    return getattr(module, prefix + name)


def _matrices(x: np.ndarray) -> np.ndarray:
    # The batch counted, not inferred: numpy cannot infer -1 beside an empty matrix (a
    # right-hand side b[3,0] raised "cannot reshape array of size 0 into shape (3,0)").
    batch = int(np.prod(x.shape[:-2], dtype=np.int64))
    return x.reshape((batch,) + x.shape[-2:])


def cholesky(a, lower: bool = True) -> np.ndarray:
    """The Cholesky factor of every matrix of `a` (leading dims are batch dims)."""
    import scipy.linalg.lapack  # lazily: importing scipy costs ~0.8 s per rank
    a = np.asarray(a)
    ct = compute_dtype(a.dtype)
    x = _matrices(a.astype(ct))
    out = np.zeros_like(x)
    if x.size:
        potrf = _routine(scipy.linalg.lapack, ct, "potrf")
        for i, m in enumerate(x):
            if not np.isfinite(np.tril(m) if lower else np.triu(m)).all():
                out[i] = np.nan
                continue
            factor, info = potrf(m, lower=int(lower), clean=1)
            out[i] = factor if info == 0 else np.nan
    return out.reshape(a.shape).astype(a.dtype)


def triangular_solve(a, b, *, left_side: bool = False, lower: bool = False,
                     unit_diagonal: bool = False, transpose_a: str = "NO_TRANSPOSE"
                     ) -> np.ndarray:
    """x with op(a) x = b (left_side) or x op(a) = b, for every matrix of the batch."""
    import scipy.linalg.blas  # lazily, as above
    if transpose_a not in TRANSPOSE:
        raise UnsupportedError(f"triangular-solve transpose_a={transpose_a!r} is not one of "
                               f"{', '.join(TRANSPOSE)}")
    a, b = np.asarray(a), np.asarray(b)
    ct = compute_dtype(b.dtype)
    trans = TRANSPOSE.index(transpose_a)
    A, B = _matrices(a.astype(ct)), _matrices(b.astype(ct))
    X = np.zeros_like(B)
    if B.size:
        trsm = _routine(scipy.linalg.blas, ct, "trsm")
        for i in range(B.shape[0]):
            ai, bi = A[i], B[i]
            if left_side:
                X[i] = trsm(1.0, ai, bi, side=0, lower=int(lower), trans_a=trans,
                            diag=int(unit_diagonal))
            else:
                # x op(a) = b  <=>  op(a)^T x^T = b^T; op(a)^T is a, a^T or conj(a).
                t = 1 if trans == 0 else 0
                ai = np.conj(ai) if trans == 2 else ai
                X[i] = trsm(1.0, ai, bi.T, side=0, lower=int(lower), trans_a=t,
                            diag=int(unit_diagonal)).T
    return X.reshape(b.shape).astype(b.dtype)
