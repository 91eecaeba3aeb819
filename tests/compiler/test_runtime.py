"""The cpu backend inside the runtime: custom-calls through the user registry, the
scheduled order, the watchdog's loop context, the timeline hook, and async pairs whose
start and done sit in different iterations of a while loop.

References are independent of the backend under test: numpy, the schedule computed by
xladist.analysis.schedule, what the interpreter reports under the same runtime hooks, and hop-by-hop
simulations of the pipelined programs.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque

import numpy as np
import pytest

import xladist
from xladist.collectives import deadline
from xladist.runtime import watchdog
from xladist.analysis.schedule import schedule_module
from xladist.runtime.trace import TracedDevice, Tracer
from tests.cli.test_channels_cli import DATA, _Recorder, write_inputs, xladist_cli
from tests.runtime.test_watchdog import NESTED, _Contexts
from xladist.compiler.program import CpuProgram
from xladist.errors import ExecutionError, UnsupportedError, VerifierError
from xladist.semantics.single_device import SingleDeviceContext
from xladist.semantics.custom_calls import CUSTOM_CALLS, register_custom_call


def cpu(module, **options):
    if isinstance(module, str):
        module = xladist.parse_hlo(module)
    return xladist.compile(module, backend="cpu", **options)


# ---- custom-call: the registry's function, an explicit thunk kind --------------------------

TOPK = """HloModule topk
ENTRY main {
  x = f32[3,7] parameter(0)
  n = f32[3,7] negate(x)
  ROOT t = (f32[3,2], s32[3,2]) custom-call(n), custom_call_target="TopK"
}
"""


def test_topk_custom_call_runs_the_registered_target():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    x[1, 3] = x[1, 5]  # a tie: the smaller index first
    values, indices = cpu(TOPK)(x)
    order = np.argsort(x, axis=-1, kind="stable")[:, :2]  # largest of -x = smallest of x
    np.testing.assert_array_equal(indices, order.astype(np.int32))
    np.testing.assert_array_equal(values, np.take_along_axis(-x, order, axis=-1))
    kinds = [t.kind for t in CpuProgram(xladist.parse_hlo(TOPK)).entry.thunks]
    assert kinds == ["kernel", "custom-call"]


TOPK_OP = """HloModule topk_op
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY main {
  x = f32[2,6] parameter(0)
  y = f32[2,6] parameter(1)
  big = (f32[2,3], s32[2,3]) topk(x), k=3, largest=true
  small = (f32[2,3], s32[2,3]) topk(x), k=3, largest=false
  by_cmp = (f32[2,3], s32[2,3]) topk(y), k=3, to_apply=cmp
  ROOT t = ((f32[2,3], s32[2,3]), (f32[2,3], s32[2,3]), (f32[2,3], s32[2,3])) tuple(big, small,
    by_cmp)
}
"""


def test_topk_op_orders_as_the_interpreter():
    """The topk opcode: XLA's total order (NaN above +inf, -0 below +0, ties by lower index)
    without a comparator, the comparator's order with `to_apply` (once sorted as f64 with
    NaN last, and the comparator ignored)."""
    x = np.array([[1.0, np.nan, 3.0, -0.0, 0.0, -np.inf],
                  [2.0, 0.0, -0.0, 2.0, np.nan, -1.0]], np.float32)
    y = np.array([[3.0, 1.0, 2.0, 7.0, 1.0, 0.5], [5.0, 4.0, 6.0, -1.0, 2.0, 3.0]], np.float32)
    module = xladist.parse_hlo(TOPK_OP)
    want = xladist.compile(module, backend="interpreter")(x, y)
    got = cpu(module)(x, y)
    np.testing.assert_array_equal(want[1], [[1, 2, 0], [4, 0, 3]])
    np.testing.assert_array_equal(want[3], [[5, 3, 4], [5, 2, 1]])
    np.testing.assert_array_equal(want[5], [[5, 1, 4], [3, 4, 5]])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == w.dtype


def test_user_registered_target_is_called_with_the_instruction_and_operands():
    seen = []

    def scaled(instr, args):
        seen.append(instr)
        return args[0] * 3 + args[1]

    register_custom_call("test.scaled_add", scaled)
    try:
        module = xladist.parse_hlo("""HloModule user
ENTRY main {
  a = f32[5] parameter(0)
  b = f32[5] parameter(1)
  e = f32[5] exponential(a)
  c = f32[5] custom-call(e, b), custom_call_target="test.scaled_add", backend_config="k=3"
  ROOT r = f32[5] add(c, b)
}
""")
        exe = cpu(module)
        a = np.linspace(-1, 1, 5, dtype=np.float32)
        b = np.arange(5, dtype=np.float32)
        (out,) = exe(a, b)
        np.testing.assert_allclose(out, np.exp(a) * 3 + 2 * b, rtol=1e-6)
        # The user's instruction (not the compiler's private copy), with its attributes.
        assert seen == [module.entry.instructions[3]] and "k=3" in seen[0].backend_config
    finally:
        CUSTOM_CALLS.pop("test.scaled_add", None)


def test_unknown_target_is_refused_before_anything_runs():
    text = """HloModule unknown
ENTRY main {
  x = f32[4] parameter(0)
  ROOT y = f32[4] custom-call(x), custom_call_target="no_such_target"
}
"""
    with pytest.raises(UnsupportedError) as e:
        cpu(text)
    msg = str(e.value)
    assert "'no_such_target'" in msg and "`y`" in msg and "TopK" in msg


def test_custom_call_returning_the_wrong_shape_names_target_and_instruction():
    register_custom_call("test.bad_shape", lambda instr, args: np.zeros(3, np.float32))
    try:
        exe = cpu("""HloModule bad
ENTRY main {
  x = f32[4] parameter(0)
  ROOT y = f32[4] custom-call(x), custom_call_target="test.bad_shape"
}
""")
        with pytest.raises(ExecutionError, match=r"'test.bad_shape' returned dims \[3\]"):
            exe(np.zeros(4, np.float32))
    finally:
        CUSTOM_CALLS.pop("test.bad_shape", None)


# ---- the scheduled order -------------------------------------------------------------------

# Element-wise work between the transfers: fusion must not carry a channel op across another.
FUSED_EXCHANGE = (DATA / "bidirectional_exchange.n2.hlo").read_text().replace(
    "  %x = f32[8]{0} parameter(0)\n",
    "  %x0 = f32[8]{0} parameter(0)\n  %e = f32[8]{0} exponential(%x0)\n"
    "  %x = f32[8]{0} multiply(%e, %x0)\n").replace("(x: f32[8])", "(x0: f32[8])")


@pytest.mark.parametrize("text", [(DATA / "bidirectional_exchange.n2.hlo").read_text(),
                                  FUSED_EXCHANGE], ids=["plain", "fused"])
def test_cpu_runs_the_schedule_not_the_text_order(text):
    module = xladist.parse_hlo(text)
    schedule = schedule_module(module)
    p2p = [i.name for i in schedule[module.entry] if i.family == "p2p"]
    in_text = [i.name for i in module.entry.instructions if i.family == "p2p"]
    assert p2p != in_text  # the file is written send-first on purpose
    x = np.ones(8, np.float32)
    scheduled = _Recorder()
    cpu(module, device=scheduled, schedule=schedule)(x)
    assert scheduled.log == p2p
    unscheduled = _Recorder()
    cpu(module, device=unscheduled)(x)
    assert unscheduled.log == in_text


def test_runtime_hands_the_schedule_to_the_cpu_backend():
    from xladist.runtime.rank import _executor_options
    module = xladist.load_hlo(DATA / "bidirectional_exchange.n2.hlo")
    options = _executor_options(module, "cpu", True)
    assert set(options) == {"schedule"}
    assert [i.name for i in options["schedule"][module.entry]] == \
        [i.name for i in schedule_module(module)[module.entry]]


# ---- the watchdog's loop context -----------------------------------------------------------

def test_loop_context_matches_the_interpreter_under_the_runtime():
    module = xladist.parse_hlo(NESTED)
    x = np.array([1.5, -2.0], np.float32)
    reference = _Contexts()
    xladist.compile(module, backend="interpreter", device=reference,
                    rules=watchdog.loop_tracking_rules())(x)
    compiled = _Contexts()
    (out,) = cpu(module, device=compiled)(x)
    np.testing.assert_array_equal(out, x)  # all-reduce over one device
    assert compiled.seen == reference.seen == [
        f"iteration {i} of loop, iteration {j} of inner" for i in (1, 2, 3) for j in (1, 2)]
    assert deadline.watchdog.loops == []  # every loop popped its entry


def test_loop_inside_an_inlined_call_keeps_the_users_name():
    text = NESTED.replace(
        "  %loop = (s32[], f32[2]{0}) while(%s0), condition=%outer_cond, body=%outer_body\n",
        "  %loop = (s32[], f32[2]{0}) call(%s0), to_apply=%wrapper\n").replace(
        "ENTRY %main", "%wrapper (ws: (s32[], f32[2])) -> (s32[], f32[2]) {\n"
        "  %ws = (s32[], f32[2]{0}) parameter(0)\n"
        "  ROOT %loop.w = (s32[], f32[2]{0}) while(%ws), condition=%outer_cond, "
        "body=%outer_body\n}\n\nENTRY %main")
    device = _Contexts()
    cpu(text, device=device)(np.zeros(2, np.float32))
    assert device.seen[0] == "iteration 1 of loop.w, iteration 1 of inner"
    assert len(device.seen) == 6


# ---- the timeline hook ---------------------------------------------------------------------

def test_tracer_gets_one_slice_per_thunk_and_counts_iterations():
    from tests.runtime.test_trace import LOOP
    module = xladist.parse_hlo(LOOP)
    program = CpuProgram(module)
    tracer = Tracer(0)
    tracer.watch(module)
    exe = cpu(module, device=TracedDevice(SingleDeviceContext(), tracer))
    with tracer.execute():
        out = exe(np.arange(8, dtype=np.float32))
    assert float(out[0]) == 28.0
    assert tracer.iterations == 5
    slices = [ev for ev in tracer.events if ev[1] == "instruction"]
    per_comp = {cc.name: len(cc.thunks) for cc in program.builder.compiled.values()}
    (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
    body, cond = loop.attrs["body"].name, loop.attrs["condition"].name
    # One slice per body run, named after the body's ROOT (how iterations are counted).
    iterations = [ev for ev in slices if ev[4] is loop.attrs["body"].root]
    assert len(iterations) == 5
    by_comp = Counter(ev[4].parent.name for ev in slices if ev[4] is not loop.attrs["body"].root)
    assert by_comp == {module.entry.name: per_comp[module.entry.name],
                       body: 5 * per_comp[body], cond: 6 * per_comp[cond]}
    kernels = [ev[0] for ev in slices if ev[0].startswith("kernel ")]
    assert kernels and all("[" in k for k in kernels)
    assert tracer.wait_calls["collective"] == 5
    events = tracer.trace_events()
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")


def test_counters_only_tracer_costs_no_hook():
    from tests.runtime.test_trace import LOOP
    tracer = Tracer(0, record=False)
    exe = cpu(LOOP, device=TracedDevice(SingleDeviceContext(), tracer))
    exe(np.zeros(8, np.float32))
    assert tracer.events == [] and tracer.wait_calls["collective"] == 5


# ---- async pairs across while-loop state ---------------------------------------------------

def pipelined(n: int, trips: int) -> str:
    """A pipelined ring over n partitions: transfer 0 before the loop, one per iteration
    (each sends 2 * received + i), the last one completed after the loop."""
    pairs = "{" + ",".join(f"{{{d},{(d + 1) % n}}}" for d in range(n)) + "}"
    attrs = (f'frontend_attributes={{_xla_send_recv_pipeline="0",'
             f'_xla_send_recv_source_target_pairs="{pairs}"}}')
    done = 'frontend_attributes={_xla_send_recv_pipeline="0"}'
    t = "(f32[4]{0}, u32[], token[])"
    return f"""HloModule pipelined, num_partitions={n}

%body (state: (s32[], {t}, {t})) -> (s32[], {t}, {t}) {{
  %state = (s32[], {t}, {t}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %prev_recv = {t} get-tuple-element(%state), index=1
  %prev_send = {t} get-tuple-element(%state), index=2
  %recv-done.p = (f32[4]{{0}}, token[]) recv-done(%prev_recv), channel_id=1, {done}
  %send-done.p = token[] send-done(%prev_send), channel_id=1, {done}
  %got = f32[4]{{0}} get-tuple-element(%recv-done.p), index=0
  %two = f32[] constant(2)
  %twos = f32[4]{{0}} broadcast(%two), dimensions={{}}
  %fi = f32[] convert(%i)
  %fis = f32[4]{{0}} broadcast(%fi), dimensions={{}}
  %dbl = f32[4]{{0}} multiply(%got, %twos)
  %data = f32[4]{{0}} add(%dbl, %fis)
  %token.b = token[] after-all()
  %recv.b = {t} recv(%token.b), channel_id=1, {attrs}
  %send.b = {t} send(%data, %token.b), channel_id=1, {attrs}
  %one = s32[] constant(1)
  %i.1 = s32[] add(%i, %one)
  ROOT %next = (s32[], {t}, {t}) tuple(%i.1, %recv.b, %send.b)
}}

%cond (state.1: (s32[], {t}, {t})) -> pred[] {{
  %state.1 = (s32[], {t}, {t}) parameter(0)
  %i.2 = s32[] get-tuple-element(%state.1), index=0
  %trips = s32[] constant({trips})
  ROOT %more = pred[] compare(%i.2, %trips), direction=LT
}}

ENTRY %main (x: f32[4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %token.0 = token[] after-all()
  %recv.0 = {t} recv(%token.0), channel_id=1, {attrs}
  %send.0 = {t} send(%x, %token.0), channel_id=1, {attrs}
  %zero = s32[] constant(0)
  %init = (s32[], {t}, {t}) tuple(%zero, %recv.0, %send.0)
  %loop = (s32[], {t}, {t}) while(%init), condition=%cond, body=%body
  %last_recv = {t} get-tuple-element(%loop), index=1
  %last_send = {t} get-tuple-element(%loop), index=2
  %recv-done.l = (f32[4]{{0}}, token[]) recv-done(%last_recv), channel_id=1, {done}
  %send-done.l = token[] send-done(%last_send), channel_id=1, {done}
  ROOT %out = f32[4]{{0}} get-tuple-element(%recv-done.l), index=0
}}
"""


def simulate_ring(x: np.ndarray, trips: int) -> np.ndarray:
    """Hop by hop: every device forwards to the next, 2 * received + i in iteration i."""
    held = np.roll(x, 1, axis=0)           # transfer 0
    for i in range(trips):
        held = np.roll(2 * held + i, 1, axis=0)
    return held


class _Loopback(SingleDeviceContext):
    """One device whose sends arrive at its own recvs (per channel, first in first out);
    handles are opaque tokens, so a done must be handed the handle of its own start."""

    def __init__(self):
        super().__init__()
        self.queues = defaultdict(deque)
        self.open = {}

    def send(self, instr, data):
        self.queues[instr.attrs["channel_id"]].append(np.array(data))
        handle = object()
        self.open[id(handle)] = "send"
        return handle

    def send_done(self, instr, handle):
        assert self.open.pop(id(handle)) == "send"

    def recv(self, instr):
        handle = object()
        self.open[id(handle)] = "recv"
        return handle

    def recv_done(self, instr, handle):
        assert self.open.pop(id(handle)) == "recv"
        return self.queues[instr.attrs["channel_id"]].popleft()


@pytest.mark.parametrize("trips", [0, 1, 3])
def test_pipelined_transfers_cross_iterations_in_process(trips):
    module = xladist.parse_hlo(pipelined(1, trips))
    x = np.array([1, -2, 3.5, 0], np.float32)
    device = _Loopback()
    (out,) = cpu(module, device=device)(x)
    np.testing.assert_array_equal(out, simulate_ring(x[None], trips)[0])
    assert device.open == {}  # every start completed by its own done, once


def test_done_without_its_start_in_flight_names_the_instruction():
    module = xladist.parse_hlo(pipelined(1, 2).replace(
        "ROOT %next = (s32[], (f32[4]{0}, u32[], token[]), (f32[4]{0}, u32[], token[])) "
        "tuple(%i.1, %recv.b, %send.b)",
        "ROOT %next = (s32[], (f32[4]{0}, u32[], token[]), (f32[4]{0}, u32[], token[])) "
        "tuple(%i.1, %prev_recv, %send.b)"))
    # The verifier refuses it (recv.b is started and never completed); unverified, the
    # runtime still names the done whose start is not in flight.
    with pytest.raises(VerifierError, match="recv must have exactly one user"):
        cpu(module, device=_Loopback())
    with pytest.raises(ExecutionError, match="recv-done `recv-done.p`: its operand is not "
                                             "the result of a start that is still in flight"):
        cpu(module, device=_Loopback(), verify=False)(np.zeros(4, np.float32))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["pipelined_ring.n2.hlo", "pipeline_while.n2.hlo", "mine"])
@pytest.mark.slow
def test_pipelined_programs_through_the_cli_on_cpu(tmp_path, name):
    n = 2
    if name == "mine":
        path = tmp_path / "pipelined.hlo"
        path.write_text(pipelined(n, 2))
    else:
        path = DATA / name
    x = (np.arange(4 * n, dtype=np.float32).reshape(n, 4) - 3) * 1.5
    inputs = write_inputs(tmp_path / "in.npz", path, n, {0: x})
    out = tmp_path / "out.npz"
    proc = xladist_cli("run", path, "-n", n, "--inputs", inputs, "--outputs", out, "-q",
                       "--backend", "cpu", "--timeout", 60)
    assert proc.returncode == 0, proc.stderr
    if name == "pipeline_while.n2.hlo":
        # Stage 0 adds its bias to zeros 4 times; stage 1 gets stage 0's activation from
        # the previous iteration (zeros in the first).
        want = np.stack([4 * x[0], 4 * x[1] + 3 * x[0]])
    elif name == "mine":
        want = simulate_ring(x, 2)
    else:
        want = np.roll(x, 4, axis=0)  # pipelined_ring forwards unchanged, 4 hops on 2 devices
    with np.load(out) as z:
        np.testing.assert_array_equal(z["out0"], want)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_cli_trace_on_cpu_has_a_slice_per_thunk_on_every_rank(tmp_path):
    import json

    from tests.runtime.test_trace import CORPUS, _single_device_counts, _xladist
    d = CORPUS / "elementwise_reduce_mesh2"
    trace = tmp_path / "trace.json"
    proc = _xladist("run", str(d / "module.hlo"), "-n", "2", "--inputs", str(d / "inputs.npz"),
                    "--outputs", str(tmp_path / "o.npz"), "--trace", str(trace),
                    "--backend", "cpu")
    assert proc.returncode == 0, proc.stderr
    module = xladist.load_hlo(d / "module.hlo")
    entry = CpuProgram(module).entry
    want = Counter(t.trace_slice.name for t in entry.thunks)
    assert any(name.startswith("kernel ") for name in want)
    complete = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    for r in range(2):
        mine = [e for e in complete if e["pid"] == r]
        got = Counter(e["name"] for e in mine if e["cat"] == "instruction"
                      and e["args"]["computation"] == module.entry.name)
        assert got == want, f"rank {r}"
        waits = Counter(e["name"] for e in mine if e["cat"] == "collective")
        assert waits == _single_device_counts(d) and sum(waits.values()) > 0
