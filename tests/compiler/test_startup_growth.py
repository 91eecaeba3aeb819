"""What runs before the first step must not grow faster than the module: long chains of
fused ops, many computations, a value with many users. Each test asserts a result against
numpy or a count that must not depend on the module's size, never a time."""

from __future__ import annotations

import numpy as np

import xladist


def _linear_chain(n: int) -> str:
    """n single-use element-wise ops in a row: negate, exponential, negate, ..."""
    lines = ["HloModule chain", "", "ENTRY %main (x: f32[8]) -> f32[8] {",
             "  %v0 = f32[8] parameter(0)"]
    for i in range(1, n + 1):
        op = "negate" if i % 2 else "exponential"
        lines.append(f"  {'ROOT ' if i == n else ''}%v{i} = f32[8] {op}(%v{i - 1})")
    return "\n".join(lines + ["}", ""])


def test_a_long_chain_of_fusible_ops_compiles_and_computes_numpys_result():
    # Before: every op fused into one kernel, and codegen's recursion over its producers
    # ran out of Python's stack at ~300 ops (RecursionError from xladist.compile).
    n = 1000
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    want = x.copy()
    for i in range(1, n + 1):
        want = -want if i % 2 else np.exp(want)
    got = xladist.compile(xladist.parse_hlo(_linear_chain(n)))(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5)

