"""Shape rules of linear algebra and signal processing (operation semantics: DotGeneral,
RaggedDot, ScaledDot, Conv (convolution), Fft, Cholesky, TriangularSolve, BatchNormTraining /
BatchNormInference / BatchNormGrad)."""

from __future__ import annotations

from ..shape import Shape
from .base import (ShapeError, attr, expect_array, expect_count, fmt, fmt_dims,
                                   make, window_output_dims)

_KIND_ORDER = {"pred": 0, "uint": 1, "sint": 2, "float": 3, "complex": 4}


def _higher_precision(a, b):
    return max(a, b, key=lambda t: (_KIND_ORDER[t.kind], t.bits))


def result_type(lhs: Shape, rhs: Shape, declared: Shape | None, what: str):
    """The accumulation type: the declared one (XLA's preferred_element_type) when given and
    not narrower for integers, else the higher-precision operand type."""
    base = _higher_precision(lhs.element_type, rhs.element_type)
    if declared is None or not declared.is_array or declared.element_type == base:
        return base
    pref = declared.element_type
    if base.kind in ("float", "complex") and pref.kind not in ("float", "complex"):
        raise ShapeError(f"{what} of {fmt(lhs)} and {fmt(rhs)} cannot produce {pref} elements")
    if base.kind not in ("float", "complex") and (pref.kind == "pred" or pref.bits < base.bits):
        raise ShapeError(f"{what} of {fmt(lhs)} and {fmt(rhs)}: result type {pref} must not be "
                         f"narrower than {base}")
    return pref


def _dim_numbers(attrs):
    return tuple(tuple(attrs.get(name) or ()) for name in (
        "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims"))


def dot_dims(lhs: Shape, rhs: Shape, lb, lc, rb, rc) -> list[int]:
    """Result dimensions: batch dims, then lhs free dims, then rhs free dims (in order)."""
    where = f"(lhs {fmt(lhs)}, rhs {fmt(rhs)})"
    for side, shape, batch, contract in (("lhs", lhs, lb, lc), ("rhs", rhs, rb, rc)):
        for d in batch + contract:
            if not 0 <= d < shape.rank:
                raise ShapeError(f"{side} dimension {d} is out of range {where}")
        if len(set(batch + contract)) != len(batch + contract):
            raise ShapeError(f"{side} batch dims {fmt_dims(batch)} and contracting dims "
                             f"{fmt_dims(contract)} repeat a dimension {where}")
    if len(lc) != len(rc):
        raise ShapeError(f"lhs_contracting_dims={fmt_dims(lc)} and rhs_contracting_dims="
                         f"{fmt_dims(rc)} differ in length {where}")
    if len(lb) != len(rb):
        raise ShapeError(f"lhs_batch_dims={fmt_dims(lb)} and rhs_batch_dims={fmt_dims(rb)} "
                         f"differ in length {where}")
    for a, b in zip(lc, rc):
        if lhs.dims[a] != rhs.dims[b]:
            raise ShapeError(f"lhs contracting dimension {a} has size {lhs.dims[a]} but rhs "
                             f"contracting dimension {b} has size {rhs.dims[b]} {where}")
    for a, b in zip(lb, rb):
        if lhs.dims[a] != rhs.dims[b]:
            raise ShapeError(f"lhs batch dimension {a} has size {lhs.dims[a]} but rhs batch "
                             f"dimension {b} has size {rhs.dims[b]} {where}")
    out = [lhs.dims[d] for d in lb]
    out += [n for i, n in enumerate(lhs.dims) if i not in lb and i not in lc]
    out += [n for i, n in enumerate(rhs.dims) if i not in rb and i not in rc]
    return out


def dot(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    lhs, rhs = shapes[0], shapes[1]
    expect_array(lhs, "lhs")
    expect_array(rhs, "rhs")
    lb, lc, rb, rc = _dim_numbers(attrs)
    dims = dot_dims(lhs, rhs, lb, lc, rb, rc)
    # Batch and free dimensions keep their dynamic-ness; contracting ones are summed away.
    dyn = [lhs.dynamic[a] or rhs.dynamic[b] for a, b in zip(lb, rb)]
    dyn += [lhs.dynamic[i] for i in range(lhs.rank) if i not in lb and i not in lc]
    dyn += [rhs.dynamic[i] for i in range(rhs.rank) if i not in rb and i not in rc]
    return make(result_type(lhs, rhs, declared, op), dims, dyn)


def scaled_dot(op, shapes, attrs, declared):
    """Operands lhs, rhs, lhs_scale, rhs_scale (XLA's current order). A scale has its
    operand's rank and every operand dimension is a multiple of the scale's: each scale
    element covers a contiguous block of the operand (MX formats: blocks of 32 along the
    contracting dim). Scalar scales are refused: XLA's verifier wants equal ranks while its
    ScaledDotRewriter would skip a scalar scale, so their meaning is not settled."""
    expect_count(shapes, 4)
    lhs, rhs, lhs_scale, rhs_scale = shapes
    for s, side in ((lhs, "lhs"), (rhs, "rhs"), (lhs_scale, "lhs_scale"),
                    (rhs_scale, "rhs_scale")):
        expect_array(s, side)
        if not s.element_type.is_float:
            raise ShapeError(f"{side} of scaled-dot must be floating-point, got {fmt(s)}")
    for side, operand, scale in (("lhs", lhs, lhs_scale), ("rhs", rhs, rhs_scale)):
        if scale.rank != operand.rank or scale.rank == 0:
            raise ShapeError(f"{side}_scale {fmt(scale)} must have the rank of {side} "
                             f"{fmt(operand)}, one scale per block (scalar scales are not "
                             "supported: XLA's verifier and rewriter disagree on them)")
        for d, (n, k) in enumerate(zip(operand.dims, scale.dims)):
            if k == 0 and n == 0:
                continue
            if k == 0 or n % k:
                raise ShapeError(f"{side} dimension {d} of size {n} is not a multiple of "
                                 f"{side}_scale dimension {d} of size {k} ({side} {fmt(operand)}"
                                 f", {side}_scale {fmt(scale)})")
    dims = dot_dims(lhs, rhs, *_dim_numbers(attrs))
    return make(result_type(lhs, rhs, declared, op), dims)


def ragged_dot(op, shapes, attrs, declared):
    """Three modes by where lhs_ragged_dims points (operation semantics RaggedDot): a lhs free
    dim (rhs has a group dim, dropped from the result), a contracting dim (the result gains a
    leading group dim), or a batch dim (plain dot shape)."""
    expect_count(shapes, 3)
    lhs, rhs, sizes = shapes
    for s, n in ((lhs, "lhs"), (rhs, "rhs"), (sizes, "group_sizes")):
        expect_array(s, n)
    if not sizes.element_type.is_integer:
        raise ShapeError(f"group_sizes must be integers, got {fmt(sizes)}")
    lb, lc, rb, rc = _dim_numbers(attrs)
    ragged = tuple(attrs.get("lhs_ragged_dims") or ())
    group = tuple(attrs.get("rhs_group_dims") or ())
    if len(ragged) != 1 or not 0 <= ragged[0] < lhs.rank:
        raise ShapeError(f"lhs_ragged_dims={fmt_dims(ragged)} must name one dimension of "
                         f"{fmt(lhs)}")
    (rd,) = ragged
    if rd in lc or rd in lb:
        if group:
            raise ShapeError(f"rhs_group_dims={fmt_dims(group)} must be empty when the ragged "
                             "dimension is a contracting or batch dimension")
        dims = dot_dims(lhs, rhs, lb, lc, rb, rc)
        if rd in lc:
            dims = [sizes.dims[-1] if sizes.rank else 1] + dims
    else:
        if len(group) != 1 or not 0 <= group[0] < rhs.rank or group[0] in rb + rc:
            raise ShapeError(f"rhs_group_dims={fmt_dims(group)} must name one free dimension "
                             f"of rhs {fmt(rhs)} when lhs dimension {rd} is ragged")
        (g,) = group
        if sizes.rank < 1 or sizes.dims[-1] != rhs.dims[g]:
            raise ShapeError(f"group_sizes {fmt(sizes)} must end in the group count "
                             f"{rhs.dims[g]} (rhs {fmt(rhs)} dimension {g})")
        rhs_wo = make(rhs.element_type, rhs.dims[:g] + rhs.dims[g + 1:])

        def shift(ds):
            return tuple(d - (d > g) for d in ds)

        dims = dot_dims(lhs, rhs_wo, lb, lc, shift(rb), shift(rc))
    return make(result_type(lhs, rhs, declared, op), dims)


def convolution(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    lhs, rhs = shapes
    expect_array(lhs, "input")
    expect_array(rhs, "kernel")
    dn = attr(attrs, "dim_labels")
    fgc = attrs.get("feature_group_count") or 1
    bgc = attrs.get("batch_group_count") or 1
    where = (f"(input {fmt(lhs)}, kernel {fmt(rhs)}, dim_labels={dn.to_text()}, "
             f"feature_group_count={fgc}, batch_group_count={bgc})")
    nsp = len(dn.input_spatial)
    if lhs.rank != nsp + 2 or rhs.rank != nsp + 2:
        raise ShapeError(f"input and kernel must have rank {nsp + 2} for {nsp} spatial "
                         f"dimensions {where}")
    if fgc < 1 or bgc < 1 or (fgc > 1 and bgc > 1):
        raise ShapeError(f"group counts must be >= 1 and not both > 1 {where}")
    window = attrs.get("window")
    wdims = window.dims if window is not None else ()
    if len(wdims) != nsp:
        raise ShapeError(f"window has {len(wdims)} dimensions but dim_labels has {nsp} "
                         f"spatial dimensions {where}")
    batch = lhs.dims[dn.input_batch]
    in_feat = lhs.dims[dn.input_feature]
    k_in = rhs.dims[dn.kernel_input_feature]
    k_out = rhs.dims[dn.kernel_output_feature]
    if in_feat % fgc or in_feat // fgc != k_in:
        raise ShapeError(f"input features {in_feat} / feature_group_count {fgc} must equal the "
                         f"kernel input features {k_in} {where}")
    if k_out % fgc or k_out % bgc:
        raise ShapeError(f"kernel output features {k_out} must be divisible by the group "
                         f"counts {where}")
    if batch % bgc:
        raise ShapeError(f"input batch {batch} must be divisible by batch_group_count {bgc} "
                         f"{where}")
    for i, (kd, w) in enumerate(zip(dn.kernel_spatial, wdims)):
        if rhs.dims[kd] != w.size:
            raise ShapeError(f"window size {w.size} of spatial dimension {i} differs from the "
                             f"kernel's size {rhs.dims[kd]} {where}")
    base = tuple(lhs.dims[d] for d in dn.input_spatial)
    spatial = window_output_dims(base, window, "convolution", lhs) if nsp else ()
    out = [0] * (nsp + 2)
    dyn = [False] * (nsp + 2)
    out[dn.output_batch] = batch // bgc
    out[dn.output_feature] = k_out
    dyn[dn.output_batch] = lhs.dynamic[dn.input_batch]
    dyn[dn.output_feature] = rhs.dynamic[dn.kernel_output_feature]
    for d, n, di in zip(dn.output_spatial, spatial, dn.input_spatial):
        out[d] = n
        dyn[d] = lhs.dynamic[di]
    return make(result_type(lhs, rhs, declared, op), out, dyn)


_FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
_REAL_OF = {"c64": "f32", "c128": "f64"}
_COMPLEX_OF = {"f32": "c64", "f64": "c128"}


def fft(op, shapes, attrs, declared):
    """FFT/IFFT keep the shape; RFFT: real -> complex, last dim n -> n//2+1; IRFFT inverse."""
    expect_count(shapes, 1)
    (x,) = shapes
    expect_array(x, "operand")
    kind = attr(attrs, "fft_type")
    length = tuple(attr(attrs, "fft_length"))
    where = f"(operand {fmt(x)}, fft_type={kind}, fft_length={fmt_dims(length)})"
    if kind not in _FFT_TYPES:
        raise ShapeError(f"fft_type={kind} is not one of {', '.join(_FFT_TYPES)}")
    n = len(length)
    if not 1 <= n <= 3 or x.rank < n:
        raise ShapeError(f"fft_length must have 1 to 3 entries, at most the operand rank {where}")
    t = x.element_type.name
    inner = x.dims[x.rank - n:]
    if kind in ("FFT", "IFFT"):
        if t not in _REAL_OF:
            raise ShapeError(f"{kind} needs complex input {where}")
        return make(x.element_type, x.dims)
    if kind == "RFFT":
        if t not in _COMPLEX_OF:
            raise ShapeError(f"RFFT needs f32 or f64 input {where}")
        if inner != length:
            raise ShapeError(f"RFFT needs the innermost dimensions to equal fft_length {where}")
        last = length[-1] // 2 + 1 if length[-1] else 0
        return make(_COMPLEX_OF[t], x.dims[:-1] + (last,))
    if t not in _REAL_OF:
        raise ShapeError(f"IRFFT needs complex input {where}")
    if inner[:-1] != length[:-1] or inner[-1] != (length[-1] // 2 + 1 if length[-1] else 0):
        raise ShapeError(f"IRFFT needs the innermost dimensions to be fft_length with the last "
                         f"one n//2+1 {where}")
    return make(_REAL_OF[t], x.dims[:-1] + (length[-1],))


def _square_minor(a: Shape, role: str):
    expect_array(a, role)
    if a.element_type.kind not in ("float", "complex"):
        raise ShapeError(f"{role} must be floating-point or complex, got {fmt(a)}")
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        raise ShapeError(f"{role} must have rank >= 2 and square minor dimensions, got {fmt(a)}")


def cholesky(op, shapes, attrs, declared):
    expect_count(shapes, 1)
    _square_minor(shapes[0], "operand")
    return make(shapes[0].element_type, shapes[0].dims)


_TRANSPOSE_A = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")


def triangular_solve(op, shapes, attrs, declared):
    expect_count(shapes, 2)
    a, b = shapes
    _square_minor(a, "a")
    expect_array(b, "b")
    left = bool(attrs.get("left_side"))
    where = f"(a {fmt(a)}, b {fmt(b)}, left_side={str(left).lower()})"
    if a.element_type != b.element_type or a.rank != b.rank:
        raise ShapeError(f"a and b must have the same element type and rank {where}")
    if a.dims[:-2] != b.dims[:-2]:
        raise ShapeError(f"a and b must have the same batch dimensions {where}")
    shared = b.dims[-2] if left else b.dims[-1]
    if a.dims[-1] != shared:
        raise ShapeError(f"a's size {a.dims[-1]} does not match b's "
                         f"{'rows' if left else 'columns'} {shared} {where}")
    ta = attrs.get("transpose_a")
    if ta is not None and ta not in _TRANSPOSE_A:
        raise ShapeError(f"transpose_a={ta} is not one of {', '.join(_TRANSPOSE_A)}")
    return make(b.element_type, b.dims)


def _batch_norm_checks(op, operand, vectors, attrs):
    expect_array(operand, "operand")
    fi = attr(attrs, "feature_index")
    if not operand.element_type.is_float:
        raise ShapeError(f"operand must be floating-point, got {fmt(operand)}")
    if not 0 <= fi < operand.rank:
        raise ShapeError(f"feature_index={fi} is out of range for {fmt(operand)}")
    features = operand.dims[fi]
    for name, v in vectors:
        if not (v.is_array and v.rank == 1 and v.dims[0] == features
                and v.element_type == operand.element_type):
            raise ShapeError(f"{name} must be {operand.element_type}[{features}] (feature "
                             f"dimension {fi} of {fmt(operand)}), got {fmt(v)}")
    return make(operand.element_type, (features,))


def batch_norm_training(op, shapes, attrs, declared):
    expect_count(shapes, 3)
    x, scale, offset = shapes
    vec = _batch_norm_checks(op, x, [("scale", scale), ("offset", offset)], attrs)
    return Shape.tuple_of([make(x.element_type, x.dims), vec, vec])


def batch_norm_inference(op, shapes, attrs, declared):
    expect_count(shapes, 5)
    x = shapes[0]
    _batch_norm_checks(op, x, list(zip(("scale", "offset", "mean", "variance"), shapes[1:])),
                       attrs)
    return make(x.element_type, x.dims)


def batch_norm_grad(op, shapes, attrs, declared):
    expect_count(shapes, 5)
    x, scale, mean, var, grad = shapes
    vec = _batch_norm_checks(op, x, [("scale", scale), ("mean", mean), ("variance", var)],
                             attrs)
    if not (grad.is_array and grad.dims == x.dims and grad.element_type == x.element_type):
        raise ShapeError(f"grad_output {fmt(grad)} must have the operand's shape {fmt(x)}")
    return Shape.tuple_of([make(x.element_type, x.dims), vec, vec])


RULES = {
    "dot": dot,
    "scaled-dot": scaled_dot,
    "ragged-dot": ragged_dot,
    "convolution": convolution,
    "fft": fft,
    "cholesky": cholesky,
    "triangular-solve": triangular_solve,
    "batch-norm-training": batch_norm_training,
    "batch-norm-inference": batch_norm_inference,
    "batch-norm-grad": batch_norm_grad,
}
