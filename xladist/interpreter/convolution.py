"""convolution (operation semantics: ConvWithGeneralPadding / ConvGeneralDilated).

Formulation: bring lhs to (batch, feature, spatial...) and rhs to (out_feature,
in_feature, spatial...); dilate the lhs by base_dilation (zeros between elements),
pad it (negative padding crops), then for every kernel position take the strided
slice of the input it touches (im2col) and contract features x kernel positions
with one matmul per feature group. Window reversal flips the kernel along that
spatial dim; window (rhs) dilation spaces the kernel taps.

feature_group_count G: input features and output features split into G
contiguous groups, group g convolves input features [g*C/G, (g+1)*C/G) into
output features [g*O/G, (g+1)*O/G). batch_group_count B: the input batch splits
into B contiguous groups of N/B, output features into B groups; output feature
group g reads input batch group g, and the output batch is N/B.

Accumulation follows dot.py: narrow floats in f32, integers in 64 bits wrapping.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedError
from ..semantics.dtypes import product_operand_dtype
from .dot import from_accumulation, to_accumulation
from .registry import register


def _window_dims(window, n_spatial):
    """(size, stride, pad_lo, pad_hi, lhs_dil, rhs_dil, reversal) per spatial dim."""
    dims = window.dims if window is not None else ()
    out = []
    for i in range(n_spatial):
        if i < len(dims):
            w = dims[i]
            out.append((w.size, w.stride, w.padding_low, w.padding_high, w.base_dilation,
                        w.window_dilation, w.window_reversal))
        else:
            out.append((None, 1, 0, 0, 1, 1, False))
    return out


def dilate_and_pad(x: np.ndarray, axes, lhs_dil, pad_lo, pad_hi, fill=0) -> np.ndarray:
    """Insert (d-1) `fill` elements between neighbours along each axis, then pad;
    negative padding removes elements from that edge."""
    for ax, d, lo, hi in zip(axes, lhs_dil, pad_lo, pad_hi):
        n = x.shape[ax]
        if d > 1 and n > 1:
            shape = list(x.shape)
            shape[ax] = (n - 1) * d + 1
            y = np.full(shape, fill, x.dtype)
            idx = [slice(None)] * x.ndim
            idx[ax] = slice(None, None, d)
            y[tuple(idx)] = x
            x = y
        n = x.shape[ax]
        start, stop = max(-lo, 0), n - max(-hi, 0)
        idx = [slice(None)] * x.ndim
        idx[ax] = slice(start, max(stop, start))
        x = x[tuple(idx)]
        if lo > 0 or hi > 0:
            widths = [(0, 0)] * x.ndim
            widths[ax] = (max(lo, 0), max(hi, 0))
            x = np.pad(x, widths, constant_values=np.asarray(fill, x.dtype))
    return x


def conv_general(lhs, rhs, dnums, window, feature_group_count=1, batch_group_count=1,
                 result_dtype=None) -> np.ndarray:
    """Convolution on numpy arrays with XLA's dimension numbers and window."""
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    result_dtype = np.dtype(result_dtype or lhs.dtype)
    ns = len(dnums.input_spatial)
    x = lhs.transpose((dnums.input_batch, dnums.input_feature) + tuple(dnums.input_spatial))
    k = rhs.transpose((dnums.kernel_output_feature, dnums.kernel_input_feature)
                      + tuple(dnums.kernel_spatial))
    operand_dtype = product_operand_dtype(lhs.dtype, rhs.dtype, result_dtype)
    x = to_accumulation(x, operand_dtype)
    k = to_accumulation(k, operand_dtype)
    wd = _window_dims(window, ns)
    ksz = k.shape[2:]
    for i, (size, *_rest) in enumerate(wd):
        if size is not None and size != ksz[i]:
            raise ValueError(f"window size {size} of spatial dim {i} does not match the "
                             f"kernel's {ksz[i]}")
    # Window reversal flips the kernel taps.
    for i, w in enumerate(wd):
        if w[6]:
            k = np.flip(k, axis=2 + i)
    x = dilate_and_pad(x, range(2, 2 + ns), [w[4] for w in wd], [w[2] for w in wd],
                       [w[3] for w in wd])
    strides = [w[1] for w in wd]
    rdil = [w[5] for w in wd]
    out_sp = []
    for i in range(ns):
        span = (ksz[i] - 1) * rdil[i] + 1 if ksz[i] > 0 else 0
        n = x.shape[2 + i]
        out_sp.append(max(0, (n - span) // strides[i] + 1) if span <= n and ksz[i] > 0 else 0)

    n_batch, c_in = x.shape[:2]
    o_feat, c_per_group = k.shape[:2]
    G, B = feature_group_count, batch_group_count
    if c_in != c_per_group * G:
        raise ValueError(f"input features {c_in} != kernel input features {c_per_group} x "
                         f"feature_group_count {G}")
    if o_feat % (G * B) or n_batch % B:
        raise ValueError(f"output features {o_feat} / batch {n_batch} do not divide into "
                         f"{G} feature groups and {B} batch groups")
    # im2col: patches[n, c, kpos, out...] for every kernel position kpos.
    kpos = list(np.ndindex(*ksz)) if all(ksz) else []
    slices = []
    for pos in kpos:
        idx = [slice(None), slice(None)]
        for i in range(ns):
            start = pos[i] * rdil[i]
            idx.append(slice(start, start + (out_sp[i] - 1) * strides[i] + 1, strides[i])
                       if out_sp[i] else slice(0, 0))
        slices.append(x[tuple(idx)])
    n_out = n_batch // B
    P = int(np.prod(out_sp, dtype=np.int64))
    K = len(kpos)
    if slices:
        patches = np.stack(slices, axis=2).reshape(n_batch, c_in, K, P)
    else:
        patches = np.zeros((n_batch, c_in, K, P), x.dtype)
    kern = k.reshape(o_feat, c_per_group, K)
    out = np.zeros((n_out, o_feat, P), x.dtype)
    og = o_feat // (G * B)  # output features per (batch group, feature group)
    with np.errstate(over="ignore", invalid="ignore"):
        for b in range(B):
            xb = patches[b * n_out:(b + 1) * n_out]
            for g in range(G):
                o0 = (b * G + g) * og
                xg = xb[:, g * c_per_group:(g + 1) * c_per_group]          # n, c, K, P
                kg = kern[o0:o0 + og]                                         # o, c, K
                a = xg.transpose(0, 3, 1, 2).reshape(n_out * P, c_per_group * K)
                w = kg.reshape(og, c_per_group * K).T
                out[:, o0:o0 + og, :] = (a @ w).reshape(n_out, P, og).transpose(0, 2, 1)
    out = out.reshape((n_out, o_feat) + tuple(out_sp))
    # (batch, feature, spatial...) -> the output's dimension order.
    perm = [0] * (ns + 2)
    perm[dnums.output_batch] = 0
    perm[dnums.output_feature] = 1
    for i, d in enumerate(dnums.output_spatial):
        perm[d] = 2 + i
    return from_accumulation(out.transpose(perm), result_dtype, operand_dtype)


@register("convolution")
def _eval_convolution(instr, args, ev):
    lhs, rhs = args
    dnums = instr.attrs["dim_labels"]
    try:
        out = conv_general(lhs, rhs, dnums, instr.attrs.get("window"),
                           int(instr.attrs.get("feature_group_count", 1) or 1),
                           int(instr.attrs.get("batch_group_count", 1) or 1),
                           instr.shape.dtype)
    except ValueError as e:
        raise UnsupportedError(f"{instr.name}: convolution of {np.shape(lhs)} by "
                               f"{np.shape(rhs)} ({dnums.to_text()}): {e}") from None
    if out.shape != tuple(instr.shape.dims):
        raise UnsupportedError(f"{instr.name}: convolution computes shape {out.shape}, but "
                               f"the instruction declares {instr.shape}")
    return out
