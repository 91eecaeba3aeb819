"""rng-bit-generator as a library thunk, bit-exact with XLA:CPU.

XLA expands the op (RngBitGeneratorExpander + hlo/builder/lib/prng.cc) into
integer HLO; we compute the same bits with numpy on whole arrays:
  state u64[N]: state[0] is the key.
  ThreeFry-2x32 (20 rounds): counter state[1]; counters are counter + row-major
    index. 32-bit results split one dimension (the first even one, else the
    largest) in halves; each counter yields two words placed side by side along
    it. 64-bit results: one counter per element, lo | hi << 32. Narrow results
    keep the low bits of the 32-bit stream.
  Philox-4x32 (10 rounds): counter is the u128 (state[1], state[2]) when N >= 3,
    else (state[1], state[0]); each counter yields 4 words, emitted round-robin.
  rng_default is Philox on XLA:CPU.
New state: [key, counter advanced by the number of counters used].
"""

from __future__ import annotations

import numpy as np

from .core import library

_U32, _U64 = np.uint32, np.uint64
_M32 = _U64(0xFFFFFFFF)


def _rotl(v, d):
    return (v << _U32(d)) | (v >> _U32(32 - d))


def _threefry2x32(x0, x1, k0, k1):
    rot = (13, 15, 26, 6, 17, 29, 16, 24)
    k2 = _U32(0x1BD11BDA) ^ k0 ^ k1
    ks = (k0, k1, k2)
    x0 = x0 + k0
    x1 = x1 + k1
    for block in range(5):
        for r in rot[(block % 2) * 4:(block % 2) * 4 + 4]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + _U32(block + 1)
    return x0, x1


def _split_u64(v):
    return (v & _M32).astype(_U32), (v >> _U64(32)).astype(_U32)


def _split_halves(dims):
    """(half dims, split dim) as XLA's SplitShapeIntoHalves."""
    if not dims:
        return (1,), 0
    split = next((i for i, d in enumerate(dims) if d % 2 == 0), None)
    if split is None:
        split = max(range(len(dims)), key=lambda i: (dims[i], -i))
    half = list(dims)
    half[split] = (dims[split] + 1) // 2
    half.insert(split + 1, 1)
    return tuple(half), split


def _threefry(key, counter, dims, bits):
    k0, k1 = _split_u64(key)
    with np.errstate(over="ignore"):
        if bits == 64:
            n = int(np.prod(dims, dtype=np.int64))
            x0, x1 = _split_u64(counter + np.arange(n, dtype=_U64))
            y0, y1 = _threefry2x32(x0, x1, k0, k1)
            out = (y0.astype(_U64) | (y1.astype(_U64) << _U64(32))).reshape(dims)
            return out, counter + _U64(n)
        half, split = _split_halves(dims)
        n = int(np.prod(half, dtype=np.int64))
        x0, x1 = _split_u64(counter + np.arange(n, dtype=_U64))
        y0, y1 = _threefry2x32(x0, x1, k0, k1)
        if not dims:
            return y0.reshape(()), counter + _U64(n)
        pair = np.concatenate([y0.reshape(half), y1.reshape(half)], axis=split + 1)
        full = list(dims)
        full[split] = 2 * half[split]
        out = pair.reshape(full)[tuple(slice(0, d) for d in dims)]
        return out, counter + _U64(n)


def _philox4x32(x, k0, k1):
    ma, mb = _U64(0xD2511F53), _U64(0xCD9E8D57)
    wa, wb = _U32(0x9E3779B9), _U32(0xBB67AE85)
    x0, x1, x2, x3 = x
    for _ in range(10):
        p0 = x0.astype(_U64) * ma
        p1 = x2.astype(_U64) * mb
        x0, x1, x2, x3 = ((p1 >> _U64(32)).astype(_U32) ^ x1 ^ k0, (p1 & _M32).astype(_U32),
                          (p0 >> _U64(32)).astype(_U32) ^ x3 ^ k1, (p0 & _M32).astype(_U32))
        k0, k1 = k0 + wa, k1 + wb
    return x0, x1, x2, x3


def _u128_add(lo, hi, v):
    new_lo = lo + v
    new_hi = np.where(new_lo < lo, hi + _U64(1), hi)
    return new_lo, new_hi


def _philox(key, lo, hi, dims, bits):
    k0, k1 = _split_u64(key)
    n = int(np.prod(dims, dtype=np.int64))
    words = n * 2 if bits == 64 else n
    n4 = (words + 3) // 4
    with np.errstate(over="ignore"):
        clo, chi = _u128_add(lo, hi, np.arange(n4, dtype=_U64))
        a, b = _split_u64(clo)
        c, d = _split_u64(np.broadcast_to(chi, clo.shape))
        y = _philox4x32((a, b, c, d), k0, k1)
        if bits == 64:
            w0 = y[0].astype(_U64) | (y[1].astype(_U64) << _U64(32))
            w1 = y[2].astype(_U64) | (y[3].astype(_U64) << _U64(32))
            out = np.stack([w0, w1], axis=1).reshape(-1)[:n].reshape(dims)
        else:
            out = np.stack(y, axis=1).reshape(-1)[:n].reshape(dims)
        new_lo, new_hi = _u128_add(lo, hi, _U64(n4))
    return out, new_lo, new_hi


@library("rng-bit-generator")
def _rng_bit_generator(instr, args, outs):
    state = np.asarray(args[0]).astype(_U64)
    new_state, data = outs
    alg = str(instr.attrs["algorithm"]).lower()
    dims = tuple(data.shape)
    bits = data.dtype.itemsize * 8
    key = state[0]
    result = state.copy()
    if "three_fry" in alg or "threefry" in alg:
        out, counter = _threefry(key, state[1], dims, 64 if bits == 64 else 32)
        result[1] = counter
    else:  # rng_philox and rng_default
        if state.shape[0] >= 3:
            lo, hi = state[1], state[2]
        else:
            lo, hi = state[1], state[0]
        out, new_lo, new_hi = _philox(key, lo, hi, dims, 64 if bits == 64 else 32)
        result[1] = new_lo
        if state.shape[0] >= 3:
            result[2] = new_hi
    new_state[...] = result.view(new_state.dtype) if new_state.dtype != _U64 else result
    if bits < 32:
        out = out.astype(np.dtype(f"uint{bits}"))
    data[...] = np.ascontiguousarray(out).view(data.dtype).reshape(dims)
