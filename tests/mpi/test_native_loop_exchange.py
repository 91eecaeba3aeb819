"""While loops whose body holds reduce-scatters and all-to-alls, run by one native function
(xladist/compiler/native_exchange.py: MPI_Reduce_scatter_block, MPI_Alltoall) over real MPI.

Each program runs natively and on the Python executor; the results must be the same bits,
and numpy's answer from every rank's inputs. Forms the driver does not take (a split
dimension after a non-trivial one, a reducer MPI has no builtin for) keep the Python path
with the same results. Passes at any world size (run with -n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from xladist.compiler import native_loop

pytestmark = pytest.mark.mpi


def _shape(dt, dims) -> str:
    return f"{dt}[" + ",".join(map(str, dims)) + "]"


def rs_module(dt: str, op: str, shape: tuple, dim: int, n: int) -> str:
    """acc <- acc + reduce-scatter(x); x <- x + x (k times; x handed on, acc gathers)."""
    out = list(shape)
    out[dim] //= n
    t, g = _shape(dt, shape), _shape(dt, out)
    steps = (f"  y = {g} reduce-scatter(c0), dimensions={{{dim}}}, replica_groups={{}}, "
             f"to_apply=red\n  acc = {g} add(c1, y)\n  x1 = {t} add(c0, c0)\n")
    return _module(dt, op, [t, g], steps, ["x1", "acc"])


def a2a_module(dt: str, shape: tuple, dim: int) -> str:
    """x <- all-to-all(x) + 1 (a carry swapped with its result buffer every iteration)."""
    t = _shape(dt, shape)
    steps = (f"  y = {t} all-to-all(c0), dimensions={{{dim}}}, replica_groups={{}}\n"
             f"  onec = {dt}[] constant(1)\n  ones = {t} broadcast(onec), dimensions={{}}\n"
             f"  x1 = {t} add(y, ones)\n")
    return _module(dt, "add", [t], steps, ["x1"])


def _module(dt, op, carry, steps, result) -> str:
    state = "(s32[], s32[], " + ", ".join(carry) + ")"
    gets = "".join(f"  c{j} = {t} get-tuple-element(p), index={j + 2}\n"
                   for j, t in enumerate(carry))
    inits = "".join(f"  z{j} = {t} broadcast(fz), dimensions={{}}\n"
                    for j, t in enumerate(carry) if j)
    names = ", ".join(["x"] + [f"z{j}" for j in range(1, len(carry))])
    return f"""HloModule exchange
red {{
  a = {dt}[] parameter(0)
  b = {dt}[] parameter(1)
  ROOT c = {dt}[] {op}(a, b)
}}
cond {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
  ROOT lt = pred[] compare(i, k), direction=LT
}}
body {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  k = s32[] get-tuple-element(p), index=1
{gets}  one = s32[] constant(1)
  i1 = s32[] add(i, one)
{steps}  ROOT t = {state} tuple(i1, k, {", ".join(result)})
}}
ENTRY e {{
  x = {carry[0]} parameter(0)
  k = s32[] parameter(1)
  zero = s32[] constant(0)
  fz = {dt}[] constant(0)
{inits}  init = {state} tuple(zero, k, {names})
  w = {state} while(init), condition=cond, body=body
  ROOT out = {carry[-1]} get-tuple-element(w), index={len(carry) + 1}
}}
"""


def rs_reference(xs, op, dim, trips, me):
    n = len(xs)
    fn = {"add": np.add, "maximum": np.maximum}[op]
    x = xs.copy()
    part = x.shape[dim + 1] // n
    acc = np.zeros(np.take(x[0], range(part), axis=dim).shape, x.dtype)
    for _ in range(trips):
        total = x[0]
        for r in range(1, n):
            total = fn(total, x[r])
        acc = acc + np.take(total, range(me * part, (me + 1) * part), axis=dim)
        x = x + x
    return acc


def a2a_reference(xs, dim, trips, me):
    n = len(xs)
    x = xs.copy()
    for _ in range(trips):
        parts = [np.split(x[r], n, axis=dim) for r in range(n)]
        x = np.stack([np.concatenate([parts[s][r] for s in range(n)], axis=dim)
                      for r in range(n)]) + 1
    return x[me]


def _run(module, xs, trips, native: bool, monkeypatch):
    n = MPI.COMM_WORLD.Get_size()
    calls = []
    run = native_loop.NativeLoop.run

    def counted(self, state, owned, bound=None, wd=None):
        calls.append([s.kind for s in self.collectives] if bound is not None else None)
        return run(self, state, owned, bound, wd)

    monkeypatch.setattr(native_loop, "COLLECTIVES", native)
    monkeypatch.setattr(native_loop.NativeLoop, "run", counted)
    try:
        outs = xladist.run(xladist.parse_hlo(module), [xs, np.full(n, trips, np.int32)], n=n,
                           check=False, verify=False)
    finally:
        monkeypatch.undo()
    return np.asarray(outs[MPI.COMM_WORLD.Get_rank()][0]), calls


def _both(module, xs, trips, monkeypatch, want_calls, what):
    native, calls = _run(module, xs, trips, True, monkeypatch)
    python, py_calls = _run(module, xs, trips, False, monkeypatch)
    assert calls == want_calls, f"{what}: native path {calls}"
    assert py_calls == [], what
    assert native.tobytes() == python.tobytes(), f"{what}: native and Python paths differ"
    return native


@pytest.mark.parametrize("dt,op,shape,dim,native", [
    ("f32", "add", ("4n", 3), 0, True),
    ("s32", "maximum", (1, "2n"), 1, True),
    ("f32", "add", (2, "2n"), 1, False),         # parts are strided: Python path
    ("f32", "maximum", ("2n",), 0, False),       # NaN-propagating max: no MPI builtin
], ids=["sum-leading", "s32-max-after-ones", "minor-refused", "fmax-refused"])
def test_native_reduce_scatter_loop_matches_python_path_and_numpy(monkeypatch, dt, op, shape,
                                                                  dim, native):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    shape = tuple(int(s[:-1]) * n if isinstance(s, str) else s for s in shape)
    np_t = {"f32": np.float32, "s32": np.int32}[dt]
    rng = np.random.default_rng(3)
    xs = rng.integers(-8, 9, (n, *shape)).astype(np_t)  # small integers: any order, exact
    module = rs_module(dt, op, shape, dim, n)
    for trips in (0, 1, 3):
        what = f"{dt} {op} {shape} dim={dim} trips={trips} n={n}"
        got = _both(module, xs, trips, monkeypatch, [["reduce-scatter"]] if native else [],
                    what)
        np.testing.assert_array_equal(got, rs_reference(xs, op, dim, trips, me), err_msg=what)


@pytest.mark.parametrize("shape,dim,native", [(("2n", 3), 0, True), ((1, "n"), 1, True),
                                              ((3, "n"), 1, False)],
                         ids=["leading", "after-ones", "minor-refused"])
def test_native_all_to_all_loop_matches_python_path_and_numpy(monkeypatch, shape, dim, native):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    shape = tuple(int(s[:-1] or 1) * n if isinstance(s, str) else s for s in shape)
    xs = np.stack([np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * (r + 1)
                   for r in range(n)])
    xs[0].flat[0] = np.nan
    module = a2a_module("f32", shape, dim)
    for trips in (0, 1, 3):
        what = f"{shape} dim={dim} trips={trips} n={n}"
        got = _both(module, xs, trips, monkeypatch, [["all-to-all"]] if native else [], what)
        np.testing.assert_array_equal(got, a2a_reference(xs, dim, trips, me), err_msg=what)
