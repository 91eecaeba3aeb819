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
| gesvd | (a) -> (a, s, u, vt, info) | mode (A full, S reduced, N values only) |
| gees, real | (a) -> (schur form, schur vectors, re w, im w, sdim, info) | mode (V/N); sort N |
| gees, complex | (a) -> (schur form, schur vectors, w, sdim, info) | mode (V/N); sort N |
| gehrd | (a) -> (householder hessenberg a, tau [n-1], info) | low, high (1-based, i32) |
| sytrd / hetrd | (a) -> (householder a, real d [n], real e [n-1], tau [n-1], info) | uplo |
| gtsv | (dl, d, du, b) -> (dl, d, du, x, info); dl[0] and du[n-1] unused | |
| geqp3 | (a, jpvt) -> (householder a, 1-based s32 jpvt, tau) | |
| ormqr / unmqr | (householder a, tau, c) -> op(q) c or c op(q) | left, transpose (booleans) |

gtsv as jaxlib runs it: LAPACK gets dl from its second element (dl[0] and du[n-1] are not
part of the system and come back as given); dl, d and du come back as LAPACK leaves them (the
factorisation). gees with mode N leaves the Schur vectors untouched: zeros here. geqp3 takes
jpvt as given (0 = a free column), which jax always passes as zeros.

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


def _int_config(instr) -> dict[str, int]:
    """backend_config `{high = 4 : i32, low = 1 : i32}` -> {"high": 4, "low": 1}."""
    text = instr.backend_config or ""
    return {k: int(v) for k, v in re.findall(r"(\w+)\s*=\s*(-?\d+)\s*:\s*i(?:32|64)", text)}


def _bool_config(instr) -> dict[str, bool]:
    """backend_config `{left = true, transpose = false}` -> {"left": True, ...}."""
    text = instr.backend_config or ""
    return {k: v == "true" for k, v in re.findall(r"(\w+)\s*=\s*(true|false)\b", text)}


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


def _svd(p, routine):
    """gesdd (divide and conquer) and gesvd (QR iteration): the same operands, results and
    modes, and scipy wraps both with the same arguments."""
    def run(instr, args):
        mode = _config(instr).get("mode", "A")
        _, _, u_shape, vt_shape, _ = instr.shape.tuple_shapes

        def one(a):
            if mode == "N":
                _, s, _, info = _lapack(p, routine)(a, compute_uv=0)
                return (s, np.zeros(u_shape.dims[-2:], a.dtype),
                        np.zeros(vt_shape.dims[-2:], a.dtype), info)
            u, s, vt, info = _lapack(p, routine)(a, compute_uv=1, full_matrices=int(mode == "A"))
            return s, u, vt, info
        s, u, vt, info = _batched(4, one, args[0])
        _check(instr, info, routine)
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


def _gees(p):
    def run(instr, args):
        cfg = _config(instr)
        if cfg.get("sort", "N") != "N":
            raise UnsupportedError(f"custom-call {instr.name}: gees with sorted eigenvalues "
                                   f"(jaxlib does not implement it either)")
        vectors = int(cfg.get("mode", "V") == "V")

        def one(a):
            out = _lapack(p, "gees")(lambda *w: None, a, compute_v=vectors, sort_t=0)
            if p in "sd":
                t, sdim, wr, wi, vs, _, info = out
                w = (wr, wi)
            else:
                t, sdim, w, vs, _, info = out
                w = (w,)
            return (t, vs if vectors else np.zeros_like(a), *w, sdim, info)
        values = _batched(len(instr.shape.tuple_shapes), one, args[0])
        _check(instr, values[-1], "gees")
        return _result(instr, values)
    return run


def _gehrd(p):
    def run(instr, args):
        cfg = _int_config(instr)
        n = args[0].shape[-1]
        lo, hi = cfg.get("low", 1) - 1, cfg.get("high", n) - 1  # scipy's are 0-based

        def one(a):
            h, tau, info = _lapack(p, "gehrd")(a, lo=lo, hi=hi)
            return h, tau[:max(n - 1, 0)], info
        h, tau, info = _batched(3, one, args[0])
        _check(instr, info, "gehrd")
        return _result(instr, (h, tau, info))
    return run


def _sytrd(p, routine):
    def run(instr, args):
        lower = int(_config(instr).get("uplo", "L") == "L")
        values = _batched(5, lambda a: _lapack(p, routine)(a, lower=lower), args[0])
        _check(instr, values[-1], routine)
        return _result(instr, values)
    return run


def _gtsv(p):
    def run(instr, args):
        def one(dl, d, du, b):
            dl2, d2, du2, x, info = _lapack(p, "gtsv")(dl[1:], d, du[:-1], b)
            return (np.concatenate([dl[:1], dl2]), d2, np.concatenate([du2, du[-1:]]), x,
                    info)
        # dl, d, du are [..., n] and b is [..., n, k]: batch over the leading dims of b.
        batch = args[3].shape[:-2]
        outs: list[list] = [[] for _ in range(5)]
        for idx in np.ndindex(*batch):
            for acc, r in zip(outs, one(*(a[idx] for a in args))):
                acc.append(np.asarray(r))
        values = [np.stack(o).reshape(*batch, *o[0].shape) if batch else o[0] for o in outs]
        _check(instr, values[-1], "gtsv")
        return _result(instr, values)
    return run


def _geqp3(p):
    def run(instr, args):
        def one(a, jpvt):
            if np.any(jpvt != 0):
                raise UnsupportedError(f"custom-call {instr.name}: geqp3 with fixed columns "
                                       f"(a non-zero jpvt) is not supported")
            qr, piv, tau, _, info = _lapack(p, "geqp3")(a)
            return qr, piv, tau, info
        qr, piv, tau, info = _batched(4, one, *args)
        _check(instr, info, "geqp3")
        return _result(instr, (qr, piv, tau))
    return run


def _ormqr(p, routine):
    def run(instr, args):
        cfg = _bool_config(instr)
        side = "L" if cfg.get("left", True) else "R"
        trans = ("C" if p in "cz" else "T") if cfg.get("transpose", False) else "N"

        def one(a, tau, c):
            lwork = max(1, c.shape[1] if side == "L" else c.shape[0]) * 64
            cq, _, info = _lapack(p, routine)(side, trans, a, tau, c, lwork)
            return cq, info
        cq, info = _batched(2, one, *args)
        _check(instr, info, routine)
        return _result(instr, (cq,))
    return run


def _targets() -> dict:
    out = {}
    for p in _TYPES:
        qr = "ungqr" if p in "cz" else "orgqr"
        ev = "heevd" if p in "cz" else "syevd"
        trd = "hetrd" if p in "cz" else "sytrd"
        mqr = "unmqr" if p in "cz" else "ormqr"
        out.update({f"lapack_{p}trsm_ffi": _trsm(p), f"lapack_{p}potrf_ffi": _potrf(p),
                    f"lapack_{p}getrf_ffi": _getrf(p), f"lapack_{p}geqrf_ffi": _geqrf(p),
                    f"lapack_{p}{qr}_ffi": _orgqr(p, qr), f"lapack_{p}{ev}_ffi": _syevd(p, ev),
                    f"lapack_{p}gesdd_ffi": _svd(p, "gesdd"), f"lapack_{p}geev_ffi": _geev(p),
                    f"lapack_{p}gesvd_ffi": _svd(p, "gesvd"), f"lapack_{p}gees_ffi": _gees(p),
                    f"lapack_{p}gehrd_ffi": _gehrd(p), f"lapack_{p}{trd}_ffi": _sytrd(p, trd),
                    f"lapack_{p}gtsv_ffi": _gtsv(p), f"lapack_{p}geqp3_ffi": _geqp3(p),
                    f"lapack_{p}{mqr}_ffi": _ormqr(p, mqr)})
    return out


TARGETS = _targets()
