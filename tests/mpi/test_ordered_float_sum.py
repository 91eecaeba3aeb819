"""Float sums and products through the order-preserving reduce-scatter + all-gather.

A float/complex add or multiply that carries the cpu backend's compiled kernel takes
xladist/collectives/ordered.py's native call from ordered.FLOAT_FROM bytes instead of
MPI_Allreduce + canonicalize_nan, with each member's folded chunk made canonical (NaN ->
the one quiet NaN) inside the call before the all-gather.  The result must be bit-identical
on every member and equal the interpreter's left fold in group-rank order with every NaN
canonical -- with NaN payloads of both signs, -0.0, subnormals, infinities and inf + -inf,
even and uneven splits.  Passes at any world size (the suites run -n 2 and -n 4).
"""

from functools import lru_cache

import numpy as np
import pytest
from mpi4py import MPI

pytestmark = pytest.mark.mpi

_HLO = """HloModule float_sums
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
add_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = f64[] add(a, b)
}
mul_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] multiply(a, b)
}
add_c64 {
  a = c64[] parameter(0)
  b = c64[] parameter(1)
  ROOT r = c64[] add(a, b)
}
ENTRY e {
  f = f32[4] parameter(0)
  d = f64[4] parameter(1)
  c = c64[4] parameter(2)
  s = f32[4] all-reduce(f), replica_groups={}, to_apply=add_f32
  s64 = f64[4] all-reduce(d), replica_groups={}, to_apply=add_f64
  p = f32[4] all-reduce(f), replica_groups={}, to_apply=mul_f32
  sc = c64[4] all-reduce(c), replica_groups={}, to_apply=add_c64
  ROOT t = (f32[4], f64[4], f32[4], c64[4]) tuple(s, s64, p, sc)
}
"""

# computation -> (dtype, kind, numpy fn)
_CASES = {"add_f32": (np.float32, "sum", np.add), "add_f64": (np.float64, "sum", np.add),
          "mul_f32": (np.float32, "prod", np.multiply),
          "add_c64": (np.complex64, "sum", np.add)}


@lru_cache(maxsize=1)
def _compiled():
    """name -> (dtype, Reducer as xladist/runtime/mpi_context.py builds it for a compiled program)."""
    from xladist.collectives.reduction import Reducer
    from xladist.compiler.program import compiled_reducers
    from xladist.hlo.parser import parse_module

    kernels = compiled_reducers(parse_module(_HLO))
    out = {}
    for name, (dtype, kind, fn) in _CASES.items():
        k = kernels[name]

        def into(a, b, o, k=k):
            assert k.combine_into(a, b, o)

        out[name] = (np.dtype(dtype), Reducer(kind, fn, name, into, k.mpi_function,
                                              k.kernel_address))
    return out


def _special(rank: int, count: int, dtype) -> np.ndarray:
    """NaNs of both signs and another payload, signed zeros, subnormals, infinities (inf on
    member 0 against -inf on member 1 at every 5th element), placed differently per rank."""
    rng = np.random.default_rng([7, rank])
    with np.errstate(invalid="ignore"):  # a signaling NaN's payload, quieted
        payload = np.array(0x7FA00001, np.uint32).view(np.float32).astype(np.float64)
    pool = np.array([np.nan, -np.nan, payload, 0.0, -0.0, 1e-40, -1e-40, 5e-324, 1e-310,
                     np.inf, -np.inf, 1.0, 0.1, 3.0, -2.5, 1e30], np.float64)
    x = pool[rng.integers(0, len(pool), count)]
    x[::5] = np.inf if rank == 0 else -np.inf if rank == 1 else 1.0
    if np.dtype(dtype).kind == "c":  # per component, through a view (keeps NaN payloads)
        v = np.empty(count, dtype)
        v.view(np.float32)[0::2] = x.astype(np.float32)
        v.view(np.float32)[1::2] = _special(rank + 100, count, np.float32)
        return v
    return x.astype(dtype)


def _canonical_fold(fn, xs) -> np.ndarray:
    """The interpreter's left fold in rank order, every NaN (per component) the canonical
    quiet NaN -- the reference, computed with numpy, not with the kernel."""
    with np.errstate(all="ignore"):
        acc = xs[0].copy()
        for x in xs[1:]:
            acc = fn(acc, x).astype(xs[0].dtype)
    flat = acc.view(acc.real.dtype) if acc.dtype.kind == "c" else acc
    flat[np.isnan(flat)] = flat.dtype.type(np.nan)
    return acc


def _forbidden(*args, **kwargs):
    raise AssertionError("MPI_Allreduce ran: not the ordered reduce-scatter + all-gather")


@pytest.fixture
def ordered_floats(cache, monkeypatch):
    """The world communicator with MPI_Allreduce disabled and the float threshold at 0."""
    from xladist.collectives import ordered
    comm = cache.get(list(range(cache.world.size)))
    monkeypatch.setattr(ordered, "FLOAT_FROM", 0)
    for name in ("allreduce", "bound_allreduce", "alltoall"):
        monkeypatch.setattr(type(comm), name, _forbidden)
    return comm


@pytest.mark.parametrize("name", sorted(_CASES))
def test_float_sum_is_the_canonical_left_fold_bit_for_bit(ordered_floats, name):
    import xladist.collectives as C
    from xladist.collectives import ordered

    comm = ordered_floats
    n = comm.size
    dtype, red = _compiled()[name]
    canonical = np.float32(np.nan).view(np.uint32) if dtype != np.float64 else \
        np.float64(np.nan).view(np.uint64)
    for count in (70_001, 4096 * n, 7, 3, 1):  # uneven, even, chunks of zero elements
        xs = [_special(r, count, dtype) for r in range(n)]
        got = C.all_reduce(comm, xs[comm.rank], red)
        what = f"{name} x{count} n={n}"
        everyone = MPI.COMM_WORLD.allgather(got.tobytes())
        assert len(set(everyone)) == 1, f"{what}: members differ in bits"
        want = _canonical_fold(red.fn, xs)
        assert got.tobytes() == want.tobytes(), f"{what}: not the canonical left fold"
        comp = got.view(np.float32 if dtype != np.float64 else np.float64)
        nans = comp[np.isnan(comp)]
        assert nans.size or count < 10, f"{what}: the inputs made no NaN"
        assert (nans.view(canonical.dtype) == canonical).all(), f"{what}: NaN not canonical"
        # In place (operand = result, as a native loop's carry): the same bits.
        mine = xs[comm.rank].copy()
        width = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
        ordered.bind(comm, red, dtype, count, True, width)(mine, mine, "all-reduce.2")
        assert mine.tobytes() == want.tobytes(), f"{what}: in place differs"


def test_bound_float_sum_takes_the_same_path(ordered_floats):
    """The runtime's bound form (all_reduce_bound on flat bytes, given their size)."""
    from xladist.collectives.all_reduce import all_reduce_bound

    comm = ordered_floats
    n = comm.size
    dtype, red = _compiled()["add_f32"]
    xs = [_special(r, 30_001, dtype) for r in range(n)]
    x = xs[comm.rank]
    out = np.empty(x.nbytes, np.uint8)
    all_reduce_bound(comm, red, dtype, "all-reduce.3", x.nbytes)(x.view(np.uint8), out)
    assert out.tobytes() == _canonical_fold(np.add, xs).tobytes(), f"bound n={n}"


def test_threshold_and_kernel_decide_the_path(cache, monkeypatch):
    """From FLOAT_FROM bytes a compiled float sum takes the native call, below it (and
    without a kernel, as under the interpreter) MPI_Allreduce + canonicalize_nan."""
    import xladist.collectives as C
    from xladist.collectives import ordered

    comm = cache.get(list(range(cache.world.size)))
    dtype, red = _compiled()["add_f32"]
    calls = []
    real = ordered.OrderedReduce.__call__

    def counted(self, send, out, label):
        calls.append(self.nbytes)
        return real(self, send, out, label)

    monkeypatch.setattr(ordered.OrderedReduce, "__call__", counted)
    big = ordered.FLOAT_FROM // 4 + 3
    for count, reducer, taken in ((big, red, True), (big - 4, red, False),
                                  (big, C.SUM, False)):
        calls.clear()
        xs = [_special(r, count, dtype) for r in range(comm.size)]
        got = C.all_reduce(comm, xs[comm.rank], reducer)
        assert bool(calls) == taken, (count, reducer, calls)
        assert len(set(MPI.COMM_WORLD.allgather(got.tobytes()))) == 1


def test_compiled_program_f32_sum_takes_the_native_call(cache, monkeypatch):
    """Through the runtime (xladist/runtime/mpi_context.py gives the add's kernel to its Reducer): a
    compiled program's f32 all-reduce runs the native call, and its results equal the
    interpreter's (MPI_SUM + canonicalize_nan there) bit for bit on every device -- the
    inputs are sums every bracketing gives exactly, with NaNs, infinities and -0.0."""
    import xladist
    from xladist.collectives import ordered

    n = cache.world.size
    count = ordered.FLOAT_FROM // 4 + 1001  # uneven over 2 and 4 members
    text = f"""HloModule f32_sum, replica_count={n}
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{count}] parameter(0)
  ROOT s = f32[{count}] all-reduce(x), replica_groups={{}}, to_apply=add
}}
"""
    inputs = []
    for d in range(n):
        x = (np.arange(count) % 13 - 6 + d).astype(np.float32)
        x[3::101] = -0.0
        x[5::97] = np.nan if d == 0 else -np.nan
        x[7::89] = np.inf if d == 0 else -np.inf
        inputs.append([x])
    calls = []
    real = ordered.OrderedReduce.__call__

    def counted(self, send, out, label):
        calls.append(label.split()[0])
        return real(self, send, out, label)

    monkeypatch.setattr(ordered.OrderedReduce, "__call__", counted)
    compiled = xladist.run(text, inputs, n=n, backend="cpu", timeout=120, check=False)
    assert calls == ["s"], calls
    reference = xladist.run(text, inputs, n=n, backend="interpreter", timeout=120,
                            check=False)
    want = _canonical_fold(np.add, [i[0] for i in inputs])
    for d in range(n):
        got = np.asarray(compiled[d][0] if isinstance(compiled[d], (list, tuple))
                         else compiled[d])
        ref = np.asarray(reference[d][0] if isinstance(reference[d], (list, tuple))
                         else reference[d])
        assert got.tobytes() == ref.tobytes(), f"device {d}: cpu and interpreter differ"
        assert got.tobytes() == want.tobytes(), f"device {d}: not the canonical fold"
