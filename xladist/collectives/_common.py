"""Helpers shared by the collective families: pending handles and block layouts."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .communicator import PLACE_MIN_BYTES, REUSE_MIN_BYTES, REUSE_RESULTS, Request

__all__ = [
    "Pending",
    "bind_into_result",
    "contiguous",
    "from_block_major",
    "normalize_dim",
    "split_dim",
    "to_block_major",
]


class Pending:
    """Handle of a started collective: ``wait()`` completes it and returns the result.

    Waiting twice returns the same result.  The operand arrays must not be modified between
    start and wait (MPI reads them in the background).
    """

    __slots__ = ("_done", "_finish", "_reqs", "_result")

    def __init__(self, reqs: Sequence[Request], finish: Callable[[], object]):
        self._reqs = reqs
        self._finish = finish
        self._result = None
        self._done = False

    @classmethod
    def ready(cls, result) -> Pending:
        p = cls((), lambda: result)
        return p

    def wait(self):
        if not self._done:
            for r in self._reqs:
                r.wait()
            self._result = self._finish()
            self._done = True
            self._reqs = ()
            self._finish = None
        return self._result


def contiguous(x: np.ndarray) -> np.ndarray:
    """``x`` itself if C-contiguous, else a C-contiguous copy (keeps 0-d arrays 0-d, unlike
    ``np.ascontiguousarray``)."""
    return x if x.flags.c_contiguous else np.array(x, order="C")


def normalize_dim(op: str, x: np.ndarray, dim: int) -> int:
    if x.ndim == 0:
        raise ValueError(f"{op}: a scalar has no dimension {dim} to split or concatenate; "
                         "reshape it to [1] first")
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"{op}: dimension {dim} is out of range for an operand of shape "
                         f"{x.shape}")
    return dim % x.ndim


def split_dim(shape: tuple[int, ...], dim: int) -> tuple[int, int, int]:
    """(pre, extent, post): element counts before, at and after ``dim``."""
    pre = 1
    for s in shape[:dim]:
        pre *= s
    post = 1
    for s in shape[dim + 1:]:
        post *= s
    return pre, shape[dim], post


def to_block_major(x: np.ndarray, dim: int, n: int, dst: np.ndarray) -> np.ndarray:
    """Copy ``x`` split into n blocks along ``dim`` into ``dst`` laid out [n, block...].

    Block j is contiguous in ``dst`` so MPI can send it to member j.
    """
    pre, extent, post = split_dim(x.shape, dim)
    b = extent // n
    dst = dst.reshape(n, pre, b * post)
    np.copyto(dst, x.reshape(pre, n, b * post).transpose(1, 0, 2))
    return dst


def from_block_major(src: np.ndarray, out: np.ndarray, dim: int, n: int) -> np.ndarray:
    """Inverse of :func:`to_block_major`: ``src`` [n, block...] -> ``out`` concatenated along
    ``dim``."""
    pre, extent, post = split_dim(out.shape, dim)
    b = extent // n
    np.copyto(out.reshape(pre, n, b * post), src.reshape(n, pre, b * post).transpose(1, 0, 2))
    return out


def bind_into_result(comm, shape: tuple[int, ...], dtype: np.dtype,
                     call: Callable[[np.ndarray, np.ndarray, str], None], what: str):
    """A collective's bound fast path ``f(x, label)``: a result array as
    ``comm.result(shape, dtype, like=x)`` hands it out (recycled when large and free,
    placed relative to ``x`` from PLACE_MIN_BYTES, the size tests made now),
    ``call(x, out, label)`` writing straight into it, and the result."""
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize
    for d in shape:
        nbytes *= d
    if nbytes >= PLACE_MIN_BYTES and REUSE_RESULTS:
        key, place = (shape, dtype), comm.placed

        def run(x, label):
            out = place(key, nbytes, x.ctypes.data)
            call(x, out, label or what)
            return out
    elif nbytes >= REUSE_MIN_BYTES and REUSE_RESULTS:
        key, take = (shape, dtype), comm.recycled

        def run(x, label):
            out = take(key)
            call(x, out, label or what)
            return out
    else:
        def run(x, label):
            out = np.empty(shape, dtype)
            call(x, out, label or what)
            return out
    return run
