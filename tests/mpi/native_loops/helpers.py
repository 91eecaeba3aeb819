"""What the native-loop MPI suites share: run a module through xladist.run with the native
driver on or off (compiler/native/loop.py COLLECTIVES), recording which loops ran natively."""

import numpy as np
from mpi4py import MPI

import xladist
from xladist.compiler.native import loop as native_loop


def count_native_runs(monkeypatch, native: bool) -> list:
    """Switch the native driver on or off (until monkeypatch.undo()) and return the list
    that records, per loop run natively, its steps' kinds (None when it ran unbound)."""
    calls = []
    run = native_loop.NativeLoop.run

    def counted(self, state, owned, bound=None, wd=None, rs=None):
        calls.append([s.kind for s in self.collectives] if bound is not None else None)
        return run(self, state, owned, bound, wd, rs)

    monkeypatch.setattr(native_loop, "COLLECTIVES", native)
    monkeypatch.setattr(native_loop.NativeLoop, "run", counted)
    return calls


def run_counted(module, args, native: bool, monkeypatch):
    """(this rank's outputs as arrays, [the step kinds of each loop run natively with its
    steps bound, None for one that ran natively unbound]) for ``module`` on ``args``."""
    n = MPI.COMM_WORLD.Get_size()
    calls = count_native_runs(monkeypatch, native)
    try:
        if isinstance(module, str):
            module = xladist.parse_hlo(module)
        outs = xladist.run(module, args, n=n, check=False, verify=False)
    finally:
        monkeypatch.undo()
    return [np.asarray(v) for v in outs[MPI.COMM_WORLD.Get_rank()]], calls


def both_paths(module, args, monkeypatch, want_calls, what):
    """This rank's first output, after checking that the native run made `want_calls`, the
    Python path none, and both gave the same bits."""
    native, calls = run_counted(module, args, True, monkeypatch)
    python, py_calls = run_counted(module, args, False, monkeypatch)
    assert calls == want_calls, f"{what}: native path {calls}"
    assert py_calls == [], what
    for a, b in zip(native, python):
        assert a.tobytes() == b.tobytes(), f"{what}: native and Python paths differ"
    return native[0]


def loop_module(name: str, carry: list[str], steps: str, result: list[str], dt: str = "f32",
                op: str | None = None, all_out: bool = False) -> str:
    """k iterations of a body; inputs are (carry[0], k), the other carries start at zero
    (broadcast of a `dt` zero); the loop's output is the last carry (all_out: every carry,
    a tuple). The body's lines `steps` may use c0.. (the carries) and, with `op`, the
    reducer `red` (`op` of two `dt` scalars); `result` names the carries' next values."""
    state = "(s32[], s32[], " + ", ".join(carry) + ")"
    gets = "".join(f"  c{j} = {t} get-tuple-element(p), index={j + 2}\n"
                   for j, t in enumerate(carry))
    inits = "".join(f"  z{j} = {t} broadcast(fz), dimensions={{}}\n"
                    for j, t in enumerate(carry) if j)
    init_names = ", ".join(["x"] + [f"z{j}" for j in range(1, len(carry))])
    red = "" if op is None else f"""red {{
  a = {dt}[] parameter(0)
  b = {dt}[] parameter(1)
  ROOT c = {dt}[] {op}(a, b)
}}
"""
    if all_out:
        outs = "".join(f"  o{j} = {t} get-tuple-element(w), index={j + 2}\n"
                       for j, t in enumerate(carry))
        root = (f"{outs}  ROOT out = ({', '.join(carry)}) tuple("
                + ", ".join(f"o{j}" for j in range(len(carry))) + ")")
    else:
        root = f"  ROOT out = {carry[-1]} get-tuple-element(w), index={len(carry) + 1}"
    return f"""HloModule {name}
{red}cond {{
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
{inits}  init = {state} tuple(zero, k, {init_names})
  w = {state} while(init), condition=cond, body=body
{root}
}}
"""
