"""Comparing what a backend returned with what is expected, and saying where they differ.

Bit-exact by default: every bit of every element, NaN payloads and the sign of zero
included. `exact="reduce"` (the results of reductions) is the same except where the
expected element is NaN: the reduction order, and with it the payload of a NaN, is the
implementation's (docs/reference/collective-semantics.md C.10), so any NaN is accepted there;
and complex values compare as values (0 == -0), since the sign of a zero part of a complex
product depends on the order of the fold even for small integers.
A tolerance (rtol, atol) compares floating-point values instead, NaN equal to NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The statuses a case can end with, worst first (the report's order).
FAIL, ERROR, GAP_CLOSED, GAP, UNSUPPORTED, PASS = \
    "fail", "error", "gap-closed", "gap", "unsupported", "pass"
STATUSES = (FAIL, ERROR, GAP_CLOSED, GAP, UNSUPPORTED, PASS)
FAILING = (FAIL, ERROR)


@dataclass
class Verdict:
    """The outcome of one case: `detail` says what differed (case, device, element) or why
    it did not run."""

    case: str
    status: str
    detail: str = ""
    device: int | None = None
    xla: str = ""  # the reference against XLA:CPU's recording: agrees / deviation / ""


def _elements_as_bytes(a: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(a).reshape(-1)
    return flat.view(np.uint8).reshape(flat.size, a.dtype.itemsize)


def _is_nan(a: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "c":
        return np.isnan(a.real) | np.isnan(a.imag)
    if a.dtype.kind in "biu":
        return np.zeros(a.shape, bool)
    return np.isnan(a.astype(np.float64))


def _is_float(dt: np.dtype) -> bool:
    return dt.kind in "fc" or (dt.kind == "V" or dt.name.startswith(("bfloat", "float")))


def show(value: np.ndarray) -> str:
    """One element, with its bits for floats (a NaN's payload and sign, -0)."""
    v = np.asarray(value)
    text = repr(v[()].item() if v.dtype.kind in "biuc" or v.dtype.itemsize >= 4
                else float(v[()]))
    if _is_float(v.dtype):
        text += " (0x" + v.reshape(1).view(np.uint8)[::-1].tobytes().hex() + ")"
    return text


def first_difference(got, want, *, exact: str = "bits", tolerance=None) -> str | None:
    """None when `got` matches `want`; else what differs: type, dims, or the first differing
    element (its index, both values and bits) and how many differ."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return f"element type {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"dims {list(got.shape)}, expected {list(want.shape)}"
    if got.size == 0:
        return None
    floating = _is_float(want.dtype)
    if tolerance is not None and floating:
        wide = np.complex128 if want.dtype.kind == "c" else np.float64
        rtol, atol = tolerance
        bad = ~np.isclose(got.astype(wide), want.astype(wide), rtol=rtol, atol=atol,
                          equal_nan=True)
    else:
        bad = (_elements_as_bytes(got) != _elements_as_bytes(want)).any(axis=1).reshape(
            want.shape)
        if exact == "reduce" and want.dtype.kind == "c":
            bad &= got != want
        if exact == "reduce" and floating:
            bad &= ~(_is_nan(want) & _is_nan(got))
    if not bad.any():
        return None
    where = np.unravel_index(int(np.flatnonzero(bad)[0]), want.shape)
    index = "[" + ",".join(map(str, where)) + "]"
    count = int(bad.sum())
    return (f"element {index}: got {show(got[where])}, expected {show(want[where])}"
            + (f" ({count} of {want.size} elements differ)" if count > 1 else ""))


def digest(values, exact: str = "bits") -> str:
    """A short hash of a case's values (every device's, in order) that two runs share exactly
    when `first_difference(..., exact=exact)` finds them equal: under "reduce", every NaN
    hashes alike and complex zeros lose their sign. XLA:CPU's recorded outputs are stored so
    (xladist/conformance/recorded.py)."""
    import hashlib
    h = hashlib.sha256()
    for v in values:
        a = np.ascontiguousarray(np.asarray(v))
        if exact == "reduce" and _is_float(a.dtype):
            a = a.copy()
            if a.dtype.kind == "c":
                a[a == 0] = 0
            nans = _is_nan(a)
            if nans.any():
                a[nans] = np.nan
        h.update(f"{a.dtype.name}{a.shape}".encode())
        h.update(a.reshape(-1).view(np.uint8).tobytes())
    return h.hexdigest()[:16]
