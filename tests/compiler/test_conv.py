"""The cpu backend's convolution library thunk (compiler/library/core.py) on every layout,
stride, padding, dilation and reversal case of numerics/test_convolution, against the
naive loop reference: the shifted-matmul path (small kernels) and im2col alike."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from tests.interpreter.support import instr, shape_of
from tests.interpreter.test_convolution import CASES, W, naive_conv
from xladist.compiler.library import core as library
from xladist.hlo.attrs import ConvDimensionNumbers


@pytest.mark.parametrize("taps", [library._SHIFTED_MAX_TAPS, 0], ids=["shifted", "im2col"])
@pytest.mark.parametrize("name,labels,ls,rs_,wd,G,B", CASES, ids=[c[0] for c in CASES])
def test_cpu_convolution_matches_naive_reference(name, labels, ls, rs_, wd, G, B, taps,
                                                 monkeypatch):
    monkeypatch.setattr(library, "_SHIFTED_MAX_TAPS", taps)
    dn = ConvDimensionNumbers.from_text(labels)
    window = W(*wd)
    rng = np.random.RandomState(zlib.crc32(name.encode()))
    lhs, rhs = rng.randn(*ls), rng.randn(*rs_)
    ref = naive_conv(lhs, rhs, dn, window.dims, G, B)
    attrs = {"dim_labels": dn, "feature_group_count": G, "batch_group_count": B}
    if wd:
        attrs["window"] = window
    ins = instr("convolution", shape_of(ref), [shape_of(lhs), shape_of(rhs)], **attrs)
    out = np.full(ref.shape, np.nan)
    library.LIBRARY_THUNKS["convolution"](ins, [lhs, rhs], [out])
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10)
