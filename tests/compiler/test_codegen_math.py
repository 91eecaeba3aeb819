"""Accuracy of the compiled transcendental functions (codegen/mathlib.py) against
numpy/scipy in double precision, on special values and random samples spanning
each function's domain. Each op is compiled as a one-instruction HLO module."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special

import xladist


def _run_unary(op, x):
    t = {np.float32: "f32", np.float64: "f64"}[x.dtype.type]
    n = x.size
    text = f"""HloModule m
ENTRY main {{
  x = {t}[{n}] parameter(0)
  ROOT y = {t}[{n}] {op}(x)
}}
"""
    return xladist.compile(xladist.parse_hlo(text), backend="cpu")(x)[0]


def _run_binary(op, x, y):
    t = {np.float32: "f32", np.float64: "f64"}[x.dtype.type]
    n = x.size
    text = f"""HloModule m
ENTRY main {{
  x = {t}[{n}] parameter(0)
  y = {t}[{n}] parameter(1)
  ROOT z = {t}[{n}] {op}(x, y)
}}
"""
    return xladist.compile(xladist.parse_hlo(text), backend="cpu")(x, y)[0]


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-30, -1e-30, 1e-7, 3.0, 10.0, -10.0,
           30.0, 80.0, -80.0, 700.0, -700.0, np.inf, -np.inf, np.nan]


def _samples(lo, hi, dtype, n=4000, log=False, seed=0):
    rng = np.random.default_rng(seed)
    if log:
        mag = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
        v = mag * rng.choice([-1.0, 1.0], n)
    else:
        v = rng.uniform(lo, hi, n)
    return np.concatenate([v, SPECIAL]).astype(dtype)


def _expit(x):
    return scipy.special.expit(x)


# opcode -> (reference on float64, sample domain (lo, hi, log-scale), f32 rtol, f64 rtol)
UNARY = {
    "exponential": (np.exp, (-100, 100, False), 4e-7, 4e-15),
    "exponential-minus-one": (np.expm1, (1e-10, 50, True), 4e-7, 4e-15),
    "log": (np.log, (1e-30, 1e30, True), 4e-7, 4e-15),
    "log-plus-one": (np.log1p, (1e-10, 1e6, True), 4e-7, 4e-15),
    "tanh": (np.tanh, (1e-6, 20, True), 1e-6, 4e-15),
    "logistic": (_expit, (-60, 60, False), 1e-6, 4e-15),
    "sine": (np.sin, (-1000, 1000, False), 4e-7, 4e-14),
    "cosine": (np.cos, (-1000, 1000, False), 4e-7, 4e-14),
    "tan": (np.tan, (-100, 100, False), 4e-7, 1e-13),
    "sqrt": (np.sqrt, (1e-20, 1e20, True), 2e-7, 2e-16),
    "rsqrt": (lambda v: 1 / np.sqrt(v), (1e-20, 1e20, True), 4e-7, 4e-16),
    "cbrt": (np.cbrt, (1e-20, 1e20, True), 4e-7, 4e-15),
    "atan": (np.arctan, (1e-6, 1e6, True), 4e-7, 4e-15),
    "asin": (np.arcsin, (-1, 1, False), 4e-7, 4e-15),
    "acos": (np.arccos, (-1, 1, False), 4e-7, 4e-15),
    "sinh": (np.sinh, (1e-6, 80, True), 4e-7, 4e-15),
    "cosh": (np.cosh, (-80, 80, False), 4e-7, 4e-15),
    "asinh": (np.arcsinh, (1e-6, 1e10, True), 4e-7, 4e-15),
    "acosh": (np.arccosh, (1, 1e10, False), 4e-7, 4e-15),
    "atanh": (np.arctanh, (-1, 1, False), 4e-7, 4e-15),
    "erf": (scipy.special.erf, (-6, 6, False), 2e-6, 4e-15),
}


def _check(got, want, rtol, atol, what):
    with np.errstate(all="ignore"):
        _check_quiet(got, want, rtol, atol, what)


def _check_quiet(got, want, rtol, atol, what):
    want = want.astype(got.dtype)
    both_nan = np.isnan(got) & np.isnan(want)
    same_inf = np.isinf(want) & (got == want)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    ok = both_nan | same_inf | (err <= atol + rtol * np.abs(want.astype(np.float64)))
    if not ok.all():
        i = np.flatnonzero(~ok)[:5]
        pytest.fail(f"{what}: {len(np.flatnonzero(~ok))} bad, e.g. x -> got/want "
                    f"{list(zip(got[i], want[i]))}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_accuracy(op, dtype):
    ref, (lo, hi, log), rtol32, rtol64 = UNARY[op]
    x = _samples(lo, hi, dtype, log=log)
    got = _run_unary(op, x)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    rtol = rtol32 if dtype == np.float32 else rtol64
    # Denormal results differ in the last bits; they are far below any tolerance.
    atol = 1e-37 if dtype == np.float32 else 1e-300
    if op == "erf" and dtype == np.float32:
        atol = 1e-7
    _check(got, want, rtol, atol, f"{op} {np.dtype(dtype).name}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_power_accuracy_and_special_cases(dtype):
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(0, 10, 2000), rng.uniform(-10, 0, 500),
                        [0.0, -0.0, 0.0, -0.0, -8.0, -8.0, 1.0, 1.0, -1.0, np.inf, -np.inf,
                         np.nan, 2.0, 0.5]]).astype(dtype)
    y = np.concatenate([rng.uniform(-5, 5, 2000), rng.integers(-4, 5, 500),
                        [2.0, 3.0, -1.0, -3.0, 1 / 3, 3.0, np.nan, np.inf, np.inf, -2.0, 3.0,
                         0.0, 1e10, -1e10]]).astype(dtype)
    got = _run_binary("power", x, y)
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), y.astype(np.float64))
    _check(got, want, 2e-6 if dtype == np.float32 else 1e-12, 0, "power")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_power_of_minus_inf_to_non_integer_exponents(dtype):
    """C99 pow (and XLA:CPU, tools/edge_sweep.py --ops pow): (-inf)^y is +inf for y > 0 and
    +0 for y < 0 when y is not an odd integer; the cpu backend gave NaN for non-integer y
    (the negative-base rule)."""
    y = np.array([0.5, -0.5, 1.5, -1.5, 2.5, 1e-3, -1e-3, 1e30, 2.0, -2.0, 3.0, -3.0],
                 dtype)
    x = np.full_like(y, -np.inf)
    got = _run_binary("power", x, y)
    want = np.array([np.inf, 0, np.inf, 0, np.inf, np.inf, 0, np.inf, np.inf, 0, -np.inf,
                     -0.0], dtype)
    assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_atan2_quadrants_and_zeros(dtype):
    rng = np.random.default_rng(2)
    vals = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-30, 3.0]
    y, x = np.meshgrid(vals, vals)
    y = np.concatenate([y.ravel(), rng.standard_normal(1000) * 100]).astype(dtype)
    x = np.concatenate([x.ravel(), rng.standard_normal(1000) * 100]).astype(dtype)
    got = _run_binary("atan2", y, x)
    want = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    _check(got, want, 4e-7 if dtype == np.float32 else 4e-15, 0, "atan2")
    # Signs of zero results follow C99: atan2(-0, +0) = -0, atan2(+0, -0) = +pi.
    assert np.signbit(_run_binary("atan2", np.array([-0.0], dtype), np.array([0.0], dtype)))[0]


def test_tanh_vectorized_f32_has_no_libm_calls():
    """The f32 fast paths must stay libm-free, or the loop does not vectorize."""
    from xladist.compiler.program import CpuProgram
    text = """HloModule m
ENTRY main {
  x = f32[1024] parameter(0)
  t = f32[1024] tanh(x)
  e = f32[1024] exponential(t)
  ROOT l = f32[1024] log(e)
}
"""
    ir_text = CpuProgram(xladist.parse_hlo(text)).llvm_ir()
    for name in ("@tanhf", "@expf", "@logf"):
        assert name not in ir_text


_COMPLEX_UNARY = {"sine": np.sin, "cosine": np.cos, "tan": np.tan, "sinh": np.sinh,
                  "cosh": np.cosh, "tanh": np.tanh, "exponential-minus-one": np.expm1,
                  "log-plus-one": np.log1p}


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
@pytest.mark.parametrize("op", sorted(_COMPLEX_UNARY))
@pytest.mark.slow
def test_complex_unary_accuracy(op, dtype):
    """Complex trig/hyperbolic functions and expm1/log1p against numpy in c128: a grid of
    small, unit and large parts (tanh past overflow of cosh, expm1/log1p near 0)."""
    rng = np.random.default_rng(3)
    parts = np.array([0.0, 1e-5, -1e-5, 0.3, -0.7, 1.0, -2.0, 3.0, 15.0, -30.0])
    if op not in ("tanh", "tan"):
        parts = parts[np.abs(parts) < 20]  # sin/cos/sinh/cosh/expm1 overflow f32 past ~88
    re, im = np.meshgrid(parts, parts)
    z = np.concatenate([(re + 1j * im).ravel(),
                        rng.uniform(-3, 3, 500) + 1j * rng.uniform(-3, 3, 500)]).astype(dtype)
    t = "c64" if dtype == np.complex64 else "c128"
    text = f"""HloModule m
ENTRY main {{
  x = {t}[{z.size}] parameter(0)
  ROOT y = {t}[{z.size}] {op}(x)
}}
"""
    got = xladist.compile(xladist.parse_hlo(text), backend="cpu")(z)[0]
    # In long double: numpy's complex log1p/expm1 are log(1+z)/exp(z)-1, which cancel in
    # c128 near 0 (np.log1p(1e-5+0j) is wrong from the 10th digit).
    want = _COMPLEX_UNARY[op](z.astype(np.clongdouble)).astype(np.complex128)
    tol = 2e-6 if dtype == np.complex64 else 1e-13
    # Relative to |f(z)| (parts near zero of a large value carry its absolute error). XLA's
    # sin/cos take sinh(b) as e^b/2 - e^-b/2 (both backends follow XLA), which cancels near
    # b = 0: their error is relative to cosh(b) (sin(1e-5 i) in c64 is 1.0014e-5 i in XLA).
    scale = np.abs(want)
    if op in ("sine", "cosine"):
        scale = np.maximum(scale, np.cosh(z.imag.astype(np.float64)))
    err = np.abs(got.astype(np.complex128) - want) / np.maximum(scale, 1e-30)
    bad = np.flatnonzero(~(err <= tol))
    assert bad.size == 0, f"{op}: {list(zip(z[bad[:4]], got[bad[:4]], want[bad[:4]]))}"


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128], ids=["c64", "c128"])
def test_complex_power(dtype):
    """z^w against numpy in long double, with zero bases and real exponents (0^2 = 0,
    0^0 = 1), negative real bases (principal branch) and general complex pairs."""
    rng = np.random.default_rng(5)
    z = np.concatenate([[0, 0, 0, -2, -2, 1j, 3 + 4j, 0.5], rng.uniform(-3, 3, 300)
                        + 1j * rng.uniform(-3, 3, 300)]).astype(dtype)
    w = np.concatenate([[2, 0, 0.5, 0.5, 3, 2, -1 + 0.5j, 1j], rng.uniform(-2, 2, 300)
                        + 1j * rng.uniform(-2, 2, 300)]).astype(dtype)
    t = "c64" if dtype == np.complex64 else "c128"
    text = f"""HloModule m
ENTRY main {{
  z = {t}[{z.size}] parameter(0)
  w = {t}[{z.size}] parameter(1)
  ROOT p = {t}[{z.size}] power(z, w)
}}
"""
    got = xladist.compile(xladist.parse_hlo(text), backend="cpu")(z, w)[0]
    with np.errstate(all="ignore"):
        want = np.power(z.astype(np.clongdouble), w.astype(np.clongdouble)).astype(np.complex128)
    want[:2] = [0, 1]  # numpy's 0j**2 and 0j**0
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op, ref", [("sine", np.sin), ("cosine", np.cos), ("tan", np.tan)])
def test_trig_of_huge_arguments(op, ref, dtype):
    """Past 2**19 the reduction by pi/2 is Payne-Hanek (pio2_reduce.py): every finite
    argument, up to f32/f64's largest, keeps full accuracy (it used to lose all bits
    from ~1e6 and give +-inf from ~1e15). Includes the classic hardest f64 case
    6381956970095103 * 2**797, within 4.7e-19 of a multiple of pi/2."""
    rng = np.random.default_rng(5)
    top = 38 if dtype == np.float32 else 307
    x = rng.choice([-1.0, 1.0], 3000) * 10.0 ** rng.uniform(4, top, 3000)
    edges = [2.0**19, -(2.0**19), 2.0**19 - 0.5, 1e15, 1e20, -1e30, np.finfo(dtype).max]
    if dtype == np.float64:
        edges.append(6381956970095103 * 2.0**797)
    x = np.concatenate([x, edges]).astype(dtype)
    got = _run_unary(op, x)
    want = ref(x.astype(np.float64))
    tol = 4e-7 if dtype == np.float32 else 4e-15
    _check(got, want, tol, 0, op)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op,ref", [("sine", np.sin), ("cosine", np.cos), ("tan", np.tan)])
@pytest.mark.parametrize("n", [1000, 300_000], ids=["whole", "blocks"])
@pytest.mark.slow
def test_trig_fast_version_reruns_on_huge_arguments(op, ref, dtype, n):
    """Kernels with sin/cos/tan run a Cody-Waite-only version and rerun (the block, when
    split) accurately when an argument reached 2**19 (kernels.emit_kernel): a few huge
    arguments among ordinary ones, in one block of a split kernel and not the others,
    must still come out right, and so must every ordinary element around them."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-50, 50, n).astype(dtype)
    huge = [3, n // 2 + 7, n - 1]
    x[huge] = np.array([1e22, -3.0e17, 2e30], dtype)  # Cody-Waite alone fails these
    got = _run_unary(op, x)
    tol = 4e-7 if dtype == np.float32 else 4e-15
    _check(got, ref(x.astype(np.float64)), tol, 1e-7 if dtype == np.float32 else 1e-15, op)


def test_trig_fast_version_in_reductions_and_fusions():
    """A row reduction over sin of a fused product, with one huge argument in one row:
    the rerun starts the reduction over (no partial sums kept from the fast pass)."""
    x = np.random.default_rng(3).uniform(-4, 4, (64, 300)).astype(np.float64)
    x[17, 5] = 1e20
    text = """HloModule m
add { a = f64[] parameter(0)  b = f64[] parameter(1)  ROOT s = f64[] add(a, b) }
ENTRY main {
  x = f64[64,300] parameter(0)
  two = f64[] constant(2)
  t = f64[64,300] broadcast(two), dimensions={}
  p = f64[64,300] multiply(x, t)
  s = f64[64,300] sine(p)
  z = f64[] constant(0)
  ROOT r = f64[64] reduce(s, z), dimensions={1}, to_apply=add
}
"""
    got = xladist.compile(xladist.parse_hlo(text), backend="cpu")(x)[0]
    np.testing.assert_allclose(got, np.sin(2 * x).sum(axis=1), rtol=1e-12, atol=1e-12)


def test_trig_kernel_has_a_fast_and_an_accurate_version():
    """The fast version (the kernel's own name) holds no Payne-Hanek table load; the
    accurate one does, and is internal (not an exported kernel)."""
    text = """HloModule m
ENTRY main {
  x = f64[4096] parameter(0)
  ROOT y = f64[4096] sine(x)
}
"""
    from xladist.compiler.program import CpuProgram
    ir_text = CpuProgram(xladist.parse_hlo(text), compile_code=False).llvm_ir()
    defines = {}
    for chunk in ir_text.split("\ndefine ")[1:]:
        head = chunk.split("(", 1)[0]
        defines[head.split("@", 1)[1].strip('"')] = (head, chunk)
    accurate = [k for k in defines if k.endswith("__accurate")]
    assert accurate, sorted(defines)
    fast = accurate[0][: -len("__accurate")]
    assert "internal" in defines[accurate[0]][0]
    assert "two_over_pi" not in defines[fast][1]
    assert f"@{accurate[0]}" in defines[fast][1] or f'@"{accurate[0]}"' in defines[fast][1]


def test_tanh_f32_saturates_to_exactly_one():
    """From |x| ~ 9 f32 tanh is +-1 (numpy in f64, rounded); XLA:CPU gives +-1 from its
    clamp 7.9988 on. The rational at the old clamp gave 0.99999976 for every larger |x|
    (inf too): within 4 ulp, but 1 - tanh(x), which a GELU's gradient multiplies by x**2,
    was 2.4e-7 instead of 0 (a JAX transformer step's weight update was off by 0.3%)."""
    big = np.array([9.5, 10.0, 20.0, 88.0, 1e4, 3e38, np.inf], np.float32)
    x = np.concatenate([big, -big])
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(_run_unary("tanh", x), want)
    # Near the clamp: never past +-1 (the unfused evaluation order exceeds 1 there), and
    # within 4 ulp of numpy.
    band = np.linspace(7.5, 9.5, 20001).astype(np.float32)
    band = np.concatenate([band, -band])
    near = _run_unary("tanh", band)
    assert np.abs(near).max() <= 1.0
    _check(near, np.tanh(band.astype(np.float64)), 4e-7, 0, "tanh")


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_expm1_up_to_exp_overflow(dtype):
    """expm1 is finite wherever exp is: Kahan's (u-1)*x/log(u) overflowed in the product
    from x ~ 84 in f32 (~703 in f64), so expm1(88) was inf instead of 1.65e38."""
    top = 88.72 if dtype == np.float32 else 709.78
    x = np.concatenate([np.linspace(39.0, top, 4001), [41.0, 84.0, 88.0, 700.0, 709.0]])
    x = x[x <= top].astype(dtype)
    got = _run_unary("exponential-minus-one", x)
    want = np.expm1(x.astype(np.float64))
    assert np.isfinite(got).all()
    _check(got, want, 4e-7 if dtype == np.float32 else 4e-15, 0, "expm1")
    over = np.array([top + 0.01 * top, np.inf], dtype)
    np.testing.assert_array_equal(_run_unary("exponential-minus-one", over), [np.inf, np.inf])


def test_erf_f32_stays_within_one():
    """erf is bounded by 1; the f32 rational passed it by an ulp for |x| in ~[3.7, 4]
    (erf(-3.9999) = -1.0000001 against numpy's -1.0), so 1 - erf(x) went negative."""
    x = np.linspace(-6, 6, 120001).astype(np.float32)
    got = _run_unary("erf", x)
    assert np.abs(got).max() <= 1.0
    _check(got, scipy.special.erf(x.astype(np.float64)), 4e-7, 1e-37, "erf")


def test_cbrt_f64_of_subnormals_and_the_largest():
    """f64 cbrt of a subnormal: the Newton step's y^3 - a was itself subnormal and lost up
    to 170 ulp (cbrt(3.07e-312) off by 3.8e-14 against mpmath); the documented f64 bound is
    ~4 ulp. Near the largest finite, y^3 must not overflow either."""
    rng = np.random.default_rng(7)
    tiny = np.exp2(rng.uniform(-1074, -1022, 2000))
    edges = [5e-324, 1e-320, 3.0696861173e-312, 2.2250738585072009e-308,
             2.2250738585072014e-308, 1.7976931348623157e308, 1.7e308, 1e308]
    x = np.concatenate([tiny, edges, -tiny, -np.array(edges)])
    got = _run_unary("cbrt", x)
    _check(got, np.cbrt(x), 4 * 2.0 ** -52, 0, "cbrt")


def test_erf_f32_of_tiny_arguments():
    """Near f32's smallest normal the rational's numerator x * P(x^2) is subnormal (P(0) ~
    2**-6): erf(1.1754944e-38) gave 1.3264002e-38 (36 ulp from scipy's 1.3264034e-38; the
    documented f32 bound is 4 ulp, which subnormal results are held to in their own spacing)."""
    x = np.exp2(np.linspace(-149, -100, 20001)).astype(np.float32)
    x = np.concatenate([x, -x])
    got = _run_unary("erf", x)
    want = scipy.special.erf(x.astype(np.float64))
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert (np.abs(got - want) <= 4 * spacing).all()


def test_power_f64_at_the_overflow_threshold():
    """f64 pow rounded y*log|x| to one double, whose absolute error is pow's relative one:
    pow(2, 1024) and pow(0.5, -1024) gave 1.7976931348622732e308 instead of inf (XLA:CPU,
    C99), pow(max, 1) that too instead of max. The e*ln2 part of the exponent is now exact,
    so powers of two are exact across the whole range."""
    big = np.finfo(np.float64).max
    x = np.array([2.0, 0.5, 2.0, -2.0, big, 2.0, 2.0, 2.0, 4.0, 0.5, 2.0, 1024.0, 2.0])
    y = np.array([1024.0, -1024.0, 1023.0, 1023.0, 1.0, -1022.0, -1074.0, -1075.0, -537.0,
                  1074.0, 1023.5, 102.4, 1e-300])
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    np.testing.assert_array_equal(_run_binary("power", x, y), want)


def test_f64_integer_powers_of_integers_are_exact():
    """f64 pow(x, y) for integer x and y whose |x| ** |y| is below 2**53 gives the exact
    result rounded once (Fraction arithmetic): exp(y * log|x|) was off by an ulp or more
    there (pow(-20, 3) = -7999.999999999999), where XLA:CPU gives the exact value.
    (numpy's pow is 1 ulp off at some reciprocals itself: pow(5, -5) =
    0.00031999999999999997, where 1/3125 rounds to 0.00032.)"""
    from fractions import Fraction
    pairs = [(bx, ey) for bx in range(-20, 21) for ey in range(-6, 12)
             if abs(bx) ** abs(ey) < 2 ** 53 and (bx != 0 or ey >= 0)]
    x = np.array([p[0] for p in pairs], np.float64)
    y = np.array([p[1] for p in pairs], np.float64)
    want = np.array([float(Fraction(bx) ** ey) for bx, ey in pairs])
    got = _run_binary("power", x, y)
    bad = np.flatnonzero(got != want)
    assert not len(bad), [(x[i], y[i], got[i], want[i]) for i in bad[:5]]
