"""Op-by-op edge-value sweep: each jax.lax primitive on adversarial inputs, on XLA:CPU (the
oracle, through jax) and on both xladist backends, compared bit for bit.

    python tools/edge_sweep.py [--ops convert,shift ...] [--dtypes f32,s8 ...]
                               [--backends interpreter,cpu] [--details N] [--list]

A group is one jax function of one dtype returning several outputs (one per op, e.g. every
unary op of f32, or every convert target of one source type); it is lowered with
`jax.jit(f).lower(*args).as_text(dialect="hlo")` (the portable module, one HLO op per output
where lax allows), run by XLA:CPU through jax (`lowered.compile()(*args)`; inputs are
parameters, so nothing is constant-folded), and the same text runs on xladist's
`interpreter` and `cpu` backends. If xladist fails on a group, each output is retried alone
so the failure is named.

Inputs: every bit pattern for 8-bit floats and (unary) 16-bit floats; otherwise the type's
edge values (0, -0, +-1, +-0.5 and its neighbours, x.5 rounding points, smallest subnormal and
normal, largest finite, +-inf, quiet / payload / negative NaN, INT_MIN, -1, shift counts at
and beyond the width ...), all pairs for binary ops.

XLA:CPU runs with denormals flushed (FTZ/DAZ); xladist does not copy that (README). A
mismatch is counted apart, as "ftz", when the element has a subnormal input (bf16, f32, f64,
complex) or ours is subnormal where XLA has zero.

Comparison: integers and preds exactly; floats bit for bit except that two NaNs are equal
(NaN-ness) unless the op moves data (bitcast, select, negate, abs, slices, gathers, sort),
where the payload is pinned; complex per part. The table counts cases (elements) and
mismatching elements per op and dtype; then the first --details mismatches of each.

jax (with jax_enable_x64) is needed; this is a search, not part of the test suite.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import xladist  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

# ---------------------------------------------------------------------------------- dtypes

FLOATS = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64}
F8 = {"f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2,
      "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "f8e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
      "f8e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz, "f8e4m3": ml_dtypes.float8_e4m3,
      "f8e3m4": ml_dtypes.float8_e3m4, "f8e8m0fnu": ml_dtypes.float8_e8m0fnu}
SINTS = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64}
UINTS = {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}
INTS = {**SINTS, **UINTS}
COMPLEX = {"c64": np.complex64, "c128": np.complex128}
PRED = {"pred": np.bool_}
ALL = {**PRED, **INTS, **FLOATS, **F8, **COMPLEX}
NAME = {np.dtype(v): k for k, v in ALL.items()}


def _supported(dt) -> bool:
    try:
        jnp.zeros(1, dt)
        return True
    except Exception:
        return False


F8 = {k: v for k, v in F8.items() if _supported(v)}
ALL = {k: v for k, v in ALL.items() if _supported(v)}


def uint_of(dt):
    return np.dtype(f"uint{np.dtype(dt).itemsize * 8}")


def is_float(dt) -> bool:
    return np.dtype(dt) in {np.dtype(v) for v in (*FLOATS.values(), *F8.values())}


def is_complex(dt) -> bool:
    return np.dtype(dt).kind == "c"


# ---------------------------------------------------------------------------------- values

def float_edges(dt) -> np.ndarray:
    """The edge values of a float type (unique by bits)."""
    dt = np.dtype(dt)
    fi = ml_dtypes.finfo(dt)
    u = uint_of(dt)
    nb = dt.itemsize * 8
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 3.5, 2.0, 3.0, -3.0,
            0.25, 10.0, 100.0, -7.0, 1e-3, 3.14159265, 0.7, 1.2, 127.5, 128.0, 255.5,
            -128.5, -129.0, 256.0, 32767.5, 32768.0, 65504.0, 65535.5, 65536.0,
            2.0**31, -2.0**31, 2.0**31 - 64, 2.0**32, 2.0**63, -2.0**63, 2.0**64,
            2.0**24 + 1, 1e10, -1e10, 1e30, 1e-30, 1e300, 1e-300, 40.0, 89.0, 710.0, -745.0,
            float(fi.max), -float(fi.max), float(fi.tiny), -float(fi.tiny),
            float(fi.smallest_subnormal), -float(fi.smallest_subnormal),
            np.inf, -np.inf, np.nan]
    a = np.array(vals, np.float64)
    with np.errstate(all="ignore"):
        x = a.astype(dt)
    extra = []
    one = np.array(1.0, dt).view(u)
    half = np.array(0.5, dt).view(u)
    for b in (one, half, np.array(1.5, dt).view(u), np.array(2.5, dt).view(u)):
        extra += [b - 1, b + 1]
    if nb >= 16:
        sign = u.type(1 << (nb - 1))
        qnan = np.array(np.nan, dt).view(u)
        extra += [qnan | sign, qnan | 1, (qnan | 1) | sign,
                  np.array(np.inf, dt).view(u) | 1]                # signalling NaN
        extra += [np.array(fi.tiny, dt).view(u) - 1]              # largest subnormal
    bits = np.concatenate([x.view(u), np.array(extra, u)])
    _, idx = np.unique(bits, return_index=True)
    return bits[np.sort(idx)].view(dt)


def int_edges(dt) -> np.ndarray:
    dt = np.dtype(dt)
    ii = np.iinfo(dt)
    nb = dt.itemsize * 8
    vals = [0, 1, -1, 2, -2, 3, -3, 5, -7, 7, 8, 15, 16, nb - 1, nb, nb + 1, 31, 32, 33, 63,
            64, 65, 100, -100, 127, 128, 255, 256, ii.min, ii.min + 1, ii.max, ii.max - 1,
            ii.max // 2, ii.max // 2 + 1, -(nb), -(nb + 1)]
    a = np.array([int(v) % (1 << nb) for v in vals], np.uint64).astype(uint_of(dt)).view(dt)
    _, idx = np.unique(a, return_index=True)
    return a[np.sort(idx)]


def all_bits(dt) -> np.ndarray:
    dt = np.dtype(dt)
    return np.arange(1 << (dt.itemsize * 8), dtype=np.uint64).astype(uint_of(dt)).view(dt)


def edges(dt) -> np.ndarray:
    dt = np.dtype(dt)
    if dt == np.bool_:
        return np.array([False, True])
    if is_float(dt):
        return all_bits(dt) if dt.itemsize == 1 else float_edges(dt)
    if is_complex(dt):
        part = float_edges(np.float32 if dt == np.complex64 else np.float64)
        sel = part[::3]
        re, im = np.meshgrid(sel, sel, indexing="ij")
        c = np.empty(re.size, dt)
        c.real = re.ravel()
        c.imag = im.ravel()
        return c
    return int_edges(dt)


def unary_inputs(dt) -> np.ndarray:
    dt = np.dtype(dt)
    if is_float(dt) and dt.itemsize <= 2:
        return all_bits(dt)
    return edges(dt)


def pairs(dt, a=None, b=None) -> tuple[np.ndarray, np.ndarray]:
    a = edges(dt) if a is None else a
    b = a if b is None else b
    x, y = np.meshgrid(a, b, indexing="ij")
    return x.ravel(), y.ravel()


# ---------------------------------------------------------------------------------- groups

@dataclass
class Group:
    family: str
    dtype: str
    outputs: list[tuple[str, Callable]]   # (op label, fn(*args) -> one array)
    args: list[np.ndarray]
    pinned: set[str] = field(default_factory=set)   # ops whose NaN payload is pinned

    def fn(self, which=None):
        outs = self.outputs if which is None else [o for o in self.outputs if o[0] in which]
        return lambda *a: tuple(f(*a) for _, f in outs)


GROUPS: list[Callable[[], list[Group]]] = []


def family(f):
    GROUPS.append(f)
    return f


def _r(mode):
    return lambda x: lax.round(x, mode)


FLOAT_UNARY = {
    "neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "floor": lax.floor, "ceil": lax.ceil,
    "round_afz": _r(lax.RoundingMethod.AWAY_FROM_ZERO),
    "round_even": _r(lax.RoundingMethod.TO_NEAREST_EVEN),
    "is_finite": lax.is_finite,
}
FLOAT_MATH = {
    "exp": lax.exp, "exp2": lax.exp2, "log": lax.log, "log1p": lax.log1p,
    "expm1": lax.expm1, "sqrt": lax.sqrt, "rsqrt": lax.rsqrt, "cbrt": lax.cbrt,
    "tanh": lax.tanh, "logistic": lax.logistic, "sin": lax.sin, "cos": lax.cos,
    "tan": lax.tan, "atan": lax.atan, "erf": lax.erf, "erfc": lax.erfc,
    "erf_inv": lax.erf_inv, "lgamma": lax.lgamma, "digamma": lax.digamma,
    "sinh": lax.sinh, "cosh": lax.cosh, "asin": lax.asin, "acos": lax.acos,
    "asinh": lax.asinh, "acosh": lax.acosh, "atanh": lax.atanh,
    "bessel_i0e": lax.bessel_i0e, "bessel_i1e": lax.bessel_i1e,
}
PINNED_UNARY = {"neg", "abs"}


@family
def unary_float():
    out = []
    for name, dt in {**FLOATS, **F8}.items():
        x = unary_inputs(dt)
        # neg/abs keep the payload where XLA:CPU computes in the type itself (f32, f64);
        # narrower types go through f32 and back, where XLA makes a canonical NaN.
        pinned = set(PINNED_UNARY) if name in ("f32", "f64") else set()
        out.append(Group("unary", name, list(FLOAT_UNARY.items()), [x], pinned))
    return out


@family
def math_float():
    out = []
    for name, dt in {**FLOATS, **F8}.items():
        x = unary_inputs(dt)
        out.append(Group("math", name, list(FLOAT_MATH.items()), [x]))
    return out


@family
def reduce_precision():
    out = []
    fmts = [(8, 23), (8, 7), (5, 10), (5, 2), (4, 3), (3, 4), (2, 1), (1, 0), (6, 5), (11, 52),
            (11, 20), (7, 3), (10, 0), (1, 1), (9, 22)]
    for name, dt in {**FLOATS, **F8}.items():
        x = unary_inputs(dt)
        fi = ml_dtypes.finfo(dt)
        ops = []
        for e, m in fmts:
            if e > fi.nexp or m > fi.nmant:
                continue
            ops.append((f"rp_e{e}m{m}",
                        (lambda e, m: lambda a: lax.reduce_precision(a, e, m))(e, m)))
        out.append(Group("reduce_precision", name, ops, [x]))
    return out


FLOAT_BINARY = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
    "pow": lax.pow, "max": lax.max, "min": lax.min, "atan2": lax.atan2,
    "nextafter": lax.nextafter,
    "eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge,
}


@family
def binary_float():
    out = []
    for name, dt in {**FLOATS, **F8}.items():
        e = edges(dt)
        if np.dtype(dt).itemsize == 1:
            e = e[::2] if name not in ("f8e8m0fnu",) else e  # 128 x 128 pairs
        x, y = pairs(dt, e)
        ops = dict(FLOAT_BINARY)
        if np.dtype(dt).itemsize == 1 or name in ("f16", "bf16"):
            ops.pop("nextafter")   # XLA:CPU has no nextafter for narrow floats
        out.append(Group("binary", name, list(ops.items()), [x, y], {"max", "min"} & set()))
    return out


@family
def igamma():
    out = []
    for name in ("f32", "f64"):
        dt = FLOATS[name]
        e = float_edges(dt)[:40]
        x, y = pairs(dt, e)
        out.append(Group("igamma", name, [("igamma", lax.igamma), ("igammac", lax.igammac)],
                         [x, y]))
    return out


@family
def clamp():
    out = []
    for name, dt in {**FLOATS, **INTS}.items():
        e = edges(dt)
        sel = e[:: max(1, len(e) // 12)]
        lo, x, hi = np.meshgrid(sel, e, sel, indexing="ij")
        out.append(Group("clamp", name, [("clamp", lax.clamp)],
                         [lo.ravel(), x.ravel(), hi.ravel()]))
    return out


INT_UNARY = {"neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "not": lax.bitwise_not,
             "clz": lax.clz, "popcnt": lax.population_count}


@family
def unary_int():
    return [Group("unary", name, list(INT_UNARY.items()) if np.dtype(dt).kind == "i" else
                  [(k, v) for k, v in INT_UNARY.items() if k not in ("abs", "sign", "neg")]
                  + [("neg", lax.neg)],
                  [edges(dt)]) for name, dt in INTS.items()]


INT_BINARY = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
    "pow": lax.pow, "max": lax.max, "min": lax.min, "and": lax.bitwise_and,
    "or": lax.bitwise_or, "xor": lax.bitwise_xor, "shl": lax.shift_left,
    "shr_a": lax.shift_right_arithmetic, "shr_l": lax.shift_right_logical,
    "eq": lax.eq, "ne": lax.ne, "lt": lax.lt, "le": lax.le, "gt": lax.gt, "ge": lax.ge,
}


@family
def binary_int():
    out = []
    for name, dt in INTS.items():
        x, y = pairs(dt)
        out.append(Group("binary", name, list(INT_BINARY.items()), [x, y]))
    return out


@family
def pred_ops():
    x, y = pairs(np.bool_)
    ops = [("and", lax.bitwise_and), ("or", lax.bitwise_or), ("xor", lax.bitwise_xor),
           ("max", lax.max), ("min", lax.min), ("eq", lax.eq), ("ne", lax.ne),
           ("lt", lax.lt), ("ge", lax.ge), ("not", lambda a, b: lax.bitwise_not(a)),
           ("select", lambda a, b: lax.select(a, b, a))]
    return [Group("pred", "pred", ops, [x, y])]


COMPLEX_UNARY = {"neg": lax.neg, "abs": lax.abs, "sign": lax.sign, "exp": lax.exp,
                 "log": lax.log, "log1p": lax.log1p, "expm1": lax.expm1, "sqrt": lax.sqrt,
                 "rsqrt": lax.rsqrt, "tanh": lax.tanh, "real": lax.real, "imag": lax.imag,
                 "conj": lax.conj, "sin": lax.sin, "cos": lax.cos, "tan": lax.tan,
                 "logistic": lax.logistic, "cbrt": None}


@family
def complex_ops():
    out = []
    for name, dt in COMPLEX.items():
        x = edges(dt)
        ops = [(k, v) for k, v in COMPLEX_UNARY.items() if v is not None]
        out.append(Group("complex_unary", name, ops, [x], {"neg", "real", "imag", "conj"}))
        part = float_edges(np.float32 if name == "c64" else np.float64)
        sel = part[::5]
        re, im = np.meshgrid(sel, sel, indexing="ij")
        c = (re.ravel() + 0j).astype(dt)
        c.imag = im.ravel()
        a, b = pairs(dt, c)
        bops = [("add", lax.add), ("sub", lax.sub), ("mul", lax.mul), ("div", lax.div),
                ("pow", lax.pow), ("eq", lax.eq), ("ne", lax.ne)]
        out.append(Group("complex_binary", name, bops, [a, b]))
        fdt = np.float32 if name == "c64" else np.float64
        r, i = pairs(fdt, float_edges(fdt))
        out.append(Group("complex_make", name, [("complex", lax.complex)], [r, i],
                         {"complex"}))
    return out


@family
def convert():
    out = []
    targets = list(ALL.items())
    for name, dt in ALL.items():
        x = unary_inputs(dt)
        ops = [(f"->{tn}", (lambda t: lambda a: lax.convert_element_type(a, t))(tdt))
               for tn, tdt in targets if tn != name]
        out.append(Group("convert", name, ops, [x]))
    return out


@family
def bitcast():
    out = []
    by_size = defaultdict(list)
    for name, dt in ALL.items():
        if np.dtype(dt) != np.bool_:
            by_size[np.dtype(dt).itemsize].append((name, dt))
    for name, dt in ALL.items():
        if np.dtype(dt) == np.bool_ or is_complex(dt):
            continue
        x = unary_inputs(dt)
        if np.dtype(dt).itemsize >= 4:
            x = np.concatenate([x, np.random.default_rng(0).integers(
                0, 2**63, 256, dtype=np.uint64).astype(uint_of(dt)).view(dt)])
        ops = [(f"->{tn}", (lambda t: lambda a: lax.bitcast_convert_type(a, t))(tdt))
               for tn, tdt in by_size[np.dtype(dt).itemsize] if tn != name]
        out.append(Group("bitcast", name, ops, [x], {o for o, _ in ops}))
    return out


@family
def select_ops():
    out = []
    for name, dt in {**FLOATS, **F8, **INTS}.items():
        x = unary_inputs(dt)
        p = (np.arange(x.size) % 3 == 0)
        y = x[::-1].copy()
        out.append(Group("select", name, [("select", lax.select)], [p, x, y], {"select"}))
    return out


@family
def iota():
    out = []
    for name, dt in {**INTS, **FLOATS, **F8}.items():
        n = 300
        out.append(Group("iota", name, [("iota", (lambda dt: lambda z: lax.iota(dt, n))(dt))],
                         [np.zeros(1, np.int32)]))
    return out


@family
def dynamic_slice():
    out = []
    for iname in ("s8", "s32", "s64", "u8", "u32", "u64"):
        idt = INTS[iname]
        starts = int_edges(idt)
        x = np.arange(10 * 7, dtype=np.float32).reshape(10, 7)
        x[0, 0] = np.nan
        ops = []
        for k, s in enumerate(starts):
            s = np.array(s, idt)
            ops.append((f"ds[{s}]", (lambda s: lambda a, st: lax.dynamic_slice(
                a, (st[0], st[1]), (4, 3)))(s)))
        # One output per start pair would be many modules; vary the start through arguments.
        st = np.array([starts, starts[::-1]], idt).T
        ops = [(f"ds_{iname}", lambda a, st: jax.vmap(
            lambda s: lax.dynamic_slice(a, (s[0], s[1]), (4, 3)))(st)),
               (f"dus_{iname}", lambda a, st: jax.vmap(
                   lambda s: lax.dynamic_update_slice(a, jnp.full((4, 3), -1.0, a.dtype),
                                                      (s[0], s[1])))(st))]
        out.append(Group("dynamic_slice", iname, ops, [x, st], {o for o, _ in ops}))
        # unbatched too (vmap makes a gather)
        single = []
        for k in range(len(starts)):
            single.append((f"ds1_{iname}_{k}", (lambda k: lambda a, st: lax.dynamic_slice(
                a, (st[k, 0], st[k, 1]), (4, 3)))(k)))
            single.append((f"dus1_{iname}_{k}", (lambda k: lambda a, st:
                           lax.dynamic_update_slice(a, jnp.full((4, 3), -1.0, a.dtype),
                                                    (st[k, 0], st[k, 1])))(k)))
        out.append(Group("dynamic_slice1", iname, single, [x, st], {o for o, _ in single}))
    return out


@family
def gather_scatter():
    out = []
    M = lax.GatherScatterMode
    for iname in ("s32", "s64", "u32", "s8"):
        idt = INTS[iname]
        x = np.arange(12, dtype=np.float32) * 1.5
        x[3] = np.nan
        idx = int_edges(idt).reshape(-1, 1)
        dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(),
                                        start_index_map=(0,))
        dn0 = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,),
                                         start_index_map=(0,))
        sdn = lax.ScatterDimensionNumbers(update_window_dims=(), inserted_window_dims=(0,),
                                          scatter_dims_to_operand_dims=(0,))
        ops = []
        for mode in (M.CLIP, M.FILL_OR_DROP):
            mn = mode.name.lower()
            ops.append((f"gather3_{mn}", (lambda mode: lambda a, i: lax.gather(
                a, i, dn, (3,), mode=mode, fill_value=-7.0))(mode)))
            ops.append((f"gather1_{mn}", (lambda mode: lambda a, i: lax.gather(
                a, i, dn0, (1,), mode=mode, fill_value=-7.0))(mode)))
            ops.append((f"scatter_add_{mn}", (lambda mode: lambda a, i: lax.scatter_add(
                a, i, jnp.ones(i.shape[0], a.dtype) * 100, sdn, mode=mode))(mode)))
            ops.append((f"scatter_set_{mn}", (lambda mode: lambda a, i: lax.scatter(
                a, i, jnp.arange(i.shape[0], dtype=a.dtype) + 100, sdn, mode=mode,
                unique_indices=False))(mode)))
        out.append(Group("gather_scatter", iname, ops, [x, idx], {o for o, _ in ops}))
    return out


@family
def sort_ops():
    out = []
    rng = np.random.default_rng(1)
    for name, dt in {**FLOATS, **F8, **INTS}.items():
        e = edges(dt)
        if np.dtype(dt) in FTZ_TYPES:
            # jax's comparator maps x == 0 to +0; under XLA:CPU's DAZ a subnormal equals 0,
            # so every row holding one would differ by that alone.
            e = e[~subnormal(e)]
        rows = np.stack([rng.permutation(np.concatenate([e, e[:7]])) for _ in range(4)])
        ops = [("sort", lambda a: lax.sort(a, dimension=1, is_stable=True)),
               ("sort_desc", lambda a: -lax.sort(-a, dimension=1) if np.dtype(a.dtype).kind
                != "u" else lax.sort(a, dimension=1)),
               ("argsort", lambda a: lax.sort_key_val(
                   a, lax.broadcasted_iota(jnp.int32, a.shape, 1), dimension=1)[1]),
               ("argmax", lambda a: jnp.argmax(a, axis=1)),
               ("argmin", lambda a: jnp.argmin(a, axis=1)),
               ("reduce_max", lambda a: lax.reduce_max(a, (1,))),
               ("reduce_min", lambda a: lax.reduce_min(a, (1,))),
               ("cummax", lambda a: lax.cummax(a, axis=1)),
               ("cummin", lambda a: lax.cummin(a, axis=1)),
               ("cumsum", lambda a: lax.cumsum(a, axis=1)),
               ("cumprod", lambda a: lax.cumprod(a[:, :9], axis=1)),
               ("rw_max", lambda a: lax.reduce_window(a, -jnp.inf if is_float(a.dtype) else
                                                      jnp.iinfo(a.dtype).min, lax.max,
                                                      (1, 3), (1, 1), "VALID")),
               ]
        if np.dtype(dt).kind == "u":
            ops = [o for o in ops if o[0] != "sort_desc"]
        if name in ("f8e8m0fnu",):
            ops = [o for o in ops if o[0] in ("sort", "argsort", "argmax", "argmin",
                                              "reduce_max", "reduce_min")]
        # NaN payloads are not pinned: which NaN a max/min reduction keeps depends on an
        # order XLA does not specify, and XLA:CPU's sort of narrow floats returns canonical
        # NaNs (it widens them); a NaN where XLA has a number is still a mismatch.
        out.append(Group("sort_reduce", name, ops, [rows]))
    return out


# ---------------------------------------------------------------------------------- running

def _bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a.view(uint_of(a.dtype))


FTZ_TYPES = {np.dtype(t) for t in (ml_dtypes.bfloat16, np.float32, np.float64,
                                    np.complex64, np.complex128)}


def subnormal(a: np.ndarray) -> np.ndarray:
    """Flat mask: elements that XLA:CPU's flush-to-zero / denormals-are-zero mode changes
    (subnormals of bf16, f32, f64 and complex parts; f16 and f8 compute in f32 where their
    subnormals are normal)."""
    a = np.asarray(a)
    if a.dtype not in FTZ_TYPES:
        return np.zeros(a.size, bool)
    if is_complex(a.dtype):
        f = np.float32 if a.dtype == np.complex64 else np.float64
        p = a.reshape(-1).view(f).reshape(-1, 2)
        return subnormal(p[:, 0]) | subnormal(p[:, 1])
    tiny = ml_dtypes.finfo(a.dtype).tiny
    v = np.abs(a.astype(np.float64).reshape(-1))
    return (v > 0) & (v < float(tiny))


def compare(got: np.ndarray, want: np.ndarray, pinned: bool):
    """(mismatching, NaN payload only) flat element masks."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        ones = np.ones(max(want.size, 1), bool)
        return ones, ~ones
    if is_complex(want.dtype):
        f = np.float32 if want.dtype == np.complex64 else np.float64
        g = got.reshape(-1).view(f).reshape(-1, 2)
        w = want.reshape(-1).view(f).reshape(-1, 2)
        b0, n0 = compare(g[:, 0], w[:, 0], pinned)
        b1, n1 = compare(g[:, 1], w[:, 1], pinned)
        return b0 | b1, (n0 | n1) & ~(b0 | b1)
    bad = _bits(got).reshape(-1) != _bits(want).reshape(-1)
    nanbits = np.zeros_like(bad)
    if is_float(want.dtype) and not pinned:
        with np.errstate(all="ignore"):
            both = np.isnan(got.astype(np.float64).reshape(-1)) & \
                np.isnan(want.astype(np.float64).reshape(-1))
        nanbits = bad & both
        bad &= ~both
    return bad, nanbits


def ftz_explained(g: Group, got, want, bad: np.ndarray) -> np.ndarray:
    """Mismatching elements that XLA:CPU's FTZ/DAZ explains: a subnormal input of that
    element (element-wise ops), or a subnormal result of ours where XLA has zero."""
    expl = np.zeros_like(bad)
    want = np.asarray(want)
    for a in g.args:
        a = np.asarray(a)
        if a.shape == want.shape:
            expl |= subnormal(a)
        elif g.family in ("sort_reduce",) and a.ndim == 2 and want.shape[:1] == a.shape[:1]:
            rows = subnormal(a).reshape(a.shape).any(axis=1)
            expl |= np.repeat(rows, want.size // max(want.shape[0], 1))
    got = np.asarray(got)
    if got.shape == want.shape and got.dtype == want.dtype and got.dtype in FTZ_TYPES:
        z = want.reshape(-1) == 0
        if is_complex(want.dtype):
            z = np.ones_like(z)
        expl |= subnormal(got) & z
    return bad & expl


@dataclass
class Result:
    cases: int = 0
    bad: dict = field(default_factory=dict)     # backend -> mismatches
    ftz: dict = field(default_factory=dict)     # backend -> mismatches XLA's FTZ explains
    nanbits: dict = field(default_factory=dict)  # backend -> NaN vs NaN, other bits
    nan_details: list = field(default_factory=list)
    error: dict = field(default_factory=dict)   # backend -> message
    details: list = field(default_factory=list)
    xla_error: str | None = None


def fmt(v) -> str:
    v = np.asarray(v)
    if is_float(v.dtype):
        return f"{float(v)!r}[0x{int(_bits(v)):0{v.dtype.itemsize * 2}x}]"
    if is_complex(v.dtype):
        return repr(complex(v))
    return repr(v.item())


def run_xladist(text: str, backend: str, args):
    module = xladist.parse_hlo(text)
    exe = xladist.compile(module, backend=backend)
    return exe(*args)


def run_group(g: Group, backends, results, ndetail):
    fn = g.fn()
    args = [jnp.asarray(a) for a in g.args]
    try:
        lowered = jax.jit(fn, keep_unused=True).lower(*args)
        text = lowered.as_text(dialect="hlo")
        want = [np.asarray(w) for w in lowered.compile()(*args)]
    except Exception:
        # Some op of the group is not lowerable for this dtype: try one by one.
        want = None
    if want is None:
        if len(g.outputs) == 1:
            r = results[(g.family, g.outputs[0][0], g.dtype)]
            r.xla_error = traceback.format_exc(limit=1).strip().splitlines()[-1][:160]
            return
        for o in g.outputs:
            run_group(Group(g.family, g.dtype, [o], g.args, g.pinned), backends, results,
                      ndetail)
        return
    got = {}
    for be in backends:
        try:
            got[be] = run_xladist(text, be, g.args)
        except Exception:
            if len(g.outputs) > 1:
                for o in g.outputs:
                    run_group(Group(g.family, g.dtype, [o], g.args, g.pinned), [be],
                              results, ndetail)
                got[be] = None
            else:
                msg = traceback.format_exc().strip().splitlines()[-1][:200]
                results[(g.family, g.outputs[0][0], g.dtype)].error[be] = msg
                got[be] = None
    for k, (op, _) in enumerate(g.outputs):
        r = results[(g.family, op, g.dtype)]
        r.cases = want[k].size
        for be in backends:
            if got[be] is None:
                continue
            bad, nanbits = compare(got[be][k], want[k], op in g.pinned)
            ftz = ftz_explained(g, got[be][k], want[k], bad)
            bad &= ~ftz
            n = int(bad.sum())
            r.bad[be] = n
            r.ftz[be] = int(ftz.sum())
            r.nanbits[be] = int(nanbits.sum())
            if nanbits.any() and not n:
                for i in np.flatnonzero(nanbits)[:2]:
                    ins = _inputs_of(g, want[k].shape, i)
                    r.nan_details.append(
                        f"{be}: in=({', '.join(ins)}) ours={fmt(got[be][k].reshape(-1)[i])} "
                        f"xla={fmt(want[k].reshape(-1)[i])}")
            if n:
                idx = np.flatnonzero(bad)[:ndetail]
                r.details = [d for d in r.details if not d.startswith(be + ":")] \
                    if False else r.details
                for i in idx:
                    ins = _inputs_of(g, want[k].shape, i)
                    r.details.append(
                        f"{be}: in=({', '.join(ins)}) ours={fmt(got[be][k].reshape(-1)[i])} "
                        f"xla={fmt(want[k].reshape(-1)[i])}")


def _inputs_of(g: Group, shape, i) -> list[str]:
    """The inputs that produced flat element i, when the op is element-wise."""
    out = []
    for a in g.args:
        a = np.asarray(a)
        if a.shape == tuple(shape):
            out.append(fmt(a.reshape(-1)[i]))
    if not out and len(shape) == 2 and g.args and np.asarray(g.args[0]).ndim == 2 and \
            np.asarray(g.args[0]).shape[0] == shape[0]:
        row = i // shape[1]
        out.append(f"row {row} col {i % shape[1]}")
    return out or [f"element {i}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="", help="comma-separated families or op labels "
                    "(substring match), e.g. convert,shl,rem")
    ap.add_argument("--skip", default="", help="comma-separated families to leave out")
    ap.add_argument("--dtypes", default="", help="comma-separated dtype names")
    ap.add_argument("--backends", default="interpreter,cpu")
    ap.add_argument("--details", type=int, default=6, help="mismatches shown per op/dtype")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--all-rows", action="store_true", help="print every row, not only "
                    "the ones with mismatches or errors")
    args = ap.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    want_ops = [o for o in args.ops.split(",") if o]
    want_dt = set(d for d in args.dtypes.split(",") if d)
    groups = [g for f in GROUPS for g in f()]
    if want_dt:
        groups = [g for g in groups if g.dtype in want_dt]
    skip = set(f for f in args.skip.split(",") if f)
    groups = [g for g in groups if g.family not in skip]
    if want_ops:
        sel = []
        for g in groups:
            if any(o == g.family for o in want_ops):
                sel.append(g)
                continue
            outs = [o for o in g.outputs if any(w in o[0] for w in want_ops)]
            if outs:
                sel.append(Group(g.family, g.dtype, outs, g.args, g.pinned))
        groups = sel
    if args.list:
        for g in groups:
            print(f"{g.family:16s} {g.dtype:14s} {', '.join(o for o, _ in g.outputs)}")
        return 0
    results: dict = defaultdict(Result)
    t0 = time.time()
    for n, g in enumerate(groups):
        t = time.time()
        run_group(g, backends, results, args.details)
        print(f"[{n + 1}/{len(groups)}] {g.family} {g.dtype}: {time.time() - t:.1f}s",
              file=sys.stderr, flush=True)
    # table: per backend "mismatches/ftz/nanbits"
    hdr = " ".join(f"{b + ' bad/ftz/nan':>24s}" for b in backends)
    print(f"\n{'family':16s} {'op':22s} {'dtype':14s} {'cases':>7s} {hdr}")
    fam_tot = defaultdict(lambda: [0, defaultdict(lambda: [0, 0, 0]), 0])
    for (fam, op, dt), r in sorted(results.items()):
        tot = fam_tot[fam]
        if r.xla_error:
            tot[2] += 1
            continue
        tot[0] += r.cases
        cells = []
        for b in backends:
            if b in r.error:
                cells.append("ERROR")
                tot[1][b][0] += r.cases
            else:
                v = (r.bad.get(b, 0), r.ftz.get(b, 0), r.nanbits.get(b, 0))
                cells.append("/".join(map(str, v)))
                for j in range(3):
                    tot[1][b][j] += v[j]
        interesting = any(r.bad.get(b) or r.nanbits.get(b) for b in backends) or r.error
        if args.all_rows or interesting:
            print(f"{fam:16s} {op:22s} {dt:14s} {r.cases:7d} " +
                  " ".join(f"{c:>24s}" for c in cells))
    print("\nper family: cases = elements compared; per backend mismatching elements / "
          "mismatches explained by XLA:CPU's FTZ-DAZ (not counted as bad) / NaN-vs-NaN with "
          "other bits (not counted); ERROR counts all cases as bad")
    print(f"{'family':16s} {'cases':>9s} {hdr}  xla-unsupported")
    for fam, (c, bad, xe) in sorted(fam_tot.items()):
        print(f"{fam:16s} {c:9d} " + " ".join(
            f"{'/'.join(map(str, bad[b])):>24s}" for b in backends) + f"  {xe}")
    total = sum(v[0] for v in fam_tot.values())
    print(f"{'TOTAL':16s} {total:9d} " + " ".join(
        f"{'/'.join(str(sum(v[1][b][j] for v in fam_tot.values())) for j in range(3)):>24s}"
        for b in backends))
    print("\ndetails")
    for (fam, op, dt), r in sorted(results.items()):
        if r.error:
            for b, m in r.error.items():
                print(f"  {fam} {op} {dt} {b} ERROR: {m}")
        for d in r.details:
            print(f"  {fam} {op} {dt} {d}")
    print("\nNaN payload / sign differences (not counted)")
    for (fam, op, dt), r in sorted(results.items()):
        for d in r.nan_details:
            print(f"  {fam} {op} {dt} {d}")
    unsupported = [(k, r.xla_error) for k, r in sorted(results.items()) if r.xla_error]
    if unsupported:
        print("\nnot lowerable / not run by jax (skipped):")
        for (fam, op, dt), m in unsupported:
            print(f"  {fam} {op} {dt}: {m}")
    print(f"\n{len(groups)} groups in {time.time() - t0:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
