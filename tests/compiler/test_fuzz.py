"""Differential fuzzing: small element-wise / convert / compare / select / reduce graphs
built with xladist.builder over every element type and shape class (scalars, zero-size,
odd sizes, non-default layouts) run on the interpreter and the cpu backend. Exact
operations must agree bit for bit; inexact ones (divide, sqrt, exp, tanh; reductions,
whose order differs) within the type's tolerance.

Default: XLADIST_FUZZ_EXAMPLES (40) examples, a few seconds. Longer run:
    XLADIST_FUZZ_EXAMPLES=2000 pytest tests/test_compiler_fuzz.py
"""

from __future__ import annotations

import os

import pytest
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xladist
from xladist.builder import XlaBuilder
from xladist.compiler.codegen.lowbits import SMALL_FLOATS, SUB_BYTE_INTS
from xladist.hlo.shape import Shape

from tests.compiler.test_lowbits import assert_same, dtype

FLOATS = ["f64", "f32", "f16", "bf16", *sorted(SMALL_FLOATS)]
INTS = ["s64", "s32", "s16", "s8", "u64", "u32", "u16", "u8", *sorted(SUB_BYTE_INTS)]
TYPES = ["pred", *FLOATS, *INTS]

# dims and layout (minor-to-major); None = default
SHAPES = [((), None), ((0,), None), ((1,), None), ((7,), None), ((3, 5), None),
          ((3, 5), (0, 1)), ((2, 0, 3), None), ((2, 3, 5), (1, 0, 2)), ((33,), None)]

EXACT_BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]
EXACT_UNARY = ["negate", "abs"]
INEXACT_UNARY = ["sqrt", "exp", "tanh"]
MAX_EXAMPLES = int(os.environ.get("XLADIST_FUZZ_EXAMPLES", "40"))


def _values(t: str, dims, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(np.prod(dims)) if dims else 1
    if t == "pred":
        v = rng.integers(0, 2, n).astype(bool)
    elif t in INTS:
        info = ml_dtypes.iinfo(dtype(t)) if t in SUB_BYTE_INTS else np.iinfo(dtype(t))
        lo, hi = max(int(info.min), -100), min(int(info.max), 100)
        v = rng.integers(lo, hi, n, endpoint=True).astype(dtype(t))
    else:
        pool = np.array([0.0, -0.0, 1.0, -2.5, 0.375, 3.0, np.inf, -np.inf, np.nan, 1e-3])
        v = np.where(rng.random(n) < 0.3, rng.choice(pool, n), rng.standard_normal(n) * 4)
        with np.errstate(all="ignore"):
            v = v.astype(dtype(t))
    return v.reshape(dims)


@st.composite
def graphs(draw):
    t = draw(st.sampled_from(TYPES))
    dims, layout = draw(st.sampled_from(SHAPES))
    ops = draw(st.lists(st.sampled_from(
        ["binary", "unary", "convert", "compare_select", "reduce"]), min_size=1, max_size=4))
    choices = [draw(st.integers(0, 1000)) for _ in ops]
    return t, dims, layout, ops, choices, draw(st.integers(0, 2 ** 16))


def _build(t, dims, layout, ops, choices):
    """(module, exact): the graph and whether every step is exact."""
    b = XlaBuilder("fuzz")
    shape = Shape.array(t, dims, layout)
    x = b.parameter(0, shape, name="x")
    y = b.parameter(1, shape, name="y")
    cur, exact, outs = x, True, []
    is_float = t in FLOATS
    for op, c in zip(ops, choices):
        ctype = cur.shape.element_type.name
        if op == "binary" and ctype != "pred":
            name = EXACT_BINARY[c % len(EXACT_BINARY)]
            if ctype == t:
                cur = getattr(b, name)(cur, y)
        elif op == "unary" and ctype != "pred" and ctype == t:
            if is_float and c % 3 == 0:
                name = INEXACT_UNARY[c % len(INEXACT_UNARY)]
                exact = False
            else:
                name = EXACT_UNARY[c % len(EXACT_UNARY)]
                if name == "abs" and t.startswith("u"):
                    continue
            cur = b._add(name.replace("exp", "exponential"), [cur])
        elif op == "convert":
            to = TYPES[c % len(TYPES)]
            outs.append(b.convert(cur, to))
        elif op == "compare_select" and ctype == t:
            p = b.compare(cur, y, ["LT", "GE", "EQ", "NE"][c % 4])
            cur = b.select(p, cur, y)
        elif op == "reduce" and ctype == t and dims and t != "pred" \
                and t not in SUB_BYTE_INTS:  # (the builder's max init needs np.iinfo)
            # A sum of 8/4-bit floats rounds after every add: another order is another
            # result, not an error, so those types are fuzzed with max only.
            total = is_float and c % 2 == 0 and t not in SMALL_FLOATS
            outs.append(b.reduce_sum(cur, [len(dims) - 1]) if total
                        else b.reduce_max(cur, [len(dims) - 1]))
            exact = exact and not total
    return b.build([cur, *outs]), exact


@pytest.mark.slow
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_cpu_equals_the_interpreter(graph):
    t, dims, layout, ops, choices, seed = graph
    module, exact = _build(t, dims, layout, ops, choices)
    args = [_values(t, dims, seed), _values(t, dims, seed + 1)]
    with np.errstate(all="ignore"):
        want = xladist.compile(module, backend="interpreter")(*args)
        got = xladist.compile(module, backend="cpu")(*args)
    for g, w in zip(got, want):
        if exact:
            assert_same(g, w, nan_sign_free=True)
        else:
            tol = {8: 1e-12, 4: 1e-5}.get(np.asarray(w).dtype.itemsize, 2e-2)
            with np.errstate(all="ignore"):
                np.testing.assert_allclose(np.asarray(g).astype(np.float64),
                                           np.asarray(w).astype(np.float64),
                                           rtol=tol, atol=tol, equal_nan=True)
