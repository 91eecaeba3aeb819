"""8/4-bit floats (f8*, f4e2m1fn) and sub-byte integers (s2, s4, u2, u4) in the cpu
backend, bit for bit against ml_dtypes (the independent reference for the formats),
hand-written XLA integer semantics, and the interpreter."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import xladist
from xladist.compiler.codegen.lowbits import SMALL_FLOATS, SUB_BYTE_INTS
from xladist.hlo.shape import PRIMITIVE_TYPES, primitive_type
from tests.optional import need_jax

FLOATS = sorted(SMALL_FLOATS)
INTS = sorted(SUB_BYTE_INTS)


def dtype(t):
    return primitive_type(t).dtype


def run(text, *args, backend="cpu"):
    return xladist.compile(xladist.parse_hlo(text), backend=backend)(*args)


def run_both(text, *args):
    """(interpreter results, cpu results)."""
    return run(text, *args, backend="interpreter"), run(text, *args)


def all_patterns(t) -> np.ndarray:
    """Every storage pattern of t, canonical (high bits zero), as a t array."""
    n = 1 << primitive_type(t).bits
    return np.arange(n, dtype=np.uint8).view(dtype(t))


def bits(a) -> np.ndarray:
    """The bit pattern of each element; sub-byte types masked to their width."""
    a = np.asarray(a)
    if a.dtype.itemsize == 1 and a.dtype != np.bool_:
        u = a.view(np.uint8)
        n = primitive_type_of(a.dtype).bits
        return u & np.uint8((1 << n) - 1) if n < 8 else u
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]) \
        if a.dtype != np.bool_ else a


def primitive_type_of(dt):
    from xladist.hlo.shape import primitive_type_of_dtype
    return primitive_type_of_dtype(dt)


def assert_same(got, want, nan_sign_free=False):
    """Same dtype, same shape, same bits. nan_sign_free: any NaN matches any NaN (for
    arithmetic, where IEEE leaves the sign of a produced NaN open)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    gb, wb = bits(got), bits(want)
    same = gb == wb
    if nan_sign_free and got.dtype != np.bool_:  # (integers are never NaN)
        with np.errstate(invalid="ignore"):
            same |= np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    bad = np.nonzero(~same.ravel())[0]
    assert bad.size == 0, (f"{bad.size} of {same.size} differ, first at {bad[:5]}: got "
                           f"{gb.ravel()[bad[:5]]} want {wb.ravel()[bad[:5]]}")


def xla_cast(x, t) -> np.ndarray:
    """ml_dtypes' cast of x to t, except that f4e2m1fn (no NaN, no inf) stores every NaN as
    -0 (0x8), as XLA:CPU does (jax 0.10.2: f32/f64/f16/bf16/f8 NaNs of either sign ->
    0x8); ml_dtypes gives a zero of the NaN's sign inverted."""
    with np.errstate(all="ignore"):
        out = x.astype(dtype(t))
        if t == "f4e2m1fn":
            out = np.where(np.isnan(np.asarray(x).astype(np.float32)),
                           np.uint8(8).view(dtype(t)), out)
    return out


def unary_module(src, dst, n, op="convert"):
    return (f"HloModule m\nENTRY main {{\n a = {src}[{n}] parameter(0)\n"
            f" ROOT r = {dst}[{n}] {op}(a)\n}}\n")


# ---- storage and the encode/decode emitter ---------------------------------------------

@pytest.mark.parametrize("t", FLOATS)
def test_every_pattern_widens_to_f32_exactly(t):
    x = all_patterns(t)
    want = x.astype(np.float32)  # ml_dtypes: exact widening
    interp, cpu = run_both(unary_module(t, "f32", x.size), x)
    assert_same(cpu[0], want)
    assert_same(interp[0], want)


@pytest.mark.parametrize("t", FLOATS)
def test_every_pattern_round_trips_through_f32(t):
    x = all_patterns(t)
    n = x.size
    text = (f"HloModule m\nENTRY main {{\n a = {t}[{n}] parameter(0)\n"
            f" w = f32[{n}] convert(a)\n ROOT r = {t}[{n}] convert(w)\n}}\n")
    want = x.astype(np.float32).astype(x.dtype)  # NaN payloads become the canonical NaN
    interp, cpu = run_both(text, x)
    assert_same(cpu[0], want)
    assert_same(interp[0], want)
    finite = np.isfinite(x.astype(np.float32))
    assert np.array_equal(bits(cpu[0])[finite], bits(x)[finite])


def _boundary_values(t) -> np.ndarray:
    """f32 values at and around every rounding boundary of t: each representable value,
    the midpoints between neighbours and the f32 neighbours of those midpoints, the region
    above max (with a virtual next value), tiny values and f32 subnormals, +-inf, NaN."""
    v = np.unique(np.abs(all_patterns(t).astype(np.float64)))
    v = v[np.isfinite(v)]
    top = v[-1]
    v = np.concatenate([v, [top + (v[-1] - v[-2]), 2 * top, 4 * top]])
    mids = (v[:-1] + v[1:]) / 2
    base = np.concatenate([v, mids, v[:1] / 2, v[:1] / 4, [1e-45, 1e-40, 2.0 ** -127,
                                                           1.5 * 2.0 ** -127, 1e38, 3e38]])
    base = base[base < 3.4e38].astype(np.float32)
    up = np.nextafter(base, np.float32(np.inf))
    down = np.nextafter(base, np.float32(0))
    vals = np.concatenate([base, up, down])
    vals = np.concatenate([vals, -vals, np.float32([np.inf, -np.inf, np.nan, -np.nan])])
    return vals.astype(np.float32)


@pytest.mark.parametrize("t", FLOATS)
def test_f32_values_around_every_rounding_boundary(t):
    x = _boundary_values(t)
    with np.errstate(all="ignore"):
        want = xla_cast(x, t)  # ml_dtypes: nearest even, the type's overflow rule
    interp, cpu = run_both(unary_module("f32", t, x.size), x)
    assert_same(cpu[0], want)
    assert_same(interp[0], want)


def test_rounding_rules_per_format_by_hand():
    """A few values whose encoding is worked out by hand from each format's definition,
    so the table itself is checked, not only its agreement with ml_dtypes."""
    cases = {  # type: [(f32 value, expected pattern)]
        "f8e5m2": [(1.0, 0x3C), (1.125, 0x3C), (1.375, 0x3E), (57344.0, 0x7B),
                   (65536.0, 0x7C), (-np.inf, 0xFC), (np.nan, 0x7E), (-0.0, 0x80)],
        "f8e4m3fn": [(448.0, 0x7E), (464.0, 0x7E), (480.0, 0x7F), (np.inf, 0x7F),
                     (-np.inf, 0xFF), (2.0 ** -9, 0x01), (2.0 ** -10, 0x00)],
        "f8e4m3fnuz": [(-0.0, 0x00), (-(2.0 ** -12), 0x00), (np.nan, 0x80), (240.0, 0x7F),
                       (1e6, 0x80)],
        "f8e8m0fnu": [(1.0, 127), (1.5, 128), (3.0, 129), (0.0, 255), (-2.0, 255),
                      (2.0 ** 127, 254), (1.5 * 2.0 ** 127, 255)],
        "f4e2m1fn": [(0.25, 0x0), (0.75, 0x2), (5.0, 0x6), (100.0, 0x7), (-np.inf, 0xF),
                     (np.nan, 0x8), ("-nan", 0x8)],  # no NaN: -0, either sign (XLA)
    }
    for t, rows in cases.items():
        x = np.array([-np.float32(np.nan) if v == "-nan" else v for v, _ in rows], np.float32)
        got = bits(run(unary_module("f32", t, x.size), x)[0])
        assert got.tolist() == [p for _, p in rows], t


# ---- converts to and from every other type ---------------------------------------------

OTHER = ["f64", "f32", "f16", "bf16", "s64", "s32", "s8", "u32", "u8", "pred", "s4", "u4"]


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.slow
def test_convert_to_and_from_other_types(t):
    x = all_patterns(t)
    n = x.size
    outs = OTHER + FLOATS
    body = "".join(f" c{i} = {o}[{n}] convert(a)\n" for i, o in enumerate(outs))
    tup = ", ".join(f"c{i}" for i in range(len(outs)))
    shapes = ", ".join(f"{o}[{n}]" for o in outs)
    text = (f"HloModule m\nENTRY main {{\n a = {t}[{n}] parameter(0)\n{body}"
            f" ROOT r = ({shapes}) tuple({tup})\n}}\n")
    interp, cpu = run_both(text, x)
    for o, i, c in zip(outs, interp, cpu):
        assert_same(c, i)
        if o in FLOATS and o != t:
            try:
                want = xla_cast(x, o)  # ml_dtypes' direct cast, where it has one
            except TypeError:
                want = xla_cast(x.astype(np.float32), o)
            assert_same(c, want)


def rounded_once(x: np.ndarray, t: str) -> np.ndarray:
    """f64 values converted to the small float t with one rounding, as XLA:CPU converts
    them: in range, the nearest of t's finite values by exact comparison (zero keeps x's
    sign where t has -0); f8e8m0fnu below its smallest value 2^-127 NaN (XLA:CPU's rule,
    as for 0). Ties -- midpoints of t, exact in f32 -- and values past t's range go by
    xla_cast of their f32 value."""
    v = all_patterns(t).astype(np.float64)
    v = np.unique(v[np.isfinite(v)])
    out = xla_cast(x.astype(np.float32), t)
    for i, xi in enumerate(x):
        if t == "f8e8m0fnu" and xi < 2.0 ** -127:
            out[i] = np.array(np.nan, dtype(t))
        elif np.isfinite(xi) and abs(xi) <= v.max():
            d = np.abs(v - xi)
            near = np.flatnonzero(d == d.min())
            if len(near) == 1:
                out[i] = np.array(np.copysign(v[near[0]], xi)).astype(dtype(t))
    return out


def _sources(n):
    rng = np.random.default_rng(7)
    # (and values just off a midpoint of some small float: one rounding from f64 differs
    # from rounding through f32 there)
    edge = [1 + 2 ** -4 + 2 ** -40, 3e5, -3e5, np.inf, np.nan, -0.0, 1e-300, 2.5,
            1.5 - 2 ** -40, -(432 - 2 ** -30), 3 - 2 ** -30, 0.75 * 2.0 ** -127, 2.0 ** -127]
    f64 = np.concatenate([rng.normal(0, 30, n - len(edge)), edge])
    return {
        "f64": f64,
        "f32": f64.astype(np.float32),
        "f16": rng.normal(0, 30, n).astype(np.float16),
        "bf16": rng.normal(0, 30, n).astype(ml_dtypes.bfloat16),
        "s32": rng.integers(-1000, 1000, n).astype(np.int32),
        "u8": rng.integers(0, 256, n).astype(np.uint8),
        "s64": rng.integers(-2 ** 40, 2 ** 40, n),
        "pred": rng.integers(0, 2, n).astype(bool),
        "s4": rng.integers(-8, 8, n).astype(ml_dtypes.int4),
        "u4": rng.integers(0, 16, n).astype(ml_dtypes.uint4),
    }


@pytest.mark.parametrize("src", ["f64", "f32", "f16", "bf16", "s32", "u8", "s64", "pred",
                                 "s4", "u4"])
@pytest.mark.slow
def test_convert_into_every_small_float(src):
    n = 64
    x = _sources(n)[src]
    body = "".join(f" c{i} = {t}[{n}] convert(a)\n" for i, t in enumerate(FLOATS))
    tup = ", ".join(f"c{i}" for i in range(len(FLOATS)))
    shapes = ", ".join(f"{t}[{n}]" for t in FLOATS)
    text = (f"HloModule m\nENTRY main {{\n a = {src}[{n}] parameter(0)\n{body}"
            f" ROOT r = ({shapes}) tuple({tup})\n}}\n")
    interp, cpu = run_both(text, x)
    for t, i, c in zip(FLOATS, interp, cpu):
        assert_same(c, i)
        if src == "f64":
            assert_same(c, rounded_once(x, t))
        elif src in ("f32", "f16", "bf16"):
            with np.errstate(all="ignore"):
                assert_same(c, xla_cast(x.astype(np.float32), t))


def test_f64_to_f16_rounds_once():
    x = np.array([1 + 2 ** -11 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -40)])
    assert_same(run(unary_module("f64", "f16", 2), x)[0], x.astype(np.float16))


# ---- element-wise arithmetic, compare, select, reduce ----------------------------------

def _pairs(t):
    """Operand pairs covering every pattern against a spread of others."""
    x = all_patterns(t)
    n = x.size
    idx = np.arange(n)
    a = np.concatenate([x, x, x])
    b = np.concatenate([x[(idx * 37 + 11) % n], x[::-1], x[(idx + 1) % n]])
    return a, b


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.slow
def test_elementwise_chain_rounds_after_every_op(t):
    a, b = _pairs(t)
    n = a.size
    text = f"""HloModule m
ENTRY main {{
  a = {t}[{n}] parameter(0)
  b = {t}[{n}] parameter(1)
  s = {t}[{n}] add(a, b)
  m = {t}[{n}] multiply(s, a)
  d = {t}[{n}] divide(m, b)
  q = {t}[{n}] subtract(d, a)
  x = {t}[{n}] maximum(q, b)
  y = {t}[{n}] minimum(x, a)
  g = {t}[{n}] negate(y)
  h = {t}[{n}] abs(s)
  r = {t}[{n}] sqrt(h)
  c = {t}[{n}] ceil(d)
  f = {t}[{n}] floor(m)
  e = {t}[{n}] round-nearest-even(d)
  sg = {t}[{n}] sign(q)
  ROOT o = ({t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}], {t}[{n}]) tuple(g, r, c, f, e, sg, d)
}}
"""
    with np.errstate(all="ignore"):
        interp, cpu = run_both(text, a, b)
        # Independent reference for the first steps: ml_dtypes, rounding after each op.
        f = np.float32
        s = xla_cast(a.astype(f) + b.astype(f), t)
        m = xla_cast(s.astype(f) * a.astype(f), t)
        d = xla_cast(m.astype(f) / b.astype(f), t)
    assert_same(cpu[6], d, nan_sign_free=True)
    for i, c in zip(interp, cpu):
        assert_same(c, i, nan_sign_free=True)


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.slow
def test_compare_select_clamp_and_total_order(t):
    a, b = _pairs(t)
    n = a.size
    dirs = ["EQ", "NE", "LT", "LE", "GT", "GE"]
    body = "".join(f" c{i} = pred[{n}] compare(a, b), direction={d}\n"
                   for i, d in enumerate(dirs))
    body += "".join(f" t{i} = pred[{n}] compare(a, b), direction={d}, type=TOTALORDER\n"
                    for i, d in enumerate(dirs))
    names = [f"c{i}" for i in range(6)] + [f"t{i}" for i in range(6)]
    text = (f"HloModule m\nENTRY main {{\n a = {t}[{n}] parameter(0)\n"
            f" b = {t}[{n}] parameter(1)\n{body}"
            f" sel = {t}[{n}] select(c2, a, b)\n lo = {t}[] constant(0.5)\n"
            f" hi = {t}[] constant(2)\n cl = {t}[{n}] clamp(lo, a, hi)\n"
            f" ROOT r = ({', '.join([f'pred[{n}]'] * 12)}, {t}[{n}], {t}[{n}]) "
            f"tuple({', '.join(names)}, sel, cl)\n}}\n")
    interp, cpu = run_both(text, a, b)
    fa, fb = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(invalid="ignore"):
        want = [fa == fb, fa != fb, fa < fb, fa <= fb, fa > fb, fa >= fb]
    for c, w in zip(cpu[:6], want):
        assert np.array_equal(c, w)
    for i, c in zip(interp, cpu):
        assert_same(c, i, nan_sign_free=True)


@pytest.mark.parametrize("t", FLOATS)
def test_reduce_sum_and_max(t):
    """XLA leaves the reduction order open (the interpreter uses a pairwise tree, the cpu
    backend a loop), so the sum uses data whose partial sums are all exact in t
    (f8e8m0fnu: a product of powers of two); the maximum runs over every pattern."""
    rng = np.random.default_rng(3)
    signed = t != "f8e8m0fnu"  # e8m0 has no zero and no negatives: powers of two only
    small = rng.integers(-1, 2, (6, 4)) if signed else 2.0 ** rng.integers(-3, 3, (6, 4))
    x = small.astype(np.float32).astype(dtype(t))
    pats = all_patterns(t)
    y = pats.reshape(-1, 8) if pats.size > 16 else pats.reshape(2, 8)
    rows, cols = y.shape
    init = "0" if signed else "1"
    op = "add" if signed else "multiply"
    fi = ml_dtypes.finfo(dtype(t))
    lowest = "-inf" if t in ("f8e5m2", "f8e4m3", "f8e3m4") else \
        repr(float(-fi.max)) if signed else repr(float(fi.smallest_normal))
    text = f"""HloModule m
add {{
  p = {t}[] parameter(0)
  q = {t}[] parameter(1)
  ROOT s = {t}[] {op}(p, q)
}}
mx {{
  p = {t}[] parameter(0)
  q = {t}[] parameter(1)
  ROOT s = {t}[] maximum(p, q)
}}
ENTRY main {{
  a = {t}[6,4] parameter(0)
  b = {t}[{rows},{cols}] parameter(1)
  z = {t}[] constant({init})
  lo = {t}[] constant({lowest})
  s = {t}[6] reduce(a, z), dimensions={{1}}, to_apply=add
  m = {t}[{rows}] reduce(b, lo), dimensions={{1}}, to_apply=mx
  ROOT r = ({t}[6], {t}[{rows}]) tuple(s, m)
}}
"""
    interp, cpu = run_both(text, x, y)
    f = x.astype(np.float64)
    with np.errstate(all="ignore"):
        exact = f.sum(axis=1) if signed else f.prod(axis=1)
        want_sum = exact.astype(np.float32).astype(x.dtype)
        fy = y.astype(np.float32)
        mx = fy.max(axis=1)  # no row mixes +0 and -0; the init is the lowest value
        want_max = np.where(np.isnan(fy).any(axis=1), np.float32(np.nan), mx).astype(x.dtype)
    assert_same(cpu[0], want_sum)
    assert_same(cpu[1], want_max, nan_sign_free=True)
    for i, c in zip(interp, cpu):
        assert_same(c, i, nan_sign_free=True)


def _total_order_sort(t: str, n: int, with_iota: bool = False) -> str:
    """A TOTALORDER sort of a t[n] (and, with_iota, an iota beside it in a tuple)."""
    root = (f"  s = {t}[{n}] sort(a), dimensions={{0}}, to_apply=lt\n"
            f"  i = {t}[{n}] iota(), iota_dimension=0\n"
            f"  ROOT r = ({t}[{n}], {t}[{n}]) tuple(s, i)" if with_iota else
            f"  ROOT s = {t}[{n}] sort(a), dimensions={{0}}, to_apply=lt")
    return (f"HloModule m\nlt {{\n  p = {t}[] parameter(0)\n  q = {t}[] parameter(1)\n"
            f"  ROOT c = pred[] compare(p, q), direction=LT, type=TOTALORDER\n}}\n"
            f"ENTRY main {{\n  a = {t}[{n}] parameter(0)\n{root}\n}}\n")


@pytest.mark.parametrize("t", ["f8e4m3fn", "f8e5m2", "f4e2m1fn"])
def test_sort_total_order_and_iota(t):
    x = all_patterns(t)
    n = x.size
    interp, cpu = run_both(_total_order_sort(t, n, with_iota=True), x[::-1].copy())
    for i, c in zip(interp, cpu):
        assert_same(c, i)
    assert_same(cpu[1], np.arange(n, dtype=np.float32).astype(x.dtype))


def _f32_total_order(x) -> np.ndarray:
    """XLA:CPU's TOTALORDER on a small float: the f32 total order of the widened value
    (ml_dtypes widens the fnuz NaN 0x80 to -NaN; f8e8m0fnu is all positive, 0xFF +NaN)."""
    i = np.asarray(x).astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF) - 1, i)


@pytest.mark.parametrize("t", ["f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz", "f8e8m0fnu"])
def test_total_order_of_fnuz_nan_and_unsigned_e8m0(t):
    """XLA:CPU sorts the fnuz NaN (0x80) first, below -max, and f8e8m0fnu patterns as
    unsigned (NaN 0xFF last): jax.lax.sort of every pattern (sweep: tools/edge_sweep.py
    --ops sort). Both backends put 0x80 just below +0 and took e8m0's top bit for a sign."""
    x = all_patterns(t)
    n = x.size
    text = _total_order_sort(t, n)
    shuffled = x[np.random.default_rng(3).permutation(n)]
    want = shuffled[np.argsort(_f32_total_order(shuffled), kind="stable")]
    interp, cpu = run_both(text, shuffled)
    assert np.array_equal(bits(interp[0]), bits(want))
    assert np.array_equal(bits(cpu[0]), bits(want))
    if t != "f8e8m0fnu":
        assert bits(cpu[0])[0] == 0x80          # NaN first
    else:
        assert list(bits(cpu[0])[[0, -1]]) == [0x00, 0xFF]


# ---- dot and convolution -----------------------------------------------------------------

@pytest.mark.parametrize("t,out", [("f8e4m3fn", "f8e4m3fn"), ("f8e5m2", "f32"),
                                   ("f8e4m3fnuz", "bf16"), ("f4e2m1fn", "f4e2m1fn"),
                                   ("f8e8m0fnu", "f32"), ("s4", "s4"), ("s4", "s32"),
                                   ("u4", "u4"), ("s2", "s8"), ("u2", "u2")])
def test_dot_accumulates_wide_and_rounds_once(t, out):
    rng = np.random.default_rng(5)
    k = 70
    if t in INTS:
        lo, hi = (-(1 << (SUB_BYTE_INTS[t] - 1)), 1 << (SUB_BYTE_INTS[t] - 1)) \
            if t[0] == "s" else (0, 1 << SUB_BYTE_INTS[t])
        a = rng.integers(lo, hi, (3, k)).astype(dtype(t))
        b = rng.integers(lo, hi, (k, 4)).astype(dtype(t))
        exact = a.astype(np.int64) @ b.astype(np.int64)
        want = exact.astype(dtype(out))  # wraps to the result width
    else:
        a = rng.normal(0, 1, (3, k)).astype(np.float32).astype(dtype(t))
        b = rng.normal(0, 1, (k, 4)).astype(np.float32).astype(dtype(t))
        want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32) \
            .astype(dtype(out))
    text = (f"HloModule m\nENTRY main {{\n a = {t}[3,{k}] parameter(0)\n"
            f" b = {t}[{k},4] parameter(1)\n ROOT d = {out}[3,4] dot(a, b), "
            "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n")
    interp, cpu = run_both(text, a, b)
    assert_same(cpu[0], interp[0])
    if t in INTS:
        assert_same(cpu[0], want)
    else:
        # f32 accumulation vs the exact sum: one rounding to `out` apart at most.
        got = cpu[0].astype(np.float64)
        ref = want.astype(np.float64)
        both_nan = np.isnan(got) & np.isnan(ref)
        assert np.allclose(got[~both_nan], ref[~both_nan], rtol=0.25, atol=1e-3)


@pytest.mark.parametrize("t", ["f8e4m3fn", "s4"])
def test_convolution_matches_the_interpreter(t):
    rng = np.random.default_rng(9)
    if t == "s4":
        x = rng.integers(-8, 8, (1, 2, 6, 6)).astype(dtype(t))
        w = rng.integers(-8, 8, (3, 2, 3, 3)).astype(dtype(t))
    else:
        x = rng.normal(0, 1, (1, 2, 6, 6)).astype(np.float32).astype(dtype(t))
        w = rng.normal(0, 1, (3, 2, 3, 3)).astype(np.float32).astype(dtype(t))
    text = (f"HloModule m\nENTRY main {{\n x = {t}[1,2,6,6] parameter(0)\n"
            f" w = {t}[3,2,3,3] parameter(1)\n ROOT c = {t}[1,3,4,4] convolution(x, w), "
            "window={size=3x3}, dim_labels=bf01_oi01->bf01\n}\n")
    interp, cpu = run_both(text, x, w)
    assert_same(cpu[0], interp[0])


# ---- bitcast-convert -----------------------------------------------------------------

@pytest.mark.parametrize("t", FLOATS)
def test_bitcast_convert_to_and_from_bytes(t):
    x = all_patterns(t)  # every NaN payload too: registers keep them (lowbits.py)
    n = x.size
    width = primitive_type(t).bits
    ints = ["s8", "u8"] if width == 8 else ["s4", "u4"]
    body = "".join(f" b{i} = {it}[{n}] bitcast-convert(a)\n"
                   f" f{i} = {t}[{n}] bitcast-convert(b{i})\n" for i, it in enumerate(ints))
    text = (f"HloModule m\nENTRY main {{\n a = {t}[{n}] parameter(0)\n{body}"
            f" ROOT r = ({ints[0]}[{n}], {ints[1]}[{n}], {t}[{n}], {t}[{n}]) "
            "tuple(b0, b1, f0, f1)\n}\n")
    interp, cpu = run_both(text, x)
    for i, c in zip(interp, cpu):
        assert_same(c, i)
    assert np.array_equal(bits(cpu[1]), bits(x))
    assert_same(cpu[2], x)


@pytest.mark.parametrize("t", ["f8e5m2", "f8e3m4"])
def test_nan_payloads_survive_data_movement_but_not_arithmetic(t):
    x = all_patterns(t).reshape(16, 16)
    text = f"""HloModule m
ENTRY main {{
  a = {t}[16,16] parameter(0)
  tr = {t}[16,16] transpose(a), dimensions={{1,0}}
  rv = {t}[16,16] reverse(tr), dimensions={{0}}
  p = pred[16,16] compare(a, a), direction=EQ, type=TOTALORDER
  s = {t}[16,16] select(p, rv, a)
  n = {t}[16,16] negate(a)
  ROOT r = ({t}[16,16], {t}[16,16]) tuple(s, n)
}}
"""
    interp, cpu = run_both(text, x)
    assert_same(cpu[0], np.flip(x.T, 0))  # every byte kept
    with np.errstate(invalid="ignore"):
        assert_same(cpu[1], (-x.astype(np.float32)).astype(x.dtype))  # canonical NaNs
    for i, c in zip(interp, cpu):
        assert_same(c, i)


# ---- sub-byte integers ----------------------------------------------------------------

def _wrap(v, t):
    w = SUB_BYTE_INTS[t]
    v = int(v) & ((1 << w) - 1)
    return v - (1 << w) if t[0] == "s" and v >> (w - 1) else v


def _xla_binary(op, x, y, t):
    """XLA's integer semantics on Python ints (operation semantics), then wrapped."""
    w = SUB_BYTE_INTS[t]
    ux, uy = x & ((1 << w) - 1), y & ((1 << w) - 1)
    if op == "add":
        r = x + y
    elif op == "subtract":
        r = x - y
    elif op == "multiply":
        r = x * y
    elif op == "divide":
        r = -1 if y == 0 else int(x / y) if not (t[0] == "s" and x == -(1 << (w - 1))
                                                 and y == -1) else x
    elif op == "remainder":
        r = x if y == 0 else 0 if (t[0] == "s" and y == -1) else int(np.fmod(x, y))
    elif op == "maximum":
        r = max(x, y)
    elif op == "minimum":
        r = min(x, y)
    elif op == "and":
        r = x & y
    elif op == "or":
        r = x | y
    elif op == "xor":
        r = x ^ y
    elif op == "shift-left":
        r = 0 if uy >= w else x << uy
    elif op == "shift-right-logical":
        r = 0 if uy >= w else ux >> uy
    elif op == "shift-right-arithmetic":
        sx = _wrap(x, "s" + t[1:])
        r = (-1 if sx < 0 else 0) if uy >= w else sx >> uy
    elif op == "mulhi":
        r = (x * y) >> w
    else:
        raise AssertionError(op)
    return _wrap(r, t)


BINARY_INT = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
              "and", "or", "xor", "shift-left", "shift-right-logical",
              "shift-right-arithmetic", "mulhi"]


@pytest.mark.parametrize("t", INTS)
def test_sub_byte_binary_ops_on_every_pair(t):
    vals = [_wrap(v, t) for v in range(1 << SUB_BYTE_INTS[t])]
    pairs = list(itertools.product(vals, vals))
    a = np.array([p[0] for p in pairs]).astype(dtype(t))
    b = np.array([p[1] for p in pairs]).astype(dtype(t))
    n = a.size
    body = "".join(f" r{i} = {t}[{n}] {op}(a, b)\n" for i, op in enumerate(BINARY_INT))
    text = (f"HloModule m\nENTRY main {{\n a = {t}[{n}] parameter(0)\n b = {t}[{n}] "
            f"parameter(1)\n{body} ROOT r = ({', '.join([f'{t}[{n}]'] * len(BINARY_INT))}) "
            f"tuple({', '.join(f'r{i}' for i in range(len(BINARY_INT)))})\n}}\n")
    interp, cpu = run_both(text, a, b)
    for op, i, c in zip(BINARY_INT, interp, cpu):
        want = np.array([_xla_binary(op, x, y, t) for x, y in pairs]).astype(dtype(t))
        assert_same(c, want), op
        assert_same(i, want), op


@pytest.mark.parametrize("t", INTS)
def test_sub_byte_unary_ops_and_converts(t):
    w = SUB_BYTE_INTS[t]
    vals = [_wrap(v, t) for v in range(1 << w)]
    a = np.array(vals).astype(dtype(t))
    n = a.size
    ops = ["not", "popcnt", "count-leading-zeros"] + (["negate", "abs", "sign"]
                                                       if t[0] == "s" else ["negate"])
    body = "".join(f" r{i} = {t}[{n}] {op}(a)\n" for i, op in enumerate(ops))
    text = (f"HloModule m\nENTRY main {{\n a = {t}[{n}] parameter(0)\n{body}"
            f" ROOT r = ({', '.join([f'{t}[{n}]'] * len(ops))}) "
            f"tuple({', '.join(f'r{i}' for i in range(len(ops)))})\n}}\n")
    interp, cpu = run_both(text, a)
    mask = (1 << w) - 1
    ref = {"not": [~v for v in vals], "popcnt": [(v & mask).bit_count() for v in vals],
           "count-leading-zeros": [w - (v & mask).bit_length() for v in vals],
           "negate": [-v for v in vals], "abs": [abs(v) for v in vals],
           "sign": [(v > 0) - (v < 0) for v in vals]}
    for op, i, c in zip(ops, interp, cpu):
        want = np.array([_wrap(v, t) for v in ref[op]]).astype(dtype(t))
        assert_same(c, want)
        assert_same(i, want)
    # Converts: ints wrap, floats saturate to the type's range (NaN -> 0).
    f = np.array([-100.0, -8.5, -8.0, -2.7, -0.5, 0.0, 0.9, 1.5, 3.99, 7.5, 15.9, 16.0,
                  1e9, np.inf, -np.inf, np.nan], np.float32)
    s32 = np.array([-300, -9, -8, -1, 0, 1, 3, 7, 8, 15, 16, 17, 255, 256, 1000, -17],
                   np.int32)
    text = (f"HloModule m\nENTRY main {{\n f = f32[16] parameter(0)\n i = s32[16] "
            f"parameter(1)\n a = {t}[16] convert(f)\n b = {t}[16] convert(i)\n"
            f" w = s32[16] convert(b)\n x = f32[16] convert(b)\n"
            f" o = {'u' if t[0] == 's' else 's'}{w}[16] convert(b)\n"
            f" ROOT r = ({t}[16], {t}[16], s32[16], f32[16], "
            f"{'u' if t[0] == 's' else 's'}{w}[16]) tuple(a, b, w, x, o)\n}}\n")
    interp, cpu = run_both(text, f, s32)
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if t[0] == "s" else (0, mask)
    sat = [0 if np.isnan(v) else int(min(max(np.trunc(v), lo), hi)) for v in f]
    wrapped = [_wrap(v, t) for v in s32]
    assert_same(cpu[0], np.array(sat).astype(dtype(t)))
    assert_same(cpu[1], np.array(wrapped).astype(dtype(t)))
    assert cpu[2].tolist() == wrapped
    assert cpu[3].tolist() == [float(v) for v in wrapped]
    other = ("u" if t[0] == "s" else "s") + t[1:]
    assert_same(cpu[4], np.array([_wrap(v, other) for v in wrapped]).astype(dtype(other)))
    for i, c in zip(interp, cpu):
        assert_same(c, i)


@pytest.mark.parametrize("t", ["s4", "u4"])
def test_sub_byte_reduce_iota_and_garbage_high_bits(t):
    """A reduce wraps at every step; iota wraps; loads ignore the high bits of a byte
    (ml_dtypes reads int4 from the low nibble) and stores leave them zero."""
    raw = np.array([0x17, 0xF8, 0x3F, 0x80, 0x7A, 0xC5], np.uint8)
    x = raw.view(dtype(t))
    text = f"""HloModule m
add {{
  p = {t}[] parameter(0)
  q = {t}[] parameter(1)
  ROOT s = {t}[] add(p, q)
}}
ENTRY main {{
  a = {t}[6] parameter(0)
  z = {t}[] constant(0)
  s = {t}[] reduce(a, z), dimensions={{0}}, to_apply=add
  i = {t}[20] iota(), iota_dimension=0
  zb = {t}[6] broadcast(z), dimensions={{}}
  c = {t}[6] add(a, zb)
  ROOT r = ({t}[], {t}[20], {t}[6]) tuple(s, i, c)
}}
"""
    interp, cpu = run_both(text, x)
    low = (raw & 0xF).astype(np.int64)
    vals = [_wrap(v, t) for v in low]
    assert int(cpu[0]) == _wrap(sum(vals), t)
    assert cpu[1].astype(np.int64).tolist() == [_wrap(v, t) for v in range(20)]
    assert cpu[2].view(np.uint8).tolist() == (raw & 0xF).tolist()
    for i, c in zip(interp, cpu):
        assert_same(c, i)


def test_every_array_type_has_a_compiled_representation():
    from xladist.compiler.codegen.types import UNSUPPORTED_TYPES, compute_type, storage_type
    assert UNSUPPORTED_TYPES == {}
    for t in PRIMITIVE_TYPES.values():
        if t.is_array_type:
            compute_type(t), storage_type(t)  # no UnsupportedError


def test_one_bit_integers_by_hand():
    # s1 holds {-1, 0} and u1 {0, 1}; XLA's integer rules worked out by hand: wrapping
    # add, x/0 = -1 (all ones), INT_MIN/-1 = INT_MIN, x%0 = x, saturating float->int.
    s1, u1 = ml_dtypes.int1, ml_dtypes.uint1
    cases = {
        ("s1", "add"): [0, -1, -1, 0], ("s1", "divide"): [-1, 0, -1, -1],
        ("s1", "remainder"): [0, 0, -1, 0], ("s1", "shift-right-arithmetic"): [0, 0, -1, -1],
        ("u1", "add"): [0, 1, 1, 0], ("u1", "divide"): [1, 0, 1, 1],
        ("u1", "remainder"): [0, 0, 1, 0], ("u1", "shift-left"): [0, 0, 1, 0],
    }
    for (t, op), want in cases.items():
        dt, one = (s1, -1) if t == "s1" else (u1, 1)
        a = np.array([0, 0, one, one], dt)
        b = np.array([0, one, 0, one], dt)
        text = f"""HloModule m
ENTRY %e (a: {t}[4], b: {t}[4]) -> ({t}[4], {t}[4]) {{
  %a = {t}[4] parameter(0)
  %b = {t}[4] parameter(1)
  %r = {t}[4] {op}(%a, %b)
  %f = f32[4] constant({{-1.5, 0.2, 1.7, 3}})
  %g = {t}[4] convert(%f)
  ROOT %t = ({t}[4], {t}[4]) tuple(%r, %g)
}}"""
        interp, cpu = run_both(text, a, b)
        for got in (interp, cpu):
            assert got[0].astype(np.int64).tolist() == want, (t, op)
            assert got[1].astype(np.int64).tolist() == ([-1, 0, 0, 0] if t == "s1"
                                                        else [0, 0, 1, 1])


# ---- jax cross-check (optional) ------------------------------------------------------

def test_fp8_matmul_and_scaling_agree_with_jax():
    jax = need_jax()
    jnp = jax.numpy

    def f(a, b):
        y = jnp.dot(a, b, preferred_element_type=jnp.float32)
        return (y * 0.25).astype(jnp.float8_e4m3fn), (a.astype(jnp.float32) + 1).astype(
            jnp.float8_e5m2)

    rng = np.random.default_rng(11)
    a = rng.normal(0, 2, (4, 16)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    b = rng.normal(0, 2, (16, 3)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    text = jax.jit(f).lower(a, b).as_text(dialect="hlo")
    want = [np.asarray(v) for v in jax.jit(f)(a, b)]
    got = run(text, a, b)
    for g, w in zip(got, want):
        assert_same(np.asarray(g), w)
