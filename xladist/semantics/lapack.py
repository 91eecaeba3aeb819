"""JAX's CPU LAPACK custom-calls (`lapack_<t><routine>_ffi`), run with scipy's LAPACK.

On CPU, jax lowers triangular_solve, cholesky, lu, qr, eigh and svd to typed-FFI
custom-calls into the LAPACK that jaxlib loads from scipy (jaxlib/cpu/lapack_kernels.cc);
calling the same routines through scipy.linalg.lapack gives the same numbers. `TARGETS`
has them for <t> in s, d, c, z (f32, f64, c64, c128); custom_calls.py registers them, and
both backends run them from that registry:

| target | operands -> results | backend_config |
|---|---|---|
| trsm | (a, b) -> x with op(a) x = b (side L) or x op(a) = b (side R) | side, uplo, trans_x (N/T/C), diag (U = unit) |
| potrf | (a) -> (factor, info) | uplo; the other triangle keeps a's values, as LAPACK leaves it |
| getrf | (a) -> (lu, 1-based s32 pivots, info) | |
| geqrf | (a) -> (householder a, tau) | |
| orgqr / ungqr | (a, tau) -> q | |
| syevd / heevd | (a) -> (vectors, ascending eigenvalues, info) | mode (V/N), uplo |
| gesdd | (a) -> (a, s, u, vt, info) | mode (A full, S reduced, N values only) |
| geev, real | (a) -> (re w, im w, complex left, right vectors, info) | compute_left, compute_right |
| geev, complex | (a) -> (w, left vectors, right vectors, info) | compute_left, compute_right |

geev as jaxlib runs it: a matrix with a non-finite entry is not factored (info = -4); real
LAPACK's packed conjugate pairs (real part in column j, imaginary in j + 1) are unpacked into
complex columns; vectors not asked for are left zero.

Leading dimensions are batch dimensions (jax's `num_batch_dims`); each matrix is solved on its
own. Values are logical arrays, so the column-major `operand_layout_constraints` need nothing.
`info` is LAPACK's (0 = success); jax turns failures into NaNs itself.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import UnsupportedError

_TYPES = "sdcz"  # f32, f64, c64, c128


def _config(instr) -> dict[str, str]:
    """backend_config `{side = 76 : ui8, ...}` -> {"side": "L", ...} (the bytes are chars)."""
    text = instr.backend_config or ""
    return {k: chr(int(v)) for k, v in re.findall(r"(\w+)\s*=\s*(\d+)\s*:\s*ui8", text)}


def _lapack(prefix: str, routine: str):
    import scipy.linalg.lapack  # lazily: importing scipy costs ~0.8 s per rank
    return getattr(scipy.linalg.lapack, prefix + routine)


def _batched(n_out: int, fn, *arrays):
    """fn on each matrix of the leading (batch) dims; its n_out results stacked back."""
    batch = arrays[0].shape[:-2] if arrays[0].ndim >= 2 else ()
    outs: list[list] = [[] for _ in range(n_out)]
    for idx in np.ndindex(*batch):
        for acc, r in zip(outs, fn(*(a[idx] for a in arrays))):
            acc.append(np.asarray(r))
    return [np.stack(o).reshape(*batch, *o[0].shape) if batch else o[0] for o in outs]


def _result(instr, values):
    """Each value cast and shaped to the result tuple's (or array's) element."""
    shapes = instr.shape.tuple_shapes if instr.shape.is_tuple else [instr.shape]
    out = tuple(np.asarray(v).astype(s.dtype, copy=False).reshape(tuple(s.dims))
                for v, s in zip(values, shapes))
    return out if instr.shape.is_tuple else out[0]


def _check(instr, info, routine):
    if np.any(np.asarray(info) < 0):
        raise UnsupportedError(f"custom-call {instr.name}: LAPACK {routine} rejected argument "
                               f"{-int(np.min(info))} (info < 0)")


def _trsm(p):
    def run(instr, args):
        import scipy.linalg.blas
        cfg = _config(instr)
        trsm = getattr(scipy.linalg.blas, p + "trsm")
        trans = {"N": 0, "T": 1, "C": 2}[cfg.get("trans_x", "N")]

        def one(a, b):
            return (trsm(1.0, a, b, side=int(cfg.get("side", "L") == "R"),
                         lower=int(cfg.get("uplo", "L") == "L"), trans_a=trans,
                         diag=int(cfg.get("diag", "N") == "U")),)
        return _result(instr, _batched(1, one, *args))
    return run


def _potrf(p):
    def run(instr, args):
        lower = int(_config(instr).get("uplo", "L") == "L")
        c, info = _batched(2, lambda a: _lapack(p, "potrf")(a, lower=lower, clean=0), args[0])
        _check(instr, info, "potrf")
        return _result(instr, (c, info))
    return run


def _getrf(p):
    def run(instr, args):
        lu, piv, info = _batched(3, _lapack(p, "getrf"), args[0])
        _check(instr, info, "getrf")
        return _result(instr, (lu, piv + 1, info))  # scipy's pivots are 0-based, LAPACK's 1
    return run


def _geqrf(p):
    def run(instr, args):
        qr, tau, _, info = _batched(4, _lapack(p, "geqrf"), args[0])
        _check(instr, info, "geqrf")
        return _result(instr, (qr, tau))
    return run


def _orgqr(p, routine):
    def run(instr, args):
        q, _, info = _batched(3, _lapack(p, routine), *args)
        _check(instr, info, routine)
        return _result(instr, (q,))
    return run


def _syevd(p, routine):
    def run(instr, args):
        cfg = _config(instr)
        vectors = int(cfg.get("mode", "V") == "V")
        lower = int(cfg.get("uplo", "L") == "L")
        w, v, info = _batched(3, lambda a: _lapack(p, routine)(a, compute_v=vectors,
                                                               lower=lower), args[0])
        _check(instr, info, routine)
        return _result(instr, (v if vectors else args[0], w, info))
    return run


def _gesdd(p):
    def run(instr, args):
        mode = _config(instr).get("mode", "A")
        _, _, u_shape, vt_shape, _ = instr.shape.tuple_shapes

        def one(a):
            if mode == "N":
                _, s, _, info = _lapack(p, "gesdd")(a, compute_uv=0)
                return (s, np.zeros(u_shape.dims[-2:], a.dtype),
                        np.zeros(vt_shape.dims[-2:], a.dtype), info)
            u, s, vt, info = _lapack(p, "gesdd")(a, compute_uv=1, full_matrices=int(mode == "A"))
            return s, u, vt, info
        s, u, vt, info = _batched(4, one, args[0])
        _check(instr, info, "gesdd")
        return _result(instr, (args[0], s, u, vt, info))
    return run


def _unpack_eigenvectors(wi, packed):
    """LAPACK's real packed eigenvectors as complex columns (jaxlib's UnpackEigenvectors)."""
    out = packed.astype(np.result_type(packed.dtype, np.complex64))
    j, n = 0, len(wi)
    while j < n:
        if wi[j] == 0 or np.isnan(wi[j]) or j + 1 == n:
            j += 1
            continue
        re, im = packed[:, j], packed[:, j + 1]
        out[:, j], out[:, j + 1] = re + 1j * im, re - 1j * im
        j += 2
    return out


def _geev(p):
    def run(instr, args):
        cfg = _config(instr)
        left = int(cfg.get("compute_left", "N") == "V")
        right = int(cfg.get("compute_right", "V") == "V")
        real = p in "sd"
        shapes = instr.shape.tuple_shapes
        w_dtype = np.result_type(args[0].dtype, np.complex64)

        def one(a):
            n = a.shape[-1]
            zeros = np.zeros((n, n), w_dtype)
            if not np.all(np.isfinite(a)):
                nan = np.full(n, np.nan, a.dtype)
                return ((nan, nan) if real else (nan.astype(w_dtype),)) + (zeros, zeros, -4)
            if real:
                wr, wi, vl, vr, info = _lapack(p, "geev")(a, compute_vl=left, compute_vr=right)
                vl = _unpack_eigenvectors(wi, vl) if left and info == 0 else zeros
                vr = _unpack_eigenvectors(wi, vr) if right and info == 0 else zeros
                return wr, wi, vl, vr, info
            w, vl, vr, info = _lapack(p, "geev")(a, compute_vl=left, compute_vr=right)
            return w, vl if left else zeros, vr if right else zeros, info
        values = _batched(len(shapes), one, args[0])
        return _result(instr, values)
    return run


def _targets() -> dict:
    out = {}
    for p in _TYPES:
        qr = "ungqr" if p in "cz" else "orgqr"
        ev = "heevd" if p in "cz" else "syevd"
        out.update({f"lapack_{p}trsm_ffi": _trsm(p), f"lapack_{p}potrf_ffi": _potrf(p),
                    f"lapack_{p}getrf_ffi": _getrf(p), f"lapack_{p}geqrf_ffi": _geqrf(p),
                    f"lapack_{p}{qr}_ffi": _orgqr(p, qr), f"lapack_{p}{ev}_ffi": _syevd(p, ev),
                    f"lapack_{p}gesdd_ffi": _gesdd(p), f"lapack_{p}geev_ffi": _geev(p)})
    return out


TARGETS = _targets()
