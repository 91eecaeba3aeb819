"""XlaBuilder op coverage: every op family builds the HLO (opcode, attributes, shape) that
XLA's operation semantics prescribe. Expected shapes are worked out by hand from the
operation-semantics formulas and written next to each case."""

from __future__ import annotations

import numpy as np
import pytest

import xladist
from xladist.builder import BuilderError, XlaBuilder
from xladist.hlo.attrs import ReplicaGroups
from xladist.hlo.opcodes import OPCODES

from .test_builder import NEWER_THAN_INSTALLED_XLA, check_text

BUILT_OPCODES: set[str] = set()

# Opcodes the builder deliberately does not emit, with the reason.
NOT_BUILT = {
    "fusion": "made by the compiler's fusion pass, not by clients",
    "domain": "sharding-propagation marker inserted by XLA passes",
    "dynamic-reshape": "dynamic shapes are out of scope for the builder",
    "set-dimension-size": "dynamic shapes are out of scope for the builder",
    "ragged-dot": "XLA 2025 op; no client API in the builder yet",
    "scaled-dot": "XLA 2025 op; no client API in the builder yet",
    "ragged-all-to-all": "no builder API yet (6-operand ragged exchange)",
    "copy-start": "layout/memory-space prefetch made by XLA passes",
    "copy-done": "layout/memory-space prefetch made by XLA passes",
    "rng-get-and-update-state": "made by XLA's RNG expansion passes",
    "async-update": "XLA passes insert updates; clients start and finish",
    "scan": "XLA 2025 op; not modelled by shape inference",
    "shuffle": "XLA 2025 op; not modelled by shape inference",
    "collective-reduce": "XLA 2025 op; not modelled by shape inference",
}


def text(op) -> str:
    return op.shape.to_text()


def record(module):
    """Collect the opcodes built; the module must verify, and its text must parse back
    identically (our parser) and be accepted by XLA's parser."""
    BUILT_OPCODES.update(i.opcode for i in module.all_instructions())
    xladist.verify(module)
    check_text(module)
    return module


def test_shaping_ops():
    b = XlaBuilder("shaping")
    x = b.parameter(0, "f32[2,3]")
    v = b.parameter(1, "f32[3]")
    i = b.parameter(2, "s32[]")
    assert text(b.broadcast(v, [2])) == "f32[2,3]{1,0}"
    assert b.broadcast(v, [4, 2]).instruction.attrs["dimensions"] == (2,)
    assert text(b.reshape(x, [3, -1])) == "f32[3,2]{1,0}"
    r = b.reshape(x, [6], dimensions=(1, 0))  # transpose first, then flatten
    assert r.instruction.operands[0].opcode == "transpose"
    assert text(b.transpose(x, [1, 0])) == "f32[3,2]{1,0}"
    assert text(x.T) == "f32[3,2]{1,0}"
    assert b.rev(x, [1]).instruction.attrs["dimensions"] == (1,)
    big = b.parameter(3, "f32[4,6]")
    s = b.slice(big, [1, 0], [3, 6], [1, 2])          # rows 1..2, columns 0,2,4
    assert text(s) == "f32[2,3]{1,0}"
    assert s.instruction.attrs["slice"].to_text() == "{[1:3:1], [0:6:2]}"
    assert text(b.slice_in_dim(big, 2, 4, dimno=1)) == "f32[4,2]{1,0}"
    ds = b.dynamic_slice(big, [1, i], [2, 2])
    assert text(ds) == "f32[2,2]{1,0}" and len(ds.instruction.operands) == 3
    assert text(b.dynamic_update_slice(big, ds, [i, 0])) == "f32[4,6]{1,0}"
    top = b.parameter(4, "f32[1,3]")
    assert text(b.concatenate([x, top], 0)) == "f32[3,3]{1,0}"
    # pad: dim0 1+2+0, dim1 0+3+2+(3-1)*1 interior
    p = b.pad(x, 0.0, [(1, 0), (0, 2, 1)])
    assert text(p) == "f32[3,7]{1,0}" and p.instruction.attrs["padding"].to_text() == "1_0_0x0_2_1"
    io = b.iota("s32", [2, 3], 1)
    assert text(io) == "s32[2,3]{1,0}" and io.instruction.attrs == {"iota_dimension": 1}
    assert text(b.iota("f32", 5)) == "f32[5]{0}"
    table = b.parameter(5, "f32[5,3]")
    idx = b.parameter(6, "s32[2,1]")
    g = b.gather(table, idx, offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,),
                 index_vector_dim=1, slice_sizes=(1, 3))
    assert text(g) == "f32[2,3]{1,0}"
    assert "operand_batching_dims" not in g.instruction.attrs
    sc = b.scatter(table, idx, g, "add", update_window_dims=(1,), inserted_window_dims=(0,),
                   scatter_dims_to_operand_dims=(0,), index_vector_dim=1)
    assert text(sc) == "f32[5,3]{1,0}"
    assert sc.instruction.attrs["to_apply"].root.opcode == "add"
    assert text(b.get_dimension_size(x, 1)) == "s32[]"
    with pytest.raises(BuilderError, match="only one size may be -1"):
        b.reshape(x, [-1, -1])
    record(b.build(b.tuple(x, p)))


def test_conversions():
    b = XlaBuilder("conv")
    x = b.parameter(0, "f32[2]")
    assert text(b.convert(x, "s32")) == "s32[2]{0}"
    assert text(x.astype(np.float16)) == "f16[2]{0}"
    bytes_ = b.bitcast_convert(x, "u8")         # 32 -> 8 bits adds a minor dim of 4
    assert text(bytes_) == "u8[2,4]{1,0}"
    assert text(b.bitcast_convert(bytes_, "f32")) == "f32[2]{0}"
    assert text(b.bitcast_convert(x, "s32")) == "s32[2]{0}"
    rp = b.reduce_precision(x, 5, 10)
    assert rp.instruction.attrs == {"exponent_bits": 5, "mantissa_bits": 10}
    assert text(b.bitcast(x, "s32[2]")) == "s32[2]{0}"
    sc = b.stochastic_convert(x, b.parameter(1, "u32[2]"), "s8")
    assert text(sc) == "s8[2]{0}"
    cl = b.clamp(0.0, x, 1.0)
    assert [o.opcode for o in cl.instruction.operands] == ["broadcast", "parameter", "broadcast"]
    record(b.build([rp, sc, cl]))


UNARY_SAMPLE = ["abs", "neg", "exp", "log1p", "tanh", "sqrt", "logistic", "sin", "floor",
                "round", "is_finite", "erf", "exponential_minus_one", "negate"]


@pytest.mark.parametrize("method", UNARY_SAMPLE)
def test_unary_family(method):
    b = XlaBuilder("u")
    x = b.parameter(0, "f32[3]")
    y = getattr(b, method)(x)
    expect = "pred[3]{0}" if method == "is_finite" else "f32[3]{0}"
    assert text(y) == expect
    record(b.build(y))


@pytest.mark.parametrize("newer", [False, True], ids=["classic", "xla2025"])
def test_all_elementwise_opcodes_are_reachable(newer):
    from xladist.builder import BINARY_OPS, UNARY_OPS
    unary = {k: v for k, v in UNARY_OPS.items() if (v in NEWER_THAN_INSTALLED_XLA) == newer}
    binary = {k: v for k, v in BINARY_OPS.items() if (v in NEWER_THAN_INSTALLED_XLA) == newer}
    b = XlaBuilder("all")
    f = b.parameter(0, "f32[2]")
    s = b.parameter(1, "s32[2]")
    c = b.parameter(2, "c64[2]")
    p = b.parameter(3, "pred[2]")
    u = b.parameter(4, "u32[2]")
    outs = []
    for method, opcode in unary.items():
        if opcode in ("not",):
            arg = p
        elif opcode in ("popcnt", "count-leading-zeros"):
            arg = s
        elif opcode in ("real", "imag"):
            arg = c
        else:
            arg = f
        outs.append(getattr(b, method)(arg))
        assert outs[-1].instruction.opcode == opcode
    for method, opcode in binary.items():
        if opcode in ("and", "or", "xor"):
            args = (p, p)
        elif opcode.startswith("shift") or opcode == "mulhi":
            args = (s, s)
        else:
            args = (f, f)
        outs.append(getattr(b, method)(*args))
        assert outs[-1].instruction.opcode == opcode
    assert text(b.complex(f, f)) == "c64[2]{0}"
    assert (s >> 1).instruction.opcode == "shift-right-arithmetic"
    assert (u >> 1).instruction.opcode == "shift-right-logical"
    assert (~p).instruction.opcode == "not"
    assert (f @ f).instruction.opcode == "dot"
    record(b.build(outs))


def test_linalg_ops():
    b = XlaBuilder("linalg")
    a = b.parameter(0, "f32[2,3]")
    w = b.parameter(1, "f32[3,4]")
    d = b.dot(a, w)
    assert text(d) == "f32[2,4]{1,0}"
    assert d.instruction.attrs == {"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)}
    x = b.parameter(2, "bf16[5,2,3]")
    y = b.parameter(3, "bf16[5,3,4]")
    bd = b.dot_general(x, y, (((2,), (1,)), ((0,), (0,))), precision="highest",
                       preferred_element_type="f32")
    assert text(bd) == "f32[5,2,4]{2,1,0}"
    assert bd.instruction.attrs["operand_precision"] == ("highest", "highest")
    assert bd.instruction.attrs["lhs_batch_dims"] == (0,)
    img = b.parameter(4, "f32[1,2,5,5]")      # NCHW
    k = b.parameter(5, "f32[3,2,3,3]")        # OIHW
    same = b.conv_general_dilated(img, k, (1, 1), "SAME")
    assert text(same) == "f32[1,3,5,5]{3,2,1,0}"
    assert same.instruction.attrs["dim_labels"].to_text() == "bf01_oi01->bf01"
    assert same.instruction.attrs["window"].to_text() == "{size=3x3 pad=1_1x1_1}"
    valid = b.conv(img, k, (2, 2))            # (5-3)//2+1 = 2
    assert text(valid) == "f32[1,3,2,2]{3,2,1,0}"
    nhwc = b.parameter(6, "f32[1,5,5,2]")
    hwio = b.parameter(7, "f32[3,3,2,3]")
    c2 = b.conv_general_dilated(nhwc, hwio, (1, 1), [(0, 0), (0, 0)],
                                dimension_numbers=("NHWC", "HWIO", "NHWC"))
    assert c2.instruction.attrs["dim_labels"].to_text() == "b01f_01io->b01f"
    assert text(c2) == "f32[1,3,3,3]{3,2,1,0}"
    sig = b.parameter(8, "c64[8]")
    assert text(b.fft(sig, "fft", [8])) == "c64[8]{0}"
    real = b.parameter(9, "f32[8]")
    assert text(b.fft(real, "RFFT", [8])) == "c64[5]{0}"   # 8//2+1
    spd = b.parameter(10, "f32[3,3]")
    ch = b.cholesky(spd)
    assert ch.instruction.attrs == {"lower": True}
    rhs = b.parameter(11, "f32[3,2]")
    ts = b.triangular_solve(spd, rhs, lower=True)
    assert text(ts) == "f32[3,2]{1,0}"
    assert ts.instruction.attrs == {"left_side": True, "lower": True,
                                    "transpose_a": "NO_TRANSPOSE"}
    xs = b.parameter(12, "f32[2,3,4,4]")
    scale = b.parameter(13, "f32[3]")
    bn = b.batch_norm_training(xs, scale, scale, 1e-3, 1)
    assert text(bn) == "(f32[2,3,4,4]{3,2,1,0}, f32[3]{0}, f32[3]{0})"
    bi = b.batch_norm_inference(xs, scale, scale, scale, scale, 1e-3, 1)
    bg = b.batch_norm_grad(xs, scale, scale, scale, xs, 1e-3, 1)
    assert text(bg) == text(bn)
    record(b.build([d, bd, same, valid, c2, ch, ts, bn, bi, bg]))


def test_reductions():
    b = XlaBuilder("red")
    x = b.parameter(0, "f32[2,3]")
    assert text(b.reduce_sum(x, [1])) == "f32[2]{0}"
    assert text(b.reduce_max(x)) == "f32[]"
    n = b.parameter(1, "s32[2,3]")
    assert text(b.reduce_min(n, [0])) == "s32[3]{0}"

    def argmax(sb, best, best_i, v, vi):
        take = sb.gt(v, best)
        return [sb.select(take, v, best), sb.select(take, vi, best_i)]

    am = b.reduce([x, b.iota("s32", [2, 3], 1)], [-np.inf, 0], argmax, [1])
    assert text(am) == "(f32[2]{0}, s32[2]{0})"
    comp = am.instruction.attrs["to_apply"]
    assert [p.shape.to_text() for p in comp.parameters] == ["f32[]", "s32[]", "f32[]", "s32[]"]
    img = b.parameter(2, "f32[4,4]")
    pool = b.reduce_window(img, -np.inf, "max", (2, 2), (2, 2))
    assert text(pool) == "f32[2,2]{1,0}"
    assert pool.instruction.attrs["window"].to_text() == "{size=2x2 stride=2x2}"
    same = b.reduce_window(img, 0.0, "add", (3, 3), (1, 1), "SAME")
    assert text(same) == "f32[4,4]{1,0}"
    src = b.parameter(3, "f32[2,2]")
    sas = b.select_and_scatter(img, "ge", (2, 2), (2, 2), "VALID", src, 0.0)
    assert text(sas) == "f32[4,4]{1,0}"
    assert sas.instruction.attrs["select"].root.attrs["direction"] == "GE"
    m = b.map([x, x], lambda sb, a, c: sb.max(a, c))
    assert text(m) == "f32[2,3]{1,0}" and m.instruction.attrs["dimensions"] == (0, 1)
    srt = b.sort(x)
    assert text(srt) == "f32[2,3]{1,0}" and srt.instruction.attrs["dimensions"] == (1,)
    kv = b.sort([x, n], dimension=0, is_stable=True)
    assert text(kv) == "(f32[2,3]{1,0}, s32[2,3]{1,0})"
    assert len(kv.instruction.attrs["to_apply"].parameters) == 4
    tk = b.top_k(b.parameter(4, "f32[3,5]"), 2)
    assert text(tk) == "(f32[3,2]{1,0}, s32[3,2]{1,0})"
    with pytest.raises(BuilderError, match="unknown reducer"):
        b.reduce(x, 0.0, "median", [0])
    record(b.build([am, pool, same, sas, m, srt, kv, tk]))


def test_control_flow_and_calls():
    b = XlaBuilder("ctl")
    x = b.parameter(0, "f32[3]")
    n = b.parameter(1, "s32[]")
    # while with Python callables over a (counter, value) state
    loop = b.while_loop(lambda sb, i, v: sb.lt(i, 10),
                        lambda sb, i, v: [i + 1, v * 2.0],
                        [b.constant_r0(0, "s32"), x])
    assert text(loop) == "(s32[], f32[3]{0})"
    cond = loop.instruction.attrs["condition"]
    assert cond.root.opcode == "compare" and cond.parameters[0].shape.is_tuple
    i_final, v_final = loop
    (v_fori,) = b.fori_loop(0, n, lambda sb, i, v: v + 1.0, [x])
    assert text(v_fori) == "f32[3]{0}"
    # prebuilt computation for call
    sub = b.create_subbuilder("square")
    p = sub.parameter(0, "f32[3]")
    sq = sub.build(p * p)
    called = b.call(sq, [x])
    assert called.instruction.attrs["to_apply"] is sq
    pred = b.gt(n, 0)
    cnd = b.conditional(pred, [lambda sb, v: sb.neg(v), lambda sb, v: v], x)
    assert set(cnd.instruction.attrs) == {"true_computation", "false_computation"}
    sw = b.conditional(n, [lambda sb, v: v, sq, lambda sb, v: v + v], x)
    assert len(sw.instruction.attrs["branch_computations"]) == 3
    with pytest.raises(BuilderError, match="exactly 2 branches"):
        b.conditional(pred, [sq, sq, sq], x)
    cc = b.custom_call("my_target", [x], "f32[3]", has_side_effect=True,
                       backend_config="cfg", api_version="typed_ffi")
    assert cc.instruction.backend_config == '"cfg"'
    assert cc.instruction.attrs["api_version"] == "API_VERSION_TYPED_FFI"
    ob = b.optimization_barrier(b.tuple(x, n))
    assert text(ob) == "(f32[3]{0}, s32[])"
    m = record(b.build([i_final, v_final, v_fori, called, cnd, sw, cc, ob]))
    names = [c.name for c in m.computations]
    assert names[-1] == "ctl" and len(set(names)) == len(names)
    # callees first: every called computation appears before its caller
    pos = {c.name: k for k, c in enumerate(m.computations)}
    for c in m.computations:
        for callee in c.called_computations():
            assert pos[callee.name] < pos[c.name]


def test_tokens_feeds_channels_rng():
    b = XlaBuilder("io")
    tok = b.after_all()
    assert text(tok) == "token[]" and tok.instruction.operands == []
    feed = b.infeed("f32[4,2]", tok)
    assert text(feed) == "(f32[4,2]{1,0}, token[])"
    data, tok2 = feed
    out_tok = b.outfeed(data, tok2, config="loss")
    assert text(out_tok) == "token[]"
    assert out_tok.instruction.attrs["outfeed_shape"].to_text() == "f32[4,2]{1,0}"
    dep = b.add_dependency(data, out_tok)
    assert text(dep) == "f32[4,2]{1,0}"
    ch = b.next_channel_id()
    snd = b.send(data, tok, ch, source_target_pairs=[(0, 1)])
    assert text(snd) == "(f32[4,2]{1,0}, u32[], token[])"
    assert snd.instruction.frontend_attributes == {
        "_xla_send_recv_source_target_pairs": "{{0,1}}"}
    sd = b.send_done(snd)
    rcv = b.recv("f32[4,2]", tok, ch, source_target_pairs=[(0, 1)])
    rd = b.recv_done(rcv)
    assert text(rd) == "(f32[4,2]{1,0}, token[])"
    assert rd.instruction.attrs["channel_id"] == ch == sd.instruction.attrs["channel_id"]
    joined = b.after_all(sd, rd[1])
    with pytest.raises(BuilderError, match="channel_id"):
        b.send(data, tok, None)
    u = b.rng_uniform(0.0, 1.0, [2, 2])
    assert text(u) == "f32[2,2]{1,0}" and u.instruction.attrs["distribution"] == "rng_uniform"
    nrm = b.rng_normal(0.0, 1.0, [3])
    state = b.parameter(0, "u64[2]")
    bits = b.rng_bit_generator("three_fry", state, "u32[4]")
    assert text(bits) == "(u64[2]{0}, u32[4]{0})"
    record(b.build([joined, dep, u, nrm, bits]))


def test_collectives_and_async_pairs():
    b = XlaBuilder("coll")
    x = b.parameter(0, "f32[4,2]")
    ar = b.all_reduce(x, "add", replica_groups=[[0, 1], [2, 3]])
    assert ar.instruction.attrs["replica_groups"] == ReplicaGroups(((0, 1), (2, 3)))
    assert ar.instruction.attrs["to_apply"].root.opcode == "add"
    two = b.all_reduce([x, b.neg(x)], "max")
    assert text(two) == "(f32[4,2]{1,0}, f32[4,2]{1,0})"
    ag = b.all_gather(x, 0, replica_groups=[[0, 1, 2, 3]])
    assert text(ag) == "f32[16,2]{1,0}"
    ag2 = b.all_gather(x, 1, replica_groups=[[0, 1, 2, 3]], channel_id=1,
                       use_global_device_ids=True)
    assert text(ag2) == "f32[4,8]{1,0}"
    assert ag2.instruction.attrs["use_global_device_ids"] is True
    rs = b.reduce_scatter(x, "add", 0, shard_count=4)
    assert text(rs) == "f32[1,2]{1,0}"
    pairs = [[0, 1], [2, 3]]
    a2a = b.all_to_all(x, 0, replica_groups=pairs)
    assert text(a2a) == "f32[4,2]{1,0}"
    a2a_t = b.all_to_all([x, x], replica_groups=pairs)
    assert text(a2a_t) == "(f32[4,2]{1,0}, f32[4,2]{1,0})"
    cp = b.collective_permute(x, [(0, 1), (1, 0)])
    assert cp.instruction.attrs["source_target_pairs"] == ((0, 1), (1, 0))
    cb = b.collective_broadcast(x, pairs)
    ars = b.all_reduce_start(x)
    ard = b.async_done(ars)
    ags = b.all_gather_start(x, 0, replica_groups=pairs)
    assert text(ags) == "(f32[4,2]{1,0}, f32[8,2]{1,0})"
    agd = b.all_gather_done(ags)
    cps = b.collective_permute_start(x, [(0, 1)])
    assert text(cps) == "(f32[4,2]{1,0}, f32[4,2]{1,0}, u32[], u32[])"
    cpd = b.collective_permute_done(cps)
    a2s = b.all_to_all_start(x, 0, replica_groups=pairs)
    assert text(a2s) == "((f32[4,2]{1,0}), f32[4,2]{1,0})"
    wrapped = a2s.instruction.attrs["calls"]
    assert wrapped.is_async_wrapper and wrapped.root.opcode == "all-to-all"
    a2d = b.async_done(a2s)
    assert text(a2d) == "f32[4,2]{1,0}" and a2d.instruction.attrs["calls"] is wrapped
    rss = b.reduce_scatter_start(x, "add", 0, replica_groups=pairs)
    rsd = b.async_done(rss)
    assert text(rsd) == "f32[2,2]{1,0}"
    rid, pid = b.replica_id(), b.partition_id()
    assert text(rid) == text(pid) == "u32[]"
    with pytest.raises(BuilderError, match="shard_count"):
        b.all_gather(x, 0)
    with pytest.raises(BuilderError, match="explicit replica_groups"):
        b.all_reduce(x, channel_id=2, use_global_device_ids=True)
    with pytest.raises(BuilderError, match="needs a channel_id"):
        b.all_reduce(x, use_global_device_ids=True)
    # Cross-replica-and-partition groups span every partition: the size needs shard_count.
    with pytest.raises(BuilderError, match="span every partition"):
        b.all_gather(x, 0, replica_groups=pairs, channel_id=3)
    with pytest.raises(BuilderError, match="not an async start"):
        b.async_done(x)
    record(b.build([ar, two, ag, ag2, rs, a2a, a2a_t, cp, cb, ard, agd, cpd, a2d, rsd,
                    rid, pid], replica_count=4))


def _run_builder_tests() -> None:
    """Run every other test of this file once more (each parametrization), so that the
    opcodes they build are in BUILT_OPCODES whatever ran before."""
    me = test_every_opcode_is_built_or_listed
    for name, fn in list(globals().items()):
        if not name.startswith("test_") or fn is me:
            continue
        params = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        if not params:
            fn()
            continue
        assert len(params) == 1 and "," not in params[0].args[0], \
            f"{name}: teach _run_builder_tests its parametrization"
        for value in params[0].args[1]:
            fn(value)


def test_every_opcode_is_built_or_listed():
    """The union of what the tests above build covers the opcode table. They run again
    here: the verdict must not depend on which tests ran before (alone, this test used to
    skip; after a subset of the file, it failed)."""
    BUILT_OPCODES.clear()
    _run_builder_tests()
    missing = set(OPCODES) - BUILT_OPCODES - set(NOT_BUILT)
    assert not missing, f"opcodes with no builder test and no reason: {sorted(missing)}"
    stale = set(NOT_BUILT) & BUILT_OPCODES
    assert not stale, f"listed as not built but built: {sorted(stale)}"
