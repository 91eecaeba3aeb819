"""Control flow, calls, custom calls and the evaluator's own contract (shape checks,
errors naming the instruction, call_vectorized)."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from tests.interpreter.ir import Comp, S, run, scalar_binary
from xladist.errors import ExecutionError, UnsupportedError
from xladist.interpreter import (
    EVAL_RULES,
    Evaluator,
    check_supported,
    register_custom_call,
)
from xladist.semantics.single_device import SingleDeviceContext
from xladist.semantics.custom_calls import CUSTOM_CALLS
from xladist.semantics.order import top_k_total_order as top_k


def counting_loop(limit: int):
    """while (i < limit) { i += 1; acc *= 2 } over (s32 i, f32 acc)."""
    st = "(s32[], f32[])"
    cond = Comp("cond")
    s = cond.param(st)
    i = cond.op("get-tuple-element", "s32[]", s, index=0)
    lim = cond.const(limit, "s32[]")
    cond_c = cond.done(cond.op("compare", "pred[]", i, lim, direction="LT"))
    body = Comp("body")
    s = body.param(st)
    i = body.op("get-tuple-element", "s32[]", s, index=0)
    acc = body.op("get-tuple-element", "f32[]", s, index=1)
    one, two = body.const(1, "s32[]"), body.const(2, "f32[]")
    body_c = body.done(body.op("tuple", st, body.op("add", "s32[]", i, one),
                               body.op("multiply", "f32[]", acc, two)))
    c = Comp()
    init = c.param(st)
    w = c.op("while", st, init, condition=cond_c, body=body_c)
    return c.module(w, cond_c, body_c)


def test_while_loop():
    m = counting_loop(5)
    i, acc = run(m, (np.array(0, np.int32), np.array(1.5, np.float32)))
    assert i == 5 and acc == 48.0
    i, acc = run(m, (np.array(9, np.int32), np.array(1.5, np.float32)))
    assert i == 9 and acc == 1.5  # condition false at once: the body never runs


def branch(name, opcode, k):
    b = Comp(name)
    x = b.param("f32[]")
    return b.done(b.op(opcode, "f32[]", x, b.const(k, "f32[]")))


def test_conditional_indexed_out_of_range_runs_last_branch():
    branches = [branch("b0", "add", 1), branch("b1", "multiply", 10), branch("b2", "subtract", 3)]
    c = Comp()
    idx = c.param("s32[]")
    args = [c.param("f32[]") for _ in range(3)]
    cond = c.op("conditional", "f32[]", idx, *args, branch_computations=branches)
    m = c.module(cond, *branches)
    vals = [np.array(v, np.float32) for v in (1.0, 2.0, 7.0)]
    assert run(m, np.array(0, np.int32), *vals) == 2.0
    assert run(m, np.array(1, np.int32), *vals) == 20.0
    assert run(m, np.array(2, np.int32), *vals) == 4.0
    assert run(m, np.array(7, np.int32), *vals) == 4.0   # out of range: the last branch
    assert run(m, np.array(-1, np.int32), *vals) == 4.0


def test_conditional_pred_form():
    t, f = branch("t", "add", 1), branch("f", "multiply", 10)
    c = Comp()
    p = c.param("pred[]")
    a, b = c.param("f32[]"), c.param("f32[]")
    m = c.module(c.op("conditional", "f32[]", p, a, b, true_computation=t,
                      false_computation=f), t, f)
    a_, b_ = np.array(1.0, np.float32), np.array(2.0, np.float32)
    assert run(m, np.array(True), a_, b_) == 2.0
    assert run(m, np.array(False), a_, b_) == 20.0


def test_call_fusion_and_async_wrappers():
    add = scalar_binary("add", "f32")
    c = Comp()
    a, b = c.param("f32[]"), c.param("f32[]")
    call = c.op("call", "f32[]", a, b, to_apply=add)
    fus = c.op("fusion", "f32[]", call, b, kind="kLoop", calls=add)
    start = c.op("async-start", "((f32[], f32[]), f32[], s32[])", fus, a, calls=add)
    upd = c.op("async-update", "((f32[], f32[]), f32[], s32[])", start, calls=add)
    done = c.op("async-done", "f32[]", upd, calls=add)
    cs = c.op("copy-start", "(f32[], f32[], u32[])", done)
    cd = c.op("copy-done", "f32[]", cs)
    m = c.module(cd, add)
    # ((a + b) + b) + a
    assert run(m, np.array(1.0, np.float32), np.array(2.0, np.float32)) == 6.0


def test_topk_custom_call_order():
    x = np.array([[3.0, -0.0, 0.0, np.nan, 3.0, -np.inf, -np.nan]], np.float32)
    values, idx = top_k(x, 5)
    # NaN first, then 3 (index 1 before 4), then +0 before -0.
    assert idx.tolist() == [[3, 0, 4, 2, 1]]
    assert np.isnan(values[0, 0]) and values[0, 1:].tolist() == [3.0, 3.0, 0.0, 0.0]
    assert np.signbit(values[0, 4]) and not np.signbit(values[0, 3])
    c = Comp()
    p = c.param("f32[2,4]")
    cc = c.op("custom-call", "(f32[2,2], s32[2,2])", p, custom_call_target="TopK")
    v, i = run(c.module(cc), np.array([[1, 4, 2, 3], [5, 5, 0, 9]], np.float32))
    assert v.tolist() == [[4, 3], [9, 5]] and i.tolist() == [[1, 3], [3, 0]]
    ints = np.array([[2, -7, 2**31 - 1, 0]], np.int32)
    assert top_k(ints, 2)[1].tolist() == [[2, 0]]


def test_unknown_custom_call_is_refused_before_running():
    c = Comp()
    p = c.param("f32[2]")
    side = c.op("outfeed", "token[]", p, c.op("after-all", "token[]"))
    cc = c.op("custom-call", "f32[2]", p, custom_call_target="my_kernel")
    m = c.module(c.op("tuple", "(f32[2], token[])", cc, side))
    with pytest.raises(UnsupportedError,
                       match=r"custom-call\.\d+ = f32\[2\]\{0\} custom-call\(p0\.\d+\).*'my_kernel' is not "):
        check_supported(m)
    device = SingleDeviceContext()
    with pytest.raises(UnsupportedError, match="my_kernel"):
        xladist.compile(m, verify=False, device=device)
    assert device.outfeed_values == []  # refused before the outfeed ran
    register_custom_call("my_kernel", lambda instr, args: args[0] * 2)
    try:
        check_supported(m)
        out, _ = run(m, np.array([1.0, 2.0], np.float32))
        assert out.tolist() == [2.0, 4.0]
    finally:
        CUSTOM_CALLS.pop("my_kernel")


def test_check_supported_names_unsupported_opcodes():
    c = Comp()
    m = c.module(c.op("shuffle", "f32[2]", c.param("f32[2]"), dimensions=[0]))
    with pytest.raises(UnsupportedError, match=r"shuffle.*not implemented"):
        check_supported(m)


def test_dynamic_shape_ops_handed_to_the_interpreter_directly_point_at_the_padder():
    # xladist.compile rewrites them away first (hlo.dynamic_padder); the evaluator alone
    # says where they are handled instead of failing somewhere inside
    c = Comp()
    p = c.param("f32[2]")
    m = c.module(c.op("set-dimension-size", None, p, c.param("s32[]"), dimensions=[0]))
    with pytest.raises(UnsupportedError, match=r"set-dimension-size.*dynamic_padder"):
        check_supported(m)


# ---- the evaluator's contract ---------------------------------------------------------------
def test_a_rule_returning_the_wrong_dtype_is_an_internal_error_naming_the_instruction(
        monkeypatch):
    monkeypatch.setitem(EVAL_RULES, "negate", lambda instr, args, ev: args[0].astype(np.float64))
    c = Comp()
    p = c.param("f32[3]")
    m = c.module(c.op("negate", "f32[3]", p))
    with pytest.raises(ExecutionError, match=r"negate\.\d+ = f32\[3\]\{0\} negate\(p0\.\d+\).*element type"):
        run(m, np.zeros(3, np.float32))


def test_a_rule_crash_is_reported_with_the_instruction(monkeypatch):
    def broken(instr, args, ev):
        raise KeyError("oops")
    monkeypatch.setitem(EVAL_RULES, "negate", broken)
    c = Comp()
    m = c.module(c.op("negate", "f32[3]", c.param("f32[3]")))
    with pytest.raises(ExecutionError, match=r"negate\.\d+ = .*internal interpreter error: KeyError"):
        run(m, np.zeros(3, np.float32))


def test_wrong_arguments_name_the_parameter():
    c = Comp()
    m = c.module(c.op("negate", "f32[3]", c.param("f32[3]")))
    with pytest.raises(ExecutionError, match=r"parameter 0 \(p0\.\d+\).*element type f32"):
        run(m, np.zeros(3, np.float64))


def test_call_vectorized_runs_once_on_whole_arrays():
    # max(a, b) with a bitcast to s32 and back, as sort comparators do.
    c = Comp("cmp")
    a, b = c.param("f32[]"), c.param("f32[]")
    ia = c.op("bitcast", "s32[]", a)
    back = c.op("bitcast", "f32[]", ia)
    comp = c.done(c.op("maximum", "f32[]", back, b))
    k = Comp()
    ev = Evaluator(k.module(k.op("after-all", "token[]")))
    calls = []
    original = EVAL_RULES["maximum"]

    def counting(instr, args, ev_):
        calls.append(args[0].shape)
        return original(instr, args, ev_)
    EVAL_RULES["maximum"] = counting
    try:
        x = np.array([[1.0, -2.0], [3.0, np.nan]], np.float32)
        y = np.array([0.5, 0.0], np.float32)
        got = ev.call_vectorized(comp, [x, y])
    finally:
        EVAL_RULES["maximum"] = original
    assert calls == [(2, 2)]
    assert got[0].tolist() == [1.0, 0.0] and got[1, 0] == 3.0 and np.isnan(got[1, 1])


def test_call_vectorized_falls_back_per_element_and_returns_tuples():
    # A scalar computation with a while loop inside is not element-wise-safe.
    loop = counting_loop(3)
    cond_c, body_c = loop.computations[0], loop.computations[1]
    c = Comp("f")
    x, y = c.param("s32[]"), c.param("f32[]")
    st = c.op("tuple", "(s32[], f32[])", x, y)
    w = c.op("while", "(s32[], f32[])", st, condition=cond_c, body=body_c)
    comp = c.done(w)
    ev = Evaluator(loop)
    i, acc = ev.call_vectorized(comp, [np.array([0, 1, 5], np.int32),
                                       np.array(1.0, np.float32)])
    assert i.tolist() == [3, 3, 5] and acc.tolist() == [8.0, 4.0, 1.0]
    assert i.dtype == np.int32 and acc.dtype == np.float32


def test_call_vectorized_constant_root_is_broadcast():
    c = Comp("k")
    c.param("f32[]")
    comp = c.done(c.const(7, "s32[]"))
    k = Comp()
    ev = Evaluator(k.module(k.op("after-all", "token[]")))
    got = ev.call_vectorized(comp, [np.zeros((2, 3), np.float32)])
    assert got.shape == (2, 3) and (got == 7).all() and got.dtype == np.int32


def test_instructions_run_in_text_order_and_bad_order_is_reported():
    c = Comp()
    p = c.param("f32[]")
    n = c.op("negate", "f32[]", p)
    a = c.op("add", "f32[]", n, p)
    m = c.module(a)
    m.entry.instructions = [p, a, n]  # a uses n before it exists
    with pytest.raises(ExecutionError, match="not a valid schedule"):
        run(m, np.array(1.0, np.float32))
    sched = {"main": [p, n, a]}
    assert Evaluator(m, schedule=sched).run([np.array(1.0, np.float32)]) == 0.0


def test_shape_text_helper_builds_layouts():
    assert S("f32[2,3]{0,1}").minor_to_major() == (0, 1)


# ---- reduce with a reducer that is not one associative op: a left fold ------------------

_FOLD_REDUCERS = {
    # order-sensitive: a + 2b folded left from the init is sum_k 2^(n-1-k)... per row
    "a_plus_2b": ("f32", """  a = f32[] parameter(0)
  b = f32[] parameter(1)
  two = f32[] constant(2)
  tb = f32[] multiply(two, b)
  ROOT r = f32[] add(a, tb)""", lambda acc, x: acc + 2 * x),
    # a reducer ignoring its inputs: every step gives the constant
    "constant": ("f32", """  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] constant(7)""", lambda acc, x: np.full_like(acc, 7)),
    # s8 wraps: the fold's dtype must stay s8 at every step
    "s8_a_minus_b": ("s8", """  a = s8[] parameter(0)
  b = s8[] parameter(1)
  ROOT r = s8[] subtract(a, b)""", lambda acc, x: (acc - x).astype(np.int8)),
}


@pytest.mark.parametrize("name", sorted(_FOLD_REDUCERS))
@pytest.mark.parametrize("n", [0, 1, 2, 37])
@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_non_associative_reduce_is_the_left_fold_from_the_init(name, n, backend):
    ty, body, step = _FOLD_REDUCERS[name]
    text = f"""HloModule m
red {{
{body}
}}
ENTRY e {{
  x = {ty}[3,{n}] parameter(0)
  i = {ty}[] constant(5)
  ROOT r = {ty}[3] reduce(x, i), dimensions={{1}}, to_apply=red
}}
"""
    dt = np.float32 if ty == "f32" else np.int8
    x = np.random.default_rng(n).integers(-9, 9, (3, n)).astype(dt)
    want = np.full(3, 5, dt)
    for k in range(n):
        want = step(want, x[:, k]).astype(dt)
    got = xladist.compile(xladist.parse_hlo(text), backend=backend)(x)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
