"""ragged-all-to-all test cases: random per-member sizes and offsets, and the numpy reference.

Written from the semantics alone (docs/reference/collective-semantics.md C.16, jax.lax.ragged_all_to_all's
docstring), independently of xladist/collectives/ragged_all_to_all.py: entry ``j*k + u`` of a member's
metadata is update u between it and group member j; the sender says where its chunk lands in
the receiver's output.  Used by tests/collectives/test_collectives_ragged.py (in-process twin, CLI) and
tests/mpi/test_ragged_all_to_all.py (real MPI, both backends).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import ml_dtypes
import numpy as np

DTYPES = {
    "pred": np.dtype(np.bool_),
    "s8": np.dtype(np.int8),
    "s32": np.dtype(np.int32),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "bf16": np.dtype(ml_dtypes.bfloat16),
}
INDEX_TYPES = {"s32": np.dtype(np.int32), "s64": np.dtype(np.int64), "u32": np.dtype(np.uint32)}


@dataclass
class Member:
    """One member's six operands (metadata flat [n*k], or [n, k] when rank2)."""

    x: np.ndarray
    output: np.ndarray
    input_offsets: np.ndarray
    send_sizes: np.ndarray
    output_offsets: np.ndarray
    recv_sizes: np.ndarray

    def operands(self) -> list[np.ndarray]:
        return [self.x, self.output, self.input_offsets, self.send_sizes, self.output_offsets,
                self.recv_sizes]


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def values(rng: np.random.Generator, shape, dt: str) -> np.ndarray:
    dtype = DTYPES[dt]
    if dt == "pred":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(-100, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def _layout(rng, sizes: np.ndarray) -> tuple[np.ndarray, int]:
    """Positions for chunks of the given sizes [a, b] in a random order with random gaps;
    returns (positions [a, b], rows used)."""
    pos = np.zeros(sizes.shape, np.int64)
    at = int(rng.integers(0, 2))
    for idx in rng.permutation(sizes.size):
        i, u = divmod(int(idx), sizes.shape[1])
        pos[i, u] = at
        at += int(sizes[i, u]) + int(rng.integers(0, 2))
    return pos, at


def make_group(n: int, k: int, row: tuple[int, ...], dt: str, rng: np.random.Generator, *,
               index: str = "s32", rank2: bool = False, max_size: int = 4,
               min_rows: int = 1) -> list[Member]:
    """Operands of every member of a group of n with k updates per peer.

    size[s, d, u] rows go from s to d in update u; each sender lays its chunks out in a random
    order with gaps, each receiver chooses where every incoming chunk lands (also shuffled), and
    the senders' output_offsets carry those places.  Every member gets the same (padded) row
    counts, as one HLO module's static shapes require; ``min_rows`` >= 1 + n*k*max_size gives
    every group of n the same counts.
    """
    size = rng.integers(0, max_size, (n, n, k))
    size[0, n - 1, k - 1] = max(1, size[0, n - 1, k - 1])  # never an exchange of nothing
    src = [_layout(rng, size[s]) for s in range(n)]                 # [s]: pos[j, u]
    dst = [_layout(rng, size[:, d, :]) for d in range(n)]           # [d]: pos[s, u]
    rows_in = max(min_rows, max(r for _, r in src))
    rows_out = max(min_rows, max(r for _, r in dst))
    itype = INDEX_TYPES[index]
    shape = (n, k) if rank2 else (n * k,)

    def meta(a) -> np.ndarray:
        return np.asarray(a, np.int64).astype(itype).reshape(shape)

    return [Member(x=values(rng, (rows_in, *row), dt), output=values(rng, (rows_out, *row), dt),
                   input_offsets=meta(src[p][0]), send_sizes=meta(size[p]),
                   output_offsets=meta([[dst[j][0][p, u] for u in range(k)] for j in range(n)]),
                   recv_sizes=meta(size[:, p, :]))
            for p in range(n)]


def reference(members: list[Member], p: int) -> np.ndarray:
    """Member p's result: its output with every chunk sent to it written where the sender said,
    senders in member order, updates in order."""
    n = len(members)
    k = members[0].send_sizes.size // n
    out = members[p].output.copy()
    for s, m in enumerate(members):
        io, ss, oo = (np.asarray(a, np.int64).reshape(-1)
                      for a in (m.input_offsets, m.send_sizes, m.output_offsets))
        for u in range(k):
            e = p * k + u
            out[oo[e]:oo[e] + ss[e]] = m.x[io[e]:io[e] + ss[e]]
    return out


def hlo_type(a: np.ndarray) -> str:
    names = {**{v: k for k, v in DTYPES.items()}, **{v: k for k, v in INDEX_TYPES.items()}}
    return f"{names[a.dtype]}[{','.join(map(str, a.shape))}]"


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Exact equality in dtype, shape and bits (a pure data movement)."""
    return got.dtype == want.dtype and got.shape == want.shape \
        and got.tobytes() == want.tobytes()
