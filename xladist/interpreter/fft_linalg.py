"""fft, cholesky and triangular-solve (operation semantics: Fft, Cholesky, TriangularSolve):
the rules read the attributes and call semantics/fft.py and semantics/linalg.py, the
implementations the cpu backend's library thunks call too."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..semantics.fft import fft
from ..semantics.linalg import cholesky, triangular_solve
from .registry import register


@register("fft")
def _eval_fft(instr, args, ev):
    out = fft(args[0], instr.attrs["fft_type"], instr.attrs["fft_length"], instr.shape.dtype)
    if out.shape != tuple(instr.shape.dims):
        raise UnsupportedError(f"{instr.name}: {instr.attrs['fft_type']} of "
                               f"{np.shape(args[0])} with fft_length="
                               f"{list(instr.attrs['fft_length'])} gives {out.shape}, but the "
                               f"instruction declares {instr.shape}")
    return out


@register("cholesky")
def _eval_cholesky(instr, args, ev):
    return cholesky(args[0], bool(instr.attrs.get("lower", False)))


@register("triangular-solve")
def _eval_triangular_solve(instr, args, ev):
    a = instr.attrs
    return triangular_solve(args[0], args[1], left_side=bool(a.get("left_side", False)),
                            lower=bool(a.get("lower", False)),
                            unit_diagonal=bool(a.get("unit_diagonal", False)),
                            transpose_a=str(a.get("transpose_a", "NO_TRANSPOSE")).upper())
