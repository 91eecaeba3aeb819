"""rng-bit-generator's bits, exactly as XLA computes them: the one implementation the
interpreter's rule (interpreter/rng.py) and the cpu backend's library thunk
(compiler/library/rng.py) both call. (`xladist aot` emits the same algorithms as LLVM code,
compiler/aot/rng.py, and is tested against this.)

rng-bit-generator follows XLA's RngBitGeneratorExpander + prng.cc exactly, because
JAX programs (jax.random with the "rbg"/"unsafe_rbg" implementations, and
lax.rng_bit_generator) depend on the precise bits:

- state u64[N]: element 0 is the key; ThreeFry's counter is element 1 (u64),
  Philox's counter is the u128 (low=state[1], high=state[2]) when N >= 3, else
  (low=state[1], high=state[0]) -- the key doubles as the counter's high word.
- ThreeFry-2x32, 20 rounds. 32-bit outputs: the shape is split in halves on one
  dimension (the first even one, else the largest), each counter value yields two
  words that land next to each other along that dimension; the counter advances by
  the half size. 64-bit outputs: one counter per element, words combined lo|hi<<32.
- Philox-4x32, 10 rounds. Each u128 counter yields four words emitted round-robin;
  the counter advances by ceil(n/4) (ceil(2n/4) for 64-bit outputs).
- Narrower outputs (8/16 bits) take the low bits of the 32-bit stream.
- rng_default is Philox on XLA:CPU (the corpus case rng_bit_generator_algorithms
  shows it: its rng_default output equals the Philox output).

`rng`'s values are implementation-defined (each backend brings its own generator), but its
distributions are not: `rng_values` is the one rule both backends apply to their generator.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
# Which states each algorithm takes: shape inference's rule, checked again where a backend
# runs the op (a module run without verification).
from ..hlo.shape_inference.control import rng_state_problem as state_problem

_U32 = np.uint32
_U64 = np.uint64
_MASK32 = np.uint64(0xFFFFFFFF)


def _rotl32(v: np.ndarray, d: int) -> np.ndarray:
    return (v << _U32(d)) | (v >> _U32(32 - d))


def threefry2x32(x0: np.ndarray, x1: np.ndarray, k0, k1) -> tuple[np.ndarray, np.ndarray]:
    """ThreeFry-2x32 with 20 rounds (Salmon et al. 2011), on u32 arrays; wraps mod 2**32."""
    rotations = (13, 15, 26, 6, 17, 29, 16, 24)
    k0, k1 = np.asarray(k0, _U32).reshape(1), np.asarray(k1, _U32).reshape(1)
    ks = (k0, k1, np.uint32(0x1BD11BDA) ^ k0 ^ k1)
    x0 = x0.astype(_U32) + ks[0]
    x1 = x1.astype(_U32) + ks[1]
    # Five groups of four rounds; after group g the key schedule injects ks and g.
    for group in range(5):
        rots = rotations[:4] if group % 2 == 0 else rotations[4:]
        for r in rots:
            x0 = x0 + x1
            x1 = _rotl32(x1, r) ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + (ks[(group + 2) % 3] + _U32(group + 1))
    return x0, x1


def philox4x32(words: list[np.ndarray], k0, k1) -> list[np.ndarray]:
    """Philox-4x32 with 10 rounds on four u32 arrays."""
    m_a, m_b = _U64(0xD2511F53), _U64(0xCD9E8D57)
    w_a, w_b = _U32(0x9E3779B9), _U32(0xBB67AE85)
    # 1-element arrays, not scalars: numpy wraps array arithmetic silently.
    k0, k1 = np.asarray(k0, _U32).reshape(1), np.asarray(k1, _U32).reshape(1)
    x = [w.astype(_U32) for w in words]
    for _ in range(10):
        p0 = x[0].astype(_U64) * m_a
        p1 = x[2].astype(_U64) * m_b
        hi0, lo0 = (p0 >> _U64(32)).astype(_U32), (p0 & _MASK32).astype(_U32)
        hi1, lo1 = (p1 >> _U64(32)).astype(_U32), (p1 & _MASK32).astype(_U32)
        x = [hi1 ^ x[1] ^ k0, lo1, hi0 ^ x[3] ^ k1, lo0]
        k0, k1 = k0 + w_a, k1 + w_b
    return x


def _split32(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = np.asarray(v, _U64)
    return (v & _MASK32).astype(_U32), (v >> _U64(32)).astype(_U32)


def _join64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(_U64) | (hi.astype(_U64) << _U64(32))


def _split_dim(dims: tuple[int, ...]) -> int:
    """prng.cc SplitShapeIntoHalves: first even dimension, else the largest (first)."""
    for i, d in enumerate(dims):
        if d % 2 == 0:
            return i
    return max(range(len(dims)), key=lambda i: (dims[i], -i))


def _threefry_u32(key: int, counter: int, dims: tuple[int, ...]):
    k0, k1 = _split32(np.uint64(key))
    if not dims:
        x0, _ = threefry2x32(*_split32(np.array([counter], _U64)), k0, k1)
        return x0.reshape(()), counter + 1
    s = _split_dim(dims)
    half = list(dims)
    half[s] = -(-dims[s] // 2)
    n_half = int(np.prod(half))
    ctr = np.uint64(counter) + np.arange(n_half, dtype=_U64)
    o0, o1 = threefry2x32(*_split32(ctr), k0, k1)
    # Word c of counter j lands at position 2*j + c of the split dimension.
    pair = np.stack([o0.reshape(half), o1.reshape(half)], axis=s + 1)
    full = list(dims)
    full[s] = 2 * half[s]
    out = pair.reshape(full)
    out = out[tuple(slice(0, d) for d in dims)]
    return np.ascontiguousarray(out), counter + n_half


def _threefry_u64(key: int, counter: int, dims: tuple[int, ...]):
    k0, k1 = _split32(np.uint64(key))
    n = int(np.prod(dims, dtype=np.int64))
    ctr = np.uint64(counter) + np.arange(n, dtype=_U64)
    o0, o1 = threefry2x32(*_split32(ctr), k0, k1)
    return _join64(o0, o1).reshape(dims), counter + n


def _philox_words(key: int, ctr_lo: int, ctr_hi: int, n_vec: int):
    """n_vec Philox blocks for counters (ctr_lo, ctr_hi) + 0..n_vec-1 as a u128."""
    iota = np.arange(n_vec, dtype=_U64)
    lo = np.uint64(ctr_lo) + iota
    hi = np.where(lo < np.uint64(ctr_lo), np.uint64(ctr_hi) + np.uint64(1),
                  np.uint64(ctr_hi)).astype(_U64)
    words = [*_split32(lo), *_split32(hi)]
    k0, k1 = _split32(np.uint64(key))
    new_lo = (ctr_lo + n_vec) & 0xFFFFFFFFFFFFFFFF
    new_hi = (ctr_hi + (1 if new_lo < ctr_lo else 0)) & 0xFFFFFFFFFFFFFFFF
    return philox4x32(words, k0, k1), (new_lo, new_hi)


def _philox_u32(key, ctr_lo, ctr_hi, dims):
    n = int(np.prod(dims, dtype=np.int64))
    n_vec = -(-n // 4)
    words, new = _philox_words(key, ctr_lo, ctr_hi, n_vec)
    flat = np.stack(words, axis=1).reshape(-1)[:n]  # round-robin over the 4 words
    return flat.reshape(dims), new


def _philox_u64(key, ctr_lo, ctr_hi, dims):
    n = int(np.prod(dims, dtype=np.int64))
    n_vec = -(-2 * n // 4)
    w, new = _philox_words(key, ctr_lo, ctr_hi, n_vec)
    flat = np.stack([_join64(w[0], w[1]), _join64(w[2], w[3])], axis=1).reshape(-1)[:n]
    return flat.reshape(dims), new


def rng_bit_generator(state: np.ndarray, algorithm: str, dtype, dims) -> tuple:
    """(new_state, bits) exactly as XLA computes them; dtype is the bits' numpy dtype."""
    state = np.asarray(state, _U64)
    dtype = np.dtype(dtype)
    dims = tuple(int(d) for d in dims)
    bits = dtype.itemsize * 8
    if bits not in (8, 16, 32, 64):
        raise UnsupportedError(f"rng-bit-generator cannot produce {bits}-bit elements")
    if algorithm == "rng_default":
        algorithm = "rng_philox"
    problem = state_problem(algorithm, "u64", state.shape)
    if problem:
        raise UnsupportedError(f"rng-bit-generator: {problem}")
    key = int(state[0])
    new_state = state.copy()
    if algorithm == "rng_three_fry":
        if bits == 64:
            out, ctr = _threefry_u64(key, int(state[1]), dims)
        else:
            out, ctr = _threefry_u32(key, int(state[1]), dims)
        new_state[1] = np.uint64(ctr & 0xFFFFFFFFFFFFFFFF)
    elif algorithm == "rng_philox":
        wide = len(state) >= 3
        ctr_lo, ctr_hi = int(state[1]), int(state[2] if wide else state[0])
        gen = _philox_u64 if bits == 64 else _philox_u32
        out, (lo, hi) = gen(key, ctr_lo, ctr_hi, dims)
        new_state[1] = np.uint64(lo)
        if wide:
            new_state[2] = np.uint64(hi)
    else:
        raise UnsupportedError(f"rng-bit-generator algorithm {algorithm!r} is not known "
                               "(expected rng_default, rng_three_fry or rng_philox)")
    if bits < 32:
        out = out.astype(np.dtype(f"uint{bits}"))  # keep the low bits
    return new_state, out.view(dtype) if out.dtype != dtype else out


# ---- rng: the distributions (the values come from the caller's generator) ----------

def _uniform(gen: np.random.Generator, a, b, dims, dtype) -> np.ndarray:
    """Uniform over [a, b) (XLA's RngUniform). b <= a is implementation-defined in XLA:
    integers give a, floats a + u * (b - a)."""
    if dtype.kind in "iu":
        lo, hi = int(a), int(b)
        if hi <= lo:
            return np.full(dims, lo, dtype)
        draw = np.uint64 if dtype == np.uint64 else np.int64  # u64 bounds past 2**63
        return gen.integers(lo, hi, size=dims, dtype=draw).astype(dtype)
    if dtype == np.bool_:
        return gen.integers(0, 2, size=dims).astype(bool)
    wide = np.float64
    u = gen.random(size=dims, dtype=wide)
    val = (np.asarray(a, wide) + u * (np.asarray(b, wide) - np.asarray(a, wide))).astype(dtype)
    a_t, b_t = np.asarray(a).astype(dtype), np.asarray(b).astype(dtype)
    if not a_t < b_t:
        return val
    # Rounding to a narrow type can reach b: those become the largest value below b, found
    # in the type itself (a step taken in f64 rounds back to b in f16 or bf16), towards a
    # (float8 types have no -inf to step towards).
    below = np.nextafter(b_t, a_t)
    return np.where(val >= b_t, below, val).astype(dtype)


def _normal(gen: np.random.Generator, mu, sigma, dims, dtype) -> np.ndarray:
    """mu + sigma * N(0, 1), as XLA's expansion computes it: a negative sigma is valid."""
    z = gen.standard_normal(size=dims)
    return (np.asarray(mu, np.float64) + np.asarray(sigma, np.float64) * z).astype(dtype)


_DISTRIBUTIONS = {"rng_uniform": _uniform, "rng_normal": _normal}


def rng_values(distribution: str, gen: np.random.Generator, a, b, dims, dtype) -> np.ndarray:
    """`rng(a, b), distribution=...`'s result of shape dims and type dtype, drawn from gen."""
    fn = _DISTRIBUTIONS.get(distribution)
    if fn is None:
        raise UnsupportedError(f"rng distribution {distribution!r} is not one of "
                               f"{sorted(_DISTRIBUTIONS)}")
    a, b = (np.asarray(x).reshape(()) for x in (a, b))
    return fn(gen, a, b, tuple(dims), np.dtype(dtype))
