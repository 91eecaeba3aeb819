"""While loops whose body holds collective-permutes and all-gathers, run by one native
function (xladist/compiler/native_collectives.py PermuteStep, AllGatherStep) over real MPI.

Each program runs natively and with the native path switched off (the Python executor);
the results must be the same bits, and numpy's answer computed from every rank's inputs.
Passes at any world size (run with -n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from xladist.compiler import native_loop

pytestmark = pytest.mark.mpi


def _module(name: str, carry: list[str], steps: str, result: list[str]) -> str:
    """k iterations of a body; carry[0] is the loop's output, inputs are (carry[0], k) and the
    other carries start at zero (broadcast)."""
    state = "(s32[], s32[], " + ", ".join(carry) + ")"
    gets = "".join(f"  c{j} = {t} get-tuple-element(p), index={j + 2}\n"
                   for j, t in enumerate(carry))
    inits = "".join(f"  z{j} = {t} broadcast(fz), dimensions={{}}\n"
                    for j, t in enumerate(carry) if j)
    init_names = ", ".join(["x"] + [f"z{j}" for j in range(1, len(carry))])
    return f"""HloModule {name}
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
  fz = f32[] constant(0)
{inits}  init = {state} tuple(zero, k, {init_names})
  w = {state} while(init), condition=cond, body=body
  ROOT out = {carry[-1]} get-tuple-element(w), index={len(carry) + 1}
}}
"""


def _pairs(pairs) -> str:
    return "{" + ",".join(f"{{{s},{t}}}" for s, t in pairs) + "}"


def permute_module(pairs, count: int) -> str:
    """x <- permute(x) + x (exact in f32 for small integers; NaNs and -0.0 pass through)."""
    t = f"f32[{count}]"
    steps = (f"  y = {t} collective-permute(c0), source_target_pairs={_pairs(pairs)}\n"
             f"  s = {t} add(y, c0)\n")
    return _module("native_permute", [t], steps, ["s"])


def permute_reference(xs, pairs, trips):
    x = xs.copy()
    with np.errstate(all="ignore"):
        for _ in range(trips):
            y = np.zeros_like(x)
            for s, t in pairs:
                y[t] = x[s]
            x = y + x
    return x


def gather_module(n: int, shape: tuple, dim: int) -> str:
    """acc <- acc + all-gather(x) along dim; x <- x + 1."""
    t = "f32[" + ",".join(map(str, shape)) + "]"
    out = list(shape)
    out[dim] *= n
    g = "f32[" + ",".join(map(str, out)) + "]"
    steps = (f"  g = {g} all-gather(c0), dimensions={{{dim}}}, replica_groups={{}}\n"
             f"  acc = {g} add(c1, g)\n"
             f"  onef = f32[] constant(1)\n"
             f"  ones = {t} broadcast(onef), dimensions={{}}\n"
             f"  x1 = {t} add(c0, ones)\n")
    return _module("native_gather", [t, g], steps, ["x1", "acc"])


def gather_reference(xs, dim, trips):
    acc = np.zeros(np.concatenate(list(xs), axis=dim).shape, np.float32)
    with np.errstate(all="ignore"):
        for t in range(trips):
            acc = acc + np.concatenate([x + np.float32(t) for x in xs], axis=dim)
    return acc


def _input(rank, shape):
    rng = np.random.default_rng([5, rank])
    pool = np.array([np.nan, -np.nan, 0.0, -0.0, 1e-40, np.inf, 1.0, -3.5, 256.0], np.float32)
    return pool[rng.integers(0, len(pool), int(np.prod(shape)))].reshape(shape)


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


@pytest.mark.parametrize("which", ["ring", "partial", "self"])
def test_native_permute_loop_matches_python_path_and_numpy(monkeypatch, which):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    # partial: rank 0 sends to 1 only (everyone else receives nothing: zeros, even rank 0
    # which sends); self: every rank keeps its own (a self pair) except 0 <-> 1 swap.
    pairs = {"ring": [(r, (r + 1) % n) for r in range(n)],
             "partial": [(0, 1)],
             "self": [(0, 1), (1, 0)] + [(r, r) for r in range(2, n)]}[which]
    for count in (3, 70_001):
        xs = np.stack([_input(r, (count,)) for r in range(n)])
        for trips in (0, 1, 3):
            what = f"{which} x{count} trips={trips} n={n}"
            got = _both(permute_module(pairs, count), xs, trips, monkeypatch,
                        [["collective-permute"]], what)
            np.testing.assert_array_equal(got, permute_reference(xs, pairs, trips)[me],
                                          err_msg=what)


@pytest.mark.parametrize("shape,dim,native", [((5,), 0, True), ((1, 3), 1, True),
                                              ((2, 3), 1, False)],
                         ids=["leading", "after-ones", "minor-refused"])
def test_native_all_gather_loop_matches_python_path_and_numpy(monkeypatch, shape, dim, native):
    """Along the leading non-trivial dimension the loop runs natively; along another one
    (a strided result) it keeps the Python path, with the same results."""
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    module = gather_module(n, shape, dim)
    xs = np.stack([_input(r, shape) for r in range(n)])
    for trips in (0, 1, 3):
        what = f"{shape} dim={dim} trips={trips} n={n}"
        got = _both(module, xs, trips, monkeypatch, [["all-gather"]] if native else [], what)
        np.testing.assert_array_equal(got, gather_reference(xs, dim, trips), err_msg=what)
        assert len(set(world.allgather(got.tobytes()))) == 1, what
    del me
