"""In-place dynamic-update-slice and scatter in the cpu backend (compiler/inplace.py).

Every program runs on the cpu backend and on the interpreter, and both are checked
against a numpy reference written from the HLO's meaning. The in-place decisions
themselves are asserted through the compiled program (which kernels write into their
operand, which loop carries are taken or copied), so a test fails both when a hazard
is updated in place (wrong numbers) and when the common case silently falls back to
copying (the flags).
"""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.cli import main as cli_main
from xladist.compiler.control import WhileThunk


def run_both(text, *args):
    """(cpu executable, cpu results, interpreter results) for one module."""
    module = xladist.parse_hlo(text)
    cpu = xladist.compile(module, backend="cpu")
    ref = xladist.compile(module, backend="interpreter")
    return cpu, [np.asarray(v) for v in cpu(*args)], [np.asarray(v) for v in ref(*args)]


def in_place(cpu) -> set[str]:
    """Names of the kernel roots that write into their operand's buffer."""
    return {t.spec.root.name for cc in cpu.program.builder.compiled.values()
            for t in cc.thunks if t.kind == "kernel" and t.spec.inplace}


def loops(cpu) -> dict[str, WhileThunk]:
    return {t.instr.name: t for cc in cpu.program.builder.compiled.values()
            for t in cc.thunks if isinstance(t, WhileThunk)}


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# ---- the scan pattern: stack one row per iteration into the carry -------------------------

def scan_hlo(n, m, *, index="%i", init="%buf", extra_entry=""):
    return f"""HloModule scan
%body (s: (s32[], f32[{n},{m}], f32[1,{m}])) -> (s32[], f32[{n},{m}], f32[1,{m}]) {{
  %s = (s32[], f32[{n},{m}], f32[1,{m}]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %buf = f32[{n},{m}] get-tuple-element(%s), index=1
  %row = f32[1,{m}] get-tuple-element(%s), index=2
  %two = f32[] constant(2)
  %b2 = f32[1,{m}] broadcast(%two), dimensions={{}}
  %row.1 = f32[1,{m}] multiply(%row, %b2)
  %zero = s32[] constant(0)
  %three = s32[] constant(3)
  %i3 = s32[] subtract(%i, %three)
  %i2 = s32[] multiply(%i, %three)
  %buf.1 = f32[{n},{m}] dynamic-update-slice(%buf, %row.1, {index}, %zero)
  %one = s32[] constant(1)
  %i.1 = s32[] add(%i, %one)
  ROOT %t = (s32[], f32[{n},{m}], f32[1,{m}]) tuple(%i.1, %buf.1, %row.1)
}}
%cond (c: (s32[], f32[{n},{m}], f32[1,{m}])) -> pred[] {{
  %c = (s32[], f32[{n},{m}], f32[1,{m}]) parameter(0)
  %k = s32[] get-tuple-element(%c), index=0
  %lim = s32[] constant({n})
  ROOT %lt = pred[] compare(%k, %lim), direction=LT
}}
ENTRY %main (x: f32[1,{m}], p: f32[{n},{m}]) -> f32[{n},{m}] {{
  %x = f32[1,{m}] parameter(0)
  %p = f32[{n},{m}] parameter(1)
  %z = f32[] constant(0)
  %buf = f32[{n},{m}] broadcast(%z), dimensions={{}}{extra_entry}
  %zero = s32[] constant(0)
  %init = (s32[], f32[{n},{m}], f32[1,{m}]) tuple(%zero, {init}, %x)
  %loop = (s32[], f32[{n},{m}], f32[1,{m}]) while(%init), condition=%cond, body=%body
  ROOT %r = f32[{n},{m}] get-tuple-element(%loop), index=1
}}
"""


def scan_numpy(x, p, n, start=lambda i: i, base=None):
    buf = np.zeros((n, x.shape[1]), np.float32) if base is None else base.copy()
    row = x.copy()
    for i in range(n):
        row = row * np.float32(2)
        buf[min(max(start(i), 0), n - 1)] = row[0]
    return buf


def test_scan_updates_the_loop_carry_in_place():
    n, m = 48, 16
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, m)).astype(np.float32)
    p = rng.standard_normal((n, m)).astype(np.float32)
    cpu, got, want = run_both(scan_hlo(n, m), x, p)
    assert_same(got, want)
    np.testing.assert_array_equal(got[0], scan_numpy(x, p, n))
    assert "buf.1" in in_place(cpu)
    loop = loops(cpu)["loop"]
    # The broadcast's buffer is handed to the loop (no copy) and stays owned.
    assert (loop.used, loop.taken, loop.copy_in, loop.steady) == ([1], [1], [], True)
    assert loop.native is not None  # kernels only: one native function runs the loop
    # A second run starts from zeros again, and leaves the first result alone.
    first = np.asarray(cpu(x, p)[0])
    kept = first.copy()
    again = np.asarray(cpu(x * 3, p)[0])
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(again, scan_numpy(x * 3, p, n))


def test_carry_initialized_from_an_entry_parameter_leaves_the_callers_array_alone():
    n, m = 12, 8
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, m)).astype(np.float32)
    p = rng.standard_normal((n, m)).astype(np.float32)
    p_before = p.copy()
    cpu, got, want = run_both(scan_hlo(n, m, init="%p"), x, p)
    assert_same(got, want)
    np.testing.assert_array_equal(got[0], scan_numpy(x, p, n, base=p_before))
    np.testing.assert_array_equal(p, p_before)
    loop = loops(cpu)["loop"]
    assert (loop.used, loop.taken, loop.copy_in) == ([1], [], [1])  # copied once
    np.testing.assert_array_equal(np.asarray(cpu(x, p)[0]), got[0])
    np.testing.assert_array_equal(p, p_before)


DUS_OF_PARAMETER = """HloModule dus_param
ENTRY e {
  p = f32[6,5] parameter(0)
  u = f32[2,3] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT d = f32[6,5] dynamic-update-slice(p, u, i, j)
}
"""


def test_dus_of_an_entry_parameter_is_a_copy_and_the_input_is_unchanged():
    p = np.arange(30, dtype=np.float32).reshape(6, 5)
    u = -np.ones((2, 3), np.float32)
    before = p.copy()
    cpu, got, want = run_both(DUS_OF_PARAMETER, p, u, np.int32(3), np.int32(1))
    assert_same(got, want)
    expect = before.copy()
    expect[3:5, 1:4] = u
    np.testing.assert_array_equal(got[0], expect)
    np.testing.assert_array_equal(p, before)
    assert in_place(cpu) == set()


@pytest.mark.parametrize("index,start", [
    ("%i3", lambda i: i - 3),        # negative starts clamp to 0
    ("%i2", lambda i: 3 * i),        # starts past the end clamp to n - 1
])
def test_clamped_start_indices(index, start):
    n, m = 10, 4
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, m)).astype(np.float32)
    p = np.zeros((n, m), np.float32)
    cpu, got, want = run_both(scan_hlo(n, m, index=index), x, p)
    assert_same(got, want)
    np.testing.assert_array_equal(got[0], scan_numpy(x, p, n, start=start))
    assert "buf.1" in in_place(cpu)


# ---- a generic counted loop: carry (i, v1, ..., vk) -----------------------------------------

def loop_hlo(n, carry, body, results, *, params=(), entry="", init=None, extra=""):
    """A module whose entry runs `n` iterations of `body` over the carry (s32[] i, v1..vk of
    shapes `carry`); the body's lines may use %i and %v1..%vk and return `results` (k
    operand names); the entry's parameters are `params` (shapes) named %p1..; `init`
    names the initial v1..vk (default: the parameters); `extra` holds more computations."""
    shapes = ", ".join(["s32[]", *carry])
    gtes = "\n".join(f"  %v{k} = {c} get-tuple-element(%s), index={k}"
                     for k, c in enumerate(carry, 1))
    eparams = "\n".join(f"  %p{k} = {c} parameter({k - 1})" for k, c in enumerate(params, 1))
    init = init or [f"%p{k}" for k in range(1, len(params) + 1)]
    return f"""HloModule loop
{extra}
%body (s: ({shapes})) -> ({shapes}) {{
  %s = ({shapes}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
{gtes}
{body}
  %one = s32[] constant(1)
  %i.1 = s32[] add(%i, %one)
  ROOT %t = ({shapes}) tuple(%i.1, {", ".join(results)})
}}
%cond (c: ({shapes})) -> pred[] {{
  %c = ({shapes}) parameter(0)
  %k = s32[] get-tuple-element(%c), index=0
  %lim = s32[] constant({n})
  ROOT %lt = pred[] compare(%k, %lim), direction=LT
}}
ENTRY %main () -> ({shapes}) {{
{eparams}
{entry}
  %zero = s32[] constant(0)
  %init = ({shapes}) tuple(%zero, {", ".join(init)})
  ROOT %loop = ({shapes}) while(%init), condition=%cond, body=%body
}}
"""


def run_loop(text, *args):
    cpu, got, want = run_both(text, *args)
    assert_same(got, want)
    return cpu, got


ROW_OF_I = """  %fi = f32[] convert(%i)
  %row = f32[1,4] broadcast(%fi), dimensions={}
  %z = s32[] constant(0)"""


@pytest.mark.parametrize("reads_after", [True, False])
def test_operand_read_after_the_update_is_not_updated_in_place(reads_after):
    """acc += sum(buf) with the sum after (or before) the update in the thunk order:
    after, the update must not touch buf's buffer, or the sum sees the new row."""
    add = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}"""
    total = """  %f0 = f32[] constant(0)
  %sum = f32[] reduce(%v1, %f0), dimensions={0,1}, to_apply=%add"""
    update = "  %d = f32[6,4] dynamic-update-slice(%v1, %row, %i, %z)"
    lines = [ROW_OF_I] + ([update, total] if reads_after else [total, update]) + \
        ["  %acc = f32[] add(%v2, %sum)"]
    text = loop_hlo(6, ["f32[6,4]", "f32[]"], "\n".join(lines), ["%d", "%acc"],
                    params=["f32[6,4]", "f32[]"], extra=add)
    base = np.full((6, 4), 0.5, np.float32)
    cpu, got = run_loop(text, base, np.float32(0))
    buf, acc = base.copy(), np.float32(0)
    for i in range(6):
        acc += buf.sum(dtype=np.float32)
        buf[i] = i
    np.testing.assert_array_equal(got[1], buf)
    np.testing.assert_allclose(got[2], acc, rtol=1e-6)
    assert ("d" in in_place(cpu)) is (not reads_after)


def test_carry_also_returned_as_another_leaf_is_not_updated_in_place():
    """(i, buf, prev) -> (i+1, dus(buf), buf): prev must be the buffer before the update."""
    text = loop_hlo(5, ["f32[5,4]", "f32[5,4]"],
                    ROW_OF_I + "\n  %d = f32[5,4] dynamic-update-slice(%v1, %row, %i, %z)",
                    ["%d", "%v1"], params=["f32[5,4]", "f32[5,4]"])
    base = -np.ones((5, 4), np.float32)
    cpu, got = run_loop(text, base, base)
    final = base.copy()
    final[:5] = np.arange(5, dtype=np.float32)[:, None]
    prev = final.copy()
    prev[4] = -1
    np.testing.assert_array_equal(got[1], final)
    np.testing.assert_array_equal(got[2], prev)
    assert "d" not in in_place(cpu)


def test_one_array_returned_twice_is_copied_before_the_next_in_place_update():
    """(i, buf, prev) -> (i+1, d, d) with d updated in place: the loop gets the same
    array at two leaves and must copy one before the next iteration writes it, or
    sum(prev), read after the next update, sees that update."""
    add = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}"""
    body = ROW_OF_I + """
  %d = f32[5,4] dynamic-update-slice(%v1, %row, %i, %z)
  %f0 = f32[] constant(0)
  %sum = f32[] reduce(%v2, %f0), dimensions={0,1}, to_apply=%add
  %acc = f32[] add(%v3, %sum)"""
    text = loop_hlo(5, ["f32[5,4]", "f32[5,4]", "f32[]"], body, ["%d", "%d", "%acc"],
                    params=["f32[5,4]", "f32[5,4]", "f32[]"], extra=add)
    base = np.ones((5, 4), np.float32)
    cpu, got = run_loop(text, base, base, np.float32(0))
    buf, prev, acc = base.copy(), base.copy(), np.float32(0)
    for i in range(5):
        buf[i] = i
        acc += prev.sum(dtype=np.float32)
        prev = buf.copy()
    np.testing.assert_array_equal(got[1], buf)
    np.testing.assert_array_equal(got[2], buf)
    np.testing.assert_allclose(got[3], acc, rtol=1e-6)
    loop = loops(cpu)["loop"]
    assert "d" in in_place(cpu) and not loop.steady


def test_nested_loops_update_the_outer_carry_in_place():
    """buf[i, j] = i * 10 + j, one element per inner iteration."""
    inner_shapes = "s32[], s32[], f32[4,3]"
    extra = f"""%ibody (q: ({inner_shapes})) -> ({inner_shapes}) {{
  %q = ({inner_shapes}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %oi = s32[] get-tuple-element(%q), index=1
  %b = f32[4,3] get-tuple-element(%q), index=2
  %ten = s32[] constant(10)
  %v = s32[] multiply(%oi, %ten)
  %w = s32[] add(%v, %j)
  %fw = f32[] convert(%w)
  %e = f32[1,1] broadcast(%fw), dimensions={{}}
  %b.1 = f32[4,3] dynamic-update-slice(%b, %e, %oi, %j)
  %one = s32[] constant(1)
  %j.1 = s32[] add(%j, %one)
  ROOT %r = ({inner_shapes}) tuple(%j.1, %oi, %b.1)
}}
%icond (q: ({inner_shapes})) -> pred[] {{
  %q = ({inner_shapes}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%j, %three), direction=LT
}}"""
    body = """  %z = s32[] constant(0)
  %in = (s32[], s32[], f32[4,3]) tuple(%z, %i, %v1)
  %inner = (s32[], s32[], f32[4,3]) while(%in), condition=%icond, body=%ibody
  %nb = f32[4,3] get-tuple-element(%inner), index=2"""
    entry = """  %f0 = f32[] constant(-1)
  %start = f32[4,3] broadcast(%f0), dimensions={}"""
    text = loop_hlo(4, ["f32[4,3]"], body, ["%nb"], entry=entry, init=["%start"], extra=extra)
    cpu, got = run_loop(text)
    np.testing.assert_array_equal(got[1], np.arange(4)[:, None] * 10 + np.arange(3)[None, :])
    assert "b.1" in in_place(cpu)
    ws = loops(cpu)
    # The inner loop takes the outer body's (donated) carry; the outer loop owns it.
    assert (ws["inner"].taken, ws["inner"].copy_in) == ([2], [])
    assert (ws["loop"].used, ws["loop"].taken, ws["loop"].steady) == ([1], [1], True)


def test_update_computed_from_the_same_buffer_is_not_in_place():
    """buf[i] = 2 * buf[i - 1]: the dynamic-slice fused into the update kernel reads the
    buffer being written, so the kernel must build a new buffer."""
    body = """  %z = s32[] constant(0)
  %one.0 = s32[] constant(1)
  %im1 = s32[] subtract(%i, %one.0)
  %prev = f32[1,4] dynamic-slice(%v1, %im1, %z), dynamic_slice_sizes={1,4}
  %two = f32[] constant(2)
  %b2 = f32[1,4] broadcast(%two), dimensions={}
  %row = f32[1,4] multiply(%prev, %b2)
  %d = f32[6,4] dynamic-update-slice(%v1, %row, %i, %z)"""
    text = loop_hlo(6, ["f32[6,4]"], body, ["%d"], params=["f32[6,4]"])
    base = np.arange(24, dtype=np.float32).reshape(6, 4)
    cpu, got = run_loop(text, base)
    buf = base.copy()
    for i in range(6):
        buf[i] = 2 * buf[max(i - 1, 0)]
    np.testing.assert_array_equal(got[1], buf)
    assert "d" not in in_place(cpu)


def test_fused_elementwise_update_is_written_in_place():
    body = """  %z = s32[] constant(0)
  %fi = f32[] convert(%i)
  %bi = f32[1,8] broadcast(%fi), dimensions={}
  %e = f32[1,8] exponential(%v2)
  %h = f32[] constant(0.5)
  %bh = f32[1,8] broadcast(%h), dimensions={}
  %m = f32[1,8] multiply(%e, %bh)
  %row = f32[1,8] add(%m, %bi)
  %d = f32[7,8] dynamic-update-slice(%v1, %row, %i, %z)"""
    text = loop_hlo(7, ["f32[7,8]", "f32[1,8]"], body, ["%d", "%v2"],
                    params=["f32[7,8]", "f32[1,8]"])
    x = np.linspace(-1, 1, 8, dtype=np.float32)[None, :]
    cpu, got, ref = run_both(text, np.zeros((7, 8), np.float32), x)
    want = np.exp(x.astype(np.float64))[0] * 0.5 + np.arange(7)[:, None]
    for g in (got[1], ref[1]):  # exp may differ by an ulp between the backends
        np.testing.assert_allclose(g, want, rtol=2e-6)
    kernel = next(t for cc in cpu.program.builder.compiled.values() for t in cc.thunks
                  if t.kind == "kernel" and t.spec.root.name == "d")
    assert kernel.spec.inplace and kernel.spec.kind == "update-slice"
    assert {"exponential", "multiply", "add"} <= {i.opcode for i in kernel.spec.fused}


def test_constant_operand_is_never_written():
    """d = dus(constant, row, i): each iteration must start from the constant again."""
    c = np.arange(70 * 70, dtype=np.float32).reshape(70, 70)  # too big to inline
    literal = "{" + ", ".join("{" + ", ".join(f"{v:g}" for v in r) + "}" for r in c) + "}"
    body = f"""  %z = s32[] constant(0)
  %fi = f32[] convert(%i)
  %row = f32[1,70] broadcast(%fi), dimensions={{}}
  %k = f32[70,70] constant({literal})
  %d = f32[70,70] dynamic-update-slice(%k, %row, %i, %z)"""
    text = loop_hlo(5, ["f32[70,70]"], body, ["%d"], params=["f32[70,70]"])
    cpu, got = run_loop(text, np.zeros((70, 70), np.float32))
    want = c.copy()
    want[4] = 4
    np.testing.assert_array_equal(got[1], want)
    assert "d" not in in_place(cpu)
    np.testing.assert_array_equal(np.asarray(cpu(np.zeros((70, 70), np.float32))[1]), want)


def test_pass_through_of_a_conditional_keeps_the_operand():
    """c = conditional(..., buf) returns buf itself; dus(buf) after it must not write
    the array c is."""
    extra = """%ident (a: f32[4,4]) -> f32[4,4] {
  ROOT %a = f32[4,4] parameter(0)
}
%neg (a: f32[4,4]) -> f32[4,4] {
  %a = f32[4,4] parameter(0)
  ROOT %n = f32[4,4] negate(%a)
}"""
    body = """  %z = s32[] constant(0)
  %fi = f32[] convert(%i)
  %row = f32[1,4] broadcast(%fi), dimensions={}
  %yes = pred[] constant(true)
  %c = f32[4,4] conditional(%yes, %v1, %v1), true_computation=%ident, false_computation=%neg
  %d = f32[4,4] dynamic-update-slice(%v1, %row, %i, %z)"""
    text = loop_hlo(3, ["f32[4,4]", "f32[4,4]"], body, ["%d", "%c"],
                    params=["f32[4,4]", "f32[4,4]"], extra=extra)
    base = np.full((4, 4), 9, np.float32)
    cpu, got = run_loop(text, base, base)
    buf = base.copy()
    buf[:3] = np.arange(3)[:, None]
    before_last = buf.copy()
    before_last[2] = 9
    np.testing.assert_array_equal(got[1], buf)
    np.testing.assert_array_equal(got[2], before_last)
    assert "d" not in in_place(cpu)


@pytest.mark.parametrize("reads_operand", [False, True])
def test_scatter_in_a_loop(reads_operand):
    """acc[i % 5] += row (scatter-add); with reads_operand the update is acc[0] + 1,
    read from the buffer the scatter writes, so it must not run in place."""
    extra = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}"""
    upd = ("""  %z = s32[] constant(0)
  %first = f32[1,3] dynamic-slice(%v1, %z, %z), dynamic_slice_sizes={1,3}
  %onef = f32[] constant(1)
  %b1 = f32[1,3] broadcast(%onef), dimensions={}
  %row = f32[1,3] add(%first, %b1)""" if reads_operand else """  %fi = f32[] convert(%i)
  %row = f32[1,3] broadcast(%fi), dimensions={}""")
    body = upd + """
  %five = s32[] constant(5)
  %r5 = s32[] remainder(%i, %five)
  %idx = s32[1,1] broadcast(%r5), dimensions={}
  %sc = f32[5,3] scatter(%v1, %idx, %row), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add"""
    text = loop_hlo(12, ["f32[5,3]"], body, ["%sc"], params=["f32[5,3]"], extra=extra)
    base = np.ones((5, 3), np.float32)
    cpu, got = run_loop(text, base)
    acc = base.copy()
    for i in range(12):
        acc[i % 5] += (acc[0] + 1) if reads_operand else i
    np.testing.assert_array_equal(got[1], acc)
    np.testing.assert_array_equal(base, np.ones((5, 3), np.float32))
    assert ("sc" in in_place(cpu)) is (not reads_operand)


def test_explain_shows_in_place_kernels_and_loop_carries(tmp_path, capsys):
    path = tmp_path / "scan.hlo"
    path.write_text(scan_hlo(8, 4))
    assert cli_main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "root buf.1" in ln)
    assert "[update-slice]" in line and "in place" in line
    assert "carry leaves [1] updated in place (taken [1], copied once [])" in out


def test_update_of_an_arena_temporary_that_is_returned_is_a_new_buffer():
    """d = dus(transpose(buf), row, i) returned by the body: the transpose's arena
    buffer is reused by the next iteration, so d cannot live there."""
    body = ROW_OF_I + """
  %a = f32[4,4] transpose(%v1), dimensions={1,0}
  %d = f32[4,4] dynamic-update-slice(%a, %row, %i, %z)"""
    text = loop_hlo(4, ["f32[4,4]"], body, ["%d"], params=["f32[4,4]"])
    base = np.arange(16, dtype=np.float32).reshape(4, 4)
    cpu, got = run_loop(text, base)
    buf = base.copy()
    for i in range(4):
        buf = buf.T.copy()
        buf[i] = i
    np.testing.assert_array_equal(got[1], buf)
    assert "d" not in in_place(cpu)


# ---- native loops (native/loop.py): kernels-only loops run by one native function ----------

@pytest.mark.parametrize("trips", [5, 6])
def test_native_loop_swaps_results_computed_into_result_buffers(trips):
    """buf' = buf * 2 + i over the whole buffer: no update in place, the body's result
    buffer and the carry swap roles every iteration (an odd trip count ends in the result
    buffer, copied into the carry once)."""
    body = """  %fi = f32[] convert(%i)
  %bi = f32[3,5] broadcast(%fi), dimensions={}
  %two = f32[] constant(2)
  %b2 = f32[3,5] broadcast(%two), dimensions={}
  %m = f32[3,5] multiply(%v1, %b2)
  %d = f32[3,5] add(%m, %bi)"""
    text = loop_hlo(trips, ["f32[3,5]"], body, ["%d"], params=["f32[3,5]"])
    base = np.arange(15, dtype=np.float32).reshape(3, 5)
    cpu, got = run_loop(text, base)
    buf = base.copy()
    for i in range(trips):
        buf = buf * 2 + i
    np.testing.assert_array_equal(got[1], buf)
    np.testing.assert_array_equal(base, np.arange(15, dtype=np.float32).reshape(3, 5))
    loop = loops(cpu)["loop"]
    assert loop.native is not None and [k for k, _ in loop.native.swaps] == [0, 1]
    np.testing.assert_array_equal(np.asarray(cpu(base)[1]), buf)


def test_loop_moving_leaves_keeps_the_python_path():
    """(i, a, b) -> (i+1, b, a + 1): a leaf moved to another position is not a copy
    into its own carry buffer, so the loop is not run natively."""
    body = """  %onef = f32[] constant(1)
  %b1 = f32[2] broadcast(%onef), dimensions={}
  %a1 = f32[2] add(%v1, %b1)"""
    text = loop_hlo(5, ["f32[2]", "f32[2]"], body, ["%v2", "%a1"],
                    params=["f32[2]", "f32[2]"])
    a, b = np.array([0, 10], np.float32), np.array([100, 1000], np.float32)
    cpu, got = run_loop(text, a, b)
    for _ in range(5):
        a, b = b, a + 1
    np.testing.assert_array_equal(got[1], a)
    np.testing.assert_array_equal(got[2], b)
    assert loops(cpu)["loop"].native is None


def test_loop_returning_a_constant_keeps_the_python_path():
    body = "  %k = f32[2] constant({7, 8})"
    text = loop_hlo(2, ["f32[2]"], body, ["%k"], params=["f32[2]"])
    cpu, got = run_loop(text, np.zeros(2, np.float32))
    np.testing.assert_array_equal(got[1], [7, 8])
    assert loops(cpu)["loop"].native is None


def test_native_loop_whose_condition_returns_a_carried_pred():
    """cond returns the carry's pred leaf itself (a parameter buffer of the loop)."""
    extra = """%pbody (s: (s32[], pred[], f32[4])) -> (s32[], pred[], f32[4]) {
  %s = (s32[], pred[], f32[4]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %v = f32[4] get-tuple-element(%s), index=2
  %one = s32[] constant(1)
  %i.1 = s32[] add(%i, %one)
  %lim = s32[] constant(7)
  %go = pred[] compare(%i.1, %lim), direction=LT
  %fi = f32[] convert(%i)
  %e = f32[1] broadcast(%fi), dimensions={}
  %v.1 = f32[4] dynamic-update-slice(%v, %e, %i)
  ROOT %t = (s32[], pred[], f32[4]) tuple(%i.1, %go, %v.1)
}
%pcond (c: (s32[], pred[], f32[4])) -> pred[] {
  %c = (s32[], pred[], f32[4]) parameter(0)
  ROOT %g = pred[] get-tuple-element(%c), index=1
}"""
    text = f"""HloModule carried_pred
{extra}
ENTRY %main (v: f32[4]) -> (s32[], pred[], f32[4]) {{
  %v = f32[4] parameter(0)
  %zero = s32[] constant(0)
  %yes = pred[] constant(true)
  %init = (s32[], pred[], f32[4]) tuple(%zero, %yes, %v)
  ROOT %loop = (s32[], pred[], f32[4]) while(%init), condition=%pcond, body=%pbody
}}
"""
    v = np.full(4, -1, np.float32)
    cpu, got = run_loop(text, v)
    # Seven iterations; indices 4..6 clamp to the last element.
    np.testing.assert_array_equal(got[2], [0, 1, 2, 6])
    assert got[0] == 7 and not got[1]
    assert loops(cpu)["loop"].native is not None
    np.testing.assert_array_equal(v, np.full(4, -1, np.float32))


def test_clamped_start_indices_in_both_dimensions():
    """A 2x3 block at (2i - 3, 4 - 3i) in a 5x4 buffer: starts clamp to [0, 3] x [0, 1]."""
    body = """  %two = s32[] constant(2)
  %three = s32[] constant(3)
  %four = s32[] constant(4)
  %r0 = s32[] multiply(%i, %two)
  %r = s32[] subtract(%r0, %three)
  %c0 = s32[] multiply(%i, %three)
  %c = s32[] subtract(%four, %c0)
  %fi = f32[] convert(%i)
  %blk = f32[2,3] broadcast(%fi), dimensions={}
  %d = f32[5,4] dynamic-update-slice(%v1, %blk, %r, %c)"""
    text = loop_hlo(4, ["f32[5,4]"], body, ["%d"], params=["f32[5,4]"])
    cpu, got = run_loop(text, np.full((5, 4), -1, np.float32))
    buf = np.full((5, 4), -1, np.float32)
    for i in range(4):
        r, c = min(max(2 * i - 3, 0), 3), min(max(4 - 3 * i, 0), 1)
        buf[r:r + 2, c:c + 3] = i
    np.testing.assert_array_equal(got[1], buf)
    assert "d" in in_place(cpu)


def test_leaf_handed_back_next_to_a_collective_of_it_keeps_its_source():
    """(x, y, w) -> (x, all-reduce(x), dus(y, i)): x is handed back unchanged while the
    all-reduce reads it and its result goes to the root too. On one device the all-reduce
    may return x's own array, so y may share x's array next iteration, where the update of
    y in place must not reach x: the body never writes x (so x keeps its source, and the
    loop may run natively: tests/mpi/test_native_loop_handed_back.py), y's source stays
    unknown (copied before it is written)."""
    add = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(%a, %b)
}"""
    body = """  %r = f32[6,4] all-reduce(%v1), replica_groups={}, to_apply=%add
  %fi = f32[] convert(%i)
  %row = f32[1,4] broadcast(%fi), dimensions={}
  %z = s32[] constant(0)
  %d = f32[6,4] dynamic-update-slice(%v2, %row, %i, %z)"""
    text = loop_hlo(5, ["f32[6,4]"] * 3, body, ["%v1", "%r", "%d"],
                    params=["f32[6,4]"] * 3, extra=add)
    base = np.arange(24, dtype=np.float32).reshape(6, 4)
    cpu, got = run_loop(text, base, base + 100, base + 200)
    np.testing.assert_array_equal(got[1], base)
    np.testing.assert_array_equal(got[2], base)
    w = base.copy()
    w[4] = 4  # the last iteration's y (all-reduce(x) = x) with row 4 set to 4
    np.testing.assert_array_equal(got[3], w)
    loop = loops(cpu)["loop"]
    assert loop.body.sources[1] == 1 and loop.body.sources[2] is None
