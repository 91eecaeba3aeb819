"""While loops whose body hands a carry leaf back unchanged while a collective reads it and
hands its own result to the loop (`(x, y) <- (x, collective(x))`): inplace.py gives such a
leaf its source (the parameter leaf) when the body never writes it, so the loop runs natively
(native_loop.py). Each program runs natively and on the Python executor; the results must be
the same bits, on every rank, and numpy's. Passes at any world size (-n 2 and -n 4).
"""

import numpy as np
import pytest
from mpi4py import MPI

import xladist
from xladist.compiler import native_loop

pytestmark = pytest.mark.mpi

STEPS = {
    "all-reduce": "all-reduce(x), replica_groups={}, to_apply=red",
    "collective-permute": "collective-permute(x), source_target_pairs={PAIRS}",
    "all-gather": "all-gather(x), dimensions={0}, replica_groups={}",
}


def module(kind: str, n: int, count: int) -> str:
    """k iterations of (x, y) <- (x, collective(x) [+ y for the all-reduce]); the
    loop returns (x, y)."""
    t = f"f32[{count}]"
    g = f"f32[{count * n}]" if kind == "all-gather" else t
    pairs = "{" + ",".join(f"{{{r},{(r + 1) % n}}}" for r in range(n)) + "}"
    op = STEPS[kind].replace("{PAIRS}", pairs)
    state = f"(s32[], s32[], {t}, {g})"
    return f"""HloModule handed_back_{kind.replace('-', '_')}
red {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
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
  x = {t} get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  y = {g} {op}
  ROOT t = {state} tuple(i1, k, x, y)
}}
ENTRY e {{
  x = {t} parameter(0)
  k = s32[] parameter(1)
  zero = s32[] constant(0)
  fz = f32[] constant(-1)
  y0 = {g} broadcast(fz), dimensions={{}}
  init = {state} tuple(zero, k, x, y0)
  w = {state} while(init), condition=cond, body=body
  x2 = {t} get-tuple-element(w), index=2
  y2 = {g} get-tuple-element(w), index=3
  ROOT out = ({t}, {g}) tuple(x2, y2)
}}
"""


def reference(kind: str, xs: np.ndarray, trips: int, me: int):
    n = len(xs)
    y = np.full(xs.shape[1] * (n if kind == "all-gather" else 1), -1, np.float32)
    if trips:
        y = {"all-reduce": lambda: np.sum(xs, axis=0, dtype=np.float32),
             "collective-permute": lambda: xs[(me - 1) % n],
             "all-gather": lambda: xs.reshape(-1)}[kind]()
    return xs[me], y


def _run(text, xs, trips, native: bool, monkeypatch):
    n = MPI.COMM_WORLD.Get_size()
    calls = []
    run = native_loop.NativeLoop.run

    def counted(self, state, owned, bound=None, wd=None):
        calls.append([s.kind for s in self.collectives] if bound is not None else None)
        return run(self, state, owned, bound, wd)

    monkeypatch.setattr(native_loop, "COLLECTIVES", native)
    monkeypatch.setattr(native_loop.NativeLoop, "run", counted)
    try:
        outs = xladist.run(xladist.parse_hlo(text), [xs, np.full(n, trips, np.int32)], n=n,
                           check=False, verify=False)
    finally:
        monkeypatch.undo()
    return [np.asarray(v) for v in outs[MPI.COMM_WORLD.Get_rank()]], calls


@pytest.mark.parametrize("kind", list(STEPS))
def test_leaf_handed_back_next_to_a_collective_runs_natively(monkeypatch, kind):
    world = MPI.COMM_WORLD
    n, me = world.Get_size(), world.Get_rank()
    # Small integers: every sum order gives the same bits.
    xs = np.stack([np.arange(5, dtype=np.float32) * (r + 1) - 2 for r in range(n)])
    text = module(kind, n, 5)
    program = xladist.compiler.program.CpuProgram(xladist.parse_hlo(text))
    assert "native loop" in str(program.explain()), "the loop is not native"
    for trips in (0, 1, 4):
        what = f"{kind} trips={trips} n={n}"
        got, calls = _run(text, xs, trips, True, monkeypatch)
        python, py_calls = _run(text, xs, trips, False, monkeypatch)
        assert calls == [[kind]], f"{what}: native path {calls}"
        assert py_calls == [], what
        for a, b, want in zip(got, python, reference(kind, xs, trips, me)):
            assert a.tobytes() == b.tobytes(), f"{what}: native and Python paths differ"
            np.testing.assert_array_equal(a, want, err_msg=what)
