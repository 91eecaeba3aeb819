"""Shaping ops and layouts: the operation-semantics examples, worked by hand."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.interpreter.ir import Comp, RawComp, S, op1, run
from xladist.errors import UnsupportedError
from xladist.hlo.attrs import Literal, PaddingConfig, SliceSpec
from xladist.semantics import layout
from xladist.semantics.values import TOKEN

X23 = np.array([[1, 2, 3], [4, 5, 6]], np.int32)


def pad(x, value, config, out):
    c = Comp()
    p, v = c.param(S(f"s32[{','.join(map(str, x.shape))}]")), c.param("s32[]")
    root = c.op("pad", out, p, v, padding=PaddingConfig(tuple(config)))
    return run(c.module(root), x, np.array(value, np.int32))


def test_pad_edges_interior_and_negative():
    got = pad(X23, 0, [(1, 0, 1), (-1, 2, 0)], "s32[4,4]")
    assert got.tolist() == [[0, 0, 0, 0], [2, 3, 0, 0], [0, 0, 0, 0], [5, 6, 0, 0]]
    v = np.array([1, 2, 3], np.int32)
    c = Comp()
    p, pv = c.param("s32[3]"), c.param("s32[]")
    m = c.module(c.op("pad", "s32[3]", p, pv, padding=PaddingConfig(((-2, 0, 1),))))
    assert run(m, v, np.array(9, np.int32)).tolist() == [2, 9, 3]  # [1,9,2,9,3] minus 2


def test_pad_with_high_negative_and_empty_operand():
    got = pad(X23, 7, [(0, -1, 0), (2, -2, 1)], "s32[1,5]")
    # dim1: [7,7,1,7,2,7,3] minus the last two -> [7,7,1,7,2]
    assert got.tolist() == [[7, 7, 1, 7, 2]]
    c = Comp()
    p, pv = c.param("s32[0]"), c.param("s32[]")
    m = c.module(c.op("pad", "s32[3]", p, pv, padding=PaddingConfig(((1, 2, 3),))))
    assert run(m, np.zeros(0, np.int32), np.array(4, np.int32)).tolist() == [4, 4, 4]


def test_reverse():
    assert op1("reverse", "s32[2,3]", X23, dimensions=(0, 1)).tolist() == \
        [[6, 5, 4], [3, 2, 1]]
    assert op1("reverse", "s32[2,3]", X23, dimensions=(1,)).tolist() == [[3, 2, 1], [6, 5, 4]]


def test_slice_with_strides():
    x = np.arange(10, dtype=np.int32)
    assert op1("slice", "s32[3]", x, slice=SliceSpec(((2, 9, 3),))).tolist() == [2, 5, 8]
    y = np.arange(20, dtype=np.float32).reshape(4, 5)
    got = op1("slice", "f32[2,2]", y, slice=SliceSpec(((1, 4, 2), (0, 4, 3))))
    assert got.tolist() == [[5, 8], [15, 18]]


def dynamic_slice(x, starts, sizes, out, index_type="s32"):
    c = Comp()
    p = c.param(S(f"s32[{','.join(map(str, x.shape))}]"))
    idx = [c.param(f"{index_type}[]") for _ in starts]
    root = c.op("dynamic-slice", out, p, *idx, dynamic_slice_sizes=tuple(sizes))
    return run(c.module(root), x, *[np.array(s, dtype=np.dtype(
        {"s32": np.int32, "u32": np.uint32, "s64": np.int64}[index_type])) for s in starts])


def test_dynamic_slice_clamps_start_indices():
    a = np.arange(5, dtype=np.int32)
    assert dynamic_slice(a, [2], [2], "s32[2]").tolist() == [2, 3]
    assert dynamic_slice(a, [4], [2], "s32[2]").tolist() == [3, 4]   # clamped to 3
    assert dynamic_slice(a, [-1], [2], "s32[2]").tolist() == [0, 1]  # clamped to 0
    assert dynamic_slice(a, [2**32 - 1], [2], "s32[2]", "u32").tolist() == [3, 4]
    b = np.arange(12, dtype=np.int32).reshape(4, 3)
    assert dynamic_slice(b, [2, 1], [2, 2], "s32[2,2]").tolist() == [[7, 8], [10, 11]]
    assert dynamic_slice(b, [9, -5], [2, 2], "s32[2,2]", "s64").tolist() == [[6, 7], [9, 10]]


def test_dynamic_update_slice_clamps_and_copies():
    a = np.arange(5, dtype=np.int32)
    c = Comp()
    p, u, i = c.param("s32[5]"), c.param("s32[2]"), c.param("s32[]")
    m = c.module(c.op("dynamic-update-slice", "s32[5]", p, u, i))
    upd = np.array([50, 60], np.int32)
    assert run(m, a, upd, np.array(4, np.int32)).tolist() == [0, 1, 2, 50, 60]
    assert run(m, a, upd, np.array(-3, np.int32)).tolist() == [50, 60, 2, 3, 4]
    assert run(m, a, upd, np.array(1, np.int32)).tolist() == [0, 50, 60, 3, 4]
    assert a.tolist() == [0, 1, 2, 3, 4]  # the operand value is never written


def test_concatenate():
    c = Comp()
    a, b = c.param("s32[2,3]"), c.param("s32[2,1]")
    m = c.module(c.op("concatenate", "s32[2,4]", a, b, dimensions=(1,)))
    got = run(m, X23, np.array([[7], [8]], np.int32))
    assert got.tolist() == [[1, 2, 3, 7], [4, 5, 6, 8]]
    c = Comp()
    a, b, d = c.param("s32[1]"), c.param("s32[0]"), c.param("s32[2]")
    m = c.module(c.op("concatenate", "s32[3]", a, b, d, dimensions=(0,)))
    assert run(m, np.array([1], np.int32), np.zeros(0, np.int32),
               np.array([2, 3], np.int32)).tolist() == [1, 2, 3]


def test_broadcast():
    v = np.array([1, 2, 3], np.int32)
    assert op1("broadcast", "s32[2,3]", v, dimensions=(1,)).tolist() == [[1, 2, 3]] * 2
    assert op1("broadcast", "s32[3,2]", v, dimensions=(0,)).tolist() == [[1, 1], [2, 2],
                                                                         [3, 3]]
    assert op1("broadcast", "s32[2,2]", np.array(5, np.int32), dimensions=()).tolist() == \
        [[5, 5], [5, 5]]
    # dimensions={1,0}: operand dim 0 -> result dim 1, so result[i, j] = operand[j, i].
    got = op1("broadcast", "s32[3,2]", X23, dimensions=(1, 0))
    assert got.tolist() == X23.T.tolist()
    got = op1("broadcast", "s32[2,4,3]", X23, dimensions=(0, 2))
    assert (got == X23[:, None, :]).all() and got.shape == (2, 4, 3)


def test_iota_every_type():
    c = Comp()
    m = c.module(c.op("iota", "s32[2,3]", iota_dimension=1))
    assert run(m).tolist() == [[0, 1, 2], [0, 1, 2]]
    c = Comp()
    m = c.module(c.op("iota", "f32[3,2]", iota_dimension=0))
    assert run(m).tolist() == [[0, 0], [1, 1], [2, 2]]
    c = Comp()
    m = c.module(c.op("iota", "u8[300]", iota_dimension=0))
    got = run(m)
    assert got.dtype == np.uint8 and got[255] == 255 and got[256] == 0 and got[299] == 43
    c = Comp()
    m = c.module(c.op("iota", "bf16[300]", iota_dimension=0))
    got = run(m)
    assert got.dtype == ml_dtypes.bfloat16 and float(got[257]) == 256.0  # 257 -> even 256
    c = Comp()
    m = c.module(c.op("iota", "c64[2]", iota_dimension=0))
    assert run(m).tolist() == [0j, 1 + 0j]


def test_transpose_and_reshape_are_logical():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = op1("transpose", "f32[4,2,3]", x, dimensions=(2, 0, 1))
    assert got[3, 1, 2] == x[1, 2, 3]
    got = op1("transpose", S("f32[4,2,3]{0,2,1}"), x, dimensions=(2, 0, 1))
    assert got[3, 1, 2] == x[1, 2, 3]  # a result layout never changes logical values
    assert op1("reshape", "f32[6,4]", x).tolist() == x.reshape(6, 4).tolist()


def bitcast(x, src, dst, raw=False):
    c = RawComp() if raw else Comp()
    p = c.param(S(src))
    return run(c.module(c.op("bitcast", dst, p)), x)


def test_bitcast_reinterprets_the_physical_buffer():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # Column-major source: memory holds x00 x10 x01 x11 x02 x12; read row-major as 3x2.
    assert bitcast(x, "f32[2,3]{0,1}", "f32[3,2]{1,0}").tolist() == [[0, 3], [1, 4], [2, 5]]
    # Row-major source read with a column-major 3x2 layout: result[i, j] = memory[j*3 + i].
    assert bitcast(x, "f32[2,3]{1,0}", "f32[3,2]{0,1}").tolist() == [[0, 3], [1, 4], [2, 5]]
    # Same layout on both sides: a plain row-major reshape.
    assert bitcast(x, "f32[2,3]{1,0}", "f32[3,2]{1,0}").tolist() == [[0, 1], [2, 3], [4, 5]]
    y = np.arange(8, dtype=np.int32).reshape(2, 2, 2)
    got = bitcast(y, "s32[2,2,2]{0,1,2}", "s32[8]{0}")
    assert got.tolist() == [0, 4, 2, 6, 1, 5, 3, 7]  # dim 0 fastest, dim 2 slowest


def test_bitcast_changing_element_type():
    assert bitcast(np.array(1.0, np.float32), "f32[]", "s32[]").tolist() == 0x3F800000
    got = bitcast(np.array([1.0, 2.0], np.float32), "f32[2]{0}", "s16[4]{0}")
    assert got.view(np.uint16).tolist() == [0, 0x3F80, 0, 0x4000]
    with pytest.raises(UnsupportedError, match="changes the buffer size"):
        bitcast(np.zeros(2, np.float32), "f32[2]{0}", "f32[3]{0}", raw=True)


def test_layout_helpers_round_trip():
    x = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    shape = S("s16[2,3,4]{1,2,0}")  # memory: dim 0 slowest, then 2, then 1 fastest
    flat = layout.to_physical(x, shape)
    assert flat.tolist() == x.transpose(0, 2, 1).ravel().tolist()
    assert (layout.from_physical(flat, shape) == x).all()
    data = layout.to_bytes(x, shape)
    assert data == x.transpose(0, 2, 1).astype("<i2").tobytes()
    assert (layout.from_bytes(data, shape) == x).all()
    assert layout.to_bytes(np.array(3, np.int32), S("s32[]")) == b"\x03\x00\x00\x00"


def test_copy_with_a_layout_change_keeps_values():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    c = Comp()
    p = c.param("f32[2,3]{1,0}")
    got = run(c.module(c.op("copy", S("f32[2,3]{0,1}"), p)), x)
    assert (got == x).all()


def test_tuples_tokens_and_identities():
    c = Comp()
    a, b = c.param("s32[2]"), c.param("f32[]")
    t = c.op("tuple", "(s32[2], f32[])", a, b)
    g = c.op("get-tuple-element", "f32[]", t, index=1)
    tok = c.op("after-all", "token[]")
    dep = c.op("add-dependency", "f32[]", g, tok)
    bar = c.op("opt-barrier", "f32[]", dep)
    size = c.op("get-dimension-size", "s32[]", a, dimensions=(0,))
    root = c.op("tuple", "(f32[], s32[], token[])", bar, size, tok)
    out = run(c.module(root), np.array([1, 2], np.int32), np.array(2.5, np.float32))
    assert out[0] == 2.5 and out[1] == 2 and out[2] is TOKEN


def test_constants():
    c = Comp()
    k = c.const(np.array([[1, 2], [3, 4]]), "s8[2,2]")
    assert run(c.module(k)).tolist() == [[1, 2], [3, 4]]
    c = RawComp()  # an elided literal ({...}) has no value: only the parser makes one
    shape = S("f32[20]")
    elided = c.comp.add(type(k)("big", "constant", shape, literal=Literal(shape, None)))
    with pytest.raises(UnsupportedError, match="--xla_dump_large_constants"):
        run(c.module(elided))
