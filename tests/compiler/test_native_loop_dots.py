"""Dots inside native while loops (xladist/compiler/native/blas.py): the driver makes the BLAS
call numpy's matmul makes on the Python path, so both give the same bits.

Every program runs through the native driver and through the Python executor (native
steps switched off) in one process; results must be the same bits and close to numpy's
float64 product (and the interpreter's). The loop must really be native (a NativeLoop, run
with its steps bound), or really not, for the products that are refused.
"""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.compiler.control import WhileThunk
from xladist.compiler.native import blas as native_blas
from xladist.compiler.native import loop as native_loop

TYPES = {"f32": np.float32, "f64": np.float64}


def _layout(rowmajor: bool) -> str:
    return "{1,0}" if rowmajor else "{0,1}"


def dot_loop(dt, m, k, n, lhs_c, rhs_c, lrow, rrow, orow, trips=3, same=False) -> str:
    """acc <- acc + dot(a, b) (a, b handed back unchanged), `trips` times; a is m x k (k x m
    when lhs_c == 0), b k x n (n x k when rhs_c == 1), in the given layouts. same: the body
    multiplies a by itself (b unused)."""
    ash = f"{dt}[{m},{k}]" if lhs_c == 1 else f"{dt}[{k},{m}]"
    bsh = f"{dt}[{k},{n}]" if rhs_c == 0 else f"{dt}[{n},{k}]"
    a_t, b_t = ash + _layout(lrow), bsh + _layout(rrow)
    o_t = f"{dt}[{m},{n}]" + _layout(orow)
    state = f"(s32[], {a_t}, {b_t}, {o_t})"
    rhs = "a" if same else "b"
    return f"""HloModule dots
cond {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  lim = s32[] constant({trips})
  ROOT lt = pred[] compare(i, lim), direction=LT
}}
body {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = {a_t} get-tuple-element(p), index=1
  b = {b_t} get-tuple-element(p), index=2
  acc = {o_t} get-tuple-element(p), index=3
  d = {o_t} dot(a, {rhs}), lhs_contracting_dims={{{lhs_c}}}, rhs_contracting_dims={{{rhs_c}}}
  s = {o_t} add(acc, d)
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT r = {state} tuple(i1, a, b, s)
}}
ENTRY e {{
  a0 = {ash} parameter(0)
  b0 = {bsh} parameter(1)
  a1 = {a_t} copy(a0)
  b1 = {b_t} copy(b0)
  zero = s32[] constant(0)
  z = {dt}[] constant(0.5)
  acc0 = {o_t} broadcast(z), dimensions={{}}
  init = {state} tuple(zero, a1, b1, acc0)
  l = {state} while(init), condition=cond, body=body
  o = {o_t} get-tuple-element(l), index=3
  ROOT out = {dt}[{m},{n}] copy(o)
}}
"""


def run_paths(text, *args, monkeypatch):
    """(native result, Python-path result, [bound or not per native run], the while)."""
    module = xladist.parse_hlo(text)
    cpu = xladist.compile(module, backend="cpu")
    calls = []
    run = native_loop.NativeLoop.run

    def counted(self, state, owned, bound=None, wd=None, rs=None):
        calls.append([s.kind for s in self.collectives] if bound is not None else None)
        return run(self, state, owned, bound, wd, rs)

    monkeypatch.setattr(native_loop.NativeLoop, "run", counted)
    native = np.asarray(cpu(*args)[0])
    monkeypatch.setattr(native_loop, "COLLECTIVES", False)
    python = np.asarray(cpu(*args)[0])
    monkeypatch.undo()
    loops = [t for cc in cpu.program.builder.compiled.values() for t in cc.thunks
             if isinstance(t, WhileThunk)]
    return native, python, calls, loops[0]


def _inputs(dt, *shapes):
    rng = np.random.default_rng(7)
    return [rng.normal(size=s).astype(TYPES[dt]) for s in shapes]


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("lhs_c,rhs_c", [(1, 0), (0, 0), (1, 1), (0, 1)])
@pytest.mark.parametrize("layouts", [(True, True, True), (False, True, True),
                                     (True, False, False), (False, False, False)],
                         ids=["rrr", "crr", "rcc", "ccc"])
def test_native_dot_matches_python_path_bit_for_bit(monkeypatch, dt, lhs_c, rhs_c, layouts):
    m, k, n = 9, 5, 7
    text = dot_loop(dt, m, k, n, lhs_c, rhs_c, *layouts)
    a, b = _inputs(dt, (m, k) if lhs_c == 1 else (k, m), (k, n) if rhs_c == 0 else (n, k))
    native, python, calls, loop = run_paths(text, a, b, monkeypatch=monkeypatch)
    assert loop.native is not None and calls == [["dot"]], calls
    assert native.tobytes() == python.tobytes()
    am = a if lhs_c == 1 else a.T
    bm = b if rhs_c == 0 else b.T
    want = 0.5 + 3 * (am.astype(np.float64) @ bm.astype(np.float64))
    np.testing.assert_allclose(native, want, rtol=1e-5 if dt == "f32" else 1e-12, atol=1e-5)


@pytest.mark.parametrize("alias", [False, True], ids=["one-leaf", "two-leaves-one-array"])
def test_matrix_times_its_transpose_takes_numpys_syrk_branch(monkeypatch, alias):
    """a @ a^T: numpy calls syrk when both operands are the same memory and copies the
    upper triangle down; the driver checks the pointers the same way. two-leaves-one-array:
    b starts as a's array (the entry passes one array twice), then a @ b^T is syrk too."""
    m, k = 40, 33  # syrk and gemm give different bits here (not at 6 x 4)
    text = dot_loop("f32", m, k, m, 1, 1, True, True, True, same=not alias)
    if alias:
        text = text.replace("init = (s32[], f32[40,33]{1,0}, f32[40,33]{1,0}, f32[40,40]{1,0}) "
                            "tuple(zero, a1, b1, acc0)",
                            "init = (s32[], f32[40,33]{1,0}, f32[40,33]{1,0}, f32[40,40]{1,0}) "
                            "tuple(zero, a1, a1, acc0)")
        assert "tuple(zero, a1, a1, acc0)" in text
    a, b = _inputs("f32", (m, k), (m, k))
    native, python, calls, loop = run_paths(text, a, b, monkeypatch=monkeypatch)
    assert loop.native is not None and calls == [["dot"]]
    assert native.tobytes() == python.tobytes()
    np.testing.assert_array_equal(native, native.T)  # syrk + the copied triangle
    want = 0.5 + 3 * (a.astype(np.float64) @ a.T.astype(np.float64))
    np.testing.assert_allclose(native, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("why,m,k,n", [("split into blocks", 300, 256, 256),
                                       ("a vector (numpy's gemv)", 1, 5, 7),
                                       ("f16", 4, 4, 4)])
def test_products_numpy_does_not_make_one_gemm_of_are_called_back(monkeypatch, why, m, k, n):
    """The driver calls the Python path's library thunk for them (native/callback.py)."""
    dt = "f16" if why == "f16" else "f32"
    text = dot_loop(dt, m, k, n, 1, 0, True, True, True, trips=1)
    a, b = (x.astype(np.float16 if dt == "f16" else np.float32)
            for x in _inputs("f32", (m, k), (k, n)))
    native, python, calls, loop = run_paths(text, a, b, monkeypatch=monkeypatch)
    assert loop.native is not None and calls == [["callback"]], why
    assert native.tobytes() == python.tobytes()


def test_no_blas_found_calls_the_dot_back(monkeypatch):
    """A machine whose numpy brings no OpenBLAS we can find: the dot step is called back in
    Python at run time (native/callback.py; same results), never a call to a missing
    function."""
    monkeypatch.setattr(native_blas, "_numpy_openblas", lambda: None)
    native_blas.blas_functions.cache_clear()
    try:
        text = dot_loop("f32", 9, 5, 7, 1, 0, True, True, True)
        a, b = _inputs("f32", (9, 5), (5, 7))
        native, python, calls, loop = run_paths(text, a, b, monkeypatch=monkeypatch)
        assert loop.native is not None and calls == [["dot"]]
        assert native.tobytes() == python.tobytes()
    finally:
        native_blas.blas_functions.cache_clear()


def test_numpys_openblas_is_found_here():
    blas = native_blas.blas_functions()
    assert blas is not None and all(blas.fns.values())
