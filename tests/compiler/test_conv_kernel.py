"""The direct f32 convolution kernel (compiler/conv_kernel.py) behind the cpu
backend's convolution thunk: against the naive loop reference on layouts, padding
(negative too), base and window dilation, reversal, 1-D to 3-D and line tails; and
that it is the path these convolutions take."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tests.interpreter.support import instr, shape_of
from tests.interpreter.test_convolution import W, naive_conv
from xladist.compiler import conv_kernel
from xladist.compiler.library import core as library
from xladist.hlo.attrs import ConvDimensionNumbers

NR = conv_kernel.features_per_panel()
pytestmark = pytest.mark.skipif(NR is None, reason="no FMA vectors on this host")
O = 2 * (NR or 1)  # two feature panels

CASES = [
    # name, labels, lhs shape, rhs shape (O given by O), window dims
    # Channels last: written in place into the output. Width 7: one block of MR = 4
    # positions and a tail of 3.
    ("nhwc_same", "b01f_01io->b01f", (2, 5, 7, 3), (3, 3, 3, O),
     [{"size": 3, "padding_low": 1, "padding_high": 1}] * 2),
    ("nchw", "bf01_oi01->bf01", (2, 3, 6, 5), (O, 3, 2, 3), [{"size": 2}, {"size": 3}]),
    ("odd_labels", "f01b_i10o->0bf1", (3, 5, 4, 2), (3, 2, 3, O), [{"size": 3}, {"size": 2}]),
    ("negative_pad", "b01f_01io->b01f", (1, 7, 6, 2), (2, 2, 2, O),
     [{"size": 2, "padding_low": -1, "padding_high": -2},
      {"size": 2, "padding_low": 2, "padding_high": -1}]),
    ("dilations", "b01f_01io->b01f", (2, 4, 5, 2), (2, 3, 2, O),
     [{"size": 2, "base_dilation": 2, "padding_low": 1, "padding_high": 1},
      {"size": 3, "window_dilation": 2}]),
    ("reversal", "b01f_01io->b01f", (1, 4, 6, 1), (2, 3, 1, O),
     [{"size": 2, "window_reversal": True}, {"size": 3, "window_reversal": True}]),
    ("1d", "b0f_0io->b0f", (2, 11, 3), (3, 3, O), [{"size": 3, "padding_low": 2}]),
    ("3d", "b012f_012io->b012f", (1, 4, 3, 6, 2), (2, 2, 2, 2, O),
     [{"size": 2}, {"size": 2, "padding_low": 1}, {"size": 2}]),
]


@pytest.fixture
def kernel_calls(monkeypatch):
    calls = []
    real = conv_kernel.conv_lines

    def spy(*a, **k):
        calls.append(k.get("out", a[4] if len(a) > 4 else None) is not None)
        return real(*a, **k)
    monkeypatch.setattr(conv_kernel, "conv_lines", spy)
    return calls


@pytest.mark.parametrize("name,labels,ls,rs_,wd", CASES, ids=[c[0] for c in CASES])
def test_direct_kernel_matches_naive_reference(name, labels, ls, rs_, wd, kernel_calls):
    dn = ConvDimensionNumbers.from_text(labels)
    window = W(*wd)
    rng = np.random.RandomState(zlib.crc32(name.encode()))
    lhs = rng.randn(*ls).astype(np.float32)
    rhs = rng.randn(*rs_).astype(np.float32)
    ref = naive_conv(lhs, rhs, dn, window.dims)
    attrs = {"dim_labels": dn, "feature_group_count": 1, "batch_group_count": 1,
             "window": window}
    ins = instr("convolution", shape_of(ref.astype(np.float32)),
                [shape_of(lhs), shape_of(rhs)], **attrs)
    out = np.full(ref.shape, np.nan, np.float32)
    library.LIBRARY_THUNKS["convolution"](ins, [lhs, rhs], [out])
    assert kernel_calls, "the convolution did not take the direct kernel"
    # Channels-last outputs are written in place, the others through a copy.
    assert kernel_calls == [labels.split("->")[1] in ("b0f", "b01f", "b012f")]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_other_convolutions_keep_the_blas_path(kernel_calls):
    dn = ConvDimensionNumbers.from_text("b01f_01io->b01f")
    rng = np.random.RandomState(0)
    for lhs, rhs, wd, groups in [
            # stride 2; output features not a multiple of NR; two feature groups
            ((1, 6, 6, 2), (3, 3, 2, O), [{"size": 3, "stride": 2}] * 2, 1),
            ((1, 5, 5, 2), (3, 3, 2, NR + 1), [{"size": 3}] * 2, 1),
            ((1, 5, 5, 4), (3, 3, 2, O), [{"size": 3}] * 2, 2)]:
        x, k = rng.randn(*lhs).astype(np.float32), rng.randn(*rhs).astype(np.float32)
        window = W(*wd)
        ref = naive_conv(x, k, dn, window.dims, groups)
        ins = instr("convolution", shape_of(ref.astype(np.float32)), [shape_of(x), shape_of(k)],
                    dim_labels=dn, feature_group_count=groups, batch_group_count=1,
                    window=window)
        out = np.empty(ref.shape, np.float32)
        library.LIBRARY_THUNKS["convolution"](ins, [x, k], [out])
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert not kernel_calls


def test_kernel_ir_sums_taps_then_features_with_fma():
    # The fixed order every thread count shares: one fused multiply-add per term.
    text = conv_kernel.ir_text(8)
    assert "@llvm.fma.v8f32" in text and "fast" not in text


def test_explain_names_the_direct_kernel_and_its_blocks():
    import xladist
    text = ("HloModule m\nENTRY main {\n x = f32[4,20,20,8] parameter(0)\n"
            f" k = f32[3,3,8,{O}] parameter(1)\n ROOT y = f32[4,20,20,{O}] convolution(x, k), "
            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f\n}\n")
    exe = xladist.compile(xladist.parse_hlo(text), backend="cpu")
    (split,) = [e["split"] for c in exe.program.explain() for e in c["thunks"] if "split" in e]
    # 80 lines of 20 x O x 8 x 9 multiply-adds: under one block of BLOCK_MACS.
    assert split == "one thread: direct kernel (conv_kernel.py), one call"
    (instr,) = [i for i in xladist.parse_hlo(text.replace("4,20,20", "64,60,60")).entry.instructions
                if i.opcode == "convolution"]
    assert conv_kernel.lines_of(instr) == (64 * 60, 60 * O * 8 * 9)
