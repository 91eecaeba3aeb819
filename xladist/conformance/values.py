"""Element types and the operands the suite feeds its programs.

Every operand is a pure function of (seed, device, key, dims, type, values kind), where
`key` names the case and operand (not its position in a module), so a case gets the same
inputs whether it runs with hundreds of others or alone (`--select` its name).

Two kinds of values:
* ``small``: small integers in every type, so sums and products are exact in any order and
  every backend must agree bit for bit;
* ``edge:<reducer>`` (and ``edge`` for data movement): the values where implementations part
  ways -- NaNs with payloads and both signs, signalling NaNs, -0, +-inf, subnormals, the
  largest finite value, round-to-nearest-even ties for bf16/f8 sums, integer wrap-around. For
  a reduction they are laid out so that every order of the fold gives the same result (no
  two NaNs, no +0/-0 mix under max/min, ties between two non-zero members only), so a
  backend may reduce in any order and still has to match; positions whose expected value is
  NaN accept any NaN (docs/reference/collective-semantics.md C.10 leaves the reduction order,
  hence the payload, to the implementation). Data movement must keep every bit.
"""

from __future__ import annotations

import zlib
from functools import cache

import ml_dtypes
import numpy as np

from xladist.hlo.shape import primitive_type

# The element types the default run covers, and the rest of XLA's array types (--full).
DEFAULT_TYPES = ("pred", "s8", "u8", "s32", "s64", "f16", "bf16", "f32", "f64", "c64")
MORE_TYPES = ("s4", "u4", "s16", "u16", "u32", "u64", "c128", "f8e4m3fn", "f8e5m2",
              "f8e4m3", "f8e3m4", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz", "f8e8m0fnu",
              "f4e2m1fn", "s2", "u2")
ALL_TYPES = DEFAULT_TYPES + MORE_TYPES


@cache
def dtype(dt: str) -> np.dtype:
    return primitive_type(dt).dtype


def kind(dt: str) -> str:
    """pred, sint, uint, float or complex."""
    return primitive_type(dt).kind


def is_float(dt: str) -> bool:
    return kind(dt) == "float"


# ---- reducers: the numpy meaning of the suite's to_apply computations ------------------------

def _select_gt(a, b):
    return np.where(a > b, a, b)


def _select_pred(a, b):
    return np.where(a, a, b)


REDUCER_FNS = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum,
               "minimum": np.minimum, "and": np.logical_and, "or": np.logical_or,
               "sel": _select_gt, "sel_pred": _select_pred}


def reducers_for(dt: str) -> list[str]:
    """The suite's reducers for an element type: the four arithmetic ones (and/or on pred) and
    `sel`, a select-based reducer no MPI builtin matches (complex numbers have no order)."""
    if dt == "pred":
        return ["and", "or", "sel"]
    if kind(dt) == "complex":
        return ["add", "multiply"]
    if dt == "f8e8m0fnu":  # no zero, no sign: a sum or product of powers of two only
        return ["multiply", "maximum", "minimum", "sel"]
    return ["add", "multiply", "maximum", "minimum", "sel"]


def reduce_fn(red: str, dt: str):
    return REDUCER_FNS["sel_pred" if (red == "sel" and dt == "pred") else red]


def fold(red: str, dt: str, xs: list[np.ndarray]) -> np.ndarray:
    """Left fold in member order, in the element type."""
    fn = reduce_fn(red, dt)
    acc = np.asarray(xs[0])
    with np.errstate(all="ignore"):
        for x in xs[1:]:
            acc = np.asarray(fn(acc, x)).astype(dtype(dt))
    return np.asarray(acc, dtype(dt))


# ---- small integers ------------------------------------------------------------------------

def _rng(seed: int, device: int, key: str, dims, dt: str) -> np.random.Generator:
    return np.random.default_rng([seed, device, zlib.crc32(f"{key}|{tuple(dims)}|{dt}".encode())])


def small_input(seed: int, device: int, key: str, dims, dt: str, red: str | None = None,
                exact: bool = True) -> np.ndarray:
    """Small integers of the type, exact under `red` in any order (or, exact=False, normal
    samples whose sums depend on the order of the additions)."""
    rng = _rng(seed, device, key, dims, dt)
    t, k = dtype(dt), kind(dt)
    if not exact:
        x = rng.standard_normal(dims)
        if k == "complex":
            x = x + 1j * rng.standard_normal(dims)
        return x.astype(t)
    if k == "pred":
        return rng.integers(0, 2, dims).astype(bool)
    if k == "uint":
        return rng.integers(0, min(5, int(ml_dtypes.iinfo(t).max) + 1), dims).astype(t)
    if k == "complex":
        return (rng.integers(-3, 4, dims) + 1j * rng.integers(-3, 4, dims)).astype(t)
    if dt == "f8e8m0fnu":  # powers of two only (no zero, no sign)
        return np.exp2(rng.integers(-2, 3, dims).astype(np.float64)).astype(t)
    if k == "sint":
        lo, hi = max(-3, int(ml_dtypes.iinfo(t).min)), min(4, int(ml_dtypes.iinfo(t).max) + 1)
    elif t.itemsize == 1 and red in ("add", "multiply"):
        # sums of 8 and products stay exact in 3 significand bits (f4e2m1fn: 4 members)
        lo, hi = -1, 2
        if dt == "f4e2m1fn" and device >= 4:
            lo, hi = 0, 1
    elif t.itemsize == 2 and red == "multiply":
        lo, hi = -2, 3  # 2**8 is exact in bf16, 3**8 is not
    else:
        lo, hi = -3, 4
    return rng.integers(lo, hi, dims).astype(t)


# ---- edge values ---------------------------------------------------------------------------

class FloatBits:
    """Bit patterns of one float type: NaNs (with payloads, both signs, signalling where the
    type has them), infinities, zeros, subnormals and the extremes, as the type really has
    them (8-bit and 4-bit types are read off all their patterns)."""

    def __init__(self, dt: str):
        self.dt = dt
        self.t = dtype(dt)
        self.uint = np.dtype(f"u{self.t.itemsize}")
        fi = ml_dtypes.finfo(self.t) if self.t not in (np.float16, np.float32, np.float64) \
            else np.finfo(self.t)
        self.max = float(fi.max)
        self.tiny = float(fi.smallest_normal)
        self.min_sub = float(fi.smallest_subnormal)
        self.eps = float(fi.eps)
        self.nans, self.specials = self._patterns()
        decoded = {b: float(self.of_bits(b)) for b in self.specials}
        self.has_inf = any(np.isinf(v) for v in decoded.values())
        self.has_negzero = any(v == 0 and np.signbit(v) for v in decoded.values())
        self.has_zero = any(v == 0 for v in decoded.values())
        self.has_subnormal = self.min_sub < self.tiny

    def of_bits(self, bits: int):
        return np.array(bits, self.uint).view(self.t)[()]

    def _patterns(self) -> tuple[list[int], list[int]]:
        if self.t.itemsize == 1:
            every = np.arange(256 if self.dt != "f4e2m1fn" else 16, dtype=np.uint8)
            values = every.view(self.t).astype(np.float64)
            nans = [int(b) for b, v in zip(every, values) if np.isnan(v)]
            return nans[:1] + nans[-1:] + nans[len(nans) // 2:len(nans) // 2 + 1], \
                [int(b) for b in every]
        bits = self.t.itemsize * 8
        nmant = {2: 10 if self.t == np.float16 else 7, 4: 23, 8: 52}[self.t.itemsize]
        sign, quiet = 1 << (bits - 1), 1 << (nmant - 1)
        exp = ((1 << (bits - 1)) - 1) ^ ((1 << nmant) - 1)
        # quiet with a payload, negative quiet, signalling with a payload
        nans = [exp | quiet | 0x5, sign | exp | quiet, exp | 0x3]
        return nans, nans + [exp, sign | exp, sign, 0, 1, sign | 1]

    def value(self, v) -> np.ndarray:
        """A float64 value (or ('bits', pattern)) as the type."""
        if isinstance(v, tuple):
            return np.array(v[1], self.uint).view(self.t)
        return np.array(v, np.float64).astype(self.t)


def _movement_floats(fb: FloatBits) -> list:
    """What data movement must carry bit for bit."""
    out = [("bits", b) for b in fb.nans]
    if fb.has_inf:
        out += [np.inf, -np.inf]
    if fb.has_negzero:
        out.append(-0.0)
    if fb.has_zero:
        out.append(0.0)
    if fb.has_subnormal:
        out += [fb.min_sub, -fb.tiny + fb.min_sub if fb.has_negzero else fb.tiny - fb.min_sub]
    return out + [fb.max, fb.tiny, 1.0, -1.5 if fb.has_negzero else 1.5]


def _float_scenarios(fb: FloatBits, red: str) -> list:
    """Per position: f(device) -> value, each order-independent under `red` (module doc)."""
    nan = ("bits", fb.nans[0]) if fb.nans else None
    one = 1.0
    signed = fb.has_negzero or fb.dt.endswith("fnuz")
    zero = 0.0 if fb.has_zero else one  # e8m0 has none; `one` is its neutral for products
    sc = []
    add = sc.append
    if red == "add":
        if fb.nans:
            add(lambda d: nan if d == 0 else one)
        if fb.has_inf:
            add(lambda d: np.inf if d == 0 else one)
            add(lambda d: np.inf if d == 0 else -np.inf if d == 1 else zero)
        if fb.has_negzero:
            add(lambda d: -0.0)
            add(lambda d: -0.0 if d == 0 else 0.0)
        if fb.has_subnormal:
            add(lambda d: fb.min_sub if d < 2 else zero)
            add(lambda d: fb.tiny - fb.min_sub if d == 0 else zero)
        # round-to-nearest-even ties: 1 + half an ulp -> 1; (1 + ulp) + half an ulp -> 1 + 2 ulp
        add(lambda d: one if d == 0 else fb.eps / 2 if d == 1 else zero)
        add(lambda d: one + fb.eps if d == 0 else fb.eps / 2 if d == 1 else zero)
        add(lambda d: fb.max if d < 2 else zero)  # overflow
        if signed:
            add(lambda d: -one - fb.eps if d == 0 else -fb.eps / 2 if d == 1 else zero)
    elif red == "multiply":
        if fb.nans:
            add(lambda d: nan if d == 0 else one)
        if fb.has_inf and fb.has_zero:
            add(lambda d: np.inf if d == 0 else 0.0 if d == 1 else one)
        if fb.has_negzero:
            add(lambda d: -0.0 if d == 0 else one)
            add(lambda d: -0.0 if d == 0 else -one if d == 1 else one)
        if fb.has_subnormal:
            add(lambda d: fb.min_sub if d == 0 else one)
            add(lambda d: fb.min_sub if d == 0 else 0.5 if d == 1 else one)  # tie to zero
        add(lambda d: 2.0 if d == 1 else 0.5 if d == 2 else one)  # exact, in range
        add(lambda d: fb.max if d == 0 else 2.0 if d == 1 else one)  # overflow
    elif red in ("maximum", "minimum", "sel"):
        if red != "sel" and fb.nans:
            add(lambda d: nan if d == 0 else one)
        if fb.has_inf:
            add(lambda d: -np.inf if d == 0 else np.inf if d == 1 else one)
        if fb.has_negzero:
            add(lambda d: -0.0)
            add(lambda d: -0.0 if d == 0 else one)
        if fb.has_subnormal:
            add(lambda d: (d + 1) * fb.min_sub * (-1 if d % 2 and signed else 1))
        add(lambda d: fb.max if d == 0 else -fb.max if d == 1 and signed else one)
    return sc


def _int_scenarios(dt: str, red: str | None) -> list:
    info = ml_dtypes.iinfo(dtype(dt))
    lo, hi, signed = int(info.min), int(info.max), kind(dt) == "sint"
    half = 1 << (info.bits // 2)
    if red is None:
        return [lambda d, v=v: v for v in (lo, hi, 0, 1, lo + 1, hi - 1)]
    if red == "add":
        return [lambda d: hi, lambda d: lo if d == 0 else -1 if (d == 1 and signed) else 1,
                lambda d: hi if d == 0 else 1 if d == 1 else 0]
    if red == "multiply":
        return [lambda d: hi, lambda d: min(half, hi),
                lambda d: lo if d == 0 else (-1 if signed and d == 1 else 1)]
    return [lambda d: lo if d == 0 else hi if d == 1 else 0, lambda d: max(lo, hi - d),
            lambda d: min(hi, lo + d)]


def edge_input(device: int, dims, dt: str, red: str | None) -> np.ndarray:
    """The edge values of `dt` for reducer `red` (None: data movement), laid out over dims."""
    t, k = dtype(dt), kind(dt)
    count = int(np.prod(dims, dtype=np.int64))
    if k == "pred":
        flat = np.array([(i + device) % 3 == 0 for i in range(count)], bool)
    elif k in ("sint", "uint"):
        sc = _int_scenarios(dt, red)
        wide = np.uint64 if k == "uint" else np.int64
        flat = np.array([sc[i % len(sc)](device) for i in range(count)], wide).astype(t)
    else:
        part = {"complex64": "f32", "complex128": "f64"}.get(t.name, dt)
        fb = FloatBits(part)
        if red is None:
            pool = _movement_floats(fb)
            vals = [fb.value(pool[(i + 3 * device) % len(pool)]) for i in range(count)]
            if k == "complex":
                imag = [fb.value(pool[(i + 5 * device + 1) % len(pool)]) for i in range(count)]
                return _complex(t, vals, imag, dims)
        else:
            sc = _float_scenarios(fb, "multiply" if (k == "complex" and red == "multiply")
                                  else red)
            if k == "complex" and red == "multiply":  # real powers of two: exact products
                sc = [lambda d: 2.0 if d == 1 else 0.5 if d == 2 else 1.0]
            vals = [fb.value(sc[i % len(sc)](device)) for i in range(count)]
            if k == "complex":
                return _complex(t, vals, [fb.value(0.0)] * count, dims)
        flat = np.array([v[()] for v in vals], t) if vals else np.zeros(0, t)
    return flat.reshape(dims)


def _complex(t, real, imag, dims) -> np.ndarray:
    out = np.zeros(len(real), t)
    part = out.view(real[0].dtype if real else np.float32).reshape(-1, 2) if real else None
    if part is not None:
        part[:, 0] = [r[()] for r in real]
        part[:, 1] = [i[()] for i in imag]
    return out.reshape(dims)


def make_input(seed: int, device: int, key: str, dims, dt: str, values: str = "small"
               ) -> np.ndarray:
    """One operand (module doc). values: "small", "inexact" or "edge", optionally with the
    reducer the operand feeds: "small:multiply", "edge:add"."""
    dims = tuple(dims)
    what, _, red = values.partition(":")
    if what == "small":
        return small_input(seed, device, key, dims, dt, red or None)
    if what == "inexact":
        return small_input(seed, device, key, dims, dt, exact=False)
    if what == "edge":
        return edge_input(device, dims, dt, red or None)
    raise ValueError(f"unknown values kind {values!r}")
