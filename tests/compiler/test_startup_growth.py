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



def _with_constant(values: np.ndarray) -> str:
    n = values.size
    text = ", ".join(repr(float(v)) for v in values)
    return (f"HloModule c\n\nENTRY %main (x: f32[{n}]) -> f32[{n}] {{\n"
            f"  %x = f32[{n}] parameter(0)\n  %c = f32[{n}] constant({{{text}}})\n"
            f"  ROOT %a = f32[{n}] add(%x, %c)\n}}\n")


def test_compiling_a_large_constant_formats_none_of_its_elements(monkeypatch):
    # Before: the kernel cache's key was the module's printed text, so every compile, warm
    # or cold, in the launcher and on every rank, formatted every element of every constant
    # in Python (a 10^6-element literal: 2.8 s of a warm compile). Now a large constant
    # enters the key as a digest of its bytes; two constants differing in one element
    # still get their own code.
    from xladist.hlo import literals
    n = 20_000
    values = np.linspace(-1, 1, n, dtype=np.float32)
    other = values.copy()
    other[n // 2] = 7.0
    modules = [xladist.parse_hlo(_with_constant(v)) for v in (values, other)]
    formatted = [0]
    real = literals.element_strings

    def counting(*args, **kwargs):
        out = real(*args, **kwargs)
        formatted[0] += len(out)
        return out

    monkeypatch.setattr(literals, "element_strings", counting)
    x = np.full(n, 0.5, dtype=np.float32)
    for module, v in zip(modules, (values, other)):
        for _ in range(2):  # cold, then from the kernel cache
            np.testing.assert_array_equal(xladist.compile(module)(x)[0], x + v)
    assert formatted[0] == 0, f"{formatted[0]:,} elements printed to compile two modules"


def test_planning_a_value_with_many_users_compares_instructions_a_linear_number_of_times(
        monkeypatch):
    # Before: Computation.users and fusion's own copy of it checked each user against the
    # list of users found so far, so a value with n users cost n^2/2 comparisons in the
    # verifier and again in fusion planning (10,000 users: 7-8 s each).
    from xladist.compiler.program import CpuProgram
    from xladist.hlo.ir import Instruction
    n = 2000
    lines = ["HloModule fan", "", "ENTRY %main (x: f32[4]) -> f32[4] {",
             "  %x = f32[4] parameter(0)"]
    lines += [f"  %m{i} = f32[4] multiply(%x, %x)" for i in range(n)]
    lines += [f"  %t = ({', '.join(['f32[4]'] * n)}) tuple({', '.join(f'%m{i}' for i in range(n))})",
              "  ROOT %r = f32[4] get-tuple-element(%t), index=0", "}", ""]
    module = xladist.parse_hlo("\n".join(lines))
    compared = [0]

    def counting_eq(self, other):
        compared[0] += 1
        return self is other

    monkeypatch.setattr(Instruction, "__eq__", counting_eq)
    xladist.verify(module)
    CpuProgram(module, compile_code=False)  # inline, fusion and buffer planning, no LLVM
    assert compared[0] <= 20 * n, f"{compared[0]:,} comparisons of instructions for {n} users"
