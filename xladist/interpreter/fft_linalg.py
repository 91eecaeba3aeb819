"""fft, cholesky and triangular-solve (operation semantics: Fft, Cholesky,
TriangularSolve).

- fft: FFT/IFFT (complex -> complex), RFFT (real -> complex, last dim n//2+1),
  IRFFT (complex -> real) over the trailing len(fft_length) dims (1 to 3). Computed in
  double precision and rounded to the result type once (c64 results are therefore at
  least as accurate as XLA:CPU's single-precision transforms).
- cholesky: reads only the `lower` (default) or upper triangle of each matrix. The
  other triangle of the result is zero (as XLA's CholeskyExpander leaves it). A
  matrix that is not positive definite yields all-NaN (XLA: implementation-defined).
- triangular-solve: solves op(a) x = b (left_side) or x op(a) = b, op in
  NO_TRANSPOSE / TRANSPOSE / ADJOINT, over leading batch dims; only the `lower` or
  upper triangle of a is read, and its diagonal is taken as 1 with unit_diagonal.
  Plain substitution, vectorized over batch and right-hand sides.
Narrow floats (f16, bf16) are computed in f32 and rounded at the end.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from .registry import register


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind == "c" or dtype in (np.float32, np.float64):
        return dtype
    return np.dtype(np.float32)


# ---- fft ------------------------------------------------------------------------------

def _fft(x, n):
    return np.fft.fftn(x, s=n, axes=range(-len(n), 0))


def _ifft(x, n):
    return np.fft.ifftn(x, s=n, axes=range(-len(n), 0))


def _rfft(x, n):
    return np.fft.rfftn(x, s=n, axes=range(-len(n), 0))


def _irfft(x, n):
    return np.fft.irfftn(x, s=n, axes=range(-len(n), 0))


_FFT_TYPES = {"FFT": _fft, "IFFT": _ifft, "RFFT": _rfft, "IRFFT": _irfft}


def fft(x: np.ndarray, fft_type: str, fft_length, result_dtype) -> np.ndarray:
    fn = _FFT_TYPES.get(fft_type.upper())
    if fn is None:
        raise UnsupportedError(f"unknown fft_type {fft_type!r} (expected one of "
                               f"{', '.join(_FFT_TYPES)})")
    n = tuple(int(v) for v in fft_length)
    x = np.asarray(x)
    wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    if 0 in n or 0 in x.shape:
        out_shape = x.shape[:-len(n)] + (n[:-1] + (n[-1] // 2 + 1,) if fft_type == "RFFT"
                                         else n)
        return np.zeros(out_shape, result_dtype)
    return fn(wide, n).astype(result_dtype)


@register("fft")
def _eval_fft(instr, args, ev):
    out = fft(args[0], instr.attrs["fft_type"], instr.attrs["fft_length"], instr.shape.dtype)
    if out.shape != tuple(instr.shape.dims):
        raise UnsupportedError(f"{instr.name}: {instr.attrs['fft_type']} of "
                               f"{np.shape(args[0])} with fft_length="
                               f"{list(instr.attrs['fft_length'])} gives {out.shape}, but the "
                               f"instruction declares {instr.shape}")
    return out


# ---- cholesky --------------------------------------------------------------------------

def cholesky(a: np.ndarray, lower: bool = True) -> np.ndarray:
    a = np.asarray(a)
    out_dtype = a.dtype
    x = a.astype(_compute_dtype(a.dtype))
    # Rebuild the Hermitian matrix from the triangle XLA reads.
    tri = np.tril(x) if lower else np.swapaxes(np.triu(x), -1, -2).conj()
    diag = np.diagonal(tri, axis1=-2, axis2=-1)
    herm = tri + np.swapaxes(tri, -1, -2).conj() - _diag_matrix(diag)
    batch = herm.shape[:-2]
    n = herm.shape[-1]
    flat = herm.reshape((-1, n, n))
    out = np.empty_like(flat)
    for i, m in enumerate(flat):
        try:
            out[i] = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            out[i] = np.nan
    out = out.reshape(batch + (n, n))
    if not lower:
        out = np.swapaxes(out, -1, -2).conj()
    return out.astype(out_dtype)


def _diag_matrix(diag: np.ndarray) -> np.ndarray:
    n = diag.shape[-1]
    return diag[..., :, None] * np.eye(n, dtype=diag.dtype)


@register("cholesky")
def _eval_cholesky(instr, args, ev):
    return cholesky(args[0], bool(instr.attrs.get("lower", False)))


# ---- triangular-solve ------------------------------------------------------------------

_TRANSPOSE = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")


def triangular_solve(a, b, *, left_side=False, lower=False, unit_diagonal=False,
                     transpose_a="NO_TRANSPOSE") -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    out_dtype = b.dtype
    ct = _compute_dtype(out_dtype)
    if transpose_a not in _TRANSPOSE:
        raise UnsupportedError(f"triangular-solve transpose_a={transpose_a!r} is not one of "
                               f"{', '.join(_TRANSPOSE)}")
    t = np.tril(a) if lower else np.triu(a)
    t = t.astype(ct)
    n = t.shape[-1]
    if unit_diagonal:
        t = t * (1 - np.eye(n, dtype=ct)) + np.eye(n, dtype=ct)
    is_lower = lower
    if transpose_a != "NO_TRANSPOSE":
        t = np.swapaxes(t, -1, -2)
        if transpose_a == "ADJOINT":
            t = t.conj()
        is_lower = not is_lower
    rhs = b.astype(ct)
    if not left_side:
        # x op(a) = b  <=>  op(a)^T x^T = b^T
        t = np.swapaxes(t, -1, -2)
        is_lower = not is_lower
        rhs = np.swapaxes(rhs, -1, -2)
    x = np.zeros(np.broadcast_shapes(t.shape[:-2], rhs.shape[:-2]) + rhs.shape[-2:], ct)
    order = range(n) if is_lower else range(n - 1, -1, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in order:
            acc = rhs[..., i, :] - np.einsum("...j,...jk->...k", t[..., i, :], x)
            x[..., i, :] = acc / t[..., i, i][..., None]
    if not left_side:
        x = np.swapaxes(x, -1, -2)
    return x.astype(out_dtype)


@register("triangular-solve")
def _eval_triangular_solve(instr, args, ev):
    a = instr.attrs
    return triangular_solve(args[0], args[1], left_side=bool(a.get("left_side", False)),
                            lower=bool(a.get("lower", False)),
                            unit_diagonal=bool(a.get("unit_diagonal", False)),
                            transpose_a=str(a.get("transpose_a", "NO_TRANSPOSE")).upper())
