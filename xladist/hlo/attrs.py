"""Typed values of HLO instruction attributes (docs/reference/hlo-text-format.md section 4.6).

Each structured attribute kind has one class here with `to_text()` giving XLA's
spelling; the parser builds them, the printer prints them, everything else reads
their fields. Attribute kinds are named in `opcodes.AttrSpec.kind`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .collective_groups import iota_replica_groups


@dataclass(frozen=True)
class WindowDim:
    size: int
    stride: int = 1
    padding_low: int = 0
    padding_high: int = 0
    window_dilation: int = 1
    base_dilation: int = 1
    window_reversal: bool = False


@dataclass(frozen=True)
class Window:
    """`window={size=3x3 stride=2x2 pad=1_1x0_1 lhs_dilate=.. rhs_dilate=.. rhs_reversal=..}`."""

    dims: tuple[WindowDim, ...]

    def to_text(self) -> str:
        def join(values):
            return "x".join(str(v) for v in values)

        d = self.dims
        parts = ["size=" + join(w.size for w in d)]
        if any(w.stride != 1 for w in d):
            parts.append("stride=" + join(w.stride for w in d))
        if any(w.padding_low or w.padding_high for w in d):
            parts.append("pad=" + "x".join(f"{w.padding_low}_{w.padding_high}" for w in d))
        if any(w.base_dilation != 1 for w in d):
            parts.append("lhs_dilate=" + join(w.base_dilation for w in d))
        if any(w.window_dilation != 1 for w in d):
            parts.append("rhs_dilate=" + join(w.window_dilation for w in d))
        if any(w.window_reversal for w in d):
            parts.append("rhs_reversal=" + join(int(w.window_reversal) for w in d))
        return "{" + " ".join(parts) + "}"


@dataclass(frozen=True)
class ConvDimensionNumbers:
    """The meaning of `dim_labels=b01f_01io->b01f`.

    Spatial dimension lists are ordered by spatial index (the digit in the label).
    """

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]
    # Label lengths (input, kernel, output) when they exceed spatial + 2: XLA's `?` marks a
    # position no dimension uses (`?b01f_0?1io->b01?f`, hlo_parser_test.cc
    # CustomCallWithUnknownDimLabels). None: spatial + 2 each.
    ranks: tuple[int, int, int] | None = None

    @staticmethod
    def from_text(text: str) -> "ConvDimensionNumbers":
        """Parse `b01f_01io->b01f`; raises ValueError with the reason."""
        try:
            lhs_rhs, out = text.split("->")
            lhs, rhs = lhs_rhs.split("_")
        except ValueError:
            raise ValueError(f"malformed dim_labels {text!r}: expected LHS_RHS->OUT") from None

        def labels(s, a, b, what):
            if s.count(a) != 1 or s.count(b) != 1:
                raise ValueError(f"dim_labels {text!r}: {what} needs exactly one {a!r} and {b!r}")
            spatial = sorted((int(c), i) for i, c in enumerate(s) if c.isdigit())
            if [k for k, _ in spatial] != list(range(len(spatial))):
                raise ValueError(f"dim_labels {text!r}: {what} spatial digits must be 0..n-1")
            return s.index(a), s.index(b), tuple(i for _, i in spatial)

        ib, if_, isp = labels(lhs, "b", "f", "input")
        ki, ko, ksp = labels(rhs, "i", "o", "kernel")
        ob, of, osp = labels(out, "b", "f", "output")
        if not len(isp) == len(ksp) == len(osp):
            raise ValueError(f"dim_labels {text!r}: spatial dimension counts differ")
        n = len(isp) + 2
        ranks = (len(lhs), len(rhs), len(out))
        return ConvDimensionNumbers(ib, if_, isp, ki, ko, ksp, ob, of, osp,
                                    None if ranks == (n, n, n) else ranks)

    def to_text(self) -> str:
        def render(rank, a_pos, a, b_pos, b, spatial):
            chars = ["?"] * rank
            chars[a_pos] = a
            chars[b_pos] = b
            for k, pos in enumerate(spatial):
                chars[pos] = str(k)
            return "".join(chars)

        n = len(self.input_spatial) + 2
        ni, nk, no = self.ranks or (n, n, n)
        return (render(ni, self.input_batch, "b", self.input_feature, "f", self.input_spatial)
                + "_" + render(nk, self.kernel_input_feature, "i", self.kernel_output_feature,
                               "o", self.kernel_spatial)
                + "->" + render(no, self.output_batch, "b", self.output_feature, "f",
                                self.output_spatial))


@dataclass(frozen=True)
class PaddingConfig:
    """`padding=0_1x2_2` or, when any interior padding is set, `0_1_0x2_2_1`."""

    dims: tuple[tuple[int, int, int], ...]  # (low, high, interior) per dimension

    def to_text(self) -> str:
        if any(i for _, _, i in self.dims):
            return "x".join(f"{lo}_{hi}_{i}" for lo, hi, i in self.dims)
        return "x".join(f"{lo}_{hi}" for lo, hi, _ in self.dims)


@dataclass(frozen=True)
class SliceSpec:
    """`slice={[0:2], [1:5:2]}`; strides printed for all dims iff any is not 1."""

    dims: tuple[tuple[int, int, int], ...]  # (start, limit, stride)

    def to_text(self) -> str:
        strided = any(s != 1 for _, _, s in self.dims)
        parts = [f"[{a}:{b}:{s}]" if strided else f"[{a}:{b}]" for a, b, s in self.dims]
        return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True)
class ReplicaGroups:
    """`replica_groups={{0,1},{2,3}}`, `{}`, the iota form `[G,S]<=[dims]T(perm)` or the
    mesh-axes form `mesh[...]{axes}`.

    `groups` is always the explicit list; `iota` keeps (G, S, dims, perm) when the
    text used the iota form so it prints back the same way.
    """

    groups: tuple[tuple[int, ...], ...]
    iota: tuple[int, int, tuple[int, ...], tuple[int, ...]] | None = None
    # The mesh-axes form (`mesh['x'=2,'y'=2] {'y'}`, from Shardy) as printed, when the text
    # used it; `groups` holds its expansion (collective_groups.mesh_axes_replica_groups).
    mesh: str | None = None

    @staticmethod
    def from_iota(num_groups: int, group_size: int, dims, perm=None) -> "ReplicaGroups":
        """The iota form, expanded by collective_groups.iota_replica_groups (which raises
        GroupError, a ValueError, naming the form and what is wrong with it)."""
        dims = tuple(int(d) for d in dims)
        perm = tuple(int(p) for p in perm) if perm else tuple(range(len(dims)))
        ids = iota_replica_groups(int(num_groups), int(group_size), dims, perm)
        groups = tuple(tuple(row) for row in ids)
        return ReplicaGroups(groups, (num_groups, group_size, dims, perm))

    def to_text(self) -> str:
        if self.mesh is not None:
            return self.mesh
        if self.iota is not None:
            g, s, dims, perm = self.iota
            text = f"[{g},{s}]<=[{','.join(map(str, dims))}]"
            if len(dims) > 1 and perm != tuple(range(len(dims))):
                text += f"T({','.join(map(str, perm))})"
            return text
        return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in self.groups) + "}"


@dataclass(frozen=True)
class RawAttr:
    """An attribute value kept as its exact text (unknown attributes, opaque data)."""

    text: str

    def to_text(self) -> str:
        return self.text


# Why a constant without data cannot run and where to get text that has it: the one
# message of every backend (semantics/values.constant_literal, which they all call).
ELIDED_CONSTANT = (
    "its data was elided ({...}) where the text was printed, so it cannot execute: XLA's "
    "dumps elide constants of more than 10 elements unless --xla_dump_large_constants is "
    "given (XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_as_text --xla_dump_large_constants'), "
    "jax's `lowered.compiler_ir(\"hlo\").as_hlo_text()` unless given "
    "print_large_constants=True, and jax's `compiled.as_text()` always; print it with the "
    "constants, or give jax's portable text (`jax.jit(f).lower(...).as_text(dialect=\"hlo\")`"
    "), which keeps them")


class Literal:
    """A constant's value.

    `value` is a numpy array holding the logical values in C order (dtype of the
    shape's element type), a tuple of Literals for tuple shapes, or None when the
    text elided the data (`constant({...})`): such a constant cannot execute.
    """

    __slots__ = ("shape", "value")

    def __init__(self, shape, value):
        self.shape = shape
        self.value = value

    @property
    def elided(self) -> bool:
        return self.value is None

    def digest(self) -> str:
        """A hash of the value's type, shape and bytes (every bit: -0.0, NaN payloads), in
        time linear in its bytes, where printing it formats every element in Python."""
        import hashlib
        h = hashlib.sha256()
        _digest_into(h, self)
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"Literal({self.shape}, {'elided' if self.elided else self.value!r})"


def _digest_into(h, literal: "Literal") -> None:
    h.update(f"{literal.shape};".encode())
    v = literal.value
    if v is None:
        h.update(b"elided;")
    elif isinstance(v, tuple):
        for leaf in v:
            _digest_into(h, leaf)
    else:
        import numpy as np
        a = np.ascontiguousarray(v)
        h.update(f"{a.dtype.str}{a.shape};".encode())
        h.update(a.tobytes())
