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


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("G,B", [(2, 1), (1, 2)])
def test_grouped_convolution_sum_of_padding_is_plus_zero(backend, G, B):
    """A grouped output that reads only padding sums 0 * w over its taps: +0 (IEEE 754 sums
    from +0; XLA:CPU gives +0). The cpu backend's grouped path gave -0 for a negative weight:
    np.tensordot of a one-element contraction is the bare product (numerics sweep, random
    convolution configurations against XLA:CPU)."""
    import xladist
    lhs_shape, rhs_shape = ("2,1,1" if B == 2 else "1,2,1"), "2,1,1"
    text = (f"HloModule m\nENTRY e {{\n l = f32[{lhs_shape}] parameter(0)\n"
            f" r = f32[{rhs_shape}] parameter(1)\n ROOT c = f32[1,2,1] convolution(l, r), "
            f"window={{size=1 pad=1_-1}}, dim_labels=bf0_oi0->bf0, "
            f"feature_group_count={G}, batch_group_count={B}\n}}\n")
    lhs = np.array([1.0, 2.0], np.float32).reshape([int(d) for d in lhs_shape.split(",")])
    rhs = np.array([-1.0, 3.0], np.float32).reshape([int(d) for d in rhs_shape.split(",")])
    (got,) = xladist.compile(xladist.parse_hlo(text), backend=backend)(lhs, rhs)
    assert got.ravel().tolist() == [0.0, 0.0] and not np.signbit(got).any(), got
