"""fft (operation semantics: Fft), the one implementation both backends call: FFT/IFFT
(complex -> complex), RFFT (real -> complex, last dim n//2+1), IRFFT (complex -> real) over
the trailing len(fft_length) dims (1 to 3). Computed in double precision and rounded to the
result type once (c64 results are therefore at least as accurate as XLA:CPU's
single-precision transforms)."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError


_FFT_TYPES = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn,
              "IRFFT": np.fft.irfftn}


def fft(x: np.ndarray, fft_type: str, fft_length, result_dtype) -> np.ndarray:
    """The transform of x's trailing len(fft_length) dims, in `result_dtype`."""
    kind = str(fft_type).upper()
    fn = _FFT_TYPES.get(kind)
    if fn is None:
        raise UnsupportedError(f"unknown fft_type {fft_type!r} (expected one of "
                               f"{', '.join(_FFT_TYPES)})")
    n = tuple(int(v) for v in fft_length)
    x = np.asarray(x)
    if 0 in n or 0 in x.shape:
        out_shape = x.shape[:-len(n)] + (n[:-1] + (n[-1] // 2 + 1,) if kind == "RFFT" else n)
        return np.zeros(out_shape, result_dtype)
    wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    return fn(wide, s=n, axes=tuple(range(-len(n), 0))).astype(result_dtype)
