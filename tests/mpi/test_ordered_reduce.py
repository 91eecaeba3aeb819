"""The order-preserving reduce-scatter (+ all-gather) of xladist/collectives/ordered.py over real MPI.

Reducers MPI has no builtin for, compiled by the cpu backend (as a compiled program hands
them to the runtime), all-reduced and reduce-scattered through the native call: the result
must be bit-identical on every member and equal, bit for bit, to the interpreter's left fold
in group-rank order computed with the same kernel -- with NaN payloads, -0.0, subnormals,
infinities and bf16 rounding ties, uneven splits, and chunks of zero elements.  Passes at
any world size (the suites run -n 2 and -n 4).
"""

from functools import lru_cache

import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI

pytestmark = pytest.mark.mpi

# Reducers the collectives benchmark does not compile (xladist/bench/collectives.py has the NaN-
# propagating f32 max, the bf16 sum and the select-based larger magnitude).
_HLO = """HloModule ordered_reducers
add_f16 {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT r = f16[] add(a, b)
}
min_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = f64[] minimum(a, b)
}
twice_a_plus_b_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  aa = f32[] add(a, a)
  ROOT r = f32[] add(aa, b)
}
twice_a_plus_b_bf16 {
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  aa = bf16[] add(a, a)
  ROOT r = bf16[] add(aa, b)
}
ENTRY e {
  f = f32[4] parameter(0)
  h = bf16[4] parameter(1)
  g = f16[4] parameter(2)
  d = f64[4] parameter(3)
  s2 = f16[4] all-reduce(g), replica_groups={}, to_apply=add_f16
  s4 = f64[4] all-reduce(d), replica_groups={}, to_apply=min_f64
  s5 = f32[4] all-reduce(f), replica_groups={}, to_apply=twice_a_plus_b_f32
  s6 = bf16[4] all-reduce(h), replica_groups={}, to_apply=twice_a_plus_b_bf16
  ROOT t = (f16[4], f64[4], f32[4], bf16[4]) tuple(s2, s4, s5, s6)
}
"""

# computation -> (dtype, kind and numpy fn of a standard reducer, or None)
_CASES = {
    "add_f16": (np.float16, ("sum", np.add)),
    "min_f64": (np.float64, ("min", np.minimum)),
    "twice_a_plus_b_f32": (np.float32, None),
    "twice_a_plus_b_bf16": (ml_dtypes.bfloat16, None),
}
_FROM_BENCH = {"add_bf16": "bf16-sum", "max_f32": "max", "larger_magnitude_f32": "custom"}
NAMES = sorted([*_CASES, *_FROM_BENCH])


def _kernel_fn(red):
    """The compiled kernel element-wise on whole arrays: fold() over it is the interpreter's
    left fold with the kernel's own NaN payloads (the reference)."""
    def fn(a, b):
        out = np.empty_like(a)
        red.into(np.ascontiguousarray(a), np.ascontiguousarray(b), out)
        return out
    return fn


@lru_cache(maxsize=1)
def _compiled():
    """name -> (dtype, Reducer as the runtime builds it, Reducer folding with the kernel in
    Python: the reference)."""
    from xladist.bench.collectives import _reducers
    from xladist.collectives.reduction import Reducer
    from xladist.compiler.program import compiled_reducers
    from xladist.hlo.parser import parse_module

    kernels = compiled_reducers(parse_module(_HLO))
    out = {}
    for name, (dtype, std) in _CASES.items():
        k = kernels[name]

        def into(a, b, o, k=k):
            assert k.combine_into(a, b, o)

        kind, fn = std if std else (None, k)
        out[name] = (np.dtype(dtype), Reducer(kind, fn, name, into, k.mpi_function,
                                              k.kernel_address), None)
    bench = _reducers()
    for name, key in _FROM_BENCH.items():
        dtype, red, _, _ = bench[key]
        out[name] = (dtype, red, None)
    return {name: (dtype, red, Reducer(None, _kernel_fn(red), name))
            for name, (dtype, red, _) in out.items()}


def _special_input(rank: int, count: int, dtype) -> np.ndarray:
    """NaNs (two bit patterns), signed zeros, subnormals, infinities and bf16 rounding ties,
    placed differently on every rank so that order and tie-breaking show."""
    rng = np.random.default_rng([11, rank])
    pool = np.array([np.nan, -np.nan, 0.0, -0.0, 1e-40, -1e-40, 5e-324, np.inf, -np.inf,
                     1.0, 1.0078125, 0.00390625, 256.0, 1.0, -3.5, 6e-5], np.float64)
    return pool[rng.integers(0, len(pool), count)].astype(dtype)


def _forbidden(*args, **kwargs):
    raise AssertionError("a path other than the ordered reduce-scatter + all-gather ran")


@pytest.fixture
def ordered_only(cache, monkeypatch):
    """The world communicator with every other all-reduce / reduce-scatter path disabled
    and the user-op threshold at 0, so a result can only come from xladist/collectives/ordered.py."""
    from xladist.collectives import ordered
    comm = cache.get(list(range(cache.world.size)))
    monkeypatch.setattr(ordered, "USER_OP_BELOW", 0)
    for name in ("allreduce", "alltoall", "reduce_scatter_block"):
        monkeypatch.setattr(type(comm), name, _forbidden)
    return comm


def _same_everywhere(got: np.ndarray, what: str) -> None:
    everyone = MPI.COMM_WORLD.allgather(got.tobytes())
    assert len(set(everyone)) == 1, f"{what}: members differ in bits"


@pytest.mark.parametrize("name", NAMES)
def test_all_reduce_is_the_left_fold_bit_for_bit(ordered_only, name):
    import xladist.collectives as C
    from xladist.collectives import ordered, reduction

    comm = ordered_only
    n = comm.size
    dtype, red, ref = _compiled()[name]
    # Even and uneven splits, chunks of zero elements (3 < n at n=4), a 64 KiB+ operand.
    for count in (70_001, 4096 * n, 7, 3, 1):
        xs = [_special_input(r, count, dtype) for r in range(n)]
        got = C.all_reduce(comm, xs[comm.rank], red)
        what = f"{name} x{count} n={n}"
        _same_everywhere(got, what)
        want = reduction.fold(ref, xs)
        assert got.tobytes() == want.tobytes(), f"{what}: not the left fold in rank order"
        # In place (the operand is the result, as a native loop's carry): the same bits.
        mine = xs[comm.rank].copy()
        ordered.bind(comm, red, dtype, count, True)(mine, mine, "all-reduce.2")
        assert mine.tobytes() == want.tobytes(), f"{what}: in place differs"
        if red.kind is not None:  # and the values are numpy's meaning of the op
            wide = np.float64
            np.testing.assert_array_equal(got.astype(wide),
                                          reduction.fold(reduction.Reducer(None, red.fn),
                                                         xs).astype(wide), err_msg=what)


@pytest.mark.parametrize("name", ["add_bf16", "max_f32", "twice_a_plus_b_bf16"])
def test_bound_all_reduce_takes_the_same_path(ordered_only, name):
    """The runtime's bound form (all_reduce_bound on flat byte buffers, given their size)."""
    from xladist.collectives import reduction
    from xladist.collectives.all_reduce import all_reduce_bound

    comm = ordered_only
    n = comm.size
    dtype, red, ref = _compiled()[name]
    xs = [_special_input(r, 30_001, dtype) for r in range(n)]
    x = xs[comm.rank]
    call = all_reduce_bound(comm, red, dtype, "all-reduce.3", x.nbytes)
    out = np.empty(x.nbytes, np.uint8)
    call(x.view(np.uint8), out)
    want = reduction.fold(ref, xs)
    assert out.tobytes() == want.tobytes(), f"bound {name} n={n}"


@pytest.mark.parametrize("name", ["add_bf16", "max_f32", "twice_a_plus_b_f32",
                                  "larger_magnitude_f32"])
def test_reduce_scatter_is_the_left_fold_bit_for_bit(ordered_only, name):
    import xladist.collectives as C
    from xladist.collectives import reduction

    comm = ordered_only
    n = comm.size
    dtype, red, ref = _compiled()[name]
    for rows in (4096, 3):
        xs = [_special_input(r, rows * n * 2, dtype).reshape(rows * n, 2) for r in range(n)]
        for dim in (0, 1) if n == 2 else (0,):
            got = C.reduce_scatter(comm, xs[comm.rank], red, dim)
            want = np.split(reduction.fold(ref, xs), n, axis=dim)[comm.rank]
            assert got.tobytes() == want.tobytes(), f"{name} reduce-scatter dim={dim} n={n}"


def test_bracketing_and_order_show_in_the_bits(ordered_only):
    """Inputs whose bf16 sum depends on the bracketing, and a non-commutative reducer: a
    fold in any other order or bracketing than the left fold in rank order gives other
    bits (checked against hand-computed results, not only against fold())."""
    import xladist.collectives as C

    comm = ordered_only
    n, r = comm.size, comm.rank
    dtype, add, _ = _compiled()["add_bf16"]
    # 1 + 2^-8 is a tie that rounds to even (1); member 0 holds 1, every other 2^-8: the
    # left fold keeps 1.0 at every step, any bracketing that adds two 2^-8 first does not,
    # nor does folding the members in reverse order (n >= 3).
    x = np.full(64, 1.0 if r == 0 else 2.0 ** -8, dtype)
    got = C.all_reduce(comm, x, add)
    assert (got.astype(np.float64) == 1.0).all(), f"bf16 sum n={n}: {got[:4]}"
    # 2a + b in rank order: ((x0 * 2 + x1) * 2 + x2) ... with x_j = j + 1.
    _, twice, _ = _compiled()["twice_a_plus_b_f32"]
    want = 1.0
    for j in range(1, n):
        want = 2 * want + (j + 1)
    got = C.all_reduce(comm, np.full(33, r + 1, np.float32), twice)
    assert (got == want).all(), f"2a+b n={n}: {got[:4]}, want {want}"


def _program(n: int, count: int) -> str:
    rows = 2048 // n * n
    return f"""HloModule ordered_e2e, replica_count={n}
add_bf16 {{
  a = bf16[] parameter(0)
  b = bf16[] parameter(1)
  ROOT r = bf16[] add(a, b)
}}
twice_a_plus_b {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  aa = f32[] add(a, a)
  ROOT r = f32[] add(aa, b)
}}
max_f32 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] maximum(a, b)
}}
ENTRY e {{
  x = f32[{count}] parameter(0)
  h = bf16[{count}] parameter(1)
  y = f32[{rows},4] parameter(2)
  m = f32[{count}] all-reduce(x), replica_groups={{}}, to_apply=twice_a_plus_b
  s = bf16[{count}] all-reduce(h), replica_groups={{}}, to_apply=add_bf16
  mx = f32[{count}] all-reduce(x), replica_groups={{}}, to_apply=max_f32
  rs = f32[{rows // n},4] reduce-scatter(y), replica_groups={{}}, dimensions={{0}}, to_apply=twice_a_plus_b
  ROOT t = (f32[{count}], bf16[{count}], f32[{count}], f32[{rows // n},4]) tuple(m, s, mx, rs)
}}
"""


def test_compiled_program_runs_the_native_call_and_matches_the_interpreter(cache,
                                                                           monkeypatch):
    """Through the runtime (xladist/runtime/mpi_context.py hands the compiled kernel's address on):
    every all-reduce and the reduce-scatter take the native call, and the cpu backend's
    results equal the interpreter's bit for bit on every device."""
    import xladist
    from xladist.collectives import ordered

    n = cache.world.size
    count = 110_001  # >= USER_OP_BELOW as bf16, uneven over 2 and 4 members
    rows = 2048 // n * n
    # NaN payloads are each backend's own choice (the tests above hold the native call to
    # the kernel's); -0.0, subnormals, infinities and bf16 ties stay.
    def special(d, size, dtype):
        x = _special_input(d, size, dtype)
        x[np.isnan(x)] = 1.5
        return x

    inputs = [[special(d, count, np.float32), special(d, count, ml_dtypes.bfloat16),
               special(d, rows * 4, np.float32).reshape(rows, 4)] for d in range(n)]
    calls = []
    real = ordered.OrderedReduce.__call__

    def counted(self, send, out, label):
        calls.append(label.split()[0])
        return real(self, send, out, label)

    monkeypatch.setattr(ordered.OrderedReduce, "__call__", counted)
    text = _program(n, count)
    compiled = xladist.run(text, inputs, n=n, backend="cpu", timeout=120, check=False)
    assert sorted(set(calls)) == ["m", "mx", "rs", "s"], calls
    reference = xladist.run(text, inputs, n=n, backend="interpreter", timeout=120,
                            check=False)
    for d in range(n):
        for i, (got, want) in enumerate(zip(compiled[d], reference[d])):
            got, want = np.asarray(got), np.asarray(want)
            if i == 2:
                # maximum(+0.0, -0.0): the compiled kernel gives +0.0, numpy's maximum the
                # first operand -- a difference between the backends' elementwise maximum,
                # not of the collective; values only.
                np.testing.assert_array_equal(got, want, err_msg=f"device {d} max")
                continue
            assert got.tobytes() == want.tobytes(), \
                f"device {d} result {i}: cpu and interpreter differ in bits"
