"""convolution against a naive loop reference written from the operation semantics,
and against jax.lax.conv_general_dilated when jax imports."""

from __future__ import annotations

import itertools
import zlib

import ml_dtypes
import numpy as np
import pytest

from tests.interpreter.support import instr, run, shape_of
from xladist.hlo.attrs import ConvDimensionNumbers, Window, WindowDim
from xladist.interpreter.convolution import conv_general
from tests.optional import need_jax


def naive_conv(lhs, rhs, dn, wdims, G=1, B=1, acc=np.float64):
    """Per output element: sum over input features of the group and kernel taps; a tap
    reads the input at (out*stride + tap*rhs_dil - pad_lo) / lhs_dil when that is an
    integer inside the input (else it is padding or a dilation hole: zero)."""
    x = np.moveaxis(lhs, [dn.input_batch, dn.input_feature] + list(dn.input_spatial),
                    range(lhs.ndim))
    k = np.moveaxis(rhs, [dn.kernel_output_feature, dn.kernel_input_feature]
                    + list(dn.kernel_spatial), range(rhs.ndim))
    N = x.shape[0]
    O, Cg = k.shape[:2]
    ins, ks = x.shape[2:], k.shape[2:]
    out_sp = []
    for i, w in enumerate(wdims):
        padded = (ins[i] - 1) * w.base_dilation + 1 + w.padding_low + w.padding_high
        span = (ks[i] - 1) * w.window_dilation + 1
        out_sp.append(max(0, (padded - span) // w.stride + 1) if padded >= span else 0)
    Nb, Og = N // B, O // B
    out = np.zeros((Nb, O) + tuple(out_sp), acc)
    for n, o in itertools.product(range(Nb), range(O)):
        bgroup, ogf = o // Og, O // G
        fgroup = o // ogf
        for sp in itertools.product(*[range(s) for s in out_sp]):
            total = acc(0)
            for c in range(Cg):
                for tap in itertools.product(*[range(s) for s in ks]):
                    src = []
                    for i, w in enumerate(wdims):
                        p = sp[i] * w.stride + tap[i] * w.window_dilation - w.padding_low
                        if p % w.base_dilation or not 0 <= p // w.base_dilation < ins[i]:
                            break
                        src.append(p // w.base_dilation)
                    else:
                        kt = tuple(ks[i] - 1 - t if w.window_reversal else t
                                   for i, (t, w) in enumerate(zip(tap, wdims)))
                        xv = x[(bgroup * Nb + n, fgroup * Cg + c) + tuple(src)]
                        total += acc(xv) * acc(k[(o, c) + kt])
            out[(n, o) + sp] = total
    perm = [0] * out.ndim
    perm[dn.output_batch], perm[dn.output_feature] = 0, 1
    for i, d in enumerate(dn.output_spatial):
        perm[d] = 2 + i
    return out.transpose(perm)


def W(*dims):
    return Window(tuple(WindowDim(**d) for d in dims))


CASES = [
    # name, labels, lhs shape, rhs shape, window dims (kwargs), G, B
    ("2d_basic", "b01f_01io->b01f", (2, 5, 5, 3), (3, 3, 3, 4),
     [{"size": 3}, {"size": 3}], 1, 1),
    ("2d_stride_pad", "bf01_oi01->bf01", (1, 2, 6, 7), (3, 2, 3, 2),
     [{"size": 3, "stride": 2, "padding_low": 1, "padding_high": 1},
      {"size": 2, "stride": 3, "padding_low": 0, "padding_high": 2}], 1, 1),
    ("2d_negative_pad", "b01f_01io->b01f", (1, 7, 6, 2), (2, 2, 2, 2),
     [{"size": 2, "padding_low": -1, "padding_high": -2}, {"size": 2, "padding_low": 2,
                                                          "padding_high": -1}], 1, 1),
    ("2d_lhs_rhs_dilation", "bf01_oi01->bf01", (2, 2, 4, 5), (2, 2, 2, 3),
     [{"size": 2, "base_dilation": 2, "padding_low": 1, "padding_high": 1},
      {"size": 3, "window_dilation": 2}], 1, 1),
    ("2d_reversal", "b01f_01io->b01f", (1, 4, 4, 1), (2, 3, 1, 1),
     [{"size": 2, "window_reversal": True}, {"size": 3, "window_reversal": True}], 1, 1),
    ("feature_groups", "b01f_01io->b01f", (2, 4, 4, 6), (2, 2, 2, 9),
     [{"size": 2}, {"size": 2}], 3, 1),
    ("depthwise", "bf01_oi01->bf01", (1, 4, 5, 5), (8, 1, 3, 3),
     [{"size": 3, "padding_low": 1, "padding_high": 1}, {"size": 3, "padding_low": 1,
                                                        "padding_high": 1}], 4, 1),
    ("batch_groups", "bf01_oi01->bf01", (4, 2, 5, 5), (6, 2, 2, 2),
     [{"size": 2}, {"size": 2, "stride": 2}], 1, 2),
    ("odd_labels", "f01b_i10o->0bf1", (3, 5, 4, 2), (3, 2, 3, 4),
     [{"size": 3}, {"size": 2}], 1, 1),
    ("1d", "bf0_oi0->bf0", (2, 3, 9), (4, 3, 3), [{"size": 3, "stride": 2, "padding_low": 2}], 1, 1),
    ("0d", "bf_oi->bf", (3, 4), (5, 4), [], 1, 1),
    ("3d", "b012f_012io->b012f", (1, 4, 3, 4, 2), (2, 2, 2, 2, 3),
     [{"size": 2}, {"size": 2, "padding_low": 1}, {"size": 2, "stride": 2}], 1, 1),
    ("window_larger_than_input", "bf0_oi0->bf0", (1, 1, 2), (1, 1, 4), [{"size": 4}], 1, 1),
]


@pytest.mark.parametrize("name,labels,ls,rs_,wd,G,B", CASES, ids=[c[0] for c in CASES])
def test_convolution_matches_naive_reference(name, labels, ls, rs_, wd, G, B):
    dn = ConvDimensionNumbers.from_text(labels)
    window = W(*wd)
    rng = np.random.RandomState(zlib.crc32(name.encode()))
    lhs = rng.randn(*ls)
    rhs = rng.randn(*rs_)
    ref = naive_conv(lhs, rhs, dn, window.dims, G, B)
    attrs = {"dim_labels": dn, "feature_group_count": G, "batch_group_count": B}
    if wd:
        attrs["window"] = window
    ins = instr("convolution", shape_of(ref), [shape_of(lhs), shape_of(rhs)], **attrs)
    got = run(ins, lhs, rhs)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


def test_integer_convolution_is_exact_and_wraps():
    dn = ConvDimensionNumbers.from_text("bf0_oi0->bf0")
    lhs = np.array([[[2**30, 2**30, 1]]], np.int32)
    rhs = np.array([[[2, 2]]], np.int32)
    got = conv_general(lhs, rhs, dn, W({"size": 2}), result_dtype=np.int32)
    # 2*2**30 + 2*2**30 = 2**32 -> wraps to 0; 2*2**30 + 2 = 2**31 + 2 -> wraps negative.
    np.testing.assert_array_equal(got, [[[0, -2**31 + 2]]])
    s8 = conv_general(np.full((1, 1, 3), 127, np.int8), np.full((1, 1, 3), 127, np.int8), dn,
                      W({"size": 3}), result_dtype=np.int32)
    assert s8.dtype == np.int32 and s8[0, 0, 0] == 3 * 127 * 127


def test_complex_convolution():
    dn = ConvDimensionNumbers.from_text("bf0_oi0->bf0")
    rng = np.random.RandomState(7)
    lhs = rng.randn(1, 2, 6) + 1j * rng.randn(1, 2, 6)
    rhs = rng.randn(3, 2, 2) + 1j * rng.randn(3, 2, 2)
    window = W({"size": 2, "padding_low": 1})
    ref = naive_conv(lhs, rhs, dn, window.dims, acc=np.complex128)
    np.testing.assert_allclose(conv_general(lhs, rhs, dn, window), ref, rtol=1e-12)


def test_bf16_convolution_accumulates_in_f32():
    bf16 = np.dtype(ml_dtypes.bfloat16)
    dn = ConvDimensionNumbers.from_text("bf0_oi0->bf0")
    lhs = np.array([[[1.0] + [2.0**-8] * 256]], bf16)
    rhs = np.ones((1, 1, 257), bf16)
    got = conv_general(lhs, rhs, dn, W({"size": 257}), result_dtype=bf16)
    assert got.dtype == bf16 and float(got.reshape(-1)[0]) == 2.0


@pytest.mark.parametrize("name,labels,ls,rs_,wd,G,B", CASES[:9], ids=[c[0] for c in CASES[:9]])
def test_convolution_matches_jax(name, labels, ls, rs_, wd, G, B):
    need_jax()
    from jax import lax
    dn = ConvDimensionNumbers.from_text(labels)
    window = W(*wd)
    rng = np.random.RandomState(11)
    lhs = rng.randn(*ls).astype(np.float32)
    rhs = rng.randn(*rs_).astype(np.float32)
    kernel = rhs
    for i, w in enumerate(window.dims):
        if w.window_reversal:  # jax has no reversal flag: flip the kernel ourselves
            kernel = np.flip(kernel, dn.kernel_spatial[i])
    lhs_spec = labels.split("_")[0]
    rhs_spec, out_spec = labels.split("_")[1].split("->")
    trans = str.maketrans({"b": "N", "f": "C", "0": "H", "1": "W"})
    ktrans = str.maketrans({"o": "O", "i": "I", "0": "H", "1": "W"})
    ref = lax.conv_general_dilated(
        lhs, np.ascontiguousarray(kernel), [w.stride for w in window.dims],
        [(w.padding_low, w.padding_high) for w in window.dims],
        lhs_dilation=[w.base_dilation for w in window.dims],
        rhs_dilation=[w.window_dilation for w in window.dims],
        dimension_numbers=(lhs_spec.translate(trans), rhs_spec.translate(ktrans),
                           out_spec.translate(trans)),
        feature_group_count=G, batch_group_count=B, precision="highest")
    got = conv_general(lhs, rhs, dn, window, G, B)
    np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-4, atol=1e-4)
