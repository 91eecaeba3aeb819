"""Float sums and products in the order codegen/lanes.py states: the compiled results are
that order's bits (a numpy model of it here, element-wise IEEE arithmetic), the same with
either LLVM pipeline (loop unrolling or not) and every thread count; the kernels carry no
fast-math flags, so they take the pipeline without loop unrolling."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.compiler import compile_pool, jit, parallel
from xladist.compiler.program import CpuExecutable, CpuProgram
from xladist.compiler.target import Target, host_target
from xladist.compiler.units import program_units


def lanes_total(a: np.ndarray, op, identity) -> np.ndarray:
    """The lanes of a[..., passes, n] combined (lanes.py's docstring): lane k takes
    elements k, k+L, ... of every pass in turn; then halving, k with k + L/2."""
    n = a.shape[-1]
    most = 1024 // (8 * a.dtype.itemsize)
    lanes = 1
    while lanes * 2 <= min(n, most):
        lanes *= 2
    acc = np.full(a.shape[:-2] + (lanes,), identity, a.dtype)
    rounds, left = divmod(n, lanes)
    for p in range(a.shape[-2]):
        row = a[..., p, :]
        for r in range(rounds):
            acc = op(acc, row[..., r * lanes:(r + 1) * lanes])
        if left:
            acc[..., :left] = op(acc[..., :left], row[..., rounds * lanes:])
    while lanes > 1:
        lanes //= 2
        acc = op(acc[..., :lanes], acc[..., lanes:2 * lanes])
    return acc[..., 0]


def reducer(t, op):
    return (f"r {{ x = {t}[] parameter(0)\n y = {t}[] parameter(1)\n"
            f" ROOT s = {t}[] {op}(x, y) }}\n")


def reduce_text(t, shape, dims, init, op="add"):
    out = [n for i, n in enumerate(shape) if i not in dims]
    return (f"HloModule m\n{reducer(t, op)}ENTRY main {{\n a = {t}[{','.join(map(str, shape))}]"
            f" parameter(0)\n z = {t}[] constant({init})\n ROOT o = {t}[{','.join(map(str, out))}]"
            f" reduce(a, z), dimensions={{{','.join(map(str, dims))}}}, to_apply=r\n}}\n")


def row_case(t, rows, n, init=0, op="add"):
    def want(a):
        np_op, ident = (np.add, -0.0) if op == "add" else (np.multiply, 1.0)
        return np_op(a.dtype.type(init), lanes_total(a[:, None, :], np_op, ident))
    return reduce_text(t, (rows, n), (1,), init, op), want


def trailing_two():
    # Both reduced dims minor: the lanes of dim 2 carry on through the passes over dim 1.
    return (reduce_text("f32", (3, 5, 37), (1, 2), 0),
            lambda a: np.float32(0) + lanes_total(a, np.add, -0.0))


def outer_and_trailing():
    # Dim 2 in lanes, dim 0 an outer loop accumulating into the output (from the init).
    def want(a):
        out = np.full(a.shape[1], 1.5, np.float32)
        for i in range(a.shape[0]):
            out = out + lanes_total(a[i][:, None, :], np.add, -0.0)
        return out
    return reduce_text("f32", (4, 3, 50), (0, 2), 1.5), want


def column():
    # No reduced dim is minor: one chain per output element, rows in order.
    def want(a):
        out = np.full(a.shape[1], 0.25, np.float32)
        for row in a:
            out = out + row
        return out
    return reduce_text("f32", (70, 9), (0,), 0.25), want


def fused():
    # A reduce fused into its consumer's kernel (elemental.py), over two dims.
    text = f"""HloModule m
{reducer("f32", "add")}ENTRY main {{
  a = f32[6,4,45] parameter(0)
  sq = f32[6,4,45] multiply(a, a)
  z = f32[] constant(0)
  s = f32[6] reduce(sq, z), dimensions={{1,2}}, to_apply=r
  sb = f32[6,4,45] broadcast(s), dimensions={{0}}
  ROOT o = f32[6,4,45] divide(a, sb)
}}
"""
    return text, lambda a: a / (np.float32(0) + lanes_total(a * a, np.add, -0.0))[:, None, None]


CASES = {
    **{f"row-f32-{n}": (lambda n=n: row_case("f32", 5, n)) for n in (2, 3, 31, 32, 33, 100, 517)},
    "row-f64-40": lambda: row_case("f64", 3, 40),
    "row-f32-init": lambda: row_case("f32", 4, 70, init=2.5),
    "row-product": lambda: row_case("f32", 4, 75, init=1, op="multiply"),
    "trailing-two": trailing_two,
    "outer-and-trailing": outer_and_trailing,
    "column": column,
    "fused": fused,
}


def _args(module, seed=0, product=False):
    rng = np.random.default_rng(seed)
    p = module.entry.parameters[0]
    dtype = np.float64 if p.shape.element_type.name == "f64" else np.float32
    x = rng.standard_normal(p.shape.dims) * 3
    if product:
        x = 1 + x / 100  # a product that stays finite
    return [x.astype(dtype)]


def _pipelines(module):
    """The module compiled as xladist.compile does, and with the exact pipeline for all."""
    prog = CpuProgram(module, compile_code=False)
    units = program_units(prog.builder)
    return {exact: CpuExecutable(module, code=jit.compile_units(units, exact=exact),
                                 fingerprint=prog.fingerprint) for exact in (None, True)}


@pytest.fixture
def no_cache(monkeypatch):
    monkeypatch.setenv("XLADIST_CACHE_DIR", "off")


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_stated_order_bit_for_bit_with_either_pipeline(case, no_cache):
    text, want = CASES[case]()
    module = xladist.parse_hlo(text)
    args = _args(module, product=case == "row-product")
    expected = want(*args)
    for exact, exe in _pipelines(module).items():
        got = np.asarray(exe(*args)[0])
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes(), (
            f"{case}, exact={exact}: max difference {np.max(np.abs(got - expected))}")


@pytest.mark.parametrize("cpu", ["x86-64", "haswell", "skylake-avx512"])
def test_the_order_is_the_same_on_every_cpu(cpu, no_cache):
    # SSE2, AVX2, AVX-512: 4, 8 or 16 f32 a register; the lanes are 32 on each (a rank on
    # another CPU computes the same bits). Code for each runs on an AVX-512 host.
    host = host_target()
    if not host.triple.startswith("x86_64") or "+avx512f" not in host.features.split(","):
        pytest.skip("needs an x86-64 host with AVX-512")
    target = Target(host.triple, cpu, "")
    for case in ("row-f32-517", "fused", "outer-and-trailing"):
        text, want = CASES[case]()
        module = xladist.parse_hlo(text)
        prog = CpuProgram(module, compile_code=False)
        exe = CpuExecutable(module, code=jit.compile_units(program_units(prog.builder), target),
                            fingerprint=prog.fingerprint)
        args = _args(module)
        assert np.asarray(exe(*args)[0]).tobytes() == want(*args).tobytes(), (cpu, case)


def test_sum_kernels_carry_no_fast_math_and_take_the_fast_pipeline():
    for case in ("row-f32-517", "outer-and-trailing", "fused", "row-product"):
        text, _ = CASES[case]()
        prog = CpuProgram(xladist.parse_hlo(text), compile_code=False)
        for unit in program_units(prog.builder):
            ir_text = unit.text()
            assert not compile_pool._FAST_MATH.search(ir_text), (case, unit.name)
            assert not compile_pool.pipeline_exact(ir_text, host_target()), (case, unit.name)


@pytest.fixture
def restore_threads(monkeypatch):
    monkeypatch.setattr(parallel, "DYNAMIC", False)  # blocks to the pool on a busy host
    yield
    parallel.set_threads(None)


def test_split_kernels_keep_the_order_for_every_thread_count(restore_threads, no_cache):
    text, want = row_case("f32", 2053, 517, init=0.5)
    module = xladist.parse_hlo(text)
    args = _args(module, seed=3)
    exe = xladist.compile(module)
    splits = [e.get("split", "") for c in exe.program.explain() for e in c["thunks"]]
    assert any(" blocks of " in s for s in splits), splits
    expected = want(*args).tobytes()
    for n in (4, 2, 1):
        parallel.set_threads(n)
        assert np.asarray(exe(*args)[0]).tobytes() == expected, f"{n} threads"


def test_a_reducer_of_one_parameter_twice_stays_a_chain(no_cache):
    # add(x, x) doubles the accumulator and ignores the elements: not a sum of them.
    text = reduce_text("f32", (3, 40), (1,), 1.5).replace("add(x, y)", "add(x, x)")
    x = np.ones((3, 40), np.float32)
    got = np.asarray(xladist.compile(xladist.parse_hlo(text))(x)[0])
    np.testing.assert_array_equal(got, np.full(3, 1.5 * 2.0 ** 40, np.float32))
