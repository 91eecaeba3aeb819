"""Linear algebra and signal processing: dot, dot_general, convolution, fft, cholesky,
triangular solve, batch norm."""

from __future__ import annotations

from collections.abc import Sequence

from ..hlo.attrs import ConvDimensionNumbers
from .core import BuilderError, XlaOp, _ints, as_type
from .reductions import make_window

PRECISIONS = ("default", "high", "highest")
FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
TRANSPOSE_KINDS = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")


def _precision(precision):
    """operand_precision words, only when some operand asks for more than default."""
    if precision is None:
        return None
    words = (precision, precision) if isinstance(precision, str) else tuple(precision)
    words = tuple(w.lower() for w in words)
    for w in words:
        if w not in PRECISIONS:
            raise BuilderError(f"precision {w!r} is not one of {PRECISIONS}")
    return None if all(w == "default" for w in words) else words


def conv_dimension_numbers(spec, rank: int) -> ConvDimensionNumbers:
    """ConvDimensionNumbers from None (NCHW-like `bf01_oi01->bf01`), XLA's dim_labels text,
    or jax-style ("NCHW", "OIHW", "NCHW") strings (spatial letters matched by name).

    Raises BuilderError 'convolution dimension_numbers=<spec>: <reason>'."""
    try:
        return _conv_dimension_numbers(spec, rank)
    except ValueError as e:
        raise BuilderError(f"convolution dimension_numbers={spec!r}: {e}") from None


def _conv_dimension_numbers(spec, rank: int) -> ConvDimensionNumbers:
    if isinstance(spec, ConvDimensionNumbers):
        return spec
    if spec is None:
        digits = "".join(str(i) for i in range(rank - 2))
        return ConvDimensionNumbers.from_text(f"bf{digits}_oi{digits}->bf{digits}")
    if isinstance(spec, str):
        return ConvDimensionNumbers.from_text(spec)
    if not (isinstance(spec, (tuple, list)) and len(spec) == 3
            and all(isinstance(s, str) for s in spec)):
        raise ValueError("expected None, XLA dim_labels text like 'bf01_oi01->bf01', a "
                         "ConvDimensionNumbers, or three strings (lhs, rhs, out) like "
                         "('NCHW', 'OIHW', 'NCHW')")
    lhs, rhs, out = spec
    for s, letters in ((lhs, "NC"), (rhs, "OI"), (out, "NC")):
        if len(s) != rank:
            raise ValueError(f"{s!r} has {len(s)} letters but the operands have rank {rank}")
        if len(set(s)) != len(s) or not all(c in s for c in letters):
            raise ValueError(f"{s!r} must name each dimension once, with {letters[0]!r} and "
                             f"{letters[1]!r} among them")
    spatial = [c for c in rhs if c not in "OI"]

    def label(s, a, b, la, lb):
        chars = []
        for c in s:
            if c == a:
                chars.append(la)
            elif c == b:
                chars.append(lb)
            elif c in spatial:
                chars.append(str(spatial.index(c)))
            else:
                raise ValueError(f"{c!r} of {s!r} is not a spatial dimension of the kernel "
                                 f"spec {rhs!r}")
        return "".join(chars)

    text = (label(lhs, "N", "C", "b", "f") + "_" + label(rhs, "I", "O", "i", "o") + "->"
            + label(out, "N", "C", "b", "f"))
    return ConvDimensionNumbers.from_text(text)


class LinalgMixin:
    def _with_preferred(self, opcode, operands, attrs, preferred_element_type) -> XlaOp:
        if preferred_element_type is None:
            return self._add(opcode, operands, attrs)
        # The result type is the caller's choice; the dims still come from shape inference.
        shape = self._infer(opcode, [o.shape for o in operands], attrs, None)
        return self._add(opcode, operands, attrs,
                         declared=shape.with_element_type(as_type(preferred_element_type)))

    def dot(self, lhs: XlaOp, rhs: XlaOp, precision=None,
            preferred_element_type=None) -> XlaOp:
        """XLA Dot: vector.vector, matrix.vector, matrix.matrix (contracting lhs's last
        dimension with rhs's first)."""
        lhs = self._operand(lhs, "dot")
        return self.dot_general(lhs, rhs, (((lhs.rank - 1,), (0,)), ((), ())),
                                precision=precision,
                                preferred_element_type=preferred_element_type)

    def dot_general(self, lhs: XlaOp, rhs: XlaOp, dimension_numbers, precision=None,
                    preferred_element_type=None) -> XlaOp:
        """XLA DotGeneral; dimension_numbers = ((lhs_contracting, rhs_contracting),
        (lhs_batch, rhs_batch)) as in jax.lax.dot_general."""
        lhs, rhs = self._operand(lhs, "dot"), self._operand(rhs, "dot")
        try:
            (lc, rc), (lb, rb) = dimension_numbers
            lc, rc, lb, rb = _ints(lc), _ints(rc), _ints(lb), _ints(rb)
        except (TypeError, ValueError):
            raise BuilderError(
                f"dot_general in computation {self.name}: dimension_numbers="
                f"{dimension_numbers!r} must be ((lhs_contracting, rhs_contracting), "
                "(lhs_batch, rhs_batch)), each a sequence of dimension numbers, e.g. "
                "(((1,), (0,)), ((), ()))") from None
        attrs = {"lhs_batch_dims": lb or None,
                 "lhs_contracting_dims": lc,
                 "rhs_batch_dims": rb or None,
                 "rhs_contracting_dims": rc,
                 "operand_precision": _precision(precision)}
        return self._with_preferred("dot", [lhs, rhs], attrs, preferred_element_type)

    def conv_general_dilated(self, lhs: XlaOp, rhs: XlaOp, window_strides: Sequence[int],
                             padding, lhs_dilation=None, rhs_dilation=None,
                             dimension_numbers=None, feature_group_count: int = 1,
                             batch_group_count: int = 1, precision=None,
                             preferred_element_type=None) -> XlaOp:
        """XLA ConvGeneralDilated (jax.lax.conv_general_dilated's arguments); padding is
        "SAME", "VALID" or (low, high) per spatial dimension."""
        lhs, rhs = self._operand(lhs, "convolution"), self._operand(rhs, "convolution")
        dnums = conv_dimension_numbers(dimension_numbers, lhs.rank)
        in_spatial = [lhs.dims[d] for d in dnums.input_spatial]
        k_spatial = [rhs.dims[d] for d in dnums.kernel_spatial]
        window = make_window(k_spatial, window_strides, padding, lhs_dilation, rhs_dilation,
                             operand_dims=in_spatial)
        attrs = {"window": window if window.dims else None, "dim_labels": dnums,
                 "feature_group_count": int(feature_group_count)
                 if feature_group_count != 1 else None,
                 "batch_group_count": int(batch_group_count) if batch_group_count != 1 else None,
                 "operand_precision": _precision(precision)}
        return self._with_preferred("convolution", [lhs, rhs], attrs, preferred_element_type)

    def conv(self, lhs: XlaOp, rhs: XlaOp, window_strides: Sequence[int],
             padding="VALID") -> XlaOp:
        """Convolution in NCHW / OIHW layout (XLA Conv)."""
        return self.conv_general_dilated(lhs, rhs, window_strides, padding)

    def fft(self, operand: XlaOp, fft_type: str, fft_length: Sequence[int]) -> XlaOp:
        kind = fft_type.upper()
        if kind not in FFT_TYPES:
            raise BuilderError(f"fft_type {fft_type!r} is not one of {FFT_TYPES}")
        return self._add("fft", [operand], {"fft_type": kind, "fft_length": _ints(fft_length)})

    def cholesky(self, a: XlaOp, lower: bool = True) -> XlaOp:
        return self._add("cholesky", [a], {"lower": True if lower else None})

    def triangular_solve(self, a: XlaOp, b: XlaOp, *, left_side: bool = True,
                         lower: bool = True, unit_diagonal: bool = False,
                         transpose_a: str = "NO_TRANSPOSE") -> XlaOp:
        """Solve op(a) x = b (left_side) or x op(a) = b for x, a triangular."""
        kind = transpose_a.upper()
        if kind not in TRANSPOSE_KINDS:
            raise BuilderError(f"transpose_a {transpose_a!r} is not one of {TRANSPOSE_KINDS}")
        attrs = {"left_side": True if left_side else None, "lower": True if lower else None,
                 "unit_diagonal": True if unit_diagonal else None, "transpose_a": kind}
        return self._add("triangular-solve", [a, b], attrs)

    def batch_norm_training(self, operand: XlaOp, scale: XlaOp, offset: XlaOp,
                            epsilon: float, feature_index: int) -> XlaOp:
        """(normalized, batch mean, batch variance)."""
        return self._add("batch-norm-training", [operand, scale, offset],
                         {"epsilon": float(epsilon), "feature_index": int(feature_index)})

    def batch_norm_inference(self, operand: XlaOp, scale: XlaOp, offset: XlaOp, mean: XlaOp,
                             variance: XlaOp, epsilon: float, feature_index: int) -> XlaOp:
        return self._add("batch-norm-inference", [operand, scale, offset, mean, variance],
                         {"epsilon": float(epsilon), "feature_index": int(feature_index)})

    def batch_norm_grad(self, operand: XlaOp, scale: XlaOp, mean: XlaOp, variance: XlaOp,
                        grad_output: XlaOp, epsilon: float, feature_index: int) -> XlaOp:
        """(grad operand, grad scale, grad offset)."""
        return self._add("batch-norm-grad", [operand, scale, mean, variance, grad_output],
                         {"epsilon": float(epsilon), "feature_index": int(feature_index)})
